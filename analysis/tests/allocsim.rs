//! The allocator model against real snapshots that recorded their segments as they were
//! allocated and freed: replayed under the settings the run had, the model's reserved peak and
//! its segments against what the trace recorded.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use vramscope_analysis::query::allocsim::{Settings, simulate};
use vramscope_analysis::query::peak;
use vramscope_trace_format::{DeviceId, EventKind, NoProgress, import};

fn fixture(name: &str) -> PathBuf {
    // At run time: a target directory shared between clones can hold this test built in another.
    let root =
        std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    if name.ends_with(".vtrace") {
        return root.join("../samples/traces").join(name);
    }
    root.join("../../shared/fixtures/pytorch-snapshots").join(name)
}

/// How many of `a`'s sizes `b` has too, each counted once.
fn common(a: &[u64], b: &[u64]) -> usize {
    let mut b = b.to_vec();
    b.sort_unstable();
    a.iter()
        .filter(|size| match b.binary_search(size) {
            Ok(i) => {
                b.remove(i);
                true
            }
            Err(_) => false,
        })
        .count()
}

#[test]
fn the_model_reserves_what_the_recorded_runs_reserved() {
    let files = [
        "gpt_ctx128_fullstep_fp32.pickle",
        "gpt_ctx128_forward_fp32.pickle",
        "gpt_ctx128_forward_mixed.pickle",
        "stanford_cs336_a2_memory_snapshot.pickle",
        // Not mosaic_output.pickle: generated, and inconsistent on purpose (its trace allocates more
        // than its segments hold).
        "h200-torch-plain.vtrace",
        "h200-torch-bf16.vtrace",
    ];
    for (name, tolerance) in files.map(|f| (f, 0.01)) {
        let bytes = std::fs::read(fixture(name)).expect("fixture");
        let trace = import(&bytes, &NoProgress).expect("import").trace;
        let device = DeviceId(0);
        let recorded = peak::peaks(&trace, device).reserved.bytes;
        let recorded_segments: Vec<u64> = trace
            .events
            .iter()
            .filter(|e| e.device == device && e.kind == EventKind::SegmentAlloc)
            .map(|e| e.size_bytes)
            .collect();
        let sim = simulate(&trace, device, Settings::default());
        let error = (sim.peak_reserved_bytes as f64 - recorded as f64) / recorded as f64;
        let matched = common(&sim.segment_alloc_sizes, &recorded_segments);
        println!(
            "{name}: reserved peak simulated {} recorded {recorded} ({:+.2}%); segments allocated: simulated {}, \
             recorded {}, {matched} of the same sizes; unmatched frees {}",
            sim.peak_reserved_bytes,
            100.0 * error,
            sim.segment_alloc_sizes.len(),
            recorded_segments.len(),
            sim.unmatched_frees,
        );
        assert!(error.abs() <= tolerance, "{name}: {:+.2}%", 100.0 * error);
        // The settings the advisor tries, for the record.
        let tried: Vec<String> = [64u64, 128, 256, 512]
            .iter()
            .map(|&mb| {
                let settings = Settings { max_split_size_bytes: Some(mb << 20), ..Settings::default() };
                let peak = simulate(&trace, device, settings).peak_reserved_bytes;
                format!(
                    "{mb} MiB: {:+.2}%",
                    100.0 * (peak as f64 - sim.peak_reserved_bytes as f64) / sim.peak_reserved_bytes as f64
                )
            })
            .collect();
        println!("    max_split_size {}", tried.join(", "));
    }
}

/// Expandable segments: the run recorded with `expandable_segments:True` replayed with them (its
/// reserved peak, the pages it mapped), and the run with the default allocator replayed with them
/// against that run: the projection the advisor makes.
#[test]
fn the_model_maps_what_the_expandable_run_mapped() {
    let load = |name: &str| import(&std::fs::read(fixture(name)).expect("fixture"), &NoProgress).expect("import").trace;
    let expandable = load("h200-torch-expandable.vtrace");
    let device = DeviceId(0);
    let recorded = peak::peaks(&expandable, device).reserved.bytes;
    let on = Settings { expandable_segments: true, ..Settings::default() };
    let sim = simulate(&expandable, device, on.clone());
    let error = (sim.peak_reserved_bytes as f64 - recorded as f64) / recorded as f64;
    let maps: Vec<u64> = expandable
        .events
        .iter()
        .filter(|e| e.device == device && e.kind == EventKind::SegmentMap)
        .map(|e| e.size_bytes)
        .collect();
    let matched = common(&sim.segment_map_sizes, &maps);
    println!(
        "h200-torch-expandable: reserved peak simulated {} recorded {recorded} ({:+.2}%); pages mapped: simulated {} \
         times, recorded {}, {matched} of the same sizes",
        sim.peak_reserved_bytes,
        100.0 * error,
        sim.segment_map_sizes.len(),
        maps.len()
    );
    assert!(error.abs() <= 0.01, "{:+.2}%", 100.0 * error);
    assert!(matched * 10 >= maps.len() * 9, "{matched} of {} mappings", maps.len());
    let plain = load("h200-torch-plain.vtrace");
    let projected = simulate(&plain, device, on).peak_reserved_bytes;
    let error = (projected as f64 - recorded as f64) / recorded as f64;
    println!(
        "h200-torch-plain with expandable segments: projected {projected}, the expandable run {recorded} ({:+.2}%)",
        100.0 * error
    );
    assert!(error.abs() <= 0.02, "{:+.2}%", 100.0 * error);
}

/// The advisor proposes `max_split_size` where the model shows it reserves less, with the
/// reserved peak the model projects, and not where the run already limits splitting.
#[test]
fn the_advisor_projects_max_split_size_by_replaying() {
    use vramscope_analysis::query::advisor::{Remedy, advise};
    use vramscope_trace_format::{Event, Trace};
    let mut trace = Trace::default();
    let mut push = |kind, t, address, size: u64| trace.events.push(Event::new(kind, t, 0, address, size));
    // A large block freed, split for a small request, then a large request: a second segment.
    push(EventKind::SegmentAlloc, 0, 0xa000_0000, 100 << 20);
    push(EventKind::Alloc, 1, 0xa000_0000, 100 << 20);
    push(EventKind::FreeCompleted, 2, 0xa000_0000, 100 << 20);
    push(EventKind::Alloc, 3, 0xa000_0000, 5 << 20);
    push(EventKind::SegmentAlloc, 4, 0xb000_0000, 100 << 20);
    push(EventKind::Alloc, 4, 0xb000_0000, 100 << 20);
    let advice = advise(&trace, None, None, None).expect("advice");
    let split = advice.remedies.iter().find(|p| p.remedies == [Remedy::MaxSplitSize]).expect("max_split_size");
    assert_eq!(split.projected_peak_reserved_bytes, 120 << 20);
    assert_eq!(advice.max_split.map(|m| m.setting_bytes), Some(64 << 20));
    // Told the run already set it: not proposed.
    trace.metadata.allocator_settings = serde_json::json!({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"});
    let advice = advise(&trace, None, None, None).expect("advice");
    assert!(advice.remedies.iter().all(|p| p.remedies != [Remedy::MaxSplitSize]));
}
