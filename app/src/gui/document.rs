//! A loaded trace with what every view needs precomputed: built once, on the loading thread.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use vramscope_trace_format::import::Wrapper;
use vramscope_trace_format::{Clock, DeviceId, SourceFormat, Trace};

use crate::load::LoadedTrace;
use crate::query::timeline::Timeline;

/// One device's precomputed data.
#[derive(Debug)]
pub struct DeviceData {
    /// The device (-1: host memory).
    pub device: DeviceId,
    /// Memory over time with its level-of-detail index.
    pub timeline: Timeline,
    /// The point of the allocated peak.
    pub peak_point: crate::query::timeline::Point,
    /// Whether the trace records reserved memory on it (a profiler's CPU trace and a memory
    /// timeline do not).
    pub reserved_recorded: bool,
    /// Annotations of this device (or of all devices), by index into `Trace::annotations`,
    /// sorted by start.
    pub annotations: Vec<usize>,
    /// Total memory of the device, when the trace says.
    pub total_memory_bytes: Option<u64>,
    /// The device's name, when the trace says.
    pub name: Option<String>,
    /// Whether memory grows from one iteration to the next (three iterations or more): worked
    /// out on a job once the document is shown (`Session` fills it in), not while it loads.
    pub growth: Option<crate::query::growth::Growth>,
}

/// A loaded trace, ready to show.
#[derive(Debug)]
pub struct Document {
    /// The file.
    pub path: PathBuf,
    /// Its format.
    pub format: SourceFormat,
    /// What the content came wrapped in (gzip, a memory_viz HTML page), outermost first.
    pub wrappers: Vec<Wrapper>,
    /// What the trace cannot show, for a banner.
    pub caveats: Vec<String>,
    /// Its size.
    pub file_bytes: u64,
    /// What was odd about it but not fatal.
    pub warnings: Vec<String>,
    /// The trace.
    pub trace: Arc<Trace>,
    /// Per device, in device order.
    pub devices: Vec<DeviceData>,
    /// How long reading and analysing took.
    pub load_time: Duration,
    /// Whether the timelines' categories, left to work out after the document was shown, could
    /// not be (the curves are drawn without them, and the legend says so).
    pub categories_failed: bool,
}

pub use crate::load::Origin;

impl Document {
    /// Precomputes every device's data for a loaded trace.
    pub fn build(loaded: LoadedTrace, load_time: Duration) -> Self {
        let (trace, origin) = Origin::of(loaded, load_time);
        Self::build_shared(Arc::new(trace), origin)
    }

    /// [`Self::build`] with the timelines' categories left to work out after the document is
    /// shown ([`Timeline::build_outline`]: the curves come in about a third of the time).
    pub fn build_outline(loaded: LoadedTrace, load_time: Duration) -> Self {
        let (trace, origin) = Origin::of(loaded, load_time);
        Self::build_with(Arc::new(trace), origin, true)
    }

    /// Precomputes every device's data for a trace that may be shared with another document
    /// (the whole run and the view of one of its processes).
    pub fn build_shared(trace: Arc<Trace>, origin: Origin) -> Self {
        Self::build_with(trace, origin, false)
    }

    /// [`Self::build_shared`] with the categories left to work out, as [`Self::build_outline`].
    pub fn build_outline_shared(trace: Arc<Trace>, origin: Origin) -> Self {
        Self::build_with(trace, origin, true)
    }

    /// Whether some device's timeline has its categories still to work out (not once they
    /// could not be).
    pub fn categories_pending(&self) -> bool {
        !self.categories_failed && self.devices.iter().any(|d| !d.timeline.has_categories())
    }

    fn build_with(trace: Arc<Trace>, origin: Origin, outline: bool) -> Self {
        // One pass over the events finds the devices that have some, for both.
        let event_devices = trace.event_devices();
        let caveats = crate::query::caveats::caveats_given(&trace, &event_devices);
        let devices = trace
            .devices_given(&event_devices)
            .into_iter()
            .map(|device| device_data(&trace, device, outline, &event_devices))
            .collect();
        Self {
            path: origin.path,
            format: origin.format,
            wrappers: origin.wrappers,
            caveats: crate::words::caveats(&trace, &caveats),
            file_bytes: origin.file_bytes,
            warnings: origin.warnings,
            trace,
            devices,
            load_time: origin.load_time,
            categories_failed: false,
        }
    }

    /// Where the trace came from.
    pub fn origin(&self) -> Origin {
        Origin {
            path: self.path.clone(),
            format: self.format,
            wrappers: self.wrappers.clone(),
            file_bytes: self.file_bytes,
            warnings: self.warnings.clone(),
            load_time: self.load_time,
        }
    }

    /// Whether times are event indices rather than real time.
    pub fn has_no_clock(&self) -> bool {
        self.trace.metadata.clock == Clock::EventIndex
    }

    /// The file's name.
    pub fn file_name(&self) -> String {
        if self.is_sample() {
            return crate::sample::TITLE.to_owned();
        }
        self.path.file_name().map_or_else(|| self.path.display().to_string(), |n| n.to_string_lossy().into_owned())
    }

    /// Whether this is the built-in sample.
    pub fn is_sample(&self) -> bool {
        crate::sample::is_sample(&self.path)
    }

    /// The name of a device for menus: `cuda:0 (NVIDIA H100)`, `host`.
    pub fn device_label(&self, index: usize) -> String {
        let Some(d) = self.devices.get(index) else { return String::new() };
        let base = self.trace.metadata.device_label(d.device);
        match &d.name {
            Some(name) => format!("{base} ({name})"),
            None => base,
        }
    }
}

fn device_data(trace: &Arc<Trace>, device: DeviceId, outline: bool, event_devices: &[DeviceId]) -> DeviceData {
    // Over the shared trace: its points are replayed from the events, not kept beside them.
    let timeline = if outline {
        Timeline::build_outline_given(trace, device, Some(event_devices))
    } else {
        Timeline::build_shared(trace, device)
    };
    let peak_point = timeline.peak_allocated_point();
    let reserved_recorded = timeline.range(0, timeline.len()).reserved_max > 0;
    let mut annotations: Vec<usize> =
        trace.annotations.iter().enumerate().filter(|(_, a)| a.applies_to(device)).map(|(i, _)| i).collect();
    annotations.sort_by_key(|&i| trace.annotations.get(i).map_or(0, |a| a.start_ns));
    let info = trace.metadata.devices.iter().find(|d| d.device == device);
    DeviceData {
        device,
        timeline,
        peak_point,
        reserved_recorded,
        annotations,
        total_memory_bytes: info.and_then(|d| d.total_memory_bytes),
        name: info.and_then(|d| d.name.clone()),
        growth: None,
    }
}
