//! Time integrators. Every implicit scheme is an inertial target `y`, quadrature nodes for
//! the potential and a velocity update (DESIGN.md section 2); the shared objective and the
//! solver do the rest. One file per scheme.

mod avf;
mod backward_euler;
mod bdf2;
mod forward_euler;
mod implicit_midpoint;
mod newmark;
mod symplectic_euler;

use crate::backend::Node;

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
        /// Lower clip of alpha.
        alpha_min: f64,
        /// Upper clip of alpha.
        alpha_max: f64,
        /// Optional exponential decay of the target.
        decay: Option<Decay>,
    },
}

impl Integrator {
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
    pub(crate) fn explicit(&self) -> Option<fn(&StepInput<'_>) -> (Vec<[f64; 3]>, Vec<[f64; 3]>)> {
        match self {
            Integrator::ForwardEuler => Some(forward_euler::step),
            Integrator::SymplecticEuler => Some(symplectic_euler::step),
            _ => None,
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

/// What a scheme may read at the start of a step.
pub(crate) struct StepInput<'a> {
    pub dt: f64,
    pub positions: &'a [[f64; 3]],
    pub velocities: &'a [[f64; 3]],
    /// The previous step's positions and velocities, if there was one.
    pub previous: Option<(&'a [[f64; 3]], &'a [[f64; 3]])>,
    /// `M^-1 f(x_n)`, zero on pinned vertices.
    pub acceleration: &'a [[f64; 3]],
}

/// An implicit step's objective: inertial target and quadrature nodes.
pub(crate) struct Plan {
    pub target: Vec<[f64; 3]>,
    pub nodes: Vec<Node>,
}

/// A plain implicit scheme.
pub(crate) trait Scheme: Sync {
    /// The objective of this step.
    fn plan(&self, input: &StepInput<'_>) -> Plan;
    /// Velocities once the step's positions `x` are known.
    fn velocity(&self, input: &StepInput<'_>, x: &[[f64; 3]]) -> Vec<[f64; 3]>;
}

/// `sum_k w_k a_k` per vertex, for the short linear combinations the schemes are made of.
pub(crate) fn combine<const K: usize>(terms: [(f64, &[[f64; 3]]); K]) -> Vec<[f64; 3]> {
    let n = terms[0].1.len();
    (0..n)
        .map(|v| {
            let mut out = [0.0; 3];
            for (w, a) in &terms {
                for c in 0..3 {
                    out[c] += w * a[v][c];
                }
            }
            out
        })
        .collect()
}

/// Velocity of the trapezoidal family: `2 (x - x_n) / h - v_n`.
pub(crate) fn trapezoidal_velocity(input: &StepInput<'_>, x: &[[f64; 3]]) -> Vec<[f64; 3]> {
    let h = input.dt;
    combine([(2.0 / h, x), (-2.0 / h, input.positions), (-1.0, input.velocities)])
}
