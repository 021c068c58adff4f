//! Following a run in the app (`record --live`, `open --follow`): the follower
//! (`crate::follow`) builds each new state of the run into the document the views draw, of the
//! process shown, on its thread.

use std::sync::Arc;
use std::sync::atomic::AtomicU32;

use vramscope_trace_format::{ProcessId, Trace};

pub use crate::follow::{Source, Status};

use super::document::{Document, Origin};

/// The app's follower: each update is a [`Update`].
pub type Follower = crate::follow::Follower<Update>;

/// One state of the followed run.
pub struct Update {
    /// The process shown.
    pub doc: Document,
    /// The whole, when it has several processes.
    pub whole: Option<Arc<Trace>>,
    /// The process shown, by index into the whole's processes.
    pub process: usize,
}

/// Starts following `source` in the app; `repaint` is called when an update is ready.
pub fn start(source: Source, repaint: impl Fn() + Send + Sync + 'static) -> anyhow::Result<Follower> {
    Follower::start(source, build_update, repaint)
}

/// The document of `trace`, of the chosen process when it has several.
fn build_update(trace: Trace, origin: Origin, chosen_pid: &AtomicU32) -> Update {
    if trace.metadata.recorded_processes() < 2 {
        let doc = Document::build_shared(Arc::new(trace), origin);
        return Update { doc, whole: None, process: 0 };
    }
    let process = crate::follow::process_to_show(&trace, chosen_pid);
    let whole = Arc::new(trace);
    let doc = Document::build_shared(Arc::new(whole.of_process(ProcessId(process as u32))), origin);
    Update { doc, whole: Some(whole), process }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use vramscope_trace_format::{Event, EventKind, ProcessInfo, SourceFormat};

    use super::*;

    fn origin() -> Origin {
        Origin {
            path: PathBuf::from("run.vtrace"),
            format: SourceFormat::Vtrace,
            wrappers: Vec::new(),
            file_bytes: 0,
            warnings: Vec::new(),
            load_time: Duration::ZERO,
        }
    }

    /// The document is of the process with memory, not of a launcher that allocates nothing.
    #[test]
    fn the_document_is_of_the_process_shown() {
        let mut trace = Trace::default();
        for pid in [100, 101] {
            trace.metadata.processes.push(ProcessInfo { pid: Some(pid), ..ProcessInfo::default() });
        }
        let mut e = Event::new(EventKind::Alloc, 5, 0, 0x10, 4096);
        e.process = ProcessId(1);
        trace.events.push(e);
        let update = build_update(trace, origin(), &AtomicU32::new(0));
        assert_eq!(update.process, 1);
        assert_eq!(update.doc.trace.metadata.processes[0].pid, Some(101));
    }
}
