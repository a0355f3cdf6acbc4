//! Self-collision, GPU vs CPU: a step of two stacked cubes pressing into each other.
//!
//! `cargo bench --bench self_collision` prints, per cube size, the GPU and CPU step times
//! (medians of steps from the same state, a cube resting in the other), Newton and CG
//! iterations, the contacts at the step's end, the GPU time of the self-contact passes
//! (trees' refit, detection, lists) against all passes where the adapter has timestamps, and
//! the device work per step. Criterion then times the same steps. Scene: two cubes of stable
//! neo-Hookean (E 1e5 Pa, nu 0.3, rho 1000), the top one offset by 1 cm and settled 8 steps
//! onto the bottom one, on a floor, self-collision stiffness 1e7 N/m^2 with friction 0.5,
//! backward Euler at h = 1/30 s, Newton to 1e-4 N. On a software adapter only cubes up to
//! `LIVELY_BENCH_MAX_TETS` tets each (default 5 000) run.

mod common;

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use lively::backend::gpu::GpuContext;
use lively::{Collider, ContactModel, Integrator, Material, SelfCollision, Simulation, Solver, TetMesh};

/// Two `cells`-a-side cubes of side 0.2 m, the top one 1 cm off square and 1 mm above the
/// bottom one, settled for 8 steps.
fn scene(cells: usize, gpu: Option<Arc<GpuContext>>) -> Simulation {
    let cube = |shift: [f64; 3]| {
        let mesh = TetMesh::bar([cells; 3], [0.2; 3]);
        let moved = mesh.positions().iter().map(|p| std::array::from_fn(|c| p[c] + shift[c])).collect();
        TetMesh::new(moved, mesh.tets().to_vec()).expect("a valid cube")
    };
    let material = Material::stable_neo_hookean(1e5, 0.3);
    let builder = Simulation::builder()
        .tet_body(cube([0.0; 3]), material.clone(), 1000.0)
        .tet_body(cube([0.01, 0.201, 0.01]), material, 1000.0)
        .gravity([0.0, -9.81, 0.0])
        .integrator(Integrator::BackwardEuler)
        .solver(Solver::newton().tolerance(1e-4))
        .collider(Collider::plane([0.0, 1.0, 0.0], 0.0).friction(0.5))
        .contact_model(ContactModel::Penalty { stiffness: 1e5 })
        .self_collision(SelfCollision { stiffness: 1e7, friction: 0.5 });
    let builder = common::on_gpu_or_cpu(builder, gpu);
    let mut sim = builder.build().expect("valid benchmark scene");
    for _ in 0..8 {
        sim.step().expect("settling step");
    }
    sim
}

/// GPU seconds of one profiled step in the self-contact passes and in all passes.
fn profile(sim: &mut Simulation) -> Option<(f64, f64)> {
    let (times, _) = common::profiled_step(sim)?;
    let contact = ["refit", "detect", "scan", "fill"];
    let of = |t: &&lively::backend::gpu::PassTime| contact.contains(&t.pass);
    let detection = times.iter().filter(of).map(|t| t.seconds).sum();
    Some((detection, times.iter().map(|t| t.seconds).sum()))
}

fn bench(c: &mut Criterion) {
    let Some(common::GpuBench { context, max_tets, runs, device }) = common::GpuBench::new(5_000) else {
        return;
    };
    let mut table = String::from(
        "| cubes | tets | GPU step | CPU step | CPU / GPU | Newton / CG its (GPU) | self-contact passes / all GPU passes | submissions / readbacks / passes / dispatches per step |\n\
         |---|---:|---:|---:|---:|---|---:|---|\n",
    );
    let mut group = c.benchmark_group("self_collision");
    group.sample_size(10);
    for cells in [3, 10, 20] {
        let tets = 5 * cells * cells * cells;
        if tets > max_tets {
            eprintln!("{cells}^3 cells: skipped ({tets} tets > LIVELY_BENCH_MAX_TETS = {max_tets})");
            continue;
        }
        let mut gpu = scene(cells, Some(context.clone()));
        let mut cpu = scene(cells, None);
        let common::StepTimes { median: gpu_time, stats, .. } = common::step_times(&mut gpu, runs);
        let cpu_time = common::step_times(&mut cpu, runs).median;
        let counts = stats.device.unwrap_or_default();
        let passes = profile(&mut gpu)
            .map_or("-".into(), |(contact, all)| format!("{:.2} / {:.2} ms", contact * 1e3, all * 1e3));
        let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
        let row = format!(
            "| 2 x {cells}^3 cells | 2 x {tets} | {} | {} | {:.2} | {} / {} | {passes} | {} / {} / {} / {} |",
            ms(gpu_time),
            ms(cpu_time),
            cpu_time.as_secs_f64() / gpu_time.as_secs_f64(),
            stats.iterations,
            stats.linear_iterations,
            counts.submissions,
            counts.readbacks,
            counts.passes,
            counts.dispatches,
        );
        eprintln!("{row}");
        table.push_str(&row);
        table.push('\n');
        common::time_steps(&mut group, &format!("gpu_{cells}"), &mut gpu);
        common::time_steps(&mut group, &format!("cpu_{cells}"), &mut cpu);
    }
    group.finish();
    println!("\nadapter: {device}\n\n{table}");
}

// No HTML plots, as in the other benchmarks.
criterion_group! {
    name = benches;
    config = Criterion::default().without_plots();
    targets = bench
}
criterion_main!(benches);
