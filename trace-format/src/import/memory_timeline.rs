//! Importer of the PyTorch profiler's memory timeline exports.
//!
//! `export_memory_timeline(path.json)` writes `[times_us, sizes]`, where each row of `sizes` is
//! `[0, PARAMETER, OPTIMIZER_STATE, INPUT, TEMPORARY, ACTIVATION, GRADIENT, AUTOGRAD_DETAIL,
//! UNKNOWN]` in bytes after that instant. `export_memory_timeline_raw(path.raw.json.gz)` writes the
//! underlying records `[time_ns or -1, action, signed bytes, category]` with the categories in
//! the same order (without the leading 0) and -1 for memory that existed before profiling began.
//! Both become one counter series per category. The `.gz` container is taken off before this
//! module sees the data (`container.rs`).

use super::Imported;
use crate::error::{Error, Result};
use crate::model::category::Category;
use crate::model::counter::{CounterKind, CounterSample, CounterSeries};
use crate::model::ids::ProcessId;
use crate::model::interner::Interner;
use crate::model::metadata::{Clock, DeviceInfo, Metadata, ProcessInfo, SourceFormat};
use crate::model::trace::Trace;
use crate::progress::Progress;

/// The profiler's categories in the column order of its exports.
const COLUMNS: [Category; 8] = [
    Category::Parameter,
    Category::OptimizerState,
    Category::Input,
    Category::Temporary,
    Category::Activation,
    Category::Gradient,
    Category::AutogradDetail,
    Category::Unknown,
];

/// Whether JSON data looks like a memory timeline rather than a Chrome trace.
pub(crate) fn looks_like_timeline(data: &[u8]) -> bool {
    // `[[t, ...], [[0, ...], ...]]` or `[[t, a, b, c], ...]`: a list whose first item is a list.
    let mut rest = data.iter().copied().filter(|b| !b.is_ascii_whitespace());
    rest.next() == Some(b'[') && rest.next() == Some(b'[')
}

fn warning_device() -> String {
    "the memory timeline does not say which device it was exported for; it is shown as device 0".to_owned()
}

fn build(interner: Interner, mut series: Vec<CounterSeries>, samples: usize) -> Result<Imported> {
    if samples == 0 {
        return Err(Error::Structure("the memory timeline has no samples".to_owned()));
    }
    for s in &mut series {
        s.samples.sort_by_key(|c| c.time_ns);
    }
    let metadata = Metadata {
        source_format: SourceFormat::MemoryTimeline,
        clock: Clock::UnixNs,
        tool_version: String::new(),
        // The export does not say which device it was made for: not claimed to be CUDA.
        devices: vec![DeviceInfo { device: 0, kind: Some("device".to_owned()), ..DeviceInfo::default() }],
        processes: vec![ProcessInfo::default()],
        allocator_settings: serde_json::Value::Null,
        extra: serde_json::Map::new(),
    };
    Ok(Imported {
        trace: Trace { metadata, interner, counters: series, ..Trace::default() },
        warnings: vec![warning_device()],
        format: SourceFormat::MemoryTimeline,
        wrappers: Vec::new(),
    })
}

fn empty_series(interner: &mut Interner) -> Vec<CounterSeries> {
    COLUMNS
        .iter()
        .map(|&category| CounterSeries {
            kind: CounterKind::Category(category),
            name: interner.string(category.name()),
            device: 0,
            process: ProcessId(0),
            samples: Vec::new(),
        })
        .collect()
}

/// Reads the `.json` export (`[times_us, sizes]`).
pub fn import_json(data: &[u8], progress: &dyn Progress) -> Result<Imported> {
    let value: serde_json::Value = serde_json::from_slice(data)?;
    if !progress.update(data.len() as u64, data.len() as u64) {
        return Err(Error::Cancelled);
    }
    let shape = || {
        Error::Structure(
            "not a memory timeline: expected [times, sizes] or [[t, action, bytes, category], ...]".to_owned(),
        )
    };
    let outer = value.as_array().ok_or_else(shape)?;
    // The raw export (inflated from `raw.json.gz`, or saved plain): a list of 4-number records.
    // `[times, sizes]` has a list of rows second, the raw export a record of numbers.
    let is_record =
        |v: &serde_json::Value| v.as_array().is_some_and(|r| r.len() == 4 && r.iter().all(|x| x.is_number()));
    if outer.first().is_some_and(is_record) && (outer.len() != 2 || outer.get(1).is_some_and(is_record)) {
        return import_raw_records(outer);
    }
    let [times, sizes] = outer.as_slice() else { return Err(shape()) };
    let (Some(times), Some(sizes)) = (times.as_array(), sizes.as_array()) else { return Err(shape()) };
    if times.len() != sizes.len() {
        return Err(Error::Structure(format!(
            "the memory timeline has {} times but {} rows of sizes",
            times.len(),
            sizes.len()
        )));
    }
    let mut interner = Interner::new();
    let mut series = empty_series(&mut interner);
    for (i, (time, row)) in times.iter().zip(sizes).enumerate() {
        let time_us = time.as_i64().ok_or_else(|| Error::Structure(format!("time {i} is not an integer")))?;
        let row = row.as_array().ok_or_else(|| Error::Structure(format!("sizes row {i} is not a list")))?;
        if row.len() != COLUMNS.len() + 1 {
            return Err(Error::Structure(format!(
                "sizes row {i} has {} columns, expected {}",
                row.len(),
                COLUMNS.len() + 1
            )));
        }
        for (s, value) in series.iter_mut().zip(&row[1..]) {
            let value = value.as_i64().ok_or_else(|| Error::Structure(format!("sizes row {i} holds a non-integer")))?;
            s.samples.push(CounterSample { time_ns: time_us.saturating_mul(1000), value });
        }
    }
    build(interner, series, times.len())
}

fn import_raw_records(records: &[serde_json::Value]) -> Result<Imported> {
    let mut parsed = Vec::with_capacity(records.len());
    for (i, record) in records.iter().enumerate() {
        let bad = || Error::Structure(format!("raw memory timeline record {i} is not [time, action, bytes, category]"));
        let fields = record.as_array().ok_or_else(bad)?;
        let [t, action, bytes, category] = fields.as_slice() else { return Err(bad()) };
        let (Some(t), Some(action), Some(bytes), Some(category)) =
            (t.as_i64(), action.as_i64(), bytes.as_i64(), category.as_u64())
        else {
            return Err(bad());
        };
        if !(1..=4).contains(&action) {
            return Err(Error::Structure(format!("raw memory timeline record {i} has unknown action {action}")));
        }
        let column = usize::try_from(category).ok().filter(|&c| c < COLUMNS.len()).ok_or_else(|| {
            Error::Structure(format!("raw memory timeline record {i} has unknown category {category}"))
        })?;
        parsed.push((t, bytes, column));
    }
    // Memory that existed before profiling has time -1; like the profiler, date it at the first
    // real time.
    let first_time = parsed.iter().map(|r| r.0).filter(|&t| t >= 0).min().unwrap_or(0);
    let mut order: Vec<usize> = (0..parsed.len()).collect();
    order.sort_by_key(|&i| if parsed[i].0 < 0 { first_time } else { parsed[i].0 });
    let mut interner = Interner::new();
    let mut series = empty_series(&mut interner);
    let mut totals = [0i64; COLUMNS.len()];
    let mut samples = 0usize;
    let mut i = 0;
    while i < order.len() {
        let time_ns = parsed[order[i]].0.max(first_time);
        while i < order.len() && parsed[order[i]].0.max(first_time) == time_ns {
            let (_, bytes, column) = parsed[order[i]];
            totals[column] += bytes;
            i += 1;
        }
        for (s, &total) in series.iter_mut().zip(&totals) {
            s.samples.push(CounterSample { time_ns, value: total });
        }
        samples += 1;
    }
    build(interner, series, samples)
}
