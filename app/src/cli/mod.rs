//! The command-line commands. `main.rs` parses arguments and calls these.

pub mod advise;
pub mod convert;
pub mod diff;
pub mod info;
pub mod record;
pub mod report;
