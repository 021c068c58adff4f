//! Files to remove if the process is interrupted or dies: `convert`, `report` and `record` write
//! through a temporary file beside the output, and a Ctrl+C, a SIGTERM, an abort (an allocation
//! the system refused) or a SIGBUS (a mapped input cut short under us) while one exists must not
//! leave it behind. The handler (installed on first use, only where the signal still has its default
//! disposition) unlinks every registered path, then lets the signal end the process as it would
//! have.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::path::Path;
use std::sync::Once;
use std::sync::atomic::{AtomicPtr, Ordering};

use libc::{c_char, c_int};

/// Temporary files at once, at most (one per output being written).
const SLOTS: usize = 64;
const SIGNALS: [c_int; 5] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGABRT, libc::SIGBUS];

static PATHS: [AtomicPtr<c_char>; SLOTS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; SLOTS];
static INSTALL: Once = Once::new();

extern "C" fn remove_and_die(signal: c_int) {
    for slot in &PATHS {
        let path = slot.swap(std::ptr::null_mut(), Ordering::SeqCst);
        if !path.is_null() {
            // SAFETY: `path` is a NUL-terminated string leaked by `Registered::new` and not freed
            // (its slot held it); unlink is async-signal-safe.
            unsafe { libc::unlink(path) };
        }
    }
    // SAFETY: signal and raise are async-signal-safe; the default disposition ends the process
    // with this signal, as it would have ended without the handler.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
}

fn install() {
    INSTALL.call_once(|| {
        for signal in SIGNALS {
            // SAFETY: sigaction with a null new action only reads the current one.
            let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
            let queried = unsafe { libc::sigaction(signal, std::ptr::null(), &mut current) } == 0;
            // A disposition someone chose (record's while its workload runs, an ignored SIGHUP
            // under nohup) is left alone.
            if queried && current.sa_sigaction == libc::SIG_DFL {
                let handler = remove_and_die as extern "C" fn(c_int) as libc::sighandler_t;
                // SAFETY: the handler only calls async-signal-safe functions.
                unsafe { libc::signal(signal, handler) };
            }
        }
    });
}

/// A temporary file that an interrupting signal removes; dropping this forgets it (once it has
/// been renamed into place, or removed).
pub struct Registered {
    slot: Option<usize>,
}

impl Registered {
    /// Registers `path`. With every slot taken the file is simply not registered.
    pub fn new(path: &Path) -> Self {
        use std::os::unix::ffi::OsStrExt;
        install();
        let Ok(text) = CString::new(path.as_os_str().as_bytes()) else { return Self { slot: None } };
        let raw = text.into_raw();
        for (i, slot) in PATHS.iter().enumerate() {
            if slot.compare_exchange(std::ptr::null_mut(), raw, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
                return Self { slot: Some(i) };
            }
        }
        // SAFETY: `raw` came from `into_raw` just above and was not stored.
        drop(unsafe { CString::from_raw(raw) });
        Self { slot: None }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        let Some(slot) = self.slot.and_then(|i| PATHS.get(i)) else { return };
        let raw = slot.swap(std::ptr::null_mut(), Ordering::SeqCst);
        if !raw.is_null() {
            // SAFETY: the slot held a pointer from `CString::into_raw`; it is taken out of the
            // slot, so the handler can no longer see it.
            drop(unsafe { CString::from_raw(raw) });
        }
    }
}
