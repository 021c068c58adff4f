//! Small `Copy` handles into the trace's interned tables.

macro_rules! typed_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u32);

        impl $name {
            /// The id as an index into its table.
            #[inline]
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }
    };
}

typed_id!(
    /// An interned string. `StringId(0)` is always the empty string.
    StringId
);
typed_id!(
    /// An interned frame (function, file, line).
    FrameId
);
typed_id!(
    /// An interned call stack. `StackId(0)` is always the empty stack.
    StackId
);
typed_id!(
    /// An interned per-event context (compile context and user metadata). `ContextId(0)` is "none".
    ContextId
);
typed_id!(
    /// A process of the trace (an entry in [`crate::Metadata::processes`]). Imported files have one.
    ProcessId
);

/// A device of a trace: a GPU by its index (`0`, `1`, …, as the framework numbers it), or the
/// host's pinned memory ([`DeviceId::HOST`]). In JSON it is the plain number (-1 for the host).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    schemars::JsonSchema,
    serde::Deserialize,
)]
#[serde(transparent)]
pub struct DeviceId(pub i16);

impl DeviceId {
    /// Host memory (pinned allocations, `cuMemAllocHost`).
    pub const HOST: Self = Self(-1);

    /// Whether this is host memory.
    #[inline]
    pub fn is_host(self) -> bool {
        self.0 < 0
    }

    /// A dense index for per-device tables of 65,536 slots.
    #[inline]
    pub fn slot(self) -> usize {
        usize::from(self.0 as u16)
    }

    /// The device of a slot (the inverse of [`DeviceId::slot`]).
    #[inline]
    pub fn from_slot(slot: usize) -> Self {
        Self(slot as u16 as i16)
    }
}

impl From<i16> for DeviceId {
    fn from(index: i16) -> Self {
        Self(index)
    }
}

impl std::fmt::Display for DeviceId {
    /// The number as the CLI prints it (`0`, `-1` for the host).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::str::FromStr for DeviceId {
    type Err = String;

    /// A device as a user gives it: `0`, `cuda:1`, `hip:0`, `host` or `-1`.
    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("host") {
            return Ok(Self::HOST);
        }
        let number = text.rsplit_once(':').map_or(text, |(_, n)| n);
        match number.parse::<i16>() {
            Ok(index) if index >= -1 => Ok(Self(index)),
            _ => Err(format!("{text:?} is not a device: give its index (0, 1, …), cuda:N, or host")),
        }
    }
}
