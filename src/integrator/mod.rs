//! Time integrators. Every implicit scheme is an inertial target `y`, quadrature nodes for
//! the potential and a velocity update (DESIGN.md section 2); the shared objective and the
//! solver do the rest. One file per scheme.

mod a_search;
mod avf;
mod backward_euler;
mod bdf2;
pub mod energy_ledger;
mod forward_euler;
mod implicit_midpoint;
mod newmark;
pub(crate) mod rigid_guess;
mod stabilized;
mod symplectic_euler;

pub use energy_ledger::EnergyLedger;

use std::borrow::Cow;

use crate::backend::{Stages, Start};
use crate::error::{Error, Result};
use crate::model::Model;
use crate::objective::{LaggedDamping, Node, StepProblem};
use crate::solver::{Role, SolveReport, Solver};

/// Exponential decay of the energy target toward `ground`:
/// `target(t) = ground + (H0 - ground) exp(-t / time_constant)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decay {
    /// Time constant tau (s).
    pub time_constant: f64,
    /// Energy level (J) the target decays toward.
    pub ground: f64,
}

/// The time-integration scheme.
#[derive(Clone, Debug, PartialEq)]
pub enum Integrator {
    /// Explicit Euler (for comparison; unstable at game time steps).
    ForwardEuler,
    /// Symplectic (semi-implicit) Euler: velocity first, then position.
    SymplecticEuler,
    /// Backward Euler (BDF1): unconditionally stable, dissipative.
    BackwardEuler,
    /// Second-order backward differentiation; backward Euler for its first step.
    Bdf2,
    /// Implicit midpoint: symplectic, momentum-preserving, may blow up in energy.
    ImplicitMidpoint,
    /// Newmark with beta = 1/4, gamma = 1/2 (trapezoidal rule).
    Newmark,
    /// Average Vector Field with Simpson quadrature: exact energy conservation for StVK.
    Avf,
    /// Implicit midpoint blended with backward/forward Euler to track the energy target.
    Stabilized {
        /// Relative energy band.
        epsilon: f64,
    },
    /// Backward-Euler positions with the full conservative velocity correction.
    A1,
    /// Backward-Euler positions with an alpha-scaled velocity correction following the target.
    ASearch {
        /// Lower clip of alpha. At 0 (the crate's and the paper's choice) a step that cannot
        /// reach the target falls back to backward Euler's velocity. Above 0 A-search leans
        /// toward A-1: where the target's root lies below the clip, the step keeps the clip and
        /// ends above the target, and on a stiff body released far from rest at a large step
        /// (where the correction `dv` is large) that gain, like A-1's, has no bound.
        alpha_min: f64,
        /// Upper clip of alpha.
        alpha_max: f64,
        /// Optional exponential decay of the target.
        decay: Option<Decay>,
    },
}

impl Integrator {
    /// Every integrator, plain and energy-controlled, with the crate's default parameters for
    /// the controlled ones (stabilized epsilon 0.01, A-search alpha in [0, 1.1]).
    pub const ALL: [Integrator; 10] = [
        Integrator::ForwardEuler,
        Integrator::SymplecticEuler,
        Integrator::BackwardEuler,
        Integrator::Bdf2,
        Integrator::ImplicitMidpoint,
        Integrator::Newmark,
        Integrator::Avf,
        Integrator::Stabilized { epsilon: 0.01 },
        Integrator::A1,
        Integrator::ASearch { alpha_min: 0.0, alpha_max: 1.1, decay: None },
    ];

    /// The implicit scheme behind this integrator, if it is one of the plain implicit ones.
    pub(crate) fn scheme(&self) -> Option<&'static dyn Scheme> {
        match self {
            Integrator::BackwardEuler => Some(&backward_euler::BackwardEuler),
            Integrator::Bdf2 => Some(&bdf2::Bdf2),
            Integrator::ImplicitMidpoint => Some(&implicit_midpoint::ImplicitMidpoint),
            Integrator::Newmark => Some(&newmark::Newmark),
            Integrator::Avf => Some(&avf::Avf),
            _ => None,
        }
    }

    /// The explicit update, if this is an explicit integrator.
    pub(crate) fn explicit(&self) -> Option<fn(&StepInput<'_>) -> Motion> {
        match self {
            Integrator::ForwardEuler => Some(forward_euler::step),
            Integrator::SymplecticEuler => Some(symplectic_euler::step),
            _ => None,
        }
    }

    /// Whether this integrator follows the energy ledger's target.
    pub fn is_energy_controlled(&self) -> bool {
        matches!(self, Integrator::Stabilized { .. } | Integrator::A1 | Integrator::ASearch { .. })
    }

    /// Checks the integrator's own parameters.
    pub(crate) fn validate(&self) -> Result<()> {
        match *self {
            Integrator::Stabilized { epsilon }
                if !(epsilon.is_finite() && epsilon > 0.0 && epsilon < 1.0) =>
            {
                Err(Error::Parameter(format!("Stabilized epsilon must lie in (0, 1), got {epsilon}")))
            }
            Integrator::ASearch { alpha_min, alpha_max, decay } => {
                if !(alpha_min.is_finite() && alpha_max.is_finite() && alpha_min <= alpha_max) {
                    return Err(Error::Parameter(format!(
                        "ASearch needs finite alpha_min <= alpha_max, got [{alpha_min}, {alpha_max}]"
                    )));
                }
                match decay {
                    Some(Decay { time_constant, ground })
                        if !(time_constant.is_finite() && time_constant > 0.0 && ground.is_finite()) =>
                    {
                        Err(Error::Parameter(format!(
                            "Decay needs a positive time constant and a finite ground, got {time_constant} and {ground}"
                        )))
                    }
                    _ => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }

    /// The decay of the energy target, if any.
    pub(crate) fn decay(&self) -> Option<Decay> {
        match self {
            Integrator::ASearch { decay, .. } => *decay,
            _ => None,
        }
    }

    /// Advances one step. `target` is the ledger's energy target for this step.
    pub(crate) fn advance(&self, stepper: &mut Stepper<'_>, target: f64) -> Result<Outcome> {
        if let Some(explicit) = self.explicit() {
            let (x, v) = explicit(&stepper.input);
            return Ok(Outcome { x, v, alpha: None, dissipated: 0.0, theta: 0.0 });
        }
        if let Some(scheme) = self.scheme() {
            let solved = stepper.implicit(scheme, None, Role::Solve)?;
            let (x, v, dissipated, theta) = (solved.x, solved.v, solved.dissipated, solved.theta);
            return Ok(Outcome { x, v, alpha: None, dissipated, theta });
        }
        match *self {
            Integrator::Stabilized { epsilon } => stabilized::step(stepper, epsilon, target),
            Integrator::A1 => a_search::step(stepper, None, target),
            Integrator::ASearch { alpha_min, alpha_max, .. } => {
                a_search::step(stepper, Some((alpha_min, alpha_max)), target)
            }
            _ => unreachable!("every integrator is explicit, plain implicit or controlled"),
        }
    }

    /// A short lower-case name (`be`, `bdf2`, `im`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Integrator::ForwardEuler => "fe",
            Integrator::SymplecticEuler => "se",
            Integrator::BackwardEuler => "be",
            Integrator::Bdf2 => "bdf2",
            Integrator::ImplicitMidpoint => "im",
            Integrator::Newmark => "newmark",
            Integrator::Avf => "avf",
            Integrator::Stabilized { .. } => "stabilized",
            Integrator::A1 => "a1",
            Integrator::ASearch { .. } => "a-search",
        }
    }
}

/// Positions and velocities, one each per vertex.
pub(crate) type Motion = (Vec<[f64; 3]>, Vec<[f64; 3]>);
/// [`Motion`] borrowed.
pub(crate) type MotionRef<'a> = (&'a [[f64; 3]], &'a [[f64; 3]]);

/// What a scheme may read at the start of a step.
pub(crate) struct StepInput<'a> {
    pub dt: f64,
    pub positions: &'a [[f64; 3]],
    pub velocities: &'a [[f64; 3]],
    /// The previous step's positions and velocities, if there was one.
    pub previous: Option<MotionRef<'a>>,
    /// Where between the previous step's start (0) and end (1) its solve balanced the forces
    /// ([`Outcome::theta`]).
    pub previous_theta: f64,
    /// `M^-1 f(x_n)`, zero on pinned vertices.
    pub acceleration: &'a [[f64; 3]],
}

/// An implicit step's objective: inertial target and quadrature nodes.
pub(crate) struct Plan {
    pub target: Vec<[f64; 3]>,
    pub nodes: Vec<Node>,
    /// The target is inertia alone, `x_n + h v_n` (backward Euler, implicit midpoint): the
    /// inertial guess is then the target itself, which a GPU already holds.
    pub inertial: bool,
}

/// A plain implicit scheme.
pub(crate) trait Scheme: Sync {
    /// The objective of this step.
    fn plan(&self, input: &StepInput<'_>) -> Plan;
    /// Velocities once the step's positions `x` are known.
    fn velocity(&self, input: &StepInput<'_>, x: &[[f64; 3]]) -> Vec<[f64; 3]>;
    /// How the scheme weights a force acting at the end of the step: damping enters the
    /// objective with this weight so that it exerts the same force under every scheme.
    /// The trapezoidal family's `v = 2 (x - x_n)/h - v_n` doubles what enters the objective.
    fn damping_weight(&self, _input: &StepInput<'_>) -> f64 {
        0.5
    }
}

/// `sum_k w_k a_k` per vertex, for the short linear combinations the schemes are made of.
pub(crate) fn combine<const K: usize>(terms: [(f64, &[[f64; 3]]); K]) -> Vec<[f64; 3]> {
    let n = terms[0].1.len();
    crate::math::per_vertex(n, |v| {
        let mut out = [0.0; 3];
        for (w, a) in &terms {
            for c in 0..3 {
                out[c] += w * a[v][c];
            }
        }
        out
    })
}

/// Velocity of the trapezoidal family: `2 (x - x_n) / h - v_n`.
pub(crate) fn trapezoidal_velocity(input: &StepInput<'_>, x: &[[f64; 3]]) -> Vec<[f64; 3]> {
    let h = input.dt;
    combine([(2.0 / h, x), (-2.0 / h, input.positions), (-1.0, input.velocities)])
}

/// What one integrator step produced.
pub(crate) struct Outcome {
    pub x: Vec<[f64; 3]>,
    pub v: Vec<[f64; 3]>,
    /// The blend or correction factor of the controlled integrators.
    pub alpha: Option<f64>,
    /// Energy the step's lagged damping and friction removed (J).
    pub dissipated: f64,
    /// Where between the step's start (0) and end (1) the forces the end answers were taken:
    /// the mean `theta` of its solve's nodes, blended as the end is; 0 for an explicit step.
    /// A stiff spinning body keeps its shape there, and the next step's rigid guess carries
    /// that shape (`rigid_guess.rs`).
    pub theta: f64,
}

/// An implicit solve's result.
pub(crate) struct Solved {
    pub x: Vec<[f64; 3]>,
    pub v: Vec<[f64; 3]>,
    /// The mean `theta` of the scheme's nodes.
    pub theta: f64,
    pub dissipated: f64,
}

/// How many times as high above the objective's floor as the step's start a solve may end
/// before the step solves again from the start (`Stepper::solve_again`).
const FAR_UP: f64 = 1e6;
/// The same for a mixed-FEM solve that raised its objective, which Newton then takes.
const SQP_FAR_UP: f64 = 10.0;

/// What the integrators use to take a step: the backend, the solver and the step's input.
pub(crate) struct Stepper<'a> {
    pub stages: &'a mut dyn Stages,
    pub model: &'a Model,
    /// The model's free parts, for the rigid guess.
    pub parts: &'a rigid_guess::FreeParts,
    pub solver: &'a Solver,
    pub input: StepInput<'a>,
    /// The lagged damping of every solve of this step.
    pub damping: &'a LaggedDamping,
    /// The energies of the state the step starts from, `H(x_n, v_n)` and its parts (the driver
    /// keeps them).
    pub start_energy: crate::sim::EnergyReport,
    /// Solver statistics summed over the step's solves.
    pub report: SolveReport,
}

impl Stepper<'_> {
    /// Solves one implicit scheme with the step's solver from the best of its guesses (plus
    /// `warm_start`).
    pub fn implicit(
        &mut self,
        scheme: &dyn Scheme,
        warm_start: Option<&[[f64; 3]]>,
        role: Role,
    ) -> Result<Solved> {
        let input = &self.input;
        let h = input.dt;
        let plan = scheme.plan(input);
        // The optimization integrator's two guesses: inertia alone, and the explicit
        // prediction with forces frozen at x_n (exact in free fall).
        let inertia = (!plan.inertial).then(|| combine([(1.0, input.positions), (h, input.velocities)]));
        let inertial: &[[f64; 3]] = inertia.as_deref().unwrap_or(&plan.target);
        let force_weight: f64 = plan.nodes.iter().map(|q| q.weight * q.theta).sum();
        let explicit = combine([(1.0, &plan.target), (h * h * force_weight, input.acceleration)]);
        // Where the step's nodes (their mean theta) put each free part as a rigid body
        // (rigid_guess.rs): a GPU measures the part from there, and Newton and mixed FEM take
        // the end that puts it there as a third guess, a spinning body's. Local/global takes
        // no guesses but its start, so on a CPU it needs neither.
        let theta = Node::mean_theta(&plan.nodes);
        let wants_steps = self.solver.compares_guesses() || self.stages.reads_rigid_steps();
        let (shape, rigid_steps) = if wants_steps && !self.parts.is_empty() {
            let shape = self.parts.shape(input.positions, input.previous.map(|p| p.0), input.previous_theta);
            // A rigid body's step under inertia and gravity alone: the scheme's own step with
            // every other force left out. Handles and colliders are springs, which an explicit
            // step overshoots without bound once they are stiff: a 0.03 kg cloth on a 2.3e6
            // N/m handle at h = 0.5 s was predicted 5e5 m away, and a GPU that placed the
            // cloth's frame there held its displacements to 3 cm (docs/perf/gpu.md).
            let gravity = vec![self.model.gravity; input.positions.len()];
            let flight = scheme.plan(&StepInput { acceleration: &gravity, ..*input });
            let flight_guess = combine([(1.0, &flight.target), (h * h * force_weight, &gravity)]);
            let steps = self.parts.steps(
                &self.model.masses,
                &shape,
                input.positions,
                &flight.target,
                &flight_guess,
                theta,
            );
            (shape, steps)
        } else {
            (Cow::Borrowed(input.positions), Vec::new())
        };
        self.stages.begin_step(StepProblem {
            start: input.positions,
            target: &plan.target,
            rigid_steps: &rigid_steps,
            rigid_shape: &shape,
            nodes: &plan.nodes,
            dt: h,
            vertex_damping: &self.damping.vertex,
            vertex_linear: &self.damping.vertex_linear,
            rayleigh: self.damping.rayleigh,
            couplings: &self.damping.couplings,
            damping_weight: scheme.damping_weight(input),
        });
        let rigid = match self.solver.compares_guesses() {
            true => self.parts.rigid_guess(&rigid_steps, &shape, input.positions, &explicit, theta),
            false => None,
        };
        let mut guesses: Vec<&[[f64; 3]]> = vec![&explicit, inertial];
        guesses.extend(rigid.as_deref());
        guesses.extend(warm_start);
        // A fixed budget is run whole by the backend: on a GPU with one readback,
        // the step's start the fallback guess; run again from the start where it ends
        // absurdly far up (`solve_again`).
        let with_fallback: Vec<&[[f64; 3]]> = guesses.iter().copied().chain([input.positions]).collect();
        if let Some(request) = crate::solver::newton::budget_request(self.solver, &with_fallback) {
            let started = std::time::Instant::now();
            let mut solve = self.stages.budget_solve(&request);
            if solve.guess.is_none() {
                return Err(no_valid_guess());
            }
            let mut report = crate::solver::newton::budget_report(self.solver, &solve);
            // The start as the guess and as the fallback (a budget's last guess).
            let from_start = [input.positions, input.positions];
            let second = match !report.converged && self.solve_again(&plan, &report).is_some() {
                true => crate::solver::newton::budget_request(self.solver, &from_start)
                    .map(|request| self.stages.budget_solve(&request)),
                false => None,
            };
            if let Some(second) = second.filter(|second| second.guess.is_some()) {
                let again = crate::solver::newton::budget_report(self.solver, &second);
                report = SolveReport {
                    iterations: report.iterations + again.iterations,
                    linear_iterations: report.linear_iterations + again.linear_iterations,
                    ..again
                };
                solve = second;
            }
            report.times.linear_solve = started.elapsed();
            self.report.accumulate(report);
            let v = scheme.velocity(input, &solve.x);
            return Ok(Solved { x: solve.x, v, dissipated: 2.0 * solve.dissipation, theta });
        }
        // Projective dynamics starts from the warm start, or from inertia (the paper's
        // choice): its energies are finite everywhere, and evaluating the guesses would cost
        // as much as a few of its iterations. Where bodies have contact the step's start
        // competes: at an impact, inertia and the stabilized blend's warm start (the
        // midpoint's end) lie deep inside a collider, and ten iterations from there left the
        // cube of tests/local_global.rs at 2e6 J.
        let projective_start: Option<[&[[f64; 3]]; 2]> =
            (!self.solver.compares_guesses()).then(|| [warm_start.unwrap_or(inertial), input.positions]);
        let set_projective_start = |stages: &mut dyn Stages, [first, positions]: [&[[f64; 3]]; 2]| {
            if !stages.start_competes() {
                stages.set_iterate(first);
                true
            } else {
                !matches!(stages.start_from_best(&[first, positions]), Start::Invalid)
            }
        };
        let start = if let Some(candidates) = projective_start {
            if !set_projective_start(self.stages, candidates) {
                return Err(no_valid_guess());
            }
            None
        } else {
            // A GPU picks the start on the device; its objective comes with the solver's first
            // linearization. Newton linearizes at the start it picks: a CPU evaluates the first
            // guess (the explicit one, nearly always the lowest) with its Hessian right away.
            if self.solver.kind() == crate::solver::SolverKind::Newton {
                self.stages.expect_linearization(Some(self.solver.base_projection()));
            }
            match self.stages.start_from_best(&with_fallback) {
                Start::Known { objective, .. } => Some(objective),
                Start::Pending => None,
                Start::Invalid => return Err(no_valid_guess()),
            }
        };
        let mut report = self.solver.minimize(self.stages, role, start);
        if report.invalid_start {
            return Err(no_valid_guess());
        }
        let again = match projective_start.is_none() && !report.converged {
            true => self.solve_again(&plan, &report),
            false => None,
        };
        if let Some(solver) = again {
            // Again from the step's start, the one state whose objective is known to be sane.
            if solver.kind() == crate::solver::SolverKind::Newton {
                self.stages.expect_linearization(Some(solver.base_projection()));
            }
            self.stages.set_iterate(input.positions);
            let first = std::mem::replace(&mut report, solver.minimize(self.stages, role, None));
            report.iterations += first.iterations;
            report.linear_iterations += first.linear_iterations;
            report.projected_iterations += first.projected_iterations;
            report.resumed_iterations += first.resumed_iterations;
            report.times.add(&first.times);
        }
        // Local/global iterations lower the projective objective where each global step is
        // solved; f32 solves that the system's conditioning defeats can raise it without bound
        // (on a GPU, from 6e8 to 2e20 for a steel-stiff cube: tests/local_global.rs). Such a
        // solve ends where it started, which is no worse.
        if let Some(candidates) = projective_start
            && !(report.objective_decrease >= 0.0)
        {
            set_projective_start(self.stages, candidates);
            report.stalled = true;
            report.objective_decrease = 0.0;
        }
        self.report.accumulate(report);
        let mut x = vec![[0.0; 3]; input.positions.len()];
        self.stages.read_iterate(&mut x);
        let dissipated = 2.0 * self.stages.dissipation();
        let v = scheme.velocity(input, &x);
        Ok(Solved { x, v, dissipated, theta })
    }

    /// The solver that takes a step again from its start, where a solve that did not converge
    /// ended in a state no step should end in. Measured by height above the objective's floor
    /// against the start's (`objective::floor_and_start_height`: the step's minimizer is no
    /// higher than the start).
    ///
    /// - More than [`FAR_UP`] times as high: the same solver. The predictions come first
    ///   (`Stages::start_competes`), and a violent state makes them absurd: a pinned 3.2e10 Pa
    ///   bar released from a squash at 900 m/s is predicted 450 m out at h = 0.5 s, 1e13
    ///   times as high as its start. Newton came back from there in 34-66 iterations; at
    ///   3.2e13 Pa it did not in 100, and the step ended 446 m out with 4e17 J against the
    ///   start's 3e10 J; on a GPU, whose f32 squares of forces beyond 1.8e19 N overflow, it
    ///   made no iteration at all from 3.2e11 Pa up (tests/robustness.rs). Of the test
    ///   suite's 11 289 solves, 72 end above their start, capped ones that keep the motion
    ///   among them, and all but the absurd ones (1e17 times and more) at most 1e5 times as
    ///   high.
    /// - Mixed FEM that raised `G` and ended more than [`SQP_FAR_UP`] times as high: Newton,
    ///   whose line search lowers `G` itself. SQP's merit lets `G` rise on the way: on a GPU, a
    ///   free bar of 1.1e11 Pa stable neo-Hookean flesh with a 5.9e4 Pa StVK end, squashed to
    ///   a third, took f32 directions 50 times too long, and a backward-Euler step capped at 5
    ///   iterations ended 46 times as high, 14 m out (the CPU's: 0.07 m; tests/mixed_fem.rs).
    ///   The capped mixed solves of the mixed-FEM and property tests that raise `G` end at most
    ///   twice as high, but for two at 6 and 25, and a hinged bar's swing needs them kept.
    fn solve_again(&self, plan: &Plan, report: &SolveReport) -> Option<Solver> {
        let end = report.end_objective?;
        let input = &self.input;
        let (floor, height) = crate::objective::floor_and_start_height(
            self.model,
            input.positions,
            &plan.target,
            &plan.nodes,
            input.dt,
            self.start_energy.potential,
        );
        // Rounding's share: G's own sums, at the magnitudes of its terms.
        let slack = 1e-6 * (end.abs() + floor.abs());
        let higher_than = |times: f64| !(end - floor <= times * height.max(0.0) + slack);
        if higher_than(FAR_UP) {
            return Some(self.solver.clone());
        }
        let sqp = self.solver.kind() == crate::solver::SolverKind::MixedFem;
        (sqp && report.objective_decrease < 0.0 && higher_than(SQP_FAR_UP)).then(|| self.solver.as_newton())
    }

    /// `grad E(x)` (zero on pinned vertices).
    pub fn potential_gradient(&mut self, x: &[[f64; 3]]) -> Vec<[f64; 3]> {
        let mut out = vec![[0.0; 3]; x.len()];
        self.stages.potential_gradient(x, &mut out);
        out
    }
}

/// The error of a step whose every initial guess has an infinite objective.
fn no_valid_guess() -> Error {
    Error::Solver(
        "every initial guess has an infinite objective: an element outside its material's domain \
         (an inverted neo-Hookean element?), a vertex inside a collider under the barrier contact \
         model, or energies beyond f64's range (a stiffness, speed, gravity or time step far out of scale); \
         use stable_neo_hookean or fixed_corotated for states that invert"
            .into(),
    )
}

/// `1/2 m |v|^2`: one vertex's share of [`kinetic_energy`].
pub(crate) fn kinetic_energy_of(m: f64, v: [f64; 3]) -> f64 {
    0.5 * m * (v[0] * v[0] + v[1] * v[1] + v[2] * v[2])
}

/// `1/2 v^T M v`.
pub(crate) fn kinetic_energy(model: &Model, v: &[[f64; 3]]) -> f64 {
    let m = &model.masses;
    crate::math::sum_per_vertex(v.len(), |i| kinetic_energy_of(m[i], v[i]))
}

/// `(1 - alpha) a + alpha b`, per vertex; at the ends `a` or `b` itself, with nothing of the
/// other: the stabilized blend's forward-Euler end, an explicit step at high stress, can
/// overflow, and 0 times its infinite positions made a step that ended on midpoint's NaN.
pub(crate) fn blend(a: &[[f64; 3]], b: &[[f64; 3]], alpha: f64) -> Vec<[f64; 3]> {
    if alpha == 0.0 {
        a.to_vec()
    } else if alpha == 1.0 {
        b.to_vec()
    } else {
        combine([(1.0 - alpha, a), (alpha, b)])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_blend_at_an_end_takes_nothing_of_the_other_state() {
        let finite = [[1.0, -2.0, 3.0], [0.5, 0.25, -4.0]];
        let overflowed = [[f64::INFINITY, 1.0, f64::NEG_INFINITY], [f64::NAN, 0.0, 2.0]];
        assert_eq!(super::blend(&overflowed, &finite, 1.0), finite);
        assert_eq!(super::blend(&finite, &overflowed, 0.0), finite);
        let half = super::blend(&finite, &[[3.0, 2.0, 1.0], [1.5, 0.75, 0.0]], 0.5);
        assert_eq!(half, [[2.0, 0.0, 2.0], [1.0, 0.5, -2.0]]);
    }
}
