//! `info --at` and `--blocks`: an instant given as a time or a phase, what was alive then, and
//! the largest blocks there ([`crate::analysis::query::instant`] finds them; this words them).

use anyhow::Result;
use vramscope_trace_format::{DeviceId, Trace};

use crate::analysis::query::instant::{self, NotInTrace};
pub use crate::analysis::query::instant::{At, When, parse_when};
use crate::analysis::{instant as alive, phases::PhaseKind};
use crate::units::duration_ns;

/// `--at`'s value parser: the text as given and what it means.
pub fn parse_when_arg(text: &str) -> std::result::Result<(String, When), String> {
    parse_when(text).map(|when| (text.to_owned(), when))
}

/// Why the instant named `text` is not in the trace, in words.
fn not_in_trace(text: &str, why: &NotInTrace) -> anyhow::Error {
    let what = |kind: Option<PhaseKind>| kind.map_or("iteration", PhaseKind::name);
    anyhow::anyhow!(match *why {
        NotInTrace::AfterEnd { length_ns } => {
            format!(
                "{text} is after the trace's last event (at +{}): give an instant inside it",
                duration_ns(length_ns)
            )
        }
        NotInTrace::NotInIteration { kind, iterations: (first, last) } if first == last => {
            format!("{text}: the trace shows {} in iteration {first} only (numbered from 1)", what(kind))
        }
        NotInTrace::NotInIteration { kind, iterations: (first, last) } => {
            format!("{text}: the trace shows {} in iterations {first} to {last} (numbered from 1)", what(kind))
        }
        NotInTrace::NoPhase { kind } => format!(
            "{text}: the trace shows no {} phase (none recorded, none in ranges named like phases, none told by the \
             allocations' stacks); give +DURATION instead",
            what(kind)
        ),
    })
}

/// One of the largest blocks alive at an instant, and why it has its category.
#[derive(serde::Serialize)]
pub(super) struct BlockOut {
    pub(super) size_bytes: u64,
    pub(super) category: &'static str,
    pub(super) why: String,
    pub(super) site: String,
    /// What PyTorch attached to the allocation (user metadata, compile context).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) context: Vec<String>,
}

/// The largest blocks of each device at an instant.
#[derive(serde::Serialize)]
pub(super) struct Largest {
    pub(super) when: String,
    pub(super) devices: Vec<(DeviceId, Vec<BlockOut>)>,
}

/// The `n` largest blocks of each device at `when` (named `text`; `None`: the peak), in words.
pub(super) fn largest_blocks(trace: &Trace, when: Option<&When>, text: &str, n: usize) -> Result<Largest> {
    let devices = instant::largest_blocks(trace, when, n).map_err(|why| not_in_trace(text, &why))?;
    let devices = devices
        .into_iter()
        .map(|(device, blocks)| {
            let blocks = blocks
                .iter()
                .map(|b| BlockOut {
                    size_bytes: b.block.size_bytes,
                    category: b.attribution.category.name(),
                    why: crate::words::evidence(trace, b.attribution.evidence),
                    site: alive::allocation_site(trace, b.block.stack, true),
                    context: crate::words::context_lines(trace, &b.block),
                })
                .collect();
            (device, blocks)
        })
        .collect();
    Ok(Largest { when: text.to_owned(), devices })
}

/// What was alive at `when` (named `text`).
pub(super) fn at_instant(trace: &Trace, when: &When, text: &str) -> Result<At> {
    instant::at(trace, when, text).map_err(|why| not_in_trace(text, &why))
}
