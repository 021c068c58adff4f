//! HTML pages that hold a trace: the ones PyTorch's `torch/cuda/_memory_viz.py` writes
//! (`trace_plot`, `segment_plot`, ... `-o out.html`) embed the snapshot pickle in base64 for
//! MemoryViz.js to read in a browser. The page is never run: the payload is found as text,
//! decoded, and read as the pickle it is.
//!
//! PyTorch 2.0's `trace_plot` embedded derived plot data instead (`let alloc_data = {...}`):
//! allocations and frees in order, with sizes and stacks, which becomes a trace without times.
//!
//! The profiler's `export_memory_timeline("out.html")` holds only a PNG of the plot; it is refused
//! with the exports that do hold the data.

use rustc_hash::{FxHashMap, FxHashSet};
use serde::Deserialize;

use super::Imported;
use crate::error::{Error, Result};
use crate::model::event::{Event, EventKind, event_flags};
use crate::model::ids::{DeviceId, StackId, StringId};
use crate::model::interner::{Frame, Interner};
use crate::model::metadata::{Clock, DeviceInfo, Metadata, ProcessInfo, SourceFormat};
use crate::model::trace::Trace;

/// What `_memory_viz.py` (PyTorch 2.1+) assigns the embedded files to (`import
/// {add_local_files}` comes first in the page, so the assignment is what is looked for).
const LOCAL_FILES: &[u8] = b"local_files =";
/// What PyTorch 2.0's `trace_plot` assigns its plot data to.
const ALLOC_DATA: &[u8] = b"let alloc_data = ";
/// The smallest block the CUDA caching allocator hands out; PyTorch 2.0's plot data holds
/// requested sizes, rounded up to it as the snapshot importer does.
const MIN_BLOCK_BYTES: u64 = 512;
/// Frames read of one stack of a PyTorch 2.0 plot, at most (real ones hold a few dozen).
const MAX_PLOT_FRAMES: usize = 512;
/// Allocations of a PyTorch 2.0 plot get made-up addresses this far apart.
const PLOT_ADDRESS_STEP: u64 = 1 << 12;

/// What a memory_viz page holds.
pub enum Embedded {
    /// The snapshot pickle (PyTorch 2.1+).
    Pickle(Vec<u8>),
    /// The allocations and frees of PyTorch 2.0's `trace_plot`, already a trace.
    Plot(Box<Imported>),
}

/// Whether the text (after leading whitespace) starts like an HTML page.
pub(crate) fn looks_like_html(text: &[u8]) -> bool {
    let head = &text[..text.len().min(64)];
    let lower: Vec<u8> = head.iter().map(u8::to_ascii_lowercase).collect();
    lower.starts_with(b"<!doctype html")
        || lower.starts_with(b"<html")
        || lower.starts_with(b"<head")
        || lower.starts_with(b"<body")
        || lower.starts_with(b"<script")
        || lower.starts_with(b"<!--")
}

/// One embedded file of a memory_viz page.
#[derive(Deserialize)]
struct LocalFile {
    #[serde(default)]
    name: Option<String>,
    base64: String,
}

/// What a memory_viz page embeds: the snapshot pickle, or PyTorch 2.0's plot data.
pub fn embedded(page: &[u8]) -> Result<Embedded> {
    if find(page, LOCAL_FILES).is_some() {
        return embedded_snapshot(page).map(Embedded::Pickle);
    }
    if let Some(at) = find(page, ALLOC_DATA) {
        return plot_trace(&page[at + ALLOC_DATA.len()..]).map(|t| Embedded::Plot(Box::new(t)));
    }
    Err(Error::Structure(refusal(page)))
}

/// The first snapshot embedded in a memory_viz page, decoded (the pickle's bytes).
pub fn embedded_snapshot(page: &[u8]) -> Result<Vec<u8>> {
    let Some(at) = find(page, LOCAL_FILES) else {
        return Err(Error::Structure(refusal(page)));
    };
    // `const local_files = [{"name": ..., "base64": ...}, ...]`: the JSON after the `=`.
    let rest = &page[at + LOCAL_FILES.len()..];
    let Some(start) = rest.iter().position(|&b| b == b'[') else {
        return Err(Error::Structure(
            "this memory_viz HTML page names local_files but holds no list of embedded files".to_owned(),
        ));
    };
    let mut files = serde_json::Deserializer::from_slice(&rest[start..]).into_iter::<Vec<LocalFile>>();
    let files = match files.next() {
        Some(Ok(files)) => files,
        Some(Err(e)) => {
            return Err(Error::Structure(format!(
                "the files embedded in this memory_viz HTML page are not the JSON list of {{name, base64}} \
                 that _memory_viz.py writes: {e}"
            )));
        }
        None => return Err(Error::Structure("this memory_viz HTML page's list of embedded files is empty".to_owned())),
    };
    let Some(first) = files.first() else {
        return Err(Error::Structure("this memory_viz HTML page embeds no file".to_owned()));
    };
    let bytes = decode_base64(first.base64.as_bytes()).map_err(|m| {
        Error::Structure(format!(
            "the snapshot embedded in this memory_viz HTML page ({}) is not valid base64: {m}",
            first.name.as_deref().unwrap_or("unnamed")
        ))
    })?;
    if bytes.is_empty() {
        return Err(Error::Structure("the snapshot embedded in this memory_viz HTML page is empty".to_owned()));
    }
    Ok(bytes)
}

/// PyTorch 2.0's `trace_plot` data (`PlotWriter.to_html` in torch/cuda/_memory_viz.py at
/// pytorch/pytorch@c263bd43e8e8502d4726643bc6fd046f0130ac0e).
#[derive(Deserialize)]
struct PlotData {
    /// Element ids in order: an element's first appearance allocates it, its second frees it;
    /// an initially allocated element appears once, when it is freed.
    actions: Vec<u64>,
    elements: Vec<PlotElement>,
    /// `(string id, next suffix id)`: a stack as a linked list of strings.
    suffix_table: Vec<(u64, Option<u64>)>,
    string_table: Vec<String>,
    #[serde(default)]
    initially_allocated: Vec<u64>,
}

#[derive(Deserialize)]
struct PlotElement {
    size: u64,
    #[serde(default)]
    info: Option<u64>,
}

/// A stack from the suffix table: its strings are `"{size} allocation"`, maybe a note that the
/// allocation was not recorded, then frames formatted `filename:line:function`.
fn plot_stack(interner: &mut Interner, plot: &PlotData, mut suffix: Option<u64>) -> StackId {
    let mut frames = Vec::new();
    let mut steps = 0usize;
    while let Some(id) = suffix {
        steps += 1;
        // The table is a list of links: a cycle or an absurdly long chain (a hostile file) ends
        // the walk, so that each stack costs a bounded number of steps.
        let Some(&(string, next)) = usize::try_from(id).ok().and_then(|i| plot.suffix_table.get(i)) else { break };
        if steps > MAX_PLOT_FRAMES {
            break;
        }
        suffix = next;
        let Some(text) = usize::try_from(string).ok().and_then(|i| plot.string_table.get(i)) else { continue };
        if text.ends_with(" allocation") || text.starts_with("alloc not recorded") {
            continue;
        }
        let mut parts = text.rsplitn(3, ':');
        let (function, line, file) = (parts.next(), parts.next(), parts.next());
        let frame = match (function, line.and_then(|l| l.parse::<u32>().ok()), file) {
            (Some(function), Some(line), Some(file)) => {
                Frame { function: interner.string(function), file: interner.string(file), line }
            }
            _ => Frame { function: interner.string(text), file: StringId(0), line: 0 },
        };
        frames.push(interner.frame(frame));
    }
    interner.stack(&frames)
}

/// The trace of PyTorch 2.0's plot data: one event per action, in order (the page has no times
/// and no addresses: each allocation gets a made-up address of its own).
fn plot_trace(json: &[u8]) -> Result<Imported> {
    let mut values = serde_json::Deserializer::from_slice(json).into_iter::<PlotData>();
    let plot = match values.next() {
        Some(Ok(plot)) => plot,
        Some(Err(e)) => {
            return Err(Error::Structure(format!(
                "this PyTorch 2.0 memory_viz page's alloc_data is not the plot data that trace_plot writes: {e}"
            )));
        }
        None => return Err(Error::Structure("this PyTorch 2.0 memory_viz page's alloc_data is empty".to_owned())),
    };
    let mut interner = Interner::new();
    let mut stacks: FxHashMap<u64, StackId> = FxHashMap::default();
    let mut alive: FxHashSet<u64> = plot.initially_allocated.iter().copied().collect();
    let mut events = Vec::with_capacity(plot.actions.len());
    for (i, &element) in plot.actions.iter().enumerate() {
        let Some(e) = usize::try_from(element).ok().and_then(|i| plot.elements.get(i)) else {
            return Err(Error::Structure(format!(
                "action {i} of this PyTorch 2.0 memory_viz page names element {element}, which it does not have"
            )));
        };
        let stack = match e.info {
            Some(info) => *stacks.entry(info).or_insert_with(|| plot_stack(&mut interner, &plot, Some(info))),
            None => StackId(0),
        };
        let kind = if alive.remove(&element) { EventKind::FreeCompleted } else { EventKind::Alloc };
        if kind == EventKind::Alloc {
            alive.insert(element);
        }
        let address = element.saturating_add(1).saturating_mul(PLOT_ADDRESS_STEP);
        let size_bytes = e.size.max(1).div_ceil(MIN_BLOCK_BYTES).saturating_mul(MIN_BLOCK_BYTES);
        let mut event = Event::new(kind, i as i64, 0, address, size_bytes);
        event.set_requested_bytes(e.size);
        event.stack = stack;
        event.flags |= event_flags::SIZE_ESTIMATED;
        events.push(event);
    }
    let mut extra = serde_json::Map::new();
    extra.insert("memory_viz_plot".to_owned(), serde_json::Value::Bool(true));
    let metadata = Metadata {
        source_format: SourceFormat::PytorchSnapshot,
        clock: Clock::EventIndex,
        tool_version: String::new(),
        devices: vec![DeviceInfo { device: DeviceId(0), ..DeviceInfo::default() }],
        processes: vec![ProcessInfo::default()],
        allocator_settings: serde_json::Value::Null,
        extra,
        range: None,
        unrecorded: Vec::new(),
    };
    let warnings = vec![
        "this is a PyTorch 2.0 trace_plot page: it holds the allocations and frees of one device in order, \
         without times, addresses or segments (with trace_plot -s the sizes are segments)"
            .to_owned(),
    ];
    Ok(Imported {
        trace: Trace { metadata, interner, events, ..Trace::default() },
        warnings,
        format: SourceFormat::PytorchSnapshot,
        wrappers: Vec::new(),
    })
}

/// Why an HTML page without an embedded snapshot is refused, and what to use instead.
fn refusal(page: &[u8]) -> String {
    if find(page, b"data:image/png;base64").is_some() {
        return "this HTML page holds only a picture (a PNG) of a plot, not its data: it is what the \
                profiler's export_memory_timeline(\"....html\") writes. Export the data instead, with \
                prof.export_memory_timeline(\"timeline.json\") or (\"timeline.raw.json.gz\"), or record a \
                memory snapshot (torch.cuda.memory._dump_snapshot)"
            .to_owned();
    }
    "this HTML page embeds no memory snapshot: vramscope reads the pages that PyTorch's \
     torch/cuda/_memory_viz.py writes (trace_plot, segment_plot), or the snapshot pickle itself"
        .to_owned()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Decodes standard base64 (RFC 4648, `+/`, `=` padding), skipping whitespace.
pub(crate) fn decode_base64(text: &[u8]) -> Result<Vec<u8>, String> {
    fn value(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        } as u32)
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let mut acc = 0u32;
    let mut bits = 0u32;
    let mut padding = 0usize;
    for (i, &c) in text.iter().enumerate() {
        if c.is_ascii_whitespace() {
            continue;
        }
        if c == b'=' {
            padding += 1;
            continue;
        }
        if padding > 0 {
            return Err(format!("data after the '=' padding at character {i}"));
        }
        let Some(v) = value(c) else {
            return Err(format!("the character {:?} at {i} is not base64", char::from(c)));
        };
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    if bits >= 6 {
        return Err("the data ends in the middle of a byte (truncated?)".to_owned());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_against_known_vectors() {
        // RFC 4648, section 10.
        let cases: [(&str, &str); 7] = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in cases {
            assert_eq!(decode_base64(encoded.as_bytes()).as_deref(), Ok(plain.as_bytes()), "{encoded}");
        }
        assert_eq!(decode_base64(b"Zm9v\nYmFy").as_deref(), Ok(&b"foobar"[..]));
        assert!(decode_base64(b"Zm9v!").is_err());
        assert!(decode_base64(b"Zg==Zg").is_err());
        assert!(decode_base64(b"Z").is_err());
    }

    #[test]
    fn a_pytorch_2_0_plot_becomes_a_trace_and_hostile_ones_stay_bounded() {
        // Two elements: 0 allocated then freed, 1 allocated before the trace and freed.
        let page = br#"<html><script>let alloc_data = {"actions": [0, 1, 0], "elements": [{"size": 1000, "info": 1},
            {"size": 18446744073709551615, "info": 2}], "suffix_table": [[0, null], [1, 0], [2, 2]],
            "string_table": ["model.py:3:forward", "1000.0B allocation", "x"], "initially_allocated": [1]}
            function f() {}</script></html>"#;
        let Ok(Embedded::Plot(imported)) = embedded(page) else { panic!("not read") };
        let kinds: Vec<EventKind> = imported.trace.events.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [EventKind::Alloc, EventKind::FreeCompleted, EventKind::FreeCompleted]);
        // The huge size saturates; the self-referencing suffix (2 -> 2) ends its walk.
        assert_eq!(imported.trace.events[1].size_bytes, u64::MAX);
        let cycle = imported.trace.interner.frames_of(imported.trace.events[1].stack);
        assert!(cycle.len() <= MAX_PLOT_FRAMES, "{}", cycle.len());
        let frames = imported.trace.interner.frames_of(imported.trace.events[0].stack);
        let frame = imported.trace.interner.frame_of(frames[0]).copied().unwrap_or_default();
        assert_eq!(imported.trace.interner.resolve(frame.function), "forward");
        assert_eq!(frame.line, 3);
    }

    #[test]
    fn a_page_without_a_snapshot_says_what_it_is() {
        let png = b"<html><body><img src='data:image/png;base64,iVBORw0KGgo='></body></html>";
        let Err(Error::Structure(message)) = embedded_snapshot(png) else { panic!("accepted") };
        assert!(message.contains("export_memory_timeline"), "{message}");
        let other = b"<!DOCTYPE html><html><body>hello</body></html>";
        let Err(Error::Structure(message)) = embedded_snapshot(other) else { panic!("accepted") };
        assert!(message.contains("embeds no memory snapshot"), "{message}");
    }
}
