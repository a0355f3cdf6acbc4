//! What the GPU tests share: the one context, seeded random states, the CPU reference of a
//! linearization, and `Rig`, one model's buffers and a recording to drive single stages.
//! Without an adapter these tests skip with a printed reason, unless LIVELY_REQUIRE_GPU=1
//! (as in CI, with the lavapipe software adapter), where a missing adapter is a failure.

use std::sync::Arc;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::buffers::GpuBuffers;
use super::gather::GatherParams;
use super::recording::Recording;
use super::{GpuContext, WgStages};
use crate::backend::cpu::element;
use crate::backend::cpu::tests::mixed_model;
use crate::material::{Material, Projection, RotationSearch};
use crate::model::Model;
use crate::objective::Node;

/// The context these tests share (one device per process).
pub(crate) fn context() -> Option<Arc<GpuContext>> {
    static SHARED: std::sync::OnceLock<Option<Arc<GpuContext>>> = std::sync::OnceLock::new();
    SHARED.get_or_init(|| fresh_context().map(Arc::new)).clone()
}

/// A context of its own, for a test that changes it.
pub(crate) fn fresh_context() -> Option<GpuContext> {
    match GpuContext::new() {
        Ok(context) => Some(context),
        Err(e) if std::env::var("LIVELY_REQUIRE_GPU").as_deref() == Ok("1") => {
            panic!("LIVELY_REQUIRE_GPU=1 but no GPU is usable: {e}")
        }
        Err(e) => {
            eprintln!("skipping GPU test: {e} (set LIVELY_REQUIRE_GPU=1 to make this a failure)");
            None
        }
    }
}

pub(crate) fn random_state(model: &Model, seed: u64) -> (Vec<[f64; 3]>, Vec<[f64; 3]>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut jitter = |p: &[f64; 3], s: f64| std::array::from_fn(|c| p[c] + rng.random_range(-s..s));
    let start: Vec<[f64; 3]> = model.rest.iter().map(|p| jitter(p, 0.01)).collect();
    let x: Vec<[f64; 3]> = start.iter().map(|p| jitter(p, 0.01)).collect();
    (x, start)
}

/// Largest |gpu - cpu| relative to the largest |cpu| entry, with its index.
pub(crate) fn worst(gpu: &[f32], cpu: &[f64]) -> (f64, usize) {
    assert_eq!(gpu.len(), cpu.len());
    let scale = cpu.iter().fold(f64::MIN_POSITIVE, |a, b| a.max(b.abs()));
    gpu.iter()
        .zip(cpu)
        .enumerate()
        .map(|(i, (g, c))| ((*g as f64 - c).abs() / scale, i))
        .fold((0.0, 0), |a, e| if e.0 > a.0 { e } else { a })
}

/// AVF's two quadrature nodes: every stage must handle two.
pub(crate) const NODES: [Node; 2] =
    [Node { weight: 2.0 / 3.0, theta: 0.5 }, Node { weight: 1.0 / 12.0, theta: 1.0 }];

/// A model for the linear-algebra stages: the mixed bar and springs with colliders of every
/// shape.
pub(crate) fn linear_model(material: Material) -> Arc<Model> {
    Arc::new(mixed_model(material))
}

/// The CPU reference of one linearization: corner gradients, element blocks, gathered
/// gradient, vertex blocks and sums, assembled matrix.
pub(crate) struct Reference {
    pub corners: Vec<[f64; 3]>,
    pub element_blocks: Vec<[f64; 9]>,
    pub gradient: Vec<[f64; 3]>,
    pub vertex_blocks: Vec<[f64; 9]>,
    pub sums: (f64, f64, f64),
    pub vertex_energy: f64,
    pub blocks: Vec<[f64; 9]>,
    pub target: Vec<[f64; 3]>,
}

impl Reference {
    /// The same linearization in the axes of each vertex's part (`Frame`), as the device
    /// holds it where the parts are turned; the target and the sums stay the world's.
    pub fn in_part_axes(&self, model: &Model, buffers: &GpuBuffers) -> Reference {
        use glam::{DMat3, DVec3};
        let turns = buffers.turns();
        let turn = |v: u32| turns.turn(v as usize);
        let vector = |v: u32, a: &[f64; 3]| (turn(v).transpose() * DVec3::from(*a)).to_array();
        let block = |v: u32, b: &[f64; 9]| {
            let r = turn(v);
            (r.transpose() * DMat3::from_cols_array(b).transpose() * r).transpose().to_cols_array()
        };
        // Each corner's vertex, and a vertex of each element block's element and matrix row:
        // the vertices of one element or row share a part.
        let corners = model.tets.iter().flat_map(|t| t.to_vec()).chain(model.springs.iter().flat_map(|s| *s));
        let elements =
            (model.tets.iter().flat_map(|t| [t[0]; 10])).chain(model.springs.iter().flat_map(|s| [s[0]; 3]));
        let row_offsets = crate::backend::topology::Topology::new(model).row_offsets;
        let rows = (0..model.vertex_count() as u32).flat_map(|v| {
            std::iter::repeat_n(v, (row_offsets[v as usize + 1] - row_offsets[v as usize]) as usize)
        });
        let vertices = 0..model.vertex_count() as u32;
        Reference {
            corners: corners.zip(&self.corners).map(|(v, a)| vector(v, a)).collect(),
            element_blocks: elements.zip(&self.element_blocks).map(|(v, b)| block(v, b)).collect(),
            gradient: vertices.clone().zip(&self.gradient).map(|(v, a)| vector(v, a)).collect(),
            vertex_blocks: vertices.zip(&self.vertex_blocks).map(|(v, b)| block(v, b)).collect(),
            blocks: rows.zip(&self.blocks).map(|(v, b)| block(v, b)).collect(),
            target: self.target.clone(),
            sums: self.sums,
            vertex_energy: self.vertex_energy,
        }
    }
}

pub(crate) const H: f64 = 1.0 / 30.0;

pub(crate) fn reference(
    model: &Model,
    x: &[[f64; 3]],
    start: &[[f64; 3]],
    projection: Projection,
) -> Reference {
    use crate::backend::cpu::{assemble, gather};
    let topology = crate::backend::topology::Topology::new(model);
    let target: Vec<[f64; 3]> = start.iter().map(|p| [p[0] + 0.01, p[1] - 0.02, p[2]]).collect();
    let mut corners = vec![[0.0; 3]; 4 * model.tets.len() + 2 * model.springs.len()];
    let mut element_blocks = vec![[0.0; 9]; 10 * model.tets.len() + 3 * model.springs.len()];
    let search = RotationSearch::Converged;
    element::derivatives(
        model,
        x,
        start,
        &NODES,
        Some(projection),
        None,
        search,
        &mut corners,
        &mut element_blocks,
    );
    let anchors = crate::backend::topology::Anchors::default();
    let terms = gather::VertexTerms {
        model,
        start,
        target: &target,
        nodes: &NODES,
        inv_h2: 1.0 / (H * H),
        anchors: &anchors,
        colliders: &model.colliders,
    };
    let n = model.vertex_count();
    let (mut gradient, mut vertex_blocks) = (vec![[0.0; 3]; n], vec![[0.0; 9]; n]);
    let everything = gather::Gathered::Everything;
    let sums = gather::gradient(
        &terms,
        &topology,
        &corners,
        x,
        projection,
        everything,
        &mut gradient,
        &mut vertex_blocks,
    );
    let vertex_energy = gather::vertex_energy(&terms, x);
    let mut blocks = vec![[0.0; 9]; topology.block_count()];
    assemble::matrix(model, &topology, &element_blocks, Some(&vertex_blocks), None, &mut blocks);
    Reference { corners, element_blocks, gradient, vertex_blocks, sums, vertex_energy, blocks, target }
}

pub(crate) fn gather_params(model: &Model, projection: Projection) -> GatherParams {
    let w: f64 = NODES.iter().map(|q| q.weight * q.theta).sum();
    GatherParams {
        vertex_count: model.vertex_count() as u32,
        node_count: 2,
        inv_h2: (1.0 / (H * H)) as f32,
        end_weight: w as f32,
        gravity_x: model.gravity[0] as f32,
        gravity_y: model.gravity[1] as f32,
        gravity_z: model.gravity[2] as f32,
        weight_0: NODES[0].weight as f32,
        theta_0: NODES[0].theta as f32,
        weight_1: NODES[1].weight as f32,
        theta_1: NODES[1].theta as f32,
        collider_count: model.colliders.len() as u32,
        exact_hessian: (projection == Projection::None) as u32,
        damped: 0,
        derivatives: 1,
        tet_count: model.tets.len() as u32,
        spring_count: model.springs.len() as u32,
        projection: model.contact.is_projection() as u32,
        ..GatherParams::default()
    }
    .with_contact(model.contact)
}

/// The mixed bar under an IPC barrier of reach 0.04 m, and a random state (iterate, start)
/// whose free vertices are all outside the colliders: those closer than 1 cm, or inside, are
/// pushed out along the normal to 1-3 cm, inside the barrier's reach.
pub(crate) fn barrier_model(seed: u64) -> (Arc<Model>, Vec<[f64; 3]>, Vec<[f64; 3]>) {
    let mut model = mixed_model(Material::stable_neo_hookean(2e4, 0.4));
    model.contact = crate::contact::ContactModel::Barrier { distance: 0.04, stiffness: 50.0 };
    let (mut x, start) = random_state(&model, seed);
    let mut rng = ChaCha8Rng::seed_from_u64(seed + 1);
    for _ in 0..8 {
        for (v, p) in x.iter_mut().enumerate() {
            for collider in &model.colliders {
                let at = glam::DVec3::from(*p);
                let d = collider.distance(at);
                if !model.pinned[v] && d.phi < 0.01 {
                    let out = at + d.normal.normalize() * (rng.random_range(0.01..0.03) - d.phi);
                    *p = out.to_array();
                }
            }
        }
    }
    let free_distances = || {
        x.iter()
            .enumerate()
            .filter(|&(v, _)| !model.pinned[v])
            .flat_map(|(_, p)| model.colliders.iter().map(move |c| c.distance(glam::DVec3::from(*p)).phi))
    };
    let nearest = free_distances().fold(f64::INFINITY, f64::min);
    assert!(nearest > 0.005, "a free vertex is {nearest} m from a collider");
    let within = free_distances().filter(|&phi| phi < 0.04).count();
    assert!(within >= 8, "only {within} vertex-collider pairs within the barrier's reach");
    (Arc::new(model), x, start)
}

/// Puts every third free vertex on its nearest smooth collider (not a cuboid: these states put
/// vertices on its edges, where the resting normal is either face's and f32 and f64 round to
/// different ones).
pub(crate) fn rest_on_colliders(model: &Model, x: &mut [[f64; 3]]) {
    for (_, p) in x.iter_mut().enumerate().filter(|(v, _)| v % 3 == 0 && !model.pinned[*v]) {
        let at = glam::DVec3::from(*p);
        let smooth =
            model.colliders.iter().filter(|c| !matches!(c.shape, crate::contact::Shape::Cuboid { .. }));
        let nearest = smooth.map(|c| c.distance(at)).min_by(|a, b| a.phi.total_cmp(&b.phi));
        let d = nearest.expect("a smooth collider");
        *p = (at - d.normal.normalize() * d.phi).to_array();
    }
}

pub(crate) fn to_f32(values: &[f64]) -> Vec<f32> {
    values.iter().map(|&v| v as f32).collect()
}

/// One model's buffers, bound stages and a recording: for driving single stages.
pub(crate) struct Rig {
    pub context: Arc<GpuContext>,
    pub stages: Arc<WgStages>,
    pub buffers: GpuBuffers,
    pub rec: Recording,
    pub model: Arc<Model>,
}

impl Rig {
    pub fn new(context: &Arc<GpuContext>, model: &Arc<Model>) -> Rig {
        let stages = context.stages().unwrap();
        let mut buffers = GpuBuffers::new(context, model, super::element::partial_count(model));
        let mut rec = Recording::new(context, 1 << 16);
        buffers.pack(context, &mut rec);
        Rig { context: context.clone(), stages, buffers, rec, model: model.clone() }
    }

    /// Uploads `data` into the buffer called `name` of group `group`.
    pub fn upload<T: bytemuck::Pod>(&mut self, group: u32, name: &str, data: &[T]) {
        let buffer = self.buffers.resolve(group, name).unwrap();
        self.rec.upload(&self.context, buffer, bytemuck::cast_slice(data));
    }

    /// Reads `len` floats of the buffer called `name` of group `group`.
    pub fn read(&mut self, group: u32, name: &str, len: usize) -> Vec<f32> {
        let buffer = self.buffers.resolve(group, name).unwrap();
        self.rec.read_buffer(&self.context, buffer, len).unwrap()
    }

    /// Moves every part's frame by a few centimetres, each its own way: positions written
    /// after are displacements from there, which the shaders must add back (`Frame`).
    pub fn move_frame(&mut self) {
        self.pose_frame(false);
    }

    /// Moves every part's frame as `move_frame` does and turns it about an axis of its own,
    /// by 0.5 to 2.5 rad: displacements written after are in the part's axes.
    pub fn turn_frame(&mut self) {
        self.pose_frame(true);
    }

    fn pose_frame(&mut self, turn: bool) {
        use glam::{DQuat, DVec3};
        let poses = (0..self.buffers.part_count())
            .map(|p| {
                let offset = DVec3::new(0.03, -0.05, 0.02 + 0.01 * p as f64);
                let axis = DVec3::new(0.3, 1.0, -0.4 + 0.5 * p as f64).normalize();
                let turn = if turn { DQuat::from_axis_angle(axis, 0.5 + p as f64) } else { DQuat::IDENTITY };
                super::buffers::PartPose::rounded(offset, turn)
            })
            .collect();
        self.buffers.set_poses(&self.context, &mut self.rec, poses);
    }

    /// World vectors (directions) in the axes of each vertex's part, in f32.
    pub fn in_part_axes(&self, world: &[[f64; 3]]) -> Vec<f32> {
        let turns = self.buffers.turns();
        let turned = |v: usize| turns.turn(v).transpose() * glam::DVec3::from(world[v]);
        (0..world.len()).flat_map(|v| turned(v).as_vec3().to_array()).collect()
    }

    /// Uploads the iterate, the step's start and its target (as displacements).
    pub fn write_positions(&mut self, x: &[[f64; 3]], start: &[[f64; 3]], target: &[[f64; 3]]) {
        for (name, values) in [("x", x), ("x_start", start), ("target_positions", target)] {
            let displacements = self.buffers.displacements(values);
            self.upload(2, name, &displacements);
        }
    }

    /// Uploads corner gradients given in the CPU twin's order (3 floats per slot).
    pub fn upload_corner_gradients(&mut self, values: &[f32]) {
        let (nt, ns) = (self.buffers.tet_count, self.buffers.spring_count);
        let mut laid_out = vec![0.0f32; super::element::corner_floats(nt, ns)];
        for (entry, &value) in values.iter().enumerate() {
            laid_out[super::element::corner_entry(entry / 3, entry % 3, nt, ns)] = value;
        }
        self.upload(3, "corner_gradients", &laid_out);
    }

    /// Uploads element blocks given in the CPU twin's order (9 floats per block).
    pub fn upload_element_blocks(&mut self, values: &[f32]) {
        let (nt, ns) = (self.buffers.tet_count, self.buffers.spring_count);
        let mut laid_out = vec![0.0f32; super::element::block_floats(nt, ns)];
        for (entry, &value) in values.iter().enumerate() {
            laid_out[super::element::block_entry(entry / 9, entry % 9, nt, ns)] = value;
        }
        self.upload(3, "element_blocks", &laid_out);
    }
}

/// The objective, the dissipation, the potential and its gradient at `x` agree between the
/// backends, each in the step both began, to f32 round-off (a missing term is O(1)); the GPU
/// kept no error.
pub(crate) fn assert_energies_match(
    cpu: &mut crate::backend::cpu::CpuBackend,
    gpu: &mut super::GpuBackend,
    x: &[[f64; 3]],
) {
    use crate::backend::Stages;
    let relative = |a: f64, b: f64| (a - b).abs() / b.abs().max(f64::MIN_POSITIVE);
    let objective = (gpu.objective(), cpu.objective());
    let dissipation = (gpu.dissipation(), cpu.dissipation());
    let potential = (gpu.potential(x), cpu.potential(x));
    println!("objective {objective:?}, dissipation {dissipation:?}, potential {potential:?}");
    assert!(relative(objective.0, objective.1) < 1e-5, "objective {objective:?}");
    assert!(relative(dissipation.0, dissipation.1) < 1e-4, "dissipation {dissipation:?}");
    assert!(relative(potential.0, potential.1) < 1e-5, "potential {potential:?}");
    let (mut gpu_force, mut cpu_force) = (vec![[0.0; 3]; x.len()], vec![[0.0; 3]; x.len()]);
    gpu.potential_gradient(x, &mut gpu_force);
    cpu.potential_gradient(x, &mut cpu_force);
    let gpu_force: Vec<f32> = gpu_force.as_flattened().iter().map(|&v| v as f32).collect();
    let (f_error, f_at) = worst(&gpu_force, cpu_force.as_flattened());
    assert!(f_error < 1e-5, "potential gradient entry {f_at} off by {f_error:e}");
    // A stabilized step's blends, evaluated together on the GPU: the potential and the
    // dissipation at each, and the iterate left at the last. (Deformations: a translation
    // of the whole body lies in the Rayleigh stiffness's null space, where f32 sums of its
    // large entries cancel; the blends of two solutions differ by far less than that.)
    let mut rng = ChaCha8Rng::seed_from_u64(77);
    let blends: Vec<Vec<[f64; 3]>> = (1..=3)
        .map(|k| {
            let size = 0.002 * k as f64;
            x.iter().map(|p| std::array::from_fn(|c| p[c] + rng.random_range(-size..size))).collect()
        })
        .collect();
    let points: Vec<&[[f64; 3]]> = blends.iter().map(|b| b.as_slice()).collect();
    let (on_gpu, on_cpu) = (gpu.energies_at(&points), cpu.energies_at(&points));
    println!("energies at blends {on_gpu:?} / {on_cpu:?}");
    for (k, (g, c)) in on_gpu.iter().zip(&on_cpu).enumerate() {
        assert!(relative(g.0, c.0) < 1e-5, "blend {k}: potential {g:?} against {c:?}");
        assert!(
            relative(g.1, c.1) < 1e-4 || (g.1 - c.1).abs() < 1e-9,
            "blend {k}: dissipation {g:?} against {c:?}"
        );
    }
    let mut left = vec![[0.0; 3]; x.len()];
    gpu.read_iterate(&mut left);
    let (l_error, _) =
        worst(&left.as_flattened().iter().map(|&v| v as f32).collect::<Vec<_>>(), blends[2].as_flattened());
    assert!(l_error < 1e-6, "the iterate is not the last blend: {l_error:e}");
    assert!(gpu.take_error().is_none());
}
