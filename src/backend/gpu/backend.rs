//! `GpuBackend`: the [`Stages`] of an implicit step on the GPU. The iterate, gradient,
//! Hessian and direction stay on the device in f32. Stages record into one [`Recording`]
//! and are submitted in parts as they are recorded, read when the host needs a number: a
//! Newton iteration (the advance along the last direction, the element pass, gather,
//! assembly, the whole PCG solve, its dot products and the line search's first candidates)
//! is submitted in parts — the linearization first, so the device starts while the host
//! records the solve, and a long solve in pieces (`Recording::submit_part`) — and read back
//! once.

use rayon::prelude::*;
use std::sync::Arc;

use super::assemble::{AssembleGroups, Target};
use super::buffers::GpuBuffers;
use super::contact::{ContactParams, WgContact};
use super::context::GpuContext;
use super::element::{ElementGroups, Outputs, WgElement};
use super::gather::{GatherGroups, GatherParams};
use super::line_search::{Decision, LineSearchGroups, SearchRecord, WgLineSearch};
use super::pcg::{
    DENSE, JACOBI, JacobiLoop, PcgGroups, PcgParams, PcgStatus, ProjectiveInverse, SPLIT_BLOCKS,
    SPLIT_PROJECTIVE, Solve,
};
use super::recording::{DeviceCounts, Recording, Staged};
use super::vector::VectorGroups;
use super::{Positions, WgStages};
use crate::backend::{
    Anchor, BudgetRequest, BudgetSolve, Deferral, DirectionReport, DirectionRequest, LinearSolver,
    Linearization, LocalGlobalReport, LocalGlobalRequest, NewtonDirection, Stages, Start, projective,
};
use crate::error::{Error, Result};
use crate::material::{Projection, RotationSearch};
use crate::model::Model;
use crate::objective::{Node, StepProblem};

/// States `energies_at` evaluates in one submission at most (a stabilized step's batch of
/// blends is 7).
const MAX_BLENDS: usize = 8;

/// Vertices from which a converged Newton or mixed-FEM solve multiplies by the dense `S^-1` in
/// the loop rather than by Jacobi in one workgroup (`GpuBackend::preconditioned`). Below, the
/// 1K-tet bars (330 vertices) stay as measured: one workgroup's 10.6 us a CG iteration there,
/// and a step short enough that the loop's extra dispatches may cost more than they save.
const DENSE_OVER_ONE_WORKGROUP: usize = 384;

/// Line-search candidates evaluated in one submission at most.
pub const MAX_BATCH: usize = super::buffers::BATCH;

/// CG iterations recorded before the first status read when there is no history yet.
const FIRST_CHUNK: u32 = 32;

/// PCG statuses a local/global solve stages before reading them.
const STATUS_BATCH: usize = 32;

/// Every stage bound to one model's buffers.
struct Groups {
    element: ElementGroups,
    local: super::local::LocalGroups,
    mixed: super::mixed::MixedGroups,
    gather: GatherGroups,
    contact: super::contact::ContactGroups,
    self_contact: Option<super::self_contact::SelfContactGroups>,
    line_search: LineSearchGroups,
    assemble: AssembleGroups,
    pcg: PcgGroups,
    vector: VectorGroups,
}

impl Groups {
    fn new(
        context: &GpuContext,
        stages: &WgStages,
        recording: &Recording,
        model: &Model,
        buffers: &GpuBuffers,
    ) -> Result<Groups> {
        Ok(Groups {
            element: stages.element.bind(context, recording, model, buffers)?,
            local: stages.local.bind(context, recording, buffers)?,
            mixed: stages.mixed.bind(context, recording, model, buffers, &stages.element, &stages.gather)?,
            gather: stages.gather.bind(context, recording, buffers)?,
            contact: stages.contact.bind(context, recording, buffers)?,
            self_contact: stages.self_contact.bind(context, recording, buffers)?,
            line_search: stages.line_search.bind(
                context,
                recording,
                buffers,
                super::element::partial_count(model),
            )?,
            assemble: stages.assemble.bind(context, recording, buffers)?,
            pcg: stages.pcg.bind(context, recording, buffers)?,
            vector: stages.vector.bind(context, recording, buffers)?,
        })
    }
}

/// The GPU implementation of [`Stages`].
pub struct GpuBackend {
    context: Arc<GpuContext>,
    stages: Arc<WgStages>,
    buffers: GpuBuffers,
    groups: Groups,
    recording: Recording,
    model: Arc<Model>,
    /// Whether the potential is infinite somewhere: neo-Hookean tets outside their domain,
    /// vertices inside a collider under the barrier.
    potential_has_an_edge: bool,
    nodes: Vec<Node>,
    inv_h2: f64,
    /// This step has lagged damping (its matrix is built at the step's start), with this
    /// weight.
    damped: bool,
    /// This step's damping has Rayleigh's part, the matrix `damping_blocks` holds.
    rayleigh: bool,
    damping_weight: f64,
    /// This step's damping has self-contact friction (coupling record set 2).
    friction: bool,
    error: Option<Error>,
    /// CG iterations of the last solve, and of each solve since the step began and in the
    /// step before: how many to record before reading the status. Newton's solves lengthen
    /// as its forcing term tightens, and the next step's follow the same pattern.
    last_cg: u32,
    solve_lengths: Vec<u32>,
    previous_solve_lengths: Vec<u32>,
    /// The local/global matrix's vertex diagonal for the current step (empty until a solve
    /// asks for it), its least entry at a free vertex, and the step's damping matrix it is
    /// made from.
    projective_diagonal: Vec<f64>,
    lightest_diagonal: f64,
    step_damping: Option<crate::objective::DampingMatrix>,
    /// The local/global matrices' inverses, dense or FSAI's (made at the first solve they
    /// precondition), and whether a test asked for FSAI's at every size.
    inverse: Option<ProjectiveInverse>,
    fsai_only: bool,
    /// The damped diagonal each step weight's last solve asked for: a dense inverse is made
    /// for the damped matrix once it holds still (ether drag), the undamped one until then.
    damped_diagonals: Vec<(f64, Vec<f64>)>,
    /// Newton's preconditioner by the local/global matrix's inverse this step: the penalty
    /// contact set whose rows take Jacobi's, as flags (empty: none), and whether it and the
    /// inverse are on the device.
    newton_contact: Vec<u32>,
    newton_inverse_ready: bool,
    /// The CG iterations each global step of the last local/global solves took, by its place
    /// in the solve (a warm-started step needs fewer the later it comes): how many the same
    /// step of the next solve records.
    global_lengths: Vec<u32>,
    /// Bodies up to this many vertices solve PCG in one workgroup (a test's choice; else
    /// the PCG stage's limit for its shape and preconditioner).
    small_solve_vertices: Option<usize>,
    /// The mixed solver's stretches on the device belong to these positions (as last read
    /// back) at this node position, and whether a mixed solve moved them since.
    mixed_left_at: Option<(Vec<[f64; 3]>, f64)>,
    mixed_moved: bool,
    /// The step's start, as the host gave it, where contact or a mixed solve needs it.
    start: Vec<[f64; 3]>,
    /// The inertia the gather leaves to the host, per unit of `1/h^2`
    /// (`gather::target_inertia`).
    target_inertia: f64,
    /// Where the step's start and target lie on the host (compared, never read, until the
    /// guesses are recorded) and the state buffers `begin_step` uploaded them to: a guess
    /// that is one of them is copied on the device rather than uploaded again.
    step_vectors: Vec<(usize, &'static str)>,
    /// The potential and its gradient at the last state they were evaluated at (until the
    /// handles or colliders change): a step's end is the next step's start, and the
    /// integrators and the driver ask for both there.
    potential_at: PotentialAt,
    /// The iterate as last read back, until it changes.
    iterate_read: Option<IterateRead>,
    /// The search record of a start chosen on the device, for the next Newton readback.
    pending_start: Option<Staged>,
    /// The curvature of the mixed-FEM linearization whose solve was deferred
    /// (`Deferral::Defer`), kept in the buffers for a resumed request to solve from.
    mixed_deferred: Option<Projection>,
    /// Under the barrier, the collision-free bound on the current direction from the
    /// iterate, read with the direction (until either changes).
    step_bound: Option<f64>,
}

/// The iterate as read back, and the damping pseudo-potential there when read with it.
struct IterateRead {
    x: Vec<[f64; 3]>,
    dissipation: Option<f64>,
}

/// The potential energy and its gradient at a state.
#[derive(Default)]
struct PotentialAt {
    x: Vec<[f64; 3]>,
    potential: f64,
    gradient: Vec<[f64; 3]>,
}

impl PotentialAt {
    /// Whether it holds the potential at `x`: the same bits, compared as memory in chunks
    /// on the worker pool.
    fn holds(&self, x: &[[f64; 3]]) -> bool {
        let same = |(a, b): (&[[f64; 3]], &[[f64; 3]])| {
            bytemuck::cast_slice::<_, u8>(a) == bytemuck::cast_slice::<_, u8>(b)
        };
        let chunk = crate::math::VERTEX_CHUNK;
        !self.x.is_empty()
            && self.x.len() == x.len()
            && self.x.par_chunks(chunk).zip(x.par_chunks(chunk)).all(same)
    }

    /// Forgets the state it holds and keeps its buffers: fresh vectors of a large body's size
    /// come from the kernel, zeroed page by page (two a step were 766 page faults at 65K
    /// vertices).
    fn forget(&mut self) {
        self.x.clear();
    }
}

/// Staged results of one batch of line-search candidates: element and gather partials, each
/// of a pass over `members` positions (one member's partials after another).
struct StagedCandidates(Vec<(Staged, Staged, usize)>);

impl GpuBackend {
    /// Compiles the stages (once per context) and uploads `model`.
    pub fn new(context: Arc<GpuContext>, model: Arc<Model>) -> Result<GpuBackend> {
        let (stages, buffers, recording, groups) = context.guarded(|| {
            let stages = context.stages()?;
            let mut buffers = GpuBuffers::new(&context, &model, super::element::partial_count(&model));
            let mut recording = Recording::new(&context, staging_bytes(&model));
            buffers.pack(&context, &mut recording);
            let groups = Groups::new(&context, &stages, &recording, &model, &buffers)?;
            Ok((stages, buffers, recording, groups))
        })?;
        let neo_hookean =
            |m: &crate::material::Elastic| m.model() == crate::material::MaterialModel::NeoHookean;
        let potential_has_an_edge = model.contact.is_barrier() || model.tet_material.iter().any(neo_hookean);
        Ok(GpuBackend {
            context,
            stages,
            buffers,
            groups,
            recording,
            model,
            potential_has_an_edge,
            nodes: Node::POTENTIAL.to_vec(),
            inv_h2: 0.0,
            target_inertia: 0.0,
            damped: false,
            rayleigh: false,
            damping_weight: 1.0,
            friction: false,
            error: None,
            last_cg: FIRST_CHUNK,
            solve_lengths: Vec::new(),
            previous_solve_lengths: Vec::new(),
            projective_diagonal: Vec::new(),
            lightest_diagonal: 0.0,
            step_damping: None,
            inverse: None,
            fsai_only: false,
            damped_diagonals: Vec::new(),
            newton_contact: Vec::new(),
            newton_inverse_ready: false,
            global_lengths: Vec::new(),
            small_solve_vertices: None,
            mixed_left_at: None,
            mixed_moved: false,
            start: Vec::new(),
            step_vectors: Vec::new(),
            potential_at: PotentialAt::default(),
            iterate_read: None,
            pending_start: None,
            mixed_deferred: None,
            step_bound: None,
        })
    }

    /// Packs the arena anew and rebuilds the bind groups after a buffer was replaced.
    fn rebind(&mut self) -> Result<()> {
        self.buffers.pack(&self.context, &mut self.recording);
        self.groups = Groups::new(&self.context, &self.stages, &self.recording, &self.model, &self.buffers)?;
        Ok(())
    }

    /// The device context.
    pub fn context(&self) -> &GpuContext {
        &self.context
    }

    /// What a linearization's gather writes (`GatherParams::rhs`): with free parts, whose
    /// solves may split along their translations, the vertex terms' part of b too.
    fn rhs_outputs(&self) -> u32 {
        match self.buffers.translation_groups > 0 {
            true => super::gather::RHS_AND_VERTEX_TERMS,
            false => super::gather::RHS,
        }
    }

    /// The gather's parameters for `nodes` (`inv_h2` 0 leaves inertia out); `derivatives`
    /// gathers the gradient and vertex blocks (`exact` keeping the colliders' curvature),
    /// `damped` adds the step's lagged damping.
    fn gather_params(
        &self,
        nodes: &[Node],
        inv_h2: f64,
        derivatives: Option<bool>,
        damped: bool,
    ) -> GatherParams {
        let node = |q: usize| nodes.get(q).copied().unwrap_or(Node { weight: 0.0, theta: 0.0 });
        let g = self.model.gravity;
        GatherParams {
            vertex_count: self.model.vertex_count() as u32,
            node_count: nodes.len() as u32,
            inv_h2: inv_h2 as f32,
            end_weight: nodes.iter().map(|q| q.weight * q.theta).sum::<f64>() as f32,
            gravity_x: g[0] as f32,
            gravity_y: g[1] as f32,
            gravity_z: g[2] as f32,
            weight_0: node(0).weight as f32,
            theta_0: node(0).theta as f32,
            weight_1: node(1).weight as f32,
            theta_1: node(1).theta as f32,
            collider_count: self.model.colliders.len() as u32,
            exact_hessian: derivatives.unwrap_or(false) as u32,
            damped: match damped && self.damped {
                false => 0,
                true if self.rayleigh => super::gather::DAMPED_RAYLEIGH,
                true => super::gather::DAMPED_VERTICES,
            },
            derivatives: derivatives.is_some() as u32,
            tet_count: self.model.tets.len() as u32,
            spring_count: self.model.springs.len() as u32,
            surface_count: self.buffers.self_contact.as_ref().map_or(0, |l| l.surface_count as u32),
            contact_set: 1,
            friction: (damped && self.damped && self.friction) as u32,
            ..GatherParams::default()
        }
        .with_contact(self.model.contact)
    }

    /// Under the projection model, records `entry` of the contact stage (`stop_at_contact`
    /// for the iterate just offset, `keep_pressed` for the direction just solved).
    fn record_projection(&mut self, entry: &'static str) -> Result<()> {
        if !self.model.contact.is_projection() {
            return Ok(());
        }
        let (c, rec) = (&self.context, &mut self.recording);
        let colliders = self.buffers.colliders().len();
        self.stages.contact.queue(c, rec, &self.groups.contact, &self.buffers, entry, colliders, 1.0)
    }

    /// Positions the host gives as an iterate, as the projection model admits them: each
    /// vertex's path from the step's start stopped where it first meets a collider (the CPU
    /// twin's `set_iterate`).
    fn admitted<'a>(&self, x: &'a [[f64; 3]]) -> std::borrow::Cow<'a, [[f64; 3]]> {
        if !self.model.contact.is_projection() {
            return std::borrow::Cow::Borrowed(x);
        }
        let mut x = x.to_vec();
        crate::contact::stop_at_contact(self.buffers.colliders(), &self.model.pinned, &self.start, &mut x);
        std::borrow::Cow::Owned(x)
    }

    /// Under the barrier, whether the straight path from the step's start to `x` crosses a
    /// collider.
    fn path_blocked(&self, x: &[[f64; 3]]) -> bool {
        self.model.contact.is_barrier()
            && !crate::contact::path_clear(self.buffers.colliders(), &self.model.pinned, &self.start, x)
    }

    /// Under the barrier, records the bound on the step along the direction (see
    /// `Stages::step_bound`) and stages its partials.
    fn record_step_bound(&mut self) -> Result<Option<Staged>> {
        if !self.model.contact.is_barrier() {
            return Ok(None);
        }
        let (c, rec) = (&self.context, &mut self.recording);
        let colliders = self.buffers.colliders().len();
        let staged = self.stages.contact.step_bound(
            c,
            rec,
            &self.groups.contact,
            &self.buffers,
            colliders,
            crate::contact::CLOSABLE,
        )?;
        Ok(Some(staged))
    }

    /// Keeps the first failure and substitutes `fallback` (NaN stops the solver at once).
    fn settle<T>(&mut self, result: Result<T>, fallback: T) -> T {
        result.unwrap_or_else(|e| {
            self.error.get_or_insert(e);
            fallback
        })
    }

    /// Uploads positions (as displacements) into the iterate or the auxiliary buffer.
    fn write_positions(&mut self, at: Positions, values: &[[f64; 3]]) {
        let name = if at == Positions::Iterate { "x" } else { "aux" };
        if at == Positions::Iterate {
            (self.iterate_read, self.step_bound) = (None, None);
        }
        let displacements = self.buffers.displacements(values);
        self.recording.upload(
            &self.context,
            self.buffers.state.named(name),
            bytemuck::cast_slice(&displacements),
        );
    }

    fn vector(&mut self, entry: &'static str, alpha: f64) -> Result<()> {
        if entry == "offset" || entry == "advance" || entry == "retreat" {
            self.iterate_read = None;
        }
        self.stages.vector.queue(&self.context, &mut self.recording, &self.groups.vector, entry, alpha)
    }

    fn elements(&mut self, at: Positions, nodes: &[Node], outputs: Outputs) -> Result<()> {
        let (c, rec) = (&self.context, &mut self.recording);
        self.stages.element.queue(c, rec, &self.groups.element, at, nodes, outputs, false)
    }

    /// Records the gather at `at`, after self-contact's detection where it has a part in it
    /// (with the lists of records where it gathers derivatives).
    fn gather(&mut self, params: &GatherParams, at: Positions) -> Result<()> {
        if let Some(groups) = &self.groups.self_contact
            && params.node_count > 0
        {
            let node = |weight: f32, theta: f32| Node { weight: weight as f64, theta: theta as f64 };
            let nodes = [node(params.weight_0, params.theta_0), node(params.weight_1, params.theta_1)];
            let nodes = &nodes[..params.node_count as usize];
            let (c, rec) = (&self.context, &mut self.recording);
            let link = params.derivatives != 0;
            self.stages.self_contact.queue(c, rec, groups, at, nodes, params.contact_set, link)?;
        }
        self.stages.gather.queue(&self.context, &mut self.recording, &self.groups.gather, params, at)
    }

    fn assemble(&mut self, target: Target) -> Result<()> {
        let (c, rec) = (&self.context, &mut self.recording);
        self.stages.assemble.queue(c, rec, &self.groups.assemble, &self.buffers, target)
    }

    fn dots(&mut self) -> Result<Staged> {
        let (c, rec) = (&self.context, &mut self.recording);
        self.stages.vector.dots(c, rec, &self.groups.vector, &self.buffers)
    }

    /// Records the element and vertex energies at `at` (at each position of a batch).
    fn record_energy_pass(&mut self, at: Positions, nodes: &[Node], inv_h2: f64, damped: bool) -> Result<()> {
        self.elements(at, nodes, Outputs::Energy)?;
        let params = self.gather_params(nodes, inv_h2, None, damped);
        self.gather(&params, at)
    }

    /// [`record_energy_pass`](Self::record_energy_pass), and stages both partial sums.
    fn record_energy(
        &mut self,
        at: Positions,
        nodes: &[Node],
        inv_h2: f64,
        damped: bool,
    ) -> Result<(Staged, Staged)> {
        self.record_energy_pass(at, nodes, inv_h2, damped)?;
        let (c, rec, members) = (&self.context, &mut self.recording, at.members());
        let elements = WgElement::stage_batch_energy(c, rec, &self.buffers, members)?;
        Ok((elements, super::gather::stage_batch_partials(c, rec, &self.buffers, members)?))
    }

    /// Records the linearization at the iterate: element derivatives, gather (whose partials
    /// hold its status; it writes the right-hand side `-grad G` too) and assembly.
    fn record_linearization(&mut self, projection: Projection) -> Result<()> {
        let nodes = self.nodes.clone();
        let outputs =
            if projection == Projection::Psd { Outputs::ProjectedHessian } else { Outputs::Hessian };
        let mut params = self.gather_params(&nodes, self.inv_h2, Some(projection == Projection::None), true);
        // The projection model's active set is the linearization's (not a potential pass's),
        // and so are the self-contact records the PCG product reads.
        let constrained = self.model.contact.is_projection();
        params.projection = constrained as u32;
        params.contact_set = 0;
        params.rhs = self.rhs_outputs();
        self.elements(Positions::Iterate, &nodes, outputs)?;
        self.gather(&params, Positions::Iterate)?;
        self.assemble(Target::Newton { rayleigh: self.rayleigh, constrained })
    }

    /// Stages the last gather's partials.
    fn stage_gather(&mut self) -> Result<Staged> {
        super::gather::stage_partials(&self.context, &mut self.recording, &self.buffers)
    }

    /// Records the line-search candidates `x + alpha d`: together where positions
    /// [batch](Self::batches) and the projection model does not stop each at its colliders,
    /// else one after another in `x` (restored after).
    fn record_candidates(&mut self, alphas: &[f64]) -> Result<StagedCandidates> {
        self.vector("save", 0.0)?;
        let nodes = self.nodes.clone();
        if self.batches() && !self.model.contact.is_projection() && !alphas.is_empty() {
            let (c, rec) = (&self.context, &mut self.recording);
            self.stages.vector.batch_offsets(c, rec, &self.groups.vector, alphas)?;
            let at = Positions::Batch(alphas.len());
            let (elements, vertices) = self.record_energy(at, &nodes, self.inv_h2, true)?;
            return Ok(StagedCandidates(vec![(elements, vertices, alphas.len())]));
        }
        let mut staged = Vec::with_capacity(alphas.len());
        for &alpha in alphas {
            self.vector("offset", alpha)?;
            self.record_projection("stop_at_contact")?;
            let (elements, vertices) = self.record_energy(Positions::Iterate, &nodes, self.inv_h2, true)?;
            staged.push((elements, vertices, 1));
        }
        self.vector("offset", 0.0)?;
        Ok(StagedCandidates(staged))
    }

    /// The potential and dissipation at each of `points` (at most [`MAX_BLENDS`]), evaluated
    /// together in the `batch` buffer (the potential's nodes weigh the start by 0, so that
    /// the step's start stands in for each point's own); the iterate is left at the last.
    fn energies_in_batch(&mut self, points: &[&[[f64; 3]]]) -> Result<Vec<(f64, f64)>> {
        let members = points.len();
        let batch = self.buffers.scratch.named("batch").clone();
        let bytes = 12 * self.buffers.vertex_count as u64;
        for (k, x) in points.iter().enumerate() {
            let values = self.buffers.displacements(x);
            self.recording.upload_at(&self.context, &batch, k as u64 * bytes, bytemuck::cast_slice(&values));
        }
        let at = Positions::Batch(members);
        let (elements, vertices) = self.record_energy(at, &Node::POTENTIAL, 0.0, false)?;
        let mut staged = vec![elements, vertices];
        if self.dissipates() {
            staged.push(self.record_dissipation(at)?);
        }
        let results = self.recording.read(&self.context, &staged)?;
        let potentials = self.member_values(&results[0], &results[1], members, &Node::POTENTIAL, 0.0);
        let dissipations: Vec<f64> = match results.get(2) {
            Some(bytes) => bytes.chunks(bytes.len() / members).map(|b| self.dissipation_from(b)).collect(),
            None => vec![0.0; members],
        };
        self.write_positions(Positions::Iterate, points[members - 1]);
        Ok(potentials.into_iter().zip(dissipations).collect())
    }

    /// [`energies_in_batch`](Self::energies_in_batch), one point after another.
    fn energies_one_by_one(&mut self, points: &[&[[f64; 3]]]) -> Result<Vec<(f64, f64)>> {
        let mut staged = Vec::with_capacity(3 * points.len());
        for x in points {
            self.write_positions(Positions::Aux, x);
            let (elements, vertices) = self.record_energy(Positions::Aux, &Node::POTENTIAL, 0.0, false)?;
            staged.extend([elements, vertices]);
            self.write_positions(Positions::Iterate, x);
            if self.dissipates() {
                staged.push(self.record_dissipation(Positions::Iterate)?);
            }
        }
        let results = self.recording.read(&self.context, &staged)?;
        let per_point = if self.dissipates() { 3 } else { 2 };
        Ok(results
            .chunks(per_point)
            .map(|r| {
                let potential = self.candidate_values(&r[..2], &Node::POTENTIAL, 0.0)[0];
                (potential, if self.dissipates() { self.dissipation_from(&r[2]) } else { 0.0 })
            })
            .collect())
    }

    /// Whether several positions are evaluated in one pass: not with self-contact, whose
    /// records are detected at one set of positions at a time.
    fn batches(&self) -> bool {
        self.groups.self_contact.is_none()
    }

    /// Records `G` at `at` into candidate slot `first` on (the iterate's value for `None`;
    /// each position of a batch into its own slot).
    fn record_objectives(&mut self, at: Positions, first: Option<usize>) -> Result<()> {
        let nodes = self.nodes.clone();
        self.record_energy_pass(at, &nodes, self.inv_h2, true)?;
        self.decide(Decision::Energy { slot: first, count: at.members() })
    }

    /// The solve of a Newton or mixed-FEM direction: to the request's relative residual, or
    /// to the forcing term the device computes from the linearization, within the request's
    /// cap (`tolerance` carries the cap where `forcing` is set).
    fn direction_pcg_params(&self, request: &DirectionRequest<'_>) -> PcgParams {
        PcgParams {
            tolerance: request.relative_tolerance.unwrap_or(request.forcing_cap) as f32,
            ..self.pcg_params(request.relative_tolerance, request.gradient_tolerance, request.max_iterations)
        }
    }

    fn pcg_params(
        &self,
        request_tolerance: Option<f64>,
        gradient_tolerance: f64,
        max_iterations: usize,
    ) -> PcgParams {
        PcgParams {
            vertex_count: self.buffers.vertex_count as u32,
            partial_count: self.buffers.vertex_workgroups(),
            max_iterations: max_iterations as u32,
            tolerance: request_tolerance.unwrap_or(1.0) as f32,
            forcing: request_tolerance.is_none() as u32,
            gradient_tolerance: gradient_tolerance as f32,
            surface_count: self.buffers.self_contact.as_ref().map_or(0, |l| l.surface_count as u32),
            friction: self.friction as u32,
            preconditioner: JACOBI,
            fsai_inverse_offset: 0,
            // The bound groups' (`WgPcg::start`).
            lanes: 1,
            warm: 0,
            advance: 0,
            recorded_to: 0,
            coarse_clusters: 0,
            coarse_offset: 0,
            translation: 0,
            translation_groups: self.buffers.translation_groups,
        }
    }

    /// CG iterations to record before the first status read (see [`first_chunk`]).
    fn first_chunk(&self, max_iterations: u32) -> u32 {
        first_chunk(&self.previous_solve_lengths, self.solve_lengths.len(), self.last_cg, max_iterations)
    }

    /// Remembers a solve's length.
    fn solved(&mut self, status: &PcgStatus) {
        self.last_cg = status.iterations.max(1);
        self.solve_lengths.push(self.last_cg);
    }

    /// Records and reads more chunks while the solve runs (each as long as all before it);
    /// returns the final status.
    fn run_on(&mut self, solve: &mut Solve, mut status: PcgStatus) -> Result<PcgStatus> {
        let max = solve.params.max_iterations;
        debug_assert_eq!(solve.params.advance, 0, "a solve that takes its step in its finish ran on");
        while status.running() {
            if solve.recorded() >= max {
                return Err(Error::Solver("the GPU PCG loop stopped making progress".into()));
            }
            // As many as the residual's rate so far says are left, and a margin; twice as
            // many as recorded where it says nothing.
            let left = status.iterations_left().map_or(solve.recorded().max(FIRST_CHUNK), |n| n + n / 4 + 4);
            let more = (max - solve.recorded()).min(left);
            let (c, rec) = (&self.context, &mut self.recording);
            let staged = self.stages.pcg.iterate(c, rec, &self.groups.pcg, &self.buffers, solve, more)?;
            status = bytemuck::pod_read_unaligned(&rec.read(c, &[staged])?[0]);
        }
        Ok(status)
    }

    /// Whether this body's Jacobi solves run in one workgroup.
    fn solved_in_one_workgroup(&self) -> bool {
        self.groups.pcg.solves_in_one_workgroup(self.small_solve_vertices)
    }

    /// Records a PCG solve: for a body of at most the small-solve limit the whole solve in
    /// one workgroup and one dispatch, else the loop's start and its first `chunk` iterations
    /// (returned, to go on with). Returns where the status will be.
    fn record_solve(
        &mut self,
        params: PcgParams,
        chunk: u32,
        jacobi_loop: JacobiLoop,
    ) -> Result<(Staged, Option<Solve>)> {
        // (The one-workgroup solve takes Jacobi only.)
        let one_workgroup = params.preconditioner == JACOBI && self.solved_in_one_workgroup();
        let (c, rec) = (&self.context, &mut self.recording);
        if one_workgroup {
            return Ok((self.stages.pcg.solve_small(c, rec, &self.groups.pcg, &self.buffers, params)?, None));
        }
        let mut solve = self.stages.pcg.start(c, rec, &self.groups.pcg, params, jacobi_loop)?;
        let staged = self.stages.pcg.iterate(c, rec, &self.groups.pcg, &self.buffers, &mut solve, chunk)?;
        Ok((staged, Some(solve)))
    }

    /// Records a PCG solve and reads its status once the first chunk (or the whole) is done.
    fn solve(&mut self, params: PcgParams) -> Result<PcgStatus> {
        let chunk = self.first_chunk(params.max_iterations);
        let (staged, solve) = self.record_solve(params, chunk, JacobiLoop::Cg)?;
        let status = bytemuck::pod_read_unaligned(&self.recording.read(&self.context, &[staged])?[0]);
        let status = match solve {
            Some(mut solve) => self.run_on(&mut solve, status)?,
            None => status,
        };
        self.solved(&status);
        Ok(status)
    }

    /// The direction's report from the staged dots `(g.d, d.d, g.g)`.
    fn report(bytes: &[u8], iterations: usize, negative_curvature: bool) -> DirectionReport {
        let [slope, dd, gg] = sums::<3>(bytes);
        DirectionReport { iterations, negative_curvature, slope, norm: dd.sqrt(), gradient_norm: gg.sqrt() }
    }

    fn linearization(bytes: &[u8]) -> Linearization {
        let sums = sums::<4>(bytes);
        Linearization {
            gradient_norm: sums[1].sqrt(),
            force_scale: sums[2],
            // The device works in f32: its objective is known to f32 resolution (the gather
            // scales its noise by it).
            noise_floor: sums[3].sqrt(),
            gradient_floor: f32::EPSILON as f64 * sums[2],
            model_error: None,
        }
    }

    /// What the host adds to a vertex energy gathered at `nodes` with inertia weighed by
    /// `inv_h2` (0 for the potential alone): gravity's potential at the reference positions,
    /// weighed by the nodes (`GpuBuffers::reference_gravity_energy`), and the inertia of the
    /// target's offset from the start (`gather::target_inertia`).
    fn reference_energy(&self, nodes: &[Node], inv_h2: f64) -> f64 {
        let weight: f64 = nodes.iter().map(|q| q.weight).sum();
        weight * self.buffers.reference_gravity_energy(self.model.gravity) + inv_h2 * self.target_inertia
    }

    /// The objectives at `nodes`, inertia weighed by `inv_h2`, from pairs of staged element
    /// and gather partials.
    fn candidate_values(&self, results: &[Vec<u8>], nodes: &[Node], inv_h2: f64) -> Vec<f64> {
        results.chunks(2).flat_map(|pair| self.member_values(&pair[0], &pair[1], 1, nodes, inv_h2)).collect()
    }

    /// The objectives at `nodes` (inertia weighed by `inv_h2`) of a pass over `members`
    /// positions from its staged element and gather partials, one member's after another.
    fn member_values(
        &self,
        elements: &[u8],
        vertices: &[u8],
        members: usize,
        nodes: &[Node],
        inv_h2: f64,
    ) -> Vec<f64> {
        let (e, v) = (elements.len() / members, vertices.len() / members);
        let reference = self.reference_energy(nodes, inv_h2);
        (0..members)
            .map(|j| {
                let gathered = sums::<1>(&vertices[j * v..(j + 1) * v])[0];
                WgElement::energy(&elements[j * e..(j + 1) * e]) + gathered + reference
            })
            .collect()
    }

    fn read_candidates(
        &mut self,
        staged: &[Staged],
        candidates: StagedCandidates,
    ) -> Result<(Vec<Vec<u8>>, Vec<f64>)> {
        let mut all = staged.to_vec();
        all.extend(candidates.0.iter().flat_map(|&(e, g, _)| [e, g]));
        let results = self.recording.read(&self.context, &all)?;
        let values = candidates
            .0
            .iter()
            .zip(results[staged.len()..].chunks(2))
            .flat_map(|(&(_, _, members), pair)| {
                self.member_values(&pair[0], &pair[1], members, &self.nodes, self.inv_h2)
            })
            .collect();
        Ok((results[..staged.len()].to_vec(), values))
    }

    /// Records the mixed stage's `entry` over the tets at the objective's node.
    fn mixed(&mut self, entry: &'static str, alpha: f64) -> Result<()> {
        self.mixed_with(entry, alpha, Projection::Psd)
    }

    /// [`mixed`](Self::mixed) with the stretch curvature (of `linearize`) as `projection` says.
    fn mixed_with(&mut self, entry: &'static str, alpha: f64, projection: Projection) -> Result<()> {
        let (c, rec, groups) = (&self.context, &mut self.recording, &self.groups);
        let at = (self.nodes[0], Positions::Iterate);
        self.stages.mixed.queue(c, rec, &groups.mixed, &groups.element, at, entry, alpha, projection)
    }

    /// Records the mixed merit at the iterate and `s + alpha ds`: the tets' part and the
    /// springs' energies (staged together as the element partials), and the vertex terms
    /// (the gather's energy); returns both stagings.
    fn record_mixed_merit(&mut self, nodes: &[Node], alpha: f64) -> Result<Vec<Staged>> {
        self.queue_mixed_merit(nodes, Positions::Iterate, alpha)?;
        let elements = WgElement::stage_energy(&self.context, &mut self.recording, &self.buffers)?;
        Ok(vec![elements, super::gather::stage_partials(&self.context, &mut self.recording, &self.buffers)?])
    }

    /// Records the mixed merit's passes (see [`record_mixed_merit`](Self::record_mixed_merit))
    /// at `at`, leaving their partials in place: at the iterate, or over a batch of positions
    /// at the line search's first step lengths, the stretches' step scaled by `alpha` too.
    fn queue_mixed_merit(&mut self, nodes: &[Node], at: Positions, alpha: f64) -> Result<()> {
        let (c, rec, groups) = (&self.context, &mut self.recording, &self.groups);
        let node = (self.nodes[0], at);
        self.stages.mixed.queue(
            c,
            rec,
            &groups.mixed,
            &groups.element,
            node,
            "merit",
            alpha,
            Projection::Psd,
        )?;
        if self.buffers.spring_count > 0 {
            let (c, rec, groups) = (&self.context, &mut self.recording, &self.groups.element);
            self.stages.element.queue(c, rec, groups, at, nodes, Outputs::Energy, true)?;
        }
        let params = self.gather_params(nodes, self.inv_h2, None, true);
        self.gather(&params, at)
    }

    /// Records the merit at the iterate into the search record's value and at the line
    /// search's step lengths `alphas` (`step_lengths`, whose order a batch's merit takes for
    /// the stretches) into its candidates: together where positions [batch](Self::batches),
    /// else one after another.
    fn record_mixed_candidates(&mut self, alphas: &[f64]) -> Result<()> {
        let nodes = self.nodes.clone();
        self.vector("save", 0.0)?;
        self.queue_mixed_merit(&nodes, Positions::Iterate, 0.0)?;
        self.decide(Decision::Energy { slot: None, count: 1 })?;
        if self.batches() {
            let (c, rec) = (&self.context, &mut self.recording);
            self.stages.vector.batch_offsets(c, rec, &self.groups.vector, alphas)?;
            self.queue_mixed_merit(&nodes, Positions::Batch(alphas.len()), 1.0)?;
            return self.decide(Decision::Energy { slot: Some(0), count: alphas.len() });
        }
        for (k, &alpha) in alphas.iter().enumerate() {
            self.vector("offset", alpha)?;
            self.queue_mixed_merit(&nodes, Positions::Iterate, alpha)?;
            self.decide(Decision::Energy { slot: Some(k), count: 1 })?;
        }
        self.vector("offset", 0.0)
    }

    /// Records the gather of the displacement formulation's corner gradients at the iterate
    /// (its gradient, the convergence test's) and stages its partials.
    fn record_displacement_gather(&mut self, nodes: &[Node]) -> Result<Staged> {
        self.queue_displacement_gather(nodes)?;
        super::gather::stage_partials(&self.context, &mut self.recording, &self.buffers)
    }

    /// [`record_displacement_gather`](Self::record_displacement_gather), its partials left in
    /// place.
    fn queue_displacement_gather(&mut self, nodes: &[Node]) -> Result<()> {
        let params = self.gather_params(nodes, self.inv_h2, Some(false), true);
        let (c, rec, groups) = (&self.context, &mut self.recording, &self.groups.mixed.displacement_gather);
        self.stages.gather.queue(c, rec, groups, &params, Positions::Iterate)
    }

    /// After a condensed solve: the displacement formulation's gather (its partials staged),
    /// the dots of its gradient with the direction, the local update (the tets' slope sums
    /// staged) and the merit at the iterate and after the full step.
    fn record_after_mixed_solve(&mut self, nodes: &[Node]) -> Result<Vec<Staged>> {
        let gathered = self.record_displacement_gather(nodes)?;
        let dots = self.dots()?;
        self.mixed("local_update", 0.0)?;
        let (c, rec) = (&self.context, &mut self.recording);
        let slope = super::mixed::WgMixed::stage_tet_sums(c, rec, &self.buffers, &self.groups.element)?;
        let mut staged = vec![gathered, dots, slope];
        staged.extend(self.record_mixed_merit(nodes, 0.0)?);
        // The line search's first candidate, the full step.
        self.vector("advance", 1.0)?;
        staged.extend(self.record_mixed_merit(nodes, 1.0)?);
        self.vector("offset", 0.0)?;
        Ok(staged)
    }

    /// Records mixed FEM's linearization at the iterate with the stretch curvature
    /// `projection`, and the springs' (their projected Hessian and gradient).
    fn record_mixed_linearization(&mut self, nodes: &[Node], projection: Projection) -> Result<()> {
        self.mixed_with("linearize", 0.0, projection)?;
        if self.buffers.spring_count > 0 {
            let (c, rec) = (&self.context, &mut self.recording);
            let element = &self.stages.element;
            element.queue(
                c,
                rec,
                &self.groups.element,
                Positions::Iterate,
                nodes,
                Outputs::ProjectedHessian,
                true,
            )?;
            let groups = &self.groups.mixed.displacement_elements;
            element.queue(c, rec, groups, Positions::Iterate, nodes, Outputs::Gradient, true)?;
        }
        Ok(())
    }

    /// Records the condensed system of the mixed linearization: the gather (with the
    /// right-hand side) and the assembly.
    fn record_condensed_system(&mut self, nodes: &[Node]) -> Result<()> {
        let params = GatherParams {
            rhs: self.rhs_outputs(),
            ..self.gather_params(nodes, self.inv_h2, Some(false), true)
        };
        self.gather(&params, Positions::Iterate)?;
        self.assemble(Target::Newton { rayleigh: self.rayleigh, constrained: false })
    }

    /// A mixed-FEM linearization and condensed solve in one readback (more only when the PCG
    /// solve outruns its first recorded chunk), submitted in two parts as Newton's are.
    fn mixed_direction_on_device(
        &mut self,
        request: &DirectionRequest<'_>,
    ) -> Result<crate::backend::MixedDirection> {
        let nodes = self.nodes.clone();
        // A start chosen on the device reports its objective with this readback.
        let start = self.pending_start.take();
        if !self.mixed_deferred.take().is_some_and(|projection| request.resumes(projection)) {
            self.record_mixed_linearization(&nodes, request.projection)?;
            let defers = request.deferral == Deferral::Defer;
            if !request.solve || defers {
                let mut staged = vec![self.record_displacement_gather(&nodes)?];
                staged.extend(start);
                let results = self.recording.read(&self.context, &staged)?;
                if defers {
                    self.mixed_deferred = Some(request.projection);
                }
                return Ok(crate::backend::MixedDirection {
                    linearization: Self::linearization(&results[0]),
                    objective: start.map(|_| self.start_objective(&results[1])),
                    ..Default::default()
                });
            }
        }
        self.record_condensed_system(&nodes)?;
        // The linearization goes to the device while the host records the solve.
        self.recording.submit(&self.context);
        let pcg = self.preconditioned(
            request.solver,
            self.direction_pcg_params(request),
            request.relative_tolerance.is_some(),
        )?;
        let chunk = self.first_chunk(pcg.max_iterations);
        let (status, solve) = self.record_solve(pcg, chunk, JacobiLoop::Cg)?;
        let mut staged = vec![status];
        staged.extend(self.record_after_mixed_solve(&nodes)?);
        staged.extend(start);
        let mut results = self.recording.read(&self.context, &staged)?;
        let objective = start.map(|_| self.start_objective(&results[8]));
        let first: PcgStatus = bytemuck::pod_read_unaligned(&results[0]);
        let status = match solve {
            Some(mut solve) => self.run_on(&mut solve, first)?,
            None => first,
        };
        if first.running() {
            // The solve outran the iterations recorded: what followed saw an unfinished direction.
            let again = self.record_after_mixed_solve(&nodes)?;
            let mut fresh = vec![results[0].clone()];
            fresh.extend(self.recording.read(&self.context, &again)?);
            results = fresh;
        }
        let linearization = Self::linearization(&results[1]);
        let mut direction =
            Self::report(&results[2], status.iterations.max(1) as usize, status.negative_curvature());
        direction.slope += WgElement::energy(&results[3]);
        let merits = self.candidate_values(&results[4..8], &nodes, self.inv_h2);
        self.solved(&status);
        Ok(crate::backend::MixedDirection {
            linearization,
            direction: (linearization.gradient_norm > request.gradient_tolerance).then_some(direction),
            merit: merits[0],
            full_step_merit: merits[1],
            objective,
            ..Default::default()
        })
    }

    /// A Newton iteration in two submissions and one readback: linearize, solve with the
    /// iterations the last solve took (more chunks only when it runs on), the dots, and the
    /// line search's first candidates.
    fn newton_direction_on_device(&mut self, request: &DirectionRequest<'_>) -> Result<NewtonDirection> {
        // A start chosen on the device reports its objective with this readback.
        let start = self.pending_start.take();
        self.step_bound = None;
        self.record_linearization(request.projection)?;
        let lin = self.stage_gather()?;
        // Where the step likely ends here, the state's potential, forces and positions come
        // in the same readback (what the integrator asks next).
        let solves = request.solve && request.deferral != Deferral::Defer;
        let ends = request.likely_converged || !solves;
        if !solves {
            let end = self.record_end_state()?;
            let mut staged = vec![lin];
            staged.extend(start);
            staged.extend(end);
            let results = self.recording.read(&self.context, &staged)?;
            let objective = start.map(|_| self.start_objective(&results[1]));
            self.remember_end_state(&results[1 + usize::from(start.is_some())..]);
            return Ok(NewtonDirection {
                linearization: Self::linearization(&results[0]),
                objective,
                ..Default::default()
            });
        }
        // The linearization goes to the device while the host records the solve, its dots and
        // candidates (a budget step's parts gained 0.2-0.6 ms a step on an H200 this way).
        self.recording.submit(&self.context);
        let params = self.preconditioned(
            request.solver,
            self.direction_pcg_params(request),
            request.relative_tolerance.is_some(),
        )?;
        let alphas = &request.candidates[..request.candidates.len().min(MAX_BATCH)];
        let chunk = self.first_chunk(params.max_iterations);
        let (status, solve) = self.record_solve(params, chunk, JacobiLoop::Cg)?;
        self.record_projection("keep_pressed")?;
        let dots = self.dots()?;
        let bound = self.record_step_bound()?;
        let candidates = self.record_candidates(alphas)?;
        let mut staged = vec![lin, status, dots];
        staged.extend(start);
        if ends {
            staged.extend(self.record_end_state()?);
        }
        let bound_at = staged.len();
        staged.extend(bound);
        let (results, mut values) = self.read_candidates(&staged, candidates)?;
        if bound.is_some() {
            self.step_bound = Some(WgContact::bound(&results[bound_at]));
        }
        let objective = start.map(|_| self.start_objective(&results[3]));
        if ends {
            self.remember_end_state(&results[3 + usize::from(start.is_some())..]);
        }
        let linearization = Self::linearization(&results[0]);
        let first: PcgStatus = bytemuck::pod_read_unaligned(&results[1]);
        if !(linearization.gradient_norm > request.gradient_tolerance) {
            return Ok(NewtonDirection { linearization, objective, ..Default::default() });
        }
        let mut dots = results[2].clone();
        let status = match solve {
            Some(mut solve) => self.run_on(&mut solve, first)?,
            None => first,
        };
        self.solved(&status);
        if first.running() {
            // The solve outran the iterations recorded: the dots and candidates were of an
            // unfinished direction; evaluate them again (with the gradient restored where the
            // end state's potential pass took its buffer).
            if ends {
                self.vector("gradient_from_rhs", 0.0)?;
            }
            self.record_projection("keep_pressed")?;
            let staged_dots = self.dots()?;
            let bound = self.record_step_bound()?;
            let candidates = self.record_candidates(alphas)?;
            let mut staged = vec![staged_dots];
            staged.extend(bound);
            let (results, again) = self.read_candidates(&staged, candidates)?;
            dots = results[0].clone();
            values = again;
            self.step_bound = bound.map(|_| WgContact::bound(&results[1]));
        }
        let direction = Self::report(&dots, status.iterations.max(1) as usize, status.negative_curvature());
        Ok(NewtonDirection {
            linearization,
            direction: Some(direction),
            candidates: values,
            objective,
            ..Default::default()
        })
    }
}

/// The largest body whose budgeted solves take the pipelined loop (one dispatch an
/// iteration, and more vectors to stream). On an H100 (2x40 steps' GPU busy time against the
/// two-dispatch loop's, the eigensolver's gain taken out) it saved 5.5 us an iteration at
/// 2 541 vertices and 2.8 us at 22 386 (10K and 100K tets), where a dispatch's latency bounds
/// the loop, and cost 7.4 us at 211K (1M tets), where bandwidth does; they break even near 70K.
const PIPELINED_VERTICES: usize = 65_536;

/// CG iterations to record before the first status read of a step's solve number `index`:
/// as many as the same solve of the step before took (`previous`; Newton's solves follow one
/// pattern step after step, long in the middle and short at the end), or as the last solve
/// (`last`) where the step before had no such solve, and a margin. An idle iteration costs two
/// dispatches (about 10 us each on an H200, whatever the body); reading on costs a round trip
/// (50-100 us) and the iterations [`PcgStatus::iterations_left`] estimates. Taking the longer
/// of the two recorded 60-70 idle iterations for the short last solve of each step (19 % of
/// backward Euler's dispatches on lavapipe's 10K-tet bar); a margin of an eighth and four
/// against a quarter and eight records 28-30 fewer idle iterations a step for one more
/// readback on the same bar (a sixteenth and two saved another 10-17 a step for two-thirds of
/// a readback more).
fn first_chunk(previous: &[u32], index: usize, last: u32, max_iterations: u32) -> u32 {
    let expected = previous.get(index).copied().unwrap_or(last);
    recorded(expected, 4, max_iterations)
}

/// CG iterations to record for a solve expected to take `expected`: an eighth and `slack`
/// more, at most `max`.
fn recorded(expected: u32, slack: u32, max: u32) -> u32 {
    max.min(expected + expected / 8 + slack)
}

/// Iterations a budgeted solve records at most (their records fill the staging buffer);
/// a larger budget runs stage by stage, one readback per iteration.
const MAX_BUDGET_ITERATIONS: usize = 64;

impl GpuBackend {
    fn decide(&mut self, decision: Decision) -> Result<()> {
        if matches!(decision, Decision::TakeGuess(_) | Decision::Advance) {
            (self.iterate_read, self.step_bound) = (None, None);
        }
        let (c, rec) = (&self.context, &mut self.recording);
        self.stages.line_search.queue(c, rec, &self.groups.line_search, decision)
    }

    /// Records the potential `E` and its gradient at `at` (the iterate, or the auxiliary
    /// positions), and stages the energy partials, the gather's partials and the gradient.
    fn record_potential(&mut self, at: Positions) -> Result<[Staged; 3]> {
        self.elements(at, &Node::POTENTIAL, Outputs::Gradient)?;
        let params = self.gather_params(&Node::POTENTIAL, 0.0, Some(false), false);
        self.gather(&params, at)?;
        let elements = WgElement::stage_energy(&self.context, &mut self.recording, &self.buffers)?;
        let vertices = self.stage_gather()?;
        let gradient = self.buffers.scratch.named("gradient").clone();
        let bytes = (12 * self.buffers.vertex_count) as u64;
        Ok([elements, vertices, self.recording.stage(&self.context, &gradient, bytes)?])
    }

    /// Remembers the potential and gradient at `x` from the results of `record_potential`.
    fn remember_potential(&mut self, x: &[[f64; 3]], results: &[Vec<u8>]) -> &PotentialAt {
        let potential = self.candidate_values(&results[..2], &Node::POTENTIAL, 0.0)[0];
        let values = floats(&results[2]);
        let remembered = &mut self.potential_at;
        remembered.x.resize(x.len(), [0.0; 3]);
        crate::math::fill_per_vertex(&mut remembered.x, |v| x[v]);
        remembered.gradient.resize(x.len(), [0.0; 3]);
        // In the world's axes: the device's are its parts' (`Frame`).
        self.buffers.to_world(&values, &mut remembered.gradient);
        remembered.potential = potential;
        remembered
    }

    /// The potential and its gradient at `x`: remembered, or evaluated in one pass and one
    /// readback.
    fn potential_and_gradient(&mut self, x: &[[f64; 3]]) -> Result<&PotentialAt> {
        if self.potential_at.holds(x) {
            return Ok(&self.potential_at);
        }
        self.write_positions(Positions::Aux, x);
        let staged = self.record_potential(Positions::Aux)?;
        let results = self.recording.read(&self.context, &staged)?;
        Ok(self.remember_potential(x, &results))
    }

    /// Whether this step's damping removes energy (its pseudo-potential is evaluated).
    fn dissipates(&self) -> bool {
        self.damped && self.damping_weight > 0.0
    }

    /// Records the damping pseudo-potential at `at` (unweighted, as `dissipation` gives it)
    /// and stages its partials.
    fn record_dissipation(&mut self, at: Positions) -> Result<Staged> {
        // The gather with no nodes and no inertia leaves only the damping quadratic.
        let params = self.gather_params(&[], 0.0, None, true);
        self.gather(&params, at)?;
        let (c, rec) = (&self.context, &mut self.recording);
        super::gather::stage_batch_partials(c, rec, &self.buffers, at.members())
    }

    fn dissipation_from(&self, bytes: &[u8]) -> f64 {
        sums::<1>(bytes)[0] / self.damping_weight
    }

    /// Records the potential and its gradient at the iterate, and stages them, the iterate
    /// and (where the step dissipates) the damping pseudo-potential: the state a solve that
    /// ends here is read as.
    fn record_end_state(&mut self) -> Result<Vec<Staged>> {
        let mut staged = self.record_potential(Positions::Iterate)?.to_vec();
        let x = self.buffers.state.named("x").clone();
        let bytes = (12 * self.buffers.vertex_count) as u64;
        staged.push(self.recording.stage(&self.context, &x, bytes)?);
        if self.dissipates() {
            staged.push(self.record_dissipation(Positions::Iterate)?);
        }
        Ok(staged)
    }

    /// Remembers the iterate, its potential and its dissipation from the results of
    /// `record_end_state`.
    fn remember_end_state(&mut self, results: &[Vec<u8>]) -> Vec<[f64; 3]> {
        let mut x = vec![[0.0; 3]; self.buffers.vertex_count];
        self.buffers.positions(&floats(&results[3]), &mut x);
        self.remember_potential(&x, &results[..3]);
        let dissipation = if self.dissipates() { self.dissipation_from(&results[4]) } else { 0.0 };
        let copy = crate::math::per_vertex(x.len(), |v| x[v]);
        self.iterate_read = Some(IterateRead { x: copy, dissipation: Some(dissipation) });
        x
    }

    /// Records the guesses' objectives, the pick (the last guess, the step's start, a fallback
    /// unless it competes) and the iterate
    /// set to the picked guess; stages the search record, whose value is `G` there.
    fn record_start(&mut self, guesses: &[&[[f64; 3]]]) -> Result<Staged> {
        let buffer = self.buffers.scratch.named("batch").clone();
        let bytes = 12 * self.buffers.vertex_count as u64;
        let on_device = std::mem::take(&mut self.step_vectors);
        for (k, guess) in guesses.iter().enumerate() {
            let offset = k as u64 * bytes;
            match on_device.iter().find(|(address, _)| *address == guess.as_ptr() as usize) {
                Some(&(_, name)) => {
                    let source = self.buffers.state.named(name);
                    self.recording.copy(&self.context, source, &buffer, offset, bytes);
                }
                None => {
                    let values = self.buffers.displacements(guess);
                    self.recording.upload_at(&self.context, &buffer, offset, bytemuck::cast_slice(&values));
                }
            }
        }
        if self.batches() {
            self.record_objectives(Positions::Batch(guesses.len()), Some(0))?;
        } else {
            for k in 0..guesses.len() {
                self.decide(Decision::TakeGuess(Some(k)))?;
                self.record_objectives(Positions::Iterate, Some(k))?;
            }
        }
        let fallback = !self.start_competes();
        self.decide(Decision::Pick { count: guesses.len(), fallback })?;
        self.decide(Decision::TakeGuess(None))?;
        WgLineSearch::stage(&self.context, &mut self.recording, &self.buffers)
    }

    /// `G` at the start a staged search record holds (infinite when no guess was valid).
    fn start_objective(&self, bytes: &[u8]) -> f64 {
        let record: SearchRecord = bytemuck::pod_read_unaligned(bytes);
        match record.picked == super::line_search::NONE {
            true => f64::INFINITY,
            false => record.value as f64 + self.reference_energy(&self.nodes, self.inv_h2),
        }
    }

    /// How a budgeted Jacobi solve of this body iterates: see [`PIPELINED_VERTICES`].
    fn budget_loop(&self) -> JacobiLoop {
        match self.buffers.vertex_count <= PIPELINED_VERTICES {
            true => JacobiLoop::Pipelined,
            false => JacobiLoop::Cg,
        }
    }

    /// Readies the tets' stretches for a mixed solve (`Stages::mixed_begin`): kept where the
    /// last solve left them at this step's start, else set to the start's.
    fn record_mixed_begin(&mut self) -> Result<()> {
        if self.buffers.reserve_mixed(&self.context) {
            self.rebind()?;
            self.mixed_left_at = None;
        }
        let node = self.nodes[0];
        let kept =
            self.mixed_left_at.as_ref().is_some_and(|(x, theta)| *x == self.start && *theta == node.theta);
        if !kept {
            self.mixed("begin", 0.0)?;
        }
        self.mixed_moved = true;
        Ok(())
    }

    /// A fixed-budget solve in one readback: the guesses' objectives and the pick, then per
    /// iteration the linearization, the whole PCG solve at its cap, the dots, the line
    /// search's candidates, the choice and the step, all decided on the device; then the
    /// gradient norm, the potential and its gradient, the dissipation and the iterate at the
    /// end. Submitted in parts, one per iteration, the last with the end.
    fn budget_on_device(&mut self, request: &BudgetRequest<'_>) -> Result<BudgetSolve> {
        use crate::backend::cpu::line_search::step_lengths;
        let picked = self.record_start(request.guesses)?;
        let alphas = step_lengths(request.steps, request.extrapolate);
        let pcg = self.split_translations(self.pcg_params(
            Some(request.relative_tolerance),
            request.gradient_tolerance,
            request.max_linear_iterations,
        ));
        let mut iterations = Vec::with_capacity(request.iterations);
        for _ in 0..request.iterations {
            // What is recorded so far goes to the device while the host records the next
            // iteration (the readback stays one): on an H200, medians of a 2x40 step went
            // from 2.2-2.6 to 2.0-2.1 ms at 1K tets, 3.0-3.2 to 2.5 at 10K, 4.8-5.3 to
            // 4.3-4.6 at 100K.
            self.recording.submit(&self.context);
            self.record_linearization(request.projection)?;
            // The whole budget at once: a solve ends early only at its tolerance. Cut short by
            // the budget, its Jacobi solves take the pipelined loop where dispatches bound it.
            let (status, _) = self.record_solve(pcg, pcg.max_iterations, self.budget_loop())?;
            self.stages.vector.queue(&self.context, &mut self.recording, &self.groups.vector, "dots", 0.0)?;
            self.decide(Decision::Direction)?;
            self.decide(Decision::StartSearch)?;
            if self.batches() {
                let (c, rec) = (&self.context, &mut self.recording);
                self.stages.vector.batch_offsets(c, rec, &self.groups.vector, &alphas)?;
                self.record_objectives(Positions::Batch(alphas.len()), Some(0))?;
            } else {
                for (k, &alpha) in alphas.iter().enumerate() {
                    self.vector("offset", alpha)?;
                    self.record_objectives(Positions::Iterate, Some(k))?;
                }
            }
            self.decide(Decision::Choose { steps: request.steps, extrapolate: request.extrapolate })?;
            self.decide(Decision::Advance)?;
            let record = WgLineSearch::stage(&self.context, &mut self.recording, &self.buffers)?;
            iterations.push((status, record));
        }
        self.finish_budget(picked, &iterations, request.gradient_tolerance)
    }

    /// Records a budgeted solve's end and stages it: the search record with `G` there as its
    /// value and the gather's partials (the convergence test's gradient), both from one
    /// gradient pass, then the state's potential and forces, the dissipation and the iterate
    /// (`record_end_state`).
    fn record_budget_end(&mut self) -> Result<Vec<Staged>> {
        let nodes = self.nodes.clone();
        self.elements(Positions::Iterate, &nodes, Outputs::Gradient)?;
        let params = self.gather_params(&nodes, self.inv_h2, Some(false), true);
        self.gather(&params, Positions::Iterate)?;
        self.decide(Decision::Energy { slot: None, count: 1 })?;
        let search = WgLineSearch::stage(&self.context, &mut self.recording, &self.buffers)?;
        let mut staged = vec![search, self.stage_gather()?];
        staged.extend(self.record_end_state()?);
        Ok(staged)
    }

    /// Ends a budgeted solve recorded from the start's search record `picked`, with each
    /// iteration's PCG status and search record: records and stages the end
    /// (`record_budget_end`), reads it all back and tallies the iterations whose gradient was
    /// above `gradient_tolerance`.
    fn finish_budget(
        &mut self,
        picked: Staged,
        iterations: &[(Staged, Staged)],
        gradient_tolerance: f64,
    ) -> Result<BudgetSolve> {
        let mut staged = vec![picked];
        staged.extend(self.record_budget_end()?);
        let rest = staged.len();
        staged.extend(iterations.iter().flat_map(|&(status, record)| [status, record]));
        let results = self.recording.read(&self.context, &staged)?;

        let record = |bytes: &[u8]| -> SearchRecord { bytemuck::pod_read_unaligned(bytes) };
        let start = record(&results[0]);
        if start.picked == super::line_search::NONE {
            return Ok(BudgetSolve::default());
        }
        // The device's objectives leave out gravity at the reference positions.
        let reference = self.reference_energy(&self.nodes, self.inv_h2);
        let mut solve = BudgetSolve {
            guess: Some(start.picked as usize),
            start_objective: start.value as f64 + reference,
            objective: record(&results[1]).value as f64 + reference,
            gradient_norm: Self::linearization(&results[2]).gradient_norm,
            ..BudgetSolve::default()
        };
        for pair in results[rest..].chunks_exact(2) {
            let (status, after): (PcgStatus, SearchRecord) =
                (bytemuck::pod_read_unaligned(&pair[0]), record(&pair[1]));
            // A solve with nothing to do found the gradient within the tolerance.
            if after.gradient_norm as f64 > gradient_tolerance {
                solve.iterations += 1;
                solve.linear_iterations += status.iterations.max(1) as usize;
                solve.stalled = after.alpha == 0.0 && after.slope < 0.0;
            }
        }
        solve.x = self.remember_end_state(&results[3..rest]);
        solve.dissipation = self.iterate_read.as_ref().and_then(|read| read.dissipation).unwrap_or(0.0);
        Ok(solve)
    }

    /// A fixed-budget mixed-FEM solve in one readback, as [`budget_on_device`]'s: the
    /// guesses and the pick, the stretches readied, then per SQP iteration the linearization,
    /// the condensed solve at its cap, the local update, the merit at the iterate and at each
    /// step length, the choice and the step of positions and stretches, all decided on the
    /// device; then `G` and the state at the end.
    ///
    /// [`budget_on_device`]: Self::budget_on_device
    fn mixed_budget_on_device(&mut self, request: &BudgetRequest<'_>) -> Result<BudgetSolve> {
        use crate::backend::cpu::line_search::step_lengths;
        let picked = self.record_start(request.guesses)?;
        self.mixed_deferred = None;
        self.record_mixed_begin()?;
        let nodes = self.nodes.clone();
        let alphas = step_lengths(request.steps, false);
        let tet_partials = self.groups.element.tet_partials();
        let mut iterations = Vec::with_capacity(request.iterations);
        for _ in 0..request.iterations {
            self.recording.submit(&self.context);
            self.record_mixed_linearization(&nodes, request.projection)?;
            self.record_condensed_system(&nodes)?;
            let pcg = self.preconditioned(
                request.solver,
                self.pcg_params(
                    Some(request.relative_tolerance),
                    request.gradient_tolerance,
                    request.max_linear_iterations,
                ),
                true,
            )?;
            let (status, _) = self.record_solve(pcg, pcg.max_iterations, JacobiLoop::Cg)?;
            // The convergence test's gradient, the slope's dots and the tets' part of it.
            self.queue_displacement_gather(&nodes)?;
            self.stages.vector.queue(&self.context, &mut self.recording, &self.groups.vector, "dots", 0.0)?;
            self.mixed("local_update", 0.0)?;
            self.decide(Decision::MixedDirection { tet_partials })?;
            self.record_mixed_candidates(&alphas)?;
            self.decide(Decision::Choose { steps: request.steps, extrapolate: false })?;
            self.decide(Decision::Advance)?;
            self.mixed("advance_chosen", 0.0)?;
            let record = WgLineSearch::stage(&self.context, &mut self.recording, &self.buffers)?;
            iterations.push((status, record));
        }
        let solve = self.finish_budget(picked, &iterations, request.gradient_tolerance)?;
        // The stretches the solve left belong with its end.
        if solve.guess.is_some() {
            self.mixed_left_at = Some((solve.x.clone(), self.nodes[0].theta));
            self.mixed_moved = false;
        }
        Ok(solve)
    }
}

/// What a local/global solve has staged and, after each read, what it has tallied.
#[derive(Default)]
struct Tally {
    statuses: Vec<Staged>,
    energies: Vec<(Staged, Staged)>,
    report: LocalGlobalReport,
    values: Vec<f64>,
    /// The CG iterations each global step read so far took: twice what it recorded when it
    /// ran out before its tolerance, and what was expected when it had nothing to do.
    lengths: Vec<u32>,
    /// Each global step's expected CG iterations, in order.
    expected: Vec<u32>,
}

/// The slack a local/global global step records beyond what it expects (see [`recorded`]):
/// its twin of the last solve is a close guide, and one that runs out is not read on.
const GLOBAL_SLACK: u32 = 2;

/// The fewest CG iterations a global step with the dense inverse records where penalty
/// contacts can change its matrix: without contacts the step takes one, and the first step
/// in contact, which no earlier solve foretells, several (the contact set's rows are
/// preconditioned by Jacobi, see `shaders/pcg.wgsl`). Iterations past a solve's end dispatch
/// nothing where the loop is dispatched indirectly.
const CONTACT_CHUNK: u32 = 8;

/// What the same global step of the next solve should expect, from what this one (expected
/// to take `expected`) did: its iterations; twice what it recorded when it ran out; the same
/// when it had nothing to do.
fn global_length(status: &PcgStatus, expected: u32) -> u32 {
    match status.iterations {
        _ if status.running() => 2 * recorded(expected, GLOBAL_SLACK, u32::MAX),
        0 => expected,
        n => n,
    }
}

impl GpuBackend {
    /// Reads the staged statuses and energies (and `extra`, whose results it returns) and
    /// tallies them.
    fn read_tally(&mut self, tally: &mut Tally, extra: &[Staged]) -> Result<Vec<Vec<u8>>> {
        let mut staged = extra.to_vec();
        staged.append(&mut tally.statuses);
        let statuses = staged.len();
        staged.extend(tally.energies.drain(..).flat_map(|(e, g)| [e, g]));
        let results = self.recording.read(&self.context, &staged)?;
        for bytes in &results[extra.len()..statuses] {
            let status: PcgStatus = bytemuck::pod_read_unaligned(bytes);
            let expected = tally.expected[tally.lengths.len()];
            tally.lengths.push(global_length(&status, expected));
            // A solve that did nothing found the gradient within tolerance: an idle iteration.
            if status.iterations > 0 {
                tally.report.iterations += 1;
                tally.report.linear_iterations += status.iterations as usize;
            }
        }
        tally.values.extend(self.candidate_values(&results[statuses..], &self.nodes, self.inv_h2));
        Ok(results[..extra.len()].to_vec())
    }

    /// Records the local step at the iterate (the tets' projections, searched as far as
    /// `search` says, and forces; the springs' forces) and the gather of `grad G` and
    /// `rhs = -grad G`; stages the element energies and the gather's partials (`G` and
    /// `|grad G|` at the iterate) when `stage`.
    fn record_local(
        &mut self,
        nodes: &[Node],
        search: RotationSearch,
        stage: bool,
    ) -> Result<Option<(Staged, Staged)>> {
        let (c, rec) = (&self.context, &mut self.recording);
        self.stages.local.queue(c, rec, &self.groups.local, &self.groups.element, nodes, search)?;
        if self.buffers.spring_count > 0 {
            let (element, groups) = (&self.stages.element, &self.groups.element);
            element.queue(c, rec, groups, Positions::Iterate, nodes, Outputs::Gradient, true)?;
        }
        // The gather writes the global step's right-hand side, -grad G, as it goes.
        let params = GatherParams {
            rhs: self.rhs_outputs(),
            ..self.gather_params(nodes, self.inv_h2, Some(false), true)
        };
        self.gather(&params, Positions::Iterate)?;
        if !stage {
            return Ok(None);
        }
        let elements = WgElement::stage_energy(&self.context, &mut self.recording, &self.buffers)?;
        let vertices = super::gather::stage_partials(&self.context, &mut self.recording, &self.buffers)?;
        Ok(Some((elements, vertices)))
    }

    /// Makes the step's local/global diagonal unless a solve has, and the inverses' form and
    /// buffers unless they exist.
    fn prepare_inverse(&mut self) -> Result<()> {
        if self.projective_diagonal.is_empty() {
            let damping = self.step_damping.as_ref();
            self.projective_diagonal = projective::vertex_diagonal(
                &self.model,
                self.buffers.anchors(),
                self.inv_h2,
                &self.nodes,
                damping,
            );
            let free =
                self.projective_diagonal.iter().zip(&self.model.pinned).filter(|(_, pinned)| !**pinned);
            self.lightest_diagonal = free.map(|(&d, _)| d).fold(f64::INFINITY, f64::min);
        }
        let n = self.buffers.vertex_count;
        let groups = self.buffers.translation_groups;
        let dense = super::pcg::dense_fits(&self.context.device.limits(), n, groups) && !self.fsai_only;
        let inverse = self.inverse.get_or_insert_with(|| ProjectiveInverse::new(&self.model, dense));
        if inverse.reserve(&self.context, &mut self.buffers) {
            self.rebind()?;
        }
        Ok(())
    }

    /// Puts on the device the inverse of the local/global matrix `a L + diagonal` (the step's
    /// diagonal made here if no solve has made it yet), unless it is there. A dense inverse is
    /// made for the matrix without damping unless the damped diagonal is the one the last
    /// solve of this weight had: lagged damping moves it every step, and would have the host
    /// invert `S` every step, while constant drag keeps it, and the inverse then solves the
    /// damped matrix directly.
    fn upload_inverse(&mut self, a: f64) -> Result<()> {
        self.prepare_inverse()?;
        let inverse = self.inverse.as_mut().expect("made by prepare_inverse");
        let undamped;
        let diagonal = if inverse.preconditioner() == DENSE && self.step_damping.is_some() {
            let damped = &self.projective_diagonal;
            let remembered = self.damped_diagonals.iter_mut().find(|(weight, _)| *weight == a);
            let steady = remembered.as_ref().is_some_and(|(_, last)| last == damped);
            match remembered {
                Some((_, last)) => last.clone_from(damped),
                None => {
                    // As many weights as the device keeps inverses (a stabilized step's two).
                    if self.damped_diagonals.len() == super::pcg::INVERSE_FACTORS {
                        self.damped_diagonals.remove(0);
                    }
                    self.damped_diagonals.push((a, damped.clone()));
                }
            }
            if steady {
                damped
            } else {
                undamped = projective::vertex_diagonal(
                    &self.model,
                    self.buffers.anchors(),
                    self.inv_h2,
                    &self.nodes,
                    None,
                );
                &undamped
            }
        } else {
            &self.projective_diagonal
        };
        if let Some((values, coarse)) = inverse.for_matrix(&self.model, a, diagonal) {
            let at = 4 * inverse.offset() as u64;
            let (c, rec, scratch) = (&self.context, &mut self.recording, &self.buffers.scratch);
            rec.upload_at(c, scratch.named("fsai_inverse"), at, bytemuck::cast_slice(&values));
            if !coarse.is_empty() {
                let at = 16 * inverse.coarse_offset() as u64;
                rec.upload_at(c, scratch.named("coarse_inverse"), at, bytemuck::cast_slice(&coarse));
            }
        }
        Ok(())
    }

    /// `params` preconditioned by the inverse [`upload_inverse`](Self::upload_inverse) placed
    /// last, with its coarse correction unless the solve has a penalty contact set (`contact`;
    /// see `shaders/pcg.wgsl`).
    fn with_inverse(&self, params: PcgParams, contact: bool) -> PcgParams {
        let inverse =
            self.inverse.as_ref().expect("upload_inverse makes the inverses before a solve uses them");
        PcgParams {
            preconditioner: inverse.preconditioner(),
            fsai_inverse_offset: inverse.offset() as u32,
            coarse_clusters: if contact { 0 } else { inverse.coarse_clusters() },
            coarse_offset: inverse.coarse_offset() as u32,
            ..params
        }
    }

    /// `params` with the preconditioner of a Newton or mixed-FEM solve by `solver`: for
    /// `LinearSolver::PcgProjective` the inverse of the step's local/global matrix (the
    /// elasticity's Laplacian, which the CPU factors exactly; dense for bodies of at most
    /// [`DENSE_VERTICES`](super::pcg::DENSE_VERTICES), FSAI's above), with the rows of this
    /// step's penalty contacts on Jacobi, since the matrix leaves their stiffness out; put on
    /// the device at the first such solve of a step. Jacobi for `LinearSolver::Pcg`, with
    /// self-contact, whose stiffness the matrix leaves out everywhere (as on the CPU), and for
    /// bodies solved in one workgroup, where FSAI's iteration walked the rows three times
    /// (23.7 us against Jacobi's 12.8 at 330-375 vertices on an H200). Above that, FSAI takes
    /// 27-41 % fewer CG iterations on the benchmark bars (1K to 100K tets) for a third more
    /// bytes an iteration: its `G^T G` has about 27 scalar entries a row where the matrix has
    /// 13 blocks of nine (docs/perf/gpu.md, seventh session).
    ///
    /// A converged solve of a body from [`DENSE_OVER_ONE_WORKGROUP`] vertices on takes the loop
    /// and the dense inverse even where one workgroup could run it: there Jacobi took three
    /// times the CG iterations (251 against 81 a step on the 2 160-tet bar), at 10.6-44 us
    /// each in one workgroup (330-2 541 vertices) against the loop's 19 (H200). A budget
    /// (`budgeted`: a fixed relative tolerance) spends its iterations whatever the
    /// preconditioner, and keeps the one workgroup's single dispatch.
    fn preconditioned(
        &mut self,
        solver: LinearSolver,
        params: PcgParams,
        budgeted: bool,
    ) -> Result<PcgParams> {
        let one_workgroup = self.solved_in_one_workgroup()
            && (budgeted || self.buffers.vertex_count < DENSE_OVER_ONE_WORKGROUP);
        if solver != LinearSolver::PcgProjective || self.groups.self_contact.is_some() || one_workgroup {
            return Ok(self.split_translations(PcgParams { preconditioner: JACOBI, ..params }));
        }
        let a = projective::stiffness_weight(&self.nodes);
        if !self.newton_inverse_ready {
            self.upload_inverse(a)?;
            let n = self.buffers.vertex_count;
            let none;
            let flags = if self.newton_contact.is_empty() {
                none = vec![0u32; n];
                &none
            } else {
                &self.newton_contact
            };
            let (c, rec, scratch) = (&self.context, &mut self.recording, &self.buffers.scratch);
            rec.upload(c, scratch.named("contact_flags"), bytemuck::cast_slice(flags));
            self.newton_inverse_ready = true;
        }
        // A body that loses its translations in CG's f32 products is split along them, as
        // Jacobi's solves always are; the inverses leave the translations out of a split
        // solve (the dense one's translation term, the coarse correction's translation
        // modes). Unsplit, their translations came back garbled (a squashed steel cube's
        // mixed-FEM step ended at 2e23 J: docs/perf/local-global.md), and such bodies had
        // taken Jacobi's, split: a squashed free steel cube took 230-646 CG iterations a step
        // at 729-1 377 vertices (dense inverse) where it takes 78-86 now, and 1 064 at 9 261
        // (FSAI) where it takes 211 (docs/perf/gpu.md).
        let params = self.with_inverse(params, self.newton_contact.iter().any(|&flag| flag != 0));
        Ok(match self.loses_translations(a) {
            true => self.split_translations(params),
            false => params,
        })
    }

    /// `params` of a Newton or mixed-FEM solve, split along the translations of the model's
    /// free parts (`PcgParams::translation`, `Model::translation_groups`): their matrix's
    /// translations are then their vertex blocks
    /// (the damping's among them), which the split solves exactly, where f32 products by the
    /// matrix lose them once a part is stiff at its step (a free cube of E 1e8 Pa, 1.25-2.5
    /// cm cells, fell 10 % slower than on the CPU, one of E 1e10 Pa a tenth as fast). Left
    /// out: the projection contact model, whose matrix holds its pressed vertices still
    /// along their normals, and self-contact, whose couplings the vertex blocks leave out.
    fn split_translations(&self, params: PcgParams) -> PcgParams {
        let splits = params.translation_groups > 0
            && !self.model.contact.is_projection()
            && self.groups.self_contact.is_none();
        PcgParams { translation: if splits { SPLIT_BLOCKS } else { 0 }, ..params }
    }

    /// Whether the body is free and so stiff at its step (`ProjectiveInverse::splits`) that
    /// f32 products by its matrices lose its translations.
    fn loses_translations(&self, a: f64) -> bool {
        self.inverse.as_ref().is_some_and(|inverse| inverse.splits(a, self.lightest_diagonal))
    }

    /// Records the contact stage's local/global `entry` (`contact_set`, `bound_outside`).
    fn record_contact_set(&mut self, entry: &'static str, nodes: &[Node], stiffness: f64) -> Result<()> {
        let params =
            ContactParams::local_global(&self.buffers, self.buffers.colliders().len(), nodes, stiffness);
        let (c, rec) = (&self.context, &mut self.recording);
        self.stages.contact.dispatch(c, rec, &self.groups.contact, entry, &params)
    }

    /// Local/global iterations, each submitted as it is recorded, read back once: the step's
    /// matrix, then per iteration the local step and gather, a PCG solve (after the first,
    /// warm-started from the last direction, except with the dense inverse and no contacts,
    /// where it takes one CG iteration from zero) of as many iterations as the same global
    /// step of the last solve needed, an eighth and two more, twice as many after one that
    /// ran out (an unfinished CG solve still lowers the frozen quadratic, so the iteration
    /// still never increases `G`), and the step `x += d` (in the solve's `finish`); with
    /// penalty colliders, the contact set and the matrix it gives before the solve, and the
    /// step cut short where a vertex outside the set would enter a collider; the last local
    /// step gives `G` and `|grad G|` at the result. Long solves, and recorded objectives, are
    /// read in batches as the staging buffer fills. A free body stiff at its step takes its
    /// PCG solves split along its translations (`PcgParams::translation`).
    fn local_global_on_device(&mut self, request: &LocalGlobalRequest) -> Result<LocalGlobalReport> {
        let started = std::time::Instant::now();
        // A start picked on the device needs no check: projective energies and the penalty are
        // finite everywhere.
        self.pending_start = None;
        let nodes = self.nodes.clone();
        // The global steps are preconditioned by the inverse (dense or FSAI's) of the matrix
        // without penalty contacts; the contact set's rows take Jacobi's (`shaders/pcg.wgsl`).
        let a = projective::stiffness_weight(&nodes);
        self.upload_inverse(a)?;
        // The solve writes its own contact flags.
        self.newton_inverse_ready = false;
        let diagonal: Vec<f32> = self.projective_diagonal.iter().map(|&d| d as f32).collect();
        // With penalty colliders the contact set changes the diagonal at every iterate
        // (`projective::LocalContact::grow_set`), from the base uploaded here.
        let contact = projective::has_penalty_contact(&self.model, self.buffers.colliders());
        // Where the dense inverse is of this very matrix (no lagged damping, no moved handles) and
        // nothing touches a collider, a global step multiplies by it in one dispatch: CG's one
        // iteration would take alpha = 1 along the same direction, in four.
        let direct = !contact
            && self.inverse.as_ref().is_some_and(|inverse| inverse.inverts(a, &self.projective_diagonal));
        let base = if contact { "projective_base" } else { "projective_diagonal" };
        let (c, rec, scratch) = (&self.context, &mut self.recording, &self.buffers.scratch);
        rec.upload(c, scratch.named(base), bytemuck::cast_slice(&diagonal));
        let matrix = Target::Projective { a };
        let stiffness = projective::contact_stiffness(&self.model, &nodes);
        if contact {
            // Each solve starts with an empty set.
            rec.upload(c, scratch.named("contact_flags"), &vec![0; 4 * self.buffers.vertex_count]);
        } else if !direct {
            self.assemble(matrix)?;
        }
        let mut tally = Tally::default();
        // Each global step records what the same step of the last solve took (with FSAI later
        // steps, warm-started, take fewer: the 15K-tet bar took about 27 CG iterations at
        // first and 11 at the end, before it had the dense inverse) and a small margin; a step
        // that outruns it costs a little accuracy once.
        let longest = self.global_lengths.iter().copied().max().unwrap_or(FIRST_CHUNK);
        tally.expected =
            (0..request.iterations).map(|k| self.global_lengths.get(k).copied().unwrap_or(longest)).collect();
        let max = request.max_linear_iterations as u32;
        // A free body stiff at its step splits its solves along its translations (`deflate`
        // in shaders/pcg.wgsl), which f32 products by `S` do not resolve.
        let split = !direct && self.loses_translations(a);
        let params = self.with_inverse(
            PcgParams {
                gradient_tolerance: request.gradient_tolerance as f32,
                translation: if split { SPLIT_PROJECTIVE } else { 0 },
                ..self.pcg_params(Some(request.linear_tolerance), 0.0, request.max_linear_iterations)
            },
            contact,
        );
        let mut last = None;
        for k in 0..=request.iterations {
            // What is recorded so far goes to the device while the host records the next
            // iteration: on an H200 the 15K-tet bar's 10-iteration steps went from 8.5-10.1
            // to 6.3-6.8 ms (745 dispatches, whose recording and encoding the device had
            // waited for), the 164K-tet cube's from 20-24 to 17-20 ms. (Submitting in parts
            // that double, 2 submissions instead of 11 for the direct step's 34 dispatches,
            // measured no faster: docs/perf/local-global.md, 2026-11-30.)
            self.recording.submit(&self.context);
            if tally.statuses.len() == STATUS_BATCH || tally.energies.len() + 1 == MAX_BATCH {
                self.read_tally(&mut tally, &[])?;
            }
            let last_step = k == request.iterations;
            let stage = k == 0 || last_step || request.record_objectives;
            if let Some(pair) = self.record_local(&nodes, request.rotation_search(k), stage)? {
                tally.energies.push(pair);
                last = Some(pair.1);
            }
            if last_step {
                break;
            }
            if contact {
                self.record_contact_set("contact_set", &nodes, stiffness)?;
                self.assemble(matrix)?;
            }
            // A large body's solve records `chunk` iterations and is not read on: an unfinished
            // CG solve still lowers the frozen quadratic. After the first global step each
            // starts from the Galerkin combination of the last one's direction, and after the
            // second of the last two.
            // (A solve with the dense inverse needs no start where it takes one CG iteration,
            // without contacts; with them the start saved a third of the iterations of the
            // 15K-tet bar's landing, 52-65 a step to 37-40.)
            // (A split solve with contacts takes its translation back out of its direction
            // once the step is taken, `untranslate`: a warm start's products by `S` would not
            // resolve it.)
            let warm = if params.preconditioner == DENSE && !contact { 0 } else { k.min(2) as u32 };
            // Without colliders the solve's `finish` takes the step `x += d`.
            let params = PcgParams { warm, advance: u32::from(!contact), ..params };
            if direct {
                let (c, rec, groups) = (&self.context, &mut self.recording, &self.groups.pcg);
                tally.statuses.push(self.stages.pcg.solve_dense(c, rec, groups, &self.buffers, params)?);
                self.iterate_read = None;
                continue;
            }
            let dense = params.preconditioner == DENSE;
            // A free solve with the dense inverse records what it expects, no slack: it
            // expects one iteration, and nearly always takes one.
            let slack = if dense && !contact { 0 } else { GLOBAL_SLACK };
            let mut chunk = recorded(tally.expected[k], slack, max);
            if contact && dense {
                chunk = chunk.max(CONTACT_CHUNK.min(max));
            }
            tally.statuses.push(self.record_solve(params, chunk, JacobiLoop::Cg)?.0);
            self.iterate_read = None;
            if contact {
                self.vector("save", 0.0)?;
                self.record_contact_set("bound_outside", &nodes, stiffness)?;
                self.decide(Decision::Bound)?;
                self.decide(Decision::Advance)?;
                if split {
                    let (c, rec, groups) = (&self.context, &mut self.recording, &self.groups.pcg);
                    self.stages.pcg.untranslate(c, rec, groups, params)?;
                }
            }
        }
        // The state the solve ends in comes with its last status.
        let mut extra: Vec<Staged> = last.into_iter().collect();
        extra.extend(self.record_end_state()?);
        let results = self.read_tally(&mut tally, &extra)?;
        self.remember_end_state(&results[1..]);
        let mut report = std::mem::take(&mut tally.report);
        // A solve of fewer iterations (a stabilized step's blend) leaves the later steps' lengths.
        let lengths = &mut self.global_lengths;
        lengths.resize(lengths.len().max(tally.lengths.len()), FIRST_CHUNK);
        lengths[..tally.lengths.len()].copy_from_slice(&tally.lengths);
        let end = results.first().map(|bytes| Self::linearization(bytes));
        report.gradient_norm = end.map_or(f64::NAN, |l| l.gradient_norm);
        report.noise_floor = end.map_or(0.0, |l| l.noise_floor);
        report.converged = report.gradient_norm <= request.gradient_tolerance;
        report.start_objective = tally.values[0];
        report.objective = *tally.values.last().unwrap_or(&f64::NAN);
        if request.record_objectives {
            report.objectives = tally.values;
        }
        report.linear_solve = started.elapsed();
        Ok(report)
    }
}

#[cfg(test)]
impl GpuBackend {
    /// The mixed merits at the iterate and at `alphas` (the line search's step lengths) as a
    /// budgeted solve records them, read from the search record: the device's objectives, which
    /// leave out a constant (gravity at the reference positions).
    pub(crate) fn mixed_candidates_on_device(&mut self, alphas: &[f64]) -> (f64, Vec<f64>) {
        self.record_mixed_candidates(alphas).unwrap();
        let staged = WgLineSearch::stage(&self.context, &mut self.recording, &self.buffers).unwrap();
        let record: SearchRecord =
            bytemuck::pod_read_unaligned(&self.recording.read(&self.context, &[staged]).unwrap()[0]);
        (record.value as f64, record.candidates[..alphas.len()].iter().map(|&v| v as f64).collect())
    }

    /// The gradient and the assembled matrix of the last linearization, in the world's axes.
    pub(crate) fn read_linearization(&mut self) -> (Vec<f32>, Vec<f32>) {
        let (c, rec, b) = (&self.context, &mut self.recording, &self.buffers);
        let gradient = rec.read_buffer(c, b.scratch.named("gradient"), 3 * b.vertex_count).unwrap();
        let slots: Vec<f32> = rec.read_buffer(c, b.scratch.named("blocks"), 9 * b.slot_count).unwrap();
        let blocks = b.blocks_from_slots(&slots);
        // A row's blocks join vertices of one part: they turn with the row's vertex.
        let rows = crate::backend::topology::Topology::new(&self.model).row_offsets;
        let turns = b.turns();
        let turn = |v: usize| turns.turn(v);
        let mut world = Vec::with_capacity(blocks.len());
        for v in 0..b.vertex_count {
            for block in blocks[9 * rows[v] as usize..9 * rows[v + 1] as usize].chunks(9) {
                let m = glam::DMat3::from_cols_array(&std::array::from_fn(|k| block[k] as f64)).transpose();
                let m = (turn(v) * m * turn(v).transpose()).transpose();
                world.extend(m.to_cols_array().map(|e| e as f32));
            }
        }
        (self.world_axes(gradient), world)
    }

    /// The direction of the last solve, in the world's axes.
    pub(crate) fn read_direction(&mut self) -> Vec<f32> {
        let (c, rec, b) = (&self.context, &mut self.recording, &self.buffers);
        let direction = rec.read_buffer(c, b.scratch.named("direction"), 3 * b.vertex_count).unwrap();
        self.world_axes(direction)
    }

    /// Vectors per vertex in its part's axes, in the world's.
    fn world_axes(&self, values: Vec<f32>) -> Vec<f32> {
        let mut world = vec![[0.0; 3]; self.buffers.vertex_count];
        self.buffers.to_world(&values, &mut world);
        world.iter().flat_map(|a| a.map(|c| c as f32)).collect()
    }

    /// Solves PCG in one workgroup only for bodies of at most `vertices` (0: never).
    pub(crate) fn set_small_solve_limit(&mut self, vertices: usize) {
        self.small_solve_vertices = Some(vertices);
    }

    /// Inverts the local/global matrix by FSAI whatever the body's size.
    pub(crate) fn use_fsai_only(&mut self) {
        self.fsai_only = true;
        self.inverse = None;
    }

    /// Forgets the last solve's length, so that the next records only a few iterations ahead.
    pub(crate) fn forget_solve_length(&mut self) {
        self.last_cg = 0;
        self.solve_lengths.clear();
        self.previous_solve_lengths.clear();
    }
}

/// Bytes staged by the largest readback: a Newton iteration's gather partials, PCG status,
/// dot partials, step bound partials and a full batch of line-search candidates, or a
/// local/global solve's batch of PCG statuses and objectives.
fn staging_bytes(model: &Model) -> u64 {
    let group = super::stage::WORKGROUP as usize;
    let vertex_partials = model.vertex_count().div_ceil(group);
    let candidate = 4 * super::element::partial_count(model) + 16 * vertex_partials;
    let status = std::mem::size_of::<PcgStatus>();
    // The state a step ends in: the iterate, the gradient, the potential's partials.
    let end = 24 * model.vertex_count() + candidate;
    let newton = 2 * 16 * vertex_partials
        + 4 * vertex_partials
        + STATUS_BATCH * status
        + MAX_BATCH * candidate
        + 64
        + end;
    // A budgeted solve's end state, last linearization and dissipation, and a record and
    // status per iteration.
    let record = std::mem::size_of::<SearchRecord>();
    let budget = end + 2 * candidate + (MAX_BUDGET_ITERATIONS + 1) * (record + status);
    // A stabilized step's batch of blends: each point's energy and dissipation partials.
    let blends = MAX_BLENDS * (candidate + 16 * vertex_partials);
    newton.max(budget).max(blends) as u64
}

/// The f32 values of read-back bytes: borrowed where they are aligned (as the allocator
/// returns them), copied otherwise.
fn floats(bytes: &[u8]) -> std::borrow::Cow<'_, [f32]> {
    match bytemuck::try_cast_slice(bytes) {
        Ok(values) => std::borrow::Cow::Borrowed(values),
        Err(_) => std::borrow::Cow::Owned(bytemuck::pod_collect_to_vec(bytes)),
    }
}

/// The sums of the first `K` lanes of staged `[f32; 4]` partials, added in order in f64.
fn sums<const K: usize>(bytes: &[u8]) -> [f64; K] {
    let values: Vec<f32> = bytemuck::pod_collect_to_vec(bytes);
    values.chunks_exact(4).fold([0.0; K], |acc, p| std::array::from_fn(|k| acc[k] + p[k] as f64))
}

impl Stages for GpuBackend {
    fn begin_step(&mut self, problem: StepProblem<'_>) {
        // The damping and the start change: what was read of the iterate no longer holds.
        (self.iterate_read, self.step_bound) = (None, None);
        if !self.solve_lengths.is_empty() {
            self.previous_solve_lengths = std::mem::take(&mut self.solve_lengths);
        }
        // A part that has travelled is measured from an offset that moved with it. Unless the
        // start's potential is infinite there: the new rounding of its displacements can put
        // an element that a stiff solve left at the edge of its material's domain outside it
        // (every guess of a stabilized step was then refused), and the step keeps the frame.
        // Only neo-Hookean tets and the barrier have such an edge; other models need no check.
        let moved = self.buffers.rebase(&self.context, &mut self.recording, &problem);
        if let Some(before) = moved.filter(|_| self.potential_has_an_edge) {
            self.potential_at.forget();
            let finite = match self.potential_and_gradient(problem.start) {
                Ok(at) => at.potential.is_finite(),
                Err(e) => {
                    self.error.get_or_insert(e);
                    true
                }
            };
            if !finite {
                self.buffers.set_poses(&self.context, &mut self.recording, before);
                self.potential_at.forget();
            }
        }
        let displacements =
            [self.buffers.displacements(problem.start), self.buffers.displacements(problem.target)];
        for (name, values) in ["x_start", "target_positions"].iter().zip(&displacements) {
            self.recording.upload(
                &self.context,
                self.buffers.state.named(name),
                bytemuck::cast_slice(values),
            );
        }
        self.step_vectors = vec![
            (problem.start.as_ptr() as usize, "x_start"),
            (problem.target.as_ptr() as usize, "target_positions"),
        ];
        self.nodes = problem.nodes.to_vec();
        // The start bounds the paths of projection and barrier contact, and tells a mixed
        // solve whether the stretches it left still belong; copying it costs a large body
        // about half a millisecond, so only those keep it.
        self.start.clear();
        if self.model.contact.is_projection()
            || self.model.contact.is_barrier()
            || self.mixed_left_at.is_some()
        {
            self.start.extend_from_slice(problem.start);
        }
        self.inv_h2 = 1.0 / (problem.dt * problem.dt);
        self.target_inertia = super::gather::target_inertia(&self.model, problem.start, problem.target);
        self.damping_weight = problem.damping_weight;
        // The local/global matrix's diagonal is made when a solve first asks for it.
        self.projective_diagonal.clear();
        self.newton_inverse_ready = false;
        self.step_damping = problem.damping_matrix(self.buffers.vertex_count);
        self.damped = self.step_damping.is_some();
        self.rayleigh = self.step_damping.as_ref().is_some_and(|d| d.stiffness_scale > 0.0);
        self.friction = false;
        // The penalty contacts whose rows the inverse leaves to Jacobi in Newton's solves.
        if projective::has_penalty_contact(&self.model, self.buffers.colliders()) {
            let set = projective::contact_set(&self.model, self.buffers.colliders(), &problem);
            self.newton_contact = set.iter().map(|&member| member as u32).collect();
        } else {
            self.newton_contact.clear();
        }
        let Some(matrix) = self.step_damping.take() else { return };
        // D = w (k/h K(x_n) + diag(A_v)): the projected stiffness at the step's start, scaled
        // and assembled into the damping matrix, and the vertex blocks, which the gather
        // applies and puts in the Newton matrix's vertex blocks.
        let result = (|| {
            if self.buffers.reserve_damping(&self.context) {
                self.rebind()?;
            }
            // The vertex terms, in the world's axes, in those of each vertex's part (`Frame`),
            // as factors F of D_v = F F^T: f32 evaluates |F^T dx|^2 / 2, never below zero. A
            // friction block `c (I - n n^T)` in f32 has eigenvalues of about 1e-7 c along n,
            // either sign; sticking friction makes c 1e11 N/m and more, and an explicit guess
            // flung 2 km along n by a collider's force got -5e10 J of damping energy from it,
            // which made it the best guess by far (docs/perf/gpu.md).
            // Factored in the world's axes and turned: R^T D R = (R^T F) (R^T F)^T.
            let turns = self.buffers.turns();
            let per_vertex: Vec<[f32; 9]> = crate::math::per_vertex(matrix.vertex_blocks.len(), |v| {
                let factor = crate::math::psd_factor(&crate::math::unvec9(&matrix.vertex_blocks[v]));
                crate::math::vec9(&(turns.turn(v).transpose() * factor)).map(|c| c as f32)
            });
            let factors = self.buffers.scratch.named("damping_vertex_factors");
            self.recording.upload(&self.context, factors, bytemuck::cast_slice(&per_vertex));
            let mut linear: Vec<f32> = (matrix.vertex_linear.iter().enumerate())
                .flat_map(|(v, l)| {
                    let b = turns.turn(v).transpose() * glam::DVec3::new(l[0], l[1], l[2]);
                    [b.x as f32, b.y as f32, b.z as f32, l[3] as f32]
                })
                .collect();
            linear.resize(4 * self.buffers.vertex_count, 0.0);
            let damping_linear = self.buffers.scratch.named("damping_linear");
            self.recording.upload(&self.context, damping_linear, bytemuck::cast_slice(&linear));
            let (c, rec, w) = (&self.context, &mut self.recording, problem.damping_weight);
            self.friction = super::self_contact::upload_friction(c, rec, &self.buffers, problem.couplings, w);
            if !self.rayleigh {
                return Ok(());
            }
            self.write_positions(Positions::Aux, problem.start);
            self.elements(Positions::Aux, &Node::POTENTIAL, Outputs::ProjectedHessian)?;
            self.assemble(Target::Damping { element_scale: matrix.stiffness_scale })
        })();
        self.step_damping = Some(matrix);
        self.settle(result, ());
    }

    fn set_anchors(&mut self, anchors: &[Anchor]) {
        self.potential_at.forget();
        if self.buffers.set_anchors(&self.context, &mut self.recording, anchors) {
            let result = self.rebind();
            self.settle(result, ());
        }
    }

    fn set_colliders(&mut self, colliders: &[crate::contact::Collider]) {
        self.potential_at.forget();
        self.buffers.set_colliders(&self.context, &mut self.recording, colliders);
    }

    fn dissipation(&mut self) -> f64 {
        if !self.dissipates() {
            return 0.0;
        }
        if let Some(dissipation) = self.iterate_read.as_ref().and_then(|read| read.dissipation) {
            return dissipation;
        }
        let result = (|| {
            let staged = self.record_dissipation(Positions::Iterate)?;
            let results = self.recording.read(&self.context, &[staged])?;
            Ok(self.dissipation_from(&results[0]))
        })();
        self.settle(result, f64::NAN)
    }

    fn set_iterate(&mut self, x: &[[f64; 3]]) {
        let x = self.admitted(x);
        self.write_positions(Positions::Iterate, &x);
    }

    fn publish_positions(&mut self, x: &[[f64; 3]]) {
        let positions = crate::math::per_vertex(x.len(), |v| x[v].map(|c| c as f32));
        self.recording.upload(
            &self.context,
            self.buffers.state.named("positions"),
            bytemuck::cast_slice(&positions),
        );
        // Drawn by the application's own work: in the queue before this returns, not at the
        // next readback.
        let submitted = self.recording.submit_now(&self.context);
        self.settle(submitted, ());
    }

    fn read_iterate(&mut self, out: &mut [[f64; 3]]) {
        if self.iterate_read.is_none() {
            // A solve's result: its potential, forces and dissipation are asked for next, and
            // come in the same readback.
            let result = (|| {
                let staged = self.record_end_state()?;
                let results = self.recording.read(&self.context, &staged)?;
                self.remember_end_state(&results);
                Ok(())
            })();
            if let Err(e) = result {
                out.iter_mut().for_each(|p| *p = [f64::NAN; 3]);
                self.error.get_or_insert(e);
                return;
            }
        }
        if let Some(read) = &self.iterate_read {
            out.copy_from_slice(&read.x);
        }
        if std::mem::take(&mut self.mixed_moved) {
            // The stretches a mixed solve left belong with these positions.
            self.mixed_left_at = Some((out.to_vec(), self.nodes[0].theta));
        }
    }

    fn mixed_begin(&mut self) {
        let result = self.record_mixed_begin();
        self.settle(result, ());
    }

    fn mixed_direction(&mut self, request: &DirectionRequest<'_>) -> crate::backend::MixedDirection {
        // One submission: the linearization cannot be timed apart from the solve, so (as for
        // Newton) the whole round trip counts as the solve's.
        let result = self.mixed_direction_on_device(request);
        self.settle(
            result,
            crate::backend::MixedDirection {
                linearization: Linearization { gradient_norm: f64::NAN, ..Default::default() },
                ..Default::default()
            },
        )
    }

    fn mixed_merits(&mut self, alphas: &[f64]) -> Vec<f64> {
        let result = (|| {
            let nodes = self.nodes.clone();
            let mut staged = Vec::with_capacity(alphas.len());
            self.vector("save", 0.0)?;
            for &alpha in alphas {
                self.vector("offset", alpha)?;
                staged.push(self.record_mixed_merit(&nodes, alpha)?);
            }
            self.vector("offset", 0.0)?;
            let results = self.recording.read(&self.context, &staged.concat())?;
            Ok(self.candidate_values(&results, &nodes, self.inv_h2))
        })();
        self.settle(result, vec![f64::NAN; alphas.len()])
    }

    fn mixed_advance(&mut self, alpha: f64) {
        let result = (|| {
            self.vector("save", 0.0)?;
            self.vector("offset", alpha)?;
            self.mixed("advance", alpha)
        })();
        self.mixed_moved = true;
        self.settle(result, ());
    }

    fn objective(&mut self) -> f64 {
        let nodes = self.nodes.clone();
        let result = (|| {
            let (e, g) = self.record_energy(Positions::Iterate, &nodes, self.inv_h2, true)?;
            // Asked mostly where a solve ends (the mixed solver's last objective): the state's
            // end comes in the same readback, unless it already came.
            let end = if self.iterate_read.is_none() { self.record_end_state()? } else { Vec::new() };
            let mut staged = vec![e, g];
            staged.extend_from_slice(&end);
            let results = self.recording.read(&self.context, &staged)?;
            if !end.is_empty() {
                self.remember_end_state(&results[2..]);
            }
            Ok(self.candidate_values(&results[..2], &nodes, self.inv_h2)[0])
        })();
        self.settle(result, f64::NAN)
    }

    fn objectives_at(&mut self, points: &[&[[f64; 3]]]) -> Vec<f64> {
        let nodes = self.nodes.clone();
        // A barrier admits no guess whose straight path from the step's start crosses a
        // collider (checked here, in f64: the guesses are the host's).
        let blocked: Vec<bool> = points.iter().map(|x| self.path_blocked(x)).collect();
        let result = (|| {
            let mut staged = Vec::with_capacity(2 * points.len());
            for x in points {
                let x = self.admitted(x);
                self.write_positions(Positions::Iterate, &x);
                let (e, g) = self.record_energy(Positions::Iterate, &nodes, self.inv_h2, true)?;
                staged.extend([e, g]);
            }
            let results = self.recording.read(&self.context, &staged)?;
            let values = self.candidate_values(&results, &nodes, self.inv_h2);
            Ok(values.into_iter().zip(&blocked).map(|(v, &b)| if b { f64::INFINITY } else { v }).collect())
        })();
        self.settle(result, vec![f64::NAN; points.len()])
    }

    fn linearize(&mut self, projection: Projection) -> Linearization {
        let result = (|| {
            self.record_linearization(projection)?;
            let staged = self.stage_gather()?;
            Ok(Self::linearization(&self.recording.read(&self.context, &[staged])?[0]))
        })();
        self.settle(result, Linearization { gradient_norm: f64::NAN, ..Linearization::default() })
    }

    fn newton_direction(&mut self, request: &DirectionRequest<'_>) -> NewtonDirection {
        let result = self.newton_direction_on_device(request);
        let fallback = NewtonDirection {
            linearization: Linearization { gradient_norm: f64::NAN, ..Linearization::default() },
            ..Default::default()
        };
        self.settle(result, fallback)
    }

    fn local_global(&mut self, request: &LocalGlobalRequest) -> LocalGlobalReport {
        let result = self.local_global_on_device(request);
        let fallback =
            LocalGlobalReport { gradient_norm: f64::NAN, objective: f64::NAN, ..Default::default() };
        self.settle(result, fallback)
    }

    fn solve_direction(
        &mut self,
        solver: LinearSolver,
        tolerance: f64,
        max_iterations: usize,
    ) -> DirectionReport {
        // The GPU always solves with PCG; the direct solver is a CPU option.
        self.step_bound = None;
        let result = (|| {
            let params =
                self.preconditioned(solver, self.pcg_params(Some(tolerance), 0.0, max_iterations), false)?;
            let status = self.solve(params)?;
            self.record_projection("keep_pressed")?;
            let dots = self.dots()?;
            let bytes = &self.recording.read(&self.context, &[dots])?[0];
            Ok(Self::report(bytes, status.iterations.max(1) as usize, status.negative_curvature()))
        })();
        self.settle(result, DirectionReport { slope: f64::NAN, ..DirectionReport::default() })
    }

    fn use_negative_gradient(&mut self) -> DirectionReport {
        self.step_bound = None;
        let result = (|| {
            self.vector("use_gradient", 0.0)?;
            let dots = self.dots()?;
            Ok(Self::report(&self.recording.read(&self.context, &[dots])?[0], 0, false))
        })();
        self.settle(result, DirectionReport { slope: f64::NAN, ..DirectionReport::default() })
    }

    fn scale_direction(&mut self, factor: f64) {
        self.step_bound = None;
        let result = self.vector("scale", factor);
        self.settle(result, ());
    }

    fn pressing_forces(&mut self) -> Vec<f64> {
        // Friction is what reads them.
        if !self.model.contact.is_projection() || self.buffers.colliders().iter().all(|c| c.friction <= 0.0) {
            return Vec::new();
        }
        let n = self.buffers.vertex_count;
        match self.recording.read_buffer(&self.context, self.buffers.scratch.named("pressed"), 4 * n) {
            Ok(values) => values.chunks_exact(4).map(|p: &[f32]| p[3] as f64).collect(),
            Err(e) => {
                self.error.get_or_insert(e);
                vec![0.0; n]
            }
        }
    }

    fn step_bound(&mut self) -> Option<f64> {
        if !self.model.contact.is_barrier() {
            return None;
        }
        if self.step_bound.is_none() {
            let result = (|| {
                let staged = self.record_step_bound()?.expect("the model has a barrier");
                Ok(WgContact::bound(&self.recording.read(&self.context, &[staged])?[0]))
            })();
            // A failed read allows no step.
            self.step_bound = Some(self.settle(result, 0.0));
        }
        self.step_bound
    }

    fn candidate_objectives(&mut self, alphas: &[f64]) -> Vec<f64> {
        let result = (|| {
            let mut values = Vec::with_capacity(alphas.len());
            // In batches of MAX_BATCH, one readback each; the iterate is restored after.
            for batch in alphas.chunks(MAX_BATCH) {
                let staged = self.record_candidates(batch)?;
                values.extend(self.read_candidates(&[], staged)?.1);
            }
            Ok(values)
        })();
        self.settle(result, vec![f64::NAN; alphas.len()])
    }

    fn preferred_batch(&self) -> usize {
        // Four candidates per round trip: a round trip costs more than three extra passes.
        4
    }

    fn advance(&mut self, alpha: f64) {
        self.step_bound = None;
        let result = self
            .vector("start_step", 0.0)
            .and_then(|()| self.vector("offset", alpha))
            .and_then(|()| self.record_projection("stop_at_contact"));
        self.settle(result, ());
    }

    fn retreat(&mut self, fraction: f64) {
        self.step_bound = None;
        let result = self.vector("retreat", fraction);
        self.settle(result, ());
    }

    fn potential(&mut self, x: &[[f64; 3]]) -> f64 {
        let result = self.potential_and_gradient(x).map(|p| p.potential);
        self.settle(result, f64::NAN)
    }

    fn potential_gradient(&mut self, x: &[[f64; 3]], out: &mut [[f64; 3]]) {
        match self.potential_and_gradient(x) {
            Ok(p) => crate::math::fill_per_vertex(out, |v| p.gradient[v]),
            Err(e) => {
                out.iter_mut().for_each(|g| *g = [f64::NAN; 3]);
                self.error.get_or_insert(e);
            }
        }
    }

    fn energies_at(&mut self, points: &[&[[f64; 3]]]) -> Vec<(f64, f64)> {
        if points.len() > MAX_BLENDS {
            let (first, rest) = points.split_at(MAX_BLENDS);
            let mut values = self.energies_at(first);
            values.extend(self.energies_at(rest));
            return values;
        }
        let result = if self.batches() && !points.is_empty() {
            self.energies_in_batch(points)
        } else {
            self.energies_one_by_one(points)
        };
        self.settle(result, vec![(f64::NAN, f64::NAN); points.len()])
    }

    fn reads_rigid_steps(&self) -> bool {
        true
    }

    fn start_competes(&self) -> bool {
        self.model.has_contact()
    }

    fn start_from_best(&mut self, guesses: &[&[[f64; 3]]]) -> Start {
        if guesses.len() > super::buffers::GUESSES {
            return crate::backend::start_from_best_by_stages(self, guesses);
        }
        // The device picks among the guesses as the contact model admits them: stopped at
        // contact (the projection), or those whose paths cross no collider (the barrier; the
        // last, the fallback, is the step's start and always does).
        let (fallback, primary) = guesses.split_last().expect("the fallback guess");
        let projected: Vec<std::borrow::Cow<'_, [[f64; 3]]>> =
            guesses.iter().map(|x| self.admitted(x)).collect();
        let admitted: Vec<&[[f64; 3]]> = if self.model.contact.is_barrier() {
            primary.iter().copied().filter(|x| !self.path_blocked(x)).chain([*fallback]).collect()
        } else {
            projected.iter().map(|x| x.as_ref()).collect()
        };
        match self.record_start(&admitted) {
            Ok(staged) => {
                self.pending_start = Some(staged);
                Start::Pending
            }
            Err(e) => {
                self.error.get_or_insert(e);
                Start::Invalid
            }
        }
    }

    fn budget_solve(&mut self, request: &BudgetRequest<'_>) -> BudgetSolve {
        // The barrier's step bound, and the projection model's trial positions and active set,
        // are applied between the iterations.
        if request.iterations > MAX_BUDGET_ITERATIONS
            || request.guesses.len() > super::buffers::GUESSES
            || self.model.contact.floor().is_some()
        {
            return crate::backend::budget_solve_by_stages(self, request);
        }
        // The fallback, the first guess, is copied only when the solve fails.
        let solved = match request.mixed {
            true => self.mixed_budget_on_device(request),
            false => self.budget_on_device(request),
        };
        solved.unwrap_or_else(|e| {
            self.error.get_or_insert(e);
            BudgetSolve {
                guess: Some(0),
                gradient_norm: f64::NAN,
                x: request.guesses[0].to_vec(),
                ..BudgetSolve::default()
            }
        })
    }

    fn take_error(&mut self) -> Option<Error> {
        self.error.take().or_else(|| self.context.take_failure())
    }

    fn device_memory(&self) -> Option<u64> {
        Some(self.buffers.held_bytes())
    }

    fn device_counts(&self) -> Option<DeviceCounts> {
        Some(self.recording.counts())
    }

    fn gpu_context(&self) -> Option<&GpuContext> {
        Some(&self.context)
    }

    fn positions_buffer(&self) -> Option<&wgpu::Buffer> {
        self.buffers.state.get("positions").map(|span| &span.buffer)
    }
}

#[cfg(test)]
mod tests {
    use super::first_chunk;

    /// A global step expects what the same step took last time; twice what it recorded after
    /// running out, and the same after a step with nothing to do.
    #[test]
    fn a_global_step_expects_what_its_twin_took() {
        use super::{PcgStatus, global_length};
        let status = |iterations, state| PcgStatus { iterations, state, ..PcgStatus::default() };
        assert_eq!(global_length(&status(11, 1), 27), 11);
        assert_eq!(global_length(&status(40, 0), 27), 2 * (27 + 3 + 2));
        assert_eq!(global_length(&status(0, 1), 27), 27);
    }

    /// A solve records what the same solve of the step before took and a margin, not the
    /// longer last solve: a step's last Newton solve is short.
    #[test]
    fn a_solve_is_recorded_as_long_as_its_twin_of_the_step_before() {
        let previous = [44, 53, 57, 9];
        // The last solve of the step: 9 before, though the solve just done took 57.
        assert_eq!(first_chunk(&previous, 3, 57, 1000), 9 + 1 + 4);
        assert_eq!(first_chunk(&previous, 1, 44, 1000), 53 + 6 + 4);
        // A solve the step before did not have follows the last one.
        assert_eq!(first_chunk(&previous, 4, 20, 1000), 20 + 2 + 4);
        // Never beyond the cap.
        assert_eq!(first_chunk(&previous, 2, 0, 40), 40);
    }

    /// A solve that has cut its residual by 10 in 10 iterations needs 10 more for another
    /// factor of 10; one that has made no progress says nothing.
    #[test]
    fn a_running_solve_estimates_the_iterations_it_has_left() {
        use super::PcgStatus;
        // |r0| = 1 and a relative tolerance of 1e-2.
        let status = |iterations, residual: f32| PcgStatus {
            residual_squared: residual * residual,
            threshold_squared: 1e-4,
            tolerance: 1e-2,
            iterations,
            ..PcgStatus::default()
        };
        // (Rounded up from f32 squares.)
        assert!(matches!(status(10, 0.1).iterations_left(), Some(10..=11)), "{:?}", status(10, 0.1));
        assert!(matches!(status(5, 0.1).iterations_left(), Some(5..=6)));
        assert!(matches!(status(20, 0.1).iterations_left(), Some(20..=21)));
        assert_eq!(status(0, 1.0).iterations_left(), None);
        assert_eq!(status(10, 1.0).iterations_left(), None);
        assert_eq!(status(10, 2.0).iterations_left(), None);
    }
}
