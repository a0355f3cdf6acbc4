//! The one objective every implicit step minimizes (DESIGN §2), in force units:
//!
//! `G(x) = 1/(2h^2) |x - y|_M^2 + sum_q c_q E(theta_q x + (1 - theta_q) x_n)
//!        + w (1/2 dx^T D dx - b . dx + c)`
//!
//! with `dx = x - x_n`. A scheme is its inertial target `y` and quadrature nodes
//! `(c_q, theta_q)`; `D` is the step's lagged damping, built here once from the damping
//! models and the colliders' friction and consumed by both backends as the same ingredients
//! (a multiple of the projected stiffness at `x_n`, per-vertex blocks, and per-vertex linear
//! terms `b_v` and constants `c_v`: friction against a collider that moves by `s` over the
//! step acts on the motion relative to it, `1/2 (dx - s)^T A (dx - s)`).

use glam::{DQuat, DVec3};

use crate::damping::{Damping, add_ether};
use crate::model::Model;

/// One quadrature node of the step objective: weight `c` and position `theta` on the
/// segment from `x_n` (0) to `x` (1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Node {
    /// Quadrature weight `c_q`.
    pub weight: f64,
    /// Evaluation point `theta_q`.
    pub theta: f64,
}

impl Node {
    /// The potential `E(x)` is the objective at the single node `(1, 1)` without inertia.
    pub const POTENTIAL: [Node; 1] = [Node { weight: 1.0, theta: 1.0 }];

    /// The weighted mean `theta` of `nodes` (1 without weight): where a step evaluates its
    /// energy, as one node.
    pub fn mean_theta(nodes: &[Node]) -> f64 {
        let weight: f64 = nodes.iter().map(|q| q.weight).sum();
        match weight > 0.0 {
            true => nodes.iter().map(|q| q.weight * q.theta).sum::<f64>() / weight,
            false => 1.0,
        }
    }
}

/// What an implicit step minimizes, apart from the model.
#[derive(Clone, Copy, Debug)]
pub struct StepProblem<'a> {
    /// Positions at the start of the step, `x_n`.
    pub start: &'a [[f64; 3]],
    /// The inertial target `y`.
    pub target: &'a [[f64; 3]],
    /// Where the step's nodes (their mean `theta`) put each free part as a rigid body, by
    /// translation group (`Model::translation_groups`), `None` for a part with no rigid fit;
    /// empty for none known. A GPU measures each body from there.
    pub rigid_steps: &'a [Option<RigidStep>],
    /// The positions whose shape the rigid steps carry: the start's, or the previous step's
    /// nodes' where this step's lie inside the step (`rigid_guess.rs`).
    pub rigid_shape: &'a [[f64; 3]],
    /// Quadrature nodes.
    pub nodes: &'a [Node],
    /// Time step `h` (s).
    pub dt: f64,
    /// Lagged per-vertex damping `1/2 dx^T A_v dx` (ether drag, lagged friction), one
    /// row-major 3x3 `A_v` per vertex; empty for none.
    pub vertex_damping: &'a [[f64; 9]],
    /// Per-vertex linear terms of the lagged damping, `-b_v . dx + c_v` as `[b_v, c_v]`
    /// (friction against moving colliders); empty for none.
    pub vertex_linear: &'a [[f64; 4]],
    /// Lagged Rayleigh damping `k/(2h) dx^T K dx`, `K` the PSD-projected stiffness at `x_n`:
    /// this is `k` (s); zero for none.
    pub rayleigh: f64,
    /// Lagged damping between vertices of no common element (friction between bodies in
    /// self-contact), beside the per-vertex blocks; empty for none.
    pub couplings: &'a [Coupling],
    /// How the scheme weights a force acting at the end of the step (1 for backward Euler,
    /// 1/2 for the trapezoidal family, 4/9 for BDF2); the damping pseudo-potential enters the
    /// objective with this weight so that every scheme applies the same damping force.
    pub damping_weight: f64,
}

/// Where the step objective's floor lies, and how far above it the step's start is.
///
/// Gravity is the one term of `E` unbounded below, and with the inertia it makes a quadratic:
/// on a free vertex, `m/(2h^2) |x - y|^2 - a m g . x = m/(2h^2) |x - y - a h^2 g|^2 - a m g . y -
/// a^2 h^2 m |g|^2 / 2`, with `a = sum_q c_q theta_q`; the nodes' other share of gravity,
/// `b = sum_q c_q (1 - theta_q)`, weighs the start, and a pinned vertex stays there. Every
/// other term (elasticity, contact, handles, self-contact, the damping) is zero or above. So
/// `G >= floor` everywhere, and `G - floor` says how far up the objective a state is, wherever
/// the body is. The start's height, `m/(2h^2) |x_n - y - a h^2 g|^2` summed plus
/// `(a + b) (E(x_n) + g . M x_n)`, takes its potential `E(x_n)` less gravity's share; it
/// leaves out the lagged damping's constants (zero or above), so it is a lower bound.
pub(crate) fn floor_and_start_height(
    model: &Model,
    start: &[[f64; 3]],
    target: &[[f64; 3]],
    nodes: &[Node],
    dt: f64,
    start_potential: f64,
) -> (f64, f64) {
    let g = DVec3::from(model.gravity);
    let a: f64 = nodes.iter().map(|q| q.weight * q.theta).sum();
    let b: f64 = nodes.iter().map(|q| q.weight * (1.0 - q.theta)).sum();
    // Both sums in one pass over the vertices.
    let [floor, height] = crate::math::sums_per_vertex(start.len(), |v| {
        let (m, x, y) = (model.masses[v], DVec3::from(start[v]), DVec3::from(target[v]));
        if model.pinned[v] {
            return [-(a + b) * m * g.dot(x), (a + b) * m * g.dot(x)];
        }
        let floor = -m * (0.5 * a * a * dt * dt * g.length_squared() + a * g.dot(y) + b * g.dot(x));
        // The start's inertia about the floor's minimum, and gravity's share of its potential.
        let lowest = y + a * dt * dt * g;
        let height = 0.5 * m / (dt * dt) * (x - lowest).length_squared() + (a + b) * m * g.dot(x);
        [floor, height]
    });
    (floor, height + (a + b) * start_potential)
}

/// Where a step's nodes put a part as a rigid body: its centre of mass from `from` (in
/// `StepProblem::rigid_shape`) to `to`, its shape there turned about it by `turn`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RigidStep {
    pub from: DVec3,
    pub to: DVec3,
    pub turn: DQuat,
}

impl RigidStep {
    /// Where the step puts the point that was at `x` in the shape.
    pub fn place(&self, x: DVec3) -> DVec3 {
        self.to + self.turn * (x - self.from)
    }
}

#[cfg(test)]
impl<'a> StepProblem<'a> {
    /// A step with no damping and no vertex terms, for tests of what a step minimizes.
    pub(crate) fn undamped(
        start: &'a [[f64; 3]],
        target: &'a [[f64; 3]],
        nodes: &'a [Node],
        dt: f64,
        damping_weight: f64,
    ) -> StepProblem<'a> {
        StepProblem {
            start,
            target,
            rigid_steps: &[],
            rigid_shape: start,
            nodes,
            dt,
            vertex_damping: &[],
            vertex_linear: &[],
            rayleigh: 0.0,
            couplings: &[],
            damping_weight,
        }
    }
}

/// A quadratic form on four vertices, `1/2 |sum_i c_i x_(v_i)|^2_K`: its Hessian is
/// `(c c^T) (x) K`. Self-contact's Hessian and the lagged friction between bodies take this
/// form; it couples a vertex with a triangle's corners, which need not share an element, so
/// the products apply it from a list, not from the block pattern.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Coupling {
    /// The vertices.
    pub vertices: [u32; 4],
    /// `c`, zero for pinned vertices.
    pub coefficients: [f64; 4],
    /// `K`, symmetric, row-major.
    pub block: [f64; 9],
}

impl Coupling {
    /// The same form times `factor`.
    pub fn scaled(&self, factor: f64) -> Coupling {
        Coupling { block: self.block.map(|k| k * factor), ..*self }
    }

    /// Adds its diagonal blocks `c_i^2 K` to `blocks` (one per vertex).
    pub fn add_diagonal(&self, blocks: &mut [[f64; 9]]) {
        for (&v, &c) in self.vertices.iter().zip(&self.coefficients) {
            for (b, k) in blocks[v as usize].iter_mut().zip(&self.block) {
                *b += c * c * k;
            }
        }
    }
}

/// The lagged damping matrix `D = w (k/h K(x_n) + diag(A_v))` as both backends build it: the
/// factor of the projected stiffness at `x_n` (zero for none) and the weighted vertex blocks.
#[derive(Clone, Debug, PartialEq)]
pub struct DampingMatrix {
    /// `w k / h`.
    pub stiffness_scale: f64,
    /// `w A_v`, one row-major block per vertex.
    pub vertex_blocks: Vec<[f64; 9]>,
    /// `w [b_v, c_v]` per vertex; empty for none.
    pub vertex_linear: Vec<[f64; 4]>,
}

impl StepProblem<'_> {
    /// The step has lagged damping.
    pub fn damped(&self) -> bool {
        self.rayleigh > 0.0 || !self.vertex_damping.is_empty() || !self.couplings.is_empty()
    }

    /// The ingredients of `D` for `vertex_count` vertices, `None` without damping.
    pub fn damping_matrix(&self, vertex_count: usize) -> Option<DampingMatrix> {
        if !self.damped() {
            return None;
        }
        let w = self.damping_weight;
        let mut vertex_blocks = if self.vertex_damping.is_empty() {
            vec![[0.0; 9]; vertex_count]
        } else {
            self.vertex_damping.iter().map(|a| a.map(|c| c * w)).collect()
        };
        // The couplings' diagonal blocks join the per-vertex ones; the blocks between their
        // vertices are applied from the list.
        for coupling in self.couplings {
            coupling.scaled(w).add_diagonal(&mut vertex_blocks);
        }
        let vertex_linear = self.vertex_linear.iter().map(|l| l.map(|c| c * w)).collect();
        Some(DampingMatrix { stiffness_scale: w * self.rayleigh / self.dt, vertex_blocks, vertex_linear })
    }
}

/// The lagged damping of a step, gathered at its start from the damping models and the
/// colliders' friction.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LaggedDamping {
    /// Per-vertex blocks (ether drag and friction); empty for none.
    pub vertex: Vec<[f64; 9]>,
    /// Per-vertex linear terms `[b_v, c_v]` (friction against moving colliders); empty for
    /// none.
    pub vertex_linear: Vec<[f64; 4]>,
    /// The Rayleigh coefficient `k` (s), summed over the models.
    pub rayleigh: f64,
    /// Friction between bodies in self-contact; empty for none.
    pub couplings: Vec<Coupling>,
}

impl LaggedDamping {
    /// The damping of a step of `dt` from the state `(x, v)`, the colliders moving by
    /// `collider_motion` (one translation per collider; empty for static ones) over it;
    /// `pressing` holds the projection contact model's normal forces at `x` (see
    /// `Stages::pressing_forces`).
    #[allow(clippy::too_many_arguments)]
    pub fn at_step_start(
        model: &Model,
        colliders: &[crate::contact::Collider],
        collider_motion: &[[f64; 3]],
        damping: &[Damping],
        x: &[[f64; 3]],
        v: &[[f64; 3]],
        dt: f64,
        pressing: &[f64],
    ) -> Self {
        let ether: f64 = damping
            .iter()
            .map(|d| if let Damping::Ether { coefficient } = d { *coefficient } else { 0.0 })
            .sum();
        let rayleigh = damping
            .iter()
            .map(|d| if let Damping::Rayleigh { stiffness } = d { *stiffness } else { 0.0 })
            .sum();
        let mut vertex = Vec::new();
        let mut vertex_linear = Vec::new();
        if ether > 0.0 || colliders.iter().any(|c| c.friction > 0.0) {
            vertex = vec![[0.0; 9]; model.vertex_count()];
            add_ether(ether, dt, &mut vertex);
            let contact = crate::contact::Contacts { colliders, law: model.contact, pressing };
            let moving = collider_motion.iter().any(|m| m.iter().any(|&c| c != 0.0));
            if moving {
                vertex_linear = vec![[0.0; 4]; model.vertex_count()];
            }
            crate::contact::add_lagged_friction(
                &contact,
                collider_motion,
                &model.pinned,
                x,
                v,
                dt,
                &mut vertex,
                &mut vertex_linear,
            );
        }
        let couplings =
            model.self_collision.as_ref().map_or(Vec::new(), |c| c.lagged_friction(model, x, v, dt));
        LaggedDamping { vertex, vertex_linear, rayleigh, couplings }
    }

    /// The work the moving colliders' friction did on the bodies over a step from `start` to
    /// `x`: `sum_v 2 c_v - b_v . dx_v`, the part of the friction's work that is not the
    /// (booked) dissipation. The application drives those colliders, so it is user forcing.
    pub fn collider_work(&self, start: &[[f64; 3]], x: &[[f64; 3]]) -> f64 {
        self.vertex_linear
            .iter()
            .zip(start.iter().zip(x))
            .map(|(l, (a, b))| 2.0 * l[3] - (0..3).map(|k| l[k] * (b[k] - a[k])).sum::<f64>())
            .sum()
    }
}
