//! How much memory reading may take: what the system says it has available.

/// Memory the system has available to this process: `MemAvailable`, or what the cgroup's
/// `memory.max` leaves when that is less. `None` where neither can be read.
pub fn available() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        let line = m.lines().find(|l| l.starts_with("MemAvailable:"))?.to_owned();
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib.saturating_mul(1024))
    });
    let cgroup = (|| {
        let max: u64 = std::fs::read_to_string("/sys/fs/cgroup/memory.max").ok()?.trim().parse().ok()?;
        let current: u64 = std::fs::read_to_string("/sys/fs/cgroup/memory.current").ok()?.trim().parse().ok()?;
        Some(max.saturating_sub(current))
    })();
    match (meminfo, cgroup) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What one read may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// Bytes.
    pub bytes: u64,
    /// Whether it was set (by `VRAMSCOPE_MEMORY_LIMIT` or a caller) rather than read off the
    /// machine.
    pub set: bool,
}

impl Limit {
    /// `VRAMSCOPE_MEMORY_LIMIT` when set (a size such as `2G`), else nine tenths of
    /// [`available`], else none.
    pub fn of_machine() -> Self {
        if let Some(Ok(bytes)) = Self::from_environment() {
            return Self { bytes, set: true };
        }
        Self { bytes: available().map_or(u64::MAX, |a| a / 10 * 9), set: false }
    }

    /// `VRAMSCOPE_MEMORY_LIMIT` read as a size ([`crate::size::parse_size`]): `None` when it is
    /// not set, an error in words when it is not a size (the command says so before it reads
    /// anything; [`Limit::of_machine`] then goes by the machine).
    pub fn from_environment() -> Option<Result<u64, String>> {
        let value = std::env::var_os("VRAMSCOPE_MEMORY_LIMIT")?;
        Some(
            value
                .to_str()
                .ok_or_else(|| "VRAMSCOPE_MEMORY_LIMIT is not text".to_owned())
                .and_then(|text| crate::size::parse_size(text).map_err(|e| format!("VRAMSCOPE_MEMORY_LIMIT: {e}"))),
        )
    }

    /// A limit of `bytes`, set by the caller.
    pub fn bytes(bytes: u64) -> Self {
        Self { bytes, set: true }
    }
}
