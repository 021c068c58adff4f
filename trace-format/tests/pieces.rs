//! A snapshot pickle run in pieces in parallel reads exactly as run in one go: real snapshots
//! from GPU runs and pickles written by CPython's own pickler (several devices, annotations,
//! OOMs, contexts, frames shared and fresh, entries of odd shapes), cut into 2 to 8 pieces;
//! damaged ones fail or recover the same way. Each is also read with its trace entries read by
//! their keys and values instead of field by field: the same again.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use vramscope_trace_format::import::snapshot::{
    BUILT_IN_HALVES, import_snapshot, import_snapshot_by_pairs, import_snapshot_in_pieces, import_snapshot_on_threads,
};
use vramscope_trace_format::{Imported, NoProgress};

/// Everything a read snapshot says, ids and all, as text.
fn canonical(imported: &Imported) -> String {
    let t = &imported.trace;
    let mut out = String::new();
    let i = &t.interner;
    writeln!(out, "strings {:?}", i.strings().collect::<Vec<_>>()).unwrap();
    writeln!(out, "frames {:?}", i.frames()).unwrap();
    writeln!(out, "stacks {:?}", i.stacks().collect::<Vec<_>>()).unwrap();
    writeln!(out, "contexts {:?}", i.contexts()).unwrap();
    writeln!(out, "metadata {:?}", t.metadata).unwrap();
    writeln!(out, "segments {:?}", t.segments).unwrap();
    writeln!(out, "annotations {:?}", t.annotations).unwrap();
    writeln!(out, "ooms {:?}", t.ooms).unwrap();
    writeln!(out, "warnings {:?}", imported.warnings).unwrap();
    for e in &t.events {
        writeln!(out, "{e:?}").unwrap();
    }
    out
}

/// Reads `data` in one go and in 2 to 8 pieces; all must agree. Returns the most pieces any
/// run took in, and how many events were read.
fn agrees(name: &str, data: &[u8]) -> (usize, usize) {
    let whole = import_snapshot(data, &NoProgress);
    // Trace entries read field by field (the fast path) read as their keys and values do.
    match (&whole, import_snapshot_by_pairs(data)) {
        (Ok(fast), Ok(pairs)) => {
            let (a, b) = (canonical(fast), canonical(&pairs));
            let line = a.lines().zip(b.lines()).position(|(x, y)| x != y);
            assert!(a == b, "{name}: entries read field by field differ (first difference at line {line:?})");
        }
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{name}: read by pairs"),
        (a, b) => panic!("{name}: {:?} field by field, {:?} by pairs", a.is_ok(), b.is_ok()),
    }
    let mut most = 0;
    for pieces in [2, 3, 5, 8] {
        let split = import_snapshot_in_pieces(data, pieces);
        match (&whole, split) {
            (Ok(whole), Ok((split, taken))) => {
                let (a, b) = (canonical(whole), canonical(&split));
                if a != b {
                    let line = a.lines().zip(b.lines()).position(|(x, y)| x != y);
                    panic!("{name} in {pieces} pieces reads differently (first difference at line {line:?})");
                }
                most = most.max(taken);
            }
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{name} in {pieces} pieces"),
            (a, b) => panic!("{name} in {pieces} pieces: {:?} in one go, {:?} in pieces", a.is_ok(), b.is_ok()),
        }
    }
    (most, whole.map_or(0, |w| w.trace.events.len()))
}

#[test]
fn real_snapshots_read_the_same_in_pieces() {
    // Found at run time: a target directory shared between clones can hold this test built in
    // another clone, whose compile-time path would point there.
    let root = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf(), std::path::PathBuf::from);
    let dir = root.join("../../shared/fixtures/pytorch-snapshots");
    let mut read = 0;
    for entry in std::fs::read_dir(&dir).expect("the shared fixtures") {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let (taken, events) = agrees(&path.display().to_string(), &data);
        // Any snapshot whose trace spans a few pickle frames is cut and taken in.
        if data.len() > 400_000 && events > 1000 {
            assert!(taken >= 1, "{} was never read in pieces", path.display());
            read += 1;
        }
    }
    assert!(read >= 3, "only {read} fixtures were large enough to cut");
}

/// A snapshot pickled by CPython itself: `devices` devices, `entries` entries each, and `notes`
/// `record_function` ranges.
fn cpython_snapshot(dir: &Path, entries: usize, devices: usize, protocol: u8, notes: usize) -> Vec<u8> {
    let script = r#"
import pickle, random, sys
entries, devices, protocol, out, ranges = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
rng = random.Random(7)
frames = [{'name': f'fn_{i}', 'filename': f'/src/model_{i % 40}.py', 'line': 10 + i} for i in range(300)]
fx = {'name': 'forward', 'filename': '<eval_with_key>.3', 'line': 9, 'fx_node_op': 'call_function',
      'fx_node_name': 'add_1', 'fx_node_target': 'aten.add.Tensor', 'fx_original_trace': 'x = a + b'}
shared = [[rng.choice(frames) for _ in range(rng.randint(1, 12))] for _ in range(50)]
traces, segments = [], []
for d in range(devices):
    trace, live, t = [], {}, 1_700_000_000_000_000
    base = 0x7f0000000000 + d * 0x100000000
    for i in range(entries):
        t += rng.randint(0, 40)
        r = rng.random()
        if r < 0.45 or not live:
            addr = base + i * 512
            size = rng.choice([512, 4096, 1 << 20, 3 << 20])
            kind = rng.random()
            if kind < 0.3:
                stack = rng.choice(shared)
            elif kind < 0.5:
                stack = [rng.choice(frames) for _ in range(rng.randint(0, 3))]
            elif kind < 0.52:
                stack = [fx, rng.choice(frames)]
            else:
                stack = [dict(f) for f in rng.choice(shared)]
            e = {'action': 'alloc', 'addr': addr, 'size': size, 'stream': 0, 'time_us': t, 'frames': stack}
            if rng.random() < 0.05:
                e['compile_context'] = f'[0/{i % 3}]'
            if rng.random() < 0.05:
                e['user_metadata'] = 'step %d' % (i // 1000)
            live[addr] = (size, stack)
            trace.append(e)
        elif r < 0.9:
            addr = rng.choice(list(live))
            size, stack = live.pop(addr)
            trace.append({'action': 'free_requested', 'addr': addr, 'size': size, 'stream': 0, 'time_us': t, 'frames': stack})
            trace.append({'action': 'free_completed', 'addr': addr, 'size': size, 'stream': 0, 'time_us': t, 'frames': stack})
        elif r < 0.93:
            trace.append({'action': 'segment_alloc', 'addr': base + (i << 21), 'size': 2 << 20, 'stream': 0, 'time_us': t, 'frames': []})
        elif r < 0.935:
            trace.append({'action': 'oom', 'addr': 0, 'size': 1 << 30, 'stream': 0, 'time_us': t, 'frames': rng.choice(shared), 'device_free': 12345})
        elif r < 0.94:
            trace.append({'action': 'snapshot', 'addr': 0, 'size': 0, 'stream': 0, 'time_us': t, 'frames': []})
        elif r < 0.945:
            trace.append({'action': 'mystery_action', 'addr': 1, 'size': 2, 'stream': 0, 'time_us': t, 'frames': []})
        elif r < 0.96:
            # Entries of unusual shapes: what the fast reading of entries gives up on, and what
            # it must read as the general path does.
            e = {'action': 'alloc', 'addr': base + i * 512, 'size': 512, 'stream': 0, 'time_us': t, 'frames': rng.choice(shared)}
            odd = rng.randrange(8)
            if odd == 0: e['time_us'] = None
            elif odd == 1: e['time_us'] = float(t)
            elif odd == 2: e['stream'] = -7
            elif odd == 3: e = dict(reversed(list(e.items())))
            elif odd == 4: e['a_future_key'] = 'x'
            elif odd == 5: e['frames'] = None
            elif odd == 6: e['addr'] = (1 << 64) - 4096 * (i + 1)
            else: e['size'] = (1 << 64) - 1
            trace.append(e)
    traces.append(trace)
    blocks = [{'address': a, 'size': s, 'requested_size': s, 'state': 'active_allocated', 'frames': f} for a, (s, f) in sorted(live.items())[:200]]
    segments.append({'device': d, 'address': base, 'total_size': 1 << 30, 'allocated_size': 0, 'active_size': 0,
                     'requested_size': 0, 'stream': 0, 'segment_type': 'large', 'segment_pool_id': (0, 0),
                     'is_expandable': False, 'frames': [], 'blocks': blocks})
# record_function ranges: where they are many, the pieces cut them too. One record with a key of
# its own and one that is not a dict are read as the generic path reads them.
notes = []
for i in range(ranges):
    name = rng.choice(['fwd', 'bwd', 'Optimizer.step#Adam.step', 'data'])
    start = 1_700_000_000_000_000 + 40 * i
    notes.append({'stage': 'START', 'name': name, 'device': i % devices, 'time_us': start})
    notes.append({'stage': 'END', 'name': name, 'device': i % devices, 'time_us': start + 30})
notes.insert(len(notes) // 3, {'stage': 'START', 'name': 'odd', 'device': 0, 'time_us': 5, 'note': 'extra'})
notes.insert(len(notes) // 2, ['not', 'a', 'dict'])
snapshot = {'segments': segments, 'device_traces': traces,
            'allocator_settings': {'PYTORCH_CUDA_ALLOC_CONF': 'expandable_segments:True'},
            'external_annotations': notes}
with open(out, 'wb') as f:
    pickle.dump(snapshot, f, protocol=protocol)
"#;
    let out = dir.join(format!("cpython_{entries}_{devices}_{protocol}_{notes}.pickle"));
    let status = Command::new("python3")
        .args(["-c", script, &entries.to_string(), &devices.to_string(), &protocol.to_string()])
        .arg(&out)
        .arg(notes.to_string())
        .status()
        .expect("python3 runs");
    assert!(status.success());
    std::fs::read(out).unwrap()
}

#[test]
fn cpython_pickles_read_the_same_in_pieces() {
    let dir = tempfile::tempdir().unwrap();
    for (entries, devices, protocol) in [(40_000, 1, 4), (25_000, 3, 4), (30_000, 2, 5), (300, 2, 4)] {
        let data = cpython_snapshot(dir.path(), entries, devices, protocol, entries / 2);
        let (taken, events) = agrees(&format!("{entries} x {devices} (protocol {protocol})"), &data);
        assert!(events > entries / 2);
        if entries >= 10_000 {
            assert!(taken >= 1, "{entries} x {devices} was never read in pieces");
        }
    }
}

#[test]
fn a_long_trace_builds_the_same_on_two_threads() {
    // More entries than three chunks of the entry store (65,536 each), one device: its first
    // and second halves are built side by side, frees of the second paired with allocations of
    // the first, times carried over the split for entries without one.
    let dir = tempfile::tempdir().unwrap();
    let data = cpython_snapshot(dir.path(), 220_000, 1, 4, 100);
    let one = import_snapshot_on_threads(&data, None).unwrap();
    let before = BUILT_IN_HALVES.load(std::sync::atomic::Ordering::Relaxed);
    let two = import_snapshot_on_threads(&data, Some(2)).unwrap();
    assert!(BUILT_IN_HALVES.load(std::sync::atomic::Ordering::Relaxed) > before, "not built in halves");
    let (a, b) = (canonical(&one), canonical(&two));
    let line = a.lines().zip(b.lines()).position(|(x, y)| x != y);
    assert!(a == b, "built on two threads, the trace differs (first difference at line {line:?})");
    // What the split must get right is there: frees paired across it, sizes known exactly
    // from the final state, OOMs and markers on both sides.
    let t = &one.trace;
    let middle = t.events[t.events.len() / 2].time_ns;
    assert!(t.ooms.iter().any(|o| o.time_ns < middle) && t.ooms.iter().any(|o| o.time_ns > middle));
    assert!(t.events.iter().any(|e| e.flags & vramscope_trace_format::event_flags::SIZE_ESTIMATED == 0
        && e.kind == vramscope_trace_format::EventKind::Alloc));
}

#[test]
fn record_function_ranges_are_read_in_pieces() {
    // A short trace and a long list of ranges: the cuts fall among the ranges.
    let dir = tempfile::tempdir().unwrap();
    let data = cpython_snapshot(dir.path(), 300, 1, 4, 60_000);
    let (taken, _) = agrees("60,000 ranges", &data);
    assert!(taken >= 1, "the ranges were never read in pieces");
    let imported = import_snapshot(&data, &NoProgress).unwrap();
    assert!(imported.trace.annotations.len() >= 60_000, "{} ranges", imported.trace.annotations.len());
}

#[test]
fn damaged_pickles_fail_or_recover_the_same_in_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let data = cpython_snapshot(dir.path(), 30_000, 2, 4, 10_000);
    // Cut short, and single bytes changed throughout (in the first piece, in later ones).
    let mut cases = vec![data[..data.len() / 2].to_vec(), data[..data.len() - 1].to_vec()];
    for k in 1..12 {
        let mut bad = data.clone();
        let at = data.len() * k / 12;
        bad[at] = bad[at].wrapping_add(1 + k as u8);
        cases.push(bad);
    }
    for (n, case) in cases.iter().enumerate() {
        agrees(&format!("damaged case {n}"), case);
    }
}
