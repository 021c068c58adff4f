//! Time spans and instants that give a timeline its structure.

use super::ids::{DeviceId, ProcessId, StackId, StringId};

/// What an annotation marks.
///
/// The discriminants are stored in `.vtrace` files: never renumber them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AnnotationKind {
    /// A user range (`record_function`, `torch.cuda.memory` external annotations, NVTX).
    UserRange = 0,
    /// A framework operator (e.g. `aten::linear`).
    Op = 1,
    /// A training iteration.
    Iteration = 2,
    /// The forward pass.
    Forward = 3,
    /// The backward pass.
    Backward = 4,
    /// The optimizer step.
    OptimizerStep = 5,
    /// A module's forward (name is the module's qualified name).
    Module = 6,
    /// The instant a snapshot of the allocator was taken.
    Snapshot = 7,
    /// A free-form marker recorded in the allocator's trace.
    Marker = 8,
}

impl AnnotationKind {
    /// Every kind, in the order of their discriminants.
    pub const ALL: [Self; 9] = [
        Self::UserRange,
        Self::Op,
        Self::Iteration,
        Self::Forward,
        Self::Backward,
        Self::OptimizerStep,
        Self::Module,
        Self::Snapshot,
        Self::Marker,
    ];

    /// Its name where text names it (the recorder's log, `info --at`): `forward`,
    /// `optimizer_step`, ...
    pub fn name(self) -> &'static str {
        match self {
            Self::UserRange => "user_range",
            Self::Op => "op",
            Self::Iteration => "iteration",
            Self::Forward => "forward",
            Self::Backward => "backward",
            Self::OptimizerStep => "optimizer_step",
            Self::Module => "module",
            Self::Snapshot => "snapshot",
            Self::Marker => "marker",
        }
    }

    /// The kind a name names.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether it is a phase of a training step (or the step itself).
    pub fn is_phase(self) -> bool {
        matches!(self, Self::Forward | Self::Backward | Self::OptimizerStep | Self::Iteration)
    }

    /// The kind stored as `byte` in a file, if it is one.
    pub fn from_u8(byte: u8) -> Option<Self> {
        Self::ALL.get(byte as usize).copied()
    }
}

/// A named span `[start_ns, end_ns]` (an instant when they are equal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Annotation {
    /// What it marks.
    pub kind: AnnotationKind,
    /// The device it belongs to; `None`: every device of its process.
    pub device: Option<DeviceId>,
    /// Which process.
    pub process: ProcessId,
    /// Start on the trace's clock.
    pub start_ns: i64,
    /// End on the trace's clock (`>= start_ns`).
    pub end_ns: i64,
    /// Its name.
    pub name: StringId,
    /// Where it was opened, when known.
    pub stack: StackId,
}

impl Annotation {
    /// The one order annotations are kept in, by every source and the `.vtrace` reader: by
    /// start, and of those that start together the longest first (what encloses before what
    /// it encloses).
    pub fn order(&self) -> (i64, std::cmp::Reverse<i64>) {
        (self.start_ns, std::cmp::Reverse(self.end_ns))
    }

    /// Whether it applies to `device` (it is that device's, or every device's).
    pub fn applies_to(&self, device: DeviceId) -> bool {
        self.device.is_none_or(|d| d == device)
    }
}
