//! How the process hands memory back.
//!
//! Loading a large trace frees big buffers while it builds others (a snapshot's entries go chunk
//! by chunk as its events are built). glibc's allocator serves blocks of a few MB from its heap
//! once one such block has been freed (it raises its mmap threshold as it goes), and memory freed
//! inside the heap stays resident: the entries a load has finished with would stay counted beside
//! the events that replace them. A fixed threshold keeps every block of 1 MiB and more in a
//! mapping of its own, returned to the kernel when it is freed.

/// Blocks at least this large get a mapping of their own.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const OWN_MAPPING_BYTES: i32 = 1 << 20;

/// Sets the allocator up as above; call once, first thing in `main`.
pub fn configure() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: mallopt only changes allocator parameters; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, OWN_MAPPING_BYTES);
    }
}

/// The process's peak and current resident memory as `/proc/self/status` gives them
/// (`VmHWM: ... kB, VmRSS: ... kB`), for `VRAMSCOPE_TIMINGS`; empty where there is no `/proc`.
pub fn resident_so_far() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let lines: Vec<String> = status
        .lines()
        .filter(|l| l.starts_with("VmHWM") || l.starts_with("VmRSS"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    lines.join(", ")
}
