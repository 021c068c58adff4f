//! Why each remedy is what it is for a run: whether it is left out, and why (`LeftOut`), and the
//! numbers of the trace its projection rests on (`Reason`). The words are the front end's.

use super::{Context, PAGE_BYTES, Remedy, SplitProjection};
use crate::advisor::parts::Parts;

impl Remedy {
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
            Self::Adam8bit if ctx.state_8bit => Some(LeftOut::State8BitAlready),
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
            Self::Lora | Self::Qlora => training(layers(match ctx.adapters {
                None if ctx.trainable_share < 0.5 => Some(LeftOut::MostWeightsFrozen),
                None => Some(LeftOut::NoLinearInBlocks),
                Some(_) if ctx.gradient_bytes <= 0.0 && !ctx.optimizer_state => Some(LeftOut::NoModelState),
                Some(_) => None,
            })),
            Self::DataParallel => gpus(ctx.distributed.then_some(LeftOut::AlreadyDistributed)),
            Self::Int8Weights | Self::Int4Weights if ctx.training => Some(LeftOut::TrainingKeepsFp32),
            Self::Int8Weights | Self::Int4Weights => {
                layers((ctx.linear_weight_bytes <= 0.0).then_some(LeftOut::NoLinearLayers))
            }
            Self::DropKept => (!ctx.kept_replayed).then_some(LeftOut::NothingKept),
            Self::DynamicPadding => match &ctx.padding {
                None => Some(LeftOut::NoPaddingSeen),
                Some(p) if p.most_filled() >= 1.0 => Some(LeftOut::PaddedToLongest),
                Some(_) => None,
            },
            Self::CpuOffload if ctx.host => Some(LeftOut::OnTheHost),
            Self::CpuOffload => training(state()),
            Self::NoGrad if ctx.training => Some(LeftOut::Trains),
            Self::NoGrad => (!ctx.forward_with_grad).then_some(LeftOut::NoGradAlready),
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
            Self::DynamicPadding => {
                let (padded_length, longest) = ctx.padding.as_ref().map_or((0, 0), |p| p.most);
                Reason::Padding {
                    scaling_bytes: bytes(base.activation + base.temporary + base.input),
                    padded_length,
                    longest,
                    batches: ctx.padding.as_ref().map_or(0, |p| p.batches_seen),
                }
            }
            Self::Int8Weights | Self::Int4Weights => Reason::Quantised {
                linear_weight_bytes: bytes(ctx.linear_weight_bytes),
                quantised_bytes: bytes(if self == Self::Int8Weights {
                    ctx.int8_weight_bytes
                } else {
                    ctx.int4_weight_bytes
                }),
                bits: if self == Self::Int8Weights { 8 } else { 4 },
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
            Self::Lora | Self::Qlora => Reason::Adapters {
                nf4_weight_bytes: (self == Self::Qlora).then(|| bytes(ctx.nf4_weight_bytes)),
                weight_bytes: bytes(ctx.adapted_weight_bytes),
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
    /// The optimizer's state is 8-bit already.
    State8BitAlready,
    /// No batch said how it is padded (no `attention_mask` in what the DataLoader gave).
    NoPaddingSeen,
    /// A batch fills its length: padded to its longest already, or a batch as long as the
    /// fixed length.
    PaddedToLongest,
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
        /// The weights they adapt, and (QLoRA) the same in NF4.
        weight_bytes: u64,
        nf4_weight_bytes: Option<u64>,
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
    /// Padding: what scales with the tokens, and the batch whose longest row fills its length
    /// most.
    Padding {
        /// Bytes that scale with the batch at the peak.
        scaling_bytes: u64,
        /// That batch's length and its longest row.
        padded_length: u64,
        longest: u64,
        /// Batches that said how they were padded.
        batches: u64,
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
        /// The bits per weight (8 or 4).
        bits: u32,
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
