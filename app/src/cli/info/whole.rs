//! `info`'s text of a GPU whole: every process on it as the driver accounted it, at the
//! device's high point, and the turns they took.

use std::io::Write;

use anyhow::Result;

use crate::query::whole::{ProcessOnDevice, WholeDevice};
use crate::units::{bytes, counted, offset_ns};

fn process_line(p: &ProcessOnDevice, start_ns: i64) -> String {
    let what = match &p.parts {
        Some(parts) => format!("recorded: {}", crate::words::process_parts(parts)),
        None => "not recorded".to_owned(),
    };
    let most = if p.peak_bytes > p.at_high_bytes {
        format!("; its most {} at {}", bytes(p.peak_bytes), offset_ns(p.peak_time_ns - start_ns))
    } else {
        String::new()
    };
    format!("{} {}, {what}{most}", p.name, bytes(p.at_high_bytes))
}

/// Writes `whole` as `info` says it.
pub fn write_whole(start_ns: i64, whole: &WholeDevice, out: &mut dyn Write) -> Result<()> {
    writeln!(out)?;
    let capacity = whole.capacity_bytes.map(|c| format!(" of {}", bytes(c))).unwrap_or_default();
    writeln!(
        out,
        "{} whole — {} on it, {}{capacity} used at its highest, at {} (the driver's account, {})",
        whole.label,
        counted(whole.processes.len(), "process", "processes"),
        bytes(whole.high_bytes),
        offset_ns(whole.high_time_ns - start_ns),
        counted(whole.samples, "sample", "samples"),
    )?;
    for p in &whole.processes {
        for (i, line) in super::text::wrap(&process_line(p, start_ns), 92).iter().enumerate() {
            writeln!(out, "  {}{line}", if i == 0 { "" } else { "    " })?;
        }
    }
    if !whole.turns.is_empty() {
        let turns: Vec<String> = whole
            .turns
            .iter()
            .map(|t| {
                format!(
                    "{} {} to {} (its most {})",
                    t.name,
                    offset_ns(t.from_ns - start_ns),
                    offset_ns(t.to_ns - start_ns),
                    bytes(t.peak_bytes)
                )
            })
            .collect();
        let text = format!("in turns: {}", turns.join(", then "));
        for (i, line) in super::text::wrap(&text, 92).iter().enumerate() {
            writeln!(out, "  {}{line}", if i == 0 { "" } else { "    " })?;
        }
    }
    Ok(())
}
