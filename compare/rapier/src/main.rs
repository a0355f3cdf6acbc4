//! lively against rapier3d's FEM soft body, side by side in one process (issue 9's baseline).
//! A separate crate, so that lively's test build never compiles rapier:
//!
//! `cargo run --release --manifest-path compare/rapier/Cargo.toml`
//!
//! The beam of `benches/cpu_step.rs`: 1.2 x 0.4 x 0.4 m, 12x4x4 or 24x8x8 cubes of five tets
//! (both libraries split cubes the same way), E 2.5e5 Pa, nu 0.25, rho 1000 kg/m^3, the x = 0
//! end pinned, gravity, 1/30 s frames from rest. rapier: corotational cells, its FEM solver,
//! 4 solver iterations per frame. lively: backward Euler, stabilized and A-search with Newton
//! to 1e-6 N, corotated and stable neo-Hookean. Printed per beam: ms per frame over the first
//! 30 frames, the tip's lowest point after 1 s, and against a fine reference (lively's
//! implicit midpoint at h = 1/600 with the same material, Newton to 1e-8 N; rapier is measured
//! against the corotated one) the RMS deviation of the tip's height over 2 s and, for lively,
//! the energy left after 2 s.

use std::time::Instant;

use lively::{Backend, Integrator, Material, Simulation, Solver, TetMesh};
use rapier3d::prelude::*;

const SIZE: [f64; 3] = [1.2, 0.4, 0.4];
const YOUNGS: f64 = 2.5e5;
const POISSON: f64 = 0.25;
const DENSITY: f64 = 1000.0;
const FRAME: f64 = 1.0 / 30.0;
const FRAMES: usize = 60;

/// What one run gave: ms per frame over the first 30 frames, the tip's mean height per frame
/// (2 s), and the energy at the end where the library reports it.
struct Run {
    ms_per_frame: f64,
    tip: Vec<f64>,
    energy: Option<f64>,
}

fn is_tip(p: [f64; 3]) -> bool {
    p[0] > SIZE[0] - 1e-6
}

fn lively_run(cells: [usize; 3], material: Material, integrator: Integrator, dt: f64, tolerance: f64) -> Run {
    let mut sim = Simulation::builder()
        .tet_body(TetMesh::bar(cells, SIZE), material, DENSITY)
        .gravity([0.0, -9.81, 0.0])
        .dt(dt)
        .integrator(integrator)
        .solver(Solver::newton().tolerance(tolerance))
        .backend(Backend::Cpu)
        .pin(|p| p[0] < 1e-9)
        .build()
        .expect("valid beam");
    let tip: Vec<usize> = (0..sim.positions().len()).filter(|&v| is_tip(sim.positions()[v])).collect();
    let per_frame = (FRAME / dt).round() as usize;
    let mut heights = Vec::with_capacity(FRAMES);
    let mut elapsed = 0.0;
    for frame in 0..FRAMES {
        let started = Instant::now();
        for _ in 0..per_frame {
            sim.step().expect("beam step");
        }
        if frame < 30 {
            elapsed += started.elapsed().as_secs_f64();
        }
        heights.push(tip.iter().map(|&v| sim.positions()[v][1]).sum::<f64>() / tip.len() as f64);
    }
    Run { ms_per_frame: 1e3 * elapsed / 30.0, tip: heights, energy: Some(sim.energy().total) }
}

fn rapier_run(cells: [usize; 3]) -> (Run, usize) {
    let mut world = PhysicsWorld::new();
    world.integration_parameters.dt = FRAME as Real;
    world.integration_parameters.num_solver_iterations = 4;
    let half = Vector::new(SIZE[0] as Real, SIZE[1] as Real, SIZE[2] as Real) * 0.5;
    let builder = SoftBodyBuilder::cuboid(half, half, cells[0] + 1, cells[1] + 1, cells[2] + 1)
        .cell_model(SoftBodyCellModel::Corotational)
        .material(SoftBodyMaterial { young_modulus: YOUNGS as Real, poisson_ratio: POISSON as Real, ..Default::default() })
        .solver(SoftBodySolver::Fem)
        .mass((DENSITY * SIZE[0] * SIZE[1] * SIZE[2]) as Real)
        .no_surface_collider()
        .can_sleep(false);
    let positions: Vec<[f64; 3]> =
        builder.particle_positions().iter().map(|p| [p.x as f64, p.y as f64, p.z as f64]).collect();
    let pinned: Vec<u32> = (0..positions.len() as u32).filter(|&i| positions[i as usize][0] < 1e-4).collect();
    let tip: Vec<usize> = (0..positions.len()).filter(|&i| is_tip(positions[i])).collect();
    let handle = world.insert_soft_body(builder.pinned_particles(pinned));
    let cell_count = 5 * cells[0] * cells[1] * cells[2];
    let mut heights = Vec::with_capacity(FRAMES);
    let mut elapsed = 0.0;
    for frame in 0..FRAMES {
        let started = Instant::now();
        world.step();
        if frame < 30 {
            elapsed += started.elapsed().as_secs_f64();
        }
        let body = &world.soft_bodies[handle];
        heights.push(tip.iter().map(|&i| body.particle_position(i).y as f64).sum::<f64>() / tip.len() as f64);
    }
    (Run { ms_per_frame: 1e3 * elapsed / 30.0, tip: heights, energy: None }, cell_count)
}

/// RMS of the difference of two tip trajectories.
fn rms(a: &[f64], b: &[f64]) -> f64 {
    (a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f64>() / a.len() as f64).sqrt()
}

fn main() {
    let a_search = Integrator::ASearch { alpha_min: 0.0, alpha_max: 1.1, decay: None };
    let stabilized = Integrator::Stabilized { epsilon: 0.01 };
    for cells in [[12, 4, 4], [24, 8, 8]] {
        let tets = 5 * cells[0] * cells[1] * cells[2];
        println!("\nbeam {}x{}x{} cubes, {tets} tets", cells[0], cells[1], cells[2]);
        let (rapier, rapier_cells) = rapier_run(cells);
        let corotated = Material::corotated(YOUNGS, POISSON);
        let snh = Material::stable_neo_hookean(YOUNGS, POISSON);
        let fine = |material: &Material| lively_run(cells, material.clone(), Integrator::ImplicitMidpoint, FRAME / 20.0, 1e-8);
        let references = [("corotated", fine(&corotated)), ("stable neo-Hookean", fine(&snh))];
        let mut rows: Vec<(String, Run, usize)> = vec![(format!("rapier FEM corotational ({rapier_cells} cells)"), rapier, 0)];
        for (k, (name, material)) in [("corotated", corotated), ("stable neo-Hookean", snh)].into_iter().enumerate() {
            for (scheme, integrator) in
                [("backward Euler", Integrator::BackwardEuler), ("stabilized", stabilized.clone()), ("A-search", a_search.clone())]
            {
                rows.push((format!("lively {name}, {scheme}"), lively_run(cells, material.clone(), integrator, FRAME, 1e-6), k));
            }
        }
        let rapier_ms = rows[0].1.ms_per_frame;
        println!(
            "{:<44} {:>9} {:>12} {:>16} {:>14} {:>12}",
            "", "ms/frame", "vs rapier", "tip at 1 s (m)", "tip RMS (m)", "H at 2 s (J)"
        );
        for (name, reference) in &references {
            println!(
                "{:<44} {:>9} {:>12} {:>16.4} {:>14} {:>12}",
                format!("reference: {name} midpoint, h/20"),
                "-",
                "-",
                reference.tip[29],
                "0",
                reference.energy.map_or("-".into(), |e| format!("{e:.3}"))
            );
        }
        for (name, run, k) in &rows {
            let reference = &references[*k].1;
            println!(
                "{name:<44} {:>9.2} {:>12.2} {:>16.4} {:>14.2e} {:>12}",
                run.ms_per_frame,
                run.ms_per_frame / rapier_ms,
                run.tip[29],
                rms(&run.tip, &reference.tip),
                run.energy.map_or("-".into(), |e| format!("{e:.3}"))
            );
        }
    }
}
