//! `info --at`: an instant given as a time or a phase ([`crate::query::instant`]
//! finds it; the document says what was alive then).

pub use crate::query::instant::{When, parse_when};

/// `--at`'s value parser: the text as given and what it means.
pub fn parse_when_arg(text: &str) -> Result<(String, When), String> {
    parse_when(text).map(|when| (text.to_owned(), when))
}
