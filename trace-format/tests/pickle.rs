//! The snapshot importer against hand-made and damaged pickles: it must refuse code, reject
//! hostile structure with a clear error, and never panic or hang.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use vramscope_trace_format::{Error, EventKind, NoProgress, import};

fn fixture(name: &str) -> Vec<u8> {
    let path = (std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")), std::path::PathBuf::from))
    .join("../../shared/fixtures/pytorch-snapshots")
    .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A tiny pickle writer for test input.
#[derive(Default)]
struct P(Vec<u8>);

impl P {
    fn proto(mut self, p: u8) -> Self {
        self.0.extend([0x80, p]);
        self
    }
    fn op(mut self, op: u8) -> Self {
        self.0.push(op);
        self
    }
    fn s(mut self, text: &str) -> Self {
        self.0.push(0x8c);
        self.0.push(text.len() as u8);
        self.0.extend_from_slice(text.as_bytes());
        self
    }
    fn int(mut self, v: u32) -> Self {
        self.0.push(b'J');
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn long(mut self, v: u64) -> Self {
        // LONG1 with a zero sign byte, so values >= 2^63 stay positive.
        self.0.extend([0x8a, 9]);
        self.0.extend_from_slice(&v.to_le_bytes());
        self.0.push(0);
        self
    }
    fn raw(mut self, bytes: &[u8]) -> Self {
        self.0.extend_from_slice(bytes);
        self
    }
    fn stop(mut self) -> Vec<u8> {
        self.0.push(b'.');
        self.0
    }
}

const MARK: u8 = b'(';
const EMPTY_DICT: u8 = b'}';
const EMPTY_LIST: u8 = b']';
const SETITEMS: u8 = b'u';
const APPENDS: u8 = b'e';
const APPEND: u8 = b'a';
const MEMOIZE: u8 = 0x94;

/// `{'segments': [], 'device_traces': [[entry]], 'allocator_settings': <settings>}` where
/// `settings` is spliced in as raw opcodes.
fn snapshot_with_settings(settings: P) -> Vec<u8> {
    let entry = P::default()
        .op(EMPTY_DICT)
        .op(MARK)
        .s("action")
        .s("alloc")
        .s("addr")
        .long(0xffff_ffff_ffff_f000)
        .s("size")
        .int(100)
        .s("stream")
        .int(0)
        .s("time_us")
        .int(5)
        .op(SETITEMS);
    P::default()
        .proto(4)
        .op(EMPTY_DICT)
        .op(MARK)
        .s("segments")
        .op(EMPTY_LIST)
        .s("device_traces")
        .op(EMPTY_LIST)
        .op(EMPTY_LIST)
        .raw(&entry.0)
        .op(APPEND)
        .op(APPEND)
        .s("allocator_settings")
        .raw(&settings.0)
        .op(SETITEMS)
        .stop()
}

fn load(bytes: &[u8]) -> Result<vramscope_trace_format::Imported, Error> {
    import(bytes, &NoProgress)
}

#[test]
fn a_minimal_snapshot_reads_with_unsigned_64_bit_addresses() {
    let imported = load(&snapshot_with_settings(P::default().op(b'N'))).unwrap();
    let trace = imported.trace;
    assert_eq!(trace.events.len(), 1);
    let e = trace.events[0];
    assert_eq!(e.kind, EventKind::Alloc);
    assert_eq!(e.address, 0xffff_ffff_ffff_f000);
    assert_eq!(e.requested_bytes(), 100);
    assert_eq!(e.size_bytes, 512, "rounded to the allocator's 512-byte blocks");
    assert_eq!(e.time_ns, 5_000);
}

#[test]
fn code_is_refused_never_run() {
    // `os.system('echo pwned')` the way pickle spells it.
    let global = P::default().proto(2).raw(b"cos\nsystem\n").s("echo pwned").op(0x85).op(b'R').stop();
    match load(&global) {
        Err(Error::UnsafePickle { opcode: "GLOBAL", offset: 2 }) => {}
        other => panic!("{other:?}"),
    }
    let stack_global = P::default().proto(4).s("os").s("system").op(0x93).stop();
    assert!(matches!(load(&stack_global), Err(Error::UnsafePickle { opcode: "STACK_GLOBAL", .. })));
    for (op, name) in [(b'b', "BUILD"), (0x81, "NEWOBJ"), (b'Q', "BINPERSID"), (0x97, "NEXT_BUFFER")] {
        let bytes = P::default().proto(5).op(EMPTY_DICT).op(op).stop();
        match load(&bytes) {
            Err(Error::UnsafePickle { opcode, .. }) => assert_eq!(opcode, name),
            other => panic!("{name}: {other:?}"),
        }
    }
    let message = load(&global).unwrap_err().to_string();
    assert!(message.contains("refusing") && message.contains("GLOBAL"), "{message}");
}

#[test]
fn hostile_structure_gives_clear_errors() {
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("memo out of range", P::default().proto(4).raw(&[b'h', 5]).stop(), "memo index 5 is out of range"),
        (
            "huge string length",
            P::default().proto(4).op(0x8d).raw(&(1u64 << 62).to_le_bytes()).stop(),
            "runs past the end of the file",
        ),
        (
            "huge memo put",
            P::default().proto(4).op(b'N').op(b'r').raw(&u32::MAX.to_le_bytes()).stop(),
            "beyond anything a pickle",
        ),
        ("no STOP", P::default().proto(4).op(EMPTY_DICT).0, "ends before the pickle's STOP"),
        ("empty stack", P::default().proto(4).op(APPEND).stop(), "stack is empty"),
        ("APPENDS without MARK", P::default().proto(4).op(EMPTY_LIST).op(APPENDS).stop(), "needs a MARK"),
        ("not a snapshot", P::default().proto(4).int(3).stop(), "not a PyTorch memory snapshot"),
        (
            "dict without snapshot keys",
            P::default().proto(4).op(EMPTY_DICT).s("a").int(1).op(b's').stop(),
            "without 'segments' or 'device_traces'",
        ),
        ("unknown opcode", P::default().proto(4).op(0xff).stop(), "unknown opcode 0xff"),
        ("protocol 6", P::default().proto(5).raw(&[0x80, 6]).stop(), "unsupported pickle protocol 6"),
    ];
    for (name, bytes, expected) in cases {
        let message = match load(&bytes) {
            Ok(_) => panic!("{name}: accepted"),
            Err(e) => e.to_string(),
        };
        assert!(message.contains(expected), "{name}: {message}");
    }
}

/// The message of the error, or of the warning that says which part was left out: a generic
/// part of the snapshot that is too deep or too big is dropped, the rest still read.
fn refused_or_left_out(bytes: &[u8]) -> String {
    match load(bytes) {
        Err(e) => e.to_string(),
        Ok(imported) => {
            let warning = imported.warnings.iter().find(|w| w.contains("left out")).cloned();
            warning.unwrap_or_else(|| panic!("accepted without a word: {:?}", imported.warnings))
        }
    }
}

#[test]
fn deep_nesting_and_cycles_are_bounded() {
    let started = Instant::now();
    // MARKs nested far deeper than any snapshot.
    let marks = P::default().proto(4).raw(&vec![MARK; 100_000]).stop();
    assert!(load(&marks).unwrap_err().to_string().contains("nested deeper"));
    // Lists nested 100,000 deep, in the generic part of the snapshot.
    let depth = 100_000;
    let deep = P::default().raw(&vec![EMPTY_LIST; depth]).raw(&vec![APPEND; depth - 1]);
    assert!(refused_or_left_out(&snapshot_with_settings(deep)).contains("nested deeper"));
    // A list that contains itself.
    let cycle = P::default().op(EMPTY_LIST).op(MEMOIZE).raw(&[b'h', 0]).op(APPEND);
    let message = refused_or_left_out(&snapshot_with_settings(cycle));
    assert!(message.contains("nested deeper") || message.contains("already consumed"), "{message}");
    // Shared references that would expand exponentially: L(n+1) = [L(n), L(n)].
    let mut dag = P::default().op(EMPTY_LIST).op(MEMOIZE).op(b'0');
    for level in 0..40u8 {
        dag = dag.op(EMPTY_LIST).op(MARK).raw(&[b'h', level, b'h', level]).op(APPENDS).op(MEMOIZE).op(b'0');
    }
    let dag = dag.raw(&[b'h', 40]);
    let message = refused_or_left_out(&snapshot_with_settings(dag));
    assert!(message.contains("too many values") || message.contains("nested deeper"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(20), "bounded work, took {:?}", started.elapsed());
}

#[test]
fn truncated_snapshots_fail_cleanly_at_every_cut() {
    let bytes = fixture("mosaic_output.pickle");
    let step = (bytes.len() / 400).max(1);
    for cut in (0..bytes.len()).step_by(step) {
        match load(&bytes[..cut]) {
            Ok(_) => panic!("a snapshot cut at {cut} of {} was accepted", bytes.len()),
            Err(e) => {
                let message = e.to_string();
                assert!(!message.is_empty());
            }
        }
    }
}

#[test]
fn corrupted_snapshots_never_panic() {
    let bytes = fixture("stanford_cs336_a2_memory_snapshot.pickle");
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..300 {
        // xorshift: reproducible positions and values without a dependency.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let mut damaged = bytes.clone();
        let position = (state % bytes.len() as u64) as usize;
        damaged[position] = (state >> 32) as u8;
        let _ = load(&damaged);
    }
}

#[test]
fn wrong_formats_are_named() {
    assert!(matches!(load(b""), Err(Error::Empty)));
    let message = load(b"PK\x03\x04 this is a zip").unwrap_err().to_string();
    assert!(message.contains("not a format vramscope reads"), "{message}");
    let message = load(b"{\"not\": \"a trace\"}").unwrap_err().to_string();
    assert!(message.contains("traceEvents"), "{message}");
    let message = load(b"[[1, 2], [[0, 1, 2, 3, 4, 5, 6, 7, 8]]]").unwrap_err().to_string();
    assert!(message.contains("2 times but 1 rows"), "{message}");
    let message = load(b"[[1, 2], [[0, 1]]]").unwrap_err().to_string();
    assert!(message.contains("sizes row 0 has 2 columns, expected 9"), "{message}");
    let message = load(b"\x1f\x8b\x08\x00garbage").unwrap_err().to_string();
    assert!(message.contains("gzip"), "{message}");
}

#[test]
fn empty_lists_in_generic_values_stay_empty_lists() {
    let settings = P::default().op(EMPTY_DICT).op(MEMOIZE).op(MARK).s("a").op(EMPTY_LIST).op(MEMOIZE).op(SETITEMS);
    let imported = load(&snapshot_with_settings(settings)).unwrap();
    assert_eq!(imported.trace.metadata.allocator_settings, serde_json::json!({"a": []}));
}

#[test]
fn external_annotations_are_read_however_many_there_are() {
    // A long run's record_function ranges: 300,000 START/END pairs, 2.4 million values in all,
    // past the bound on generic parts (settings, unknown keys). Written by CPython's pickle.
    let script = r#"
import pickle, sys
n = int(sys.argv[1])
trace = [{'action': 'alloc', 'addr': 4096, 'size': 512, 'stream': 0, 'time_us': 10, 'frames': []},
         {'action': 'free_completed', 'addr': 4096, 'size': 512, 'stream': 0, 'time_us': 30 * n + 20, 'frames': []}]
notes = []
for i in range(n):
    name = 'step' if i % 2 else 'forward'
    notes.append({'stage': 'START', 'name': name, 'device': 0, 'time_us': 20 + 30 * i})
    notes.append({'stage': 'END', 'name': name, 'device': 0, 'time_us': 35 + 30 * i})
notes.append({'stage': 'START', 'name': 'never_ended', 'device': 0, 'time_us': 15})
notes.append({'stage': 'MIDDLE', 'name': 'odd', 'device': 0, 'time_us': 16})
notes.append(['not', 'a', 'dict'])
sys.stdout.buffer.write(pickle.dumps({'segments': [], 'device_traces': [trace], 'external_annotations': notes}, protocol=4))
"#;
    let output = std::process::Command::new("python3").args(["-c", script, "300000"]).output().expect("python3 runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let imported = load(&output.stdout).expect("imported");
    assert!(!imported.warnings.iter().any(|w| w.contains("left out")), "{:?}", imported.warnings);
    assert!(imported.warnings.iter().any(|w| w.contains("2 external annotation records")), "{:?}", imported.warnings);
    let trace = &imported.trace;
    let named = |name: &str| trace.annotations.iter().filter(|a| trace.interner.resolve(a.name) == name).count();
    assert_eq!((named("forward"), named("step"), named("never_ended")), (150_000, 150_000, 1));
    let last = trace.annotations.iter().filter(|a| trace.interner.resolve(a.name) == "step").max_by_key(|a| a.start_ns);
    assert_eq!(last.map(|a| (a.start_ns, a.end_ns)), Some(((20 + 30 * 299_999) * 1000, (35 + 30 * 299_999) * 1000)));
}
