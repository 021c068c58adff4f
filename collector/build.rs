//! Builds the hook library (the `vramscope-hook` crate, a cdylib) and the emulation library (the
//! `vramscope-emulate` crate, a cdylib) for the target being built, so that `vramscope record`
//! and `vramscope estimate` carry them inside the binary: a `cargo install`ed binary or the one
//! in the pip wheel records and estimates with nothing beside it.
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
    for watched in ["hook/src", "hook/Cargo.toml", "emulate/src", "emulate/Cargo.toml", "wire/src", "wire/Cargo.toml"] {
        println!("cargo:rerun-if-changed={}", manifest_dir.join(watched).display());
    }
    let out_dir = PathBuf::from(var("OUT_DIR"));
    let target = var("TARGET");
    let release = var("PROFILE") == "release";
    // OUT_DIR is <profile dir>/build/<package>-<hash>/out.
    let profile_dir = out_dir.ancestors().nth(3).map_or_else(|| out_dir.clone(), Path::to_path_buf);
    let target_dir = profile_dir.join("vramscope-hook-build");

    for (crate_dir, file, env_name) in [
        ("hook", "libvramscope_hook.so", "VRAMSCOPE_HOOK_LIBRARY"),
        ("emulate", "libvramscope_emulate.so", "VRAMSCOPE_EMULATE_LIBRARY"),
    ] {
        let library = build(&manifest_dir.join(crate_dir).join("Cargo.toml"), &target, release, &target_dir, file);
        println!("cargo:rustc-env={env_name}={}", library.display());
    }
}

/// Builds the cdylib crate of `manifest` with the outer build's profile and target; its library.
fn build(manifest: &Path, target: &str, release: bool, target_dir: &Path, file: &str) -> PathBuf {
    let mut cargo = Command::new(var("CARGO"));
    cargo
        .arg("build")
        .arg("--manifest-path")
        .arg(manifest)
        .args(["--lib", "--offline", "--target", target])
        .arg("--target-dir")
        .arg(target_dir);
    if release {
        cargo.arg("--release");
    }
    // The outer build's target directory and any wrapper meant for its own crates (clippy's
    // driver) are not this build's; its flags, linker and jobserver are.
    for name in ["CARGO_TARGET_DIR", "CARGO_BUILD_TARGET_DIR", "RUSTC_WORKSPACE_WRAPPER", "CARGO_BUILD_TARGET"] {
        cargo.env_remove(name);
    }
    let status = cargo.status().unwrap_or_else(|e| panic!("cannot run cargo to build {}: {e}", manifest.display()));
    assert!(status.success(), "building {} failed: {status}", manifest.display());
    let library = target_dir.join(target).join(if release { "release" } else { "debug" }).join(file);
    assert!(library.exists(), "{} was built but {} is missing", manifest.display(), library.display());
    library
}
