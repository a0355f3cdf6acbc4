//! One converged implicit step on the CPU backend.
//!
//! `cargo bench --bench cpu_step` — each configuration first prints one line with its Newton
//! and CG iteration counts and phase times (so the criterion figures can be read against
//! what the solver did), then criterion times `Simulation::step` from a fixed mid-motion
//! state.
//!
//! Groups:
//! - `target`: the beam, 12x4x4 cells of 0.1 m (960 tets) and 24x8x8 cells of 0.05 m
//!   (7680 tets); stable neo-Hookean E 2.5e5, nu 0.25, rho 1000, one end pinned, gravity,
//!   h = 1/30, backward Euler; and the 7680-tet step under 5 ms and 25 ms wall-clock budgets
//!   (`Solver::wall_time`).
//! - `bars`: about 1K, 10K and 50K tets, stiff (E 1e7) and soft (E 1e5) StVK, backward Euler
//!   and AVF.

mod common;

use criterion::{Criterion, criterion_group, criterion_main};
use lively::{Integrator, Material, Simulation, Solver, TetMesh};

struct Case {
    name: String,
    cells: [usize; 3],
    size: [f64; 3],
    material: Material,
    integrator: Integrator,
    solver: Solver,
}

/// Builds the case, lets the beam fall for `warmup` steps, and returns the simulation with the
/// state to restart every measured step from.
fn prepare(case: &Case, warmup: usize) -> (Simulation, Vec<[f64; 3]>, Vec<[f64; 3]>) {
    let mesh = TetMesh::bar(case.cells, case.size);
    let tets = mesh.tets().len();
    let mut sim = Simulation::builder()
        .tet_body(mesh, case.material.clone(), 1000.0)
        .dt(1.0 / 30.0)
        .gravity([0.0, -9.81, 0.0])
        .integrator(case.integrator.clone())
        .solver(case.solver.clone())
        .pin(|p| p[0] < 1e-9)
        .build()
        .expect("valid benchmark scene");
    for _ in 0..warmup {
        sim.step().expect("warm-up step");
    }
    let (x, v) = (sim.positions().to_vec(), sim.velocities().to_vec());
    // One reported step from the snapshot, for the iteration counts.
    sim.set_state(&x, &v).unwrap();
    let stats = sim.step().unwrap();
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    eprintln!(
        "{:<28} {tets:>6} tets  newton {:>2}  cg {:>4}  converged {}  total {:>8.2} ms (evaluate {:.2}, linear {:.2}, line search {:.2})",
        case.name,
        stats.iterations,
        stats.linear_iterations,
        stats.converged,
        ms(stats.timings.total),
        ms(stats.timings.evaluate),
        ms(stats.timings.linear_solve),
        ms(stats.timings.line_search),
    );
    (sim, x, v)
}

fn run(c: &mut Criterion, group: &str, cases: &[Case], samples: usize) {
    let mut g = c.benchmark_group(group);
    g.sample_size(samples);
    for case in cases {
        let (mut sim, x, v) = prepare(case, 10);
        sim.set_state(&x, &v).unwrap();
        common::time_steps(&mut g, &case.name, &mut sim);
    }
    g.finish();
}

fn target(c: &mut Criterion) {
    let material = Material::stable_neo_hookean(2.5e5, 0.25);
    let cases = [
        Case {
            name: "be_960".into(),
            cells: [12, 4, 4],
            size: [1.2, 0.4, 0.4],
            material: material.clone(),
            integrator: Integrator::BackwardEuler,
            solver: Solver::newton(),
        },
        Case {
            name: "be_7680".into(),
            cells: [24, 8, 8],
            size: [1.2, 0.4, 0.4],
            material: material.clone(),
            integrator: Integrator::BackwardEuler,
            solver: Solver::newton(),
        },
        // A 5 ms wall-clock budget on the same step: it should return within the budget plus
        // about one Newton iteration.
        Case {
            name: "be_7680_wall_time_5ms".into(),
            cells: [24, 8, 8],
            size: [1.2, 0.4, 0.4],
            material: material.clone(),
            integrator: Integrator::BackwardEuler,
            solver: Solver::newton().wall_time(std::time::Duration::from_millis(5)),
        },
        // The 25 ms budget: above what a converged step takes here, so it should cost
        // nothing (the step converges before the budget is spent).
        Case {
            name: "be_7680_wall_time_25ms".into(),
            cells: [24, 8, 8],
            size: [1.2, 0.4, 0.4],
            material,
            integrator: Integrator::BackwardEuler,
            solver: Solver::newton().wall_time(std::time::Duration::from_millis(25)),
        },
    ];
    run(c, "target", &cases, 20);
}

fn bars(c: &mut Criterion) {
    let mut cases = Vec::new();
    for (label, cells, size) in [
        ("1k", [10, 5, 4], [1.0, 0.5, 0.4]),
        ("10k", [20, 10, 10], [1.0, 0.5, 0.5]),
        ("50k", [40, 16, 16], [2.0, 0.8, 0.8]),
    ] {
        for (stiffness, youngs) in [("stiff", 1e7), ("soft", 1e5)] {
            for integrator in [Integrator::BackwardEuler, Integrator::Avf] {
                cases.push(Case {
                    name: format!("{}_{label}_{stiffness}", integrator.name()),
                    cells,
                    size,
                    material: Material::stvk(youngs, 0.3),
                    integrator,
                    solver: Solver::newton(),
                });
            }
        }
    }
    run(c, "bars", &cases, 10);
}

// No HTML plots: plotters is built with the crate's ab_glyph text, which criterion's plots
// cannot draw with (they panic on a rerun, when they compare against the last one).
criterion_group! {
    name = benches;
    config = Criterion::default().without_plots();
    targets = target, bars
}
criterion_main!(benches);
