//! The element and linear-algebra stages of an implicit step.
//!
//! [`Stages`] is the seam between the host-side solvers and the hardware. The solver never
//! sees the iterate, gradient or search direction: they live in the backend (f64 vectors on
//! the CPU, f32 buffers on a GPU), and only scalars cross — objective values, norms, slopes
//! and iteration counts. That keeps a GPU implementation free of per-iteration readbacks.
//!
//! All quantities are in force units: the step objective is
//! `G(x) = 1/(2h^2) |x - y|_M^2 + sum_q c_q E(theta_q x + (1 - theta_q) x_n)`, which is the
//! paper's `g(x) / h^2`, so gradient norms compare directly with `Solver::tolerance` (N).

pub(crate) mod coarse;
pub mod cpu;
pub(crate) mod fsai;
pub mod gpu;
pub(crate) mod projective;
pub(crate) mod topology;

use crate::material::{Projection, RotationSearch};
use crate::objective::StepProblem;

/// A spring of `stiffness` (N/m) from a vertex to a point the application moves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Anchor {
    /// The vertex pulled.
    pub vertex: u32,
    /// Spring stiffness (N/m).
    pub stiffness: f64,
    /// Where the application holds the other end (m).
    pub position: [f64; 3],
}

/// Which linear solver computes Newton directions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinearSolver {
    /// Jacobi-preconditioned conjugate gradients with early exit on negative curvature.
    Pcg,
    /// Conjugate gradients preconditioned by the local/global matrix `M/h^2 + a L`
    /// (`backend::projective`: the elasticity's Laplacian, unchanged by rotations). The CPU
    /// factors it once per step weight where its factor is small — bodies of up to a few
    /// thousand vertices, elongated ones further — and beyond uses Jacobi with the coarse
    /// correction of `backend::coarse` (affine clusters; 5x fewer iterations on a
    /// 100K-tet bar). A GPU applies its
    /// sparse approximate inverse to bodies above the one-workgroup solve's size (27-41 %
    /// fewer CG iterations than Jacobi's for a third more bytes an iteration), and Jacobi to
    /// smaller ones, whose one-workgroup iteration it would make twice as long.
    PcgProjective,
    /// Sparse Cholesky (faer) with Tikhonov retries; CPU only, for small systems and checks.
    Cholesky,
}

/// How a Newton direction was found.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DirectionReport {
    /// Linear-solver iterations (CG iterations; 1 for a direct solve).
    pub iterations: usize,
    /// CG met a direction of non-positive curvature (or Cholesky found the matrix indefinite).
    pub negative_curvature: bool,
    /// `grad G . d`.
    pub slope: f64,
    /// `|d|`.
    pub norm: f64,
    /// `|grad G|` at the iterate the direction was computed for.
    pub gradient_norm: f64,
}

/// The status of one linearization: the one small readback per Newton iteration.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Linearization {
    /// `|grad G|` over free vertices (N).
    pub gradient_norm: f64,
    /// The total magnitude of the forces being balanced, `sum_v (|inertia_v| + |gravity_v| +
    /// sum |corner forces|)` (N): the unit that makes `gradient_norm` a relative imbalance.
    pub force_scale: f64,
    /// How precisely `G` is known at this iterate: the first-order change of `G` when every
    /// position is rounded, from each vertex's `eps |x_v| (|inertia_v| + |gravity_v| + sum
    /// |corner forces|)`. The CPU adds these up (the worst case; in f64 it seldom matters);
    /// a GPU, whose f32 makes it matter, adds them as independent roundings, in a root sum
    /// of squares, and measures `x_v` in its part's frame (`shaders/gather.wgsl`). Decreases
    /// predicted below this are noise.
    pub noise_floor: f64,
    /// How precisely `|grad G|` is known: the backend's epsilon times `force_scale` (N).
    pub gradient_floor: f64,
    /// Where the iterate is the last iterate plus its whole Newton direction `d`, solved to
    /// the residual `r = -grad G_prev - H d`: `|grad G + r|`, the part of the gradient the
    /// linear model did not predict (N). `None` where the backend does not know it.
    pub model_error: Option<f64>,
}

/// Newton's forcing term: the relative residual its linear solves aim at,
/// `min(1/2, max(sqrt(max(|g|, tol) / force scale), tol / (2 |g|)))`. The first term is the
/// paper's sigma sqrt(|g|) with sigma = 1/sqrt(force scale), so that the term is the square
/// root of the relative force imbalance: loose far from the solution, tight near it. The
/// second stops the last solve from going tighter than the tolerance asks: the next gradient
/// is the residual to first order, so a residual of `tol / 2` already converges (on the
/// 7680-tet beam this cuts the last solve's CG iterations by a third). Twin of
/// `forcing_term` in `shaders/pcg.wgsl`.
pub fn forcing_term(gradient_norm: f64, gradient_tolerance: f64, force_scale: f64) -> f64 {
    let imbalance = gradient_norm.max(gradient_tolerance) / force_scale.max(f64::MIN_POSITIVE);
    0.5f64.min(imbalance.sqrt().max(sufficient_residual(gradient_norm, gradient_tolerance)))
}

/// The relative residual whose full step leaves a gradient of about `tol / 2`.
fn sufficient_residual(gradient_norm: f64, gradient_tolerance: f64) -> f64 {
    0.5 * gradient_tolerance / gradient_norm.max(f64::MIN_POSITIVE)
}

/// The relative residual Newton's solve at `linearization` aims at: the forcing term,
/// tightened to the last solve's when Newton is about to converge. The
/// gradient after a full step is the solve's residual plus the model error, which converges
/// quadratically: `e_k ~ c |g_(k-1)|^2`. Where the model error of the last step
/// (`Linearization::model_error`) predicts the next one at most `tol / 4`, a residual of
/// `tol / 2` converges in this iteration. The loose forcing term would leave its residual
/// above the tolerance instead, and cost another Hessian and solve to remove it.
pub(crate) fn solve_tolerance(linearization: &Linearization, request: &DirectionRequest<'_>) -> f64 {
    let (gradient, tolerance) = (linearization.gradient_norm, request.gradient_tolerance);
    let forcing = forcing_term(gradient, tolerance, linearization.force_scale).min(request.forcing_cap);
    let predicted = match (linearization.model_error, request.previous_gradient_norm) {
        (Some(error), Some(previous)) if previous > 0.0 => error * (gradient / previous).powi(2),
        _ => f64::INFINITY,
    };
    if predicted <= 0.25 * tolerance {
        forcing.min(sufficient_residual(gradient, tolerance))
    } else {
        forcing
    }
}

/// What Newton asks of one linearization.
#[derive(Clone, Copy, Debug)]
pub struct DirectionRequest<'a> {
    /// Exact or PSD-projected element Hessians.
    pub projection: Projection,
    /// Whether to compute a direction at all (not on the final check of an iteration budget).
    pub solve: bool,
    /// Whether the direction comes with this linearization, or is put off to a request
    /// that follows.
    pub deferral: Deferral,
    /// The linear solver.
    pub solver: LinearSolver,
    /// Newton's gradient tolerance (N): at or below it no direction is computed.
    pub gradient_tolerance: f64,
    /// The relative residual to solve to; `None` for Newton's forcing term.
    pub relative_tolerance: Option<f64>,
    /// Linear-solver iteration cap.
    pub max_iterations: usize,
    /// Step lengths at which a backend may evaluate `G(x + alpha d)` in the same round trip
    /// (the line search's first batch).
    pub candidates: &'a [f64],
    /// The last full step aimed below the tolerance: the gradient is probably within it, so
    /// a backend may evaluate it first and the Hessian only if it is not.
    pub likely_converged: bool,
    /// `|grad G|` at the last iterate, when the iterate is its full Newton step: with the
    /// linearization's model error it predicts convergence (see `solve_tolerance`).
    pub previous_gradient_norm: Option<f64>,
    /// The loosest relative residual the forcing term may ask for (1: no bound). Newton
    /// tightens it where full steps along its loose solves stop reducing the gradient.
    pub forcing_cap: f64,
}

impl DirectionRequest<'_> {
    /// Whether this request resumes one deferred with the curvature `deferred_with`, and may
    /// solve from the linearization that one kept.
    pub(crate) fn resumes(&self, deferred_with: Projection) -> bool {
        self.deferral == Deferral::Resume && self.projection == deferred_with
    }
}

/// When a request's direction is solved: with its linearization, or, where the solver likely
/// stops at the iterate, only once the solver has seen that it goes on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Deferral {
    /// With the linearization.
    #[default]
    Solve,
    /// The iterate is likely where the solve ends, though its gradient may be above the
    /// tolerance (a flat step taken from a gradient at its own noise; see
    /// `DEFERRED_SOLVE_NOISE`): a backend that solves before the host has seen the gradient
    /// may leave the direction out. The solver asks again with [`Deferral::Resume`] where it
    /// wants one.
    Defer,
    /// The same request again, at once (no stage called in between), after a deferred one
    /// that gave no direction: a backend that kept that linearization may solve from it
    /// rather than linearize again.
    Resume,
}

/// Where a solve starts: the initial guess of lowest objective.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Start {
    /// This guess, whose objective is known.
    Known {
        /// Its index among the guesses.
        guess: usize,
        /// `G` there.
        objective: f64,
    },
    /// Chosen on the device: its objective comes with the next linearization
    /// ([`NewtonDirection::objective`], [`MixedDirection::objective`]), infinite when no
    /// guess has a finite one.
    Pending,
    /// No guess has a finite objective.
    Invalid,
}

/// What one linearization gave.
#[derive(Clone, Debug, Default)]
pub struct NewtonDirection {
    /// The linearization's status.
    pub linearization: Linearization,
    /// The direction, unless none was asked for (or it was deferred) or the gradient is
    /// within tolerance.
    pub direction: Option<DirectionReport>,
    /// `G(x + alpha d)` for the request's candidates, or empty where the backend does not
    /// evaluate them ahead.
    pub candidates: Vec<f64>,
    /// Time spent linearizing apart from the solve, where the backend can tell them apart.
    pub linearize_time: std::time::Duration,
    /// `G` at the iterate, where the backend chose it and reports its objective here
    /// ([`Start::Pending`]).
    pub objective: Option<f64>,
}

/// What one mixed-FEM linearization gave (`Stages::mixed_direction`).
#[derive(Clone, Debug, Default)]
pub struct MixedDirection {
    /// The displacement formulation's status at the iterate: its gradient norm is the
    /// convergence test, the same as Newton's.
    pub linearization: Linearization,
    /// The position step of the condensed system, with the stretches' step and the
    /// multipliers made alongside: `slope` is the merit's slope along the whole step. `None`
    /// where no step was asked for (or it was deferred) or the gradient is within the
    /// tolerance.
    pub direction: Option<DirectionReport>,
    /// The merit at the iterate, with the new multipliers.
    pub merit: f64,
    /// The merit after the full step (the line search's first candidate), evaluated in the
    /// same round trip.
    pub full_step_merit: f64,
    /// Time spent linearizing apart from the solve.
    pub linearize_time: std::time::Duration,
    /// Time spent in the local solves after the global one.
    pub local_time: std::time::Duration,
    /// `G` at the iterate, where the backend chose it and reports its objective here
    /// ([`Start::Pending`]).
    pub objective: Option<f64>,
}

/// What the local/global solver asks of one solve.
#[derive(Clone, Copy, Debug)]
pub struct LocalGlobalRequest {
    /// At most this many local/global iterations.
    pub iterations: usize,
    /// Stop early once `|grad G|` (N) is at or below this.
    pub gradient_tolerance: f64,
    /// Evaluate `G` after every iteration.
    pub record_objectives: bool,
    /// Relative residual of an iterative global solve (a GPU's PCG).
    pub linear_tolerance: f64,
    /// Iteration cap of an iterative global solve.
    pub max_linear_iterations: usize,
}

impl LocalGlobalRequest {
    /// How far local step `k` (0 at the start, `iterations` at the end) searches its closest
    /// rotations: the first converges (its rotations move the most, and its warm start is the
    /// last solve's, which the CPU resets and a GPU keeps where the node count changed), and so
    /// does the last, whose energy and forces are the state's; those between take one Newton
    /// step (`RotationSearch::OneStep`).
    pub fn rotation_search(&self, k: usize) -> RotationSearch {
        if k == 0 || k == self.iterations { RotationSearch::Converged } else { RotationSearch::OneStep }
    }
}

/// What one local/global solve did.
#[derive(Clone, Debug, Default)]
pub struct LocalGlobalReport {
    /// Global steps taken.
    pub iterations: usize,
    /// Linear-solver iterations summed over the global steps (one per direct solve).
    pub linear_iterations: usize,
    /// `|grad G|` reached the tolerance.
    pub converged: bool,
    /// The global matrix could not be factored (it is positive definite for every valid model).
    pub failed: bool,
    /// `|grad G|` (N) at the returned iterate.
    pub gradient_norm: f64,
    /// `G` at the first iterate.
    pub start_objective: f64,
    /// `G` at the returned iterate.
    pub objective: f64,
    /// How far rounding the returned iterate moves `G` (`Linearization::noise_floor`).
    pub noise_floor: f64,
    /// `G` at the first iterate and after each iteration, when asked.
    pub objectives: Vec<f64>,
    /// Time in the local steps and gradients.
    pub evaluate: std::time::Duration,
    /// Time in the global solves.
    pub linear_solve: std::time::Duration,
}

/// A fixed-budget Newton or mixed-FEM solve (`Solver::budget`), asked for whole: every
/// decision in it — which initial guess, and which step length along each direction — is made
/// by the rule of `cpu/line_search.rs`, which a GPU evaluates on the device, so that it records
/// the whole solve, and the state it ends in, with one readback.
#[derive(Clone, Copy, Debug)]
pub struct BudgetRequest<'a> {
    /// Initial guesses; the last is a fallback, which competes only when some other puts an
    /// element outside its model's domain (an infinite objective; `cpu::line_search::pick`).
    pub guesses: &'a [&'a [[f64; 3]]],
    /// Mixed FEM's SQP iterations (`Stages::mixed_direction`) instead of Newton's. Its steps
    /// are chosen on the merit, and never rescaled: the stretches' step is not linear in the
    /// positions'.
    pub mixed: bool,
    /// Newton (or SQP) iterations (fewer only where the gradient is within the tolerance).
    pub iterations: usize,
    /// Exact or PSD-projected element Hessians.
    pub projection: Projection,
    /// The linear solver.
    pub solver: LinearSolver,
    /// Newton's gradient tolerance (N).
    pub gradient_tolerance: f64,
    /// The relative residual each linear solve aims at.
    pub relative_tolerance: f64,
    /// Linear-solver iteration cap per direction.
    pub max_linear_iterations: usize,
    /// How many step lengths each line search evaluates (`cpu::line_search::step_lengths`).
    pub steps: usize,
    /// Evaluate `alpha = 2` too, and take it when it decreases `G` further.
    pub extrapolate: bool,
}

impl BudgetRequest<'_> {
    /// The request of each of the solve's directions, solved to the budget's relative
    /// residual within its cap, with the line search's `candidates` (Newton's).
    fn direction<'c>(&self, candidates: &'c [f64]) -> DirectionRequest<'c> {
        DirectionRequest {
            projection: self.projection,
            solve: true,
            deferral: Deferral::Solve,
            solver: self.solver,
            gradient_tolerance: self.gradient_tolerance,
            relative_tolerance: Some(self.relative_tolerance),
            max_iterations: self.max_linear_iterations,
            candidates,
            likely_converged: false,
            previous_gradient_norm: None,
            forcing_cap: 1.0,
        }
    }
}

/// What a fixed-budget solve did, and where it ended.
#[derive(Clone, Debug, Default)]
pub struct BudgetSolve {
    /// The guess it started from; `None` when every guess has an infinite objective (nothing
    /// else is then valid).
    pub guess: Option<usize>,
    /// Newton (or SQP) iterations that found the gradient above the tolerance.
    pub iterations: usize,
    /// Linear-solver iterations over all of them.
    pub linear_iterations: usize,
    /// The last such iteration's line search found no acceptable step along a descent
    /// direction (the iterate stayed).
    pub stalled: bool,
    /// `G` at the guess started from.
    pub start_objective: f64,
    /// `G` at the end.
    pub objective: f64,
    /// `|grad G|` (N) at the end.
    pub gradient_norm: f64,
    /// The iterate at the end.
    pub x: Vec<[f64; 3]>,
    /// The step's damping pseudo-potential at the end, as [`Stages::dissipation`] gives it.
    pub dissipation: f64,
}

/// The stages both backends implement with the same meaning.
pub trait Stages: Send {
    /// Loads what stays fixed during one step's minimization.
    fn begin_step(&mut self, problem: StepProblem<'_>);
    /// Whether `begin_step` reads `StepProblem::rigid_steps` (a GPU places its parts' poses
    /// by them); else they are computed only for a solver that takes the rigid guess.
    fn reads_rigid_steps(&self) -> bool {
        false
    }
    /// Sets the handle springs (part of the potential until changed).
    fn set_anchors(&mut self, anchors: &[Anchor]);
    /// Replaces the colliders (same count and kinds; kinematic ones moved).
    fn set_colliders(&mut self, colliders: &[crate::contact::Collider]);
    /// The step's (unweighted) damping pseudo-potential at the iterate; twice it is the energy
    /// the lagged damping and friction removed over the step.
    fn dissipation(&mut self) -> f64;
    /// Sets the iterate `x`.
    fn set_iterate(&mut self, x: &[[f64; 3]]);
    /// Copies the iterate out.
    fn read_iterate(&mut self, out: &mut [[f64; 3]]);
    /// `G` at the iterate (`+inf` where an element is outside its model's domain).
    fn objective(&mut self) -> f64;
    /// `G` at each of `points` (the iterate is left at the last); a GPU evaluates them in
    /// one round trip.
    fn objectives_at(&mut self, points: &[&[[f64; 3]]]) -> Vec<f64> {
        points
            .iter()
            .map(|x| {
                self.set_iterate(x);
                self.objective()
            })
            .collect()
    }
    /// Makes the iterate the guess of lowest finite objective; the last guess, the step's
    /// start, competes only when some other has none (`cpu::line_search::pick`), or always
    /// where [`start_competes`](Self::start_competes). A
    /// GPU decides on the device and reports the objective with the next
    /// [`newton_direction`](Self::newton_direction) or
    /// [`mixed_direction`](Self::mixed_direction) ([`Start::Pending`]).
    fn start_from_best(&mut self, guesses: &[&[[f64; 3]]]) -> Start {
        start_from_best_by_stages(self, guesses)
    }
    /// Whether the step's start competes with the predictions as a starting guess: where
    /// bodies can touch colliders or each other. There the predictions can land far inside
    /// (a cube falling at 3 m/s, 9 cm into the floor) or be flung away by contact forces at x_n
    /// (a barrier's 48 N on a 0.125 kg vertex: 40 cm), and a truncated solve from them cannot
    /// come back: backward Euler capped at 3 Newton iterations reached 1.3e14 J on a cubic
    /// penalty, and under a 2 x 40 budget 4.7e5 J on the barrier (tests/contact.rs).
    /// Elsewhere the predictions come first, as they carry the motion: from the start, a
    /// capped solve of a stiff swinging bar froze (tip RMS against the converged swing
    /// 0.29 -> 0.50 m, tests/mixed_fem.rs), though the start's objective was far lower (a
    /// stiff body's objective measures its strain, which Newton removes at once, not its
    /// distance from the solution).
    fn start_competes(&self) -> bool {
        false
    }
    /// Gradient and Hessian of `G` at the iterate, element Hessians exact or PSD-projected.
    fn linearize(&mut self, projection: Projection) -> Linearization;
    /// The gradient of `G` at the iterate, as [`linearize`](Self::linearize) gives it; a
    /// backend may skip the Hessian, so a solve needs a `linearize` after it.
    fn linearize_gradient(&mut self, projection: Projection) -> Linearization {
        self.linearize(projection)
    }
    /// Solves `H d = -grad G` to relative residual `tolerance` (PCG stops early on negative
    /// curvature and returns its last iterate, or `-grad G` if that happens at once).
    fn solve_direction(
        &mut self,
        solver: LinearSolver,
        tolerance: f64,
        max_iterations: usize,
    ) -> DirectionReport;
    /// Linearizes at the iterate and, unless `request` says not to (or to defer it) or the
    /// gradient is within its tolerance, computes the Newton direction to the forcing term's
    /// relative residual. A GPU does all of it, and the line search's first candidates, in one
    /// round trip.
    fn newton_direction(&mut self, request: &DirectionRequest<'_>) -> NewtonDirection {
        newton_direction_by_stages(self, request)
    }
    /// A fixed-budget Newton or mixed-FEM solve from the best of `request.guesses` (see
    /// [`BudgetRequest`]).
    /// This engine runs it stage by stage, deciding on the host by the same rule a GPU
    /// evaluates on the device.
    fn budget_solve(&mut self, request: &BudgetRequest<'_>) -> BudgetSolve {
        budget_solve_by_stages(self, request)
    }
    /// Local/global (projective dynamics) iterations from the iterate: each evaluates the
    /// projections and `grad G`, then takes the global step `x -= A^-1 grad G` with the fixed
    /// matrix of `projective`. A GPU records every iteration, submitting each as it goes, and
    /// reads the solve back once.
    fn local_global(&mut self, request: &LocalGlobalRequest) -> LocalGlobalReport;
    /// Mixed FEM (mixed-fem-sqp.md): readies the tets' stretches for a solve of this step's
    /// objective, which has one quadrature node. They are kept where the last solve left
    /// them at this step's start (the paper's warm start), else set to the start's.
    fn mixed_begin(&mut self);
    /// Mixed FEM: linearizes at the iterate and the stretches and, unless `request` says not
    /// to or the displacement gradient is within its tolerance, solves the condensed system
    /// for the position step (to Newton's forcing term) and makes the stretches' step and the
    /// multipliers. Uses `projection` nowhere: the stretch Hessians are always projected.
    fn mixed_direction(&mut self, request: &DirectionRequest<'_>) -> MixedDirection;
    /// Mixed FEM: the merit at `alpha` along the step of positions and stretches.
    fn mixed_merits(&mut self, alphas: &[f64]) -> Vec<f64>;
    /// Mixed FEM: `x += alpha dx`, `s += alpha ds`.
    fn mixed_advance(&mut self, alpha: f64);
    /// Replaces the direction by `-grad G`.
    fn use_negative_gradient(&mut self) -> DirectionReport;
    /// Multiplies the direction by `factor`.
    fn scale_direction(&mut self, factor: f64);
    /// Under the projection contact model, the normal force (N) on each vertex that the last
    /// solve's iterate pressed against a collider, zero elsewhere: what friction at the next
    /// step's start needs. Empty otherwise.
    fn pressing_forces(&mut self) -> Vec<f64> {
        Vec::new()
    }
    /// Where the contact model forbids crossing a collider (the barrier): the largest
    /// fraction of the direction whose straight path keeps every free vertex clear of the
    /// colliders (`contact::step_bound`). `None` where any step is allowed.
    fn step_bound(&mut self) -> Option<f64> {
        None
    }
    /// `G(x + alpha d)` for each candidate step, in one batch.
    fn candidate_objectives(&mut self, alphas: &[f64]) -> Vec<f64>;
    /// What Newton will ask at the iterate it moves to: a linearization with element Hessians
    /// projected so (`Some`), or the gradient alone (`None`). A backend may evaluate it
    /// with the full step's objective, in the same element pass.
    fn expect_linearization(&mut self, _next: Option<Projection>) {}
    /// How many line-search candidates are worth evaluating together.
    fn preferred_batch(&self) -> usize;
    /// `x += alpha d`.
    fn advance(&mut self, alpha: f64);
    /// `x = x0 + fraction (x - x0)`, `x0` the iterate before the last [`advance`](Self::advance):
    /// 0 takes that step back, 1/2 halves it (again and again, each time from `x0`). A new
    /// direction solved since does not change where it goes.
    fn retreat(&mut self, fraction: f64);
    /// Total potential energy `E(x)` (elastic, springs, gravity, collider penalties, handles).
    fn potential(&mut self, x: &[[f64; 3]]) -> f64;
    /// The potential `E` and the step's damping pseudo-potential (as
    /// [`dissipation`](Self::dissipation) gives it) at each of `points`; the iterate is left
    /// at the last. A GPU evaluates them in one round trip.
    fn energies_at(&mut self, points: &[&[[f64; 3]]]) -> Vec<(f64, f64)> {
        points
            .iter()
            .map(|x| {
                let potential = self.potential(x);
                self.set_iterate(x);
                (potential, self.dissipation())
            })
            .collect()
    }
    /// `grad E(x)` into `out` (zero rows for pinned vertices).
    fn potential_gradient(&mut self, x: &[[f64; 3]], out: &mut [[f64; 3]]);
    /// A device failure since the last call (the GPU backend records them instead of
    /// panicking; the driver turns them into errors before a result reaches the state).
    fn take_error(&mut self) -> Option<crate::Error> {
        None
    }
    /// Device memory held for this model (bytes), on a GPU backend.
    fn device_memory(&self) -> Option<u64> {
        None
    }
    /// Device work done so far (submissions, readbacks, passes, dispatches), on a GPU backend.
    fn device_counts(&self) -> Option<gpu::DeviceCounts> {
        None
    }
    /// The device context, on a GPU backend.
    fn gpu_context(&self) -> Option<&gpu::GpuContext> {
        None
    }
    /// Makes `x` the state the device's drawable positions show (only an accepted step or a
    /// new state is published, so a failed step leaves them as they were).
    fn publish_positions(&mut self, _x: &[[f64; 3]]) {}
    /// The device buffer with the current positions (3 f32 per vertex), on a GPU backend.
    fn positions_buffer(&self) -> Option<&wgpu::Buffer> {
        None
    }
}

/// [`Stages::newton_direction`] stage by stage: the gradient first where the request expects
/// no direction to be wanted (likely converged, deferred, or none asked), the Hessian and the
/// solve only where one is.
pub(crate) fn newton_direction_by_stages<S: Stages + ?Sized>(
    stages: &mut S,
    request: &DirectionRequest<'_>,
) -> NewtonDirection {
    let started = std::time::Instant::now();
    let solves = request.solve && request.deferral != Deferral::Defer;
    let mut linearization = if request.likely_converged || !solves {
        stages.linearize_gradient(request.projection)
    } else {
        stages.linearize(request.projection)
    };
    let wanted = solves && linearization.gradient_norm > request.gradient_tolerance;
    if wanted && request.likely_converged {
        linearization = stages.linearize(request.projection);
    }
    let linearize_time = started.elapsed();
    let direction = wanted.then(|| {
        let relative = solve_tolerance(&linearization, request);
        stages.solve_direction(request.solver, relative, request.max_iterations)
    });
    NewtonDirection { linearization, direction, candidates: Vec::new(), linearize_time, objective: None }
}

/// A fixed-budget solve run stage by stage, each decision made on the host by the rule a GPU
/// evaluates on the device (`cpu/line_search.rs`): the CPU's way, and a GPU's for budgets too
/// large to record whole.
pub(crate) fn budget_solve_by_stages<S: Stages + ?Sized>(
    stages: &mut S,
    request: &BudgetRequest<'_>,
) -> BudgetSolve {
    use cpu::line_search::{choose, next_scale, step_lengths};
    let Start::Known { guess, objective: mut value } = start_from_best_by_stages(stages, request.guesses)
    else {
        return BudgetSolve::default();
    };
    let alphas = step_lengths(request.steps, request.extrapolate);
    let mut solve = BudgetSolve { guess: Some(guess), start_objective: value, ..BudgetSolve::default() };
    if request.mixed {
        return mixed_budget_by_stages(stages, request, &alphas, solve);
    }
    let mut scale = 1.0;
    for k in 0..request.iterations {
        let found = stages.newton_direction(&request.direction(&alphas));
        // Within the tolerance: the rest of the budget would leave the iterate as it is.
        let Some(mut direction) = found.direction else { break };
        let mut ahead = found.candidates;
        // After a batch that found no decrease, this one goes on where it stopped.
        if scale != 1.0 {
            stages.scale_direction(scale);
            direction.slope *= scale;
            ahead.clear();
        }
        // A barrier's collision-free bound (see `Stages::step_bound`), with no extrapolation.
        let bound = stages.step_bound();
        if let Some(factor) = bound.filter(|&b| b < 1.0) {
            stages.scale_direction(factor);
            direction.slope *= factor;
            ahead.clear();
        }
        solve.iterations += 1;
        solve.linear_iterations += direction.iterations;
        // A backend that pays per evaluation (the CPU) evaluates the candidates as the rule
        // asks for them, the full step's with the next iteration's linearization.
        let last = k + 1 == request.iterations;
        stages.expect_linearization((!last).then_some(request.projection));
        let (alpha, next) = choose(
            value,
            direction.slope,
            found.linearization.noise_floor,
            f64::EPSILON,
            request.steps,
            request.extrapolate && bound.is_none(),
            |j| match ahead.get(j) {
                Some(&v) if ahead.len() == alphas.len() => v,
                _ => stages.candidate_objectives(&alphas[j..=j])[0],
            },
        );
        solve.stalled = alpha == 0.0 && direction.slope < 0.0;
        scale = next_scale(scale, alpha, direction.slope);
        if alpha != 0.0 {
            stages.advance(alpha);
            value = next;
        }
    }
    solve.objective = value;
    budget_end(stages, request, solve)
}

/// A fixed-budget mixed-FEM solve from the iterate, run stage by stage: each SQP iteration
/// takes the step among `alphas` that [`choose`](cpu::line_search::choose) takes on the merit
/// (none where none lowers it enough), as a GPU decides it on the device. The merits past the
/// full step are evaluated only as the rule asks for them.
fn mixed_budget_by_stages<S: Stages + ?Sized>(
    stages: &mut S,
    request: &BudgetRequest<'_>,
    alphas: &[f64],
    mut solve: BudgetSolve,
) -> BudgetSolve {
    stages.mixed_begin();
    for _ in 0..request.iterations {
        let found = stages.mixed_direction(&request.direction(&[]));
        // Within the tolerance: the rest of the budget would leave the iterate as it is.
        let Some(direction) = found.direction else { break };
        solve.iterations += 1;
        solve.linear_iterations += direction.iterations;
        let (alpha, _) = cpu::line_search::choose(
            found.merit,
            direction.slope,
            found.linearization.noise_floor,
            f64::EPSILON,
            request.steps,
            false,
            |j| match j {
                0 => found.full_step_merit,
                _ => stages.mixed_merits(&alphas[j..=j])[0],
            },
        );
        solve.stalled = alpha == 0.0 && direction.slope < 0.0;
        if alpha != 0.0 {
            stages.mixed_advance(alpha);
        }
    }
    solve.objective = stages.objective();
    budget_end(stages, request, solve)
}

/// A budgeted solve's end, read stage by stage: the gradient norm, the iterate and the
/// dissipation there.
fn budget_end<S: Stages + ?Sized>(
    stages: &mut S,
    request: &BudgetRequest<'_>,
    mut solve: BudgetSolve,
) -> BudgetSolve {
    solve.gradient_norm = stages.linearize_gradient(request.projection).gradient_norm;
    let mut x = vec![[0.0; 3]; request.guesses[0].len()];
    stages.read_iterate(&mut x);
    solve.x = x;
    solve.dissipation = stages.dissipation();
    solve
}

/// [`Stages::start_from_best`] with the objectives read back: the objective is known.
pub(crate) fn start_from_best_by_stages<S: Stages + ?Sized>(
    stages: &mut S,
    guesses: &[&[[f64; 3]]],
) -> Start {
    // A fallback is evaluated only when it competes (the rule of `pick` with a fallback).
    let fallback = !stages.start_competes();
    let primary = guesses.len().saturating_sub(usize::from(fallback));
    let mut values = stages.objectives_at(&guesses[..primary]);
    if values.iter().any(|v| !v.is_finite()) {
        values.extend(stages.objectives_at(&guesses[primary..]));
    }
    match cpu::line_search::pick(&values, fallback && values.len() == guesses.len()) {
        Some(guess) => {
            stages.set_iterate(guesses[guess]);
            Start::Known { guess, objective: values[guess] }
        }
        None => Start::Invalid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The forcing term, unless the last step's model error predicts that a solve to `tol / 2`
    /// converges now.
    #[test]
    fn the_solve_tightens_only_where_newton_is_about_to_converge() {
        let request = |previous| DirectionRequest {
            projection: Projection::None,
            solve: true,
            deferral: Deferral::Solve,
            solver: LinearSolver::Pcg,
            gradient_tolerance: 1e-6,
            relative_tolerance: None,
            max_iterations: 100,
            candidates: &[],
            likely_converged: false,
            previous_gradient_norm: previous,
            forcing_cap: 1.0,
        };
        let at = |gradient_norm, model_error| Linearization {
            gradient_norm,
            force_scale: 1e4,
            noise_floor: 0.0,
            gradient_floor: 0.0,
            model_error,
        };
        let forcing = forcing_term(1e-2, 1e-6, 1e4);
        assert_eq!(forcing, 1e-3);
        // Unknown error, or no previous gradient: the forcing term.
        assert_eq!(solve_tolerance(&at(1e-2, None), &request(Some(1.0))), forcing);
        assert_eq!(solve_tolerance(&at(1e-2, Some(1e-3)), &request(None)), forcing);
        // The last step from |g| = 1 missed by 1e-3, so from 1e-2 it should miss by 1e-7:
        // a solve to 5e-7 absolute converges now.
        let tightened = solve_tolerance(&at(1e-2, Some(1e-3)), &request(Some(1.0)));
        assert!((tightened - 5e-5).abs() < 1e-18, "{tightened}");
        // Missed by 1e-2: the next miss, 1e-6, is too large for that.
        assert_eq!(solve_tolerance(&at(1e-2, Some(1e-2)), &request(Some(1.0))), forcing);
    }
}
