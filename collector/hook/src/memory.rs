//! The recording wrappers of the driver's memory functions, each twice: exported under the
//! driver's name (for programs linked to it) and as a private function that calls what the
//! resolver or `dlsym` handed out (stored in a slot), for programs that look functions up.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

use vramscope_wire::Api;

use crate::{CUDA_ERROR_NOT_INITIALIZED, CuDevicePtr, CuResult, emit, guarded, pools};

/// Device -1: host memory.
const HOST: i32 = -1;

/// Runs the real call and records it unless this thread is already inside the hook.
fn recorded(call: impl Fn() -> CuResult, record: impl FnOnce(CuResult)) -> CuResult {
    guarded(&call, || {
        let result = call();
        record(result);
        result
    })
}

/// Reads what the driver wrote through an out-pointer on success.
fn out<T: Copy + Default>(result: CuResult, pointer: *const T) -> T {
    if result == 0 && !pointer.is_null() {
        // SAFETY: on success the driver wrote a `T` there; the caller provided the pointer.
        unsafe { *pointer }
    } else {
        T::default()
    }
}

macro_rules! wrapper {
    ($name:ident, $resolved:ident, $slot:ident, ($($arg:ident : $ty:ty),*), |$result:ident| $record:expr) => {
        /// What the resolver or `dlsym` handed out for this function.
        pub(crate) static $slot: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

        /// The driver function of the same name, recorded.
        ///
        /// # Safety
        /// As the driver's.
        #[cfg_attr(not(test), unsafe(no_mangle))]
        #[cfg_attr(test, allow(dead_code))]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> CuResult {
            type F = unsafe extern "C" fn($($ty),*) -> CuResult;
            static REAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let address = crate::cached_address(&REAL, concat!(stringify!($name), "\0"));
            if address == 0 {
                return CUDA_ERROR_NOT_INITIALIZED;
            }
            // SAFETY: the driver's export of this name has the signature `F` spells out.
            let real = unsafe { std::mem::transmute::<usize, F>(address) };
            // SAFETY: the caller's arguments are passed through unchanged.
            recorded(|| unsafe { real($($arg),*) }, |$result| $record)
        }

        /// The same, calling what the resolver handed out.
        #[cfg_attr(test, allow(dead_code))]
        pub(crate) unsafe extern "C" fn $resolved($($arg: $ty),*) -> CuResult {
            type F = unsafe extern "C" fn($($ty),*) -> CuResult;
            let address = $slot.load(Ordering::Acquire);
            if address.is_null() {
                return CUDA_ERROR_NOT_INITIALIZED;
            }
            // SAFETY: only the resolver's answer for this function (same ABI) is stored here.
            let real = unsafe { std::mem::transmute::<*mut c_void, F>(address) };
            // SAFETY: the caller's arguments are passed through unchanged.
            recorded(|| unsafe { real($($arg),*) }, |$result| $record)
        }
    };
}

wrapper!(cuMemAlloc_v2, resolved_alloc, ALLOC, (dptr: *mut CuDevicePtr, size: usize), |r| {
    emit(Api::MemAlloc, r, 0, out(r, dptr), size as u64, 0)
});
wrapper!(cuMemFree_v2, resolved_free, FREE, (dptr: CuDevicePtr), |r| emit(Api::MemFree, r, 0, dptr, 0, 0));
wrapper!(
    cuMemAllocPitch_v2,
    resolved_alloc_pitch,
    ALLOC_PITCH,
    (dptr: *mut CuDevicePtr, pitch: *mut usize, width: usize, height: usize, element: c_uint),
    |r| emit(Api::MemAllocPitch, r, 0, out(r, dptr), (out(r, pitch) as u64).saturating_mul(height as u64), 0)
);
wrapper!(cuMemAllocManaged, resolved_alloc_managed, ALLOC_MANAGED, (dptr: *mut CuDevicePtr, size: usize, flags: c_uint), |r| {
    emit(Api::MemAllocManaged, r, 0, out(r, dptr), size as u64, 0)
});
wrapper!(cuMemAllocAsync, resolved_alloc_async, ALLOC_ASYNC, (dptr: *mut CuDevicePtr, size: usize, stream: *mut c_void), |r| {
    stream_ordered_alloc(r, out(r, dptr), size, None, stream)
});
wrapper!(
    cuMemAllocAsync_ptsz,
    resolved_alloc_async_ptsz,
    ALLOC_ASYNC_PTSZ,
    (dptr: *mut CuDevicePtr, size: usize, stream: *mut c_void),
    |r| stream_ordered_alloc(r, out(r, dptr), size, None, stream)
);
wrapper!(cuMemFreeAsync, resolved_free_async, FREE_ASYNC, (dptr: CuDevicePtr, stream: *mut c_void), |r| {
    emit(Api::MemFreeAsync, r, 0, dptr, 0, stream as u64);
    pools::report();
});
wrapper!(cuMemFreeAsync_ptsz, resolved_free_async_ptsz, FREE_ASYNC_PTSZ, (dptr: CuDevicePtr, stream: *mut c_void), |r| {
    emit(Api::MemFreeAsync, r, 0, dptr, 0, stream as u64);
    pools::report();
});
wrapper!(
    cuMemAllocFromPoolAsync,
    resolved_alloc_pool,
    ALLOC_POOL,
    (dptr: *mut CuDevicePtr, size: usize, pool: *mut c_void, stream: *mut c_void),
    |r| stream_ordered_alloc(r, out(r, dptr), size, Some(pool), stream)
);
wrapper!(
    cuMemAllocFromPoolAsync_ptsz,
    resolved_alloc_pool_ptsz,
    ALLOC_POOL_PTSZ,
    (dptr: *mut CuDevicePtr, size: usize, pool: *mut c_void, stream: *mut c_void),
    |r| stream_ordered_alloc(r, out(r, dptr), size, Some(pool), stream)
);
// What a pool reserves changes at a trim and, above its release threshold, at synchronisations.
wrapper!(cuMemPoolTrimTo, resolved_pool_trim, POOL_TRIM, (pool: *mut c_void, keep: usize), |_r| pools::report());
wrapper!(cuCtxSynchronize, resolved_ctx_sync, CTX_SYNC, (), |_r| pools::report());
wrapper!(cuStreamSynchronize, resolved_stream_sync, STREAM_SYNC, (stream: *mut c_void), |_r| pools::report());
wrapper!(cuStreamSynchronize_ptsz, resolved_stream_sync_ptsz, STREAM_SYNC_PTSZ, (stream: *mut c_void), |_r| {
    pools::report()
});
wrapper!(cuEventSynchronize, resolved_event_sync, EVENT_SYNC, (event: *mut c_void), |_r| pools::report());

/// Records a stream-ordered allocation, then what its pool (the device's current one unless
/// named) reserves.
fn stream_ordered_alloc(result: CuResult, address: u64, size: usize, pool: Option<*mut c_void>, stream: *mut c_void) {
    emit(Api::MemAllocAsync, result, 0, address, size as u64, stream as u64);
    if result == 0 {
        let device = crate::current_device();
        pools::note_and_report(pool.map_or_else(|| pools::current_pool(device), |p| p as u64), device);
    }
}

wrapper!(cuMemHostAlloc, resolved_host_alloc, HOST_ALLOC, (pp: *mut *mut c_void, size: usize, flags: c_uint), |r| {
    emit(Api::MemHostAlloc, r, HOST, out(r, pp.cast::<u64>()), size as u64, 0)
});
wrapper!(cuMemAllocHost_v2, resolved_alloc_host, ALLOC_HOST, (pp: *mut *mut c_void, size: usize), |r| {
    emit(Api::MemHostAlloc, r, HOST, out(r, pp.cast::<u64>()), size as u64, 0)
});
wrapper!(cuMemFreeHost, resolved_free_host, FREE_HOST, (p: *mut c_void), |r| {
    emit(Api::MemFreeHost, r, HOST, p as u64, 0, 0)
});

wrapper!(cuMemCreate, resolved_create, CREATE, (handle: *mut u64, size: usize, prop: *const c_void, flags: u64), |r| {
    emit(Api::MemCreate, r, 0, out(r, handle), size as u64, 0)
});
wrapper!(cuMemRelease, resolved_release, RELEASE, (handle: u64), |r| emit(Api::MemRelease, r, 0, handle, 0, 0));
wrapper!(
    cuMemMap,
    resolved_map,
    MAP,
    (ptr: CuDevicePtr, size: usize, offset: usize, handle: u64, flags: u64),
    |r| emit(Api::MemMap, r, 0, ptr, size as u64, 0)
);
wrapper!(cuMemUnmap, resolved_unmap, UNMAP, (ptr: CuDevicePtr, size: usize), |r| {
    emit(Api::MemUnmap, r, 0, ptr, size as u64, 0)
});
wrapper!(
    cuMemAddressReserve,
    resolved_address_reserve,
    ADDRESS_RESERVE,
    (ptr: *mut CuDevicePtr, size: usize, alignment: usize, addr: CuDevicePtr, flags: u64),
    |r| emit(Api::AddressReserve, r, 0, out(r, ptr), size as u64, 0)
);
wrapper!(cuMemAddressFree, resolved_address_free, ADDRESS_FREE, (ptr: CuDevicePtr, size: usize), |r| {
    emit(Api::AddressFree, r, 0, ptr, size as u64, 0)
});
wrapper!(cuCtxDestroy_v2, resolved_ctx_destroy, CTX_DESTROY, (ctx: *mut c_void), |r| {
    emit(Api::ContextDestroy, r, 0, ctx as u64, 0, 0)
});
wrapper!(cuDevicePrimaryCtxReset_v2, resolved_ctx_reset, CTX_RESET, (device: c_int), |r| {
    emit(Api::ContextDestroy, r, device, 0, 0, 0)
});

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`: the caller wants the `_ptsz` variants.
const PER_THREAD_STREAM: u64 = 2;
/// CUDA 3.2: from this version on the driver hands out the `_v2` functions.
const V2_FROM_VERSION: c_int = 3020;

type Wrapped = (&'static AtomicPtr<c_void>, *mut c_void);

macro_rules! entry {
    ($slot:ident, $resolved:ident) => {
        Some((&$slot, $resolved as *mut c_void))
    };
}

/// The wrapper for an exact driver symbol name (what `dlsym` is asked for).
pub(crate) fn by_symbol(name: &[u8]) -> Option<Wrapped> {
    match name {
        b"cuMemAlloc_v2" => entry!(ALLOC, resolved_alloc),
        b"cuMemFree_v2" => entry!(FREE, resolved_free),
        b"cuMemAllocPitch_v2" => entry!(ALLOC_PITCH, resolved_alloc_pitch),
        b"cuMemAllocManaged" => entry!(ALLOC_MANAGED, resolved_alloc_managed),
        b"cuMemAllocAsync" => entry!(ALLOC_ASYNC, resolved_alloc_async),
        b"cuMemAllocAsync_ptsz" => entry!(ALLOC_ASYNC_PTSZ, resolved_alloc_async_ptsz),
        b"cuMemFreeAsync" => entry!(FREE_ASYNC, resolved_free_async),
        b"cuMemFreeAsync_ptsz" => entry!(FREE_ASYNC_PTSZ, resolved_free_async_ptsz),
        b"cuMemAllocFromPoolAsync" => entry!(ALLOC_POOL, resolved_alloc_pool),
        b"cuMemAllocFromPoolAsync_ptsz" => entry!(ALLOC_POOL_PTSZ, resolved_alloc_pool_ptsz),
        b"cuMemHostAlloc" => entry!(HOST_ALLOC, resolved_host_alloc),
        b"cuMemAllocHost_v2" => entry!(ALLOC_HOST, resolved_alloc_host),
        b"cuMemFreeHost" => entry!(FREE_HOST, resolved_free_host),
        b"cuMemCreate" => entry!(CREATE, resolved_create),
        b"cuMemRelease" => entry!(RELEASE, resolved_release),
        b"cuMemMap" => entry!(MAP, resolved_map),
        b"cuMemUnmap" => entry!(UNMAP, resolved_unmap),
        b"cuMemAddressReserve" => entry!(ADDRESS_RESERVE, resolved_address_reserve),
        b"cuMemAddressFree" => entry!(ADDRESS_FREE, resolved_address_free),
        b"cuCtxDestroy_v2" => entry!(CTX_DESTROY, resolved_ctx_destroy),
        b"cuDevicePrimaryCtxReset_v2" => entry!(CTX_RESET, resolved_ctx_reset),
        b"cuMemPoolTrimTo" => entry!(POOL_TRIM, resolved_pool_trim),
        b"cuCtxSynchronize" => entry!(CTX_SYNC, resolved_ctx_sync),
        b"cuStreamSynchronize" => entry!(STREAM_SYNC, resolved_stream_sync),
        b"cuStreamSynchronize_ptsz" => entry!(STREAM_SYNC_PTSZ, resolved_stream_sync_ptsz),
        b"cuEventSynchronize" => entry!(EVENT_SYNC, resolved_event_sync),
        _ => None,
    }
}

/// The wrapper for what `cuGetProcAddress` resolves a base name to, given the caller's CUDA
/// version and flags: the `_v2` ABI from CUDA 3.2 (older versions get the 32-bit `v1`, not
/// wrapped), and the `_ptsz` variant when the per-thread default stream is asked for.
pub(crate) fn by_base_name(name: &[u8], version: c_int, flags: u64) -> Option<Wrapped> {
    let v2 = version >= V2_FROM_VERSION;
    let ptsz = flags & PER_THREAD_STREAM != 0;
    match name {
        b"cuMemAlloc" if v2 => by_symbol(b"cuMemAlloc_v2"),
        b"cuMemFree" if v2 => by_symbol(b"cuMemFree_v2"),
        b"cuMemAllocPitch" if v2 => by_symbol(b"cuMemAllocPitch_v2"),
        b"cuMemAllocHost" if v2 => by_symbol(b"cuMemAllocHost_v2"),
        b"cuCtxDestroy" if version >= 4000 => by_symbol(b"cuCtxDestroy_v2"),
        b"cuDevicePrimaryCtxReset" if version >= 11000 => by_symbol(b"cuDevicePrimaryCtxReset_v2"),
        b"cuMemAllocAsync" if ptsz => by_symbol(b"cuMemAllocAsync_ptsz"),
        b"cuMemFreeAsync" if ptsz => by_symbol(b"cuMemFreeAsync_ptsz"),
        b"cuMemAllocFromPoolAsync" if ptsz => by_symbol(b"cuMemAllocFromPoolAsync_ptsz"),
        b"cuStreamSynchronize" if ptsz => by_symbol(b"cuStreamSynchronize_ptsz"),
        // From CUDA 13 the name may resolve to cuCtxSynchronize_v2, which takes a context: not
        // the ABI of the wrapper, so it is handed out unwrapped.
        b"cuCtxSynchronize" if version >= 13000 => None,
        b"cuMemAlloc"
        | b"cuMemFree"
        | b"cuMemAllocPitch"
        | b"cuMemAllocHost"
        | b"cuCtxDestroy"
        | b"cuDevicePrimaryCtxReset" => None,
        other => by_symbol(other),
    }
}

/// Defines an exported recording wrapper of a CUDA runtime function (`libcudart`), which calls the
/// runtime's own definition. The runtime reaches the driver through private tables
/// (`cuGetExportTable`) for its memory functions, so the driver's symbols never see them; what
/// the driver does inside such a call is not recorded twice (the thread is inside the hook).
macro_rules! runtime {
    ($name:ident, ($($arg:ident : $ty:ty),*), |$result:ident| $record:expr) => {
        /// The CUDA runtime function of the same name, recorded.
        ///
        /// # Safety
        /// As the runtime's.
        #[cfg_attr(not(test), unsafe(no_mangle))]
        #[cfg_attr(test, allow(dead_code))]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            type F = unsafe extern "C" fn($($ty),*) -> c_int;
            static REAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let address = crate::cached_address(&REAL, concat!(stringify!($name), "\0"));
            if address == 0 {
                return CUDART_ERROR_INITIALIZATION;
            }
            // SAFETY: the runtime's export of this name has the signature `F` spells out.
            let real = unsafe { std::mem::transmute::<usize, F>(address) };
            // SAFETY: the caller's arguments are passed through unchanged.
            recorded(|| unsafe { real($($arg),*) }, |$result| $record)
        }
    };
}

/// `cudaErrorInitializationError`: what a runtime call returns when the runtime cannot be found.
const CUDART_ERROR_INITIALIZATION: c_int = 3;

runtime!(cudaMalloc, (ptr: *mut *mut c_void, size: usize), |r| {
    emit(Api::MemAlloc, r, 0, out(r, ptr.cast::<u64>()), size as u64, 0)
});
runtime!(cudaFree, (ptr: *mut c_void), |r| {
    // cudaFree(NULL) only initialises the runtime.
    if !ptr.is_null() {
        emit(Api::MemFree, r, 0, ptr as u64, 0, 0);
    }
});
runtime!(cudaMallocManaged, (ptr: *mut *mut c_void, size: usize, flags: c_uint), |r| {
    emit(Api::MemAllocManaged, r, 0, out(r, ptr.cast::<u64>()), size as u64, 0)
});
runtime!(cudaMallocPitch, (ptr: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize), |r| {
    emit(Api::MemAllocPitch, r, 0, out(r, ptr.cast::<u64>()), (out(r, pitch) as u64).saturating_mul(height as u64), 0)
});
runtime!(cudaMallocHost, (ptr: *mut *mut c_void, size: usize), |r| {
    emit(Api::MemHostAlloc, r, HOST, out(r, ptr.cast::<u64>()), size as u64, 0)
});
runtime!(cudaHostAlloc, (ptr: *mut *mut c_void, size: usize, flags: c_uint), |r| {
    emit(Api::MemHostAlloc, r, HOST, out(r, ptr.cast::<u64>()), size as u64, 0)
});
runtime!(cudaFreeHost, (ptr: *mut c_void), |r| emit(Api::MemFreeHost, r, HOST, ptr as u64, 0, 0));
runtime!(cudaMallocAsync, (ptr: *mut *mut c_void, size: usize, stream: *mut c_void), |r| {
    stream_ordered_alloc(r, out(r, ptr.cast::<u64>()), size, None, stream)
});
runtime!(cudaMallocAsync_ptsz, (ptr: *mut *mut c_void, size: usize, stream: *mut c_void), |r| {
    stream_ordered_alloc(r, out(r, ptr.cast::<u64>()), size, None, stream)
});
runtime!(cudaMallocFromPoolAsync, (ptr: *mut *mut c_void, size: usize, pool: *mut c_void, stream: *mut c_void), |r| {
    stream_ordered_alloc(r, out(r, ptr.cast::<u64>()), size, Some(pool), stream)
});
runtime!(
    cudaMallocFromPoolAsync_ptsz,
    (ptr: *mut *mut c_void, size: usize, pool: *mut c_void, stream: *mut c_void),
    |r| stream_ordered_alloc(r, out(r, ptr.cast::<u64>()), size, Some(pool), stream)
);
runtime!(cudaFreeAsync, (ptr: *mut c_void, stream: *mut c_void), |r| {
    emit(Api::MemFreeAsync, r, 0, ptr as u64, 0, stream as u64);
    pools::report();
});
runtime!(cudaFreeAsync_ptsz, (ptr: *mut c_void, stream: *mut c_void), |r| {
    emit(Api::MemFreeAsync, r, 0, ptr as u64, 0, stream as u64);
    pools::report();
});
runtime!(cudaMemPoolTrimTo, (pool: *mut c_void, keep: usize), |_r| pools::report());
runtime!(cudaStreamSynchronize, (stream: *mut c_void), |_r| pools::report());
runtime!(cudaStreamSynchronize_ptsz, (stream: *mut c_void), |_r| pools::report());
runtime!(cudaDeviceSynchronize, (), |_r| pools::report());
runtime!(cudaEventSynchronize, (event: *mut c_void), |_r| pools::report());
