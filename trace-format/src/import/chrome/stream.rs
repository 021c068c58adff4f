//! The file's top level read key by key, `traceEvents` streamed into the state, and why a trace
//! without usable memory events is refused.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::error::Result;

use super::events::{KINETO_KEYS, State};
use super::fields::{Num, RawEvent};

/// The top-level object, read key by key; `traceEvents` is streamed into the state.
pub(super) struct TopLevel<'s> {
    pub(super) state: &'s mut State,
    pub(super) base_time_ns: Option<i64>,
    pub(super) display_time_unit: Option<String>,
    pub(super) has_events: bool,
    pub(super) kineto_keys: bool,
    pub(super) device_properties: Option<serde_json::Value>,
    pub(super) distributed: Option<serde_json::Value>,
    pub(super) other: serde_json::Map<String, serde_json::Value>,
}

/// Streams the events of the `traceEvents` array.
pub(super) struct EventsSeed<'s>(&'s mut State);

impl<'de> DeserializeSeed<'de> for EventsSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EventsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("'traceEvents' to be a list of event objects")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(event) = seq.next_element::<Option<RawEvent<'de>>>()? {
            if let Some(event) = event {
                self.0.event(event);
            }
        }
        Ok(())
    }
}

impl<'de> Visitor<'de> for &mut TopLevel<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object with 'traceEvents', or a list of events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        self.has_events = true;
        EventsSeed(self.state).visit_seq(seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if KINETO_KEYS.contains(&key.as_ref()) {
                self.kineto_keys = true;
            }
            match key.as_ref() {
                "traceEvents" => {
                    self.has_events = true;
                    map.next_value_seed(EventsSeed(self.state))?;
                }
                "baseTimeNanoseconds" => {
                    let value: Num = map.next_value()?;
                    let Some(base) = value.as_i64() else {
                        return Err(serde::de::Error::custom(
                            "'baseTimeNanoseconds' should be an integer number of nanoseconds",
                        ));
                    };
                    self.base_time_ns = Some(base);
                }
                "displayTimeUnit" => {
                    let value: serde_json::Value = map.next_value()?;
                    self.display_time_unit = value.as_str().map(str::to_owned);
                }
                "deviceProperties" => self.device_properties = Some(map.next_value()?),
                "distributedInfo" => {
                    let value: serde_json::Value = map.next_value()?;
                    if !value.is_object() && !value.is_null() {
                        return Err(serde::de::Error::custom("'distributedInfo' should be an object"));
                    }
                    self.distributed = Some(value);
                }
                other => {
                    let other = other.to_owned();
                    let value: serde_json::Value = map.next_value()?;
                    self.other.insert(other, value);
                }
            }
        }
        Ok(())
    }
}

/// Why a Chrome trace without usable memory events is refused.
pub(super) fn refusal(state: &State, top: &TopLevel<'_>) -> String {
    if state.foreign_memory > 0 {
        let keys: Vec<&str> = state.foreign_keys.iter().map(String::as_str).collect();
        // PaddlePaddle's profiler names its memory events `[memory]` too, with snake_case arguments.
        let paddle = ["increase_bytes", "place", "current_allocated"].iter().any(|k| state.foreign_keys.contains(*k));
        let writer = if paddle { "PaddlePaddle's profiler" } else { "another framework's profiler" };
        let keys = if keys.is_empty() { "none".to_owned() } else { keys.join(", ") };
        return format!(
            "this Chrome trace has {} [memory] event{}, but not in the schema of PyTorch's profiler (their \
             arguments: {keys}; PyTorch writes a signed Bytes with Device Type and Device Id): it was written \
             by {writer}. vramscope reads the memory events of PyTorch's profiler \
             (torch.profiler.profile(profile_memory=True)) and PyTorch memory snapshots",
            state.foreign_memory,
            if state.foreign_memory == 1 { "" } else { "s" }
        );
    }
    if state.skipped_memory > 0 {
        return format!(
            "this Chrome trace's {} [memory] events all have an Addr that is not a number, so none can be read",
            state.skipped_memory
        );
    }
    let from_pytorch = top.kineto_keys || state.kineto_categories;
    if from_pytorch {
        return "this PyTorch profiler trace has no memory events: profile with \
                torch.profiler.profile(profile_memory=True) to record them, or take a memory snapshot \
                (torch.cuda.memory._record_memory_history, then _dump_snapshot)"
            .to_owned();
    }
    let categories: Vec<&str> = state.categories.iter().map(String::as_str).collect();
    format!(
        "this Chrome trace ({} events{}) is not from PyTorch's profiler and has no memory events vramscope \
         reads; vramscope reads PyTorch profiler traces recorded with profile_memory=True",
        state.trace_events,
        if categories.is_empty() { String::new() } else { format!(", categories {}", categories.join(", ")) }
    )
}
