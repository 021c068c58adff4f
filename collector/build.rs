//! Builds the hook library (the `vramscope-hook` crate, a cdylib) for the target being built, so
//! that `vramscope record` carries it inside the binary: a `cargo install`ed binary or the one in
//! the pip wheel records with nothing beside it.
//!
//! The library is built by a second cargo, in a folder of its own next to this profile's output
//! (shared by build, test and clippy of one profile, so it is built once and then kept up to
//! date), with the same profile, target, linker and flags as the outer build: a wheel built for
//! an older glibc gets a hook for that glibc too.

use std::path::{Path, PathBuf};
use std::process::Command;

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("cargo sets {name} for build scripts"))
}

fn main() {
    let manifest_dir = PathBuf::from(var("CARGO_MANIFEST_DIR"));
    for watched in ["hook/src", "hook/Cargo.toml", "wire/src", "wire/Cargo.toml"] {
        println!("cargo:rerun-if-changed={}", manifest_dir.join(watched).display());
    }
    let out_dir = PathBuf::from(var("OUT_DIR"));
    let target = var("TARGET");
    let release = var("PROFILE") == "release";
    // OUT_DIR is <profile dir>/build/<package>-<hash>/out.
    let profile_dir = out_dir.ancestors().nth(3).map_or_else(|| out_dir.clone(), Path::to_path_buf);
    let target_dir = profile_dir.join("vramscope-hook-build");

    let mut cargo = Command::new(var("CARGO"));
    cargo
        .arg("build")
        .arg("--manifest-path")
        .arg(manifest_dir.join("hook/Cargo.toml"))
        .args(["--lib", "--offline", "--target", &target])
        .arg("--target-dir")
        .arg(&target_dir);
    if release {
        cargo.arg("--release");
    }
    // The outer build's target directory and any wrapper meant for its own crates (clippy's
    // driver) are not this build's; its flags, linker and jobserver are.
    for name in ["CARGO_TARGET_DIR", "CARGO_BUILD_TARGET_DIR", "RUSTC_WORKSPACE_WRAPPER", "CARGO_BUILD_TARGET"] {
        cargo.env_remove(name);
    }
    let status = cargo.status().unwrap_or_else(|e| panic!("cannot run cargo to build the hook library: {e}"));
    assert!(status.success(), "building the hook library (collector/hook) failed: {status}");
    let library = target_dir.join(&target).join(if release { "release" } else { "debug" }).join("libvramscope_hook.so");
    assert!(library.exists(), "the hook library was built but {} is missing", library.display());
    println!("cargo:rustc-env=VRAMSCOPE_HOOK_LIBRARY={}", library.display());
}
