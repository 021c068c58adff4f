//! Each tool's arguments as a type: its JSON Schema (the tool's `inputSchema`) is derived from
//! it, and a call's arguments are read into it, each checked and named when wrong ([`Args`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Result, anyhow};
use schemars::JsonSchema;
use serde_json::Value;
use vramscope_trace_format::{DeviceId, TraceRange};

use super::args::{Args, DEFAULT_PAGE, MAX_PAGE};

/// The most blocks a breakdown lists.
pub const MAX_BLOCKS: u64 = 100;

/// The input schema of a tool taking `T`: an object of exactly its fields.
pub fn schema<T: JsonSchema>() -> Value {
    let mut value =
        schemars::generate::SchemaSettings::draft2020_12().into_generator().into_root_schema_for::<T>().to_value();
    if let Some(object) = value.as_object_mut() {
        object.remove("title");
    }
    value
}

/// The names of the arguments a schema of [`schema`] takes.
pub fn names(schema: &Value) -> Vec<&str> {
    schema["properties"].as_object().map(|p| p.keys().map(String::as_str).collect()).unwrap_or_default()
}

/// One trace, several (one per rank), or a directory of them.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code, reason = "the argument's shape in the schema: Args reads the value itself, naming it when wrong")]
pub enum Paths {
    /// A trace (.pickle snapshot, profiler .json/.json.gz, .vtrace), or a directory of rank files.
    One(String),
    /// Several traces, one per rank.
    #[schemars(extend("minItems" = 1))]
    Many(Vec<String>),
}

/// A device: its index, or its name.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code, reason = "the argument's shape in the schema: Args reads the value itself, naming it when wrong")]
pub enum DeviceArg {
    /// Its index (0; -1 is host memory).
    Index(i64),
    /// Its name: cuda:N or host.
    Name(String),
}

/// A size: bytes, or with a unit.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code, reason = "the argument's shape in the schema: Args reads the value itself, naming it when wrong")]
pub enum SizeArg {
    /// Bytes.
    Bytes(u64),
    /// With a unit: 80GiB or 80G binary, 80GB decimal.
    Text(String),
}

/// A page of the answer's long lists (every iteration, every rank): (offset, limit).
#[derive(JsonSchema)]
pub struct Page {
    /// Skip this many items of each long list (paging; default 0).
    #[schemars(with = "Option<u64>", range(min = 0))]
    pub offset: usize,
    /// At most this many items of each long list (default 50, at most 500).
    #[schemars(with = "Option<u64>", range(min = 1, max = MAX_PAGE))]
    pub limit: usize,
}

impl Page {
    fn read(args: &Args<'_>) -> Result<Self> {
        let offset = args.opt_count("offset", 0, u64::from(u32::MAX))?.unwrap_or(0);
        let limit = args.opt_count("limit", 1, MAX_PAGE as u64)?.unwrap_or(DEFAULT_PAGE as u64);
        Ok(Self { offset: offset as usize, limit: limit as usize })
    }

    /// As [`super::args::paginate`] takes it.
    pub fn pair(&self) -> (usize, usize) {
        (self.offset, self.limit)
    }
}

/// `summary`'s arguments.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Summary {
    /// A trace (.pickle snapshot, profiler .json/.json.gz, .vtrace), several (one per rank), or a directory of them.
    #[schemars(with = "Paths")]
    pub paths: Vec<PathBuf>,
    /// Also every iteration's phases and their high points (paged).
    #[schemars(with = "Option<bool>")]
    pub all_phases: bool,
    /// Only this part of the trace: +2s..+3.5s, or #1000..#2000 by event index.
    #[schemars(with = "Option<String>")]
    pub range: Option<TraceRange>,
    /// The page of the long lists.
    #[serde(flatten)]
    pub page: Page,
}

impl Summary {
    pub fn read(args: &Args<'_>) -> Result<Self> {
        Ok(Self {
            paths: args.paths("paths")?,
            all_phases: args.flag("all_phases")?,
            range: args.opt_parsed("range")?,
            page: Page::read(args)?,
        })
    }
}

/// `peak_breakdown`'s arguments.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Breakdown {
    /// The trace: a .pickle snapshot, a profiler .json or .json.gz, a .vtrace.
    #[schemars(with = "String")]
    pub path: PathBuf,
    /// How many of the largest blocks to list (default 10).
    #[schemars(with = "Option<u64>", range(min = 1, max = MAX_BLOCKS))]
    pub blocks: usize,
    /// Only this part of the trace: +2s..+3.5s, or #1000..#2000 by event index.
    #[schemars(with = "Option<String>")]
    pub range: Option<TraceRange>,
}

impl Breakdown {
    pub fn read(args: &Args<'_>) -> Result<Self> {
        Ok(Self { path: args.path("path")?, blocks: blocks(args)?, range: args.opt_parsed("range")? })
    }
}

/// The blocks asked for (10 unless said).
fn blocks(args: &Args<'_>) -> Result<usize> {
    Ok(args.opt_count("blocks", 1, MAX_BLOCKS)?.unwrap_or(10) as usize)
}

/// `memory_at`'s arguments.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Instant {
    /// The trace: a .pickle snapshot, a profiler .json or .json.gz, a .vtrace.
    #[schemars(with = "String")]
    pub path: PathBuf,
    /// +DURATION after the first event (+40ms) or PHASE[#N] (backward#2).
    #[schemars(with = "String")]
    pub when: (String, crate::cli::info::When),
    /// How many of the largest blocks to list (default 10).
    #[schemars(with = "Option<u64>", range(min = 1, max = MAX_BLOCKS))]
    pub blocks: usize,
    /// Only this part of the trace: +2s..+3.5s, or #1000..#2000 by event index.
    #[schemars(with = "Option<String>")]
    pub range: Option<TraceRange>,
}

impl Instant {
    pub fn read(args: &Args<'_>) -> Result<Self> {
        let text = args.string("when")?;
        let when = crate::cli::info::parse_when(text).map_err(|e| anyhow!("the argument \"when\" ({text:?}): {e}"))?;
        Ok(Self {
            path: args.path("path")?,
            when: (text.to_owned(), when),
            blocks: blocks(args)?,
            range: args.opt_parsed("range")?,
        })
    }
}

/// `compare`'s arguments.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Compare {
    /// The baseline run: a trace, or a directory of rank files.
    #[schemars(with = "String")]
    pub a: PathBuf,
    /// The run compared with it.
    #[schemars(with = "String")]
    pub b: PathBuf,
    /// Gate: B's allocated peak at most this many percent above A's.
    #[schemars(with = "Option<f64>")]
    pub fail_if_peak_grows: Vec<crate::cli::diff::Gate>,
    /// Gates by category at the peak, e.g. {"activation": 10}.
    #[schemars(with = "Option<BTreeMap<String, f64>>")]
    pub fail_if_category_grows: Vec<crate::cli::diff::Gate>,
    /// Gates by phase's high point: {"forward": 5, "backward:activation": 10}.
    #[schemars(with = "Option<BTreeMap<String, f64>>")]
    pub fail_if_phase_grows: Vec<crate::cli::diff::Gate>,
    /// The device: its index (0), cuda:N or host. Default: the one that peaks highest.
    #[schemars(with = "Option<DeviceArg>")]
    pub device: Option<DeviceId>,
    /// Every iteration side by side (paged), not only the first 4.
    #[schemars(with = "Option<bool>")]
    pub all_phases: bool,
    /// Only this part of the trace: +2s..+3.5s, or #1000..#2000 by event index.
    #[schemars(with = "Option<String>")]
    pub range: Option<TraceRange>,
    /// The page of the long lists.
    #[serde(flatten)]
    pub page: Page,
}

impl Compare {
    pub fn read(args: &Args<'_>) -> Result<Self> {
        use crate::cli::diff::{Gate, parse_category_gate, parse_phase_gate};
        let mut by_category = Vec::new();
        for (name, pct) in args.opt_numbers("fail_if_category_grows")? {
            let (category, pct) =
                parse_category_gate(&format!("{name}={pct}")).map_err(|e| anyhow!("fail_if_category_grows: {e}"))?;
            by_category.push(Gate::CategoryGrows(category, pct));
        }
        let mut by_phase = Vec::new();
        for (name, pct) in args.opt_numbers("fail_if_phase_grows")? {
            let gate = parse_phase_gate(&format!("{name}={pct}")).map_err(|e| anyhow!("fail_if_phase_grows: {e}"))?;
            by_phase.push(Gate::PhaseGrows(gate));
        }
        Ok(Self {
            a: args.path("a")?,
            b: args.path("b")?,
            fail_if_peak_grows: args.opt_number("fail_if_peak_grows")?.map(Gate::PeakGrows).into_iter().collect(),
            fail_if_category_grows: by_category,
            fail_if_phase_grows: by_phase,
            device: args.opt_parsed("device")?,
            all_phases: args.flag("all_phases")?,
            range: args.opt_parsed("range")?,
            page: Page::read(args)?,
        })
    }

    /// Every gate, in the order `diff` checks them.
    pub fn gates(&self) -> Vec<crate::cli::diff::Gate> {
        [&self.fail_if_peak_grows, &self.fail_if_category_grows, &self.fail_if_phase_grows]
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }
}

/// The arguments of `growth` and `oom`: one trace.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct OneTrace {
    /// The trace: a .pickle snapshot, a profiler .json or .json.gz, a .vtrace.
    #[schemars(with = "String")]
    pub path: PathBuf,
    /// Only this part of the trace: +2s..+3.5s, or #1000..#2000 by event index.
    #[schemars(with = "Option<String>")]
    pub range: Option<TraceRange>,
}

impl OneTrace {
    pub fn read(args: &Args<'_>) -> Result<Self> {
        Ok(Self { path: args.path("path")?, range: args.opt_parsed("range")? })
    }
}

/// `advise`'s arguments.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Advise {
    /// The trace: a .pickle snapshot, a profiler .json or .json.gz, a .vtrace.
    #[schemars(with = "String")]
    pub path: PathBuf,
    /// The memory to fit under: bytes, or with a unit (80GiB or 80G binary, 80GB decimal). Default: the device's.
    #[schemars(with = "Option<SizeArg>")]
    pub target_bytes: Option<u64>,
    /// GPUs to shard over for ZeRO, tensor and pipeline parallelism.
    #[schemars(range(min = 1, max = 65536))]
    pub gpus: Option<u32>,
    /// The device: its index (0), cuda:N or host. Default: the one that peaks highest.
    #[schemars(with = "Option<DeviceArg>")]
    pub device: Option<DeviceId>,
    /// Only this part of the trace: +2s..+3.5s, or #1000..#2000 by event index.
    #[schemars(with = "Option<String>")]
    pub range: Option<TraceRange>,
}

impl Advise {
    pub fn read(args: &Args<'_>) -> Result<Self> {
        let target_bytes = match args.opt_parsed::<String>("target_bytes")? {
            None => None,
            Some(text) => Some(
                crate::cli::advise::parse_bytes(&text).map_err(|e| anyhow!("the argument \"target_bytes\": {e}"))?,
            ),
        };
        Ok(Self {
            path: args.path("path")?,
            target_bytes,
            gpus: args.opt_count("gpus", 1, 65536)?.map(|n| n as u32),
            device: args.opt_parsed("device")?,
            range: args.opt_parsed("range")?,
        })
    }
}

/// `estimate`'s arguments.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Estimate {
    /// The command to run on the emulated GPU, as a list: ["python", "train.py", "--batch-size", "8"].
    #[schemars(length(min = 1))]
    pub command: Vec<String>,
    /// The GPU: h200, h100, a100, a100-40gb, l40s, l4, a10, t4, rtx5090, rtx4090. Default: h100.
    pub gpu: Option<String>,
    /// Its memory instead of the table's: bytes, or with a unit (24GiB or 24G binary, 24GB decimal).
    #[schemars(with = "Option<SizeArg>")]
    pub device_memory: Option<u64>,
    /// How many GPUs the program sees. Default: 1.
    #[schemars(range(min = 1, max = 64))]
    pub gpus: Option<u32>,
    /// The CUDA context counted against each GPU: bytes, or with a unit. Default: 512MiB.
    #[schemars(with = "Option<SizeArg>")]
    pub context: Option<u64>,
}

impl Estimate {
    pub fn read(args: &Args<'_>) -> Result<Self> {
        let size = |name: &str| -> Result<Option<u64>> {
            match args.opt_parsed::<String>(name)? {
                None => Ok(None),
                Some(text) => {
                    Ok(Some(crate::cli::advise::parse_bytes(&text).map_err(|e| anyhow!("the argument {name:?}: {e}"))?))
                }
            }
        };
        Ok(Self {
            command: args.strings("command")?,
            gpu: args.opt_string("gpu")?.map(str::to_owned),
            device_memory: size("device_memory")?,
            gpus: args.opt_count("gpus", 1, 64)?.map(|n| n as u32),
            context: size("context")?,
        })
    }
}
