//! The stabilizing paper's spinning corotated cube at h = 0.033 s under every implicit
//! integrator: prints the energy, angular momentum and blend factor, and draws the total
//! energy and alpha over time to `docs/spinning-cube.svg`.
//!
//! `cargo run --release --example spinning_cube -- [steps] [output.svg]`

use lively::Integrator;
use lively::plot::{self, Curve};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let steps: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(330);
    let output = args.next().unwrap_or_else(|| "docs/spinning-cube.svg".into());
    let integrators = [
        Integrator::BackwardEuler,
        Integrator::Bdf2,
        Integrator::ImplicitMidpoint,
        Integrator::Stabilized { epsilon: 0.01 },
        Integrator::ASearch { alpha_min: 0.0, alpha_max: 1.1, decay: None },
    ];
    let mut curves = Vec::new();
    println!(
        "{:>10} {:>10} {:>14} {:>10} {:>12}",
        "integrator", "H/H0 end", "max |H/H0-1|", "|L|/|L0|", "ms/step"
    );
    for integrator in integrators {
        let mut sim = lively::presets::spinning_cube(integrator.clone())?;
        let h0 = sim.energy().total;
        let norm = |l: [f64; 3]| (l[0] * l[0] + l[1] * l[1] + l[2] * l[2]).sqrt();
        let l0 = norm(sim.angular_momentum());
        let (mut energy, mut alpha, mut worst, mut time) = (Vec::new(), Vec::new(), 0.0_f64, 0.0);
        for _ in 0..steps {
            let Ok(stats) = sim.step() else { break };
            let h = sim.energy().total / h0;
            worst = worst.max((h - 1.0).abs());
            energy.push((sim.time(), h));
            alpha.extend(stats.alpha.map(|a| (sim.time(), a)));
            time += stats.timings.total.as_secs_f64();
        }
        println!(
            "{:>10} {:>10.4} {:>14.4} {:>10.4} {:>12.2}",
            integrator.name(),
            sim.energy().total / h0,
            worst,
            norm(sim.angular_momentum()) / l0,
            1e3 * time / energy.len().max(1) as f64
        );
        curves.push(Curve { name: integrator.name().into(), energy, alpha });
    }
    plot::energy(output.as_ref(), "Spinning corotated cube, h = 0.033 s", &curves, steps as f64 * 0.033)?;
    println!("wrote {output}");
    Ok(())
}
