//! The advisor's words: each remedy's change, cost and reasoning, how it was projected, the
//! notes on what the trace told before advising, the plan, fits over recordings, selective
//! checkpointing and fragmentation.

use crate::advisor::scaling::{Dimension, ScalingFit};
use crate::advisor::{
    Advice, FreeAtOom, Gpus, GpusFrom, LeftOut, Method, Phase, Projection, Remedy, SomeBlocksCheckpointed, Unused,
};
use crate::query::units::bytes;

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
        Remedy::DynamicPadding => "pad each batch only to its longest sequence, not to a fixed length (the \
                                   tokenizer's padding=\"longest\", transformers' DataCollatorWithPadding, \
                                   pad_sequence in a collate function)"
            .to_owned(),
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
                (crate::advisor::PIPELINE_MICRO_BATCHES_PER_STAGE * f64::from(k)) as u32
            )
        }
        Remedy::ExpandableSegments => "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True".to_owned(),
        Remedy::MaxSplitSize => format!(
            "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:{}",
            advice.max_split.map_or(0, |m| m.setting_bytes >> 20)
        ),
        Remedy::SetToNone => "optimizer.zero_grad(set_to_none=True): free the gradients after each step".to_owned(),
        Remedy::FusedStep => "the optimizer's fused step: torch.optim.AdamW(..., fused=True)".to_owned(),
        Remedy::ForeachOff => {
            "the optimizer's step one parameter at a time: torch.optim.AdamW(..., foreach=False)".to_owned()
        }
        Remedy::TiedEmbeddings => match &advice.tied {
            Some((embedding, head)) => format!("tie the output head to the input embedding: {head} = {embedding}"),
            None => "tie the output head to the input embedding".to_owned(),
        },
        Remedy::Lora => match advice.lora {
            Some((layers, rank)) => format!(
                "freeze the model and train rank-{rank} adapters on the blocks' {layers} linear layers (peft's \
                 LoraConfig(r={rank}, target_modules=...))"
            ),
            None => "freeze the model and train low-rank adapters (peft)".to_owned(),
        },
        Remedy::Qlora => match advice.lora {
            Some((layers, rank)) => format!(
                "load the model in 4 bits (transformers' BitsAndBytesConfig(load_in_4bit=True, \
                 bnb_4bit_quant_type=\"nf4\")) and train rank-{rank} adapters on the blocks' {layers} linear layers \
                 (peft's LoraConfig(r={rank}, target_modules=...))"
            ),
            None => "load the model in 4 bits (bitsandbytes' NF4) and train low-rank adapters on it (peft)".to_owned(),
        },
        Remedy::NoGrad => {
            "run forward under torch.no_grad() (or torch.inference_mode()): nothing goes backward".to_owned()
        }
        Remedy::DropKept => "keep loss.item() (a number) or out.detach(), not the tensor with its graph; or keep \
                             nothing from one iteration to the next"
            .to_owned(),
        Remedy::Int8Weights => {
            "quantise the linear layers' weights to int8 for inference (torchao's int8_weight_only, bitsandbytes' \
             LLM.int8): the matrix products read 8-bit weights"
                .to_owned()
        }
        Remedy::Int4Weights => {
            "quantise the linear layers' weights to 4 bits for inference (torchao's int4_weight_only, bitsandbytes' \
             4-bit, a GPTQ or AWQ checkpoint): two weights per byte, a scale and zero point per 128 inputs"
                .to_owned()
        }
        Remedy::CpuOffload => {
            "keep the optimizer's state on the CPU and step there (DeepSpeed's offload_optimizer, torchao's \
             CPUOffloadOptimizer): the gradients go to the host after backward"
                .to_owned()
        }
        Remedy::DataParallel => {
            let gpus = advice.gpus.map_or(1, |g| g.count);
            format!(
                "split the batch over {gpus} GPUs with DistributedDataParallel (each 1/{gpus} of it; torchrun \
                 --nproc_per_node={gpus})"
            )
        }
    }
}

/// What the advice read from the trace before advising, and what it assumed: the allocator's
/// settings (what is on is not proposed), the GPUs sharding is projected over (`set_gpus` says
/// how to change them: `--gpus N` on the command line), and whether the run trained.
pub fn advice_notes(advice: &Advice, set_gpus: &str) -> Vec<String> {
    use crate::allocator::Source;
    let from = |source: Source| match source {
        Source::Snapshot => "the snapshot's allocator_settings",
        Source::Conf => "the run's PYTORCH_CUDA_ALLOC_CONF",
        Source::Events => "segments mapped piecewise in the trace",
    };
    let mut notes = Vec::new();
    if advice.held_by_others_bytes > 0 {
        notes.push(format!(
            "other processes held {} on the device at the peak (the driver's account): what fits is measured \
             against what they left",
            bytes(advice.held_by_others_bytes)
        ));
    }
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
    if let Some(name) = &advice.fine_tuning {
        let lora = if advice.lora.is_some() { ": LoRA comes first among the changes to try" } else { "" };
        notes.push(format!("fine-tuning: the model was loaded from {name} (from_pretrained){lora}"));
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
        Remedy::SetToNone => {
            "none: PyTorch's default since 2.0; code that reads .grad after zero_grad must expect None"
        }
        Remedy::FusedStep => "none known: one kernel for the whole step, usually faster; Adam, AdamW, SGD and Adagrad",
        Remedy::ForeachOff => "time: the step launches kernels per parameter (slower on many small tensors)",
        Remedy::TiedEmbeddings => {
            "quality: one matrix for input and output (GPT-2 and most small models do it); retrain or check the loss"
        }
        Remedy::Lora => {
            "quality: only the adapters learn (usually close to full fine-tuning for adaptation, not for \
             pretraining); a dependency"
        }
        Remedy::Qlora => {
            "quality: only the adapters learn, on 4-bit base weights (QLoRA's paper finds 16-bit LoRA's results); \
             time: each layer dequantises its weight in forward and backward; bitsandbytes"
        }
        Remedy::NoGrad => "none: the outputs are the same; they carry no graph to call backward on",
        Remedy::DataParallel => "communication: an all-reduce of the gradients per step; the GPUs",
        Remedy::DropKept => "none, unless the program needs what it kept (then keep it on the host)",
        Remedy::DynamicPadding => {
            "none for the results (the padding is masked out); batches of varying shapes: torch.compile and CUDA \
             graphs see more of them, and the allocator caches blocks of more sizes"
        }
        Remedy::Int8Weights => {
            "quality: 8-bit weights (usually close for inference; check the outputs); a library's kernels"
        }
        Remedy::Int4Weights => {
            "quality: 4-bit weights lose more than 8-bit (check the outputs; GPTQ and AWQ calibrate to keep it); a \
             library's kernels, fastest on 16-bit inputs"
        }
        Remedy::CpuOffload => {
            "time: the step on the CPU, the gradients and the weights over PCIe every step; host memory for the state"
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

/// The baseline's reserved peak after its allocated one: `, 7.12 GiB reserved`, or what the
/// projections take where the trace does not record it.
pub fn baseline_reserved(b: &crate::advisor::Baseline) -> String {
    if b.reserved_recorded {
        format!(", {} reserved", bytes(b.peak_reserved_bytes))
    } else {
        " (reserved not recorded: the projections take it as the allocated peak)".to_owned()
    }
}

/// Why a remedy is not projected, in words.
pub fn left_out_why(why: LeftOut) -> &'static str {
    match why {
        LeftOut::NoBackward => "no backward ran (inference): nothing is saved for one, and there are no gradients",
        LeftOut::OneGpu => "the trace shows one GPU",
        LeftOut::NoOptimizerState => {
            "no optimizer state at the instants taken apart (no step recorded, or its state from before the \
             recording not told apart)"
        }
        LeftOut::NoRepeatedBlocks => "no repeated blocks found (module spans, or a block's forward in the stacks)",
        LeftOut::FewerBlocksThanGpus => "fewer repeated blocks than GPUs (a stage needs one)",
        LeftOut::AlreadyAutocast => "the run is under autocast already",
        LeftOut::TrainingKeepsFp32 => "a training run keeps 32-bit master weights (an inference remedy)",
        LeftOut::DtypesNotSeen => "the trace does not say what the parameters are stored in",
        LeftOut::Already16Bit => "the parameters are 16-bit already",
        LeftOut::AlreadyExpandable => "the allocator has them already (or is the driver's pools)",
        LeftOut::LittleReservedUnused => {
            "little reserved memory is unused at the peak (or the allocator's model finds no gain)"
        }
        LeftOut::NoBetterSplit => "no setting reserves less in the allocator's model",
        LeftOut::NoSequences => "no attention seen: the model does not work on sequences",
        LeftOut::GradientsFreedAlready => {
            "no gradient is seen kept through a later forward (freed after each step, or no later forward in the trace)"
        }
        LeftOut::NotAdam => "the optimizer's state is not Adam's by the recorder's tags (or not tagged)",
        LeftOut::NoStepTemporaries => "the optimizer's step holds no temporaries (fused already)",
        LeftOut::StepPerParameter => "the step holds one parameter's temporaries at a time already",
        LeftOut::LayersNotSeen => {
            "the trace does not list the model's layers (recorded by vramscope's PyTorch shim, it does)"
        }
        LeftOut::NoUntiedHead => "no trained output head of the embedding's shape (tied already, or none)",
        LeftOut::MostWeightsFrozen => "most linear weights are frozen already (adapters, or a frozen model)",
        LeftOut::NoLinearInBlocks => "no linear layer inside the repeated blocks",
        LeftOut::NoModelState => "no gradients or optimizer state to save",
        LeftOut::Trains => "the run goes backward: its graph is what backward needs",
        LeftOut::NoGradAlready => "forward runs without a graph already (no_grad or inference_mode)",
        LeftOut::AlreadyDistributed => "the run is distributed already",
        LeftOut::OnTheHost => "the device is the host (a CPU run): nowhere to offload to",
        LeftOut::NoLinearLayers => "no linear layer with a weight of its own (quantised already, or none)",
        LeftOut::NothingKept => "nothing is kept from one iteration to the next (or what is, is a cache by design)",
        LeftOut::State8BitAlready => "the optimizer's state is 8-bit already (bitsandbytes' state1 and absmax1)",
        LeftOut::NoPaddingSeen => "no batch said how it is padded (no attention_mask in what the DataLoader gave)",
        LeftOut::PaddedToLongest => {
            "a batch fills its length: padded to its longest sequence already (or as long as the fixed length)"
        }
    }
}

/// The remedies not projected, a line for each reason: `not proposed: SGD, Adafactor: no
/// optimizer state ...`. Sharding on one GPU and allocator settings have notes of their own, and
/// a training run is not told why inference's remedy is not for it, nor a run that keeps
/// nothing why it need not stop keeping it.
pub fn left_out_lines(advice: &Advice) -> Vec<String> {
    let mut by_why: std::collections::BTreeMap<LeftOut, Vec<&str>> = std::collections::BTreeMap::new();
    for &(remedy, why) in &advice.left_out {
        if !matches!(
            why,
            LeftOut::OneGpu | LeftOut::NoBetterSplit | LeftOut::Trains | LeftOut::NothingKept | LeftOut::NoPaddingSeen
        ) {
            by_why.entry(why).or_default().push(remedy_name(remedy));
        }
    }
    by_why
        .into_iter()
        .map(|(why, names)| format!("not proposed: {}: {}", names.join(", "), left_out_why(why)))
        .collect()
}

/// The remedies considered that would not change the peak, in one line; none when there are none.
pub fn without_effect(advice: &Advice) -> Option<String> {
    if advice.without_effect.is_empty() {
        return None;
    }
    let ids: Vec<String> = advice.without_effect.iter().map(|p| remedies_named(&p.id)).collect();
    let alive: Vec<String> = super::by_name(&advice.baseline.categories_at_peak)
        .into_iter()
        .map(|(c, v)| format!("{} {}", c.name(), bytes(v)))
        .collect();
    Some(format!(
        "considered and left out, the peak would not go down: {} (what {} is not alive at the peak, or comes back elsewhere; alive at the peak: {})",
        ids.join(", "),
        if ids.len() == 1 { "it shrinks" } else { "they shrink" },
        alive.join(", ")
    ))
}

/// A remedy as a sentence names it: `bf16 autocast`, `half the micro-batch`.
pub fn remedy_name(r: Remedy) -> &'static str {
    match r {
        Remedy::AmpBf16 => "bf16 autocast",
        Remedy::AmpFp16 => "fp16 autocast with a GradScaler",
        Remedy::Bf16Weights => "bf16 weights",
        Remedy::MicroBatchHalf => "half the micro-batch (gradients accumulated over two)",
        Remedy::SequenceHalf => "half the sequence length",
        Remedy::Adam8bit => "an 8-bit Adam",
        Remedy::Adafactor => "Adafactor",
        Remedy::Sgd => "SGD",
        Remedy::ActivationCheckpointing => "activation checkpointing",
        Remedy::Zero1 => "ZeRO-1 (optimizer state sharded)",
        Remedy::Zero2 => "ZeRO-2 (and gradients)",
        Remedy::Zero3 => "ZeRO-3 / FSDP (and parameters)",
        Remedy::TensorParallel => "tensor parallelism",
        Remedy::PipelineParallel => "pipeline parallelism",
        Remedy::ExpandableSegments => "expandable segments",
        Remedy::MaxSplitSize => "a max_split_size_mb",
        Remedy::SetToNone => "zero_grad(set_to_none=True)",
        Remedy::FusedStep => "the fused optimizer step (fused=True)",
        Remedy::ForeachOff => "the optimizer without its multi-tensor step (foreach=False)",
        Remedy::TiedEmbeddings => "tied embeddings (the head shares the embedding's weight)",
        Remedy::Lora => "LoRA (low-rank adapters, the model frozen)",
        Remedy::Qlora => "QLoRA (LoRA on the model loaded in 4 bits)",
        Remedy::NoGrad => "no_grad / inference_mode (no autograd graph)",
        Remedy::DataParallel => "data parallelism (DDP, the batch split over the GPUs)",
        Remedy::CpuOffload => "CPU offload of the optimizer (ZeRO-Offload)",
        Remedy::Int8Weights => "int8 weights (weight-only quantisation of the linear layers)",
        Remedy::Int4Weights => "int4 weights (4-bit weight-only quantisation of the linear layers)",
        Remedy::DropKept => "not keeping outputs with their graphs (loss.item(), .detach())",
        Remedy::DynamicPadding => "dynamic padding (each batch padded to its longest sequence)",
    }
}

/// Remedies in words, `bf16 autocast, activation checkpointing and LoRA`.
pub(super) fn named_list(set: &[Remedy]) -> String {
    let names: Vec<&str> = set.iter().map(|&r| remedy_name(r)).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

/// A remedy or combination by its id (`amp_bf16+activation_checkpointing`) in words, `bf16
/// autocast and activation checkpointing`; the id itself when it names none.
pub fn remedies_named(id: &str) -> String {
    let set: Option<Vec<Remedy>> =
        id.split('+').map(|part| Remedy::ALL.iter().find(|r| r.id() == part).copied()).collect();
    set.map_or_else(|| id.to_owned(), |set| named_list(&set))
}

/// The smallest change that fits, in a sentence: what it is, and when it is two changes, the
/// single one that fits too (it may be the simpler one to make, if not the smaller).
pub fn smallest_change(advice: &Advice) -> Option<String> {
    let id = advice.smallest_change_that_fits.as_deref()?;
    let mut line = format!("the change that asks least and fits: {}", remedies_named(id));
    if id.contains('+')
        && let Some(single) = advice.remedies.iter().filter(|p| p.fits).min_by_key(|p| p.projected_peak_reserved_bytes)
    {
        line.push_str(&format!(
            "; of single changes, {} fits too, at {} reserved",
            remedies_named(&single.id),
            bytes(single.projected_peak_reserved_bytes)
        ));
    }
    Some(line)
}

/// How a gate came out, a line: `gate peak_allocated_bytes: grew +3.2%, limit +5%: ok`; on a run
/// of ranks, with the rank where it came out worst.
pub fn gate_line(g: &crate::query::gates::GateResult, worst_rank: Option<u32>) -> String {
    let verdict = if g.passed { "ok" } else { "FAILED" };
    let actual = gate_change(g.actual_percent);
    let ranks = worst_rank.map_or_else(String::new, |rank| format!(" (on every rank; worst: rank {rank})"));
    format!("gate {}{ranks}: {actual}, limit +{}%: {verdict}", g.gate, g.limit_percent)
}

/// What a gate measured: `grew +3.2%`, `shrank 18.8%`, `unchanged`, `grew from none`.
pub fn gate_change(percent: Option<f64>) -> String {
    match percent {
        None => "grew from none".to_owned(),
        Some(p) if p.abs() < 0.05 => "unchanged".to_owned(),
        Some(p) if p > 0.0 => format!("grew {p:+.1}%"),
        Some(p) => format!("shrank {:.1}%", -p),
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
    // A square term worth saying (0.05 B and more), with its sign.
    if f.per_unit_squared_bytes.abs() >= 0.05 {
        let sign = if f.per_unit_squared_bytes < 0.0 { '-' } else { '+' };
        form.push_str(&format!(" {sign} {:.1} B per {unit} squared", f.per_unit_squared_bytes.abs()));
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
