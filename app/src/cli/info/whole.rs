//! `info`'s text of a GPU whole: every process on it as the driver accounted it, at the
//! device's high point, and the turns they took.

use std::io::Write;

use anyhow::Result;

use crate::query::whole::{Parts, ProcessOnDevice, WholeDevice};
use crate::units::{bytes, counted, offset_ns};

/// What a recorded process's share was made of: `PyTorch 350 MiB (activation 200 MiB, ...),
/// outside PyTorch 50 MiB (allocations 20 MiB, context and driver 30 MiB)`.
pub fn parts_text(parts: &Parts) -> String {
    let mut text = if parts.pytorch_reserved_bytes == 0 {
        "nothing in PyTorch's allocator".to_owned()
    } else {
        format!("PyTorch {}", bytes(parts.pytorch_reserved_bytes))
    };
    let shares = super::text::category_shares(&parts.pytorch_by_category);
    if !shares.is_empty() {
        text.push_str(&format!(" ({})", shares.join(", ")));
    }
    let outside = parts.outside_allocations_bytes + parts.not_allocations_bytes;
    if outside > 0 {
        text.push_str(&format!(
            ", outside PyTorch {} (allocations {}, the CUDA context and the driver's {})",
            bytes(outside),
            bytes(parts.outside_allocations_bytes),
            bytes(parts.not_allocations_bytes)
        ));
    }
    text
}

fn process_line(p: &ProcessOnDevice, start_ns: i64) -> String {
    let what = match &p.parts {
        Some(parts) => format!("recorded: {}", parts_text(parts)),
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
