//! Which trace entries one device's list names, in its order: kept as runs of consecutive
//! indices where it can be.

/// The entries one device's list names, in its order: nearly always a few runs of consecutive
/// indices (the pieces of a pickle read in parallel each start a chunk of their own), kept as
/// runs; an index each would be 4 bytes an entry held through the build. A list that is not
/// (shuffled, or named over again) keeps every index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Listed {
    Runs(Vec<Run>),
    List(Vec<u32>),
}

/// Indices `first..first + len`, after `before` others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Run {
    first: u32,
    len: u32,
    before: usize,
}

/// Past this many runs a list keeps every index.
const MAX_RUNS: usize = 1024;

impl Default for Listed {
    fn default() -> Self {
        Self::Runs(Vec::new())
    }
}

impl Listed {
    pub(super) fn push(&mut self, index: u32) {
        self.push_run(index, 1);
    }

    /// Pushes `first..first + n`.
    pub(super) fn push_run(&mut self, first: u32, n: u32) {
        let n = n.min(u32::MAX - first);
        if n == 0 {
            return;
        }
        let total = self.len();
        match self {
            Self::Runs(runs) => {
                let count = runs.len();
                match runs.last_mut() {
                    Some(last)
                        if last.first.checked_add(last.len) == Some(first) && last.len.checked_add(n).is_some() =>
                    {
                        last.len += n;
                    }
                    _ if count < MAX_RUNS => runs.push(Run { first, len: n, before: total }),
                    _ => {
                        let mut list: Vec<u32> = self.iter().collect();
                        list.extend(first..first + n);
                        *self = Self::List(list);
                    }
                }
            }
            Self::List(list) => list.extend(first..first + n),
        }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Self::Runs(runs) => runs.last().map_or(0, |r| r.before + r.len as usize),
            Self::List(list) => list.len(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `k`th index named.
    pub(super) fn get(&self, k: usize) -> Option<u32> {
        match self {
            Self::Runs(runs) => {
                let run = runs.get(runs.partition_point(|r| r.before + r.len as usize <= k))?;
                Some(run.first + (k.checked_sub(run.before)? as u32))
            }
            Self::List(list) => list.get(k).copied(),
        }
    }

    pub(super) fn first(&self) -> Option<u32> {
        self.get(0)
    }

    /// Whether `lists`, one after another, name their entries in increasing order (a run at
    /// a time where they are runs).
    pub(super) fn all_sorted<'a>(lists: impl IntoIterator<Item = &'a Self>) -> bool {
        let mut last: Option<u32> = None;
        let mut in_order = |first: u32, end: u32| {
            let ok = last.is_none_or(|l| l <= first);
            last = Some(end);
            ok
        };
        lists.into_iter().all(|listed| match listed {
            Self::Runs(runs) => runs.iter().all(|r| in_order(r.first, r.first + (r.len - 1))),
            Self::List(list) => list.iter().all(|&i| in_order(i, i)),
        })
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        let (runs, list) = match self {
            Self::Runs(runs) => (&runs[..], &[][..]),
            Self::List(list) => (&[][..], &list[..]),
        };
        runs.iter().flat_map(|r| r.first..r.first + r.len).chain(list.iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_keeps_runs_and_answers_as_a_list_would() {
        // The whole's entries, then a piece's from the next chunk, then a shuffled tail.
        let named: Vec<u32> = (0..1000).chain(65_536..66_000).chain([7, 3, 70_000]).collect();
        let mut listed = Listed::default();
        listed.push_run(0, 600);
        (600..1000).for_each(|i| listed.push(i));
        listed.push_run(65_536, 464);
        [7, 3, 70_000].into_iter().for_each(|i| listed.push(i));
        let Listed::Runs(runs) = &listed else { panic!("a few runs should stay runs: {listed:?}") };
        assert_eq!(runs.len(), 5);
        assert_eq!(listed.len(), named.len());
        assert_eq!(listed.iter().collect::<Vec<_>>(), named);
        for (k, &index) in named.iter().enumerate() {
            assert_eq!(listed.get(k), Some(index), "k = {k}");
        }
        assert_eq!(listed.get(named.len()), None);
        assert_eq!(listed.first(), Some(0));
        assert!(Listed::default().is_empty() && Listed::default().first().is_none());

        // A list that is no runs (every other index) keeps each index past MAX_RUNS.
        let mut scattered = Listed::default();
        let every_other: Vec<u32> = (0..2 * MAX_RUNS as u32 + 10).map(|i| 2 * i).collect();
        every_other.iter().for_each(|&i| scattered.push(i));
        assert!(matches!(scattered, Listed::List(_)));
        assert_eq!(scattered.iter().collect::<Vec<_>>(), every_other);
        assert_eq!(scattered.get(MAX_RUNS + 3), Some(every_other[MAX_RUNS + 3]));

        // In order as a list would be: across runs, lists, and from one list to the next.
        let sorted = |lists: &[&Listed]| lists.iter().flat_map(|l| l.iter()).is_sorted();
        let tail = {
            let mut l = Listed::default();
            l.push_run(70_001, 5);
            l
        };
        for lists in [&[&listed][..], &[&scattered], &[&tail], &[&scattered, &tail], &[&tail, &scattered]] {
            assert_eq!(Listed::all_sorted(lists.iter().copied()), sorted(lists), "{lists:?}");
        }
        let mut ordered = Listed::default();
        ordered.push_run(0, 600);
        ordered.push_run(65_536, 10);
        ordered.push(70_000);
        assert!(Listed::all_sorted([&ordered, &tail]) && !Listed::all_sorted([&tail, &ordered]));
        assert!(Listed::all_sorted([&Listed::default(), &ordered]));

        // Indices at the top of the range do not wrap.
        let mut top = Listed::default();
        top.push_run(u32::MAX - 2, 10);
        assert_eq!(top.iter().collect::<Vec<_>>(), [u32::MAX - 2, u32::MAX - 1]);
    }
}
