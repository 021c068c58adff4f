//! A part of a trace to open, as asked for and as kept in a trace opened in part
//! ([`crate::model::metadata::RangeInfo`]): `+2s..+3.5s` (time after the trace's first event)
//! or `#1000000..#2000000` (events by index). Opening the part is [`crate::range`]'s job.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A part of a trace to open.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema, Deserialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum TraceRange {
    /// Nanoseconds after the trace's first event; the end is included.
    Time {
        /// Where it starts (`None`: at the first event).
        from_ns: Option<i64>,
        /// Where it ends (`None`: at the last event).
        to_ns: Option<i64>,
    },
    /// Events by index from 0, in the order the file lists them (a snapshot's trace entries,
    /// device by device); the end is excluded.
    Events {
        /// The first event kept (`None`: from the first).
        from: Option<u64>,
        /// The first event after the range (`None`: to the last).
        to: Option<u64>,
    },
}

/// How [`TraceRange::from_str`] wants its text; said in every message about it.
pub const RANGE_SYNTAX: &str = "give START..END: +2s..+3.5s (time after the first event; ns, us, ms or s), \
                                or #1000000..#2000000 (events by index from 0); either end may be left out";

fn duration_text(ns: i64) -> String {
    const UNITS: [(i64, &str); 3] = [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")];
    for (scale, unit) in UNITS {
        if ns % scale == 0 {
            return format!("{}{unit}", ns / scale);
        }
    }
    // Exact: as many decimals as the unit has nanoseconds' digits.
    for ((scale, unit), decimals) in UNITS.into_iter().zip([9usize, 6, 3]) {
        if ns.unsigned_abs() >= scale.unsigned_abs() {
            let fraction = format!("{:0decimals$}", (ns % scale).unsigned_abs());
            return format!("{}.{}{unit}", ns / scale, fraction.trim_end_matches('0'));
        }
    }
    format!("{ns}ns")
}

impl fmt::Display for TraceRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Time { from_ns, to_ns } => {
                if let Some(from) = from_ns {
                    write!(f, "+{}", duration_text(from))?;
                }
                f.write_str("..")?;
                if let Some(to) = to_ns {
                    write!(f, "+{}", duration_text(to))?;
                }
            }
            Self::Events { from, to } => {
                if let Some(from) = from {
                    write!(f, "#{from}")?;
                }
                f.write_str("..")?;
                if let Some(to) = to {
                    write!(f, "#{to}")?;
                }
            }
        }
        Ok(())
    }
}

/// One end of a range as written.
enum End {
    Open,
    Time(i64),
    Event(u64),
}

fn parse_end(text: &str) -> Result<End, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(End::Open);
    }
    if let Some(index) = text.strip_prefix('#') {
        let digits: String = index.chars().filter(|&c| c != '_' && c != ',').collect();
        return digits
            .parse::<u64>()
            .map(End::Event)
            .map_err(|_| format!("{text:?} is not an event index (#N, N from 0)"));
    }
    if text.starts_with('-') {
        return Err(format!("{text:?}: a range starts at or after the trace's first event"));
    }
    let duration = text.strip_prefix('+').unwrap_or(text);
    let split = duration.find(|c: char| c.is_alphabetic() || c == 'µ').unwrap_or(duration.len());
    let (number, unit) = duration.split_at(split);
    let scale = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "" if text.starts_with('+') => 1e9,
        "" => return Err(format!("{text:?} has no unit: write +{text}s for time, or #{text} for an event index")),
        _ => return Err(format!("unknown unit {unit:?} in {text:?}: use ns, us, ms or s")),
    };
    let value: f64 = number.parse().map_err(|_| format!("{text:?} is not a duration (+NUMBER[ns|us|ms|s])"))?;
    let ns = value * scale;
    if !ns.is_finite() || !(0.0..9.2e18).contains(&ns) {
        return Err(format!("{text:?} is not a duration this trace can have"));
    }
    Ok(End::Time(ns as i64))
}

impl FromStr for TraceRange {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let Some((from, to)) = text.split_once("..") else {
            return Err(format!("{text:?} is not a range: {RANGE_SYNTAX}"));
        };
        let range = match (parse_end(from)?, parse_end(to)?) {
            (End::Open, End::Open) => {
                return Err("'..' is the whole trace: leave the range out to open all of it".to_owned());
            }
            (End::Time(from), End::Time(to)) => Self::Time { from_ns: Some(from), to_ns: Some(to) },
            (End::Time(from), End::Open) => Self::Time { from_ns: Some(from), to_ns: None },
            (End::Open, End::Time(to)) => Self::Time { from_ns: None, to_ns: Some(to) },
            (End::Event(from), End::Event(to)) => Self::Events { from: Some(from), to: Some(to) },
            (End::Event(from), End::Open) => Self::Events { from: Some(from), to: None },
            (End::Open, End::Event(to)) => Self::Events { from: None, to: Some(to) },
            _ => {
                return Err(format!("{text:?} mixes a time and an event index: give both ends as times or both as #N"));
            }
        };
        let empty = match range {
            Self::Time { from_ns: Some(from), to_ns: Some(to) } => to < from,
            Self::Events { from, to: Some(to) } => to <= from.unwrap_or(0),
            _ => false,
        };
        if empty {
            return Err(format!("{text:?} ends before it starts"));
        }
        Ok(range)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_read_and_written_back() {
        let cases = [
            ("+2s..+3.5s", "+2s..+3500ms"),
            ("2s..3500ms", "+2s..+3500ms"),
            ("+40ms..", "+40ms.."),
            ("..+1.25s", "..+1250ms"),
            ("#1000..#2,000", "#1000..#2000"),
            ("#5..", "#5.."),
            ("..#1_000_000", "..#1000000"),
            ("+0.5us..+7ns", "+500ns..+7ns"),
        ];
        for (text, shown) in cases {
            let range: Result<TraceRange, String> = text.parse();
            match text {
                "+0.5us..+7ns" => assert!(range.is_err(), "{text} ends before it starts"),
                _ => assert_eq!(range.map(|r| r.to_string()).as_deref(), Ok(shown), "{text}"),
            }
        }
        for bad in ["+2s", "..", "#5..+2s", "2..3", "+2x..", "#a..", "-1s..", "#5..#5", "..#0", "+NaNs..", "+1e30s.."] {
            let range: Result<TraceRange, String> = bad.parse();
            assert!(range.is_err(), "{bad} should be refused");
        }
        assert_eq!(duration_text(1_500), "1.5us");
        assert_eq!(duration_text(1_500_000_001), "1.500000001s");
        assert_eq!(duration_text(999), "999ns");
        // A range read from a file is shown whatever it holds.
        assert_eq!(duration_text(i64::MIN), "-9223372036.854775808s");
    }
}
