//! `GpuBackend`: the [`Stages`] of an implicit step on the GPU. The iterate, gradient,
//! Hessian and direction stay on the device in f32; the host reads back scalars (energies,
//! norms, slopes, the PCG status every few iterations) and the final iterate.

use std::sync::Arc;

use super::context::GpuContext;
use super::element::{GpuElements, WgElement};
use super::linear::{GatherParams, GpuLinear, GpuProduct, MAX_BATCH, Positions, WgLinear};
use crate::backend::{Anchor, DirectionReport, LinearSolver, Linearization, Node, Stages, StepProblem};
use crate::error::{Error, Result};
use crate::material::Projection;
use crate::model::Model;

const POTENTIAL_NODE: [Node; 1] = [Node { weight: 1.0, theta: 1.0 }];

/// The GPU implementation of [`Stages`].
pub struct GpuBackend {
    context: Arc<GpuContext>,
    element_stage: WgElement,
    linear_stages: WgLinear,
    elements: GpuElements,
    linear: GpuLinear,
    model: Arc<Model>,
    nodes: Vec<Node>,
    inv_h2: f64,
    /// This step has lagged damping (its matrix is built in `linear`), with this weight.
    damped: bool,
    damping_weight: f64,
    error: Option<Error>,
    /// Per line-search candidate: the element and the gather partial sums.
    candidates: wgpu::Buffer,
}

impl GpuBackend {
    /// Compiles the stages and uploads `model`.
    pub fn new(context: Arc<GpuContext>, model: Arc<Model>) -> Result<GpuBackend> {
        let (element_stage, linear_stages, linear, elements) = context.guarded(|| {
            let element_stage = WgElement::new(&context)?;
            let linear_stages = WgLinear::new(&context)?;
            let linear = GpuLinear::for_model(&context, &linear_stages, &model);
            let elements = GpuElements::new(&context, &element_stage, &model, &linear)?;
            Ok((element_stage, linear_stages, linear, elements))
        })?;
        let per_candidate = elements.partial_count() + 4 * linear.gather_partials().1;
        let candidates = context.scratch::<f32>("line-search candidates", MAX_BATCH * per_candidate);
        Ok(GpuBackend {
            candidates,
            context,
            element_stage,
            linear_stages,
            elements,
            linear,
            model,
            nodes: POTENTIAL_NODE.to_vec(),
            inv_h2: 0.0,
            damped: false,
            damping_weight: 1.0,
            error: None,
        })
    }

    /// Sets how the PCG loop applies the Hessian (assembled by default).
    pub fn with_product(mut self, product: GpuProduct) -> GpuBackend {
        self.linear.product = product;
        self
    }

    /// The device context.
    pub fn context(&self) -> &GpuContext {
        &self.context
    }

    /// The gather's parameters for `nodes` (`inv_h2` 0 leaves inertia out); `exact` keeps the
    /// colliders' curvature, `damped` adds the step's lagged damping.
    fn gather_params(&self, nodes: &[Node], inv_h2: f64, exact: bool, damped: bool) -> GatherParams {
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
            exact_hessian: exact as u32,
            damped: (damped && self.damped) as u32,
        }
    }

    /// Keeps the first failure and substitutes `fallback` (NaN stops the solver at once).
    fn settle<T>(&mut self, result: Result<T>, fallback: T) -> T {
        result.unwrap_or_else(|e| {
            self.error.get_or_insert(e);
            fallback
        })
    }

    /// Element plus vertex energy at `at`; `damped` adds the lagged damping.
    fn energy_at(&mut self, at: Positions, nodes: &[Node], inv_h2: f64, damped: bool) -> Result<f64> {
        let elements = self.elements.evaluate(&self.context, &self.element_stage, at, nodes, 0)?;
        let params = self.gather_params(nodes, inv_h2, false, damped);
        let vertices = self.linear.gather(&self.context, &self.linear_stages, &params, at)?[0];
        Ok(elements + vertices)
    }

    fn report(&mut self, iterations: usize, negative_curvature: bool) -> Result<DirectionReport> {
        let [slope, dd, gg] = self.linear.dots(&self.context, &self.linear_stages)?;
        Ok(DirectionReport {
            iterations,
            negative_curvature,
            slope,
            norm: dd.sqrt(),
            gradient_norm: gg.sqrt(),
        })
    }

    /// The gradient and the assembled matrix of the last `linearize`.
    #[cfg(test)]
    pub(crate) fn read_linearization(&self) -> (Vec<f32>, Vec<f32>) {
        (self.linear.read_gradient(&self.context).unwrap(), self.linear.read_blocks(&self.context).unwrap())
    }

    fn to_f64(values: Vec<f32>, out: &mut [[f64; 3]]) {
        for (o, c) in out.iter_mut().zip(values.chunks_exact(3)) {
            *o = [c[0] as f64, c[1] as f64, c[2] as f64];
        }
    }
}

impl Stages for GpuBackend {
    fn begin_step(&mut self, problem: StepProblem<'_>) {
        self.linear.write_step(&self.context, problem.start, problem.target);
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
            if problem.rayleigh > 0.0 {
                self.linear.write(&self.context, Positions::Aux, problem.start);
                self.elements.evaluate(
                    &self.context,
                    &self.element_stage,
                    Positions::Aux,
                    &POTENTIAL_NODE,
                    3,
                )?;
                scale = w * problem.rayleigh / problem.dt;
            }
            self.linear.build_damping(&self.context, &self.linear_stages, scale, &vertex_damping)
        })();
        self.settle(result, ());
    }

    fn set_anchors(&mut self, anchors: &[Anchor]) {
        self.linear.write_anchors(&self.context, &self.linear_stages, anchors);
    }

    fn dissipation(&mut self) -> f64 {
        if !self.damped || self.damping_weight <= 0.0 {
            return 0.0;
        }
        // The gather with no nodes and no inertia leaves only the damping quadratic.
        let params = self.gather_params(&[], 0.0, false, true);
        let sums = self.linear.gather(&self.context, &self.linear_stages, &params, Positions::Iterate);
        self.settle(sums, [f64::NAN; 4])[0] / self.damping_weight
    }

    fn set_iterate(&mut self, x: &[[f64; 3]]) {
        self.linear.write(&self.context, Positions::Iterate, x);
    }

    fn read_iterate(&mut self, out: &mut [[f64; 3]]) {
        let values = self.linear.read_iterate(&self.context);
        let values = self.settle(values, vec![f32::NAN; 3 * out.len()]);
        GpuBackend::to_f64(values, out);
    }

    fn objective(&mut self) -> f64 {
        let nodes = self.nodes.clone();
        let value = self.energy_at(Positions::Iterate, &nodes, self.inv_h2, true);
        self.settle(value, f64::NAN)
    }

    fn linearize(&mut self, projection: Projection) -> Linearization {
        let nodes = self.nodes.clone();
        let outputs = if projection == Projection::Psd { 3 } else { 2 };
        let result = (|| {
            self.elements.evaluate(
                &self.context,
                &self.element_stage,
                Positions::Iterate,
                &nodes,
                outputs,
            )?;
            let params = self.gather_params(&nodes, self.inv_h2, projection == Projection::None, true);
            let sums = self.linear.gather(&self.context, &self.linear_stages, &params, Positions::Iterate)?;
            if self.linear.product == GpuProduct::Assembled {
                self.linear.assemble(&self.context, &self.linear_stages, self.damped)?;
            }
            Ok(Linearization {
                gradient_norm: sums[1].sqrt(),
                force_scale: sums[2],
                // The device works in f32: its objective is known to f32 resolution.
                noise_floor: f32::EPSILON as f64 * sums[3],
            })
        })();
        self.settle(result, Linearization { gradient_norm: f64::NAN, ..Linearization::default() })
    }

    fn solve_direction(
        &mut self,
        _solver: LinearSolver,
        tolerance: f64,
        max_iterations: usize,
    ) -> DirectionReport {
        // The GPU always solves with PCG; the direct solver is a CPU option.
        let result = (|| {
            self.linear.vector(&self.context, &self.linear_stages, "negate_gradient", 0.0)?;
            let status = self.linear.pcg(
                &self.context,
                &self.linear_stages,
                tolerance,
                max_iterations as u32,
                self.damped,
            )?;
            self.report(status.iterations.max(1) as usize, status.state == 2 || status.state == 3)
        })();
        self.settle(result, DirectionReport { slope: f64::NAN, ..DirectionReport::default() })
    }

    fn use_negative_gradient(&mut self) -> DirectionReport {
        let result = (|| {
            self.linear.vector(&self.context, &self.linear_stages, "use_gradient", 0.0)?;
            self.report(0, false)
        })();
        self.settle(result, DirectionReport { slope: f64::NAN, ..DirectionReport::default() })
    }

    fn scale_direction(&mut self, factor: f64) {
        let result = self.linear.vector(&self.context, &self.linear_stages, "scale", factor);
        self.settle(result, ());
    }

    fn candidate_objectives(&mut self, alphas: &[f64]) -> Vec<f64> {
        let nodes = self.nodes.clone();
        let result = (|| {
            let (context, linear) = (&self.context, &self.linear);
            let element_count = self.elements.partial_count();
            let (gather_partials, gather_count) = linear.gather_partials();
            let per_candidate = element_count + 4 * gather_count;
            let mut values = Vec::with_capacity(alphas.len());
            // In batches of MAX_BATCH: each candidate offsets the saved iterate, evaluates the
            // element and vertex energies and copies both partial sums aside; one submission
            // and one readback per batch, then the iterate is restored.
            linear.vector(context, &self.linear_stages, "save", 0.0)?;
            for batch in alphas.chunks(MAX_BATCH) {
                let mut encoder = context.device.create_command_encoder(&Default::default());
                let params = self.gather_params(&nodes, self.inv_h2, false, true);
                for (slot, &alpha) in batch.iter().enumerate() {
                    linear.write_batch_alpha(context, slot, alpha)?;
                    linear.encode_offset(context, &self.linear_stages, &mut encoder, slot);
                    self.elements.encode(
                        context,
                        &self.element_stage,
                        &mut encoder,
                        Positions::Iterate,
                        &nodes,
                        0,
                    )?;
                    linear.encode_gather(
                        context,
                        &self.linear_stages,
                        &mut encoder,
                        &params,
                        Positions::Iterate,
                    )?;
                    let base = (4 * slot * per_candidate) as u64;
                    let element_bytes = (4 * element_count) as u64;
                    encoder.copy_buffer_to_buffer(
                        self.elements.energy_partials(),
                        0,
                        &self.candidates,
                        base,
                        element_bytes,
                    );
                    encoder.copy_buffer_to_buffer(
                        gather_partials,
                        0,
                        &self.candidates,
                        base + element_bytes,
                        (16 * gather_count) as u64,
                    );
                }
                linear.write_batch_alpha(context, MAX_BATCH, 0.0)?;
                linear.encode_offset(context, &self.linear_stages, &mut encoder, MAX_BATCH);
                context.queue.submit([encoder.finish()]);
                let sums: Vec<f32> = context.read(&self.candidates, batch.len() * per_candidate)?;
                for candidate in sums.chunks(per_candidate) {
                    let (elements, vertices) = candidate.split_at(element_count);
                    let energy: f64 = elements.iter().map(|&e| e as f64).sum::<f64>()
                        + vertices.chunks(4).map(|p| p[0] as f64).sum::<f64>();
                    values.push(energy);
                }
            }
            Ok(values)
        })();
        self.settle(result, vec![f64::NAN; alphas.len()])
    }

    fn preferred_batch(&self) -> usize {
        // Four candidates per submission: a round trip costs more than three extra passes.
        4
    }

    fn advance(&mut self, alpha: f64) {
        let result = (|| {
            self.linear.vector(&self.context, &self.linear_stages, "save", 0.0)?;
            self.linear.vector(&self.context, &self.linear_stages, "offset", alpha)
        })();
        self.settle(result, ());
    }

    fn potential(&mut self, x: &[[f64; 3]]) -> f64 {
        self.linear.write(&self.context, Positions::Aux, x);
        let value = self.energy_at(Positions::Aux, &POTENTIAL_NODE, 0.0, false);
        self.settle(value, f64::NAN)
    }

    fn potential_gradient(&mut self, x: &[[f64; 3]], out: &mut [[f64; 3]]) {
        self.linear.write(&self.context, Positions::Aux, x);
        let result = (|| {
            self.elements.evaluate(&self.context, &self.element_stage, Positions::Aux, &POTENTIAL_NODE, 1)?;
            let params = self.gather_params(&POTENTIAL_NODE, 0.0, false, false);
            self.linear.gather(&self.context, &self.linear_stages, &params, Positions::Aux)?;
            self.linear.read_gradient(&self.context)
        })();
        let values = self.settle(result, vec![f32::NAN; 3 * out.len()]);
        GpuBackend::to_f64(values, out);
    }

    fn take_error(&mut self) -> Option<Error> {
        self.error.take().or_else(|| self.context.take_failure())
    }

    fn device_memory(&self) -> Option<u64> {
        Some(self.context.allocated_bytes())
    }

    fn gpu_context(&self) -> Option<&GpuContext> {
        Some(&self.context)
    }

    fn positions_buffer(&self) -> Option<&wgpu::Buffer> {
        Some(&self.linear.x)
    }
}
