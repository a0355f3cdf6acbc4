//! Shared by the benchmarks.
#![allow(dead_code)] // each benchmark uses some of them

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

/// Steps from the same state for at least this long before a median is taken: a GPU left
/// idle while the CPU cases ran lowers its clocks. On the H100, without it, the 100K-tet
/// budget step measured 16-17 ms (its kernels up to 1.7x slower); with it, 9 ms.
const WARM_UP: std::time::Duration = std::time::Duration::from_millis(500);

/// The wall times of steps from one state: their median and the fastest (on a shared machine
/// the fastest is the steadiest figure of the code's own cost), the median of the CPU time the
/// stepping thread used (`StepTimings::thread_cpu`, where the OS says), and the stats of the
/// last.
pub struct StepTimes {
    pub median: std::time::Duration,
    pub fastest: std::time::Duration,
    pub thread_cpu: Option<std::time::Duration>,
    pub stats: lively::StepStats,
}

/// [`StepTimes`] of `runs` steps from the simulation's state (restored after each), after
/// [`WARM_UP`].
pub fn step_times(sim: &mut Simulation, runs: usize) -> StepTimes {
    let (x, v) = (sim.positions().to_vec(), sim.velocities().to_vec());
    let started = std::time::Instant::now();
    while started.elapsed() < WARM_UP {
        sim.set_state(&x, &v).expect("restore");
        sim.step().expect("warm-up step");
    }
    let mut times = Vec::with_capacity(runs);
    let mut cpu_times = Vec::with_capacity(runs);
    let mut stats = lively::StepStats::default();
    for _ in 0..runs {
        sim.set_state(&x, &v).expect("restore");
        let started = std::time::Instant::now();
        stats = sim.step().expect("benchmark step");
        times.push(started.elapsed());
        cpu_times.extend(stats.timings.thread_cpu);
    }
    sim.set_state(&x, &v).expect("restore");
    times.sort();
    cpu_times.sort();
    let thread_cpu = (cpu_times.len() == runs).then(|| cpu_times[runs / 2]);
    StepTimes { median: times[runs / 2], fastest: times[0], thread_cpu, stats }
}

/// One step from the simulation's state (restored after) with the device's passes timed: each
/// pass label's GPU time and count, longest first, and the step's stats. `None` on the CPU or
/// where the adapter has no timestamp queries.
pub fn profiled_step(
    sim: &mut Simulation,
) -> Option<(Vec<lively::backend::gpu::PassTime>, lively::StepStats)> {
    let (x, v) = (sim.positions().to_vec(), sim.velocities().to_vec());
    let context = sim.gpu_context()?;
    context.start_profiling().ok()?;
    let _ = context.pass_times();
    let stats = sim.step().expect("profiled step");
    let context = sim.gpu_context()?;
    context.stop_profiling();
    let times = context.pass_times();
    sim.set_state(&x, &v).expect("restore");
    Some((times, stats))
}

/// The passes of [`profiled_step`] on one line: GPU busy time, then each label's total (us) and
/// count (and the positions its batches evaluated, where they are more).
pub fn pass_line(times: &[lively::backend::gpu::PassTime]) -> String {
    let busy: f64 = times.iter().map(|t| t.seconds).sum();
    let count = |t: &lively::backend::gpu::PassTime| match t.evaluations == t.count {
        true => t.count.to_string(),
        false => format!("{}, {} positions", t.count, t.evaluations),
    };
    let passes: Vec<String> =
        times.iter().map(|t| format!("{} {:.0} us ({})", t.pass, t.seconds * 1e6, count(t))).collect();
    format!("GPU busy {:.2} ms: {}", busy * 1e3, passes.join(", "))
}

/// Steps per [`step_times`]: `LIVELY_BENCH_RUNS`, else `default`.
pub fn runs(default: usize) -> usize {
    std::env::var("LIVELY_BENCH_RUNS").ok().and_then(|s| s.parse().ok()).filter(|&r| r > 0).unwrap_or(default)
}

/// What a GPU-against-CPU benchmark runs with: the adapter, the largest body it runs on it
/// (`LIVELY_BENCH_MAX_TETS`, else everything on hardware and `software_max_tets` on a software
/// adapter such as lavapipe), the steps per median, and the device's name for the tables, with
/// how its stages make workgroup sums (`LIVELY_BENCH_REDUCTIONS=tree` keeps the tree where the
/// device has subgroups, to compare the two on one device) and take their parameters
/// (`LIVELY_BENCH_PARAMS=arena` keeps the uniform arena where the device has immediates), and
/// where its buffers lie (`LIVELY_BENCH_BUFFERS=separate` keeps every buffer apart, none in
/// the solvers' arena), and who finishes its command buffers (`LIVELY_BENCH_ENCODING=inline`:
/// the stepping thread, not the context's workers).
pub struct GpuBench {
    pub context: std::sync::Arc<lively::backend::gpu::GpuContext>,
    pub max_tets: usize,
    pub runs: usize,
    pub device: String,
}

impl GpuBench {
    /// `None`, with the reason printed, where there is no adapter.
    pub fn new(software_max_tets: usize) -> Option<GpuBench> {
        let tree = std::env::var("LIVELY_BENCH_REDUCTIONS").as_deref() == Ok("tree");
        let arena = std::env::var("LIVELY_BENCH_PARAMS").as_deref() == Ok("arena");
        let separate = std::env::var("LIVELY_BENCH_BUFFERS").as_deref() == Ok("separate");
        let inline = std::env::var("LIVELY_BENCH_ENCODING").as_deref() == Ok("inline");
        let context = match lively::backend::gpu::GpuContext::new() {
            Ok(context) => {
                let context = if tree { context.with_tree_reductions() } else { context };
                let context = if arena { context.with_params_in_arena() } else { context };
                let context = if inline { context.with_encoder_threads(0) } else { context };
                std::sync::Arc::new(if separate { context.with_separate_buffers() } else { context })
            }
            Err(e) => {
                eprintln!("no GPU adapter ({e}); nothing to compare");
                return None;
            }
        };
        let max_tets = std::env::var("LIVELY_BENCH_MAX_TETS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(if context.software { software_max_tets } else { usize::MAX });
        let runs = runs(if context.software { 3 } else { 11 });
        let device = format!(
            "{}{}, {:?} sums, parameters {}, command buffers finished by {} workers",
            context.adapter,
            if context.software { " (software)" } else { "" },
            context.reductions(),
            if context.params_in_immediates() { "as immediates" } else { "from the arena" },
            context.encoder_threads()
        );
        Some(GpuBench { context, max_tets, runs, device })
    }
}

/// The GPU a benchmark compares with the CPU: `None` with `LIVELY_BENCH_GPU=0` or without an
/// adapter, else as [`GpuBench::new`] decides; its device is printed.
pub fn gpu_bench(software_max_tets: usize) -> Option<GpuBench> {
    if std::env::var("LIVELY_BENCH_GPU").as_deref() == Ok("0") {
        return None;
    }
    let bench = GpuBench::new(software_max_tets)?;
    eprintln!("adapter: {}", bench.device);
    Some(bench)
}

/// Where a benchmark runs a body of `tets`: the CPU (`None`) unless `LIVELY_BENCH_CPU=0`, and
/// the GPU's context where it takes the body.
pub fn backends(
    gpu: &Option<GpuBench>,
    tets: usize,
) -> Vec<Option<std::sync::Arc<lively::backend::gpu::GpuContext>>> {
    let on_cpu = std::env::var("LIVELY_BENCH_CPU").as_deref() != Ok("0");
    let on_gpu = gpu.as_ref().filter(|gpu| tets <= gpu.max_tets).map(|gpu| gpu.context.clone());
    on_cpu.then_some(None).into_iter().chain(on_gpu.map(Some)).collect()
}

/// A case's label suffix for where it runs.
pub fn side(context: &Option<std::sync::Arc<lively::backend::gpu::GpuContext>>) -> &'static str {
    if context.is_some() { "gpu" } else { "cpu" }
}

/// `builder` on the GPU of `context`, or on the CPU for `None`.
pub fn on_gpu_or_cpu(
    builder: lively::SimulationBuilder,
    context: Option<std::sync::Arc<lively::backend::gpu::GpuContext>>,
) -> lively::SimulationBuilder {
    match context {
        Some(context) => builder.backend(lively::Backend::Gpu).gpu_context(context),
        None => builder.backend(lively::Backend::Cpu),
    }
}

/// A GPU step's device work, for a benchmark's printed line: the counts and host times of the
/// last of `times`' steps (with its solves deferred and then resumed, each a readback more),
/// and the median CPU time of the stepping thread.
pub fn device_work(times: &StepTimes) -> String {
    let Some(d) = times.stats.device.as_ref() else { return String::new() };
    let thread_cpu =
        times.thread_cpu.map_or(String::new(), |t| format!(", thread cpu {:.2}", t.as_secs_f64() * 1e3));
    format!(
        "  {} subm {} readbacks ({} resumed solves) {} dispatches ({} writable buffers), host record {:.2} ms, encode {:.2}, submit {:.2}, wait {:.2}{thread_cpu}, {:.2} / {:.2} MB up / down",
        d.submissions,
        d.readbacks,
        times.stats.resumed_iterations,
        d.dispatches,
        d.writable_buffers,
        d.record.as_secs_f64() * 1e3,
        d.encode.as_secs_f64() * 1e3,
        d.submit.as_secs_f64() * 1e3,
        d.wait.as_secs_f64() * 1e3,
        d.uploaded as f64 * 1e-6,
        d.downloaded as f64 * 1e-6
    )
}

/// The folder of the shared meshes: `LIVELY_MESHES`, else `../shared/meshes` beside the crate
/// (a machine that runs benches built elsewhere names where it put them).
pub fn mesh_folder() -> std::path::PathBuf {
    match std::env::var_os("LIVELY_MESHES") {
        Some(folder) => folder.into(),
        None => std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/meshes"),
    }
}
