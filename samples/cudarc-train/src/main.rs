//! A non-Python workload for `vramscope record`: GPU memory allocated and freed through cudarc's
//! driver API in the pattern of a training loop.
//!
//! ```text
//! cudarc-train [ITERATIONS] [LAYERS] [MIB_PER_LAYER]     (defaults: 3 4 4)
//! ```
//!
//! Parameters (one block per layer) live for the whole run; each iteration allocates one
//! activation per layer (forward), then frees them in reverse while allocating and keeping one
//! gradient per layer (backward), then allocates optimizer state on the first iteration and frees
//! the gradients (step). It prints the peak it expects, so a recording can be checked against it:
//! parameters + optimizer state (2 per layer) + all activations + one gradient.
#![allow(unsafe_code)]

use std::process::ExitCode;

use cudarc::driver::{result, sys};

fn arg(index: usize, default: usize) -> usize {
    std::env::args().nth(index).and_then(|a| a.parse().ok()).unwrap_or(default)
}

fn run() -> Result<(), String> {
    let (iterations, layers, mib) = (arg(1, 3), arg(2, 4), arg(3, 4));
    let block = mib << 20;
    // SAFETY: loading the driver library runs its initialisers, as any CUDA program does.
    if !unsafe { sys::is_culib_present() } {
        return Err("no CUDA driver library (libcuda.so) found".to_owned());
    }
    result::init().map_err(|e| format!("cuInit: {e:?}"))?;
    let device = result::device::get(0).map_err(|e| format!("no device 0: {e:?}"))?;
    // SAFETY: `device` comes from the driver; the primary context stays retained for the run.
    unsafe {
        let context = result::primary_ctx::retain(device).map_err(|e| format!("context: {e:?}"))?;
        result::ctx::set_current(context).map_err(|e| format!("context: {e:?}"))?;
    }
    // SAFETY (every malloc_sync / free_sync below): a context is current; each pointer is freed once.
    let alloc = |bytes: usize| unsafe { result::malloc_sync(bytes) }.map_err(|e| format!("cuMemAlloc: {e:?}"));
    let free = |ptr: sys::CUdeviceptr| unsafe { result::free_sync(ptr) }.map_err(|e| format!("cuMemFree: {e:?}"));
    let parameters: Vec<sys::CUdeviceptr> = (0..layers).map(|_| alloc(block)).collect::<Result<_, _>>()?;
    let mut optimizer_state = Vec::new();
    for iteration in 0..iterations {
        let activations: Vec<sys::CUdeviceptr> = (0..layers).map(|_| alloc(block)).collect::<Result<_, _>>()?;
        let mut gradients = Vec::with_capacity(layers);
        for activation in activations.into_iter().rev() {
            gradients.push(alloc(block)?);
            free(activation)?;
        }
        if iteration == 0 {
            for _ in 0..2 * layers {
                optimizer_state.push(alloc(block)?);
            }
        }
        for gradient in gradients {
            free(gradient)?;
        }
    }
    for ptr in optimizer_state.into_iter().chain(parameters) {
        free(ptr)?;
    }
    // Peak: during the first backward, all activations and the first gradient are alive with the
    // parameters (the optimizer state comes after the activations are freed): layers * 2 + 1
    // blocks, or with the optimizer state (later iterations) layers * 4 + 1.
    let peak_blocks = if iterations > 1 { layers * 4 + 1 } else { (layers * 2 + 1).max(layers * 4) };
    println!("expected peak {} bytes", peak_blocks * block);
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cudarc-train: {e}");
            ExitCode::FAILURE
        }
    }
}
