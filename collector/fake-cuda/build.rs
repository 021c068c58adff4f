//! Builds the fake `libcuda.so.1` and the test clients with the system's C compiler.

use std::path::{Path, PathBuf};
use std::process::Command;

fn run(mut command: Command, what: &str) {
    let status = command.status().unwrap_or_else(|e| panic!("cannot run the C compiler for {what}: {e}"));
    assert!(status.success(), "the C compiler failed on {what}: {command:?}");
}

fn compiler() -> Command {
    let mut build = cc::Build::new();
    build.opt_level(2).warnings(true);
    build.get_compiler().to_command()
}

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default());
    let src = Path::new("c");
    let lib_dir = out.join("lib");
    let bin_dir = out.join("bin");
    for dir in [&lib_dir, &bin_dir] {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    }
    let lib = lib_dir.join("libcuda.so.1");
    let mut cmd = compiler();
    cmd.args(["-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o"]).arg(&lib).arg(src.join("fake_cuda.c"));
    run(cmd, "fake_cuda.c");
    let link = lib_dir.join("libcuda.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink("libcuda.so.1", &link).unwrap_or_else(|e| panic!("cannot link {}: {e}", link.display()));

    // The fake NVML beside it: a sampler finds it where it finds the driver.
    let nvml = lib_dir.join("libnvidia-ml.so.1");
    let mut cmd = compiler();
    cmd.args(["-shared", "-fPIC", "-Wl,-soname,libnvidia-ml.so.1", "-o"]).arg(&nvml).arg(src.join("fake_nvml.c"));
    run(cmd, "fake_nvml.c");

    let runtime = lib_dir.join("libcudart.so.12");
    let mut cmd = compiler();
    cmd.args(["-shared", "-fPIC", "-Wl,-soname,libcudart.so.12", "-o"])
        .arg(&runtime)
        .arg(src.join("fake_cudart.c"))
        .arg("-ldl");
    // The runtime opens the driver by name, as the real one does; its rpath finds the fake.
    cmd.arg(format!("-Wl,-rpath,{}", lib_dir.display()));
    run(cmd, "fake_cudart.c");

    let mut cmd = compiler();
    cmd.arg("-o")
        .arg(bin_dir.join("runtime_client"))
        .arg(src.join("runtime_client.c"))
        .arg("-L")
        .arg(&lib_dir)
        .arg("-l:libcudart.so.12");
    cmd.arg(format!("-Wl,-rpath,{}", lib_dir.display()));
    run(cmd, "runtime_client.c");

    let mut cmd = compiler();
    cmd.arg("-o").arg(bin_dir.join("client")).arg(src.join("client.c")).arg("-L").arg(&lib_dir).arg("-l:libcuda.so.1");
    cmd.arg(format!("-Wl,-rpath,{}", lib_dir.display())).arg("-pthread").arg("-ldl");
    run(cmd, "client.c");

    println!("cargo:rustc-env=VRAMSCOPE_FAKE_CUDA_LIB_DIR={}", lib_dir.display());
    println!("cargo:rustc-env=VRAMSCOPE_FAKE_CUDA_BIN_DIR={}", bin_dir.display());
    for file in ["c/fake_cuda.c", "c/fake_nvml.c", "c/fake_cudart.c", "c/client.c", "c/runtime_client.c", "build.rs"] {
        println!("cargo:rerun-if-changed={file}");
    }
}
