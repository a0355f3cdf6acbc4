//! The papers' experiments as ready-made simulations with generated meshes, shared by the
//! demo, the examples and the tests.

use crate::{Integrator, Material, Result, Simulation, Solver, SpringKind, SpringMesh, TetMesh};

/// The pre-stretched rotating spring of stabilizing-integrators-realtime.md (Figs. 2-3):
/// `E = k/2 (|x|^2 - 1)^2` with k = 1e5, a 0.5 kg particle at |x0| = 1.5 m moving at 10 m/s
/// across the spring, h = 0.033 s. Vertex 0 is the pinned anchor at the origin.
pub fn rotating_spring(integrator: Integrator) -> Result<Simulation> {
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
        .build()?;
    sim.set_state(&[[0.0; 3], [1.5, 0.0, 0.0]], &[[0.0; 3], [0.0, 10.0, 0.0]])?;
    Ok(sim)
}

/// A free StVK bar of `cells` over `size`, stretched along x by `stretch` and released at
/// h = 1/30 s without gravity; Newton to 1e-8 N.
pub fn stretched_bar(
    integrator: Integrator,
    cells: [usize; 3],
    size: [f64; 3],
    youngs: f64,
    stretch: f64,
) -> Result<Simulation> {
    let mesh = TetMesh::bar(cells, size);
    let stretched: Vec<[f64; 3]> = mesh.positions().iter().map(|p| [stretch * p[0], p[1], p[2]]).collect();
    let mut sim = Simulation::builder()
        .tet_body(mesh, Material::stvk(youngs, 0.3), 1000.0)
        .dt(1.0 / 30.0)
        .integrator(integrator)
        // The compressed bar passes near buckling, where the step's minimizer is nearly
        // singular and Newton converges only linearly (halving |g| per iteration): give it
        // the iterations to reach the tolerance, on which AVF's conservation rests.
        .solver(Solver::newton().tolerance(1e-8).max_iterations(200))
        .build()?;
    let v = vec![[0.0; 3]; stretched.len()];
    sim.set_state(&stretched, &v)?;
    Ok(sim)
}

/// A spinning corotated cube (the stabilizing paper's Figs. 4-5 setting, h = 0.033 s): a 1 m
/// cube of 135 tets, E 1e5 Pa, nu 0.3, pre-stretched 1.5x along x and spinning at 3 rad/s
/// about a tilted axis; Newton to 1e-6 N.
pub fn spinning_cube(integrator: Integrator) -> Result<Simulation> {
    let mesh = TetMesh::bar([3, 3, 3], [1.0, 1.0, 1.0]);
    let mut sim = Simulation::builder()
        .tet_body(mesh, Material::corotated(1e5, 0.3), 1000.0)
        .dt(0.033)
        .integrator(integrator)
        .solver(Solver::newton().tolerance(1e-6))
        .build()?;
    let spin = 3.0;
    let rest = sim.positions().to_vec();
    let x: Vec<[f64; 3]> = rest.iter().map(|p| [0.5 + 1.5 * (p[0] - 0.5), p[1], p[2]]).collect();
    let v: Vec<[f64; 3]> = rest
        .iter()
        .map(|p| {
            let r = [p[0] - 0.5, p[1] - 0.5, p[2] - 0.5];
            [spin * (0.3 * r[2] - r[1]), spin * r[0], -0.3 * spin * r[0]]
        })
        .collect();
    sim.set_state(&x, &v)?;
    Ok(sim)
}
