//! GPU vs CPU: one converged implicit step on bars of about 1K, 10K, 100K and 1M tets.
//!
//! `cargo bench --bench gpu_step` — prints the adapter, then per size one line with the
//! Newton/CG iterations, phase times and device memory per tet of a GPU step, and criterion
//! times GPU and CPU steps from the same mid-motion state (each configuration's CPU case runs
//! up to 100K tets). On a software adapter (lavapipe) only sizes up to
//! `LIVELY_BENCH_MAX_TETS` (default 10 000) run; on a hardware GPU all of them.
//! Scene: StVK E 1e6 Pa, nu 0.3, rho 1000, one end pinned, gravity, h = 1/30 s; backward Euler
//! and A-search, Newton to 1e-4 N.

mod common;

use criterion::{Criterion, criterion_group, criterion_main};
use lively::backend::gpu::GpuContext;
use lively::{Backend, Integrator, Material, Simulation, Solver, TetMesh};

fn scene(cells: [usize; 3], size: [f64; 3], integrator: Integrator, backend: Backend) -> Simulation {
    let mut sim = Simulation::builder()
        .tet_body(TetMesh::bar(cells, size), Material::stvk(1e6, 0.3), 1000.0)
        .gravity([0.0, -9.81, 0.0])
        .integrator(integrator)
        .solver(Solver::newton().tolerance(1e-4))
        .backend(backend)
        .pin(|p| p[0] < 1e-9)
        .build()
        .expect("valid benchmark scene");
    for _ in 0..3 {
        sim.step().expect("warm-up step");
    }
    sim
}

fn time_steps(c: &mut Criterion, name: &str, mut sim: Simulation) {
    let mut group = c.benchmark_group("gpu_vs_cpu");
    group.sample_size(10);
    common::time_steps(&mut group, name, &mut sim);
    group.finish();
}

fn bench(c: &mut Criterion) {
    let context = match GpuContext::new() {
        Ok(context) => context,
        Err(e) => {
            eprintln!("no GPU adapter ({e}); nothing to compare");
            return;
        }
    };
    let max_tets: usize = std::env::var("LIVELY_BENCH_MAX_TETS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if context.software { 10_000 } else { usize::MAX });
    eprintln!("adapter: {}{}", context.adapter, if context.software { " (software)" } else { "" });
    let sizes = [
        ("1k", [10, 5, 4], [1.0, 0.5, 0.4]),
        ("10k", [20, 10, 10], [1.0, 0.5, 0.5]),
        ("100k", [40, 25, 20], [2.0, 1.25, 1.0]),
        ("1m", [100, 50, 40], [5.0, 2.5, 2.0]),
    ];
    for (label, cells, size) in sizes {
        let tets = 5 * cells[0] * cells[1] * cells[2];
        if tets > max_tets {
            eprintln!("{label}: skipped ({tets} tets > LIVELY_BENCH_MAX_TETS = {max_tets})");
            continue;
        }
        for integrator in
            [Integrator::BackwardEuler, Integrator::ASearch { alpha_min: 0.0, alpha_max: 1.1, decay: None }]
        {
            let name = integrator.name();
            let mut gpu = scene(cells, size, integrator.clone(), Backend::Gpu);
            let stats = gpu.step().unwrap();
            let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
            eprintln!(
                "{name}_{label}: {tets} tets  newton {}  cg {}  total {:.2} ms (evaluate {:.2}, linear {:.2}, line search {:.2})  {:.0} device bytes/tet",
                stats.iterations,
                stats.linear_iterations,
                ms(stats.timings.total),
                ms(stats.timings.evaluate),
                ms(stats.timings.linear_solve),
                ms(stats.timings.line_search),
                gpu.gpu_memory().unwrap_or(0) as f64 / tets as f64,
            );
            time_steps(c, &format!("gpu_{name}_{label}"), gpu);
            if tets <= 100_000 {
                time_steps(c, &format!("cpu_{name}_{label}"), scene(cells, size, integrator, Backend::Cpu));
            }
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
