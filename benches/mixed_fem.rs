//! The mixed-FEM SQP solver per iteration (mixed-fem-sqp.md, Table 1): assembly, global
//! solve, local solve and line search, next to Newton's iteration on the same step.
//!
//! `cargo bench --bench mixed_fem` — each case first prints one line per solver (tets,
//! iterations, CG iterations, the gradient norm left, the median warm step's time per
//! iteration and the phases of the last), then criterion times `Simulation::step` capped at 5 iterations (the paper's
//! real-time counts) from a fixed mid-motion state, and under a fixed budget of 4 iterations
//! of 30 CG iterations (`mixed_budget`, one readback a step on a GPU). Meshes of about the paper's sizes:
//! generated bars and a cube of 2.2K, 11K and 24K tets (its bunny, boat and stretched beam),
//! and the bunny of `../shared/meshes/` (or of `LIVELY_MESHES`; skipped, with the reason
//! printed, when that folder is absent). Stable neo-Hookean, E 1e5 Pa, nu 0.45, rho 1000, gravity, the vertices at the
//! lowest x pinned, backward Euler, h = 1/30 s. The GPU runs the cases up to 12K tets on a
//! software adapter and all on a hardware one, which also runs a 100K-tet bar (issue 13's GPU
//! size); `LIVELY_BENCH_MAX_TETS` sets the limit, `LIVELY_BENCH_GPU=0` turns the GPU off
//! (`LIVELY_BENCH_CPU=0` the CPU). The
//! GPU lines print the device work of the step.

mod common;

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use lively::backend::gpu::GpuContext;
use lively::{Integrator, Material, Simulation, Solver, TetMesh};

/// Tets above which the GPU cases are left out on a software adapter (lavapipe runs them at
/// CPU speed); a hardware GPU runs them all.
const SOFTWARE_GPU_TETS: usize = 12_000;

/// The size of issue 13's GPU goal, run only where a hardware GPU takes it.
const LARGE_TETS: usize = 100_000;

fn meshes(gpu_tets: usize) -> Vec<(String, TetMesh)> {
    let mut out = vec![
        ("bar_2160".to_string(), TetMesh::bar([12, 6, 6], [0.6, 0.3, 0.3])),
        ("cube_10985".to_string(), TetMesh::bar([13, 13, 13], [0.5, 0.5, 0.5])),
        ("bar_24000".to_string(), TetMesh::bar([40, 10, 12], [2.0, 0.5, 0.6])),
    ];
    if gpu_tets >= LARGE_TETS {
        out.push(("bar_100k".to_string(), TetMesh::bar([40, 25, 20], [2.0, 1.25, 1.0])));
    }
    let folder = common::mesh_folder();
    match TetMesh::load(folder.join("ipc-bunny-19k.msh")) {
        Ok(mesh) => out.push(("bunny_19k".to_string(), mesh)),
        Err(e) => eprintln!("skipping the bunny: {e}"),
    }
    out
}

/// The scene under `solver`, fallen for 10 steps (converged mixed FEM): the state every
/// measured step starts from.
fn prepare(mesh: &TetMesh, solver: Solver, gpu: Option<Arc<GpuContext>>) -> lively::Result<Simulation> {
    let low = mesh.positions().iter().map(|p| p[0]).fold(f64::INFINITY, f64::min);
    let high = mesh.positions().iter().map(|p| p[0]).fold(f64::NEG_INFINITY, f64::max);
    let pinned = low + 0.02 * (high - low);
    let build = |solver: Solver, gpu: Option<Arc<GpuContext>>| {
        let builder = Simulation::builder()
            .tet_body(mesh.clone(), Material::stable_neo_hookean(1e5, 0.45), 1000.0)
            .dt(1.0 / 30.0)
            .gravity([0.0, -9.81, 0.0])
            .integrator(Integrator::BackwardEuler)
            .solver(solver)
            .pin(move |p| p[0] <= pinned);
        common::on_gpu_or_cpu(builder, gpu).build()
    };
    let mut fall = build(Solver::mixed_fem(), None)?;
    for _ in 0..10 {
        fall.step()?;
    }
    let mut sim = build(solver, gpu)?;
    // One step first, so that no measured step compiles the GPU's pipelines.
    sim.set_state(fall.positions(), fall.velocities())?;
    sim.step()?;
    sim.set_state(fall.positions(), fall.velocities())?;
    Ok(sim)
}

fn mixed_fem(c: &mut Criterion) {
    let mut group = c.benchmark_group("mixed_fem");
    group.sample_size(10);
    let gpu = common::gpu_bench(SOFTWARE_GPU_TETS);
    let runs = gpu.as_ref().map_or(common::runs(3), |gpu| gpu.runs);
    for (name, mesh) in meshes(gpu.as_ref().map_or(0, |gpu| gpu.max_tets)) {
        let solvers = [
            ("mixed", Solver::mixed_fem().max_iterations(5)),
            // A frame's fixed budget, run whole on a GPU in one readback: about the capped
            // solve's iterations and CG iterations on the 100K-tet bar (4 and 27 each).
            ("mixed_budget", Solver::mixed_fem().budget(4, 30)),
            ("newton", Solver::newton().max_iterations(5)),
        ];
        let backends = common::backends(&gpu, mesh.tets().len());
        for ((solver_name, solver), context) in
            solvers.iter().flat_map(|s| backends.iter().map(move |b| (s, b.clone())))
        {
            let side = common::side(&context);
            let mut sim = match prepare(&mesh, solver.clone(), context) {
                Ok(sim) => sim,
                Err(e) => {
                    eprintln!("skipping {name} on the {side}: {e}");
                    continue;
                }
            };
            // The median of warm steps: a single step after the CPU cases met a GPU at idle
            // clocks (on an H100 up to 5 ms an iteration more, at every size).
            let times = common::step_times(&mut sim, runs);
            let (step, stats) = (times.median, &times.stats);
            assert!(stats.iterations > 0, "{name}: the measured step did nothing");
            let per = |d: std::time::Duration| d.as_secs_f64() * 1e3 / stats.iterations as f64;
            let t = stats.timings;
            let device = common::device_work(&times);
            let label = format!("{solver_name}_{name}_{side}");
            eprintln!(
                "{label:<26} {:>6} tets  iterations {}  cg {:>4}  |g| {:.1e} N  per iteration {:>7.2} ms: \
                 assembly {:.2}, global {:.2}, local {:.2}, line search {:.2}{device}",
                mesh.tets().len(),
                stats.iterations,
                stats.linear_iterations,
                stats.gradient_norm,
                per(step),
                per(t.evaluate),
                per(t.linear_solve),
                per(t.local_solve),
                per(t.line_search),
            );
            if let Some((times, _)) = common::profiled_step(&mut sim) {
                eprintln!("{label:<26} {}", common::pass_line(&times));
            }
            common::time_steps(&mut group, &label, &mut sim);
        }
    }
    group.finish();
}

// No HTML plots (see benches/local_global.rs).
criterion_group! {
    name = benches;
    config = Criterion::default().without_plots();
    targets = mixed_fem
}
criterion_main!(benches);
