//! An instant asked for by name (`+40ms`, `backward#2`): parsed, found in a trace, and what was
//! alive there on each device.

use std::collections::BTreeMap;

use serde::Serialize;
use vramscope_trace_format::{Category, DeviceId, Trace};

/// What was alive at an instant, block by block, and the views' helpers over it.
pub use crate::instant::{
    AttributedBlock, Instant, SegmentAt, SiteBytes, StackNode, allocation_site, by_site, instant, is_noise_frame,
    stack_lines, stack_tree,
};
use crate::peak;
use crate::phases::{self, PhaseKind};

/// An instant of a trace, as a user names it.
#[derive(Clone, Debug, PartialEq)]
pub enum When {
    /// `+DURATION` after the trace's first event (`+40ms`, `+1.5s`, `+200us`, `+7ns`).
    After(i64),
    /// The start of a phase (`None`: the whole iteration) in iteration `#N`, numbered from 1 as
    /// `info` and `diff` number them (`None`: the first found), as the phases are found for
    /// `info`: recorded, from ranges named like phases, or from the allocations' stacks.
    Phase(Option<PhaseKind>, Option<u32>),
}

/// Reads an instant: `+NUMBER[ns|us|ms|s]`, or a phase (`forward`, `backward`, `optimizer_step`,
/// `iteration`) with `#N` for iteration N. The error says what is expected.
pub fn parse_when(text: &str) -> Result<When, String> {
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

/// Why an instant is not in a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotInTrace {
    /// The trace has no allocator events (a memory timeline's categories are sampled totals):
    /// nothing is known to be alive at any instant.
    NoEvents,
    /// After the trace's last event, which is this long after its first.
    AfterEnd {
        /// The trace's length.
        length_ns: i64,
    },
    /// The phase is there, but not in the iteration asked for.
    NotInIteration {
        /// The phase (`None`: the iteration as a whole).
        kind: Option<PhaseKind>,
        /// The first and last iterations that show it (from 1).
        iterations: (u32, u32),
    },
    /// No device shows the phase.
    NoPhase {
        /// The phase (`None`: the iteration as a whole).
        kind: Option<PhaseKind>,
    },
}

/// When `when` is in `trace` (ns on its clock): a phase as `info` finds it, on the first device
/// that shows its kind.
pub fn resolve(trace: &Trace, when: &When) -> Result<i64, NotInTrace> {
    let Some(last) = trace.events.last() else {
        return Err(NotInTrace::NoEvents);
    };
    let start = trace.origin_ns();
    let end = last.time_ns;
    match *when {
        When::After(ns) => {
            let time = start.saturating_add(ns);
            if time > end {
                return Err(NotInTrace::AfterEnd { length_ns: end - start });
            }
            Ok(time)
        }
        When::Phase(kind, iteration) => {
            for device in trace.devices() {
                let phases = phases::phases(trace, device);
                let list: Vec<&phases::PhaseHigh> = match kind {
                    Some(kind) => phases.phases.iter().filter(|p| p.kind == Some(kind)).collect(),
                    None => phases.iterations.iter().collect(),
                };
                let chosen = match iteration {
                    None => list.iter().min_by_key(|p| p.iteration),
                    Some(n) => list.iter().find(|p| p.iteration == n),
                };
                if let Some(p) = chosen {
                    return Ok(p.start_ns);
                }
                let numbers = list.iter().map(|p| p.iteration);
                if let (Some(first), Some(last)) = (numbers.clone().min(), numbers.max()) {
                    return Err(NotInTrace::NotInIteration { kind, iterations: (first, last) });
                }
            }
            Err(NotInTrace::NoPhase { kind })
        }
    }
}

/// What was alive on one device at an instant.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct AtDevice {
    /// The device.
    pub device: DeviceId,
    /// Bytes of the blocks alive.
    pub allocated_bytes: u64,
    /// Blocks alive.
    pub live_blocks: usize,
    /// Their bytes by category (non-zero ones).
    pub categories: BTreeMap<Category, u64>,
}

/// What was alive at an instant, on every device.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct At {
    /// The instant as it was asked for.
    pub when: String,
    /// When it is on the trace's clock (µs in the JSON).
    #[serde(rename = "time_us", serialize_with = "crate::micros::ns_as_us")]
    pub time_ns: i64,
    /// Per device.
    pub devices: Vec<AtDevice>,
}

/// What was alive at `when` (named `text`) on each device: the state just before it.
pub fn at(trace: &Trace, when: &When, text: &str) -> Result<At, NotInTrace> {
    let time_ns = resolve(trace, when)?;
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
                categories: categories.into_iter().collect(),
            }
        })
        .collect();
    Ok(At { when: text.to_owned(), time_ns, devices })
}

/// The `n` largest blocks alive on each device at `when` (`None`: the device's allocated peak),
/// each with its category and the evidence for it.
pub fn largest_blocks(
    trace: &Trace,
    when: Option<&When>,
    n: usize,
) -> Result<Vec<(DeviceId, Vec<AttributedBlock>)>, NotInTrace> {
    let at = when.map(|w| resolve(trace, w)).transpose()?;
    Ok(trace
        .devices()
        .into_iter()
        .map(|device| {
            let (event, time_ns) = match at {
                None => {
                    let peaks = peak::peaks(trace, device);
                    (peaks.allocated.event, peaks.allocated.time_ns)
                }
                Some(time_ns) => (trace.events.partition_point(|e| e.time_ns < time_ns).checked_sub(1), time_ns),
            };
            let mut state = instant(trace, device, event, time_ns);
            state.blocks.truncate(n);
            (device, state.blocks)
        })
        .collect())
}
