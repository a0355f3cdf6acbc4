//! GPU stages against their CPU twins on seeded random inputs. On a machine without an
//! adapter these tests skip with a printed reason, unless LIVELY_REQUIRE_GPU=1 (as in CI, with
//! the lavapipe software adapter), where a missing adapter is a failure.

use std::sync::Arc;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::element::Outputs;
use super::recording::Recording;
use super::{GpuContext, GpuElements, GpuLinear, Positions, WgElement, WgLinear};
use crate::backend::Node;
use crate::backend::cpu::element;
use crate::backend::cpu::tests::mixed_model;
use crate::material::{Material, Projection};
use crate::model::Model;

/// The context these tests share (one device per process).
fn context() -> Option<Arc<GpuContext>> {
    static SHARED: std::sync::OnceLock<Option<Arc<GpuContext>>> = std::sync::OnceLock::new();
    SHARED.get_or_init(|| fresh_context().map(Arc::new)).clone()
}

/// A context of its own, for a test that changes it.
fn fresh_context() -> Option<GpuContext> {
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

fn random_state(model: &Model, seed: u64) -> (Vec<[f64; 3]>, Vec<[f64; 3]>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut jitter = |p: &[f64; 3], s: f64| std::array::from_fn(|c| p[c] + rng.random_range(-s..s));
    let start: Vec<[f64; 3]> = model.rest.iter().map(|p| jitter(p, 0.01)).collect();
    let x: Vec<[f64; 3]> = start.iter().map(|p| jitter(p, 0.01)).collect();
    (x, start)
}

/// Largest |gpu - cpu| relative to the largest |cpu| entry, with its index.
fn worst(gpu: &[f32], cpu: &[f64]) -> (f64, usize) {
    assert_eq!(gpu.len(), cpu.len());
    let scale = cpu.iter().fold(f64::MIN_POSITIVE, |a, b| a.max(b.abs()));
    gpu.iter()
        .zip(cpu)
        .enumerate()
        .map(|(i, (g, c))| ((*g as f64 - c).abs() / scale, i))
        .fold((0.0, 0), |a, e| if e.0 > a.0 { e } else { a })
}

/// A recording with room for the small readbacks of these tests.
fn recording(context: &GpuContext) -> Recording {
    Recording::new(context, 1 << 16)
}

/// Records the element pass and returns its energy.
fn evaluate(
    context: &GpuContext,
    stage: &WgElement,
    recording: &mut Recording,
    elements: &GpuElements,
    nodes: &[Node],
    outputs: Outputs,
) -> f64 {
    elements.encode(context, stage, recording, Positions::Iterate, nodes, outputs).unwrap();
    let staged = elements.stage_energy(context, recording).unwrap();
    GpuElements::energy(&recording.read(context, &[staged]).unwrap()[0])
}

const NODES: [Node; 2] = [Node { weight: 2.0 / 3.0, theta: 0.5 }, Node { weight: 1.0 / 12.0, theta: 1.0 }];

#[test]
fn element_stage_matches_its_cpu_twin() {
    let Some(context) = context() else { return };
    let stage = WgElement::new(&context).unwrap();
    let linear_stages = WgLinear::new(&context).unwrap();
    let materials = [
        Material::stvk(2e4, 0.3),
        Material::neo_hookean(2e4, 0.3),
        Material::stable_neo_hookean(2e4, 0.45),
        Material::corotated(2e4, 0.3),
        Material::fixed_corotated(2e4, 0.3),
        Material::arap(2e4, 0.3),
    ];
    for (case, (material, projection)) in materials
        .iter()
        .flat_map(|m| [(m.clone(), Projection::None), (m.clone(), Projection::Psd)])
        .enumerate()
    {
        let k = case / 2;
        let model = Arc::new(mixed_model(material));
        let (x, start) = random_state(&model, 40 + k as u64);
        let corners = 4 * model.tets.len() + 2 * model.springs.len();
        let blocks = 10 * model.tets.len() + 3 * model.springs.len();
        let mut cpu_gradients = vec![[0.0; 3]; corners];
        let mut cpu_blocks = vec![[0.0; 9]; blocks];
        let cpu_energy = element::derivatives(
            &model,
            &x,
            &start,
            &NODES,
            Some(projection),
            &mut cpu_gradients,
            &mut cpu_blocks,
        );
        let outputs =
            if projection == Projection::Psd { Outputs::ProjectedHessian } else { Outputs::Hessian };
        let mut rec = recording(&context);
        let linear = GpuLinear::for_model(&context, &linear_stages, &rec, &model);
        linear.write_positions(&context, &mut rec, &x, &start, &start);
        let gpu = GpuElements::new(&context, &stage, &rec, &model, &linear).unwrap();
        let energy = evaluate(&context, &stage, &mut rec, &gpu, &NODES, outputs);
        let (corner_gradients, element_blocks) = gpu.read_outputs(&context, &mut rec, &linear).unwrap();
        // f32 positions of ~0.3 m against shape gradients of ~10/m put ~2e-7 of rounding in F;
        // relative to the ~1 % strains here that is ~2e-5 at worst (measured on lavapipe:
        // 2e-6). A wrong term would be off by O(1).
        let energy_error = (energy - cpu_energy).abs() / cpu_energy.abs();
        assert!(energy_error < 1e-4, "material {k}: energy {energy} vs {cpu_energy}");
        let (g_error, g_at) = worst(&corner_gradients, cpu_gradients.as_flattened());
        assert!(g_error < 1e-4, "material {k}: gradient entry {g_at} off by {g_error:e}");
        let (h_error, h_at) = worst(&element_blocks, cpu_blocks.as_flattened());
        assert!(h_error < 1e-4, "material {k}: Hessian entry {h_at} off by {h_error:e}");
        let energy_only = evaluate(&context, &stage, &mut rec, &gpu, &NODES, Outputs::Energy);
        assert_eq!(energy_only, energy, "the energy does not depend on what else is computed");
        println!(
            "{} element parity, material {k} {projection:?}: energy {energy_error:.1e}, gradient {g_error:.1e}, Hessian {h_error:.1e}",
            context.adapter
        );
    }
}

#[test]
fn element_stage_gives_the_same_bits_every_run() {
    let Some(context) = context() else { return };
    let stage = WgElement::new(&context).unwrap();
    let model = Arc::new(mixed_model(Material::stable_neo_hookean(3e4, 0.4)));
    let (x, start) = random_state(&model, 7);
    let linear_stages = WgLinear::new(&context).unwrap();
    let mut rec = recording(&context);
    let linear = GpuLinear::for_model(&context, &linear_stages, &rec, &model);
    linear.write_positions(&context, &mut rec, &x, &start, &start);
    let gpu = GpuElements::new(&context, &stage, &rec, &model, &linear).unwrap();
    let mut run = || {
        let energy = evaluate(&context, &stage, &mut rec, &gpu, &NODES[..1], Outputs::Hessian);
        (energy.to_bits(), gpu.read_outputs(&context, &mut rec, &linear).unwrap())
    };
    assert_eq!(run(), run());
}

/// A model for the linear-algebra stages: the mixed bar and springs with colliders of every
/// shape.
fn linear_model(material: Material) -> Arc<Model> {
    Arc::new(mixed_model(material))
}

/// The CPU reference of one linearization: corner gradients, element blocks, gathered
/// gradient, vertex blocks and sums, assembled matrix.
struct Reference {
    corners: Vec<[f64; 3]>,
    element_blocks: Vec<[f64; 9]>,
    gradient: Vec<[f64; 3]>,
    vertex_blocks: Vec<[f64; 9]>,
    sums: (f64, f64, f64),
    vertex_energy: f64,
    blocks: Vec<[f64; 9]>,
    target: Vec<[f64; 3]>,
}

const H: f64 = 1.0 / 30.0;

fn reference(model: &Model, x: &[[f64; 3]], start: &[[f64; 3]], projection: Projection) -> Reference {
    use crate::backend::cpu::{assemble, gather};
    let topology = crate::backend::topology::Topology::new(model);
    let target: Vec<[f64; 3]> = start.iter().map(|p| [p[0] + 0.01, p[1] - 0.02, p[2]]).collect();
    let mut corners = vec![[0.0; 3]; 4 * model.tets.len() + 2 * model.springs.len()];
    let mut element_blocks = vec![[0.0; 9]; 10 * model.tets.len() + 3 * model.springs.len()];
    element::derivatives(model, x, start, &NODES, Some(projection), &mut corners, &mut element_blocks);
    let anchors = crate::backend::topology::Anchors::default();
    let terms = gather::VertexTerms {
        model,
        start,
        target: &target,
        nodes: &NODES,
        inv_h2: 1.0 / (H * H),
        anchors: &anchors,
    };
    let n = model.vertex_count();
    let (mut gradient, mut vertex_blocks) = (vec![[0.0; 3]; n], vec![[0.0; 9]; n]);
    let sums =
        gather::gradient(&terms, &topology, &corners, x, projection, &mut gradient, &mut vertex_blocks);
    let vertex_energy = gather::vertex_energy(&terms, x);
    let mut blocks = vec![[0.0; 9]; topology.block_count()];
    assemble::matrix(model, &topology, &element_blocks, Some(&vertex_blocks), None, &mut blocks);
    Reference { corners, element_blocks, gradient, vertex_blocks, sums, vertex_energy, blocks, target }
}

fn gather_params(model: &Model, projection: Projection) -> super::linear::GatherParams {
    let w: f64 = NODES.iter().map(|q| q.weight * q.theta).sum();
    super::linear::GatherParams {
        vertex_count: model.vertex_count() as u32,
        node_count: 2,
        inv_h2: (1.0 / (H * H)) as f32,
        gravity_weight: w as f32,
        gravity_x: model.gravity[0] as f32,
        gravity_y: model.gravity[1] as f32,
        gravity_z: model.gravity[2] as f32,
        weight_0: NODES[0].weight as f32,
        theta_0: NODES[0].theta as f32,
        weight_1: NODES[1].weight as f32,
        theta_1: NODES[1].theta as f32,
        collider_count: model.colliders.len() as u32,
        contact_stiffness: model.contact_stiffness as f32,
        exact_hessian: (projection == Projection::None) as u32,
        damped: 0,
        derivatives: 1,
        tet_count: model.tets.len() as u32,
        spring_count: model.springs.len() as u32,
    }
}

fn to_f32(values: &[f64]) -> Vec<f32> {
    values.iter().map(|&v| v as f32).collect()
}

#[test]
fn gather_and_assemble_match_their_cpu_twins() {
    let Some(context) = context() else { return };
    let stages = super::WgLinear::new(&context).unwrap();
    let model = linear_model(Material::stable_neo_hookean(2e4, 0.4));
    let (x, start) = random_state(&model, 12);
    let cpu = reference(&model, &x, &start, Projection::None);
    let mut rec = recording(&context);
    let gpu = super::GpuLinear::for_model(&context, &stages, &rec, &model);
    gpu.write_positions(&context, &mut rec, &x, &start, &cpu.target);
    gpu.write_corner_gradients(&context, &mut rec, &to_f32(cpu.corners.as_flattened()));
    gpu.write_element_blocks(&context, &mut rec, &to_f32(cpu.element_blocks.as_flattened()));
    let params = gather_params(&model, Projection::None);
    gpu.gather(&context, &stages, &mut rec, &params, Positions::Iterate).unwrap();
    let staged = gpu.stage_gather_partials(&context, &mut rec).unwrap();
    gpu.assemble(&context, &stages, &mut rec, false).unwrap();
    let partials: Vec<[f32; 4]> = bytemuck::pod_collect_to_vec(&rec.read(&context, &[staged]).unwrap()[0]);
    let sums: [f64; 4] =
        partials.iter().fold([0.0; 4], |acc, p| std::array::from_fn(|k| acc[k] + p[k] as f64));
    let n = model.vertex_count();
    let read = |rec: &mut Recording, buffer: &wgpu::Buffer, len: usize| -> Vec<f32> {
        rec.read_buffer(&context, buffer, len).unwrap()
    };
    // Inputs rounded to f32 (1e-7) and short f32 sums: 1e-5 of the largest entry is ample;
    // a wrong term or slot would be off by O(1).
    let (g_error, g_at) = worst(&read(&mut rec, gpu.gradient(), 3 * n), cpu.gradient.as_flattened());
    assert!(g_error < 1e-5, "gradient entry {g_at} off by {g_error:e}");
    let (v_error, v_at) =
        worst(&read(&mut rec, gpu.vertex_blocks(), 9 * n), cpu.vertex_blocks.as_flattened());
    // The sphere's curvature term divides by the distance to its center: a vertex 11 mm from
    // it, 0.3 m from the origin, carries ~30x the f32 rounding of its position (measured
    // 2.2e-6 on lavapipe). Inertia alone was exact to 1e-7; a wrong term is O(1).
    assert!(v_error < 1e-5, "vertex block entry {v_at} off by {v_error:e}");
    let (b_error, b_at) =
        worst(&read(&mut rec, gpu.blocks(), 9 * gpu.block_count()), cpu.blocks.as_flattened());
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
        "gather/assemble parity: gradient {g_error:.1e}, vertex blocks {v_error:.1e}, blocks {b_error:.1e}"
    );
}

/// Runs the PCG stage on the uploaded matrix and right-hand side, reading its status every
/// 64 iterations.
fn gpu_pcg(
    context: &GpuContext,
    stages: &WgLinear,
    rec: &mut Recording,
    linear: &mut GpuLinear,
    tolerance: f64,
    max_iterations: u32,
) -> super::PcgStatus {
    let params = super::linear::PcgParams {
        vertex_count: linear.vertex_count() as u32,
        partial_count: linear.partial_count() as u32,
        max_iterations,
        tolerance: tolerance as f32,
        forcing: 0,
        gradient_tolerance: 0.0,
    };
    linear.pcg_start(context, stages, rec, &params).unwrap();
    loop {
        let staged = linear.pcg_iterations(context, stages, rec, &params, 64).unwrap();
        let status: super::PcgStatus =
            bytemuck::pod_read_unaligned(&rec.read(context, &[staged]).unwrap()[0]);
        if status.state != 0 {
            return status;
        }
    }
}

#[test]
fn gpu_pcg_meets_its_residual_and_stops_on_negative_curvature() {
    use crate::backend::cpu::{hessian_product, pcg};
    let Some(context) = context() else { return };
    let stages = super::WgLinear::new(&context).unwrap();
    let model = linear_model(Material::stvk(2e4, 0.3));
    let (x, start) = random_state(&model, 13);
    let cpu = reference(&model, &x, &start, Projection::Psd);
    let topology = crate::backend::topology::Topology::new(&model);
    let b: Vec<[f64; 3]> = cpu.gradient.iter().map(|g| g.map(|c| -c)).collect();
    let mut rec = recording(&context);
    let mut gpu = super::GpuLinear::for_model(&context, &stages, &rec, &model);
    gpu.write_blocks(&context, &mut rec, &to_f32(cpu.blocks.as_flattened()));
    gpu.write_rhs(&context, &mut rec, &b);
    // f32 CG: the recursive residual drifts from the true one by about condition x 1e-7, so
    // ask for 1e-4 and check the true residual in f64 against 3e-4.
    let status = gpu_pcg(&context, &stages, &mut rec, &mut gpu, 1e-4, 2000);
    assert_eq!(status.state, 1, "GPU PCG should converge: {status:?}");
    let n = model.vertex_count();
    let solution: Vec<[f64; 3]> = rec
        .read_buffer::<f32>(&context, gpu.direction(), 3 * n)
        .unwrap()
        .chunks(3)
        .map(|c| [c[0] as f64, c[1] as f64, c[2] as f64])
        .collect();
    let mut product = vec![[0.0; 3]; b.len()];
    hessian_product::apply(&topology, &cpu.blocks, &solution, &mut product);
    let norm = |v: &[[f64; 3]]| v.iter().flatten().map(|c| c * c).sum::<f64>().sqrt();
    let residual: Vec<[f64; 3]> =
        product.iter().zip(&b).map(|(a, b)| std::array::from_fn(|c| b[c] - a[c])).collect();
    let relative = norm(&residual) / norm(&b);
    let mut cpu_x = vec![[0.0; 3]; b.len()];
    let cpu_outcome =
        pcg::solve(&topology, &cpu.blocks, &b, &mut cpu_x, &mut pcg::Scratch::default(), 1e-4, 2000);
    println!(
        "GPU PCG: {} iterations (CPU {}), true relative residual {relative:.2e}",
        status.iterations, cpu_outcome.iterations
    );
    assert!(relative < 3e-4, "true relative residual {relative:e}");
    assert!((status.iterations as f64) < 1.5 * cpu_outcome.iterations as f64 + 5.0);

    // A squeezed StVK bar at a huge step is indefinite: the loop must stop, descending.
    let squeezed: Vec<[f64; 3]> = model.rest.iter().map(|p| [0.5 * p[0], 0.6 * p[1], p[2]]).collect();
    let indefinite = reference(&model, &squeezed, &squeezed, Projection::None);
    let big_step: Vec<[f64; 9]> = indefinite
        .blocks
        .iter()
        .zip(&topology.columns)
        .enumerate()
        .map(|(index, (block, _))| {
            // Remove most of the mass term (as a step of 10 s would) from the diagonal blocks.
            let mut out = *block;
            let row = topology.row_offsets.partition_point(|&o| o as usize <= index) - 1;
            if topology.columns[index] as usize == row && !model.pinned[row] {
                let m = model.masses[row] / (H * H) * (1.0 - 1e-5);
                out[0] -= m;
                out[4] -= m;
                out[8] -= m;
            }
            out
        })
        .collect();
    let rhs: Vec<[f64; 3]> = indefinite.gradient.iter().map(|g| g.map(|c| -c)).collect();
    gpu.write_blocks(&context, &mut rec, &to_f32(big_step.as_flattened()));
    gpu.write_rhs(&context, &mut rec, &rhs);
    let status = gpu_pcg(&context, &stages, &mut rec, &mut gpu, 1e-8, 2000);
    assert!(status.negative_curvature(), "expected negative curvature, got {status:?}");
    let d: Vec<f32> = rec.read_buffer(&context, gpu.direction(), 3 * n).unwrap();
    let slope: f64 = d.iter().zip(rhs.as_flattened()).map(|(d, r)| -(*d as f64) * r).sum();
    assert!(slope < 0.0, "the direction must go downhill (slope {slope})");
}

#[test]
fn batched_line_search_candidates_match_one_at_a_time() {
    use crate::backend::{LinearSolver, Stages, StepProblem};
    let Some(context) = context() else { return };
    let model = linear_model(Material::corotated(2e4, 0.3));
    let (x, start) = random_state(&model, 21);
    let target: Vec<[f64; 3]> = start.iter().map(|p| [p[0], p[1] - 0.02, p[2]]).collect();
    let mut gpu = super::GpuBackend::new(context, model.clone()).unwrap();
    gpu.begin_step(StepProblem {
        start: &start,
        target: &target,
        nodes: &NODES,
        dt: H,
        vertex_damping: &[],
        rayleigh: 0.0,
        damping_weight: 0.5,
    });
    gpu.set_iterate(&x);
    gpu.linearize(Projection::Psd);
    gpu.solve_direction(LinearSolver::Pcg, 1e-3, 500);
    let mut before = vec![[0.0; 3]; x.len()];
    gpu.read_iterate(&mut before);
    // Ten candidates: more than one batch.
    let alphas: Vec<f64> = (0..10).map(|k| 0.5f64.powi(k)).collect();
    let batched = gpu.candidate_objectives(&alphas);
    let mut after = vec![[0.0; 3]; x.len()];
    gpu.read_iterate(&mut after);
    assert_eq!(before, after, "the iterate must come back unchanged");
    for (k, &alpha) in alphas.iter().enumerate() {
        gpu.advance(alpha);
        let single = gpu.objective();
        gpu.set_iterate(&before);
        // Both evaluate the same f32 positions; only the order of f32 updates may differ.
        assert!(
            (batched[k] - single).abs() <= 1e-6 * single.abs(),
            "alpha {alpha}: batched {} vs {single}",
            batched[k]
        );
    }
    assert!(gpu.take_error().is_none());
}

/// A step problem with every vertex term: colliders of every shape with vertices inside,
/// handles (two on one vertex), random per-vertex damping and Rayleigh damping.
struct DampedContact {
    model: Arc<Model>,
    x: Vec<[f64; 3]>,
    start: Vec<[f64; 3]>,
    target: Vec<[f64; 3]>,
    vertex_damping: Vec<[f64; 9]>,
    anchors: Vec<crate::backend::Anchor>,
}

impl DampedContact {
    fn new() -> DampedContact {
        use crate::backend::Anchor;
        let model = linear_model(Material::fixed_corotated(2e4, 0.3));
        let (mut x, start) = random_state(&model, 33);
        let mut rng = ChaCha8Rng::seed_from_u64(34);
        let target: Vec<[f64; 3]> =
            start.iter().map(|p| std::array::from_fn(|c| p[c] + rng.random_range(-0.02..0.02))).collect();
        for v in 0..x.len() {
            if model.pinned[v] {
                x[v] = start[v];
            }
        }
        // The middle spring vertex into the capsule, off its axis.
        x[model.vertex_count() - 2] = [0.605, 0.06, 0.02];
        // Every collider must have free vertices inside it, or its terms go untested.
        for (i, collider) in model.colliders.iter().enumerate() {
            let inside = (0..x.len())
                .filter(|&v| !model.pinned[v] && collider.distance(glam::DVec3::from(x[v])).phi < 0.0)
                .count();
            assert!(inside > 0, "collider {i} ({:?}) has no vertex inside it", collider.shape);
        }
        // Lagged per-vertex damping: random symmetric positive blocks.
        let vertex_damping: Vec<[f64; 9]> = (0..x.len())
            .map(|_| {
                let (a, b, c, d) = (
                    rng.random_range(1.0..5.0),
                    rng.random_range(-0.5..0.5),
                    rng.random_range(-0.5..0.5),
                    rng.random_range(1.0..5.0),
                );
                [a, b, c, b, d, 0.1, c, 0.1, a + d]
            })
            .collect();
        let free: Vec<u32> = (0..x.len() as u32).filter(|&v| !model.pinned[v as usize]).collect();
        let anchors: Vec<Anchor> = [(free[1], 400.0), (free[5], 250.0), (free[1], 90.0)]
            .iter()
            .map(|&(vertex, stiffness)| Anchor {
                vertex,
                stiffness,
                position: std::array::from_fn(|c| x[vertex as usize][c] + rng.random_range(-0.03..0.03)),
            })
            .collect();
        DampedContact { model, x, start, target, vertex_damping, anchors }
    }

    fn problem(&self) -> crate::backend::StepProblem<'_> {
        crate::backend::StepProblem {
            start: &self.start,
            target: &self.target,
            nodes: &NODES,
            dt: H,
            vertex_damping: &self.vertex_damping,
            rayleigh: 0.02,
            damping_weight: 0.5,
        }
    }
}

#[test]
fn vertex_terms_and_damping_match_the_cpu_backend() {
    use crate::backend::Stages;
    use crate::backend::cpu::{CpuBackend, hessian_product};
    let Some(context) = context() else { return };
    let DampedContact { model, x, anchors, .. } = DampedContact::new();
    let setup = DampedContact::new();
    let problem = setup.problem();
    let mut rng = ChaCha8Rng::seed_from_u64(35);
    let mut cpu = CpuBackend::new(model.clone());
    let mut gpu = super::GpuBackend::new(context, model.clone()).unwrap();
    let topology = crate::backend::topology::Topology::new(&model);
    let probe: Vec<[f64; 3]> =
        (0..x.len()).map(|_| std::array::from_fn(|_| rng.random_range(-1.0..1.0))).collect();
    let relative = |a: f64, b: f64| (a - b).abs() / b.abs().max(f64::MIN_POSITIVE);
    for backend in [&mut cpu as &mut dyn Stages, &mut gpu] {
        backend.begin_step(problem);
        backend.set_anchors(&anchors);
        backend.set_iterate(&x);
    }
    for projection in [Projection::None, Projection::Psd] {
        let (c, g) = (cpu.linearize(projection), gpu.linearize(projection));
        let (gpu_gradient, gpu_blocks) = gpu.read_linearization();
        let (g_error, g_at) = worst(&gpu_gradient, cpu.gradient().as_flattened());
        let blocks: Vec<[f64; 9]> =
            gpu_blocks.chunks(9).map(|b| std::array::from_fn(|k| b[k] as f64)).collect();
        let mut gpu_product = vec![[0.0; 3]; x.len()];
        hessian_product::apply(&topology, &blocks, &probe, &mut gpu_product);
        let gpu_product: Vec<f32> = gpu_product.as_flattened().iter().map(|&v| v as f32).collect();
        let (h_error, h_at) = worst(&gpu_product, cpu.hessian_times(&probe).as_flattened());
        println!(
            "{projection:?}: gradient {g_error:.1e}, H v {h_error:.1e}, |g| {:.1e}, force scale {:.1e}",
            relative(g.gradient_norm, c.gradient_norm),
            relative(g.force_scale, c.force_scale)
        );
        // f32 inputs and sums against f64: 1e-5 of the largest entry; a missing term (a
        // collider, a handle, the damping) is O(1) of its entries.
        assert!(g_error < 1e-5, "{projection:?}: gradient entry {g_at} off by {g_error:e}");
        assert!(h_error < 1e-5, "{projection:?}: H v entry {h_at} off by {h_error:e}");
        assert!(relative(g.gradient_norm, c.gradient_norm) < 1e-4);
        assert!(relative(g.force_scale, c.force_scale) < 1e-4);
    }
    let objective = (gpu.objective(), cpu.objective());
    let dissipation = (gpu.dissipation(), cpu.dissipation());
    let potential = (gpu.potential(&x), cpu.potential(&x));
    println!("objective {objective:?}, dissipation {dissipation:?}, potential {potential:?}");
    assert!(relative(objective.0, objective.1) < 1e-5, "objective {objective:?}");
    assert!(relative(dissipation.0, dissipation.1) < 1e-4, "dissipation {dissipation:?}");
    assert!(relative(potential.0, potential.1) < 1e-5, "potential {potential:?}");
    let (mut gpu_force, mut cpu_force) = (vec![[0.0; 3]; x.len()], vec![[0.0; 3]; x.len()]);
    gpu.potential_gradient(&x, &mut gpu_force);
    cpu.potential_gradient(&x, &mut cpu_force);
    let gpu_force: Vec<f32> = gpu_force.as_flattened().iter().map(|&v| v as f32).collect();
    let (f_error, f_at) = worst(&gpu_force, cpu_force.as_flattened());
    assert!(f_error < 1e-5, "potential gradient entry {f_at} off by {f_error:e}");
    assert!(gpu.take_error().is_none());
}

#[test]
fn one_round_trip_gives_the_newton_direction_of_the_separate_stages() {
    use crate::backend::{DirectionRequest, LinearSolver, Stages, forcing_term};
    let Some(context) = context() else { return };
    // A pinned bar sagging under gravity from rest: far from the solution at first, then
    // Newton's forcing term tightens and the solves lengthen.
    let model = sagging_bar();
    let rest = model.rest.clone();
    let target: Vec<[f64; 3]> = rest.iter().map(|p| [p[0], p[1] - 0.01, p[2]]).collect();
    let start = |gpu: &mut super::GpuBackend| {
        gpu.begin_step(crate::backend::StepProblem {
            start: &rest,
            target: &target,
            nodes: &NODES,
            dt: H,
            vertex_damping: &[],
            rayleigh: 0.01,
            damping_weight: 0.5,
        });
        gpu.set_iterate(&rest);
    };
    let (mut fused, mut separate) = (
        super::GpuBackend::new(context.clone(), model.clone()).unwrap(),
        super::GpuBackend::new(context.clone(), model.clone()).unwrap(),
    );
    start(&mut fused);
    start(&mut separate);
    let alphas = [1.0, 0.5, 0.25, 0.125];
    let mut continued = 0;
    // Newton iterations in lockstep: the forcing term tightens, so the solves lengthen.
    for projection in
        [Projection::None, Projection::Psd, Projection::None, Projection::None, Projection::None]
    {
        // Eight iterations are recorded ahead, so the longer solves need more chunks.
        fused.forget_solve_length();
        let before = fused.device_counts().unwrap();
        let request = DirectionRequest {
            projection,
            solve: true,
            solver: LinearSolver::Pcg,
            gradient_tolerance: 1e-9,
            relative_tolerance: None,
            max_iterations: 1000,
            candidates: &alphas,
        };
        let one = fused.newton_direction(&request);
        let counts = fused.device_counts().unwrap().since(&before);
        let linearization = separate.linearize(projection);
        let tolerance = forcing_term(linearization.gradient_norm, 1e-9, linearization.force_scale);
        let report = separate.solve_direction(LinearSolver::Pcg, tolerance, 1000);
        let values = separate.candidate_objectives(&alphas);
        let Some(direction) = one.direction else {
            panic!("no direction at |g| {}", linearization.gradient_norm)
        };
        println!(
            "{projection:?}: {counts:?}; {} CG iterations (separately {}), |g| {:.3e}, slope {:.6e}",
            direction.iterations, report.iterations, linearization.gradient_norm, direction.slope
        );
        // One round trip, unless the solve outran the iterations recorded ahead: then one
        // per further chunk and one for the dots and candidates.
        if direction.iterations <= 8 {
            assert_eq!(counts.readbacks, 1, "{projection:?}: {counts:?}");
        } else {
            assert!(counts.readbacks >= 3, "{projection:?}: {counts:?}");
            continued += 1;
        }
        assert_eq!(counts.submissions, counts.readbacks, "{projection:?}: {counts:?}");
        // The same kernels on the same data in the same order: the same bits.
        assert_eq!(one.linearization, linearization);
        assert_eq!(direction.iterations, report.iterations);
        assert_eq!(direction.negative_curvature, report.negative_curvature);
        assert_eq!(direction.slope.to_bits(), report.slope.to_bits());
        assert_eq!(one.candidates, values);
        // Both take the same step: the longest candidate that decreases G.
        let value = fused.objective();
        let alpha = alphas.iter().zip(&values).find(|(_, v)| **v < value).map_or(0.0, |(a, _)| *a);
        fused.advance(alpha);
        separate.advance(alpha);
    }
    assert!(continued > 0, "no solve outran the iterations recorded ahead");
    assert!(fused.take_error().is_none() && separate.take_error().is_none());
}

/// A neo-Hookean bar of 1800 tets and 539 vertices under gravity, pinned at x = 0.
fn sagging_bar() -> Arc<Model> {
    use crate::mesh::TetMesh;
    let mut model = Model::empty([0.0, -9.81, 0.0]);
    model
        .add_tet_body(&TetMesh::bar([10, 6, 6], [1.0, 0.6, 0.6]), &Material::neo_hookean(3e4, 0.3), 1000.0)
        .unwrap();
    for v in 0..model.vertex_count() {
        model.pinned[v] = model.rest[v][0] < 1e-9;
    }
    Arc::new(model)
}

#[test]
fn dispatches_split_into_rows_give_the_same_bits() {
    use crate::backend::{LinearSolver, Stages, StepProblem};
    let model = sagging_bar();
    let (mut x, start) = random_state(&model, 51);
    for v in 0..x.len() {
        if model.pinned[v] {
            x[v] = start[v];
        }
    }
    let target: Vec<[f64; 3]> = start.iter().map(|p| [p[0], p[1] - 0.01, p[2]]).collect();
    // 1800 tets (8 workgroups of 256), 539 vertices (3), 1617 vector entries (7): with rows
    // of 2 every stage runs a 2-D grid, and the vertex passes have a workgroup past the end.
    let run = |width: Option<u32>| {
        let mut context = fresh_context()?;
        if let Some(width) = width {
            context.dispatch_width = width;
        }
        let mut gpu = super::GpuBackend::new(Arc::new(context), model.clone()).unwrap();
        gpu.begin_step(StepProblem {
            start: &start,
            target: &target,
            nodes: &NODES,
            dt: H,
            vertex_damping: &[],
            rayleigh: 0.01,
            damping_weight: 1.0,
        });
        gpu.set_iterate(&x);
        let linearization = gpu.linearize(Projection::Psd);
        let report = gpu.solve_direction(LinearSolver::Pcg, 1e-4, 500);
        let candidates = gpu.candidate_objectives(&[1.0, 0.5]);
        gpu.advance(1.0);
        let mut after = vec![[0.0; 3]; x.len()];
        gpu.read_iterate(&mut after);
        assert!(gpu.take_error().is_none());
        Some((linearization.gradient_norm.to_bits(), report.iterations, candidates, after))
    };
    let Some(rows) = run(Some(2)) else { return };
    let single = run(None).unwrap();
    assert!(rows.1 > 1, "the solve must iterate");
    assert_eq!(rows, single, "a 2-D grid must compute exactly what a 1-D one does");
}
