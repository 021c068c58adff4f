//! `vramscope advise` against measurement: projections made from one recorded run of
//! `samples/pytorch/train.py` (CPU, AdamW, batch 8, fp32) must land within 15% of the peak measured
//! in a run with the change made (checkpointing, of every block and of the first only, batch 4
//! accumulated over 2 micro-batches, half the sequence, SGD, Adafactor, bf16 autocast); and on the H200 recordings, the bf16 projection from the fp32 run
//! against the bf16 run.

#![allow(clippy::expect_used)]

mod advise_shared;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use advise_shared::{json, peak, projection, record, record_ranks};
use vramscope_e2e::{repo_root, vramscope};

#[test]
fn projections_from_one_run_land_within_15_percent_of_the_changed_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = record(dir.path(), "base", &[]);
    let advice = json(&[OsStr::new("advise"), OsStr::new("--json"), base.as_os_str()]);
    assert_eq!(advice["baseline"]["peak_allocated_bytes"].as_u64(), Some(peak(&base, -1)));
    assert_eq!(advice["baseline"]["repeated_blocks"], 2);
    assert_eq!(advice["sequence"], true);
    // A training run keeps 32-bit master weights: bf16 weights are an inference remedy.
    assert!(advice["remedies"].as_array().is_some_and(|r| r.iter().all(|r| r["id"] != "bf16_weights")));
    // A target below the peak: the order to try the remedies in, each step lower than the one
    // before, the first the cheapest that saves, and the last fitting.
    let reserved = advice["baseline"]["peak_reserved_bytes"].as_u64().expect("bytes");
    let target = format!("--target-bytes={}", reserved * 55 / 100);
    let planned = json(&[OsStr::new("advise"), OsStr::new("--json"), OsStr::new(&target), base.as_os_str()]);
    let plan = planned["plan"].as_array().expect("a plan");
    assert!(plan.len() >= 2, "{plan:?}");
    let steps: Vec<u64> = plan.iter().map(|s| s["projected_peak_reserved_bytes"].as_u64().expect("bytes")).collect();
    assert!(steps.windows(2).all(|w| w[1] < w[0]) && steps[0] < reserved, "{steps:?}");
    assert_eq!(plan.last().map(|s| &s["fits"]), Some(&serde_json::Value::Bool(true)), "{plan:?}");
    assert!(plan.iter().rev().skip(1).all(|s| s["fits"] == false), "{plan:?}");
    assert_eq!(plan[0]["id"], "amp_bf16", "{plan:?}");
    // Each of these is the recorded stream changed and replayed (autocast with its weight
    // copies added by a rule), and the replay says in which phase the new peak falls.
    let remedies = advice["remedies"].as_array().expect("remedies");
    for (id, method) in [
        ("activation_checkpointing", "replay"),
        ("micro_batch_half", "replay"),
        ("sequence_half", "replay"),
        ("sgd", "replay"),
        ("adafactor", "replay"),
        ("amp_bf16", "replay_and_rule"),
    ] {
        let remedy = remedies.iter().find(|r| r["id"] == id).expect(id);
        assert_eq!(remedy["method"], method, "{id}");
        assert!(
            ["forward", "backward", "optimizer_step"].contains(&remedy["projected_peak_phase"].as_str().unwrap_or(""))
        );
    }
    for (id, args) in [
        ("activation_checkpointing", &["--checkpoint"][..]),
        ("micro_batch_half", &["--batch-size", "4", "--accumulate", "2"][..]),
        ("sequence_half", &["--seq-len", "32"][..]),
        ("sgd", &["--optimizer", "sgd"][..]),
        ("adafactor", &["--optimizer", "adafactor"][..]),
        ("amp_bf16", &["--bf16"][..]),
        ("amp_fp16", &["--fp16"][..]),
    ] {
        let changed = record(dir.path(), id, args);
        let measured = peak(&changed, -1);
        if id == "amp_bf16" {
            // A run already under autocast is not told to use it.
            let again = json(&[OsStr::new("advise"), OsStr::new("--json"), changed.as_os_str()]);
            assert_eq!(again["autocast"], "cpu:bfloat16");
            assert!(
                again["remedies"]
                    .as_array()
                    .is_some_and(|r| r.iter().all(|r| !r["id"].as_str().unwrap_or("").starts_with("amp_")))
            );
        }
        let (projected, uncertainty) = projection(&advice, id);
        let error = (projected as f64 - measured as f64) / measured as f64;
        assert!(error.abs() <= 0.15, "{id}: projected {projected}, measured {measured} ({:+.1}%)", 100.0 * error);
        assert!(error.abs() <= uncertainty + 0.01, "{id}: off by {:.1}%, said ±{uncertainty}", 100.0 * error);
        if ["activation_checkpointing", "micro_batch_half", "sgd", "adafactor", "amp_bf16", "amp_fp16"].contains(&id) {
            // Replayed from the changed event stream (autocast's copies by the layers' calls):
            // the 3%.
            assert!(error.abs() <= 0.03, "{id}: off by {:.2}%", 100.0 * error);
        }
    }
    // Selective checkpointing, replayed: only the first of the two blocks, against the run that
    // checkpoints only it.
    let some = &advice["checkpointing_by_blocks"][0];
    assert_eq!((some["blocks"].as_u64(), some["of"].as_u64()), (Some(1), Some(2)), "{some}");
    let projected = some["projected_peak_allocated_bytes"].as_u64().expect("bytes");
    let measured = peak(&record(dir.path(), "checkpoint_1_of_2", &["--checkpoint-blocks", "1"]), -1);
    let error = (projected as f64 - measured as f64) / measured as f64;
    assert!(error.abs() <= 0.03, "1 of 2 blocks checkpointed: projected {projected}, measured {measured}");
}

/// The largest batch and the longest sequence under a target, fitted over recordings at other
/// sizes, against the recordings at those sizes: the batch fitted through 8 and 4 against 16;
/// the sequence through 64, 32 and 96 (with its square) against 128, and through 64 and 32 (a
/// line, an upper bound).
#[test]
fn the_largest_batch_and_sequence_are_fitted_over_recordings() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = record(dir.path(), "base", &[]);
    let run = |name: &str, args: &[&str]| record(dir.path(), name, args);
    let (b4, b16) = (run("b4", &["--batch-size", "4"]), run("b16", &["--batch-size", "16"]));
    let (s32, s96, s128) =
        (run("s32", &["--seq-len", "32"]), run("s96", &["--seq-len", "96"]), run("s128", &["--seq-len", "128"]));
    let fitted = |others: &[&Path], flag: &str, sizes: &str, target: u64| {
        let mut args: Vec<&OsStr> = vec![OsStr::new("advise"), OsStr::new("--json"), base.as_os_str()];
        for other in others {
            args.extend([OsStr::new("--with"), other.as_os_str()]);
        }
        let target = format!("--target-bytes={target}");
        args.extend([OsStr::new(flag), OsStr::new(sizes), OsStr::new(&target)]);
        json(&args)["scaling"].clone()
    };
    let at = |fit: &serde_json::Value, size: f64| {
        let term = |key: &str| fit[key].as_f64().expect("f64");
        term("fixed_bytes") + term("per_unit_bytes") * size + term("per_unit_squared_bytes") * size * size
    };
    let measured = peak(&b16, -1);
    let batch = fitted(&[&b4], "--batch", "8,4", measured);
    let error = (at(&batch, 16.0) - measured as f64) / measured as f64;
    assert!(error.abs() <= 0.01, "batch 16: fitted {}, measured {measured}", at(&batch, 16.0));
    assert_eq!(batch["largest_that_fits"], 16, "{batch}");
    let measured = peak(&s128, -1);
    let sequence = fitted(&[&s32, &s96], "--seq-len", "64,32,96", measured);
    let error = (at(&sequence, 128.0) - measured as f64) / measured as f64;
    assert!(error.abs() <= 0.01, "sequence 128: fitted {}, measured {measured}", at(&sequence, 128.0));
    assert_eq!(sequence["at_most"], false);
    assert!(sequence["largest_that_fits"].as_u64().is_some_and(|s| (127..=128).contains(&s)), "{sequence}");
    // A line through two lengths grows slower than attention: an upper bound, and said so.
    let line = fitted(&[&s32], "--seq-len", "64,32", measured);
    assert_eq!(line["at_most"], true);
    assert!(line["largest_that_fits"].as_u64().is_some_and(|s| s >= 128), "{line}");
}

/// An inference run (forward only, under `torch.inference_mode`) gets its own remedies,
/// projected from the fp32 run against the runs with each made: the model stored in bf16, the
/// forward under autocast, half the batch, the linear layers' weights in int8 and in 4 bits. A run whose weights are bf16 already is not told to
/// store them in bf16, and a training run is not told at all.
#[test]
fn an_inference_run_gets_its_own_remedies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |name: &str, args: &[&str]| record(dir.path(), name, &[&["--inference"][..], args].concat());
    let base = run("inference", &[]);
    let advice = json(&[OsStr::new("advise"), OsStr::new("--json"), base.as_os_str()]);
    assert_eq!(advice["training"], false);
    assert_eq!(advice["fp32_parameter_share"], 1.0);
    let has = |advice: &serde_json::Value, id: &str| {
        advice["remedies"].as_array().is_some_and(|r| r.iter().any(|r| r["id"] == id))
    };
    for id in ["activation_checkpointing", "sgd", "adafactor", "adam_8bit"] {
        assert!(!has(&advice, id), "{id} for an inference run");
    }
    for (id, args, within) in [
        ("bf16_weights", &["--weights-dtype", "bfloat16"][..], 0.03),
        ("amp_bf16", &["--bf16"][..], 0.03),
        ("micro_batch_half", &["--batch-size", "4"][..], 0.05),
        // Every linear layer's weight in int8 with a scale per output (torch's int8 weight-only
        // product, on the CPU too): exact.
        ("int8_weights", &["--int8-weights"][..], 0.03),
        // In 4 bits, a scale and zero point per 128 inputs (torch's int4 weight-only product for
        // the host): exact.
        ("int4_weights", &["--int4-weights"][..], 0.03),
    ] {
        let changed = run(id, args);
        let measured = peak(&changed, -1);
        let (projected, uncertainty) = projection(&advice, id);
        let error = (projected as f64 - measured as f64) / measured as f64;
        let say = format!("{id}: projected {projected}, measured {measured} ({:+.2}%)", 100.0 * error);
        assert!(error.abs() <= within && error.abs() <= uncertainty + 0.01, "{say}, said ±{uncertainty}");
        if id == "bf16_weights" {
            let again = json(&[OsStr::new("advise"), OsStr::new("--json"), changed.as_os_str()]);
            assert!(!has(&again, id), "bf16 weights proposed for bf16 weights");
            let notes = again["notes"].as_array().expect("notes");
            assert!(notes.iter().any(|n| n.as_str().is_some_and(|n| n.contains("16-bit already"))), "{notes:?}");
        }
    }
}

#[test]
fn the_bf16_projection_on_the_h200_recording_matches_the_bf16_run() {
    let traces = repo_root().join("samples/traces");
    let fp32 = traces.join("h200-torch-plain.vtrace");
    let advice = json(&[OsStr::new("advise"), OsStr::new("--json"), fp32.as_os_str()]);
    let (projected, uncertainty) = projection(&advice, "amp_bf16");
    let measured = peak(&traces.join("h200-torch-bf16.vtrace"), 0);
    let error = (projected as f64 - measured as f64) / measured as f64;
    assert!(error.abs() <= 0.15 && error.abs() <= uncertainty, "projected {projected}, measured {measured}");
    // Expandable segments: the reserved peak projected from the default allocator's run against
    // the run with expandable_segments:True.
    let remedy = advice["remedies"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["id"] == "expandable_segments"))
        .expect("expandable_segments");
    let projected = remedy["projected_peak_reserved_bytes"].as_u64().expect("bytes");
    let info =
        json(&[OsStr::new("info"), OsStr::new("--json"), traces.join("h200-torch-expandable.vtrace").as_os_str()]);
    let measured = info["devices"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["device"] == 0))
        .and_then(|d| d["peak_reserved_bytes"].as_u64())
        .expect("reserved");
    // Replayed through the allocator's model with expandable segments: the 1%.
    assert!(projected.abs_diff(measured) * 100 <= measured, "expandable: projected {projected}, measured {measured}");
    assert_eq!(remedy["method"], "replay");
    // The device's memory is the default target; everything here fits an H200.
    assert!(advice["target_bytes"].as_u64().is_some_and(|t| t > 130 << 30));
    assert!(advice["smallest_change_that_fits"].is_string());
    // Every remedy the issue names for one GPU is there, with a reason and a cost.
    for id in ["amp_bf16", "amp_fp16", "activation_checkpointing", "adafactor", "adam_8bit", "sgd", "micro_batch_half"]
    {
        let remedy = advice["remedies"].as_array().and_then(|r| r.iter().find(|r| r["id"] == id)).expect(id);
        assert!(remedy["reason"].as_str().is_some_and(|r| r.len() > 20), "{id}");
        assert!(remedy["projected_peak_reserved_bytes"].as_u64().is_some(), "{id}");
    }
    // One GPU in the trace and no --gpus: sharding is not projected, and the output says so.
    let has = |advice: &serde_json::Value, id: &str| {
        advice["remedies"].as_array().is_some_and(|r| r.iter().any(|r| r["id"] == id))
    };
    let says = |advice: &serde_json::Value, text: &str| {
        advice["notes"].as_array().is_some_and(|n| n.iter().any(|n| n.as_str().is_some_and(|n| n.contains(text))))
    };
    assert!(advice["gpus"].is_null(), "{}", advice["gpus"]);
    assert!(says(&advice, "sharding: not projected, the trace shows one GPU"), "{}", advice["notes"]);
    assert!(["zero1", "zero2", "zero3"].iter().all(|id| !has(&advice, id)));
    let sharded = json(&[OsStr::new("advise"), OsStr::new("--json"), OsStr::new("--gpus=4"), fp32.as_os_str()]);
    assert_eq!(sharded["gpus"]["count"], 4);
    assert_eq!(sharded["gpus"]["from"], "given");
    for id in ["zero1", "zero2", "zero3"] {
        assert!(has(&sharded, id), "{id}");
    }
    // The run that had expandable segments is not told to turn them on: its segments are mapped
    // piecewise, which is what the allocator does with them.
    let expandable =
        json(&[OsStr::new("advise"), OsStr::new("--json"), traces.join("h200-torch-expandable.vtrace").as_os_str()]);
    assert!(!has(&expandable, "expandable_segments"), "{}", expandable["remedies"]);
    assert!(says(&expandable, "expandable_segments on (segments mapped piecewise"), "{}", expandable["notes"]);
    assert_eq!(expandable["allocator"]["expandable_segments"]["value"], true);
    // A recording that trained: backward ran.
    assert_eq!(advice["training"], true);
}

/// A real snapshot, with the settings it was recorded under changed by Python's own pickle (the
/// fixture itself is read, never copied into the project).
fn snapshot_with_settings(dir: &Path, name: &str, settings: &str) -> PathBuf {
    let source = vramscope_e2e::fixtures_dir().join("pytorch-snapshots").join(name);
    let out = dir.join(name);
    let script = format!(
        "import pickle, sys\n\
         snapshot = pickle.load(open(sys.argv[1], 'rb'))\n\
         snapshot['allocator_settings'].update({settings})\n\
         pickle.dump(snapshot, open(sys.argv[2], 'wb'), protocol=4)\n"
    );
    let status = std::process::Command::new(vramscope_e2e::python())
        .args(["-c", &script])
        .arg(&source)
        .arg(&out)
        .status()
        .expect("python runs");
    assert!(status.success());
    out
}

#[test]
fn imported_snapshots_are_read_before_advising() {
    let dir = tempfile::tempdir().expect("tempdir");
    let has = |advice: &serde_json::Value, id: &str| {
        advice["remedies"].as_array().is_some_and(|r| r.iter().any(|r| r["id"] == id))
    };
    let says = |advice: &serde_json::Value, text: &str| {
        advice["notes"].as_array().is_some_and(|n| n.iter().any(|n| n.as_str().is_some_and(|n| n.contains(text))))
    };
    // The full step with its own settings (the default allocator): expandable segments are
    // proposed; recorded with them on, they are not.
    let plain = vramscope_e2e::fixtures_dir().join("pytorch-snapshots/gpt_ctx128_fullstep_fp32.pickle");
    let advice = json(&[OsStr::new("advise"), OsStr::new("--json"), plain.as_os_str()]);
    assert!(has(&advice, "expandable_segments"), "{}", advice["remedies"]);
    assert_eq!(advice["allocator"]["expandable_segments"]["source"], "snapshot");
    assert_eq!(advice["training"], true);
    // Its 32 blocks are found in the stacks; the peak is in the optimizer step, where
    // checkpointing changes nothing: considered, and said so.
    let considered =
        advice["without_effect"].as_array().is_some_and(|w| w.iter().any(|w| w == "activation_checkpointing"));
    assert!(has(&advice, "activation_checkpointing") || considered, "{}", advice["without_effect"]);
    let on = snapshot_with_settings(
        dir.path(),
        "gpt_ctx128_fullstep_fp32.pickle",
        "{'expandable_segments': True, 'PYTORCH_CUDA_ALLOC_CONF': 'expandable_segments:True'}",
    );
    let advice = json(&[OsStr::new("advise"), OsStr::new("--json"), on.as_os_str()]);
    assert!(!has(&advice, "expandable_segments"), "{}", advice["remedies"]);
    assert!(
        says(&advice, "expandable_segments on (the snapshot's allocator_settings): not proposed"),
        "{}",
        advice["notes"]
    );
    // A forward pass only (an inference run): no checkpointing, gradient or optimizer advice.
    let forward = vramscope_e2e::fixtures_dir().join("pytorch-snapshots/gpt_ctx128_forward_fp32.pickle");
    let advice = json(&[OsStr::new("advise"), OsStr::new("--json"), OsStr::new("--gpus=4"), forward.as_os_str()]);
    assert_eq!(advice["training"], false);
    for id in ["activation_checkpointing", "zero1", "zero2", "sgd", "adafactor", "adam_8bit"] {
        assert!(!has(&advice, id), "{id} for an inference run: {}", advice["remedies"]);
    }
    assert!(says(&advice, "no backward pass in the trace"), "{}", advice["notes"]);
    // The snapshot does not say the parameters' dtype: 16-bit weights are not projected.
    assert!(says(&advice, "bf16 weights: not projected"), "{}", advice["notes"]);
    assert!(!has(&advice, "bf16_weights"));
    assert!(has(&advice, "micro_batch_half"));
}

/// ZeRO projected from one rank of a data-parallel run (DDP, AdamW, 2 ranks) against the runs
/// with the optimizer state sharded (`ZeroRedundancyOptimizer`) and with everything sharded
/// (FSDP2's `fully_shard`): each rank's peak. The rank's own trace says how many ranks there were.
/// And tensor and pipeline parallelism over 2, from a run on one process, against the runs with
/// them.
#[test]
fn sharding_projections_land_on_the_zero1_fsdp_tensor_and_pipeline_parallel_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Ports of their own, so that parallel test runs do not meet.
    let port = 30000 + std::process::id() % 20000;
    let ddp = record_ranks(dir.path(), "ddp", port, &[]);
    let advice = json(&[OsStr::new("advise"), OsStr::new("--json"), ddp[0].as_os_str()]);
    assert_eq!(advice["gpus"]["count"], 2, "{}", advice["gpus"]);
    assert_eq!(advice["gpus"]["from"], "world_size");
    // The recording of both ranks is a run: advised on the rank that peaks highest, alone.
    let merged = json(&[OsStr::new("advise"), OsStr::new("--json"), dir.path().join("ddp.vtrace").as_os_str()]);
    let highest = ddp.iter().map(|t| peak(t, -1)).max().expect("ranks");
    assert_eq!(merged["baseline"]["peak_allocated_bytes"].as_u64(), Some(highest), "{}", merged["rank"]);
    assert_eq!(merged["rank"]["peaks"].as_array().map(Vec::len), Some(2));
    // Within the stated uncertainty: the ranks' peaks move from run to run with gloo's timing
    // (the same ZeRO-1 program peaked at 20.6 MB in most runs and 22.8 MB in one of about
    // eight), so a tighter bound would test the timing, not the projection.
    for (id, args) in [("zero1", "--zero1"), ("zero3", "--fsdp")] {
        let (projected, uncertainty) = projection(&advice, id);
        for (rank, trace) in
            record_ranks(dir.path(), id, port + 1 + u32::from(id == "zero3"), &[args]).iter().enumerate()
        {
            let measured = peak(trace, -1);
            let error = (projected as f64 - measured as f64) / measured as f64;
            let say = format!(
                "{id}, rank {rank}: projected {projected}, measured {measured} ({:+.2}%); baseline {}",
                100.0 * error,
                advice["baseline"]
            );
            assert!(error.abs() <= uncertainty + 0.01, "{say}, said ±{uncertainty}");
        }
    }
    // Tensor parallel over 2 (each block's projections split, every rank on the whole batch),
    // projected from the run on one process.
    let single = record(dir.path(), "single", &[]);
    let advice = json(&[OsStr::new("advise"), OsStr::new("--json"), OsStr::new("--gpus=2"), single.as_os_str()]);
    let (projected, uncertainty) = projection(&advice, "tensor_parallel");
    let method = |id: &str| {
        advice["remedies"].as_array().and_then(|r| r.iter().find(|r| r["id"] == id)).map(|r| r["method"].clone())
    };
    assert_eq!(method("tensor_parallel"), Some("rule".into()));
    assert_eq!(method("zero1"), Some("replay".into()));
    for (rank, trace) in record_ranks(dir.path(), "tp", port + 3, &["--tp"]).iter().enumerate() {
        let measured = peak(trace, -1);
        let error = (projected as f64 - measured as f64) / measured as f64;
        let say = format!(
            "tensor_parallel, rank {rank}: projected {projected}, measured {measured} ({:+.2}%)",
            100.0 * error
        );
        assert!(error.abs() <= uncertainty + 0.01, "{say}, said ±{uncertainty}");
    }
    // Pipeline parallel over 2 stages (torch.distributed.pipelining, 1F1B over 4 micro-batches):
    // the projection is the busiest stage's peak.
    let (projected, uncertainty) = projection(&advice, "pipeline_parallel");
    let stages: Vec<u64> =
        record_ranks(dir.path(), "pp", port + 4, &["--pp"]).iter().map(|trace| peak(trace, -1)).collect();
    let busiest = stages.iter().copied().max().expect("two stages");
    let error = (projected as f64 - busiest as f64) / busiest as f64;
    assert!(
        error.abs() <= uncertainty + 0.01,
        "pipeline_parallel: projected {projected}, the stages peaked at {stages:?} ({:+.2}%), said ±{uncertainty}",
        100.0 * error
    );
}

/// Snapshots have no module spans: the repeated blocks are found in the stacks (the line that
/// calls each block, a module call below it, the block's `forward` going back to an earlier line
/// where the next block begins), as many as the models have: cs336's small model (12 layers,
/// d 768) and its 2.7B model (32 layers). Checkpointing is then projected from them, and every
/// remedy left out says why.
#[test]
fn repeated_blocks_are_found_in_the_stacks_of_snapshots() {
    let snapshot = |name: &str| vramscope_e2e::fixtures_dir().join("pytorch-snapshots").join(name);
    let advise = |path: &Path| json(&[OsStr::new("advise"), OsStr::new("--json"), path.as_os_str()]);
    let left_out = |advice: &serde_json::Value, id: &str| -> String {
        let rows = advice["left_out"].as_array().expect("left_out");
        rows.iter().find(|r| r["id"] == id).map_or_else(String::new, |r| r["why"].as_str().unwrap_or("").to_owned())
    };
    // A training step's forward (the peak) and backward: checkpointing replayed from the blocks.
    let small = advise(&snapshot("stanford_cs336_a2_memory_snapshot.pickle"));
    assert_eq!(small["baseline"]["repeated_blocks"], 12, "{}", small["baseline"]);
    let row = small["remedies"].as_array().and_then(|r| r.iter().find(|r| r["id"] == "activation_checkpointing"));
    let row = row.expect("checkpointing proposed");
    assert_eq!((row["method"].as_str(), row["name"].as_str()), (Some("replay"), Some("activation checkpointing")));
    assert!(
        row["projected_peak_allocated_bytes"].as_u64().expect("bytes")
            < small["baseline"]["peak_allocated_bytes"].as_u64().expect("bytes") / 2
    );
    // No layers listed in a snapshot: the remedies that need them say so.
    assert_eq!(left_out(&small, "lora"), "layers_not_seen");
    // The 2.7B model's whole step peaks in the optimizer step: checkpointing is considered and
    // changes nothing there; its forward alone is inference, and says so.
    let step = advise(&snapshot("gpt_ctx128_fullstep_fp32.pickle"));
    assert_eq!(step["baseline"]["repeated_blocks"], 32);
    let without: Vec<&str> =
        step["without_effect"].as_array().expect("list").iter().filter_map(serde_json::Value::as_str).collect();
    assert!(without.contains(&"activation_checkpointing"), "{without:?}");
    let forward = advise(&snapshot("gpt_ctx128_forward_fp32.pickle"));
    assert_eq!(forward["baseline"]["repeated_blocks"], 32);
    assert_eq!(left_out(&forward, "activation_checkpointing"), "no_backward");
    let text = vramscope(&[OsStr::new("advise"), snapshot("gpt_ctx128_forward_fp32.pickle").as_os_str()]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("not proposed: activation checkpointing"), "{text}");
}
