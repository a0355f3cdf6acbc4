//! The GPU engine against its CPU twin and against itself: whole linearizations with every
//! vertex term, the one-round-trip Newton iteration against the separate stages, batched
//! line-search candidates, and 2-D dispatch grids. Each stage's own parity test sits in its
//! file.

use std::sync::Arc;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::test_support::{H, NODES, context, fresh_context, linear_model, random_state, worst};
use crate::material::{Material, Projection};
use crate::model::Model;

#[test]
fn batched_line_search_candidates_match_one_at_a_time() {
    use crate::backend::{LinearSolver, Stages};
    use crate::objective::StepProblem;
    let Some(context) = context() else { return };
    let model = linear_model(Material::corotated(2e4, 0.3));
    let (x, start) = random_state(&model, 21);
    let target: Vec<[f64; 3]> = start.iter().map(|p| [p[0], p[1] - 0.02, p[2]]).collect();
    let mut gpu = super::GpuBackend::new(context, model.clone()).unwrap();
    gpu.begin_step(StepProblem::undamped(&start, &target, &NODES, H, 0.5));
    gpu.set_iterate(&x);
    gpu.linearize(Projection::Psd);
    gpu.solve_direction(LinearSolver::Pcg, 1e-3, 500);
    let mut before = vec![[0.0; 3]; x.len()];
    gpu.read_iterate(&mut before);
    // Ten candidates: more than one batch.
    let alphas: Vec<f64> = (0..10).map(|k| 0.5f64.powi(k)).collect();
    // A batch is one pass per stage whatever its size: a full batch of eight costs the
    // dispatches and the readback of one candidate.
    let work = |gpu: &mut super::GpuBackend, alphas: &[f64]| {
        let before = gpu.device_counts().unwrap();
        gpu.candidate_objectives(alphas);
        let counts = gpu.device_counts().unwrap().since(&before);
        (counts.dispatches, counts.passes, counts.readbacks)
    };
    assert_eq!(work(&mut gpu, &alphas[..8]), work(&mut gpu, &alphas[..1]));
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
    vertex_linear: Vec<[f64; 4]>,
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
        // Linear terms as friction against a moving collider makes them.
        let vertex_linear: Vec<[f64; 4]> = (0..x.len())
            .map(|_| {
                std::array::from_fn(|k| {
                    if k < 3 { rng.random_range(-2.0..2.0) } else { rng.random_range(0.0..0.1) }
                })
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
        DampedContact { model, x, start, target, vertex_damping, vertex_linear, anchors }
    }

    fn problem(&self) -> crate::objective::StepProblem<'_> {
        crate::objective::StepProblem {
            start: &self.start,
            target: &self.target,
            rigid_steps: &[],
            rigid_shape: &self.start,
            nodes: &NODES,
            dt: H,
            vertex_damping: &self.vertex_damping,
            vertex_linear: &self.vertex_linear,
            rayleigh: 0.02,
            couplings: &[],
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
    super::test_support::assert_energies_match(&mut cpu, &mut gpu, &x);
}

#[test]
fn a_retreat_goes_back_along_the_step_taken_on_both_engines() {
    use crate::backend::cpu::CpuBackend;
    use crate::backend::{Deferral, DirectionRequest, LinearSolver, Stages};
    let Some(context) = context() else { return };
    // A step taken, then a new direction solved where it ended (Newton checks the gradient
    // there before it decides to go back): on each engine a retreat must follow the step
    // taken, not the new direction, to the CPU's formula `x0 + fraction (x - x0)` of the
    // positions it read.
    let model = sagging_bar();
    let rest = model.rest.clone();
    let mut rng = ChaCha8Rng::seed_from_u64(41);
    let x: Vec<[f64; 3]> = rest
        .iter()
        .enumerate()
        .map(|(v, p)| {
            let free = !model.pinned[v];
            std::array::from_fn(|i| p[i] + if free { rng.random_range(-1e-3..1e-3) } else { 0.0 })
        })
        .collect();
    let target: Vec<[f64; 3]> = rest.iter().map(|p| [p[0], p[1] - 0.01, p[2]]).collect();
    let request = DirectionRequest {
        projection: Projection::Psd,
        solve: true,
        deferral: Deferral::Solve,
        solver: LinearSolver::Pcg,
        gradient_tolerance: 1e-9,
        relative_tolerance: Some(1e-4),
        max_iterations: 1000,
        candidates: &[],
        likely_converged: false,
        previous_gradient_norm: None,
        forcing_cap: 1.0,
    };
    let mut cpu = CpuBackend::new(model.clone());
    let mut gpu = super::GpuBackend::new(context, model.clone()).unwrap();
    for backend in [&mut cpu as &mut dyn Stages, &mut gpu] {
        backend.begin_step(crate::objective::StepProblem::undamped(&rest, &target, &NODES, H, 1.0));
        backend.set_iterate(&x);
        backend.newton_direction(&request);
        backend.advance(0.8);
        let mut stepped = vec![[0.0; 3]; x.len()];
        backend.read_iterate(&mut stepped);
        backend.newton_direction(&request);
        let mut read = |fraction| {
            backend.retreat(fraction);
            let mut out = vec![[0.0; 3]; x.len()];
            backend.read_iterate(&mut out);
            out
        };
        let (half, quarter, back) = (read(0.5), read(0.5), read(0.0));
        let moved = worst_gap(&stepped, &x);
        assert!(moved > 1e-4, "the step must move the iterate ({moved:e} m)");
        let expected = |fraction: f64| -> Vec<[f64; 3]> {
            x.iter()
                .zip(&stepped)
                .map(|(a, b)| std::array::from_fn(|i| a[i] + fraction * (b[i] - a[i])))
                .collect()
        };
        // The GPU keeps f32 displacements from rest, far inside 1e-4 of the step; going back
        // along the new direction instead misses by about half the step.
        for (got, fraction) in [(&half, 0.5), (&quarter, 0.25), (&back, 0.0)] {
            let gap = worst_gap(got, &expected(fraction));
            assert!(gap <= 1e-4 * moved, "retreat to {fraction}: off by {gap:e} m (step {moved:e} m)");
        }
    }
}

/// The largest coordinate difference of two position sets.
fn worst_gap(a: &[[f64; 3]], b: &[[f64; 3]]) -> f64 {
    a.iter().zip(b).flat_map(|(p, q)| (0..3).map(move |i| (p[i] - q[i]).abs())).fold(0.0, f64::max)
}

#[test]
fn one_round_trip_gives_the_newton_direction_of_the_separate_stages() {
    use super::recording::most_parts;
    use crate::backend::{Deferral, DirectionRequest, LinearSolver, Stages, forcing_term};
    let Some(context) = context() else { return };
    // A pinned bar sagging under gravity from rest: far from the solution at first, then
    // Newton's forcing term tightens and the solves lengthen.
    let model = sagging_bar();
    let rest = model.rest.clone();
    let target: Vec<[f64; 3]> = rest.iter().map(|p| [p[0], p[1] - 0.01, p[2]]).collect();
    let start = |gpu: &mut super::GpuBackend| {
        gpu.begin_step(crate::objective::StepProblem {
            start: &rest,
            target: &target,
            rigid_steps: &[],
            rigid_shape: &rest,
            nodes: &NODES,
            dt: H,
            vertex_damping: &[],
            vertex_linear: &[],
            rayleigh: 0.01,
            couplings: &[],
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
    // The two-dispatch loop, recorded in chunks (the one-workgroup solve of small bodies is
    // one readback whatever its length; checked after).
    fused.set_small_solve_limit(0);
    separate.set_small_solve_limit(0);
    let alphas = [1.0, 0.5, 0.25, 0.125];
    // A request that expects convergence also reads the state's end (its potential pass
    // takes the gradient's buffer, which a solve that runs on must restore for its dots).
    let request = |projection, likely_converged| DirectionRequest {
        projection,
        solve: true,
        deferral: Deferral::Solve,
        solver: LinearSolver::Pcg,
        gradient_tolerance: 1e-9,
        relative_tolerance: None,
        max_iterations: 1000,
        candidates: &alphas,
        likely_converged,
        previous_gradient_norm: None,
        forcing_cap: 1.0,
    };
    let mut continued = 0;
    // Newton iterations in lockstep: the forcing term tightens, so the solves lengthen.
    for (k, projection) in
        [Projection::None, Projection::Psd, Projection::None, Projection::None, Projection::None]
            .into_iter()
            .enumerate()
    {
        // Deferred, the request linearizes alone: one round trip and no solve, and the same
        // request undeferred then solves as if it came first (Newton asks so where it goes on).
        let before = fused.device_counts().unwrap();
        let deferred = fused
            .newton_direction(&DirectionRequest { deferral: Deferral::Defer, ..request(projection, false) });
        let deferred_counts = fused.device_counts().unwrap().since(&before);
        // With no history four iterations are recorded ahead (`first_chunk`), so the longer
        // solves need more chunks.
        fused.forget_solve_length();
        let before = fused.device_counts().unwrap();
        let one = fused.newton_direction(&request(projection, k % 2 == 1));
        let counts = fused.device_counts().unwrap().since(&before);
        let linearization = separate.linearize(projection);
        assert!(deferred.direction.is_none() && deferred.candidates.is_empty());
        assert_eq!(deferred.linearization, linearization);
        assert_eq!(deferred_counts.readbacks, 1, "{projection:?}: {deferred_counts:?}");
        assert!(deferred_counts.dispatches < counts.dispatches / 2, "{deferred_counts:?} against {counts:?}");
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
        if direction.iterations <= 4 {
            assert_eq!(counts.readbacks, 1, "{projection:?}: {counts:?}");
        } else {
            assert!(counts.readbacks >= 3, "{projection:?}: {counts:?}");
            continued += 1;
        }
        // Submitted when the host waits, and once before: the linearization goes to the
        // device while the host records the solve. A chunk of the solve long enough goes in
        // parts (`Recording::submit_part`), so that the device starts while the host records
        // the rest.
        let parts = counts.readbacks * most_parts(counts.dispatches);
        assert!(counts.submissions > counts.readbacks, "{projection:?}: {counts:?}");
        assert!(counts.submissions <= counts.readbacks + 1 + parts, "{projection:?}: {counts:?}");
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
    // A small body's solve in one workgroup: one round trip per Newton iteration, always.
    fused.set_small_solve_limit(usize::MAX);
    for projection in [Projection::None, Projection::Psd, Projection::None] {
        fused.forget_solve_length();
        let before = fused.device_counts().unwrap();
        let one = fused.newton_direction(&request(projection, false));
        let counts = fused.device_counts().unwrap().since(&before);
        let direction = one.direction.expect("a direction");
        println!("one workgroup, {projection:?}: {counts:?}; {} CG iterations", direction.iterations);
        assert_eq!((counts.readbacks, counts.submissions), (1, 2), "{projection:?}: {counts:?}");
        assert!(direction.slope < 0.0);
        let value = fused.objective();
        let alpha = alphas.iter().zip(&one.candidates).find(|(_, v)| **v < value).map_or(0.0, |(a, _)| *a);
        fused.advance(alpha);
    }
    assert!(fused.take_error().is_none());
}

/// A neo-Hookean bar of 1800 tets and 539 vertices under gravity, pinned at x = 0.
fn sagging_bar() -> Arc<Model> {
    use crate::mesh::TetMesh;
    let mut model = Model::empty([0.0, -9.81, 0.0]);
    model
        .add_tet_body(&TetMesh::bar([10, 6, 6], [1.0, 0.6, 0.6]), &[Material::neo_hookean(3e4, 0.3)], 1000.0)
        .unwrap();
    for v in 0..model.vertex_count() {
        model.pinned[v] = model.rest[v][0] < 1e-9;
    }
    Arc::new(model)
}

#[test]
fn dispatches_split_into_rows_give_the_same_bits() {
    use crate::backend::{LinearSolver, Stages};
    use crate::objective::StepProblem;
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
            rigid_steps: &[],
            rigid_shape: &start,
            nodes: &NODES,
            dt: H,
            vertex_damping: &[],
            vertex_linear: &[],
            rayleigh: 0.01,
            couplings: &[],
            damping_weight: 1.0,
        });
        gpu.set_iterate(&x);
        let linearization = gpu.linearize(Projection::Psd);
        let report = gpu.solve_direction(LinearSolver::Pcg, 1e-4, 500);
        // Three candidates in one batch: the batched gather's 9 workgroups leave the last
        // row a workgroup past the batch.
        let candidates = gpu.candidate_objectives(&[1.0, 0.5, 0.25]);
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

/// A local/global solve with the dense `S^-1` (this body's form) or FSAI (`M = G^T G`) ends
/// where the CPU's exact global solves end, free and pressed into a penalty floor (whose
/// contact set the preconditioners hand to Jacobi). Free, the dense inverse is of the very
/// matrix, and each global step multiplies by it in one dispatch; in contact it preconditions
/// CG, in fewer iterations than FSAI.
#[test]
fn local_global_dense_and_fsai_solves_agree() {
    use crate::contact::{Collider, ContactModel};
    let Some(context) = context() else { return };
    let (free, _, _) = crate::backend::fsai::tests::projective_matrix([10, 3, 3], 1.0);
    // The sagging target below takes the far end's lower vertices 0.1-0.2 m into this floor.
    let mut floored = free.clone();
    floored.colliders = vec![Collider::plane([0.0, 1.0, 0.0], -0.1)];
    floored.contact = ContactModel::Penalty { stiffness: 1e6 };
    for model in [free, floored] {
        let model = Arc::new(model);
        one_local_global_solve_both_ways(&context, &model);
    }
}

/// The same for a free body stiff at its step (a 1e12 Pa bar of 0.1 m cells: `h^2 E /
/// (rho dx^2)` about 1e8), whose global steps the GPU splits along its translations: before,
/// the dense inverse in f32 kept only the translation and the objective rose 60-fold a global
/// step, and FSAI's CG left the body metres from the CPU's. Then for two such bars above each
/// other and a pinned one above them, each free bar split along its own translations.
#[test]
fn a_stiff_free_bodys_local_global_solves_agree() {
    use crate::contact::{Collider, ContactModel};
    use crate::material::Material;
    use crate::mesh::TetMesh;
    let Some(context) = context() else { return };
    let bar = TetMesh::bar([10, 3, 3], [1.0, 0.4, 0.3]);
    for bars in [1, 3] {
        let mut free = Model::empty([0.0, -9.81, 0.0]);
        for k in 0..bars {
            let raised: Vec<[f64; 3]> =
                bar.positions().iter().map(|p| [p[0], p[1] + k as f64, p[2]]).collect();
            let mesh = TetMesh::new(raised, bar.tets().to_vec()).unwrap();
            free.add_tet_body(&mesh, &[Material::corotated(1e12, 0.3)], 1000.0).unwrap();
        }
        if bars > 1 {
            // The last bar's end, held.
            for v in 0..free.vertex_count() {
                free.pinned[v] = free.rest[v][0] < 1e-9 && free.rest[v][1] > bars as f64 - 1.5;
            }
        }
        let mut floored = free.clone();
        floored.colliders = vec![Collider::plane([0.0, 1.0, 0.0], -0.1)];
        floored.contact = ContactModel::Penalty { stiffness: 1e6 };
        for model in [free, floored] {
            one_local_global_solve_both_ways(&context, &Arc::new(model));
        }
    }
}

fn one_local_global_solve_both_ways(context: &Arc<super::GpuContext>, model: &Arc<Model>) {
    use crate::backend::{LocalGlobalRequest, Stages};
    use crate::objective::{Node, StepProblem};
    let rest = model.rest.clone();
    // A backward-Euler step from rest towards a sagged, twisted target.
    let target: Vec<[f64; 3]> =
        rest.iter().map(|p| [p[0], p[1] - 0.3 * p[0] * p[0], p[2] + 0.1 * p[0] * p[1]]).collect();
    let nodes = [Node { weight: 1.0, theta: 1.0 }];
    let problem = || StepProblem::undamped(&rest, &target, &nodes, H, 0.5);
    let request = LocalGlobalRequest {
        iterations: 10,
        gradient_tolerance: 1e-12,
        record_objectives: false,
        linear_tolerance: 1e-5,
        max_linear_iterations: 500,
    };
    let solve = |backend: &mut dyn Stages| {
        backend.begin_step(problem());
        backend.set_iterate(&rest);
        let report = backend.local_global(&request);
        let mut x = vec![[0.0; 3]; rest.len()];
        backend.read_iterate(&mut x);
        (report, x)
    };
    let mut cpu = crate::backend::cpu::CpuBackend::new(model.clone());
    let (exact, exact_x) = solve(&mut cpu);
    let mut runs = Vec::new();
    for fsai in [false, true] {
        let mut gpu = super::GpuBackend::new(context.clone(), model.clone()).unwrap();
        if fsai {
            gpu.use_fsai_only();
        }
        runs.push(solve(&mut gpu));
        assert!(gpu.take_error().is_none());
        if !fsai && model.colliders.is_empty() {
            // A free dense iteration records three dispatches: its local step, its gather and
            // the global step, which also moves the iterate; the last local step and the
            // state the solve ends in add four. It ends where the first solve did.
            let before = gpu.device_counts().unwrap();
            let (_, again) = solve(&mut gpu);
            let counts = gpu.device_counts().unwrap().since(&before);
            println!("dense, again: {counts:?}");
            assert!(counts.dispatches <= 3 * request.iterations as u64 + 4, "{counts:?}");
            let first = runs.last().map(|(_, x): &(_, Vec<[f64; 3]>)| x.clone()).unwrap();
            let apart = first.iter().zip(&again).flat_map(|(p, q)| (0..3).map(move |c| (p[c] - q[c]).abs()));
            assert!(apart.fold(0.0, f64::max) <= 1e-6, "the second solve ends elsewhere");
        }
    }
    let [(dense, dense_x), (fsai, fsai_x)] = <[_; 2]>::try_from(runs).ok().unwrap();
    // The largest distance between corresponding vertices, and where.
    let gap = |a: &[[f64; 3]], b: &[[f64; 3]]| {
        let distance =
            |(p, q): (&[f64; 3], &[f64; 3])| (0..3).map(|c| (p[c] - q[c]).powi(2)).sum::<f64>().sqrt();
        a.iter().zip(b).map(distance).enumerate().fold((0.0, 0), |w, (v, d)| if d > w.0 { (d, v) } else { w })
    };
    let (moved, _) = gap(&exact_x, &rest);
    let lowest = exact_x.iter().map(|p| p[1]).fold(f64::INFINITY, f64::min);
    println!("{} colliders: the lowest vertex at y = {lowest:.4} m", model.colliders.len());
    if !model.colliders.is_empty() {
        assert!(lowest < -0.09, "nothing reached the floor (lowest y {lowest})");
    }
    for (name, report, x) in [("dense", &dense, &dense_x), ("FSAI", &fsai, &fsai_x)] {
        let (difference, vertex) = gap(x, &exact_x);
        println!(
            "{name}: {} CG iterations, G {:.9e} (CPU {:.9e}), {difference:.2e} m from the CPU of {moved:.3} m",
            report.linear_iterations, report.objective, exact.objective
        );
        assert_eq!(report.iterations, exact.iterations, "{name}");
        assert!(difference <= 1e-5 * moved, "{name}: {difference:e} m from the CPU at vertex {vertex}");
        assert!((report.objective - exact.objective).abs() <= 1e-5 * exact.objective.abs(), "{name}");
    }
    if model.colliders.is_empty() {
        assert_eq!(dense.linear_iterations, request.iterations, "dense: {dense:?}");
    } else {
        assert!(dense.linear_iterations < fsai.linear_iterations, "dense {dense:?} FSAI {fsai:?}");
    }
}

/// Newton directions of a free bar stiff at its step (E 1e10 Pa, 0.1 m cells: `h^2 E / (rho
/// dx^2)` about 1e6), whose Jacobi solves the GPU splits along the translations, against the
/// CPU's direct solve, near rest: falling, and landing (its lowest vertices in a floor, a
/// corner in a sphere, a handle, drag and Rayleigh damping); then a pile of thirteen such free
/// parts, one of them a bar of 275 vertices, whose sums take two chunks, each part thrown its
/// own way; each in one workgroup and in the loop. Without the split f32 products by the matrix
/// hold the translations only as round-off: the directions were 5.8-9.9e-3 of their length off
/// falling and 2.1-2.7e-2 landing, in 117-208 CG iterations, and a free cube of E 1e9 Pa fell 2
/// m in a second where it falls 5. With it: 6e-5 and 8e-4, in 38 and 130. When the device split
/// at most eight groups, the pile's parts past the eighth sharing one with an earlier part, its
/// direction was 3.1e-3 of its length off in 633 CG iterations; now 6.5e-5 in 200. What is left
/// landing is a rigid motion (in a like scene a least-squares fit of one took all but 2e-8 of
/// it): the rotations, which the split leaves to CG, as their stiffness, the stresses', is lost
/// in f32 beside the elasticity's.
#[test]
fn a_stiff_free_bodys_newton_directions_agree() {
    use crate::backend::{Anchor, LinearSolver, Stages};
    use crate::contact::{Collider, ContactModel};
    use crate::mesh::TetMesh;
    use crate::objective::StepProblem;
    let Some(context) = context() else { return };
    let stiff = [Material::corotated(1e10, 0.3)];
    let mut falling = Model::empty([0.0, -9.81, 0.0]);
    falling.add_tet_body(&TetMesh::bar([3, 2, 2], [0.3, 0.2, 0.2]), &stiff, 1000.0).unwrap();
    let mut landing = falling.clone();
    landing.colliders =
        vec![Collider::plane([0.0, 1.0, 0.0], 0.005), Collider::sphere([0.3, 0.2, 0.1], 0.08)];
    landing.contact = ContactModel::Penalty { stiffness: 3e4 };
    let mut pile = Model::empty([0.0, -9.81, 0.0]);
    pile.add_tet_body(&TetMesh::bar([10, 4, 4], [1.0, 0.4, 0.4]), &stiff, 1000.0).unwrap();
    let cube = TetMesh::bar([1, 1, 1], [0.1; 3]);
    for k in 0..12 {
        let placed: Vec<[f64; 3]> =
            cube.positions().iter().map(|p| [p[0] + 0.2 * k as f64, p[1] + 0.5, p[2]]).collect();
        pile.add_tet_body(&TetMesh::new(placed, cube.tets().to_vec()).unwrap(), &stiff, 1000.0).unwrap();
    }
    let handle = [Anchor { vertex: 7, stiffness: 300.0, position: [0.1, 0.25, 0.1] }];
    let cases = [
        ("falling", falling, &[][..], 3e-4),
        ("landing", landing, &handle[..], 3e-3),
        ("a pile", pile, &[][..], 3e-4),
    ];
    let mut rng = ChaCha8Rng::seed_from_u64(51);
    for (name, model, anchors, tolerance) in cases {
        let model = Arc::new(model);
        // Near rest, as a stiff body stays: random strains of about 1e-4.
        let mut jitter =
            |p: &[f64; 3]| -> [f64; 3] { std::array::from_fn(|c| p[c] + rng.random_range(-1e-5..1e-5)) };
        let start: Vec<[f64; 3]> = model.rest.iter().map(&mut jitter).collect();
        let x: Vec<[f64; 3]> = start.iter().map(&mut jitter).collect();
        // Falling with one step of gravity's velocity, towards the next, each part also thrown
        // sideways its own way; landing, also sliding.
        let parts = model.parts().0;
        let fall: Vec<[f64; 3]> = (start.iter().zip(&parts))
            .map(|(p, &k)| {
                let side = 1e-3 * k as f64;
                [p[0] + side, p[1] - 2.0 * 9.81 * H * H, p[2] - side]
            })
            .collect();
        let slide: Vec<[f64; 3]> = start.iter().map(|p| [p[0] + 0.01, p[1] - 0.02, p[2]]).collect();
        let drag = vec![[2.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 2.0]; x.len()];
        let problem = if model.colliders.is_empty() {
            StepProblem::undamped(&start, &fall, &NODES, H, 0.5)
        } else {
            StepProblem {
                vertex_damping: &drag,
                rayleigh: 0.02,
                ..StepProblem::undamped(&start, &slide, &NODES, H, 0.5)
            }
        };
        let linearized = |backend: &mut dyn Stages| {
            backend.set_anchors(anchors);
            backend.begin_step(problem);
            backend.set_iterate(&x);
            backend.linearize(Projection::Psd);
        };
        let mut cpu = crate::backend::cpu::CpuBackend::new(model.clone());
        linearized(&mut cpu);
        cpu.solve_direction(LinearSolver::Cholesky, 1e-10, 1);
        let exact: Vec<f64> = cpu.direction().iter().flatten().copied().collect();
        let norm = exact.iter().map(|d| d * d).sum::<f64>().sqrt();
        for loop_solve in [false, true] {
            let mut gpu = super::GpuBackend::new(context.clone(), model.clone()).unwrap();
            if loop_solve {
                gpu.set_small_solve_limit(0);
            }
            linearized(&mut gpu);
            let report = gpu.solve_direction(LinearSolver::Pcg, 1e-6, 3000);
            let direction = gpu.read_direction();
            assert!(gpu.take_error().is_none());
            let difference =
                direction.iter().zip(&exact).map(|(&g, c)| (g as f64 - c).powi(2)).sum::<f64>().sqrt();
            println!(
                "{name}, {}: {} CG iterations, |d| {norm:.3e} m, {:.2e} of it from the CPU",
                if loop_solve { "loop" } else { "one workgroup" },
                report.iterations,
                difference / norm,
            );
            assert!(!report.negative_curvature, "{name}");
            assert!(difference <= tolerance * norm, "{name}: {difference:.3e} of {norm:.3e}");
        }
    }
}

/// Contexts made and dropped one after another keep finding the GPU: on an H200 the 30th
/// found no adapter while each context made a Vulkan instance of its own (they now share the
/// process's).
#[test]
fn contexts_made_and_dropped_in_turn_keep_finding_the_gpu() {
    let Some(first) = fresh_context() else { return };
    drop(first);
    for k in 0..40 {
        let context = super::GpuContext::new().unwrap_or_else(|e| panic!("context {k}: {e}"));
        let buffer = context.storage("probe", &[1.0f32, 2.0, 3.0]);
        let read: Vec<f32> = bytemuck::pod_collect_to_vec(&context.read_bytes(&buffer, 0, 12).unwrap());
        assert_eq!(read, [1.0, 2.0, 3.0], "context {k}");
    }
}

/// Newton directions preconditioned by the approximate inverse of the step's local/global
/// matrix (`LinearSolver::PcgProjective`) solve the systems Jacobi's do, in fewer CG
/// iterations on a bending bar; and with penalty contacts (their rows on Jacobi), handles
/// and damping in the matrix's diagonal.
#[test]
fn newton_directions_preconditioned_by_the_projective_inverse() {
    use crate::backend::{LinearSolver, Stages};
    use crate::objective::StepProblem;
    let Some(context) = context() else { return };
    // The benchmark's material: stiff enough that the elasticity, not the inertia, sets the
    // conditioning.
    let mut stiff = Model::empty([0.0, -9.81, 0.0]);
    let mesh = crate::mesh::TetMesh::bar([10, 6, 6], [1.0, 0.6, 0.6]);
    stiff.add_tet_body(&mesh, &[Material::stvk(1e6, 0.3)], 1000.0).unwrap();
    for v in 0..stiff.vertex_count() {
        stiff.pinned[v] = stiff.rest[v][0] < 1e-9;
    }
    let bar = Arc::new(stiff);
    let rest = bar.rest.clone();
    let sagged: Vec<[f64; 3]> = rest.iter().map(|p| [p[0], p[1] - 0.05 * p[0] * p[0], p[2]]).collect();
    let target: Vec<[f64; 3]> = rest.iter().map(|p| [p[0], p[1] - 0.01, p[2]]).collect();
    let contact = DampedContact::new();
    let direction = |model: &Arc<Model>, problem: &StepProblem<'_>, x: &[[f64; 3]], solver| {
        let mut gpu = super::GpuBackend::new(context.clone(), model.clone()).unwrap();
        if !contact.anchors.is_empty() && Arc::ptr_eq(model, &contact.model) {
            gpu.set_anchors(&contact.anchors);
        }
        gpu.begin_step(*problem);
        // The loop: one workgroup keeps Jacobi.
        gpu.set_small_solve_limit(0);
        gpu.set_iterate(x);
        gpu.linearize(Projection::Psd);
        let report = gpu.solve_direction(solver, 1e-6, 3000);
        let d = gpu.read_direction();
        assert!(gpu.take_error().is_none());
        (report, d)
    };
    let cases = [
        ("bar at rest", bar.clone(), StepProblem::undamped(&rest, &target, &NODES, H, 0.5), rest.clone()),
        ("bar sagged", bar.clone(), StepProblem::undamped(&rest, &target, &NODES, H, 0.5), sagged.clone()),
        ("contacts, handles, damping", contact.model.clone(), contact.problem(), contact.x.clone()),
    ];
    for (name, model, problem, x) in &cases {
        let (jacobi, dj) = direction(model, problem, x, LinearSolver::Pcg);
        let (fsai, df) = direction(model, problem, x, LinearSolver::PcgProjective);
        let norm = dj.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt();
        let difference = dj.iter().zip(&df).map(|(&a, &b)| (a as f64 - b as f64).powi(2)).sum::<f64>().sqrt();
        println!(
            "{name}: CG iterations Jacobi {} FSAI {}; directions differ by {:.2e} of their length",
            jacobi.iterations,
            fsai.iterations,
            difference / norm
        );
        assert!(!jacobi.negative_curvature && !fsai.negative_curvature, "{name}");
        assert!(difference <= 1e-3 * norm, "{name}: {difference:.3e} of {norm:.3e}");
        assert!(
            (fsai.slope - jacobi.slope).abs() <= 1e-4 * jacobi.slope.abs(),
            "{name}: {fsai:?} {jacobi:?}"
        );
        if model.tets.len() > 1000 {
            // 15-30 % fewer from these states to 1e-6; 27-36 % over whole steps to Newton's
            // forcing terms (docs/perf/gpu.md).
            assert!(
                (fsai.iterations as f64) < 0.9 * jacobi.iterations as f64,
                "{name}: FSAI {} against Jacobi {} CG iterations",
                fsai.iterations,
                jacobi.iterations
            );
        }
    }
}
