//! The caching allocator's settings a run used, as far as its trace tells: from a snapshot's
//! `allocator_settings` (PyTorch 2.1 and later write them), from the `PYTORCH_CUDA_ALLOC_CONF`
//! the recorder saw, and from the events themselves (segments mapped piecewise are expandable
//! segments). The advisor never proposes a setting the run already has.

use serde::Serialize;
use vramscope_trace_format::{DeviceId, EventKind, Trace};

/// Where a setting's value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The snapshot's `allocator_settings`.
    Snapshot,
    /// The `PYTORCH_CUDA_ALLOC_CONF` (or `PYTORCH_ALLOC_CONF`) the run had.
    Conf,
    /// Seen in the events: segments mapped and unmapped piecewise.
    Events,
}

/// A setting whose value the trace may or may not tell.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Known<T> {
    /// The value.
    pub value: T,
    /// How the trace tells it.
    pub source: Source,
}

/// The allocator's settings, each `None` where the trace does not say.
#[derive(Clone, Debug, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct AllocatorSettings {
    /// `expandable_segments`.
    pub expandable_segments: Option<Known<bool>>,
    /// `max_split_size_mb`, in bytes (`Some(None)`-like "unlimited" is `value: None`).
    pub max_split_size_bytes: Option<Known<Option<u64>>>,
    /// `garbage_collection_threshold` (0: off).
    pub garbage_collection_threshold: Option<Known<f64>>,
    /// Whether `roundup_power2_divisions` rounds any size class (a division of 1 is plain rounding).
    pub roundup_power2_divisions: Option<Known<bool>>,
    /// `backend:cudaMallocAsync`: the driver's stream-ordered allocator, not the caching one, so
    /// the caching allocator's settings mean nothing.
    pub async_backend: Option<Known<bool>>,
    /// The configuration string as the run had it, when the trace keeps it.
    pub conf: Option<String>,
}

impl AllocatorSettings {
    /// What `trace` tells of the settings on `device`.
    pub fn of(trace: &Trace, device: DeviceId) -> Self {
        let mut out = Self::default();
        let settings = &trace.metadata.allocator_settings;
        if let Some(map) = settings.as_object() {
            if let Some(on) = map.get("expandable_segments").and_then(|v| v.as_bool()) {
                out.expandable_segments = Some(from_snapshot(on));
            }
            if let Some(split) = map.get("max_split_size").and_then(|v| v.as_i64()) {
                // -1 (or the largest size) is unlimited; PyTorch reports bytes.
                let limited = u64::try_from(split).ok().filter(|&s| s > 0 && s < u64::MAX / 2);
                out.max_split_size_bytes = Some(Known { value: limited, source: Source::Snapshot });
            }
            if let Some(threshold) = map.get("garbage_collection_threshold").and_then(|v| v.as_f64()) {
                out.garbage_collection_threshold = Some(from_snapshot(threshold));
            }
            if let Some(divisions) = map.get("roundup_power2_divisions") {
                let any = match divisions {
                    serde_json::Value::Object(intervals) => intervals.values().any(|v| v.as_u64().unwrap_or(0) > 1),
                    serde_json::Value::Array(intervals) => intervals.iter().any(|v| v.as_u64().unwrap_or(0) > 1),
                    other => other.as_u64().unwrap_or(0) > 1,
                };
                out.roundup_power2_divisions = Some(from_snapshot(any));
            }
            let conf = ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"]
                .iter()
                .find_map(|k| map.get(*k).and_then(|v| v.as_str()))
                .map(str::to_owned);
            if let Some(conf) = conf {
                // A snapshot's parsed fields stand; the string adds what they do not say (the
                // backend). A recording has only the string.
                let source = if map.contains_key("expandable_segments") { Source::Snapshot } else { Source::Conf };
                out.apply_conf(&conf, source);
                out.conf = Some(conf).filter(|c| !c.trim().is_empty());
            }
        }
        if out.expandable_segments.is_none_or(|k| !k.value) {
            let mapped = trace
                .events
                .iter()
                .any(|e| e.device == device && matches!(e.kind, EventKind::SegmentMap | EventKind::SegmentUnmap));
            if mapped {
                out.expandable_segments = Some(Known { value: true, source: Source::Events });
            }
        }
        out
    }

    /// Reads a `PYTORCH_CUDA_ALLOC_CONF` string (`key:value` pairs separated by commas); a
    /// field already known from `Source::Snapshot` keeps its value.
    fn apply_conf(&mut self, conf: &str, source: Source) {
        fn set<T>(slot: &mut Option<Known<T>>, value: T, source: Source) {
            if slot.as_ref().is_none_or(|k| k.source != Source::Snapshot) {
                *slot = Some(Known { value, source });
            }
        }
        for pair in split_pairs(conf) {
            let Some((key, value)) = pair.split_once(':') else { continue };
            let (key, value) = (key.trim(), value.trim());
            match key {
                "expandable_segments" => set(&mut self.expandable_segments, value.eq_ignore_ascii_case("true"), source),
                "max_split_size_mb" => {
                    if let Ok(mb) = value.parse::<u64>() {
                        set(&mut self.max_split_size_bytes, Some(mb << 20).filter(|&b| b > 0), source);
                    }
                }
                "garbage_collection_threshold" => {
                    if let Ok(threshold) = value.parse::<f64>() {
                        set(&mut self.garbage_collection_threshold, threshold, source);
                    }
                }
                "roundup_power2_divisions" => {
                    let any = value.split(|c: char| !c.is_ascii_digit()).any(|n| n.parse::<u64>().unwrap_or(0) > 1);
                    set(&mut self.roundup_power2_divisions, any, source);
                }
                "backend" => set(&mut self.async_backend, value.eq_ignore_ascii_case("cudaMallocAsync"), source),
                _ => {}
            }
        }
    }

    /// Whether expandable segments are known to be on.
    pub fn expandable(&self) -> bool {
        self.expandable_segments.is_some_and(|k| k.value)
    }

    /// Whether the driver's stream-ordered allocator is known to be the backend.
    pub fn is_async(&self) -> bool {
        self.async_backend.is_some_and(|k| k.value)
    }
}

fn from_snapshot<T>(value: T) -> Known<T> {
    Known { value, source: Source::Snapshot }
}

/// The pairs of a configuration string: commas separate them, except inside brackets
/// (`roundup_power2_divisions:[256:1,512:2]`).
fn split_pairs(conf: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in conf.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth <= 0 => {
                out.push(&conf[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&conf[start..]);
    out.into_iter().map(str::trim).filter(|p| !p.is_empty()).collect()
}

#[cfg(test)]
mod tests {
    use vramscope_trace_format::Event;

    use super::*;

    #[test]
    fn a_snapshot_says_its_settings_and_the_string_adds_the_backend() {
        let mut trace = Trace::default();
        trace.metadata.allocator_settings = serde_json::json!({
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,backend:native",
            "max_split_size": -1,
            "garbage_collection_threshold": 0.0,
            "expandable_segments": true,
            "roundup_power2_divisions": {"1": 0, "2": 0},
        });
        let s = AllocatorSettings::of(&trace, DeviceId(0));
        assert_eq!(s.expandable_segments, Some(Known { value: true, source: Source::Snapshot }));
        assert_eq!(s.max_split_size_bytes, Some(Known { value: None, source: Source::Snapshot }));
        assert_eq!(s.roundup_power2_divisions.map(|k| k.value), Some(false));
        assert_eq!(s.async_backend.map(|k| k.value), Some(false));
        assert_eq!(s.conf.as_deref(), Some("expandable_segments:True,backend:native"));
    }

    #[test]
    fn a_recorded_conf_string_is_read_pair_by_pair() {
        let mut trace = Trace::default();
        trace.metadata.allocator_settings = serde_json::json!({
            "PYTORCH_CUDA_ALLOC_CONF": " max_split_size_mb:128 , roundup_power2_divisions:[256:1,512:2,>:8],garbage_collection_threshold:0.6",
        });
        let s = AllocatorSettings::of(&trace, DeviceId(0));
        assert_eq!(s.max_split_size_bytes, Some(Known { value: Some(128 << 20), source: Source::Conf }));
        assert_eq!(s.roundup_power2_divisions.map(|k| k.value), Some(true));
        assert_eq!(s.garbage_collection_threshold.map(|k| k.value), Some(0.6));
        assert_eq!(s.expandable_segments, None, "not said");
        assert!(!s.expandable());
        trace.metadata.allocator_settings = serde_json::json!({"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"});
        assert!(AllocatorSettings::of(&trace, DeviceId(0)).is_async());
    }

    #[test]
    fn mapped_segments_are_expandable_segments_whatever_is_said() {
        let mut trace = Trace::default();
        trace.events.push(Event::new(EventKind::SegmentMap, 0, 1, 0x1000, 2 << 20));
        assert_eq!(AllocatorSettings::of(&trace, DeviceId(0)).expandable_segments, None, "another device");
        let s = AllocatorSettings::of(&trace, DeviceId(1));
        assert_eq!(s.expandable_segments, Some(Known { value: true, source: Source::Events }));
    }
}
