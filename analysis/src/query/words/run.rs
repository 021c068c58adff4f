//! A run of several ranks in words: its headline and the notes on how its ranks were numbered.

use crate::query::units::bytes;
use crate::run::{PhaseAt, RankFrom, RunNote, RunSummary};

/// A run's headline: how many ranks, which peaks highest, and how far the ranks differ.
pub fn run_headline(s: &RunSummary) -> String {
    let Some(worst) = s.ranks.iter().find(|r| r.rank == s.worst_rank) else { return String::new() };
    let phase = worst.peak_phase.map_or(String::new(), |p| format!(", in {}", run_phase(p)));
    // Of two, the other is the median: say which, and the ratio once.
    let compared = match s.ranks.iter().find(|r| r.rank != worst.rank).filter(|_| s.ranks.len() == 2) {
        Some(other) => format!("{:.1}% above rank {}", 100.0 * s.worst_over_median, other.rank),
        None => format!(
            "{:.1}% above the median rank; the highest peak is {} the lowest",
            100.0 * s.worst_over_median,
            times(s.imbalance)
        ),
    };
    let mut text = format!(
        "a run of {} ranks: rank {} peaks highest, {} allocated{phase}, {compared}",
        s.ranks.len(),
        worst.rank,
        bytes(worst.peak.peak_allocated_bytes),
    );
    if let Some(spread) = s.spread.first() {
        text.push_str(&format!(
            "; they differ most in {} (rank {} {}, rank {} {})",
            spread.category.name(),
            spread.max_rank,
            bytes(spread.max_bytes),
            spread.min_rank,
            bytes(spread.min_bytes)
        ));
    }
    if let Some(rank) = s.first_oom_rank {
        text.push_str(&format!("; rank {rank} ran out of memory first (by each rank's own clock)"));
    }
    if s.imbalance > UNLIKELY_SPREAD {
        text.push_str(
            "; ranks of one run seldom differ so much: if these files are of different runs, read them one by one",
        );
    }
    text
}

/// A ratio as "1.27x", or "48,799,784x" once the decimals say nothing.
fn times(ratio: f64) -> String {
    if ratio < 100.0 {
        format!("{ratio:.2}x")
    } else {
        // Saturates far beyond any ratio of two byte counts.
        format!("{}x", crate::query::units::count(ratio.round() as usize))
    }
}

/// A spread between ranks' peaks past which the files are doubted as one run's.
pub const UNLIKELY_SPREAD: f64 = 10.0;

/// The allocation sites the ranks differ most in at their peaks, a line each.
pub fn site_spread(s: &RunSummary) -> Vec<String> {
    s.site_spread
        .iter()
        .map(|site| {
            let least = if site.min_bytes == 0 { "nothing".to_owned() } else { bytes(site.min_bytes) };
            format!(
                "at {}: rank {} holds {}, rank {} {least} (+{})",
                site.site,
                site.max_rank,
                bytes(site.max_bytes),
                site.min_rank,
                bytes(site.max_bytes - site.min_bytes)
            )
        })
        .collect()
}

/// A phase in words.
pub fn run_phase(p: PhaseAt) -> &'static str {
    use PhaseAt;
    match p {
        PhaseAt::Forward => "forward",
        PhaseAt::Backward => "backward",
        PhaseAt::OptimizerStep => "optimizer step",
    }
}

/// What the reader of a run should know: guessed ranks, repeated ones, files left out.
pub fn run_notes(run_notes: &[RunNote], skipped: &[String]) -> Vec<String> {
    let mut notes = Vec::new();
    // Ranks of one recording that are in files of their own too (a recording's directory):
    // one line per recording.
    let mut repeated: Vec<(String, Vec<u32>)> = Vec::new();
    for note in run_notes {
        if let RunNote::DuplicateRank { rank, left_out, .. } = note
            && let Some(file) = left_out.strip_suffix(&format!(" (rank {rank})"))
        {
            match repeated.iter_mut().find(|(f, _)| f == file) {
                Some((_, ranks)) => ranks.push(*rank),
                None => repeated.push((file.to_owned(), vec![*rank])),
            }
        }
    }
    for (file, ranks) in &repeated {
        let ranks: Vec<String> = ranks.iter().map(u32::to_string).collect();
        notes.push(format!(
            "{file}: its ranks {} are in files of their own too, which are read instead",
            ranks.join(", ")
        ));
    }
    for note in run_notes {
        notes.push(match note {
            RunNote::DuplicateRank { rank, left_out, .. } if left_out.ends_with(&format!(" (rank {rank})")) => continue,
            RunNote::DuplicateRank { rank, kept, left_out } => {
                format!("rank {rank} is in {kept} and in {left_out}: {left_out} is left out")
            }
            RunNote::Guessed { from: RankFrom::FileName, ranks } => {
                format!("{ranks} ranks numbered from their files' names (rankN): the files do not say their rank")
            }
            RunNote::Guessed { ranks, .. } => {
                format!("{ranks} ranks numbered in the order the files were given: the files do not say their rank")
            }
        });
    }
    for file in skipped {
        notes.push(format!("left out, not a trace this reads: {file}"));
    }
    notes
}

/// Which rank of a run of several is looked at, and why: "a run of 2 ranks: advising rank 1,
/// the one that peaks highest (rank 0 1.00 GiB, rank 1 1.50 GiB)"; `doing` says what is done
/// with it (`advising`, `reporting`).
pub fn rank_chosen(doing: &str, chosen: &crate::run::RankChosen) -> String {
    let peaks: Vec<String> = chosen.peaks.iter().map(|(r, b)| format!("rank {r} {}", bytes(*b))).collect();
    format!(
        "a run of {} ranks: {doing} rank {}, the one that peaks highest ({})",
        chosen.peaks.len(),
        chosen.rank,
        peaks.join(", ")
    )
}

/// A process of a recording as every face names it: `rank 1 (pid 7)`, `rank 1`, `pid 7`, or by
/// its place (`process 2`) when it says neither.
pub fn process_name(process: Option<&vramscope_trace_format::ProcessInfo>, index: usize) -> String {
    match process.map(|p| (p.rank, p.pid)) {
        Some((Some(rank), Some(pid))) => format!("rank {rank} (pid {pid})"),
        Some((Some(rank), None)) => format!("rank {rank}"),
        Some((None, Some(pid))) => format!("pid {pid}"),
        _ => format!("process {index}"),
    }
}
