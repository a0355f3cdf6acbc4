//! The `lively` command-line tool.

use std::process::ExitCode;

use lively::Integrator;

const USAGE: &str = "usage: lively demo\n\n  demo   release a stretched StVK bar at h = 1/30 s under backward Euler, BDF2,\n         implicit midpoint and AVF, and print the energy of each per step";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["demo"] => match demo() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("lively demo: {e}");
                ExitCode::FAILURE
            }
        },
        ["--help"] | ["-h"] | ["help"] => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
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
