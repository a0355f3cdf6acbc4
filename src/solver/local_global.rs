//! The local/global solver (stabilizing-integrators-realtime.md §4.2): a fixed number of
//! projective-dynamics iterations per solve, fewer for the backward-Euler solve a stabilized
//! step blends with. The backend does the iterations (`Stages::local_global`); this side
//! decides how many and turns the backend's account into the common report.

use super::line_search::NOISE_MARGIN;
use super::{NonlinearSolver, PhaseTimes, Role, SolveReport, Solver};
use crate::backend::{LocalGlobalRequest, Stages};

/// Local/global iterations with the settings of a [`Solver`].
pub(crate) struct LocalGlobal<'a> {
    pub settings: &'a Solver,
    pub iterations: usize,
}

impl NonlinearSolver for LocalGlobal<'_> {
    fn minimize(&self, stages: &mut dyn Stages, role: Role, _start: Option<f64>) -> SolveReport {
        let s = self.settings;
        let request = LocalGlobalRequest {
            iterations: if role == Role::Blend { s.blend_iterations } else { self.iterations },
            gradient_tolerance: s.tolerance,
            record_objectives: s.record_objectives,
            linear_tolerance: s.global_tolerance,
            max_linear_iterations: s.max_linear_iterations,
        };
        let done = stages.local_global(&request);
        if std::env::var_os("LIVELY_TRACE").is_some() {
            eprintln!(
                "local/global: {} iterations, {} linear, |g| {:.3e}, G {:.9e} -> {:.9e}",
                done.iterations,
                done.linear_iterations,
                done.gradient_norm,
                done.start_objective,
                done.objective
            );
        }
        // A rise of G within its noise is no rise: the integrator takes back a solve that
        // raised G (an f32 solve defeated by the conditioning), and where a step's solve
        // changes G by nothing (a body in free fall, whose inertial start is the step) the
        // rounding picked the sign. A steel cube's GPU step was taken back for a rise of
        // 1.5e-8 J, its drag left out.
        let decrease = done.start_objective - done.objective;
        let noise = NOISE_MARGIN * (done.noise_floor + f64::EPSILON * done.objective.abs());
        let objective_decrease = if decrease < 0.0 && -decrease <= noise { 0.0 } else { decrease };
        SolveReport {
            iterations: done.iterations,
            linear_iterations: done.linear_iterations,
            projected_iterations: 0,
            resumed_iterations: 0,
            converged: done.converged,
            round_off: false,
            stalled: done.failed || !done.gradient_norm.is_finite() || !done.objective.is_finite(),
            gradient_norm: done.gradient_norm,
            objective_decrease,
            objectives: if s.record_objectives { vec![done.objectives] } else { Vec::new() },
            times: PhaseTimes {
                evaluate: done.evaluate,
                linear_solve: done.linear_solve,
                ..Default::default()
            },
            invalid_start: false,
            // Its objective is the projective one, not the step's `G`.
            end_objective: None,
        }
    }
}
