//! Stage `gather` (`shaders/gather.wgsl`), the GPU twin of `backend/cpu/gather.rs`: the vertex
//! terms (inertia, gravity, collider penalties, handles, lagged damping) and the gather of
//! element corner gradients into vertex gradients, with per-workgroup sums (vertex energy,
//! |grad|^2, force scale, squared noise floor).

use encase::ShaderType;

use super::Positions;
use super::buffers::GpuBuffers;
use super::context::GpuContext;
use super::recording::{Recording, Staged};
use super::stage::{Bound, WgStage};
use crate::error::Result;
use crate::model::Model;
use glam::DVec3;

/// `GatherParams::rhs`: the right-hand side.
pub const RHS: u32 = 1;
/// `GatherParams::rhs`: the right-hand side and its vertex terms' part (`vertex_rhs` in the
/// shader).
pub const RHS_AND_VERTEX_TERMS: u32 = 2;

/// `GatherParams::damped`: the lagged damping's vertex blocks (from their factors), linear
/// terms and couplings.
pub const DAMPED_VERTICES: u32 = 1;
/// `GatherParams::damped`: those and Rayleigh's damping matrix (`damping_blocks`).
pub const DAMPED_RAYLEIGH: u32 = 2;

/// Parameters of `shaders/gather.wgsl`.
#[derive(Clone, Copy, Debug, Default, ShaderType)]
pub struct GatherParams {
    pub vertex_count: u32,
    pub node_count: u32,
    pub inv_h2: f32,
    /// `sum_q c_q theta_q`: the weight of the barrier, which acts at the end positions.
    pub end_weight: f32,
    pub gravity_x: f32,
    pub gravity_y: f32,
    pub gravity_z: f32,
    pub weight_0: f32,
    pub theta_0: f32,
    pub weight_1: f32,
    pub theta_1: f32,
    pub collider_count: u32,
    /// The penalty's stiffness (0: no penalty), and 1 for the cubic one.
    pub contact_stiffness: f32,
    pub cubic: u32,
    /// 1: keep the colliders' curvature term (exact Hessian); 0: drop it (projected).
    pub exact_hessian: u32,
    /// The lagged damping: 0 none, [`DAMPED_VERTICES`] or [`DAMPED_RAYLEIGH`].
    pub damped: u32,
    /// 1: gather and write the gradient and vertex blocks; 0: the energy alone.
    pub derivatives: u32,
    /// A linearization's gather, which also writes Newton's right-hand side `-grad G`
    /// ([`RHS`]), and its vertex terms' part for the split along the translations of a model
    /// with free parts ([`RHS_AND_VERTEX_TERMS`]); 0 for neither.
    pub rhs: u32,
    pub tet_count: u32,
    pub spring_count: u32,
    /// The barrier's activation distance and stiffness (stiffness 0: no barrier).
    pub barrier_distance: f32,
    pub barrier_stiffness: f32,
    /// 1: the projection model's pressed vertices lose the gradient's normal part (and are
    /// written to `pressed`).
    pub projection: u32,
    /// Self-contact's boundary vertex count (0: none), the record set its last detection
    /// wrote, and 1 where the step's friction records are part of the damping.
    pub surface_count: u32,
    pub contact_set: u32,
    pub friction: u32,
    /// An energy-only gather of a batch of positions (`members` > 1, set from
    /// `Positions::Batch`): member `j` reads its displacements from `j * vertex_count` on and
    /// writes its partials from `j` times one gather's on.
    pub members: u32,
}

impl GatherParams {
    /// These parameters with the contact law `law`'s (penalty or barrier) set.
    pub fn with_contact(mut self, law: crate::contact::ContactModel) -> GatherParams {
        use crate::contact::ContactModel;
        let (penalty, cubic, barrier) = match law {
            ContactModel::Penalty { stiffness } => (stiffness, false, (0.0, 0.0)),
            ContactModel::CubicPenalty { stiffness } => (stiffness, true, (0.0, 0.0)),
            ContactModel::Barrier { distance, stiffness } => (0.0, false, (distance, stiffness)),
            ContactModel::Projection => (0.0, false, (0.0, 0.0)),
        };
        self.contact_stiffness = penalty as f32;
        self.cubic = cubic as u32;
        (self.barrier_distance, self.barrier_stiffness) = (barrier.0 as f32, barrier.1 as f32);
        self
    }
}

/// A collider as `shaders/shared/collider.wgsl` reads it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct GpuCollider {
    a: [f32; 4],
    b: [f32; 4],
    kind: u32,
    /// A grid's first sample in the `sdf_values` buffer.
    offset: u32,
    pad: [u32; 2],
}

impl GpuCollider {
    /// The samples of the colliders' signed-distance grids one after another, and each
    /// collider's first sample among them (0 for the analytic shapes).
    pub fn samples(colliders: &[crate::contact::Collider]) -> (Vec<u32>, Vec<f32>) {
        let mut values = Vec::new();
        let first = colliders
            .iter()
            .map(|collider| {
                let first = values.len() as u32;
                if let crate::contact::Shape::Sdf { grid, .. } = &collider.shape {
                    values.extend(grid.values().iter().map(|&v| v as f32));
                }
                first
            })
            .collect();
        (first, values)
    }

    /// The colliders as each part's frame sees them (part-major): moved by minus the part's
    /// offset (`origins`), in f64, and only then rounded. The shaders place a vertex at
    /// `turn z` from its part's offset, a number of the part's size, where `offset + turn z`
    /// would round to the world's: 1 mm 10 km out, which a stiff penalty turns into forces
    /// (a cube on a capsule 100 m out ended 3 mm from the CPU's; 2e-7 m at the origin).
    pub fn pack(
        colliders: &[crate::contact::Collider],
        first_samples: &[u32],
        origins: &[DVec3],
    ) -> Vec<GpuCollider> {
        origins
            .iter()
            .flat_map(|origin| {
                colliders.iter().zip(first_samples).map(|(collider, &first)| {
                    GpuCollider::packed(&collider.translated((-*origin).to_array()), first)
                })
            })
            .collect()
    }

    fn packed(collider: &crate::contact::Collider, first_sample: u32) -> GpuCollider {
        use crate::contact::Shape;
        let f = |v: [f64; 3], w: f64| [v[0] as f32, v[1] as f32, v[2] as f32, w as f32];
        let (kind, a, b) = match &collider.shape {
            Shape::Plane { normal, offset } => {
                let length = DVec3::from(*normal).length();
                (0, f(normal.map(|c| c / length), offset / length), [0.0; 4])
            }
            Shape::Sphere { center, radius } => (1, f(*center, *radius), [0.0; 4]),
            Shape::Cuboid { center, half_extents } => (2, f(*center, 0.0), f(*half_extents, 0.0)),
            Shape::Capsule { a, b, radius } => (3, f(*a, *radius), f(*b, 0.0)),
            Shape::Sdf { grid, offset } => {
                // The sample counts travel as the bits of b.xyz.
                let counts = grid.counts().map(|n| f32::from_bits(n as u32));
                let origin: [f64; 3] = std::array::from_fn(|c| grid.origin()[c] + offset[c]);
                (4, f(origin, grid.spacing()), [counts[0], counts[1], counts[2], 0.0])
            }
        };
        GpuCollider { a, b, kind, offset: first_sample, pad: [0; 2] }
    }
}

/// The gather stage's pipeline.
pub struct WgGather(pub(crate) WgStage);

/// The gather bound to one model's buffers.
pub struct GatherGroups {
    param: super::recording::ParamGroup,
    iterate: Bound,
    aux: Bound,
    batch: Bound,
    workgroups: u32,
}

impl WgGather {
    pub fn new(context: &GpuContext) -> Result<WgGather> {
        Ok(WgGather(WgStage::new(context, "gather")?))
    }

    /// Binds the stage to `buffers`; the auxiliary groups read `aux` as the iterate, the
    /// step's start and its target (the potential at a given state).
    pub fn bind(
        &self,
        context: &GpuContext,
        recording: &Recording,
        buffers: &GpuBuffers,
    ) -> Result<GatherGroups> {
        self.bind_corners(context, recording, buffers, "corner_gradients")
    }

    /// [`bind`](Self::bind), gathering the corner gradients of the buffer `corners` (the mixed
    /// solver keeps two sets).
    pub fn bind_corners(
        &self,
        context: &GpuContext,
        recording: &Recording,
        buffers: &GpuBuffers,
        corners: &str,
    ) -> Result<GatherGroups> {
        let resolve = |group: u32, name: &str| match (group, name) {
            (3, "corner_gradients") => buffers.scratch.get(corners),
            _ => buffers.resolve(group, name),
        };
        let aux = |group: u32, name: &str| match (group, name) {
            (2, "x" | "x_start" | "target_positions") => buffers.state.get("aux"),
            _ => resolve(group, name),
        };
        let batch = |group: u32, name: &str| match (group, name) {
            (2, "x") => buffers.scratch.get("batch"),
            _ => resolve(group, name),
        };
        Ok(GatherGroups {
            param: recording.param_group(context, &self.0),
            iterate: self.0.bind(context, resolve)?,
            aux: self.0.bind(context, aux)?,
            batch: self.0.bind(context, batch)?,
            workgroups: buffers.vertex_workgroups(),
        })
    }

    /// Records the gather at `at`.
    pub fn queue(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        groups: &GatherGroups,
        params: &GatherParams,
        at: Positions,
    ) -> Result<()> {
        let members = at.members() as u32;
        debug_assert!(members == 1 || params.derivatives == 0, "a batch gathers energies alone");
        let offset = recording.params(context, &GatherParams { members, ..*params })?;
        let bound = match at {
            Positions::Iterate => &groups.iterate,
            Positions::Aux => &groups.aux,
            Positions::Batch(_) => &groups.batch,
        };
        let workgroups = members * groups.workgroups;
        recording.dispatch_batch(
            context,
            self.0.kernel("main"),
            (&groups.param, offset),
            bound,
            workgroups,
            members,
        );
        Ok(())
    }
}

/// The host's share of the gathered inertia energy, per unit of `1/h^2`:
/// `sum_v 1/2 m_v |y_v - x_n,v|^2` over the free vertices, in f64. The gather measures
/// inertia from the start (`shaders/gather.wgsl`, `vertex`) and leaves this out, so that
/// a target far from the start costs the f32 sums no resolution.
pub fn target_inertia(model: &Model, start: &[[f64; 3]], target: &[[f64; 3]]) -> f64 {
    crate::math::sum_per_vertex(start.len(), |v| {
        let aim = DVec3::from(target[v]) - DVec3::from(start[v]);
        if model.pinned[v] { 0.0 } else { 0.5 * model.masses[v] * aim.length_squared() }
    })
}

/// Stages the gather's partial sums (4 floats per workgroup).
pub fn stage_partials(
    context: &GpuContext,
    recording: &mut Recording,
    buffers: &GpuBuffers,
) -> Result<Staged> {
    stage_batch_partials(context, recording, buffers, 1)
}

/// Stages the partial sums of the last batch of `members` positions, one member's after
/// another.
pub fn stage_batch_partials(
    context: &GpuContext,
    recording: &mut Recording,
    buffers: &GpuBuffers,
    members: usize,
) -> Result<Staged> {
    let partials = buffers.scratch.named("gather_partials");
    recording.stage(context, partials, 16 * (members as u64) * buffers.vertex_workgroups() as u64)
}

#[cfg(test)]
mod tests {
    use super::stage_partials;
    use crate::backend::gpu::Positions;
    use crate::backend::gpu::assemble::Target;
    use std::sync::Arc;

    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use crate::backend::gpu::GpuContext;
    use crate::backend::gpu::test_support::{
        NODES, Reference, Rig, barrier_model, context, gather_params, linear_model, random_state, reference,
        rest_on_colliders, to_f32, worst,
    };
    use crate::material::{Material, Projection};
    use crate::model::Model;

    /// Gather and assembly from the CPU twin's element outputs, against the CPU twins, with
    /// the penalty on colliders of every shape.
    #[test]
    fn gather_and_assemble_match_their_cpu_twins() {
        let Some(context) = context() else { return };
        let model = linear_model(Material::stable_neo_hookean(2e4, 0.4));
        let (x, start) = random_state(&model, 12);
        let cpu = reference(&model, &x, &start, Projection::None);
        check_gather_and_assemble(&context, &model, &x, &start, &cpu, Frame::Rest);
    }

    /// The same with every part's displacements measured from a moved frame, and from a
    /// moved and turned one: gravity and the colliders see the positions the poses give back,
    /// and the gradient and blocks they give are in the parts' axes.
    #[test]
    fn gather_matches_its_cpu_twin_in_moved_and_turned_frames() {
        let Some(context) = context() else { return };
        let model = linear_model(Material::stable_neo_hookean(2e4, 0.4));
        for (frame, seed) in [(Frame::Moved, 15), (Frame::Turned, 16)] {
            let (x, start) = random_state(&model, seed);
            let cpu = reference(&model, &x, &start, Projection::None);
            check_gather_and_assemble(&context, &model, &x, &start, &cpu, frame);
        }
    }

    /// The lagged damping in the gather, against the CPU twin's `1/2 dx^T D dx - b . dx + c`
    /// (`CpuBackend::damping_term`): Rayleigh's matrix assembled on the device from the element
    /// blocks, random PSD vertex blocks (every other one a sticking friction block
    /// `c (I - n n^T)` of c up to 1e6) uploaded as their factors, and random linear terms. The
    /// gradient, the vertex blocks (which take the damping's), the vertex terms' right-hand
    /// side (which leaves Rayleigh's part out) and the energy agree to f32 rounding.
    #[test]
    fn the_lagged_damping_gathers_as_its_cpu_twin() {
        use crate::backend::cpu::assemble;
        use glam::{DMat3, DVec3};
        let Some(context) = context() else { return };
        let model = linear_model(Material::stable_neo_hookean(2e4, 0.4));
        let (mut x, start) = random_state(&model, 21);
        for (v, _) in model.pinned.iter().enumerate().filter(|(_, pinned)| **pinned) {
            x[v] = start[v];
        }
        let cpu = reference(&model, &x, &start, Projection::Psd);
        let n = model.vertex_count();
        let mut rng = ChaCha8Rng::seed_from_u64(22);
        let vertex: Vec<DMat3> = (0..n)
            .map(|v| {
                let mut random = || {
                    DVec3::new(
                        rng.random_range(-1.0..1.0),
                        rng.random_range(-1.0..1.0),
                        rng.random_range(-1.0..1.0),
                    )
                };
                if v % 2 == 0 {
                    let normal = random().normalize();
                    (DMat3::IDENTITY
                        - DMat3::from_cols(normal * normal.x, normal * normal.y, normal * normal.z))
                        * 1e6
                        * random().x.abs()
                } else {
                    let a = DMat3::from_cols(random(), random(), random()) * 30.0;
                    a * a.transpose()
                }
            })
            .collect();
        let linear: Vec<[f64; 4]> =
            (0..n).map(|_| std::array::from_fn(|_| rng.random_range(-2.0..2.0))).collect();
        // The CPU twin: Rayleigh's plain stiffness matrix, the vertex blocks, the linear terms.
        let topology = crate::backend::topology::Topology::new(&model);
        let scaled: Vec<[f64; 9]> = cpu.element_blocks.iter().map(|b| b.map(|c| 0.01 * c)).collect();
        let mut rayleigh = vec![[0.0; 9]; topology.block_count()];
        assemble::matrix(&model, &topology, &scaled, None, None, &mut rayleigh);
        let dx: Vec<[f64; 3]> =
            x.iter().zip(&start).map(|(a, b)| std::array::from_fn(|c| a[c] - b[c])).collect();
        let mut rayleigh_force = vec![[0.0; 3]; n];
        crate::backend::cpu::hessian_product::apply(&topology, &rayleigh, &dx, &mut rayleigh_force);
        let (mut gradient, mut vertex_blocks, mut energy) =
            (cpu.gradient.clone(), cpu.vertex_blocks.clone(), cpu.vertex_energy);
        let mut own: Vec<[f64; 3]> = cpu.gradient.iter().map(|g| g.map(|c| -c)).collect();
        let corners = model.tets.iter().flat_map(|t| t.to_vec()).chain(model.springs.iter().flat_map(|s| *s));
        for (v, force) in corners.zip(&cpu.corners) {
            (0..3).for_each(|c| own[v as usize][c] += force[c]);
        }
        for v in (0..n).filter(|&v| model.pinned[v]) {
            own[v] = [0.0; 3];
        }
        for v in (0..n).filter(|&v| !model.pinned[v]) {
            let d = DVec3::from(dx[v]);
            let b = DVec3::new(linear[v][0], linear[v][1], linear[v][2]);
            let vertex_force = vertex[v] * d - b;
            let force = DVec3::from(rayleigh_force[v]) + vertex_force;
            energy += 0.5 * d.dot(DVec3::from(rayleigh_force[v]) + vertex[v] * d) - b.dot(d) + linear[v][3];
            gradient[v] = (DVec3::from(gradient[v]) + force).to_array();
            own[v] = (DVec3::from(own[v]) - vertex_force).to_array();
            let block = crate::math::vec9(&vertex[v]);
            (0..9).for_each(|k| vertex_blocks[v][k] += block[k]);
        }
        // The device: Rayleigh's matrix assembled from the same element blocks, the factors.
        let mut rig = Rig::new(&context, &model);
        assert!(rig.buffers.reserve_damping(&rig.context));
        rig.upload_element_blocks(&to_f32(scaled.as_flattened()));
        let groups = rig.stages.assemble.bind(&rig.context, &rig.rec, &rig.buffers).unwrap();
        let target = Target::Damping { element_scale: 1.0 };
        rig.stages.assemble.queue(&rig.context, &mut rig.rec, &groups, &rig.buffers, target).unwrap();
        let factors: Vec<f32> = vertex
            .iter()
            .flat_map(|d| crate::math::vec9(&crate::math::psd_factor(d)).map(|c| c as f32))
            .collect();
        rig.upload(3, "damping_vertex_factors", &factors);
        rig.upload(3, "damping_linear", &to_f32(linear.as_flattened()));
        rig.write_positions(&x, &start, &cpu.target);
        rig.upload_corner_gradients(&to_f32(cpu.corners.as_flattened()));
        rig.upload_element_blocks(&to_f32(cpu.element_blocks.as_flattened()));
        let gather = rig.stages.gather.bind(&rig.context, &rig.rec, &rig.buffers).unwrap();
        let params = super::GatherParams {
            rhs: super::RHS_AND_VERTEX_TERMS,
            damped: super::DAMPED_RAYLEIGH,
            ..gather_params(&model, Projection::Psd)
        };
        rig.stages.gather.queue(&rig.context, &mut rig.rec, &gather, &params, Positions::Iterate).unwrap();
        let staged = stage_partials(&rig.context, &mut rig.rec, &rig.buffers).unwrap();
        let partials: Vec<[f32; 4]> =
            bytemuck::pod_collect_to_vec(&rig.rec.read(&rig.context, &[staged]).unwrap()[0]);
        let weight: f64 = NODES.iter().map(|q| q.weight).sum();
        let gathered = partials.iter().map(|p| p[0] as f64).sum::<f64>()
            + weight * rig.buffers.reference_gravity_energy(model.gravity)
            + params.inv_h2 as f64 * super::target_inertia(&model, &start, &cpu.target);
        // Inputs rounded to f32 and short f32 sums, as in `check_gather_and_assemble`; a
        // missing or doubled term is off by O(1).
        let (g_error, g_at) = worst(&rig.read(3, "gradient", 3 * n), gradient.as_flattened());
        let (o_error, o_at) = worst(&rig.read(3, "vertex_rhs", 3 * n), own.as_flattened());
        let (v_error, v_at) = worst(&rig.read(3, "vertex_blocks", 9 * n), vertex_blocks.as_flattened());
        let e_error = (gathered - energy).abs() / energy.abs();
        println!(
            "damped gather: gradient {g_error:.1e}, vertex terms {o_error:.1e}, vertex blocks {v_error:.1e}, energy {e_error:.1e}"
        );
        assert!(g_error < 1e-5, "gradient entry {g_at} off by {g_error:e}");
        assert!(o_error < 1e-5, "vertex terms' right-hand side entry {o_at} off by {o_error:e}");
        assert!(v_error < 1e-5, "vertex block entry {v_at} off by {v_error:e}");
        assert!(e_error < 1e-4, "energy {gathered} against {energy}");
    }

    /// The same with the cubic level-set penalty.
    #[test]
    fn the_cubic_penalty_gathers_as_its_cpu_twin() {
        let Some(context) = context() else { return };
        let mut model = (*linear_model(Material::stable_neo_hookean(2e4, 0.4))).clone();
        model.contact = crate::contact::ContactModel::CubicPenalty { stiffness: 3e6 };
        let model = Arc::new(model);
        let (x, start) = random_state(&model, 12);
        let cpu = reference(&model, &x, &start, Projection::None);
        check_gather_and_assemble(&context, &model, &x, &start, &cpu, Frame::Rest);
    }

    /// The same under the IPC barrier, every free vertex outside the colliders and many
    /// within the barrier's reach, in the world's axes and in turned parts'.
    #[test]
    fn the_barrier_gathers_as_its_cpu_twin() {
        let Some(context) = context() else { return };
        let (model, x, start) = barrier_model(12);
        let cpu = reference(&model, &x, &start, Projection::None);
        for frame in [Frame::Rest, Frame::Turned] {
            check_gather_and_assemble(&context, &model, &x, &start, &cpu, frame);
        }
    }

    /// Under the projection model, with every third free vertex resting on a collider: the
    /// pressed ones lose the gradient's normal part and their matrix rows and columns are
    /// restricted, as by the CPU twins (`press_against_colliders`, `constrain_pressed`).
    #[test]
    fn the_projection_presses_as_its_cpu_twin() {
        let Some(context) = context() else { return };
        let (barrier, mut x, start) = barrier_model(13);
        let mut model = (*barrier).clone();
        model.contact = crate::contact::ContactModel::Projection;
        let model = Arc::new(model);
        rest_on_colliders(&model, &mut x);
        let mut cpu = reference(&model, &x, &start, Projection::None);
        let (mut pressed, mut pressing) = (Vec::new(), Vec::new());
        let squared = crate::backend::cpu::gather::press_against_colliders(
            &model.colliders,
            &model.pinned,
            &x,
            &mut cpu.gradient,
            &mut pressed,
            &mut pressing,
        );
        cpu.sums.0 = squared;
        let topology = crate::backend::topology::Topology::new(&model);
        crate::backend::cpu::assemble::constrain_pressed(&topology, &pressed, &mut cpu.blocks);
        let count = pressed.iter().filter(|p| p.is_some()).count();
        assert!(count >= 4, "only {count} vertices pressed");
        let mut rig = check_gather_and_assemble(&context, &model, &x, &start, &cpu, Frame::Rest);
        let gpu: Vec<f32> = rig.read(3, "pressed", 4 * x.len());
        for (v, (p, n)) in gpu.chunks_exact(4).zip(&pressed).enumerate() {
            assert_eq!(p[3] > 0.0, n.is_some(), "vertex {v}: pressed on one backend only");
            let force = (p[3] as f64 - pressing[v]).abs();
            assert!(
                force <= 1e-5 * pressing[v].max(1e-3),
                "vertex {v}: normal force {} vs {}",
                p[3],
                pressing[v]
            );
        }
        // The direction's normal part at the pressed vertices (`keep_pressed` of the contact
        // stage), on a random direction, against the CPU twin.
        let mut rng = ChaCha8Rng::seed_from_u64(14);
        let mut direction: Vec<[f64; 3]> =
            (0..x.len()).map(|_| std::array::from_fn(|_| rng.random_range(-1.0..1.0))).collect();
        rig.upload(3, "direction", &to_f32(direction.as_flattened()));
        let groups = rig.stages.contact.bind(&rig.context, &rig.rec, &rig.buffers).unwrap();
        let colliders = model.colliders.len();
        let (c, rec) = (&rig.context, &mut rig.rec);
        rig.stages.contact.queue(c, rec, &groups, &rig.buffers, "keep_pressed", colliders, 1.0).unwrap();
        assert!(crate::backend::cpu::gather::keep_pressed(&mut direction, &pressed));
        let (d_error, d_at) = worst(&rig.read(3, "direction", 3 * x.len()), direction.as_flattened());
        assert!(d_error < 1e-6, "direction entry {d_at} off by {d_error:e}");
        println!(
            "projection: {count} of {} vertices pressed on both; direction kept to {d_error:.1e}",
            x.len()
        );
    }

    /// A body 1 km from the origin gathers the energy, and the noise floor of `G`, that it
    /// gathers there: gravity at the reference positions is the host's (in f64), and only the
    /// terms of absolute positions (none here) count their noise from them. Summed from
    /// absolute positions, the energy carried 1.4e-2 J of f32 rounding (8e-8 J at the origin)
    /// and the floor was 4 700 times larger.
    #[test]
    fn a_far_body_gathers_as_at_the_origin() {
        let Some(context) = context() else { return };
        let mut near = (*linear_model(Material::stable_neo_hookean(2e4, 0.4))).clone();
        near.colliders.clear();
        let far_away = |p: &[f64; 3]| [p[0] + 700.0, p[1] + 1000.0, p[2] - 300.0];
        let mut far = near.clone();
        far.rest = near.rest.iter().map(far_away).collect();
        let (x, start) = random_state(&near, 16);
        let sums = |model: Model, moved: fn(&[f64; 3]) -> [f64; 3]| {
            let model = Arc::new(model);
            let (x, start): (Vec<_>, Vec<_>) =
                (x.iter().map(moved).collect(), start.iter().map(moved).collect());
            let cpu = reference(&model, &x, &start, Projection::None);
            let sums = gather_sums(&mut Rig::new(&context, &model), &model, &x, &start, &cpu, false);
            (sums[0] - cpu.vertex_energy, sums[3])
        };
        let (near_error, near_floor) = sums(near, |p| *p);
        let (far_error, far_floor) = sums(far, far_away);
        println!(
            "energy off by {near_error:.1e} / {far_error:.1e} J, noise floors {near_floor:.2e} / {far_floor:.2e}"
        );
        assert!(far_error.abs() <= 1e-6, "{far_error:e} J");
        assert!((far_floor - near_floor).abs() <= 1e-3 * near_floor, "{far_floor:e} vs {near_floor:e}");
    }

    /// The noise floor of `G` stays finite, and grows with the forces, where the forces and
    /// the displacements are far beyond a body's: a stiff bar's explicit guess 450 m out
    /// stretched it 4 500-fold (1e18 N). The floor's squares, unscaled, passed f32's range
    /// there: it came out infinite, every line search counted its step as flat, and the GPU's
    /// Newton solve 'converged' at its first iterate, 616 m from the CPU's. Here a 3.2e10 Pa
    /// body's iterate lies 450 m out (corner forces up to 1e7 N), and the corner forces are
    /// then scaled 1e10-fold: the floor grows with them (measured 0.994e10-fold; the vertex
    /// terms, unscaled, make the rest). Unscaled squares: 8e10 J, then infinite.
    #[test]
    fn the_noise_floor_stays_finite_at_huge_forces_far_out() {
        let Some(context) = context() else { return };
        let mut model = (*linear_model(Material::fixed_corotated(3.2e10, 0.2))).clone();
        model.colliders.clear();
        let model = Arc::new(model);
        let (x, start) = random_state(&model, 21);
        let far: Vec<[f64; 3]> = x.iter().map(|p| [p[0] + 450.0, p[1], p[2]]).collect();
        let floor = |scale: f64| {
            let mut cpu = reference(&model, &far, &start, Projection::None);
            cpu.corners.iter_mut().for_each(|f| *f = f.map(|c| c * scale));
            let largest = cpu.corners.iter().flatten().fold(0.0f64, |a, c| a.max(c.abs()));
            let sums = gather_sums(&mut Rig::new(&context, &model), &model, &far, &start, &cpu, false);
            (sums[3].sqrt(), largest)
        };
        let ((low, low_force), (high, high_force)) = (floor(1.0), floor(1e10));
        println!(
            "noise floors {low:.3e} J at forces up to {low_force:.1e} N, {high:.3e} J at {high_force:.1e} N"
        );
        assert!(high_force > 1e17, "the forces reach {high_force:e} N");
        assert!(high.is_finite() && low > 0.0, "noise floors {low:e} and {high:e}");
        let growth = high / low;
        assert!((growth / 1e10 - 1.0).abs() < 1e-2, "the floor grew {growth:e}-fold");
    }

    /// Gathers at `x` (from `start`, towards `cpu.target`) from the CPU twin's element
    /// outputs on `rig`, and assembles after when asked; the sums of the gather's partials,
    /// with the host's share of the vertex energy (gravity at the reference positions, the
    /// target's inertia) added to the first.
    fn gather_sums(
        rig: &mut Rig,
        model: &Model,
        x: &[[f64; 3]],
        start: &[[f64; 3]],
        cpu: &Reference,
        assemble: bool,
    ) -> [f64; 4] {
        rig.write_positions(x, start, &cpu.target);
        rig.upload_corner_gradients(&to_f32(cpu.corners.as_flattened()));
        rig.upload_element_blocks(&to_f32(cpu.element_blocks.as_flattened()));
        let gather = rig.stages.gather.bind(&rig.context, &rig.rec, &rig.buffers).unwrap();
        // With the right-hand side and its vertex terms' part.
        let params = super::GatherParams {
            rhs: super::RHS_AND_VERTEX_TERMS,
            ..gather_params(model, Projection::None)
        };
        rig.stages.gather.queue(&rig.context, &mut rig.rec, &gather, &params, Positions::Iterate).unwrap();
        let staged = stage_partials(&rig.context, &mut rig.rec, &rig.buffers).unwrap();
        if assemble {
            let groups = rig.stages.assemble.bind(&rig.context, &rig.rec, &rig.buffers).unwrap();
            let target = Target::Newton { rayleigh: false, constrained: model.contact.is_projection() };
            rig.stages.assemble.queue(&rig.context, &mut rig.rec, &groups, &rig.buffers, target).unwrap();
        }
        let partials: Vec<[f32; 4]> =
            bytemuck::pod_collect_to_vec(&rig.rec.read(&rig.context, &[staged]).unwrap()[0]);
        let mut sums: [f64; 4] =
            partials.iter().fold([0.0; 4], |acc, p| std::array::from_fn(|k| acc[k] + p[k] as f64));
        let weight: f64 = NODES.iter().map(|q| q.weight).sum();
        sums[0] += weight * rig.buffers.reference_gravity_energy(model.gravity)
            + params.inv_h2 as f64 * super::target_inertia(model, start, &cpu.target);
        sums
    }

    /// Where the rig measures the displacements from (`Rig::move_frame`, `Rig::turn_frame`).
    #[derive(Clone, Copy)]
    enum Frame {
        Rest,
        Moved,
        Turned,
    }

    fn check_gather_and_assemble(
        context: &Arc<GpuContext>,
        model: &Arc<Model>,
        x: &[[f64; 3]],
        start: &[[f64; 3]],
        cpu: &Reference,
        frame: Frame,
    ) -> Rig {
        let mut rig = Rig::new(context, model);
        match frame {
            Frame::Rest => {}
            Frame::Moved => rig.move_frame(),
            Frame::Turned => rig.turn_frame(),
        }
        let turned = cpu.in_part_axes(model, &rig.buffers);
        let cpu = &turned;
        let sums = gather_sums(&mut rig, model, x, start, cpu, true);
        let (n, slots) = (model.vertex_count(), rig.buffers.slot_count);
        // Inputs rounded to f32 (1e-7) and short f32 sums: measured 1.4e-6 of the largest
        // entry on lavapipe; 1e-5 leaves a margin, and a wrong term or slot is off by O(1).
        let (g_error, g_at) = worst(&rig.read(3, "gradient", 3 * n), cpu.gradient.as_flattened());
        assert!(g_error < 1e-5, "gradient entry {g_at} off by {g_error:e}");
        // b's vertex terms' part (the split's, `vertex_rhs`): the gradient less the elements'
        // forces, negated (zero at the pins), to the same bound.
        let mut own: Vec<[f64; 3]> = cpu.gradient.iter().map(|g| g.map(|c| -c)).collect();
        let corners = model.tets.iter().flat_map(|t| t.to_vec()).chain(model.springs.iter().flat_map(|s| *s));
        for (v, force) in corners.zip(&cpu.corners) {
            (0..3).for_each(|c| own[v as usize][c] += force[c]);
        }
        for (v, _) in model.pinned.iter().enumerate().filter(|(_, pinned)| **pinned) {
            own[v] = [0.0; 3];
        }
        let (o_error, o_at) = worst(&rig.read(3, "vertex_rhs", 3 * n), own.as_flattened());
        assert!(o_error < 1e-5, "vertex terms' right-hand side entry {o_at} off by {o_error:e}");
        // The sphere's curvature term divides by the distance to its center: a vertex 11 mm
        // from it, 0.3 m from the origin, carries ~30x the f32 rounding of its position
        // (measured 2.4e-6 on lavapipe). Inertia alone was exact to 1e-7; a wrong term is O(1).
        let (v_error, v_at) = worst(&rig.read(3, "vertex_blocks", 9 * n), cpu.vertex_blocks.as_flattened());
        assert!(v_error < 1e-5, "vertex block entry {v_at} off by {v_error:e}");
        let entries = rig.read(3, "blocks", 9 * slots);
        let assembled = rig.buffers.blocks_from_slots(&entries);
        let (b_error, b_at) = worst(&assembled, cpu.blocks.as_flattened());
        assert!(b_error < 1e-5, "assembled block entry {b_at} off by {b_error:e}");
        let relative = |a: f64, b: f64| (a - b).abs() / b.abs().max(f64::MIN_POSITIVE);
        // The energy and |g|^2 are sums over every vertex in f32: 1e-4 relative.
        assert!(
            relative(sums[0], cpu.vertex_energy) < 1e-4,
            "vertex energy {} vs {}",
            sums[0],
            cpu.vertex_energy
        );
        assert!(relative(sums[1], cpu.sums.0) < 1e-4, "|grad|^2 {} vs {}", sums[1], cpu.sums.0);
        assert!(relative(sums[2], cpu.sums.1) < 1e-4, "force scale {} vs {}", sums[2], cpu.sums.1);
        println!(
            "gather/assemble parity: gradient {g_error:.1e}, its vertex terms {o_error:.1e}, vertex blocks {v_error:.1e}, blocks {b_error:.1e}"
        );
        rig
    }
}
