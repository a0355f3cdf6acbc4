//! A game loop: a corotated beam stepped at a fixed 1/30 s by the real-time path — stabilized
//! implicit midpoint solved by 10 local/global iterations — inside a frame loop whose frames
//! take a varying time (here a jittery 60 Hz clock with occasional long frames). Each frame
//! prints its steps, the time they took and the energy against its target.
//!
//! `cargo run --release --example game_loop -- [frames]`

use std::time::Instant;

use lively::{FixedStep, Integrator, Material, Simulation, Solver, TetMesh};

fn main() -> anyhow::Result<()> {
    let frames: usize = std::env::args().nth(1).map(|a| a.parse()).transpose()?.unwrap_or(90);
    let mut sim = Simulation::builder()
        .tet_body(TetMesh::bar([12, 4, 4], [1.2, 0.4, 0.4]), Material::corotated(2.5e5, 0.3), 1000.0)
        .dt(1.0 / 30.0)
        .gravity([0.0, -9.81, 0.0])
        .integrator(Integrator::Stabilized { epsilon: 0.01 })
        .solver(Solver::local_global(10))
        .pin(|p| p[0] < 1e-9)
        .build()?;
    let mut driver = FixedStep::new(4)?;
    // A deterministic jittery clock: 16.7 ms frames, +-4 ms, and a 120 ms hitch every 40th.
    let frame_time = |k: usize| {
        if k % 40 == 39 { 0.120 } else { 1.0 / 60.0 + 0.004 * ((k * 7919) % 9) as f64 / 4.0 - 0.004 }
    };
    println!("frame  clock (ms)  steps  dropped (ms)  work (ms)  H (J)    target (J)");
    for k in 0..frames {
        let elapsed = frame_time(k);
        let started = Instant::now();
        let frame = driver.advance(&mut sim, elapsed)?;
        let work = started.elapsed().as_secs_f64() * 1e3;
        let energy = sim.energy();
        println!(
            "{k:>5}  {:>10.1}  {:>5}  {:>12.1}  {work:>9.2}  {:>7.3}  {:>7.3}",
            elapsed * 1e3,
            frame.steps.len(),
            frame.dropped * 1e3,
            energy.total,
            energy.target
        );
    }
    Ok(())
}
