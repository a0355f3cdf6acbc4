//! GPU vs CPU: implicit steps on bars of about 1K, 10K, 100K and 1M tets.
//!
//! `cargo bench --bench gpu_step` — prints the adapter, then per size and case one line with
//! the Newton/CG iterations, device memory per tet and, where the adapter has timestamp
//! queries, the GPU time of one CG iteration and of each stage in a profiled step; criterion
//! then times GPU and CPU steps from the same mid-motion state (CPU cases up to 100K tets).
//! Cases: backward Euler converged (assembled and matrix-free Hessian products), A-search
//! converged, and A-search at the fixed budget of 2 Newton x 40 CG iterations.
//! On a software adapter (lavapipe) only sizes up to `LIVELY_BENCH_MAX_TETS` (default 10 000)
//! run; on a hardware GPU all of them.
//! Scene: StVK E 1e6 Pa, nu 0.3, rho 1000, one end pinned, gravity, h = 1/30 s, Newton to 1e-4 N.

mod common;

use criterion::{Criterion, criterion_group, criterion_main};
use lively::backend::gpu::{GpuContext, GpuProduct};
use lively::{Backend, Integrator, Material, Simulation, Solver, TetMesh};

/// One benchmark configuration.
#[derive(Clone)]
struct Case {
    name: &'static str,
    integrator: Integrator,
    solver: Solver,
    product: GpuProduct,
}

fn cases() -> Vec<Case> {
    let a_search = Integrator::ASearch { alpha_min: 0.0, alpha_max: 1.1, decay: None };
    let converged = Solver::newton().tolerance(1e-4);
    vec![
        Case {
            name: "be",
            integrator: Integrator::BackwardEuler,
            solver: converged.clone(),
            product: GpuProduct::Assembled,
        },
        Case {
            name: "be_matrix_free",
            integrator: Integrator::BackwardEuler,
            solver: converged.clone(),
            product: GpuProduct::MatrixFree,
        },
        Case {
            name: "a-search",
            integrator: a_search.clone(),
            solver: converged,
            product: GpuProduct::Assembled,
        },
        Case {
            name: "a-search_2x40",
            integrator: a_search,
            solver: Solver::newton().tolerance(1e-4).max_iterations(2).max_linear_iterations(40),
            product: GpuProduct::Assembled,
        },
    ]
}

fn scene(cells: [usize; 3], size: [f64; 3], case: &Case, backend: Backend) -> Simulation {
    let mut sim = Simulation::builder()
        .tet_body(TetMesh::bar(cells, size), Material::stvk(1e6, 0.3), 1000.0)
        .gravity([0.0, -9.81, 0.0])
        .integrator(case.integrator.clone())
        .solver(case.solver.clone())
        .backend(backend)
        .gpu_product(case.product)
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

/// One profiled step from the simulation's state (restored after): the summary line, with the
/// GPU time per CG iteration and per stage where the adapter has timestamps.
fn profile(sim: &mut Simulation, label: &str, tets: usize) {
    let (x, v) = (sim.positions().to_vec(), sim.velocities().to_vec());
    let profiled = sim.gpu_context().is_some_and(|c| c.start_profiling().is_ok());
    let stats = sim.step().expect("profiled step");
    let ms = |s: f64| s * 1e3;
    let mut line = format!(
        "{label}: {tets} tets  newton {}  cg {}  step {:.2} ms  {:.0} device bytes/tet",
        stats.iterations,
        stats.linear_iterations,
        ms(stats.timings.total.as_secs_f64()),
        sim.gpu_memory().unwrap_or(0) as f64 / tets as f64,
    );
    if profiled {
        let context = sim.gpu_context().expect("GPU");
        context.stop_profiling();
        let times = context.pass_times();
        let of =
            |pass: &str| times.iter().find(|t| t.pass == pass).map_or((0.0, 0), |t| (t.seconds, t.count));
        let loop_passes = ["product", "reduce_curvature", "update", "reduce_residual", "direction"];
        let loop_time: f64 = loop_passes.iter().map(|p| of(p).0).sum();
        let products = of("product").1.max(1);
        line += &format!(
            "  | GPU: CG iteration {:.1} us (product {:.1} us)",
            1e6 * loop_time / products as f64,
            1e6 * of("product").0 / products as f64
        );
        for stage in ["element", "gather", "assemble"] {
            let (seconds, count) = of(stage);
            line += &format!(", {stage} {:.2} ms/{count}", ms(seconds));
        }
        let total: f64 = times.iter().map(|t| t.seconds).sum();
        line += &format!(", all passes {:.2} ms", ms(total));
    }
    eprintln!("{line}");
    sim.set_state(&x, &v).expect("restore");
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
    drop(context);
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
        for case in cases() {
            let name = format!("{}_{label}", case.name);
            let mut gpu = scene(cells, size, &case, Backend::Gpu);
            profile(&mut gpu, &format!("gpu_{name}"), tets);
            time_steps(c, &format!("gpu_{name}"), gpu);
            // The CPU has one product; its matrix-free case would repeat the assembled one.
            if tets <= 100_000 && case.product == GpuProduct::Assembled {
                let mut cpu = scene(cells, size, &case, Backend::Cpu);
                profile(&mut cpu, &format!("cpu_{name}"), tets);
                time_steps(c, &format!("cpu_{name}"), cpu);
            }
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
