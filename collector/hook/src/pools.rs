//! Stream-ordered memory pools (`cuMemAllocAsync`, `cuMemAllocFromPoolAsync`).
//!
//! A pool keeps what a stream-ordered free returns and hands it out again; it gives memory back
//! to the driver only at synchronisations (above its release threshold) and at
//! `cuMemPoolTrimTo`. What the pool reserves is the memory the process really holds, so the hook
//! asks the driver for it (`CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`) after each stream-ordered
//! allocation and free, after a trim and after a synchronisation, and records it when it changed
//! ([`Api::PoolReserved`]). Pools are remembered in a small fixed table the first time one of
//! their allocations is seen; until then a synchronisation costs one atomic load.
//!
//! Threads racing on one pool can record its values out of order; the next change corrects it.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

use vramscope_wire::Api;

use crate::{CuResult, emit};

/// Pools remembered; further ones are not followed (programs use one per device, or a few).
const MAX_POOLS: usize = 16;
/// `CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`.
const RESERVED_MEM_CURRENT: c_int = 5;

static ANY: AtomicBool = AtomicBool::new(false);
/// Pool handles (0: free slot).
static HANDLES: [AtomicU64; MAX_POOLS] = [const { AtomicU64::new(0) }; MAX_POOLS];
static DEVICES: [AtomicI32; MAX_POOLS] = [const { AtomicI32::new(0) }; MAX_POOLS];
/// The reserved bytes last recorded, plus one (0: none yet).
static REPORTED: [AtomicU64; MAX_POOLS] = [const { AtomicU64::new(0) }; MAX_POOLS];

/// The pool a `cuMemAllocAsync` on `device` drew from: the device's current pool.
pub(crate) fn current_pool(device: i32) -> u64 {
    type GetMemPoolFn = unsafe extern "C" fn(*mut *mut c_void, c_int) -> CuResult;
    let Some(get) = crate::real!(REAL_GET_MEM_POOL, "cuDeviceGetMemPool\0", GetMemPoolFn) else { return 0 };
    let mut pool: *mut c_void = std::ptr::null_mut();
    // SAFETY: `pool` is valid to write; the call is not recorded (the caller is inside the hook).
    if unsafe { get(&mut pool, device) } == 0 { pool as u64 } else { 0 }
}

/// Remembers `pool` (on `device`) and records what every known pool reserves now.
pub(crate) fn note_and_report(pool: u64, device: i32) {
    if pool != 0 {
        let known = HANDLES.iter().any(|h| h.load(Ordering::Acquire) == pool);
        if !known {
            for (slot, handle) in HANDLES.iter().enumerate() {
                if handle.compare_exchange(0, pool, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    DEVICES[slot].store(device, Ordering::Release);
                    ANY.store(true, Ordering::Release);
                    break;
                }
                if handle.load(Ordering::Acquire) == pool {
                    break;
                }
            }
        }
    }
    report();
}

/// Records the reserved bytes of each known pool whose value changed since it was last recorded.
pub(crate) fn report() {
    if !ANY.load(Ordering::Acquire) {
        return;
    }
    type GetAttributeFn = unsafe extern "C" fn(*mut c_void, c_int, *mut c_void) -> CuResult;
    let Some(get) = crate::real!(REAL_POOL_GET_ATTRIBUTE, "cuMemPoolGetAttribute\0", GetAttributeFn) else {
        return;
    };
    for (slot, handle) in HANDLES.iter().enumerate() {
        let pool = handle.load(Ordering::Acquire);
        if pool == 0 {
            break;
        }
        let mut reserved: u64 = 0;
        // SAFETY: a pool handle the driver handed out (or the program passed to it); the
        // attribute is a 64-bit value written to `reserved`.
        let result = unsafe { get(pool as *mut c_void, RESERVED_MEM_CURRENT, (&raw mut reserved).cast()) };
        if result != 0 {
            continue;
        }
        if REPORTED[slot].swap(reserved.saturating_add(1), Ordering::AcqRel) != reserved.saturating_add(1) {
            emit(Api::PoolReserved, 0, DEVICES[slot].load(Ordering::Acquire), pool, reserved, 0);
        }
    }
}
