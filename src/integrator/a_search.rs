//! A-1 and A-search (energy-controllable-a-search.md, Alg. 1): positions from backward Euler
//! (damping and friction inside that solve), then the implicit velocity `w = (x - x_n)/h`
//! corrected by the conservative force difference, `v = w - alpha dv` with
//! `dv = h M^-1 (grad P(x_n) - grad P(x))`. A-1 takes alpha = 1; A-search takes the root
//! nearer 1 of `P(x) + 1/2 |w - alpha dv|_M^2 = target` (the parabola's vertex when there is
//! no real root) and clips it to `[alpha_min, alpha_max]`. Both take 0 when the solve did not
//! converge (see `step`).

use super::backward_euler::BackwardEuler;
use super::{Outcome, Stepper, combine, kinetic_energy_of};
use crate::error::Result;
use crate::solver::Role;

pub(crate) fn step(stepper: &mut Stepper<'_>, clip: Option<(f64, f64)>, target: f64) -> Result<Outcome> {
    let h = stepper.input.dt;
    let solved = stepper.implicit(&BackwardEuler, None, Role::Solve)?;
    let model = stepper.model;
    // Conservative forces only: a(x) = -M^-1 grad P(x); dv = h (a(x) - a(x_n)).
    let gradient = stepper.potential_gradient(&solved.x);
    let a_n = stepper.input.acceleration;
    let dv = crate::math::per_vertex(gradient.len(), |v| {
        std::array::from_fn(|c| h * (-gradient[v][c] / model.masses[v] - a_n[v][c]))
    });
    let w = solved.v;
    let alpha = match clip {
        // The correction assumes the backward-Euler relation w = v_n - h M^-1 grad P(x), which
        // an unconverged solve (an iteration budget too small for the body) does not satisfy:
        // its residual, amplified by h/m, lands in dv at a few vertices and the energy search
        // concentrates the target there (a stiff 10K-tet bar at 2 Newton x 40 CG blew up
        // within three steps; A-1 capped at 3 Newton iterations, a cube dropped onto a floor
        // reached 1.9e15 J). Such a step keeps backward Euler's velocity instead.
        _ if !stepper.report.converged => 0.0,
        None => 1.0,
        Some((alpha_min, alpha_max)) => {
            // P(x) + 1/2 |w|^2 - alpha w.M dv + alpha^2/2 |dv|^2 = target - dissipated, the
            // sums in one pass.
            let [half_quadratic, linear, kinetic] = crate::math::sums_per_vertex(w.len(), |v| {
                let (m, w, d) = (model.masses[v], w[v], dv[v]);
                [
                    kinetic_energy_of(m, d),
                    m * (w[0] * d[0] + w[1] * d[1] + w[2] * d[2]),
                    kinetic_energy_of(m, w),
                ]
            });
            let constant = stepper.stages.potential(&solved.x) + kinetic - (target - solved.dissipated);
            nearest_root(half_quadratic, -linear, constant).clamp(alpha_min, alpha_max)
        }
    };
    let v = combine([(1.0, &w), (-alpha, &dv)]);
    Ok(Outcome { x: solved.x, v, alpha: Some(alpha), dissipated: solved.dissipated, theta: solved.theta })
}

/// The root of `a t^2 + b t + c` nearer 1, the vertex when there is no real root, and 1 when
/// the correction does nothing (`a = 0`).
fn nearest_root(a: f64, b: f64, c: f64) -> f64 {
    if !(a > 0.0) {
        return 1.0;
    }
    let discriminant = b * b - 4.0 * a * c;
    if discriminant < 0.0 {
        return -b / (2.0 * a);
    }
    let s = discriminant.sqrt();
    let (r1, r2) = ((-b - s) / (2.0 * a), (-b + s) / (2.0 * a));
    if (r1 - 1.0).abs() <= (r2 - 1.0).abs() { r1 } else { r2 }
}

#[cfg(test)]
mod tests {
    use super::nearest_root;

    #[test]
    fn picks_the_root_nearer_one_or_the_vertex() {
        // (t - 0.9)(t - 3) = t^2 - 3.9 t + 2.7
        assert!((nearest_root(1.0, -3.9, 2.7) - 0.9).abs() < 1e-12);
        // no real root: vertex of t^2 - 2t + 5 is 1
        assert_eq!(nearest_root(1.0, -2.0, 5.0), 1.0);
        assert_eq!(nearest_root(0.0, 1.0, 1.0), 1.0);
    }
}
