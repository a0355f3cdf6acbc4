//! Mixed finite elements solved by SQP (mixed-fem-sqp.md, Alg. 1): each tet's symmetric
//! stretch is a variable of its own, tied to the positions by a constraint. An iteration
//! linearizes, solves the statically condensed system for the positions (with the
//! constraints' curvature: exact, or where that meets negative curvature or fails to descend,
//! its positive definite projection), updates stretches and multipliers locally, and
//! backtracks on a merit function (`backend/cpu/mixed.rs` has the algebra). It converges like Newton — the test is the same
//! displacement gradient norm — and when stopped early the stretches, which follow rotations
//! to first order, keep the motion from the damping a capped Newton solve shows.

use std::time::Instant;

use super::line_search::{self, Step};
use super::{NonlinearSolver, Role, SolveReport, Solver};
use crate::backend::{DirectionRequest, MixedDirection, Stages};
use crate::material::Projection;

/// After a step that changed the merit only at round-off, the factor by which the gradient
/// norm must fall for the solver to go on (as Newton's). Unlike Newton's, the stop needs no
/// gradient near `Linearization::gradient_floor`: on the GPU a mixed solve's gradient stays
/// far above that floor at its round-off, and with the condition a squashed free steel cube
/// of 24x12x12 cells took 48 iterations and 1 890 CG instead of 11 and 187 (the same end).
const ROUND_OFF_PROGRESS: f64 = 0.8;
/// The relative residual of a budgeted solve (as Newton's).
const BUDGET_TOLERANCE: f64 = 1e-6;

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
        let base_projection = settings.base_projection();
        loop {
            if report.iterations > 0 && settings.deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                break;
            }
            let mut request = DirectionRequest {
                projection: base_projection,
                solve: report.iterations < settings.max_iterations,
                defer_solve: false,
                solver: settings.linear,
                gradient_tolerance: settings.tolerance,
                relative_tolerance: settings.spend_budget.then_some(BUDGET_TOLERANCE),
                max_iterations: settings.max_linear_iterations,
                candidates: &[],
                likely_converged: false,
                previous_gradient_norm: None,
                forcing_cap: 1.0,
            };
            let t = Instant::now();
            let mut result = stages.mixed_direction(&request);
            // The exact curvature can make the condensed system indefinite, or leave a direction
            // that does not descend on the merit: that iteration takes its non-negative part,
            // whose system is positive definite and whose directions descend (as Newton projects
            // on negative curvature).
            if result.direction.is_some_and(|d| d.negative_curvature || d.slope.is_nan() || d.slope >= 0.0)
                && request.projection == Projection::None
            {
                request.projection = Projection::Psd;
                let again = stages.mixed_direction(&request);
                report.projected_iterations += 1;
                result = MixedDirection {
                    objective: result.objective,
                    linearize_time: result.linearize_time + again.linearize_time,
                    local_time: result.local_time + again.local_time,
                    ..again
                };
            }
            let MixedDirection {
                linearization,
                direction,
                merit,
                full_step_merit,
                linearize_time,
                local_time,
                objective,
            } = result;
            if objectives.is_empty() {
                if start.is_none() {
                    initial = objective.unwrap_or_else(|| stages.objective());
                }
                objectives.push(initial);
                if initial == f64::INFINITY {
                    report.invalid_start = true;
                    break;
                }
            }
            report.times.evaluate += linearize_time;
            report.times.local_solve += local_time;
            report.times.linear_solve += t.elapsed().saturating_sub(linearize_time + local_time);
            let gradient_norm = linearization.gradient_norm;
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
                    "mixed it {} |g| {gradient_norm:.3e} merit {merit:.12e} cg {} slope {:.3e} |dx| {:.3e} step {step:?}",
                    report.iterations, direction.iterations, direction.slope, direction.norm
                );
            }
            match step {
                Step::Accepted { alpha, .. } => {
                    stages.mixed_advance(alpha);
                    after_round_off = false;
                }
                Step::RoundOff { .. } => {
                    stages.mixed_advance(1.0);
                    after_round_off = true;
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
