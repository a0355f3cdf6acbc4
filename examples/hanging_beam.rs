//! The benchmark beam: a 1.2 m stable neo-Hookean beam pinned at one end, falling under
//! gravity at h = 1/30 s. Prints per-step solver statistics.
//!
//! `cargo run --release --example hanging_beam -- [refinement] [steps]` (refinement 1 gives
//! 960 tets, 2 gives 7680).

use lively::{Integrator, Material, Simulation, Solver, TetMesh};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let refinement: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(1);
    let steps: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(30);
    let mesh = TetMesh::bar([12 * refinement, 4 * refinement, 4 * refinement], [1.2, 0.4, 0.4]);
    println!("{} tets, {} vertices", mesh.tets().len(), mesh.vertex_count());
    let mut sim = Simulation::builder()
        .tet_body(mesh, Material::stable_neo_hookean(2.5e5, 0.25), 1000.0)
        .dt(1.0 / 30.0)
        .gravity([0.0, -9.81, 0.0])
        .integrator(Integrator::BackwardEuler)
        .solver(if std::env::var_os("CHOLESKY").is_some() {
            Solver::newton().linear_solver(lively::LinearSolver::Cholesky)
        } else {
            Solver::newton()
        })
        .pin(|p| p[0] < 1e-9)
        .build()?;
    for step in 1..=steps {
        let stats = sim.step()?;
        let tip = sim.positions().iter().map(|p| p[1]).fold(f64::INFINITY, f64::min);
        println!(
            "step {step:>3}: newton {:>2} cg {:>4} |g| {:.1e} {:>7.2} ms (evaluate {:.2}, linear {:.2}, line search {:.2})  tip y {tip:+.4} m",
            stats.iterations,
            stats.linear_iterations,
            stats.gradient_norm,
            stats.timings.total.as_secs_f64() * 1e3,
            stats.timings.evaluate.as_secs_f64() * 1e3,
            stats.timings.linear_solve.as_secs_f64() * 1e3,
            stats.timings.line_search.as_secs_f64() * 1e3,
        );
    }
    Ok(())
}
