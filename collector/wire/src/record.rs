//! The records the hook library writes: one fixed-size little-endian record per driver call,
//! appended with a single `write(2)` to `events.<pid>.bin` in the recording directory, so a
//! process killed at any moment leaves every call it finished on disk.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `VSR1` |
//! | 4 | 2 | API ([`Api`]) |
//! | 6 | 2 | reserved (0) |
//! | 8 | 8 | time, ns of `CLOCK_MONOTONIC` |
//! | 16 | 4 | process id |
//! | 20 | 4 | thread id |
//! | 24 | 4 | device (-1 unknown) |
//! | 28 | 4 | the call's `CUresult` |
//! | 32 | 8 | address |
//! | 40 | 8 | size in bytes |
//! | 48 | 8 | stream |
//! | 56 | 8 | reserved (0) |

/// Bytes per record.
pub const RECORD_BYTES: usize = 64;
/// The first four bytes of every record.
pub const MAGIC: [u8; 4] = *b"VSR1";

/// The driver call a record describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Api {
    /// `cuMemAlloc_v2`: size in, address out.
    MemAlloc = 1,
    /// `cuMemFree_v2`: address in.
    MemFree = 2,
    /// `cuMemAllocAsync(_ptsz)` and `cuMemAllocFromPoolAsync(_ptsz)`: size and stream in,
    /// address out.
    MemAllocAsync = 3,
    /// `cuMemFreeAsync(_ptsz)`: address and stream in.
    MemFreeAsync = 4,
    /// `cuMemAllocPitch_v2`: the size is pitch x height.
    MemAllocPitch = 5,
    /// `cuMemAllocManaged`.
    MemAllocManaged = 6,
    /// `cuMemHostAlloc` and `cuMemAllocHost_v2`: pinned host memory (device -1).
    MemHostAlloc = 7,
    /// `cuMemFreeHost`.
    MemFreeHost = 8,
    /// `cuMemCreate`: physical memory; the address field holds the handle.
    MemCreate = 9,
    /// `cuMemRelease`: the address field holds the handle.
    MemRelease = 10,
    /// `cuMemMap`: physical memory mapped at an address.
    MemMap = 11,
    /// `cuMemUnmap`.
    MemUnmap = 12,
    /// `cuMemAddressReserve`: a virtual address range, no memory yet.
    AddressReserve = 13,
    /// `cuMemAddressFree`.
    AddressFree = 14,
    /// `cuCtxDestroy_v2` and `cuDevicePrimaryCtxReset_v2`: everything the context held is freed.
    ContextDestroy = 15,
    /// Not a call: a stream-ordered memory pool's reserved bytes changed (read with
    /// `cuMemPoolGetAttribute(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)` after stream-ordered
    /// allocations and frees, `cuMemPoolTrimTo` and synchronisations). The address field holds
    /// the pool's handle, the size the bytes it now reserves.
    PoolReserved = 16,
}

impl Api {
    /// The API stored as `value`, if it is one.
    pub fn from_u16(value: u16) -> Option<Self> {
        [
            Self::MemAlloc,
            Self::MemFree,
            Self::MemAllocAsync,
            Self::MemFreeAsync,
            Self::MemAllocPitch,
            Self::MemAllocManaged,
            Self::MemHostAlloc,
            Self::MemFreeHost,
            Self::MemCreate,
            Self::MemRelease,
            Self::MemMap,
            Self::MemUnmap,
            Self::AddressReserve,
            Self::AddressFree,
            Self::ContextDestroy,
            Self::PoolReserved,
        ]
        .into_iter()
        .find(|api| *api as u16 == value)
    }

    /// Whether the call hands out memory.
    pub fn allocates(self) -> bool {
        matches!(
            self,
            Self::MemAlloc | Self::MemAllocAsync | Self::MemAllocPitch | Self::MemAllocManaged | Self::MemHostAlloc
        )
    }
}

/// One driver call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Which call.
    pub api: Api,
    /// When it returned (ns, `CLOCK_MONOTONIC`).
    pub time_ns: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Device ordinal, -1 when unknown.
    pub device: i32,
    /// The `CUresult` returned.
    pub result: i32,
    /// Device address.
    pub address: u64,
    /// Bytes.
    pub size_bytes: u64,
    /// Stream handle (0: none).
    pub stream: u64,
}

impl Record {
    /// The record's bytes.
    pub fn encode(&self) -> [u8; RECORD_BYTES] {
        let mut out = [0u8; RECORD_BYTES];
        let mut put = |at: usize, bytes: &[u8]| {
            if let Some(slot) = out.get_mut(at..at + bytes.len()) {
                slot.copy_from_slice(bytes);
            }
        };
        put(0, &MAGIC);
        put(4, &(self.api as u16).to_le_bytes());
        put(8, &self.time_ns.to_le_bytes());
        put(16, &self.pid.to_le_bytes());
        put(20, &self.tid.to_le_bytes());
        put(24, &self.device.to_le_bytes());
        put(28, &self.result.to_le_bytes());
        put(32, &self.address.to_le_bytes());
        put(40, &self.size_bytes.to_le_bytes());
        put(48, &self.stream.to_le_bytes());
        out
    }

    /// Reads a record; `None` when the bytes are not one (a torn or foreign write).
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let take = |at: usize, n: usize| bytes.get(at..at + n);
        let u32_at = |at| take(at, 4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes);
        let u64_at = |at| take(at, 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
        if take(0, 4)? != MAGIC {
            return None;
        }
        let api = Api::from_u16(take(4, 2).and_then(|b| b.try_into().ok()).map(u16::from_le_bytes)?)?;
        Some(Self {
            api,
            time_ns: u64_at(8)?,
            pid: u32_at(16)?,
            tid: u32_at(20)?,
            device: u32_at(24)? as i32,
            result: u32_at(28)? as i32,
            address: u64_at(32)?,
            size_bytes: u64_at(40)?,
            stream: u64_at(48)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let r = Record {
            api: Api::MemFree,
            time_ns: u64::MAX - 3,
            pid: 77,
            tid: 78,
            device: -1,
            result: 2,
            address: 0x7f00_0000_1000,
            size_bytes: 1 << 40,
            stream: 9,
        };
        assert_eq!(Record::decode(&r.encode()), Some(r));
        let mut torn = r.encode();
        torn[0] = 0;
        assert_eq!(Record::decode(&torn), None);
        assert_eq!(Record::decode(&r.encode()[..40]), None);
    }
}
