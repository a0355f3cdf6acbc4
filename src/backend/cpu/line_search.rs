//! Stage `line_search`: the decisions of a fixed-budget Newton or mixed-FEM solve, made where
//! the numbers are, so that a GPU records the whole solve without waiting for the host. The twin of
//! `shaders/line_search.wgsl`, in f64: which initial guess to start from, and which of a
//! fixed set of step lengths to take along a Newton (or SQP) direction.
//!
//! The host's line search (`solver/line_search.rs`) halves until it finds a decrease; a
//! recorded solve cannot, so it evaluates one batch, `1, 1/2, 1/4, 1/8` and then eighths of
//! the last (`1/64, 1/512, ...`), and `2` when extrapolating, and takes none when none
//! decreases `G` enough: the iterate stays, and the objective never rises either way. The
//! eighths are for a step whose Newton model misses a contact it runs into (a body placed
//! exactly on another: its first step falls a whole step's gravity into it); without them
//! no length decreased `G`, no iteration moved, and the body hung there for good.

// Armijo's constant and the noise margin are the host search's.
use crate::solver::line_search::{ARMIJO, NOISE_MARGIN};

/// After a batch that found no decrease, the next starts at half its shortest step.
const NEXT_BATCH: f64 = 1.0 / 128.0;

/// The scale of the next iteration's direction after one at `scale` took step `alpha` along a
/// direction of slope `slope`: where a batch found no decrease along a descent direction, the
/// next iteration (from the same iterate, so along the same direction) goes on where it
/// stopped, as the host's search would have gone on halving; else 1. A body coming to rest a
/// hair above a penalty floor hung there for good under a budget: its Newton step (no contact
/// in the model yet) fell a whole step's gravity into the floor, and no step of a batch lowered
/// the objective, iteration after iteration.
pub(crate) fn next_scale(scale: f64, alpha: f64, slope: f64) -> f64 {
    if alpha == 0.0 && slope < 0.0 { scale * NEXT_BATCH } else { 1.0 }
}

/// The `k`-th step length of a batch: `1, 1/2, 1/4, 1/8`, then an eighth of the last.
fn step_length(k: usize) -> f64 {
    0.5f64.powi((k + 2 * k.saturating_sub(3)) as i32)
}

/// The step lengths of a batch of `count`, then `2` when extrapolating.
pub(crate) fn step_lengths(count: usize, extrapolate: bool) -> Vec<f64> {
    let mut alphas: Vec<f64> = (0..count).map(step_length).collect();
    if extrapolate {
        alphas.push(2.0);
    }
    alphas
}

/// The initial guess to start from: the lowest finite objective among `values`, the first of
/// equals; with `fallback`, the last value competes only when some other is not finite. `None`
/// when none qualifies.
///
/// The fallback is the step's start, the predictions come first (see
/// [`Stages::start_competes`](crate::backend::Stages::start_competes)). But a prediction
/// outside its model's domain marks a step violent enough that the other, an explicit step
/// at high stress, can be absurd too: a kicked, squashed stiff bar whose inertial guess
/// inverted a neo-Hookean element had an explicit guess of 7e34 J against the start's 3e10 J,
/// and a budgeted backward-Euler step ended there.
pub(crate) fn pick(values: &[f64], fallback: bool) -> Option<usize> {
    let primary = values.len() - usize::from(fallback && !values.is_empty());
    let competing = if values[..primary].iter().all(|v| v.is_finite()) { primary } else { values.len() };
    (0..competing).filter(|&k| values[k].is_finite()).fold(None, |best: Option<usize>, k| match best {
        Some(b) if values[b] <= values[k] => Some(b),
        _ => Some(k),
    })
}

/// The step to take along a direction of slope `slope` from an iterate of objective `value`,
/// given the objectives at [`step_lengths`]`(count, extrapolate)` — `objective_at(k)` is the
/// k-th, asked for only as the rule needs it, so a backend that pays per evaluation (the CPU)
/// evaluates no more than the host's search would — as `(alpha, G)`.
///
/// - No descent (`slope >= 0`, or not a number): no step.
/// - A predicted decrease below the noise of `G` (`noise_floor` for the rounding of the
///   positions, `precision |G|` for the rounding of its sum): the full step if `G` stays flat
///   to that noise, else none.
/// - Else the longest step of the batch with Armijo's decrease; the full step is extended to
///   `2` when extrapolating and `G(2)` is lower still with Armijo's decrease; none when no
///   step decreases `G` enough.
pub(crate) fn choose(
    value: f64,
    slope: f64,
    noise_floor: f64,
    precision: f64,
    count: usize,
    extrapolate: bool,
    mut objective_at: impl FnMut(usize) -> f64,
) -> (f64, f64) {
    let stay = (0.0, value);
    if !(slope < 0.0) {
        return stay;
    }
    let noise = NOISE_MARGIN * (noise_floor + precision * value.abs());
    if -slope <= noise {
        let full = objective_at(0);
        return if full <= value + noise { (1.0, full) } else { stay };
    }
    for k in 0..count {
        let alpha = step_length(k);
        let v = objective_at(k);
        if v.is_finite() && v <= value + ARMIJO * alpha * slope {
            if k == 0 && extrapolate {
                let doubled = objective_at(count);
                if doubled.is_finite() && doubled < v && doubled <= value + ARMIJO * 2.0 * slope {
                    return (2.0, doubled);
                }
            }
            return (alpha, v);
        }
    }
    stay
}

#[cfg(test)]
mod tests {
    use super::{choose, pick, step_lengths};

    #[test]
    fn picks_the_lowest_finite_guess_and_the_fallback_only_when_some_is_not() {
        assert_eq!(pick(&[3.0, 1.0, 1.0, 0.5], true), Some(1));
        assert_eq!(pick(&[3.0, 1.0, 1.0, 0.5], false), Some(3));
        assert_eq!(pick(&[f64::INFINITY, 2.0, 0.5], true), Some(2));
        assert_eq!(pick(&[f64::INFINITY, 0.2, 0.5], true), Some(1));
        assert_eq!(pick(&[f64::INFINITY, f64::NAN, 0.5], true), Some(2));
        assert_eq!(pick(&[f64::INFINITY, f64::NAN, 0.5], false), Some(2));
        assert_eq!(pick(&[f64::INFINITY, f64::INFINITY], true), None);
    }

    #[test]
    fn chooses_the_longest_sufficient_step_or_none() {
        assert_eq!(step_lengths(3, true), vec![1.0, 0.5, 0.25, 2.0]);
        assert_eq!(step_lengths(6, false), vec![1.0, 0.5, 0.25, 0.125, 1.0 / 64.0, 1.0 / 512.0]);
        // G = 10 - t (2 - t) along slope -2: every step decreases it; extrapolation rises.
        let g = |t: f64| 10.0 - t * (2.0 - t);
        let values: Vec<f64> = step_lengths(4, true).iter().map(|&t| g(t)).collect();
        assert_eq!(choose(10.0, -2.0, 0.0, 1e-16, 4, true, |k| values[k]), (1.0, 9.0));
        // The full step overshoots: G(1) > G(0); the half step is taken.
        let steep = |t: f64| 10.0 - t * (2.0 - 4.0 * t);
        let values: Vec<f64> = step_lengths(4, false).iter().map(|&t| steep(t)).collect();
        assert_eq!(choose(10.0, -2.0, 0.0, 1e-16, 4, false, |k| values[k]), (0.25, steep(0.25)));
        // Extrapolation pays on a shallow quadratic.
        let shallow = |t: f64| 10.0 - t * (2.0 - 0.1 * t);
        let values: Vec<f64> = step_lengths(4, true).iter().map(|&t| shallow(t)).collect();
        assert_eq!(choose(10.0, -2.0, 0.0, 1e-16, 4, true, |k| values[k]), (2.0, shallow(2.0)));
        // No descent, or nothing decreases enough: stay.
        assert_eq!(choose(10.0, 0.0, 0.0, 1e-16, 4, true, |k| values[k]), (0.0, 10.0));
        assert_eq!(choose(10.0, f64::NAN, 0.0, 1e-16, 4, true, |k| values[k]), (0.0, 10.0));
        assert_eq!(
            choose(10.0, -2.0, 0.0, 1e-16, 4, false, |k| [11.0, f64::INFINITY, 10.5, 10.0][k]),
            (0.0, 10.0)
        );
        // Below the noise: flat is good enough, a rise is not.
        assert_eq!(choose(10.0, -1e-9, 1e-8, 1e-16, 1, false, |_| 10.0 + 1e-8), (1.0, 10.0 + 1e-8));
        assert_eq!(choose(10.0, -1e-9, 1e-8, 1e-16, 1, false, |_| 10.0 + 1e-5), (0.0, 10.0));
    }
}
