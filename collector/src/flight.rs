//! A flight recorder's directory read back: each process's ring (`flight.<pid>.ring`, see
//! `vramscope_wire::ring`), its records from where the ring's oldest segment begins, with the
//! allocations alive then (made earlier, at their own times). What came before is marked as not
//! recorded, process by process.

use std::path::Path;

use vramscope_trace_format::{DeviceId, Trace, Unrecorded};
use vramscope_wire::Record;
use vramscope_wire::ring::{self, Ring};

/// The rings of a directory.
#[derive(Debug, Default)]
pub struct Rings {
    /// Each ring read.
    pub rings: Vec<Ring>,
    /// What to tell the user: rings that are not, alive lists cut short.
    pub notes: Vec<String>,
}

impl Rings {
    /// Every record the rings hold, the alive lists first (they were made before).
    pub fn records(&self) -> Vec<Record> {
        self.rings.iter().flat_map(|r| r.alive.iter().chain(&r.records)).copied().collect()
    }
}

/// Whether `name` is a ring's file name.
pub fn is_ring(name: &str) -> bool {
    name.strip_prefix("flight.").and_then(|n| n.strip_suffix(".ring")).is_some_and(|p| p.parse::<u32>().is_ok())
}

/// Reads every ring in `dir`.
pub fn read(dir: &Path) -> Rings {
    let mut out = Rings::default();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    let mut paths: Vec<std::path::PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_str().is_some_and(is_ring))
        .map(|e| e.path())
        .collect();
    paths.sort();
    for path in paths {
        match std::fs::read(&path) {
            Ok(bytes) => match ring::read(&bytes) {
                Ok(ring) => {
                    if ring.alive_cut_short {
                        out.notes.push(format!(
                            "{}: the allocations alive where the ring begins did not all fit in it: some are missing",
                            path.display()
                        ));
                    }
                    out.rings.push(ring);
                }
                Err(why) => out.notes.push(format!("{}: {why}", path.display())),
            },
            Err(why) => out.notes.push(format!("cannot read {}: {why}", path.display())),
        }
    }
    out
}

/// Marks in `trace` what each ring no longer holds: from the process's first allocation still
/// alive (or the ring's start) to where its oldest segment begins, nothing but what was alive is
/// known. Says what the rings hold in the metadata (`flight`).
pub fn mark(trace: &mut Trace, rings: &Rings) {
    let mut summary = Vec::new();
    for ring in &rings.rings {
        let Some(process) = trace.metadata.processes.iter().position(|p| p.pid == Some(ring.pid)) else { continue };
        // The rank its environment gave it (no shim runs under the flight recorder to say it).
        if let (Some(info), Some(rank)) = (trace.metadata.processes.get_mut(process), ring.place.rank) {
            info.rank.get_or_insert(rank);
        }
        if let Some(world) = ring.place.world_size.filter(|&w| w > 1) {
            trace.metadata.extra.entry("world_size".to_owned()).or_insert(world.into());
        }
        let from = i64::try_from(ring.from_ns).unwrap_or(i64::MAX);
        summary.push(serde_json::json!({
            "pid": ring.pid,
            "from_ns": from,
            "segments_overwritten": ring.overwritten,
            "alive_at_start": ring.alive.len(),
        }));
        if ring.overwritten == 0 {
            continue;
        }
        let begin =
            ring.alive.iter().map(|r| i64::try_from(r.time_ns).unwrap_or(i64::MAX)).min().unwrap_or(from).min(from);
        let mut devices: Vec<i32> = ring.alive.iter().chain(&ring.records).map(|r| r.device.max(-1)).collect();
        devices.sort_unstable();
        devices.dedup();
        for device in devices {
            trace.metadata.unrecorded.push(Unrecorded {
                process: process as u32,
                device: DeviceId(i16::try_from(device).unwrap_or(0)),
                begin_ns: begin,
                end_ns: from,
                why: "flight_ring".to_owned(),
                detail: String::new(),
            });
        }
    }
    if !summary.is_empty() {
        trace.metadata.extra.insert("flight".to_owned(), serde_json::Value::Array(summary));
    }
}
