//! `vramscope estimate` on real PyTorch, on this machine without a GPU: `samples/pytorch/train.py`
//! run unchanged on the emulated GPU. Checked against what an H200 measured for the same runs
//! (`samples/traces/h200-torch-*.summary.json`: the script's own `torch.cuda` counters), against
//! the exact bytes of the model's tensors, against the program's own view of its memory, and
//! against the other model of the caching allocator (`analysis/src/allocsim.rs`) replaying the
//! estimate's events. The estimate's trace is a recording of the shim's CUDA source (the
//! allocator's history, segments and tags), so these tests also run that source in CI.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::process::Output;

use vramscope_e2e::{repo_root, torch_python, vramscope_command};

/// `vramscope estimate --json ARGS -- python train.py TRAIN_ARGS --summary SUMMARY` with `env`;
/// the output, the document and the script's own summary.
fn estimate(
    dir: &Path,
    name: &str,
    args: &[&str],
    train_args: &[String],
    env: &[(&str, &str)],
) -> (Output, serde_json::Value, serde_json::Value) {
    let summary = dir.join(format!("{name}.summary.json"));
    let mut command = vramscope_command();
    command.args(["estimate", "--json"]).args(args).arg("--").arg(torch_python());
    command.arg(repo_root().join("samples/pytorch/train.py")).args(train_args).arg("--summary").arg(&summary);
    command.env_remove("PYTORCH_CUDA_ALLOC_CONF");
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().expect("vramscope estimate runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let doc: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{name}: not JSON ({e}): {stderr}\n{}", String::from_utf8_lossy(&output.stdout)));
    let summary = std::fs::read_to_string(&summary).unwrap_or_else(|e| panic!("{name}: no summary ({e}): {stderr}"));
    (output, doc, serde_json::from_str(&summary).expect("summary JSON"))
}

/// The arguments an H200 run was made with, from its summary.
fn h200_args(summary: &serde_json::Value) -> Vec<String> {
    let a = &summary["args"];
    let mut args = vec![];
    for (flag, key) in [
        ("--model", "model"),
        ("--layers", "layers"),
        ("--d-model", "d_model"),
        ("--heads", "heads"),
        ("--vocab", "vocab"),
        ("--seq-len", "seq_len"),
        ("--batch-size", "batch_size"),
        ("--steps", "steps"),
        ("--optimizer", "optimizer"),
    ] {
        let value = &a[key];
        args.push(flag.to_owned());
        args.push(value.as_str().map_or_else(|| value.to_string(), str::to_owned));
    }
    for (flag, key) in [("--bf16", "bf16"), ("--checkpoint", "checkpoint"), ("--tie-weights", "tie_weights")] {
        if a[key] == true {
            args.push(flag.to_owned());
        }
    }
    args
}

fn number(value: &serde_json::Value) -> u64 {
    value.as_u64().unwrap_or_else(|| panic!("not a number: {value}"))
}

fn error(estimated: u64, measured: u64) -> f64 {
    (estimated as f64 - measured as f64) / measured as f64
}

#[test]
fn the_four_h200_runs_are_predicted_within_3_percent_allocated_and_5_percent_reserved() {
    let dir = tempfile::tempdir().unwrap();
    for (setting, conf) in
        [("plain", ""), ("expandable", "expandable_segments:True"), ("async", "backend:cudaMallocAsync"), ("bf16", "")]
    {
        let file = repo_root().join(format!("samples/traces/h200-torch-{setting}.summary.json"));
        let measured: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(measured["cuda"]["alloc_conf"], conf, "{setting}: the run's settings");
        let env: Vec<(&str, &str)> = if conf.is_empty() { vec![] } else { vec![("PYTORCH_CUDA_ALLOC_CONF", conf)] };
        let (output, doc, own) = estimate(dir.path(), setting, &["--gpu", "h200"], &h200_args(&measured), &env);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{setting} fits an H200: {stderr}");
        assert_eq!(doc["fits"], true);
        let device = &doc["devices"][0];
        let (allocated, reserved) = (number(&device["peak_allocated_bytes"]), number(&device["peak_reserved_bytes"]));
        let cuda = &measured["cuda"];
        let (real_allocated, real_reserved) =
            (number(&cuda["max_memory_allocated"]), number(&cuda["max_memory_reserved"]));
        assert!(
            error(allocated, real_allocated).abs() <= 0.03,
            "{setting}: peak allocated {allocated}, the H200 measured {real_allocated}"
        );
        assert!(
            error(reserved, real_reserved).abs() <= 0.05,
            "{setting}: peak reserved {reserved}, the H200 measured {real_reserved}"
        );
        // The program saw what the estimate says: its own counters are the document's.
        assert_eq!(number(&own["cuda"]["max_memory_allocated"]), allocated, "{setting}");
        assert_eq!(number(&own["cuda"]["max_memory_reserved"]), reserved, "{setting}");
        assert_eq!(own["cuda"]["device_name"], "NVIDIA H200", "{setting}");
        assert_eq!(own["cuda"]["allocator_backend"], cuda["allocator_backend"], "{setting}");
        // The model is the H200's, to the byte.
        for key in ["parameter_bytes", "gradient_bytes", "optimizer_state_bytes_on_device"] {
            assert_eq!(own[key], measured[key], "{setting}: {key}");
        }
    }
}

/// Loads a `.vtrace`.
fn load(path: &Path) -> vramscope_trace_format::Trace {
    let bytes = std::fs::read(path).unwrap();
    vramscope_trace_format::vtrace::read(&bytes, &vramscope_trace_format::progress::NoProgress).unwrap().trace
}

#[test]
fn the_estimate_is_a_gpu_recording_with_tags_phases_and_the_allocators_segments() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("small.vtrace");
    let args: Vec<String> = ["--layers", "2", "--steps", "2"].iter().map(|s| (*s).to_owned()).collect();
    let (output, doc, own) =
        estimate(dir.path(), "small", &["--gpu", "a100-40gb", "-o", trace.to_str().unwrap()], &args, &[]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(doc["target"]["name"], "NVIDIA A100-SXM4-40GB");
    assert_eq!(own["cuda"]["device_name"], "NVIDIA A100-SXM4-40GB");
    assert_eq!(doc["trace"], trace.to_str().unwrap());

    // `info` of the trace: the device with its reserved memory from the allocator's segments (its
    // history, as the shim's CUDA source reads it), and the model state tagged to the byte at the
    // optimizer's step.
    let info = vramscope_e2e::info_json_with(&trace, &["--at", "optimizer_step"]);
    let cuda = info["devices"].as_array().unwrap().iter().find(|d| d["device"] == 0).expect("cuda:0").clone();
    assert_eq!(cuda["reserved_recorded"], true, "{cuda}");
    assert_eq!(number(&cuda["peak_reserved_bytes"]), number(&doc["devices"][0]["peak_reserved_bytes"]), "{cuda}");
    assert_eq!(cuda["name"], "NVIDIA A100-SXM4-40GB, estimated");
    let at = info["at"]["devices"].as_array().unwrap().iter().find(|d| d["device"] == 0).unwrap()["categories"].clone();
    let model_state = number(&own["parameter_bytes"]) + number(&own["buffer_bytes"]);
    assert_eq!(number(&at["parameter"]), model_state, "{at}");
    assert_eq!(number(&at["gradient"]), number(&own["gradient_bytes"]), "{at}");
    // Blocks that backward allocated on autograd's own thread are said to be its.
    let largest = vramscope_e2e::info_json_with(&trace, &["--blocks", "40"]);
    let sites: Vec<String> = largest["largest_blocks"]["devices"][0]["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["site"].as_str().unwrap().to_owned())
        .collect();
    assert!(sites.iter().any(|s| s == "autograd engine (backward; no Python frames)  <autograd>"), "{sites:?}");
    // Phases from the shim's hooks.
    assert_eq!(cuda["phases"]["from"], "recorded", "{cuda}");
    assert_eq!(number(&cuda["phases"]["iteration_count"]), 2, "{cuda}");
    // cuBLAS's workspaces, named: A100 (8.0) takes 4096 KiB x 2 + 16 KiB x 8 per thread that
    // multiplies matrices (the forward's and the autograd engine's), cuBLASLt 1 MiB.
    let workspace = doc["rests_on"].as_array().unwrap().iter().find(|r| r["what"] == "cuBLAS workspace").unwrap();
    assert_eq!(number(&workspace["bytes"]), 2 * (4096 * 1024 * 2 + 16 * 1024 * 8), "{workspace}");
    // Where the program read its loss, it was given a stand-in, and the estimate says where.
    let places: Vec<String> = doc["standins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| format!("{}:{}", p["file"].as_str().unwrap(), p["line"]))
        .collect();
    assert!(places.iter().any(|p| p.contains("train_loop.py")), "{places:?}");

    // The shim's allocator model and analysis/src/allocsim.rs, replaying the same events, reserve
    // the same.
    let loaded = load(&trace);
    let device = vramscope_trace_format::DeviceId(0);
    let simulated = vramscope_analysis::query::allocsim::simulate(
        &loaded,
        device,
        vramscope_analysis::query::allocsim::Settings::default(),
    );
    assert_eq!(simulated.peak_reserved_bytes, number(&doc["devices"][0]["peak_reserved_bytes"]));
}

#[test]
fn expandable_segments_reserve_alike_in_both_models() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("expandable.vtrace");
    let args: Vec<String> =
        ["--layers", "3", "--steps", "2", "--d-model", "256"].iter().map(|s| (*s).to_owned()).collect();
    let (output, doc, _) = estimate(
        dir.path(),
        "expandable",
        &["--gpu", "h100", "-o", trace.to_str().unwrap()],
        &args,
        &[("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")],
    );
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let loaded = load(&trace);
    let settings = vramscope_analysis::query::allocsim::Settings {
        expandable_segments: true,
        ..vramscope_analysis::query::allocsim::Settings::default()
    };
    let simulated =
        vramscope_analysis::query::allocsim::simulate(&loaded, vramscope_trace_format::DeviceId(0), settings);
    assert_eq!(simulated.peak_reserved_bytes, number(&doc["devices"][0]["peak_reserved_bytes"]));
}

#[test]
fn a_gpu_too_small_does_not_fit_and_the_advisor_says_what_would() {
    let dir = tempfile::tempdir().unwrap();
    let args: Vec<String> =
        ["--layers", "2", "--d-model", "512", "--batch-size", "16", "--seq-len", "256", "--vocab", "8000"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
    let (output, doc, _) = estimate(dir.path(), "small-gpu", &["--gpu", "t4", "--device-memory", "1GiB"], &args, &[]);
    assert_eq!(output.status.code(), Some(1), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(doc["fits"], false);
    let device = &doc["devices"][0];
    assert!(device["headroom_bytes"].as_i64().unwrap() < 0, "{device}");
    assert_eq!(number(&device["needed_bytes"]), number(&device["peak_reserved_bytes"]) + number(&doc["context_bytes"]));
    assert!(doc["smallest_change_that_fits"].is_string(), "{doc}");
}

#[test]
fn a_program_that_puts_nothing_on_the_gpu_gets_no_estimate_and_an_unknown_gpu_is_named() {
    let output = vramscope_command()
        .args(["estimate", "--"])
        .arg(torch_python())
        .args(["-c", "import torch; print(torch.zeros(3).sum())"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("put nothing on the GPU"), "{stderr}");

    let output = vramscope_command().args(["estimate", "--gpu", "H300", "--", "true"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("H300") && stderr.contains("h100") && stderr.contains("--device-memory"), "{stderr}");
}

#[test]
fn the_program_sees_the_gpu_it_runs_on() {
    let code = "import torch\n\
                assert torch.cuda.is_available() and torch.cuda.device_count() == 2\n\
                p = torch.cuda.get_device_properties(1)\n\
                print(p.name, p.total_memory, p.major, p.minor, torch.cuda.get_device_capability())\n\
                torch.cuda.set_device(1)\n\
                x = torch.randn(1024, 1024, device='cuda')\n\
                print(x.device, torch.cuda.memory_allocated(1), torch.cuda.memory_reserved(1), torch.cuda.memory_allocated(0))\n\
                torch.cuda.synchronize(); s = torch.cuda.Stream(); e = torch.cuda.Event(enable_timing=True); e.record()\n\
                print('ok', torch.cuda.mem_get_info()[1])\n";
    let output = vramscope_command()
        .args(["estimate", "--gpu", "l4", "--gpus", "2", "--"])
        .arg(torch_python())
        .args(["-c", code])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&output.stderr));
    let total = 23_034u64 << 20;
    assert!(stdout.contains(&format!("NVIDIA L4 {total} 8 9 (8, 9)")), "{stdout}");
    // 4 MiB asked: a block of 4 MiB in a 20 MiB segment of the large pool, on device 1 only.
    assert!(stdout.contains(&format!("cuda:1 {} {} 0", 4 << 20, 20 << 20)), "{stdout}");
    assert!(stdout.contains(&format!("ok {total}")), "{stdout}");
}

/// `vramscope estimate --json --gpu GPU -- python -c CODE`: the exit code, the document (null
/// when none) and standard error.
fn estimate_code(gpu: &str, code: &str) -> (Option<i32>, serde_json::Value, String) {
    let output = vramscope_command()
        .args(["estimate", "--json", "--gpu", gpu, "--"])
        .arg(torch_python())
        .args(["-c", code])
        .output()
        .unwrap();
    let doc = serde_json::from_slice(&output.stdout).unwrap_or(serde_json::Value::Null);
    (output.status.code(), doc, String::from_utf8_lossy(&output.stderr).into_owned())
}

fn attention_said(doc: &serde_json::Value) -> String {
    doc["rests_on"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["what"].as_str().unwrap().contains("attention"))
        .map(|r| r["detail"].as_str().unwrap().to_owned())
        .unwrap_or_default()
}

#[test]
fn attention_runs_the_backend_the_gpu_would_pick() {
    let code = |dtype: &str| {
        format!(
            "import torch, torch.nn.functional as F\n\
             q, k, v = (torch.randn(4, 8, 512, 64, device='cuda', dtype=torch.{dtype}, requires_grad=True) for _ in range(3))\n\
             F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()\n"
        )
    };
    let (status, h100, stderr) = estimate_code("h100", &code("bfloat16"));
    assert_eq!(status, Some(0), "{stderr}");
    assert!(attention_said(&h100).starts_with("flash attention (1 call)"), "{}", attention_said(&h100));
    let (_, t4_half, _) = estimate_code("t4", &code("float16"));
    assert!(attention_said(&t4_half).starts_with("memory-efficient attention"), "{}", attention_said(&t4_half));
    // bfloat16 needs compute capability 8.0 for the fused kernels: a T4 (7.5) materialises the
    // attention matrix, 4 x 8 x 512 x 512 of them.
    let (_, t4, _) = estimate_code("t4", &code("bfloat16"));
    assert!(attention_said(&t4).starts_with("the math backend"), "{}", attention_said(&t4));
    let peak = |doc: &serde_json::Value| number(&doc["devices"][0]["peak_allocated_bytes"]);
    assert!(peak(&t4) > peak(&t4_half) + 4 * 8 * 512 * 512 * 2, "{} {}", peak(&t4), peak(&t4_half));
}

#[test]
fn values_the_program_reads_get_stand_ins_and_data_it_reads_is_named() {
    let (status, doc, stderr) = estimate_code(
        "a10",
        "import torch\nx = torch.randn(1000, device='cuda')\nkept = x[x > 0]\nif x.sum() > 0:\n    print('positive')\nprint(kept.shape)\n",
    );
    assert_eq!(status, Some(0), "{stderr}");
    // A boolean index's size depends on the values: the largest it can be.
    assert!(stderr.contains("torch.Size([1000])"), "{stderr}");
    let lines: Vec<u64> = doc["standins"].as_array().unwrap().iter().map(|p| number(&p["line"])).collect();
    assert_eq!(lines, [3, 4], "{doc}");

    let (status, _, stderr) = estimate_code("a10", "import torch\nprint(torch.ones(3, device='cuda').cpu().numpy())\n");
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains("tensors on the emulated GPU have shapes and dtypes, not data"), "{stderr}");
}

#[test]
fn torchrun_ranks_are_estimated_each_on_its_gpu_with_a_fake_process_group() {
    // DDP: every rank holds the whole model; FSDP2: each holds its shard of the parameters and
    // their optimizer state (half of each, on two ranks).
    let run = |flags: &[&str]| {
        let mut command = vramscope_command();
        command.args(["estimate", "--json", "--gpu", "h100", "--gpus", "2", "--"]);
        command.arg(torch_python()).args(["-m", "torch.distributed.run", "--nproc-per-node", "2"]);
        command.arg(repo_root().join("samples/pytorch/train.py"));
        command.args(["--layers", "4", "--d-model", "256", "--steps", "2"]).args(flags);
        let output = command.output().unwrap();
        assert!(output.status.success(), "{flags:?}: {}", String::from_utf8_lossy(&output.stderr));
        let doc: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        let rows = doc["devices"].as_array().unwrap().clone();
        assert_eq!(rows.len(), 2, "{flags:?}: {doc}");
        let ranks: Vec<(u64, u64)> = rows.iter().map(|r| (number(&r["device"]), number(&r["rank"]))).collect();
        assert_eq!(ranks, [(0, 0), (1, 1)], "{flags:?}: each rank on its own GPU");
        rows
    };
    let category = |row: &serde_json::Value, name: &str| number(&row["categories_at_peak"][name]);
    let ddp = run(&[]);
    let fsdp = run(&["--fsdp"]);
    // Buffers are whole on every rank (4 layers' causal masks of 64 x 64 floats, and the
    // position table); the parameters are split.
    let parameters = |row: &serde_json::Value| category(row, "parameter");
    assert_eq!(parameters(&ddp[0]), parameters(&ddp[1]));
    assert!(parameters(&fsdp[0]) < parameters(&ddp[0]) * 6 / 10, "{} {}", parameters(&fsdp[0]), parameters(&ddp[0]));
}

#[test]
fn a_sweep_finds_the_largest_batch_that_fits_and_estimates_it() {
    let train = repo_root().join("samples/pytorch/train.py");
    let estimate_at = |extra: &[&str]| {
        let mut command = vramscope_command();
        command.args(["estimate", "--json", "--gpu", "a10", "--device-memory", "1200MiB"]).args(extra).arg("--");
        command.arg(torch_python()).arg(&train);
        command.args(["--layers", "2", "--d-model", "256", "--seq-len", "256", "--vocab", "8192", "--steps", "2"]);
        command
    };
    let output = estimate_at(&["--sweep", "batch=2,4,8"]).args(["--batch-size", "{batch}"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let sweep = &doc["sweep"];
    let largest = number(&sweep["largest_that_fits"]);
    let sizes: Vec<u64> = sweep["points"].as_array().unwrap().iter().map(|p| number(&p["size"])).collect();
    assert!(sizes.starts_with(&[2, 4, 8]) || sizes.contains(&largest), "{sweep}");
    // The answer was estimated and fits; the document is of that size.
    let answer = sweep["points"].as_array().unwrap().iter().find(|p| number(&p["size"]) == largest).unwrap();
    assert_eq!(answer["fits"], true, "{sweep}");
    assert!(doc["command"].as_array().unwrap().iter().any(|a| a == &largest.to_string()), "{doc}");
    assert_eq!(doc["fits"], true);
    // Two samples more does not fit: the answer is the fit's, not a guess far below the edge.
    let over = estimate_at(&[]).args(["--batch-size", &(largest + 2).to_string()]).output().unwrap();
    assert_eq!(over.status.code(), Some(1), "{}", String::from_utf8_lossy(&over.stderr));
    // Without the placeholder, the sweep says where to put it.
    let output = estimate_at(&["--sweep", "batch=2,4"]).output().unwrap();
    assert!(String::from_utf8_lossy(&output.stderr).contains("put {batch} in the command"), "{output:?}");
}

#[test]
fn an_operator_with_only_cuda_code_and_an_allocator_of_its_own_are_named() {
    let (status, _, stderr) = estimate_code(
        "h100",
        "import torch\nlib = torch.library.Library('vramscope_test', 'DEF')\nlib.define('twice(Tensor x) -> Tensor')\n\
         lib.impl('twice', lambda x: x * 2, 'CUDA')\nprint(torch.ops.vramscope_test.twice(torch.ones(4, device='cuda')))\n",
    );
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains("vramscope_test.twice") && stderr.contains("register_fake"), "{stderr}");

    let (status, _, stderr) = estimate_code(
        "h100",
        "import torch\ntorch.cuda.memory.change_current_allocator(None)\nx = torch.ones(4, device='cuda')\n",
    );
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains("installs an allocator of its own"), "{stderr}");
}
