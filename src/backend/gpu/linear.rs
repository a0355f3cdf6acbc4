//! The linear-algebra stages on the GPU: `gather` (vertex terms and gradient gather),
//! `assemble` (block-sparse Hessian) and `pcg` (the whole Jacobi-PCG loop, its scalars in a GPU
//! buffer, status read back every few iterations). Twins of `backend/cpu/{gather, assemble,
//! pcg}.rs`.

use encase::ShaderType;

use super::context::GpuContext;
use super::shaders::Binding;
use super::stage::{WORKGROUP, WgStage, storage, uniform, uniform_buffer, write_uniform};
use crate::backend::Anchor;
use crate::backend::cpu::gather::Anchors;
use crate::backend::topology::Topology;
use crate::error::{Error, Result};

/// Parameters of `shaders/gather.wgsl`.
#[derive(Clone, Copy, Debug, Default, ShaderType)]
pub struct GatherParams {
    pub vertex_count: u32,
    pub node_count: u32,
    pub inv_h2: f32,
    pub gravity_weight: f32,
    pub gravity_x: f32,
    pub gravity_y: f32,
    pub gravity_z: f32,
    pub weight_0: f32,
    pub theta_0: f32,
    pub weight_1: f32,
    pub theta_1: f32,
    pub collider_count: u32,
    pub contact_stiffness: f32,
    /// 1: keep the colliders' curvature term (exact Hessian); 0: drop it (projected).
    pub exact_hessian: u32,
    /// 1: add the lagged damping matrix.
    pub damped: u32,
}

/// A collider as `shaders/shared/collider.wgsl` reads it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct GpuCollider {
    a: [f32; 4],
    b: [f32; 4],
    kind: u32,
    pad: [u32; 3],
}

impl GpuCollider {
    pub fn new(collider: &crate::contact::Collider) -> GpuCollider {
        use crate::contact::Shape;
        let f = |v: [f64; 3], w: f64| [v[0] as f32, v[1] as f32, v[2] as f32, w as f32];
        let (kind, a, b) = match collider.shape {
            Shape::Plane { normal, offset } => {
                let length = glam::DVec3::from(normal).length();
                (0, f(normal.map(|c| c / length), offset / length), [0.0; 4])
            }
            Shape::Sphere { center, radius } => (1, f(center, radius), [0.0; 4]),
            Shape::Cuboid { center, half_extents } => (2, f(center, 0.0), f(half_extents, 0.0)),
            Shape::Capsule { a, b, radius } => (3, f(a, radius), f(b, 0.0)),
        };
        GpuCollider { a, b, kind, pad: [0; 3] }
    }
}

/// The bindings of `shaders/gather.wgsl`.
pub fn gather_bindings() -> Vec<Binding> {
    vec![
        uniform::<GatherParams>(),
        storage(1, 0, "masses", true),
        storage(1, 1, "pinned", true),
        storage(1, 2, "corner_offsets", true),
        storage(1, 3, "corners", true),
        storage(1, 4, "colliders", true),
        storage(1, 5, "row_offsets", true),
        storage(1, 6, "columns", true),
        storage(2, 0, "x", true),
        storage(2, 1, "x_start", true),
        storage(2, 2, "target_positions", true),
        storage(2, 3, "anchor_offsets", true),
        storage(2, 4, "anchors", true),
        storage(3, 0, "corner_gradients", true),
        storage(3, 1, "gradient", false),
        storage(3, 2, "vertex_blocks", false),
        storage(3, 3, "partials", false),
        storage(3, 4, "damping_blocks", true),
    ]
}

/// Parameters of `shaders/assemble.wgsl`.
#[derive(Clone, Copy, Debug, Default, ShaderType)]
pub struct AssembleParams {
    pub vertex_count: u32,
    /// 0 leaves the element blocks out.
    pub element_scale: f32,
    /// 1: add the lagged damping matrix.
    pub damped: u32,
}

/// The bindings of `shaders/assemble.wgsl`.
pub fn assemble_bindings() -> Vec<Binding> {
    vec![
        uniform::<AssembleParams>(),
        storage(1, 0, "pinned", true),
        storage(1, 1, "row_offsets", true),
        storage(1, 2, "columns", true),
        storage(1, 3, "source_offsets", true),
        storage(1, 4, "block_sources", true),
        storage(3, 0, "element_blocks", true),
        storage(3, 1, "vertex_blocks", true),
        storage(3, 2, "damping_blocks", true),
        storage(3, 3, "blocks", false),
    ]
}

/// Parameters of `shaders/pcg.wgsl`.
#[derive(Clone, Copy, Debug, Default, ShaderType)]
pub struct PcgParams {
    pub vertex_count: u32,
    pub partial_count: u32,
    pub max_iterations: u32,
    pub tolerance: f32,
    /// 1: apply the Hessian from the element blocks instead of the assembled matrix.
    pub matrix_free: u32,
    /// Matrix-free only: add the lagged damping matrix.
    pub damped: u32,
    pub tet_count: u32,
}

/// How the PCG loop applies the Hessian.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GpuProduct {
    /// Assemble block-sparse rows once per Newton iteration; each CG product reads them.
    #[default]
    Assembled,
    /// No assembly: each CG product gathers every vertex's rows of the element Hessians
    /// through its element corners.
    MatrixFree,
}

/// The bindings of `shaders/pcg.wgsl`.
pub fn pcg_bindings() -> Vec<Binding> {
    vec![
        uniform::<PcgParams>(),
        storage(1, 0, "row_offsets", true),
        storage(1, 1, "columns", true),
        storage(1, 2, "diagonal", true),
        storage(1, 3, "pinned", true),
        storage(1, 4, "corner_offsets", true),
        storage(1, 5, "corners", true),
        storage(1, 6, "corner_vertices", true),
        storage(3, 0, "blocks", true),
        storage(3, 1, "b", true),
        storage(3, 2, "x", false),
        storage(3, 3, "r", false),
        storage(3, 4, "z", false),
        storage(3, 5, "p", false),
        storage(3, 6, "ap", false),
        storage(3, 7, "inverse_diagonal", false),
        storage(3, 8, "partials", false),
        storage(3, 9, "scalars", false),
        storage(3, 10, "element_blocks", true),
        storage(3, 11, "vertex_blocks", true),
        storage(3, 12, "damping_blocks", true),
    ]
}

/// Parameters of `shaders/vector.wgsl`.
#[derive(Clone, Copy, Debug, Default, ShaderType)]
pub struct VectorParams {
    pub vertex_count: u32,
    pub alpha: f32,
}

/// The bindings of `shaders/vector.wgsl`.
pub fn vector_bindings() -> Vec<Binding> {
    vec![
        uniform::<VectorParams>(),
        storage(3, 0, "x", false),
        storage(3, 1, "x_saved", false),
        storage(3, 2, "direction", false),
        storage(3, 3, "gradient", true),
        storage(3, 4, "rhs", false),
        storage(3, 5, "partials", false),
    ]
}

/// Which positions the element and gather stages read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Positions {
    /// The iterate `x`, between the step's start and target.
    Iterate,
    /// The auxiliary buffer, as both `x` and start (the potential at a given state).
    Aux,
}

/// The PCG scalars as the shader keeps them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct PcgStatus {
    pub rz: f32,
    pub alpha: f32,
    pub beta: f32,
    pub residual_squared: f32,
    pub threshold_squared: f32,
    pub b_norm_squared: f32,
    pub iterations: u32,
    /// 0 running, 1 converged, 2 negative curvature at once, 3 negative curvature later,
    /// 4 iteration limit.
    pub state: u32,
}

/// Line-search candidates evaluated in one submission at most.
pub const MAX_BATCH: usize = 8;

/// Iterations encoded per submission between status readbacks.
const ITERATIONS_PER_READBACK: u32 = 16;

/// The three linear-algebra stages' pipelines.
pub struct WgLinear {
    gather: WgStage,
    assemble: WgStage,
    pcg: WgStage,
    vector: WgStage,
}

impl WgLinear {
    pub fn new(context: &GpuContext) -> Result<WgLinear> {
        Ok(WgLinear {
            gather: WgStage::new(context, "gather", &gather_bindings(), &["main"])?,
            assemble: WgStage::new(context, "assemble", &assemble_bindings(), &["main"])?,
            pcg: WgStage::new(
                context,
                "pcg",
                &pcg_bindings(),
                &[
                    "setup",
                    "reduce_setup",
                    "product",
                    "reduce_curvature",
                    "update",
                    "reduce_residual",
                    "direction",
                ],
            )?,
            vector: WgStage::new(
                context,
                "vector",
                &vector_bindings(),
                &["negate_gradient", "use_gradient", "save", "offset", "scale", "dots"],
            )?,
        })
    }
}

/// The model's fixed buffers the gather and assembly bind (kept to rebuild their groups when
/// the handles or the damping buffers change).
struct ModelBuffers {
    masses: wgpu::Buffer,
    pinned: wgpu::Buffer,
    corner_offsets: wgpu::Buffer,
    corners: wgpu::Buffer,
    colliders: wgpu::Buffer,
    row_offsets: wgpu::Buffer,
    columns: wgpu::Buffer,
    source_offsets: wgpu::Buffer,
    block_sources: wgpu::Buffer,
    diagonal: wgpu::Buffer,
    corner_vertices: wgpu::Buffer,
}

/// The PCG loop's own vectors and sums.
struct PcgBuffers {
    r: wgpu::Buffer,
    z: wgpu::Buffer,
    p: wgpu::Buffer,
    ap: wgpu::Buffer,
    inverse_diagonal: wgpu::Buffer,
    partials: wgpu::Buffer,
}

/// Buffers of the linear-algebra stages for one model.
pub struct GpuLinear {
    vertex_count: usize,
    block_count: usize,
    tet_count: usize,
    /// How the PCG loop applies the Hessian.
    pub product: GpuProduct,
    model: ModelBuffers,
    pcg_buffers: PcgBuffers,
    pub(crate) x: wgpu::Buffer,
    pub(crate) x_start: wgpu::Buffer,
    target: wgpu::Buffer,
    pub(crate) aux: wgpu::Buffer,
    pub(crate) corner_gradients: wgpu::Buffer,
    pub(crate) element_blocks: wgpu::Buffer,
    gradient: wgpu::Buffer,
    vertex_blocks: wgpu::Buffer,
    blocks: wgpu::Buffer,
    /// Handle springs by vertex (CSR offsets, then (position, stiffness)); grown on demand.
    anchor_offsets: wgpu::Buffer,
    anchors: wgpu::Buffer,
    anchor_capacity: usize,
    /// The lagged damping matrix on the Hessian's pattern; allocated by the first damped step.
    damping_blocks: Option<wgpu::Buffer>,
    /// Bound where a stage's damping input is unused (a buffer may not be bound for reading
    /// and writing in one dispatch).
    placeholder: wgpu::Buffer,
    rhs: wgpu::Buffer,
    solution: wgpu::Buffer,
    gather_params: wgpu::Buffer,
    gather_partials: wgpu::Buffer,
    assemble_params: wgpu::Buffer,
    pcg_params: wgpu::Buffer,
    scalars: wgpu::Buffer,
    vector_params: wgpu::Buffer,
    /// One `alpha` per line-search candidate slot, plus one for restoring the iterate.
    batch_params: Vec<wgpu::Buffer>,
    batch_groups: Vec<wgpu::BindGroup>,
    dot_partials: wgpu::Buffer,
    gather_groups: Vec<wgpu::BindGroup>,
    gather_aux_groups: Vec<wgpu::BindGroup>,
    vector_groups: Vec<wgpu::BindGroup>,
    assemble_groups: Vec<wgpu::BindGroup>,
    /// Assembly into the damping matrix.
    damping_groups: Vec<wgpu::BindGroup>,
    pcg_groups: Vec<wgpu::BindGroup>,
}

fn groups(context: &GpuContext, stage: &WgStage, by_group: &[&[&wgpu::Buffer]]) -> Vec<wgpu::BindGroup> {
    (0..stage.group_count())
        .map(|g| stage.bind_group(context, g, by_group.get(g).copied().unwrap_or(&[])))
        .collect()
}

fn dispatch(
    context: &GpuContext,
    encoder: &mut wgpu::CommandEncoder,
    stage: &WgStage,
    groups: &[wgpu::BindGroup],
    entry: &str,
    workgroups: u32,
) {
    let label = stage.pass_label(entry);
    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: Some(label),
        timestamp_writes: context.timestamp_writes(label),
    });
    pass.set_pipeline(stage.pipeline(entry));
    for (g, group) in groups.iter().enumerate() {
        pass.set_bind_group(g as u32, group, &[]);
    }
    context.dispatch(&mut pass, workgroups);
}

impl GpuLinear {
    /// Buffers for `model`: masses, pins, colliders and its incidence lists.
    pub fn for_model(context: &GpuContext, stages: &WgLinear, model: &crate::model::Model) -> GpuLinear {
        let c = context;
        let n = model.vertex_count();
        let corner_count = 4 * model.tets.len() + 2 * model.springs.len();
        let element_block_count = 10 * model.tets.len() + 3 * model.springs.len();
        let topology = Topology::new(model);
        let block_count = topology.block_count();
        let masses: Vec<f32> = model.masses.iter().map(|&m| m as f32).collect();
        let pinned: Vec<u32> = model.pinned.iter().map(|&p| p as u32).collect();
        let colliders: Vec<GpuCollider> = model.colliders.iter().map(GpuCollider::new).collect();
        // Corner slots are the tets' corners, then the springs' ends (see `Topology`).
        let corner_vertices: Vec<u32> =
            model.tets.iter().flatten().chain(model.springs.iter().flatten()).copied().collect();
        let model_buffers = ModelBuffers {
            masses: c.storage("masses", &masses),
            pinned: c.storage("pinned", &pinned),
            corner_offsets: c.storage("corner_offsets", &topology.corner_offsets),
            corners: c.storage("corners", &topology.corners),
            colliders: c.storage("colliders", &colliders),
            row_offsets: c.storage("row_offsets", &topology.row_offsets),
            columns: c.storage("columns", &topology.columns),
            source_offsets: c.storage("source_offsets", &topology.source_offsets),
            block_sources: c.storage("block_sources", &topology.block_sources),
            diagonal: c.storage("diagonal", &topology.diagonal),
            corner_vertices: c.storage("corner_vertices", &corner_vertices),
        };
        let vector = |label: &str| c.scratch::<f32>(label, 3 * n);
        let (aux, x_saved) = (vector("aux"), vector("x_saved"));
        let (x, x_start, target, gradient, rhs, solution) = (
            vector("x"),
            vector("x_start"),
            vector("target"),
            vector("gradient"),
            vector("rhs"),
            vector("solution"),
        );
        let pcg_buffers = PcgBuffers {
            r: vector("r"),
            z: vector("z"),
            p: vector("p"),
            ap: vector("ap"),
            inverse_diagonal: vector("inverse_diagonal"),
            partials: c.scratch::<[f32; 2]>("pcg partials", n.div_ceil(WORKGROUP as usize)),
        };
        let corner_gradients = c.scratch::<f32>("corner_gradients", 3 * corner_count);
        let element_blocks = c.scratch::<f32>("element_blocks", 9 * element_block_count);
        let vertex_blocks = c.scratch::<f32>("vertex_blocks", 9 * n);
        let blocks = c.scratch::<f32>("blocks", 9 * block_count);
        let anchor_offsets = c.scratch::<u32>("anchor_offsets", n + 1);
        let anchors = c.scratch::<[f32; 4]>("anchors", 1);
        let partial_count = n.div_ceil(WORKGROUP as usize);
        let gather_partials = c.scratch::<[f32; 4]>("gather partials", partial_count);
        let scalars = c.scratch::<PcgStatus>("pcg scalars", 1);
        let dot_partials = c.scratch::<[f32; 4]>("dot partials", partial_count);
        let vector_params = uniform_buffer::<VectorParams>(c, "vector params");
        let gather_params = uniform_buffer::<GatherParams>(c, "gather params");
        let assemble_params = uniform_buffer::<AssembleParams>(c, "assemble params");
        let pcg_params = uniform_buffer::<PcgParams>(c, "pcg params");
        let vector_groups = groups(
            c,
            &stages.vector,
            &[&[&vector_params], &[], &[], &[&x, &x_saved, &solution, &gradient, &rhs, &dot_partials]],
        );
        let batch_params: Vec<wgpu::Buffer> =
            (0..=MAX_BATCH).map(|_| uniform_buffer::<VectorParams>(c, "batch params")).collect();
        let batch_groups = batch_params.iter().map(|p| stages.vector.bind_group(c, 0, &[p])).collect();
        let mut linear = GpuLinear {
            vertex_count: n,
            block_count,
            tet_count: model.tets.len(),
            product: GpuProduct::default(),
            model: model_buffers,
            pcg_buffers,
            x,
            x_start,
            target,
            aux,
            corner_gradients,
            element_blocks,
            gradient,
            vertex_blocks,
            blocks,
            anchor_offsets,
            anchors,
            anchor_capacity: 1,
            damping_blocks: None,
            placeholder: c.scratch::<f32>("placeholder", 1),
            rhs,
            solution,
            gather_params,
            gather_partials,
            assemble_params,
            pcg_params,
            scalars,
            vector_params,
            batch_params,
            batch_groups,
            dot_partials,
            gather_groups: Vec::new(),
            gather_aux_groups: Vec::new(),
            vector_groups,
            assemble_groups: Vec::new(),
            damping_groups: Vec::new(),
            pcg_groups: Vec::new(),
        };
        linear.bind_vertex_terms(context, stages);
        linear
    }

    /// (Re)builds the gather, assembly and PCG groups over the current handle and damping
    /// buffers.
    fn bind_vertex_terms(&mut self, c: &GpuContext, stages: &WgLinear) {
        let m = &self.model;
        let model_group: [&wgpu::Buffer; 7] =
            [&m.masses, &m.pinned, &m.corner_offsets, &m.corners, &m.colliders, &m.row_offsets, &m.columns];
        let damping = self.damping_blocks.as_ref().unwrap_or(&self.placeholder);
        let outputs =
            [&self.corner_gradients, &self.gradient, &self.vertex_blocks, &self.gather_partials, damping];
        let (offsets, anchors) = (&self.anchor_offsets, &self.anchors);
        self.gather_groups = groups(
            c,
            &stages.gather,
            &[
                &[&self.gather_params],
                &model_group,
                &[&self.x, &self.x_start, &self.target, offsets, anchors],
                &outputs,
            ],
        );
        self.gather_aux_groups = groups(
            c,
            &stages.gather,
            &[
                &[&self.gather_params],
                &model_group,
                &[&self.aux, &self.aux, &self.aux, offsets, anchors],
                &outputs,
            ],
        );
        let pattern: [&wgpu::Buffer; 5] =
            [&m.pinned, &m.row_offsets, &m.columns, &m.source_offsets, &m.block_sources];
        self.assemble_groups = groups(
            c,
            &stages.assemble,
            &[
                &[&self.assemble_params],
                &pattern,
                &[],
                &[&self.element_blocks, &self.vertex_blocks, damping, &self.blocks],
            ],
        );
        self.damping_groups = match &self.damping_blocks {
            Some(damping) => groups(
                c,
                &stages.assemble,
                &[
                    &[&self.assemble_params],
                    &pattern,
                    &[],
                    &[&self.element_blocks, &self.vertex_blocks, &self.placeholder, damping],
                ],
            ),
            None => Vec::new(),
        };
        let b = &self.pcg_buffers;
        self.pcg_groups = groups(
            c,
            &stages.pcg,
            &[
                &[&self.pcg_params],
                &[
                    &m.row_offsets,
                    &m.columns,
                    &m.diagonal,
                    &m.pinned,
                    &m.corner_offsets,
                    &m.corners,
                    &m.corner_vertices,
                ],
                &[],
                &[
                    &self.blocks,
                    &self.rhs,
                    &self.solution,
                    &b.r,
                    &b.z,
                    &b.p,
                    &b.ap,
                    &b.inverse_diagonal,
                    &b.partials,
                    &self.scalars,
                    &self.element_blocks,
                    &self.vertex_blocks,
                    damping,
                ],
            ],
        );
    }

    /// Uploads the handle springs, grouped by vertex.
    pub fn write_anchors(&mut self, context: &GpuContext, stages: &WgLinear, anchors: &[Anchor]) {
        // The CPU gather's grouping, in f32.
        let grouped = Anchors::new(self.vertex_count, anchors);
        let offsets = if grouped.offsets.is_empty() {
            vec![0u32; self.vertex_count + 1]
        } else {
            grouped.offsets.clone()
        };
        let springs: Vec<[f32; 4]> =
            grouped.springs.iter().map(|(k, p)| [p.x as f32, p.y as f32, p.z as f32, *k as f32]).collect();
        if springs.len() > self.anchor_capacity {
            self.anchor_capacity = springs.len().next_power_of_two();
            self.anchors = context.scratch::<[f32; 4]>("anchors", self.anchor_capacity);
            self.bind_vertex_terms(context, stages);
        }
        context.queue.write_buffer(&self.anchor_offsets, 0, bytemuck::cast_slice(&offsets));
        if !springs.is_empty() {
            context.queue.write_buffer(&self.anchors, 0, bytemuck::cast_slice(&springs));
        }
    }

    /// Builds the step's lagged damping matrix `D = element_scale K + diag(A_v)`, `K` the
    /// element blocks the last element pass left (skipped when `element_scale` is 0) and
    /// `A_v` the per-vertex blocks (row-major, none when empty).
    pub fn build_damping(
        &mut self,
        context: &GpuContext,
        stages: &WgLinear,
        element_scale: f64,
        vertex_damping: &[[f64; 9]],
    ) -> Result<()> {
        if self.damping_blocks.is_none() {
            self.damping_blocks = Some(context.scratch::<f32>("damping_blocks", 9 * self.block_count));
            self.bind_vertex_terms(context, stages);
        }
        let per_vertex = if vertex_damping.is_empty() {
            vec![0.0f32; 9 * self.vertex_count]
        } else {
            to_f32(vertex_damping.as_flattened())
        };
        context.queue.write_buffer(&self.vertex_blocks, 0, bytemuck::cast_slice(&per_vertex));
        let params = AssembleParams {
            vertex_count: self.vertex_count as u32,
            element_scale: element_scale as f32,
            damped: 0,
        };
        self.run_assemble(context, stages, &params, &self.damping_groups)
    }

    /// Whether a damping matrix is built (by `build_damping`).
    pub fn has_damping(&self) -> bool {
        self.damping_blocks.is_some()
    }

    fn workgroups(&self) -> u32 {
        (self.vertex_count as u32).div_ceil(WORKGROUP)
    }

    /// Records `gather` at `at` into `encoder` (its parameters written now).
    pub fn encode_gather(
        &self,
        context: &GpuContext,
        stages: &WgLinear,
        encoder: &mut wgpu::CommandEncoder,
        params: &GatherParams,
        at: Positions,
    ) -> Result<()> {
        write_uniform(context, &self.gather_params, params)?;
        let groups = if at == Positions::Iterate { &self.gather_groups } else { &self.gather_aux_groups };
        dispatch(context, encoder, &stages.gather, groups, "main", self.workgroups());
        Ok(())
    }

    /// The buffer of gather partials (4 floats per workgroup) of the last pass, and their count.
    pub(crate) fn gather_partials(&self) -> (&wgpu::Buffer, usize) {
        (&self.gather_partials, self.workgroups() as usize)
    }

    /// Writes the `alpha` of batch slot `slot` (slot `MAX_BATCH` is the restore, alpha 0).
    pub fn write_batch_alpha(&self, context: &GpuContext, slot: usize, alpha: f64) -> Result<()> {
        let params = VectorParams { vertex_count: self.vertex_count as u32, alpha: alpha as f32 };
        write_uniform(context, &self.batch_params[slot], &params)
    }

    /// Records `x = x_saved + alpha_slot d` into `encoder`.
    pub fn encode_offset(
        &self,
        context: &GpuContext,
        stages: &WgLinear,
        encoder: &mut wgpu::CommandEncoder,
        slot: usize,
    ) {
        let groups: Vec<wgpu::BindGroup> = vec![self.batch_groups[slot].clone()]
            .into_iter()
            .chain(self.vector_groups[1..].iter().cloned())
            .collect();
        let threads = (3 * self.vertex_count) as u32;
        dispatch(context, encoder, &stages.vector, &groups, "offset", threads.div_ceil(WORKGROUP));
    }

    /// Runs `gather` at `at`; returns the summed (vertex energy, |grad|^2, force scale, noise
    /// magnitude).
    pub fn gather(
        &self,
        context: &GpuContext,
        stages: &WgLinear,
        params: &GatherParams,
        at: Positions,
    ) -> Result<[f64; 4]> {
        let mut encoder = context.device.create_command_encoder(&Default::default());
        self.encode_gather(context, stages, &mut encoder, params, at)?;
        context.queue.submit([encoder.finish()]);
        let partials: Vec<[f32; 4]> = context.read(&self.gather_partials, self.workgroups() as usize)?;
        Ok(partials.iter().fold([0.0; 4], |acc, p| std::array::from_fn(|k| acc[k] + p[k] as f64)))
    }

    /// Runs `assemble`: the Newton matrix from the element and vertex blocks, plus the
    /// lagged damping matrix when `damped`.
    pub fn assemble(&self, context: &GpuContext, stages: &WgLinear, damped: bool) -> Result<()> {
        let params = AssembleParams {
            vertex_count: self.vertex_count as u32,
            element_scale: 1.0,
            damped: damped as u32,
        };
        self.run_assemble(context, stages, &params, &self.assemble_groups)
    }

    fn run_assemble(
        &self,
        context: &GpuContext,
        stages: &WgLinear,
        params: &AssembleParams,
        groups: &[wgpu::BindGroup],
    ) -> Result<()> {
        write_uniform(context, &self.assemble_params, params)?;
        let mut encoder = context.device.create_command_encoder(&Default::default());
        dispatch(context, &mut encoder, &stages.assemble, groups, "main", self.workgroups());
        context.queue.submit([encoder.finish()]);
        Ok(())
    }

    /// Solves `H x = rhs` into `solution` with the GPU loop, `H` the assembled matrix or, with
    /// `GpuProduct::MatrixFree`, the element and vertex blocks (plus the damping matrix when
    /// `damped`); returns the final status.
    pub fn pcg(
        &self,
        context: &GpuContext,
        stages: &WgLinear,
        tolerance: f64,
        max_iterations: u32,
        damped: bool,
    ) -> Result<PcgStatus> {
        let params = PcgParams {
            vertex_count: self.vertex_count as u32,
            partial_count: self.workgroups(),
            max_iterations,
            tolerance: tolerance as f32,
            matrix_free: (self.product == GpuProduct::MatrixFree) as u32,
            damped: damped as u32,
            tet_count: self.tet_count as u32,
        };
        write_uniform(context, &self.pcg_params, &params)?;
        let (stage, groups, w) = (&stages.pcg, &self.pcg_groups, self.workgroups());
        let mut encoder = context.device.create_command_encoder(&Default::default());
        dispatch(context, &mut encoder, stage, groups, "setup", w);
        dispatch(context, &mut encoder, stage, groups, "reduce_setup", 1);
        context.queue.submit([encoder.finish()]);
        loop {
            let mut encoder = context.device.create_command_encoder(&Default::default());
            for _ in 0..ITERATIONS_PER_READBACK {
                dispatch(context, &mut encoder, stage, groups, "product", w);
                dispatch(context, &mut encoder, stage, groups, "reduce_curvature", 1);
                dispatch(context, &mut encoder, stage, groups, "update", w);
                dispatch(context, &mut encoder, stage, groups, "reduce_residual", 1);
                dispatch(context, &mut encoder, stage, groups, "direction", w);
            }
            context.queue.submit([encoder.finish()]);
            let status = context.read::<PcgStatus>(&self.scalars, 1)?[0];
            if status.state != 0 {
                if status.state == 2 {
                    // Negative curvature at once: the right-hand side is the direction.
                    let mut encoder = context.device.create_command_encoder(&Default::default());
                    encoder.copy_buffer_to_buffer(
                        &self.rhs,
                        0,
                        &self.solution,
                        0,
                        (12 * self.vertex_count) as u64,
                    );
                    context.queue.submit([encoder.finish()]);
                }
                return Ok(status);
            }
            if status.iterations >= max_iterations {
                return Err(Error::Solver("the GPU PCG loop stopped making progress".into()));
            }
        }
    }

    /// The number of stored 3x3 blocks.
    pub fn block_count(&self) -> usize {
        self.block_count
    }

    /// Runs one `vector` entry point with `alpha`.
    pub fn vector(&self, context: &GpuContext, stages: &WgLinear, entry: &str, alpha: f64) -> Result<()> {
        let params = VectorParams { vertex_count: self.vertex_count as u32, alpha: alpha as f32 };
        write_uniform(context, &self.vector_params, &params)?;
        let threads = if entry == "dots" { self.vertex_count } else { 3 * self.vertex_count };
        let mut encoder = context.device.create_command_encoder(&Default::default());
        dispatch(
            context,
            &mut encoder,
            &stages.vector,
            &self.vector_groups,
            entry,
            (threads as u32).div_ceil(WORKGROUP),
        );
        context.queue.submit([encoder.finish()]);
        Ok(())
    }

    /// `(g.d, d.d, g.g)` of the gradient and the direction.
    pub fn dots(&self, context: &GpuContext, stages: &WgLinear) -> Result<[f64; 3]> {
        self.vector(context, stages, "dots", 0.0)?;
        let partials: Vec<[f32; 4]> = context.read(&self.dot_partials, self.workgroups() as usize)?;
        Ok(partials.iter().fold([0.0; 3], |acc, p| std::array::from_fn(|k| acc[k] + p[k] as f64)))
    }

    /// Uploads positions into one of the position buffers.
    pub fn write(&self, context: &GpuContext, which: Positions, values: &[[f64; 3]]) {
        let buffer = if which == Positions::Iterate { &self.x } else { &self.aux };
        context.queue.write_buffer(buffer, 0, bytemuck::cast_slice(&to_f32(values.as_flattened())));
    }

    /// Reads the iterate.
    pub fn read_iterate(&self, context: &GpuContext) -> Result<Vec<f32>> {
        context.read(&self.x, 3 * self.vertex_count)
    }

    /// Uploads the step's start and inertial target.
    pub fn write_step(&self, context: &GpuContext, start: &[[f64; 3]], target: &[[f64; 3]]) {
        for (buffer, values) in [(&self.x_start, start), (&self.target, target)] {
            context.queue.write_buffer(buffer, 0, bytemuck::cast_slice(&to_f32(values.as_flattened())));
        }
    }

    /// Uploads the iterate, the step's start and its inertial target.
    pub fn write_positions(
        &self,
        context: &GpuContext,
        x: &[[f64; 3]],
        start: &[[f64; 3]],
        target: &[[f64; 3]],
    ) {
        for (buffer, values) in [(&self.x, x), (&self.x_start, start), (&self.target, target)] {
            context.queue.write_buffer(buffer, 0, bytemuck::cast_slice(&to_f32(values.as_flattened())));
        }
    }

    /// Uploads element corner gradients (3 floats per slot).
    pub fn write_corner_gradients(&self, context: &GpuContext, values: &[f32]) {
        context.queue.write_buffer(&self.corner_gradients, 0, bytemuck::cast_slice(values));
    }

    /// Uploads upper element Hessian blocks (9 floats per block).
    pub fn write_element_blocks(&self, context: &GpuContext, values: &[f32]) {
        context.queue.write_buffer(&self.element_blocks, 0, bytemuck::cast_slice(values));
    }

    /// Uploads an assembled matrix (9 floats per stored block).
    pub fn write_blocks(&self, context: &GpuContext, values: &[f32]) {
        context.queue.write_buffer(&self.blocks, 0, bytemuck::cast_slice(values));
    }

    /// Uploads a right-hand side.
    pub fn write_rhs(&self, context: &GpuContext, values: &[[f64; 3]]) {
        context.queue.write_buffer(&self.rhs, 0, bytemuck::cast_slice(&to_f32(values.as_flattened())));
    }

    /// Reads the gathered gradient.
    pub fn read_gradient(&self, context: &GpuContext) -> Result<Vec<f32>> {
        context.read(&self.gradient, 3 * self.vertex_count)
    }

    /// Reads the vertex Hessian blocks.
    pub fn read_vertex_blocks(&self, context: &GpuContext) -> Result<Vec<f32>> {
        context.read(&self.vertex_blocks, 9 * self.vertex_count)
    }

    /// Reads the assembled matrix.
    pub fn read_blocks(&self, context: &GpuContext) -> Result<Vec<f32>> {
        context.read(&self.blocks, 9 * self.block_count)
    }

    /// Reads the PCG solution.
    pub fn read_solution(&self, context: &GpuContext) -> Result<Vec<f32>> {
        context.read(&self.solution, 3 * self.vertex_count)
    }
}

fn to_f32(values: &[f64]) -> Vec<f32> {
    values.iter().map(|&v| v as f32).collect()
}
