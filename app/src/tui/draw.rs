//! The terminal view's layout: a header (what is followed, where it stands, the process and the
//! device), the memory now and at the peak, two charts (the last minutes and the whole run), the
//! categories and the allocation sites alive now, the findings (growth, OOMs), and the keys.
//! Made for 80x24 and larger; a smaller terminal gets what fits.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Borders, Chart, Dataset, GraphType, Paragraph, Row, Table, Wrap};

use super::model::{DeviceScreen, Screen};
use crate::units::{bytes, tick_duration};

/// What the header says beside the screen: the state of the following.
pub struct Header<'a> {
    /// What is followed (the command recorded, or the file).
    pub label: &'a str,
    /// `live`, `finished`, ...
    pub status: &'a str,
    /// Events in the trace shown.
    pub events: usize,
    /// Something the follower had to say.
    pub note: Option<&'a str>,
}

/// What the person chose to look at.
#[derive(Clone, Copy, Debug)]
pub struct Choice {
    /// The device shown, by index into the screen's devices.
    pub device: usize,
    /// The recent chart's width, in seconds.
    pub window_s: u32,
    /// Whether the keys' help is open.
    pub help: bool,
}

/// The keys, as the bottom line lists them.
pub const KEYS: [(&str, &str); 6] =
    [("q", "quit"), ("d", "device"), ("p", "process"), ("w", "window"), ("?", "help"), ("Ctrl+C", "quit")];

fn rgb((r, g, b): (u8, u8, u8)) -> Color {
    Color::Rgb(r, g, b)
}

const DIM: Style = Style::new().fg(Color::DarkGray);
const BOLD: Style = Style::new().add_modifier(Modifier::BOLD);

/// Draws `screen` (none yet: a line saying what is awaited).
pub fn draw(frame: &mut Frame<'_>, screen: Option<&Screen>, header: &Header<'_>, choice: Choice) {
    let area = frame.area();
    let [top, body, keys] =
        Layout::vertical([Constraint::Length(2), Constraint::Min(0), Constraint::Length(1)]).areas(area);
    draw_header(frame, top, screen, header, choice);
    draw_keys(frame, keys, screen, choice);
    let Some(device) = screen.and_then(|s| s.devices.get(choice.device.min(s.devices.len().saturating_sub(1)))) else {
        let waiting = match screen {
            None => "waiting for the first memory event…",
            Some(_) => "no memory events yet in this process",
        };
        frame.render_widget(Paragraph::new(Line::styled(waiting, DIM)), body);
        return;
    };
    let Some(screen) = screen else { return };
    if choice.help {
        draw_help(frame, body);
        return;
    }
    // The tables as tall as their rows need, leaving the charts 7 rows (5 inside).
    let needed = device.categories.len().max(device.sites_now.len()) as u16 + 3;
    let tables_height = needed.clamp(5, body.height.saturating_sub(2 + 7 + 3).max(5));
    let [stats, charts, tables, findings] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Min(5),
        Constraint::Length(tables_height),
        Constraint::Length(3),
    ])
    .areas(body);
    draw_stats(frame, stats, screen, device);
    let [recent, whole] = Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(charts);
    let (first, last) = device.timeline.time_span_ns();
    let window_ns = i64::from(choice.window_s) * 1_000_000_000;
    let recent_title = format!(" last {}: ", minutes(choice.window_s));
    draw_chart(frame, recent, device, (last - window_ns).max(first), last, screen.start_ns, &recent_title);
    draw_chart(frame, whole, device, first, last, screen.start_ns, " whole run: ");
    let [categories, sites] = Layout::horizontal([Constraint::Length(39), Constraint::Min(20)]).areas(tables);
    draw_categories(frame, categories, device);
    draw_sites(frame, sites, device);
    draw_findings(frame, findings, device, screen);
}

fn draw_header(frame: &mut Frame<'_>, area: Rect, screen: Option<&Screen>, header: &Header<'_>, choice: Choice) {
    let mut first = vec![
        Span::styled("vramscope top  ", BOLD),
        Span::styled(header.status.to_owned(), Style::new().fg(Color::Cyan)),
        Span::styled(format!("  {} events  ", crate::units::count(header.events)), DIM),
        Span::raw(header.label.to_owned()),
    ];
    if let Some(note) = header.note {
        first.push(Span::styled(format!("  {note}"), Style::new().fg(Color::Yellow)));
    }
    let mut second = Vec::new();
    if let Some(screen) = screen {
        // The one shown in brackets too, for a terminal without colours.
        let tab = |shown: bool, text: &str| {
            if shown {
                Span::styled(format!("[{text}]"), BOLD.add_modifier(Modifier::REVERSED))
            } else {
                Span::styled(format!(" {text} "), DIM)
            }
        };
        for (i, p) in screen.processes.iter().enumerate() {
            second.push(tab(i == screen.process, p));
        }
        if !screen.processes.is_empty() {
            second.push(Span::raw("  "));
        }
        let shown = choice.device.min(screen.devices.len().saturating_sub(1));
        for (i, d) in screen.devices.iter().enumerate() {
            let memory = d.total_memory_bytes.map_or_else(String::new, |t| format!(" of {}", bytes(t)));
            second.push(tab(i == shown, &format!("{}{memory}", d.label)));
        }
    }
    frame.render_widget(Paragraph::new(vec![Line::from(first), Line::from(second)]), area);
}

fn draw_stats(frame: &mut Frame<'_>, area: Rect, screen: &Screen, d: &DeviceScreen) {
    let (peak, peak_ns) = d.peak_allocated;
    let when = peak_ns.map_or_else(String::new, |t| format!(" at +{}", tick_duration((t - screen.start_ns) as f64)));
    let first = Line::from(vec![
        Span::raw("allocated "),
        Span::styled(format!("{:>9}", bytes(d.allocated_now)), BOLD),
        Span::raw(" now   peak "),
        Span::styled(format!("{:>9}", bytes(peak)), BOLD),
        Span::raw(when),
        Span::styled(format!("   {} alive", crate::units::counted(d.blocks_now, "block", "blocks")), DIM),
    ]);
    let mut second = if d.reserved_recorded {
        vec![
            Span::raw("reserved  "),
            Span::styled(format!("{:>9}", bytes(d.reserved_now)), BOLD),
            Span::raw(" now   peak "),
            Span::styled(format!("{:>9}", bytes(d.peak_reserved)), BOLD),
        ]
    } else {
        vec![Span::styled("reserved: not recorded in this trace", DIM)]
    };
    if let Some(phase) = &d.phase_now {
        second.push(Span::raw(format!("   {phase}")));
    }
    frame.render_widget(Paragraph::new(vec![first, Line::from(second)]), area);
}

/// A chart's window in words: `1 min`, `15 min`.
fn minutes(seconds: u32) -> String {
    if seconds.is_multiple_of(60) { format!("{} min", seconds / 60) } else { format!("{seconds} s") }
}

#[allow(clippy::too_many_arguments)]
fn draw_chart(frame: &mut Frame<'_>, area: Rect, d: &DeviceScreen, from: i64, to: i64, start: i64, title: &str) {
    // The title says which line is which: the colours are the lines'.
    let mut title = vec![Span::raw(title.to_owned()), Span::styled("allocated ", Style::new().fg(Color::Green))];
    if d.reserved_recorded {
        title.push(Span::styled("reserved ", Style::new().fg(rgb(crate::colors::RESERVED_RGB))));
    }
    let block = Block::new().borders(Borders::ALL).title(Line::from(title));
    // Two braille dots per cell across; the axis takes some of it.
    let columns = usize::from(area.width.saturating_sub(2)) * 2;
    let to = to.max(from + 1);
    let cols = d.timeline.columns(from as f64, to as f64 + 1.0, columns.max(2));
    let width = (to - from) as f64 / cols.len().max(1) as f64;
    let x = |i: usize| ((from - start) as f64 + width * (i as f64 + 0.5)) / 1e9;
    let allocated: Vec<(f64, f64)> =
        cols.iter().enumerate().filter_map(|(i, c)| c.map(|c| (x(i), c.range.allocated_max as f64))).collect();
    let reserved: Vec<(f64, f64)> = if d.reserved_recorded {
        cols.iter().enumerate().filter_map(|(i, c)| c.map(|c| (x(i), c.range.reserved_max as f64))).collect()
    } else {
        Vec::new()
    };
    let high = allocated.iter().chain(&reserved).map(|p| p.1).fold(1.0, f64::max);
    let (x0, x1) = ((from - start) as f64 / 1e9, (to - start) as f64 / 1e9);
    let datasets = vec![
        Dataset::default()
            .name("reserved")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(rgb(crate::colors::RESERVED_RGB)))
            .data(&reserved),
        Dataset::default()
            .name("allocated")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(Color::Green))
            .data(&allocated),
    ];
    let chart = Chart::new(datasets)
        .block(block)
        .x_axis(
            Axis::default()
                .bounds([x0, x1])
                .labels([format!("+{}", tick_duration(x0 * 1e9)), format!("+{}", tick_duration(x1 * 1e9))])
                .style(DIM),
        )
        .y_axis(Axis::default().bounds([0.0, high * 1.05]).labels(["0".to_owned(), bytes(high as u64)]).style(DIM))
        .legend_position(None);
    frame.render_widget(chart, area);
}

fn draw_categories(frame: &mut Frame<'_>, area: Rect, d: &DeviceScreen) {
    // Inside the borders, under the header; the last row says what did not fit.
    let room = usize::from(area.height.saturating_sub(3));
    let shown = if d.categories.len() > room { room.saturating_sub(1) } else { d.categories.len() };
    let mut rows: Vec<Row<'_>> = d.categories[..shown]
        .iter()
        .map(|&(c, now, peak)| {
            Row::new([
                Span::styled(crate::words::category_label(c), Style::new().fg(rgb(crate::colors::category_rgb(c)))),
                Span::raw(format!("{:>9}", bytes(now))),
                Span::raw(format!("{:>9}", bytes(peak))),
            ])
        })
        .collect();
    if shown < d.categories.len() {
        rows.push(Row::new([Span::styled(format!("… {} more", d.categories.len() - shown), DIM)]));
    }
    let table = Table::new(rows, [Constraint::Length(15), Constraint::Length(9), Constraint::Length(9)])
        .header(Row::new(["allocated", "      now", "  at peak"]).style(DIM))
        .block(Block::new().borders(Borders::ALL).title(" by category "));
    frame.render_widget(table, area);
}

fn draw_sites(frame: &mut Frame<'_>, area: Rect, d: &DeviceScreen) {
    let rows = d.sites_now.iter().map(|s| {
        Row::new([format!("{:>9}", bytes(s.bytes)), format!("{:>6}", crate::units::count(s.blocks)), s.site.clone()])
    });
    let table = Table::new(rows, [Constraint::Length(9), Constraint::Length(6), Constraint::Min(10)])
        .header(Row::new(["    bytes", "blocks", "allocated at"]).style(DIM))
        .block(Block::new().borders(Borders::ALL).title(" largest allocation sites alive now "));
    frame.render_widget(table, area);
}

fn draw_findings(frame: &mut Frame<'_>, area: Rect, d: &DeviceScreen, screen: &Screen) {
    let mut lines = Vec::new();
    if let Some(whole) = &d.whole_now {
        lines.push(Line::raw(whole.clone()));
    }
    let (ooms, post_mortem) = &d.ooms;
    if *ooms > 0 {
        let red = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
        let errors = crate::units::counted(*ooms, "out-of-memory error", "out-of-memory errors");
        lines.push(Line::styled(format!("{errors}: {}", post_mortem.first().map_or("", String::as_str)), red));
        lines.extend(post_mortem.iter().skip(1).map(|l| Line::raw(format!("  {l}"))));
    }
    match &d.growth {
        Some((true, words)) => {
            let style = Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD);
            lines.extend(
                words
                    .iter()
                    .take(2)
                    .enumerate()
                    .map(|(i, l)| if i == 0 { Line::styled(l.clone(), style) } else { Line::raw(format!("  {l}")) }),
            );
        }
        Some((false, words)) => lines.extend(words.first().map(|l| Line::styled(l.clone(), DIM))),
        None => lines.push(Line::styled("growth: too few iterations to tell (it takes 3)", DIM)),
    }
    lines.extend(screen.notes.iter().map(|n| Line::styled(n.clone(), DIM)));
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), area);
}

fn draw_keys(frame: &mut Frame<'_>, area: Rect, screen: Option<&Screen>, choice: Choice) {
    let mut spans = Vec::new();
    for (key, what) in KEYS {
        let what = match key {
            "w" => format!("window {}", minutes(choice.window_s)),
            "p" if screen.is_none_or(|s| s.processes.is_empty()) => continue,
            "d" if screen.is_none_or(|s| s.devices.len() < 2) => continue,
            _ => what.to_owned(),
        };
        spans.push(Span::styled(format!(" {key} "), Style::new().add_modifier(Modifier::REVERSED)));
        spans.push(Span::raw(format!(" {what}  ")));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn draw_help(frame: &mut Frame<'_>, area: Rect) {
    let lines = vec![
        Line::styled("keys", BOLD),
        Line::raw("  q, Esc      quit the view (a recording goes on until its workload ends)"),
        Line::raw("  Ctrl+C      the same; under `record --tui`, also interrupts the workload"),
        Line::raw("  d, Tab      next device (D, Shift+Tab: previous)"),
        Line::raw("  p, P        next, previous process (rank) of the run"),
        Line::raw("  w           the recent chart's width: 1, 5 or 15 minutes"),
        Line::raw("  ?           this help (any key closes it)"),
        Line::raw(""),
        Line::styled("what is shown", BOLD),
        Line::raw("  allocated: bytes of blocks handed to tensors; reserved: segments held from the driver"),
        Line::raw("  the peak, categories at it and the findings are `vramscope info`'s, updated as the run goes"),
    ];
    frame.render_widget(Paragraph::new(lines).block(Block::new().borders(Borders::ALL).title(" help ")), area);
}

#[cfg(test)]
mod tests {
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    use vramscope_trace_format::{Event, EventKind, SourceFormat, Trace};

    use super::*;

    /// A small trace on one GPU: blocks allocated, some freed, one left alive.
    fn screen() -> Screen {
        let mut trace = Trace::default();
        for (i, size) in [4 << 20, 8 << 20, 16 << 20].into_iter().enumerate() {
            trace.events.push(Event::new(EventKind::Alloc, 1_000 * i as i64, 0, 0x1000 * (i as u64 + 1), size));
        }
        trace.events.push(Event::new(EventKind::FreeCompleted, 10_000, 0, 0x2000, 8 << 20));
        let origin = crate::load::Origin {
            path: "t.vtrace".into(),
            format: SourceFormat::Vtrace,
            wrappers: Vec::new(),
            file_bytes: 0,
            warnings: Vec::new(),
            load_time: std::time::Duration::ZERO,
        };
        super::super::model::build(&trace, &origin, 0, &mut super::super::model::Cache::default())
    }

    fn drawn(width: u16, height: u16, screen: Option<&Screen>, choice: Choice) -> String {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap_or_else(|e| panic!("{e}"));
        let header = Header { label: "python train.py", status: "live", events: 4, note: None };
        terminal.draw(|frame| draw(frame, screen, &header, choice)).unwrap_or_else(|e| panic!("{e}"));
        terminal.backend().to_string()
    }

    #[test]
    fn the_numbers_fit_80x24_and_any_size_draws() {
        let screen = screen();
        let choice = Choice { device: 0, window_s: 60, help: false };
        let text = drawn(80, 24, Some(&screen), choice);
        // 28 MiB allocated at the peak, 20 MiB alive at the end.
        assert!(text.contains(" 20.0 MiB now   peak  28.0 MiB"), "{text}");
        assert!(text.contains("[cuda:0]") && text.contains(" q  quit"), "{text}");
        for (w, h) in [(1, 1), (20, 5), (40, 12), (79, 23), (200, 60)] {
            drawn(w, h, Some(&screen), choice);
            drawn(w, h, None, choice);
            drawn(w, h, Some(&screen), Choice { help: true, device: 7, ..choice });
        }
        assert!(drawn(80, 24, None, choice).contains("waiting for the first memory event"));
    }
}
