//! The public API contract of DESIGN.md section 5 and the bad-input policy of section 7:
//! a clear error that says what to change, and the simulation left untouched.

mod common;

use lively::{
    Backend, Collider, ContactModel, Damping, Decay, Error, Integrator, Material, Simulation, Solver,
    SpringKind, SpringMesh, TetMesh,
};

fn bar_builder() -> lively::SimulationBuilder {
    Simulation::builder().tet_body(TetMesh::bar([4, 2, 2], [0.4, 0.2, 0.2]), Material::stvk(1e5, 0.3), 1000.0)
}

fn message(result: Result<Simulation, Error>) -> String {
    match result {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_design_contract_compiles_and_runs() {
    let mesh = TetMesh::bar([10, 3, 3], [1.0, 0.3, 0.3]);
    let builder = Simulation::builder()
        .tet_body(mesh.clone(), Material::stvk(1e5, 0.3), 1000.0)
        .dt(1.0 / 30.0)
        .gravity([0.0, -9.81, 0.0])
        .integrator(Integrator::Avf)
        .solver(Solver::newton().tolerance(1e-8).max_iterations(50))
        .backend(Backend::Gpu)
        .pin(|p| p[0] < 1e-9)
        .collider(Collider::plane([0.0, 1.0, 0.0], -0.1).friction(0.3))
        .contact_model(ContactModel::Penalty { stiffness: 1e5 })
        .self_collision(lively::SelfCollision { stiffness: 1e7, friction: 0.0 });
    match common::on_backend(builder, Backend::Gpu).build() {
        Ok(mut sim) => {
            assert_eq!(sim.backend(), Backend::Gpu);
            assert!(sim.step().unwrap().converged, "the design's example steps on the GPU");
        }
        Err(Error::NoGpu(_)) if common::gpu().is_none() => {}
        Err(e) => panic!("the design's example must build: {e}"),
    }

    let mut sim = Simulation::builder()
        .tet_body(mesh, Material::stvk(1e5, 0.3), 1000.0)
        .dt(1.0 / 30.0)
        .gravity([0.0, -9.81, 0.0])
        .integrator(Integrator::Avf)
        .solver(Solver::newton().tolerance(1e-8).max_iterations(50))
        .backend(Backend::Auto)
        .pin(|p| p[0] < 1e-9)
        .build()
        .unwrap();
    let stats = sim.step().unwrap();
    assert!(stats.converged && stats.iterations > 0 && stats.linear_iterations >= stats.iterations);
    assert!(stats.alpha.is_none());
    assert!(stats.timings.total >= stats.timings.evaluate);
    let x: &[[f64; 3]] = sim.positions();
    let v: &[[f64; 3]] = sim.velocities();
    let (x0, v0) = (x.to_vec(), v.to_vec());
    sim.set_state(&x0, &v0).unwrap();
    let e = sim.energy();
    assert!((e.total - (e.kinetic + e.potential)).abs() < 1e-9 * e.total.abs().max(1.0));
    assert_eq!(e.target, e.total);
    // At rest, nothing turns.
    let rest = sim.positions().to_vec();
    sim.set_state(&rest, &vec![[0.0; 3]; rest.len()]).unwrap();
    let l: [f64; 3] = sim.angular_momentum();
    assert_eq!(l, [0.0; 3]);
    // Each variant of the API's enums and constructors does what it names.
    let a_search = Integrator::ASearch {
        alpha_min: 0.0,
        alpha_max: 1.1,
        decay: Some(Decay { time_constant: 1.0, ground: 0.0 }),
    };
    let mut decaying = bar_builder().integrator(a_search).build().unwrap();
    let alpha = decaying.step().unwrap().alpha.expect("A-search reports its alpha");
    assert!((0.0..=1.1).contains(&alpha), "alpha {alpha}");
    let mut mixed = bar_builder().solver(Solver::mixed_fem()).backend(lively::Backend::Cpu).build().unwrap();
    assert!(mixed.step().unwrap().converged, "mixed FEM steps on the CPU");
    let refused = bar_builder().solver(Solver::mixed_fem()).integrator(Integrator::Avf).build();
    assert!(
        matches!(refused, Err(Error::Unsupported(_))),
        "mixed FEM keeps one stretch per tet at one node and must refuse AVF's two"
    );
    let projection = bar_builder().contact_model(ContactModel::Projection);
    let mut projected = projection.collider(Collider::plane([0.0, 1.0, 0.0], -0.1)).build().unwrap();
    assert!(projected.step().unwrap().converged, "projection contact steps on the CPU");
    let penalty = bar_builder()
        .contact_model(ContactModel::Penalty { stiffness: 1e4 })
        .collider(Collider::sphere([0.0; 3], 1.0))
        .collider(Collider::cuboid([0.0; 3], [1.0; 3]))
        .collider(Collider::capsule([0.0; 3], [1.0; 3], 0.1));
    assert!(penalty.build().is_ok());
    let cloth = SpringMesh::cloth(4, 4, [1.0, 1.0]);
    let springs = cloth.springs().len();
    assert_eq!(cloth.spring(0, 5, 10.0, SpringKind::Hooke).springs().len(), springs + 1);
}

#[test]
fn bad_parameters_name_what_to_change() {
    let cases: Vec<(Result<Simulation, Error>, &str)> = vec![
        (bar_builder().dt(0.0).build(), "dt"),
        (bar_builder().dt(-1.0).build(), "dt"),
        (bar_builder().dt(f64::NAN).build(), "dt"),
        (bar_builder().gravity([0.0, f64::INFINITY, 0.0]).build(), "gravity"),
        (
            Simulation::builder()
                .tet_body(TetMesh::bar([2, 2, 2], [1.0; 3]), Material::stvk(1e5, 0.5), 1000.0)
                .build(),
            "Poisson",
        ),
        (
            Simulation::builder()
                .tet_body(TetMesh::bar([2, 2, 2], [1.0; 3]), Material::neo_hookean(1e5, -1.5), 1000.0)
                .build(),
            "Poisson",
        ),
        (
            Simulation::builder()
                .tet_body(TetMesh::bar([2, 2, 2], [1.0; 3]), Material::stvk(0.0, 0.3), 1000.0)
                .build(),
            "Young",
        ),
        (
            Simulation::builder()
                .tet_body(TetMesh::bar([2, 2, 2], [1.0; 3]), Material::stvk(1e5, 0.3), -5.0)
                .build(),
            "density",
        ),
        (
            Simulation::builder()
                .spring_body(SpringMesh::new(vec![[0.0; 3], [1.0, 0.0, 0.0]], vec![1.0, 1.0]).spring(
                    0,
                    1,
                    -3.0,
                    SpringKind::Hooke,
                ))
                .build(),
            "stiffness of spring 0",
        ),
        (
            Simulation::builder()
                .spring_body(SpringMesh::new(vec![[0.0; 3], [1.0, 0.0, 0.0]], vec![1.0, 0.0]).spring(
                    0,
                    1,
                    3.0,
                    SpringKind::Hooke,
                ))
                .build(),
            "vertex 1 has mass",
        ),
        (
            Simulation::builder()
                .spring_body(SpringMesh::new(vec![[0.0; 3], [1.0, 0.0, 0.0]], vec![1.0, 1.0]).spring(
                    0,
                    7,
                    3.0,
                    SpringKind::Hooke,
                ))
                .build(),
            "spring 0",
        ),
        (
            // A generated bar too thin for f64's volumes is checked as a mesh file is.
            Simulation::builder()
                .tet_body(TetMesh::bar([2, 1, 1], [1e-200, 0.2, 0.2]), Material::stvk(1e5, 0.3), 1000.0)
                .build(),
            "zero volume",
        ),
        (
            // A pin that pins nothing (x = 0.41 is past the bar's end) names itself and the
            // body's extent; the pin before it selects the bar's end and is fine.
            bar_builder().pin(|p| p[0] < 1e-9).pin(|p| p[0] > 0.41).build(),
            "pin 1 (the builder's .pin calls count from 0) holds for no vertex; the rest positions \
             span x [0, 0.4]",
        ),
        (bar_builder().solver(Solver::newton().tolerance(-1.0)).build(), "tolerance"),
        (bar_builder().solver(Solver::newton().max_iterations(0)).build(), "max_iterations"),
        (Simulation::builder().build(), "no bodies"),
        (bar_builder().solver(Solver::local_global(10)).build(), "Solver::newton"),
        (bar_builder().integrator(Integrator::Stabilized { epsilon: 2.0 }).build(), "epsilon"),
        (
            bar_builder()
                .integrator(Integrator::ASearch { alpha_min: 1.0, alpha_max: 0.0, decay: None })
                .build(),
            "alpha_min",
        ),
        (
            bar_builder()
                .integrator(Integrator::ASearch {
                    alpha_min: 0.0,
                    alpha_max: 1.1,
                    decay: Some(Decay { time_constant: -1.0, ground: 0.0 }),
                })
                .build(),
            "time constant",
        ),
        (bar_builder().damping(Damping::Rayleigh { stiffness: -0.1 }).build(), "Rayleigh"),
        (
            bar_builder().damping(Damping::MomentumPreserving { coefficient: 1.5 }).build(),
            "momentum-preserving",
        ),
        (
            bar_builder()
                .integrator(Integrator::ForwardEuler)
                .damping(Damping::Ether { coefficient: 1.0 })
                .build(),
            "implicit integrator",
        ),
        (bar_builder().collider(Collider::plane([0.0, 1.0, 0.0], 0.0)).build(), "contact model"),
        (
            bar_builder()
                .collider(Collider::plane([0.0, 0.0, 0.0], 0.0))
                .contact_model(ContactModel::Penalty { stiffness: 1e4 })
                .build(),
            "collider 0",
        ),
        (
            bar_builder()
                .collider(Collider::sphere([0.0; 3], 1.0))
                .contact_model(ContactModel::Penalty { stiffness: 0.0 })
                .build(),
            "penalty stiffness",
        ),
    ];
    for (k, (result, needle)) in cases.into_iter().enumerate() {
        let text = message(result);
        assert!(text.contains(needle), "case {k}: {text:?} should mention {needle:?}");
    }
}

#[test]
fn bad_states_are_rejected_and_leave_the_simulation_untouched() {
    let mut sim = bar_builder().gravity([0.0, -9.81, 0.0]).build().unwrap();
    sim.step().unwrap();
    let (x, v, e) = (sim.positions().to_vec(), sim.velocities().to_vec(), sim.energy());
    let n = x.len();
    let mut nan = x.clone();
    nan[3][1] = f64::NAN;
    let errors = [
        sim.set_state(&x[..n - 1], &v).unwrap_err(),
        sim.set_state(&x, &v[..2]).unwrap_err(),
        sim.set_state(&nan, &v).unwrap_err(),
        sim.set_state(&x, &vec![[f64::INFINITY, 0.0, 0.0]; n]).unwrap_err(),
    ];
    for (k, error) in errors.iter().enumerate() {
        assert!(matches!(error, Error::State(_)), "case {k}: {error}");
    }
    assert!(errors[0].to_string().contains(&format!("{n} vertices")));
    assert!(errors[2].to_string().contains("vertex 3"));
    assert_eq!(sim.positions(), &x[..]);
    assert_eq!(sim.velocities(), &v[..]);
    assert_eq!(sim.energy(), e);
}

#[test]
fn a_step_that_blows_up_is_refused_and_the_state_stays_finite() {
    // Forward Euler at 1/30 s on a stiff bar overflows within a few dozen steps.
    let mut sim = Simulation::builder()
        .tet_body(TetMesh::bar([4, 2, 2], [0.4, 0.2, 0.2]), Material::stvk(1e7, 0.3), 1000.0)
        .integrator(Integrator::ForwardEuler)
        .build()
        .unwrap();
    let stretched: Vec<[f64; 3]> = sim.positions().iter().map(|p| [1.1 * p[0], p[1], p[2]]).collect();
    let zero = vec![[0.0; 3]; stretched.len()];
    sim.set_state(&stretched, &zero).unwrap();
    let mut failure = None;
    for _ in 0..500 {
        let before = (sim.positions().to_vec(), sim.velocities().to_vec());
        match sim.step() {
            Ok(_) => {}
            Err(e) => {
                assert_eq!(sim.positions(), &before.0[..], "a failed step must not change the state");
                assert_eq!(sim.velocities(), &before.1[..]);
                failure = Some(e);
                break;
            }
        }
    }
    let failure = failure.expect("forward Euler should blow up at this step size");
    assert!(matches!(failure, Error::Solver(_)) && failure.to_string().contains("non-finite"), "{failure}");
    assert!(sim.positions().iter().flatten().all(|c| c.is_finite()));
}

#[test]
fn inverted_neo_hookean_state_is_a_clear_error() {
    let mesh = TetMesh::bar([2, 1, 1], [0.2, 0.1, 0.1]);
    let mut sim =
        Simulation::builder().tet_body(mesh, Material::neo_hookean(1e5, 0.3), 1000.0).build().unwrap();
    let rest = sim.positions().to_vec();
    let energy = sim.energy();
    let flipped: Vec<[f64; 3]> = rest.iter().map(|p| [p[0], p[1], -p[2]]).collect();
    let zero = vec![[0.0; 3]; flipped.len()];
    let error = sim.set_state(&flipped, &zero).unwrap_err();
    assert!(error.to_string().contains("stable_neo_hookean"), "{error}");
    // Refused whole: the state and its energy are as they were, and a step still works.
    assert_eq!(sim.positions(), &rest[..]);
    assert_eq!(sim.energy(), energy);
    assert!(sim.energy().total.is_finite());
    sim.step().unwrap();
}

#[test]
fn a_step_says_how_its_solves_ended_and_strict_refuses_an_unconverged_one() {
    use lively::SolveOutcome;
    let build = |solver: Solver, strict: bool| {
        Simulation::builder()
            .tet_body(
                TetMesh::bar([6, 2, 2], [0.6, 0.2, 0.2]),
                Material::stable_neo_hookean(1e5, 0.3),
                1000.0,
            )
            .gravity([0.0, -9.81, 0.0])
            .pin(|p| p[0] < 1e-9)
            .solver(solver)
            .strict(strict)
            .build()
            .unwrap()
    };
    // Converged to the tolerance.
    let mut converged = build(Solver::newton().tolerance(1e-6), true);
    let stats = converged.step().unwrap();
    assert!(matches!(stats.outcome, SolveOutcome::Converged | SolveOutcome::RoundOff), "{stats:?}");
    // One Newton iteration cannot reach 1e-10 N from rest under gravity: the step is taken
    // and says so...
    let mut lenient = build(Solver::newton().tolerance(1e-10).max_iterations(1), false);
    let stats = lenient.step().unwrap();
    assert_eq!(stats.outcome, SolveOutcome::BudgetSpent, "{stats:?}");
    assert!(!stats.converged);
    // ...and with strict it is an error that leaves the state as it was.
    let mut strict = build(Solver::newton().tolerance(1e-10).max_iterations(1), true);
    let before = (strict.positions().to_vec(), strict.velocities().to_vec(), strict.energy());
    let error = strict.step().unwrap_err();
    assert!(matches!(error, Error::Solver(_)) && error.to_string().contains("BudgetSpent"), "{error}");
    assert_eq!((strict.positions().to_vec(), strict.velocities().to_vec(), strict.energy()), before);
}

/// Finite positions and velocities can still hold energies beyond f64's range: with Young's
/// modulus 1e300 the rest shape's round-off strains alone store about 1e270 J, and an explicit
/// step's velocities square to infinity. That step is refused, and the state stays as it was.
/// The stabilized integrator's blends toward forward Euler overflow the same way; it keeps
/// midpoint's state, whose energy is finite.
#[test]
fn a_step_whose_energies_overflow_is_refused_and_leaves_the_state() {
    let body = |integrator: Integrator| {
        let mut sim = Simulation::builder()
            .tet_body(TetMesh::bar([4, 4, 4], [0.4, 0.4, 0.4]), Material::corotated(1e300, 0.3), 500.0)
            .gravity([0.0, -9.81, 0.0])
            .integrator(integrator)
            .build()
            .unwrap();
        let rest = sim.positions().to_vec();
        sim.set_state(&rest, &vec![[0.0, -1.0, 0.0]; rest.len()]).unwrap();
        (sim, rest)
    };
    let (mut stabilized, _) = body(Integrator::Stabilized { epsilon: 0.01 });
    let stats = stabilized.step().unwrap();
    assert_eq!(stats.alpha, Some(0.0), "midpoint's state kept: {stats:?}");
    assert!(stabilized.energy().total.is_finite());
    let (mut sim, rest) = body(Integrator::ForwardEuler);
    let before = (sim.positions().to_vec(), sim.velocities().to_vec(), sim.energy());
    let error = sim.step().unwrap_err();
    assert!(matches!(error, Error::Solver(_)) && error.to_string().contains("beyond f64's range"), "{error}");
    assert_eq!((sim.positions().to_vec(), sim.velocities().to_vec(), sim.energy()), before);
    assert!(sim.energy().total.is_finite());
    // Nor does a state whose kinetic energy overflows get in.
    let error = sim.set_state(&rest, &vec![[1e200, 0.0, 0.0]; rest.len()]).unwrap_err();
    assert!(matches!(error, Error::State(_)) && error.to_string().contains("beyond f64's range"), "{error}");
    assert_eq!((sim.positions().to_vec(), sim.velocities().to_vec(), sim.energy()), before);
}
