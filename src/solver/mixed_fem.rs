//! Mixed finite elements solved by SQP (mixed-fem-sqp.md, Alg. 1): each tet's symmetric
//! stretch is a variable of its own, tied to the positions by a constraint. An iteration
//! linearizes, solves the statically condensed system for the positions (with the
//! constraints' curvature: exact, or where that meets negative curvature or fails to descend,
//! its positive definite projection), updates stretches and multipliers locally, and
//! backtracks on a merit function (`backend/cpu/mixed.rs` has the algebra). It converges like
//! Newton — the test is the same displacement gradient norm — and when stopped early the
//! stretches, which follow rotations to first order, keep the motion from the damping a capped
//! Newton solve shows. As Newton's,
//! a linearization where the solve likely ends (after a flat step at the gradient's noise)
//! puts its condensed solve off until the solver has seen that it goes on (`Deferral`).
//! A fixed budget (`Solver::budget`) without a wall-clock deadline does not come here: the
//! backend runs it whole (`Stages::budget_solve`), a GPU in one readback.

use std::time::Instant;

use super::line_search::{self, Step};
use super::{DEFERRED_SOLVE_NOISE, NonlinearSolver, PhaseTimes, Role, SolveReport, Solver};
use crate::backend::{Deferral, DirectionRequest, MixedDirection, Stages};
use crate::material::Projection;

/// After a step that changed the merit only at round-off, the factor by which the gradient
/// norm must fall for the solver to go on (as Newton's). Unlike Newton's, the stop needs no
/// gradient near `Linearization::gradient_floor`: on the GPU a mixed solve's gradient stays
/// far above that floor at its round-off, and with the condition a squashed free steel cube
/// of 24x12x12 cells took 48 iterations and 1 890 CG instead of 11 and 187 (the same end).
const ROUND_OFF_PROGRESS: f64 = 0.8;
/// The relative residual of a budgeted solve (as Newton's).
const BUDGET_TOLERANCE: f64 = 1e-6;

/// `stages.mixed_direction(request)`, its linearization's time added to `times.evaluate`, its
/// local solves' to `times.local_solve` and the rest (the global solve) to `times.linear_solve`.
fn timed_direction(
    stages: &mut dyn Stages,
    request: &DirectionRequest<'_>,
    times: &mut PhaseTimes,
) -> MixedDirection {
    let started = Instant::now();
    let found = stages.mixed_direction(request);
    times.evaluate += found.linearize_time;
    times.local_solve += found.local_time;
    times.linear_solve += started.elapsed().saturating_sub(found.linearize_time + found.local_time);
    found
}

/// The mixed-FEM SQP solver with the settings of a [`Solver`].
pub(crate) struct MixedFem<'a>(pub &'a Solver);

impl NonlinearSolver for MixedFem<'_> {
    fn minimize(&self, stages: &mut dyn Stages, _role: Role, start: Option<f64>) -> SolveReport {
        let settings = self.0;
        let mut report = SolveReport::default();
        let t = Instant::now();
        stages.mixed_begin();
        // Without `start`, the objective comes with the first linearization.
        let mut initial = start.unwrap_or(f64::NAN);
        let mut objectives = Vec::new();
        report.times.evaluate += t.elapsed();
        let trace = std::env::var_os("LIVELY_TRACE").is_some();
        let mut previous_gradient = f64::INFINITY;
        let mut after_round_off = false;
        // The iterate is likely where the solve ends (see `DEFERRED_SOLVE_NOISE`).
        let mut likely_final = false;
        let base_projection = settings.base_projection();
        loop {
            if report.iterations > 0 && settings.deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                break;
            }
            let mut request = DirectionRequest {
                projection: base_projection,
                solve: report.iterations < settings.max_iterations,
                deferral: if likely_final { Deferral::Defer } else { Deferral::Solve },
                solver: settings.linear,
                gradient_tolerance: settings.tolerance,
                relative_tolerance: settings.spend_budget.then_some(BUDGET_TOLERANCE),
                max_iterations: settings.max_linear_iterations,
                candidates: &[],
                likely_converged: false,
                previous_gradient_norm: None,
                forcing_cap: 1.0,
            };
            let mut found = timed_direction(stages, &request, &mut report.times);
            if objectives.is_empty() {
                if start.is_none() {
                    initial = found.objective.unwrap_or_else(|| stages.objective());
                }
                objectives.push(initial);
                if initial == f64::INFINITY {
                    report.invalid_start = true;
                    break;
                }
            }
            let gradient_norm = found.linearization.gradient_norm;
            report.gradient_norm = gradient_norm;
            if gradient_norm <= settings.tolerance {
                report.converged = true;
                break;
            }
            if !gradient_norm.is_finite() {
                report.stalled = true;
                break;
            }
            if report.iterations >= settings.max_iterations {
                break;
            }
            if after_round_off && gradient_norm > ROUND_OFF_PROGRESS * previous_gradient {
                report.round_off = true;
                break;
            }
            previous_gradient = gradient_norm;
            report.iterations += 1;
            if found.direction.is_none() && request.deferral == Deferral::Defer {
                // The solve was deferred, and the solver goes on: solved from the same
                // linearization this time.
                report.resumed_iterations += 1;
                request.deferral = Deferral::Resume;
                found = MixedDirection {
                    linearization: found.linearization,
                    ..timed_direction(stages, &request, &mut report.times)
                };
            }
            // The exact curvature can make the condensed system indefinite, or leave a direction
            // that does not descend on the merit: that iteration takes its non-negative part,
            // whose system is positive definite and whose directions descend (as Newton projects
            // on negative curvature).
            if found.direction.is_some_and(|d| d.negative_curvature || d.slope.is_nan() || d.slope >= 0.0)
                && request.projection == Projection::None
            {
                request.projection = Projection::Psd;
                request.deferral = Deferral::Solve;
                found = timed_direction(stages, &request, &mut report.times);
                report.projected_iterations += 1;
            }
            let MixedDirection { linearization, direction, merit, full_step_merit, .. } = found;
            let Some(direction) = direction else { break };
            report.linear_iterations += direction.iterations;
            let t = Instant::now();
            let step = if direction.slope < 0.0 && merit.is_finite() {
                line_search::search(
                    &mut |alphas| stages.mixed_merits(alphas),
                    1,
                    merit,
                    direction.slope,
                    linearization.noise_floor,
                    false,
                    &[(1.0, full_step_merit)],
                )
            } else {
                Step::Failed
            };
            report.times.line_search += t.elapsed();
            if trace {
                eprintln!(
                    "mixed it {} |g| {gradient_norm:.3e} (noise {:.2e}) merit {merit:.12e} cg {} slope {:.3e} |dx| {:.3e} step {step:?}",
                    report.iterations,
                    linearization.gradient_floor,
                    direction.iterations,
                    direction.slope,
                    direction.norm
                );
            }
            match step {
                Step::Accepted { alpha, .. } => {
                    stages.mixed_advance(alpha);
                    (after_round_off, likely_final) = (false, false);
                }
                Step::RoundOff { .. } => {
                    stages.mixed_advance(1.0);
                    after_round_off = true;
                    likely_final = gradient_norm <= DEFERRED_SOLVE_NOISE * linearization.gradient_floor;
                }
                Step::Failed => {
                    report.stalled = true;
                    break;
                }
            }
            if settings.record_objectives {
                let t = Instant::now();
                objectives.push(stages.objective());
                report.times.evaluate += t.elapsed();
            }
        }
        let t = Instant::now();
        let end = stages.objective();
        report.times.evaluate += t.elapsed();
        if (initial - end).is_finite() {
            report.objective_decrease = initial - end;
        }
        report.end_objective = Some(end);
        if settings.record_objectives {
            report.objectives.push(objectives);
        }
        report
    }
}
