//! The remedies, as one typed list: each carries in one place its id, its uncertainty, how much
//! it asks of the user, which remedies it excludes, when it applies, how it changes the memory
//! taken apart, and the numbers its reasoning rests on ([`Reason`]). A new remedy is a variant
//! and an arm in each `match` here (and one in the front end's words: what to change and what it
//! costs); the compiler names every arm that is missing.

use super::parts::Parts;
use super::rules::{amp, checkpoint, pipeline_parallel, tensor_parallel};

/// A remedy the advisor projects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Remedy {
    /// `torch.autocast(dtype=torch.bfloat16)`.
    AmpBf16,
    /// `torch.autocast(dtype=torch.float16)` with a `GradScaler`.
    AmpFp16,
    /// An inference run's model stored in bf16 (`model.to(torch.bfloat16)`): its weights, and
    /// what it computes, in 16 bits.
    Bf16Weights,
    /// Half the micro-batch, gradients accumulated over two.
    MicroBatchHalf,
    /// Half the sequence length (tokens per sample).
    SequenceHalf,
    /// An 8-bit Adam.
    Adam8bit,
    /// Adafactor.
    Adafactor,
    /// Plain SGD.
    Sgd,
    /// Checkpointing each repeated block.
    ActivationCheckpointing,
    /// ZeRO stage 1 (optimizer state sharded).
    Zero1,
    /// ZeRO stage 2 (and gradients).
    Zero2,
    /// ZeRO stage 3 (and parameters).
    Zero3,
    /// Tensor parallelism over the GPUs: the repeated blocks' projections split column- and
    /// row-wise (Megatron-style, `torch.distributed.tensor.parallel`).
    TensorParallel,
    /// Pipeline parallelism: the repeated blocks split into as many stages as GPUs, 1F1B over
    /// twice as many micro-batches (`torch.distributed.pipelining`); its busiest stage.
    PipelineParallel,
    /// `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`.
    ExpandableSegments,
    /// `PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:N`, projected by replaying the trace through
    /// the allocator's model (`crate::allocsim`).
    MaxSplitSize,
    /// `optimizer.zero_grad(set_to_none=True)`: gradients freed after each step, not kept
    /// (zeroed) through the next forward.
    SetToNone,
    /// The optimizer's fused step (`fused=True`): no temporaries the size of the parameters.
    FusedStep,
    /// The optimizer's step one parameter at a time (`foreach=False`), not over all of them at
    /// once.
    ForeachOff,
    /// The output head sharing the input embedding's weight (tied embeddings).
    TiedEmbeddings,
    /// LoRA: every weight frozen, low-rank adapters trained on the repeated blocks' linear layers.
    Lora,
    /// Forward under `torch.no_grad()` (or `inference_mode`) where nothing goes backward: autograd
    /// records no graph and saves nothing for it.
    NoGrad,
    /// Data parallelism: the batch split over the GPUs (`DistributedDataParallel`), each with the
    /// whole model and, training, gradient buckets of the gradients' size.
    DataParallel,
    /// The optimizer's state kept on the host, and its step run there (ZeRO-Offload's
    /// `offload_optimizer`, torchao's `CPUOffloadOptimizer`): the gradients go to the host as the
    /// step begins.
    CpuOffload,
    /// Inference with the linear layers' weights in int8, one scale per output (weight-only
    /// quantisation: torchao's `int8_weight_only`, bitsandbytes' LLM.int8).
    Int8Weights,
    /// Not keeping what grows from one iteration to the next (a loss kept with its graph,
    /// outputs kept for logging): `loss.item()`, `out.detach()`, or nothing kept.
    DropKept,
}

/// Remedies of one group exclude each other (one precision, one optimizer, one sharding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Group {
    Precision,
    Optimizer,
    Sharding,
    /// How the optimizer's step runs.
    Step,
}

/// What the remedies' rules and words depend on, from the trace.
#[derive(Clone, Debug, Default)]
pub struct Context {
    /// GPUs to shard over.
    pub gpus: u32,
    /// Repeated blocks of the model.
    pub blocks: usize,
    /// Whether the run already used autocast.
    pub autocast: bool,
    /// The share of the parameters' bytes stored in 32 bits, when the recorder saw their dtypes.
    pub fp32_parameter_share: Option<f64>,
    /// The baseline's allocated and reserved peaks.
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    /// Rounding waste inside allocated blocks at the peak.
    pub internal_bytes: u64,
    /// Whether the run trained (backward ran): checkpointing and the gradient remedies need it.
    pub training: bool,
    /// Whether the run held optimizer state: the optimizer remedies need it.
    pub optimizer_state: bool,
    /// Whether the model works on sequences (attention in its modules or frames): a shorter
    /// sequence is a remedy then.
    pub sequence: bool,
    /// Whether the run already had expandable segments (or no caching allocator at all).
    pub expandable: bool,
    /// The best `max_split_size` the allocator's model found for this trace, if one saves.
    pub max_split: Option<SplitProjection>,
    /// Expandable segments replayed through the allocator's model (`setting_bytes` 0), when the
    /// model reserves what the run reserved, near enough to trust it.
    pub expandable_model: Option<SplitProjection>,
    /// Whether checkpointing is replayed from the event stream (else its rule stands: the
    /// stream does not show the blocks' activations).
    pub checkpoint_replayed: bool,
    /// The most gradient bytes at any instant taken apart: all of the model's gradients, which
    /// gradient accumulation keeps alive from the first micro-batch through the others.
    pub gradient_bytes: f64,
    /// Gradients kept (zeroed, not freed) through a later forward: `set_to_none=False`.
    pub kept_gradient_bytes: f64,
    /// The most temporaries alive at once in an optimizer step, and the largest gradient.
    pub step_temporary_bytes: f64,
    pub largest_gradient_bytes: f64,
    /// Whether the optimizer's state is Adam's (its multi-tensor step holds temporaries of
    /// every parameter's size; fused and per-parameter steps exist for it).
    pub adam: bool,
    /// An output head that could share the embedding's weight, from the layers the recorder saw.
    pub untied: Option<super::model::Untied>,
    /// The head's parameter bytes (what tying removes, with its gradient and state).
    pub untied_bytes: f64,
    /// LoRA's adapters, when the model trains its linear layers' weights.
    pub adapters: Option<super::model::Adapters>,
    /// The adapters' bytes (in the trained parameters' dtype), and the state the run's
    /// optimizer would keep for them.
    pub adapter_bytes: f64,
    pub adapter_state_bytes: f64,
    /// The share of the linear layers' weights the run trains (1 where the trace does not say).
    pub trainable_share: f64,
    /// Whether the recorder wrote the model's layers.
    pub layers_seen: bool,
    /// Where the model was loaded from, when the run fine-tunes a checkpoint
    /// (`from_pretrained`).
    pub fine_tuning: Option<String>,
    /// Whether a forward ran with autograd recording (the recorder says so).
    pub forward_with_grad: bool,
    /// Whether the run is distributed already (several ranks, or a world size above 1).
    pub distributed: bool,
    /// Whether the device advised on is the host (a CPU run).
    pub host: bool,
    /// The linear layers' weights, in bytes, and the same in int8 with a scale per output.
    pub linear_weight_bytes: f64,
    pub int8_weight_bytes: f64,
    /// Whether the replay knows what the program keeps from one iteration to the next, and how
    /// much it keeps per iteration.
    pub kept_replayed: bool,
    pub kept_bytes_per_iteration: u64,
}

/// What the allocator's model projects for a setting: a `max_split_size`, or expandable segments
/// (`setting_bytes` 0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SplitProjection {
    /// The setting, in bytes.
    pub setting_bytes: u64,
    /// The recorded reserved peak.
    pub recorded_bytes: u64,
    /// The model's reserved peak under the run's own settings.
    pub simulated_baseline_bytes: u64,
    /// The model's reserved peak with the setting.
    pub simulated_bytes: u64,
}

/// How far the allocator's model may be off under the run's own settings for its projections to
/// be used.
pub const MODEL_TRUSTED_WITHIN: f64 = 0.05;

impl SplitProjection {
    /// Whether the model is near enough to the recorded run to project from.
    pub fn trusted(&self) -> bool {
        self.model_error() <= MODEL_TRUSTED_WITHIN
    }

    /// How far the model is off on this trace under its own settings (a share of the recorded).
    pub fn model_error(&self) -> f64 {
        self.simulated_baseline_bytes.abs_diff(self.recorded_bytes) as f64 / self.recorded_bytes.max(1) as f64
    }

    /// The reserved peak projected: the recorded one, changed as the model's changed.
    pub fn projected_bytes(&self) -> u64 {
        let ratio = self.simulated_bytes as f64 / self.simulated_baseline_bytes.max(1) as f64;
        (self.recorded_bytes as f64 * ratio).round() as u64
    }
}

/// The page expandable segments map memory in.
pub const PAGE_BYTES: u64 = 2 << 20;

impl Context {
    /// Reserved but not allocated at the peak.
    pub fn waste_bytes(&self) -> u64 {
        self.peak_reserved_bytes.saturating_sub(self.peak_allocated_bytes)
    }
}

impl Remedy {
    /// Every remedy, in the order they are listed.
    pub const ALL: [Self; 26] = [
        Self::AmpBf16,
        Self::AmpFp16,
        Self::Bf16Weights,
        Self::MicroBatchHalf,
        Self::SequenceHalf,
        Self::Adam8bit,
        Self::Adafactor,
        Self::Sgd,
        Self::ActivationCheckpointing,
        Self::Zero1,
        Self::Zero2,
        Self::Zero3,
        Self::TensorParallel,
        Self::PipelineParallel,
        Self::ExpandableSegments,
        Self::MaxSplitSize,
        Self::SetToNone,
        Self::FusedStep,
        Self::ForeachOff,
        Self::TiedEmbeddings,
        Self::Lora,
        Self::NoGrad,
        Self::DataParallel,
        Self::CpuOffload,
        Self::Int8Weights,
        Self::DropKept,
    ];

    /// Its id in `advise --json` and in combinations (`amp_bf16+activation_checkpointing`).
    pub fn id(self) -> &'static str {
        match self {
            Self::AmpBf16 => "amp_bf16",
            Self::AmpFp16 => "amp_fp16",
            Self::Bf16Weights => "bf16_weights",
            Self::MicroBatchHalf => "micro_batch_half",
            Self::SequenceHalf => "sequence_half",
            Self::Adam8bit => "adam_8bit",
            Self::Adafactor => "adafactor",
            Self::Sgd => "sgd",
            Self::ActivationCheckpointing => "activation_checkpointing",
            Self::Zero1 => "zero1",
            Self::Zero2 => "zero2",
            Self::Zero3 => "zero3",
            Self::TensorParallel => "tensor_parallel",
            Self::PipelineParallel => "pipeline_parallel",
            Self::ExpandableSegments => "expandable_segments",
            Self::MaxSplitSize => "max_split_size",
            Self::SetToNone => "zero_grad_set_to_none",
            Self::FusedStep => "fused_optimizer_step",
            Self::ForeachOff => "foreach_off",
            Self::TiedEmbeddings => "tied_embeddings",
            Self::Lora => "lora",
            Self::NoGrad => "no_grad",
            Self::DataParallel => "data_parallel",
            Self::CpuOffload => "cpu_offload",
            Self::Int8Weights => "int8_weights",
            Self::DropKept => "drop_kept",
        }
    }

    fn group(self) -> Option<Group> {
        match self {
            Self::AmpBf16 | Self::AmpFp16 | Self::Bf16Weights => Some(Group::Precision),
            Self::Adam8bit | Self::Adafactor | Self::Sgd | Self::CpuOffload => Some(Group::Optimizer),
            // Over the same GPUs: one way of splitting the model at a time.
            Self::Zero1
            | Self::Zero2
            | Self::Zero3
            | Self::TensorParallel
            | Self::PipelineParallel
            | Self::DataParallel => Some(Group::Sharding),
            Self::FusedStep | Self::ForeachOff => Some(Group::Step),
            Self::MicroBatchHalf
            | Self::SequenceHalf
            | Self::ActivationCheckpointing
            | Self::ExpandableSegments
            | Self::MaxSplitSize
            | Self::SetToNone
            | Self::TiedEmbeddings
            | Self::Lora
            | Self::NoGrad
            | Self::Int8Weights
            | Self::DropKept => None,
        }
    }

    /// Whether the two cannot be applied together.
    pub fn excludes(self, other: Self) -> bool {
        self.group().is_some() && self.group() == other.group()
    }

    /// How much it asks of the user; lower first.
    pub fn rank(self, ctx: &Context) -> u32 {
        match self {
            // Fine-tuning a checkpoint, adapters are what people reach for first: the base
            // weights stay as they were loaded, and the result is a small file.
            Self::Lora if ctx.fine_tuning.is_some() => 0,
            // One argument, nothing else changes (the fused step is usually faster).
            Self::ExpandableSegments
            | Self::MaxSplitSize
            | Self::SetToNone
            | Self::FusedStep
            | Self::NoGrad
            | Self::DropKept => 0,
            Self::AmpBf16 | Self::Bf16Weights | Self::ForeachOff => 1,
            // A library's quantised layers in place of the model's.
            Self::Int8Weights => 2,
            Self::AmpFp16 | Self::MicroBatchHalf => 2,
            // LoRA changes what is trained (the base weights stay as they are).
            Self::Adam8bit | Self::ActivationCheckpointing | Self::Lora => 3,
            // It changes what the model sees at a time.
            Self::Adafactor | Self::SequenceHalf | Self::TiedEmbeddings => 4,
            // Plain data parallelism: every GPU the same program on its share of the batch.
            Self::Sgd | Self::DataParallel => 5,
            // The step's time moves to the host, and the gradients and weights over PCIe.
            Self::Zero1 | Self::CpuOffload => 6,
            Self::Zero2 => 7,
            Self::Zero3 => 8,
            // The model's code changes (a parallel plan, stages).
            Self::TensorParallel => 9,
            Self::PipelineParallel => 10,
        }
    }

    /// The share of the projected bytes its rule may be off by.
    pub fn uncertainty(self) -> f64 {
        match self {
            Self::AmpBf16 | Self::AmpFp16 => 0.15,
            // A shorter sequence: what scales with it at least halves; attention's scores, which
            // are quadratic in it, lose three quarters, so the projection is high, never low, by
            // their share.
            // What is stored in 32 bits halves, measured to the byte on the CPU GPT; a model
            // that keeps some of its work in 32 bits (norms, softmax) holds more.
            Self::MicroBatchHalf | Self::SequenceHalf | Self::Sgd | Self::Bf16Weights => 0.05,
            // Adafactor's state is a few percent of Adam's whatever its share is (0.9% measured on
            // the CPU GPT, 2% assumed): the projection is off by a share of that share.
            Self::Adam8bit | Self::Adafactor | Self::Zero1 | Self::Zero2 | Self::ExpandableSegments => 0.1,
            // Against FSDP2 (`fully_shard` of each block, 2 ranks on the CPU): +8.5% to +13.6% in
            // most runs of the same program; its all-gathered blocks come and go with the ranks'
            // timing, and the rule keeps one block gathered at any time. The DDP run projected
            // from moves too: in some runs a block the size of the gradients is alive at its
            // peak (24.9 MB instead of 22.8 MB), and then the projection lands +18% to +25% high.
            Self::Zero3 => 0.25,
            // What of a block's activations stays whole on every GPU is taken to be four tensors
            // of the block's width (its input, the normed input, the sum after attention, the
            // normed sum): right for a pre-LayerNorm transformer, not for every block.
            Self::TensorParallel => 0.2,
            // A rule: the busiest stage, the micro-batches in flight. Against
            // `torch.distributed.pipelining` (2 stages, 1F1B over 4 micro-batches, CPU): +3.4%
            // of the busiest stage, the last, which holds 1.4 MB the rule does not (the schedule's
            // buffers for what it receives and sends) and which the first stage's larger share of
            // micro-batches in flight outweighs here, not in every model.
            Self::PipelineParallel => 0.25,
            Self::ActivationCheckpointing => 0.2,
            // Plus the model's own error on the trace (see `singles`).
            Self::MaxSplitSize => 0.02,
            // Replayed: the kept gradients freed and allocated again as far into the backward as
            // in their own; the incoming gradient each backward added to a kept one stays (one
            // parameter's, briefly).
            Self::SetToNone => 0.05,
            // Replayed without the step's temporaries; a fused kernel's own scratch is small.
            Self::FusedStep => 0.05,
            // A rule for the loop's temporaries: two of the largest parameter's size (Adam's
            // square root of `exp_avg_sq` and its quotient), alive together.
            Self::ForeachOff => 0.1,
            // The embedding's gradient then gathers the head's contribution too: one more of
            // its size in backward, briefly.
            Self::TiedEmbeddings => 0.05,
            // What the adapters save for backward (each adapted layer's input, and an output of
            // `rank` columns) is not in the stream: the base layers' inputs are saved already
            // where their weights were trained.
            Self::Lora => 0.1,
            // Replayed: what forward makes inside a module freed when the module returns, but its
            // output. A local the module's code rebinds (`q = split_heads(q)`, `x = block(x)`)
            // dies earlier, which the stream does not show: a projection high, never low; +15.6%
            // on the CPU GPT against the run under `inference_mode`.
            Self::NoGrad => 0.2,
            // Replayed with the batch split and DDP's buckets added (the gradients' size): on the
            // CPU GPT under torchrun, within 0.05% of both ranks.
            Self::DataParallel => 0.05,
            // Replayed: the state and the step's temporaries gone, the gradients freed as the
            // step begins; checked by estimating the program with the change (0.00% on an H100).
            Self::CpuOffload => 0.05,
            // Replayed: each linear weight's bytes become one per element and a scale per
            // output; exact against the CPU GPT with torch's int8 weight-only product.
            Self::Int8Weights => 0.05,
            // Replayed: each kept block freed as the iteration after its own begins (code that
            // keeps a number instead frees it sooner, within its iteration).
            Self::DropKept => 0.05,
        }
    }

    /// The most of one byte it can take away: what a byte of the wrong category can move its
    /// projection by (the uncertainty from evidence scales with it).
    pub fn reach(self, ctx: &Context) -> f64 {
        match self {
            Self::AmpBf16 | Self::AmpFp16 | Self::Bf16Weights | Self::MicroBatchHalf | Self::SequenceHalf => 0.5,
            Self::Adam8bit => 0.75,
            Self::Adafactor | Self::Sgd | Self::ActivationCheckpointing => 1.0,
            Self::Zero1 | Self::Zero2 | Self::Zero3 | Self::TensorParallel | Self::PipelineParallel => {
                1.0 - 1.0 / f64::from(ctx.gpus.max(1))
            }
            Self::ExpandableSegments | Self::MaxSplitSize => 0.0,
            Self::SetToNone | Self::FusedStep | Self::ForeachOff | Self::TiedEmbeddings | Self::Lora | Self::NoGrad => {
                1.0
            }
            Self::DataParallel => 1.0 - 1.0 / f64::from(ctx.gpus.max(1)),
            Self::CpuOffload => 1.0,
            Self::Int8Weights => 0.75,
            Self::DropKept => 1.0,
        }
    }

    /// Whether it is worth projecting for this run: never what the run already does (autocast,
    /// expandable segments); checkpointing needs repeated blocks and a backward pass, which is
    /// what it saves activations for; the optimizer remedies need optimizer state, ZeRO 1 and 2
    /// a training run, sharding several GPUs; expandable segments reserved memory to give back.
    pub fn applies(self, ctx: &Context) -> bool {
        self.left_out(ctx).is_none()
    }

    /// Why it is not projected for this run, or `None` when it is.
    pub fn left_out(self, ctx: &Context) -> Option<LeftOut> {
        let training = |then: Option<LeftOut>| if ctx.training { then } else { Some(LeftOut::NoBackward) };
        let gpus = |then: Option<LeftOut>| if ctx.gpus > 1 { then } else { Some(LeftOut::OneGpu) };
        let state = || (!ctx.optimizer_state).then_some(LeftOut::NoOptimizerState);
        let layers = |then: Option<LeftOut>| if ctx.layers_seen { then } else { Some(LeftOut::LayersNotSeen) };
        match self {
            Self::AmpBf16 | Self::AmpFp16 => ctx.autocast.then_some(LeftOut::AlreadyAutocast),
            // Inference only (training keeps 32-bit master weights), and only for a model the
            // recorder saw holding 32-bit weights.
            Self::Bf16Weights => match ctx.fp32_parameter_share {
                _ if ctx.training => Some(LeftOut::TrainingKeepsFp32),
                None => Some(LeftOut::DtypesNotSeen),
                Some(share) if share <= 0.0 => Some(LeftOut::Already16Bit),
                Some(_) => None,
            },
            Self::ActivationCheckpointing => training((ctx.blocks < 2).then_some(LeftOut::NoRepeatedBlocks)),
            Self::Zero1 => gpus(state()),
            Self::Zero2 => gpus(training(None)),
            Self::Zero3 => gpus(None),
            // They split the repeated blocks: pipeline stages need a block each at least.
            Self::TensorParallel => gpus((ctx.blocks < 1).then_some(LeftOut::NoRepeatedBlocks)),
            Self::PipelineParallel => gpus((ctx.blocks < ctx.gpus as usize).then_some(LeftOut::FewerBlocksThanGpus)),
            // And, where the allocator's model is trusted, only if it reserves less with them.
            Self::ExpandableSegments => {
                if ctx.expandable {
                    Some(LeftOut::AlreadyExpandable)
                } else if ctx.waste_bytes() <= PAGE_BYTES
                    || ctx.expandable_model.is_some_and(|m| m.projected_bytes() + PAGE_BYTES >= ctx.peak_reserved_bytes)
                {
                    Some(LeftOut::LittleReservedUnused)
                } else {
                    None
                }
            }
            // Only where the model reserves what the run reserved, near enough to trust it.
            Self::MaxSplitSize => (!ctx
                .max_split
                .is_some_and(|m| m.trusted() && m.projected_bytes() + PAGE_BYTES < ctx.peak_reserved_bytes))
            .then_some(LeftOut::NoBetterSplit),
            Self::Adam8bit | Self::Adafactor | Self::Sgd => state(),
            Self::MicroBatchHalf => None,
            Self::SequenceHalf => (!ctx.sequence).then_some(LeftOut::NoSequences),
            Self::SetToNone => training((ctx.kept_gradient_bytes <= 0.0).then_some(LeftOut::GradientsFreedAlready)),
            // Adam's step, where it holds temporaries: any (the loop's) for the fused step, more
            // than a loop over the parameters would hold for `foreach=False`.
            Self::FusedStep | Self::ForeachOff if !ctx.adam => Some(LeftOut::NotAdam),
            Self::FusedStep => (ctx.step_temporary_bytes <= 0.0).then_some(LeftOut::NoStepTemporaries),
            Self::ForeachOff => {
                (ctx.step_temporary_bytes <= 2.5 * ctx.largest_gradient_bytes).then_some(LeftOut::StepPerParameter)
            }
            Self::TiedEmbeddings => training(layers(ctx.untied.is_none().then_some(LeftOut::NoUntiedHead))),
            Self::Lora => training(layers(match ctx.adapters {
                None if ctx.trainable_share < 0.5 => Some(LeftOut::MostWeightsFrozen),
                None => Some(LeftOut::NoLinearInBlocks),
                Some(_) if ctx.gradient_bytes <= 0.0 && !ctx.optimizer_state => Some(LeftOut::NoModelState),
                Some(_) => None,
            })),
            Self::DataParallel => gpus(ctx.distributed.then_some(LeftOut::AlreadyDistributed)),
            Self::Int8Weights if ctx.training => Some(LeftOut::TrainingKeepsFp32),
            Self::Int8Weights => layers((ctx.linear_weight_bytes <= 0.0).then_some(LeftOut::NoLinearLayers)),
            Self::DropKept => (!ctx.kept_replayed).then_some(LeftOut::NothingKept),
            Self::CpuOffload if ctx.host => Some(LeftOut::OnTheHost),
            Self::CpuOffload => training(state()),
            Self::NoGrad if ctx.training => Some(LeftOut::Trains),
            Self::NoGrad => (!ctx.forward_with_grad).then_some(LeftOut::NoGradAlready),
        }
    }

    /// Whether it changes the allocated memory (and so combines with the others); expandable
    /// segments change only what is reserved.
    pub fn changes_allocated(self) -> bool {
        !matches!(self, Self::ExpandableSegments | Self::MaxSplitSize)
    }

    /// Its ZeRO stage (0 for the other remedies).
    pub fn zero_stage(self) -> u32 {
        match self {
            Self::Zero1 => 1,
            Self::Zero2 => 2,
            Self::Zero3 => 3,
            _ => 0,
        }
    }

    /// Changes the memory of one instant as the remedy would.
    pub fn apply(self, p: &mut Parts, ctx: &Context) {
        match self {
            Self::AmpBf16 | Self::AmpFp16 => amp(p),
            Self::Bf16Weights => {
                let share = ctx.fp32_parameter_share.unwrap_or(0.0);
                p.parameter *= 1.0 - share / 2.0;
                p.matmul_parameter *= 1.0 - share / 2.0;
                p.block_parameter *= 1.0 - share / 2.0;
                p.in_block_parameter *= 1.0 - share / 2.0;
                p.after_parameter *= 1.0 - share / 2.0;
                // Under autocast the activations are 16-bit already.
                if !ctx.autocast {
                    p.activation /= 2.0;
                    p.fp32_activation = 0.0;
                    p.after_activation /= 2.0;
                    p.boundary /= 2.0;
                    p.blocks.values_mut().for_each(|b| *b /= 2.0);
                    p.temporary /= 2.0;
                }
            }
            Self::MicroBatchHalf => {
                if !p.in_step() {
                    // Accumulating: the first micro-batch's gradients live through the second.
                    if ctx.training {
                        p.gradient = p.gradient.max(ctx.gradient_bytes);
                    }
                    p.scale_with_batch(0.5);
                }
            }
            Self::SequenceHalf => {
                if !p.in_step() {
                    p.scale_with_batch(0.5);
                }
            }
            Self::Adam8bit => p.optimizer_state /= 4.0,
            Self::Adafactor => p.optimizer_state *= 0.02,
            Self::Sgd => p.optimizer_state = 0.0,
            Self::ActivationCheckpointing => checkpoint(p),
            Self::Zero1 | Self::Zero2 | Self::Zero3 => {
                let n = f64::from(ctx.gpus.max(1));
                let stage = self.zero_stage();
                p.optimizer_state /= n;
                if stage >= 2 {
                    p.gradient /= n;
                }
                if stage >= 3 {
                    p.parameter = p.parameter / n + p.block_parameter;
                }
            }
            Self::TensorParallel => tensor_parallel(p, f64::from(ctx.gpus.max(1))),
            Self::PipelineParallel => {
                // The micro-batches' gradients accumulate: alive from the first backward on.
                if ctx.training && !p.in_step() {
                    p.gradient = p.gradient.max(ctx.gradient_bytes);
                }
                pipeline_parallel(p, f64::from(ctx.gpus.max(1)));
            }
            Self::ExpandableSegments | Self::MaxSplitSize => {}
            Self::SetToNone => {
                if p.phase == Some(super::Phase::Forward) {
                    p.gradient = (p.gradient - ctx.kept_gradient_bytes).max(0.0);
                }
            }
            Self::FusedStep | Self::ForeachOff => {
                if p.in_step() {
                    let kept = if self == Self::ForeachOff { 2.0 * ctx.largest_gradient_bytes } else { 0.0 };
                    p.temporary = (p.temporary - ctx.step_temporary_bytes + kept).max(0.0);
                }
            }
            Self::TiedEmbeddings => {
                let state_per_byte = if p.parameter > 0.0 { p.optimizer_state / p.parameter } else { 0.0 };
                let head = ctx.untied_bytes.min(p.parameter);
                p.parameter -= head;
                p.gradient = (p.gradient - head).max(0.0);
                p.optimizer_state = (p.optimizer_state - head * state_per_byte).max(0.0);
            }
            Self::Lora => {
                if p.in_step() && ctx.gradient_bytes > 0.0 {
                    p.temporary *= (ctx.adapter_bytes / ctx.gradient_bytes).min(1.0);
                }
                p.parameter += ctx.adapter_bytes;
                p.gradient = if p.gradient > 0.0 { ctx.adapter_bytes } else { 0.0 };
                p.optimizer_state = ctx.adapter_state_bytes;
            }
            // The stream shows what is kept; without it, the rule knows nothing to take.
            Self::DropKept => {}
            Self::Int8Weights => {
                p.parameter = (p.parameter - ctx.linear_weight_bytes + ctx.int8_weight_bytes).max(0.0);
            }
            Self::CpuOffload => {
                p.optimizer_state = 0.0;
                if p.in_step() {
                    p.temporary = 0.0;
                    p.gradient = 0.0;
                }
            }
            Self::DataParallel => {
                if !p.in_step() {
                    p.scale_with_batch(1.0 / f64::from(ctx.gpus.max(1)));
                }
                // DDP's buckets, the gradients' size, from its construction on.
                if ctx.training {
                    p.other += ctx.gradient_bytes;
                }
            }
            // The rule, without the stream: what the graph saved goes but a block's worth.
            Self::NoGrad => {
                let largest = p.blocks.values().copied().fold(0.0, f64::max);
                let kept = p.boundary.max(largest.min(p.activation));
                p.activation = kept;
                p.fp32_activation = p.fp32_activation.min(kept);
                p.blocks.values_mut().for_each(|b| *b = b.min(kept));
            }
        }
    }

    /// The reserved peak it projects: allocated memory reserved in the same proportion as now,
    /// except for expandable segments, which reserve what is allocated, its rounding and part of
    /// a page.
    pub fn reserved_bytes(self, projected_allocated: f64, ctx: &Context) -> u64 {
        match self {
            Self::ExpandableSegments => ctx.expandable_model.map_or_else(
                || (ctx.peak_allocated_bytes + ctx.internal_bytes + PAGE_BYTES).min(ctx.peak_reserved_bytes),
                |m| m.projected_bytes(),
            ),
            Self::MaxSplitSize => ctx.max_split.map_or(ctx.peak_reserved_bytes, |m| m.projected_bytes()),
            _ => (projected_allocated * reserve_ratio(ctx)).round() as u64,
        }
    }

    /// Why, from the trace: the parts it changes at the peak.
    pub fn reason(self, base: &Parts, ctx: &Context, projected: f64) -> Reason {
        let bytes = |b: f64| b.max(0.0) as u64;
        let share = |part: f64| part / base.total().max(1.0);
        match self {
            Self::Bf16Weights => Reason::Weights {
                parameter_bytes: bytes(base.parameter),
                fp32_share: ctx.fp32_parameter_share.unwrap_or(0.0),
                activation_bytes: bytes(base.activation + base.temporary),
                autocast: ctx.autocast,
            },
            Self::AmpBf16 | Self::AmpFp16 => Reason::Precision {
                activation_bytes: bytes(base.activation),
                share_of_peak: share(base.activation),
                fp32_activation_bytes: bytes(base.fp32_activation),
                matmul_parameter_bytes: bytes(base.matmul_parameter),
            },
            Self::ActivationCheckpointing => Reason::Checkpointing {
                activation_bytes: bytes(base.activation),
                share_of_peak: share(base.activation),
                in_blocks_bytes: bytes(base.blocks.values().sum()),
                blocks: base.blocks.len(),
                boundary_bytes: bytes(base.boundary),
                largest_block_bytes: bytes(base.blocks.values().copied().fold(0.0, f64::max)),
                simulated: ctx.checkpoint_replayed,
            },
            Self::MicroBatchHalf => Reason::Batch {
                scaling_bytes: bytes(base.activation + base.temporary + base.input),
                accumulated_gradient_bytes: if ctx.training { bytes(ctx.gradient_bytes) } else { 0 },
            },
            Self::SequenceHalf => {
                Reason::Sequence { scaling_bytes: bytes(base.activation + base.temporary + base.input) }
            }
            Self::Adam8bit | Self::Adafactor | Self::Sgd => Reason::OptimizerState {
                optimizer_state_bytes: bytes(base.optimizer_state),
                share_of_peak: share(base.optimizer_state),
            },
            Self::Zero1 | Self::Zero2 | Self::Zero3 => Reason::Sharding {
                parameter_bytes: bytes(base.parameter),
                gradient_bytes: bytes(base.gradient),
                optimizer_state_bytes: bytes(base.optimizer_state),
                gpus: ctx.gpus,
            },
            Self::TensorParallel | Self::PipelineParallel => Reason::Parallel {
                in_block_parameter_bytes: bytes(base.in_block_parameter),
                parameter_bytes: bytes(base.parameter),
                in_block_activation_bytes: bytes(base.blocks.values().sum()),
                activation_bytes: bytes(base.activation),
                gpus: ctx.gpus,
            },
            Self::ExpandableSegments if ctx.expandable_model.is_some() => {
                Reason::ExpandableSimulated(ctx.expandable_model.unwrap_or(SplitProjection {
                    setting_bytes: 0,
                    recorded_bytes: ctx.peak_reserved_bytes,
                    simulated_baseline_bytes: ctx.peak_reserved_bytes,
                    simulated_bytes: ctx.peak_reserved_bytes,
                }))
            }
            Self::ExpandableSegments => Reason::Reserved {
                unused_bytes: ctx.waste_bytes(),
                rounding_bytes: ctx.internal_bytes,
                reserved_before_bytes: ctx.peak_reserved_bytes,
                reserved_after_bytes: self.reserved_bytes(projected, ctx),
            },
            Self::MaxSplitSize => Reason::Simulated(ctx.max_split.unwrap_or(SplitProjection {
                setting_bytes: 0,
                recorded_bytes: ctx.peak_reserved_bytes,
                simulated_baseline_bytes: ctx.peak_reserved_bytes,
                simulated_bytes: ctx.peak_reserved_bytes,
            })),
            Self::SetToNone => Reason::KeptGradients {
                kept_gradient_bytes: bytes(ctx.kept_gradient_bytes),
                gradient_bytes: bytes(base.gradient),
            },
            Self::FusedStep | Self::ForeachOff => Reason::StepTemporaries {
                temporary_bytes: bytes(ctx.step_temporary_bytes),
                largest_gradient_bytes: bytes(ctx.largest_gradient_bytes),
                fused: self == Self::FusedStep,
            },
            Self::TiedEmbeddings => Reason::Tied {
                embedding: ctx.untied.as_ref().map(|u| u.embedding.clone()).unwrap_or_default(),
                head: ctx.untied.as_ref().map(|u| u.head.clone()).unwrap_or_default(),
                head_bytes: bytes(ctx.untied_bytes),
            },
            Self::NoGrad => Reason::Graph { activation_bytes: bytes(base.activation) },
            Self::DropKept => Reason::Kept { kept_bytes_per_iteration: ctx.kept_bytes_per_iteration },
            Self::Int8Weights => Reason::Quantised {
                linear_weight_bytes: bytes(ctx.linear_weight_bytes),
                quantised_bytes: bytes(ctx.int8_weight_bytes),
            },
            Self::CpuOffload => Reason::Offload {
                optimizer_state_bytes: bytes(base.optimizer_state),
                gradient_bytes: bytes(base.gradient),
            },
            Self::DataParallel => Reason::DataParallel {
                scaling_bytes: bytes(base.activation + base.temporary + base.input),
                bucket_bytes: if ctx.training { bytes(ctx.gradient_bytes) } else { 0 },
                gpus: ctx.gpus,
            },
            Self::Lora => Reason::Adapters {
                gradient_bytes: bytes(base.gradient),
                optimizer_state_bytes: bytes(base.optimizer_state),
                layers: ctx.adapters.as_ref().map_or(0, |a| a.layers),
                rank: ctx.adapters.as_ref().map_or(0, |a| a.rank),
                adapter_bytes: bytes(ctx.adapter_bytes),
            },
        }
    }
}

/// Why a remedy is not projected for a run: what it already does, or what the trace lacks that
/// the remedy needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LeftOut {
    /// No backward ran: nothing is saved for one, no gradients.
    NoBackward,
    /// One GPU: sharding is projected over several (`--gpus N`).
    OneGpu,
    /// No optimizer state at the instants taken apart.
    NoOptimizerState,
    /// Fewer than two repeated blocks found (module spans, or block frames in the stacks).
    NoRepeatedBlocks,
    /// Fewer repeated blocks than GPUs: a pipeline stage needs one at least.
    FewerBlocksThanGpus,
    /// The run already runs under autocast.
    AlreadyAutocast,
    /// A training run keeps 32-bit master weights.
    TrainingKeepsFp32,
    /// The parameters' dtypes are not in the trace.
    DtypesNotSeen,
    /// The parameters are 16-bit already.
    Already16Bit,
    /// The run has expandable segments already (or the driver's pools).
    AlreadyExpandable,
    /// Little reserved memory unused at the peak, or the allocator's model finds no gain.
    LittleReservedUnused,
    /// No `max_split_size_mb` reserves less in the allocator's model (or it cannot be trusted).
    NoBetterSplit,
    /// No attention seen: the model does not work on sequences.
    NoSequences,
    /// No gradient is alive through a later forward: freed after each step already.
    GradientsFreedAlready,
    /// The optimizer's state is not Adam's (no multi-tensor temporaries to save, or not known).
    NotAdam,
    /// The optimizer's step holds no temporaries (fused already).
    NoStepTemporaries,
    /// The step holds temporaries of one parameter at a time already.
    StepPerParameter,
    /// The recorder did not see the model's layers (an imported trace, or no model called).
    LayersNotSeen,
    /// No trained output head with the embedding's shape: tied already, or none.
    NoUntiedHead,
    /// Under half of the linear layers' weights are trained: adapters (or a frozen model) already.
    MostWeightsFrozen,
    /// No linear layer inside the repeated blocks to adapt.
    NoLinearInBlocks,
    /// No gradients or optimizer state to save.
    NoModelState,
    /// The run goes backward: its graph is what backward needs.
    Trains,
    /// Forward ran under `no_grad` or `inference_mode` already (or the recorder did not say).
    NoGradAlready,
    /// The run is distributed already (its ranks, or its world size).
    AlreadyDistributed,
    /// The device is the host: there is nowhere to offload to.
    OnTheHost,
    /// No linear layer with a weight of its own in the model.
    NoLinearLayers,
    /// Nothing grows from one iteration to the next (or what does is a cache by design).
    NothingKept,
}

/// Why a projection is what it is: the numbers of the trace its rule rests on. Shares are of
/// the peak taken apart (0 to 1); the words are the front end's.
#[derive(Clone, Debug, PartialEq)]
pub enum Reason {
    /// Mixed precision: the activations at the peak, what of them stays in 32 bits (residual
    /// sums, the loss, embeddings), and the weights autocast keeps 16-bit copies of.
    Precision {
        /// Activations at the peak.
        activation_bytes: u64,
        /// Their share of the peak.
        share_of_peak: f64,
        /// Activations that stay 32-bit.
        fp32_activation_bytes: u64,
        /// Weights of matrix products (16-bit copies kept for backward).
        matmul_parameter_bytes: u64,
    },
    /// An inference model in bf16: its parameters, the share of them in 32 bits, and what it
    /// computes (activations and temporaries, 16-bit already under autocast).
    Weights {
        /// Parameters at the peak.
        parameter_bytes: u64,
        /// The share of them stored in 32 bits.
        fp32_share: f64,
        /// Activations and temporaries at the peak.
        activation_bytes: u64,
        /// Whether the run was under autocast.
        autocast: bool,
    },
    /// Checkpointing: the activations, those inside the repeated blocks, and what stays live.
    Checkpointing {
        /// Activations at the peak.
        activation_bytes: u64,
        /// Their share of the peak.
        share_of_peak: f64,
        /// Activations inside the repeated blocks.
        in_blocks_bytes: u64,
        /// The repeated blocks.
        blocks: usize,
        /// Each block's input (kept by checkpointing).
        boundary_bytes: u64,
        /// The largest block's activations (recomputed one at a time).
        largest_block_bytes: u64,
        /// Whether the projection is the replay of the changed event stream (else the rule's).
        simulated: bool,
    },
    /// A smaller micro-batch: what scales with it (activations, temporaries, inputs).
    Batch {
        /// Bytes that scale with the batch at the peak.
        scaling_bytes: u64,
        /// The gradients the first micro-batch leaves alive through the second (0: inference).
        accumulated_gradient_bytes: u64,
    },
    /// A shorter sequence: what scales with it (activations, temporaries, inputs).
    Sequence {
        /// Bytes that scale with the sequence at the peak (at least linearly).
        scaling_bytes: u64,
    },
    /// Another optimizer: its state at the peak.
    OptimizerState {
        /// Optimizer state at the peak.
        optimizer_state_bytes: u64,
        /// Its share of the peak.
        share_of_peak: f64,
    },
    /// Sharding: what is sharded, over how many GPUs.
    Sharding {
        /// Parameters at the peak.
        parameter_bytes: u64,
        /// Gradients at the peak.
        gradient_bytes: u64,
        /// Optimizer state at the peak.
        optimizer_state_bytes: u64,
        /// GPUs.
        gpus: u32,
    },
    /// Tensor or pipeline parallelism: what they split (the repeated blocks' parameters and
    /// activations) out of the whole.
    Parallel {
        /// The repeated blocks' parameters at the peak.
        in_block_parameter_bytes: u64,
        /// All parameters at the peak.
        parameter_bytes: u64,
        /// Activations inside the repeated blocks at the peak.
        in_block_activation_bytes: u64,
        /// All activations at the peak.
        activation_bytes: u64,
        /// GPUs (or stages).
        gpus: u32,
    },
    /// An allocator setting, replayed through the allocator's model.
    Simulated(SplitProjection),
    /// Expandable segments, replayed through the allocator's model.
    ExpandableSimulated(SplitProjection),
    /// Expandable segments: reserved memory not allocated, and the reserved peak before and
    /// after.
    Reserved {
        /// Reserved but not allocated at the peak.
        unused_bytes: u64,
        /// Rounding inside allocated blocks.
        rounding_bytes: u64,
        /// The reserved peak now.
        reserved_before_bytes: u64,
        /// The reserved peak projected.
        reserved_after_bytes: u64,
    },
    /// Gradients zeroed, not freed: those kept through the next forward, and the gradients at
    /// the peak.
    KeptGradients {
        /// Gradients alive at the start of a forward after their backward.
        kept_gradient_bytes: u64,
        /// Gradients at the peak.
        gradient_bytes: u64,
    },
    /// The optimizer step's temporaries: the most alive at once, and the largest gradient (a
    /// loop over the parameters holds two of its size).
    StepTemporaries {
        /// The most temporaries alive at once in a step.
        temporary_bytes: u64,
        /// The largest gradient.
        largest_gradient_bytes: u64,
        /// The fused step (else the loop over the parameters).
        fused: bool,
    },
    /// Tied embeddings: the embedding's and the head's weights, and the head's bytes.
    Tied {
        /// The embedding's weight.
        embedding: String,
        /// The head's weight.
        head: String,
        /// The head's weight in bytes.
        head_bytes: u64,
    },
    /// LoRA: the gradients and optimizer state that go, and the adapters that come.
    Adapters {
        /// Gradients at the peak.
        gradient_bytes: u64,
        /// Optimizer state at the peak.
        optimizer_state_bytes: u64,
        /// Linear layers adapted.
        layers: usize,
        /// Their rank.
        rank: u64,
        /// The adapters' parameters, in bytes.
        adapter_bytes: u64,
    },
    /// Data parallelism: what scales with the batch, the buckets DDP adds, over how many GPUs.
    DataParallel {
        /// Bytes that scale with the batch at the peak.
        scaling_bytes: u64,
        /// DDP's gradient buckets (0: inference).
        bucket_bytes: u64,
        /// GPUs.
        gpus: u32,
    },
    /// What a program keeps from one iteration to the next.
    Kept {
        /// Bytes kept per iteration.
        kept_bytes_per_iteration: u64,
    },
    /// Weight-only quantisation: the linear layers' weights, and what they take quantised.
    Quantised {
        /// The linear layers' weights.
        linear_weight_bytes: u64,
        /// The same in int8, with their scales.
        quantised_bytes: u64,
    },
    /// The optimizer on the host: its state and the gradients at the peak.
    Offload {
        /// Optimizer state at the peak.
        optimizer_state_bytes: u64,
        /// Gradients at the peak.
        gradient_bytes: u64,
    },
    /// No graph recorded: the activations it saved at the peak.
    Graph {
        /// Activations at the peak.
        activation_bytes: u64,
    },
    /// Remedies applied together (two or three).
    Together(Vec<Remedy>),
}

/// Reserved over allocated at the baseline's peak: what a projected allocated peak reserves.
pub(super) fn reserve_ratio(ctx: &Context) -> f64 {
    if ctx.peak_allocated_bytes > 0 { ctx.peak_reserved_bytes as f64 / ctx.peak_allocated_bytes as f64 } else { 1.0 }
}

#[cfg(test)]
mod tests;
