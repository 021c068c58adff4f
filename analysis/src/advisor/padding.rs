//! How a run's batches were padded, as the recorder read them from what its DataLoader gave (an
//! `attention_mask` beside the ids): each batch's length and its longest row without the
//! padding. Dynamic padding would have made each batch only as long as its longest row.

use vramscope_trace_format::Trace;

/// The batches' padding, when the recorder saw it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Padding {
    /// Each batch: when the DataLoader was asked for it, its length and its longest row (the
    /// first ones of a long run; `batches_seen` says how many there were).
    pub batches: Vec<(i64, u64, u64)>,
    /// The batch whose longest row fills its length most, over all of them: (length, longest).
    pub most: (u64, u64),
    /// How many batches said how they were padded.
    pub batches_seen: u64,
}

impl Padding {
    /// The trace's padding (`metadata.extra.batch_padding`), `None` when no batch said.
    pub fn of(trace: &Trace) -> Option<Self> {
        let extra = &trace.metadata.extra;
        let pair = |v: &serde_json::Value, i: usize| v.get(i).and_then(serde_json::Value::as_u64);
        let batches: Vec<(i64, u64, u64)> = extra
            .get("batch_padding")?
            .as_array()?
            .iter()
            .filter_map(|row| Some((row.get(0)?.as_i64()?, pair(row, 1)?, pair(row, 2)?)))
            .filter(|&(_, padded, longest)| padded > 0 && longest <= padded)
            .collect();
        let most = extra
            .get("batch_padding_most")
            .and_then(|v| Some((pair(v, 0)?, pair(v, 1)?)))
            .filter(|&(padded, longest)| padded > 0 && longest <= padded)?;
        let batches_seen =
            extra.get("batch_padding_count").and_then(serde_json::Value::as_u64).unwrap_or(0).max(batches.len() as u64);
        (!batches.is_empty()).then_some(Self { batches, most, batches_seen })
    }

    /// The fullest batch's longest row over its length (1: some batch fills its length).
    pub fn most_filled(&self) -> f64 {
        self.most.1 as f64 / self.most.0.max(1) as f64
    }

    /// What scales with the tokens at `t` shrinks to under dynamic padding: the longest row
    /// over the length of the last batch asked for by then (1 before the first); past the
    /// batches kept, the fullest batch's.
    pub fn filled_at(&self, t: i64) -> f64 {
        let i = self.batches.partition_point(|b| b.0 <= t);
        match i.checked_sub(1).map(|i| self.batches[i]) {
            None => 1.0,
            Some(_) if i == self.batches.len() && (self.batches.len() as u64) < self.batches_seen => self.most_filled(),
            Some((_, padded, longest)) => longest as f64 / padded.max(1) as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_instant_takes_the_last_batch_asked_for() {
        let p = Padding { batches: vec![(10, 128, 64), (20, 128, 96)], most: (128, 96), batches_seen: 2 };
        assert!((p.filled_at(5) - 1.0).abs() < 1e-12);
        assert!((p.filled_at(10) - 0.5).abs() < 1e-12);
        assert!((p.filled_at(25) - 0.75).abs() < 1e-12);
        assert!((p.most_filled() - 0.75).abs() < 1e-12);
        // Past the batches kept, the fullest batch's share.
        let long = Padding { batches_seen: 10, most: (128, 120), ..p };
        assert!((long.filled_at(25) - 120.0 / 128.0).abs() < 1e-12);
    }
}
