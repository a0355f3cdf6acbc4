//! Timestamp profiling of a GPU step. A binary of its own: profiling is switched on for the
//! whole (shared) context, so no other test may run on it meanwhile.

mod common;

use lively::{Backend, Integrator, Material, Simulation, Solver, TetMesh};

#[test]
fn timestamp_queries_time_every_pass_of_a_step() {
    if common::gpu().is_none() {
        return;
    }
    let builder = Simulation::builder()
        .tet_body(TetMesh::bar([4, 2, 2], [0.4, 0.2, 0.2]), Material::stvk(5e4, 0.3), 1000.0)
        .gravity([0.0, -9.81, 0.0])
        .integrator(Integrator::BackwardEuler)
        .solver(Solver::newton().tolerance(1e-6))
        .pin(|p| p[0] < 1e-9);
    let mut sim = common::on_backend(builder, Backend::Gpu).build().unwrap();
    let x: Vec<[f64; 3]> = sim.positions().iter().map(|p| [1.15 * p[0], p[1], p[2]]).collect();
    sim.set_state(&x, &vec![[0.0; 3]; x.len()]).unwrap();
    let context = sim.gpu_context().unwrap();
    if let Err(e) = context.start_profiling() {
        // Only an adapter without timestamp queries may refuse, and it must say so.
        assert!(
            !context.device.features().contains(wgpu::Features::TIMESTAMP_QUERY),
            "profiling refused on an adapter with timestamps: {e}"
        );
        println!("no timestamps on this adapter: {e}");
        return;
    }
    let stats = sim.step().unwrap();
    let times = sim.gpu_context().unwrap().pass_times();
    for t in &times {
        println!(
            "{:>18}: {:>5} passes {:>5} evaluations {:>10.3} ms",
            t.pass,
            t.count,
            t.evaluations,
            t.seconds * 1e3
        );
    }
    let count = |pass: &str| times.iter().find(|t| t.pass == pass).map_or(0, |t| t.count);
    // Every stage ran and was timed. This small body solves each Newton system in one
    // workgroup (a `solve_small` pass per direction); the two-dispatch loop runs its
    // product at least once per CG iteration (it may run a few past convergence before the
    // status is read).
    for pass in ["element hessian", "element energy", "gather", "assemble"] {
        assert!(count(pass) > 0, "no {pass} pass was timed");
    }
    if count("solve_small") > 0 {
        // One whole solve per Newton direction: a projected retry solves again, and the last
        // linearization, where Newton stops at round-off, may have solved ahead (unless it was
        // deferred there; measured before deferral: 8 solves for 7 iterations, none projected).
        let solves = count("solve_small") as usize;
        assert!(
            solves >= stats.iterations && solves <= stats.iterations + stats.projected_iterations + 1,
            "{solves} solves"
        );
        assert_eq!(count("product"), 0);
    } else {
        for pass in ["setup", "start", "product", "update", "finish"] {
            assert!(count(pass) > 0, "no {pass} pass was timed");
        }
        assert!(count("product") as usize >= stats.linear_iterations, "{} products", count("product"));
    }
    // The line searches evaluate their candidates in batches of up to eight positions, each
    // pass counted as that many evaluations; every other pass evaluates once.
    for t in &times {
        if ["element energy", "gather"].contains(&t.pass) {
            assert!(t.evaluations >= t.count && t.evaluations <= 8 * t.count, "{t:?}");
        } else {
            assert_eq!(t.evaluations, t.count, "{t:?}");
        }
    }
    let energy = times.iter().find(|t| t.pass == "element energy").unwrap();
    assert!(energy.evaluations > energy.count, "no batch of candidates was timed: {energy:?}");
    assert!(times.iter().all(|t| t.seconds.is_finite() && t.seconds >= 0.0));
    assert!(times.iter().map(|t| t.seconds).sum::<f64>() > 0.0);
    assert!(sim.gpu_context().unwrap().pass_times().is_empty(), "pass_times resets");
    sim.gpu_context().unwrap().stop_profiling();
}
