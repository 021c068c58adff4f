//! Where each event of a stream lies relative to a range: before, inside or after it.

use super::TraceRange;
use crate::error::{Error, Result};

/// Where an event lies relative to the range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Before,
    In,
    After,
}

/// Places the events of a stream, in the stream's order, relative to a range.
#[derive(Debug)]
pub(crate) struct Classifier {
    range: TraceRange,
    index: u64,
    first_ns: Option<i64>,
    last_ns: Option<i64>,
    /// The time of the first event kept, and of the last event seen before the range.
    first_in_ns: Option<i64>,
    last_before_ns: Option<i64>,
    last_in_ns: Option<i64>,
    /// The time of the first event after the range.
    first_after_ns: Option<i64>,
}

impl Classifier {
    pub(crate) fn new(range: TraceRange) -> Self {
        Self {
            range,
            index: 0,
            first_ns: None,
            last_ns: None,
            first_in_ns: None,
            last_before_ns: None,
            last_in_ns: None,
            first_after_ns: None,
        }
    }

    /// A classifier whose times count from `origin_ns` rather than from the stream's first event
    /// (a trace cut once already counts from its source's first event).
    pub(crate) fn with_origin(range: TraceRange, origin_ns: Option<i64>) -> Self {
        Self { first_ns: origin_ns, ..Self::new(range) }
    }

    /// When the stream's first event happened (or the origin it was given): what the range's
    /// times count from.
    pub(crate) fn origin_ns(&self) -> Option<i64> {
        self.first_ns
    }

    /// The range it places events in.
    pub(crate) fn range(&self) -> TraceRange {
        self.range
    }

    /// Where the next event of the stream lies; an event without a time has the last one seen.
    pub(crate) fn phase(&mut self, time_ns: Option<i64>) -> Phase {
        let index = self.index;
        self.index += 1;
        if time_ns.is_some() {
            self.last_ns = time_ns;
        }
        let time = self.last_ns;
        if let Some(t) = time {
            self.first_ns.get_or_insert(t);
        }
        let phase = match self.range {
            TraceRange::Events { from, to } => {
                if from.is_some_and(|f| index < f) {
                    Phase::Before
                } else if to.is_some_and(|t| index >= t) {
                    Phase::After
                } else {
                    Phase::In
                }
            }
            TraceRange::Time { from_ns, to_ns } => match (time, self.first_ns) {
                (Some(t), Some(first)) => {
                    let after_first = t.saturating_sub(first);
                    if from_ns.is_some_and(|f| after_first < f) {
                        Phase::Before
                    } else if to_ns.is_some_and(|e| after_first > e) {
                        Phase::After
                    } else {
                        Phase::In
                    }
                }
                // Nothing timed yet: [`Classifier::check`] refuses a time range over it.
                _ => Phase::In,
            },
        };
        match phase {
            Phase::Before => self.last_before_ns = time.or(self.last_before_ns),
            Phase::In => {
                if self.first_in_ns.is_none() {
                    self.first_in_ns = time;
                }
                self.last_in_ns = time.or(self.last_in_ns);
            }
            Phase::After => {
                if self.first_after_ns.is_none() {
                    self.first_after_ns = time;
                }
            }
        }
        phase
    }

    /// Refuses a time range over a stream without times.
    pub(crate) fn check(&self) -> Result<()> {
        if matches!(self.range, TraceRange::Time { .. }) && self.first_ns.is_none() && self.index > 0 {
            return Err(Error::Structure(format!(
                "this trace records no times, so a time range ({}) cannot be found in it: open a range of \
                 events instead (#N..#M)",
                self.range
            )));
        }
        Ok(())
    }

    /// When the range starts: its start when it names one, else its first event's time (or, if
    /// it kept none, the last time before it).
    pub(crate) fn start_ns(&self) -> Option<i64> {
        match self.range {
            TraceRange::Time { from_ns: Some(from), .. } => self.first_ns.map(|first| first.saturating_add(from)),
            _ => self.first_in_ns.or(self.last_before_ns),
        }
    }

    /// When the range ends, where the trace goes on past it (`cut`): its end when it names one,
    /// else just before the first event after it. `None`: the range runs to the trace's end.
    pub(crate) fn end_ns(&self, cut: bool) -> Option<i64> {
        if !cut {
            return None;
        }
        match self.range {
            TraceRange::Time { to_ns: Some(to), .. } => self.first_ns.map(|first| first.saturating_add(to)),
            _ => self.first_after_ns.map(|t| t.saturating_sub(1)).or(self.last_in_ns).or_else(|| self.start_ns()),
        }
    }

    /// Whether any event of the stream had a time.
    pub(crate) fn timed(&self) -> bool {
        self.first_ns.is_some()
    }
}
