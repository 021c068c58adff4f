//! The environment `vramscope record` sets for its workload, read by the hook library (Rust) and
//! the PyTorch shim (Python, `python/vramscope/_shim/vramscope_torch.py`, which spells the same names; a
//! test in `vramscope-collector` checks that it does).

/// The directory the hook and the shim write their records and logs into; the hook stays
/// dormant in a process without it.
pub const RECORD_DIR: &str = "VRAMSCOPE_RECORD_DIR";
/// A flight recorder's directory: where no recording's directory is set, the hook keeps a ring of
/// fixed size per process there (`flight.<pid>.ring`, see [`crate::ring`]).
pub const FLIGHT: &str = "VRAMSCOPE_FLIGHT";
/// The bytes of each process's ring (with a recording's directory: keep a ring there instead of
/// a file that grows).
pub const FLIGHT_BYTES: &str = "VRAMSCOPE_FLIGHT_BYTES";
/// The time a ring should span at least, in ns (its segments begin at least that often over its
/// length); without it, a ring's segments begin only as they fill.
pub const FLIGHT_SPAN_NS: &str = "VRAMSCOPE_FLIGHT_SPAN_NS";
/// A ring's bytes where none are given: 64 MiB, a million driver calls.
pub const FLIGHT_DEFAULT_BYTES: u64 = 64 << 20;
/// Where the shim takes tensor allocations from: `auto`, `cuda`, `cpu` or `off`.
pub const TORCH: &str = "VRAMSCOPE_TORCH";
/// The hook library to load instead of the one beside the `vramscope` executable.
pub const HOOK: &str = "VRAMSCOPE_HOOK";
/// `vramscope estimate`: the GPU the program runs on, emulated (JSON: name, total_memory, major,
/// minor, multi_processor_count, count), read by the shim.
pub const EMULATE: &str = "VRAMSCOPE_EMULATE";
/// `vramscope estimate`: how many GPUs the emulation library says there are.
pub const EMULATE_COUNT: &str = "VRAMSCOPE_EMULATE_COUNT";
/// Every name the shim must read, for the check that it reads them.
pub const READ_BY_SHIM: [&str; 3] = [RECORD_DIR, TORCH, EMULATE];
