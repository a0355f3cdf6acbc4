//! The f64 CPU reference backend: every stage in plain Rust, parallel over elements, vertices
//! or block rows with rayon, reductions in a fixed order.

pub(crate) mod assemble;
mod cholesky;
pub(crate) mod element;
pub(crate) mod gather;
mod global;
pub(crate) mod hessian_product;
pub(crate) mod line_search;
pub(crate) mod local;
pub(crate) mod mixed;
pub(crate) mod pcg;
mod vector;

use std::sync::Arc;

use super::topology::Topology;
use super::{
    Anchor, Deferral, DirectionReport, DirectionRequest, LinearSolver, Linearization, LocalGlobalReport,
    LocalGlobalRequest, MixedDirection, Stages,
};
use crate::material::{Projection, RotationSearch};
use crate::model::Model;
use crate::objective::{Node, StepProblem};

/// Above this ratio of the factor's size to the matrix's, the two triangular solves cost
/// more per CG iteration than the iterations they save, and PCG keeps Jacobi. Measured on
/// bars: at a ratio of 5.7 (the 7680-tet beam, 2K vertices) a frame went from 22.4 to 18.1 ms;
/// at 10 (the 10K-tet block of `cpu_step`, 2.5K vertices) a step from 25 to 42 ms.
const MAX_PRECONDITIONER_FILL: f64 = 6.0;

/// The CPU implementation of [`Stages`].
pub struct CpuBackend {
    model: Arc<Model>,
    topology: Topology,
    start: Vec<[f64; 3]>,
    target: Vec<[f64; 3]>,
    nodes: Vec<Node>,
    inv_h2: f64,
    anchors: super::topology::Anchors,
    /// The colliders as they are this step (the model's, until a kinematic one moves).
    colliders: Vec<crate::contact::Collider>,
    damping_weight: f64,
    /// The step's lagged damping, times the damping weight: Rayleigh's `k/h K(x_n)` on the
    /// Hessian's pattern (empty without it), and the per-vertex ether and friction blocks
    /// (empty without damping), which the Newton matrix takes with the vertex blocks.
    damping: Vec<[f64; 9]>,
    damping_vertex: Vec<[f64; 9]>,
    /// The lagged damping's per-vertex linear terms `w [b_v, c_v]`; empty for none.
    damping_linear: Vec<[f64; 4]>,
    x: Vec<[f64; 3]>,
    gradient: Vec<[f64; 3]>,
    direction: Vec<[f64; 3]>,
    /// The iterate before the last `advance` (for `retreat`).
    step_start: Vec<[f64; 3]>,
    scratch: Vec<[f64; 3]>,
    corner_gradients: Vec<[f64; 3]>,
    element_blocks: Vec<[f64; 9]>,
    vertex_blocks: Vec<[f64; 9]>,
    blocks: Vec<[f64; 9]>,
    pcg: pcg::Scratch,
    cholesky: Option<cholesky::Cholesky>,
    /// The local/global matrix's vertex diagonal (at the step's start, with the contacts of
    /// `projective::contact_set`, as Newton's factored preconditioner takes it; then with the
    /// local/global solver's contact set), its factored global matrix and its rotations.
    projective_diagonal: Vec<f64>,
    /// `projective_diagonal` without the colliders' stiffness.
    projective_base: Vec<f64>,
    /// The local/global solver's contact set at the iterate, and the vertices its last step
    /// stopped at a collider (`projective::LocalContact::grow_set`).
    contact_set: Vec<bool>,
    contact_stopped: Vec<bool>,
    global: Option<global::GlobalSolve>,
    /// The coarse correction that Jacobi takes where the factor is too large.
    coarse: crate::backend::coarse::Coarse,
    /// The vertices' translation groups, the model's free parts, and their count.
    translation_groups: (Vec<u32>, u32),
    rotations: element::Rotations,
    /// The rotations of the states whose potential was last asked for (every step's start
    /// and end), warm starts for the next.
    state_rotations: element::Rotations,
    /// What `corner_gradients` and `element_blocks` hold for the iterate: the gradients, and
    /// Hessian blocks projected so when `Some(Some(_))`.
    evaluated: Option<Option<Projection>>,
    /// What Newton will ask at its next iterate (`expect_linearization`), and the candidate
    /// step whose element pass, done for that, the buffers hold.
    expected: Option<Option<Projection>>,
    ahead: Option<(f64, Option<Projection>)>,
    /// The initial guess whose element pass, done for that, the buffers hold.
    guess_ahead: Option<(Vec<[f64; 3]>, Option<Projection>)>,
    /// A mixed-FEM linearization whose solve was deferred (`Deferral::Defer`), condensed with
    /// this curvature, with its status: what a resumed request solves from.
    mixed_deferred: Option<(Projection, Linearization)>,
    /// Under the projection model, the outward normal of the collider each vertex rests on
    /// and is pressed against at the iterate, and the normal force pressing it (empty
    /// otherwise).
    pressed: Vec<Option<glam::DVec3>>,
    pressing: Vec<f64>,
    /// The step's lagged friction between bodies, times the damping weight, and the couplings
    /// of the system at the iterate: those and self-contact's Hessian (from the last gather).
    friction_couplings: Vec<crate::objective::Coupling>,
    couplings: Vec<crate::objective::Coupling>,
    /// `pcg`'s residual is that of `direction`'s solve (not scaled or replaced since).
    direction_residual: bool,
    /// The iterate is the last one plus the whole `direction`, with `direction_residual`:
    /// its gradient tells the Newton model's error (`Linearization::model_error`).
    full_step: bool,
    /// The state whose element energy and corner gradients `state_corners` holds.
    state: Option<(Vec<[f64; 3]>, f64)>,
    state_corners: Vec<[f64; 3]>,
    /// The mixed solver's stretches, the condensed system's corner gradients and the
    /// displacement gradient at the iterate.
    mixed: mixed::MixedElements,
    condensed_corners: Vec<[f64; 3]>,
    displacement_gradient: Vec<[f64; 3]>,
}

impl CpuBackend {
    /// A backend for `model`; builds the incidence lists once.
    pub fn new(model: Arc<Model>) -> CpuBackend {
        let topology = Topology::new(&model);
        let n = model.vertex_count();
        let corners = 4 * model.tets.len() + 2 * model.springs.len();
        let element_blocks = 10 * model.tets.len() + 3 * model.springs.len();
        CpuBackend {
            start: vec![[0.0; 3]; n],
            target: vec![[0.0; 3]; n],
            nodes: Vec::new(),
            inv_h2: 0.0,
            anchors: super::topology::Anchors::default(),
            colliders: model.colliders.clone(),
            damping_weight: 1.0,
            damping: Vec::new(),
            damping_vertex: Vec::new(),
            damping_linear: Vec::new(),
            x: vec![[0.0; 3]; n],
            gradient: vec![[0.0; 3]; n],
            direction: vec![[0.0; 3]; n],
            step_start: vec![[0.0; 3]; n],
            scratch: vec![[0.0; 3]; n],
            corner_gradients: vec![[0.0; 3]; corners],
            element_blocks: vec![[0.0; 9]; element_blocks],
            vertex_blocks: vec![[0.0; 9]; n],
            blocks: vec![[0.0; 9]; topology.block_count()],
            pcg: pcg::Scratch::default(),
            cholesky: None,
            projective_diagonal: Vec::new(),
            projective_base: Vec::new(),
            contact_set: Vec::new(),
            contact_stopped: Vec::new(),
            global: None,
            coarse: Default::default(),
            translation_groups: model.translation_groups(),
            rotations: element::Rotations::default(),
            state_rotations: element::Rotations::default(),
            evaluated: None,
            pressed: Vec::new(),
            pressing: Vec::new(),
            friction_couplings: Vec::new(),
            couplings: Vec::new(),
            direction_residual: false,
            full_step: false,
            expected: None,
            ahead: None,
            guess_ahead: None,
            mixed_deferred: None,
            state: None,
            state_corners: vec![[0.0; 3]; corners],
            mixed: mixed::MixedElements::default(),
            condensed_corners: Vec::new(),
            displacement_gradient: Vec::new(),
            topology,
            model,
        }
    }

    /// The vertex terms of the current step's objective.
    fn vertex_terms(&self) -> gather::VertexTerms<'_> {
        gather::VertexTerms {
            model: &self.model,
            start: &self.start,
            target: &self.target,
            nodes: &self.nodes,
            inv_h2: self.inv_h2,
            anchors: &self.anchors,
            colliders: &self.colliders,
        }
    }

    /// The vertex terms of the potential alone at `x`.
    fn potential_terms<'a>(&'a self, x: &'a [[f64; 3]]) -> gather::VertexTerms<'a> {
        gather::VertexTerms {
            model: &self.model,
            start: x,
            target: x,
            nodes: &Node::POTENTIAL,
            inv_h2: 0.0,
            anchors: &self.anchors,
            colliders: &self.colliders,
        }
    }

    /// Whether the step has lagged damping.
    fn damped(&self) -> bool {
        !self.damping_vertex.is_empty()
    }

    /// `1/2 dx^T D dx - b . dx + c` with the lagged damping, `dx = x - x_n`; its gradient
    /// `D dx - b` into `out`.
    fn damping_term(&self, x: &[[f64; 3]], out: &mut [[f64; 3]]) -> f64 {
        let dx: Vec<[f64; 3]> =
            x.iter().zip(&self.start).map(|(a, b)| [a[0] - b[0], a[1] - b[1], a[2] - b[2]]).collect();
        if self.damping.is_empty() {
            out.fill([0.0; 3]);
        } else {
            hessian_product::apply(&self.topology, &self.damping, &dx, out);
        }
        for ((o, d), block) in out.iter_mut().zip(&dx).zip(&self.damping_vertex) {
            *o = (glam::DVec3::from(*o) + crate::math::unvec9(block) * glam::DVec3::from(*d)).to_array();
        }
        hessian_product::couplings(&self.friction_couplings, &dx, out);
        let mut value = 0.5 * vector::dot(&dx, out);
        // A pinned vertex never moves: its linear term is no force, and (as in the GPU twin) no
        // energy.
        let free = self.model.pinned.iter().map(|p| !p);
        for (((o, d), l), _) in
            out.iter_mut().zip(&dx).zip(&self.damping_linear).zip(free).filter(|(_, f)| *f)
        {
            value += l[3] - (l[0] * d[0] + l[1] * d[1] + l[2] * d[2]);
            *o = [o[0] - l[0], o[1] - l[1], o[2] - l[2]];
        }
        value
    }

    /// The element energy at the state `x` (the elements' part of the potential), with its
    /// corner gradients in `state_corners`. A step ends by booking the new state's energy and
    /// the next one starts from that state's forces: the second asks the first's pass.
    fn state_elements(&mut self, x: &[[f64; 3]]) -> f64 {
        if let Some((at, energy)) = &self.state
            && at.as_slice() == x
        {
            return *energy;
        }
        let energy = element::derivatives(
            &self.model,
            x,
            x,
            &Node::POTENTIAL,
            None,
            Some(&mut self.state_rotations),
            RotationSearch::Converged,
            &mut self.state_corners,
            &mut self.element_blocks,
        );
        self.state = Some((x.to_vec(), energy));
        energy
    }

    /// Keeps the element pass in hand, at the iterate with the potential's node, as the
    /// state's (see [`state_elements`](Self::state_elements)).
    fn keep_pass_as_state(&mut self, energy: f64) {
        self.state_corners.copy_from_slice(&self.corner_gradients);
        self.state_rotations.clone_from(&self.rotations);
        match &mut self.state {
            Some((at, kept)) => {
                at.copy_from_slice(&self.x);
                *kept = energy;
            }
            None => self.state = Some((self.x.clone(), energy)),
        }
    }

    /// The element pass at `x` (the iterate, or a candidate in `scratch`): energies, corner
    /// gradients and, with a projection, Hessian blocks. Returns the elements' energy.
    fn element_pass(&mut self, x: &[[f64; 3]], hessian: Option<Projection>) -> f64 {
        self.guess_ahead = None;
        element::derivatives(
            &self.model,
            x,
            &self.start,
            &self.nodes,
            hessian,
            Some(&mut self.rotations),
            RotationSearch::Converged,
            &mut self.corner_gradients,
            &mut self.element_blocks,
        )
    }

    /// `x + alpha d` into `out`, each vertex stopped where its path first meets a collider
    /// under the projection model (its curved line search).
    fn trial(&self, alpha: f64, out: &mut [[f64; 3]]) {
        vector::offset(&self.x, alpha, &self.direction, out);
        if self.model.contact.is_projection() {
            crate::contact::stop_at_contact(&self.colliders, &self.model.pinned, &self.x, out);
        }
    }

    fn objective_at(&self, x: &[[f64; 3]]) -> f64 {
        element::energy(&self.model, x, &self.start, &self.nodes, Some(&self.rotations))
            + self.vertex_objective(x)
    }

    /// The mixed merit's terms that are not the tets': springs and vertex terms at `x`.
    fn merit_outside_tets(&self, x: &[[f64; 3]]) -> f64 {
        element::spring_energy(&self.model, x, &self.start, &self.nodes) + self.vertex_objective(x)
    }

    /// The part of `G` that is not element energy: the vertex terms, self-contact and the
    /// lagged damping.
    fn vertex_objective(&self, x: &[[f64; 3]]) -> f64 {
        let mut value = gather::vertex_energy(&self.vertex_terms(), x);
        if let Some(contact) = &self.model.self_collision {
            value += contact.energy_at_nodes(&self.model, x, &self.start, &self.nodes);
        }
        if self.damped() {
            value += self.damping_term(x, &mut vec![[0.0; 3]; x.len()]);
        }
        value
    }

    /// The gradient from the last `linearize`.
    #[cfg(test)]
    pub(crate) fn gradient(&self) -> &[[f64; 3]] {
        &self.gradient
    }

    /// The direction from the last solve.
    #[cfg(test)]
    pub(crate) fn direction(&self) -> &[[f64; 3]] {
        &self.direction
    }

    /// `H v` with the Hessian from the last `linearize`.
    #[cfg(test)]
    pub(crate) fn hessian_times(&self, v: &[[f64; 3]]) -> Vec<[f64; 3]> {
        let mut out = vec![[0.0; 3]; v.len()];
        hessian_product::apply(&self.topology, &self.blocks, v, &mut out);
        hessian_product::couplings(&self.couplings, v, &mut out);
        out
    }

    /// Factors the local/global matrix of this step into `global` (its symbolic factorization
    /// made on first use), unless the factor would be more than `max_fill` times the matrix;
    /// false if it was not factored.
    fn prepare_global(&mut self, max_fill: f64) -> bool {
        let a = super::projective::stiffness_weight(&self.nodes);
        if self.global.is_none() {
            self.global = global::GlobalSolve::new(&self.model, &self.topology);
        }
        match self.global.as_mut() {
            Some(global) if global.fill <= max_fill => {
                global.prepare(&self.model, &self.topology, a, &self.projective_diagonal)
            }
            _ => false,
        }
    }

    /// Grows the local/global solver's contact set at the iterate and factors the matrix with
    /// its stiffness (the last two factors are kept: sets recur). False if that fails.
    fn enter_contact_set(&mut self) -> bool {
        let contact = super::projective::LocalContact {
            model: &self.model,
            colliders: &self.colliders,
            nodes: &self.nodes,
            start: &self.start,
        };
        contact.grow_set(&self.x, &mut self.contact_stopped, &mut self.contact_set);
        let stiffness = super::projective::contact_stiffness(&self.model, &self.nodes);
        super::projective::with_contacts(
            &self.projective_base,
            &self.contact_set,
            stiffness,
            &mut self.projective_diagonal,
        );
        self.prepare_global(f64::INFINITY)
    }

    /// `grad G` at the iterate from the corner gradients in hand, the vertex terms and the
    /// lagged damping, into `gradient`; the vertex Hessian blocks into `vertex_blocks`.
    fn gather(&mut self, projection: Projection) -> Linearization {
        self.gather_what(projection, gather::Gathered::Everything)
    }

    /// [`gather`](Self::gather) of what `gathered` names.
    fn gather_what(&mut self, projection: Projection, gathered: gather::Gathered) -> Linearization {
        let mut gradient = std::mem::take(&mut self.gradient);
        let mut vertex_blocks = std::mem::take(&mut self.vertex_blocks);
        let (mut squared, mut force_scale, mut magnitude) = gather::gradient(
            &self.vertex_terms(),
            &self.topology,
            &self.corner_gradients,
            &self.x,
            projection,
            gathered,
            &mut gradient,
            &mut vertex_blocks,
        );
        self.couplings.clone_from(&self.friction_couplings);
        if let Some(contact) = &self.model.self_collision {
            let (couplings, forces) = contact.derivatives_at_nodes(
                &self.model,
                &self.x,
                &self.start,
                &self.nodes,
                &mut gradient,
                &mut vertex_blocks,
            );
            self.couplings.extend(couplings);
            force_scale += forces;
            magnitude +=
                forces * self.x.iter().map(|x| glam::DVec3::from(*x).abs().max_element()).fold(0.0, f64::max);
            squared = vector::dot(&gradient, &gradient);
        }
        if self.damped() {
            let mut damping = vec![[0.0; 3]; self.x.len()];
            self.damping_term(&self.x, &mut damping);
            for (v, (g, d)) in gradient.iter_mut().zip(&damping).enumerate() {
                if !self.model.pinned[v] {
                    *g = [g[0] + d[0], g[1] + d[1], g[2] + d[2]];
                    if gathered == gather::Gathered::Everything {
                        for (b, d) in vertex_blocks[v].iter_mut().zip(&self.damping_vertex[v]) {
                            *b += d;
                        }
                    }
                    // The damping force is one of the forces balanced, as in the vertex terms.
                    let force = glam::DVec3::from(*d).length();
                    force_scale += force;
                    magnitude += force * glam::DVec3::from(self.x[v]).abs().max_element();
                }
            }
            squared = vector::dot(&gradient, &gradient);
        }
        if self.model.contact.is_projection() {
            squared = gather::press_against_colliders(
                &self.colliders,
                &self.model.pinned,
                &self.x,
                &mut gradient,
                &mut self.pressed,
                &mut self.pressing,
            );
        }
        // g(x + d) = g + H d + e = -r + e: the model error e is g(x + d) + r.
        let model_error = self.full_step.then(|| {
            let r = self.pcg.residual();
            let sum = gradient.iter().zip(r).map(|(g, r)| (0..3).map(|i| (g[i] + r[i]).powi(2)).sum::<f64>());
            sum.sum::<f64>().sqrt()
        });
        self.gradient = gradient;
        self.vertex_blocks = vertex_blocks;
        Linearization {
            gradient_norm: squared.sqrt(),
            force_scale,
            noise_floor: f64::EPSILON * magnitude,
            gradient_floor: f64::EPSILON * force_scale,
            model_error,
        }
    }

    /// The system matrix from the element blocks in hand, the vertex blocks (with the lagged
    /// damping's) and Rayleigh's damping matrix.
    fn assemble_system(&mut self) {
        let extra = if self.damping.is_empty() { None } else { Some(self.damping.as_slice()) };
        assemble::matrix(
            &self.model,
            &self.topology,
            &self.element_blocks,
            Some(&self.vertex_blocks),
            extra,
            &mut self.blocks,
        );
        if self.model.contact.is_projection() {
            assemble::constrain_pressed(&self.topology, &self.pressed, &mut self.blocks);
        }
    }

    /// Removes the normal part of the direction at pressed vertices: the constrained system
    /// has none, but a preconditioner (the factored local/global matrix) lets some in.
    fn keep_pressed_on_colliders(&mut self) {
        if self.model.contact.is_projection() && gather::keep_pressed(&mut self.direction, &self.pressed) {
            self.direction_residual = false;
        }
    }

    fn report(&self, iterations: usize, negative_curvature: bool) -> DirectionReport {
        DirectionReport {
            iterations,
            negative_curvature,
            slope: vector::dot(&self.gradient, &self.direction),
            norm: vector::dot(&self.direction, &self.direction).sqrt(),
            gradient_norm: vector::dot(&self.gradient, &self.gradient).sqrt(),
        }
    }

    /// Mixed FEM's linearization at the iterate (`MixedElements::linearize`, with the
    /// springs'), condensed as `request` asks: the displacement formulation's status, its
    /// gradient left in `gradient`.
    fn mixed_linearize(&mut self, request: &DirectionRequest<'_>) -> Linearization {
        let node = self.nodes[0];
        self.evaluated = None;
        let nt = self.model.tets.len();
        let (tet_corners, spring_corners) = self.corner_gradients.split_at_mut(4 * nt);
        let (tet_blocks, spring_blocks) = self.element_blocks.split_at_mut(10 * nt);
        element::spring_derivatives(
            &self.model,
            &self.x,
            &self.start,
            &self.nodes,
            Some(Projection::Psd),
            spring_corners,
            spring_blocks,
        );
        self.mixed.linearize(
            &self.model,
            &self.x,
            &self.start,
            node,
            tet_corners,
            &mut self.condensed_corners[..4 * nt],
            tet_blocks,
            request.solve.then_some(request.projection),
        );
        self.condensed_corners[4 * nt..].copy_from_slice(spring_corners);
        // The displacement formulation's gradient: the convergence test and the merit's slope.
        let linearization = self.gather(Projection::Psd);
        self.mixed.leave_at(&self.x, node);
        linearization
    }
}

impl Stages for CpuBackend {
    fn begin_step(&mut self, problem: StepProblem<'_>) {
        (self.evaluated, self.expected, self.ahead, self.guess_ahead) = (None, None, None, None);
        self.full_step = false;
        self.start.copy_from_slice(problem.start);
        self.target.copy_from_slice(problem.target);
        self.nodes = problem.nodes.to_vec();
        self.inv_h2 = 1.0 / (problem.dt * problem.dt);
        self.damping_weight = problem.damping_weight;
        let damping = problem.damping_matrix(self.x.len());
        self.projective_base = super::projective::vertex_diagonal(
            &self.model,
            &self.anchors,
            self.inv_h2,
            &self.nodes,
            damping.as_ref(),
        );
        super::projective::with_contacts(
            &self.projective_base,
            &super::projective::contact_set(&self.model, &self.colliders, &problem),
            super::projective::contact_stiffness(&self.model, &self.nodes),
            &mut self.projective_diagonal,
        );
        self.damping.clear();
        self.damping_vertex.clear();
        self.damping_linear.clear();
        self.friction_couplings =
            problem.couplings.iter().map(|c| c.scaled(problem.damping_weight)).collect();
        let Some(matrix) = damping else { return };
        self.damping_linear = matrix.vertex_linear.clone();
        // D = w (k/h K(x_n) + diag(A_v)), K the PSD-projected stiffness at x_n (Gast et al.
        // 4.2) and A_v the per-vertex ether and friction blocks, kept apart (as on a GPU,
        // whose f32 needs them factored).
        self.damping_vertex = matrix.vertex_blocks;
        if matrix.stiffness_scale > 0.0 {
            element::derivatives(
                &self.model,
                problem.start,
                problem.start,
                &Node::POTENTIAL,
                Some(Projection::Psd),
                None,
                RotationSearch::Converged,
                &mut self.corner_gradients,
                &mut self.element_blocks,
            );
            for b in &mut self.element_blocks {
                *b = b.map(|c| c * matrix.stiffness_scale);
            }
            self.damping = vec![[0.0; 9]; self.topology.block_count()];
            assemble::matrix(
                &self.model,
                &self.topology,
                &self.element_blocks,
                None,
                None,
                &mut self.damping,
            );
        }
    }

    fn set_anchors(&mut self, anchors: &[Anchor]) {
        self.anchors = super::topology::Anchors::new(self.model.vertex_count(), anchors);
    }

    fn set_colliders(&mut self, colliders: &[crate::contact::Collider]) {
        self.colliders = colliders.to_vec();
        // A memoized state evaluation saw the old colliders.
        self.state = None;
    }

    fn dissipation(&mut self) -> f64 {
        if !self.damped() || self.damping_weight <= 0.0 {
            return 0.0;
        }
        self.damping_term(&self.x, &mut vec![[0.0; 3]; self.x.len()]) / self.damping_weight
    }

    fn set_iterate(&mut self, x: &[[f64; 3]]) {
        self.x.copy_from_slice(x);
        // Under the projection model an iterate (an initial guess) is where each vertex's path
        // from the step's start first meets a collider, if it does.
        if self.model.contact.is_projection() {
            crate::contact::stop_at_contact(&self.colliders, &self.model.pinned, &self.start, &mut self.x);
        }
        // Evaluating other guesses leaves the buffers alone: the guess evaluated ahead keeps
        // its pass until the step ends.
        self.evaluated = match &self.guess_ahead {
            Some((guess, hessian)) if *guess == self.x => Some(*hessian),
            _ => None,
        };
        self.full_step = false;
    }

    fn read_iterate(&mut self, out: &mut [[f64; 3]]) {
        out.copy_from_slice(&self.x);
    }

    fn objective(&mut self) -> f64 {
        self.objective_at(&self.x)
    }

    fn linearize(&mut self, projection: Projection) -> Linearization {
        if self.evaluated != Some(Some(projection)) {
            let x = std::mem::take(&mut self.x);
            self.element_pass(&x, Some(projection));
            self.x = x;
            self.evaluated = Some(Some(projection));
        }
        let linearization = self.gather(projection);
        self.assemble_system();
        linearization
    }

    fn linearize_gradient(&mut self, projection: Projection) -> Linearization {
        if self.evaluated.is_none() {
            let x = std::mem::take(&mut self.x);
            self.element_pass(&x, None);
            self.x = x;
            self.evaluated = Some(None);
        }
        self.gather(projection)
    }

    fn local_global(&mut self, request: &LocalGlobalRequest) -> LocalGlobalReport {
        self.evaluated = None;
        (self.direction_residual, self.full_step) = (false, false);
        let mut report = LocalGlobalReport::default();
        let started = std::time::Instant::now();
        let contact = super::projective::has_penalty_contact(&self.model, &self.colliders);
        self.contact_stopped.clear();
        self.contact_stopped.resize(self.x.len(), false);
        self.contact_set.clear();
        self.contact_set.resize(self.x.len(), false);
        // With contact, the first iteration factors the matrix of its contact set.
        let prepared = contact || self.prepare_global(f64::INFINITY);
        report.linear_solve += started.elapsed();
        if !prepared {
            report.failed = true;
            return report;
        }
        loop {
            // A solve's first and last local steps converge the projections: their energies
            // are the elements' part of G, which comes with its gradient. The steps between
            // take one Newton step on each rotation (`rotation_search`): their energies are the
            // projective objective there, within the square of the rotations' error of G's.
            let started = std::time::Instant::now();
            let search = request.rotation_search(report.iterations);
            let elements = local::forces(
                &self.model,
                &self.x,
                &self.start,
                &self.nodes,
                &mut self.rotations,
                search,
                &mut self.corner_gradients,
            );
            let end = self.gather_what(Projection::None, gather::Gathered::GradientOnly);
            (report.gradient_norm, report.noise_floor) = (end.gradient_norm, end.noise_floor);
            report.converged = report.gradient_norm <= request.gradient_tolerance;
            let last = report.converged || report.iterations == request.iterations;
            // The vertices' part of G is a pass of its own, made where G is reported.
            if report.iterations == 0 || last || request.record_objectives {
                report.objective = elements + self.vertex_objective(&self.x);
            }
            if report.iterations == 0 {
                report.start_objective = report.objective;
            }
            if request.record_objectives {
                report.objectives.push(report.objective);
            }
            report.evaluate += started.elapsed();
            if last {
                // Backward Euler's local step at the result is the potential's element pass
                // there, which the step's end books.
                if self.nodes == Node::POTENTIAL {
                    self.keep_pass_as_state(elements);
                }
                break;
            }
            let started = std::time::Instant::now();
            if contact && !self.enter_contact_set() {
                report.failed = true;
                break;
            }
            for (d, g) in self.direction.iter_mut().zip(&self.gradient) {
                *d = [-g[0], -g[1], -g[2]];
            }
            if let Some(global) = self.global.as_mut() {
                global.solve(&mut self.direction);
            }
            // No vertex outside the contact set may enter a collider: there the quadratic
            // would not bound the penalty.
            let step = if contact {
                let contact = super::projective::LocalContact {
                    model: &self.model,
                    colliders: &self.colliders,
                    nodes: &self.nodes,
                    start: &self.start,
                };
                contact.bound_outside(&self.x, &self.direction, &self.contact_set, &mut self.contact_stopped)
            } else {
                1.0
            };
            vector::axpy(step, &self.direction, &mut self.x);
            report.iterations += 1;
            report.linear_iterations += 1;
            report.linear_solve += started.elapsed();
        }
        report
    }

    fn solve_direction(
        &mut self,
        solver: LinearSolver,
        tolerance: f64,
        max_iterations: usize,
    ) -> DirectionReport {
        for (s, g) in self.scratch.iter_mut().zip(&self.gradient) {
            *s = [-g[0], -g[1], -g[2]];
        }
        match solver {
            LinearSolver::Pcg | LinearSolver::PcgProjective => {
                // Only a small factor is worth its solves (and its numeric factorization), and
                // only without self-contact, whose stiffness it leaves out (Jacobi has it).
                let factored = solver == LinearSolver::PcgProjective
                    && self.couplings.is_empty()
                    && self.prepare_global(MAX_PRECONDITIONER_FILL);
                // Beyond the factor's size, the projective solver's Jacobi takes the coarse
                // correction of the same matrix.
                let coarse = (solver == LinearSolver::PcgProjective && !factored)
                    .then(|| {
                        let a = super::projective::stiffness_weight(&self.nodes);
                        self.coarse.correction(&self.model, &self.topology, a, &self.projective_diagonal)
                    })
                    .flatten();
                let preconditioner = match (self.global.as_mut(), coarse) {
                    (Some(global), _) if factored => pcg::Preconditioner::Factored(global),
                    (_, Some(coarse)) => pcg::Preconditioner::Coarse(coarse),
                    _ => pcg::Preconditioner::Jacobi,
                };
                let outcome = pcg::solve(
                    &self.topology,
                    &self.blocks,
                    &self.couplings,
                    &self.scratch,
                    &mut self.direction,
                    &mut self.pcg,
                    preconditioner,
                    tolerance,
                    max_iterations,
                );
                self.direction_residual = !outcome.negative_curvature;
                // The free parts' translations, which CG's relative residual can leave behind.
                // Not under the projection model, whose pressed vertices keep their normals,
                // nor with self-contact, whose couplings join the parts (as the GPU's split).
                if self.direction_residual
                    && !self.model.contact.is_projection()
                    && self.model.self_collision.is_none()
                {
                    let (groups, count) = &self.translation_groups;
                    self.pcg.correct_translations(
                        &mut self.direction,
                        &self.vertex_blocks,
                        groups,
                        *count as usize,
                    );
                }
                self.keep_pressed_on_colliders();
                self.report(outcome.iterations, outcome.negative_curvature)
            }
            LinearSolver::Cholesky => {
                self.direction_residual = false;
                if self.cholesky.is_none() {
                    self.cholesky = cholesky::Cholesky::new(&self.topology);
                }
                let solved = self
                    .cholesky
                    .as_mut()
                    .and_then(|c| c.solve(&self.blocks, &self.scratch, &mut self.direction));
                match solved {
                    Some(outcome) => {
                        self.keep_pressed_on_colliders();
                        self.report(1, outcome.indefinite)
                    }
                    // Not even a shifted factorization worked: fall back to steepest descent.
                    None => self.use_negative_gradient(),
                }
            }
        }
    }

    fn mixed_begin(&mut self) {
        let node = self.nodes[0];
        self.mixed.begin(&self.model, &self.start, node);
        let corners = self.corner_gradients.len();
        self.condensed_corners.resize(corners, [0.0; 3]);
        self.displacement_gradient.resize(self.x.len(), [0.0; 3]);
    }

    fn mixed_direction(&mut self, request: &DirectionRequest<'_>) -> MixedDirection {
        let started = std::time::Instant::now();
        let kept = self.mixed_deferred.take().filter(|&(projection, _)| request.resumes(projection));
        let linearization = match kept {
            Some((_, linearization)) => linearization,
            None => self.mixed_linearize(request),
        };
        let mut done =
            MixedDirection { linearization, direction: None, merit: f64::NAN, ..Default::default() };
        if !request.solve || linearization.gradient_norm <= request.gradient_tolerance {
            done.linearize_time = started.elapsed();
            return done;
        }
        if request.deferral == Deferral::Defer {
            self.mixed_deferred = Some((request.projection, linearization));
            done.linearize_time = started.elapsed();
            return done;
        }
        self.displacement_gradient.copy_from_slice(&self.gradient);
        // The condensed system's right-hand side (negated) and matrix.
        std::mem::swap(&mut self.corner_gradients, &mut self.condensed_corners);
        let condensed = self.gather(Projection::Psd);
        std::mem::swap(&mut self.corner_gradients, &mut self.condensed_corners);
        self.assemble_system();
        done.linearize_time = started.elapsed();
        let relative = request.relative_tolerance.unwrap_or_else(|| {
            super::forcing_term(
                condensed.gradient_norm,
                request.gradient_tolerance,
                linearization.force_scale,
            )
        });
        let mut direction = self.solve_direction(request.solver, relative, request.max_iterations);
        let local = std::time::Instant::now();
        let mut full = std::mem::take(&mut self.scratch);
        vector::offset(&self.x, 1.0, &self.direction, &mut full);
        let node = self.nodes[0];
        let tets = self.mixed.local_update(&self.model, (&self.start, node), &self.direction, &full);
        direction.slope = vector::dot(&self.displacement_gradient, &self.direction) + tets.slope;
        done.merit = tets.merit + self.merit_outside_tets(&self.x);
        done.full_step_merit = tets.full_step_merit + self.merit_outside_tets(&full);
        self.scratch = full;
        done.local_time = local.elapsed();
        done.direction = Some(direction);
        done
    }

    fn mixed_merits(&mut self, alphas: &[f64]) -> Vec<f64> {
        let node = self.nodes[0];
        let mut candidate = std::mem::take(&mut self.scratch);
        let values = alphas
            .iter()
            .map(|&alpha| {
                vector::offset(&self.x, alpha, &self.direction, &mut candidate);
                self.mixed.merit(&self.model, &candidate, &self.start, node, alpha)
                    + self.merit_outside_tets(&candidate)
            })
            .collect();
        self.scratch = candidate;
        values
    }

    fn mixed_advance(&mut self, alpha: f64) {
        vector::axpy(alpha, &self.direction, &mut self.x);
        self.full_step = false;
        self.mixed.advance(alpha);
        self.mixed.leave_at(&self.x, self.nodes[0]);
        self.evaluated = None;
    }

    fn use_negative_gradient(&mut self) -> DirectionReport {
        self.direction_residual = false;
        for (d, g) in self.direction.iter_mut().zip(&self.gradient) {
            *d = [-g[0], -g[1], -g[2]];
        }
        self.report(0, false)
    }

    fn pressing_forces(&mut self) -> Vec<f64> {
        self.pressing.clone()
    }

    fn step_bound(&mut self) -> Option<f64> {
        let closable = crate::contact::CLOSABLE;
        self.model.contact.is_barrier().then(|| {
            crate::contact::step_bound(
                &self.colliders,
                &self.model.pinned,
                &self.x,
                &self.direction,
                closable,
            )
        })
    }

    fn objectives_at(&mut self, points: &[&[[f64; 3]]]) -> Vec<f64> {
        // A barrier admits no guess whose straight path from the step's start crosses a
        // collider.
        let barrier = self.model.contact.is_barrier();
        points
            .iter()
            .map(|x| {
                if barrier && !crate::contact::path_clear(&self.colliders, &self.model.pinned, &self.start, x)
                {
                    return f64::INFINITY;
                }
                self.set_iterate(x);
                // The first guess gets the element pass Newton's first linearization needs
                // (`expect_linearization`), energies included.
                match self.expected.take() {
                    Some(hessian) => {
                        let iterate = std::mem::take(&mut self.x);
                        let value = self.element_pass(&iterate, hessian) + self.vertex_objective(&iterate);
                        self.x = iterate;
                        self.guess_ahead = Some((self.x.clone(), hessian));
                        value
                    }
                    None => self.objective(),
                }
            })
            .collect()
    }

    fn scale_direction(&mut self, factor: f64) {
        self.direction_residual = false;
        for d in &mut self.direction {
            *d = d.map(|c| c * factor);
        }
    }

    fn candidate_objectives(&mut self, alphas: &[f64]) -> Vec<f64> {
        let mut candidate = std::mem::take(&mut self.scratch);
        let values = alphas
            .iter()
            .map(|&alpha| {
                self.trial(alpha, &mut candidate);
                // The first candidate (the full step, which Newton usually takes) gets the
                // element pass the next linearization needs, energies included.
                match self.expected.take() {
                    Some(hessian) => {
                        self.evaluated = None;
                        self.ahead = Some((alpha, hessian));
                        self.element_pass(&candidate, hessian) + self.vertex_objective(&candidate)
                    }
                    None => self.objective_at(&candidate),
                }
            })
            .collect();
        self.scratch = candidate;
        values
    }

    fn expect_linearization(&mut self, next: Option<Projection>) {
        self.expected = Some(next);
    }

    fn preferred_batch(&self) -> usize {
        // The CPU pays per candidate, and the full Newton step is usually accepted.
        1
    }

    fn advance(&mut self, alpha: f64) {
        self.step_start.clone_from(&self.x);
        if self.model.contact.is_projection() {
            let mut next = std::mem::take(&mut self.scratch);
            self.trial(alpha, &mut next);
            std::mem::swap(&mut self.x, &mut next);
            self.scratch = next;
        } else {
            vector::axpy(alpha, &self.direction, &mut self.x);
        }
        self.full_step = self.direction_residual && alpha == 1.0;
        self.evaluated = match self.ahead.take() {
            Some((evaluated, hessian)) if evaluated == alpha => Some(hessian),
            _ => None,
        };
    }

    fn retreat(&mut self, fraction: f64) {
        for (x, start) in self.x.iter_mut().zip(&self.step_start) {
            *x = std::array::from_fn(|i| start[i] + fraction * (x[i] - start[i]));
        }
        self.full_step = false;
        self.evaluated = None;
        self.ahead = None;
    }

    fn start_competes(&self) -> bool {
        self.model.has_contact()
    }

    fn potential(&mut self, x: &[[f64; 3]]) -> f64 {
        let self_contact = self
            .model
            .self_collision
            .as_ref()
            .map_or(0.0, |c| c.energy_at_nodes(&self.model, x, x, &Node::POTENTIAL));
        self.state_elements(x) + gather::vertex_energy(&self.potential_terms(x), x) + self_contact
    }

    fn potential_gradient(&mut self, x: &[[f64; 3]], out: &mut [[f64; 3]]) {
        self.state_elements(x);
        let mut vertex_blocks = std::mem::take(&mut self.vertex_blocks);
        gather::gradient(
            &self.potential_terms(x),
            &self.topology,
            &self.state_corners,
            x,
            Projection::None,
            gather::Gathered::GradientOnly,
            out,
            &mut vertex_blocks,
        );
        if let Some(contact) = &self.model.self_collision {
            contact.derivatives_at_nodes(&self.model, x, x, &Node::POTENTIAL, out, &mut vertex_blocks);
        }
        self.vertex_blocks = vertex_blocks;
    }
}

#[cfg(test)]
pub(crate) mod tests;
