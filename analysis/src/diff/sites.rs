//! Allocations of two runs matched by their whole stack.
//!
//! A stack is compared by its frames' function, file and line (not by id: ids differ between
//! traces), keeping the frames a user reads: its Python frames when it has any (the call path
//! the program took; the native frames under them change with dtypes and kernels), else its
//! native frames past the allocator's plumbing, by short name; interpreter and recorder frames
//! are dropped as the app drops them. Stacks equal frame for frame are one allocation path in
//! both runs. Of those left, a path whose frames are equal but for line numbers (code that moved)
//! is paired when it is the only such one on each side. The rest are in one run only.
//!
//! What users see is grouped by the site (the program's line, with the library call beside it:
//! [`instant::allocation_site`]): a row per site,
//! with its paths under it when several call paths reach it, each told apart by the first
//! caller where they part.

use std::collections::BTreeMap;

use serde::Serialize;
use vramscope_trace_format::{StackId, Trace};

use crate::instant;
use crate::peak::LiveBlock;

/// What a site is called when its allocations recorded no stack.
pub const NO_STACK: &str = "(no stack recorded)";

/// Live bytes of one allocation path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct StackBytes {
    /// The frames compared, innermost first, as `function  file:line`.
    pub frames: Vec<String>,
    /// The same without line numbers (`function  file`), for code that moved.
    #[serde(skip)]
    pub relaxed: Vec<String>,
    /// Bytes live there.
    pub bytes: u64,
    /// Blocks live there.
    pub blocks: usize,
    /// Where it allocated, as sites are named ([`instant::allocation_site`]: the program's line,
    /// with the library call beside it); empty: its innermost frame.
    #[serde(skip)]
    pub site: String,
}

impl StackBytes {
    /// The site, as the app shows it.
    pub fn site(&self) -> &str {
        if self.site.is_empty() { self.frames.first().map_or(NO_STACK, String::as_str) } else { &self.site }
    }
}

/// The frames of `stack` that are compared across runs, with and without line numbers.
pub fn stack_key(trace: &Trace, stack: StackId) -> (Vec<String>, Vec<String>) {
    let interner = &trace.interner;
    let frames: Vec<&vramscope_trace_format::Frame> = interner
        .frames_of(stack)
        .iter()
        .filter_map(|&f| interner.frame_of(f))
        .filter(|f| !instant::is_noise_frame(interner.resolve(f.file), interner.resolve(f.function)))
        .collect();
    let python: Vec<_> = frames.iter().copied().filter(|f| interner.resolve(f.file).ends_with(".py")).collect();
    let chosen: Vec<_> = if python.is_empty() {
        frames.into_iter().filter(|f| !instant::is_plumbing_frame(interner.resolve(f.function))).collect()
    } else {
        python
    };
    let mut exact = Vec::with_capacity(chosen.len());
    let mut relaxed = Vec::with_capacity(chosen.len());
    for f in chosen {
        let (function, file) = (interner.resolve(f.function), interner.resolve(f.file));
        exact.push(instant::frame_label(function, file, f.line));
        relaxed.push(instant::frame_label(function, file, 0));
    }
    (exact, relaxed)
}

/// Live bytes by allocation path, largest first.
pub fn by_stack(trace: &Trace, blocks: impl IntoIterator<Item = LiveBlock>) -> Vec<StackBytes> {
    let mut by_id: BTreeMap<StackId, (u64, usize)> = BTreeMap::new();
    for b in blocks {
        let entry = by_id.entry(b.stack).or_insert((0, 0));
        entry.0 += b.size_bytes;
        entry.1 += 1;
    }
    let mut by_key: BTreeMap<Vec<String>, StackBytes> = BTreeMap::new();
    for (stack, (bytes, blocks)) in by_id {
        let (frames, relaxed) = stack_key(trace, stack);
        let entry = by_key.entry(frames.clone()).or_insert_with(|| StackBytes {
            frames,
            relaxed,
            bytes: 0,
            blocks: 0,
            site: if stack == StackId(0) { String::new() } else { instant::allocation_site(trace, stack, true) },
        });
        entry.bytes += bytes;
        entry.blocks += blocks;
    }
    let mut out: Vec<StackBytes> = by_key.into_values().collect();
    out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.frames.cmp(&b.frames)));
    out
}

/// One allocation path in both runs.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct PathDelta {
    /// Its frames (B's when it is in B), innermost first.
    pub stack: Vec<String>,
    /// The first caller where it parts from the site's other paths (none when it is the only one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// A's frames, when its code moved (the same frames at other lines).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moved_from: Option<Vec<String>>,
    /// Live bytes in A.
    pub a: u64,
    /// Live bytes in B.
    pub b: u64,
    /// B - A.
    pub delta: i64,
}

/// An allocation site in both runs: the paths that reach it, summed.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct SiteDelta {
    /// `function  file:line` (B's line when it moved).
    pub site: String,
    /// A's `function  file:line`, when the site's line moved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moved_from: Option<String>,
    /// Live bytes in A.
    pub a: u64,
    /// Live bytes in B.
    pub b: u64,
    /// B - A.
    pub delta: i64,
    /// Its paths, largest change first (one when a single call path reaches it).
    pub paths: Vec<PathDelta>,
}

fn signed(a: u64, b: u64) -> i64 {
    super::signed(a, b)
}

/// Every frame (as compared) of the allocations `stacks` made: what tells whether a line is
/// still in a run.
pub fn lines_of(trace: &Trace, stacks: impl IntoIterator<Item = StackId>) -> std::collections::BTreeSet<String> {
    let unique: std::collections::BTreeSet<StackId> = stacks.into_iter().collect();
    unique.into_iter().flat_map(|s| stack_key(trace, s).0).collect()
}

/// Pairs the paths of two runs (equal frames, then equal but for lines) and groups them by site.
/// `lines_a` and `lines_b` are every frame of each run's allocations ([`lines_of`]; empty: the
/// frames of `a` and `b`).
pub fn match_sites(
    a: &[StackBytes],
    b: &[StackBytes],
    lines_a: &std::collections::BTreeSet<String>,
    lines_b: &std::collections::BTreeSet<String>,
) -> Vec<SiteDelta> {
    let mut pairs: Vec<(Option<&StackBytes>, Option<&StackBytes>)> = Vec::new();
    let index_b: BTreeMap<&Vec<String>, &StackBytes> = b.iter().map(|s| (&s.frames, s)).collect();
    let mut matched_b: std::collections::BTreeSet<&Vec<String>> = std::collections::BTreeSet::new();
    let mut left_a: Vec<&StackBytes> = Vec::new();
    for s in a {
        match index_b.get(&s.frames) {
            Some(other) => {
                matched_b.insert(&s.frames);
                pairs.push((Some(s), Some(other)));
            }
            None => left_a.push(s),
        }
    }
    let left_b: Vec<&StackBytes> = b.iter().filter(|s| !matched_b.contains(&s.frames)).collect();
    // Moved code: frames equal but for lines, as many on each side, paired in the order of
    // their lines (with counts unequal, which went where cannot be told), and only where each
    // line that differs is gone from the other run (a line that is still there did not move).
    let (count_a, count_b) = (count_relaxed(&left_a), count_relaxed(&left_b));
    let lines = |list: &[StackBytes], all: &std::collections::BTreeSet<String>| -> std::collections::BTreeSet<String> {
        list.iter().flat_map(|s| s.frames.iter().cloned()).chain(all.iter().cloned()).collect()
    };
    let (lines_a, lines_b) = (lines(a, lines_a), lines(b, lines_b));
    let moved = |x: &StackBytes, y: &StackBytes| {
        x.frames
            .iter()
            .zip(&y.frames)
            .filter(|(p, q)| p != q)
            .all(|(p, q)| !lines_b.contains(p) && !lines_a.contains(q))
    };
    let mut moved_b: std::collections::BTreeSet<&Vec<String>> = std::collections::BTreeSet::new();
    let mut taken: BTreeMap<&Vec<String>, usize> = BTreeMap::new();
    let mut sorted_a = left_a.clone();
    sorted_a.sort_by(|x, y| x.frames.cmp(&y.frames));
    let mut sorted_b = left_b.clone();
    sorted_b.sort_by(|x, y| x.frames.cmp(&y.frames));
    for s in sorted_a {
        let pairs_up = !s.relaxed.is_empty() && count_a.get(&s.relaxed) == count_b.get(&s.relaxed);
        let partner = pairs_up
            .then(|| {
                let nth = taken.entry(&s.relaxed).or_insert(0);
                let found = sorted_b.iter().filter(|o| o.relaxed == s.relaxed).nth(*nth);
                *nth += 1;
                found
            })
            .flatten()
            .filter(|o| moved(s, o));
        match partner {
            Some(o) => {
                moved_b.insert(&o.frames);
                pairs.push((Some(s), Some(o)));
            }
            None => pairs.push((Some(s), None)),
        }
    }
    for s in left_b.into_iter().filter(|s| !moved_b.contains(&s.frames)) {
        pairs.push((None, Some(s)));
    }
    // Grouped by the innermost site users see.
    let mut sites: BTreeMap<String, SiteDelta> = BTreeMap::new();
    for (pa, pb) in pairs {
        let shown = pb.or(pa).map_or(NO_STACK.to_owned(), |s| s.site().to_owned());
        let (va, vb) = (pa.map_or(0, |s| s.bytes), pb.map_or(0, |s| s.bytes));
        let moved = match (pa, pb) {
            // Paired by frames equal but for lines.
            (Some(x), Some(y)) if x.frames != y.frames => Some(x),
            _ => None,
        };
        let entry = sites.entry(shown.clone()).or_insert_with(|| SiteDelta {
            site: shown,
            moved_from: None,
            a: 0,
            b: 0,
            delta: 0,
            paths: Vec::new(),
        });
        if let Some(m) = moved.filter(|m| m.site() != entry.site) {
            entry.moved_from = Some(m.site().to_owned());
        }
        entry.a += va;
        entry.b += vb;
        entry.paths.push(PathDelta {
            stack: pb.or(pa).map(|s| s.frames.clone()).unwrap_or_default(),
            via: None,
            moved_from: moved.map(|m| m.frames.clone()),
            a: va,
            b: vb,
            delta: signed(va, vb),
        });
    }
    let mut out: Vec<SiteDelta> = sites.into_values().collect();
    for site in &mut out {
        site.delta = signed(site.a, site.b);
        name_paths(&mut site.paths);
        site.paths.sort_by(|x, y| y.delta.unsigned_abs().cmp(&x.delta.unsigned_abs()).then(x.stack.cmp(&y.stack)));
    }
    out
}

fn count_relaxed<'a>(list: &[&'a StackBytes]) -> BTreeMap<&'a Vec<String>, usize> {
    let mut n: BTreeMap<&Vec<String>, usize> = BTreeMap::new();
    for s in list {
        *n.entry(&s.relaxed).or_insert(0) += 1;
    }
    n
}

/// Gives each of several paths to one site the caller where it parts from the path most like it
/// in the same run (B's paths among B's, A's among A's; those of the other run when it is the
/// only one): the frame after their longest common start.
fn name_paths(paths: &mut [PathDelta]) {
    if paths.len() < 2 {
        return;
    }
    let all: Vec<(Vec<String>, bool)> = paths.iter().map(|p| (p.stack.clone(), p.b > 0)).collect();
    for (k, p) in paths.iter_mut().enumerate() {
        let common = |same_run: bool| {
            all.iter()
                .enumerate()
                .filter(|(o, (_, in_b))| *o != k && (!same_run || *in_b == (p.b > 0)))
                .map(|(_, (other, _))| other.iter().zip(&p.stack).take_while(|(x, y)| x == y).count())
                .max()
        };
        let parts = common(true).or_else(|| common(false)).unwrap_or(0).max(1);
        p.via = Some(p.stack.get(parts).cloned().unwrap_or_else(|| "(called directly)".to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> std::collections::BTreeSet<String> {
        std::collections::BTreeSet::new()
    }

    fn path(frames: &[&str], bytes: u64) -> StackBytes {
        let frames: Vec<String> = frames.iter().map(|f| (*f).to_owned()).collect();
        let relaxed = frames.iter().map(|f| f.rsplit_once(':').map_or(f.clone(), |(x, _)| x.to_owned())).collect();
        StackBytes { frames, relaxed, bytes, blocks: 1, site: String::new() }
    }

    #[test]
    fn two_paths_to_one_site_are_two_paths_and_moved_code_is_paired() {
        let a = [
            path(&["einsum  functional.py:407", "attn  model.py:10", "train  train.py:5"], 100),
            path(&["einsum  functional.py:407", "mlp  model.py:20", "train  train.py:5"], 50),
            path(&["cast  model.py:30", "train  train.py:5"], 8),
            path(&["gone  old.py:1"], 4),
        ];
        let b = [
            path(&["einsum  functional.py:407", "attn  model.py:10", "train  train.py:5"], 300),
            path(&["einsum  functional.py:407", "mlp  model.py:20", "train  train.py:5"], 50),
            // The same call, two lines further down.
            path(&["cast  model.py:32", "train  train.py:5"], 8),
            path(&["new  new.py:1"], 16),
        ];
        let sites = match_sites(&a, &b, &none(), &none());
        let find = |s: &str| sites.iter().find(|x| x.site == s).expect(s);
        let einsum = find("einsum  functional.py:407");
        assert_eq!((einsum.a, einsum.b, einsum.delta), (150, 350, 200));
        assert_eq!(einsum.paths.len(), 2);
        assert_eq!(einsum.paths[0].via.as_deref(), Some("attn  model.py:10"));
        assert_eq!(einsum.paths[0].delta, 200);
        assert_eq!(einsum.paths[1].via.as_deref(), Some("mlp  model.py:20"));
        let cast = find("cast  model.py:32");
        assert_eq!(cast.moved_from.as_deref(), Some("cast  model.py:30"));
        assert_eq!((cast.a, cast.b), (8, 8));
        assert_eq!((find("gone  old.py:1").a, find("gone  old.py:1").b), (4, 0));
        assert_eq!((find("new  new.py:1").a, find("new  new.py:1").b), (0, 16));
        assert_eq!(sites.len(), 4);
    }

    #[test]
    fn moved_code_is_paired_in_the_order_of_its_lines_when_as_many_moved() {
        let a = [path(&["f  m.py:1", "g  m.py:9"], 4), path(&["f  m.py:2", "g  m.py:9"], 6)];
        let b = [path(&["f  m.py:3", "g  m.py:9"], 8), path(&["f  m.py:4", "g  m.py:9"], 2)];
        let sites = match_sites(&a, &b, &none(), &none());
        let first = sites.iter().find(|s| s.site == "f  m.py:3").expect("moved");
        assert_eq!((first.moved_from.as_deref(), first.a, first.b), (Some("f  m.py:1"), 4, 8));
        let second = sites.iter().find(|s| s.site == "f  m.py:4").expect("moved");
        assert_eq!((second.moved_from.as_deref(), second.a, second.b), (Some("f  m.py:2"), 6, 2));
        // A line still there in the other run did not move.
        let kept = [path(&["f  m.py:1", "g  m.py:9"], 4), path(&["f  m.py:5", "h  m.py:2"], 1)];
        let sites = match_sites(&kept, &[path(&["f  m.py:5", "g  m.py:9"], 4)], &none(), &none());
        assert!(sites.iter().all(|s| s.moved_from.is_none()), "{sites:?}");
        // Two paths in A, one in B: which one moved cannot be told.
        let sites = match_sites(&a, &b[..1], &none(), &none());
        assert!(sites.iter().all(|s| s.moved_from.is_none()));
        assert_eq!(sites.iter().map(|s| s.a + s.b).sum::<u64>(), 18);
    }
}
