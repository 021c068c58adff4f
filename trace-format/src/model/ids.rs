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
