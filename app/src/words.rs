//! The analysis in words, for people: the sentence on top of a comparison, each remedy's change,
//! cost and reasoning, fragmentation, and what a trace cannot show. The analysis crate returns
//! numbers and ids; the CLI, the app and the report word them here, once, in the same words.

use vramscope_trace_format::{Category, DeviceId, Trace};

use crate::analysis::advisor::scaling::{Dimension, ScalingFit};
use crate::analysis::advisor::{
    Advice, FreeAtOom, Gpus, GpusFrom, Method, Phase, Projection, Reason, Remedy, SomeBlocksCheckpointed, Unused,
};
use crate::analysis::attribution::Evidence;
use crate::analysis::caveats::Caveat;
use crate::analysis::diff::{Diff, Headline};
use crate::analysis::peak::LiveBlock;
use crate::units::{bytes, signed_bytes};

/// How to record a snapshot with history, for the notes that need it.
pub const HOW_TO_RECORD_HISTORY: &str = "call torch.cuda.memory._record_memory_history(max_entries=100000) \
     before the code to look at, then torch.cuda.memory._dump_snapshot(\"snapshot.pickle\")";

/// The sentence on top of a comparison: how B's peak differs, mostly in what, and where.
pub fn diff_summary(d: &Diff) -> String {
    headline(&d.headline)
}

fn headline(h: &Headline) -> String {
    if h.delta_bytes == 0 {
        return format!("Both peaks are {}.", bytes(h.peak_a_bytes));
    }
    let direction = if h.delta_bytes < 0 { "lower" } else { "higher" };
    let pct = h.percent.map_or_else(String::new, |p| format!(" ({p:+.0}%)"));
    let mut text = format!("B's peak is {} {direction}{pct}", bytes(h.delta_bytes.unsigned_abs()));
    if let Some((category, delta)) = h.mostly {
        let name = Category::ALL.iter().find(|x| x.name() == category).map_or(category, |x| plural(*x));
        text.push_str(&format!(", mostly {name} ({})", signed_bytes(delta)));
        if let Some(site) = &h.site {
            text.push_str(&format!(" at {site}"));
        }
    }
    text.push('.');
    text
}

/// A category as the sentence names it: `activations`, `optimizer state`.
pub fn plural(category: Category) -> &'static str {
    match category {
        Category::Parameter => "parameters",
        Category::Gradient => "gradients",
        Category::OptimizerState => "optimizer state",
        Category::Activation => "activations",
        Category::Temporary => "temporaries",
        Category::Input => "inputs",
        Category::AllocatorCache => "allocator cache",
        Category::NonFramework => "non-framework memory",
        Category::AutogradDetail => "autograd detail",
        Category::Unknown => "unattributed memory",
    }
}

/// What to change for one remedy.
pub fn remedy_change(remedy: Remedy, advice: &Advice) -> String {
    match remedy {
        Remedy::AmpBf16 => "run forward and backward under torch.autocast(dtype=torch.bfloat16)".to_owned(),
        Remedy::Bf16Weights => "store the model in bf16 for inference: model.to(torch.bfloat16)".to_owned(),
        Remedy::AmpFp16 => {
            "run forward and backward under torch.autocast(dtype=torch.float16) with a GradScaler".to_owned()
        }
        Remedy::MicroBatchHalf if !advice.training => "halve the batch (2 passes for the same inputs)".to_owned(),
        Remedy::MicroBatchHalf => "halve the micro-batch and accumulate gradients over 2 micro-batches".to_owned(),
        Remedy::SequenceHalf => "halve the sequence length (tokens per sample)".to_owned(),
        Remedy::Adam8bit => "an 8-bit Adam (bitsandbytes' Adam8bit): optimizer state in 8 bits".to_owned(),
        Remedy::Adafactor => "Adafactor: factored second moments, no first moment".to_owned(),
        Remedy::Sgd => "plain SGD (no momentum): no optimizer state".to_owned(),
        Remedy::ActivationCheckpointing => format!(
            "checkpoint each of the {} repeated blocks (torch.utils.checkpoint, use_reentrant=False)",
            advice.baseline.repeated_blocks
        ),
        Remedy::Zero1 | Remedy::Zero2 | Remedy::Zero3 => {
            let gpus = advice.gpus.map_or(1, |g| g.count);
            format!("ZeRO stage {} (FSDP) over {gpus} GPUs", remedy.zero_stage())
        }
        Remedy::TensorParallel => format!(
            "tensor parallel over {} GPUs (torch.distributed.tensor.parallel: each block's attention and MLP \
             projections split column- then row-wise)",
            advice.gpus.map_or(1, |g| g.count)
        ),
        Remedy::PipelineParallel => {
            let k = advice.gpus.map_or(1, |g| g.count);
            format!(
                "pipeline parallel over {k} stages (torch.distributed.pipelining, the blocks split evenly, 1F1B over \
                 {} micro-batches)",
                (crate::analysis::advisor::PIPELINE_MICRO_BATCHES_PER_STAGE * f64::from(k)) as u32
            )
        }
        Remedy::ExpandableSegments => "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True".to_owned(),
        Remedy::MaxSplitSize => format!(
            "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:{}",
            advice.max_split.map_or(0, |m| m.setting_bytes >> 20)
        ),
    }
}

/// What the advice read from the trace before advising, and what it assumed: the allocator's
/// settings (what is on is not proposed), the GPUs sharding is projected over (`set_gpus` says
/// how to change them: `--gpus N` on the command line), and whether the run trained.
pub fn advice_notes(advice: &Advice, set_gpus: &str) -> Vec<String> {
    use crate::analysis::allocator::Source;
    let from = |source: Source| match source {
        Source::Snapshot => "the snapshot's allocator_settings",
        Source::Conf => "the run's PYTORCH_CUDA_ALLOC_CONF",
        Source::Events => "segments mapped piecewise in the trace",
    };
    let mut notes = Vec::new();
    let allocator = &advice.allocator;
    if allocator.is_async() {
        notes.push(
            "allocator: backend:cudaMallocAsync (the driver's pools, not the caching allocator): its settings are not \
             proposed"
                .to_owned(),
        );
    } else if let Some(known) = allocator.expandable_segments.filter(|k| k.value) {
        notes.push(format!("allocator: expandable_segments on ({}): not proposed", from(known.source)));
    } else if let Some(known) = allocator.expandable_segments {
        notes.push(format!("allocator: expandable_segments off ({})", from(known.source)));
    } else {
        notes.push("allocator: the trace does not say its settings (default settings assumed)".to_owned());
    }
    if let Some(m) = advice.max_split
        && !advice.remedies.iter().any(|p| p.remedies == [Remedy::MaxSplitSize])
    {
        let model = format!(
            "allocator model: replayed under the run's settings it reserves {} at the peak, the trace recorded {}",
            bytes(m.simulated_baseline_bytes),
            bytes(m.recorded_bytes)
        );
        notes.push(if m.model_error() > 0.05 {
            format!("{model}; {:.0}% apart, too far to project max_split_size_mb from", 100.0 * m.model_error())
        } else {
            format!("{model}; no max_split_size_mb from 64 to 512 (MiB) would reserve less, so none is proposed")
        });
    }
    match advice.gpus {
        Some(Gpus { count, from: GpusFrom::Given }) => notes.push(format!("sharding: over {count} GPUs, as given")),
        Some(Gpus { count, from: GpusFrom::Ranks }) => {
            notes.push(format!("sharding: over {count} GPUs, the ranks in the trace ({set_gpus} to change)"))
        }
        Some(Gpus { count, from: GpusFrom::WorldSize }) => {
            notes.push(format!("sharding: over {count} GPUs, the run's world size ({set_gpus} to change)"))
        }
        Some(Gpus { count, from: GpusFrom::Devices }) => {
            notes.push(format!("sharding: over {count} GPUs, the devices in the trace ({set_gpus} to change)"))
        }
        None => notes.push(format!("sharding: not projected, the trace shows one GPU ({set_gpus} to project ZeRO)")),
    }
    let known = &advice.evidence;
    let total = known.total();
    if total > 0.0 {
        let share = |bytes: f64| 100.0 * bytes / total;
        let parts: Vec<String> = [
            (known.tagged, "tagged by the recorder"),
            (known.phase, "from the phases"),
            (known.size_match, "matched to the gradients by size"),
            (known.stack_rule, "guessed from stack frames"),
            (known.before_recording, "allocated before recording"),
            (known.unknown, "unknown"),
        ]
        .into_iter()
        .filter(|(bytes, _)| share(*bytes) >= 0.5)
        .map(|(bytes, how)| format!("{:.0}% {how}", share(bytes)))
        .collect();
        let guessed = share(known.guessed());
        let mut note = format!("categories at the peak: {}", parts.join(", "));
        if guessed >= 0.5 {
            note.push_str(&format!(
                "; the ± counts {guessed:.0}% of the peak as possibly in the wrong category (what is unknown or from \
                 before the recording, and a quarter of what stack frames guessed)"
            ));
        }
        notes.push(note);
    }
    if let Some(scale) = advice.batch_scale_that_fits {
        let what = "activations, temporaries and inputs scale with it; model state does not";
        notes.push(if scale >= 1.0 {
            format!("batch: up to {scale:.2}x the recorded batch fits under the target ({what})")
        } else if scale > 0.0 {
            format!("batch: to fit under the target the batch must shrink to {scale:.2}x ({what})")
        } else {
            "batch: what does not scale with the batch (model state) alone is over the target".to_owned()
        });
        if advice.sequence && scale > 0.0 {
            notes.push(format!(
                "sequence: at most {scale:.2}x the recorded length fits (what scales with it grows at least \
                 linearly; attention's scores grow with its square, so a longer one fits less)"
            ));
        }
    }
    if !advice.training {
        notes.push(
            "no backward pass in the trace (an inference run): no checkpointing, gradient or optimizer advice"
                .to_owned(),
        );
        match advice.fp32_parameter_share {
            None => notes.push(
                "bf16 weights: not projected, the trace does not say the parameters' dtype (a recording by \
                 `vramscope record` does)"
                    .to_owned(),
            ),
            Some(share) if share <= 0.0 => {
                notes.push("bf16 weights: not proposed, the parameters are 16-bit already".to_owned());
            }
            Some(_) => {}
        }
    }
    notes
}

/// The heading of the plan: the order to try the remedies in, and whether they reach `target`.
pub fn plan_heading(advice: &Advice, target: u64) -> String {
    let reached = advice.plan.last().is_some_and(|s| s.fits);
    if reached {
        format!(
            "to fit under {}, try in this order (each step with those before it; cheapest to try first)",
            bytes(target)
        )
    } else {
        format!(
            "toward {}, in this order (each step with those before it); all of them together do not fit",
            bytes(target)
        )
    }
}

/// What one remedy costs besides memory (for a run that trains, or an inference run).
pub fn remedy_cost(remedy: Remedy, training: bool) -> &'static str {
    match remedy {
        Remedy::MicroBatchHalf if !training => {
            "time: the batch in two halves, one after the other (lower GPU utilisation)"
        }
        Remedy::AmpBf16 => "precision: bf16 matrix products (fp32 weights, optimizer and reductions); usually faster",
        Remedy::AmpFp16 => "precision: fp16 range, needs loss scaling; usually faster",
        Remedy::Bf16Weights => "precision: bf16 weights and arithmetic (check the outputs); usually faster",
        Remedy::MicroBatchHalf => "time: 2 smaller steps per update (lower GPU utilisation); the same effective batch",
        Remedy::SequenceHalf => "context: the model sees half as many tokens at a time (more, shorter samples)",
        Remedy::Adam8bit => "precision: quantised moments; a dependency",
        Remedy::Adafactor => "convergence: a different optimizer, may need tuning",
        Remedy::Sgd => "convergence: usually slower for transformers",
        Remedy::ActivationCheckpointing => {
            "time: each block's forward runs again in backward (about a third more compute)"
        }
        Remedy::Zero1 | Remedy::Zero2 => {
            "communication: a reduce-scatter and an all-gather of the gradients per step, as much as data \
             parallelism's all-reduce"
        }
        Remedy::Zero3 => {
            "communication: parameters all-gathered in forward and again in backward, about 1.5x data \
             parallelism's volume"
        }
        Remedy::TensorParallel => {
            "communication: two all-reduces of a block's activations in forward and two in backward, per block; \
             every GPU sees the same batch (fast links needed)"
        }
        Remedy::PipelineParallel => {
            "time: the pipeline's bubble (stages idle for (k-1)/(m+k-1) of a step); the model split at block \
             boundaries"
        }
        Remedy::ExpandableSegments => "none known; virtual-memory mappings instead of fixed segments",
        Remedy::MaxSplitSize => {
            "more cudaMalloc calls: cached blocks of that size or more are not split for smaller requests"
        }
    }
}

/// What to change for a projection (a pair: both changes).
pub fn change(p: &Projection, advice: &Advice) -> String {
    p.remedies.iter().map(|&r| remedy_change(r, advice)).collect::<Vec<_>>().join("; and ")
}

/// How a projection was made, and where its peak lands when the replay tells:
/// `replayed, peak in backward`, `replayed + rule`, `rule`.
pub fn method(p: &Projection) -> String {
    let how = match p.method {
        Method::Replay => "replayed",
        Method::ReplayAndRule => "replayed + rule",
        Method::Rule => "rule",
    };
    match p.projected_peak_phase.and_then(phase) {
        Some(phase) if p.method != Method::Rule => format!("{how}, peak in {phase}"),
        _ => how.to_owned(),
    }
}

/// The phase in words, none when it is not known.
pub fn phase(phase: Phase) -> Option<&'static str> {
    match phase {
        Phase::Forward => Some("forward"),
        Phase::Backward => Some("backward"),
        Phase::OptimizerStep => Some("the optimizer step"),
        Phase::Unknown => None,
    }
}

/// A fit of the peak over recordings at several sizes, and the largest size under the target.
pub fn scaling_fit(f: &ScalingFit) -> String {
    let (what, unit) = match f.dimension {
        Dimension::Batch => ("batch", "sample"),
        Dimension::Sequence => ("sequence", "token"),
    };
    let points: Vec<String> = f.points.iter().map(|&(size, peak)| format!("{size}: {}", bytes(peak))).collect();
    let mut form =
        format!("{} + {} per {unit}", bytes(f.fixed_bytes.max(0.0) as u64), bytes(f.per_unit_bytes.max(0.0) as u64));
    if f.per_unit_squared_bytes != 0.0 {
        form.push_str(&format!(" + {:.1} B per {unit} squared", f.per_unit_squared_bytes));
    }
    let answer = match (f.largest_that_fits, f.at_most) {
        (None, _) => format!("not even one {unit} fits under {}", bytes(f.target_bytes)),
        (Some(n), false) => format!("up to {n} {unit}s fit under {}", bytes(f.target_bytes)),
        (Some(n), true) => format!(
            "at most {n} {unit}s fit under {} (a straight line through two lengths; attention's scores grow with the \
             square of the length, so fewer may fit: record a third length for a fit with the square)",
            bytes(f.target_bytes)
        ),
    };
    format!(
        "{what}, fitted over {} recordings' reserved peaks ({}): {form} (largest residual {:.1}%); {answer}",
        f.points.len(),
        points.join(", "),
        100.0 * f.max_residual
    )
}

/// Selective checkpointing's row: `the first 1 of 2 blocks: 15.4 MiB allocated (-22%)`.
pub fn some_blocks_checkpointed(some: &SomeBlocksCheckpointed, baseline_bytes: u64) -> String {
    let change =
        100.0 * (some.projected_peak_allocated_bytes as f64 - baseline_bytes as f64) / baseline_bytes.max(1) as f64;
    format!(
        "the first {} of {} blocks: {} allocated ({change:+.0}%), {} reserved{}",
        some.blocks,
        some.of,
        bytes(some.projected_peak_allocated_bytes),
        bytes(some.projected_peak_reserved_bytes),
        if some.fits { ", fits" } else { "" }
    )
}

/// The heading of the selective checkpointing rows.
pub const SOME_BLOCKS_HEADING: &str = "Selective checkpointing, replayed: only the model's first blocks checkpointed";

/// What a projection costs besides memory (a pair: both costs).
pub fn cost(p: &Projection, advice: &Advice) -> String {
    p.remedies.iter().map(|&r| remedy_cost(r, advice.training)).collect::<Vec<_>>().join("; ")
}

/// Why a projection is what it is, from the trace's numbers: the parts it changes at the peak,
/// and the peak before and after.
pub fn reason(p: &Projection, advice: &Advice) -> String {
    let before = bytes(advice.baseline.peak_allocated_bytes);
    let after = bytes(p.projected_peak_allocated_bytes);
    let pct = |share: f64| 100.0 * share;
    match &p.reason {
        Reason::Precision { activation_bytes, share_of_peak, fp32_activation_bytes, matmul_parameter_bytes } => {
            format!(
                "activations are {:.0}% of the peak ({}); all but {} (residual sums, the loss, embeddings) would be \
                 16-bit, and autocast keeps 16-bit copies of {} of weights for backward: {before} -> {after}",
                pct(*share_of_peak),
                bytes(*activation_bytes),
                bytes(*fp32_activation_bytes),
                bytes(*matmul_parameter_bytes)
            )
        }
        Reason::Weights { parameter_bytes, fp32_share, activation_bytes, autocast } => format!(
            "parameters are {} at the peak, {:.0}% of them in 32 bits, which bf16 halves{}: {before} -> {after}",
            bytes(*parameter_bytes),
            pct(*fp32_share),
            if *autocast {
                String::from("; the activations are 16-bit already under autocast")
            } else {
                format!(
                    ", and the activations and temporaries ({}) the model computes in bf16",
                    bytes(*activation_bytes)
                )
            }
        ),
        Reason::Checkpointing {
            activation_bytes,
            share_of_peak,
            in_blocks_bytes,
            blocks,
            boundary_bytes,
            largest_block_bytes,
            simulated: false,
        } => format!(
            "activations are {:.0}% of the peak ({}), {} of them in {} repeated blocks; checkpointing keeps each \
             block's input ({} each) and one block's activations ({}) live: {before} -> {after}",
            pct(*share_of_peak),
            bytes(*activation_bytes),
            bytes(*in_blocks_bytes),
            blocks,
            bytes(*boundary_bytes),
            bytes(*largest_block_bytes)
        ),
        Reason::Checkpointing { activation_bytes, share_of_peak, in_blocks_bytes, blocks, simulated: true, .. } => {
            format!(
                "activations are {:.0}% of the peak ({}), {} of them in {} repeated blocks; replayed with each block \
                 keeping only its output in forward and its activations allocated again when backward reaches it: \
                 {before} -> {after}",
                pct(*share_of_peak),
                bytes(*activation_bytes),
                bytes(*in_blocks_bytes),
                blocks
            )
        }
        Reason::Batch { scaling_bytes, accumulated_gradient_bytes: 0 } => format!(
            "what scales with the batch (activations, temporaries, inputs) is {} at the peak; half of it goes: \
             {before} -> {after}",
            bytes(*scaling_bytes)
        ),
        Reason::Batch { scaling_bytes, accumulated_gradient_bytes } => format!(
            "what scales with the batch (activations, temporaries, inputs) is {} at the peak; half of it goes, and \
             the first micro-batch's gradients ({}) stay alive through the second: {before} -> {after}",
            bytes(*scaling_bytes),
            bytes(*accumulated_gradient_bytes)
        ),
        Reason::Sequence { scaling_bytes } => format!(
            "what scales with the sequence (activations, temporaries, inputs) is {} at the peak; at least half of it \
             goes (attention's scores, quadratic in the length, lose three quarters, so the run may peak lower): \
             {before} -> {after}",
            bytes(*scaling_bytes)
        ),
        Reason::OptimizerState { optimizer_state_bytes, share_of_peak } => format!(
            "optimizer state is {:.0}% of the peak ({}): {before} -> {after} (the highest point may move to another \
             phase)",
            pct(*share_of_peak),
            bytes(*optimizer_state_bytes)
        ),
        Reason::Sharding { parameter_bytes, gradient_bytes, optimizer_state_bytes, gpus } => format!(
            "parameters {}, gradients {}, optimizer state {} at the peak, sharded over {gpus} GPUs: {before} -> \
             {after}",
            bytes(*parameter_bytes),
            bytes(*gradient_bytes),
            bytes(*optimizer_state_bytes)
        ),
        Reason::Parallel {
            in_block_parameter_bytes,
            parameter_bytes,
            in_block_activation_bytes,
            activation_bytes,
            gpus,
        } => {
            let what = match p.remedies.first() {
                Some(Remedy::PipelineParallel) => {
                    "on the busiest stage (the first holds as many micro-batches in flight as there are stages, \
                     and what runs before the blocks; the last one micro-batch, and what runs after them), the \
                     blocks' parameters and their state split, the gradients accumulated over the micro-batches"
                }
                _ => "the blocks' parameters and their state split, and of their activations what is not block-width",
            };
            format!(
                "the repeated blocks hold {} of {} of parameters and {} of {} of activations at the peak; over {gpus} \
                 GPUs, {what}: {before} -> {after}",
                bytes(*in_block_parameter_bytes),
                bytes(*parameter_bytes),
                bytes(*in_block_activation_bytes),
                bytes(*activation_bytes)
            )
        }
        Reason::Reserved { unused_bytes, rounding_bytes, reserved_before_bytes, reserved_after_bytes } => format!(
            "{} of the reserved peak is free space inside segments; expandable segments reserve what is allocated \
             plus its rounding ({}) and part of a page: {} -> {} reserved",
            bytes(*unused_bytes),
            bytes(*rounding_bytes),
            bytes(*reserved_before_bytes),
            bytes(*reserved_after_bytes)
        ),
        Reason::ExpandableSimulated(m) => format!(
            "{} of the reserved peak is free space inside segments; replayed through the caching allocator's model \
             (under the run's own settings it reserves {}, the trace recorded {}, {:.1}% apart), with expandable \
             segments mapping 2 MiB and 20 MiB pages as blocks need them it reserves {}: {} -> {} reserved",
            bytes(m.recorded_bytes.saturating_sub(p.projected_peak_allocated_bytes)),
            bytes(m.simulated_baseline_bytes),
            bytes(m.recorded_bytes),
            100.0 * m.model_error(),
            bytes(m.simulated_bytes),
            bytes(m.recorded_bytes),
            bytes(m.projected_bytes())
        ),
        Reason::Simulated(m) => format!(
            "replayed through the caching allocator's model: under the run's own settings it reserves {} at the peak \
             (the trace recorded {}, {:.1}% apart); with max_split_size_mb:{} it reserves {}: {} -> {} reserved",
            bytes(m.simulated_baseline_bytes),
            bytes(m.recorded_bytes),
            100.0 * m.model_error(),
            m.setting_bytes >> 20,
            bytes(m.simulated_bytes),
            bytes(m.recorded_bytes),
            bytes(m.projected_bytes())
        ),
        Reason::Together(a, b) => format!("{} and {} together: {before} -> {after}", a.id(), b.id()),
    }
}

/// Fragmentation at the peak (and at the first OOM), and what the allocator settings would do.
pub fn fragmentation(u: &Unused) -> String {
    let mut text = format!(
        "{} reserved but not allocated at the peak ({:.0}% of reserved; {} of it rounding inside blocks, largest free \
         range {}). With PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True segments grow and shrink in 2 MiB pages, so \
         about {} of it would not be reserved; max_split_size_mb keeps large cached blocks from being split for \
         small requests, which helps when the free space is scattered in large segments",
        bytes(u.unused_bytes),
        100.0 * u.share_of_reserved,
        bytes(u.rounding_bytes),
        bytes(u.largest_free_bytes),
        bytes(u.expandable_gives_back_bytes)
    );
    if let Some(oom) = &u.at_oom {
        text.push_str(&at_oom(oom));
    }
    text
}

fn at_oom(oom: &FreeAtOom) -> String {
    format!(
        ". At the first OOM, {} was asked for while {} was free inside segments (largest range {}){}",
        bytes(oom.requested_bytes),
        bytes(oom.free_bytes),
        bytes(oom.largest_free_bytes),
        if oom.fragmentation_failed_it() {
            ": fragmentation, not a lack of memory, failed it; expandable segments would have served it"
        } else {
            ""
        }
    )
}

/// What a trace cannot show, one sentence or two for each caveat.
pub fn caveat(trace: &Trace, c: &Caveat) -> String {
    let names = |devices: &[DeviceId]| devices.iter().map(|&d| trace.metadata.device_label(d)).collect::<Vec<_>>();
    match c {
        Caveat::NoHistory => format!(
            "No allocation history was recorded: this snapshot holds only the allocator's state when it was taken, \
             so that state is its only instant and every peak below is that state. To see memory over time, \
             {HOW_TO_RECORD_HISTORY}."
        ),
        Caveat::NoHistoryOn(devices) => format!(
            "{} recorded no allocation history (only the allocator's final state): its peak is that state.",
            names(devices).join(", ")
        ),
        Caveat::UnseenBeforeStart(devices) => format!(
            "{}: memory allocated before the profiler started is not seen. The trace's memory events carry only \
             sizes (no addresses or running totals, as in PyTorch 1.8-1.9), so the curve is their running sum, \
             starting at the least memory that its frees imply was already there.",
            names(devices).join(", ")
        ),
    }
}

/// Every caveat of a trace, worded.
pub fn caveats(trace: &Trace, caveats: &[Caveat]) -> Vec<String> {
    caveats.iter().map(|c| caveat(trace, c)).collect()
}

/// Why a block is in its category.
pub fn evidence(trace: &Trace, evidence: Evidence) -> String {
    match evidence {
        Evidence::Tag(name) => format!("tagged by the recorder: {}", trace.interner.resolve(name)),
        Evidence::Frame { rule, frame } => match trace.interner.frame_of(frame) {
            Some(f) => format!(
                "{rule}: {} at {}:{}",
                trace.interner.resolve(f.function),
                trace.interner.resolve(f.file),
                f.line
            ),
            None => rule.to_owned(),
        },
        Evidence::Phase { rule, module: Some(module) } => {
            format!("{rule} (in the forward of {})", trace.interner.resolve(module))
        }
        Evidence::Phase { rule, module: None } => rule.to_owned(),
        Evidence::BeforeRecording { persistent: true } => {
            "allocated before the recording began and alive to its end (model state, most likely)".to_owned()
        }
        Evidence::BeforeRecording { persistent: false } => {
            "allocated before the recording began; no tag, and no stack-frame rule matched".to_owned()
        }
        Evidence::SizeMatches { of } => format!(
            "allocated before the recording and never freed, its size one of the {}' one for one, as a model's \
             parameters are",
            match of {
                Category::OptimizerState => "optimizer state tensors",
                _ => "gradients",
            }
        ),
        Evidence::Nothing => "no tag, and no stack-frame rule matched".to_owned(),
    }
}

/// The parts of a block's context worth showing, as `label: text` lines (`N/A`, PyTorch's
/// default compile context, is not).
pub fn context_lines(trace: &Trace, block: &LiveBlock) -> Vec<String> {
    let context = crate::analysis::instant::block_context(trace, block);
    let mut lines = Vec::new();
    let metadata = trace.interner.resolve(context.user_metadata);
    if !metadata.is_empty() {
        lines.push(format!("user metadata: {metadata}"));
    }
    let compile = trace.interner.resolve(context.compile_context);
    if !compile.is_empty() && compile != "N/A" {
        lines.push(format!("compile context: {compile}"));
    }
    lines
}

/// A run's headline: how many ranks, which peaks highest, and how far the ranks differ.
pub fn run_headline(s: &crate::analysis::run::RunSummary) -> String {
    let Some(worst) = s.ranks.iter().find(|r| r.rank == s.worst_rank) else { return String::new() };
    let phase = worst.peak_phase.map_or(String::new(), |p| format!(", in {}", run_phase(p)));
    let mut text = format!(
        "a run of {} ranks: rank {} peaks highest, {} allocated{phase}, {:.1}% above the median rank; the highest \
         peak is {:.2}x the lowest",
        s.ranks.len(),
        worst.rank,
        bytes(worst.peak.peak_allocated_bytes),
        100.0 * s.worst_over_median,
        s.imbalance
    );
    if let Some(spread) = s.spread.first() {
        text.push_str(&format!(
            "; they differ most in {} (rank {} {}, rank {} {})",
            spread.category,
            spread.max_rank,
            bytes(spread.max_bytes),
            spread.min_rank,
            bytes(spread.min_bytes)
        ));
    }
    if let Some(rank) = s.first_oom_rank {
        text.push_str(&format!("; rank {rank} ran out of memory first (by each rank's own clock)"));
    }
    text
}

/// A phase in words.
pub fn run_phase(p: crate::analysis::run::PhaseAt) -> &'static str {
    use crate::analysis::run::PhaseAt;
    match p {
        PhaseAt::Forward => "forward",
        PhaseAt::Backward => "backward",
        PhaseAt::OptimizerStep => "optimizer step",
    }
}

/// What the reader of a run should know: guessed ranks, repeated ones, files left out.
pub fn run_notes(run_notes: &[crate::analysis::run::RunNote], skipped: &[String]) -> Vec<String> {
    use crate::analysis::run::{RankFrom, RunNote};
    let mut notes = Vec::new();
    // Ranks of one recording that are in files of their own too (a recording's directory):
    // one line per recording.
    let mut repeated: Vec<(String, Vec<u32>)> = Vec::new();
    for note in run_notes {
        if let RunNote::DuplicateRank { rank, left_out, .. } = note
            && let Some(file) = left_out.strip_suffix(&format!(" (rank {rank})"))
        {
            match repeated.iter_mut().find(|(f, _)| f == file) {
                Some((_, ranks)) => ranks.push(*rank),
                None => repeated.push((file.to_owned(), vec![*rank])),
            }
        }
    }
    for (file, ranks) in &repeated {
        let ranks: Vec<String> = ranks.iter().map(u32::to_string).collect();
        notes.push(format!(
            "{file}: its ranks {} are in files of their own too, which are read instead",
            ranks.join(", ")
        ));
    }
    for note in run_notes {
        notes.push(match note {
            RunNote::DuplicateRank { rank, left_out, .. } if left_out.ends_with(&format!(" (rank {rank})")) => continue,
            RunNote::DuplicateRank { rank, kept, left_out } => {
                format!("rank {rank} is in {kept} and in {left_out}: {left_out} is left out")
            }
            RunNote::Guessed { from: RankFrom::FileName, ranks } => {
                format!("{ranks} ranks numbered from their files' names (rankN): the files do not say their rank")
            }
            RunNote::Guessed { ranks, .. } => {
                format!("{ranks} ranks numbered in the order the files were given: the files do not say their rank")
            }
        });
    }
    for file in skipped {
        notes.push(format!("left out, not a trace this reads: {file}"));
    }
    notes
}

#[cfg(test)]
mod tests {
    use vramscope_trace_format::{Block, BlockState, DeviceInfo, Event, EventKind, Segment, SourceFormat};

    use super::*;
    use crate::analysis::caveats;
    use crate::analysis::diff::{self, RunPeak};
    use crate::analysis::instant::SiteBytes;

    fn run(peak: u64, categories: &[(&'static str, u64)], sites: &[(&str, u64)]) -> RunPeak {
        RunPeak {
            file: String::new(),
            device: DeviceId(0),
            label: "cuda:0".to_owned(),
            peak_allocated_bytes: peak,
            peak_allocated_time_us: None,
            peak_reserved_bytes: peak,
            categories_at_peak: categories.iter().copied().collect(),
            sites: sites.iter().map(|(s, b)| SiteBytes { site: (*s).to_owned(), bytes: *b, blocks: 1 }).collect(),
        }
    }

    #[test]
    fn the_diff_sentence_names_the_change_its_category_and_site() {
        let gib = 1u64 << 30;
        let a = run(
            20 * gib,
            &[("activation", 12 * gib), ("parameter", 8 * gib)],
            &[("forward  m.py:1", 10 * gib), ("attn  m.py:9", 2 * gib), ("init  m.py:3", 8 * gib)],
        );
        let b = run(
            16 * gib,
            &[("activation", 8 * gib), ("parameter", 8 * gib)],
            &[("forward  m.py:1", 6 * gib), ("init  m.py:3", 8 * gib), ("cast  m.py:5", 2 * gib)],
        );
        let d = diff::diff(a.clone(), b);
        assert_eq!(
            diff_summary(&d),
            "B's peak is 4.00 GiB lower (-20%), mostly activations (-4.00 GiB) at forward  m.py:1."
        );
        assert_eq!(diff_summary(&diff::diff(a.clone(), a)), "Both peaks are 20.0 GiB.");
    }

    fn segment(device: DeviceId) -> Segment {
        Segment::new(device, 0x1000, 2 << 20, vec![Block::new(0x1000, 2 << 20, 100, BlockState::ActiveAllocated)])
    }

    #[test]
    fn a_snapshot_without_history_says_so_and_how_to_record_one() {
        let mut trace = Trace::default();
        trace.metadata.source_format = SourceFormat::PytorchSnapshot;
        trace.segments = vec![segment(DeviceId(0)), segment(DeviceId(1))];
        let notes = caveats(&trace, &caveats::caveats(&trace));
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("_record_memory_history"), "{notes:?}");
        // One device with history, one without: only that one is named.
        trace.events.push(Event::new(EventKind::Alloc, 5, 1, 0x9000, 512));
        let notes = caveats(&trace, &caveats::caveats(&trace));
        assert_eq!(
            notes,
            ["cuda:0 recorded no allocation history (only the allocator's final state): its peak is that state."]
        );
    }

    #[test]
    fn a_running_sum_says_what_it_cannot_see() {
        let mut trace = Trace::default();
        trace.metadata.source_format = SourceFormat::ChromeTrace;
        trace.metadata.devices = vec![DeviceInfo {
            device: DeviceId(2),
            kind: Some("hip".to_owned()),
            allocated_before_unknown: true,
            ..DeviceInfo::default()
        }];
        let notes = caveats(&trace, &caveats::caveats(&trace));
        assert_eq!(notes.len(), 1);
        assert!(notes[0].starts_with("hip:2: memory allocated before the profiler started is not seen"), "{notes:?}");
    }
}
