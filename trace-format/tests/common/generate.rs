//! Structure-aware generators, driven by arbitrary bytes, for the fuzz targets (which include
//! this file by path) and for the property tests: valid pickle opcode streams that build
//! snapshot-shaped dicts, with shared references, wrong types and large counts mixed in, and
//! `.vtrace` files whose chunks carry valid checksums around arbitrary payloads, so that the
//! fuzzer's bytes reach the importers' logic instead of stopping at the first header check.

#![allow(dead_code)]

/// Choices taken from the input bytes; zeros once they run out.
pub struct Choices<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Choices<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    pub fn byte(&mut self) -> u8 {
        let b = self.bytes.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u32) -> u32 {
        if n == 0 {
            return 0;
        }
        let v = u32::from_le_bytes([self.byte(), self.byte(), 0, 0]);
        v % n
    }

    pub fn u64(&mut self) -> u64 {
        let mut v = 0u64;
        for _ in 0..8 {
            v = (v << 8) | u64::from(self.byte());
        }
        v
    }

    pub fn done(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    /// The rest of the input, at most `n` bytes.
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let start = self.pos.min(self.bytes.len());
        let end = start.saturating_add(n).min(self.bytes.len());
        self.pos = end;
        &self.bytes[start..end]
    }
}

/// A pickle being written, with the memo's size tracked so that references stay valid.
struct Pickle {
    out: Vec<u8>,
    memo: u32,
    /// Memo indices of containers built so far, to refer to again.
    shared: Vec<u32>,
}

impl Pickle {
    fn op(&mut self, op: u8) {
        self.out.push(op);
    }

    fn memoize(&mut self) -> u32 {
        self.op(0x94);
        self.memo += 1;
        self.memo - 1
    }

    fn get(&mut self, index: u32) {
        if index < 256 {
            self.out.extend_from_slice(&[b'h', index as u8]);
        } else {
            self.op(b'j');
            self.out.extend_from_slice(&index.to_le_bytes());
        }
    }

    fn text(&mut self, s: &str) {
        self.op(0x8c);
        self.out.push(s.len().min(255) as u8);
        self.out.extend_from_slice(&s.as_bytes()[..s.len().min(255)]);
        self.memoize();
    }

    fn int(&mut self, v: u64) {
        if let Ok(small) = i32::try_from(v) {
            self.op(b'J');
            self.out.extend_from_slice(&small.to_le_bytes());
        } else {
            // LONG1 of 9 bytes: unsigned values above 2^63 need the sign byte.
            self.op(0x8a);
            self.out.push(9);
            self.out.extend_from_slice(&v.to_le_bytes());
            self.out.push(0);
        }
    }

    fn huge_int(&mut self) {
        self.op(0x8a);
        self.out.push(16);
        self.out.extend_from_slice(&[0x55; 16]);
    }
}

const ACTIONS: [&str; 11] = [
    "alloc",
    "free_requested",
    "free_completed",
    "segment_alloc",
    "segment_free",
    "segment_map",
    "segment_unmap",
    "snapshot",
    "oom",
    "annotate",
    "mystery",
];
const STATES: [&str; 4] = ["active_allocated", "active_pending_free", "inactive", "broken"];

/// Some value: usually what the key wants, sometimes another type or a shared reference.
fn value(p: &mut Pickle, c: &mut Choices<'_>, wanted: &dyn Fn(&mut Pickle, &mut Choices<'_>)) {
    match c.below(16) {
        0 => p.op(b'N'),
        1 => p.text("oops"),
        2 => p.huge_int(),
        3 if !p.shared.is_empty() => {
            let i = p.shared[c.below(p.shared.len() as u32) as usize];
            p.get(i);
        }
        4 => {
            p.op(b'}');
            p.memoize();
        }
        _ => wanted(p, c),
    }
}

fn frames(p: &mut Pickle, c: &mut Choices<'_>) {
    p.op(b']');
    let me = p.memoize();
    let n = c.below(4);
    if n > 0 {
        p.op(b'(');
        for _ in 0..n {
            p.op(b'}');
            p.memoize();
            p.op(b'(');
            p.text("name");
            p.text("forward");
            p.text("filename");
            p.text("model.py");
            p.text("line");
            p.int(u64::from(c.below(100)));
            p.op(b'u');
        }
        p.op(b'e');
    }
    p.shared.push(me);
}

fn entry(p: &mut Pickle, c: &mut Choices<'_>) {
    p.op(b'}');
    let me = p.memoize();
    p.op(b'(');
    p.text("action");
    let action = ACTIONS[c.below(ACTIONS.len() as u32) as usize];
    value(p, c, &|p, _| p.text(action));
    p.text("addr");
    value(p, c, &|p, c| p.int(0x7f00_0000_0000 + u64::from(c.below(64)) * 512));
    p.text("size");
    value(p, c, &|p, c| p.int(u64::from(c.below(1 << 16))));
    p.text("stream");
    p.int(0);
    if c.below(4) > 0 {
        p.text("time_us");
        p.int(u64::from(c.below(1 << 20)));
    }
    p.text("frames");
    value(p, c, &|p, c| frames(p, c));
    p.op(b'u');
    p.shared.push(me);
}

fn block(p: &mut Pickle, c: &mut Choices<'_>, address: u64, size: u64) {
    p.op(b'}');
    let me = p.memoize();
    p.op(b'(');
    if c.below(4) > 0 {
        p.text("address");
        p.int(address);
    }
    p.text("size");
    value(p, c, &|p, _| p.int(size));
    p.text("state");
    let state = STATES[c.below(STATES.len() as u32) as usize];
    value(p, c, &|p, _| p.text(state));
    if c.below(3) == 0 {
        p.text("history");
        p.op(b']');
        p.memoize();
    } else {
        p.text("requested_size");
        p.int(size / 2);
        p.text("frames");
        value(p, c, &|p, c| frames(p, c));
    }
    p.op(b'u');
    p.shared.push(me);
}

fn segment(p: &mut Pickle, c: &mut Choices<'_>) {
    p.op(b'}');
    let me = p.memoize();
    p.op(b'(');
    let address = 0x7f00_0000_0000 + u64::from(c.below(16)) * (1 << 24);
    let blocks = c.below(6);
    p.text("device");
    value(p, c, &|p, c| p.int(u64::from(c.below(3))));
    p.text("address");
    p.int(address);
    p.text("total_size");
    p.int(u64::from(blocks.max(1)) * 4096);
    p.text("segment_pool_id");
    p.op(b'K');
    p.out.push(c.byte() % 2);
    p.op(b'K');
    p.out.push(0);
    p.op(0x86);
    p.memoize();
    p.text("blocks");
    let list = |p: &mut Pickle, c: &mut Choices<'_>| {
        p.op(b']');
        let l = p.memoize();
        if blocks > 0 {
            p.op(b'(');
            for k in 0..blocks {
                block(p, c, address + u64::from(k) * 4096, 4096);
            }
            p.op(b'e');
        }
        p.shared.push(l);
    };
    value(p, c, &list);
    p.op(b'u');
    p.shared.push(me);
}

/// A pickle shaped like a snapshot, built from `input`.
pub fn snapshot_pickle(input: &[u8]) -> Vec<u8> {
    let mut c = Choices::new(input);
    let mut p = Pickle { out: vec![0x80, 4], memo: 0, shared: Vec::new() };
    p.op(b'}');
    p.memoize();
    p.op(b'(');
    p.text("segments");
    value(&mut p, &mut c, &|p, c| {
        p.op(b']');
        let me = p.memoize();
        let n = c.below(8);
        if n > 0 {
            p.op(b'(');
            for _ in 0..n {
                // A segment, or one named again.
                if c.below(5) == 0 && !p.shared.is_empty() {
                    let i = p.shared[c.below(p.shared.len() as u32) as usize];
                    p.get(i);
                } else {
                    segment(p, c);
                }
            }
            p.op(b'e');
        }
        p.shared.push(me);
    });
    p.text("device_traces");
    value(&mut p, &mut c, &|p, c| {
        p.op(b']');
        p.memoize();
        let devices = c.below(4);
        if devices > 0 {
            p.op(b'(');
            for _ in 0..devices {
                value(p, c, &|p, c| {
                    p.op(b']');
                    let me = p.memoize();
                    let n = c.below(40);
                    if n > 0 {
                        p.op(b'(');
                        for _ in 0..n {
                            entry(p, c);
                        }
                        p.op(b'e');
                    }
                    p.shared.push(me);
                });
            }
            p.op(b'e');
        }
    });
    if c.below(2) == 0 {
        p.text("allocator_settings");
        value(&mut p, &mut c, &|p, _| {
            p.op(b'}');
            p.memoize();
        });
    }
    p.op(b'u');
    p.op(b'.');
    p.out
}

/// A chunk with a valid checksum.
pub fn chunk(kind: u8, codec: u8, stored: &[u8], raw_len: u32) -> Vec<u8> {
    let mut header = vec![kind, codec, 0, 0];
    header.extend_from_slice(&(stored.len() as u32).to_le_bytes());
    header.extend_from_slice(&raw_len.to_le_bytes());
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&header);
    hasher.update(stored);
    header.extend_from_slice(&hasher.finalize().to_le_bytes());
    header.extend_from_slice(stored);
    header
}

/// A `.vtrace` of chunks with valid checksums: kinds and codecs chosen by `input`, payloads taken
/// from it (zstd-compressed where the codec says so), claimed sizes true or not.
pub fn vtrace_file(input: &[u8]) -> Vec<u8> {
    let mut c = Choices::new(input);
    let mut out = b"\x89VTRACE\n".to_vec();
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&[0; 6]);
    while !c.done() {
        let kind = match c.below(16) {
            13 => 200,
            k => (k % 12 + 1) as u8,
        };
        let len = c.below(512) as usize;
        let payload = c.take(len).to_vec();
        let compressed = c.below(2) == 1;
        let claim = if c.below(8) == 0 { c.below(1 << 16) } else { payload.len() as u32 };
        if compressed {
            let stored = zstd::bulk::compress(&payload, 1).unwrap_or_default();
            out.extend_from_slice(&chunk(kind, 1, &stored, claim));
        } else {
            out.extend_from_slice(&chunk(kind, 0, &payload, claim));
        }
    }
    out.extend_from_slice(&chunk(12, 0, &[], 0));
    out
}
