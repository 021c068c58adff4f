//! `estimate`'s words: what a device needs on the GPU the program was estimated on.

use crate::query::units::bytes;

/// What a device needs with the CUDA context, of the GPU's memory, and whether it fits:
/// "needs 7.62 GiB with the CUDA context, of 140 GiB: fits, 132 GiB to spare".
pub fn estimate_verdict(needed_bytes: u64, total_bytes: u64, headroom_bytes: i64) -> String {
    let verdict = if headroom_bytes >= 0 {
        format!("fits, {} to spare", bytes(headroom_bytes.unsigned_abs()))
    } else {
        format!("does NOT fit: {} short", bytes(headroom_bytes.unsigned_abs()))
    };
    format!("needs {} with the CUDA context, of {}: {verdict}", bytes(needed_bytes), bytes(total_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_says_the_need_the_memory_and_what_is_left_or_missing() {
        assert_eq!(
            estimate_verdict(3 << 30, 8 << 30, 5 << 30),
            "needs 3.00 GiB with the CUDA context, of 8.00 GiB: fits, 5.00 GiB to spare"
        );
        assert_eq!(
            estimate_verdict(9 << 30, 8 << 30, -(1 << 30)),
            "needs 9.00 GiB with the CUDA context, of 8.00 GiB: does NOT fit: 1.00 GiB short"
        );
    }
}
