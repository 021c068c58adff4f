//! `info --at` and `--blocks`: an instant given as a time or a phase, what was alive then, and
//! the largest blocks there.

use anyhow::{Result, bail};
use vramscope_trace_format::{DeviceId, Trace};

use crate::analysis::phases::{self, PhaseKind};
use crate::analysis::{instant, peak};
use crate::units::duration_ns;

/// An instant `info --at` reports on.
#[derive(Clone, Debug, PartialEq)]
pub enum When {
    /// `+DURATION` after the trace's first event (`+40ms`, `+1.5s`, `+200us`, `+7ns`).
    After(i64),
    /// The start of a phase (`None`: the whole iteration) in iteration `#N`, numbered from 1 as
    /// `info` and `diff` number them (`None`: the first found), as the phases are found for
    /// `info`: recorded, from ranges named like phases, or from the allocations' stacks.
    Phase(Option<PhaseKind>, Option<u32>),
}

/// Reads `--at`'s value.
pub fn parse_when(text: &str) -> std::result::Result<When, String> {
    if let Some(duration) = text.strip_prefix('+') {
        let split = duration.find(|c: char| c.is_alphabetic()).unwrap_or(duration.len());
        let (number, unit) = duration.split_at(split);
        let scale = match unit {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" | "" => 1e9,
            _ => return Err(format!("unknown unit {unit:?} in {text:?}: use ns, us, ms or s")),
        };
        let value: f64 = number.parse().map_err(|_| format!("{text:?} is not +NUMBER[ns|us|ms|s]"))?;
        if !value.is_finite() {
            return Err(format!("{text:?} is not +NUMBER[ns|us|ms|s]"));
        }
        return Ok(When::After((value * scale) as i64));
    }
    let (name, index) = match text.split_once('#') {
        Some((name, index)) => (name, Some(index)),
        None => (text, None),
    };
    let kind = match name {
        "forward" => Some(PhaseKind::Forward),
        "backward" => Some(PhaseKind::Backward),
        "optimizer_step" | "step" => Some(PhaseKind::OptimizerStep),
        "iteration" => None,
        _ => {
            return Err(format!(
                "{text:?}: give +DURATION (e.g. +40ms) or a phase: forward, backward, optimizer_step or \
                 iteration, with #N for iteration N (from 1, as info and diff number them)"
            ));
        }
    };
    let iteration = match index {
        None => None,
        Some(n) => match n.parse::<u32>() {
            Ok(0) => return Err(format!("{text:?}: iterations are numbered from 1, as info and diff number them")),
            Ok(n) => Some(n),
            Err(_) => return Err(format!("{text:?}: #N must be an iteration number")),
        },
    };
    Ok(When::Phase(kind, iteration))
}

/// `--at`'s value parser: the text as given and what it means.
pub fn parse_when_arg(text: &str) -> std::result::Result<(String, When), String> {
    parse_when(text).map(|when| (text.to_owned(), when))
}

/// What was alive on one device at an instant.
#[derive(serde::Serialize)]
pub(super) struct AtDevice {
    pub(super) device: DeviceId,
    pub(super) allocated_bytes: u64,
    pub(super) live_blocks: usize,
    pub(super) categories: std::collections::BTreeMap<&'static str, u64>,
}

/// What was alive at an instant.
#[derive(serde::Serialize)]
pub(super) struct At {
    pub(super) when: String,
    pub(super) time_us: i64,
    pub(super) devices: Vec<AtDevice>,
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

pub(super) fn largest_blocks(trace: &Trace, when: Option<&When>, text: &str, n: usize) -> Result<Largest> {
    let devices = trace
        .devices()
        .into_iter()
        .map(|device| {
            let (event, time_ns) = match when {
                None => {
                    let peaks = peak::peaks(trace, device);
                    (peaks.allocated.event, peaks.allocated.time_ns)
                }
                Some(when) => {
                    let time_ns = instant_time(trace, when, text)?;
                    (trace.events.partition_point(|e| e.time_ns < time_ns).checked_sub(1), time_ns)
                }
            };
            let state = instant::instant(trace, device, event, time_ns);
            let blocks = state
                .blocks
                .iter()
                .take(n)
                .map(|b| BlockOut {
                    size_bytes: b.block.size_bytes,
                    category: b.attribution.category.name(),
                    why: crate::words::evidence(trace, b.attribution.evidence),
                    site: instant::allocation_site(trace, b.block.stack, true),
                    context: crate::words::context_lines(trace, &b.block),
                })
                .collect();
            Ok((device, blocks))
        })
        .collect::<Result<_>>()?;
    Ok(Largest { when: text.to_owned(), devices })
}

fn instant_time(trace: &Trace, when: &When, text: &str) -> Result<i64> {
    let start = trace.events.first().map_or(0, |e| e.time_ns);
    let end = trace.events.last().map_or(0, |e| e.time_ns);
    match *when {
        When::After(ns) => {
            let time = start.saturating_add(ns);
            if time > end {
                bail!(
                    "{text} is after the trace's last event (at +{}): give an instant inside it",
                    duration_ns(end - start)
                );
            }
            Ok(time)
        }
        When::Phase(kind, iteration) => {
            let what = kind.map_or("iteration", PhaseKind::name);
            // The phases as `info` finds them, on the first device that shows this kind.
            let mut found: Vec<u32> = Vec::new();
            for device in trace.devices() {
                let phases = phases::phases(trace, device);
                let list: Vec<&phases::PhaseHigh> = match kind {
                    Some(kind) => phases.phases.iter().filter(|p| p.kind == Some(kind)).collect(),
                    None => phases.iterations.iter().collect(),
                };
                if list.is_empty() {
                    continue;
                }
                let chosen = match iteration {
                    None => list.iter().min_by_key(|p| p.iteration),
                    Some(n) => list.iter().find(|p| p.iteration == n),
                };
                if let Some(p) = chosen {
                    return Ok(p.start_ns);
                }
                found = list.iter().map(|p| p.iteration).collect();
                break;
            }
            match (found.iter().min(), found.iter().max()) {
                (Some(first), Some(last)) if first == last => {
                    bail!("{text}: the trace shows {what} in iteration {first} only (numbered from 1)")
                }
                (Some(first), Some(last)) => {
                    bail!("{text}: the trace shows {what} in iterations {first} to {last} (numbered from 1)")
                }
                _ => bail!(
                    "{text}: the trace shows no {what} phase (none recorded, none in ranges named like phases, none \
                     told by the allocations' stacks); give +DURATION instead"
                ),
            }
        }
    }
}

pub(super) fn at_instant(trace: &Trace, when: &When, text: &str) -> Result<At> {
    let time_ns = instant_time(trace, when, text)?;
    // The state just before the instant: every event earlier than it.
    let upto = trace.events.partition_point(|e| e.time_ns < time_ns).checked_sub(1);
    let devices = trace
        .devices()
        .into_iter()
        .map(|device| {
            let live = peak::live_at(trace, device, upto);
            let categories = peak::categories_at(trace, device, time_ns, &live);
            AtDevice {
                device,
                allocated_bytes: live.iter().map(|b| b.size_bytes).sum(),
                live_blocks: live.len(),
                categories: categories.into_iter().map(|(c, v)| (c.name(), v)).collect(),
            }
        })
        .collect();
    Ok(At { when: text.to_owned(), time_us: time_ns.div_euclid(1000), devices })
}
