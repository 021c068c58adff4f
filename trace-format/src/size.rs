//! Sizes people type: the one reading of `512M`, `40GB` or `1.5 GiB` that every option, every
//! environment variable and the Python package share.
//!
//! A number of bytes, optionally followed by a unit, with or without a space, in any case:
//!
//! | unit | bytes |
//! |---|---|
//! | none, `B` | 1 |
//! | `K`, `KiB` | 2¹⁰ |
//! | `M`, `MiB` | 2²⁰ |
//! | `G`, `GiB` | 2³⁰ |
//! | `T`, `TiB` | 2⁴⁰ |
//! | `KB`, `MB`, `GB`, `TB` | 10³, 10⁶, 10⁹, 10¹² (as disks and cloud prices count) |
//!
//! A lone letter is binary because that is what PyTorch's own settings and `nvidia-smi` mean by
//! it (`max_split_size_mb`, `80G` of an H100); the SI units with a `B` are decimal, as the SI
//! says. The cases both faces must agree on are listed once, in `size_cases.txt` beside this
//! file; the Python package's parser is tested against the same list.

/// Parses a size as the module says. The number may have a fraction (`1.5GiB`); the result is
/// rounded down to whole bytes. Errors say what was wrong, in words.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let scale: u128 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        other => {
            return Err(format!(
                "{trimmed:?} is not a size: unknown unit {other:?} (use B, K or KiB, M or MiB, G or GiB, T or TiB, \
                 or the decimal KB, MB, GB, TB)"
            ));
        }
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if number.is_empty() || (whole.is_empty() && fraction.is_empty()) || !digits_only(fraction) {
        return Err(format!("{trimmed:?} is not a size such as 512MiB, 40GB or 1073741824"));
    }
    let too_large = || format!("{trimmed:?} is too large a size (at most 16 EiB)");
    // Exact integer arithmetic: a size of 2^63 bytes or a byte count of 20 digits stays exact.
    let whole_value: u128 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| too_large())? };
    let mut bytes = whole_value.checked_mul(scale).ok_or_else(too_large)?;
    // The fraction's digits beyond 19 cannot change a whole byte of any unit here.
    let fraction = &fraction[..fraction.len().min(19)];
    if !fraction.is_empty() {
        let numerator: u128 = fraction.parse().map_err(|_| too_large())?;
        let denominator = 10u128.pow(fraction.len() as u32);
        bytes = bytes.checked_add(numerator * scale / denominator).ok_or_else(too_large)?;
    }
    u64::try_from(bytes).map_err(|_| too_large())
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    /// Every case of the shared list: `TEXT<tab>BYTES`, or `TEXT<tab>error`.
    #[test]
    fn the_shared_cases_parse_as_listed() {
        let mut checked = 0;
        for line in include_str!("size_cases.txt").lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            let Some((text, expected)) = line.split_once('\t') else { panic!("bad case line {line:?}") };
            let got = parse_size(text);
            if expected == "error" {
                assert!(got.is_err(), "{text:?} should be refused, got {got:?}");
            } else {
                let want: u64 = expected.parse().expect("a byte count");
                assert_eq!(got, Ok(want), "{text:?}");
            }
            checked += 1;
        }
        assert!(checked >= 30, "only {checked} cases read");
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let e = parse_size("5X").unwrap_err();
        assert!(e.contains("unknown unit \"x\"") && e.contains("GiB"), "{e}");
        let e = parse_size("lots").unwrap_err();
        assert!(e.contains("not a size"), "{e}");
        assert!(parse_size("99999999999TB").unwrap_err().contains("too large"));
    }
}
