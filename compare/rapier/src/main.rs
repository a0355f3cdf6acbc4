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
//! the energy left after 2 s. Every configuration runs three times, in rounds, and its fastest
//! round counts: the shared machine's slow moments come and go.

use std::time::Instant;

use lively::{Backend, Integrator, Material, Simulation, Solver, TetMesh};
use rapier3d::prelude::*;

const SIZE: [f64; 3] = [1.2, 0.4, 0.4];
const YOUNGS: f64 = 2.5e5;
const POISSON: f64 = 0.25;
const DENSITY: f64 = 1000.0;
const FRAME: f64 = 1.0 / 30.0;
const FRAMES: usize = 60;

/// One simulation of the beam, stepped a frame at a time.
enum Runner {
    Lively { sim: Simulation, tip: Vec<usize>, per_frame: usize },
    Rapier { world: PhysicsWorld, handle: SoftBodyHandle, tip: Vec<usize> },
}

impl Runner {
    fn lively(
        cells: [usize; 3],
        material: Material,
        integrator: Integrator,
        dt: f64,
        tolerance: f64,
    ) -> Runner {
        let sim = Simulation::builder()
            .tet_body(TetMesh::bar(cells, SIZE), material, DENSITY)
            .gravity([0.0, -9.81, 0.0])
            .dt(dt)
            .integrator(integrator)
            .solver(Solver::newton().tolerance(tolerance))
            .backend(Backend::Cpu)
            .pin(|p| p[0] < 1e-9)
            .build()
            .expect("valid beam");
        let tip = (0..sim.positions().len()).filter(|&v| is_tip(sim.positions()[v])).collect();
        Runner::Lively { sim, tip, per_frame: (FRAME / dt).round() as usize }
    }

    /// rapier's beam.
    fn rapier(cells: [usize; 3]) -> Runner {
        let mut world = PhysicsWorld::new();
        world.integration_parameters.dt = FRAME as Real;
        world.integration_parameters.num_solver_iterations = 4;
        let half = Vector::new(SIZE[0] as Real, SIZE[1] as Real, SIZE[2] as Real) * 0.5;
        let builder = SoftBodyBuilder::cuboid(half, half, cells[0] + 1, cells[1] + 1, cells[2] + 1)
            .cell_model(SoftBodyCellModel::Corotational)
            .material(SoftBodyMaterial {
                young_modulus: YOUNGS as Real,
                poisson_ratio: POISSON as Real,
                ..Default::default()
            })
            .solver(SoftBodySolver::Fem)
            .mass((DENSITY * SIZE[0] * SIZE[1] * SIZE[2]) as Real)
            .no_surface_collider()
            .can_sleep(false);
        let positions: Vec<[f64; 3]> =
            builder.particle_positions().iter().map(|p| [p.x as f64, p.y as f64, p.z as f64]).collect();
        let pinned: Vec<u32> =
            (0..positions.len() as u32).filter(|&i| positions[i as usize][0] < 1e-4).collect();
        let tip = (0..positions.len()).filter(|&i| is_tip(positions[i])).collect();
        let handle = world.insert_soft_body(builder.pinned_particles(pinned));
        Runner::Rapier { world, handle, tip }
    }

    /// Steps one frame; returns the tip's mean height.
    fn frame(&mut self) -> f64 {
        match self {
            Runner::Lively { sim, tip, per_frame } => {
                for _ in 0..*per_frame {
                    sim.step().expect("beam step");
                }
                tip.iter().map(|&v| sim.positions()[v][1]).sum::<f64>() / tip.len() as f64
            }
            Runner::Rapier { world, handle, tip } => {
                world.step();
                let body = &world.soft_bodies[*handle];
                tip.iter().map(|&i| body.particle_position(i).y as f64).sum::<f64>() / tip.len() as f64
            }
        }
    }

    /// The energy, where the library reports it.
    fn energy(&self) -> Option<f64> {
        match self {
            Runner::Lively { sim, .. } => Some(sim.energy().total),
            Runner::Rapier { .. } => None,
        }
    }
}

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

/// Rounds of timed runs: the shared machine's slow moments come and go, and the fastest of a
/// configuration's rounds is the one least disturbed.
const ROUNDS: usize = 3;

/// Runs each runner `make` builds for `FRAMES` frames, one after the other, in `ROUNDS`
/// rounds (fresh runners each round); ms per frame is the first 30 frames' mean in the
/// fastest round. The trajectories and energies are the same every round.
fn run_rounds(make: &[Box<dyn Fn() -> Runner + '_>], rounds: usize) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for round in 0..rounds {
        for (k, make) in make.iter().enumerate() {
            let mut runner = make();
            let mut run = Run { ms_per_frame: 0.0, tip: Vec::with_capacity(FRAMES), energy: None };
            for frame in 0..FRAMES {
                let started = Instant::now();
                run.tip.push(runner.frame());
                if frame < 30 {
                    run.ms_per_frame += 1e3 * started.elapsed().as_secs_f64() / 30.0;
                }
            }
            run.energy = runner.energy();
            if round == 0 {
                runs.push(run);
            } else {
                runs[k].ms_per_frame = runs[k].ms_per_frame.min(run.ms_per_frame);
            }
        }
    }
    runs
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
        let corotated = Material::corotated(YOUNGS, POISSON);
        let snh = Material::stable_neo_hookean(YOUNGS, POISSON);
        let fine = |material: &Material| {
            let make: Box<dyn Fn() -> Runner> = Box::new(move || {
                Runner::lively(cells, material.clone(), Integrator::ImplicitMidpoint, FRAME / 20.0, 1e-8)
            });
            run_rounds(&[make], 1).remove(0)
        };
        let references = [("corotated", fine(&corotated)), ("stable neo-Hookean", fine(&snh))];
        let rapier_cells = 5 * cells[0] * cells[1] * cells[2];
        let mut names = vec![(format!("rapier FEM corotational ({rapier_cells} cells)"), 0)];
        let mut make: Vec<Box<dyn Fn() -> Runner>> = vec![Box::new(move || Runner::rapier(cells))];
        for (k, (name, material)) in
            [("corotated", &corotated), ("stable neo-Hookean", &snh)].into_iter().enumerate()
        {
            for (scheme, integrator) in [
                ("backward Euler", Integrator::BackwardEuler),
                ("stabilized", stabilized.clone()),
                ("A-search", a_search.clone()),
            ] {
                names.push((format!("lively {name}, {scheme}"), k));
                let material = material.clone();
                make.push(Box::new(move || {
                    Runner::lively(cells, material.clone(), integrator.clone(), FRAME, 1e-6)
                }));
            }
        }
        let rows: Vec<(String, Run, usize)> =
            names.into_iter().zip(run_rounds(&make, ROUNDS)).map(|((name, k), run)| (name, run, k)).collect();
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
