//! The driver-level hook: a library loaded into the workload with `LD_PRELOAD` that sees its CUDA
//! driver calls and appends one record per call to `events.<pid>.bin` in the directory named by
//! `VRAMSCOPE_RECORD_DIR` (see `vramscope_wire`).
//!
//! It covers the driver's memory functions (`memory.rs`) however the program reaches them: by
//! direct linking, through `dlopen` + `dlsym(handle, ...)`, through `cuGetProcAddress` /
//! `cuGetProcAddress_v2` (how libcudart and PyTorch get them), and through the runtime's
//! `cudaGetDriverEntryPoint` / `_ptsz` / `ByVersion`. Rules it keeps:
//! nothing happens until the first intercepted call (no constructor); a process whose
//! environment has no recording directory records nothing; a thread never re-enters the hook;
//! no panic crosses into the caller; a forked child writes its own file; records are buffered
//! and written every 20 ms, at 64 KiB, at `exit` and at `_exit` (see `buffer.rs`), so a SIGKILL
//! loses at most the last 20 ms.
#![allow(unsafe_code)]
// The exported functions carry the CUDA driver's own names.
#![allow(non_snake_case)]

use std::cell::Cell;
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use vramscope_wire::{Api, Record};

mod buffer;
mod flight;
mod memory;
mod pools;

pub(crate) type CuResult = c_int;
pub(crate) type CuDevicePtr = u64;
type GetProcAddressFn = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> CuResult;
type GetProcAddressV2Fn = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CuResult;

/// `CUDA_ERROR_NOT_INITIALIZED`: what a call returns when the real driver cannot be found.
pub(crate) const CUDA_ERROR_NOT_INITIALIZED: CuResult = 3;

thread_local! {
    /// Set while this thread is inside the hook: calls the hook itself causes are not recorded.
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
}

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// The C library's `dlsym`. This library exports its own `dlsym`, which a plain call from here
/// would reach again, so the real one is found by version.
fn real_dlsym() -> Option<DlsymFn> {
    static REAL: OnceLock<usize> = OnceLock::new();
    let address = *REAL.get_or_init(|| {
        for version in [c"GLIBC_2.34", c"GLIBC_2.2.5", c"GLIBC_2.17"] {
            // SAFETY: NUL-terminated names; dlvsym has no other precondition.
            let found = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
            if !found.is_null() {
                return found as usize;
            }
        }
        0
    });
    // SAFETY: the C library's `dlsym`, whose signature `DlsymFn` spells out.
    (address != 0).then(|| unsafe { std::mem::transmute::<usize, DlsymFn>(address) })
}

/// The next definition of `name` after this library (the real driver's).
pub(crate) fn next_symbol(name: &CStr) -> *mut c_void {
    match real_dlsym() {
        // SAFETY: `name` is NUL-terminated; RTLD_NEXT lookups have no other precondition.
        Some(dlsym) => unsafe { dlsym(libc::RTLD_NEXT, name.as_ptr()) },
        None => std::ptr::null_mut(),
    }
}

/// The address of `name` (NUL-terminated) as [`loaded_address`] finds it, remembered in `slot`
/// once found; 0 while there is none.
pub(crate) fn cached_address(slot: &AtomicUsize, name: &str) -> usize {
    match slot.load(Ordering::Acquire) {
        NOT_FOUND => 0,
        0 => {
            let address = loaded_address(name);
            // Not found is remembered too: the search walks every loaded library, and a function
            // missing now (an older driver) stays missing.
            slot.store(if address == 0 { NOT_FOUND } else { address }, Ordering::Release);
            address
        }
        address => address,
    }
}

/// What a slot holds when its function was looked for and not found.
const NOT_FOUND: usize = usize::MAX;

/// The real definition of `name` (NUL-terminated): the next one after this library in the global
/// scope, or else the first loaded library's that defines it. The second finds libraries opened
/// privately (`dlopen` without `RTLD_GLOBAL`), as the CUDA runtime opens the driver and Python
/// opens extension modules and their libraries. 0 when there is none.
pub(crate) fn loaded_address(name: &str) -> usize {
    let Ok(name) = CStr::from_bytes_with_nul(name.as_bytes()) else { return 0 };
    let next = next_symbol(name);
    if !next.is_null() {
        return next as usize;
    }
    let Some(dlsym) = real_dlsym() else { return 0 };
    let own = object_base(loaded_address as *const c_void);
    for library in loaded_libraries() {
        // SAFETY: a NUL-terminated path; RTLD_NOLOAD only opens a library already loaded.
        let handle = unsafe { libc::dlopen(library.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            continue;
        }
        // SAFETY: a handle dlopen just returned and a NUL-terminated name.
        let found = unsafe { dlsym(handle, name.as_ptr()) };
        // SAFETY: the handle from the dlopen above; the library stays loaded (the program holds it).
        unsafe { libc::dlclose(handle) };
        if !found.is_null() && object_base(found) != own {
            return found as usize;
        }
    }
    0
}

/// The load address of the library holding `address` (0 if none).
fn object_base(address: *const c_void) -> usize {
    // SAFETY: all-zero is a valid `Dl_info` (null pointers).
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is valid to write; dladdr accepts any address.
    if unsafe { libc::dladdr(address, &mut info) } == 0 { 0 } else { info.dli_fbase as usize }
}

/// The paths of the shared libraries loaded now (the program itself excluded).
fn loaded_libraries() -> Vec<std::ffi::CString> {
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid entry and the `data` given below.
        let (info, names) = unsafe { (&*info, &mut *data.cast::<Vec<std::ffi::CString>>()) };
        if !info.dlpi_name.is_null() {
            // SAFETY: the loader's NUL-terminated name for the object.
            let name = unsafe { CStr::from_ptr(info.dlpi_name) };
            if !name.is_empty() {
                names.push(name.to_owned());
            }
        }
        0
    }
    let mut names: Vec<std::ffi::CString> = Vec::new();
    // Only collected here: opening libraries while the loader's list is walked could deadlock.
    // SAFETY: `visit` only reads the entry and appends to `names`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&raw mut names).cast()) };
    names
}

/// A driver function (not one the hook exports), looked up once.
macro_rules! real {
    ($slot:ident, $name:literal, $ty:ty) => {{
        static $slot: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let address = $crate::cached_address(&$slot, $name);
        // SAFETY: a non-null address of this driver symbol is a function with the driver API's
        // signature for it, which `$ty` spells out.
        (address != 0).then(|| unsafe { std::mem::transmute::<usize, $ty>(address) })
    }};
}
pub(crate) use real;

/// Where records go: a recording's directory, or a flight recorder's (`VRAMSCOPE_FLIGHT`, where
/// no recording's is set).
fn recording_dir() -> Option<&'static std::path::Path> {
    static DIR: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        use vramscope_wire::env;
        std::env::var_os(env::RECORD_DIR).or_else(|| std::env::var_os(env::FLIGHT)).map(std::path::PathBuf::from)
    })
    .as_deref()
}

/// The flight recorder's bounds, where this process keeps a ring: its bytes, and the time a ring
/// should span at least (segments begin at least that often over its length).
fn flight() -> Option<(u64, Option<u64>)> {
    use vramscope_wire::env;
    let number = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let ring = std::env::var_os(env::RECORD_DIR).is_none() && std::env::var_os(env::FLIGHT).is_some();
    let bytes = number(env::FLIGHT_BYTES);
    (ring || bytes.is_some()).then(|| (bytes.unwrap_or(env::FLIGHT_DEFAULT_BYTES), number(env::FLIGHT_SPAN_NS)))
}

/// Opens where this process's records go: its file in the recording's directory, or its ring.
fn open_file(pid: u32) -> buffer::Sink {
    let Some(dir) = recording_dir() else { return buffer::Sink::None };
    let flight = flight();
    let name = if flight.is_some() { format!("flight.{pid}.ring") } else { format!("events.{pid}.bin") };
    let Ok(path) = std::ffi::CString::new(dir.join(name).into_os_string().into_encoded_bytes()) else {
        return buffer::Sink::None;
    };
    if let Some((bytes, span)) = flight {
        return flight::Ring::create(&path, bytes, span, pid, now_ns())
            .map_or(buffer::Sink::None, |ring| buffer::Sink::Ring(Box::new(ring)));
    }
    // SAFETY: a NUL-terminated path; the flags and mode are plain integers.
    let fd =
        unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC, 0o644) };
    if fd >= 0 { buffer::Sink::File(fd) } else { buffer::Sink::None }
}

pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec to write to.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// The device of the calling thread's current context (0 when the driver cannot tell).
pub(crate) fn current_device() -> i32 {
    type CtxGetDeviceFn = unsafe extern "C" fn(*mut c_int) -> CuResult;
    let Some(get) = real!(REAL_CTX_GET_DEVICE, "cuCtxGetDevice\0", CtxGetDeviceFn) else { return 0 };
    let mut device: c_int = 0;
    // SAFETY: `device` is valid to write; the call is not recorded (the caller is inside the hook).
    if unsafe { get(&mut device) } == 0 { device } else { 0 }
}

/// Appends a record for a call that returned `result`; never panics, never fails the caller.
pub(crate) fn emit(api: Api, result: CuResult, device: i32, address: u64, size_bytes: u64, stream: u64) {
    let _ = std::panic::catch_unwind(|| {
        if recording_dir().is_none() {
            return;
        }
        let (pid, tid) = buffer::ids();
        // Device calls name no device: it is the current context's. Host memory is -1.
        let device = if device == 0 { current_device() } else { device };
        let record = Record { api, time_ns: now_ns(), pid, tid, device, result, address, size_bytes, stream };
        buffer::push(&record.encode(), pid, || open_file(pid));
    });
}

/// Runs `f` unless this thread is already inside the hook (then `inner` runs bare).
pub(crate) fn guarded<R>(inner: impl FnOnce() -> R, f: impl FnOnce() -> R) -> R {
    if IN_HOOK.with(Cell::get) {
        return inner();
    }
    IN_HOOK.with(|h| h.set(true));
    let result = f();
    IN_HOOK.with(|h| h.set(false));
    result
}

/// After the real resolver answered, hands out a recording wrapper with the same ABI instead
/// of a memory function, remembering what the resolver returned for the wrapper to call.
fn substitute(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64) {
    if symbol.is_null() || pfn.is_null() {
        return;
    }
    // SAFETY: the resolver was just called with this NUL-terminated symbol and pointer.
    let (name, found) = unsafe { (CStr::from_ptr(symbol).to_bytes(), *pfn) };
    if found.is_null() {
        return;
    }
    let Some((slot, wrapper)) = memory::by_base_name(name, version, flags) else { return };
    // The wrapper itself may come back if the program resolves through us twice.
    if found != wrapper {
        slot.store(found, Ordering::Release);
    }
    // SAFETY: `pfn` is the caller's out-pointer, just written by the resolver.
    unsafe { *pfn = wrapper };
}

/// `dlsym`: a program that opens the driver with `dlopen` and looks its functions up by handle
/// gets the recording wrappers for the functions the hook covers (and for the resolvers).
///
/// `RTLD_NEXT` lookups are answered relative to this library rather than to their caller (the
/// C library finds "next" from the return address); for the program itself that differs only
/// in whether its own definitions come first.
///
/// # Safety
/// As the C library's.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    let Some(real) = real_dlsym() else { return std::ptr::null_mut() };
    // SAFETY: arguments passed through unchanged.
    let found = unsafe { real(handle, symbol) };
    if found.is_null() || symbol.is_null() || IN_HOOK.with(Cell::get) {
        return found;
    }
    std::panic::catch_unwind(|| wrap_looked_up(symbol, found)).unwrap_or(found)
}

/// What `dlsym` hands out for `symbol` found at `found`.
fn wrap_looked_up(symbol: *const c_char, found: *mut c_void) -> *mut c_void {
    // SAFETY: the C library just looked this NUL-terminated name up.
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    // The library looked in may be one opened privately: the resolver wrappers then call exactly
    // what this lookup found.
    let resolver: (&AtomicUsize, *mut c_void) = match name {
        b"cuGetProcAddress" => (&REAL_GET_PROC, cuGetProcAddress as GetProcAddressFn as *mut c_void),
        b"cuGetProcAddress_v2" => (&REAL_GET_PROC_V2, cuGetProcAddress_v2 as GetProcAddressV2Fn as *mut c_void),
        b"cudaGetDriverEntryPoint" => (&REAL_ENTRY_POINT, cudaGetDriverEntryPoint as EntryPointFn as *mut c_void),
        b"cudaGetDriverEntryPoint_ptsz" => {
            (&REAL_ENTRY_POINT_PTSZ, cudaGetDriverEntryPoint_ptsz as EntryPointFn as *mut c_void)
        }
        b"cudaGetDriverEntryPointByVersion" => {
            (&REAL_ENTRY_POINT_BY_VERSION, cudaGetDriverEntryPointByVersion as EntryPointByVersionFn as *mut c_void)
        }
        _ => {
            let Some((slot, wrapper)) = memory::by_symbol(name) else { return found };
            if found != wrapper {
                slot.store(found, Ordering::Release);
            }
            return wrapper;
        }
    };
    let (slot, wrapper) = resolver;
    if found != wrapper {
        slot.store(found as usize, Ordering::Release);
    }
    wrapper
}

/// `_exit` (Python's `os._exit`): what the buffer holds is written first, since no `atexit`
/// handler runs.
///
/// # Safety
/// As the C library's.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    let _ = std::panic::catch_unwind(buffer::flush);
    type ExitFn = unsafe extern "C" fn(c_int) -> !;
    let real = next_symbol(c"_exit");
    if !real.is_null() {
        // SAFETY: the C library's `_exit`.
        unsafe { std::mem::transmute::<*mut c_void, ExitFn>(real)(status) }
    }
    // SAFETY: exit_group ends the process; it has no preconditions.
    unsafe { libc::syscall(libc::SYS_exit_group, status) };
    std::process::abort()
}

type EntryPointFn = unsafe extern "C" fn(*const c_char, *mut *mut c_void, u64, *mut c_int) -> c_int;
type EntryPointByVersionFn = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_uint, u64, *mut c_int) -> c_int;

/// The CUDA version assumed for `cudaGetDriverEntryPoint`, which takes none (the runtime's own).
const RUNTIME_VERSION: c_int = 12000;

/// Defines an exported resolver that calls the real one and then hands out recording wrappers
/// for what it resolved. `$version` is the CUDA version the resolver resolves for.
macro_rules! resolver {
    (
        $(#[$doc:meta])* $name:ident, $real:ident: $ty:ty, ($($arg:ident: $t:ty),*),
        [$symbol:ident, $pfn:ident, $flags:ident], $version:expr
    ) => {
        /// What the program's own lookup found for this resolver (or, until then, what the
        /// loaded libraries define).
        static $real: AtomicUsize = AtomicUsize::new(0);

        $(#[$doc])*
        ///
        /// # Safety
        /// As the CUDA library's.
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub unsafe extern "C" fn $name($($arg: $t),*) -> c_int {
            let address = cached_address(&$real, concat!(stringify!($name), "\0"));
            if address == 0 {
                return CUDA_ERROR_NOT_INITIALIZED;
            }
            // SAFETY: the CUDA library's export of this name has the signature `$ty` spells out.
            let real = unsafe { std::mem::transmute::<usize, $ty>(address) };
            // SAFETY: arguments passed through unchanged.
            let result = unsafe { real($($arg),*) };
            if result == 0 {
                let version: c_int = $version;
                let _ = std::panic::catch_unwind(|| substitute($symbol, $pfn, version, $flags));
            }
            result
        }
    };
}

resolver!(
    /// `cuGetProcAddress` (CUDA 11.3+): the resolver libcudart uses.
    cuGetProcAddress, REAL_GET_PROC: GetProcAddressFn,
    (symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64),
    [symbol, pfn, flags],
    cuda_version
);
resolver!(
    /// `cuGetProcAddress_v2` (CUDA 12+).
    cuGetProcAddress_v2, REAL_GET_PROC_V2: GetProcAddressV2Fn,
    (symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64, status: *mut c_int),
    [symbol, pfn, flags],
    cuda_version
);
resolver!(
    /// `cudaGetDriverEntryPoint` of the CUDA runtime: a driver function by name, as the runtime
    /// resolves it. (CUDA 11 runtimes pass no `status`; the argument is passed through unread.)
    cudaGetDriverEntryPoint, REAL_ENTRY_POINT: EntryPointFn,
    (symbol: *const c_char, pfn: *mut *mut c_void, flags: u64, status: *mut c_int),
    [symbol, pfn, flags],
    RUNTIME_VERSION
);
resolver!(
    /// `cudaGetDriverEntryPoint_ptsz`.
    cudaGetDriverEntryPoint_ptsz, REAL_ENTRY_POINT_PTSZ: EntryPointFn,
    (symbol: *const c_char, pfn: *mut *mut c_void, flags: u64, status: *mut c_int),
    [symbol, pfn, flags],
    RUNTIME_VERSION
);
resolver!(
    /// `cudaGetDriverEntryPointByVersion` (CUDA 12.5+).
    cudaGetDriverEntryPointByVersion, REAL_ENTRY_POINT_BY_VERSION: EntryPointByVersionFn,
    (symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_uint, flags: u64, status: *mut c_int),
    [symbol, pfn, flags],
    c_int::try_from(cuda_version).unwrap_or(c_int::MAX)
);
