//! Rest shapes stay put; free fall is integrated exactly where the scheme is exact.

mod common;

use common::{plain_integrators, worst_difference};
use lively::{Integrator, Material, MaterialModel, Simulation, Solver, SpringKind, SpringMesh, TetMesh};

const MATERIALS: [fn(f64, f64) -> Material; 6] = [
    Material::stvk,
    Material::corotated,
    Material::fixed_corotated,
    Material::neo_hookean,
    Material::stable_neo_hookean,
    Material::arap,
];

/// A bar, a 2-vertex StVK spring and (optionally) a light Hooke cloth.
fn scene(integrator: Integrator, material: Material, gravity: [f64; 3], with_cloth: bool) -> Simulation {
    let springs = SpringMesh::new(vec![[2.0, 0.0, 0.0], [2.0, 1.0, 0.0]], vec![0.5, 0.5]).spring(
        0,
        1,
        1e3,
        SpringKind::StVK,
    );
    // Explicit schemes are unstable at 1/30 s on these stiffnesses (cloth: omega ~ 3e3 rad/s),
    // and then rest is an equilibrium only in exact arithmetic; give them a stable step.
    let dt = if matches!(integrator, Integrator::ForwardEuler | Integrator::SymplecticEuler) {
        1e-4
    } else {
        1.0 / 30.0
    };
    let mut builder = Simulation::builder()
        .tet_body(TetMesh::bar([3, 2, 2], [0.3, 0.2, 0.2]), material, 1000.0)
        .spring_body(springs)
        .gravity(gravity)
        .dt(dt)
        .integrator(integrator)
        // Tight enough that a step is solved, not just predicted: accepting the explicit guess
        // whenever its residual is below tolerance amplifies rounding by ~(omega h)^2 per step
        // on the stiff cloth. Rounding leaves gradients of ~1e-10 N here, so Newton may take a
        // round-off step or two; it stops there by itself.
        .solver(Solver::newton().tolerance(1e-10));
    if with_cloth {
        builder = builder.spring_body(SpringMesh::cloth(3, 2, [0.3, 0.2]));
    }
    builder.build().unwrap()
}

#[test]
fn rest_shape_has_zero_energy_and_stays_put_for_every_integrator() {
    for integrator in plain_integrators() {
        for (m, material) in MATERIALS.iter().enumerate() {
            let mut sim = scene(integrator.clone(), material(1e5, 0.3), [0.0; 3], true);
            let rest = sim.positions().to_vec();
            // Rounding F = I from rest positions leaves energies at ~(1e-16)^2 of the moduli.
            assert!(sim.energy().total.abs() < 1e-18, "{integrator:?}: rest energy {}", sim.energy().total);
            for step in 0..5 {
                let stats = sim.step().unwrap();
                assert!(stats.converged, "{integrator:?} material {m} step {step}");
                // Zero gradient at rest, up to rounding: what is left is at most a few times
                // 1e-10 N (see the solver tolerance above).
                assert!(
                    stats.gradient_norm < 1e-9,
                    "{integrator:?} material {m}: gradient {:e} at rest",
                    stats.gradient_norm
                );
            }
            let (moved, at) = worst_difference(&rest, sim.positions());
            // Rest forces are rounding of F = I: about eps k |x| ~ 1e-13 N on the 1 g cloth
            // vertices, i.e. 1e-10 m/s^2, moving them ~1e-12 m in five steps.
            assert!(moved < 1e-11, "{integrator:?}: vertex {at} moved {moved:e} from rest");
        }
    }
}

/// A free body under gravity: every vertex follows x0 + v0 t + g t^2 / 2.
fn free_fall(integrator: Integrator) -> (Simulation, Vec<[f64; 3]>, [f64; 3]) {
    // No light cloth here: rounding forces on 1 g vertices would dominate the comparison.
    let mut sim = scene(integrator, Material::stvk(1e5, 0.3), [0.0, -9.81, 0.0], false);
    let x0 = sim.positions().to_vec();
    let v0 = [0.3, 1.0, -0.2];
    let velocities = vec![v0; x0.len()];
    sim.set_state(&x0, &velocities).unwrap();
    (sim, x0, v0)
}

fn parabola(x0: &[[f64; 3]], v0: [f64; 3], g: [f64; 3], t: f64, offset: [f64; 3]) -> Vec<[f64; 3]> {
    x0.iter().map(|p| std::array::from_fn(|c| p[c] + v0[c] * t + 0.5 * g[c] * t * t + offset[c])).collect()
}

const G: [f64; 3] = [0.0, -9.81, 0.0];

#[test]
fn implicit_midpoint_free_fall_is_the_exact_parabola() {
    let (mut sim, x0, v0) = free_fall(Integrator::ImplicitMidpoint);
    for step in 1..=60 {
        sim.step().unwrap();
        let t = sim.time();
        let (err, at) = worst_difference(sim.positions(), &parabola(&x0, v0, G, t, [0.0; 3]));
        // Exact but for rounding of O(1) coordinates and of the elastic forces of the moving
        // rest shape (~1e-13 N on 0.3 kg vertices). Backward Euler would be off by
        // h^2 g / 2 = 5e-3 m after one step.
        assert!(err < 1e-11, "step {step}: vertex {at} off the parabola by {err:e}");
        // v = 2 (x - x_n)/h - v_n turns ~2e-14 m of position rounding (|x| ~ 10 m) into
        // ~1e-12 m/s per step; 60 steps stay below 1e-10 m/s even added up.
        let (verr, _) = worst_difference(sim.velocities(), &vec![[v0[0], v0[1] - 9.81 * t, v0[2]]; x0.len()]);
        assert!(verr < 1e-10, "step {step}: velocity off by {verr:e}");
    }
}

#[test]
fn bdf2_free_fall_is_exact_after_its_backward_euler_start() {
    // BDF2 reproduces quadratic motion exactly. Its first step is backward Euler, which lands
    // h^2 g / 2 low; every later step carries that start-up error forward exactly:
    // e_n = e_1 (1 + 1/3 + ... + 3^(1-n)) = (3/4) h^2 g (1 - 3^-n). Velocities stay exact.
    let (mut sim, x0, v0) = free_fall(Integrator::Bdf2);
    let h = sim.dt();
    for step in 1..=60 {
        sim.step().unwrap();
        let t = sim.time();
        let shrink = 1.0 - 3f64.powi(-step);
        let offset = [0.0, 0.75 * h * h * G[1] * shrink, 0.0];
        let (err, at) = worst_difference(sim.positions(), &parabola(&x0, v0, G, t, offset));
        // Same rounding budget as the midpoint test.
        assert!(err < 1e-11, "step {step}: vertex {at} off the predicted trajectory by {err:e}");
        let (verr, _) = worst_difference(sim.velocities(), &vec![[v0[0], v0[1] - 9.81 * t, v0[2]]; x0.len()]);
        assert!(verr < 1e-10, "step {step}: velocity off by {verr:e}");
    }
}

#[test]
fn backward_euler_free_fall_loses_exactly_m_h2_g2_over_2_per_step() {
    let (mut sim, _, _) = free_fall(Integrator::BackwardEuler);
    let mass: f64 = sim.model().masses().iter().sum();
    let h = sim.dt();
    let expected = mass * h * h * 9.81 * 9.81 / 2.0;
    let mut previous = sim.energy().total;
    for step in 0..60 {
        sim.step().unwrap();
        let loss = previous - sim.energy().total;
        previous = sim.energy().total;
        // Energies here are O(100) J; the per-step loss is known to f64 rounding of them.
        assert!((loss - expected).abs() < 1e-9, "step {step}: lost {loss} J, expected {expected} J");
    }
}

#[test]
fn pinned_vertices_stay_exactly_where_they_are() {
    let mut sim = Simulation::builder()
        .tet_body(
            TetMesh::bar([6, 2, 2], [0.6, 0.2, 0.2]),
            Material::lame(MaterialModel::StVK, 1e5, 1e5),
            1000.0,
        )
        .gravity([0.0, -9.81, 0.0])
        .integrator(Integrator::Bdf2)
        .pin(|p| p[0] < 1e-9)
        .build()
        .unwrap();
    let pinned: Vec<usize> = (0..sim.positions().len()).filter(|&v| sim.model().pinned()[v]).collect();
    assert_eq!(pinned.len(), 9);
    let before: Vec<[f64; 3]> = pinned.iter().map(|&v| sim.positions()[v]).collect();
    for _ in 0..20 {
        sim.step().unwrap();
    }
    for (k, &v) in pinned.iter().enumerate() {
        assert_eq!(sim.positions()[v], before[k], "pinned vertex {v} moved");
        assert_eq!(sim.velocities()[v], [0.0; 3]);
    }
    // ...while the free end has sagged.
    let tip = sim.positions().iter().map(|p| p[1]).fold(f64::INFINITY, f64::min);
    assert!(tip < -0.01, "the bar should sag under gravity, lowest point {tip}");
}

/// A squashed stiff body falls while a capped solve relaxes it: a 1-cell bar, half 4.8e8 Pa
/// StVK and half a 9.2e13 Pa corotated inclusion, squashed, on a weak penalty floor that
/// holds it along z, a handle on one corner for the first step, then let go under 8 Newton
/// iterations at h = 0.46 s (found by comparing the backends on random scenes), and under
/// mixed FEM capped at 2, 4 and 8 iterations, whose condensed solve is the same PCG. Its elastic
/// forces are 1e7-1e11 N and gravity's pull 0.3 N: CG, stopped at its relative residual, left
/// the fall out of every direction, and the rigid guess, which carries it, lost to the
/// step's start (its turn tilts the bar into the floor). On the CPU the bar hung in the air
/// after the handle let go (5e-10 m under Newton, under 1e-6 m under mixed FEM); the GPU's
/// split of free parts let it fall 2.2 m. The CPU now corrects each free part's translation
/// after CG, and both fall `g h^2` and more in the step after the release.
#[test]
fn a_squashed_stiff_body_falls_while_a_capped_solve_relaxes_it() {
    let (h, g) = (0.46, 9.81);
    let pcg = lively::LinearSolver::Pcg;
    let solvers = [
        ("Newton, 8 iterations", Solver::newton().max_iterations(8)),
        ("mixed FEM, 2 iterations", Solver::mixed_fem().max_iterations(2)),
        ("mixed FEM, 4 iterations", Solver::mixed_fem().max_iterations(4)),
        ("mixed FEM, 8 iterations", Solver::mixed_fem().max_iterations(8)),
    ];
    for backend in common::backends() {
        for (name, solver) in &solvers {
            let material_at = |c: [f64; 3]| match c[0] > 0.05 {
                true => Material::corotated(9.2e13, 0.0),
                false => Material::stvk(4.8e8, 0.0),
            };
            let builder = Simulation::builder()
                .tet_body_graded(TetMesh::bar([1, 1, 1], [0.1; 3]), material_at, 33.6)
                .dt(h)
                .gravity([0.0, -g, 0.0])
                .integrator(Integrator::BackwardEuler)
                .solver(solver.clone().tolerance(1e-6).linear_solver(pcg))
                .damping(lively::Damping::Rayleigh { stiffness: 5.8e-5 })
                .collider(lively::Collider::plane([0.0, 0.0, 1.0], 0.0))
                .contact_model(lively::ContactModel::Penalty { stiffness: 100.0 });
            let mut sim = common::on_backend(builder, backend).build().unwrap();
            let squashed: Vec<[f64; 3]> =
                sim.positions().iter().map(|p| [0.86 * p[0], 0.3 * p[1], 1.06 * p[2]]).collect();
            sim.set_state(&squashed, &vec![[0.0; 3]; squashed.len()]).unwrap();
            let handle = sim.add_handle(sim.positions().len() - 1, 10.0).unwrap();
            let height = |sim: &Simulation| {
                sim.positions().iter().map(|p| p[1]).sum::<f64>() / sim.positions().len() as f64
            };
            sim.step().unwrap();
            sim.release_handle(handle).unwrap();
            let before = height(&sim);
            sim.step().unwrap();
            let fallen = before - height(&sim);
            println!("{backend:?}, {name}: fell {fallen:.4} m after the release, g h^2 = {:.4} m", g * h * h);
            assert!(fallen > g * h * h, "{backend:?}, {name}: fell {fallen} m");
        }
    }
}
