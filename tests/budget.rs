//! A fixed iteration budget (`Solver::budget`) is spent, buys a lower objective, and never
//! lets a step explode — on both backends (the GPU one on lavapipe in CI).

mod common;

use lively::backend::gpu::recording::most_parts;
use lively::{Backend, Integrator, LinearSolver, Material, Simulation, Solver, TetMesh};

/// The GPU benchmark's 10K-tet scene: a stiff StVK bar, pinned at one end, under gravity.
fn bench_scene(integrator: Integrator, solver: Solver, backend: Backend) -> Simulation {
    let builder = Simulation::builder()
        .tet_body(TetMesh::bar([20, 10, 10], [1.0, 0.5, 0.5]), Material::stvk(1e6, 0.3), 1000.0)
        .gravity([0.0, -9.81, 0.0])
        .integrator(integrator)
        .solver(solver)
        .pin(|p| p[0] < 1e-9);
    common::on_backend(builder, backend).build().unwrap()
}

#[test]
fn a_budget_of_two_newton_by_forty_cg_iterations_is_spent_and_stays_stable() {
    let a_search = Integrator::ASearch { alpha_min: 0.0, alpha_max: 1.1, decay: None };
    let backends: &[Backend] =
        if common::gpu().is_some() { &[Backend::Cpu, Backend::Gpu] } else { &[Backend::Cpu] };
    for &backend in backends {
        // Jacobi-PCG, the GPU's: with it, forty CG iterations cannot converge this stiff bar.
        let solver = Solver::newton().tolerance(1e-4).linear_solver(LinearSolver::Pcg).budget(2, 40);
        let mut sim = bench_scene(a_search.clone(), solver, backend);
        let start = sim.energy().total;
        for step in 0..6 {
            let stats = sim.step().unwrap();
            let energy = sim.energy();
            println!(
                "{backend:?} step {step}: {} Newton / {} CG, objective lowered by {:.3e} J, H {:.2} J (target {:.2})",
                stats.iterations,
                stats.linear_iterations,
                stats.objective_decrease,
                energy.total,
                energy.target
            );
            // The budget is spent: a loose forcing term used to stop CG after two iterations
            // of forty. A solve may stop early only at its 1e-6 relative residual, which this
            // stiff bar does not reach in forty iterations.
            assert_eq!(stats.iterations, 2, "{backend:?}: {stats:?}");
            // A budget too small for this bar: the step says so.
            assert_eq!(stats.outcome, lively::SolveOutcome::BudgetSpent, "{backend:?}: {stats:?}");
            assert!(stats.linear_iterations >= 76, "{backend:?}: {} CG iterations", stats.linear_iterations);
            assert!(stats.objective_decrease > 0.0, "{backend:?}: {stats:?}");
            // Never above the start: energy injected by an unconverged A-search correction
            // used to grow it eightyfold within three steps.
            assert!(energy.total <= start * (1.0 + 1e-9), "{backend:?}: H {} > H0 {start}", energy.total);
            // The GPU records the whole budgeted step — the guesses and their pick, both Newton
            // iterations with their line searches decided on the device, the state's potential
            // and forces — and reads it back once (before, 7 readbacks). It submits the
            // recording in parts as it goes, so that the device starts while the host records:
            // the guesses, then one per iteration (the last with the end state), and the
            // solves in parts (`Recording::submit_part`).
            if let Some(device) = stats.device {
                println!("{backend:?} step {step}: {device:?}");
                assert_eq!(device.readbacks, 1, "{device:?}");
                let parts = most_parts(device.dispatches);
                assert!((3..=3 + parts).contains(&device.submissions), "{device:?}");
                // Its host traffic is a few state vectors, whatever the iterations: up, the
                // start, the target, the explicit guess and the published positions (four
                // vectors; the guesses that are the start or the target, inertia here, are
                // copied on the device) and a parameter slot per dispatch; down, the end
                // positions and forces (two).
                let vector = 12 * sim.positions().len() as u64;
                let parameters = lively::backend::gpu::recording::PARAM_SLOT * device.dispatches;
                assert!(device.uploaded <= 4 * vector + parameters, "{device:?}");
                assert!(device.downloaded <= 2 * vector + 4096, "{device:?}");
            }
        }
    }
}

/// The budgeted step the GPU records whole — every guess and step length decided on the
/// device in f32 — follows the CPU's, which decides the same way on the host in f64.
#[test]
fn a_budgeted_gpu_step_follows_the_cpu() {
    if common::gpu().is_none() {
        return;
    }
    let a_search = Integrator::ASearch { alpha_min: 0.0, alpha_max: 1.1, decay: None };
    let solver = || Solver::newton().tolerance(1e-4).linear_solver(LinearSolver::Pcg).budget(2, 40);
    let mut cpu = bench_scene(a_search.clone(), solver(), Backend::Cpu);
    let mut gpu = bench_scene(a_search, solver(), Backend::Gpu);
    let start = cpu.positions().to_vec();
    for step in 0..6 {
        let (a, b) = (cpu.step().unwrap(), gpu.step().unwrap());
        let (displacement, _) = common::worst_difference(cpu.positions(), &start);
        let (difference, vertex) = common::worst_difference(cpu.positions(), gpu.positions());
        println!(
            "step {step}: GPU differs by {difference:.2e} m of {displacement:.3e} m; G lowered by {:.4e} / {:.4e} J",
            a.objective_decrease, b.objective_decrease
        );
        assert_eq!((a.iterations, a.linear_iterations), (b.iterations, b.linear_iterations), "step {step}");
        // Forty CG iterations stop far from this stiff bar's solution, where f32 and f64
        // iterates part by more than a converged solve's would (measured up to 2.9e-3 of the
        // displacement; the GPU lowered G by 7.555 J against the CPU's 7.557 J in the first
        // step before the solve was recorded whole, too). A different step length chosen
        // would put them a large fraction of the step apart.
        assert!(difference <= 1e-2 * displacement, "step {step}: {difference:e} m at vertex {vertex}");
        // The decrease to 1 %, less the rounding of G (~600 J) in f32 sums on the device
        // (measured up to 2.2e-3 J apart).
        let rounding = 1e-5 * cpu.energy().total;
        let gap = (a.objective_decrease - b.objective_decrease).abs();
        assert!(gap <= 1e-2 * a.objective_decrease + rounding, "step {step}: {gap:e} J apart");
    }
}

/// The CPU's default preconditioner, the factored local/global matrix, solves each of the
/// budget's Newton systems to the 1e-6 relative residual in a fraction of the forty CG
/// iterations that Jacobi spends, and buys at least as much decrease of the objective.
#[test]
fn the_factored_preconditioner_buys_more_per_cg_iteration() {
    let a_search = Integrator::ASearch { alpha_min: 0.0, alpha_max: 1.1, decay: None };
    // The CPU benchmark's beam (24x8x8 cells): its factor is small enough to be used (the
    // 10K-tet block above has a factor ten times its matrix, and keeps Jacobi).
    let step = |linear: LinearSolver| {
        let solver = Solver::newton().tolerance(1e-4).linear_solver(linear).budget(2, 40);
        Simulation::builder()
            .tet_body(TetMesh::bar([24, 8, 8], [1.2, 0.4, 0.4]), Material::stvk(1e6, 0.3), 1000.0)
            .gravity([0.0, -9.81, 0.0])
            .integrator(a_search.clone())
            .solver(solver)
            .pin(|p| p[0] < 1e-9)
            .build()
            .unwrap()
            .step()
            .unwrap()
    };
    let (jacobi, factored) = (step(LinearSolver::Pcg), step(LinearSolver::PcgProjective));
    println!(
        "Jacobi: {} CG, G lowered by {:.4e} J; factored: {} CG, {:.4e} J",
        jacobi.linear_iterations,
        jacobi.objective_decrease,
        factored.linear_iterations,
        factored.objective_decrease
    );
    assert_eq!((jacobi.iterations, factored.iterations), (2, 2));
    // Measured: 80 and 23 CG iterations, 6.736 and 6.763 J.
    assert!(factored.linear_iterations <= jacobi.linear_iterations / 2);
    assert!(factored.objective_decrease >= jacobi.objective_decrease);
}

/// A wall-clock budget: one that is spent at once still runs the first Newton iteration and
/// returns a valid state no worse than the step's start, reported as `BudgetSpent`; one that
/// is never reached changes nothing. (The deadline is checked between iterations, so both
/// cases are deterministic; how closely a real budget is kept is a benchmark's business.)
#[test]
fn a_wall_time_budget_stops_between_newton_iterations() {
    use std::time::Duration;
    let scene = |solver: Solver| {
        let mut sim = Simulation::builder()
            .tet_body(
                TetMesh::bar([12, 4, 4], [1.2, 0.4, 0.4]),
                Material::stable_neo_hookean(2.5e5, 0.25),
                1000.0,
            )
            .gravity([0.0, -9.81, 0.0])
            .integrator(Integrator::BackwardEuler)
            .solver(solver)
            .backend(Backend::Cpu)
            .pin(|p| p[0] < 1e-9)
            .build()
            .unwrap();
        for _ in 0..5 {
            sim.step().unwrap();
        }
        sim
    };
    let mut spent = scene(Solver::newton().wall_time(Duration::ZERO));
    let mut free = scene(Solver::newton().wall_time(Duration::from_secs(3600)));
    let mut unlimited = scene(Solver::newton());
    for _ in 0..5 {
        let (s, f, u) = (spent.step().unwrap(), free.step().unwrap(), unlimited.step().unwrap());
        assert_eq!(s.iterations, 1, "a spent budget still takes exactly the first iteration");
        assert_eq!(s.outcome, lively::SolveOutcome::BudgetSpent);
        assert!(s.objective_decrease >= 0.0, "the step made things worse: {}", s.objective_decrease);
        assert!(spent.positions().iter().flatten().all(|c| c.is_finite()));
        assert!(f.converged && f.iterations == u.iterations, "an unreached budget changed the solve");
        assert_eq!(free.positions(), unlimited.positions());
    }
}

/// A cube placed on a penalty floor, exactly or a hair (20 um) above it, under a fixed budget
/// of 2 Newton x 40 CG: it settles onto the floor, on both backends, as far as the converged
/// solve puts it. Newton's model of the first step has no contact in it where the penalty is
/// off, so its step falls the whole 1.1 cm of a step's gravity into the floor. On the surface
/// the penalty's curvature now counts; above it, a batch of step lengths that finds no
/// decrease is followed by the next one (`cpu::line_search::next_scale`). Before, no length of
/// the budget's search lowered the objective, and the cube hung there for good.
#[test]
fn a_cube_resting_on_a_penalty_floor_settles_under_a_budget() {
    use lively::{Collider, ContactModel};
    let scene = |solver: Solver, backend: Backend, gap: f64| {
        let builder = Simulation::builder()
            .tet_body(
                TetMesh::bar([3, 3, 3], [0.2, 0.2, 0.2]),
                Material::stable_neo_hookean(1e5, 0.3),
                1000.0,
            )
            .gravity([0.0, -9.81, 0.0])
            .integrator(Integrator::BackwardEuler)
            .solver(solver)
            .collider(Collider::plane([0.0, 1.0, 0.0], -gap).friction(0.5))
            .contact_model(ContactModel::Penalty { stiffness: 1e5 });
        common::on_backend(builder, backend).build().unwrap()
    };
    let lowest =
        |sim: &Simulation, gap: f64| sim.positions().iter().map(|p| p[1]).fold(f64::INFINITY, f64::min) + gap;
    let mut converged = scene(Solver::newton().tolerance(1e-6), Backend::Cpu, 0.0);
    for _ in 0..60 {
        converged.step().unwrap();
    }
    let resting = lowest(&converged, 0.0);
    let backends: &[Backend] =
        if common::gpu().is_some() { &[Backend::Cpu, Backend::Gpu] } else { &[Backend::Cpu] };
    for &backend in backends {
        for gap in [0.0, 2e-5] {
            let mut sim = scene(Solver::newton().tolerance(1e-6).budget(2, 40), backend, gap);
            let first = sim.step().unwrap();
            let after_one = lowest(&sim, gap);
            for _ in 1..60 {
                sim.step().unwrap();
            }
            let depth = lowest(&sim, gap);
            println!(
                "{backend:?}, placed {gap:.0e} m above: lowest point {after_one:.3e} m after one step \
                 ({} Newton / {} CG), {depth:.3e} m after 60 (converged: {resting:.3e} m)",
                first.iterations, first.linear_iterations
            );
            // Resting on the floor, it sinks about 0.1 mm into it (its weight over k).
            assert!(resting < -5e-5, "the converged solve rests at {resting} m");
            assert!(after_one < gap, "{backend:?}, {gap} m: after one step the cube is at {after_one} m");
            assert!(
                (depth - resting).abs() < 0.05 * resting.abs(),
                "{backend:?}, {gap} m: {depth} m against {resting} m"
            );
        }
    }
}
