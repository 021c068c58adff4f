//! The advisor: what each remedy would do to the peak, projected from what the trace measured.
//!
//! The memory of a device is taken apart at a few instants: the peak, and the highest point of
//! each recorded phase (forward, backward, optimizer step). At each, by category (the
//! attribution's), with the activations further split by the repeated block of the model they
//! were allocated in (`blocks.3`, from the module spans) and by whether a matrix product made
//! them. A remedy changes those parts by rules stated with it (halving what scales with the
//! batch, dropping what an optimizer keeps, ...); its projected peak is the highest of the changed
//! instants, since a remedy can move the peak to another phase. Each projection carries an
//! uncertainty: the share of the projected bytes its rule can be wrong by.

use std::collections::BTreeMap;

use serde::Serialize;
use vramscope_trace_format::{AnnotationKind, Category, StackId, Trace};

use super::attribution::{Attribution, Attributor, Evidence};
use super::instant;
use super::peak;
use super::replay;

/// Where in the step an instant is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Forward (and the loss after it).
    Forward,
    /// Backward.
    Backward,
    /// The optimizer step.
    OptimizerStep,
    /// None recorded.
    Unknown,
}

/// Memory at one instant, taken apart.
#[derive(Clone, Debug, Default, PartialEq)]
struct Parts {
    phase: Option<Phase>,
    parameter: f64,
    gradient: f64,
    optimizer_state: f64,
    activation: f64,
    temporary: f64,
    input: f64,
    other: f64,
    /// Activations that stay 32-bit under autocast (residual sums, the loss's log-softmax,
    /// embeddings); the rest would be 16-bit.
    fp32_activation: f64,
    /// Activations per repeated block of the model, by block.
    blocks: BTreeMap<String, f64>,
    /// The commonest activation size inside the blocks: what a block passes to the next.
    boundary: f64,
    /// Parameters that matrix products read (cast to 16 bits under autocast, and kept for backward).
    matmul_parameter: f64,
    /// The largest block's parameters (ZeRO-3 gathers one block at a time).
    block_parameter: f64,
}

impl Parts {
    fn total(&self) -> f64 {
        self.parameter
            + self.gradient
            + self.optimizer_state
            + self.activation
            + self.temporary
            + self.input
            + self.other
    }

    fn in_step(&self) -> bool {
        self.phase == Some(Phase::OptimizerStep)
    }
}

/// What the advisor starts from.
#[derive(Clone, Debug, Serialize)]
pub struct Baseline {
    /// The device.
    pub device: i16,
    /// Peak of allocated bytes.
    pub peak_allocated_bytes: u64,
    /// Peak of reserved bytes.
    pub peak_reserved_bytes: u64,
    /// Bytes by category at the peak.
    pub categories_at_peak: BTreeMap<&'static str, u64>,
    /// Where in the step the peak is.
    pub peak_phase: Phase,
    /// Repeated blocks found in the model (by the module spans).
    pub repeated_blocks: usize,
}

/// One remedy (or a combination) and what it would do.
#[derive(Clone, Debug, Serialize)]
pub struct Projection {
    /// E.g. `amp_bf16`, or `amp_bf16+activation_checkpointing`.
    pub id: String,
    /// What to change, in words.
    pub change: String,
    /// The projected peak of allocated bytes.
    pub projected_peak_allocated_bytes: u64,
    /// The projected peak of reserved bytes.
    pub projected_peak_reserved_bytes: u64,
    /// Baseline peak allocated minus projected.
    pub saving_bytes: i64,
    /// The share of the projected bytes the rule may be off by.
    pub uncertainty: f64,
    /// What it costs besides memory.
    pub cost: String,
    /// The reasoning, from the trace.
    pub reason: String,
    /// Whether it fits under the target.
    pub fits: bool,
    #[serde(skip)]
    rank: u32,
}

/// The advice for one device.
#[derive(Clone, Debug, Serialize)]
pub struct Advice {
    /// Where it starts.
    pub baseline: Baseline,
    /// The memory to fit under (the device's, or the one asked for).
    pub target_bytes: Option<u64>,
    /// Whether the baseline's reserved peak fits under the target already.
    pub baseline_fits: bool,
    /// Single remedies, lowest projected peak first.
    pub remedies: Vec<Projection>,
    /// Pairs of remedies, lowest projected peak first.
    pub combinations: Vec<Projection>,
    /// The cheapest change that fits under the target, if one does.
    pub smallest_change_that_fits: Option<String>,
    /// Fragmentation: reserved but not allocated at the peak, and what `expandable_segments`
    /// would give back.
    pub fragmentation: Option<String>,
    /// The autocast the run already used (`cuda:bfloat16`), when the recorder saw one; the
    /// mixed-precision remedies are left out then.
    pub autocast: Option<String>,
}

/// Whether autocast leaves what this block holds in 32 bits: sums that mix the 32-bit residual
/// stream in, the loss's (log-)softmax and reductions, embedding lookups (by the operator the CPU
/// profiler names, or the Python function of a recorded stack).
fn stays_fp32(trace: &Trace, device: i16, stack: StackId) -> bool {
    let interner = &trace.interner;
    interner.frames_of(stack).iter().filter_map(|&f| interner.frame_of(f)).take(2).any(|frame| {
        let function = interner.resolve(frame.function);
        let name = function.strip_prefix("aten::").unwrap_or(function);
        matches!(
            name,
            "add"
                | "add_"
                | "_log_softmax"
                | "log_softmax"
                | "nll_loss_forward"
                | "nll_loss"
                | "cross_entropy"
                | "embedding"
                | "index_select"
                | "mse_loss"
                | "sum"
                | "mean"
        ) || (device >= 0 && matches!(name, "softmax" | "_softmax" | "layer_norm" | "native_layer_norm"))
    })
}

/// `blocks.3` for `blocks.3.attn.q_proj`: the shortest prefix that ends in a number.
fn repeated_block(name: &str) -> Option<&str> {
    let mut end = 0;
    for part in name.split('.') {
        let next = end + part.len();
        if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) && end > 0 {
            return name.get(..next);
        }
        end = next + 1;
    }
    None
}

fn phase_at(spans: &[(i64, i64, AnnotationKind)], time_ns: i64) -> Option<Phase> {
    if spans.is_empty() {
        return None;
    }
    let i = spans.partition_point(|s| s.0 <= time_ns);
    let phase = i.checked_sub(1).and_then(|i| spans.get(i)).filter(|s| s.1 >= time_ns).map(|s| match s.2 {
        AnnotationKind::Forward => Phase::Forward,
        AnnotationKind::Backward => Phase::Backward,
        _ => Phase::OptimizerStep,
    });
    Some(phase.unwrap_or(Phase::Unknown))
}

/// The memory of `device` right after `event` (at `time_ns`), taken apart. One attributor serves
/// every instant of a trace.
fn parts_at(
    trace: &Trace,
    device: i16,
    attributor: &mut Attributor<'_>,
    (event, time_ns): (Option<usize>, i64),
    phase: Option<Phase>,
) -> Parts {
    let mut parts = Parts { phase, ..Parts::default() };
    let mut sizes: BTreeMap<u64, u32> = BTreeMap::new();
    let mut block_parameters: BTreeMap<String, f64> = BTreeMap::new();
    for block in peak::live_at(trace, device, event) {
        let alloc_ns = block.alloc_event.and_then(|i| trace.events.get(i)).map_or(i64::MIN, |e| e.time_ns);
        let bytes = block.size_bytes as f64;
        let Attribution { category, evidence } = attributor.block(block.address, alloc_ns, time_ns, block.stack);
        match category {
            Category::Parameter => {
                parts.parameter += bytes;
                if let Evidence::Tag(name) = evidence {
                    let name = trace.interner.resolve(name);
                    let matmul_weight = name.ends_with(".weight")
                        && !["emb", "norm", "ln"].iter().any(|n| name.rsplit('.').nth(1).unwrap_or("").contains(n));
                    if matmul_weight {
                        parts.matmul_parameter += bytes;
                    }
                    if let Some(block) = repeated_block(name) {
                        *block_parameters.entry(block.to_owned()).or_default() += bytes;
                    }
                }
            }
            Category::Gradient => parts.gradient += bytes,
            Category::OptimizerState => parts.optimizer_state += bytes,
            Category::Activation => {
                parts.activation += bytes;
                if stays_fp32(trace, device, block.stack) {
                    parts.fp32_activation += bytes;
                }
                if let Evidence::Phase { module: Some(module), .. } = evidence
                    && let Some(repeated) = repeated_block(trace.interner.resolve(module))
                {
                    *parts.blocks.entry(repeated.to_owned()).or_default() += bytes;
                    *sizes.entry(block.size_bytes).or_default() += 1;
                }
            }
            Category::Temporary => parts.temporary += bytes,
            Category::Input => parts.input += bytes,
            _ => parts.other += bytes,
        }
    }
    parts.boundary = sizes.iter().max_by_key(|(size, count)| (**count, **size)).map_or(0.0, |(size, _)| *size as f64);
    parts.block_parameter = block_parameters.values().copied().fold(0.0, f64::max);
    parts
}

/// A remedy: its id, what to change, its cost, its uncertainty, how it changes the parts, and a
/// rank of how much it asks of the user (lower first).
struct Remedy {
    id: &'static str,
    change: String,
    cost: String,
    uncertainty: f64,
    rank: u32,
    apply: Box<dyn Fn(&mut Parts)>,
}

fn remedies(gpus: u32, blocks: usize) -> Vec<Remedy> {
    let n = f64::from(gpus.max(1));
    let mut list = vec![
        Remedy {
            id: "amp_bf16",
            change: "run forward and backward under torch.autocast(dtype=torch.bfloat16)".to_owned(),
            cost: "precision: bf16 matrix products (fp32 weights, optimizer and reductions); usually \
                   faster"
                .to_owned(),
            uncertainty: 0.15,
            rank: 1,
            apply: Box::new(amp),
        },
        Remedy {
            id: "amp_fp16",
            change: "run forward and backward under torch.autocast(dtype=torch.float16) with a GradScaler".to_owned(),
            cost: "precision: fp16 range, needs loss scaling; usually faster".to_owned(),
            uncertainty: 0.15,
            rank: 2,
            apply: Box::new(amp),
        },
        Remedy {
            id: "micro_batch_half",
            change: "halve the micro-batch and accumulate gradients over 2 micro-batches".to_owned(),
            cost: "time: 2 smaller steps per update (lower GPU utilisation); the same effective batch".to_owned(),
            uncertainty: 0.05,
            rank: 2,
            apply: Box::new(|p: &mut Parts| {
                if !p.in_step() {
                    p.activation /= 2.0;
                    p.fp32_activation /= 2.0;
                    p.temporary /= 2.0;
                    p.input /= 2.0;
                    p.boundary /= 2.0;
                    p.blocks.values_mut().for_each(|b| *b /= 2.0);
                }
            }),
        },
        Remedy {
            id: "adam_8bit",
            change: "an 8-bit Adam (bitsandbytes' Adam8bit): optimizer state in 8 bits".to_owned(),
            cost: "precision: quantised moments; a dependency".to_owned(),
            uncertainty: 0.1,
            rank: 3,
            apply: Box::new(|p: &mut Parts| p.optimizer_state /= 4.0),
        },
        Remedy {
            id: "adafactor",
            change: "Adafactor: factored second moments, no first moment".to_owned(),
            cost: "convergence: a different optimizer, may need tuning".to_owned(),
            uncertainty: 0.3,
            rank: 4,
            apply: Box::new(|p: &mut Parts| p.optimizer_state *= 0.02),
        },
        Remedy {
            id: "sgd",
            change: "plain SGD (no momentum): no optimizer state".to_owned(),
            cost: "convergence: usually slower for transformers".to_owned(),
            uncertainty: 0.05,
            rank: 5,
            apply: Box::new(|p: &mut Parts| p.optimizer_state = 0.0),
        },
    ];
    if blocks >= 2 {
        list.push(Remedy {
            id: "activation_checkpointing",
            change: format!(
                "checkpoint each of the {blocks} repeated blocks (torch.utils.checkpoint, use_reentrant=False)"
            ),
            cost: "time: each block's forward runs again in backward (about a third more compute)".to_owned(),
            uncertainty: 0.2,
            rank: 3,
            apply: Box::new(checkpoint),
        });
    }
    if gpus > 1 {
        let zero = |id: &'static str, stage: u32, rank: u32| Remedy {
            id,
            change: format!("ZeRO stage {stage} (FSDP) over {gpus} GPUs"),
            cost: match stage {
                1 | 2 => "communication: a reduce-scatter and an all-gather of the gradients per step, as \
                          much as data parallelism's all-reduce"
                    .to_owned(),
                _ => "communication: parameters all-gathered in forward and again in backward, about \
                      1.5x data parallelism's volume"
                    .to_owned(),
            },
            uncertainty: 0.1,
            rank,
            apply: Box::new(move |p: &mut Parts| {
                p.optimizer_state /= n;
                if stage >= 2 {
                    p.gradient /= n;
                }
                if stage >= 3 {
                    p.parameter = p.parameter / n + p.block_parameter;
                }
            }),
        };
        list.push(zero("zero1", 1, 6));
        list.push(zero("zero2", 2, 7));
        list.push(zero("zero3", 3, 8));
    }
    list
}

fn amp(p: &mut Parts) {
    if p.in_step() {
        return;
    }
    // What is not kept in 32 bits halves; autocast's 16-bit copies of the weights are kept for
    // backward. Temporaries (mostly the loss's and the gradients' own) are left as they are.
    let after = (p.activation - p.fp32_activation) / 2.0 + p.fp32_activation + p.matmul_parameter / 2.0;
    if p.activation > 0.0 {
        let scale = after / p.activation;
        p.blocks.values_mut().for_each(|b| *b *= scale);
        p.boundary *= scale;
    }
    p.activation = after;
}

fn checkpoint(p: &mut Parts) {
    if p.in_step() || p.blocks.len() < 2 {
        return;
    }
    let in_blocks: f64 = p.blocks.values().sum();
    let largest = p.blocks.values().copied().fold(0.0, f64::max);
    // Each block keeps only its input; one block's activations are live again while it is
    // recomputed in backward.
    let kept = p.blocks.len() as f64 * p.boundary + largest;
    p.activation = p.activation - in_blocks + kept.min(in_blocks);
    let n = p.blocks.len() as f64;
    p.blocks.values_mut().for_each(|b| *b = largest / n);
}

/// Works out the advice for `device` (the one with the highest peak when `None`); `gpus` for the
/// sharding remedies, `target` to fit under (else the device's memory when known).
pub fn advise(trace: &Trace, device: Option<i16>, gpus: u32, target: Option<u64>) -> Option<Advice> {
    let device = match device {
        Some(d) => d,
        None => trace.devices().into_iter().max_by_key(|&d| peak::peaks(trace, d).allocated.bytes)?,
    };
    let peaks = peak::peaks(trace, device);
    let mut spans: Vec<(i64, i64, AnnotationKind)> = trace
        .annotations
        .iter()
        .filter(|a| {
            matches!(a.kind, AnnotationKind::Forward | AnnotationKind::Backward | AnnotationKind::OptimizerStep)
        })
        .map(|a| (a.start_ns, a.end_ns, a.kind))
        .collect();
    spans.sort_unstable_by_key(|s| s.0);
    // The forward phase runs on to backward: the loss is computed between them.
    for i in 1..spans.len() {
        if let [(_, end, AnnotationKind::Forward), (start, _, AnnotationKind::Backward)] = spans[i - 1..=i] {
            spans[i - 1].1 = end.max(start - 1);
        }
    }
    // The highest point of each phase, and the peak.
    let mut highest: BTreeMap<u8, (u64, Option<usize>, i64)> = BTreeMap::new();
    replay::replay(trace, device, |event, p| {
        if let Some(phase) = phase_at(&spans, p.time_ns).filter(|ph| *ph != Phase::Unknown) {
            let entry = highest.entry(phase as u8).or_insert((0, None, 0));
            if p.allocated_bytes > entry.0 {
                *entry = (p.allocated_bytes, event, p.time_ns);
            }
        }
    });
    let peak_phase = phase_at(&spans, peaks.allocated.time_ns);
    let mut attributor = Attributor::new(trace, device);
    let mut instants =
        vec![parts_at(trace, device, &mut attributor, (peaks.allocated.event, peaks.allocated.time_ns), peak_phase)];
    for (_, event, time) in highest.values() {
        instants.push(parts_at(trace, device, &mut attributor, (*event, *time), phase_at(&spans, *time)));
    }
    let base = instants.first()?.clone();
    let peak_allocated = peaks.allocated.bytes;
    let peak_reserved = peaks.reserved.bytes.max(peak_allocated);
    let reserve_ratio = if peak_allocated > 0 { peak_reserved as f64 / peak_allocated as f64 } else { 1.0 };
    let target = target.or_else(|| trace.metadata.devices.iter().find(|d| d.device == device)?.total_memory_bytes);
    let blocks = base.blocks.len();
    // A run already under autocast gains nothing from it.
    let autocast = trace.metadata.extra.get("autocast").and_then(|v| v.as_str()).map(str::to_owned);
    let mut list = remedies(gpus, blocks);
    if autocast.is_some() {
        list.retain(|r| !r.id.starts_with("amp_"));
    }
    let project = |applied: &[&Remedy]| -> (f64, f64) {
        let mut worst = 0.0f64;
        for instant in &instants {
            let mut p = instant.clone();
            for remedy in applied {
                (remedy.apply)(&mut p);
            }
            worst = worst.max(p.total());
        }
        let uncertainty = applied.iter().map(|r| r.uncertainty * r.uncertainty).sum::<f64>().sqrt();
        (worst, uncertainty)
    };
    let gib = |b: f64| crate::units::bytes(b.max(0.0) as u64);
    let share = |part: f64| 100.0 * part / base.total().max(1.0);
    let reason = |remedy: &Remedy, projected: f64| -> String {
        let before = gib(peak_allocated as f64);
        let after = gib(projected);
        match remedy.id {
            "amp_bf16" | "amp_fp16" => format!(
                "activations are {:.0}% of the peak ({}); all but {} (residual sums, the loss, embeddings) would be \
                 16-bit, and autocast keeps 16-bit copies of {} of weights for backward: {before} -> {after}",
                share(base.activation),
                gib(base.activation),
                gib(base.fp32_activation),
                gib(base.matmul_parameter)
            ),
            "activation_checkpointing" => format!(
                "activations are {:.0}% of the peak ({}), {} of them in {} repeated blocks; checkpointing keeps each \
                 block's input ({} each) and one block's activations ({}) live: {before} -> {after}",
                share(base.activation),
                gib(base.activation),
                gib(base.blocks.values().sum()),
                base.blocks.len(),
                gib(base.boundary),
                gib(base.blocks.values().copied().fold(0.0, f64::max))
            ),
            "micro_batch_half" => format!(
                "what scales with the batch (activations, temporaries, inputs) is {} at the peak; half of it \
                 goes: {before} -> {after}",
                gib(base.activation + base.temporary + base.input)
            ),
            "adam_8bit" | "adafactor" | "sgd" => format!(
                "optimizer state is {:.0}% of the peak ({}): {before} -> {after} (the highest point may move to \
                 another phase)",
                share(base.optimizer_state),
                gib(base.optimizer_state)
            ),
            _ => format!(
                "parameters {}, gradients {}, optimizer state {} at the peak, sharded over {gpus} GPUs: {before} -> \
                 {after}",
                gib(base.parameter),
                gib(base.gradient),
                gib(base.optimizer_state)
            ),
        }
    };
    let to_projection =
        |id: String, change: String, cost: String, rank: u32, (worst, uncertainty): (f64, f64), reason: String| {
            let allocated = worst.round() as u64;
            let reserved = (worst * reserve_ratio).round() as u64;
            Projection {
                id,
                change,
                projected_peak_allocated_bytes: allocated,
                projected_peak_reserved_bytes: reserved,
                saving_bytes: peak_allocated as i64 - allocated as i64,
                uncertainty: (uncertainty * 100.0).round() / 100.0,
                cost,
                reason,
                fits: target.is_some_and(|t| reserved <= t),
                rank,
            }
        };
    let mut singles: Vec<Projection> = list
        .iter()
        .map(|r| {
            let projected = project(&[r]);
            to_projection(r.id.to_owned(), r.change.clone(), r.cost.clone(), r.rank, projected, reason(r, projected.0))
        })
        .collect();
    // Fragmentation: from the allocator's segments at the peak (and at the first OOM), what
    // expandable segments would give back. They map memory in 2 MiB pages as blocks need it, so
    // what stays reserved is the allocated bytes, their rounding waste, and part of a page.
    let at_peak = instant::instant(trace, device, peaks.allocated.event, peaks.allocated.time_ns);
    let waste = peak_reserved.saturating_sub(peak_allocated);
    let internal = at_peak.total.free_internal_bytes;
    let page = 2u64 << 20;
    let oom = trace.ooms.iter().filter(|o| o.device == device).min_by_key(|o| o.time_ns).map(|o| {
        let upto = trace.events.partition_point(|e| e.time_ns <= o.time_ns).checked_sub(1);
        let state = instant::instant(trace, device, upto, o.time_ns);
        (o.requested_bytes, state.total.free_external_bytes, state.total.largest_free_bytes)
    });
    let fragmentation = (waste > peak_reserved / 20 && waste > page).then(|| {
        let mut text = format!(
            "{} reserved but not allocated at the peak ({:.0}% of reserved; {} of it rounding inside blocks, \
             largest free range {}). With PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True segments grow and \
             shrink in 2 MiB pages, so about {} of it would not be reserved; max_split_size_mb keeps large \
             cached blocks from being split for small requests, which helps when the free space is scattered \
             in large segments",
            crate::units::bytes(waste),
            100.0 * waste as f64 / peak_reserved as f64,
            crate::units::bytes(internal),
            crate::units::bytes(at_peak.total.largest_free_bytes),
            crate::units::bytes(waste.saturating_sub(internal + page))
        );
        if let Some((requested, free, largest)) = oom {
            text.push_str(&format!(
                ". At the first OOM, {} was asked for while {} was free inside segments (largest range {}){}",
                crate::units::bytes(requested),
                crate::units::bytes(free),
                crate::units::bytes(largest),
                if free >= requested && largest < requested {
                    ": fragmentation, not a lack of memory, failed it; expandable segments would have served it"
                } else {
                    ""
                }
            ));
        }
        text
    });
    if waste > page {
        let reserved = (peak_allocated + internal + page).min(peak_reserved);
        singles.push(Projection {
            id: "expandable_segments".to_owned(),
            change: "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True".to_owned(),
            projected_peak_allocated_bytes: peak_allocated,
            projected_peak_reserved_bytes: reserved,
            saving_bytes: 0,
            uncertainty: 0.1,
            cost: "none known; virtual-memory mappings instead of fixed segments".to_owned(),
            reason: format!(
                "{} of the reserved peak is free space inside segments; expandable segments reserve what is \
                 allocated plus its rounding ({}) and part of a page: {} -> {} reserved",
                crate::units::bytes(waste),
                crate::units::bytes(internal),
                crate::units::bytes(peak_reserved),
                crate::units::bytes(reserved)
            ),
            fits: target.is_some_and(|t| reserved <= t),
            rank: 0,
        });
    }
    singles.sort_by_key(|p| p.projected_peak_allocated_bytes);
    // Pairs that can go together.
    let exclusive = |a: &str, b: &str| {
        let group = |id: &str| match id {
            "amp_bf16" | "amp_fp16" => 1,
            "adam_8bit" | "adafactor" | "sgd" => 2,
            "zero1" | "zero2" | "zero3" => 3,
            _ => 0,
        };
        group(a) != 0 && group(a) == group(b)
    };
    let mut combinations = Vec::new();
    for (i, a) in list.iter().enumerate() {
        for b in list.iter().skip(i + 1) {
            if exclusive(a.id, b.id) {
                continue;
            }
            let projected = project(&[a, b]);
            combinations.push(to_projection(
                format!("{}+{}", a.id, b.id),
                format!("{}; and {}", a.change, b.change),
                format!("{}; {}", a.cost, b.cost),
                a.rank + b.rank,
                projected,
                format!("{} and {} together: {} -> {}", a.id, b.id, gib(peak_allocated as f64), gib(projected.0)),
            ));
        }
    }
    combinations.sort_by_key(|p| p.projected_peak_allocated_bytes);
    let smallest_change_that_fits = target.and_then(|_| {
        let mut fitting: Vec<&Projection> = singles.iter().chain(&combinations).filter(|p| p.fits).collect();
        fitting.sort_by_key(|p| (p.rank, p.projected_peak_reserved_bytes));
        fitting.first().map(|p| p.id.clone())
    });
    let categories_at_peak = {
        let mut c = BTreeMap::new();
        for (name, value) in [
            ("parameter", base.parameter),
            ("gradient", base.gradient),
            ("optimizer_state", base.optimizer_state),
            ("activation", base.activation),
            ("temporary", base.temporary),
            ("input", base.input),
            ("other", base.other),
        ] {
            if value > 0.0 {
                c.insert(name, value as u64);
            }
        }
        c
    };
    Some(Advice {
        baseline: Baseline {
            device,
            peak_allocated_bytes: peak_allocated,
            peak_reserved_bytes: peak_reserved,
            categories_at_peak,
            peak_phase: peak_phase.unwrap_or(Phase::Unknown),
            repeated_blocks: blocks,
        },
        target_bytes: target,
        // A run that failed an allocation did not fit, whatever its peak says.
        baseline_fits: target.is_some_and(|t| peak_reserved <= t) && !trace.ooms.iter().any(|o| o.device == device),
        remedies: singles,
        combinations,
        smallest_change_that_fits,
        fragmentation,
        autocast,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_blocks_are_the_shortest_numbered_prefix() {
        assert_eq!(repeated_block("blocks.3.attn.q_proj"), Some("blocks.3"));
        assert_eq!(repeated_block("model.layers.12.mlp"), Some("model.layers.12"));
        assert_eq!(repeated_block("lm_head"), None);
        assert_eq!(repeated_block("0.weight"), None);
        assert_eq!(repeated_block("h.0"), Some("h.0"));
    }

    #[test]
    fn checkpointing_keeps_boundaries_and_one_block() {
        let mut p = Parts { activation: 100.0, boundary: 5.0, ..Parts::default() };
        p.blocks.insert("blocks.0".into(), 40.0);
        p.blocks.insert("blocks.1".into(), 40.0);
        checkpoint(&mut p);
        // 20 outside the blocks, 2 boundaries of 5, one block of 40.
        assert!((p.activation - 70.0).abs() < 1e-9);
    }
}
