//! The tools `vramscope mcp` offers: each one question the CLI answers, with the same document
//! (`info`'s, `diff`'s, `advise`'s, or a part of `info`'s), its arguments' schema derived from their
//! type ([`inputs`]), its output schema from its documents', and a short description for the model.
//! Answers are bounded whatever the trace: the summaries are of fixed size, and the lists that grow
//! with the run (iterations, ranks) come a page at a time.

use anyhow::{Result, anyhow, bail};
use serde_json::{Map, Value, json};

use super::args::{Args, paginate};
use super::inputs;
use crate::cli::{To, advise, diff, estimate, info};
use crate::load::LoadedTrace;
use crate::query::documents::{self, BreakdownDocument, Document, InstantDocument};

/// The longest answer, as JSON text. The summaries are far below it; a list that would pass it
/// is paged.
pub const MAX_ANSWER_BYTES: usize = 1 << 20;

/// One tool: what it is called and does, what it takes, and how it answers.
pub struct Tool {
    /// Its name, as the client calls it.
    pub name: &'static str,
    title: &'static str,
    description: &'static str,
    /// The JSON Schema of its arguments, derived from their type ([`inputs`]).
    input: fn() -> Value,
    /// The documents it answers with (`vramscope schema NAME`): its output schema.
    output: &'static [&'static str],
    answer: fn(&Args<'_>) -> Result<Value>,
}

impl Tool {
    /// The tool as `tools/list` gives it.
    pub fn listing(&self, with_output_schema: bool) -> Value {
        let mut tool = json!({
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": (self.input)(),
            "annotations": { "readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false },
        });
        if with_output_schema {
            tool["outputSchema"] = output_schema(self.output);
        }
        tool
    }

    /// The tool's answer to `given`.
    pub fn call(&self, given: &Map<String, Value>) -> Result<Value> {
        let schema = (self.input)();
        let args = Args::new(given, &inputs::names(&schema))?;
        (self.answer)(&args)
    }
}

/// Every tool, in the order a model would use them.
pub const TOOLS: [Tool; 8] = [
    Tool {
        name: "summary",
        title: "Summary of a run",
        description: "What a GPU memory trace holds, as `vramscope info --json` says it: for each device the peak \
            of allocated and reserved bytes and when, bytes by category at the peak (parameter, gradient, \
            optimizer_state, activation, temporary, ...), the final segment state and fragmentation, the phases \
            (forward, backward, optimizer_step; each kind's highest) and whether memory grows every iteration. \
            Given several files, a directory of one file per rank, or a recording of several ranks: a row per rank \
            and which rank peaks highest. Long lists (every iteration, every rank) come a page at a time.",
        input: inputs::schema::<inputs::Summary>,
        answer: summary,
        output: &["info", "run"],
    },
    Tool {
        name: "peak_breakdown",
        title: "What was alive at the peak",
        description: "At each device's peak of allocated bytes: the bytes by category, how many blocks were alive, \
            and the largest blocks, each with its size, category, why it has that category, and the source line \
            that allocated it. One trace (for a run of ranks, give the rank's file).",
        input: inputs::schema::<inputs::Breakdown>,
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
        input: inputs::schema::<inputs::Instant>,
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
        input: inputs::schema::<inputs::Compare>,
        answer: compare,
        output: &["diff", "ranks-diff"],
    },
    Tool {
        name: "growth",
        title: "Memory growing every iteration",
        description: "Whether memory on each device grows from one iteration to the next (a leak, or a cache \
            filling), by how much per iteration, where the growth is allocated, and when it would run out; with \
            what it found said in words. Of a run of ranks, the rank that peaks highest.",
        input: inputs::schema::<inputs::OneTrace>,
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
        input: inputs::schema::<inputs::OneTrace>,
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
        input: inputs::schema::<inputs::Advise>,
        answer: advise,
        output: &["advise"],
    },
    Tool {
        name: "estimate",
        title: "A program's GPU memory on a GPU it does not run on",
        description: "Runs the command (a PyTorch program) here on an emulated GPU, as `vramscope estimate --json` \
            does: its tensors have no storage and its CUDA calls answer as the GPU would, so it needs no GPU and \
            takes seconds. Answers with the projected peak allocated and reserved on each device (what \
            torch.cuda.max_memory_allocated() and max_memory_reserved() would say), whether it fits with the CUDA \
            context, what was alive at the peak by category and phase, what the estimate rests on (the allocator's \
            settings, cuBLAS workspaces, the context), where the program read values it was given stand-ins for, \
            and, when it does not fit, the smallest change that does. The command runs as this server's user: \
            its output goes to the server's standard error.",
        input: inputs::schema::<inputs::Estimate>,
        answer: estimate,
        output: &["estimate"],
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
    let asked = inputs::Summary::read(args)?;
    let options = info::Options { all_phases: asked.all_phases, range: asked.range, ..Default::default() };
    let mut value = document(|to| info::answer(&asked.paths, &options, to), whole)?;
    paginate(
        &mut value,
        &["/run/ranks", "/devices/*/phases/phases", "/devices/*/phases/iterations"],
        asked.page.pair(),
    );
    Ok(value)
}

fn peak_breakdown(args: &Args<'_>) -> Result<Value> {
    let asked = inputs::Breakdown::read(args)?;
    let options = info::Options { blocks: asked.blocks, range: asked.range, ..Default::default() };
    document(
        |to| info::answer(std::slice::from_ref(&asked.path), &options, to),
        |d| match d {
            Document::Info(info) => Ok(serde_json::to_value(BreakdownDocument::from(info))?),
            other => bail!("info gave a {} document for one trace: a bug", other.name()),
        },
    )
}

fn memory_at(args: &Args<'_>) -> Result<Value> {
    let asked = inputs::Instant::read(args)?;
    let options = info::Options {
        at: Some((&asked.when.0, &asked.when.1)),
        blocks: asked.blocks,
        range: asked.range,
        ..Default::default()
    };
    document(
        |to| info::answer(std::slice::from_ref(&asked.path), &options, to),
        |d| match d {
            Document::Info(info) => Ok(serde_json::to_value(InstantDocument::from(info))?),
            other => bail!("info gave a {} document for one trace: a bug", other.name()),
        },
    )
}

fn compare(args: &Args<'_>) -> Result<Value> {
    let asked = inputs::Compare::read(args)?;
    let gates = asked.gates();
    let options = diff::Options {
        json: true,
        gates: &gates,
        device: asked.device,
        all_phases: asked.all_phases,
        range: asked.range,
    };
    let mut value = document(
        |to| {
            diff::answer(&asked.a, &asked.b, &options, to)?;
            Ok(())
        },
        whole,
    )?;
    // Of two runs of ranks, the lists of ranks; of two traces, every iteration's phases.
    let lists: &[&str] =
        if value.get("ranks").is_some() { &["/ranks", "/only_in_a", "/only_in_b"] } else { &["/phases/rows"] };
    paginate(&mut value, lists, asked.page.pair());
    Ok(value)
}

fn growth(args: &Args<'_>) -> Result<Value> {
    let asked = inputs::OneTrace::read(args)?;
    let (LoadedTrace { trace, .. }, chosen) = crate::runs::highest_rank(&asked.path, asked.range)?;
    let doc = documents::GrowthDocument::new(&trace, asked.path.display().to_string(), chosen.as_ref());
    let mut value = serde_json::to_value(doc)?;
    if value.get("rank").is_some() {
        paginate(&mut value, &["/rank/peaks"], (0, super::args::MAX_PAGE));
    }
    Ok(value)
}

fn oom(args: &Args<'_>) -> Result<Value> {
    let asked = inputs::OneTrace::read(args)?;
    document(|to| info::answer_oom(std::slice::from_ref(&asked.path), asked.range, to), whole)
}

fn estimate(args: &Args<'_>) -> Result<Value> {
    let asked = inputs::Estimate::read(args)?;
    let options = estimate::Options {
        gpu: asked.gpu.as_deref(),
        device_memory: asked.device_memory,
        gpus: asked.gpus.unwrap_or(1),
        output: None,
        force: false,
        context_bytes: asked.context.unwrap_or(estimate::DEFAULT_CONTEXT_BYTES),
        json: true,
        sweep: None,
    };
    let command: Vec<std::ffi::OsString> = asked.command.iter().map(std::ffi::OsString::from).collect();
    document(|to| estimate::answer(&options, &command, to).map(|_| ()), whole)
}

fn advise(args: &Args<'_>) -> Result<Value> {
    let asked = inputs::Advise::read(args)?;
    let options = advise::Options {
        json: true,
        gpus: asked.gpus,
        target: asked.target_bytes,
        device: asked.device,
        scaling: None,
        range: asked.range,
    };
    let mut value = document(|to| advise::answer(&asked.path, &options, to), whole)?;
    if value.get("rank").is_some() {
        paginate(&mut value, &["/rank/peaks"], (0, super::args::MAX_PAGE));
    }
    Ok(value)
}
