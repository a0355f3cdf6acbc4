//! Shared by the benchmarks.

use lively::Simulation;

/// Times `sim.step()` from the simulation's current state, resetting to it before every step
/// (only the step is timed).
pub fn time_steps(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    sim: &mut Simulation,
) {
    let (x, v) = (sim.positions().to_vec(), sim.velocities().to_vec());
    group.bench_function(name, |b| {
        b.iter_custom(|iterations| {
            let mut total = std::time::Duration::ZERO;
            for _ in 0..iterations {
                sim.set_state(&x, &v).unwrap();
                let started = std::time::Instant::now();
                std::hint::black_box(sim.step().unwrap());
                total += started.elapsed();
            }
            total
        })
    });
}
