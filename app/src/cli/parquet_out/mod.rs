//! `export --format parquet`: a run's model as Parquet tables, each a dataset partitioned by rank
//! (`dataset.rs`) that DuckDB, Polars, Spark and Dask read as one table: the ranks, the allocator events, the blocks (each allocation with
//! its lifetime, category and evidence), the final segments, the annotations (phases, modules)
//! and the tags. The schema is `docs/EXPORT.md`'s.

mod dataset;

use rustc_hash::FxHashMap as HashMap;
use vramscope_trace_format::{Clock, DeviceId, EventKind, SegmentPool, StackId, Trace};

use crate::query::attribution::{Attribution, Attributor, Evidence};
use crate::query::instant::allocation_site;
use crate::query::run::Rank;
use crate::query::{peak, replay};

/// A column's values.
enum Values {
    I32(Vec<i32>),
    I64(Vec<i64>),
    OptI32(Vec<Option<i32>>),
    OptI64(Vec<Option<i64>>),
    Str(Vec<String>),
    OptStr(Vec<Option<String>>),
    Bool(Vec<bool>),
}

impl Values {
    fn len(&self) -> usize {
        match self {
            Self::I32(v) => v.len(),
            Self::I64(v) => v.len(),
            Self::OptI32(v) => v.len(),
            Self::OptI64(v) => v.len(),
            Self::Str(v) => v.len(),
            Self::OptStr(v) => v.len(),
            Self::Bool(v) => v.len(),
        }
    }

    /// Its line of the schema.
    fn schema(&self, name: &str) -> String {
        let kind = match self {
            Self::I32(_) => "required int32",
            Self::I64(_) => "required int64",
            Self::OptI32(_) => "optional int32",
            Self::OptI64(_) => "optional int64",
            Self::Str(_) => "required binary",
            Self::OptStr(_) => "optional binary",
            Self::Bool(_) => "required boolean",
        };
        let annotation = if matches!(self, Self::Str(_) | Self::OptStr(_)) { " (STRING)" } else { "" };
        format!("{kind} {name}{annotation};")
    }
}

/// A table: its name and its columns, all of one length.
struct Table {
    name: &'static str,
    columns: Vec<(&'static str, Values)>,
}

/// An address or a size as Parquet's signed 64 bits: the same bits (addresses above 2^63 read
/// negative, which no device hands out).
fn signed(v: u64) -> i64 {
    v as i64
}

fn evidence_name(e: &Evidence) -> &'static str {
    match e {
        Evidence::Tag(_) => "tag",
        Evidence::Frame { .. } => "stack_rule",
        Evidence::Phase { .. } => "phase",
        Evidence::BeforeRecording { .. } => "before_recording",
        Evidence::SizeMatches { .. } | Evidence::StateSizeMatches { .. } => "size_match",
        Evidence::Unreported => "unreported",
        Evidence::Nothing => "none",
    }
}

fn site(trace: &Trace, stack: StackId, sites: &mut HashMap<StackId, Option<String>>) -> Option<String> {
    sites
        .entry(stack)
        .or_insert_with(|| Some(allocation_site(trace, stack, true)).filter(|s| !s.is_empty() && stack != StackId(0)))
        .clone()
}

/// The ranks table: one row per rank and device.
fn ranks_table(ranks: &[Rank]) -> Table {
    let (mut rank_col, mut from, mut source, mut node, mut local, mut host, mut world, mut pid) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut device_col, mut peak_col, mut reserved, mut time, mut format, mut clock) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for rank in ranks {
        let trace = &rank.trace;
        let process = trace.metadata.processes.first();
        let world_size = trace.metadata.extra.get("world_size").and_then(serde_json::Value::as_u64);
        for device in trace.devices() {
            let peaks = peak::peaks(trace, device);
            rank_col.push(rank.rank as i32);
            from.push(format!("{:?}", rank.from).to_ascii_lowercase());
            source.push(rank.source.clone());
            node.push(process.and_then(|p| p.node).map(|n| n as i32));
            local.push(process.and_then(|p| p.local_rank).map(|n| n as i32));
            host.push(process.and_then(|p| p.host.clone()));
            world.push(world_size.map(|w| w as i32));
            pid.push(process.and_then(|p| p.pid).map(|p| p as i32));
            device_col.push(i32::from(device.0));
            peak_col.push(signed(peaks.allocated.bytes));
            reserved.push(signed(peaks.reserved.bytes.max(peaks.allocated.bytes)));
            time.push((trace.metadata.clock != Clock::EventIndex).then_some(peaks.allocated.time_ns));
            format.push(trace.metadata.source_format.name().to_owned());
            clock.push(
                match trace.metadata.clock {
                    Clock::UnixNs => "unix_ns",
                    Clock::MonotonicNs => "monotonic_ns",
                    Clock::EventIndex => "event_index",
                }
                .to_owned(),
            );
        }
    }
    Table {
        name: "ranks",
        columns: vec![
            ("rank", Values::I32(rank_col)),
            ("rank_from", Values::Str(from)),
            ("source", Values::Str(source)),
            ("node", Values::OptI32(node)),
            ("local_rank", Values::OptI32(local)),
            ("host", Values::OptStr(host)),
            ("world_size", Values::OptI32(world)),
            ("pid", Values::OptI32(pid)),
            ("device", Values::I32(device_col)),
            ("peak_allocated_bytes", Values::I64(peak_col)),
            ("peak_reserved_bytes", Values::I64(reserved)),
            ("peak_allocated_time_ns", Values::OptI64(time)),
            ("source_format", Values::Str(format)),
            ("clock", Values::Str(clock)),
        ],
    }
}

/// The events table's columns.
#[derive(Default)]
struct EventColumns {
    rank: Vec<i32>,
    seq: Vec<i64>,
    time: Vec<i64>,
    device: Vec<i32>,
    kind: Vec<String>,
    address: Vec<i64>,
    size: Vec<i64>,
    requested: Vec<i64>,
    stream: Vec<i64>,
    site: Vec<Option<String>>,
}

/// The blocks table's columns.
#[derive(Default)]
struct BlockColumns {
    rank: Vec<i32>,
    device: Vec<i32>,
    address: Vec<i64>,
    size: Vec<i64>,
    requested: Vec<i64>,
    alloc: Vec<Option<i64>>,
    alloc_seq: Vec<Option<i64>>,
    free: Vec<Option<i64>>,
    free_seq: Vec<Option<i64>>,
    category: Vec<String>,
    evidence: Vec<String>,
    site: Vec<Option<String>>,
}

/// A block: where it is, its sizes, when allocated (time, event index; none: before the trace)
/// and the stack it was allocated from.
struct NewBlock {
    address: u64,
    size: u64,
    requested: u64,
    alloc: Option<(i64, usize)>,
    stack: StackId,
}

impl BlockColumns {
    /// Adds a block, attributed; its row.
    fn push(&mut self, rank: i32, device: i32, b: NewBlock, attribution: Attribution, site: Option<String>) -> usize {
        self.rank.push(rank);
        self.device.push(device);
        self.address.push(signed(b.address));
        self.size.push(signed(b.size));
        self.requested.push(signed(b.requested));
        self.alloc.push(b.alloc.map(|a| a.0));
        self.alloc_seq.push(b.alloc.map(|a| a.1 as i64));
        self.free.push(None);
        self.free_seq.push(None);
        self.category.push(attribution.category.name().to_owned());
        self.evidence.push(evidence_name(&attribution.evidence).to_owned());
        self.site.push(site);
        self.rank.len() - 1
    }
}

/// One device of one rank: its events, and its blocks (those alive from before the trace, then
/// each allocation, freed or not).
fn device_rows(trace: &Trace, rank: i32, device: DeviceId, events_out: &mut EventColumns, blocks: &mut BlockColumns) {
    let mut sites: HashMap<StackId, Option<String>> = HashMap::default();
    let events = replay::device_events(trace, device);
    let initial = replay::initial_state(trace, device, &events);
    let mut attributor = Attributor::new(trace, device);
    let dev = i32::from(device.0);
    let mut add = |blocks: &mut BlockColumns, b: NewBlock, sites: &mut HashMap<StackId, Option<String>>| {
        let attribution = attributor.block(b.address, b.alloc.map_or(i64::MIN, |a| a.0), i64::MAX, b.stack);
        let site = site(trace, b.stack, sites);
        blocks.push(rank, dev, b, attribution, site)
    };
    let mut live: HashMap<u64, usize> = HashMap::default();
    let mut before: HashMap<u64, usize> = HashMap::default();
    let two_step = trace.frees_in_two_steps(device);
    // A block the program freed before the trace and that waits for its streams at its start is
    // not allocated: it has no row.
    for p in initial.blocks.iter().filter(|p| !p.awaiting) {
        let b = NewBlock {
            address: p.address,
            size: p.size_bytes,
            requested: p.requested_bytes,
            alloc: None,
            stack: p.stack(trace),
        };
        let row = add(blocks, b, &mut sites);
        if p.address != 0 {
            before.insert(p.address, row);
        }
    }
    for i in events.iter().map(|i| i as usize) {
        let Some(e) = trace.events.get(i) else { continue };
        events_out.rank.push(rank);
        events_out.seq.push(i as i64);
        events_out.time.push(e.time_ns);
        events_out.device.push(dev);
        events_out.kind.push(e.kind.pytorch_name().to_owned());
        events_out.address.push(signed(e.address));
        events_out.size.push(signed(e.size_bytes));
        events_out.requested.push(signed(e.requested_bytes()));
        events_out.stream.push(signed(e.stream.raw()));
        events_out.site.push(site(trace, e.stack, &mut sites));
        match e.kind {
            EventKind::Alloc => {
                let alloc = Some((e.time_ns, i));
                let b = NewBlock {
                    address: e.address,
                    size: e.size_bytes,
                    requested: e.requested_bytes(),
                    alloc,
                    stack: e.stack,
                };
                let row = add(blocks, b, &mut sites);
                live.insert(e.address, row);
            }
            EventKind::FreeRequested | EventKind::FreeCompleted if e.ends_allocation(two_step) => {
                if let Some(row) = live.remove(&e.address).or_else(|| before.remove(&e.address)) {
                    blocks.free[row] = Some(e.time_ns);
                    blocks.free_seq[row] = Some(i as i64);
                }
            }
            _ => {}
        }
    }
}

/// The events and blocks tables.
fn event_and_block_tables(ranks: &[Rank]) -> [Table; 2] {
    let mut e = EventColumns::default();
    let mut b = BlockColumns::default();
    for rank in ranks {
        for device in rank.trace.devices() {
            device_rows(&rank.trace, rank.rank as i32, device, &mut e, &mut b);
        }
    }
    [
        Table {
            name: "events",
            columns: vec![
                ("rank", Values::I32(e.rank)),
                ("seq", Values::I64(e.seq)),
                ("time_ns", Values::I64(e.time)),
                ("device", Values::I32(e.device)),
                ("kind", Values::Str(e.kind)),
                ("address", Values::I64(e.address)),
                ("size_bytes", Values::I64(e.size)),
                ("requested_bytes", Values::I64(e.requested)),
                ("stream", Values::I64(e.stream)),
                ("site", Values::OptStr(e.site)),
            ],
        },
        Table {
            name: "blocks",
            columns: vec![
                ("rank", Values::I32(b.rank)),
                ("device", Values::I32(b.device)),
                ("address", Values::I64(b.address)),
                ("size_bytes", Values::I64(b.size)),
                ("requested_bytes", Values::I64(b.requested)),
                ("alloc_ns", Values::OptI64(b.alloc)),
                ("alloc_seq", Values::OptI64(b.alloc_seq)),
                ("free_ns", Values::OptI64(b.free)),
                ("free_seq", Values::OptI64(b.free_seq)),
                ("category", Values::Str(b.category)),
                ("evidence", Values::Str(b.evidence)),
                ("site", Values::OptStr(b.site)),
            ],
        },
    ]
}

/// The segments, annotations and tags tables.
fn state_tables(ranks: &[Rank]) -> [Table; 3] {
    let (mut s_rank, mut s_device, mut s_address, mut s_size, mut s_stream, mut s_pool, mut s_expandable) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut a_rank, mut a_kind, mut a_name, mut a_start, mut a_end, mut a_device) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut t_rank, mut t_device, mut t_address, mut t_time, mut t_category, mut t_name) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for rank in ranks {
        let (trace, number) = (&rank.trace, rank.rank as i32);
        for s in &trace.segments {
            s_rank.push(number);
            s_device.push(i32::from(s.device.0));
            s_address.push(signed(s.address));
            s_size.push(signed(s.size_bytes));
            s_stream.push(signed(s.stream));
            let pool = match s.pool {
                SegmentPool::Small => "small",
                SegmentPool::Large => "large",
                SegmentPool::Unknown => "unknown",
            };
            s_pool.push(pool.to_owned());
            s_expandable.push(s.is_expandable);
        }
        for a in &trace.annotations {
            a_rank.push(number);
            a_kind.push(a.kind.name().to_owned());
            a_name.push(trace.interner.resolve(a.name).to_owned());
            a_start.push(a.start_ns);
            a_end.push(a.end_ns);
            a_device.push(a.device.map(|d| i32::from(d.0)));
        }
        for t in &trace.tags {
            t_rank.push(number);
            t_device.push(i32::from(t.device.0));
            t_address.push(signed(t.address));
            t_time.push(t.time_ns);
            t_category.push(t.category.name().to_owned());
            t_name.push(trace.interner.resolve(t.name).to_owned());
        }
    }
    [
        Table {
            name: "segments",
            columns: vec![
                ("rank", Values::I32(s_rank)),
                ("device", Values::I32(s_device)),
                ("address", Values::I64(s_address)),
                ("size_bytes", Values::I64(s_size)),
                ("stream", Values::I64(s_stream)),
                ("pool", Values::Str(s_pool)),
                ("is_expandable", Values::Bool(s_expandable)),
            ],
        },
        Table {
            name: "annotations",
            columns: vec![
                ("rank", Values::I32(a_rank)),
                ("kind", Values::Str(a_kind)),
                ("name", Values::Str(a_name)),
                ("start_ns", Values::I64(a_start)),
                ("end_ns", Values::I64(a_end)),
                ("device", Values::OptI32(a_device)),
            ],
        },
        Table {
            name: "tags",
            columns: vec![
                ("rank", Values::I32(t_rank)),
                ("device", Values::I32(t_device)),
                ("address", Values::I64(t_address)),
                ("time_ns", Values::I64(t_time)),
                ("category", Values::Str(t_category)),
                ("name", Values::Str(t_name)),
            ],
        },
    ]
}

/// The tables of a run.
fn tables(ranks: &[Rank]) -> Vec<Table> {
    let mut out = vec![ranks_table(ranks)];
    out.extend(event_and_block_tables(ranks));
    out.extend(state_tables(ranks));
    out
}

pub use self::dataset::{Written, write};

/// The tables `write` makes, each a directory.
pub const TABLES: [&str; 6] = ["ranks", "events", "blocks", "segments", "annotations", "tags"];
