//! The Chrome-trace importer on small hand-made traces.

use super::assemble::running_sum;
use super::fields::Num;
use super::*;

#[test]
fn the_running_sum_starts_at_the_least_memory_its_frees_imply() {
    // 100 bytes freed that the trace never saw allocated: at least 100 were alive at the start.
    let mut changes = vec![(30, 50), (10, -100), (20, 200)];
    let values: Vec<i64> = running_sum(&mut changes).iter().map(|s| s.value).collect();
    assert_eq!(values, [0, 200, 250]);
}

#[test]
fn extreme_sizes_saturate_instead_of_overflowing() {
    let mut changes = vec![(1, i64::MAX), (2, i64::MIN)];
    let values: Vec<i64> = running_sum(&mut changes).iter().map(|s| s.value).collect();
    assert_eq!(values, [i64::MAX, 0]);
    // The same through the importer, with two device types on one index.
    let trace = br#"{"traceEvents": [
        {"ph": "i", "name": "[memory]", "ts": 1, "args": {"Device Type": 1, "Device Id": 0, "Bytes": 9223372036854775807}},
        {"ph": "i", "name": "[memory]", "ts": 2, "args": {"Device Type": 1, "Device Id": 0, "Bytes": -9223372036854775808}},
        {"ph": "i", "name": "[memory]", "ts": 3, "args": {"Device Type": 12, "Device Id": 0, "Bytes": 512}},
        {"ph": "i", "name": "[memory]", "ts": 4, "args": {"Device Type": 12, "Device Id": 99999, "Bytes": 512}}]}"#;
    let imported = import_chrome_trace(trace, &crate::progress::NoProgress).unwrap_or_else(|e| panic!("{e}"));
    let labels: Vec<String> =
        imported.trace.devices().into_iter().map(|d| imported.trace.metadata.device_label(d)).collect();
    assert_eq!(labels.len(), 3, "{labels:?}");
    assert!(labels.contains(&"cuda:0".to_owned()) && labels.iter().filter(|l| l.starts_with("xpu:")).count() == 2);
    assert!(imported.warnings.iter().any(|w| w.contains("xpu:0 is shown as device")), "{:?}", imported.warnings);
}

#[test]
fn numbers_in_any_spelling() {
    assert_eq!(Num::parse("0x7f00"), Num::UInt(0x7f00));
    assert_eq!(Num::parse(" -12 "), Num::Int(-12));
    assert_eq!(Num::parse("1.5"), Num::Float(1.5));
    assert_eq!(Num::parse("x"), Num::Other);
    assert_eq!(Num::Float(3.0).as_i64(), Some(3));
    assert_eq!(Num::Float(3.5).as_i64(), None);
    assert_eq!(Num::UInt(u64::MAX).as_u64(), Some(u64::MAX));
}
