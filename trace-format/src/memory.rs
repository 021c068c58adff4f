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

/// What the process's own limits leave of its address space: `RLIMIT_AS` (`ulimit -v`) less
/// what is mapped now, and `RLIMIT_DATA` less the data segment now, whichever is less (from
/// `/proc/self/limits` and `/proc/self/status`). `None` where neither is set or readable.
pub fn address_space_left() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let soft = |name: &str| -> Option<u64> {
        let rest = limits.lines().find_map(|l| l.strip_prefix(name))?;
        rest.split_whitespace().next()?.parse().ok()
    };
    let used = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kib| kib.saturating_mul(1024))
    };
    let address = soft("Max address space").map(|max| max.saturating_sub(used("VmSize:")));
    let data = soft("Max data size").map(|max| max.saturating_sub(used("VmData:")));
    match (address, data) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Where a [`Limit`] comes from, for the message that says it was reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitSource {
    /// `VRAMSCOPE_MEMORY_LIMIT`, or a caller that set it.
    Set,
    /// Nine tenths of the memory the system reports available ([`available`]).
    Available,
    /// Nine tenths of what the process's address-space limit leaves ([`address_space_left`]).
    AddressSpace,
}

/// What one read may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// Bytes.
    pub bytes: u64,
    /// Where it comes from.
    pub source: LimitSource,
}

impl Limit {
    /// `VRAMSCOPE_MEMORY_LIMIT` when set (a size such as `2G`), else nine tenths of
    /// [`available`] or of [`address_space_left`], whichever is less, else none.
    pub fn of_machine() -> Self {
        if let Some(Ok(bytes)) = Self::from_environment() {
            return Self { bytes, source: LimitSource::Set };
        }
        let available = Self { bytes: available().map_or(u64::MAX, |a| a / 10 * 9), source: LimitSource::Available };
        match address_space_left() {
            Some(left) if left / 10 * 9 < available.bytes => {
                Self { bytes: left / 10 * 9, source: LimitSource::AddressSpace }
            }
            _ => available,
        }
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
        Self { bytes, source: LimitSource::Set }
    }

    /// Where the limit comes from, said after the numbers in [`crate::Error::Memory`].
    pub fn why(&self) -> &'static str {
        match self.source {
            LimitSource::Set => " (VRAMSCOPE_MEMORY_LIMIT)",
            LimitSource::Available => {
                " (nine tenths of what the system reports available; VRAMSCOPE_MEMORY_LIMIT sets it)"
            }
            LimitSource::AddressSpace => {
                " (nine tenths of what this process's address-space limit, ulimit -v, leaves; VRAMSCOPE_MEMORY_LIMIT \
                 sets a lower one)"
            }
        }
    }
}

/// What a read builds from its input, counted against a [`Limit`] before it is allocated: a
/// vector that grows with what a file holds grows through [`Budget::grow`], which asks for the
/// room first (`try_reserve`) and refuses cleanly, naming what needed it, where the limit or the
/// allocator would not give it, instead of the process aborting.
#[derive(Debug)]
pub struct Budget {
    limit: Limit,
    used: std::cell::Cell<u64>,
    failed: std::cell::RefCell<Option<crate::Error>>,
}

impl Budget {
    /// A budget of `limit`, none of it used.
    pub fn new(limit: Limit) -> Self {
        Self { limit, used: std::cell::Cell::new(0), failed: std::cell::RefCell::new(None) }
    }

    /// Makes room in `vec` for one more item, if it is full: its capacity doubles (at least 256
    /// items), counted against the budget. `what` names the items in the error
    /// ("raw memory timeline records").
    pub fn grow<T>(&self, vec: &mut Vec<T>, what: &str) -> crate::Result<()> {
        if vec.len() < vec.capacity() {
            return Ok(());
        }
        let item = size_of::<T>().max(1) as u64;
        let more = vec.capacity().max(256);
        let added = (more as u64).saturating_mul(item);
        let used = self.used.get().saturating_add(added);
        let refuse = |needed_bytes: u64| {
            let error = || crate::Error::Memory { what: what.to_owned(), needed_bytes, limit: self.limit };
            *self.failed.borrow_mut() = Some(error());
            error()
        };
        if used > self.limit.bytes {
            return Err(refuse(used));
        }
        vec.try_reserve_exact(more).map_err(|_| refuse(used))?;
        self.used.set(used);
        Ok(())
    }

    /// The memory error a [`Budget::grow`] gave, if one did: for a caller whose parser turned
    /// it into a message of its own (a serde visitor's).
    pub fn take_failure(&self) -> Option<crate::Error> {
        self.failed.borrow_mut().take()
    }
}
