//! `GpuBackend`: the [`Stages`] of an implicit step on the GPU. The iterate, gradient,
//! Hessian and direction stay on the device in f32. Stages record into one [`Recording`]
//! and nothing is submitted until the host needs a number: a Newton iteration (the advance
//! along the last direction, the element pass, gather, assembly, the whole PCG solve, its
//! dot products and the line search's first candidates) is one submission and one readback.

use std::sync::Arc;

use super::context::GpuContext;
use super::element::{GpuElements, Outputs, WgElement};
use super::linear::{GatherParams, GpuLinear, PcgParams, PcgStatus, Positions, WgLinear};
use super::recording::{DeviceCounts, Recording, Staged};
use crate::backend::{
    Anchor, DirectionReport, DirectionRequest, LinearSolver, Linearization, NewtonDirection, Node, Stages,
    StepProblem,
};
use crate::error::{Error, Result};
use crate::material::Projection;
use crate::model::Model;

const POTENTIAL_NODE: [Node; 1] = [Node { weight: 1.0, theta: 1.0 }];

/// Line-search candidates evaluated in one submission at most.
pub const MAX_BATCH: usize = 8;

/// CG iterations recorded before the first status read when there is no history yet.
const FIRST_CHUNK: u32 = 32;

/// The GPU implementation of [`Stages`].
pub struct GpuBackend {
    context: Arc<GpuContext>,
    element_stage: WgElement,
    linear_stages: WgLinear,
    elements: GpuElements,
    linear: GpuLinear,
    recording: Recording,
    model: Arc<Model>,
    nodes: Vec<Node>,
    inv_h2: f64,
    /// This step has lagged damping (its matrix is built in `linear`), with this weight.
    damped: bool,
    damping_weight: f64,
    error: Option<Error>,
    /// CG iterations of the last solve: how many to record before reading the status.
    last_cg: u32,
}

/// Staged results of one batch of line-search candidates.
struct StagedCandidates(Vec<(Staged, Staged)>);

impl GpuBackend {
    /// Compiles the stages and uploads `model`.
    pub fn new(context: Arc<GpuContext>, model: Arc<Model>) -> Result<GpuBackend> {
        let (element_stage, linear_stages, recording, linear, elements) = context.guarded(|| {
            let element_stage = WgElement::new(&context)?;
            let linear_stages = WgLinear::new(&context)?;
            let recording = Recording::new(&context, staging_bytes(&model));
            let linear = GpuLinear::for_model(&context, &linear_stages, &recording, &model);
            let elements = GpuElements::new(&context, &element_stage, &recording, &model, &linear)?;
            Ok((element_stage, linear_stages, recording, linear, elements))
        })?;
        Ok(GpuBackend {
            context,
            element_stage,
            linear_stages,
            elements,
            linear,
            recording,
            model,
            nodes: POTENTIAL_NODE.to_vec(),
            inv_h2: 0.0,
            damped: false,
            damping_weight: 1.0,
            error: None,
            last_cg: FIRST_CHUNK,
        })
    }

    /// The device context.
    pub fn context(&self) -> &GpuContext {
        &self.context
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
            gravity_weight: nodes.iter().map(|q| q.weight * q.theta).sum::<f64>() as f32,
            gravity_x: g[0] as f32,
            gravity_y: g[1] as f32,
            gravity_z: g[2] as f32,
            weight_0: node(0).weight as f32,
            theta_0: node(0).theta as f32,
            weight_1: node(1).weight as f32,
            theta_1: node(1).theta as f32,
            collider_count: self.model.colliders.len() as u32,
            contact_stiffness: self.model.contact_stiffness as f32,
            exact_hessian: derivatives.unwrap_or(false) as u32,
            damped: (damped && self.damped) as u32,
            derivatives: derivatives.is_some() as u32,
            tet_count: self.model.tets.len() as u32,
            spring_count: self.model.springs.len() as u32,
        }
    }

    /// Keeps the first failure and substitutes `fallback` (NaN stops the solver at once).
    fn settle<T>(&mut self, result: Result<T>, fallback: T) -> T {
        result.unwrap_or_else(|e| {
            self.error.get_or_insert(e);
            fallback
        })
    }

    /// Records the element and vertex energy at `at` and stages both partial sums.
    fn record_energy(
        &mut self,
        at: Positions,
        nodes: &[Node],
        inv_h2: f64,
        damped: bool,
    ) -> Result<(Staged, Staged)> {
        let (c, rec) = (&self.context, &mut self.recording);
        self.elements.encode(c, &self.element_stage, rec, at, nodes, Outputs::Energy)?;
        let elements = self.elements.stage_energy(c, rec)?;
        let params = self.gather_params(nodes, inv_h2, None, damped);
        let (c, rec) = (&self.context, &mut self.recording);
        self.linear.gather(c, &self.linear_stages, rec, &params, at)?;
        Ok((elements, self.linear.stage_gather_partials(c, rec)?))
    }

    /// Records the linearization at the iterate: element derivatives, gather, assembly and the
    /// right-hand side `-grad G`; stages the gather's partials.
    fn record_linearization(&mut self, projection: Projection) -> Result<Staged> {
        let nodes = self.nodes.clone();
        let outputs =
            if projection == Projection::Psd { Outputs::ProjectedHessian } else { Outputs::Hessian };
        let params = self.gather_params(&nodes, self.inv_h2, Some(projection == Projection::None), true);
        let (c, rec, linear, stages) =
            (&self.context, &mut self.recording, &self.linear, &self.linear_stages);
        self.elements.encode(c, &self.element_stage, rec, Positions::Iterate, &nodes, outputs)?;
        linear.gather(c, stages, rec, &params, Positions::Iterate)?;
        let staged = linear.stage_gather_partials(c, rec)?;
        linear.assemble(c, stages, rec, self.damped)?;
        linear.vector(c, stages, rec, "negate_gradient", 0.0)?;
        Ok(staged)
    }

    /// Records the line-search candidates `x + alpha d` (restoring `x` after).
    fn record_candidates(&mut self, alphas: &[f64]) -> Result<StagedCandidates> {
        let nodes = self.nodes.clone();
        self.linear.vector(&self.context, &self.linear_stages, &mut self.recording, "save", 0.0)?;
        let mut staged = Vec::with_capacity(alphas.len());
        for &alpha in alphas {
            let (c, rec) = (&self.context, &mut self.recording);
            self.linear.vector(c, &self.linear_stages, rec, "offset", alpha)?;
            staged.push(self.record_energy(Positions::Iterate, &nodes, self.inv_h2, true)?);
        }
        self.linear.vector(&self.context, &self.linear_stages, &mut self.recording, "offset", 0.0)?;
        Ok(StagedCandidates(staged))
    }

    /// Records a PCG solve to `tolerance` (Newton's forcing term of the last gather when
    /// `forcing`), its status read after `chunk` iterations, more chunks recorded while it runs.
    fn solve(&mut self, params: PcgParams) -> Result<PcgStatus> {
        let (c, rec) = (&self.context, &mut self.recording);
        self.linear.pcg_start(c, &self.linear_stages, rec, &params)?;
        let mut chunk = params.max_iterations.min(self.last_cg + self.last_cg / 4 + 8);
        let mut recorded = 0;
        loop {
            let (c, rec) = (&self.context, &mut self.recording);
            let staged = self.linear.pcg_iterations(c, &self.linear_stages, rec, &params, chunk)?;
            recorded += chunk;
            let status: PcgStatus = bytemuck::pod_read_unaligned(&rec.read(c, &[staged])?[0]);
            if status.state != 0 {
                return Ok(status);
            }
            if recorded >= params.max_iterations {
                return Err(Error::Solver("the GPU PCG loop stopped making progress".into()));
            }
            chunk = (params.max_iterations - recorded).min(recorded.max(FIRST_CHUNK));
        }
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
            // The device works in f32: its objective is known to f32 resolution.
            noise_floor: f32::EPSILON as f64 * sums[3],
        }
    }

    fn candidate_values(results: &[Vec<u8>]) -> Vec<f64> {
        results.chunks(2).map(|pair| GpuElements::energy(&pair[0]) + sums::<1>(&pair[1])[0]).collect()
    }

    fn newton_direction_on_device(&mut self, request: &DirectionRequest<'_>) -> Result<NewtonDirection> {
        let lin = self.record_linearization(request.projection)?;
        if !request.solve {
            let results = self.recording.read(&self.context, &[lin])?;
            return Ok(NewtonDirection {
                linearization: Self::linearization(&results[0]),
                ..Default::default()
            });
        }
        let params = PcgParams {
            vertex_count: self.model.vertex_count() as u32,
            partial_count: self.linear.partial_count() as u32,
            max_iterations: request.max_iterations as u32,
            tolerance: request.relative_tolerance.unwrap_or(0.0) as f32,
            forcing: request.relative_tolerance.is_none() as u32,
            gradient_tolerance: request.gradient_tolerance as f32,
        };
        let (c, rec) = (&self.context, &mut self.recording);
        self.linear.pcg_start(c, &self.linear_stages, rec, &params)?;
        let chunk = params.max_iterations.min(self.last_cg + self.last_cg / 4 + 8);
        let status = self.linear.pcg_iterations(c, &self.linear_stages, rec, &params, chunk)?;
        let dots = self.linear.dots(c, &self.linear_stages, rec)?;
        let candidates =
            self.record_candidates(&request.candidates[..request.candidates.len().min(MAX_BATCH)])?;
        let mut staged = vec![lin, status, dots];
        staged.extend(candidates.0.iter().flat_map(|&(e, g)| [e, g]));
        let results = self.recording.read(&self.context, &staged)?;
        let linearization = Self::linearization(&results[0]);
        let mut status: PcgStatus = bytemuck::pod_read_unaligned(&results[1]);
        if !(linearization.gradient_norm > request.gradient_tolerance) {
            return Ok(NewtonDirection { linearization, ..Default::default() });
        }
        let (mut dots, mut values) = (results[2].clone(), Self::candidate_values(&results[3..]));
        if status.state == 0 {
            // The solve needed more iterations than recorded: go on, then evaluate again.
            let mut recorded = chunk;
            while status.state == 0 && recorded < params.max_iterations {
                let more = (params.max_iterations - recorded).min(recorded.max(FIRST_CHUNK));
                let (c, rec) = (&self.context, &mut self.recording);
                let staged = self.linear.pcg_iterations(c, &self.linear_stages, rec, &params, more)?;
                status = bytemuck::pod_read_unaligned(&rec.read(c, &[staged])?[0]);
                recorded += more;
            }
            let (c, rec) = (&self.context, &mut self.recording);
            let staged_dots = self.linear.dots(c, &self.linear_stages, rec)?;
            let candidates =
                self.record_candidates(&request.candidates[..request.candidates.len().min(MAX_BATCH)])?;
            let mut staged = vec![staged_dots];
            staged.extend(candidates.0.iter().flat_map(|&(e, g)| [e, g]));
            let results = self.recording.read(&self.context, &staged)?;
            dots = results[0].clone();
            values = Self::candidate_values(&results[1..]);
        }
        self.last_cg = status.iterations.max(1);
        let direction = Self::report(&dots, status.iterations.max(1) as usize, status.negative_curvature());
        Ok(NewtonDirection {
            linearization,
            direction: Some(direction),
            candidates: values,
            ..Default::default()
        })
    }
}

#[cfg(test)]
impl GpuBackend {
    /// Forgets the last solve's length, so that the next records only a few iterations ahead.
    pub(crate) fn forget_solve_length(&mut self) {
        self.last_cg = 0;
    }

    /// The gradient and the assembled matrix of the last linearization.
    pub(crate) fn read_linearization(&mut self) -> (Vec<f32>, Vec<f32>) {
        let (c, rec, n) = (&self.context, &mut self.recording, self.model.vertex_count());
        let gradient = rec.read_buffer(c, self.linear.gradient(), 3 * n).unwrap();
        let blocks = rec.read_buffer(c, self.linear.blocks(), 9 * self.linear.block_count()).unwrap();
        (gradient, blocks)
    }
}

/// Bytes staged by the largest readback: a Newton iteration's gather partials, PCG status,
/// dot partials and a full batch of line-search candidates.
fn staging_bytes(model: &Model) -> u64 {
    let group = super::stage::WORKGROUP as usize;
    let vertex_partials = model.vertex_count().div_ceil(group);
    let element_partials = model.tets.len().div_ceil(group) + model.springs.len().div_ceil(group);
    let candidate = 4 * element_partials + 16 * vertex_partials;
    (2 * 16 * vertex_partials + std::mem::size_of::<PcgStatus>() + MAX_BATCH * candidate + 64) as u64
}

/// The sums of the first `K` lanes of staged `[f32; 4]` partials, added in order in f64.
fn sums<const K: usize>(bytes: &[u8]) -> [f64; K] {
    let values: Vec<f32> = bytemuck::pod_collect_to_vec(bytes);
    values.chunks_exact(4).fold([0.0; K], |acc, p| std::array::from_fn(|k| acc[k] + p[k] as f64))
}

impl Stages for GpuBackend {
    fn begin_step(&mut self, problem: StepProblem<'_>) {
        let (c, rec) = (&self.context, &mut self.recording);
        self.linear.write_step(c, rec, problem.start, problem.target);
        self.nodes = problem.nodes.to_vec();
        self.inv_h2 = 1.0 / (problem.dt * problem.dt);
        self.damped = !problem.vertex_damping.is_empty() || problem.rayleigh > 0.0;
        self.damping_weight = problem.damping_weight;
        if !self.damped {
            return;
        }
        // One lagged damping matrix D = w (k/h K(x_n) + diag(A_v)), K the PSD-projected
        // stiffness at the step's start (Rayleigh) and A_v the ether and friction blocks.
        let w = problem.damping_weight;
        let vertex_damping: Vec<[f64; 9]> = problem.vertex_damping.iter().map(|a| a.map(|c| c * w)).collect();
        let result = (|| {
            let mut scale = 0.0;
            let (c, rec) = (&self.context, &mut self.recording);
            if problem.rayleigh > 0.0 {
                self.linear.write(c, rec, Positions::Aux, problem.start);
                self.elements.encode(
                    c,
                    &self.element_stage,
                    rec,
                    Positions::Aux,
                    &POTENTIAL_NODE,
                    Outputs::ProjectedHessian,
                )?;
                scale = w * problem.rayleigh / problem.dt;
            }
            self.linear.build_damping(c, &self.linear_stages, rec, scale, &vertex_damping)
        })();
        self.settle(result, ());
    }

    fn set_anchors(&mut self, anchors: &[Anchor]) {
        let (c, rec) = (&self.context, &mut self.recording);
        self.linear.write_anchors(c, &self.linear_stages, rec, anchors);
    }

    fn dissipation(&mut self) -> f64 {
        if !self.damped || self.damping_weight <= 0.0 {
            return 0.0;
        }
        // The gather with no nodes and no inertia leaves only the damping quadratic.
        let params = self.gather_params(&[], 0.0, None, true);
        let result = (|| {
            let (c, rec) = (&self.context, &mut self.recording);
            self.linear.gather(c, &self.linear_stages, rec, &params, Positions::Iterate)?;
            let staged = self.linear.stage_gather_partials(c, rec)?;
            Ok(sums::<1>(&rec.read(c, &[staged])?[0])[0])
        })();
        self.settle(result, f64::NAN) / self.damping_weight
    }

    fn set_iterate(&mut self, x: &[[f64; 3]]) {
        let (c, rec) = (&self.context, &mut self.recording);
        self.linear.write(c, rec, Positions::Iterate, x);
        // The drawable positions follow the iterate the driver publishes.
        let result = self.linear.vector(c, &self.linear_stages, rec, "compose", 0.0);
        self.settle(result, ());
    }

    fn read_iterate(&mut self, out: &mut [[f64; 3]]) {
        let result = self.linear.read_iterate(&self.context, &mut self.recording, out);
        if result.is_err() {
            out.iter_mut().for_each(|p| *p = [f64::NAN; 3]);
        }
        self.settle(result, ());
    }

    fn objective(&mut self) -> f64 {
        let nodes = self.nodes.clone();
        let result = (|| {
            let (e, g) = self.record_energy(Positions::Iterate, &nodes, self.inv_h2, true)?;
            Ok(Self::candidate_values(&self.recording.read(&self.context, &[e, g])?)[0])
        })();
        self.settle(result, f64::NAN)
    }

    fn linearize(&mut self, projection: Projection) -> Linearization {
        let result = (|| {
            let staged = self.record_linearization(projection)?;
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

    fn solve_direction(
        &mut self,
        _solver: LinearSolver,
        tolerance: f64,
        max_iterations: usize,
    ) -> DirectionReport {
        // The GPU always solves with PCG; the direct solver is a CPU option.
        let params = PcgParams {
            vertex_count: self.model.vertex_count() as u32,
            partial_count: self.linear.partial_count() as u32,
            max_iterations: max_iterations as u32,
            tolerance: tolerance as f32,
            forcing: 0,
            gradient_tolerance: 0.0,
        };
        let result = (|| {
            let status = self.solve(params)?;
            self.last_cg = status.iterations.max(1);
            let (c, rec) = (&self.context, &mut self.recording);
            let dots = self.linear.dots(c, &self.linear_stages, rec)?;
            let bytes = &rec.read(c, &[dots])?[0];
            Ok(Self::report(bytes, status.iterations.max(1) as usize, status.negative_curvature()))
        })();
        self.settle(result, DirectionReport { slope: f64::NAN, ..DirectionReport::default() })
    }

    fn use_negative_gradient(&mut self) -> DirectionReport {
        let result = (|| {
            let (c, rec) = (&self.context, &mut self.recording);
            self.linear.vector(c, &self.linear_stages, rec, "use_gradient", 0.0)?;
            let dots = self.linear.dots(c, &self.linear_stages, rec)?;
            Ok(Self::report(&rec.read(c, &[dots])?[0], 0, false))
        })();
        self.settle(result, DirectionReport { slope: f64::NAN, ..DirectionReport::default() })
    }

    fn scale_direction(&mut self, factor: f64) {
        let (c, rec) = (&self.context, &mut self.recording);
        let result = self.linear.vector(c, &self.linear_stages, rec, "scale", factor);
        self.settle(result, ());
    }

    fn candidate_objectives(&mut self, alphas: &[f64]) -> Vec<f64> {
        let result = (|| {
            let mut values = Vec::with_capacity(alphas.len());
            // In batches of MAX_BATCH, one readback each; the iterate is restored after.
            for batch in alphas.chunks(MAX_BATCH) {
                let staged = self.record_candidates(batch)?;
                let staged: Vec<Staged> = staged.0.iter().flat_map(|&(e, g)| [e, g]).collect();
                values.extend(Self::candidate_values(&self.recording.read(&self.context, &staged)?));
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
        let result = (|| {
            let (c, rec) = (&self.context, &mut self.recording);
            self.linear.vector(c, &self.linear_stages, rec, "save", 0.0)?;
            self.linear.vector(c, &self.linear_stages, rec, "offset", alpha)
        })();
        self.settle(result, ());
    }

    fn potential(&mut self, x: &[[f64; 3]]) -> f64 {
        let result = (|| {
            self.linear.write(&self.context, &mut self.recording, Positions::Aux, x);
            let (e, g) = self.record_energy(Positions::Aux, &POTENTIAL_NODE, 0.0, false)?;
            Ok(Self::candidate_values(&self.recording.read(&self.context, &[e, g])?)[0])
        })();
        self.settle(result, f64::NAN)
    }

    fn potential_gradient(&mut self, x: &[[f64; 3]], out: &mut [[f64; 3]]) {
        let params = self.gather_params(&POTENTIAL_NODE, 0.0, Some(false), false);
        let result = (|| {
            let (c, rec) = (&self.context, &mut self.recording);
            self.linear.write(c, rec, Positions::Aux, x);
            self.elements.encode(
                c,
                &self.element_stage,
                rec,
                Positions::Aux,
                &POTENTIAL_NODE,
                Outputs::Gradient,
            )?;
            self.linear.gather(c, &self.linear_stages, rec, &params, Positions::Aux)?;
            rec.read_buffer::<f32>(c, self.linear.gradient(), 3 * out.len())
        })();
        let values = self.settle(result, vec![f32::NAN; 3 * out.len()]);
        to_f64(values, out);
    }

    fn take_error(&mut self) -> Option<Error> {
        self.error.take().or_else(|| self.context.take_failure())
    }

    fn device_memory(&self) -> Option<u64> {
        Some(self.context.allocated_bytes())
    }

    fn device_counts(&self) -> Option<DeviceCounts> {
        Some(self.recording.counts())
    }

    fn gpu_context(&self) -> Option<&GpuContext> {
        Some(&self.context)
    }

    fn positions_buffer(&self) -> Option<&wgpu::Buffer> {
        Some(self.linear.positions())
    }
}

fn to_f64(values: Vec<f32>, out: &mut [[f64; 3]]) {
    for (o, c) in out.iter_mut().zip(values.chunks_exact(3)) {
        *o = [c[0] as f64, c[1] as f64, c[2] as f64];
    }
}
