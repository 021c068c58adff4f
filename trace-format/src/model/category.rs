//! Categories of memory: what a block is for.

use serde::{Deserialize, Serialize};

/// What a block of memory is used for.
///
/// The discriminants are stored in `.vtrace` files: never renumber them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, schemars::JsonSchema, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum Category {
    /// A model parameter.
    Parameter = 0,
    /// A parameter's gradient.
    Gradient = 1,
    /// Optimizer state (Adam's moments, momentum buffers, ...).
    OptimizerState = 2,
    /// A forward activation kept for backward.
    Activation = 3,
    /// A short-lived temporary.
    Temporary = 4,
    /// A model input (batch) moved to the device.
    Input = 5,
    /// Reserved by the caching allocator but not allocated to a tensor.
    AllocatorCache = 6,
    /// Driver-level memory outside the framework's allocator.
    NonFramework = 7,
    /// Autograd bookkeeping (a category of PyTorch's memory timeline).
    AutogradDetail = 8,
    /// Nothing tells.
    Unknown = 9,
}

impl Category {
    /// Every category, in discriminant order.
    pub const ALL: [Self; 10] = [
        Self::Parameter,
        Self::Gradient,
        Self::OptimizerState,
        Self::Activation,
        Self::Temporary,
        Self::Input,
        Self::AllocatorCache,
        Self::NonFramework,
        Self::AutogradDetail,
        Self::Unknown,
    ];

    /// The category stored as `byte` in a file, if it is one.
    pub fn from_u8(byte: u8) -> Option<Self> {
        Self::ALL.get(byte as usize).copied()
    }

    /// The category of that snake_case name, if one has it.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The snake_case name used in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Self::Parameter => "parameter",
            Self::Gradient => "gradient",
            Self::OptimizerState => "optimizer_state",
            Self::Activation => "activation",
            Self::Temporary => "temporary",
            Self::Input => "input",
            Self::AllocatorCache => "allocator_cache",
            Self::NonFramework => "non_framework",
            Self::AutogradDetail => "autograd_detail",
            Self::Unknown => "unknown",
        }
    }
}
