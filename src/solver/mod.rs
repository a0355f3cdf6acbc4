//! Nonlinear solvers for the implicit step objective. They drive the backend's [`Stages`]
//! and never touch element data themselves.
//!
//! [`Stages`]: crate::backend::Stages

pub(crate) mod line_search;
mod local_global;
mod mixed_fem;
pub(crate) mod newton;

use std::time::Duration;

pub use crate::backend::LinearSolver;
use crate::backend::Stages;

/// After a flat step taken from a gradient within this many times its noise
/// (`Linearization::gradient_floor`), the next linearization asks for its direction only once
/// the solver has seen it goes on ([`Deferral::Defer`](crate::backend::Deferral)). Such a
/// step ended a Newton solve 137 times in 161 in a sample of GPU runs (backward Euler,
/// A-search, BDF2 and midpoint on StVK, stable neo-Hookean and corotated bars), and a
/// mixed-FEM solve 13 times in 18 (the `mixed_fem` bench's soft bar, 20 steps from rest, on
/// lavapipe); the direction a GPU solved ahead was thrown away each time.
const DEFERRED_SOLVE_NOISE: f64 = 2.0;

/// Time spent per phase of a step.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PhaseTimes {
    /// Element passes: objective, gradient (local projections) and Hessian evaluation and
    /// assembly.
    pub evaluate: Duration,
    /// Linear solves: Newton directions, local/global steps, the mixed solver's global step.
    pub linear_solve: Duration,
    /// The mixed solver's local solves (stretches and multipliers).
    pub local_solve: Duration,
    /// Line-search objective evaluations.
    pub line_search: Duration,
}

impl PhaseTimes {
    /// Adds another solve's times, phase by phase.
    pub(crate) fn add(&mut self, other: &PhaseTimes) {
        self.evaluate += other.evaluate;
        self.linear_solve += other.linear_solve;
        self.local_solve += other.local_solve;
        self.line_search += other.line_search;
    }
}

/// What a minimization did, whichever solver did it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SolveReport {
    /// Outer iterations (Newton iterations, local/global iterations).
    pub iterations: usize,
    /// Linear-solver iterations summed over the outer iterations.
    pub linear_iterations: usize,
    /// Newton iterations that fell back to PSD-projected element Hessians.
    pub projected_iterations: usize,
    /// Iterations whose solve was deferred where the iterate looked final, and then asked
    /// for ([`Deferral`](crate::backend::Deferral)): a second request each.
    pub resumed_iterations: usize,
    /// The gradient norm reached the tolerance.
    pub converged: bool,
    /// Stopped before the tolerance because `G` could not resolve further decrease.
    pub round_off: bool,
    /// Stopped before the tolerance with no way forward: the line search found no decrease
    /// along a downhill direction, or the gradient was not finite.
    pub stalled: bool,
    /// `|grad G|` (N) at the returned iterate.
    pub gradient_norm: f64,
    /// How much the solves lowered their objectives, `G(start) - G(end)` summed (J).
    pub objective_decrease: f64,
    /// `G` at the start and after every iteration, one list per solve, when the solver was
    /// asked to record them ([`Solver::record_objectives`]).
    pub objectives: Vec<Vec<f64>>,
    /// Phase timings.
    pub times: PhaseTimes,
    /// The solve started from a guess the backend chose, and no guess had a finite objective.
    pub(crate) invalid_start: bool,
    /// `G` at the returned iterate, where the solver knows it (Newton, mixed FEM).
    pub(crate) end_objective: Option<f64>,
}

impl SolveReport {
    /// A report for a step that has not solved anything yet.
    pub(crate) fn empty() -> SolveReport {
        SolveReport { converged: true, ..SolveReport::default() }
    }

    /// Adds another solve of the same step: counts and times add up; the step converged if
    /// every solve reached its tolerance or the round-off limit.
    pub(crate) fn accumulate(&mut self, other: SolveReport) {
        self.iterations += other.iterations;
        self.linear_iterations += other.linear_iterations;
        self.projected_iterations += other.projected_iterations;
        self.resumed_iterations += other.resumed_iterations;
        self.converged &= other.converged || other.round_off;
        self.round_off |= other.round_off;
        self.stalled |= other.stalled;
        self.gradient_norm = other.gradient_norm;
        self.objective_decrease += other.objective_decrease;
        self.end_objective = other.end_objective;
        self.objectives.extend(other.objectives);
        self.times.add(&other.times);
    }
}

/// Which solve of a step is asked for: the scheme's own, or the backward-Euler solve that a
/// stabilized step blends with (the local/global solver gives it fewer iterations).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Solve,
    Blend,
}

/// A nonlinear solver of the step objective, from the backend's current iterate (whose
/// objective `start` is, when the caller has evaluated it). The integrators ask for a
/// minimization and do not know which solver answers.
pub(crate) trait NonlinearSolver {
    fn minimize(&self, stages: &mut dyn Stages, role: Role, start: Option<f64>) -> SolveReport;
}

/// Which element Hessians Newton uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HessianPolicy {
    /// The exact Hessian while CG finds it positive definite; the PSD-projected one for an
    /// iteration where CG meets negative curvature. Keeps Newton's quadratic convergence
    /// near the solution.
    ProjectOnNegativeCurvature,
    /// Always the PSD projection (robust, but only linear convergence near the solution).
    AlwaysProject,
}

/// The nonlinear solver family.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SolverKind {
    /// Newton's method with the safeguards of the optimization integrator.
    Newton,
    /// Local/global (projective dynamics) iterations, a fixed count per step.
    LocalGlobal {
        /// Iterations per step.
        iterations: usize,
    },
    /// Mixed finite elements solved by SQP.
    MixedFem,
}

/// Solver settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Solver {
    pub(crate) kind: SolverKind,
    pub(crate) tolerance: f64,
    pub(crate) max_iterations: usize,
    pub(crate) linear: LinearSolver,
    pub(crate) hessian: HessianPolicy,
    pub(crate) max_linear_iterations: usize,
    /// A fixed budget: linear solves run to their iteration cap instead of stopping at the
    /// forcing term.
    pub(crate) spend_budget: bool,
    /// Local/global iterations of the backward-Euler solve a stabilized step blends with.
    pub(crate) blend_iterations: usize,
    /// Relative residual of the iterative global solves (a GPU's PCG) of local/global.
    pub(crate) global_tolerance: f64,
    /// Record `G` after every iteration into `StepStats::objectives`.
    pub(crate) record_objectives: bool,
    /// A step's time budget, and the instant the current step's runs out.
    pub(crate) wall_time: Option<std::time::Duration>,
    pub(crate) deadline: Option<std::time::Instant>,
}

impl Solver {
    fn with_kind(kind: SolverKind) -> Solver {
        Solver {
            kind,
            tolerance: 1e-6,
            max_iterations: 50,
            linear: LinearSolver::PcgProjective,
            hessian: HessianPolicy::ProjectOnNegativeCurvature,
            max_linear_iterations: 1000,
            spend_budget: false,
            blend_iterations: 1,
            global_tolerance: 1e-2,
            record_objectives: false,
            wall_time: None,
            deadline: None,
        }
    }

    /// Newton's method (the default): tolerance 1e-6 N, at most 50 iterations, PCG
    /// preconditioned by the local/global matrix ([`LinearSolver::PcgProjective`]): on the
    /// CPU by its factor where that is small (3-6x fewer CG iterations than Jacobi on the
    /// benchmark beams), on a GPU by its approximate inverse at mid sizes (27-36 % fewer),
    /// and by Jacobi elsewhere.
    pub fn newton() -> Solver {
        Solver::with_kind(SolverKind::Newton)
    }

    /// Local/global (projective dynamics) iterations, `iterations` per solve
    /// (stabilizing-integrators-realtime.md section 4.2): the real-time solver. Each
    /// iteration projects every element onto its constraint sets and takes the global step
    /// with a matrix fixed for the step weight (factored once on the CPU, PCG on a GPU), and
    /// never increases the step objective. With penalty colliders the matrix also carries the
    /// stiffness of the vertices that have touched one during the solve, and a step stops where
    /// another would enter (docs/contact.md). The energy must have a projective form: corotated
    /// or ARAP tets, Hooke springs, gravity, handles, colliders, ether drag and friction
    /// (Rayleigh damping has none; use `Damping::MomentumPreserving`, the stabilizing paper's
    /// model). Stops early at the tolerance; a step that does not reach it reports
    /// `SolveOutcome::BudgetSpent`. The backward-Euler solve of a stabilized step gets
    /// [`blend_iterations`](Self::blend_iterations) (default 1, the paper's real-time column).
    pub fn local_global(iterations: usize) -> Solver {
        Solver::with_kind(SolverKind::LocalGlobal { iterations })
    }

    /// Local/global iterations of the backward-Euler solve a stabilized step blends with.
    pub fn blend_iterations(mut self, iterations: usize) -> Solver {
        self.blend_iterations = iterations;
        self
    }

    /// Relative residual to which a GPU's CG, preconditioned by the sparse approximate inverse
    /// of the step's matrix, solves each local/global step (default 1e-2); the CPU solves them
    /// exactly. Projective dynamics' own error dominates: on the bunny
    /// (19K tets), 10 iterations at 1e-2 end within 0.2 % of the exact solves' objective gap,
    /// at 1e-1 within 1.2 %, with half and a quarter of the CG iterations of 1e-4
    /// (docs/perf/local-global.md).
    pub fn global_tolerance(mut self, tolerance: f64) -> Solver {
        self.global_tolerance = tolerance;
        self
    }

    /// Records `G` at the start and after every iteration of every solve into
    /// `StepStats::objectives`, to watch a solver converge (costs one energy pass per iteration).
    pub fn record_objectives(mut self, record: bool) -> Solver {
        self.record_objectives = record;
        self
    }

    /// Mixed finite elements solved by SQP (mixed-fem-sqp.md): every tet carries its
    /// symmetric stretch as a variable, and each iteration solves a positive definite
    /// condensed system (PCG preconditioned as Newton's, or Cholesky) followed by local
    /// updates and a line search on a merit function. Converges to Newton's answer (the same
    /// gradient test, tolerance 1e-6 N) about as fast (its condensed system keeps the
    /// constraints' curvature, which the paper drops, exact while it is positive definite
    /// and projected on negative curvature as [`HessianPolicy`] says), far faster on stiff
    /// bodies that rotate;
    /// stopped early ([`max_iterations`](Self::max_iterations), [`budget`](Self::budget),
    /// [`wall_time`](Self::wall_time)) it damps the motion less than Newton stopped the same.
    /// Stretches are kept from step to step. On both backends (a GPU records an iteration —
    /// linearization, condensed solve, local update, merit — with one readback), for
    /// integrators with one quadrature node (all implicit ones but AVF).
    pub fn mixed_fem() -> Solver {
        Solver::with_kind(SolverKind::MixedFem)
    }

    /// Stop when the gradient norm of the step objective, in force units (N) over the free
    /// vertices, falls below `tolerance`. A solve may stop earlier only at round-off.
    pub fn tolerance(mut self, tolerance: f64) -> Solver {
        self.tolerance = tolerance;
        self
    }

    /// At most this many outer iterations per step.
    pub fn max_iterations(mut self, max_iterations: usize) -> Solver {
        self.max_iterations = max_iterations;
        self
    }

    /// Linear solver for Newton directions.
    pub fn linear_solver(mut self, linear: LinearSolver) -> Solver {
        self.linear = linear;
        self
    }

    /// At most this many CG iterations per Newton direction.
    pub fn max_linear_iterations(mut self, iterations: usize) -> Solver {
        self.max_linear_iterations = iterations;
        self
    }

    /// A fixed-cost step for real-time use: `nonlinear` Newton iterations of `linear` CG
    /// iterations each, fewer only where the tolerance is met. The budget is spent, not
    /// thrown away: every solve runs to its cap (rather than stopping at the loose forcing
    /// term that suits converged solves) on PSD-projected element Hessians (so that negative
    /// curvature cannot end a solve early). `StepStats::objective_decrease` says what it
    /// bought. Every decision is made by a rule a GPU evaluates on the device — the lowest of
    /// the initial guesses, and along each direction the longest of the step lengths
    /// `1, 1/2, 1/4, 1/8, 1/64` with Armijo's decrease (`2` where that decreases the objective
    /// further; none, keeping the iterate, where no length does, and the next iteration's
    /// lengths then go on from 1/128) — so that a GPU step is one readback. A step whose
    /// budget ends absurdly far up its objective (more than a million times as high above
    /// its floor as the step's start: predictions flung hundreds of metres by a violent
    /// state) spends the budget once more from the start, and costs twice as much.
    /// With contact, AVF, implicit midpoint and Newmark refuse a budget (their velocities keep
    /// an unconverged solve's error, which grew without bound at impacts). Combined with [`wall_time`](Self::wall_time), the host
    /// drives it iteration by iteration instead, to watch the clock.
    ///
    /// On [`mixed_fem`](Self::mixed_fem) the iterations are SQP iterations, with the
    /// constraints' curvature projected; each takes the longest of `1, 1/2, 1/4, 1/8, 1/64`
    /// with Armijo's decrease of the merit, or none, never `2` and never rescaled (its
    /// stretches' step is not linear in the positions'), and a GPU also runs the whole solve
    /// in one readback.
    pub fn budget(mut self, nonlinear: usize, linear: usize) -> Solver {
        self.max_iterations = nonlinear;
        self.max_linear_iterations = linear;
        self.hessian = HessianPolicy::AlwaysProject;
        self.spend_budget = true;
        self
    }

    /// A wall-clock budget per step, for a frame loop: Newton starts no new iteration once
    /// `time` has passed since the step began (the first always runs), so a step returns
    /// within the budget plus about one iteration, with the best state found — the objective
    /// never rises, so it is no worse than the step's initial guess — and
    /// `SolveOutcome::BudgetSpent` when it stopped short. Local/global's cost is set by its
    /// iteration count instead, and ignores this.
    pub fn wall_time(mut self, time: std::time::Duration) -> Solver {
        self.wall_time = Some(time);
        self
    }

    /// These settings for a step that began at `started`: the wall-time budget's deadline set.
    pub(crate) fn for_step(&self, started: std::time::Instant) -> Solver {
        Solver { deadline: self.wall_time.map(|time| started + time), ..self.clone() }
    }

    /// Which element Hessians Newton uses.
    pub fn hessian(mut self, policy: HessianPolicy) -> Solver {
        self.hessian = policy;
        self
    }

    /// The solver family.
    pub fn kind(&self) -> SolverKind {
        self.kind
    }

    pub(crate) fn validate(&self) -> crate::Result<()> {
        if !(self.tolerance.is_finite() && self.tolerance >= 0.0) {
            return Err(crate::Error::Parameter(format!(
                "solver tolerance must be finite and not negative, got {}",
                self.tolerance
            )));
        }
        if self.max_iterations == 0 || self.max_linear_iterations == 0 {
            return Err(crate::Error::Parameter(
                "solver max_iterations and max_linear_iterations must be at least 1".into(),
            ));
        }
        match self.kind {
            SolverKind::Newton => Ok(()),
            SolverKind::LocalGlobal { iterations } => {
                if iterations == 0 || self.blend_iterations == 0 {
                    return Err(crate::Error::Parameter(
                        "local/global iterations and blend_iterations must be at least 1".into(),
                    ));
                }
                if !(self.global_tolerance > 0.0 && self.global_tolerance < 1.0) {
                    return Err(crate::Error::Parameter(format!(
                        "global_tolerance must lie in (0, 1), got {}",
                        self.global_tolerance
                    )));
                }
                Ok(())
            }
            SolverKind::MixedFem => Ok(()),
        }
    }
}

impl Solver {
    /// Whether the solver starts from the best of the optimization integrator's guesses
    /// (Newton), rather than from the warm start or inertia (local/global).
    pub(crate) fn compares_guesses(&self) -> bool {
        !matches!(self.kind, SolverKind::LocalGlobal { .. })
    }

    /// Newton with these settings (tolerance, caps, linear solver, Hessian policy).
    pub(crate) fn as_newton(&self) -> Solver {
        Solver { kind: SolverKind::Newton, ..self.clone() }
    }

    /// The element Hessians Newton linearizes with first at every iterate.
    pub(crate) fn base_projection(&self) -> crate::material::Projection {
        match self.hessian {
            HessianPolicy::AlwaysProject => crate::material::Projection::Psd,
            HessianPolicy::ProjectOnNegativeCurvature => crate::material::Projection::None,
        }
    }

    /// Minimizes the step objective from the backend's iterate (of objective `start`, when
    /// known) with this solver.
    pub(crate) fn minimize(&self, stages: &mut dyn Stages, role: Role, start: Option<f64>) -> SolveReport {
        match self.kind {
            SolverKind::Newton => newton::Newton(self).minimize(stages, role, start),
            SolverKind::LocalGlobal { iterations } => {
                local_global::LocalGlobal { settings: self, iterations }.minimize(stages, role, start)
            }
            SolverKind::MixedFem => mixed_fem::MixedFem(self).minimize(stages, role, start),
        }
    }
}

#[cfg(test)]
mod tests;
