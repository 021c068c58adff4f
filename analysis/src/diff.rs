//! Comparing two runs at their peaks: the peaks, bytes by category, and the allocation sites
//! that grew, shrank, appeared or disappeared, with what changed most (the front ends word it).
//!
//! Allocations are matched across runs by their allocation site (the innermost Python frame,
//! `function  file:line`, else the operator): stack ids differ between traces, and a site is
//! what a user changes.

use std::collections::BTreeMap;

use serde::Serialize;
use vramscope_trace_format::{DeviceId, Trace};

use super::instant;
use super::peak;
use super::summary::time_us;

/// One run at its allocated peak.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RunPeak {
    /// The file it was read from.
    pub file: String,
    /// The device compared (the one with the highest allocated peak).
    pub device: DeviceId,
    /// Its name (`cuda:0`, `hip:1`, `host`).
    pub label: String,
    /// Peak of allocated bytes.
    pub peak_allocated_bytes: u64,
    /// When it was first reached, µs on the trace's clock (null without a clock).
    pub peak_allocated_time_us: Option<i64>,
    /// The same on the trace's clock as it is (an event index without a clock).
    #[serde(skip)]
    pub peak_allocated_time_ns: i64,
    /// Peak of reserved bytes.
    pub peak_reserved_bytes: u64,
    /// Bytes by category at the allocated peak.
    pub categories_at_peak: BTreeMap<&'static str, u64>,
    /// Live bytes and blocks by allocation site at the peak, largest first.
    #[serde(skip)]
    pub sites: Vec<instant::SiteBytes>,
    /// Whether memory grows from one iteration to the next on the device (three or more).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub growth: Option<crate::growth::Growth>,
}

/// The device of `trace` with the highest allocated peak, and that peak's analysis.
pub fn run_peak(trace: &Trace, file: &str, device: Option<DeviceId>) -> RunPeak {
    let devices = trace.devices();
    let mut best: Option<(DeviceId, peak::Peaks)> = None;
    for d in devices.into_iter().filter(|d| device.is_none_or(|want| want == *d)) {
        let peaks = peak::peaks(trace, d);
        if best.as_ref().is_none_or(|(_, b)| peaks.allocated.bytes > b.allocated.bytes) {
            best = Some((d, peaks));
        }
    }
    let (device, peaks) = best.unwrap_or((device.unwrap_or(DeviceId(0)), peak::Peaks::default()));
    let at_peak = instant::instant(trace, device, peaks.allocated.event, peaks.allocated.time_ns);
    RunPeak {
        file: file.to_owned(),
        device,
        label: trace.metadata.device_label(device),
        peak_allocated_bytes: peaks.allocated.bytes,
        peak_allocated_time_us: time_us(trace, &peaks.allocated),
        peak_allocated_time_ns: peaks.allocated.time_ns,
        peak_reserved_bytes: peaks.reserved.bytes,
        categories_at_peak: at_peak.by_category.iter().map(|(c, v)| (c.name(), *v)).collect(),
        sites: instant::by_site(trace, &at_peak.blocks),
        growth: crate::growth::growth(trace, device),
    }
}

/// A category in both runs.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CategoryDelta {
    /// The category's name.
    pub category: &'static str,
    /// Bytes in A.
    pub a: u64,
    /// Bytes in B.
    pub b: u64,
    /// B - A.
    pub delta: i64,
    /// 100 * (B - A) / A; null when A is 0.
    pub percent: Option<f64>,
}

/// An allocation site in both runs.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SiteDelta {
    /// `function  file:line`.
    pub site: String,
    /// Live bytes at A's peak.
    pub a: u64,
    /// Live bytes at B's peak.
    pub b: u64,
    /// B - A.
    pub delta: i64,
}

/// Two runs compared.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Diff {
    /// The first run.
    pub a: RunPeak,
    /// The second run.
    pub b: RunPeak,
    /// Categories present in either, largest change first.
    pub categories: Vec<CategoryDelta>,
    /// Sites only in A, largest first.
    pub only_in_a: Vec<SiteDelta>,
    /// Sites only in B, largest first.
    pub only_in_b: Vec<SiteDelta>,
    /// Sites in both that grew, most first.
    pub grown: Vec<SiteDelta>,
    /// Sites in both that shrank, most first.
    pub shrunk: Vec<SiteDelta>,
    /// What changed most, for the sentence on top.
    pub headline: Headline,
}

/// What the sentence on top of a comparison says, as data.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Headline {
    /// B's allocated peak minus A's.
    pub delta_bytes: i64,
    /// A's allocated peak.
    pub peak_a_bytes: u64,
    /// The change as a percentage of A's peak (none when A's is 0).
    pub percent: Option<f64>,
    /// The category that moved most the same way as the peak, and by how much.
    pub mostly: Option<(&'static str, i64)>,
    /// Then the allocation site that moved most the same way.
    pub site: Option<String>,
}

fn signed(a: u64, b: u64) -> i64 {
    i64::try_from(b).unwrap_or(i64::MAX).saturating_sub(i64::try_from(a).unwrap_or(i64::MAX))
}

/// 100 * (b - a) / a, `None` when a is 0.
pub fn percent(a: u64, b: u64) -> Option<f64> {
    (a > 0).then(|| signed(a, b) as f64 * 100.0 / a as f64)
}

/// Compares two runs.
pub fn diff(a: RunPeak, b: RunPeak) -> Diff {
    let names: std::collections::BTreeSet<&'static str> =
        a.categories_at_peak.keys().chain(b.categories_at_peak.keys()).copied().collect();
    let mut categories: Vec<CategoryDelta> = names
        .into_iter()
        .map(|category| {
            let va = a.categories_at_peak.get(category).copied().unwrap_or(0);
            let vb = b.categories_at_peak.get(category).copied().unwrap_or(0);
            CategoryDelta { category, a: va, b: vb, delta: signed(va, vb), percent: percent(va, vb) }
        })
        .collect();
    categories.sort_by(|x, y| y.delta.unsigned_abs().cmp(&x.delta.unsigned_abs()).then(x.category.cmp(y.category)));

    let mut by_site: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for s in &a.sites {
        by_site.entry(&s.site).or_default().0 += s.bytes;
    }
    for s in &b.sites {
        by_site.entry(&s.site).or_default().1 += s.bytes;
    }
    let (mut only_in_a, mut only_in_b, mut grown, mut shrunk) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (site, (va, vb)) in by_site {
        let d = SiteDelta { site: site.to_owned(), a: va, b: vb, delta: signed(va, vb) };
        match (va, vb) {
            (_, 0) => only_in_a.push(d),
            (0, _) => only_in_b.push(d),
            _ if vb > va => grown.push(d),
            _ if vb < va => shrunk.push(d),
            _ => {}
        }
    }
    for list in [&mut only_in_a, &mut only_in_b, &mut grown, &mut shrunk] {
        list.sort_by(|x, y| y.delta.unsigned_abs().cmp(&x.delta.unsigned_abs()).then(x.site.cmp(&y.site)));
    }
    let headline = headline(&a, &b, &categories, [&only_in_a, &only_in_b, &grown, &shrunk]);
    Diff { a, b, categories, only_in_a, only_in_b, grown, shrunk, headline }
}

fn headline(a: &RunPeak, b: &RunPeak, categories: &[CategoryDelta], sites: [&Vec<SiteDelta>; 4]) -> Headline {
    let delta = signed(a.peak_allocated_bytes, b.peak_allocated_bytes);
    let same_way = |d: i64| (d < 0) == (delta < 0) && d != 0;
    let mostly = if delta == 0 { None } else { categories.iter().find(|c| same_way(c.delta)) };
    let site = mostly.and_then(|_| {
        sites.iter().flat_map(|list| list.iter()).filter(|s| same_way(s.delta)).max_by_key(|s| s.delta.unsigned_abs())
    });
    Headline {
        delta_bytes: delta,
        peak_a_bytes: a.peak_allocated_bytes,
        percent: percent(a.peak_allocated_bytes, b.peak_allocated_bytes),
        mostly: mostly.map(|c| (c.category, c.delta)),
        site: site.map(|s| s.site.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(peak: u64, categories: &[(&'static str, u64)], sites: &[(&str, u64)]) -> RunPeak {
        RunPeak {
            file: String::new(),
            device: DeviceId(0),
            label: "cuda:0".to_owned(),
            peak_allocated_bytes: peak,
            peak_allocated_time_us: None,
            peak_allocated_time_ns: 0,
            peak_reserved_bytes: peak,
            categories_at_peak: categories.iter().copied().collect(),
            sites: sites
                .iter()
                .map(|(s, b)| instant::SiteBytes { site: (*s).to_owned(), bytes: *b, blocks: 1 })
                .collect(),
            growth: None,
        }
    }

    #[test]
    fn hand_computed_diff() {
        let gib = 1u64 << 30;
        let a = run(
            20 * gib,
            &[("activation", 12 * gib), ("parameter", 8 * gib)],
            &[("forward  m.py:1", 10 * gib), ("attn  m.py:9", 2 * gib), ("init  m.py:3", 8 * gib)],
        );
        let b = run(
            16 * gib,
            &[("activation", 8 * gib), ("parameter", 8 * gib)],
            &[("forward  m.py:1", 6 * gib), ("init  m.py:3", 8 * gib), ("cast  m.py:5", 2 * gib)],
        );
        let d = diff(a, b);
        assert_eq!(d.categories[0].category, "activation");
        assert_eq!(d.categories[0].delta, -4 * gib as i64);
        assert_eq!(d.categories[0].percent, Some(-100.0 / 3.0));
        assert_eq!(d.categories[1].delta, 0);
        assert_eq!(d.only_in_a.iter().map(|s| s.site.as_str()).collect::<Vec<_>>(), ["attn  m.py:9"]);
        assert_eq!(d.only_in_b.iter().map(|s| s.site.as_str()).collect::<Vec<_>>(), ["cast  m.py:5"]);
        assert_eq!(d.shrunk[0].delta, -4 * gib as i64);
        assert!(d.grown.is_empty());
        assert_eq!(d.headline.delta_bytes, -4 * gib as i64);
        assert_eq!(d.headline.percent, Some(-20.0));
        assert_eq!(d.headline.mostly, Some(("activation", -4 * gib as i64)));
        assert_eq!(d.headline.site.as_deref(), Some("forward  m.py:1"));
    }
}
