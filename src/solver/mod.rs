//! Nonlinear solvers for the implicit step objective. They drive the backend's [`Stages`]
//! and never touch element data themselves.
//!
//! [`Stages`]: crate::backend::Stages

mod line_search;
pub(crate) mod newton;

pub use crate::backend::LinearSolver;
pub use newton::NewtonReport;

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
}

impl Solver {
    fn with_kind(kind: SolverKind) -> Solver {
        Solver {
            kind,
            tolerance: 1e-6,
            max_iterations: 50,
            linear: LinearSolver::Pcg,
            hessian: HessianPolicy::ProjectOnNegativeCurvature,
            max_linear_iterations: 1000,
            spend_budget: false,
        }
    }

    /// Newton's method (the default): tolerance 1e-6 N, at most 50 iterations, Jacobi-PCG.
    pub fn newton() -> Solver {
        Solver::with_kind(SolverKind::Newton)
    }

    /// Local/global iterations (stabilizing-integrators-realtime.md section 4.2).
    pub fn local_global(iterations: usize) -> Solver {
        Solver::with_kind(SolverKind::LocalGlobal { iterations })
    }

    /// Mixed finite elements solved by SQP (mixed-fem-sqp.md).
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
    /// bought.
    pub fn budget(mut self, nonlinear: usize, linear: usize) -> Solver {
        self.max_iterations = nonlinear;
        self.max_linear_iterations = linear;
        self.hessian = HessianPolicy::AlwaysProject;
        self.spend_budget = true;
        self
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
            SolverKind::LocalGlobal { .. } => Err(crate::Error::Unsupported(
                "the local/global solver is not implemented yet; use Solver::newton()".into(),
            )),
            SolverKind::MixedFem => Err(crate::Error::Unsupported(
                "the mixed-FEM SQP solver is not implemented yet; use Solver::newton()".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests;
