//! Importer of PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot`).
//!
//! A snapshot is a pickled dict: `segments` (the allocator's state when the snapshot was taken),
//! `device_traces` (one list of trace entries per device: the allocator's history, often a ring
//! buffer that dropped the start of the run), `allocator_settings` and `external_annotations`.
//! Older snapshots are a bare list of segments whose blocks carry a `history` instead of `frames`.
//!
//! The pickle is run by the `pickle` module with a sink (`sink.rs`) that turns frame dicts,
//! trace entries, blocks and segments into compact records the moment each dict is complete,
//! interning frames and stacks as it goes; `build.rs` then assembles the trace.

mod build;
mod entries;
mod fx;
mod sink;

use self::build::build_trace;
use self::entries::Entries;
use self::sink::SnapshotSink;
use super::Imported;
use super::pickle::{self, ContainerKind, RecordKind, Store, Value};
use crate::error::{Error, Result};
use crate::model::ids::{FrameId, StackId, StringId};
use crate::model::interner::Interner;
use crate::model::metadata::SourceFormat;
use crate::model::segment::Segment;
use crate::progress::Progress;

/// Bound on nodes converted to JSON from generic parts of the pickle (settings, unknown keys).
const MAX_JSON_NODES: usize = 1_000_000;
/// Bound on the nesting of generic parts of the pickle.
const MAX_JSON_DEPTH: usize = 64;

/// Converts a generic part of the pickle to JSON, bounded in depth and size.
fn to_json(store: &Store, value: Value, depth: usize, budget: &mut usize) -> Result<serde_json::Value, String> {
    use serde_json::Value as J;
    if *budget == 0 {
        return Err("too many values in a generic part of the snapshot".to_owned());
    }
    *budget -= 1;
    if depth > MAX_JSON_DEPTH {
        return Err(format!("values nested deeper than {MAX_JSON_DEPTH} levels"));
    }
    Ok(match value {
        Value::None | Value::Missing => J::Null,
        Value::Bool(b) => J::Bool(b),
        Value::Int(v) => J::from(v),
        Value::UInt(v) => J::from(v),
        Value::BigInt => J::String("<integer wider than 64 bits>".to_owned()),
        Value::Float(v) => serde_json::Number::from_f64(v).map_or(J::Null, J::Number),
        Value::Str(id) => J::String(store.interner.resolve(id).to_owned()),
        Value::Bytes(n) => J::String(format!("<{n} bytes>")),
        // The fast path reads an empty list as the empty stack.
        Value::Stack(StackId(0)) => J::Array(Vec::new()),
        Value::Frame(_) | Value::Stack(_) | Value::Record(..) => J::String("<converted>".to_owned()),
        Value::Container(h) => match store.kind(h)? {
            ContainerKind::Dict => {
                let mut map = serde_json::Map::new();
                let mut failure = None;
                store.for_each_pair(h, |key, value| {
                    let key = match key {
                        Value::Str(id) => store.interner.resolve(id).to_owned(),
                        other => match to_json(store, other, depth + 1, budget)? {
                            J::String(s) => s,
                            j => j.to_string(),
                        },
                    };
                    match to_json(store, value, depth + 1, budget) {
                        Ok(v) => {
                            map.insert(key, v);
                        }
                        Err(e) => failure = Some(e),
                    }
                    Ok(())
                })?;
                if let Some(e) = failure {
                    return Err(e);
                }
                J::Object(map)
            }
            _ => {
                let mut list = Vec::new();
                for item in store.items(h)? {
                    list.push(to_json(store, item, depth + 1, budget)?);
                }
                J::Array(list)
            }
        },
    })
}

fn structure(message: impl Into<String>) -> Error {
    Error::Structure(message.into())
}

/// Reads a snapshot pickle.
pub fn import_snapshot(data: &[u8], progress: &dyn Progress) -> Result<Imported> {
    parse(data, progress)?.build()
}

/// A snapshot read from its pickle, not yet turned into a trace: it no longer needs the bytes.
pub(crate) struct Parsed {
    interner: Interner,
    segments: Vec<Segment>,
    entries: Entries,
    per_device: Vec<(i16, Vec<u32>)>,
    external: serde_json::Value,
    settings: serde_json::Value,
    extra: serde_json::Map<String, serde_json::Value>,
    warnings: Vec<String>,
    fx_traces: rustc_hash::FxHashMap<FrameId, StringId>,
}

impl Parsed {
    /// Builds the trace.
    pub(crate) fn build(mut self) -> Result<Imported> {
        let mut trace = build_trace(
            self.interner,
            self.segments,
            self.entries,
            self.per_device,
            &self.external,
            self.settings,
            self.extra,
            &mut self.warnings,
        )?;
        if !self.fx_traces.is_empty() {
            fx::expand_stacks(&mut trace, &self.fx_traces);
        }
        Ok(Imported { trace, warnings: self.warnings, format: SourceFormat::PytorchSnapshot, wrappers: Vec::new() })
    }
}

/// Reads a snapshot pickle's contents, leaving the trace to [`Parsed::build`].
pub(crate) fn parse(data: &[u8], progress: &dyn Progress) -> Result<Parsed> {
    let mut interner = Interner::new();
    let mut sink = SnapshotSink::new(&mut interner);
    let loaded = pickle::load(data, interner, &mut sink, progress)?;
    let store = loaded.store;
    let mut warnings = Vec::new();

    let mut segments_value = Value::None;
    let mut traces_value = Value::None;
    let mut settings = serde_json::Value::Null;
    let mut annotations_value = Value::None;
    let mut host_traces_value = Value::None;
    let mut extra = serde_json::Map::new();
    let mut budget = MAX_JSON_NODES;
    match loaded.root {
        Value::Container(h) if store.kind(h).map_err(structure)? == ContainerKind::Dict => {
            let mut pairs = Vec::new();
            store
                .for_each_pair(h, |k, v| {
                    pairs.push((k, v));
                    Ok(())
                })
                .map_err(structure)?;
            for (key, value) in pairs {
                match store.str(key) {
                    Some("segments") => segments_value = value,
                    Some("device_traces") => traces_value = value,
                    Some("allocator_settings") => match to_json(&store, value, 0, &mut budget) {
                        Ok(json) => settings = json,
                        Err(m) => warnings.push(format!("the snapshot's allocator_settings were left out: {m}")),
                    },
                    Some("external_annotations") => annotations_value = value,
                    // Pinned host memory (`record_pinned_host_memory=True`, PyTorch 2.14+): one list
                    // of trace entries, shown as the host.
                    Some("host_traces") => host_traces_value = value,
                    Some(other) => {
                        let other = other.to_owned();
                        // Keys vramscope does not read are kept for the metadata when they are small;
                        // a large one is left out rather than refusing the snapshot.
                        match to_json(&store, value, 0, &mut budget) {
                            Ok(json) => {
                                extra.insert(other, json);
                            }
                            Err(m) => warnings.push(format!("the snapshot's '{other}' was left out: {m}")),
                        }
                    }
                    None => {}
                }
            }
            if segments_value == Value::None && traces_value == Value::None {
                return Err(structure(
                    "this pickle is a dict without 'segments' or 'device_traces': not a PyTorch memory snapshot",
                ));
            }
        }
        // Snapshots from before PyTorch 2.1 are a bare list of segments.
        Value::Container(h) if store.kind(h).map_err(structure)? == ContainerKind::List => segments_value = loaded.root,
        _ => return Err(structure("this pickle holds neither a dict nor a list: not a PyTorch memory snapshot")),
    }

    let mut segments = Vec::new();
    if let Value::Container(h) = segments_value {
        for (i, item) in store.items(h).map_err(structure)?.into_iter().enumerate() {
            let Value::Record(RecordKind::Segment, index) = item else {
                return Err(structure(format!("segments[{i}] is not a segment dict")));
            };
            if let Some(segment) = sink.segments.get(index as usize) {
                segments.push(segment.clone());
            }
        }
    }
    segments.sort_by_key(|s| (s.device, s.address));

    // Per device, indices into the sink's entries (copying the entries would double the memory).
    let mut per_device: Vec<(i16, Vec<u32>)> = Vec::new();
    let entry_indices = |list: Value, name: &dyn Fn(usize) -> String| -> Result<Vec<u32>> {
        let mut entries = Vec::new();
        if let Value::Container(l) = list {
            entries.reserve(store.len(l).map_err(structure)?);
            let mut i = 0usize;
            store
                .for_each_item(l, |item| {
                    let Value::Record(RecordKind::Entry, index) = item else {
                        return Err(format!("{} is not a trace entry dict", name(i)));
                    };
                    entries.push(index);
                    i += 1;
                    Ok(())
                })
                .map_err(structure)?;
        }
        Ok(entries)
    };
    if let Value::Container(h) = traces_value {
        for (device, list) in store.items(h).map_err(structure)?.into_iter().enumerate() {
            let entries = entry_indices(list, &|i| format!("device_traces[{device}][{i}]"))?;
            let device = i16::try_from(device).map_err(|_| structure("more than 32767 device traces"))?;
            per_device.push((device, entries));
        }
    }
    if host_traces_value != Value::None {
        let entries = entry_indices(host_traces_value, &|i| format!("host_traces[{i}]"))?;
        per_device.push((-1, entries));
    }

    let external = match annotations_value {
        Value::None => serde_json::Value::Null,
        v => to_json(&store, v, 0, &mut budget).map_err(|m| structure(format!("external_annotations: {m}")))?,
    };
    let interner = store.interner;
    let entries = std::mem::take(&mut sink.entries);
    let fx_traces = std::mem::take(&mut sink.fx_traces);
    Ok(Parsed { interner, segments, entries, per_device, external, settings, extra, warnings, fx_traces })
}
