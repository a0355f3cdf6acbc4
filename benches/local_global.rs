//! Local/global steps of 10 iterations (stabilizing-integrators-realtime.md, Table 1's
//! right-hand columns): backward Euler (projective dynamics), implicit midpoint, and the
//! stabilized real-time path (10 midpoint iterations, one backward-Euler iteration for the
//! blend), on meshes of the paper's sizes.
//!
//! `cargo bench --bench local_global` — each case first prints one line (vertices, tets,
//! iterations, CG iterations on a GPU, the median and fastest warm steps' times and the
//! phases of the last, device counts), then criterion times `Simulation::step` from a fixed
//! mid-motion state. `LIVELY_BENCH_RUNS` sets the warm steps (3 on the CPU and on a software
//! adapter, 11 on hardware): on a shared VM, many steps' fastest is the steadiest figure.
//! Cases: generated bars and cubes from about 300 to 36K vertices (one of 15 000 tets,
//! the size the goal is set at), and the bunny and armadillo of `../shared/meshes/` (or of
//! `LIVELY_MESHES`; skipped, with the reason printed, when that folder is absent).
//! Corotated, E 5e5 Pa, nu 0.3, rho 1000, gravity, the vertices at the lowest x pinned,
//! h = 1/30 s. The GPU runs every
//! case on a hardware adapter and those up to 25K tets on a software one
//! (`LIVELY_BENCH_MAX_TETS` sets the limit, `LIVELY_BENCH_GPU=0` turns the GPU off,
//! `LIVELY_BENCH_CPU=0` the CPU).
//!
//! `floor_*` cases: the 15 000-tet bar dropped 5 cm onto a penalty floor (k 1e6 N/m, friction
//! 0.5), unpinned, timed at the step it lands and resting after 40 steps, backward Euler and
//! stabilized, local/global (10 iterations) against Newton (converged) in the same run.

mod common;

use criterion::{Criterion, criterion_group, criterion_main};
use std::sync::Arc;

use lively::backend::gpu::GpuContext;
use lively::{Collider, ContactModel, Integrator, Material, Simulation, Solver, TetMesh};

/// Tets above which the GPU cases are left out on a software adapter (lavapipe runs them at
/// CPU speed); a hardware GPU runs them all.
const SOFTWARE_GPU_TETS: usize = 25_000;

fn meshes() -> Vec<(String, TetMesh)> {
    let mut out = vec![
        ("bar_375".to_string(), TetMesh::bar([14, 4, 4], [1.4, 0.4, 0.4])),
        ("cube_343".to_string(), TetMesh::bar([6, 6, 6], [0.6, 0.6, 0.6])),
        ("cube_4913".to_string(), TetMesh::bar([16, 16, 16], [0.8, 0.8, 0.8])),
        // The size: 15 000 tets.
        ("bar_3718".to_string(), TetMesh::bar([25, 12, 10], [1.25, 0.6, 0.5])),
        ("cube_35937".to_string(), TetMesh::bar([32, 32, 32], [0.8, 0.8, 0.8])),
    ];
    let folder = common::mesh_folder();
    for (name, file) in [("bunny_4670", "ipc-bunny-19k.msh"), ("armadillo_13230", "ipc-armadillo-55k.msh")] {
        match TetMesh::load(folder.join(file)) {
            Ok(mesh) => out.push((name.to_string(), mesh)),
            Err(e) => eprintln!("skipping {name}: {e}"),
        }
    }
    out
}

/// The scene on the CPU, or on the GPU of `gpu`, fallen for 10 steps: the state every measured step starts from.
fn prepare(
    mesh: &TetMesh,
    integrator: &Integrator,
    gpu: Option<Arc<GpuContext>>,
) -> lively::Result<Simulation> {
    let low = mesh.positions().iter().map(|p| p[0]).fold(f64::INFINITY, f64::min);
    let high = mesh.positions().iter().map(|p| p[0]).fold(f64::NEG_INFINITY, f64::max);
    let pinned = low + 0.02 * (high - low);
    let builder = Simulation::builder()
        .tet_body(mesh.clone(), Material::corotated(5e5, 0.3), 1000.0)
        .dt(1.0 / 30.0)
        .gravity([0.0, -9.81, 0.0])
        .integrator(integrator.clone())
        .solver(Solver::local_global(10))
        .pin(move |p| p[0] <= pinned);
    let mut sim = common::on_gpu_or_cpu(builder, gpu).build()?;
    for _ in 0..10 {
        sim.step()?;
    }
    Ok(sim)
}

fn local_global(c: &mut Criterion) {
    let integrators =
        [Integrator::BackwardEuler, Integrator::ImplicitMidpoint, Integrator::Stabilized { epsilon: 0.01 }];
    let gpu = common::gpu_bench(SOFTWARE_GPU_TETS);
    let runs = gpu.as_ref().map_or(common::runs(3), |gpu| gpu.runs);
    let mut group = c.benchmark_group("local_global");
    group.sample_size(10);
    for (name, mesh) in meshes() {
        let tets = mesh.tets().len();
        for integrator in &integrators {
            for context in common::backends(&gpu, tets) {
                let side = common::side(&context);
                let mut sim = match prepare(&mesh, integrator, context) {
                    Ok(sim) => sim,
                    Err(e) => {
                        eprintln!("skipping {name} on the {side}: {e}");
                        continue;
                    }
                };
                // The median and fastest of warm steps (see benches/mixed_fem.rs).
                let times = common::step_times(&mut sim, runs);
                let (median, fastest, stats) = (times.median, times.fastest, &times.stats);
                assert!(stats.iterations > 0, "{name}: the measured step did nothing");
                let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
                let device = common::device_work(&times);
                let label = format!("{}_{name}_{side}", integrator.name());
                eprintln!(
                    "{label:<36} {:>6} verts {tets:>7} tets  iterations {:>2}  cg {:>4}  total {:>8.2} ms, fastest {:.2} (local {:.2}, global {:.2}){device}",
                    mesh.positions().len(),
                    stats.iterations,
                    stats.linear_iterations,
                    ms(median),
                    ms(fastest),
                    ms(stats.timings.evaluate),
                    ms(stats.timings.linear_solve),
                );
                if let Some((times, _)) = common::profiled_step(&mut sim) {
                    eprintln!("{label:<26} {}", common::pass_line(&times));
                }
                common::time_steps(&mut group, &label, &mut sim);
            }
        }
    }
    group.finish();
}

/// The bar on a penalty floor 5 cm below it, stepped `steps` times.
fn on_floor(
    integrator: &Integrator,
    solver: Solver,
    gpu: Option<Arc<GpuContext>>,
    steps: usize,
) -> lively::Result<Simulation> {
    let builder = Simulation::builder()
        .tet_body(TetMesh::bar([25, 12, 10], [1.25, 0.6, 0.5]), Material::corotated(1e5, 0.3), 1000.0)
        .dt(1.0 / 30.0)
        .gravity([0.0, -9.81, 0.0])
        .integrator(integrator.clone())
        .solver(solver)
        .collider(Collider::plane([0.0, 1.0, 0.0], -0.05).friction(0.5))
        .contact_model(ContactModel::Penalty { stiffness: 1e6 });
    let mut sim = common::on_gpu_or_cpu(builder, gpu).build()?;
    for _ in 0..steps {
        sim.step()?;
    }
    Ok(sim)
}

fn local_global_on_a_floor(c: &mut Criterion) {
    // The floor's bar takes 15 000 tets: a software adapter runs it too.
    let gpu = common::gpu_bench(usize::MAX);
    let mut group = c.benchmark_group("local_global");
    group.sample_size(10);
    for integrator in [Integrator::BackwardEuler, Integrator::Stabilized { epsilon: 0.01 }] {
        // The bar touches the floor in its third step (a 5 cm fall takes 0.1 s).
        for (state, steps) in [("landing", 2), ("resting", 40)] {
            for (solver_name, solver) in [("lg", Solver::local_global(10)), ("newton", Solver::newton())] {
                for context in common::backends(&gpu, 15_000) {
                    let side = common::side(&context);
                    let mut sim = match on_floor(&integrator, solver.clone(), context, steps) {
                        Ok(sim) => sim,
                        Err(e) => {
                            eprintln!("skipping the floor on the {side}: {e}");
                            continue;
                        }
                    };
                    let label = format!("floor_{}_{state}_{solver_name}_{side}", integrator.name());
                    common::time_steps(&mut group, &label, &mut sim);
                }
            }
        }
    }
    group.finish();
}

// No HTML plots: plotters is built with the crate's ab_glyph text, which criterion's plots
// cannot draw with (they panic on a rerun, when they compare against the last one).
criterion_group! {
    name = benches;
    config = Criterion::default().without_plots();
    targets = local_global, local_global_on_a_floor
}
criterion_main!(benches);
