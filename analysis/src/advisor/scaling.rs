//! How the peak scales with the batch or the sequence, fitted over recordings of the same run
//! at several sizes, and the largest size whose peak fits under a target.
//!
//! The batch: what scales with it (activations, temporaries, inputs) is linear in it, the rest
//! (model state) is not, so the peak is `fixed + per_unit * batch`: two recordings fix it, more
//! are fitted by least squares. The sequence: attention's scores grow with its square, so with
//! three recordings or more the fit is `fixed + per_unit * s + per_unit_squared * s^2`; with two
//! it is linear, which grows slower than the truth past the longest recorded, so the length it
//! finds is an upper bound ("at most").

use serde::Serialize;

/// What a fit is over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Dimension {
    /// Samples per step.
    Batch,
    /// Tokens per sample.
    Sequence,
}

/// The peak as a function of the size, and the largest size under a target.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ScalingFit {
    /// What was varied.
    pub dimension: Dimension,
    /// Each recording's size and reserved peak, in bytes.
    pub points: Vec<(u64, u64)>,
    /// The fit's constant part, in bytes.
    pub fixed_bytes: f64,
    /// Bytes per unit of the size.
    pub per_unit_bytes: f64,
    /// Bytes per unit squared (sequence, three points or more; else 0).
    pub per_unit_squared_bytes: f64,
    /// The largest fitted point's distance from its recording, as a share of it (0 with as many
    /// points as the fit has terms).
    pub max_residual: f64,
    /// The target.
    pub target_bytes: u64,
    /// The largest size whose fitted peak fits under the target (none when not even 1 does).
    pub largest_that_fits: Option<u64>,
    /// Whether that size is an upper bound (a sequence fitted linearly), not a fit.
    pub at_most: bool,
}

impl ScalingFit {
    /// The fitted peak at `size`.
    pub fn peak_at(&self, size: f64) -> f64 {
        self.fixed_bytes + self.per_unit_bytes * size + self.per_unit_squared_bytes * size * size
    }
}

/// Why a fit cannot be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FitError {
    /// Fewer than two recordings.
    TooFew,
    /// Two recordings of the same size.
    SameSize(u64),
    /// The peak does not grow with the size.
    NotGrowing,
}

impl std::fmt::Display for FitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooFew => write!(f, "a fit needs two recordings or more"),
            Self::SameSize(size) => write!(f, "two recordings have the same size ({size})"),
            Self::NotGrowing => write!(f, "the peak does not grow with the size: nothing to fit"),
        }
    }
}

/// Solves the least-squares fit of `points` with `terms` powers (1, s, s^2): its coefficients.
fn least_squares(points: &[(f64, f64)], terms: usize) -> Option<[f64; 3]> {
    // The normal equations, A^T A x = A^T y, by Gaussian elimination with pivoting; sizes are
    // scaled to about 1 first, for the squares' sake.
    let scale = points.iter().map(|p| p.0).fold(1.0, f64::max);
    let mut m = [[0.0f64; 4]; 3];
    for &(s, y) in points {
        let x = s / scale;
        let powers = [1.0, x, x * x];
        for i in 0..terms {
            for j in 0..terms {
                m[i][j] += powers[i] * powers[j];
            }
            m[i][3] += powers[i] * y;
        }
    }
    for col in 0..terms {
        let pivot = (col..terms).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))?;
        m.swap(col, pivot);
        if m[col][col].abs() < 1e-12 {
            return None;
        }
        for row in 0..terms {
            if row != col {
                let factor = m[row][col] / m[col][col];
                let pivot_row = m[col];
                for (value, pivot) in m[row].iter_mut().zip(pivot_row).skip(col) {
                    *value -= factor * pivot;
                }
            }
        }
    }
    let mut x = [0.0; 3];
    for (i, value) in x.iter_mut().enumerate().take(terms) {
        *value = m[i][3] / m[i][i] / scale.powi(i as i32);
    }
    Some(x)
}

/// Fits the reserved peaks of recordings at several sizes, and finds the largest size under
/// `target_bytes`.
pub fn fit(dimension: Dimension, points: &[(u64, u64)], target_bytes: u64) -> Result<ScalingFit, FitError> {
    if points.len() < 2 {
        return Err(FitError::TooFew);
    }
    let mut sizes: Vec<u64> = points.iter().map(|p| p.0).collect();
    sizes.sort_unstable();
    if let Some(w) = sizes.windows(2).find(|w| w[0] == w[1]) {
        return Err(FitError::SameSize(w[0]));
    }
    let quadratic = dimension == Dimension::Sequence && points.len() >= 3;
    let terms = if quadratic { 3 } else { 2 };
    let xy: Vec<(f64, f64)> = points.iter().map(|&(s, p)| (s as f64, p as f64)).collect();
    let [fixed, per_unit, squared] = least_squares(&xy, terms).ok_or(FitError::NotGrowing)?;
    let mut out = ScalingFit {
        dimension,
        points: points.to_vec(),
        fixed_bytes: fixed,
        per_unit_bytes: per_unit,
        per_unit_squared_bytes: squared,
        max_residual: 0.0,
        target_bytes,
        largest_that_fits: None,
        at_most: dimension == Dimension::Sequence && !quadratic,
    };
    let largest = sizes.last().copied().unwrap_or(1) as f64;
    // Growing over the recorded sizes and past them.
    if out.peak_at(largest * 2.0) <= out.peak_at(largest) || per_unit + 2.0 * squared * largest <= 0.0 {
        return Err(FitError::NotGrowing);
    }
    out.max_residual = xy.iter().map(|&(s, p)| ((out.peak_at(s) - p) / p.max(1.0)).abs()).fold(0.0, f64::max);
    // The largest integer size with the fitted peak under the target: a doubling search, then
    // bisection, over a function that grows past the recorded sizes.
    // Whole bytes: a fit through the target's own recording lands on it, not a rounding above.
    let fits = |s: u64| out.peak_at(s as f64).round() <= target_bytes as f64;
    if fits(1) {
        let mut high = sizes.last().copied().unwrap_or(1).max(2);
        while fits(high) && high < 1 << 40 {
            high *= 2;
        }
        let mut low = 1;
        while high - low > 1 {
            let mid = low + (high - low) / 2;
            if fits(mid) {
                low = mid;
            } else {
                high = mid;
            }
        }
        out.largest_that_fits = Some(low);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-made: 100 fixed and 10 per sample; under 205 the largest batch is 10.
    #[test]
    fn a_linear_fit_through_two_batches() {
        let f = fit(Dimension::Batch, &[(8, 180), (4, 140)], 205).expect("fits");
        assert!((f.fixed_bytes - 100.0).abs() < 1e-6 && (f.per_unit_bytes - 10.0).abs() < 1e-6, "{f:?}");
        assert_eq!(f.largest_that_fits, Some(10));
        assert!(!f.at_most);
        assert!(f.max_residual < 1e-9);
    }

    /// 1000 + 2 s + 0.5 s^2 at 8, 16 and 32 is found exactly; under 2000 the longest is 42
    /// (1000 + 84 + 882 = 1966; 43: 2010.5). Linear through 16 and 32 only, it grows slower past
    /// them and says more: at most.
    #[test]
    fn a_sequence_is_quadratic_with_three_recordings_and_an_upper_bound_with_two() {
        let peak = |s: u64| 1000 + 2 * s + s * s / 2;
        let points: Vec<(u64, u64)> = [8, 16, 32].iter().map(|&s| (s, peak(s))).collect();
        let f = fit(Dimension::Sequence, &points, 2000).expect("fits");
        assert!((f.per_unit_squared_bytes - 0.5).abs() < 1e-6, "{f:?}");
        assert_eq!(f.largest_that_fits, Some(42));
        let two = fit(Dimension::Sequence, &points[1..], 2000).expect("fits");
        assert!(two.at_most);
        assert!(two.largest_that_fits.is_some_and(|s| s > 42), "{two:?}");
    }

    #[test]
    fn bad_fits_say_why() {
        assert_eq!(fit(Dimension::Batch, &[(8, 100)], 10), Err(FitError::TooFew));
        assert_eq!(fit(Dimension::Batch, &[(8, 100), (8, 120)], 10), Err(FitError::SameSize(8)));
        assert_eq!(fit(Dimension::Batch, &[(8, 100), (4, 120)], 10), Err(FitError::NotGrowing));
        // Not even one sample fits.
        assert_eq!(fit(Dimension::Batch, &[(8, 180), (4, 140)], 50).map(|f| f.largest_that_fits), Ok(None));
    }
}
