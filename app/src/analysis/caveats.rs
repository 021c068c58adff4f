//! What a trace cannot show, said in words once for `info` and the app: a snapshot taken without
//! allocation history, a profiler trace that cannot see memory from before it began.

use vramscope_trace_format::{SourceFormat, Trace};

/// How to record a snapshot with history, for the notes that need it.
pub const HOW_TO_RECORD_HISTORY: &str = "call torch.cuda.memory._record_memory_history(max_entries=100000) \
     before the code to look at, then torch.cuda.memory._dump_snapshot(\"snapshot.pickle\")";

/// Notes on what the trace cannot show, each one sentence or two, for people.
pub fn caveats(trace: &Trace) -> Vec<String> {
    let mut notes = Vec::new();
    let devices = trace.devices();
    if trace.metadata.source_format == SourceFormat::PytorchSnapshot {
        let mut with_history = vec![false; 1 << 16];
        for event in &trace.events {
            with_history[event.device as u16 as usize] = true;
        }
        let without: Vec<i16> = devices.iter().copied().filter(|&d| !with_history[d as u16 as usize]).collect();
        if !without.is_empty() && without.len() == devices.len() {
            notes.push(format!(
                "No allocation history was recorded: this snapshot holds only the allocator's state when it \
                 was taken, so that state is its only instant and every peak below is that state. To see \
                 memory over time, {HOW_TO_RECORD_HISTORY}."
            ));
        } else if !without.is_empty() {
            let names: Vec<String> = without.iter().map(|&d| trace.metadata.device_label(d)).collect();
            notes.push(format!(
                "{} recorded no allocation history (only the allocator's final state): its peak is that state.",
                names.join(", ")
            ));
        }
    }
    let unseen: Vec<String> = trace
        .metadata
        .devices
        .iter()
        .filter(|d| d.allocated_before_unknown)
        .map(|d| trace.metadata.device_label(d.device))
        .collect();
    if !unseen.is_empty() {
        notes.push(format!(
            "{}: memory allocated before the profiler started is not seen. The trace's memory events carry \
             only sizes (no addresses or running totals, as in PyTorch 1.8-1.9), so the curve is their running \
             sum, starting at the least memory that its frees imply was already there.",
            unseen.join(", ")
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use vramscope_trace_format::{
        Block, BlockState, DeviceInfo, Event, EventKind, ProcessId, Segment, SegmentPool, StackId,
    };

    use super::*;

    fn segment(device: i16) -> Segment {
        Segment {
            device,
            process: ProcessId(0),
            address: 0x1000,
            size_bytes: 2 << 20,
            stream: 0,
            pool: SegmentPool::Small,
            pool_id: (0, 0),
            is_expandable: false,
            stack: StackId(0),
            blocks: vec![Block {
                address: 0x1000,
                size_bytes: 2 << 20,
                requested_bytes: 100,
                state: BlockState::ActiveAllocated,
                stack: StackId(0),
            }],
        }
    }

    #[test]
    fn a_snapshot_without_history_says_so_and_how_to_record_one() {
        let mut trace = Trace::default();
        trace.metadata.source_format = SourceFormat::PytorchSnapshot;
        trace.segments = vec![segment(0), segment(1)];
        let notes = caveats(&trace);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("_record_memory_history"), "{notes:?}");
        // One device with history, one without: only that one is named.
        trace.events.push(Event::new(EventKind::Alloc, 5, 1, 0x9000, 512));
        let notes = caveats(&trace);
        assert_eq!(
            notes,
            ["cuda:0 recorded no allocation history (only the allocator's final state): its peak is that state."]
        );
        trace.events.push(Event::new(EventKind::Alloc, 6, 0, 0x9000, 512));
        assert!(caveats(&trace).is_empty());
    }

    #[test]
    fn a_running_sum_says_what_it_cannot_see() {
        let mut trace = Trace::default();
        trace.metadata.source_format = SourceFormat::ChromeTrace;
        trace.metadata.devices = vec![DeviceInfo {
            device: 2,
            kind: Some("hip".to_owned()),
            allocated_before_unknown: true,
            ..DeviceInfo::default()
        }];
        let notes = caveats(&trace);
        assert_eq!(notes.len(), 1);
        assert!(notes[0].starts_with("hip:2: memory allocated before the profiler started is not seen"), "{notes:?}");
    }
}
