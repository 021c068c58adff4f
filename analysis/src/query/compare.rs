//! Two runs compared, with the gates evaluated: one trace with another, or a run of several
//! ranks with another, rank by rank.

use crate::diff::{self, Diff, RunPeak};

use super::gates::{self, Gate, GateResult, Unchecked};

/// Two runs compared and the gates checked on them.
#[derive(Clone, Debug)]
pub struct Compared {
    /// The comparison.
    pub diff: Diff,
    /// Each gate, in the order given.
    pub gates: Vec<GateResult>,
}

/// Compares `a` with `b` and checks `gates` on the comparison.
pub fn compare(a: RunPeak, b: RunPeak, gates: &[Gate]) -> Result<Compared, Unchecked> {
    let diff = diff::diff(a, b);
    let gates = gates.iter().map(|g| gates::check(g, &diff)).collect::<Result<_, _>>()?;
    Ok(Compared { diff, gates })
}

/// Two runs of several ranks compared, the ranks paired by number.
#[derive(Clone, Debug)]
pub struct RanksCompared {
    /// Each rank both runs have, in A's order, compared.
    pub pairs: Vec<(u32, Diff)>,
    /// Ranks only A has.
    pub only_in_a: Vec<u32>,
    /// Ranks only B has.
    pub only_in_b: Vec<u32>,
    /// Each gate at the rank where it came out worst (failed, then the most grown), and that rank.
    pub gates: Vec<(GateResult, u32)>,
    /// The index in `pairs` of the rank whose peak grew most (the lowest rank among equals).
    pub most_grown: usize,
    /// The highest rank peak of A and of B.
    pub highest_peak: (u64, u64),
}

impl RanksCompared {
    /// The rank whose peak grew most, and its comparison.
    pub fn most_grown(&self) -> (u32, &Diff) {
        let (rank, d) = &self.pairs[self.most_grown];
        (*rank, d)
    }
}

/// Why two runs of ranks could not be compared.
#[derive(Clone, Debug, PartialEq)]
pub enum RanksNotCompared {
    /// They have no rank in common (A's ranks, B's).
    NoRankInCommon(Vec<u32>, Vec<u32>),
    /// A gate cannot be checked on this rank.
    Gate(u32, Unchecked),
}

/// How much `d`'s allocated peak grew from A to B.
pub fn peak_growth(d: &Diff) -> i64 {
    d.b.peak_allocated_bytes as i64 - d.a.peak_allocated_bytes as i64
}

/// Compares the ranks of `a` with the same ranks of `b` and checks each gate on every rank.
pub fn compare_ranks(
    a: &[(u32, RunPeak)],
    b: &[(u32, RunPeak)],
    gates: &[Gate],
) -> Result<RanksCompared, RanksNotCompared> {
    let pairs: Vec<(u32, Diff)> = a
        .iter()
        .filter_map(|(rank, peak_a)| {
            let (_, peak_b) = b.iter().find(|(r, _)| r == rank)?;
            Some((*rank, diff::diff(peak_a.clone(), peak_b.clone())))
        })
        .collect();
    let only = |x: &[(u32, RunPeak)], y: &[(u32, RunPeak)]| -> Vec<u32> {
        x.iter().map(|r| r.0).filter(|rank| y.iter().all(|o| o.0 != *rank)).collect()
    };
    let ranks = |x: &[(u32, RunPeak)]| x.iter().map(|r| r.0).collect::<Vec<_>>();
    let Some(most_grown) = (0..pairs.len()).max_by_key(|&i| (peak_growth(&pairs[i].1), std::cmp::Reverse(pairs[i].0)))
    else {
        return Err(RanksNotCompared::NoRankInCommon(ranks(a), ranks(b)));
    };
    let mut results: Vec<(GateResult, u32)> = Vec::new();
    for g in gates {
        let mut checked = Vec::new();
        for (rank, d) in &pairs {
            let result = gates::check(g, d).map_err(|why| RanksNotCompared::Gate(*rank, why))?;
            checked.push((result, *rank));
        }
        let worst = checked.into_iter().min_by(|x, y| {
            let key = |r: &GateResult| (r.passed, r.actual_percent.map_or(f64::NEG_INFINITY, |p| -p));
            key(&x.0).partial_cmp(&key(&y.0)).unwrap_or(std::cmp::Ordering::Equal)
        });
        results.extend(worst);
    }
    let highest = |side: fn(&Diff) -> u64| pairs.iter().map(|(_, d)| side(d)).max().unwrap_or(0);
    let highest_peak = (highest(|d| d.a.peak_allocated_bytes), highest(|d| d.b.peak_allocated_bytes));
    Ok(RanksCompared { only_in_a: only(a, b), only_in_b: only(b, a), pairs, gates: results, most_grown, highest_peak })
}
