//! Times in results are ns on the trace's clock, like every time in the model; the JSON the CLI
//! prints has always given them in µs (floored), under names ending `_us`. These write one as the
//! other: `#[serde(rename = "..._us", serialize_with = "crate::micros::ns_as_us")]`.

/// Writes ns as µs, floored.
pub fn ns_as_us<S: serde::Serializer>(ns: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_i64(ns.div_euclid(1000))
}

/// Writes ns as µs, floored; null for none.
pub fn opt_ns_as_us<S: serde::Serializer>(ns: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
    match ns {
        Some(ns) => s.serialize_some(&ns.div_euclid(1000)),
        None => s.serialize_none(),
    }
}
