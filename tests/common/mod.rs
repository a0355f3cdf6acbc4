//! Helpers shared by the integration tests.
#![allow(dead_code)]

use lively::{Integrator, Material, Simulation, Solver, SpringKind, SpringMesh, TetMesh};

/// Every integrator this build implements.
pub const PLAIN_INTEGRATORS: [Integrator; 7] = [
    Integrator::ForwardEuler,
    Integrator::SymplecticEuler,
    Integrator::BackwardEuler,
    Integrator::Bdf2,
    Integrator::ImplicitMidpoint,
    Integrator::Newmark,
    Integrator::Avf,
];

/// The implicit ones.
pub const IMPLICIT_INTEGRATORS: [Integrator; 5] = [
    Integrator::BackwardEuler,
    Integrator::Bdf2,
    Integrator::ImplicitMidpoint,
    Integrator::Newmark,
    Integrator::Avf,
];

/// The pre-stretched rotating spring of stabilizing-integrators-realtime.md (Fig. 2):
/// E = k/2 (|x|^2 - 1)^2 with k = 1e5, m = 0.5 kg, |x0| = 1.5 m, v0 = 10 m/s across, h = 0.033.
/// Vertex 0 is the pinned anchor at the origin.
pub fn rotating_spring(integrator: Integrator) -> Simulation {
    let mesh = SpringMesh::new(vec![[0.0, 0.0, 0.0], [1.5, 0.0, 0.0]], vec![1.0, 0.5]).spring_with_rest(
        0,
        1,
        1.0,
        1e5,
        SpringKind::StVK,
    );
    let mut sim = Simulation::builder()
        .spring_body(mesh)
        .dt(0.033)
        .integrator(integrator)
        .solver(Solver::newton().tolerance(1e-9))
        .pin(|p| p[0] == 0.0)
        .build()
        .expect("valid spring scene");
    sim.set_state(&[[0.0; 3], [1.5, 0.0, 0.0]], &[[0.0; 3], [0.0, 10.0, 0.0]]).expect("valid state");
    sim
}

/// A free StVK bar stretched along x by `stretch` and released, no gravity.
pub fn stretched_bar(integrator: Integrator, youngs: f64, stretch: f64) -> Simulation {
    let mesh = TetMesh::bar([6, 2, 2], [0.6, 0.2, 0.2]);
    let stretched: Vec<[f64; 3]> = mesh.positions().iter().map(|p| [stretch * p[0], p[1], p[2]]).collect();
    let mut sim = Simulation::builder()
        .tet_body(mesh, Material::stvk(youngs, 0.3), 1000.0)
        .dt(1.0 / 30.0)
        .integrator(integrator)
        .solver(Solver::newton().tolerance(1e-8))
        .build()
        .expect("valid bar scene");
    let v = vec![[0.0; 3]; stretched.len()];
    sim.set_state(&stretched, &v).expect("valid state");
    sim
}

/// Largest `|a - b|` over all coordinates, with the vertex where it happens.
pub fn worst_difference(a: &[[f64; 3]], b: &[[f64; 3]]) -> (f64, usize) {
    a.iter()
        .zip(b)
        .enumerate()
        .map(|(i, (p, q))| ((0..3).map(|c| (p[c] - q[c]).abs()).fold(0.0, f64::max), i))
        .fold((0.0, 0), |acc, e| if e.0 > acc.0 { e } else { acc })
}
