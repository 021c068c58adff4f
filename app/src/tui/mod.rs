//! `vramscope top` and `vramscope record --tui`: the run in the terminal, as it goes, for a GPU
//! machine reached over SSH. It follows what `open --follow` follows (a recording in progress, a
//! file rewritten as the run goes, or a finished trace) with the same follower, which builds
//! each screen (`model.rs`) on its own thread at a lower priority than the workload, at most
//! every half second; this thread only lays the newest one out (`draw.rs`) and reads the keys.

use std::io::IsTerminal;
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::follow::{Follower, Source, Status};

mod aside;
mod draw;
pub mod model;

pub use draw::KEYS;

/// The widths of the recent chart, in seconds, in the order `w` goes through them.
const WINDOWS_S: [u32; 3] = [60, 300, 900];

/// How often the screen is drawn again without news (the "updated" age, a resized terminal).
const REDRAW_EVERY: Duration = Duration::from_secs(1);

/// What the view does when the person quits it while a workload runs under `record --tui`.
pub type Interrupt = Box<dyn Fn()>;

/// Shows `source` in this terminal until the person quits (q, Esc, Ctrl+C). `interrupt`, under
/// `record --tui`, is what Ctrl+C does besides (interrupting the workload).
pub fn run(source: Source, interrupt: Option<Interrupt>) -> Result<()> {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        bail!(
            "vramscope top draws in a terminal, and its input or output is not one: for the numbers in a script, \
             `vramscope info --json FILE`; for an agent, `vramscope mcp`"
        );
    }
    // Set aside before anything else may write there (the follower's first read).
    let aside = aside::StderrAside::start();
    let follower = start(source)?;
    let mut terminal = ratatui::try_init()?;
    let result = show(&mut terminal, follower, interrupt.as_deref());
    ratatui::restore();
    drop(aside);
    result
}

/// Starts following `source`, each state of the run built into a screen on the follower's thread.
pub fn start(source: Source) -> Result<Follower<model::Screen>> {
    let mut cache = model::Cache::default();
    let build = move |trace: vramscope_trace_format::Trace, origin: crate::load::Origin, chosen: &AtomicU32| {
        let process =
            if trace.metadata.recorded_processes() > 1 { crate::follow::process_to_show(&trace, chosen) } else { 0 };
        model::build(&trace, &origin, process, &mut cache)
    };
    Follower::start(source, build, || {})
}

/// What the person has chosen to look at, and whether to go on.
struct Viewer {
    choice: draw::Choice,
    quit: bool,
}

fn show(
    terminal: &mut ratatui::DefaultTerminal,
    mut follower: Follower<model::Screen>,
    interrupt: Option<&dyn Fn()>,
) -> Result<()> {
    let mut screen: Option<model::Screen> = None;
    let mut viewer = Viewer { choice: draw::Choice { device: 0, window_s: WINDOWS_S[0], help: false }, quit: false };
    let mut drawn: Option<Instant> = None;
    while !viewer.quit {
        let mut changed = false;
        if let Some(next) = follower.poll() {
            // The first state shown opens on the device to look at first.
            if screen.is_none() {
                viewer.choice.device = next.focus;
            }
            screen = Some(next);
            changed = true;
        }
        if changed || drawn.is_none_or(|d| d.elapsed() >= REDRAW_EVERY) {
            let status = status_text(&follower);
            let header = draw::Header {
                label: &follower.label,
                status: &status,
                events: follower.events,
                note: follower.note.as_deref(),
            };
            terminal.draw(|frame| draw::draw(frame, screen.as_ref(), &header, viewer.choice))?;
            drawn = Some(Instant::now());
        }
        if event::poll(Duration::from_millis(100))? {
            match event::read()? {
                Event::Key(key) if key.kind != KeyEventKind::Release => {
                    viewer.key(key, screen.as_ref(), &follower, interrupt);
                    drawn = None;
                }
                Event::Resize(..) => drawn = None,
                _ => {}
            }
        }
    }
    Ok(())
}

impl Viewer {
    fn key(
        &mut self,
        key: KeyEvent,
        screen: Option<&model::Screen>,
        follower: &Follower<model::Screen>,
        interrupt: Option<&dyn Fn()>,
    ) {
        let choice = &mut self.choice;
        if choice.help {
            choice.help = false;
            return;
        }
        let devices = screen.map_or(0, |s| s.devices.len()).max(1);
        match key.code {
            KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                if let Some(interrupt) = interrupt {
                    interrupt();
                }
                self.quit = true;
            }
            KeyCode::Char('q') | KeyCode::Esc => self.quit = true,
            KeyCode::Char('d') | KeyCode::Tab => choice.device = (choice.device + 1) % devices,
            KeyCode::Char('D') | KeyCode::BackTab => choice.device = (choice.device + devices - 1) % devices,
            KeyCode::Char(c @ ('p' | 'P')) => {
                if let Some(screen) = screen.filter(|s| !s.processes.is_empty()) {
                    let n = screen.processes.len();
                    let next = if c == 'p' { (screen.process + 1) % n } else { (screen.process + n - 1) % n };
                    if let Some(pid) = screen.pids.get(next).copied().flatten() {
                        follower.choose_process(pid);
                        choice.device = 0;
                    }
                }
            }
            KeyCode::Char('w') => {
                let at = WINDOWS_S.iter().position(|&w| w == choice.window_s).unwrap_or(0);
                choice.window_s = WINDOWS_S[(at + 1) % WINDOWS_S.len()];
            }
            KeyCode::Char('?') | KeyCode::F(1) => choice.help = true,
            _ => {}
        }
    }
}

/// Where the followed run stands, in a few words.
fn status_text(follower: &Follower<model::Screen>) -> String {
    let age = follower.last_update.map(|t| t.elapsed().as_secs_f64());
    match (&follower.status, &follower.source) {
        (Status::Ended(Some(path)), _) => format!("finished: {}", path.display()),
        (Status::Ended(None), _) => "ended (no trace written)".to_owned(),
        (Status::Live, _) if age.is_none() => "reading…".to_owned(),
        (Status::Live, Source::Recording(_)) => format!("live, updated {:.1} s ago", age.unwrap_or(0.0)),
        (Status::Live, Source::File(_)) => "read again when it changes".to_owned(),
    }
}
