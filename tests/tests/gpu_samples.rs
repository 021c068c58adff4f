//! The traces `vramscope record` made on an NVIDIA H200 (`scripts/gpu-check.sh`, committed under
//! `samples/traces/`): the driver-level reserved memory in each equals what PyTorch itself said
//! it reserved (`torch.cuda.memory_reserved()` and `max_memory_reserved()`, in the summary the
//! training script wrote in the same run) with PyTorch's three allocator set-ups; the categories
//! the PyTorch shim's tags and phases give equal the exact parameter, gradient and optimizer-state
//! sizes the script computed from its tensors, in fp32 and under bf16 autocast; and the cudarc
//! sample's peak is the one it announced.

#![allow(clippy::expect_used)]

use std::ffi::OsStr;

use vramscope_e2e::{info_json, repo_root, vramscope};

fn device0(info: &serde_json::Value) -> &serde_json::Value {
    info["devices"].as_array().and_then(|d| d.iter().find(|d| d["device"] == 0)).expect("device 0 in the trace")
}

#[test]
fn driver_level_reserved_memory_equals_pytorchs_own_account() {
    let traces = repo_root().join("samples/traces");
    for (conf, backend) in
        [("plain", "native"), ("expandable", "native"), ("async", "cudaMallocAsync"), ("bf16", "native")]
    {
        let trace = traces.join(format!("h200-torch-{conf}.vtrace"));
        let summary: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(traces.join(format!("h200-torch-{conf}.summary.json"))).expect("summary"),
        )
        .expect("summary is JSON");
        let cuda = &summary["cuda"];
        assert_eq!(cuda["allocator_backend"], backend, "{conf}");
        let info = info_json(&trace);
        let device = device0(&info);
        // The script exits right after taking its figures, and PyTorch frees nothing at exit.
        assert_eq!(device["reserved_bytes"], cuda["memory_reserved"], "{conf}: reserved at the end");
        assert_eq!(device["peak_reserved_bytes"], cuda["max_memory_reserved"], "{conf}: peak reserved");
        assert_eq!(device["name"], "NVIDIA H200", "{conf}");
        assert!(device["total_memory_bytes"].as_u64().is_some_and(|t| t > 130 << 30), "{conf}");
        assert_eq!(info["cuda_driver_version"], 13000, "{conf}");
    }
}

#[test]
fn parameters_gradients_and_optimizer_state_on_the_gpu_are_exact() {
    let traces = repo_root().join("samples/traces");
    for conf in ["plain", "expandable", "bf16"] {
        let trace = traces.join(format!("h200-torch-{conf}.vtrace"));
        let summary: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(traces.join(format!("h200-torch-{conf}.summary.json"))).expect("summary"),
        )
        .expect("summary is JSON");
        let number = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
        let parameters = number(&summary["parameter_bytes"]);
        let model_state = parameters + number(&summary["buffer_bytes"]);
        let output = vramscope(&[
            OsStr::new("info"),
            OsStr::new("--json"),
            OsStr::new("--at"),
            OsStr::new("optimizer_step"),
            trace.as_os_str(),
        ]);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let info: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
        let at = info["at"]["devices"]
            .as_array()
            .and_then(|d| d.iter().find(|d| d["device"] == 0))
            .expect("device 0 at the step")["categories"]
            .clone();
        // When the first optimizer step starts, every gradient is alive (fp32, also under
        // autocast: the parameters stay fp32).
        assert_eq!(number(&at["parameter"]), model_state, "{conf}: {at}");
        assert_eq!(number(&at["gradient"]), number(&summary["gradient_bytes"]), "{conf}: {at}");
        assert_eq!(number(&at["gradient"]), parameters, "{conf}: {at}");
        // At the peak, AdamW's moments are exactly twice the parameters (its step counters stay
        // on the CPU).
        let peak = &device0(&info)["categories_at_peak"];
        assert_eq!(number(&peak["optimizer_state"]), number(&summary["optimizer_state_bytes_on_device"]), "{conf}");
        assert_eq!(number(&peak["optimizer_state"]), 2 * parameters, "{conf}");
        assert_eq!(number(&peak["parameter"]), model_state, "{conf}");
        // The tensor-level peak is PyTorch's own max_memory_allocated() to within 0.2%.
        let ours = number(&device0(&info)["peak_allocated_bytes"]);
        let torch = number(&summary["cuda"]["max_memory_allocated"]);
        assert!(ours.abs_diff(torch) * 500 <= torch, "{conf}: peak allocated {ours} vs PyTorch's {torch}");
    }
}

#[test]
fn the_cudarc_sample_on_the_gpu_peaks_where_it_said() {
    // `cudarc-train 3 4 64`: 4 layers of 64 MiB; it printed "expected peak 1140850688 bytes".
    let info = info_json(&repo_root().join("samples/traces/h200-cudarc-train.vtrace"));
    let device = device0(&info);
    assert_eq!(device["peak_allocated_bytes"], 1_140_850_688u64);
    assert_eq!(device["peak_reserved_bytes"], 1_140_850_688u64);
}
