//! Tensors alive before a recording made inside the program began.

use std::collections::HashSet;

use vramscope_trace_format::{DeviceId, Event, EventKind, ProcessId};

use super::{Line, Log, Merging};

/// A recording made inside the program sees the tensors it tags but not the allocation of those
/// that were alive before it began (a model built before the block): each such tensor is added
/// as allocated just before recording began, at its storage's size, so that the parameters of a
/// model built before `vramscope.record()` count as they do under `vramscope record`. A tensor
/// is taken as alive before when the recording has no allocation alive at its address when it
/// is tagged.
pub(super) fn add(log: &Log, process: ProcessId, began: i64, m: &mut Merging) {
    let mut tags: Vec<(i64, DeviceId, u64, u64)> = log
        .lines
        .iter()
        .filter_map(|l| match l {
            Line::Tag { time, dev, addr, size: Some(size), .. } if *size > 0 => Some((*time, *dev, *addr, *size)),
            _ => None,
        })
        .collect();
    if tags.is_empty() {
        return;
    }
    tags.sort_by_key(|t| t.0);
    let mut events: Vec<&Event> = m
        .added
        .iter()
        .filter(|e| e.process == process && matches!(e.kind, EventKind::Alloc | EventKind::FreeCompleted))
        .collect();
    events.sort_by_key(|e| e.time_ns);
    let first = events.first().map_or(tags[0].0, |e| e.time_ns);
    let at = began.min(first).min(tags[0].0).saturating_sub(1);
    let mut live: HashSet<(DeviceId, u64)> = HashSet::new();
    let mut next = 0;
    let mut before: Vec<Event> = Vec::new();
    for (time, device, address, size) in tags {
        while let Some(e) = events.get(next).filter(|e| e.time_ns <= time) {
            if e.kind == EventKind::Alloc {
                live.insert((e.device, e.address));
            } else {
                live.remove(&(e.device, e.address));
            }
            next += 1;
        }
        if live.insert((device, address)) {
            let mut event = Event::new(EventKind::Alloc, at, device, address, size);
            event.process = process;
            if device.is_host() {
                // Host memory: the block is what the process holds from the system too.
                before.push(Event { kind: EventKind::SegmentAlloc, ..event });
            }
            before.push(event);
        }
    }
    m.added.extend(before);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use vramscope_trace_format::{EventKind, Trace};

    use super::super::{add_to_trace, tests::parse};

    /// Recorded inside the program: a tensor tagged with no allocation alive at its address was
    /// alive before recording began (a model built before the block), and is added as allocated
    /// just before it began; one allocated inside the recording, or tagged again, is not.
    #[test]
    fn in_process_tensors_alive_before_recording_began_are_added_once() {
        let log = parse(concat!(
            r#"{"t":"meta","pid":7,"torch":"2.15","source":"cpu","in_process":true,"time":100}"#,
            "\n",
            r#"{"t":"tag","time":110,"dev":-1,"addr":8192,"cat":"parameter","name":"w","size":256}"#,
            "\n",
            r#"{"t":"tag","time":120,"dev":-1,"addr":4096,"cat":"optimizer_state","name":"w.exp_avg","size":64}"#,
            "\n",
            r#"{"t":"tag","time":130,"dev":-1,"addr":8192,"cat":"parameter","name":"w","size":256}"#,
            "\n",
            // Drained after the tags, as the CPU profiler's events are: allocated at 115.
            r#"{"t":"alloc","time":115,"dev":-1,"addr":4096,"size":64,"op":"aten::zeros_like"}"#,
        ));
        let mut trace = Trace::default();
        add_to_trace(&mut trace, &[log], &mut BTreeMap::new());
        let allocs: Vec<(i64, u64, u64)> = trace
            .events
            .iter()
            .filter(|e| e.kind == EventKind::Alloc)
            .map(|e| (e.time_ns, e.address, e.size_bytes))
            .collect();
        assert_eq!(allocs, [(99, 8192, 256), (115, 4096, 64)]);
        assert_eq!(trace.events.iter().filter(|e| e.kind == EventKind::SegmentAlloc).count(), 2);
        // Not inside the program: nothing is added.
        let log = parse(concat!(
            r#"{"t":"meta","pid":7,"torch":"2.15","source":"cpu","time":100}"#,
            "\n",
            r#"{"t":"tag","time":110,"dev":-1,"addr":8192,"cat":"parameter","name":"w","size":256}"#,
        ));
        let mut trace = Trace::default();
        add_to_trace(&mut trace, &[log], &mut BTreeMap::new());
        assert!(trace.events.is_empty());
    }
}
