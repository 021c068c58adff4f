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

/// Parses a size such as `1073741824`, `512M`, `2G` or `1.5GiB`.
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale = match unit.trim().to_ascii_lowercase().trim_end_matches("ib").trim_end_matches('b') {
        "" => 1u64,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        _ => return None,
    };
    (number.is_finite() && number >= 0.0).then_some((number * scale as f64) as u64)
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
        if let Some(bytes) = std::env::var("VRAMSCOPE_MEMORY_LIMIT").ok().and_then(|v| parse_size(&v)) {
            return Self { bytes, set: true };
        }
        Self { bytes: available().map_or(u64::MAX, |a| a / 10 * 9), set: false }
    }

    /// A limit of `bytes`, set by the caller.
    pub fn bytes(bytes: u64) -> Self {
        Self { bytes, set: true }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_and_without_units() {
        assert_eq!(parse_size("1024"), Some(1024));
        assert_eq!(parse_size("512M"), Some(512 << 20));
        assert_eq!(parse_size("2G"), Some(2 << 30));
        assert_eq!(parse_size("1.5GiB"), Some(3 << 29));
        assert_eq!(parse_size("3 kb"), Some(3 << 10));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("5X"), None);
    }
}
