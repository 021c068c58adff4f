//! Property tests over generated inputs (the generators the structure-aware fuzz targets use):
//! snapshot-shaped pickles with shared references, wrong types and repeated objects, and
//! `.vtrace` files of arbitrary chunks with valid checksums. None may panic, hang, or come back
//! with more devices than the limit; what is read must be consistent.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::generate::{snapshot_pickle, vtrace_file};
use vramscope_trace_format::{NoProgress, import, vtrace};

/// A deterministic stream of pseudo-random bytes (xorshift64*).
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

#[test]
fn generated_snapshots_never_panic_and_stay_consistent() {
    let started = Instant::now();
    let (mut read, mut refused) = (0, 0);
    for seed in 0..3000u64 {
        let input = bytes(seed, (seed as usize * 7) % 3000);
        let pickle = snapshot_pickle(&input);
        match import(&pickle, &NoProgress) {
            Ok(imported) => {
                read += 1;
                let trace = &imported.trace;
                assert!(trace.devices().len() <= import::MAX_DEVICES);
                assert!(trace.events.is_sorted_by_key(|e| e.time_ns), "seed {seed}");
                // Segments in (device, address) order, blocks in address order: what the
                // analysis relies on.
                assert!(trace.segments.is_sorted_by_key(|s| (s.device, s.address)), "seed {seed}");
                for segment in &trace.segments {
                    assert!(segment.blocks.is_sorted_by_key(|b| b.address), "seed {seed}");
                }
                // No more blocks than the pickle could have spelt out (a shared list or a
                // segment named again is not copied): each block dict takes over 30 bytes.
                let blocks: usize = trace.segments.iter().map(|s| s.blocks.len()).sum();
                assert!(blocks * 30 <= pickle.len(), "seed {seed}: {blocks} blocks from {} bytes", pickle.len());
            }
            Err(e) => {
                refused += 1;
                let message = e.to_string();
                assert!(!message.is_empty(), "seed {seed}");
            }
        }
    }
    // Both outcomes are exercised: the generator makes valid snapshots and broken ones.
    assert!(read > 100 && refused > 100, "read {read}, refused {refused}");
    assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());
}

#[test]
fn generated_vtrace_files_never_panic() {
    let started = Instant::now();
    let mut damaged = 0;
    for seed in 0..3000u64 {
        let input = bytes(seed, (seed as usize * 13) % 4000);
        let file = vtrace_file(&input);
        let loaded = vtrace::read(&file, &NoProgress).unwrap();
        if loaded.damage.is_some() {
            damaged += 1;
        }
    }
    assert!(damaged > 100, "{damaged}");
    assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());
}
