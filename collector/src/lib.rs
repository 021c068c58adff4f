//! Recording GPU memory events: the format the driver-level hook library writes ([`wire`]), what
//! the PyTorch shim writes ([`torch`]), and the merging of both into one trace ([`merge`]), and how the recorder treats signals
//! while its workload runs ([`signals`]), the temporary files an interrupt removes ([`cleanup`]), and the driver's own account of the devices
//! ([`devices`], through cudarc). The hook itself is the
//! `vramscope-hook` crate (`collector/hook`), a cdylib loaded with `LD_PRELOAD`, which the binary
//! carries ([`hook`]); the test-only
//! fake CUDA driver is `collector/fake-cuda`.

pub mod cleanup;
pub mod devices;
mod error;
pub mod flight;
pub mod hook;
pub mod live;
pub mod merge;
pub mod nvml;
pub mod session;
pub mod signals;
pub mod torch;

/// The hook's record format and the environment contract (the `vramscope-wire` crate).
pub use vramscope_wire as wire;
