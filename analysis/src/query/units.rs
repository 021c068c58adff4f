//! Human-readable units.

/// Bytes in binary units with three significant digits: `512 B`, `1.50 KiB`, `20.0 MiB`.
pub fn bytes(value: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if value < 1024 {
        return format!("{value} B");
    }
    let mut scaled = value as f64 / 1024.0;
    let mut unit = 0;
    while scaled >= 1024.0 && unit + 1 < UNITS.len() {
        scaled /= 1024.0;
        unit += 1;
    }
    let digits = if scaled >= 100.0 {
        0
    } else if scaled >= 10.0 {
        1
    } else {
        2
    };
    format!("{scaled:.digits$} {}", UNITS[unit])
}

/// Signed bytes, with an explicit sign.
pub fn signed_bytes(value: i64) -> String {
    let sign = if value < 0 { "-" } else { "+" };
    format!("{sign}{}", bytes(value.unsigned_abs()))
}

/// A time from the trace's origin, signed: `+1.250 s`, or `−0.400 s` for a sample taken before the
/// first event (the driver is sampled from the recording's start, before a program's first
/// allocation).
pub fn offset_ns(value: i64) -> String {
    if value < 0 { format!("−{}", duration_ns(value.saturating_neg())) } else { format!("+{}", duration_ns(value)) }
}

/// A duration in nanoseconds as seconds or milliseconds.
pub fn duration_ns(value: i64) -> String {
    let seconds = value as f64 / 1e9;
    if seconds.abs() >= 1.0 { format!("{seconds:.3} s") } else { format!("{:.3} ms", seconds * 1e3) }
}

/// A long time, roughly: "40 s", "3.2 min", "2.7 h", "5.1 days".
pub fn rough_duration(ns: i64) -> String {
    let s = ns as f64 / 1e9;
    if s < 90.0 {
        format!("{s:.0} s")
    } else if s < 5400.0 {
        format!("{:.1} min", s / 60.0)
    } else if s < 172_800.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{:.1} days", s / 86400.0)
    }
}

/// A duration for an axis tick, as short as it can be said: `0`, `250 µs`, `2 ms`, `1.5 s`.
pub fn tick_duration(ns: f64) -> String {
    let a = ns.abs();
    if a == 0.0 {
        "0".to_owned()
    } else if a >= 1e9 {
        format!("{} s", trim(ns / 1e9))
    } else if a >= 1e6 {
        format!("{} ms", trim(ns / 1e6))
    } else if a >= 1e3 {
        format!("{} µs", trim(ns / 1e3))
    } else {
        format!("{} ns", trim(ns))
    }
}

/// `v` with three decimals at most, trailing zeros dropped.
fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// Seconds with three decimals, without the unit: `12.345`.
pub fn seconds(ns: i64) -> String {
    format!("{:.3}", ns as f64 / 1e9)
}

/// An integer with thousands separators: `19,770`.
pub fn count(value: usize) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A count with the word that goes with it: `1 live block`, `2,048 live blocks`.
pub fn counted(value: usize, one: &str, many: &str) -> String {
    format!("{} {}", count(value), if value == 1 { one } else { many })
}

/// A change in percent (`+23.2%`), `new` for growth from nothing; past ±99,999% (growth from
/// almost nothing, where the percentage says nothing) it is capped.
pub fn percent(p: Option<f64>) -> String {
    match p {
        None => "new".to_owned(),
        Some(p) if p >= 100_000.0 => ">+99999%".to_owned(),
        Some(p) if p <= -100_000.0 => "<-99999%".to_owned(),
        Some(p) => format!("{p:+.1}%"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.50 KiB");
        assert_eq!(bytes(20 << 20), "20.0 MiB");
        assert_eq!(bytes(300 << 30), "300 GiB");
        assert_eq!(signed_bytes(-(2 << 20)), "-2.00 MiB");
        assert_eq!(count(19770), "19,770");
        assert_eq!(count(7), "7");
        assert_eq!(count(1_000_000), "1,000,000");
        assert_eq!(counted(1, "live block", "live blocks"), "1 live block");
        assert_eq!(counted(4000, "iteration", "iterations"), "4,000 iterations");
        assert_eq!(duration_ns(1_500_000_000), "1.500 s");
        assert_eq!(duration_ns(2_500_000), "2.500 ms");
        assert_eq!(percent(Some(23.24)), "+23.2%");
        assert_eq!(percent(Some(1_887_718_800.0)), ">+99999%");
        assert_eq!(percent(None), "new");
    }
}
