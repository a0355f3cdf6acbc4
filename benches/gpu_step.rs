//! GPU vs CPU: implicit steps on bars of about 1K, 10K, 100K and 1M tets.
//!
//! `cargo bench --bench gpu_step` prints the adapter and a table — per size and case the GPU
//! and CPU step times (medians of steps from the same mid-motion state), Newton and CG
//! iterations, the GPU time of one CG iteration and of one element pass (timestamp queries
//! of a profiled step, where the adapter has them), GPU busy time and the host's wait for the
//! device against step wall time, and the device work per step (submissions, readbacks,
//! passes, dispatches, bytes between host and device) — and writes the table into docs/perf/gpu.md, naming the device. Criterion then times the same steps.
//! Cases: backward Euler and A-search converged to 1e-4 N, and A-search at the fixed budget
//! of 2 Newton x 40 CG iterations. On a software adapter (lavapipe) only sizes up to
//! `LIVELY_BENCH_MAX_TETS` (default 10 000) run; on a hardware GPU all of them, the CPU up to
//! 100K tets. Scene: StVK E 1e6 Pa, nu 0.3, rho 1000, one end pinned, gravity, h = 1/30 s.

mod common;

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use lively::backend::gpu::GpuContext;
use lively::{Integrator, Material, Simulation, Solver, TetMesh};

/// One benchmark configuration.
#[derive(Clone)]
struct Case {
    name: &'static str,
    integrator: Integrator,
    solver: Solver,
}

fn cases() -> Vec<Case> {
    let a_search = Integrator::ASearch { alpha_min: 0.0, alpha_max: 1.1, decay: None };
    let converged = Solver::newton().tolerance(1e-4);
    vec![
        Case { name: "be", integrator: Integrator::BackwardEuler, solver: converged.clone() },
        Case { name: "a-search", integrator: a_search.clone(), solver: converged },
        Case {
            name: "a-search_2x40",
            integrator: a_search,
            solver: Solver::newton().tolerance(1e-4).budget(2, 40),
        },
    ]
}

fn scene(cells: [usize; 3], size: [f64; 3], case: &Case, gpu: Option<Arc<GpuContext>>) -> Simulation {
    let builder = Simulation::builder()
        .tet_body(TetMesh::bar(cells, size), Material::stvk(1e6, 0.3), 1000.0)
        .gravity([0.0, -9.81, 0.0])
        .integrator(case.integrator.clone())
        .solver(case.solver.clone())
        .pin(|p| p[0] < 1e-9);
    let builder = common::on_gpu_or_cpu(builder, gpu);
    let mut sim = builder.build().expect("valid benchmark scene");
    for _ in 0..3 {
        sim.step().expect("warm-up step");
    }
    sim
}

/// GPU times of one profiled step from the simulation's state (restored after): one CG
/// iteration (every pass of the solves' loops over the step's CG iterations), its product
/// (0 in one workgroup or the pipelined loop), one element pass with Hessian blocks, one
/// energy-only pass at one position, and all passes together (s).
struct Profile {
    cg_iteration: f64,
    product: f64,
    hessian_pass: f64,
    energy_pass: f64,
    busy: f64,
}

/// The passes of a CG loop: a one-workgroup solve, the pipelined loop's iteration, or the
/// product, the update and the coarse correction. A converged solve's loop is recorded ahead
/// and runs past the solve's end, dispatching nothing, so these passes outnumber the CG
/// iterations: their time is divided by the iterations, not by the passes.
const LOOP_PASSES: [&str; 5] = ["solve_small", "pipelined", "product", "update", "coarse_prolong"];

fn profile(sim: &mut Simulation) -> Option<Profile> {
    let (times, stats) = common::profiled_step(sim)?;
    let of = |pass: &str| times.iter().find(|t| t.pass == pass);
    let seconds = |pass: &str| of(pass).map_or(0.0, |t| t.seconds);
    let per_iteration = |total: f64| total / stats.linear_iterations.max(1) as f64;
    // Passes that evaluate a batch of positions (line searches' candidates) count one
    // evaluation a position.
    let per_evaluation = |passes: &[&str]| {
        let (total, evaluations) = passes
            .iter()
            .filter_map(|pass| of(pass))
            .fold((0.0, 0), |(s, n), t| (s + t.seconds, n + t.evaluations));
        total / evaluations.max(1) as f64
    };
    Some(Profile {
        cg_iteration: per_iteration(LOOP_PASSES.iter().map(|pass| seconds(pass)).sum()),
        product: per_iteration(seconds("product")),
        hessian_pass: per_evaluation(&["element hessian", "element projected"]),
        energy_pass: per_evaluation(&["element energy"]),
        busy: times.iter().map(|t| t.seconds).sum(),
    })
}

fn megabytes(bytes: u64) -> String {
    format!("{:.2} MB", bytes as f64 * 1e-6)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn bench(c: &mut Criterion) {
    let Some(common::GpuBench { context, max_tets, runs, device }) = common::GpuBench::new(10_000) else {
        return;
    };
    eprintln!("adapter: {device}");
    let sizes = [
        ("1k", [10, 5, 4], [1.0, 0.5, 0.4]),
        ("10k", [20, 10, 10], [1.0, 0.5, 0.5]),
        ("100k", [40, 25, 20], [2.0, 1.25, 1.0]),
        ("1m", [100, 50, 40], [5.0, 2.5, 2.0]),
    ];
    let mut table = String::from(
        "| case | tets | GPU step | CPU step | CPU / GPU | GPU Newton / CG its | one CG iteration (product) \
         | element pass, Hessian / energy | GPU busy / host wait / step wall | submissions / readbacks / passes / dispatches per step \
         | host bytes up / down per step |\n\
         |---|---:|---:|---:|---:|---|---:|---:|---:|---|---:|\n",
    );
    let mut group = c.benchmark_group("gpu_vs_cpu");
    group.sample_size(10);
    for (label, cells, size) in sizes {
        let tets = 5 * cells[0] * cells[1] * cells[2];
        if tets > max_tets {
            eprintln!("{label}: skipped ({tets} tets > LIVELY_BENCH_MAX_TETS = {max_tets})");
            continue;
        }
        for case in cases() {
            let name = format!("{}_{label}", case.name);
            let mut gpu = scene(cells, size, &case, Some(context.clone()));
            let gpu_times = common::step_times(&mut gpu, runs);
            let (gpu_time, stats) = (gpu_times.median, &gpu_times.stats);
            let profiled = profile(&mut gpu);
            let mut cpu = (tets <= 100_000).then(|| scene(cells, size, &case, None));
            let cpu_time = cpu.as_mut().map(|cpu| common::step_times(cpu, runs).median);
            let counts = stats.device.unwrap_or_default();
            eprintln!("{name:<20} GPU {}{}", ms(gpu_time), common::device_work(&gpu_times));
            // The host's own work is the wall time less its wait for the device.
            let wait = counts.wait;
            let us = |s: f64| format!("{:.1} us", s * 1e6);
            let (cg, element, busy) = match &profiled {
                Some(p) => (
                    format!("{} ({})", us(p.cg_iteration), us(p.product)),
                    format!("{:.3} / {:.3} ms", p.hessian_pass * 1e3, p.energy_pass * 1e3),
                    format!("{:.2} / {:.2} / {}", p.busy * 1e3, wait.as_secs_f64() * 1e3, ms(gpu_time)),
                ),
                None => ("-".into(), "-".into(), "-".into()),
            };
            let _ = writeln!(
                table,
                "| {name} | {tets} | {} | {} | {} | {} / {} | {cg} | {element} | {busy} | {} / {} / {} / {} | {} / {} |",
                ms(gpu_time),
                cpu_time.map_or("-".into(), ms),
                cpu_time.map_or("-".into(), |c| format!("{:.2}", c.as_secs_f64() / gpu_time.as_secs_f64())),
                stats.iterations,
                stats.linear_iterations,
                counts.submissions,
                counts.readbacks,
                counts.passes,
                counts.dispatches,
                megabytes(counts.uploaded),
                megabytes(counts.downloaded),
            );
            eprintln!("{}", table.lines().last().unwrap_or_default());
            common::time_steps(&mut group, &format!("gpu_{name}"), &mut gpu);
            if let Some(cpu) = cpu.as_mut() {
                common::time_steps(&mut group, &format!("cpu_{name}"), cpu);
            }
        }
    }
    group.finish();
    println!("\nadapter: {device}\n\n{table}");
    write_table(&device, &table);
}

/// Replaces the generated section of docs/perf/gpu.md.
fn write_table(device: &str, table: &str) {
    const START: &str = "<!-- gpu_step table: written by cargo bench --bench gpu_step -->";
    const END: &str = "<!-- end of gpu_step table -->";
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/perf/gpu.md");
    let Ok(doc) = std::fs::read_to_string(&path) else { return };
    let (Some(start), Some(end)) = (doc.find(START), doc.find(END)) else {
        eprintln!("{} has no generated section; not written", path.display());
        return;
    };
    let section = format!("{START}\nDevice: {device}. Command: `cargo bench --bench gpu_step`.\n\n{table}\n");
    let updated = format!("{}{section}{}", &doc[..start], &doc[end..]);
    if let Err(e) = std::fs::write(&path, updated) {
        eprintln!("writing {}: {e}", path.display());
    }
}

// No HTML plots: plotters is built with the crate's ab_glyph text, which criterion's plots
// cannot draw with (they panic on a rerun, when they compare against the last one).
criterion_group! {
    name = benches;
    config = Criterion::default().without_plots();
    targets = bench
}
criterion_main!(benches);
