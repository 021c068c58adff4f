//! Importer of PyTorch profiler Chrome traces (`prof.export_chrome_trace`, and the
//! `*.pt.trace.json[.gz]` that `tensorboard_trace_handler` writes).
//!
//! With `profile_memory=True` the profiler writes one `[memory]` instant event per allocation
//! and free. Its arguments grew over the years: early kineto traces (PyTorch 1.8-1.9) carry only
//! `Bytes` (signed), `Device Type` and `Device Id`; later ones add `Addr`, and `Total Allocated`
//! and `Total Reserved` (the allocator's running totals after the event). Events with an address
//! become allocator events; events without one become a curve: the running totals where the
//! trace has them, otherwise the running sum of `Bytes`, which cannot see memory allocated before
//! the trace began (the device is flagged so, and the curve starts at the least memory that its
//! frees imply). `Device Type` is a `c10::DeviceType`: CPU memory is the host, every other type
//! is device memory named for what it is (`cuda`, `hip` on ROCm, `xpu`, `mps`, ...).
//!
//! `[OutOfMemory]` events become OOMs; `record_function` ranges (`user_annotation`) and operators
//! (`cpu_op`) become annotations;
//! `distributedInfo` gives the process its rank, and the file's other top-level keys (kineto's
//! and those added with `prof.add_metadata`) are kept in the trace's metadata.
//!
//! The file is read in one streaming pass: events are turned into records as the JSON parser
//! produces them, never held as a whole. `stream.rs` reads the top level and streams
//! `traceEvents`, `fields.rs` an event's fields, `events.rs` turns each event into records as it
//! comes, `totals.rs` makes a device's events agree with the running totals, and `assemble.rs`
//! builds the trace at the end.

use serde::de::Deserializer;

use super::Imported;
use crate::error::{Error, Result};
use crate::progress::Progress;

mod assemble;
mod events;
mod fields;
mod stream;
mod totals;

use self::assemble::{TopFacts, assemble};
use self::events::State;
use self::stream::{TopLevel, refusal};

/// Reads a Chrome trace.
pub fn import_chrome_trace(data: &[u8], progress: &dyn Progress) -> Result<Imported> {
    if !progress.update(0, data.len() as u64) {
        return Err(Error::Cancelled);
    }
    import_from(serde_json::Deserializer::from_slice(data), data.len() as u64, progress)
}

/// Reads a Chrome trace from a stream (what a compressed container holds, parsed as it is
/// inflated: the inflated bytes are never held whole). `total` is the progress scale.
pub(crate) fn import_chrome_trace_from(
    reader: impl std::io::Read,
    total: u64,
    progress: &dyn Progress,
) -> Result<Imported> {
    let reader = std::io::BufReader::with_capacity(1 << 16, reader);
    import_from(serde_json::Deserializer::from_reader(reader), total, progress)
}

fn import_from<'de, R: serde_json::de::Read<'de>>(
    mut deserializer: serde_json::Deserializer<R>,
    total: u64,
    progress: &dyn Progress,
) -> Result<Imported> {
    let mut state = State::default();
    let mut top = TopLevel {
        state: &mut state,
        base_time_ns: None,
        display_time_unit: None,
        has_events: false,
        kineto_keys: false,
        device_properties: None,
        distributed: None,
        other: serde_json::Map::new(),
    };
    let parsed = (&mut deserializer).deserialize_any(&mut top).and_then(|()| deserializer.end());
    if let Err(e) = parsed {
        let text = e.to_string();
        return Err(if e.is_data() && text.contains("'traceEvents'") {
            Error::Structure(format!("this Chrome trace's 'traceEvents' is not a list of event objects: {e}"))
        } else if e.is_data() && (text.contains("'baseTimeNanoseconds'") || text.contains("'distributedInfo'")) {
            Error::Structure(format!("this Chrome trace's top level is malformed: {e}"))
        } else {
            Error::Json(e)
        });
    }
    if !top.has_events {
        return Err(Error::Structure(format!(
            "a JSON object without 'traceEvents', so not a PyTorch profiler trace, nor a memory timeline; \
             vramscope reads {}",
            crate::error::FORMATS
        )));
    }
    if !progress.update(total * 9 / 10, total) {
        return Err(Error::Cancelled);
    }
    if top.state.devices_over_limit > 0 {
        return Err(Error::Structure(format!(
            "this trace has memory events of more than {} devices; vramscope reads at most that many",
            super::MAX_DEVICES
        )));
    }
    let usable = top.state.series.values().any(|s| s.addressed > 0 || !s.unaddressed.is_empty());
    if !usable {
        return Err(Error::Structure(refusal(top.state, &top)));
    }
    let TopLevel { base_time_ns, display_time_unit, device_properties, distributed, other, .. } = top;
    let facts = TopFacts { base_time_ns, display_time_unit, device_properties, distributed, other };
    let imported = assemble(state, facts);
    progress.update(total, total);
    Ok(imported)
}

#[cfg(test)]
mod tests;
