//! The tables written as datasets: a directory per table, a file per rank in Hive's layout
//! (`blocks/rank=3/part-0.parquet`; `blocks/node=1/rank=3/part-0.parquet` when every rank's node
//! is known), so that engines read each table as one and prune by rank or node. The partition
//! columns are in the paths only (Spark refuses a column that is in both).
//!
//! Everything is written under a hidden directory beside the tables, which engines skip, and each
//! table's directory is moved into place once every rank is written: a table is whole or absent,
//! and one that was there is replaced only with `--force`, after the new one is complete.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, Int32Type, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

use super::{TABLES, Table, Values, tables};
use crate::query::run::Rank;

/// Rows per row group.
const ROW_GROUP_ROWS: usize = 1 << 20;

/// Each rank's file in its partition.
const PART: &str = "part-0.parquet";

fn present<T: Clone>(values: &[Option<T>]) -> (Vec<T>, Vec<i16>) {
    let levels = values.iter().map(|v| i16::from(v.is_some())).collect();
    (values.iter().flatten().cloned().collect(), levels)
}

fn bytes_of(values: &[String]) -> Vec<ByteArray> {
    values.iter().map(|s| ByteArray::from(s.as_bytes().to_vec())).collect()
}

/// Writes `table`'s rows, but for the columns named in `leave_out`, to a new file at `path`
/// (its directories made) in row groups of at most [`ROW_GROUP_ROWS`]; its bytes.
fn write_file(path: &Path, table: &Table, leave_out: &[&str]) -> Result<u64> {
    let cannot = || format!("cannot write {}", path.display());
    let columns: Vec<&(&str, Values)> = table.columns.iter().filter(|c| !leave_out.contains(&c.0)).collect();
    let rows = columns.first().map_or(0, |c| c.1.len());
    if columns.iter().any(|c| c.1.len() != rows) {
        bail!("{}: columns of different lengths", table.name);
    }
    let lines: Vec<String> = columns.iter().map(|(name, values)| values.schema(name)).collect();
    let schema = Arc::new(parse_message_type(&format!("message {} {{ {} }}", table.name, lines.join(" ")))?);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).with_context(cannot)?;
    }
    let file = File::options().write(true).create_new(true).open(path).with_context(cannot)?;
    let handle = file.try_clone().with_context(cannot)?;
    let props = Arc::new(
        WriterProperties::builder().set_created_by(format!("vramscope {}", env!("CARGO_PKG_VERSION"))).build(),
    );
    let mut writer = SerializedFileWriter::new(file, schema, props).with_context(cannot)?;
    let mut start = 0;
    while start < rows {
        let end = (start + ROW_GROUP_ROWS).min(rows);
        let mut group = writer.next_row_group().with_context(cannot)?;
        let mut values = columns.iter();
        while let Some(mut column) = group.next_column().with_context(cannot)? {
            let Some((_, values)) = values.next() else { bail!("{}: more columns than values", table.name) };
            let r = start..end;
            match values {
                Values::I32(v) => column.typed::<Int32Type>().write_batch(&v[r], None, None),
                Values::I64(v) => column.typed::<Int64Type>().write_batch(&v[r], None, None),
                Values::Bool(v) => column.typed::<BoolType>().write_batch(&v[r], None, None),
                Values::Str(v) => column.typed::<ByteArrayType>().write_batch(&bytes_of(&v[r]), None, None),
                Values::OptI32(v) => {
                    let (values, levels) = present(&v[r]);
                    column.typed::<Int32Type>().write_batch(&values, Some(&levels), None)
                }
                Values::OptI64(v) => {
                    let (values, levels) = present(&v[r]);
                    column.typed::<Int64Type>().write_batch(&values, Some(&levels), None)
                }
                Values::OptStr(v) => {
                    let (values, levels) = present(&v[r]);
                    column.typed::<ByteArrayType>().write_batch(&bytes_of(&values), Some(&levels), None)
                }
            }
            .with_context(cannot)?;
            column.close().with_context(cannot)?;
        }
        group.close().with_context(cannot)?;
        start = end;
    }
    writer.close().with_context(cannot)?;
    handle.sync_all().with_context(cannot)?;
    Ok(handle.metadata().with_context(cannot)?.len())
}

/// What [`write()`] wrote.
pub struct Written {
    /// Bytes, all files together.
    pub bytes: u64,
    /// Whether the tables are partitioned by node as well as by rank.
    pub by_node: bool,
}

/// Writes the run's tables into `dir` (made if missing), a rank at a time as `ranks` hands them
/// over (each rank's rows built, written and dropped before the next). An existing table is
/// replaced only with `force`.
pub fn write(
    dir: &Path,
    force: bool,
    ranks: impl FnOnce(&mut dyn FnMut(&Rank) -> Result<()>) -> Result<usize>,
) -> Result<Written> {
    if dir.exists() && !dir.is_dir() {
        bail!("{} is a file; give a directory to write the tables into", dir.display());
    }
    for name in TABLES {
        let path = dir.join(name);
        if path.exists() && !force {
            bail!("{} already exists; pass --force to replace it", path.display());
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot make the directory {}", dir.display()))?;
    // Removed, with whatever is left in it, however this ends.
    let staging = tempfile::Builder::new()
        .prefix(".vramscope-export-")
        .tempdir_in(dir)
        .with_context(|| format!("cannot write into {}", dir.display()))?;
    let root = staging.path();
    let mut bytes = 0;
    // Each rank's number and node, and its rows of the ranks table (written once it is known
    // whether every rank has a node).
    let mut written: Vec<(u32, Option<u32>, Table)> = Vec::new();
    ranks(&mut |rank| {
        if written.iter().any(|w| w.0 == rank.rank) {
            bail!("rank {} is twice in the run", rank.rank);
        }
        let mut tables = tables(std::slice::from_ref(rank)).into_iter();
        let Some(ranks_rows) = tables.next() else { bail!("no ranks table") };
        for table in tables {
            bytes += write_file(&partition(root, table.name, None, rank.rank).join(PART), &table, &["rank"])?;
        }
        let node = rank.trace.metadata.processes.first().and_then(|p| p.node);
        written.push((rank.rank, node, ranks_rows));
        Ok(())
    })?;
    let by_node = !written.is_empty() && written.iter().all(|w| w.1.is_some());
    let leave_out: &[&str] = if by_node { &["rank", "node"] } else { &["rank"] };
    for (rank, node, rows) in &written {
        let node = node.filter(|_| by_node);
        bytes += write_file(&partition(root, "ranks", node, *rank).join(PART), rows, leave_out)?;
        if let Some(node) = node {
            for name in TABLES.iter().filter(|&&t| t != "ranks") {
                let to = partition(root, name, Some(node), *rank);
                std::fs::create_dir_all(to.parent().unwrap_or(root))
                    .and_then(|()| std::fs::rename(partition(root, name, None, *rank), &to))
                    .with_context(|| format!("cannot write {}", to.display()))?;
            }
        }
    }
    for name in TABLES {
        let (made, into) = (root.join(name), dir.join(name));
        if !made.exists() {
            std::fs::create_dir(&made).with_context(|| format!("cannot write {}", made.display()))?;
        }
        if into.exists() {
            // Only with `force` (checked above); the old table goes once the new one is in place.
            std::fs::rename(&into, root.join(format!("{name}.replaced")))
                .with_context(|| format!("cannot replace {}", into.display()))?;
        }
        std::fs::rename(&made, &into).with_context(|| format!("cannot write {}", into.display()))?;
    }
    Ok(Written { bytes, by_node })
}

/// Where one rank's rows of a table go: `TABLE/[node=N/]rank=R`.
fn partition(root: &Path, table: &str, node: Option<u32>, rank: u32) -> PathBuf {
    let mut path = root.join(table);
    if let Some(node) = node {
        path.push(format!("node={node}"));
    }
    path.join(format!("rank={rank}"))
}

#[cfg(test)]
mod tests {
    use vramscope_trace_format::{Event, EventKind, ProcessInfo, Trace};

    use super::*;
    use crate::query::run::RankFrom;

    fn rank(rank: u32, node: Option<u32>) -> Rank {
        let mut trace = Trace::default();
        trace.metadata.processes.push(ProcessInfo { node, ..ProcessInfo::default() });
        trace.events.push(Event::new(EventKind::Alloc, 1, 0, 0x1000, 512));
        Rank { rank, from: RankFrom::Recorded, source: format!("rank{rank}"), trace }
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut out: Vec<String> =
            walk(dir).iter().map(|p| p.strip_prefix(dir).unwrap().display().to_string()).collect();
        out.sort();
        out
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() { out.extend(walk(&path)) } else { out.push(path) }
        }
        out
    }

    fn export(dir: &Path, force: bool, ranks: Vec<Rank>) -> Result<Written> {
        write(dir, force, |each| {
            for r in &ranks {
                each(r)?;
            }
            Ok(ranks.len())
        })
    }

    #[test]
    fn ranks_go_under_their_node_only_when_every_rank_has_one() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("t");
        let written = export(&out, false, vec![rank(0, Some(0)), rank(5, Some(1))]).unwrap();
        assert!(written.by_node && written.bytes > 0);
        let got = files(&out);
        assert_eq!(got.len(), 12);
        assert!(got.contains(&"blocks/node=1/rank=5/part-0.parquet".to_owned()), "{got:?}");
        assert!(got.contains(&"ranks/node=0/rank=0/part-0.parquet".to_owned()), "{got:?}");
        // One rank without a node: by rank alone, for every rank.
        let other = dir.path().join("u");
        assert!(!export(&other, false, vec![rank(0, Some(0)), rank(1, None)]).unwrap().by_node);
        assert!(files(&other).contains(&"events/rank=1/part-0.parquet".to_owned()));
    }

    #[test]
    fn a_table_there_is_kept_unless_forced_and_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("t");
        export(&out, false, vec![rank(0, None), rank(1, None)]).unwrap();
        let refused = export(&out, false, vec![rank(2, None)]).err().unwrap().to_string();
        assert!(refused.contains("already exists; pass --force"), "{refused}");
        assert_eq!(files(&out).len(), 12);
        export(&out, true, vec![rank(2, None)]).unwrap();
        // The old partitions are gone with the old tables, and nothing else is left in OUT.
        let got = files(&out);
        assert_eq!(got.len(), 6, "{got:?}");
        assert!(got.iter().all(|f| f.contains("/rank=2/")), "{got:?}");
        // A rank twice is refused, and leaves nothing behind.
        let twice = dir.path().join("v");
        assert!(export(&twice, false, vec![rank(3, None), rank(3, None)]).is_err());
        assert!(files(&twice).is_empty());
    }
}
