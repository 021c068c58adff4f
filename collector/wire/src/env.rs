//! The environment `vramscope record` sets for its workload, read by the hook library (Rust) and
//! the PyTorch shim (Python, `python/vramscope/_shim/vramscope_torch.py`, which spells the same names; a
//! test in `vramscope-collector` checks that it does).

/// The directory the hook and the shim write their records and logs into; the hook stays
/// dormant in a process without it.
pub const RECORD_DIR: &str = "VRAMSCOPE_RECORD_DIR";
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
