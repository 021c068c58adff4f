//! The vramscope trace: a data model of GPU memory over time, the `.vtrace` file format, and
//! importers of PyTorch memory snapshots and profiler output.
//!
//! Everything is plain data behind small typed ids ([`StringId`], [`StackId`], ...). The crate
//! knows nothing of GUIs or CUDA.
//!
//! ```
//! use vramscope_trace_format::{Event, EventKind, NoProgress, Trace, vtrace};
//!
//! let mut trace = Trace::default();
//! trace.events.push(Event::new(EventKind::SegmentAlloc, 0, 0, 0x7f00_0000_0000, 2 << 20));
//! trace.events.push(Event::new(EventKind::Alloc, 10, 0, 0x7f00_0000_0000, 4096));
//!
//! let mut bytes = Vec::new();
//! vtrace::write(&trace, &mut bytes)?;
//! let loaded = vtrace::read(&bytes, &NoProgress)?;
//! assert!(loaded.damage.is_none());
//! assert_eq!(loaded.trace.events, trace.events);
//! # Ok::<(), vramscope_trace_format::Error>(())
//! ```

pub mod error;
pub mod import;
pub mod memory;
pub mod model;
pub mod progress;
pub mod range;
pub mod size;
pub mod vtrace;

pub use error::{Error, Result};
pub use import::{Imported, import, import_owned, import_owned_range, import_range};
pub use model::annotation::{Annotation, AnnotationKind};
pub use model::category::Category;
pub use model::counter::{CounterKind, CounterSample, CounterSeries, DEVICE_SERIES, PROCESS_SERIES};
pub use model::event::{Event, EventKind, event_flags};
pub use model::ids::{ContextId, DeviceId, FrameId, ProcessId, StackId, StringId};
pub use model::interner::{Context, Frame, Interner};
pub use model::metadata::{
    AboveTotals, AliveSince, Clock, DeviceInfo, Metadata, ProcessInfo, RangeInfo, SourceFormat, SpanBefore,
    TotalsAgreement, Unrecorded,
};
pub use model::oom::Oom;
pub use model::segment::{Block, BlockState, Segment, SegmentPool};
pub use model::stream::StreamId;
pub use model::tag::Tag;
pub use model::trace::Trace;
pub use progress::{NoProgress, Progress};
pub use range::TraceRange;
