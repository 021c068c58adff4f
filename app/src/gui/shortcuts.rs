//! The keyboard shortcuts, in one table: the window's key handler reads it, the help window
//! lists it, and the menus take their key labels from it. The views' keys (1 to 7) come from
//! their own table ([`VIEWS`]), read the same way.

use egui::{Key, Modifiers};

use super::context::Command;
use super::views::{Open, VIEWS, View};

/// How a binding's keys are pressed.
#[derive(Clone, Copy, Debug)]
pub enum Keys {
    /// The key with these modifiers (Ctrl is Cmd on a Mac); also while typing in a field.
    Chord(Modifiers, Key),
    /// The key alone; not while typing.
    Alone(Key),
    /// The key with Shift held; not while typing.
    Shifted(Key),
    /// The key with any modifiers or none; not while typing.
    Any(Key),
    /// The key with any modifiers or none, also while typing.
    Always(Key),
}

/// A row of the help: its keys as said, what they do, and the bindings that do it (none: a
/// mouse gesture the timeline handles, listed for the help only).
#[derive(Clone, Copy, Debug)]
pub struct Shortcut {
    /// The keys as the help says them.
    pub keys: &'static str,
    /// The keys as a menu item says them, when a menu has the command.
    pub menu: &'static str,
    /// What they do.
    pub what: &'static str,
    /// The keys and the command each sends; the first pressed wins.
    pub bindings: &'static [(Keys, Command)],
}

const CTRL: Modifiers = Modifiers::COMMAND;
const CTRL_SHIFT: Modifiers = Modifiers { shift: true, ..Modifiers::COMMAND };

/// Every shortcut but the views' keys, in the order the help lists them.
pub const SHORTCUTS: &[Shortcut] = &[
    Shortcut {
        keys: "Ctrl+O",
        menu: "Ctrl+O",
        what: "open a trace (or drop a file on the window)",
        bindings: &[(Keys::Chord(CTRL, Key::O), Command::OpenDialog)],
    },
    Shortcut {
        keys: "Ctrl+W",
        menu: "Ctrl+W",
        what: "close the trace",
        bindings: &[(Keys::Chord(CTRL, Key::W), Command::Close)],
    },
    Shortcut {
        keys: "Ctrl+Shift+O",
        menu: "Ctrl+Shift+O",
        what: "open a second run to compare with",
        bindings: &[(Keys::Chord(CTRL_SHIFT, Key::O), Command::CompareDialog)],
    },
    Shortcut {
        keys: "Ctrl+Shift+D",
        menu: "Ctrl+Shift+D",
        what: "open a run's folder: its per-rank files as one run (or drop several files)",
        bindings: &[(Keys::Chord(CTRL_SHIFT, Key::D), Command::OpenFolderDialog)],
    },
    Shortcut {
        keys: "P",
        menu: "P",
        what: "jump to the peak",
        bindings: &[(Keys::Alone(Key::P), Command::JumpToPeak)],
    },
    Shortcut { keys: "click", menu: "", what: "select an instant: it drives the other views", bindings: &[] },
    Shortcut {
        keys: "← / →",
        menu: "",
        what: "previous / next event (Shift: 100 events)",
        bindings: &[
            (Keys::Shifted(Key::ArrowLeft), Command::Step(-100)),
            (Keys::Shifted(Key::ArrowRight), Command::Step(100)),
            (Keys::Any(Key::ArrowLeft), Command::Step(-1)),
            (Keys::Any(Key::ArrowRight), Command::Step(1)),
        ],
    },
    Shortcut { keys: "Ctrl+wheel", menu: "", what: "zoom around the cursor", bindings: &[] },
    Shortcut {
        keys: "+ / -",
        menu: "",
        what: "zoom in / out around the selection",
        bindings: &[
            (Keys::Alone(Key::Plus), Command::Zoom(2.0)),
            (Keys::Alone(Key::Equals), Command::Zoom(2.0)),
            (Keys::Alone(Key::Minus), Command::Zoom(0.5)),
        ],
    },
    Shortcut { keys: "drag", menu: "", what: "pan", bindings: &[] },
    Shortcut { keys: "Shift+drag, right-drag", menu: "", what: "zoom to a box", bindings: &[] },
    Shortcut {
        keys: "R, double-click",
        menu: "R",
        what: "show the whole trace",
        bindings: &[(Keys::Alone(Key::R), Command::ResetZoom), (Keys::Alone(Key::Home), Command::ResetZoom)],
    },
    Shortcut {
        keys: "End",
        menu: "End",
        what: "a run followed live: show all of it and keep to its newest instant",
        bindings: &[(Keys::Alone(Key::End), Command::FollowNewest)],
    },
    Shortcut {
        keys: "N",
        menu: "N",
        what: "hide / show interpreter frames in stacks",
        bindings: &[(Keys::Alone(Key::N), Command::ToggleNoise)],
    },
    Shortcut {
        keys: "T",
        menu: "T",
        what: "dark / light theme",
        bindings: &[(Keys::Alone(Key::T), Command::ToggleTheme)],
    },
    Shortcut {
        keys: "Esc",
        menu: "Esc",
        what: "cancel loading, close this help",
        bindings: &[(Keys::Always(Key::Escape), Command::Escape)],
    },
    Shortcut {
        keys: "F1, ?",
        menu: "F1",
        what: "this help",
        bindings: &[
            (Keys::Always(Key::F1), Command::ToggleHelp),
            (Keys::Alone(Key::Questionmark), Command::ToggleHelp),
            (Keys::Shifted(Key::Slash), Command::ToggleHelp),
        ],
    },
    Shortcut { keys: "Ctrl+Q", menu: "Ctrl+Q", what: "quit", bindings: &[(Keys::Chord(CTRL, Key::Q), Command::Quit)] },
];

/// The menu label of the shortcut that sends `command` ("" when none does).
pub fn menu_label(command: Command) -> &'static str {
    SHORTCUTS.iter().find(|s| s.bindings.iter().any(|&(_, c)| c == command)).map_or("", |s| s.menu)
}

/// Whether `keys` were pressed this frame (a chord is consumed, so a shorter one does not see it).
fn pressed(input: &mut egui::InputState, keys: Keys, typing: bool) -> bool {
    match keys {
        Keys::Chord(modifiers, key) => input.consume_shortcut(&egui::KeyboardShortcut::new(modifiers, key)),
        Keys::Always(key) => input.key_pressed(key),
        _ if typing => false,
        Keys::Alone(key) => input.key_pressed(key) && input.modifiers.is_none(),
        Keys::Shifted(key) => input.key_pressed(key) && input.modifiers.shift,
        Keys::Any(key) => input.key_pressed(key),
    }
}

/// The commands the keys pressed this frame send: at most one per row of [`SHORTCUTS`], and the
/// key of each view that can be shown now.
pub fn commands(ctx: &egui::Context, open: Open, out: &mut Vec<Command>) {
    let typing = ctx.egui_wants_keyboard_input();
    ctx.input_mut(|input| {
        // Chords with Shift first: Ctrl+O would also match Ctrl+Shift+O.
        let with_shift = |keys: &Keys| matches!(keys, Keys::Chord(m, _) if m.shift);
        for first in [true, false] {
            for shortcut in SHORTCUTS {
                let bindings = shortcut.bindings.iter().filter(|(keys, _)| with_shift(keys) == first);
                if let Some(&(_, command)) = bindings.into_iter().find(|&&(keys, _)| pressed(input, keys, typing)) {
                    out.push(command);
                }
            }
        }
        for info in View::available(open) {
            if pressed(input, Keys::Alone(info.key), typing) {
                out.push(Command::Show(info.view));
            }
        }
    });
}

/// The help window's rows: every shortcut, then each view's key.
pub fn help_rows() -> impl Iterator<Item = (String, String)> {
    let shortcuts = SHORTCUTS.iter().map(|s| (s.keys.to_owned(), s.what.to_owned()));
    let views = VIEWS.iter().map(|v| (v.key_label.to_owned(), format!("{}: {}", v.label.to_lowercase(), v.about)));
    shortcuts.chain(views)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_two_rows_bind_the_same_keys() {
        let mut seen = Vec::new();
        let keys = SHORTCUTS.iter().flat_map(|s| s.bindings.iter().map(|(k, _)| format!("{k:?}")));
        let views = VIEWS.iter().map(|v| format!("{:?}", Keys::Alone(v.key)));
        for k in keys.chain(views) {
            assert!(!seen.contains(&k), "{k} is bound twice");
            seen.push(k);
        }
    }
}
