//! The stabilizing paper's spinning corotated cube at h = 0.033 s under every implicit
//! integrator: prints the energy, angular momentum and blend factor, and draws the total
//! energy and alpha over time to `docs/spinning-cube.svg`.
//!
//! `cargo run --release --example spinning_cube -- [steps] [output.svg]`

use lively::Integrator;
use plotters::prelude::*;

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
        curves.push((integrator.name(), energy, alpha));
    }
    draw(&output, &curves, steps as f64 * 0.033)?;
    println!("wrote {output}");
    Ok(())
}

type Curve = (&'static str, Vec<(f64, f64)>, Vec<(f64, f64)>);

fn draw(path: &str, curves: &[Curve], duration: f64) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (900, 620)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(400);
    let colors = [
        RGBColor(200, 60, 40),
        RGBColor(230, 150, 30),
        RGBColor(120, 120, 120),
        RGBColor(30, 110, 200),
        RGBColor(40, 160, 80),
    ];
    let mut chart = ChartBuilder::on(&top)
        .caption("Spinning corotated cube, h = 0.033 s: total energy", ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..duration, 0.0..2.0)?;
    chart.configure_mesh().x_desc("time (s)").y_desc("H / H0").draw()?;
    for ((name, energy, _), color) in curves.iter().zip(colors) {
        // Midpoint leaves the chart within a few seconds; clip at the top edge.
        let clipped: Vec<(f64, f64)> = energy.iter().map(|&(t, h)| (t, h.min(2.0))).collect();
        chart
            .draw_series(LineSeries::new(clipped, color.stroke_width(2)))?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
    let mut chart = ChartBuilder::on(&bottom)
        .caption("blend / correction factor alpha (stabilized: < 0 toward forward Euler)", ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..duration, -1.0..1.2)?;
    chart.configure_mesh().x_desc("time (s)").y_desc("alpha").draw()?;
    for ((_, _, alpha), color) in curves.iter().zip(colors) {
        if !alpha.is_empty() {
            chart.draw_series(alpha.iter().map(|&(t, a)| Circle::new((t, a), 2, color.filled())))?;
        }
    }
    root.present()?;
    Ok(())
}
