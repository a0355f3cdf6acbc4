//! Stabilized implicit midpoint (stabilizing-integrators-realtime.md, Alg. 1): solve implicit
//! midpoint; if the total energy overshoots the target, solve backward Euler warm-started from
//! the midpoint result and bisect the blend of positions and velocities until the energy is
//! within `epsilon H(x_n, v_n)` of the target; if it undershoots, blend forward Euler and
//! midpoint the same way. If backward Euler also gains energy, take it whole (alpha = 1). If
//! forward Euler also falls short, keep midpoint (alpha = 0): the paper leaves this case open,
//! and forward Euler whole would be an explicit step at game step sizes.
//! The reported alpha is the backward-Euler fraction, or minus the forward-Euler fraction.

use super::backward_euler::BackwardEuler;
use super::forward_euler;
use super::implicit_midpoint::ImplicitMidpoint;
use super::{Outcome, Stepper, blend};
use crate::error::Result;
use crate::solver::Role;

/// Bisection steps: 2^-50 of the blend is far below any visible difference.
const MAX_BISECTIONS: usize = 50;

pub(crate) fn step(stepper: &mut Stepper<'_>, epsilon: f64, target: f64) -> Result<Outcome> {
    let band = epsilon * stepper.start_energy.abs();
    let midpoint = stepper.implicit(&ImplicitMidpoint, None, Role::Solve)?;
    // Energy error of a candidate: its total energy against the target less what this step's
    // damping and friction removed on the way there.
    let error = |stepper: &mut Stepper<'_>, x: &[[f64; 3]], v: &[[f64; 3]]| {
        let e = stepper.energy(x, v) - (target - stepper.dissipated(x));
        if e.is_nan() { f64::INFINITY } else { e }
    };
    let e_mid = error(stepper, &midpoint.x, &midpoint.v);
    if e_mid.abs() <= band {
        return Ok(Outcome {
            alpha: Some(0.0),
            dissipated: midpoint.dissipated,
            x: midpoint.x,
            v: midpoint.v,
        });
    }
    // (low, high): blend endpoints with error(low) > 0 >= error(high) along alpha in [0, 1].
    let (low, high, sign) = if e_mid > 0.0 {
        let backward = stepper.implicit(&BackwardEuler, Some(&midpoint.x), Role::Blend)?;
        if error(stepper, &backward.x, &backward.v) > 0.0 {
            return Ok(Outcome {
                alpha: Some(1.0),
                dissipated: backward.dissipated,
                x: backward.x,
                v: backward.v,
            });
        }
        ((midpoint.x, midpoint.v), (backward.x, backward.v), 1.0)
    } else {
        let (x_fe, v_fe) = forward_euler::step(&stepper.input);
        if error(stepper, &x_fe, &v_fe) < 0.0 {
            // Not even forward Euler reaches the target. Its step taken whole would be an
            // explicit step at the game's step size, repeated every step until the energy
            // climbs to the target: keep midpoint's, which loses energy only as damping does.
            return Ok(Outcome {
                alpha: Some(0.0),
                dissipated: midpoint.dissipated,
                x: midpoint.x,
                v: midpoint.v,
            });
        }
        ((x_fe, v_fe), (midpoint.x, midpoint.v), -1.0)
    };
    let (mut a, mut b) = (0.0, 1.0);
    let mut alpha = 0.5;
    for _ in 0..MAX_BISECTIONS {
        alpha = 0.5 * (a + b);
        let (x, v) = (blend(&low.0, &high.0, alpha), blend(&low.1, &high.1, alpha));
        let e = error(stepper, &x, &v);
        if e.abs() <= band {
            break;
        }
        if e > 0.0 { a = alpha } else { b = alpha }
    }
    let (x, v) = (blend(&low.0, &high.0, alpha), blend(&low.1, &high.1, alpha));
    let dissipated = stepper.dissipated(&x);
    // Backward side: alpha is the BE fraction. Forward side: minus the FE fraction.
    let reported = if sign > 0.0 { alpha } else { -(1.0 - alpha) };
    Ok(Outcome { x, v, alpha: Some(reported), dissipated })
}
