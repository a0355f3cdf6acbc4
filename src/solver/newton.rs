//! Newton's method for the step objective, as in the optimization integrator (Gast et al.,
//! section 3.1): inexact directions from CG with an adaptive tolerance, a downhill test,
//! a step-length clamp, a line search that never increases the objective, and the better of
//! several initial guesses.

use std::time::{Duration, Instant};

use super::line_search::{self, Step};
use super::{
    DEFERRED_SOLVE_NOISE, HessianPolicy, NonlinearSolver, PhaseTimes, Role, SolveReport, Solver, SolverKind,
};
use crate::backend::{BudgetRequest, Deferral, DirectionRequest, NewtonDirection, Stages, solve_tolerance};
use crate::material::Projection;

/// Step-length clamp `l` (m): the paper's 10^3, large enough never to bind in practice.
const MAX_STEP: f64 = 1e3;
/// After a step that changed `G` only at round-off, the factor by which the gradient norm
/// must fall for Newton to go on (a smaller fall is noise; see `minimize`).
const ROUND_OFF_PROGRESS: f64 = 0.8;
/// A gradient above this many times its own noise (`Linearization::gradient_floor`) is not
/// at its noise: where a flat step from such a gradient raised it, the step is halved rather
/// than taken back. An f32 GPU's solves end at 5-25 times that floor (the stacked cubes of
/// `tests/self_collision.rs`).
const GRADIENT_NOISE_MARGIN: f64 = 100.0;
/// The shortest part of a flat step that halving tries before taking the step back.
const SHORTEST_FLAT_STEP: f64 = 0.125;
/// A full step that leaves the gradient above this fraction of where it started made too
/// little progress for the solve's loose forcing term: the next solves are held tighter.
const STAGNANT_PROGRESS: f64 = 0.9;
/// The forcing term's cap after the first such step; each further one divides it by 10.
const STAGNANT_FORCING: f64 = 0.05;
/// The tightest cap: below f32's resolution of a GPU solve.
const TIGHTEST_FORCING: f64 = 1e-6;
/// The relative residual of a budgeted solve: below what CG reaches in a real-time budget
/// (and near the f32 resolution of a GPU solve), so that the budget is what stops it.
const BUDGET_TOLERANCE: f64 = 1e-6;

/// Step lengths a budgeted line search evaluates (`1, 1/2, 1/4, 1/8`, `1/64`, and `2`): the
/// first batch of the host's search, which a projected Newton step almost always ends in, and
/// a short step for a Newton model that misses a contact (`cpu/line_search.rs`).
const BUDGET_STEPS: usize = 5;

/// The whole-solve request of a fixed budget (`Solver::budget`) from `guesses`, whose last is
/// the fallback; `None` for settings the backend cannot run whole (no budget, local/global,
/// or a wall-clock deadline, which only the host can watch).
pub(crate) fn budget_request<'a>(
    settings: &Solver,
    guesses: &'a [&'a [[f64; 3]]],
) -> Option<BudgetRequest<'a>> {
    let mixed = settings.kind == SolverKind::MixedFem;
    if !(settings.spend_budget
        && (settings.kind == SolverKind::Newton || mixed)
        && settings.deadline.is_none())
    {
        return None;
    }
    let projection = match settings.hessian {
        HessianPolicy::AlwaysProject => Projection::Psd,
        HessianPolicy::ProjectOnNegativeCurvature => Projection::None,
    };
    Some(BudgetRequest {
        guesses,
        mixed,
        iterations: settings.max_iterations,
        projection,
        solver: settings.linear,
        gradient_tolerance: settings.tolerance,
        relative_tolerance: BUDGET_TOLERANCE,
        max_linear_iterations: settings.max_linear_iterations,
        steps: BUDGET_STEPS,
        // Mixed FEM backtracks from the full SQP step, as its host-driven search does
        // (mixed-fem-sqp.md, Alg. 1).
        extrapolate: projection == Projection::Psd && !mixed,
    })
}

/// The solve report of a whole budgeted solve.
pub(crate) fn budget_report(settings: &Solver, solve: &crate::backend::BudgetSolve) -> SolveReport {
    let decrease = solve.start_objective - solve.objective;
    SolveReport {
        iterations: solve.iterations,
        linear_iterations: solve.linear_iterations,
        converged: solve.gradient_norm <= settings.tolerance,
        stalled: solve.stalled || !solve.gradient_norm.is_finite(),
        gradient_norm: solve.gradient_norm,
        objective_decrease: if decrease.is_finite() { decrease } else { 0.0 },
        end_objective: Some(solve.objective),
        ..SolveReport::default()
    }
}

/// `stages.newton_direction(request)`, its linearization's time added to `times.evaluate` and
/// the rest (the solve, and a GPU's candidates) to `times.linear_solve`.
fn timed_direction(
    stages: &mut dyn Stages,
    request: &DirectionRequest<'_>,
    times: &mut PhaseTimes,
) -> NewtonDirection {
    let started = Instant::now();
    let found = stages.newton_direction(request);
    times.evaluate += found.linearize_time;
    times.linear_solve += started.elapsed().saturating_sub(found.linearize_time);
    found
}

/// Newton's method with the settings of a [`Solver`].
pub(crate) struct Newton<'a>(pub &'a Solver);

impl NonlinearSolver for Newton<'_> {
    fn minimize(&self, stages: &mut dyn Stages, _role: Role, start: Option<f64>) -> SolveReport {
        minimize(stages, self.0, start)
    }
}

/// Minimizes the step objective from the backend's current iterate, whose objective is
/// `start` when the caller knows it.
pub(crate) fn minimize(stages: &mut dyn Stages, settings: &Solver, start: Option<f64>) -> SolveReport {
    let mut report = SolveReport::default();
    let timed = |slot: &mut Duration, start: Instant| *slot += start.elapsed();
    let base_projection = settings.base_projection();
    // Without `start`, the objective comes with the first linearization (a backend that
    // chose the iterate on the device reports it there), else is evaluated then.
    let mut value = start.unwrap_or(f64::NAN);
    let mut initial_value = value;
    // LIVELY_TRACE=1 prints every iteration to stderr (README: diagnosing convergence).
    let trace = std::env::var_os("LIVELY_TRACE").is_some();
    let mut previous_gradient = f64::INFINITY;
    // The part of a flat step (one that changed `G` only at round-off) the iterate is at,
    // until the gradient there has been checked.
    let mut flat_step: Option<f64> = None;
    // `G` where the flat step started.
    let mut flat_start_value = f64::NAN;
    // The line search's first batch, evaluated ahead with the direction; a projected direction
    // also gets the first extrapolation (alpha = 2), which usually ends it.
    let first_batch = line_search::first_batch(stages.preferred_batch());
    let projected_batch: Vec<f64> = first_batch.iter().copied().chain([2.0]).collect();
    let batch_for = |projection| if projection == Projection::Psd { &projected_batch } else { &first_batch };
    let mut likely_converged = false;
    // The iterate is likely where the solve ends (see `DEFERRED_SOLVE_NOISE`).
    let mut likely_final = false;
    // `|grad G|` where the last direction was solved, when the iterate is its full step.
    let mut full_step_from = None;
    // The loosest relative residual the solves may stop at (`DirectionRequest::forcing_cap`).
    // A light cloth hung from a stiff handle at h = 0.5 s crawled on the GPU: the forcing
    // term asked 1/2, one CG iteration met it by resolving the handle's vertex, and each
    // full step lowered the gradient by 1-3 %, 36 iterations in a row, until the iteration
    // cap left the step at 5 times the CPU's energy.
    let mut forcing_cap: f64 = 1.0;
    // `|grad G|` where the last direction was solved, when the iterate is its full step and
    // that step was resolved (not a flat one near round-off, whose gradient is noise).
    let mut resolved_full_step_from = None;
    loop {
        if report.iterations > 0 && settings.deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            // The step's time is spent: the iterate is the best state so far.
            break;
        }
        let mut projection = base_projection;
        let request = DirectionRequest {
            projection,
            solve: report.iterations < settings.max_iterations,
            deferral: if likely_final { Deferral::Defer } else { Deferral::Solve },
            solver: settings.linear,
            gradient_tolerance: settings.tolerance,
            relative_tolerance: settings.spend_budget.then_some(BUDGET_TOLERANCE),
            max_iterations: settings.max_linear_iterations,
            candidates: batch_for(projection),
            likely_converged,
            previous_gradient_norm: full_step_from.take(),
            forcing_cap,
        };
        let NewtonDirection { linearization: status, direction, candidates, objective, .. } =
            timed_direction(stages, &request, &mut report.times);
        if start.is_none() && report.iterations == 0 {
            value = objective.unwrap_or_else(|| stages.objective());
            initial_value = value;
            if value == f64::INFINITY {
                report.invalid_start = true;
                break;
            }
        }
        let gradient_norm = status.gradient_norm;
        report.gradient_norm = gradient_norm;
        if gradient_norm <= settings.tolerance {
            report.converged = true;
            break;
        }
        // Only far above the gradient's noise: at round-off, tighter solves only chase it.
        let stagnant =
            resolved_full_step_from.take().is_some_and(|from| gradient_norm > STAGNANT_PROGRESS * from);
        if stagnant && gradient_norm > GRADIENT_NOISE_MARGIN * status.gradient_floor {
            forcing_cap = (forcing_cap * 0.1).clamp(TIGHTEST_FORCING, STAGNANT_FORCING);
        }
        if !gradient_norm.is_finite() {
            if flat_step.is_some() {
                // A halved flat step, whose `G` is not evaluated, left the material's domain
                // (the midpoint of two valid iterates can invert a tet): back to where the flat
                // step started, whose `G` was, and stop at round-off there.
                stages.retreat(0.0);
                report.gradient_norm = previous_gradient;
                report.round_off = true;
            } else {
                report.stalled = true;
            }
            break;
        }
        if report.iterations >= settings.max_iterations {
            break;
        }
        if let Some(part) = flat_step.filter(|_| gradient_norm >= previous_gradient) {
            if previous_gradient > GRADIENT_NOISE_MARGIN * status.gradient_floor && part > SHORTEST_FLAT_STEP
            {
                // The gradient the step started from was far above its own noise: the solve
                // was not done, and the step overshot a nonlinearity (a contact) too small
                // for G to show. Half of it.
                if trace {
                    eprintln!("flat step {part} raised |g| to {gradient_norm:.3e}: halved");
                }
                stages.retreat(0.5);
                flat_step = Some(0.5 * part);
                full_step_from = None;
                // `G` there is within its noise of `G` where the flat step started.
                value = flat_start_value;
                continue;
            }
            // The flat step did not reduce the gradient either: it was noise. Take it back
            // and stop at round-off.
            stages.retreat(0.0);
            report.gradient_norm = previous_gradient;
            report.round_off = true;
            break;
        }
        if flat_step.take().is_some()
            && gradient_norm > ROUND_OFF_PROGRESS * previous_gradient
            && gradient_norm <= GRADIENT_NOISE_MARGIN * status.gradient_floor
        {
            // The flat step lowered the gradient, but by less than Newton ever does above the
            // noise floor (quadratically, or ~0.55 per iteration on projected Hessians), and
            // the gradient is near its noise: keep it and stop. On an f32 GPU this saves the
            // iterations that chased the noise. Far above its noise the step was flat only
            // because `G` was too large to show it (a stiff bar flung at h = 0.5 s: `G`
            // 9.4e20 J, a Newton step lowering it by 1e9 J), and Newton goes on.
            report.round_off = true;
            break;
        }
        previous_gradient = gradient_norm;
        report.iterations += 1;
        let (mut direction, candidates) = match direction {
            Some(direction) => (direction, candidates),
            // The solve was deferred, and Newton goes on: the same request, solved this time.
            None if request.deferral == Deferral::Defer => {
                report.resumed_iterations += 1;
                let undeferred = DirectionRequest { deferral: Deferral::Resume, ..request };
                let again = timed_direction(stages, &undeferred, &mut report.times);
                let Some(direction) = again.direction else { break };
                (direction, again.candidates)
            }
            // A finite gradient above the tolerance always gets a direction.
            None => break,
        };
        report.linear_iterations += direction.iterations;
        // A full step along a solve that reached its relative residual leaves a gradient near
        // that residual: at or below half the tolerance, the next check will likely pass.
        let relative = request.relative_tolerance.unwrap_or_else(|| solve_tolerance(&status, &request));
        let mut aimed_below = !direction.negative_curvature
            && direction.iterations < settings.max_linear_iterations
            && relative * gradient_norm <= 0.5 * settings.tolerance * (1.0 + 1e-9);
        let mut known: Vec<(f64, f64)> = batch_for(projection).iter().copied().zip(candidates).collect();
        if direction.negative_curvature && projection == Projection::None {
            projection = Projection::Psd;
            report.projected_iterations += 1;
            let projected = DirectionRequest {
                projection,
                candidates: batch_for(projection),
                deferral: Deferral::Solve,
                ..request
            };
            let again = timed_direction(stages, &projected, &mut report.times);
            let Some(projected) = again.direction else { break };
            direction = projected;
            known = batch_for(projection).iter().copied().zip(again.candidates).collect();
            report.linear_iterations += direction.iterations;
        }
        // The downhill test. The paper's asks for an angle, `d . grad < -kappa |d| |grad|` with
        // kappa = 1e-2; but a solve's direction obeys `d . grad = -d^T H d` however stiff the
        // body, and its angle with the gradient is about the inverse condition number: on soft
        // flesh with 1e14 Pa inclusions the angle test threw every Newton direction away, and
        // the gradient steps that replaced them left backward-Euler steps gaining energy
        // 1e5-fold. A direction that descends at all is kept.
        if !(direction.slope < 0.0) {
            // CG directions are never uphill, so -d is never the better choice here.
            direction = stages.use_negative_gradient();
            known.clear();
            aimed_below = false;
        }
        if direction.norm > MAX_STEP {
            let factor = MAX_STEP / direction.norm;
            stages.scale_direction(factor);
            direction.slope *= factor;
            direction.norm *= factor;
            known.clear();
            aimed_below = false;
        }
        // A barrier's collision-free bound; its search never extends past the bound either.
        let bound = stages.step_bound();
        if let Some(factor) = bound.filter(|&b| b < 1.0) {
            stages.scale_direction(factor);
            direction.slope *= factor;
            direction.norm *= factor;
            known.clear();
            aimed_below = false;
        }
        let extrapolate = projection == Projection::Psd && bound.is_none();

        // The next iteration linearizes where the line search ends (usually the full step).
        stages.expect_linearization((!aimed_below).then_some(base_projection));
        let t = Instant::now();
        let batch = stages.preferred_batch();
        let step = line_search::search(
            &mut |alphas| stages.candidate_objectives(alphas),
            batch,
            value,
            direction.slope,
            status.noise_floor,
            extrapolate,
            &known,
        );
        timed(&mut report.times.line_search, t);
        if trace {
            eprintln!(
                "it {} |g| {gradient_norm:.3e} (noise {:.2e}) G {value:.12e} (noise {:.2e}) cg {} neg {} proj {:?} slope {:.3e} |d| {:.3e} step {step:?}",
                report.iterations,
                status.gradient_floor,
                status.noise_floor,
                direction.iterations,
                direction.negative_curvature,
                projection,
                direction.slope,
                direction.norm
            );
        }
        match step {
            Step::Accepted { alpha, value: next } => {
                stages.advance(alpha);
                value = next;
                full_step_from = (alpha == 1.0).then_some(gradient_norm);
                resolved_full_step_from = full_step_from;
                likely_converged = aimed_below && alpha == 1.0;
                likely_final = false;
            }
            Step::RoundOff { value: next } => {
                stages.advance(1.0);
                flat_start_value = value;
                value = next;
                flat_step = Some(1.0);
                full_step_from = Some(gradient_norm);
                likely_converged = aimed_below;
                likely_final = gradient_norm <= DEFERRED_SOLVE_NOISE * status.gradient_floor;
            }
            // No descent along a downhill direction: the iterate is the best safe state.
            Step::Failed => {
                report.stalled = true;
                break;
            }
        }
    }
    if (initial_value - value).is_finite() {
        report.objective_decrease = initial_value - value;
    }
    report.end_objective = Some(value);
    report
}
