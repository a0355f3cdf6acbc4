//! Energy plots (plotters, SVG or PNG by the file's extension): total energy over time, one
//! line per run, and the energy-controlled schemes' alpha beneath — the figure the papers
//! compare integrators by. PNGs draw their text with the bundled DejaVu Sans, so they render
//! the same on any machine.

use std::path::Path;

use plotters::prelude::*;

use crate::error::{Error, Result};

/// One run's curves.
#[derive(Clone, Debug, Default)]
pub struct Curve {
    /// The legend's name.
    pub name: String,
    /// `(time, H / H0)` after each step.
    pub energy: Vec<(f64, f64)>,
    /// `(time, alpha)` for the steps that reported one.
    pub alpha: Vec<(f64, f64)>,
}

const COLORS: [RGBColor; 8] = [
    RGBColor(200, 60, 40),
    RGBColor(230, 150, 30),
    RGBColor(120, 120, 120),
    RGBColor(30, 110, 200),
    RGBColor(40, 160, 80),
    RGBColor(140, 70, 170),
    RGBColor(20, 170, 180),
    RGBColor(90, 60, 30),
];

/// Draws `curves` over `duration` seconds into an SVG or PNG file (by `path`'s extension):
/// `H / H0` on top (clipped at 2, where an exploding run leaves the chart), alpha below.
pub fn energy(path: &Path, title: &str, curves: &[Curve], duration: f64) -> Result<()> {
    let size = (900, 620);
    let drawn = match path.extension().and_then(|e| e.to_str()) {
        Some("svg") => draw(SVGBackend::new(path, size).into_drawing_area(), title, curves, duration),
        Some("png") => {
            register_font();
            draw(BitMapBackend::new(path, size).into_drawing_area(), title, curves, duration)
        }
        _ => return Err(Error::Parameter(format!("{}: plots are .svg or .png", path.display()))),
    };
    drawn.map_err(|e| Error::Parameter(format!("cannot draw {}: {e}", path.display())))
}

/// Makes the bundled DejaVu Sans plotters' "sans-serif" (once).
fn register_font() {
    static FONT: std::sync::Once = std::sync::Once::new();
    FONT.call_once(|| {
        let bytes: &'static [u8] = include_bytes!("../assets/DejaVuSans.ttf");
        // The bundled file is a valid TrueType font; were it not, the text would be left out.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, bytes);
    });
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    curves: &[Curve],
    duration: f64,
) -> std::result::Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(400);
    let mut chart = ChartBuilder::on(&top)
        .caption(format!("{title}: total energy"), ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..duration, 0.0..2.0)?;
    chart.configure_mesh().x_desc("time (s)").y_desc("H / H0").draw()?;
    for (curve, color) in curves.iter().zip(COLORS.iter().cycle()) {
        let clipped: Vec<(f64, f64)> = curve.energy.iter().map(|&(t, h)| (t, h.clamp(0.0, 2.0))).collect();
        chart
            .draw_series(LineSeries::new(clipped, color.stroke_width(2)))?
            .label(curve.name.as_str())
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
    for (curve, color) in curves.iter().zip(COLORS.iter().cycle()) {
        chart.draw_series(curve.alpha.iter().map(|&(t, a)| Circle::new((t, a), 2, color.filled())))?;
    }
    root.present()?;
    Ok(())
}
