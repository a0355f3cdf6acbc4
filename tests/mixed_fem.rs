//! Mixed finite elements solved by SQP (mixed-fem-sqp.md): converged, the same answer as
//! Newton's; on stiff bodies fewer iterations; stopped early, less damping than Newton stopped
//! the same; soft flesh with near-rigid inclusions stays stable.

mod common;

use common::worst_difference;
use lively::{Backend, Error, Integrator, Material, Simulation, Solver, TetMesh};

/// A bar of 8x2x2 cells, 0.8 m long, pinned at x = 0 and falling under gravity from rest.
fn pinned_bar(material: Material, integrator: Integrator, solver: Solver) -> Simulation {
    Simulation::builder()
        .tet_body(TetMesh::bar([8, 2, 2], [0.8, 0.2, 0.2]), material, 1000.0)
        .gravity([0.0, -9.81, 0.0])
        .dt(1.0 / 30.0)
        .integrator(integrator)
        .solver(solver)
        .backend(Backend::Cpu)
        .pin(|p| p[0] == 0.0)
        .build()
        .expect("valid scene")
}

/// Steps a pinned bar falling from rest with both solvers converged tightly; returns the
/// worst position difference over `steps` steps relative to the largest displacement, and
/// the iteration counts.
fn converged_steps(material: Material, integrator: Integrator, steps: usize) -> (f64, usize, usize) {
    let tolerance = 1e-7;
    let mut newton = pinned_bar(
        material.clone(),
        integrator.clone(),
        Solver::newton().tolerance(tolerance).max_iterations(200),
    );
    let mut mixed =
        pinned_bar(material, integrator, Solver::mixed_fem().tolerance(tolerance).max_iterations(200));
    let rest = newton.positions().to_vec();
    let (mut worst, mut newton_iterations, mut mixed_iterations) = (0.0f64, 0, 0);
    for _ in 0..steps {
        let a = newton.step().expect("newton step");
        let b = mixed.step().expect("mixed step");
        assert!(a.converged && b.converged, "both converge: newton {a:?}, mixed {b:?}");
        newton_iterations += a.iterations;
        mixed_iterations += b.iterations;
        let (difference, _) = worst_difference(newton.positions(), mixed.positions());
        let (displacement, _) = worst_difference(newton.positions(), &rest);
        worst = worst.max(difference / displacement.max(1e-12));
    }
    (worst, newton_iterations, mixed_iterations)
}

#[test]
fn converged_mixed_fem_equals_converged_newton() {
    for youngs in [1e5, 1e7, 1e10] {
        for material in [Material::stable_neo_hookean(youngs, 0.45), Material::corotated(youngs, 0.3)] {
            for integrator in [Integrator::BackwardEuler, Integrator::Bdf2] {
                let (worst, newton, mixed) = converged_steps(material.clone(), integrator.clone(), 6);
                println!(
                    "E {youngs:.0e} {:?} {integrator:?}: worst difference {worst:.2e} of the displacement, \
                     iterations newton {newton} mixed {mixed}",
                    material.model()
                );
                assert!(
                    worst < 1e-5,
                    "E {youngs:e} {material:?} {integrator:?}: solutions differ by {worst:e}"
                );
            }
        }
    }
}

#[test]
fn refuses_what_it_cannot_do() {
    let build = |integrator, backend| {
        Simulation::builder()
            .tet_body(TetMesh::bar([2, 1, 1], [0.2, 0.1, 0.1]), Material::corotated(1e5, 0.3), 1000.0)
            .integrator(integrator)
            .solver(Solver::mixed_fem())
            .backend(backend)
            .build()
    };
    assert!(matches!(build(Integrator::Avf, Backend::Cpu), Err(Error::Unsupported(m)) if m.contains("AVF")));
    assert!(
        matches!(build(Integrator::BackwardEuler, Backend::Gpu), Err(Error::Unsupported(m)) if m.contains("CPU"))
    );
    let auto = build(Integrator::BackwardEuler, Backend::Auto).expect("auto picks the CPU");
    assert_eq!(auto.backend(), Backend::Cpu);
}
