//! Stage `self_contact` (`shaders/self_contact.wgsl`), the GPU twin of
//! `contact::self_contact`: on the device, the boundary
//! vertices inside other parts (or far parts of their own body), their nearest boundary points
//! and the penalty's terms, as coupling records (`shaders/shared/couplings.wgsl`) that the
//! gather and the PCG product read. The trees and each boundary vertex's neighbourhood are the
//! CPU twin's, uploaded once; the trees' boxes are refit on the device, one dispatch per depth.
//! The step's self-contact friction, lagged at its start, is uploaded as the third record set.

use encase::ShaderType;

use super::Positions;
use super::buffers::{GpuModel, GpuScratch};
use super::context::GpuContext;
use super::recording::Recording;
use super::stage::{Bound, WORKGROUP, WgStage};
use crate::error::Result;
use crate::model::Model;
use crate::objective::{Coupling, Node};

/// Floats per coupling record (six vec4s).
const RECORD_FLOATS: usize = 24;
/// The record sets: the Newton linearization's, other evaluations', the step's friction.
const SETS: usize = 3;
const FRICTION_SET: usize = 2;
/// A record with no contact (its first vertex).
const NO_VERTEX: u32 = u32::MAX;

/// Parameters of `shaders/self_contact.wgsl`.
#[derive(Clone, Copy, Debug, Default, ShaderType)]
pub struct SelfContactParams {
    pub vertex_count: u32,
    pub surface_count: u32,
    pub tet_node_count: u32,
    pub tree_node_count: u32,
    pub node_count: u32,
    pub weight_0: f32,
    pub theta_0: f32,
    pub weight_1: f32,
    pub theta_1: f32,
    pub stiffness: f32,
    /// The record set written: 0 for the Newton linearization, 1 for any other evaluation.
    pub record_set: u32,
    /// 1: list each record under its vertices (for the gradient and the product).
    pub link: u32,
    pub level_first: u32,
    pub level_count: u32,
}

/// What the stage knows of a model's self-contact besides its buffers.
#[derive(Clone, Debug, Default)]
pub struct SelfContactLayout {
    pub surface_count: usize,
    tet_node_count: u32,
    tree_node_count: u32,
    /// Per tree depth, deepest first: its nodes' run `[first, count]` in `tree_levels`.
    levels: Vec<[u32; 2]>,
    stiffness: f64,
}

/// The coupling buffers every stage that reads them binds, and the model's self-contact data
/// (placeholders without self-contact); the layout where the model has self-contact.
pub fn add_buffers(
    context: &GpuContext,
    model: &Model,
    m: &mut GpuModel,
    w: &mut GpuScratch,
) -> Option<SelfContactLayout> {
    let c = context;
    let n = model.vertex_count();
    let Some(contact) = model.self_collision.as_ref().filter(|s| !s.surface_vertices.is_empty()) else {
        m.set("surface_index", c.scratch::<u32>("surface_index", 1));
        w.set("coupling_records", c.scratch::<[f32; 4]>("coupling_records", 1));
        w.set("coupling_offsets", c.scratch::<u32>("coupling_offsets", 1));
        w.set("coupling_list", c.scratch::<u32>("coupling_list", 1));
        w.set("coupling_counts", c.scratch::<u32>("coupling_counts", 1));
        return None;
    };
    let surface = &contact.surface_vertices;
    let s = surface.len();
    let mut surface_index = vec![NO_VERTEX; n];
    for (i, &v) in surface.iter().enumerate() {
        surface_index[v as usize] = i as u32;
    }
    // Both trees in one node array, the triangle tree's after the tet tree's.
    let (tets, triangles) = (&contact.tet_tree, &contact.triangle_tree);
    let tet_links = tets.links();
    let tet_node_count = tet_links.len() as u32;
    let tet_primitives = tets.order().len() as u32;
    let links: Vec<[u32; 2]> = tet_links
        .into_iter()
        .chain(triangles.links().into_iter().map(|[first, count]| {
            if count > 0 { [first + tet_primitives, count] } else { [first + tet_node_count, 0] }
        }))
        .collect();
    let order: Vec<u32> = tets.order().iter().chain(triangles.order()).copied().collect();
    let depths: Vec<u32> = tets.depths().into_iter().chain(triangles.depths()).collect();
    let deepest = depths.iter().copied().max().unwrap_or(0);
    let mut tree_levels = Vec::with_capacity(links.len());
    let mut levels = Vec::new();
    for depth in (0..=deepest).rev() {
        let first = tree_levels.len() as u32;
        tree_levels.extend((0..links.len() as u32).filter(|&node| depths[node as usize] == depth));
        levels.push([first, tree_levels.len() as u32 - first]);
    }
    let surface_triangles: Vec<[u32; 4]> = contact.triangles.iter().map(|t| [t[0], t[1], t[2], 0]).collect();
    m.set("surface_index", c.storage("surface_index", &surface_index));
    m.set("surface_triangles", c.storage("surface_triangles", &surface_triangles));
    m.set("surface_vertices", c.storage("surface_vertices", surface));
    m.set("vertex_part", c.storage("vertex_part", &contact.part));
    m.set("tree_links", c.storage("tree_links", &links));
    m.set("tree_order", c.storage("tree_order", &order));
    m.set("tree_levels", c.storage("tree_levels", &tree_levels));
    m.set("neighbourhood_offsets", c.storage("neighbourhood_offsets", &contact.near_offsets));
    m.set("neighbourhood", c.storage("neighbourhood", &contact.near));
    // Boxes per quadrature node; records and lists per set.
    w.set("tree_boxes", c.scratch::<[f32; 4]>("tree_boxes", 2 * 2 * links.len()));
    w.set("coupling_records", c.scratch::<f32>("coupling_records", SETS * 2 * s * RECORD_FLOATS));
    w.set("coupling_offsets", c.scratch::<u32>("coupling_offsets", SETS * (n + 1)));
    w.set("coupling_list", c.scratch::<u32>("coupling_list", SETS * 8 * s));
    w.set("coupling_counts", c.scratch::<u32>("coupling_counts", n));
    Some(SelfContactLayout {
        surface_count: s,
        tet_node_count,
        tree_node_count: links.len() as u32,
        levels,
        stiffness: contact.settings.stiffness,
    })
}

/// The stage's pipelines.
pub struct WgSelfContact(pub(crate) WgStage);

/// The stage bound to one model's buffers, at the iterate and at the auxiliary positions.
pub struct SelfContactGroups {
    param: super::recording::ParamGroup,
    iterate: Bound,
    aux: Bound,
    layout: SelfContactLayout,
    vertex_count: u32,
}

impl WgSelfContact {
    pub fn new(context: &GpuContext) -> Result<WgSelfContact> {
        Ok(WgSelfContact(WgStage::new(context, "self_contact")?))
    }

    /// Binds the stage to `buffers` (the model's self-contact layout, `None` without).
    pub fn bind(
        &self,
        context: &GpuContext,
        recording: &Recording,
        buffers: &super::buffers::GpuBuffers,
    ) -> Result<Option<SelfContactGroups>> {
        let Some(layout) = buffers.self_contact.clone() else { return Ok(None) };
        let resolve = |group: u32, name: &str| buffers.resolve(group, name);
        let aux = |group: u32, name: &str| match (group, name) {
            (2, "x" | "x_start") => buffers.state.get("aux"),
            _ => buffers.resolve(group, name),
        };
        Ok(Some(SelfContactGroups {
            param: recording.param_group(context, &self.0),
            iterate: self.0.bind(context, resolve)?,
            aux: self.0.bind(context, aux)?,
            layout,
            vertex_count: buffers.vertex_count as u32,
        }))
    }

    /// Records the detection at `at` for `nodes` into record set `set`, listing the records
    /// under their vertices when `link` (the gather that follows reads and sorts the lists).
    #[allow(clippy::too_many_arguments)]
    pub fn queue(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        groups: &SelfContactGroups,
        at: Positions,
        nodes: &[Node],
        set: u32,
        link: bool,
    ) -> Result<()> {
        let layout = &groups.layout;
        let node = |q: usize| nodes.get(q).copied().unwrap_or(Node { weight: 0.0, theta: 0.0 });
        let base = SelfContactParams {
            vertex_count: groups.vertex_count,
            surface_count: layout.surface_count as u32,
            tet_node_count: layout.tet_node_count,
            tree_node_count: layout.tree_node_count,
            node_count: nodes.len() as u32,
            weight_0: node(0).weight as f32,
            theta_0: node(0).theta as f32,
            weight_1: node(1).weight as f32,
            theta_1: node(1).theta as f32,
            stiffness: layout.stiffness as f32,
            record_set: set,
            link: link as u32,
            level_first: 0,
            level_count: 0,
        };
        let bound = if at == Positions::Iterate { &groups.iterate } else { &groups.aux };
        let run =
            |recording: &mut Recording, entry: &'static str, params: SelfContactParams, threads: u32| {
                let offset = recording.params(context, &params)?;
                let workgroups = threads.div_ceil(WORKGROUP);
                recording.dispatch(context, self.0.kernel(entry), &groups.param, offset, bound, workgroups);
                Ok::<(), crate::Error>(())
            };
        for &[level_first, level_count] in &layout.levels {
            let params = SelfContactParams { level_first, level_count, ..base };
            run(recording, "refit", params, level_count * nodes.len() as u32)?;
        }
        let slots = base.node_count * base.surface_count;
        run(recording, "detect", base, slots)?;
        if link {
            run(recording, "scan", base, 1)?;
            run(recording, "fill", base, slots)?;
        }
        Ok(())
    }
}

/// Uploads the step's self-contact friction `couplings`, scaled by `weight`, as record set 2
/// with each vertex's list; false (and nothing uploaded) for none.
pub fn upload_friction(
    context: &GpuContext,
    recording: &mut Recording,
    buffers: &super::buffers::GpuBuffers,
    couplings: &[Coupling],
    weight: f64,
) -> bool {
    let Some(layout) = &buffers.self_contact else { return false };
    let (s, n) = (layout.surface_count, buffers.vertex_count);
    if couplings.is_empty() {
        return false;
    }
    // One contact per boundary vertex at the step's start: the set holds 2 S.
    debug_assert!(couplings.len() <= s, "{} friction couplings for {s} boundary vertices", couplings.len());
    let mut records = Vec::with_capacity(RECORD_FLOATS * couplings.len());
    let mut lists = vec![Vec::new(); n];
    for (k, coupling) in couplings.iter().enumerate() {
        records.extend(coupling.vertices.map(f32::from_bits));
        records.extend(coupling.coefficients.map(|c| c as f32));
        records.extend([0.0; 4]);
        // Symmetric: columns are rows.
        for row in coupling.block.chunks_exact(3) {
            records.extend([row[0], row[1], row[2], 0.0].map(|b| (b * weight) as f32));
        }
        for &v in &coupling.vertices {
            lists[v as usize].push(k as u32);
        }
    }
    let mut offsets = Vec::with_capacity(n + 1);
    offsets.push(0u32);
    for list in &lists {
        offsets.push(offsets.last().copied().unwrap_or(0) + list.len() as u32);
    }
    let list: Vec<u32> = lists.concat();
    let set = FRICTION_SET as u64;
    let scratch = &buffers.scratch;
    let at = |name: &str, bytes: u64, data: &[u8], recording: &mut Recording| {
        recording.upload_at(context, scratch.named(name), bytes, data)
    };
    at(
        "coupling_records",
        set * (2 * s * RECORD_FLOATS * 4) as u64,
        bytemuck::cast_slice(&records),
        recording,
    );
    at("coupling_offsets", set * (4 * (n + 1)) as u64, bytemuck::cast_slice(&offsets), recording);
    at("coupling_list", set * (8 * s * 4) as u64, bytemuck::cast_slice(&list), recording);
    true
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::{NO_VERTEX, RECORD_FLOATS};
    use crate::backend::gpu::Positions;
    use crate::backend::gpu::test_support::{NODES, Rig, context};
    use crate::contact::self_contact::{SelfContact, at_node};
    use crate::material::Material;
    use crate::mesh::TetMesh;
    use crate::model::Model;
    use crate::{SelfCollision, Simulation};

    /// Two 3x3x3-cell cubes of one model overlapping by 3 cm across a face and 1-2 cm in the
    /// other directions, one corner of the first pinned, and a random state near rest.
    fn overlapping_cubes(seed: u64) -> (Arc<Model>, Vec<[f64; 3]>, Vec<[f64; 3]>) {
        let cube = |shift: [f64; 3]| {
            let mesh = TetMesh::bar([3, 3, 3], [0.2, 0.2, 0.2]);
            let moved = mesh.positions().iter().map(|p| std::array::from_fn(|i| p[i] + shift[i])).collect();
            TetMesh::new(moved, mesh.tets().to_vec()).unwrap()
        };
        let material = Material::stable_neo_hookean(1e5, 0.3);
        let sim = Simulation::builder()
            .tet_body(cube([0.0; 3]), material.clone(), 1000.0)
            .tet_body(cube([0.17, 0.013, 0.021]), material, 1000.0)
            .pin(|p| p.iter().all(|&c| c.abs() < 1e-9))
            .self_collision(SelfCollision { stiffness: 1e7, friction: 0.5 })
            .build()
            .unwrap();
        let model = sim.model().clone();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut jitter = |p: &[f64; 3]| std::array::from_fn(|c| p[c] + rng.random_range(-0.004..0.004));
        let start: Vec<[f64; 3]> = model.rest.iter().map(&mut jitter).collect();
        let x: Vec<[f64; 3]> = start.iter().map(&mut jitter).collect();
        (Arc::new(model), x, start)
    }

    /// Detection at two quadrature nodes of random states against the CPU twin: the same
    /// contacts, the same triangles, and the records' terms to f32 round-off; every record
    /// listed under each of its vertices. The second state's parts have moved frames.
    #[test]
    fn detection_and_records_match_the_cpu_twin() {
        let Some(context) = context() else { return };
        for seed in [3, 4] {
            let (model, x, start) = overlapping_cubes(seed);
            let contact: &SelfContact = model.self_collision.as_ref().unwrap();
            let mut rig = Rig::new(&context, &model);
            if seed == 4 {
                // Each cube's displacements from a frame moved its own way.
                rig.move_frame();
            }
            rig.write_positions(&x, &start, &start);
            let groups = rig.stages.self_contact.bind(&rig.context, &rig.rec, &rig.buffers).unwrap().unwrap();
            let queued = rig.stages.self_contact.queue(
                &rig.context,
                &mut rig.rec,
                &groups,
                Positions::Iterate,
                &NODES,
                1,
                true,
            );
            queued.unwrap();
            let (s, n) = (contact.surface_vertices.len(), model.vertex_count());
            let records = rig.read(3, "coupling_records", 2 * 2 * s * RECORD_FLOATS);
            let records = &records[2 * s * RECORD_FLOATS..];
            let offsets: Vec<u32> = rig
                .rec
                .read_buffer(&context, rig.buffers.scratch.named("coupling_offsets"), 2 * (n + 1))
                .unwrap();
            let offsets = &offsets[n + 1..];
            let list: Vec<u32> =
                rig.rec.read_buffer(&context, rig.buffers.scratch.named("coupling_list"), 16 * s).unwrap();
            let list = &list[8 * s..];
            let k = contact.settings.stiffness;
            let (mut found, mut worst) = (0, 0.0f64);
            for (q, node) in NODES.iter().enumerate() {
                let at = at_node(&x, &start, node);
                let cpu = contact.contacts(&model, &at);
                for (i, &v) in contact.surface_vertices.iter().enumerate() {
                    let record = &records[(q * s + i) * RECORD_FLOATS..][..RECORD_FLOATS];
                    let vertices: [u32; 4] = std::array::from_fn(|j| record[j].to_bits());
                    let Some(c) = cpu.iter().find(|c| c.vertices[0] == v) else {
                        assert_eq!(vertices[0], NO_VERTEX, "node {q}: vertex {v} has no contact on the CPU");
                        continue;
                    };
                    found += 1;
                    assert_eq!(vertices, c.vertices, "node {q}: vertex {v}'s nearest triangle");
                    // The CPU's terms of this contact: u 2 Phi' w theta, w Phi and the block.
                    let u = c.offset;
                    let d = u.length_squared();
                    let root = (d + 1e-15f64).sqrt();
                    let first = k * (root + d / (2.0 * root));
                    let second = k * (1.0 / root - d / (4.0 * root * root * root));
                    let g = u * (2.0 * first * node.weight * node.theta);
                    let energy = node.weight * k * d * root;
                    let outer = crate::math::outer(u, u);
                    let block = (c.curvature * (2.0 * first) + outer * (4.0 * second))
                        * (node.weight * node.theta * node.theta);
                    let relative = |gpu: f32, cpu: f64, scale: f64| (gpu as f64 - cpu).abs() / scale;
                    for j in 0..4 {
                        let expected =
                            if model.pinned[c.vertices[j] as usize] { 0.0 } else { c.coefficients[j] };
                        worst = worst.max(relative(record[4 + j], expected, 1.0));
                    }
                    for j in 0..3 {
                        worst = worst.max(relative(record[8 + j], g[j], g.length()));
                        for r in 0..3 {
                            worst = worst.max(relative(
                                record[12 + 4 * r + j],
                                block.row(r)[j],
                                block.abs().to_cols_array().iter().fold(0.0, |a: f64, b| a.max(*b)),
                            ));
                        }
                    }
                    worst = worst.max(relative(record[11], energy, energy));
                }
            }
            // Every record under each of its vertices, each list in any order.
            for v in 0..n {
                let mut listed: Vec<u32> = list[offsets[v] as usize..offsets[v + 1] as usize].to_vec();
                listed.sort_unstable();
                let expected: Vec<u32> = (0..2 * s as u32)
                    .filter(|&r| {
                        (0..4).any(|j| records[r as usize * RECORD_FLOATS + j].to_bits() == v as u32)
                    })
                    .collect();
                assert_eq!(listed, expected, "vertex {v}'s records");
            }
            println!(
                "self-contact detection, seed {seed}: {found} contacts, worst relative difference {worst:.1e}"
            );
            assert!(found >= 20, "only {found} contacts");
            // The depth u is a difference of f32 positions of ~0.3 m (3e-8 m) over depths of
            // millimetres: ~1e-5 in u, twice that in Phi' and Phi.
            assert!(worst < 1e-4, "records differ from the CPU's by {worst:e}");
        }
    }

    /// A whole linearization with self-contact at two quadrature nodes, its friction and
    /// Rayleigh damping, against the CPU backend: the gradient and the Newton direction (whose
    /// product applies the couplings between vertices), the objective, the dissipation, the
    /// potential and its gradient.
    #[test]
    fn linearization_and_direction_match_the_cpu_backend() {
        use crate::backend::cpu::CpuBackend;
        use crate::backend::gpu::GpuBackend;
        use crate::backend::gpu::test_support::{H, worst};
        use crate::backend::{LinearSolver, Stages};
        use crate::material::Projection;
        let Some(context) = context() else { return };
        let (model, x, start) = overlapping_cubes(5);
        let contact = model.self_collision.as_ref().unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(6);
        let velocities: Vec<[f64; 3]> =
            start.iter().map(|_| std::array::from_fn(|_| rng.random_range(-0.5..0.5))).collect();
        let couplings = contact.lagged_friction(&model, &start, &velocities, H);
        let target: Vec<[f64; 3]> = start.iter().map(|p| [p[0], p[1] - 0.01, p[2]]).collect();
        let problem = crate::objective::StepProblem {
            start: &start,
            target: &target,
            rigid_steps: &[],
            rigid_shape: &start,
            nodes: &NODES,
            dt: H,
            vertex_damping: &[],
            vertex_linear: &[],
            rayleigh: 0.01,
            couplings: &couplings,
            damping_weight: 0.5,
        };
        let mut cpu = CpuBackend::new(model.clone());
        let mut gpu = GpuBackend::new(context, model.clone()).unwrap();
        for backend in [&mut cpu as &mut dyn Stages, &mut gpu] {
            backend.begin_step(problem);
            backend.set_iterate(&x);
        }
        let relative = |a: f64, b: f64| (a - b).abs() / b.abs().max(f64::MIN_POSITIVE);
        for projection in [Projection::None, Projection::Psd] {
            let (c, g) = (cpu.linearize(projection), gpu.linearize(projection));
            let (gpu_gradient, _) = gpu.read_linearization();
            let (g_error, g_at) = worst(&gpu_gradient, cpu.gradient().as_flattened());
            cpu.solve_direction(LinearSolver::Pcg, 1e-6, 2000);
            gpu.solve_direction(LinearSolver::Pcg, 1e-6, 2000);
            // Stiff contact on soft cubes: directions that both meet the tolerance may differ
            // by the condition number times it, so the GPU's is checked as a solution of the
            // CPU's f64 system. Without the couplings' product its residual is O(1).
            let direction: Vec<[f64; 3]> =
                gpu.read_direction().chunks(3).map(|c| [c[0] as f64, c[1] as f64, c[2] as f64]).collect();
            let norm = |v: &[[f64; 3]]| v.iter().flatten().map(|a| a * a).sum::<f64>().sqrt();
            let residual = |d: &[[f64; 3]]| {
                let r: Vec<[f64; 3]> = cpu
                    .hessian_times(d)
                    .iter()
                    .zip(cpu.gradient())
                    .map(|(a, b)| std::array::from_fn(|k| a[k] + b[k]))
                    .collect();
                norm(&r) / norm(cpu.gradient())
            };
            let (gpu_residual, cpu_residual) = (residual(&direction), residual(cpu.direction()));
            println!(
                "{projection:?}: {} friction couplings; gradient {g_error:.1e}, |g| {:.1e}, force \
                 scale {:.1e}; relative residual of the direction {gpu_residual:.1e} (CPU's \
                 {cpu_residual:.1e})",
                couplings.len(),
                relative(g.gradient_norm, c.gradient_norm),
                relative(g.force_scale, c.force_scale)
            );
            // f32 against f64: 1e-5 of the largest entry; a missing contact or coupling term is
            // O(1) of its entries.
            assert!(g_error < 1e-5, "{projection:?}: gradient entry {g_at} off by {g_error:e}");
            // Solved to 1e-6, measured 1.1e-6 with f32 rounding; a margin of about 5.
            assert!(gpu_residual < 5e-6, "{projection:?}: the GPU direction leaves {gpu_residual:e}");
            assert!(relative(g.force_scale, c.force_scale) < 1e-4);
        }
        assert!(couplings.len() >= 10, "only {} friction couplings", couplings.len());
        crate::backend::gpu::test_support::assert_energies_match(&mut cpu, &mut gpu, &x);
    }
}
