//! The out-of-memory errors of a trace: which to explain, and each explained.

use vramscope_trace_format::{DeviceId, Trace};

use crate::postmortem::{self, PostMortem};

/// The OOMs of `device`, by index into `trace.ooms`, in time order.
pub fn on_device(trace: &Trace, device: DeviceId) -> Vec<usize> {
    let mut ooms: Vec<usize> = (0..trace.ooms.len()).filter(|&i| trace.ooms[i].device == device).collect();
    ooms.sort_by_key(|&i| trace.ooms[i].time_ns);
    ooms
}

/// The first OOM of each device of each process (no answer mixes two processes' blocks), by
/// index into `trace.ooms`, in time order.
pub fn firsts(trace: &Trace) -> Vec<usize> {
    let mut order: Vec<usize> = (0..trace.ooms.len()).collect();
    order.sort_by_key(|&i| trace.ooms[i].time_ns);
    let mut firsts: Vec<usize> = Vec::new();
    for i in order {
        let o = &trace.ooms[i];
        if !firsts.iter().any(|&f| trace.ooms[f].device == o.device && trace.ooms[f].process == o.process) {
            firsts.push(i);
        }
    }
    firsts
}

/// An OOM explained.
#[derive(Clone, Debug)]
pub struct Explained {
    /// Its index in `trace.ooms`.
    pub index: usize,
    /// What failed, what was free and alive, and what would have fitted.
    pub postmortem: PostMortem,
    /// Its process's part of the trace, when the trace holds several (the post-mortem's ids
    /// refer to it); `None`: the trace itself.
    pub part: Option<Trace>,
    /// How many more OOMs the same device of the same process had after it.
    pub later: usize,
}

/// The first OOM of each device of each process, explained (those that can be).
pub fn explain_firsts(trace: &Trace) -> Vec<Explained> {
    let several = trace.metadata.recorded_processes() > 1;
    firsts(trace)
        .into_iter()
        .filter_map(|i| {
            let oom = &trace.ooms[i];
            let later = trace.ooms.iter().filter(|o| o.device == oom.device && o.process == oom.process).count() - 1;
            if several {
                let part = trace.of_process(oom.process);
                let index = part.ooms.iter().position(|o| o == oom)?;
                let holders = postmortem::holders(trace, oom.device, oom.process, oom.time_ns);
                let postmortem = postmortem::postmortem_sharing(&part, index, holders)?;
                Some(Explained { index: i, postmortem, part: Some(part), later })
            } else {
                Some(Explained { index: i, postmortem: postmortem::postmortem(trace, i)?, part: None, later })
            }
        })
        .collect()
}
