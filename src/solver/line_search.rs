//! Backtracking line search that never increases the objective (Armijo), evaluating
//! candidates in batches the backend chooses.

/// Armijo's sufficient-decrease constant.
pub(crate) const ARMIJO: f64 = 1e-4;
/// Doublings tried past the full step when extrapolating.
const MAX_DOUBLINGS: usize = 10;
/// Halvings before giving up: 2^-40 of a step is below any meaningful change.
const MAX_HALVINGS: usize = 40;
/// Multiple of the noise floor of `G` below which a predicted decrease is not resolvable,
/// and up to which a rise of `G` counts as flat. The floor is a first-order estimate, so an
/// order of magnitude of margin.
pub(crate) const NOISE_MARGIN: f64 = 10.0;

/// Outcome of a line search along the backend's current direction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Step {
    /// Sufficient decrease at this step length, with the new objective value.
    Accepted { alpha: f64, value: f64 },
    /// No decrease is resolvable: the full step changes `G` only at round-off.
    RoundOff { value: f64 },
    /// No acceptable step.
    Failed,
}

/// Searches `alpha = 1, 1/2, 1/4, ...` for `G(x + alpha d) <= G(x) + c alpha slope`.
///
/// Near a tight tolerance the predicted decrease of the full step falls below the f64
/// resolution of `G`, and Armijo then compares noise: it rejects the (good) full Newton step
/// and accepts meaningless tiny ones. In that regime the full step is taken if `G` stays flat
/// to round-off; the caller keeps it only while the gradient norm keeps falling.
///
/// With `extrapolate`, an accepted full step is followed by `alpha = 2, 4, ...` while the
/// objective keeps falling: a projected Hessian overestimates curvature along directions the
/// true Hessian bends down, and the full step then undershoots badly.
///
/// `objectives` evaluates `G(x + alpha d)` for a batch of step lengths; `batch` is how many
/// are worth evaluating together. `known` holds `(alpha, G)` pairs the backend already
/// evaluated along this direction; they are used instead of evaluating again.
#[allow(clippy::too_many_arguments)]
pub(crate) fn search(
    objectives: &mut dyn FnMut(&[f64]) -> Vec<f64>,
    batch: usize,
    value: f64,
    slope: f64,
    noise_floor: f64,
    extrapolate: bool,
    known: &[(f64, f64)],
) -> Step {
    // Rounding x moves G by the noise floor; rounding G's own sum adds an ulp or so of G.
    let noise = NOISE_MARGIN * (noise_floor + f64::EPSILON * value.abs());
    if -slope <= noise {
        let full = evaluate(objectives, known, &[1.0])[0];
        return if full <= value + noise { Step::RoundOff { value: full } } else { Step::Failed };
    }
    let batch = batch.max(1);
    let mut alpha: f64 = 1.0;
    let mut tried = 0;
    while tried < MAX_HALVINGS {
        let alphas: Vec<f64> = first_batch(batch).iter().map(|k| alpha * k).collect();
        let values = evaluate(objectives, known, &alphas);
        for (&a, &v) in alphas.iter().zip(&values) {
            // Strictly lower too: once `ARMIJO a slope` is below the resolution of `G`, the
            // sum rounds to `G` and an unchanged objective would pass, so a search in the
            // noise would take vanishing steps that change nothing, iteration after iteration.
            if v.is_finite() && v <= value + ARMIJO * a * slope && v < value {
                if extrapolate && a == 1.0 {
                    return extend(objectives, batch, known, value, slope, v);
                }
                return Step::Accepted { alpha: a, value: v };
            }
        }
        alpha *= 0.5f64.powi(batch as i32);
        tried += batch;
    }
    Step::Failed
}

/// The step lengths of the first batch of `batch` candidates: `1, 1/2, 1/4, ...`.
pub(crate) fn first_batch(batch: usize) -> Vec<f64> {
    (0..batch.max(1)).map(|k| 0.5f64.powi(k as i32)).collect()
}

/// `G` at `alphas`: from `known` when it has them all, else from the backend.
fn evaluate(
    objectives: &mut dyn FnMut(&[f64]) -> Vec<f64>,
    known: &[(f64, f64)],
    alphas: &[f64],
) -> Vec<f64> {
    let found: Option<Vec<f64>> =
        alphas.iter().map(|a| known.iter().find(|(k, _)| k == a).map(|&(_, v)| v)).collect();
    found.unwrap_or_else(|| objectives(alphas))
}

/// Doubles an accepted full step while the objective keeps decreasing sufficiently, trying
/// the doublings in batches the backend chooses.
fn extend(
    objectives: &mut dyn FnMut(&[f64]) -> Vec<f64>,
    batch: usize,
    known: &[(f64, f64)],
    value: f64,
    slope: f64,
    full: f64,
) -> Step {
    let (mut best_alpha, mut best_value) = (1.0, full);
    let mut tried = 0;
    while tried < MAX_DOUBLINGS {
        // The first doubling alone when the backend evaluated it ahead.
        let ahead = known.iter().any(|&(a, _)| a == 2.0 * best_alpha);
        let count = if ahead { 1 } else { batch.min(MAX_DOUBLINGS - tried) };
        let alphas: Vec<f64> = (1..=count).map(|k| best_alpha * 2f64.powi(k as i32)).collect();
        let values = evaluate(objectives, known, &alphas);
        tried += alphas.len();
        for (&alpha, &v) in alphas.iter().zip(&values) {
            if !(v.is_finite() && v < best_value && v <= value + ARMIJO * alpha * slope) {
                return Step::Accepted { alpha: best_alpha, value: best_value };
            }
            (best_alpha, best_value) = (alpha, v);
        }
    }
    Step::Accepted { alpha: best_alpha, value: best_value }
}

#[cfg(test)]
mod tests {
    use super::{Step, search};

    /// Where `G` cannot resolve the predicted decrease of the shorter steps, it comes back
    /// unchanged; the search must not take such a step as a decrease.
    #[test]
    fn an_unchanged_objective_is_no_decrease() {
        let value = 1.8;
        // The full step rises (the noise of a stiff body's sum), every shorter one rounds to G.
        let mut objectives = |alphas: &[f64]| -> Vec<f64> {
            alphas.iter().map(|&a| if a > 1e-3 { value + 1e-9 } else { value }).collect()
        };
        assert_eq!(search(&mut objectives, 1, value, -3e-12, 1e-16, false, &[]), Step::Failed);
        // A real decrease is still found where it is.
        let mut quadratic =
            |alphas: &[f64]| -> Vec<f64> { alphas.iter().map(|&a| value - a * (1.0 - a)).collect() };
        assert_eq!(
            search(&mut quadratic, 1, value, -1.0, 1e-16, false, &[]),
            Step::Accepted { alpha: 0.5, value: value - 0.25 }
        );
    }
}
