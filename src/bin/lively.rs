//! The `lively` command-line tool.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use lively::Integrator;
use lively::scene::Scene;

/// Deformable solids that stay lively at game time steps.
#[derive(Parser)]
#[command(name = "lively", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Releases a stretched StVK bar at h = 1/30 s under backward Euler, BDF2, implicit
    /// midpoint and AVF, and prints the energy of each per step.
    Demo,
    /// Runs a scene file (see `scenes/`) and writes OUT/energy.csv (time, kinetic, potential,
    /// total, target, alpha, iterations and milliseconds per step) and its plot, energy.png
    /// and energy.svg.
    Run {
        #[command(flatten)]
        scene: SceneRun,
        /// Overrides the scene's integrator: fe, se, be, bdf2, im, newmark, avf, stabilized, a1, a-search.
        #[arg(long)]
        integrator: Option<String>,
        /// Also writes every step's shape: `vtk` (a ParaView series, frames.pvd) or `obj`
        /// (the surface, frame_NNNNN.obj).
        #[arg(long)]
        frames: Option<String>,
    },
    /// Times converged backward-Euler steps of the benchmark beam (960 and 7680 tets, stable
    /// neo-Hookean, one end pinned, gravity) on the CPU and, where there is one, the GPU
    /// (a software adapter runs only the small beam).
    Bench {
        /// Steps timed per case, after 10 untimed ones.
        #[arg(long, default_value_t = 20)]
        steps: usize,
    },
    /// Prints the GPU adapter lively would use, its features and the limits that bound a
    /// body's size, and the CPU threads.
    Info,
    /// Runs a scene under several integrators and draws their energies in one plot:
    /// OUT/compare.png and .svg, with OUT/compare.csv (time, then H / H0 per integrator).
    Compare {
        #[command(flatten)]
        scene: SceneRun,
        /// Comma-separated integrator names.
        #[arg(long, value_delimiter = ',', default_value = "be,bdf2,im,avf,stabilized,a-search")]
        integrators: Vec<String>,
    },
    /// Opens a scene in a window: left drag orbits, the wheel zooms, right drag pulls a vertex;
    /// space pauses, S steps once, R resets, I switches integrator, Escape quits.
    View {
        /// The scene (TOML).
        scene: PathBuf,
        /// Overrides the scene's integrator.
        #[arg(long)]
        integrator: Option<String>,
        /// Overrides the scene's backend: cpu, gpu or auto.
        #[arg(long)]
        backend: Option<String>,
        /// Saves the window's picture after N frames to PATH, then quits.
        #[arg(long, num_args = 2, value_names = ["N", "PATH"])]
        screenshot: Option<Vec<String>>,
    },
    /// Steps a scene to a frame and draws its surface into a PNG, headless, through the
    /// viewer's renderer (the same bytes on every run).
    Render {
        /// The scene (TOML).
        scene: PathBuf,
        /// The step to draw (0: the start).
        #[arg(long, default_value_t = 0)]
        frame: usize,
        /// The picture.
        #[arg(long, default_value = "lively-frame.png")]
        out: PathBuf,
        /// Width and height in pixels.
        #[arg(long, num_args = 2, value_names = ["WIDTH", "HEIGHT"], default_values_t = [960, 640])]
        size: Vec<u32>,
        /// Overrides the scene's integrator.
        #[arg(long)]
        integrator: Option<String>,
        /// Overrides the scene's backend: cpu, gpu or auto.
        #[arg(long)]
        backend: Option<String>,
    },
}

/// What `run` and `compare` share: the scene and how to run it.
#[derive(clap::Args)]
struct SceneRun {
    /// The scene (TOML).
    scene: PathBuf,
    /// Overrides the scene's backend: cpu, gpu or auto.
    #[arg(long)]
    backend: Option<String>,
    /// Overrides the scene's step count.
    #[arg(long)]
    steps: Option<usize>,
    /// Overrides the scene's solver: newton or local-global.
    #[arg(long)]
    solver: Option<String>,
    /// The folder the outputs go to (the scene's `out`, or lively-out, without).
    #[arg(long)]
    out: Option<PathBuf>,
}

fn main() -> ExitCode {
    let (name, result) = match Cli::parse().command {
        Command::Demo => ("demo", demo()),
        Command::Run { scene, integrator, frames } => {
            ("run", run(&scene, integrator.as_deref(), frames.as_deref()))
        }
        Command::Info => ("info", info()),
        Command::Bench { steps } => ("bench", bench(steps)),
        Command::Compare { scene, integrators } => ("compare", compare(&scene, &integrators)),
        Command::View { scene, integrator, backend, screenshot } => {
            ("view", view(&scene, integrator, backend, screenshot))
        }
        Command::Render { scene, frame, out, size, integrator, backend } => (
            "render",
            render(&scene, frame, &out, [size[0], size[1]], integrator.as_deref(), backend.as_deref()),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lively {name}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Where outputs go: the command line's folder, else the scene's (relative to the scene
/// file), else `lively-out`.
fn output_folder(given: Option<&Path>, scene: &Scene) -> PathBuf {
    given
        .map(Path::to_path_buf)
        .or_else(|| scene.out.as_ref().map(|o| scene.folder.join(o)))
        .unwrap_or_else(|| "lively-out".into())
}

/// The scene file, its solver replaced when the command line names one.
fn load_with_solver(path: &Path, solver: Option<&str>) -> Result<Scene, lively::Error> {
    let mut scene = Scene::load(path)?;
    if let Some(solver) = solver {
        scene.solver = solver.to_string();
    }
    Ok(scene)
}

/// `lively view`: the scene in a window.
fn view(
    path: &Path,
    integrator: Option<String>,
    backend: Option<String>,
    screenshot: Option<Vec<String>>,
) -> Result<(), lively::Error> {
    let screenshot = match screenshot.as_deref() {
        Some([frames, out]) => {
            let frames = frames.parse().map_err(|_| {
                lively::Error::Parameter(format!("--screenshot {frames:?}: expected a frame count"))
            })?;
            Some((frames, PathBuf::from(out)))
        }
        _ => None,
    };
    lively::viewer::view(Scene::load(path)?, lively::viewer::ViewOptions { integrator, backend, screenshot })
}

/// `lively render`: the scene at step `frame`, drawn into a PNG.
fn render(
    path: &Path,
    frame: usize,
    out: &Path,
    size: [u32; 2],
    integrator: Option<&str>,
    backend: Option<&str>,
) -> Result<(), lively::Error> {
    let scene = Scene::load(path)?;
    let mut sim = scene.build(integrator, backend)?;
    for _ in 0..frame {
        scene.step(&mut sim)?;
    }
    lively::render::render_frame(&sim, size, out)?;
    println!("lively render: step {frame} of {} drawn to {}", path.display(), out.display());
    Ok(())
}

/// `lively run`: steps the scene, writes the energy table, its plot and any frames, prints a
/// summary.
fn run(options: &SceneRun, integrator: Option<&str>, frames: Option<&str>) -> Result<(), lively::Error> {
    let SceneRun { scene: path, backend, steps, out, solver } = options;
    let scene = load_with_solver(path, solver.as_deref())?;
    let out = &output_folder(out.as_deref(), &scene);
    let frames = frames.or(scene.frames.as_deref());
    let mut sim = scene.build(integrator, backend.as_deref())?;
    if let Some(format) = frames.filter(|f| !matches!(*f, "vtk" | "obj")) {
        return Err(lively::Error::Parameter(format!("--frames {format:?}: use vtk or obj")));
    }
    // Frames are the tet body's shapes.
    let mesh = frames.map(|_| scene.mesh()).transpose()?;
    let mut series = match frames {
        Some("vtk") => Some(lively::VtuSeries::new(out, "frames")?),
        _ => None,
    };
    let mut write_frame = |sim: &lively::Simulation, index: usize| -> Result<(), lively::Error> {
        match (&mesh, series.as_mut()) {
            (Some(mesh), Some(series)) => series.write_frame(mesh, sim.time(), Some(sim.positions())),
            (Some(mesh), None) => {
                mesh.surface_mesh(Some(sim.positions()))?.save(out.join(format!("frame_{index:05}.obj")))
            }
            (None, _) => Ok(()),
        }
    };
    let steps = steps.unwrap_or(scene.steps);
    let io = |e: std::io::Error| lively::Error::Parameter(format!("cannot write to {}: {e}", out.display()));
    std::fs::create_dir_all(out).map_err(io)?;
    let csv_path = out.join("energy.csv");
    let mut csv = std::io::BufWriter::new(std::fs::File::create(&csv_path).map_err(io)?);
    writeln!(csv, "time,kinetic,potential,total,target,alpha,iterations,ms").map_err(io)?;
    let row = |csv: &mut std::io::BufWriter<std::fs::File>,
               sim: &lively::Simulation,
               alpha: Option<f64>,
               iterations: usize,
               ms: f64| {
        let e = sim.energy();
        let alpha = alpha.map_or(String::new(), |a| a.to_string());
        writeln!(
            csv,
            "{},{},{},{},{},{alpha},{iterations},{ms:.3}",
            sim.time(),
            e.kinetic,
            e.potential,
            e.total,
            e.target
        )
    };
    row(&mut csv, &sim, None, 0, 0.0).map_err(io)?;
    write_frame(&sim, 0)?;
    let h0 = sim.energy().total;
    let name = sim.integrator().name().to_string();
    let mut curve = lively::plot::Curve { name, ..Default::default() };
    let (mut lowest, mut highest, mut total_ms, mut unconverged) = (h0, h0, 0.0, 0);
    let progress = progress_bar(steps);
    for _ in 0..steps {
        progress.inc(1);
        let stats = scene.step(&mut sim)?;
        let ms = stats.timings.total.as_secs_f64() * 1e3;
        total_ms += ms;
        unconverged += usize::from(!stats.converged);
        row(&mut csv, &sim, stats.alpha, stats.iterations, ms).map_err(io)?;
        write_frame(&sim, curve.energy.len() + 1)?;
        let h = sim.energy().total;
        (lowest, highest) = (lowest.min(h), highest.max(h));
        curve.energy.push((sim.time(), h / h0));
        curve.alpha.extend(stats.alpha.map(|a| (sim.time(), a)));
    }
    progress.finish_and_clear();
    csv.flush().map_err(io)?;
    println!("lively run: {}", scene.name);
    if !scene.recreates.is_empty() {
        println!("  re-creates {}", scene.recreates);
    }
    println!(
        "  {} tets, {} vertices, {} on {:?}, h = {:.4} s, {steps} steps ({:.2} s)",
        sim.model().tet_count(),
        sim.positions().len(),
        sim.integrator().name(),
        sim.backend(),
        sim.dt(),
        sim.time()
    );
    println!(
        "  energy {h0:.6e} J -> {:.6e} J (lowest {lowest:.6e}, highest {highest:.6e}); {:.2} ms per step{}",
        sim.energy().total,
        total_ms / steps.max(1) as f64,
        if unconverged > 0 { format!("; {unconverged} steps stopped unconverged") } else { String::new() }
    );
    for plot in ["energy.png", "energy.svg"] {
        lively::plot::energy(&out.join(plot), &scene.name, std::slice::from_ref(&curve), sim.time())?;
    }
    let frames = frames.map_or(String::new(), |f| format!(" and {f} frames"));
    println!("  wrote {}, energy.png, energy.svg{frames}", csv_path.display());
    Ok(())
}

/// `lively bench`: a timing table, one row per beam and backend.
fn bench(steps: usize) -> Result<(), lively::Error> {
    use lively::{Backend, Material, Simulation, Solver, TetMesh};
    let gpu = lively::backend::gpu::GpuContext::new().ok().map(std::sync::Arc::new);
    match &gpu {
        Some(context) => println!("GPU: {}", context.adapter),
        None => println!("GPU: none"),
    }
    println!("{:<26} {:>8} {:>10} {:>8} {:>8}", "case", "backend", "ms/step", "Newton", "CG");
    for (label, cells) in [("beam 12x4x4 (960 tets)", [12, 4, 4]), ("beam 24x8x8 (7680 tets)", [24, 8, 8])] {
        let mut backends = vec![(Backend::Cpu, None)];
        if let Some(context) = &gpu
            && (!context.software || cells[0] <= 12)
        {
            backends.push((Backend::Gpu, Some(context.clone())));
        }
        for (backend, context) in backends {
            let mut builder = Simulation::builder()
                .tet_body(
                    TetMesh::bar(cells, [1.2, 0.4, 0.4]),
                    Material::stable_neo_hookean(2.5e5, 0.25),
                    1000.0,
                )
                .gravity([0.0, -9.81, 0.0])
                .solver(Solver::newton())
                .backend(backend)
                .pin(|p| p[0] < 1e-9);
            if let Some(context) = context {
                builder = builder.gpu_context(context);
            }
            let mut sim = builder.build()?;
            for _ in 0..10 {
                sim.step()?;
            }
            let (mut seconds, mut newton, mut cg) = (0.0, 0, 0);
            for _ in 0..steps {
                let started = std::time::Instant::now();
                let stats = sim.step()?;
                seconds += started.elapsed().as_secs_f64();
                (newton, cg) = (newton + stats.iterations, cg + stats.linear_iterations);
            }
            let per = |n: usize| n as f64 / steps.max(1) as f64;
            println!(
                "{label:<26} {:>8} {:>10.2} {:>8.1} {:>8.1}",
                format!("{backend:?}"),
                1e3 * seconds / steps.max(1) as f64,
                per(newton),
                per(cg)
            );
        }
    }
    Ok(())
}

/// `lively info`: what the GPU backend would run on.
fn info() -> Result<(), lively::Error> {
    println!("lively {}", env!("CARGO_PKG_VERSION"));
    println!(
        "CPU backend: {} worker threads (f64)",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let context = match lively::backend::gpu::GpuContext::new() {
        Ok(context) => context,
        Err(e) => {
            println!("GPU backend: none ({e})");
            return Ok(());
        }
    };
    let kind = if context.software { " - a software rasterizer: Backend::Auto keeps to the CPU" } else { "" };
    println!("GPU backend: {}{kind}", context.adapter);
    println!("  device features in use: {:?}", context.device.features());
    let limits = context.device.limits();
    println!("  max buffer size: {} MiB", limits.max_buffer_size >> 20);
    println!("  max storage binding: {} MiB", limits.max_storage_buffer_binding_size >> 20);
    println!("  storage buffers per stage: {}", limits.max_storage_buffers_per_shader_stage);
    println!(
        "  workgroup: {} invocations, {} bytes of shared memory; {} workgroups per dimension",
        limits.max_compute_invocations_per_workgroup,
        limits.max_compute_workgroup_storage_size,
        limits.max_compute_workgroups_per_dimension
    );
    Ok(())
}

/// A progress bar over `steps` on a terminal's stderr (drawn nowhere otherwise).
fn progress_bar(steps: usize) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(steps as u64);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} steps, {elapsed} ({eta} left) {msg}")
    {
        bar.set_style(style);
    }
    bar
}

/// `lively compare`: one run per integrator (a run that fails stops its curve there), the
/// energy table and plot, and a line per integrator.
fn compare(options: &SceneRun, integrators: &[String]) -> Result<(), lively::Error> {
    let SceneRun { scene: path, backend, steps, out, solver } = options;
    let scene = load_with_solver(path, solver.as_deref())?;
    let out = &output_folder(out.as_deref(), &scene);
    let steps = steps.unwrap_or(scene.steps);
    let mut sims = Vec::new();
    for name in integrators {
        sims.push(scene.build(Some(name), backend.as_deref())?);
    }
    println!("lively compare: {}, {steps} steps of {:.4} s", scene.name, scene.dt);
    let mut curves = Vec::new();
    for (name, mut sim) in integrators.iter().zip(sims) {
        let h0 = sim.energy().total;
        let mut curve = lively::plot::Curve { name: name.clone(), ..Default::default() };
        let mut failure = None;
        let progress = progress_bar(steps);
        progress.set_message(name.clone());
        for _ in 0..steps {
            progress.inc(1);
            match scene.step(&mut sim) {
                Ok(stats) => {
                    curve.energy.push((sim.time(), sim.energy().total / h0));
                    curve.alpha.extend(stats.alpha.map(|a| (sim.time(), a)));
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        progress.finish_and_clear();
        let last = curve.energy.last().map_or(1.0, |&(_, h)| h);
        let (low, high) =
            curve.energy.iter().fold((1.0_f64, 1.0_f64), |(l, h), &(_, e)| (l.min(e), h.max(e)));
        let ending = failure.map_or(String::new(), |e| format!(" (stopped at t = {:.2} s: {e})", sim.time()));
        println!("  {name:>10}: H/H0 ends at {last:.4}, range {low:.4} .. {high:.4}{ending}");
        curves.push(curve);
    }
    let io = |e: std::io::Error| lively::Error::Parameter(format!("cannot write to {}: {e}", out.display()));
    std::fs::create_dir_all(out).map_err(io)?;
    let mut csv = String::from("time");
    for curve in &curves {
        csv.push(',');
        csv.push_str(&curve.name);
    }
    csv.push('\n');
    for step in 0..steps {
        csv.push_str(&format!("{}", (step + 1) as f64 * scene.dt));
        for curve in &curves {
            csv.push_str(&curve.energy.get(step).map_or(",".into(), |&(_, h)| format!(",{h}")));
        }
        csv.push('\n');
    }
    std::fs::write(out.join("compare.csv"), csv).map_err(io)?;
    for plot in ["compare.png", "compare.svg"] {
        lively::plot::energy(&out.join(plot), &scene.name, &curves, steps as f64 * scene.dt)?;
    }
    println!("  wrote {}: compare.png, compare.svg and compare.csv", out.display());
    Ok(())
}

/// The built-in scene: a 1 m StVK bar, stretched by 30 % along its length and released in
/// free space. Its energy should stay where it started.
fn demo() -> Result<(), lively::Error> {
    const STEPS: usize = 90;
    let integrators =
        [Integrator::BackwardEuler, Integrator::Bdf2, Integrator::ImplicitMidpoint, Integrator::Avf];
    let mut sims = Vec::new();
    for integrator in &integrators {
        sims.push(lively::presets::stretched_bar(integrator.clone(), [10, 3, 3], [1.0, 0.3, 0.3], 1e5, 1.3)?);
    }
    println!(
        "lively demo: a 1 m StVK bar (E 1e5 Pa, nu 0.3, 1000 kg/m^3, {} tets) stretched 30 % and released",
        sims[0].model().tet_count()
    );
    println!("             h = 1/30 s, Newton to 1e-8 N; columns are total energy H / H0\n");
    let h0 = sims[0].energy().total;
    println!("H0 = {h0:.4} J\n");
    print!("{:>5} {:>7}", "step", "t (s)");
    for integrator in &integrators {
        print!(" {:>12}", integrator.name());
    }
    println!(" {:>10}", "Newton its");
    let mut history: Vec<Vec<f64>> = vec![Vec::new(); integrators.len()];
    let mut unconverged = vec![0usize; integrators.len()];
    // The AVF run's shapes, for ParaView.
    let mesh = lively::TetMesh::bar([10, 3, 3], [1.0, 0.3, 0.3]);
    let mut frames = lively::VtuSeries::new(DEMO_FOLDER, "avf")?;
    frames.write_frame(&mesh, 0.0, Some(sims[3].positions()))?;
    for step in 1..=STEPS {
        let mut iterations = Vec::new();
        for (k, sim) in sims.iter_mut().enumerate() {
            let stats = sim.step()?;
            if k == 3 {
                frames.write_frame(&mesh, sim.time(), Some(sim.positions()))?;
            }
            if !stats.converged && !stats.round_off {
                unconverged[k] += 1;
            }
            iterations.push(stats.iterations.to_string());
            history[k].push(sim.energy().total / h0);
        }
        print!("{step:>5} {:>7.3}", sims[0].time());
        for h in &history {
            print!(" {:>12.6}", h[step - 1]);
        }
        println!(" {:>10}", iterations.join("/"));
    }
    println!();
    for (k, integrator) in integrators.iter().enumerate() {
        let last = *history[k].last().unwrap_or(&1.0);
        let worst = history[k].iter().map(|h| (h - 1.0).abs()).fold(0.0, f64::max);
        let verdict = if worst < 1e-6 {
            format!("conserves energy: max |H/H0 - 1| = {worst:.1e}")
        } else if last < 0.5 {
            format!("dies down: {:.0} % of the energy lost in {:.1} s", 100.0 * (1.0 - last), sims[k].time())
        } else if history[k].iter().any(|&h| h > 1.05) {
            let peak = history[k].iter().cloned().fold(0.0, f64::max);
            format!("gains energy: peaks at {peak:.2} H0")
        } else {
            format!("drifts: H/H0 ends at {last:.3}, max deviation {worst:.1e}")
        };
        let tail = if unconverged[k] > 0 {
            format!(" ({} steps did not converge)", unconverged[k])
        } else {
            String::new()
        };
        println!("{:>10}: {verdict}{tail}", integrator.name());
    }
    let curves: Vec<lively::plot::Curve> = integrators
        .iter()
        .zip(&history)
        .map(|(integrator, energies)| lively::plot::Curve {
            name: integrator.name().into(),
            energy: energies.iter().enumerate().map(|(k, &e)| ((k + 1) as f64 / 30.0, e)).collect(),
            alpha: Vec::new(),
        })
        .collect();
    for plot in ["energy.png", "energy.svg"] {
        let path = Path::new(DEMO_FOLDER).join(plot);
        lively::plot::energy(&path, "Stretched StVK bar, h = 1/30 s", &curves, sims[0].time())?;
    }
    println!(
        "\nwrote {DEMO_FOLDER}/energy.png and energy.svg (the four energies) and {DEMO_FOLDER}/avf.pvd (the AVF run's shapes, for ParaView)"
    );
    Ok(())
}

/// Where `lively demo` writes its plot and frames.
const DEMO_FOLDER: &str = "lively-demo";
