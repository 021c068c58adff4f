//! The library `vramscope estimate` preloads into the program (and offers as `libcuda.so.1`): it
//! answers, for a GPU that is not there, the CUDA runtime and driver calls PyTorch makes about
//! devices, streams and events, so that PyTorch's own CUDA paths run as on the GPU the estimate
//! names: `torch.cuda.is_available()` and `device_count()`, the current device, the autograd
//! engine's device threads (which ask whether the device has a primary context), stream and
//! event objects. Memory is not its business: the program's tensors have no storage (PyTorch's
//! fake tensors), and the PyTorch shim's emulation (`vramscope_emulate.py`) allocates them in its
//! model of the caching allocator.
//!
//! Every call succeeds with a value that says "a device with nothing running on it": a stream
//! or event is a distinct handle that is always complete, an elapsed time is 0. A call it does
//! not define goes to the real library, where there is none: the program then fails with the
//! CUDA error it would get without a driver, which `vramscope estimate` reports.
//!
//! The device count is `VRAMSCOPE_EMULATE_COUNT` (1 when unset).
#![allow(unsafe_code)]
// The exported functions carry CUDA's own names.
#![allow(non_snake_case)]

use std::cell::Cell;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `cudaSuccess` / `CUDA_SUCCESS`.
const SUCCESS: c_int = 0;
/// `cudaErrorInvalidDevice`.
const INVALID_DEVICE: c_int = 101;
/// `cudaErrorInvalidValue`.
const INVALID_VALUE: c_int = 1;

thread_local! {
    /// The thread's current device (`cudaSetDevice`).
    static CURRENT: Cell<c_int> = const { Cell::new(0) };
}

/// Handles for streams and events: distinct, never null, never dereferenced.
static NEXT_HANDLE: AtomicUsize = AtomicUsize::new(0x1000);

fn count() -> c_int {
    static COUNT: OnceLock<c_int> = OnceLock::new();
    *COUNT.get_or_init(|| {
        std::env::var("VRAMSCOPE_EMULATE_COUNT").ok().and_then(|v| v.parse().ok()).filter(|&n| n > 0).unwrap_or(1)
    })
}

fn handle() -> *mut c_void {
    NEXT_HANDLE.fetch_add(16, Ordering::Relaxed) as *mut c_void
}

/// Writes `value` through `out` if it is not null.
///
/// # Safety
/// `out` is null or valid to write a `T`.
unsafe fn put<T>(out: *mut T, value: T) -> c_int {
    if out.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: the caller's contract.
    unsafe { out.write(value) };
    SUCCESS
}

// -- the runtime: devices ------------------------------------------------------------------------

/// # Safety
/// `n` is valid to write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaGetDeviceCount(n: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { put(n, count()) }
}

/// # Safety
/// `device` is valid to write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaGetDevice(device: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { put(device, CURRENT.with(Cell::get)) }
}

/// Makes `device` the thread's current one.
#[unsafe(no_mangle)]
pub extern "C" fn cudaSetDevice(device: c_int) -> c_int {
    if !(0..count()).contains(&device) {
        return INVALID_DEVICE;
    }
    CURRENT.with(|c| c.set(device));
    SUCCESS
}

/// # Safety
/// Each pointer is null or valid to write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaDeviceGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) -> c_int {
    // The range of a current NVIDIA GPU: 0 (lowest) to -5 (highest).
    if !least.is_null() {
        // SAFETY: not null, the caller's contract.
        unsafe { least.write(0) };
    }
    if !greatest.is_null() {
        // SAFETY: not null, the caller's contract.
        unsafe { greatest.write(-5) };
    }
    SUCCESS
}

/// Nothing runs: there is nothing to wait for.
#[unsafe(no_mangle)]
pub extern "C" fn cudaDeviceSynchronize() -> c_int {
    SUCCESS
}

/// No call has failed.
#[unsafe(no_mangle)]
pub extern "C" fn cudaGetLastError() -> c_int {
    SUCCESS
}

/// No call has failed.
#[unsafe(no_mangle)]
pub extern "C" fn cudaPeekAtLastError() -> c_int {
    SUCCESS
}

// -- the runtime: streams and events -------------------------------------------------------------

/// # Safety
/// `stream` is valid to write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaStreamCreate(stream: *mut *mut c_void) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { put(stream, handle()) }
}

/// # Safety
/// `stream` is valid to write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaStreamCreateWithFlags(stream: *mut *mut c_void, _flags: c_uint) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { put(stream, handle()) }
}

/// # Safety
/// `stream` is valid to write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaStreamCreateWithPriority(
    stream: *mut *mut c_void,
    _flags: c_uint,
    _priority: c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { put(stream, handle()) }
}

/// A stream of ours goes (nothing to free).
#[unsafe(no_mangle)]
pub extern "C" fn cudaStreamDestroy(_stream: *mut c_void) -> c_int {
    SUCCESS
}

/// Every stream is idle.
#[unsafe(no_mangle)]
pub extern "C" fn cudaStreamSynchronize(_stream: *mut c_void) -> c_int {
    SUCCESS
}

/// Every stream is idle.
#[unsafe(no_mangle)]
pub extern "C" fn cudaStreamQuery(_stream: *mut c_void) -> c_int {
    SUCCESS
}

/// Every event has happened.
#[unsafe(no_mangle)]
pub extern "C" fn cudaStreamWaitEvent(_stream: *mut c_void, _event: *mut c_void, _flags: c_uint) -> c_int {
    SUCCESS
}

/// # Safety
/// `status` is valid to write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaStreamIsCapturing(_stream: *mut c_void, status: *mut c_int) -> c_int {
    // cudaStreamCaptureStatusNone: no CUDA graph is being captured.
    // SAFETY: the caller's contract.
    unsafe { put(status, 0) }
}

/// The thread's capture mode stays as it is.
#[unsafe(no_mangle)]
pub extern "C" fn cudaThreadExchangeStreamCaptureMode(_mode: *mut c_int) -> c_int {
    SUCCESS
}

/// # Safety
/// `event` is valid to write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaEventCreate(event: *mut *mut c_void) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { put(event, handle()) }
}

/// # Safety
/// `event` is valid to write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaEventCreateWithFlags(event: *mut *mut c_void, _flags: c_uint) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { put(event, handle()) }
}

/// An event of ours goes (nothing to free).
#[unsafe(no_mangle)]
pub extern "C" fn cudaEventDestroy(_event: *mut c_void) -> c_int {
    SUCCESS
}

/// Recorded: it has happened at once.
#[unsafe(no_mangle)]
pub extern "C" fn cudaEventRecord(_event: *mut c_void, _stream: *mut c_void) -> c_int {
    SUCCESS
}

/// Recorded: it has happened at once.
#[unsafe(no_mangle)]
pub extern "C" fn cudaEventRecordWithFlags(_event: *mut c_void, _stream: *mut c_void, _flags: c_uint) -> c_int {
    SUCCESS
}

/// It has happened.
#[unsafe(no_mangle)]
pub extern "C" fn cudaEventSynchronize(_event: *mut c_void) -> c_int {
    SUCCESS
}

/// It has happened.
#[unsafe(no_mangle)]
pub extern "C" fn cudaEventQuery(_event: *mut c_void) -> c_int {
    SUCCESS
}

/// # Safety
/// `ms` is valid to write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaEventElapsedTime(ms: *mut f32, _start: *mut c_void, _end: *mut c_void) -> c_int {
    // No kernel ran: no time passed on the device.
    // SAFETY: the caller's contract.
    unsafe { put(ms, 0.0) }
}

// -- the driver, as `libcuda.so.1` ---------------------------------------------------------------

/// The driver starts.
#[unsafe(no_mangle)]
pub extern "C" fn cuInit(_flags: c_uint) -> c_int {
    SUCCESS
}

/// # Safety
/// `version` is valid to write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { put(version, driver_version()) }
}

/// The CUDA version the driver says it supports: the newest the program's runtime could ask
/// for (`VRAMSCOPE_EMULATE_DRIVER`, else CUDA 13.0).
fn driver_version() -> c_int {
    std::env::var("VRAMSCOPE_EMULATE_DRIVER").ok().and_then(|v| v.parse().ok()).unwrap_or(13000)
}

/// # Safety
/// `n` is valid to write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetCount(n: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { put(n, count()) }
}

/// # Safety
/// Each pointer is null or valid to write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(device: c_int, flags: *mut c_uint, active: *mut c_int) -> c_int {
    if !(0..count()).contains(&device) {
        return INVALID_DEVICE;
    }
    // No context was created on the device: the autograd engine then keeps no stream for it.
    if !flags.is_null() {
        // SAFETY: not null, the caller's contract.
        unsafe { flags.write(0) };
    }
    // SAFETY: the caller's contract.
    unsafe { put(active, 0) }
}

/// # Safety
/// `context` is valid to write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetCurrent(context: *mut *mut c_void) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { put(context, std::ptr::null_mut()) }
}
