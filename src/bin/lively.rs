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
    /// Runs a scene file (see `scenes/`) and writes OUT/energy.csv: time, kinetic, potential,
    /// total, target, alpha, iterations and milliseconds per step.
    Run {
        /// The scene (TOML).
        scene: PathBuf,
        /// Overrides the scene's integrator: fe, se, be, bdf2, im, newmark, avf, stabilized, a1, a-search.
        #[arg(long)]
        integrator: Option<String>,
        /// Overrides the scene's backend: cpu, gpu or auto.
        #[arg(long)]
        backend: Option<String>,
        /// Overrides the scene's step count.
        #[arg(long)]
        steps: Option<usize>,
        /// The folder the outputs go to.
        #[arg(long, default_value = "lively-out")]
        out: PathBuf,
    },
}

fn main() -> ExitCode {
    let (name, result) = match Cli::parse().command {
        Command::Demo => ("demo", demo()),
        Command::Run { scene, integrator, backend, steps, out } => {
            ("run", run(&scene, integrator.as_deref(), backend.as_deref(), steps, &out))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lively {name}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `lively run`: steps the scene, writes the energy table, prints a summary.
fn run(
    path: &Path,
    integrator: Option<&str>,
    backend: Option<&str>,
    steps: Option<usize>,
    out: &Path,
) -> Result<(), lively::Error> {
    let scene = Scene::load(path)?;
    let mut sim = scene.build(integrator, backend)?;
    let steps = steps.unwrap_or(scene.steps);
    let io = |e: std::io::Error| lively::Error::Parameter(format!("cannot write to {}: {e}", out.display()));
    std::fs::create_dir_all(out).map_err(io)?;
    let csv_path = out.join("energy.csv");
    let mut csv = std::io::BufWriter::new(std::fs::File::create(&csv_path).map_err(io)?);
    writeln!(csv, "time,kinetic,potential,total,target,alpha,iterations,ms").map_err(io)?;
    let row = |csv: &mut std::io::BufWriter<std::fs::File>, sim: &lively::Simulation, alpha: Option<f64>, iterations: usize, ms: f64| {
        let e = sim.energy();
        let alpha = alpha.map_or(String::new(), |a| a.to_string());
        writeln!(csv, "{},{},{},{},{},{alpha},{iterations},{ms:.3}", sim.time(), e.kinetic, e.potential, e.total, e.target)
    };
    row(&mut csv, &sim, None, 0, 0.0).map_err(io)?;
    let h0 = sim.energy().total;
    let (mut lowest, mut highest, mut total_ms, mut unconverged) = (h0, h0, 0.0, 0);
    for _ in 0..steps {
        let stats = sim.step()?;
        let ms = stats.timings.total.as_secs_f64() * 1e3;
        total_ms += ms;
        unconverged += usize::from(!stats.converged);
        row(&mut csv, &sim, stats.alpha, stats.iterations, ms).map_err(io)?;
        let h = sim.energy().total;
        (lowest, highest) = (lowest.min(h), highest.max(h));
    }
    csv.flush().map_err(io)?;
    let title = if scene.name.is_empty() { path.display().to_string() } else { scene.name.clone() };
    println!("lively run: {title}");
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
    println!("  wrote {}", csv_path.display());
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
    for step in 1..=STEPS {
        let mut iterations = Vec::new();
        for (k, sim) in sims.iter_mut().enumerate() {
            let stats = sim.step()?;
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
    Ok(())
}
