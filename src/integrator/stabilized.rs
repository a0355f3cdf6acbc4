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
use super::{Outcome, Stepper, blend, kinetic_energy};
use crate::error::Result;
use crate::solver::Role;

/// Bisection steps: 2^-50 of the blend is far below any visible difference.
const MAX_BISECTIONS: usize = 50;
/// Bisection levels a batching backend evaluates together: the 2^3 - 1 = 7 blends the next
/// three halvings may visit, in one round trip on a GPU; the bisection then replays them, so
/// it takes the same alpha as one blend at a time would.
const LEVELS_PER_BATCH: usize = 3;

/// A candidate state's energy error `H(x, v) - (target - dissipated)`, where `dissipated`
/// (returned too) is what this step's damping and friction removed on the way to `x`.
struct Candidate {
    error: f64,
    dissipated: f64,
}

impl Candidate {
    fn new(stepper: &Stepper<'_>, potential: f64, v: &[[f64; 3]], dissipated: f64, target: f64) -> Candidate {
        let e = potential + kinetic_energy(stepper.model, v) - (target - dissipated);
        Candidate { error: if e.is_nan() { f64::INFINITY } else { e }, dissipated }
    }
}

/// Positions and velocities.
type State = (Vec<[f64; 3]>, Vec<[f64; 3]>);

/// The candidates of `states`, their energies evaluated together.
fn candidates(stepper: &mut Stepper<'_>, states: &[State], target: f64) -> Vec<Candidate> {
    let points: Vec<&[[f64; 3]]> = states.iter().map(|(x, _)| x.as_slice()).collect();
    let energies = stepper.stages.energies_at(&points);
    states
        .iter()
        .zip(energies)
        .map(|((_, v), (potential, dissipation))| {
            Candidate::new(stepper, potential, v, 2.0 * dissipation, target)
        })
        .collect()
}

pub(crate) fn step(stepper: &mut Stepper<'_>, epsilon: f64, target: f64) -> Result<Outcome> {
    let band = epsilon * stepper.start_energy.total.abs();
    let midpoint = stepper.implicit(&ImplicitMidpoint, None, Role::Solve)?;
    // A solve's result comes with its dissipation, and (on a GPU) with its potential.
    let solved = |stepper: &mut Stepper<'_>, x: &[[f64; 3]], v: &[[f64; 3]], dissipated: f64| {
        let potential = stepper.stages.potential(x);
        Candidate::new(stepper, potential, v, dissipated, target).error
    };
    let e_mid = solved(stepper, &midpoint.x, &midpoint.v, midpoint.dissipated);
    if e_mid.abs() <= band {
        return Ok(Outcome {
            alpha: Some(0.0),
            dissipated: midpoint.dissipated,
            theta: midpoint.theta,
            x: midpoint.x,
            v: midpoint.v,
        });
    }
    // (low, high): blend endpoints with error(low) > 0 >= error(high) along alpha in [0, 1],
    // what was dissipated on the way to high, and their thetas (`Outcome::theta`).
    let (low, high, high_dissipated, sign, thetas) = if e_mid > 0.0 {
        let backward = stepper.implicit(&BackwardEuler, Some(&midpoint.x), Role::Blend)?;
        if solved(stepper, &backward.x, &backward.v, backward.dissipated) > 0.0 {
            return Ok(Outcome {
                alpha: Some(1.0),
                dissipated: backward.dissipated,
                theta: backward.theta,
                x: backward.x,
                v: backward.v,
            });
        }
        let thetas = [midpoint.theta, backward.theta];
        ((midpoint.x, midpoint.v), (backward.x, backward.v), backward.dissipated, 1.0, thetas)
    } else {
        let forward = forward_euler::step(&stepper.input);
        // Under the barrier or projection, blends toward forward Euler, which no solve kept
        // outside the colliders, could end in or beyond one: midpoint's solve is kept instead.
        if stepper.model.contact.floor().is_some()
            || candidates(stepper, std::slice::from_ref(&forward), target)[0].error < 0.0
        {
            // Not even forward Euler reaches the target. Its step taken whole would be an
            // explicit step at the game's step size, repeated every step until the energy
            // climbs to the target: keep midpoint's, which loses energy only as damping does.
            return Ok(Outcome {
                alpha: Some(0.0),
                dissipated: midpoint.dissipated,
                theta: midpoint.theta,
                x: midpoint.x,
                v: midpoint.v,
            });
        }
        (forward, (midpoint.x, midpoint.v), midpoint.dissipated, -1.0, [0.0, midpoint.theta])
    };
    let blend_at = |alpha: f64| (blend(&low.0, &high.0, alpha), blend(&low.1, &high.1, alpha));
    let (mut a, mut b) = (0.0, 1.0);
    let mut below = high_dissipated;
    let mut in_band = None;
    let mut bisections = 0;
    'search: while bisections < MAX_BISECTIONS {
        // The tree of the next levels' midpoints: node k halves [lo, hi]; its children, 2k + 1
        // and 2k + 2, halve [lo, mid] and [mid, hi], each midpoint computed as one bisection
        // step computes it.
        // A backend that evaluates in batches (a GPU) takes several levels per round trip; one
        // that pays per evaluation (the CPU) the plain bisection's one blend at a time.
        let per_batch = if stepper.stages.preferred_batch() > 1 { LEVELS_PER_BATCH } else { 1 };
        let levels = per_batch.min(MAX_BISECTIONS - bisections);
        let mut intervals = vec![(a, b)];
        let mut alphas = Vec::new();
        for k in 0..(1 << levels) - 1 {
            let (lo, hi) = intervals[k];
            let mid = 0.5 * (lo + hi);
            alphas.push(mid);
            intervals.extend([(lo, mid), (mid, hi)]);
        }
        let states: Vec<_> = alphas.iter().map(|&t| blend_at(t)).collect();
        let found = candidates(stepper, &states, target);
        let mut k = 0;
        for _ in 0..levels {
            bisections += 1;
            let (t, e) = (alphas[k], found[k].error);
            if e.abs() <= band {
                in_band = Some((t, found[k].dissipated));
                break 'search;
            }
            if e > 0.0 {
                a = t;
                k = 2 * k + 2;
            } else {
                (b, below) = (t, found[k].dissipated);
                k = 2 * k + 1;
            }
        }
    }
    // Without a blend in the band, the energy jumps across it (an element of a blend leaving
    // its material's domain, where the energy is infinite; a contact): take the blend at or
    // below the target, never the last one tried, which may lie on the side above it.
    let (alpha, dissipated) = in_band.unwrap_or((b, below));
    let (x, v) = blend_at(alpha);
    // Backward side: alpha is the BE fraction. Forward side: minus the FE fraction.
    let reported = if sign > 0.0 { alpha } else { -(1.0 - alpha) };
    let theta = thetas[0] + alpha * (thetas[1] - thetas[0]);
    Ok(Outcome { x, v, alpha: Some(reported), dissipated, theta })
}
