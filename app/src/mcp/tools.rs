//! The tools `vramscope mcp` offers: each one question the CLI answers, with the same numbers
//! (each is the JSON of `info`, `diff` or `advise` with the same options, some of it kept), its
//! arguments' schema and a short description for the model. Answers are bounded whatever the
//! trace: the summaries are of fixed size, and the lists that grow with the run (iterations,
//! ranks) come a page at a time.

use std::path::PathBuf;

use anyhow::{Result, anyhow, bail};
use serde_json::{Map, Value, json};
use vramscope_trace_format::{DeviceId, TraceRange};

use super::args::{Args, page_schema, paginate};
use crate::cli::{To, advise, diff, info};
use crate::query::documents::{self, BreakdownDocument, Document, InstantDocument};

/// The longest answer, as JSON text. The summaries are far below it; a list that would pass it
/// is paged.
pub const MAX_ANSWER_BYTES: usize = 1 << 20;

/// The most blocks a breakdown lists.
const MAX_BLOCKS: u64 = 100;

/// One tool: what it is called and does, what it takes, and how it answers.
pub struct Tool {
    /// Its name, as the client calls it.
    pub name: &'static str,
    title: &'static str,
    description: &'static str,
    /// Its arguments: (name, schema, required).
    arguments: fn() -> Vec<(&'static str, Value, bool)>,
    /// The documents it answers with (`vramscope schema NAME`): its output schema.
    output: &'static [&'static str],
    answer: fn(&Args<'_>) -> Result<Value>,
}

impl Tool {
    /// The tool as `tools/list` gives it.
    pub fn listing(&self, with_output_schema: bool) -> Value {
        let arguments = (self.arguments)();
        let properties: Map<String, Value> = arguments.iter().map(|(n, s, _)| ((*n).to_owned(), s.clone())).collect();
        let required: Vec<&str> = arguments.iter().filter(|a| a.2).map(|a| a.0).collect();
        let mut tool = json!({
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": false,
            },
            "annotations": { "readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false },
        });
        if with_output_schema {
            tool["outputSchema"] = output_schema(self.output);
        }
        tool
    }

    /// The tool's answer to `given`.
    pub fn call(&self, given: &Map<String, Value>) -> Result<Value> {
        let names: Vec<&str> = (self.arguments)().iter().map(|a| a.0).collect();
        let args = Args::new(given, &names)?;
        (self.answer)(&args)
    }
}

/// Every tool, in the order a model would use them.
pub const TOOLS: [Tool; 7] = [
    Tool {
        name: "summary",
        title: "Summary of a run",
        description: "What a GPU memory trace holds, as `vramscope info --json` says it: for each device the peak \
            of allocated and reserved bytes and when, bytes by category at the peak (parameter, gradient, \
            optimizer_state, activation, temporary, ...), the final segment state and fragmentation, the phases \
            (forward, backward, optimizer_step; each kind's highest) and whether memory grows every iteration. \
            Given several files, a directory of one file per rank, or a recording of several ranks: a row per rank \
            and which rank peaks highest. Long lists (every iteration, every rank) come a page at a time.",
        arguments: || {
            let mut a = vec![
                ("paths", paths_schema(), true),
                (
                    "all_phases",
                    json!({ "type": "boolean", "description": "Also every iteration's phases and their high points (paged)." }),
                    false,
                ),
                ("range", range_schema(), false),
            ];
            a.extend(page_schema().into_iter().map(|(n, s)| (n, s, false)));
            a
        },
        answer: summary,
        output: &["info", "run"],
    },
    Tool {
        name: "peak_breakdown",
        title: "What was alive at the peak",
        description: "At each device's peak of allocated bytes: the bytes by category, how many blocks were alive, \
            and the largest blocks, each with its size, category, why it has that category, and the source line \
            that allocated it. One trace (for a run of ranks, give the rank's file).",
        arguments: || {
            vec![("path", path_schema(), true), ("blocks", blocks_schema(), false), ("range", range_schema(), false)]
        },
        answer: peak_breakdown,
        output: &["breakdown"],
    },
    Tool {
        name: "memory_at",
        title: "Memory at an instant",
        description: "What was alive at an instant of the run: bytes by category and live blocks on each device, \
            and the largest blocks with their category and the source line that allocated them. The instant is a \
            time after the first event (+40ms, +1.5s) or the start of a phase (forward, backward, optimizer_step, \
            iteration; #N for iteration N from 1, e.g. backward#2).",
        arguments: || {
            vec![
                ("path", path_schema(), true),
                (
                    "when",
                    json!({ "type": "string", "description": "+DURATION after the first event (+40ms) or PHASE[#N] (backward#2)." }),
                    true,
                ),
                ("blocks", blocks_schema(), false),
                ("range", range_schema(), false),
            ]
        },
        answer: memory_at,
        output: &["instant"],
    },
    Tool {
        name: "compare",
        title: "Compare two runs",
        description: "Two runs compared as `vramscope diff --json` does: both peaks and the change, bytes by category \
            at each peak, the phases side by side (forward, backward, optimizer_step, each iteration), the allocation \
            sites that grew, shrank or exist in one run only, and one sentence on what changed most. Gates (for CI) \
            say whether memory grew more than a percentage: `gates_hold` is false when one fails. Two runs of several \
            ranks are paired rank by rank.",
        arguments: || {
            let mut a = vec![
                (
                    "a",
                    json!({ "type": "string", "description": "The baseline run: a trace, or a directory of rank files." }),
                    true,
                ),
                ("b", json!({ "type": "string", "description": "The run compared with it." }), true),
                (
                    "fail_if_peak_grows",
                    json!({ "type": "number", "description": "Gate: B's allocated peak at most this many percent above A's." }),
                    false,
                ),
                (
                    "fail_if_category_grows",
                    json!({ "type": "object", "additionalProperties": { "type": "number" },
                            "description": "Gates by category at the peak, e.g. {\"activation\": 10}." }),
                    false,
                ),
                (
                    "fail_if_phase_grows",
                    json!({ "type": "object", "additionalProperties": { "type": "number" },
                            "description": "Gates by phase's high point: {\"forward\": 5, \"backward:activation\": 10}." }),
                    false,
                ),
                ("device", device_schema(), false),
                (
                    "all_phases",
                    json!({ "type": "boolean", "description": "Every iteration side by side (paged), not only the first 4." }),
                    false,
                ),
                ("range", range_schema(), false),
            ];
            a.extend(page_schema().into_iter().map(|(n, s)| (n, s, false)));
            a
        },
        answer: compare,
        output: &["diff", "ranks-diff"],
    },
    Tool {
        name: "growth",
        title: "Memory growing every iteration",
        description: "Whether memory on each device grows from one iteration to the next (a leak, or a cache \
            filling), by how much per iteration, where the growth is allocated, and when it would run out; with \
            what it found said in words. Of a run of ranks, the rank that peaks highest.",
        arguments: || vec![("path", path_schema(), true), ("range", range_schema(), false)],
        answer: growth,
        output: &["growth"],
    },
    Tool {
        name: "oom",
        title: "Out-of-memory post-mortem",
        description: "The first out-of-memory error on each device, explained as `vramscope info --oom --json` does: \
            the request that failed (size, stack), what the device and the allocator had free and whether \
            fragmentation was to blame, what was alive by category and site, the phase and iteration, and the \
            smallest change projected to fit. A trace with no OOM says so (oom_count 0).",
        arguments: || vec![("path", path_schema(), true), ("range", range_schema(), false)],
        answer: oom,
        output: &["oom"],
    },
    Tool {
        name: "advise",
        title: "What each remedy would do to the peak",
        description: "The advisor's projections, as `vramscope advise --json`: for mixed precision, activation \
            checkpointing, smaller micro-batches, 8-bit or other optimizers, ZeRO 1/2/3, tensor and pipeline \
            parallelism and the allocator's settings, the projected peak, saving, cost, reasoning and how it was \
            projected; the smallest change that fits under the target and the order to try them in. Of a run of \
            ranks, the rank that peaks highest.",
        arguments: || {
            vec![
                ("path", path_schema(), true),
                (
                    "target_bytes",
                    json!({ "type": ["integer", "string"],
                            "description": "The memory to fit under: bytes, or with a unit (80GiB or 80G binary, 80GB decimal). Default: the device's." }),
                    false,
                ),
                (
                    "gpus",
                    json!({ "type": "integer", "minimum": 1, "maximum": 65536,
                            "description": "GPUs to shard over for ZeRO, tensor and pipeline parallelism." }),
                    false,
                ),
                ("device", device_schema(), false),
                ("range", range_schema(), false),
            ]
        },
        answer: advise,
        output: &["advise"],
    },
];

/// The output schema of a tool that answers with `names`: the document's schema, or (answering
/// with one of several) an object that is any of them, their definitions merged (a name is one
/// Rust type whichever document it comes from).
fn output_schema(names: &[&str]) -> Value {
    let mut schemas: Vec<Value> = names.iter().filter_map(|n| documents::schema(n)).collect();
    if schemas.len() == 1 {
        return schemas.remove(0);
    }
    let mut defs = Map::new();
    let mut any_of = Vec::new();
    for (name, mut schema) in names.iter().zip(schemas) {
        let Some(object) = schema.as_object_mut() else { continue };
        if let Some(Value::Object(d)) = object.remove("$defs") {
            defs.extend(d);
        }
        for key in ["$schema", "$id"] {
            object.remove(key);
        }
        let title = format!("{name} document");
        defs.insert(title.clone(), schema);
        any_of.push(json!({ "$ref": format!("#/$defs/{title}") }));
    }
    json!({ "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "anyOf": any_of, "$defs": defs })
}

fn paths_schema() -> Value {
    json!({
        "anyOf": [{ "type": "string" }, { "type": "array", "items": { "type": "string" }, "minItems": 1 }],
        "description": "A trace (.pickle snapshot, profiler .json/.json.gz, .vtrace), several (one per rank), or a directory of them.",
    })
}

fn path_schema() -> Value {
    json!({ "type": "string", "description": "The trace: a .pickle snapshot, a profiler .json or .json.gz, a .vtrace." })
}

fn range_schema() -> Value {
    json!({ "type": "string", "description": "Only this part of the trace: +2s..+3.5s, or #1000..#2000 by event index." })
}

fn blocks_schema() -> Value {
    json!({ "type": "integer", "minimum": 1, "maximum": MAX_BLOCKS, "description": "How many of the largest blocks to list (default 10)." })
}

fn device_schema() -> Value {
    json!({ "type": ["integer", "string"], "description": "The device: its index (0), cuda:N or host. Default: the one that peaks highest." })
}

/// The document a command answers with, as JSON (`convert` picks what of it to give).
fn document(
    ask: impl FnOnce(&mut To<'_>) -> Result<()>,
    mut convert: impl FnMut(Document<'_>) -> Result<Value>,
) -> Result<Value> {
    let mut kept = None;
    {
        let mut keep = |d: Document<'_>| -> Result<()> {
            kept = Some(convert(d)?);
            Ok(())
        };
        ask(&mut To::Keep(&mut keep))?;
    }
    kept.ok_or_else(|| anyhow!("the command gave no document: a bug"))
}

/// The whole document.
fn whole(d: Document<'_>) -> Result<Value> {
    Ok(serde_json::to_value(d)?)
}

fn summary(args: &Args<'_>) -> Result<Value> {
    let paths = args.paths("paths")?;
    let range = args.opt_parsed::<TraceRange>("range")?;
    let options = info::Options { all_phases: args.flag("all_phases")?, range, ..Default::default() };
    let mut value = document(|to| info::answer(&paths, &options, to), whole)?;
    paginate(&mut value, &["/run/ranks", "/devices/*/phases/phases", "/devices/*/phases/iterations"], args.page()?);
    Ok(value)
}

/// The blocks asked for (10 unless said).
fn blocks(args: &Args<'_>) -> Result<usize> {
    Ok(args.opt_count("blocks", 1, MAX_BLOCKS)?.unwrap_or(10) as usize)
}

fn peak_breakdown(args: &Args<'_>) -> Result<Value> {
    let path = args.path("path")?;
    let options =
        info::Options { blocks: blocks(args)?, range: args.opt_parsed::<TraceRange>("range")?, ..Default::default() };
    document(
        |to| info::answer(&[path], &options, to),
        |d| match d {
            Document::Info(info) => Ok(serde_json::to_value(BreakdownDocument::from(info))?),
            other => bail!("info gave a {} document for one trace: a bug", other.name()),
        },
    )
}

fn memory_at(args: &Args<'_>) -> Result<Value> {
    let path = args.path("path")?;
    let text = args.string("when")?;
    let when = info::parse_when(text).map_err(|e| anyhow!("the argument \"when\" ({text:?}): {e}"))?;
    let options = info::Options {
        at: Some((text, &when)),
        blocks: blocks(args)?,
        range: args.opt_parsed::<TraceRange>("range")?,
        ..Default::default()
    };
    document(
        |to| info::answer(&[path], &options, to),
        |d| match d {
            Document::Info(info) => Ok(serde_json::to_value(InstantDocument::from(info))?),
            other => bail!("info gave a {} document for one trace: a bug", other.name()),
        },
    )
}

fn compare(args: &Args<'_>) -> Result<Value> {
    let (a, b) = (args.path("a")?, args.path("b")?);
    let mut gates: Vec<diff::Gate> =
        args.opt_number("fail_if_peak_grows")?.map(diff::Gate::PeakGrows).into_iter().collect();
    for (name, pct) in args.opt_numbers("fail_if_category_grows")? {
        let (category, pct) =
            diff::parse_category_gate(&format!("{name}={pct}")).map_err(|e| anyhow!("fail_if_category_grows: {e}"))?;
        gates.push(diff::Gate::CategoryGrows(category, pct));
    }
    for (name, pct) in args.opt_numbers("fail_if_phase_grows")? {
        let gate = diff::parse_phase_gate(&format!("{name}={pct}")).map_err(|e| anyhow!("fail_if_phase_grows: {e}"))?;
        gates.push(diff::Gate::PhaseGrows(gate));
    }
    let options = diff::Options {
        json: true,
        gates: &gates,
        device: args.opt_parsed::<DeviceId>("device")?,
        all_phases: args.flag("all_phases")?,
        range: args.opt_parsed::<TraceRange>("range")?,
    };
    let mut value = document(
        |to| {
            diff::answer(&a, &b, &options, to)?;
            Ok(())
        },
        whole,
    )?;
    // Of two runs of ranks, the lists of ranks; of two traces, every iteration's phases.
    let lists: &[&str] =
        if value.get("ranks").is_some() { &["/ranks", "/only_in_a", "/only_in_b"] } else { &["/phases/rows"] };
    paginate(&mut value, lists, args.page()?);
    Ok(value)
}

fn growth(args: &Args<'_>) -> Result<Value> {
    let path = args.path("path")?;
    let (crate::load::LoadedTrace { trace, .. }, chosen) =
        crate::runs::highest_rank(&path, args.opt_parsed::<TraceRange>("range")?)?;
    let doc = documents::GrowthDocument::new(&trace, path.display().to_string(), chosen.as_ref());
    let mut value = serde_json::to_value(doc)?;
    if value.get("rank").is_some() {
        paginate(&mut value, &["/rank/peaks"], (0, super::args::MAX_PAGE));
    }
    Ok(value)
}

fn oom(args: &Args<'_>) -> Result<Value> {
    let path = args.path("path")?;
    let range = args.opt_parsed::<TraceRange>("range")?;
    document(|to| info::answer_oom(&[path], range, to), whole)
}

fn advise(args: &Args<'_>) -> Result<Value> {
    let path: PathBuf = args.path("path")?;
    let target = match args.opt_parsed::<String>("target_bytes")? {
        None => None,
        Some(text) => Some(advise::parse_bytes(&text).map_err(|e| anyhow!("the argument \"target_bytes\": {e}"))?),
    };
    let gpus = args.opt_count("gpus", 1, 65536)?.map(|n| n as u32);
    let options = advise::Options {
        json: true,
        gpus,
        target,
        device: args.opt_parsed::<DeviceId>("device")?,
        scaling: None,
        range: args.opt_parsed::<TraceRange>("range")?,
    };
    let mut value = document(|to| advise::answer(&path, &options, to), whole)?;
    if value.get("rank").is_some() {
        paginate(&mut value, &["/rank/peaks"], (0, super::args::MAX_PAGE));
    }
    Ok(value)
}
