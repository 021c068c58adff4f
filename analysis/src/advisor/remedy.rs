//! The remedies, as one typed list: each carries in one place its id, its uncertainty, how much
//! it asks of the user, which remedies it excludes, when it applies, how it changes the memory
//! taken apart, and the numbers its reasoning rests on ([`Reason`]; that and why a remedy is left
//! out, [`LeftOut`], are in `reasons.rs`). A new remedy is a variant and an arm in each `match`
//! here and there (and one in the front end's words: what to change and what it costs); the
//! compiler names every arm that is missing.

mod reasons;

pub use self::reasons::{LeftOut, Reason};
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
    /// QLoRA: LoRA on the model loaded in 4 bits (bitsandbytes' NF4, the adapted layers'
    /// weights dequantised at each call).
    Qlora,
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
    /// Inference with the linear layers' weights in 4 bits, in groups of 128 inputs each with a
    /// scale and a zero point (torchao's `int4_weight_only`; bitsandbytes' 4-bit, GPTQ and AWQ
    /// checkpoints take about as much).
    Int4Weights,
    /// Not keeping what grows from one iteration to the next (a loss kept with its graph,
    /// outputs kept for logging): `loss.item()`, `out.detach()`, or nothing kept.
    DropKept,
    /// Each batch padded only to its longest sequence, not to a fixed length (dynamic padding:
    /// `padding="longest"`, `DataCollatorWithPadding`).
    DynamicPadding,
}

/// Remedies of one group exclude each other (one precision, one optimizer, one sharding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Group {
    Precision,
    Optimizer,
    Sharding,
    /// How the optimizer's step runs.
    Step,
    /// How the linear layers' weights are quantised.
    Quantisation,
    /// Adapters: on the weights as they are, or on 4-bit ones.
    Adapters,
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
    /// The same in 4 bits, where the inputs split into groups ([`INT4_GROUP`]).
    pub int4_weight_bytes: f64,
    /// The weights LoRA adapts, in bytes, and the same in NF4 (QLoRA).
    pub adapted_weight_bytes: f64,
    pub nf4_weight_bytes: f64,
    /// Whether the replay knows what the program keeps from one iteration to the next, and how
    /// much it keeps per iteration.
    pub kept_replayed: bool,
    pub kept_bytes_per_iteration: u64,
    /// How the DataLoader's batches were padded, where they said (an attention mask).
    pub padding: Option<super::padding::Padding>,
    /// Whether the optimizer's state is 8-bit already (bitsandbytes' `state1`/`absmax1` by the
    /// recorder's tags).
    pub state_8bit: bool,
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

/// The inputs of a linear layer that share a scale and zero point in 4-bit weights (torchao's
/// default); a layer whose inputs do not split into such groups keeps its weight.
pub const INT4_GROUP: u64 = 128;

/// A linear layer's weight in `bits` (8: a scale per output; 4: two weights per byte, a scale
/// and zero point per [`INT4_GROUP`] inputs), the scales in the weight's dtype
/// (`element_bytes` each); as it is where 4 bits do not apply.
pub fn quantised_weight_bytes(inputs: u64, outputs: u64, element_bytes: u64, bits: u32) -> u64 {
    match bits {
        8 => inputs * outputs + outputs * element_bytes,
        _ if inputs.is_multiple_of(INT4_GROUP) => {
            inputs * outputs / 2 + (inputs / INT4_GROUP) * outputs * 2 * element_bytes
        }
        _ => inputs * outputs * element_bytes,
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
    pub const ALL: [Self; 29] = [
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
        Self::Qlora,
        Self::NoGrad,
        Self::DataParallel,
        Self::CpuOffload,
        Self::Int8Weights,
        Self::Int4Weights,
        Self::DropKept,
        Self::DynamicPadding,
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
            Self::Qlora => "qlora",
            Self::NoGrad => "no_grad",
            Self::DataParallel => "data_parallel",
            Self::CpuOffload => "cpu_offload",
            Self::Int8Weights => "int8_weights",
            Self::Int4Weights => "int4_weights",
            Self::DropKept => "drop_kept",
            Self::DynamicPadding => "dynamic_padding",
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
            Self::Int8Weights | Self::Int4Weights => Some(Group::Quantisation),
            Self::Lora | Self::Qlora => Some(Group::Adapters),
            Self::MicroBatchHalf
            | Self::SequenceHalf
            | Self::ActivationCheckpointing
            | Self::ExpandableSegments
            | Self::MaxSplitSize
            | Self::SetToNone
            | Self::TiedEmbeddings
            | Self::NoGrad
            | Self::DropKept
            | Self::DynamicPadding => None,
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
            // QLoRA: the same, with the base weights in 4 bits (their quality, a library).
            Self::Qlora if ctx.fine_tuning.is_some() => 1,
            Self::Qlora => 4,
            // One argument, nothing else changes (the fused step is usually faster).
            Self::ExpandableSegments
            | Self::MaxSplitSize
            | Self::SetToNone
            | Self::FusedStep
            | Self::NoGrad
            | Self::DropKept => 0,
            // The collate function's one setting; the batches' shapes vary then.
            Self::AmpBf16 | Self::Bf16Weights | Self::ForeachOff | Self::DynamicPadding => 1,
            // A library's quantised layers in place of the model's.
            Self::Int8Weights => 2,
            Self::AmpFp16 | Self::MicroBatchHalf => 2,
            // As int8, with more to check of the outputs (or a calibrated GPTQ/AWQ checkpoint).
            Self::Int4Weights => 3,
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
            // The 8-bit Adam replayed with each moment a byte per element and a 32-bit scale per
            // 256 where its parameter has 4096 elements or more (bitsandbytes' layout), its step
            // fused: -0.01% against `train.py --optimizer adamw8bit` on the host.
            Self::Adafactor | Self::Zero1 | Self::Zero2 | Self::ExpandableSegments => 0.1,
            Self::Adam8bit => 0.05,
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
            // Replayed with what peft's adapters add beside each adapted layer's call (two of its
            // output's size as it returns, `rank` columns saved, the output's and the input's
            // size in its backward) and the inputs of the layers left out freed as they return
            // (frozen, nothing saves them): on 2026-12-05 within 1.7% of peft runs of the CPU GPT
            // (with checkpointing +0.94%) and of Llama- and GPT-2-style fine-tunes.
            Self::Lora => 0.1,
            // Replayed as LoRA is, the adapted layers' weights in NF4 and each dequantised whole
            // at its call in forward and backward (bitsandbytes' matrix product for training):
            // against peft on a Llama-style model loaded in 4 bits (bitsandbytes on the host).
            Self::Qlora => 0.1,
            // Replayed: what forward makes inside a module freed as the module returns, what it
            // returns as the caller's next module call returns (that call's input), what the
            // model returned as it was. A name that outlives the next call (`q = q_proj(x)` before
            // `k_proj`, a residual kept over a norm) dies too early here, and a local rebound
            // inside a module too late: on 2026-12-05 +0.03% on the CPU GPT, -0.65% and -0.34% on
            // Llama- and GPT-2-style models evaluated without `no_grad` (their caches kept); the
            // rule's other reading (each module's output alive until its caller returns) lay
            // 15.6% higher.
            Self::NoGrad => 0.1,
            // Replayed with the batch split and DDP's buckets added (the gradients' size): on the
            // CPU GPT under torchrun, within 0.05% of both ranks.
            Self::DataParallel => 0.05,
            // Replayed: the state and the step's temporaries gone, the gradients freed as the
            // step begins; checked by estimating the program with the change (0.00% on an H100).
            Self::CpuOffload => 0.05,
            // Replayed: each linear weight's bytes become one per element and a scale per
            // output; exact against the CPU GPT with torch's int8 weight-only product.
            Self::Int8Weights => 0.05,
            // Replayed as int8 is: two weights per byte, a scale and zero point per 128 inputs;
            // exact against the CPU GPT with torch's int4 weight-only product for the host.
            Self::Int4Weights => 0.05,
            // Replayed: each kept block freed as the iteration after its own begins (code that
            // keeps a number instead frees it sooner, within its iteration).
            Self::DropKept => 0.05,
            // Replayed: what scales with the batch, in each iteration, by its longest row over
            // its length. What is quadratic in the length (attention's scores, a 4-D mask)
            // shrinks by the square of that, so the projection is high by their share.
            Self::DynamicPadding => 0.1,
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
            Self::SetToNone
            | Self::FusedStep
            | Self::ForeachOff
            | Self::TiedEmbeddings
            | Self::Lora
            | Self::Qlora
            | Self::NoGrad => 1.0,
            Self::DataParallel => 1.0 - 1.0 / f64::from(ctx.gpus.max(1)),
            Self::CpuOffload => 1.0,
            Self::Int8Weights => 0.75,
            Self::Int4Weights => 0.875,
            Self::DropKept => 1.0,
            Self::DynamicPadding => 1.0 - ctx.padding.as_ref().map_or(1.0, super::padding::Padding::most_filled),
        }
    }

    /// Whether it is worth projecting for this run: never what the run already does (autocast,
    /// expandable segments); checkpointing needs repeated blocks and a backward pass, which is
    /// what it saves activations for; the optimizer remedies need optimizer state, ZeRO 1 and 2
    /// a training run, sharding several GPUs; expandable segments reserved memory to give back.
    pub fn applies(self, ctx: &Context) -> bool {
        self.left_out(ctx).is_none()
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
            // The rule, without the stream: the fullest batch's share of its length.
            Self::DynamicPadding => {
                if !p.in_step() {
                    p.scale_with_batch(ctx.padding.as_ref().map_or(1.0, super::padding::Padding::most_filled));
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
            Self::Lora | Self::Qlora => {
                if self == Self::Qlora {
                    p.parameter = (p.parameter - ctx.adapted_weight_bytes + ctx.nf4_weight_bytes).max(0.0);
                }
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
            Self::Int4Weights => {
                p.parameter = (p.parameter - ctx.linear_weight_bytes + ctx.int4_weight_bytes).max(0.0);
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
}

/// Reserved over allocated at the baseline's peak: what a projected allocated peak reserves.
pub(super) fn reserve_ratio(ctx: &Context) -> f64 {
    if ctx.peak_allocated_bytes > 0 { ctx.peak_reserved_bytes as f64 / ctx.peak_allocated_bytes as f64 } else { 1.0 }
}

#[cfg(test)]
mod tests;
