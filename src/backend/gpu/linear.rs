//! The linear-algebra stages on the GPU: `gather` (vertex terms and gradient gather),
//! `assemble` (block-sparse Hessian), `pcg` (the whole Jacobi-PCG loop, two dispatches per
//! iteration, its scalars on the device) and `vector` (Newton's vector updates). Twins of
//! `backend/cpu/{gather, assemble, pcg, vector}.rs`. Every method records into a
//! [`Recording`]; nothing here submits or waits.

use encase::ShaderType;

use super::context::GpuContext;
use super::recording::{Recording, Staged};
use super::shaders::Binding;
use super::stage::{WORKGROUP, WgStage, storage, uniform};
use crate::backend::Anchor;
use crate::backend::topology::{Anchors, Topology};
use crate::error::Result;

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
    /// 1: gather and write the gradient and vertex blocks; 0: the energy alone.
    pub derivatives: u32,
    pub tet_count: u32,
    pub spring_count: u32,
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
        storage(1, 7, "rest", true),
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
    pub tet_count: u32,
    pub spring_count: u32,
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
    /// Relative residual to reach (unless `forcing`).
    pub tolerance: f32,
    /// 1: the relative tolerance is Newton's forcing term of the last gather.
    pub forcing: u32,
    /// Newton's gradient tolerance (N): at or below it the solve does nothing.
    pub gradient_tolerance: f32,
}

/// The bindings of `shaders/pcg.wgsl`.
pub fn pcg_bindings() -> Vec<Binding> {
    vec![
        uniform::<PcgParams>(),
        storage(1, 0, "row_offsets", true),
        storage(1, 1, "columns", true),
        storage(1, 2, "diagonal", true),
        storage(3, 0, "blocks", true),
        storage(3, 1, "b", true),
        storage(3, 2, "x", false),
        storage(3, 3, "r", false),
        storage(3, 4, "z", false),
        storage(3, 5, "p_in", true),
        storage(3, 6, "p_out", false),
        storage(3, 7, "ap", false),
        storage(3, 8, "inverse_diagonal", false),
        storage(3, 9, "residual_partials", false),
        storage(3, 10, "curvature_partials", false),
        storage(3, 11, "scalars_in", false),
        storage(3, 12, "scalars_out", false),
        storage(3, 13, "gather_partials", true),
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
        storage(3, 6, "rest", true),
        storage(3, 7, "positions", false),
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
    pub residual_squared: f32,
    pub threshold_squared: f32,
    /// The relative residual aimed at.
    pub tolerance: f32,
    pub iterations: u32,
    /// 0 running, 1 converged, 2 negative curvature at once, 3 negative curvature later,
    /// 4 iteration limit.
    pub state: u32,
    pub started: u32,
    pub negative: u32,
}

impl PcgStatus {
    /// The solve met non-positive curvature.
    pub fn negative_curvature(&self) -> bool {
        self.state == 2 || self.state == 3
    }
}

/// The linear-algebra stages' pipelines.
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
                &["setup", "start", "product", "update", "finish"],
            )?,
            vector: WgStage::new(
                context,
                "vector",
                &vector_bindings(),
                &["negate_gradient", "use_gradient", "save", "offset", "scale", "dots", "compose"],
            )?,
        })
    }
}

/// The model's fixed buffers.
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
    rest: wgpu::Buffer,
}

/// The PCG loop's own vectors, partial sums and scalars; `p` and the scalars ping-pong.
struct PcgBuffers {
    r: wgpu::Buffer,
    z: wgpu::Buffer,
    p: [wgpu::Buffer; 2],
    ap: wgpu::Buffer,
    inverse_diagonal: wgpu::Buffer,
    residual_partials: wgpu::Buffer,
    curvature_partials: wgpu::Buffer,
    scalars: [wgpu::Buffer; 2],
}

/// Bind groups 1-3 of each stage, and group 0 (the recording's parameter arena).
struct Groups {
    params: [wgpu::BindGroup; 4],
    gather: Vec<wgpu::BindGroup>,
    gather_aux: Vec<wgpu::BindGroup>,
    assemble: Vec<wgpu::BindGroup>,
    /// Assembly into the damping matrix.
    damping: Vec<wgpu::BindGroup>,
    /// By parity of the CG iteration: which `p` and scalars are read and which written.
    pcg: [Vec<wgpu::BindGroup>; 2],
    vector: Vec<wgpu::BindGroup>,
}

/// Buffers of the linear-algebra stages for one model.
///
/// Positions on the device (the iterate, the step's start and target, the auxiliary and saved
/// vectors) are displacements from the rest shape. f32 quantizes absolute positions of ~1 m
/// to ~6e-8 m, which shape gradients of ~20/m turn into strain noise of ~1e-6 and a gradient
/// noise floor far above Newton's tolerances; displacements of centimetres are stored ~20x
/// finer. The host converts in f64 on the way in and out, and `positions` holds rest + x for
/// drawing.
pub struct GpuLinear {
    vertex_count: usize,
    /// The rest positions in f64, for converting.
    rest: Vec<[f64; 3]>,
    tet_count: u32,
    spring_count: u32,
    block_count: usize,
    model: ModelBuffers,
    pcg: PcgBuffers,
    pub(crate) x: wgpu::Buffer,
    pub(crate) x_start: wgpu::Buffer,
    target: wgpu::Buffer,
    pub(crate) aux: wgpu::Buffer,
    x_saved: wgpu::Buffer,
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
    /// The Newton system's right-hand side, `-grad G`.
    rhs: wgpu::Buffer,
    /// Rest + x, for drawing.
    positions: wgpu::Buffer,
    /// The Newton direction: PCG's solution, or `-grad G`.
    direction: wgpu::Buffer,
    gather_partials: wgpu::Buffer,
    dot_partials: wgpu::Buffer,
    groups: Groups,
    /// CG iterations recorded in the current solve (the parity of the ping-pong).
    cg_recorded: u32,
}

fn bind(context: &GpuContext, stage: &WgStage, by_group: &[&[&wgpu::Buffer]]) -> Vec<wgpu::BindGroup> {
    (1..stage.group_count())
        .map(|g| stage.bind_group(context, g, by_group.get(g - 1).copied().unwrap_or(&[])))
        .collect()
}

fn to_f32(values: &[f64]) -> Vec<f32> {
    values.iter().map(|&v| v as f32).collect()
}

impl GpuLinear {
    /// Buffers for `model`: masses, pins, colliders and its incidence lists.
    pub fn for_model(
        context: &GpuContext,
        stages: &WgLinear,
        recording: &Recording,
        model: &crate::model::Model,
    ) -> GpuLinear {
        let c = context;
        let n = model.vertex_count();
        let corner_count = 4 * model.tets.len() + 2 * model.springs.len();
        let element_block_count = 10 * model.tets.len() + 3 * model.springs.len();
        let topology = Topology::new(model);
        let block_count = topology.block_count();
        let masses: Vec<f32> = model.masses.iter().map(|&m| m as f32).collect();
        let pinned: Vec<u32> = model.pinned.iter().map(|&p| p as u32).collect();
        let colliders: Vec<GpuCollider> = model.colliders.iter().map(GpuCollider::new).collect();
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
            rest: c.storage("rest", &to_f32(model.rest.as_flattened())),
        };
        let vector = |label: &str| c.scratch::<f32>(label, 3 * n);
        let partial_count = n.div_ceil(WORKGROUP as usize);
        let pcg = PcgBuffers {
            r: vector("r"),
            z: vector("z"),
            p: [vector("p even"), vector("p odd")],
            ap: vector("ap"),
            inverse_diagonal: vector("inverse_diagonal"),
            residual_partials: c.scratch::<[f32; 2]>("residual partials", partial_count),
            curvature_partials: c.scratch::<f32>("curvature partials", partial_count),
            scalars: [
                c.scratch::<PcgStatus>("pcg scalars even", 1),
                c.scratch::<PcgStatus>("pcg scalars odd", 1),
            ],
        };
        let mut linear = GpuLinear {
            vertex_count: n,
            rest: model.rest.clone(),
            tet_count: model.tets.len() as u32,
            spring_count: model.springs.len() as u32,
            block_count,
            model: model_buffers,
            pcg,
            x: vector("x"),
            x_start: vector("x_start"),
            target: vector("target"),
            aux: vector("aux"),
            x_saved: vector("x_saved"),
            corner_gradients: c.scratch::<f32>("corner_gradients", 3 * corner_count),
            element_blocks: c.scratch::<f32>("element_blocks", 9 * element_block_count),
            gradient: vector("gradient"),
            vertex_blocks: c.scratch::<f32>("vertex_blocks", 9 * n),
            blocks: c.scratch::<f32>("blocks", 9 * block_count),
            anchor_offsets: c.scratch::<u32>("anchor_offsets", n + 1),
            anchors: c.scratch::<[f32; 4]>("anchors", 1),
            anchor_capacity: 1,
            damping_blocks: None,
            placeholder: c.scratch::<f32>("placeholder", 1),
            rhs: vector("rhs"),
            positions: c.storage("positions", &to_f32(model.rest.as_flattened())),
            direction: vector("direction"),
            gather_partials: c.scratch::<[f32; 4]>("gather partials", partial_count),
            dot_partials: c.scratch::<[f32; 4]>("dot partials", partial_count),
            groups: Groups {
                params: [
                    recording.param_group(c, &stages.gather),
                    recording.param_group(c, &stages.assemble),
                    recording.param_group(c, &stages.pcg),
                    recording.param_group(c, &stages.vector),
                ],
                gather: Vec::new(),
                gather_aux: Vec::new(),
                assemble: Vec::new(),
                damping: Vec::new(),
                pcg: [Vec::new(), Vec::new()],
                vector: Vec::new(),
            },
            cg_recorded: 0,
        };
        linear.bind_groups(context, stages);
        linear
    }

    /// (Re)builds the bind groups over the current handle and damping buffers.
    fn bind_groups(&mut self, c: &GpuContext, stages: &WgLinear) {
        let m = &self.model;
        let model_group: [&wgpu::Buffer; 8] = [
            &m.masses,
            &m.pinned,
            &m.corner_offsets,
            &m.corners,
            &m.colliders,
            &m.row_offsets,
            &m.columns,
            &m.rest,
        ];
        let damping = self.damping_blocks.as_ref().unwrap_or(&self.placeholder);
        let outputs =
            [&self.corner_gradients, &self.gradient, &self.vertex_blocks, &self.gather_partials, damping];
        let (offsets, anchors) = (&self.anchor_offsets, &self.anchors);
        let groups = &mut self.groups;
        groups.gather = bind(
            c,
            &stages.gather,
            &[&model_group, &[&self.x, &self.x_start, &self.target, offsets, anchors], &outputs],
        );
        groups.gather_aux = bind(
            c,
            &stages.gather,
            &[&model_group, &[&self.aux, &self.aux, &self.aux, offsets, anchors], &outputs],
        );
        let pattern: [&wgpu::Buffer; 5] =
            [&m.pinned, &m.row_offsets, &m.columns, &m.source_offsets, &m.block_sources];
        groups.assemble = bind(
            c,
            &stages.assemble,
            &[&pattern, &[], &[&self.element_blocks, &self.vertex_blocks, damping, &self.blocks]],
        );
        groups.damping = match &self.damping_blocks {
            Some(damping) => bind(
                c,
                &stages.assemble,
                &[&pattern, &[], &[&self.element_blocks, &self.vertex_blocks, &self.placeholder, damping]],
            ),
            None => Vec::new(),
        };
        let b = &self.pcg;
        groups.pcg = [0, 1].map(|parity| {
            let (p_in, p_out) = (&b.p[parity], &b.p[1 - parity]);
            let (s_in, s_out) = (&b.scalars[parity], &b.scalars[1 - parity]);
            bind(
                c,
                &stages.pcg,
                &[
                    &[&m.row_offsets, &m.columns, &m.diagonal],
                    &[],
                    &[
                        &self.blocks,
                        &self.rhs,
                        &self.direction,
                        &b.r,
                        &b.z,
                        p_in,
                        p_out,
                        &b.ap,
                        &b.inverse_diagonal,
                        &b.residual_partials,
                        &b.curvature_partials,
                        s_in,
                        s_out,
                        &self.gather_partials,
                    ],
                ],
            )
        });
        groups.vector = bind(
            c,
            &stages.vector,
            &[
                &[],
                &[],
                &[
                    &self.x,
                    &self.x_saved,
                    &self.direction,
                    &self.gradient,
                    &self.rhs,
                    &self.dot_partials,
                    &m.rest,
                    &self.positions,
                ],
            ],
        );
    }

    fn workgroups(&self) -> u32 {
        (self.vertex_count as u32).div_ceil(WORKGROUP)
    }

    /// The number of per-workgroup partial sums of a pass over the vertices.
    pub fn partial_count(&self) -> usize {
        self.workgroups() as usize
    }

    /// Uploads the handle springs, grouped by vertex.
    pub fn write_anchors(
        &mut self,
        context: &GpuContext,
        stages: &WgLinear,
        recording: &mut Recording,
        anchors: &[Anchor],
    ) {
        let grouped = Anchors::new(self.vertex_count, anchors);
        let offsets = if grouped.offsets.is_empty() {
            vec![0u32; self.vertex_count + 1]
        } else {
            grouped.offsets.clone()
        };
        let springs: Vec<[f32; 4]> =
            grouped.springs.iter().map(|(k, p)| [p.x as f32, p.y as f32, p.z as f32, *k as f32]).collect();
        if springs.len() > self.anchor_capacity {
            // Work recorded with the old buffers must run before their groups are replaced.
            recording.submit(context);
            self.anchor_capacity = springs.len().next_power_of_two();
            self.anchors = context.scratch::<[f32; 4]>("anchors", self.anchor_capacity);
            self.bind_groups(context, stages);
        }
        recording.upload(context, &self.anchor_offsets, bytemuck::cast_slice(&offsets));
        recording.upload(context, &self.anchors, bytemuck::cast_slice(&springs));
    }

    /// Records the step's lagged damping matrix `D = element_scale K + diag(A_v)`, `K` the
    /// element blocks the last element pass left (left out when `element_scale` is 0) and
    /// `A_v` the per-vertex blocks (row-major, none when empty).
    pub fn build_damping(
        &mut self,
        context: &GpuContext,
        stages: &WgLinear,
        recording: &mut Recording,
        element_scale: f64,
        vertex_damping: &[[f64; 9]],
    ) -> Result<()> {
        if self.damping_blocks.is_none() {
            recording.submit(context);
            self.damping_blocks = Some(context.scratch::<f32>("damping_blocks", 9 * self.block_count));
            self.bind_groups(context, stages);
        }
        let per_vertex = if vertex_damping.is_empty() {
            vec![0.0f32; 9 * self.vertex_count]
        } else {
            to_f32(vertex_damping.as_flattened())
        };
        recording.upload(context, &self.vertex_blocks, bytemuck::cast_slice(&per_vertex));
        let params = AssembleParams {
            vertex_count: self.vertex_count as u32,
            element_scale: element_scale as f32,
            damped: 0,
            tet_count: self.tet_count,
            spring_count: self.spring_count,
        };
        let offset = recording.params(context, &params)?;
        let groups: Vec<&wgpu::BindGroup> = self.groups.damping.iter().collect();
        let (params, w) = (&self.groups.params[1], self.workgroups());
        recording.dispatch(context, stages.assemble.kernel("main"), params, offset, &groups, w);
        Ok(())
    }

    /// Records `gather` at `at`.
    pub fn gather(
        &self,
        context: &GpuContext,
        stages: &WgLinear,
        recording: &mut Recording,
        params: &GatherParams,
        at: Positions,
    ) -> Result<()> {
        let offset = recording.params(context, params)?;
        let groups = if at == Positions::Iterate { &self.groups.gather } else { &self.groups.gather_aux };
        let groups: Vec<&wgpu::BindGroup> = groups.iter().collect();
        let param_group = &self.groups.params[0];
        recording.dispatch(
            context,
            stages.gather.kernel("main"),
            param_group,
            offset,
            &groups,
            self.workgroups(),
        );
        Ok(())
    }

    /// Stages the gather's partial sums: per workgroup (vertex energy, |grad|^2, force
    /// scale, noise magnitude).
    pub fn stage_gather_partials(&self, context: &GpuContext, recording: &mut Recording) -> Result<Staged> {
        recording.stage(context, &self.gather_partials, 16 * self.partial_count() as u64)
    }

    /// Records `assemble`: the Newton matrix from the element and vertex blocks, plus the
    /// lagged damping matrix when `damped`.
    pub fn assemble(
        &self,
        context: &GpuContext,
        stages: &WgLinear,
        recording: &mut Recording,
        damped: bool,
    ) -> Result<()> {
        let params = AssembleParams {
            vertex_count: self.vertex_count as u32,
            element_scale: 1.0,
            damped: (damped && self.damping_blocks.is_some()) as u32,
            tet_count: self.tet_count,
            spring_count: self.spring_count,
        };
        let offset = recording.params(context, &params)?;
        let groups: Vec<&wgpu::BindGroup> = self.groups.assemble.iter().collect();
        let param_group = &self.groups.params[1];
        recording.dispatch(
            context,
            stages.assemble.kernel("main"),
            param_group,
            offset,
            &groups,
            self.workgroups(),
        );
        Ok(())
    }

    /// Records the start of a PCG solve of `H d = rhs` into the direction buffer.
    pub fn pcg_start(
        &mut self,
        context: &GpuContext,
        stages: &WgLinear,
        recording: &mut Recording,
        params: &PcgParams,
    ) -> Result<()> {
        self.cg_recorded = 0;
        let offset = recording.params(context, params)?;
        let groups: Vec<&wgpu::BindGroup> = self.groups.pcg[0].iter().collect();
        let (param_group, w) = (&self.groups.params[2], self.workgroups());
        recording.dispatch(context, stages.pcg.kernel("setup"), param_group, offset, &groups, w);
        recording.dispatch(context, stages.pcg.kernel("start"), param_group, offset, &groups, 1);
        Ok(())
    }

    /// Records `iterations` more CG iterations (each does nothing once the solve has
    /// stopped) and the `finish` that settles the status; returns where the status will be.
    pub fn pcg_iterations(
        &mut self,
        context: &GpuContext,
        stages: &WgLinear,
        recording: &mut Recording,
        params: &PcgParams,
        iterations: u32,
    ) -> Result<Staged> {
        let offset = recording.params(context, params)?;
        let (param_group, w) = (&self.groups.params[2], self.workgroups());
        for _ in 0..iterations {
            let groups: Vec<&wgpu::BindGroup> =
                self.groups.pcg[(self.cg_recorded % 2) as usize].iter().collect();
            recording.dispatch(context, stages.pcg.kernel("product"), param_group, offset, &groups, w);
            recording.dispatch(context, stages.pcg.kernel("update"), param_group, offset, &groups, w);
            self.cg_recorded += 1;
        }
        let parity = (self.cg_recorded % 2) as usize;
        let groups: Vec<&wgpu::BindGroup> = self.groups.pcg[parity].iter().collect();
        recording.dispatch(context, stages.pcg.kernel("finish"), param_group, offset, &groups, w);
        // `finish` writes the scalars the next iteration would write.
        recording.stage(context, &self.pcg.scalars[1 - parity], std::mem::size_of::<PcgStatus>() as u64)
    }

    /// Records one `vector` entry point with `alpha`.
    pub fn vector(
        &self,
        context: &GpuContext,
        stages: &WgLinear,
        recording: &mut Recording,
        entry: &'static str,
        alpha: f64,
    ) -> Result<()> {
        let params = VectorParams { vertex_count: self.vertex_count as u32, alpha: alpha as f32 };
        let offset = recording.params(context, &params)?;
        let threads = if entry == "dots" { self.vertex_count } else { 3 * self.vertex_count };
        let groups: Vec<&wgpu::BindGroup> = self.groups.vector.iter().collect();
        let workgroups = (threads as u32).div_ceil(WORKGROUP);
        recording.dispatch(
            context,
            stages.vector.kernel(entry),
            &self.groups.params[3],
            offset,
            &groups,
            workgroups,
        );
        Ok(())
    }

    /// Records the dots `(g.d, d.d, g.g)` of the gradient and the direction and stages their
    /// per-workgroup partials.
    pub fn dots(&self, context: &GpuContext, stages: &WgLinear, recording: &mut Recording) -> Result<Staged> {
        self.vector(context, stages, recording, "dots", 0.0)?;
        recording.stage(context, &self.dot_partials, 16 * self.partial_count() as u64)
    }

    /// `positions - rest` in f32.
    fn displacements(&self, positions: &[[f64; 3]]) -> Vec<f32> {
        positions.iter().zip(&self.rest).flat_map(|(p, r)| [0, 1, 2].map(|c| (p[c] - r[c]) as f32)).collect()
    }

    /// Uploads positions into one of the position buffers (as displacements).
    pub fn write(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        which: Positions,
        values: &[[f64; 3]],
    ) {
        let buffer = if which == Positions::Iterate { &self.x } else { &self.aux };
        recording.upload(context, buffer, bytemuck::cast_slice(&self.displacements(values)));
    }

    /// Uploads the step's start and inertial target.
    pub fn write_step(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        start: &[[f64; 3]],
        target: &[[f64; 3]],
    ) {
        for (buffer, values) in [(&self.x_start, start), (&self.target, target)] {
            recording.upload(context, buffer, bytemuck::cast_slice(&self.displacements(values)));
        }
    }

    /// Reads the iterate's positions.
    pub fn read_iterate(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        out: &mut [[f64; 3]],
    ) -> Result<()> {
        let u: Vec<f32> = recording.read_buffer(context, &self.x, 3 * self.vertex_count)?;
        for ((o, u), r) in out.iter_mut().zip(u.chunks_exact(3)).zip(&self.rest) {
            *o = [0, 1, 2].map(|c| r[c] + u[c] as f64);
        }
        Ok(())
    }

    /// The positions for drawing (3 f32 per vertex), as of the last `vector("compose")`.
    pub fn positions(&self) -> &wgpu::Buffer {
        &self.positions
    }

    /// The gradient's buffer (3 floats per vertex).
    pub fn gradient(&self) -> &wgpu::Buffer {
        &self.gradient
    }

    /// The Newton direction's buffer (3 floats per vertex).
    pub fn direction(&self) -> &wgpu::Buffer {
        &self.direction
    }

    /// The number of stored 3x3 blocks.
    pub fn block_count(&self) -> usize {
        self.block_count
    }

    /// The vertex count.
    pub fn vertex_count(&self) -> usize {
        self.vertex_count
    }
}

/// Uploads that stand in for stages a test wants to isolate.
#[cfg(test)]
impl GpuLinear {
    pub fn write_positions(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        x: &[[f64; 3]],
        start: &[[f64; 3]],
        target: &[[f64; 3]],
    ) {
        self.write(context, recording, Positions::Iterate, x);
        self.write_step(context, recording, start, target);
    }

    /// Uploads corner gradients given in the CPU twin's order (3 floats per slot).
    pub fn write_corner_gradients(&self, context: &GpuContext, recording: &mut Recording, values: &[f32]) {
        let (nt, ns) = (self.tet_count as usize, self.spring_count as usize);
        let mut laid_out = vec![0.0f32; values.len()];
        for (entry, &value) in values.iter().enumerate() {
            laid_out[super::element::corner_entry(entry / 3, entry % 3, nt, ns)] = value;
        }
        recording.upload(context, &self.corner_gradients, bytemuck::cast_slice(&laid_out));
    }

    /// Uploads element blocks given in the CPU twin's order (9 floats per block).
    pub fn write_element_blocks(&self, context: &GpuContext, recording: &mut Recording, values: &[f32]) {
        let (nt, ns) = (self.tet_count as usize, self.spring_count as usize);
        let mut laid_out = vec![0.0f32; values.len()];
        for (entry, &value) in values.iter().enumerate() {
            laid_out[super::element::block_entry(entry / 9, entry % 9, nt, ns)] = value;
        }
        recording.upload(context, &self.element_blocks, bytemuck::cast_slice(&laid_out));
    }

    pub fn write_blocks(&self, context: &GpuContext, recording: &mut Recording, values: &[f32]) {
        recording.upload(context, &self.blocks, bytemuck::cast_slice(values));
    }

    pub fn write_rhs(&self, context: &GpuContext, recording: &mut Recording, values: &[[f64; 3]]) {
        recording.upload(context, &self.rhs, bytemuck::cast_slice(&to_f32(values.as_flattened())));
    }

    pub fn vertex_blocks(&self) -> &wgpu::Buffer {
        &self.vertex_blocks
    }

    pub fn blocks(&self) -> &wgpu::Buffer {
        &self.blocks
    }
}
