//! `vramscope record` on real PyTorch (on the CPU): `samples/pytorch/train.py` recorded with no
//! change to it, and the categories the analysis finds checked against exact sizes the script
//! computes on its own (parameter, gradient and optimizer-state bytes from the tensors
//! themselves) and against a hand computation of a small MLP's activations.

#![allow(clippy::expect_used)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use vramscope_e2e::{record_command, record_train_command, repo_root, torch_python, vramscope};

/// Records `train.py ARGS --device cpu` into `dir`; returns (trace, the script's summary).
fn record_training(dir: &Path, name: &str, args: &[&str]) -> (PathBuf, serde_json::Value) {
    let trace = dir.join(format!("{name}.vtrace"));
    let summary = dir.join(format!("{name}.summary.json"));
    let output =
        record_train_command(&trace).arg("--summary").arg(&summary).args(args).output().expect("vramscope record runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{name}: {stderr}");
    assert!(!stderr.contains("shim"), "{name}: the shim complained: {stderr}");
    let summary = serde_json::from_str(&std::fs::read_to_string(&summary).expect("summary written")).expect("JSON");
    (trace, summary)
}

/// `info --json [--at WHEN]`: the host device's categories at the peak, and at WHEN.
fn categories(trace: &Path, at: Option<&str>) -> (serde_json::Value, serde_json::Value) {
    let mut args: Vec<&OsStr> = vec![OsStr::new("info"), OsStr::new("--json"), trace.as_os_str()];
    if let Some(at) = at {
        args.extend([OsStr::new("--at"), OsStr::new(at)]);
    }
    let output = vramscope(&args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let info: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let host = |list: &serde_json::Value| {
        list.as_array().and_then(|d| d.iter().find(|d| d["device"] == -1)).cloned().expect("host memory in the trace")
    };
    let peak = host(&info["devices"])["categories_at_peak"].clone();
    let at = if at.is_some() { host(&info["at"]["devices"])["categories"].clone() } else { serde_json::Value::Null };
    (peak, at)
}

fn bytes(value: &serde_json::Value) -> u64 {
    value.as_u64().unwrap_or(0)
}

#[test]
fn a_gpt_with_adamw_has_its_exact_parameters_gradients_and_optimizer_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (trace, summary) = record_training(dir.path(), "gpt-adamw", &["--steps", "3"]);
    let parameters = bytes(&summary["parameter_bytes"]);
    let buffers = bytes(&summary["buffer_bytes"]);
    assert!(parameters > 2_000_000, "{summary}");
    // Buffers (the causal mask) are tagged as model state with the parameters.
    let model_state = parameters + buffers;

    // At the start of the first optimizer step every gradient is alive.
    let (peak, at_step) = categories(&trace, Some("optimizer_step"));
    assert_eq!(bytes(&at_step["parameter"]), model_state, "{at_step}");
    assert_eq!(bytes(&at_step["gradient"]), bytes(&summary["gradient_bytes"]), "{at_step}");
    assert_eq!(bytes(&at_step["gradient"]), parameters, "{at_step}");

    // At the peak (backward of a later step): parameters, AdamW's two moments (and its step
    // counters), the batch as input, and activations.
    assert_eq!(bytes(&peak["parameter"]), model_state, "{peak}");
    let state = bytes(&peak["optimizer_state"]);
    assert_eq!(state, bytes(&summary["optimizer_state_bytes"]), "{peak}");
    assert!(state.abs_diff(2 * parameters) * 100 <= 2 * parameters, "AdamW state {state} vs 2 x {parameters}");
    assert_eq!(bytes(&peak["input"]), bytes(&summary["token_bytes"]), "{peak}");
    assert!(bytes(&peak["activation"]) > parameters, "{peak}");
    assert_eq!(bytes(&peak["unknown"]), 0, "{peak}");
}

#[test]
fn sgd_keeps_no_optimizer_state_and_momentum_keeps_one_copy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (trace, summary) = record_training(dir.path(), "sgd", &["--steps", "2", "--optimizer", "sgd"]);
    let (_, at) = categories(&trace, Some("forward#2"));
    assert_eq!(bytes(&at["optimizer_state"]), 0, "{at}");
    let (trace, summary_momentum) =
        record_training(dir.path(), "sgd-momentum", &["--steps", "2", "--optimizer", "sgd", "--momentum", "0.9"]);
    let (_, at) = categories(&trace, Some("forward#2"));
    assert_eq!(bytes(&at["optimizer_state"]), bytes(&summary_momentum["parameter_bytes"]), "{at}");
    assert_eq!(summary["parameter_bytes"], summary_momentum["parameter_bytes"]);
}

#[test]
fn a_small_mlps_activations_match_a_hand_computation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (trace, summary) = record_training(dir.path(), "mlp", &["--model", "mlp", "--steps", "2"]);
    let args = &summary["args"];
    let (batch, d_in, vocab) = (bytes(&args["batch_size"]), bytes(&args["d_model"]), bytes(&args["vocab"]));
    let hidden = 4 * d_in;
    // When backward starts, what forward (and the loss after it) allocated and is still alive:
    // the two ReLU outputs the next layers saved, the logits (the loop still holds them), the
    // log-softmax output cross-entropy saved, and two fp32 scalars (the loss, and the total
    // weight nll_loss keeps for its backward). fp32: 4 bytes an element.
    let hand = 4 * (2 * batch * hidden + 2 * batch * vocab) + 2 * 4;
    let (_, at) = categories(&trace, Some("backward"));
    assert_eq!(bytes(&at["activation"]), hand, "{at}");
    // The batch x is the model's input, not an activation.
    assert_eq!(bytes(&at["input"]), 4 * batch * d_in, "{at}");
    assert_eq!(bytes(&at["parameter"]), bytes(&summary["parameter_bytes"]), "{at}");
}

#[test]
fn tied_weights_persistent_gradients_and_a_compiled_model_keep_exact_sizes() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, args) in [
        ("tied", &["--steps", "2", "--tie-weights"][..]),
        ("zero-grad-keep", &["--steps", "2", "--no-zero-grad-none"][..]),
        ("compiled", &["--steps", "2", "--compile"][..]),
    ] {
        let (trace, summary) = record_training(dir.path(), name, args);
        let parameters = bytes(&summary["parameter_bytes"]);
        let (peak, at_step) = categories(&trace, Some("optimizer_step"));
        // A tied weight is one tensor: counted once, as its gradient is.
        assert_eq!(bytes(&at_step["parameter"]), parameters + bytes(&summary["buffer_bytes"]), "{name}: {at_step}");
        assert_eq!(bytes(&at_step["gradient"]), parameters, "{name}: {at_step}");
        assert_eq!(bytes(&peak["optimizer_state"]), bytes(&summary["optimizer_state_bytes"]), "{name}: {peak}");
        if name == "zero-grad-keep" {
            // zero_grad(set_to_none=False) keeps the gradients allocated through the next peak.
            assert_eq!(bytes(&peak["gradient"]), parameters, "{name}: {peak}");
        }
    }
}

#[test]
fn two_optimizers_and_dataloader_workers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("loader.vtrace");
    let output = record_command(&trace, torch_python())
        .arg(repo_root().join("tests/scripts/two_optimizers_dataloader.py"))
        .arg("spawn")
        .output()
        .expect("vramscope record runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    // The workers' own CPU memory is not the training's: one process recorded.
    assert!(stderr.contains("from 1 process,"), "{stderr}");
    let exact: serde_json::Value = serde_json::from_slice(&output.stdout).expect("the script's JSON line");
    // The fourth loop's forward: each loop steps two optimizers, and each step ends an
    // iteration, so it is iteration 7 (forwards in 1, 3, 5, 7), as info and diff number them.
    let (_, at) = categories(&trace, Some("forward#7"));
    assert_eq!(bytes(&at["parameter"]), bytes(&exact["parameter_bytes"]), "{at}");
    // SGD's momentum on the embedding; AdamW's two moments on the other six parameter tensors, and
    // a 4-byte step counter for each of them.
    let state = bytes(&exact["sgd_state_bytes"]) + bytes(&exact["adamw_state_bytes"]);
    let embed = bytes(&exact["embed_bytes"]);
    assert_eq!(state, embed + 2 * (bytes(&exact["parameter_bytes"]) - embed) + 6 * 4);
    assert_eq!(bytes(&at["optimizer_state"]), state, "{at}");
}

#[test]
fn torchrun_with_two_ranks_gives_a_trace_per_rank_and_a_merged_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("ddp.vtrace");
    let torchrun = torch_python().with_file_name("torchrun");
    // A port of its own, so that parallel test runs do not meet.
    let port = format!("--master_port={}", 20000 + std::process::id() % 20000);
    let output = record_command(&trace, &torchrun)
        .args(["--nproc_per_node=2", &port])
        .arg(repo_root().join("tests/scripts/ddp_gloo.py"))
        .output()
        .expect("vramscope record runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    // The ranks, not torchrun's own agent process.
    assert!(stderr.contains("from 2 processes,"), "{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    // The ranks print at the same time: their lines can interleave, so read a stream of values.
    let ranks: Vec<serde_json::Value> =
        serde_json::Deserializer::from_str(&stdout).into_iter::<serde_json::Value>().filter_map(Result::ok).collect();
    assert_eq!(ranks.len(), 2, "{stdout}");
    let mut peaks = Vec::new();
    for rank in &ranks {
        let part = dir.path().join(format!("ddp.rank{}.vtrace", rank["rank"]));
        let (peak, at) = categories(&part, Some("optimizer_step"));
        assert_eq!(bytes(&at["parameter"]), bytes(&rank["parameter_bytes"]), "rank {}: {at}", rank["rank"]);
        assert_eq!(bytes(&at["gradient"]), bytes(&rank["parameter_bytes"]), "rank {}: {at}", rank["rank"]);
        peaks.push(bytes(&peak["activation"]) + bytes(&peak["temporary"]) + bytes(&peak["input"]));
    }
    // Rank 1's batches are four times larger.
    assert_ne!(peaks[0], peaks[1]);
    // The merged trace holds both ranks' events.
    let events = |file: &Path| {
        let output = vramscope(&[OsStr::new("info"), OsStr::new("--json"), file.as_os_str()]);
        bytes(&serde_json::from_slice::<serde_json::Value>(&output.stdout).expect("JSON")["allocator_events"])
    };
    let parts: u64 = ranks.iter().map(|r| events(&dir.path().join(format!("ddp.rank{}.vtrace", r["rank"])))).sum();
    assert_eq!(events(&trace), parts);
    // One run, whether read from the recording, its per-rank files or its directory: a row per
    // rank with that rank's own peak, never the ranks' blocks mixed.
    let info = |args: &[&OsStr]| {
        let output = vramscope(&[&[OsStr::new("info"), OsStr::new("--json")][..], args].concat());
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        serde_json::from_slice::<serde_json::Value>(&output.stdout).expect("JSON")
    };
    let own: Vec<u64> = (0..2)
        .map(|rank| {
            let file = dir.path().join(format!("ddp.rank{rank}.vtrace"));
            bytes(&info(&[file.as_os_str()])["devices"][0]["peak_allocated_bytes"])
        })
        .collect();
    let files: Vec<PathBuf> = (0..2).map(|r| dir.path().join(format!("ddp.rank{r}.vtrace"))).collect();
    for args in [vec![trace.as_os_str()], vec![dir.path().as_os_str()], files.iter().map(|f| f.as_os_str()).collect()] {
        let run = info(&args);
        let rows = run["run"]["ranks"].as_array().expect("ranks");
        let peaks: Vec<u64> = rows.iter().map(|r| bytes(&r["peak_allocated_bytes"])).collect();
        assert_eq!(peaks, own, "{args:?}");
        assert_eq!(rows.iter().map(|r| r["rank_from"].clone()).collect::<Vec<_>>(), vec!["recorded"; 2]);
        let worst = if own[1] > own[0] { 1 } else { 0 };
        assert_eq!(run["run"]["worst_rank"], worst, "{args:?}");
    }
    // The report, of the recording or of its directory, draws the rank that peaks highest alone
    // (as advise takes it): never one timeline of both processes' memory.
    let worst = if own[1] > own[0] { 1 } else { 0 };
    for source in [trace.as_os_str(), dir.path().as_os_str()] {
        let png = dir.path().join("report.png");
        let output =
            vramscope(&[OsStr::new("report"), source, OsStr::new("-o"), png.as_os_str(), OsStr::new("--force")]);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        assert!(stdout.contains(&format!("reporting rank {worst}, the one that peaks highest")), "{stdout}");
        assert!(png.exists());
    }
    // diff pairs the ranks: the recording against its own directory, rank by rank, unchanged;
    // a gate holds on every rank or fails and names the rank.
    let diff = |gate: &str| {
        vramscope(&[
            OsStr::new("diff"),
            OsStr::new("--json"),
            OsStr::new(gate),
            trace.as_os_str(),
            dir.path().as_os_str(),
        ])
    };
    let same = diff("--fail-if-peak-grows=0");
    assert!(same.status.success(), "{}", String::from_utf8_lossy(&same.stderr));
    let same: serde_json::Value = serde_json::from_slice(&same.stdout).expect("JSON");
    let rows = same["ranks"].as_array().expect("ranks");
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r["delta_bytes"] == 0), "{rows:?}");
    let shrink = diff("--fail-if-peak-grows=-1");
    assert_eq!(shrink.status.code(), Some(1));
    let shrink: serde_json::Value = serde_json::from_slice(&shrink.stdout).expect("JSON");
    assert_eq!(shrink["gates"][0]["passed"], false);
    assert!(shrink["gates"][0]["worst_rank"].is_u64());
}

/// Two torchrun agents meeting through a c10d rendezvous on 127.0.0.1, each recorded on its own as
/// a node would be (2 nodes x 2 processes, gloo): each rank's trace knows its node and its global
/// rank, and the two recordings, or their directory, open as one run of four ranks.
#[test]
fn torchrun_on_two_nodes_opens_as_one_run_of_four_ranks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let torchrun = torch_python().with_file_name("torchrun");
    let endpoint = format!("127.0.0.1:{}", 20000 + (std::process::id() + 7919) % 20000);
    let nodes: Vec<PathBuf> = ["node_a", "node_b"].iter().map(|n| dir.path().join(format!("{n}.vtrace"))).collect();
    let children: Vec<std::process::Child> = nodes
        .iter()
        .map(|trace| {
            record_command(trace, &torchrun)
                .args(["--nnodes=2", "--nproc_per_node=2", "--rdzv_backend=c10d", "--rdzv_id=vramscope-test"])
                .arg(format!("--rdzv_endpoint={endpoint}"))
                .arg(repo_root().join("tests/scripts/ddp_gloo.py"))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("vramscope record runs")
        })
        .collect();
    for child in children {
        let output = child.wait_with_output().expect("it ends");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    }
    let info = |args: &[&OsStr]| {
        let output = vramscope(&[&[OsStr::new("info"), OsStr::new("--json")][..], args].concat());
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        serde_json::from_slice::<serde_json::Value>(&output.stdout).expect("JSON")
    };
    for args in [nodes.iter().map(|n| n.as_os_str()).collect::<Vec<_>>(), vec![dir.path().as_os_str()]] {
        let run = info(&args);
        let ranks = run["run"]["ranks"].as_array().expect("ranks");
        let numbers: Vec<u64> = ranks.iter().filter_map(|r| r["rank"].as_u64()).collect();
        assert_eq!(numbers, vec![0, 1, 2, 3], "{args:?}");
        assert!(ranks.iter().all(|r| r["rank_from"] == "recorded" && r["host"].is_string()), "{ranks:?}");
        // Two ranks on each node.
        let mut nodes: Vec<u64> = ranks.iter().filter_map(|r| r["node"].as_u64()).collect();
        nodes.sort_unstable();
        assert_eq!(nodes, vec![0, 0, 1, 1], "{ranks:?}");
    }
    // Exported for Perfetto and read back by Python's own JSON reader: a process per rank, its
    // memory counter peaking at the rank's peak, and its phases.
    let exported = dir.path().join("run.perfetto.json");
    let output = vramscope(&[
        OsStr::new("export"),
        dir.path().as_os_str(),
        OsStr::new("-o"),
        exported.as_os_str(),
        OsStr::new("--format"),
        OsStr::new("perfetto"),
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let read = vramscope_e2e::run_python_code(
        "import json, sys\n\
         events = json.load(open(sys.argv[1]))['traceEvents']\n\
         peaks = {}\n\
         for e in events:\n\
         \x20   if e['ph'] == 'C':\n\
         \x20       peaks[e['pid']] = max(peaks.get(e['pid'], 0), e['args']['allocated'])\n\
         phases = sorted({e['name'] for e in events if e['ph'] == 'X'})\n\
         names = sorted(e['args']['name'] for e in events if e['ph'] == 'M' and e['name'] == 'process_name')\n\
         print(json.dumps({'peaks': [peaks[p] for p in sorted(peaks)], 'phases': phases, 'names': names}))\n",
        &[exported.as_os_str()],
    );
    let read: serde_json::Value = serde_json::from_str(read.trim()).expect("JSON");
    let run = info(&[dir.path().as_os_str()]);
    let peaks: Vec<u64> =
        run["run"]["ranks"].as_array().expect("ranks").iter().map(|r| bytes(&r["peak_allocated_bytes"])).collect();
    let exported: Vec<u64> = read["peaks"].as_array().expect("peaks").iter().map(bytes).collect();
    assert_eq!(exported, peaks);
    assert_eq!(read["phases"], serde_json::json!(["backward", "forward", "iteration", "optimizer step"]));
    assert_eq!(read["names"].as_array().map(Vec::len), Some(4));
    // Exported as Parquet tables and queried with DuckDB: SQL over the blocks alone gives each
    // rank's peak and the bytes by category at it, as `info` does.
    let tables = dir.path().join("tables");
    let export = |force: bool| {
        let mut args = vec![OsStr::new("export"), dir.path().as_os_str(), OsStr::new("-o"), tables.as_os_str()];
        args.extend([OsStr::new("--format"), OsStr::new("parquet")]);
        if force {
            args.push(OsStr::new("--force"));
        }
        vramscope(&args)
    };
    let output = export(false);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    // Written tables are never replaced without --force.
    let again = export(false);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
    let sql = std::process::Command::new(torch_python())
        .arg(repo_root().join("tests/scripts/parquet_peaks.py"))
        .arg(&tables)
        .output()
        .expect("python runs");
    assert!(sql.status.success(), "{}", String::from_utf8_lossy(&sql.stderr));
    let sql: serde_json::Value = serde_json::from_slice(&sql.stdout).expect("JSON");
    for rank in run["run"]["ranks"].as_array().expect("ranks") {
        let from_sql = &sql[rank["rank"].to_string()];
        assert_eq!(from_sql["peak"], rank["peak_allocated_bytes"], "rank {}", rank["rank"]);
        assert_eq!(from_sql["categories"], rank["categories_at_peak"], "rank {}", rank["rank"]);
        let from_ranks_table = from_sql["ranks_table"].as_object().expect("ranks table").values().map(bytes).max();
        assert_eq!(from_ranks_table, Some(bytes(&rank["peak_allocated_bytes"])), "rank {}", rank["rank"]);
        // Each table a dataset partitioned by rank, under its node (torchrun's GROUP_RANK, 0 on
        // one machine) when every rank has one.
        let node = rank["node"].as_u64().map(|n| format!("node={n}/")).unwrap_or_default();
        let partition = tables.join(format!("blocks/{node}rank={}/part-0.parquet", rank["rank"]));
        assert!(partition.is_file(), "{}", partition.display());
    }
    assert_eq!(sql.as_object().map(|o| o.len()), Some(4));
    // Replaced with --force, whole: the queries give the same answers again, and nothing of the
    // export's own is left beside the tables.
    let output = export(true);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let again = std::process::Command::new(torch_python())
        .arg(repo_root().join("tests/scripts/parquet_peaks.py"))
        .arg(&tables)
        .output()
        .expect("python runs");
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&again.stdout).expect("JSON"), sql);
    let mut left: Vec<String> = std::fs::read_dir(&tables)
        .expect("tables")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into())
        .collect();
    left.sort();
    assert_eq!(left, ["annotations", "blocks", "events", "ranks", "segments", "tags"]);
}

/// Under `record`, a real CPU PyTorch run prints exactly what it prints alone: the shim's own
/// profiler adds none of kineto's `USDT: ... profiler_start` or `ERROR: ... gpuGetDeviceCount`
/// lines. The recorder's own summary (its lines start with "vramscope: ") is the only addition.
#[test]
fn record_leaves_the_workloads_output_as_it_is() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = repo_root().join("tests/scripts/quiet_train.py");
    let alone = std::process::Command::new(torch_python())
        .arg(&script)
        .env_remove("KINETO_LOG_LEVEL")
        .output()
        .expect("python runs");
    assert!(alone.status.success(), "{}", String::from_utf8_lossy(&alone.stderr));
    let trace = dir.path().join("quiet.vtrace");
    let recorded = vramscope_e2e::vramscope_command()
        .args(["record", "--torch", "cpu", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(torch_python())
        .arg(&script)
        .env_remove("KINETO_LOG_LEVEL")
        .output()
        .expect("vramscope record runs");
    assert!(recorded.status.success(), "{}", String::from_utf8_lossy(&recorded.stderr));
    assert_eq!(String::from_utf8_lossy(&recorded.stdout), String::from_utf8_lossy(&alone.stdout));
    let workload_stderr: String = String::from_utf8_lossy(&recorded.stderr)
        .lines()
        .filter(|l| !l.starts_with("vramscope: "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(workload_stderr, String::from_utf8_lossy(&alone.stderr));
    // And the recording happened: the shim saw the CPU tensors, the model's parameters to the
    // byte (two fp32 linear layers, 64 -> 128 -> 8, with biases: tests/scripts/quiet_train.py).
    let (peak, _) = categories(&trace, None);
    assert_eq!(bytes(&peak["parameter"]), 4 * (64 * 128 + 128 + 128 * 8 + 8), "{peak}");
}

/// Records `script MODE` into `dir`: the JSON line the script prints last (the bytes it computed)
/// and the categories at the peak.
fn record_mode(dir: &Path, script: &Path, mode: &str) -> (serde_json::Value, serde_json::Value) {
    let trace = dir.join(format!("{mode}.vtrace"));
    let output = record_command(&trace, torch_python()).arg(script).arg(mode).output().expect("record runs");
    assert!(output.status.success(), "{mode}: {}", String::from_utf8_lossy(&output.stderr));
    let line = String::from_utf8_lossy(&output.stdout).lines().last().unwrap_or_default().to_owned();
    let exact: serde_json::Value = serde_json::from_str(&line).expect("the script's JSON line");
    (exact, categories(&trace, None).0)
}

#[test]
fn closures_compiled_models_and_trainers_attribute_as_the_plain_loop_does() {
    // The same model, data and Adam in six loop shapes: written out, `optimizer.step(closure)`
    // (forward and backward inside the step), the model torch.compile'd, a Lightning Trainer (which steps with a closure
    // itself, and fetches batches ahead), Hugging Face accelerate (a wrapped optimizer, a re-made
    // loader that fetches ahead) and the transformers Trainer (batches of dicts, AdamW). What is
    // alive at the peak (the optimizer step's, with its temporaries and the batches) must be
    // taken apart the same way.
    let dir = tempfile::tempdir().expect("tempdir");
    let script = repo_root().join("tests/workloads/trainers.py");
    let mut results = Vec::new();
    for mode in ["plain", "closure", "compiled", "lightning", "accelerate", "hf-trainer"] {
        let (exact, peak) = record_mode(dir.path(), &script, mode);
        // Parameters, gradients and Adam's two moments: exact in every shape.
        let parameters = bytes(&exact["parameter_bytes"]);
        assert_eq!(bytes(&peak["parameter"]), parameters, "{mode}: {peak}");
        assert_eq!(bytes(&peak["gradient"]), parameters, "{mode}: {peak}");
        assert!(bytes(&peak["optimizer_state"]) >= 2 * parameters, "{mode}: {peak}");
        // Nothing is unknown but a few scalars (Lightning's and the Trainer's own: a kilobyte is
        // allowed): the dataset the program holds whole is input, read from the loader's
        // dataset (a TensorDataset, or the one a dataset class reads in its __getitem__), and so
        // are a batch's inputs and its targets (which the model never sees), the one fetched
        // ahead too.
        let dataset = bytes(&exact["dataset_bytes"]);
        assert!(bytes(&peak["unknown"]) <= 1024, "{mode}: {peak}");
        assert!(bytes(&peak["input"]) >= dataset + 2 * 64 * 512 * 4, "{mode}: {peak}, the dataset {dataset}");
        results.push((mode, peak));
    }
    // Adam's temporaries at the peak, where Adam steps (the Trainer's AdamW differs).
    let (_, plain) = &results[0];
    for (mode, peak) in results[1..].iter().filter(|r| r.0 != "hf-trainer") {
        assert_eq!(bytes(&peak["temporary"]), bytes(&plain["temporary"]), "{mode}: {peak} against {plain}");
    }
}

/// Trainers used as people use them (`tests/workloads/trainer_shapes.py`): a Lightning data module
/// with validation and logging, a LightningModule's own forward over a map-style dataset,
/// accumulation with clipping, manual optimization with two optimizers, outputs kept for the
/// epoch's end, loader workers, LBFGS's closure and list-valued state, accelerate's accumulation,
/// the transformers Trainer evaluating a GPT-2 as it trains (its evaluation gathers every batch's
/// logits). At the peak at most 5% is unknown, and the parameters (and buffers) are exactly the
/// model's.
#[test]
fn trainers_as_people_use_them_leave_at_most_five_percent_unknown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = repo_root().join("tests/workloads/trainer_shapes.py");
    for mode in [
        "lightning-datamodule",
        "lightning-forward",
        "lightning-accumulate",
        "lightning-manual",
        "lightning-epoch-end",
        "lightning-workers",
        "lbfgs",
        "accelerate-accumulate",
        "hf-gpt2",
    ] {
        let (exact, peak) = record_mode(dir.path(), &script, mode);
        let total: u64 = peak.as_object().expect("categories").values().map(bytes).sum();
        let unknown = bytes(&peak["unknown"]);
        assert!(unknown * 20 <= total, "{mode}: {unknown} of {total} unknown: {peak}");
        let model = bytes(&exact["parameter_bytes"]) + bytes(&exact["buffer_bytes"]);
        assert_eq!(bytes(&peak["parameter"]), model, "{mode}: {peak}");
    }
}

/// `vramscope.record()` inside the program tags what `vramscope record` tags: the same model's
/// parameters (built before the block), gradients and Adam state, to the byte, at the peak and at
/// the optimizer step; its trace says what it cannot see.
#[test]
fn recording_inside_the_program_tags_what_record_tags() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = repo_root().join("tests/workloads/inprocess.py");
    let whole = dir.path().join("whole.vtrace");
    let output = record_command(&whole, torch_python()).arg(&script).output().expect("vramscope record runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let inside = dir.path().join("inside.vtrace");
    let output = std::process::Command::new(torch_python())
        .arg(&script)
        .arg("--inside")
        .arg(&inside)
        .env("PYTHONPATH", repo_root().join("python"))
        .env("VRAMSCOPE_BIN", vramscope_e2e::vramscope_bin())
        .env(vramscope_e2e::SELF_CHECK, "1")
        .output()
        .expect("python runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("PyTorch events recorded inside the program"), "{stderr}");
    let parameters = 4 * (128 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10);
    for at in [None, Some("optimizer_step")] {
        let (whole_peak, whole_at) = categories(&whole, at);
        let (inside_peak, inside_at) = categories(&inside, at);
        let (a, b) = if at.is_some() { (whole_at, inside_at) } else { (whole_peak, inside_peak) };
        assert_eq!(bytes(&b["parameter"]), parameters, "{at:?}: {b}");
        for category in ["parameter", "gradient", "optimizer_state"] {
            assert_eq!(bytes(&a[category]), bytes(&b[category]), "{at:?} {category}: {a} against {b}");
        }
    }
    let info = vramscope_e2e::info_json(&inside);
    let notes = info["notes"].to_string();
    assert!(notes.contains("Recorded inside the program"), "{notes}");
}

#[test]
fn torch_cuda_without_a_gpu_says_why_the_trace_is_empty() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("cuda.vtrace");
    let output = vramscope_e2e::vramscope_command()
        .arg("record")
        .args(["--torch", "cuda", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(torch_python())
        .args(["-c", "import torch; print(torch.ones(3).sum().item())"])
        .output()
        .expect("record runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The workload's own exit status passes through; what the recording lacks is said.
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("--torch cuda recorded no GPU memory") && stderr.contains("--torch cpu"), "{stderr}");
}
