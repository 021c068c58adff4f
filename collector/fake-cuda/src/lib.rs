//! Test-only: a fake CUDA driver (`libcuda.so.1`) over host memory, and client programs that
//! reach it in each way vramscope's hooks must see, built by this crate's build script with the
//! system's C compiler. See `collector/README.md`.

use std::path::PathBuf;

/// The directory holding the fake `libcuda.so.1` (and `libcuda.so`) and the fake NVML
/// (`libnvidia-ml.so.1`).
pub fn lib_dir() -> PathBuf {
    PathBuf::from(env!("VRAMSCOPE_FAKE_CUDA_LIB_DIR"))
}

/// A test client program by name (`client`); it runs against the fake driver by its rpath.
pub fn client(name: &str) -> PathBuf {
    PathBuf::from(env!("VRAMSCOPE_FAKE_CUDA_BIN_DIR")).join(name)
}
