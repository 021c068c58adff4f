//! The `.vtrace` format: round trips, the frozen version-1 fixture, and recovery from damage.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::generate::chunk;
use vramscope_trace_format::memory::Limit;
use vramscope_trace_format::vtrace::{self, CHUNK_HEADER_BYTES, HEADER_BYTES, MAGIC};
use vramscope_trace_format::{DeviceId, Error, Event, EventKind, NoProgress, Trace};

fn fixture_path() -> PathBuf {
    (std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from))
        .join("tests/fixtures/v1/small.vtrace")
}

fn encode(trace: &Trace) -> Vec<u8> {
    vtrace::write(trace, Vec::new()).unwrap()
}

/// Offsets where each chunk of a well-formed file starts, and the file's end.
fn chunk_offsets(bytes: &[u8]) -> Vec<usize> {
    let mut offsets = Vec::new();
    let mut pos = HEADER_BYTES;
    while pos < bytes.len() {
        offsets.push(pos);
        let len = u32::from_le_bytes(bytes[pos + 4..pos + 8].try_into().unwrap()) as usize;
        pos += CHUNK_HEADER_BYTES + len;
    }
    offsets.push(bytes.len());
    offsets
}

#[test]
fn round_trip_keeps_every_table() {
    let trace = common::small_trace();
    let loaded = vtrace::read(&encode(&trace), &NoProgress).unwrap();
    assert_eq!(loaded.damage, None);
    common::assert_same(&trace, &loaded.trace);
}

#[test]
fn version_1_fixture_reads_forever() {
    // Regenerate only when adding a new fixture version, never for version 1:
    // VRAMSCOPE_WRITE_V1_FIXTURE=1 cargo test -p vramscope-trace-format --test vtrace
    if std::env::var_os("VRAMSCOPE_WRITE_V1_FIXTURE").is_some() {
        std::fs::write(fixture_path(), encode(&common::small_trace())).unwrap();
    }
    let bytes = std::fs::read(fixture_path()).expect("the version-1 fixture is checked in");
    assert_eq!(&bytes[..8], &MAGIC);
    assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 1);
    let loaded = vtrace::read(&bytes, &NoProgress).unwrap();
    assert_eq!(loaded.damage, None);
    let trace = &loaded.trace;
    common::assert_same(&common::small_trace(), trace);
    // Spot checks written out by hand, independent of the builder above.
    assert_eq!(trace.events.len(), 9);
    assert_eq!(trace.events[1].kind, EventKind::Alloc);
    assert_eq!(trace.events[1].address, 0x7f3a_0000_0000);
    assert_eq!(trace.events[1].requested_bytes(), (4 << 20) - 100);
    assert_eq!(trace.events[5].address, u64::MAX - 4095);
    assert_eq!(trace.events[5].device, DeviceId::HOST);
    assert_eq!(trace.segments[0].blocks.len(), 3);
    assert_eq!(trace.ooms[0].device_free_bytes, Some(1 << 30));
    assert_eq!(trace.ooms[1].device_free_bytes, None);
    assert_eq!(trace.interner.resolve(trace.tags[0].name), "layers.0.attn.q_proj.weight");
    assert_eq!(trace.metadata.devices[1].total_memory_bytes, Some(85_520_809_984));
}

#[test]
fn many_events_span_several_chunks() {
    let mut trace = Trace::default();
    let mut time = 1_000_000i64;
    for i in 0..(vtrace::EVENTS_PER_CHUNK as u64 * 2 + 17) {
        time += (i % 7) as i64 * 1_000;
        let kind = if i.is_multiple_of(2) { EventKind::Alloc } else { EventKind::FreeCompleted };
        trace.events.push(Event::new(kind, time, (i % 3) as i16, 0x7000_0000_0000 + (i / 2) * 512, 512 * (1 + i % 5)));
    }
    let bytes = encode(&trace);
    let loaded = vtrace::read(&bytes, &NoProgress).unwrap();
    assert_eq!(loaded.damage, None);
    assert_eq!(loaded.trace.events, trace.events);
    // Delta encoding plus zstd: far below the 56 bytes an event takes in memory.
    assert!(bytes.len() < trace.events.len() * 4, "{} bytes for {} events", bytes.len(), trace.events.len());
}

#[test]
fn truncation_anywhere_keeps_every_whole_chunk() {
    let trace = common::small_trace();
    let bytes = encode(&trace);
    let offsets = chunk_offsets(&bytes);
    for cut in 0..bytes.len() {
        let prefix = &bytes[..cut];
        match vtrace::read(prefix, &NoProgress) {
            Ok(loaded) => {
                let damage = loaded.damage.expect("a cut file is reported as damaged or unfinished");
                // Damage is reported at the start of the chunk the cut falls in.
                let chunk_start = offsets.iter().copied().filter(|&o| o <= cut).max().unwrap();
                assert_eq!(damage.offset as usize, chunk_start, "cut at {cut}");
                assert_eq!(damage.bytes_lost as usize, cut - chunk_start);
            }
            Err(Error::Vtrace { offset: 0, .. }) => assert!(cut < HEADER_BYTES),
            Err(other) => panic!("cut at {cut}: unexpected error {other}"),
        }
    }
    // Cutting right after the events chunks keeps all events.
    let events_end = offsets.windows(2).filter(|w| bytes[w[0]] == 6).map(|w| w[1]).max().unwrap();
    let loaded = vtrace::read(&bytes[..events_end], &NoProgress).unwrap();
    assert_eq!(loaded.trace.events, trace.events);
    assert!(loaded.damage.unwrap().to_string().contains("cut short"));
}

#[test]
fn corruption_anywhere_is_detected_without_panicking() {
    let bytes = encode(&common::small_trace());
    let offsets = chunk_offsets(&bytes);
    for position in HEADER_BYTES..bytes.len() {
        for flip in [0x01u8, 0x80] {
            let mut damaged = bytes.clone();
            damaged[position] ^= flip;
            let loaded = vtrace::read(&damaged, &NoProgress).unwrap();
            let damage = loaded.damage.expect("a flipped bit is detected");
            let chunk_start = offsets.iter().copied().filter(|&o| o <= position).max().unwrap();
            // A flipped length can make the reader stop at this chunk; either way no later
            // chunk is trusted.
            assert!(damage.offset as usize <= chunk_start, "flip at {position}");
        }
    }
}

#[test]
fn header_problems_are_errors() {
    let bytes = encode(&common::small_trace());
    assert!(matches!(vtrace::read(&bytes[..10], &NoProgress), Err(Error::Vtrace { .. })));
    let mut newer = bytes.clone();
    newer[8] = 9;
    match vtrace::read(&newer, &NoProgress) {
        Err(Error::VtraceVersion { found: 9, supported: 1 }) => {}
        other => panic!("{other:?}"),
    }
    let mut wrong = bytes;
    wrong[1] = b'X';
    assert!(matches!(vtrace::read(&wrong, &NoProgress), Err(Error::Vtrace { offset: 0, .. })));
}

#[test]
fn data_after_the_end_marker_is_reported() {
    let mut bytes = encode(&common::small_trace());
    let end = bytes.len();
    bytes.extend_from_slice(b"garbage appended by something else");
    let loaded = vtrace::read(&bytes, &NoProgress).unwrap();
    assert_eq!(loaded.damage.unwrap().offset as usize, end);
    assert_eq!(loaded.trace.events.len(), 9);
}

#[test]
fn streaming_writer_interleaves_tables_and_records() {
    // A recorder interns as it goes: each events chunk must be preceded by the strings, frames
    // and stacks it uses.
    let mut trace = common::small_trace();
    let mut writer = vtrace::Writer::new(Vec::new(), &trace.metadata).unwrap();
    let mut written = Vec::new();
    for round in 0..3u64 {
        let name = trace.interner.string(&format!("fn_{round}"));
        let file = trace.interner.string("train.py");
        let frame = trace.interner.frame(vramscope_trace_format::Frame { function: name, file, line: round as u32 });
        let stack = trace.interner.stack(&[frame]);
        let mut e = Event::new(EventKind::Alloc, 10 + round as i64, 0, 0x1000 * (round + 1), 512);
        e.stack = stack;
        writer.write_events(&trace.interner, &[e]).unwrap();
        written.push(e);
    }
    let bytes = writer.finish().unwrap();
    let loaded = vtrace::read(&bytes, &NoProgress).unwrap();
    assert_eq!(loaded.damage, None);
    assert_eq!(loaded.trace.events, written);
    let last = loaded.trace.events[2].stack;
    let frame = loaded.trace.interner.frames_of(last)[0];
    let function = loaded.trace.interner.frame_of(frame).unwrap().function;
    assert_eq!(loaded.trace.interner.resolve(function), "fn_2");
}

#[test]
fn unknown_chunks_are_skipped_undecoded_and_decoding_is_bounded_by_memory() {
    let trace = common::small_trace();
    let valid = encode(&trace);
    // 100,000 chunks of a kind this build does not know, each a tiny zstd frame of 8 KiB: 800 MB
    // to inflate from 3 MB, far past the decode budget if they were inflated and counted.
    let frame = zstd::bulk::compress(&[0u8; 8192], 19).expect("zstd");
    let unknown = chunk(200, 1, &frame, 8192);
    let mut bytes = valid[..HEADER_BYTES].to_vec();
    for _ in 0..100_000 {
        bytes.extend_from_slice(&unknown);
    }
    bytes.extend_from_slice(&valid[HEADER_BYTES..]);
    let started = std::time::Instant::now();
    let loaded = vtrace::read(&bytes, &NoProgress).expect("read");
    assert!(loaded.damage.is_none(), "{:?}", loaded.damage);
    common::assert_same(&loaded.trace, &trace);
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
    // A chunk of a known kind that inflates to 256 MiB from a few hundred KB is no longer refused
    // for its ratio: it is inflated and read (here it is damage, zeros are no valid strings chunk).
    let huge = zstd::bulk::compress(&vec![0u8; 256 << 20], 1).expect("zstd");
    let mut bytes = valid[..valid.len() - CHUNK_HEADER_BYTES].to_vec();
    bytes.extend_from_slice(&chunk(2, 1, &huge, 256 << 20));
    let loaded = vtrace::read(&bytes, &NoProgress).expect("read");
    let damage = loaded.damage.expect("damage reported");
    assert!(damage.reason.starts_with("strings chunk starts at id 0"), "{}", damage.reason);
    common::assert_same(&loaded.trace, &trace);
    // Within less memory than its inflating takes, it is refused before that, by name.
    match vtrace::read_within(&bytes, &NoProgress, Limit::bytes(64 << 20)) {
        Err(Error::Memory { needed_bytes, limit, .. }) => {
            assert!(needed_bytes >= 256 << 20, "{needed_bytes}");
            assert_eq!(limit.bytes, 64 << 20);
        }
        other => panic!("expected a memory error, got {:?}", other.map(|l| l.damage)),
    }
}

#[test]
fn a_repetitive_trace_reads_back_whole_however_well_it_compresses() {
    // Two million alike events compress about a thousandfold: the file is a few KB, the model
    // over a hundred MB. Whatever the writer writes reads back.
    let mut trace = common::small_trace();
    trace.events = (0..2_000_000u64)
        .map(|i| {
            let kind = if i % 2 == 0 { EventKind::Alloc } else { EventKind::FreeCompleted };
            Event::new(kind, i as i64 * 10, 0, 0x7f00_0000_0000, 512)
        })
        .collect();
    let bytes = encode(&trace);
    let model = trace.events.len() * size_of::<Event>();
    assert!(bytes.len() * 1000 < model, "{} bytes for {model} of events", bytes.len());
    let loaded = vtrace::read(&bytes, &NoProgress).expect("read");
    assert_eq!(loaded.damage, None);
    common::assert_same(&loaded.trace, &trace);
    // The limit is the memory the records take, counted from the counts the chunks declare.
    match vtrace::read_within(&bytes, &NoProgress, Limit::bytes(model as u64 / 2)) {
        Err(e @ Error::Memory { .. }) => {
            let message = e.to_string();
            assert!(message.contains("needs more memory than this machine has available"), "{message}");
            assert!(message.contains("MiB may be used"), "{message}");
        }
        other => panic!("expected a memory error, got {:?}", other.map(|l| l.damage)),
    }
    assert!(vtrace::read_within(&bytes, &NoProgress, Limit::bytes(model as u64 * 2)).is_ok());
}
