//! Importer of the PyTorch profiler's memory timeline exports.
//!
//! `export_memory_timeline(path.json)` writes `[times_us, sizes]`, where each row of `sizes` is
//! `[0, PARAMETER, OPTIMIZER_STATE, INPUT, TEMPORARY, ACTIVATION, GRADIENT, AUTOGRAD_DETAIL,
//! UNKNOWN]` in bytes after that instant. `export_memory_timeline_raw(path.raw.json.gz)` writes the
//! underlying records `[time_ns or -1, action, signed bytes, category]` with the categories in
//! the same order (without the leading 0) and -1 for memory that existed before profiling began.
//! Both become one counter series per category. The `.gz` container is taken off before this
//! module sees the data (`container.rs`).

use std::fmt;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, SeqAccess, Visitor};

use super::Imported;
use crate::error::{Error, Result};
use crate::memory::{Budget, Limit};
use crate::model::category::Category;
use crate::model::counter::{CounterKind, CounterSample, CounterSeries};
use crate::model::ids::{DeviceId, ProcessId};
use crate::model::interner::Interner;
use crate::model::metadata::{Clock, DeviceInfo, Metadata, ProcessInfo, SourceFormat};
use crate::model::trace::Trace;
use crate::progress::Progress;

/// The profiler's categories in the column order of its exports.
const COLUMNS: [Category; 8] = [
    Category::Parameter,
    Category::OptimizerState,
    Category::Input,
    Category::Temporary,
    Category::Activation,
    Category::Gradient,
    Category::AutogradDetail,
    Category::Unknown,
];

/// Whether JSON data looks like a memory timeline rather than a Chrome trace.
pub(crate) fn looks_like_timeline(data: &[u8]) -> bool {
    // `[[t, ...], [[0, ...], ...]]` or `[[t, a, b, c], ...]`: a list whose first item is a list.
    let mut rest = data.iter().copied().filter(|b| !b.is_ascii_whitespace());
    rest.next() == Some(b'[') && rest.next() == Some(b'[')
}

fn warning_device() -> String {
    "the memory timeline does not say which device it was exported for; it is shown as device 0".to_owned()
}

fn build(interner: Interner, mut series: Vec<CounterSeries>, samples: usize) -> Result<Imported> {
    if samples == 0 {
        return Err(Error::Structure("the memory timeline has no samples".to_owned()));
    }
    for s in &mut series {
        s.samples.sort_by_key(|c| c.time_ns);
    }
    let metadata = Metadata {
        source_format: SourceFormat::MemoryTimeline,
        clock: Clock::UnixNs,
        tool_version: String::new(),
        // The export does not say which device it was made for: not claimed to be CUDA.
        devices: vec![DeviceInfo { device: DeviceId(0), kind: Some("device".to_owned()), ..DeviceInfo::default() }],
        processes: vec![ProcessInfo::default()],
        allocator_settings: serde_json::Value::Null,
        extra: serde_json::Map::new(),
        range: None,
        unrecorded: Vec::new(),
    };
    Ok(Imported {
        trace: Trace { metadata, interner, counters: series, ..Trace::default() },
        warnings: vec![warning_device()],
        format: SourceFormat::MemoryTimeline,
        wrappers: Vec::new(),
    })
}

fn empty_series(interner: &mut Interner) -> Vec<CounterSeries> {
    COLUMNS
        .iter()
        .map(|&category| CounterSeries {
            kind: CounterKind::Category(category),
            name: interner.string(category.name()),
            device: DeviceId(0),
            process: ProcessId(0),
            samples: Vec::new(),
        })
        .collect()
}

/// A raw record as kept: its time, signed bytes and column. Records in a row at one time and
/// in one column are kept as one, their bytes summed (a file of a billion alike records keeps
/// one).
#[derive(Clone, Copy, Debug)]
struct RawRecord {
    time_ns: i64,
    bytes: i64,
    column: u8,
}

/// The export as parsed: `[times, rows]`, or the raw records.
enum Parsed {
    Timeline { times: Vec<i64>, rows: Vec<[i64; COLUMNS.len()]> },
    Raw(Vec<RawRecord>),
}

/// An integer as JSON writes it (an integral float is accepted).
fn integer<E: serde::de::Error>(value: f64) -> Result<i64, E> {
    if value.fract() == 0.0 && value.abs() < 9.2e18 {
        Ok(value as i64)
    } else {
        Err(E::custom(format!("{value} is not an integer")))
    }
}

/// `vec.push(item)`, the room for it counted against the read's budget first.
fn push<T, E: serde::de::Error>(budget: &Budget, vec: &mut Vec<T>, item: T, what: &str) -> Result<(), E> {
    budget.grow(vec, what).map_err(|e| E::custom(e.to_string()))?;
    vec.push(item);
    Ok(())
}

/// Reads a list of integers.
#[derive(Clone, Copy)]
struct Integers<'b>(&'b Budget);

impl<'de> DeserializeSeed<'de> for Integers<'_> {
    type Value = Vec<i64>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> std::result::Result<Vec<i64>, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Integers<'_> {
    type Value = Vec<i64>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of integers")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Vec<i64>, A::Error> {
        let mut out = Vec::new();
        while let Some(value) = seq.next_element::<Number>()? {
            push(self.0, &mut out, value.0, "a list of numbers")?;
        }
        Ok(out)
    }
}

/// One integer.
struct Number(i64);

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Number;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer")
            }
            fn visit_i64<E>(self, v: i64) -> std::result::Result<Number, E> {
                Ok(Number(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<Number, E> {
                i64::try_from(v).map(Number).map_err(|_| E::custom(format!("{v} is too large")))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<Number, E> {
                integer(v).map(Number)
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A raw record after the first two: exactly four integers, read without a list of its own.
struct RecordSeed(usize);

impl<'de> DeserializeSeed<'de> for RecordSeed {
    type Value = [i64; 4];
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> std::result::Result<[i64; 4], D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for RecordSeed {
    type Value = [i64; 4];
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "raw memory timeline record {} as [time, action, bytes, category]", self.0)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<[i64; 4], A::Error> {
        use serde::de::Error as _;
        let mut values = [0i64; 4];
        for value in &mut values {
            let Some(Number(v)) = seq.next_element::<Number>()? else {
                return Err(A::Error::custom(format!(
                    "raw memory timeline record {} is not [time, action, bytes, category]",
                    self.0
                )));
            };
            *value = v;
        }
        if seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
            return Err(A::Error::custom(format!(
                "raw memory timeline record {} is not [time, action, bytes, category]",
                self.0
            )));
        }
        Ok(values)
    }
}

/// The second item of the outer list: the rows of `[times, rows]`, or the second raw record.
enum Second {
    Rows(Vec<[i64; COLUMNS.len()]>),
    Record(Vec<i64>),
}

struct SecondSeed<'b>(&'b Budget);

impl<'de> DeserializeSeed<'de> for SecondSeed<'_> {
    type Value = Second;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> std::result::Result<Second, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

/// A row (a list: its first numbers, as many as a row of sizes has, and how many it had) or a
/// number, whichever comes. A row is read into place, without a list of its own: a timeline has
/// millions of them.
enum Item {
    Row([i64; COLUMNS.len() + 1], usize),
    Number(i64),
}

struct ItemSeed;

impl<'de> DeserializeSeed<'de> for ItemSeed {
    type Value = Item;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> std::result::Result<Item, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ItemSeed {
    type Value = Item;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a row or a number")
    }
    fn visit_i64<E>(self, v: i64) -> std::result::Result<Item, E> {
        Ok(Item::Number(v))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<Item, E> {
        i64::try_from(v).map(Item::Number).map_err(|_| E::custom(format!("{v} is too large")))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<Item, E> {
        integer(v).map(Item::Number)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Item, A::Error> {
        let mut values = [0i64; COLUMNS.len() + 1];
        let mut len = 0usize;
        while let Some(Number(v)) = seq.next_element::<Number>()? {
            if let Some(slot) = values.get_mut(len) {
                *slot = v;
            }
            len += 1;
        }
        Ok(Item::Row(values, len))
    }
}

impl<'de> Visitor<'de> for SecondSeed<'_> {
    type Value = Second;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of rows or a record of numbers")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Second, A::Error> {
        let mut rows = Vec::new();
        let mut numbers = Vec::new();
        while let Some(item) = seq.next_element_seed(ItemSeed)? {
            match item {
                Item::Row(row, len) if numbers.is_empty() => {
                    let i = rows.len();
                    if len == 0 {
                        return Err(serde::de::Error::custom(format!("sizes row {i} is empty")));
                    }
                    let [_, values @ ..] = row;
                    if len != row.len() {
                        return Err(serde::de::Error::custom(format!(
                            "sizes row {i} has {len} columns, expected {}",
                            row.len()
                        )));
                    }
                    push(self.0, &mut rows, values, "memory timeline rows")?;
                }
                Item::Number(v) if rows.is_empty() => push(self.0, &mut numbers, v, "a list of numbers")?,
                _ => return Err(serde::de::Error::custom("the second list mixes rows and numbers")),
            }
        }
        Ok(if numbers.is_empty() { Second::Rows(rows) } else { Second::Record(numbers) })
    }
}

/// Streams the outer list, keeping only numbers (never a tree of JSON values).
struct Outer<'b>(&'b Budget);

impl<'de> Visitor<'de> for Outer<'_> {
    type Value = Parsed;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[times, sizes] or [[t, action, bytes, category], ...]")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Parsed, A::Error> {
        use serde::de::Error as _;
        let Some(first) = seq.next_element_seed(Integers(self.0))? else {
            return Err(A::Error::custom("the list is empty"));
        };
        let second = seq.next_element_seed(SecondSeed(self.0))?;
        let mut records = Vec::new();
        match second {
            // `[times, rows]`, or a single raw record.
            None if first.len() == 4 => {
                keep_record(self.0, &mut records, &first, 0).map_err(A::Error::custom)?;
                Ok(Parsed::Raw(records))
            }
            None => Err(A::Error::custom("a list of one list of numbers is neither export")),
            Some(Second::Rows(rows)) => {
                if seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    return Err(A::Error::custom("[times, sizes] has more than two lists"));
                }
                Ok(Parsed::Timeline { times: first, rows })
            }
            Some(Second::Record(second)) => {
                keep_record(self.0, &mut records, &first, 0).map_err(A::Error::custom)?;
                keep_record(self.0, &mut records, &second, 1).map_err(A::Error::custom)?;
                let mut index = 2;
                while let Some(next) = seq.next_element_seed(RecordSeed(index))? {
                    keep_record(self.0, &mut records, &next, index).map_err(A::Error::custom)?;
                    index += 1;
                }
                Ok(Parsed::Raw(records))
            }
        }
    }
}

/// Checks raw record `i` (`[time, action, bytes, category]`) and keeps it: summed into the last
/// one kept when it has the same time and column.
fn keep_record(
    budget: &Budget,
    records: &mut Vec<RawRecord>,
    values: &[i64],
    i: usize,
) -> std::result::Result<(), String> {
    let &[time_ns, action, bytes, category] = values else {
        return Err(format!("raw memory timeline record {i} is not [time, action, bytes, category]"));
    };
    if !(1..=4).contains(&action) {
        return Err(format!("raw memory timeline record {i} has unknown action {action}"));
    }
    let column = u8::try_from(category)
        .ok()
        .filter(|&c| usize::from(c) < COLUMNS.len())
        .ok_or_else(|| format!("raw memory timeline record {i} has unknown category {category}"))?;
    if let Some(last) = records.last_mut().filter(|r| r.time_ns == time_ns && r.column == column) {
        last.bytes = last.bytes.saturating_add(bytes);
        return Ok(());
    }
    budget.grow(records, "the raw memory timeline's records").map_err(|e| e.to_string())?;
    records.push(RawRecord { time_ns, bytes, column });
    Ok(())
}

/// Reads the `.json` export (`[times_us, sizes]`), or the raw export's records (what
/// `raw.json.gz` holds), in one streaming pass.
pub fn import_json(data: &[u8], progress: &dyn Progress) -> Result<Imported> {
    import_from(serde_json::Deserializer::from_slice(data), data.len() as u64, progress)
}

/// Reads either export from a stream (what a compressed container holds, parsed as it is
/// inflated). `total` is the progress scale.
pub(crate) fn import_json_from(reader: impl std::io::Read, total: u64, progress: &dyn Progress) -> Result<Imported> {
    let reader = std::io::BufReader::with_capacity(1 << 16, reader);
    import_from(serde_json::Deserializer::from_reader(reader), total, progress)
}

fn import_from<'de, R: serde_json::de::Read<'de>>(
    mut deserializer: serde_json::Deserializer<R>,
    total: u64,
    progress: &dyn Progress,
) -> Result<Imported> {
    let budget = Budget::new(Limit::of_machine());
    let parsed =
        deserializer.deserialize_seq(Outer(&budget)).and_then(|p| deserializer.end().map(|()| p)).map_err(|e| {
            if let Some(memory) = budget.take_failure() {
                memory
            } else if e.is_data() {
                Error::Structure(format!(
                    "not a memory timeline ([times, sizes] or [[t, action, bytes, category], ...]): {e}"
                ))
            } else {
                Error::Json(e)
            }
        })?;
    if !progress.update(total, total) {
        return Err(Error::Cancelled);
    }
    match parsed {
        Parsed::Raw(records) => import_raw_records(records, &budget),
        Parsed::Timeline { times, rows } => {
            if times.len() != rows.len() {
                return Err(Error::Structure(format!(
                    "the memory timeline has {} times but {} rows of sizes",
                    times.len(),
                    rows.len()
                )));
            }
            let mut interner = Interner::new();
            let mut series = empty_series(&mut interner);
            for (time_us, row) in times.iter().zip(&rows) {
                for (s, &value) in series.iter_mut().zip(row) {
                    budget.grow(&mut s.samples, "the memory timeline's samples")?;
                    s.samples.push(CounterSample { time_ns: time_us.saturating_mul(1000), value });
                }
            }
            build(interner, series, times.len())
        }
    }
}

/// The raw records as a sample per category at each time it changes (and every category at the
/// first time, where each series starts).
fn import_raw_records(mut records: Vec<RawRecord>, budget: &Budget) -> Result<Imported> {
    // Memory that existed before profiling has time -1; like the profiler, date it at the first
    // real time.
    let first_time = records.iter().map(|r| r.time_ns).filter(|&t| t >= 0).min().unwrap_or(0);
    for r in &mut records {
        r.time_ns = r.time_ns.max(first_time);
    }
    // In place: what happens at one time is summed, so the order within it does not matter.
    records.sort_unstable_by_key(|r| r.time_ns);
    let mut interner = Interner::new();
    let mut series = empty_series(&mut interner);
    let mut totals = [0i64; COLUMNS.len()];
    let mut samples = 0usize;
    let mut i = 0;
    while let Some(time_ns) = records.get(i).map(|r| r.time_ns) {
        let mut changed = [samples == 0; COLUMNS.len()];
        while let Some(r) = records.get(i).filter(|r| r.time_ns == time_ns) {
            let column = usize::from(r.column);
            totals[column] = totals[column].saturating_add(r.bytes);
            changed[column] = true;
            i += 1;
        }
        for ((s, &total), _) in series.iter_mut().zip(&totals).zip(&changed).filter(|(_, c)| **c) {
            budget.grow(&mut s.samples, "the memory timeline's samples")?;
            s.samples.push(CounterSample { time_ns, value: total });
        }
        samples += 1;
    }
    build(interner, series, samples)
}
