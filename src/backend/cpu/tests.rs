//! The CPU stages against finite differences and residuals, on seeded random inputs.

use std::sync::Arc;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::CpuBackend;
use crate::backend::{Anchor, Deferral, LinearSolver, Stages};
use crate::contact::Collider;
use crate::material::{Material, Projection};
use crate::mesh::{SpringKind, SpringMesh, TetMesh};
use crate::model::Model;
use crate::objective::{Node, StepProblem};

/// A bar of every material in turn plus springs of both kinds, one end pinned, gravity on.
pub(crate) fn mixed_model(material: Material) -> Model {
    let mut model = Model::empty([0.0, -9.81, 0.0]);
    model.add_tet_body(&TetMesh::bar([3, 2, 2], [0.3, 0.2, 0.2]), &[material], 1000.0).unwrap();
    let springs =
        SpringMesh::new(vec![[0.5, 0.0, 0.0], [0.6, 0.1, 0.0], [0.7, 0.0, 0.1]], vec![0.2, 0.3, 0.4])
            .spring(0, 1, 500.0, SpringKind::Hooke)
            .spring(1, 2, 800.0, SpringKind::StVK)
            .spring(0, 2, 300.0, SpringKind::Hooke);
    model.add_spring_body(&springs).unwrap();
    for v in 0..model.vertex_count() {
        model.pinned[v] = model.rest[v][0] < 1e-9;
    }
    // Colliders of every shape, placed so that some vertices are inside them.
    model.colliders = vec![
        Collider::plane([0.0, 1.0, 0.0], 0.005),
        Collider::sphere([0.3, 0.2, 0.1], 0.08),
        Collider::cuboid([0.2, 0.1, 0.2], [0.03, 0.04, 0.05]),
        Collider::capsule([0.55, -0.1, 0.0], [0.65, 0.2, 0.05], 0.04),
        Collider::sdf(sphere_grid([0.2, 0.1, 0.1], 0.06)),
    ];
    model.contact = crate::contact::ContactModel::Penalty { stiffness: 3e4 };
    model
}

/// The signed-distance grid of a faceted sphere, sampled every 0.02.
fn sphere_grid(center: [f64; 3], radius: f64) -> crate::mesh::SignedDistanceGrid {
    let surface = crate::mesh::TriMesh::sphere(center, radius, 2).unwrap();
    crate::mesh::SignedDistanceGrid::from_surface(&surface, 0.02, 0.04).unwrap()
}

fn perturbed(x: &[[f64; 3]], scale: f64, rng: &mut ChaCha8Rng) -> Vec<[f64; 3]> {
    x.iter().map(|p| std::array::from_fn(|c| p[c] + rng.random_range(-scale..scale))).collect()
}

/// A backend loaded with an AVF-like two-node objective at random start, target and iterate.
fn loaded(material: Material, seed: u64) -> (CpuBackend, Vec<[f64; 3]>) {
    let nodes = [Node { weight: 2.0 / 3.0, theta: 0.5 }, Node { weight: 1.0 / 12.0, theta: 1.0 }];
    loaded_with(material, seed, &nodes)
}

/// A backend loaded with an objective of `nodes` at random start, target and iterate.
fn loaded_with(material: Material, seed: u64, nodes: &[Node]) -> (CpuBackend, Vec<[f64; 3]>) {
    let model = Arc::new(mixed_model(material));
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let start = perturbed(&model.rest, 0.01, &mut rng);
    let target = perturbed(&model.rest, 0.02, &mut rng);
    let mut x = perturbed(&start, 0.01, &mut rng);
    for v in 0..x.len() {
        if model.pinned[v] {
            x[v] = start[v];
        }
    }
    let n = model.vertex_count();
    let mut backend = CpuBackend::new(model);
    backend.set_anchors(&[
        Anchor { vertex: 5, stiffness: 700.0, position: [0.2, 0.3, 0.1] },
        Anchor { vertex: 5, stiffness: 300.0, position: [0.1, 0.1, 0.3] },
        Anchor { vertex: n as u32 - 1, stiffness: 900.0, position: [0.8, 0.0, 0.1] },
    ]);
    // Random symmetric positive semi-definite per-vertex damping quadratics.
    let damping: Vec<[f64; 9]> = (0..n)
        .map(|_| {
            let a: [f64; 9] = std::array::from_fn(|_| rng.random_range(-1.0..1.0));
            let m = glam::DMat3::from_cols_array(&a);
            (m * m.transpose() * 40.0).to_cols_array()
        })
        .collect();
    // Linear terms as friction against a moving collider makes them.
    let linear: Vec<[f64; 4]> = (0..n)
        .map(|_| {
            std::array::from_fn(
                |k| if k < 3 { rng.random_range(-3.0..3.0) } else { rng.random_range(0.0..0.1) },
            )
        })
        .collect();
    backend.begin_step(StepProblem {
        start: &start,
        target: &target,
        rigid_steps: &[],
        rigid_shape: &start,
        nodes,
        dt: 1.0 / 30.0,
        vertex_damping: &damping,
        vertex_linear: &linear,
        rayleigh: 0.01,
        couplings: &[],
        damping_weight: 0.7,
    });
    backend.set_iterate(&x);
    (backend, x)
}

const MATERIALS: [fn(f64, f64) -> Material; 6] = [
    Material::stvk,
    Material::corotated,
    Material::fixed_corotated,
    Material::neo_hookean,
    Material::stable_neo_hookean,
    Material::arap,
];

#[test]
fn objective_gradient_and_hessian_match_finite_differences() {
    for (m, material) in MATERIALS.iter().enumerate() {
        let (mut backend, x) = loaded(material(2e4, 0.3), 10 + m as u64);
        assert_derivatives_match_finite_differences(&mut backend, &x, &format!("material {m}"));
    }
}

/// The barrier's vertex terms, on a bar whose bottom vertices hover within the activation
/// distance of a plane and whose end is near a sphere and a capsule.
#[test]
fn barrier_terms_match_finite_differences() {
    let mut model = Model::empty([0.0, -9.81, 0.0]);
    let bar = TetMesh::bar([3, 2, 2], [0.3, 0.2, 0.2]);
    model.add_tet_body(&bar, &[Material::stable_neo_hookean(2e4, 0.3)], 1000.0).unwrap();
    model.colliders = vec![
        Collider::plane([0.0, 1.0, 0.0], -0.003),
        Collider::sphere([0.36, 0.1, 0.1], 0.055),
        Collider::capsule([0.0, 0.26, -0.1], [0.0, 0.26, 0.3], 0.055),
    ];
    let distance = 0.008;
    model.contact = crate::contact::ContactModel::Barrier { distance, stiffness: 1e3 };
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let start = perturbed(&model.rest, 1e-3, &mut rng);
    let x = perturbed(&start, 1e-3, &mut rng);
    let near = x
        .iter()
        .filter(|p| {
            let phi = model
                .colliders
                .iter()
                .map(|c| c.distance(glam::DVec3::from(**p)).phi)
                .fold(f64::INFINITY, f64::min);
            assert!(phi > 0.0, "a vertex inside a collider");
            phi < distance
        })
        .count();
    assert!(near >= 10, "only {near} vertices feel the barrier");
    let mut backend = CpuBackend::new(Arc::new(model));
    // Two nodes, one of them midpoint-like: the barrier acts at the end positions.
    backend.begin_step(StepProblem::undamped(
        &start,
        &start,
        &[Node { weight: 2.0 / 3.0, theta: 0.5 }, Node { weight: 1.0 / 12.0, theta: 1.0 }],
        1.0 / 30.0,
        0.0,
    ));
    backend.set_iterate(&x);
    assert_derivatives_match_finite_differences(&mut backend, &x, "barrier");
}

/// `grad G` and `H d` at `x` against central differences of `G` and `grad G` along a random
/// direction of the free vertices.
fn assert_derivatives_match_finite_differences(backend: &mut CpuBackend, x: &[[f64; 3]], label: &str) {
    backend.linearize(Projection::None);
    let gradient = backend.gradient().to_vec();
    let pinned = backend.model.pinned.clone();
    let mut rng = ChaCha8Rng::seed_from_u64(99);
    let direction: Vec<[f64; 3]> = (0..x.len())
        .map(|v| if pinned[v] { [0.0; 3] } else { std::array::from_fn(|_| rng.random_range(-1.0..1.0)) })
        .collect();
    // Directional derivative of G and of grad G along a random direction, central FD.
    let step = 1e-6;
    let at = |backend: &mut CpuBackend, s: f64| {
        let shifted: Vec<[f64; 3]> =
            x.iter().zip(&direction).map(|(p, d)| std::array::from_fn(|c| p[c] + s * d[c])).collect();
        backend.set_iterate(&shifted);
        let value = backend.objective();
        backend.linearize(Projection::None);
        (value, backend.gradient().to_vec())
    };
    let (plus, g_plus) = at(backend, step);
    let (minus, g_minus) = at(backend, -step);
    backend.set_iterate(x);
    backend.linearize(Projection::None);
    let slope: f64 =
        gradient.iter().zip(&direction).map(|(g, d)| g[0] * d[0] + g[1] * d[1] + g[2] * d[2]).sum();
    let fd_slope = (plus - minus) / (2.0 * step);
    // G ~ 1e3 here; central differences at 1e-6 leave ~1e-12 G / 1e-6 = 1e-6 absolute noise.
    assert!(
        (slope - fd_slope).abs() < 1e-6 * slope.abs().max(1.0),
        "{label}: slope {slope} vs FD {fd_slope}"
    );
    let hv = backend.hessian_times(&direction);
    let scale = hv.iter().flatten().fold(1.0_f64, |a, b| a.max(b.abs()));
    for v in 0..x.len() {
        for c in 0..3 {
            let fd = (g_plus[v][c] - g_minus[v][c]) / (2.0 * step);
            let expected = if pinned[v] { direction[v][c] } else { fd };
            assert!(
                (hv[v][c] - expected).abs() < 1e-6 * scale,
                "{label}: (H d)[{v}][{c}] = {} vs FD {expected}",
                hv[v][c]
            );
        }
        if pinned[v] {
            assert_eq!(gradient[v], [0.0; 3], "{label}: pinned vertex {v} has a gradient");
        }
    }
}

#[test]
fn pcg_meets_its_residual_and_cholesky_solves_exactly() {
    // Jacobi and the factored local/global matrix as preconditioners.
    for (m, material) in MATERIALS.iter().enumerate() {
        let (mut backend, _) = loaded(material(2e4, 0.3), 20 + m as u64);
        backend.linearize(Projection::Psd);
        let b: Vec<[f64; 3]> = backend.gradient().iter().map(|g| g.map(|c| -c)).collect();
        let norm = |v: &[[f64; 3]]| v.iter().flatten().map(|c| c * c).sum::<f64>().sqrt();
        for (solver, tolerance) in
            [(LinearSolver::Pcg, 1e-8), (LinearSolver::PcgProjective, 1e-8), (LinearSolver::Cholesky, 1e-12)]
        {
            let report = backend.solve_direction(solver, tolerance, 10_000);
            assert!(!report.negative_curvature, "material {m}: projected system must be positive definite");
            let hd = backend.hessian_times(backend.direction());
            let residual: Vec<[f64; 3]> =
                hd.iter().zip(&b).map(|(a, b)| std::array::from_fn(|c| b[c] - a[c])).collect();
            let relative = norm(&residual) / norm(&b);
            // PCG stops at its tolerance; Cholesky is exact to rounding of a condition ~1e4 matrix.
            let bound = if solver == LinearSolver::Cholesky { 1e-10 } else { tolerance };
            assert!(relative <= bound, "material {m} {solver:?}: relative residual {relative:e}");
            assert!(report.slope < 0.0, "a solve of a PD system gives a descent direction");
        }
        // (No claim on the iteration counts: on these random states far from rest, in
        // colliders, the Laplacian models the Hessian poorly; tests/budget.rs compares the
        // preconditioners on a beam.)
    }
}

#[test]
fn pcg_stops_at_negative_curvature_with_a_descent_direction() {
    // A StVK bar compressed to half its length has an indefinite Hessian once the mass term is
    // small (large h).
    let model = Arc::new(mixed_model(Material::stvk(1e6, 0.3)));
    let squeezed: Vec<[f64; 3]> = model.rest.iter().map(|p| [0.5 * p[0], 0.6 * p[1], p[2]]).collect();
    let mut backend = CpuBackend::new(model);
    let nodes = [Node { weight: 1.0, theta: 1.0 }];
    backend.begin_step(StepProblem::undamped(&squeezed, &squeezed, &nodes, 10.0, 1.0));
    backend.set_iterate(&squeezed);
    backend.linearize(Projection::None);
    let report = backend.solve_direction(LinearSolver::Pcg, 1e-10, 10_000);
    assert!(report.negative_curvature, "expected CG to meet negative curvature");
    assert!(report.slope < 0.0, "the returned direction must still go downhill: slope {}", report.slope);
    backend.linearize(Projection::Psd);
    let report = backend.solve_direction(LinearSolver::Pcg, 1e-10, 10_000);
    assert!(!report.negative_curvature, "the projected Hessian is positive definite");
}

#[test]
fn same_input_gives_the_same_bits() {
    let run = || {
        let (mut backend, _) = loaded(Material::fixed_corotated(3e4, 0.35), 5);
        let status = backend.linearize(Projection::Psd);
        let report = backend.solve_direction(LinearSolver::Pcg, 1e-6, 1000);
        let values = backend.candidate_objectives(&[1.0, 0.5]);
        (status, report, values, backend.direction().to_vec())
    };
    assert_eq!(run(), run());
}

/// A request for a step solved with `solver` to a tight tolerance.
fn solve_request(solver: LinearSolver) -> crate::backend::DirectionRequest<'static> {
    crate::backend::DirectionRequest {
        projection: Projection::Psd,
        solve: true,
        deferral: Deferral::Solve,
        solver,
        gradient_tolerance: 1e-9,
        relative_tolerance: None,
        max_iterations: 100,
        candidates: &[],
        likely_converged: false,
        previous_gradient_norm: None,
        forcing_cap: 1.0,
    }
}

#[test]
fn mixed_step_descends_its_merit_at_the_predicted_slope() {
    // One-node objectives (backward Euler's, and a midpoint-like node), random stretches off
    // the positions' (so that the constraints are violated), damping, springs and colliders.
    for (m, material) in MATERIALS.iter().enumerate() {
        for node in [Node { weight: 1.0, theta: 1.0 }, Node { weight: 0.25, theta: 0.5 }] {
            let (mut backend, _) = loaded_with(material(2e4, 0.3), 40 + m as u64, &[node]);
            backend.mixed_begin();
            let mut rng = ChaCha8Rng::seed_from_u64(7);
            for s in &mut backend.mixed.stretch {
                *s = s.map(|v| v + rng.random_range(-0.02..0.02));
            }
            // The displacement formulation's gradient is Newton's.
            let newton = backend.linearize(Projection::Psd).gradient_norm;
            let request = solve_request(LinearSolver::Cholesky);
            let done = backend.mixed_direction(&request);
            let label = format!("{:?} theta {}", material(2e4, 0.3).model(), node.theta);
            let relative = (done.linearization.gradient_norm - newton).abs() / newton;
            assert!(
                relative < 1e-12,
                "{label}: gradient norm {} vs Newton's {newton}",
                done.linearization.gradient_norm
            );
            let slope = done.direction.expect("a step").slope;
            assert!(slope < 0.0, "{label}: slope {slope}");
            let h = 1e-6;
            let merits = backend.mixed_merits(&[-h, 0.0, h]);
            assert_eq!(merits[1], done.merit, "{label}: the merit at the iterate");
            let full_step = backend.mixed_merits(&[1.0])[0];
            assert_eq!(full_step, done.full_step_merit, "{label}: the merit after the full step");
            let fd = (merits[2] - merits[0]) / (2.0 * h);
            assert!(
                (fd - slope).abs() < 1e-5 * slope.abs(),
                "{label}: slope {slope} vs finite difference {fd}"
            );
        }
    }
}

/// The decompositions the merit keeps at the full step are, bit for bit, those the next
/// linearization would make itself: taking them changes nothing but the time.
#[test]
fn a_taken_full_step_linearizes_as_a_fresh_decomposition_would() {
    let node = Node { weight: 1.0, theta: 1.0 };
    let request = solve_request(LinearSolver::Pcg);
    let [mut kept, mut fresh] = [0, 1].map(|_| loaded_with(Material::corotated(2e4, 0.3), 17, &[node]).0);
    let mut outcomes = Vec::new();
    for (b, backend) in [&mut kept, &mut fresh].into_iter().enumerate() {
        backend.mixed_begin();
        let first = backend.mixed_direction(&request);
        assert!(first.direction.is_some() && first.full_step_merit.is_finite());
        backend.mixed_advance(1.0);
        if b == 1 {
            assert!(backend.mixed.forget_full_step(), "the full step's decompositions were kept");
        }
        let second = backend.mixed_direction(&request);
        let direction = second.direction.expect("a second step");
        outcomes.push((
            second.linearization.gradient_norm.to_bits(),
            second.merit.to_bits(),
            second.full_step_merit.to_bits(),
            direction.slope.to_bits(),
            backend.direction().to_vec(),
        ));
    }
    assert_eq!(outcomes[0], outcomes[1]);
}

/// After a whole PCG step, the linearization reports `|g(x + d) - g(x) - H d|`, the part of
/// the new gradient the linear model missed; after any other move it reports nothing.
#[test]
fn model_error_is_what_the_linear_model_missed() {
    let (mut backend, _) = loaded(Material::corotated(3e4, 0.35), 8);
    // Projected blocks: a solve on the random state's indefinite Hessian would stop early.
    let before = backend.linearize(Projection::Psd);
    assert_eq!(before.model_error, None, "no step taken yet");
    let g0 = backend.gradient().to_vec();
    // A loose solve, so that its residual is a large part of the new gradient.
    backend.solve_direction(LinearSolver::Pcg, 1e-2, 1000);
    let d = backend.direction().to_vec();
    let hd = backend.hessian_times(&d);
    backend.advance(1.0);
    let after = backend.linearize(Projection::Psd);
    let missed: f64 = backend
        .gradient()
        .iter()
        .zip(&g0)
        .zip(&hd)
        .map(|((g1, g0), hd)| (0..3).map(|c| (g1[c] - g0[c] - hd[c]).powi(2)).sum::<f64>())
        .sum::<f64>()
        .sqrt();
    let error = after.model_error.expect("a whole PCG step");
    // The residual is part of the new gradient, so the gradient alone would not tell.
    assert!(missed > 0.0 && (missed - after.gradient_norm).abs() > 1e-3 * missed);
    assert!((error - missed).abs() <= 1e-9 * missed, "reported {error}, missed {missed}");
    // Half a step, a scaled direction, or a new iterate: the residual says nothing.
    backend.solve_direction(LinearSolver::Pcg, 1e-2, 1000);
    backend.advance(0.5);
    assert_eq!(backend.linearize(Projection::Psd).model_error, None);
    backend.solve_direction(LinearSolver::Pcg, 1e-2, 1000);
    backend.scale_direction(0.9);
    backend.advance(1.0);
    assert_eq!(backend.linearize(Projection::Psd).model_error, None);
}

/// A body too large for the factor (the 10K-tet block of `cpu_step`, fill 10) takes the
/// coarse correction with Jacobi: sagging under gravity, its Newton direction is smooth, the
/// modes one-level preconditioners converge last. The same direction to the same residual
/// in under half of Jacobi's iterations (61 against 158).
#[test]
fn the_coarse_correction_cuts_a_large_bodys_iterations() {
    let mut model = Model::empty([0.0, -9.81, 0.0]);
    model
        .add_tet_body(&TetMesh::bar([20, 10, 10], [1.0, 0.5, 0.5]), &[Material::stvk(1e6, 0.3)], 1000.0)
        .unwrap();
    for v in 0..model.vertex_count() {
        model.pinned[v] = model.rest[v][0] < 1e-9;
    }
    let model = Arc::new(model);
    // Bent down, as the bar is a few steps into its fall.
    let x: Vec<[f64; 3]> = model.rest.iter().map(|p| [p[0], p[1] - 0.05 * p[0] * p[0], p[2]]).collect();
    let mut backend = CpuBackend::new(model);
    let nodes = [Node { weight: 1.0, theta: 1.0 }];
    backend.begin_step(StepProblem::undamped(&x, &x, &nodes, 1.0 / 30.0, 1.0));
    backend.set_iterate(&x);
    backend.linearize(Projection::Psd);
    let tolerance = 1e-6;
    let mut solved = Vec::new();
    for solver in [LinearSolver::Pcg, LinearSolver::PcgProjective] {
        let report = backend.solve_direction(solver, tolerance, 10_000);
        assert!(!report.negative_curvature);
        solved.push((report.iterations, backend.direction().to_vec()));
    }
    let ((jacobi, d_jacobi), (coarse, d_coarse)) = (&solved[0], &solved[1]);
    assert!(2 * coarse < *jacobi, "coarse {coarse} against Jacobi's {jacobi} iterations");
    let norm = |v: &[[f64; 3]]| v.iter().flatten().map(|c| c * c).sum::<f64>().sqrt();
    let difference: Vec<[f64; 3]> =
        d_jacobi.iter().zip(d_coarse).map(|(a, b)| std::array::from_fn(|c| a[c] - b[c])).collect();
    assert!(
        norm(&difference) <= 1e-4 * norm(d_jacobi),
        "directions differ by {:e}",
        norm(&difference) / norm(d_jacobi)
    );
    println!(
        "10K-tet block, relative residual {tolerance}: Jacobi {jacobi} CG iterations, with the coarse correction {coarse}"
    );
}

/// `G` stays above the objective's floor everywhere, and the step's start lies as high above
/// it as `floor_and_start_height` says from the start's potential (no damping here: its
/// constants are what the height leaves out). Every material, pins, springs, penalty colliders,
/// handles, gravity; backward Euler's node and an AVF-like pair.
#[test]
fn the_objective_stays_above_its_floor() {
    use crate::objective::floor_and_start_height;
    let pair = [Node { weight: 2.0 / 3.0, theta: 0.5 }, Node { weight: 1.0 / 12.0, theta: 1.0 }];
    for (k, make) in MATERIALS.iter().enumerate() {
        for nodes in [&Node::POTENTIAL[..], &pair[..]] {
            let model = Arc::new(mixed_model(make(1e5, 0.3)));
            let mut rng = ChaCha8Rng::seed_from_u64(k as u64);
            let pin = |mut x: Vec<[f64; 3]>, start: &[[f64; 3]]| {
                for v in 0..x.len() {
                    if model.pinned[v] {
                        x[v] = start[v];
                    }
                }
                x
            };
            let start = perturbed(&model.rest, 0.01, &mut rng);
            let target = pin(perturbed(&model.rest, 0.05, &mut rng), &start);
            let dt = 1.0 / 30.0;
            let mut backend = CpuBackend::new(model.clone());
            backend.set_anchors(&[Anchor { vertex: 5, stiffness: 700.0, position: [0.2, 0.3, 0.1] }]);
            backend.begin_step(StepProblem::undamped(&start, &target, nodes, dt, 1.0));
            let potential = backend.potential(&start);
            let (floor, height) = floor_and_start_height(&model, &start, &target, nodes, dt, potential);
            backend.set_iterate(&start);
            let at_start = backend.objective();
            let rounding = 1e-12 * (at_start.abs() + floor.abs());
            assert!(
                (at_start - floor - height).abs() <= rounding,
                "{k}: G(start) - floor {} against the height {height}",
                at_start - floor
            );
            for trial in 1..=20 {
                let x = pin(perturbed(&start, 0.02 * trial as f64, &mut rng), &start);
                backend.set_iterate(&x);
                let value = backend.objective();
                assert!(value >= floor - rounding, "{k}, trial {trial}: G {value} under the floor {floor}");
            }
        }
    }
}
