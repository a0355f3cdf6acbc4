//! Mixed finite elements solved by SQP (mixed-fem-sqp.md): converged, the same answer as
//! Newton's; on stiff bodies fewer iterations; stopped early, less damping than Newton stopped
//! the same; soft flesh with near-rigid inclusions stays stable.

mod common;

use common::{backends, squashed_steel_cube, worst_difference};
use lively::{Backend, Error, Integrator, Material, Simulation, Solver, TetMesh};

/// A bar of 8x2x2 cells, 0.8 m long, pinned at x = 0 and falling under gravity from rest.
fn pinned_bar(material: Material, integrator: Integrator, solver: Solver) -> Simulation {
    Simulation::builder()
        .tet_body(TetMesh::bar([8, 2, 2], [0.8, 0.2, 0.2]), material, 1000.0)
        .gravity([0.0, -9.81, 0.0])
        .dt(1.0 / 30.0)
        .integrator(integrator)
        .solver(solver)
        .backend(Backend::Cpu)
        .pin(|p| p[0] == 0.0)
        .build()
        .expect("valid scene")
}

/// Steps a pinned bar falling from rest with both solvers converged tightly; returns the
/// worst position difference over `steps` steps relative to the largest displacement, and
/// the iteration counts.
fn converged_steps(material: Material, integrator: Integrator, steps: usize) -> (f64, usize, usize) {
    let tolerance = 1e-7;
    let mut newton = pinned_bar(
        material.clone(),
        integrator.clone(),
        Solver::newton().tolerance(tolerance).max_iterations(200),
    );
    let mut mixed =
        pinned_bar(material, integrator, Solver::mixed_fem().tolerance(tolerance).max_iterations(200));
    let rest = newton.positions().to_vec();
    let (mut worst, mut newton_iterations, mut mixed_iterations) = (0.0f64, 0, 0);
    for _ in 0..steps {
        let a = newton.step().expect("newton step");
        let b = mixed.step().expect("mixed step");
        assert!(a.converged && b.converged, "both converge: newton {a:?}, mixed {b:?}");
        newton_iterations += a.iterations;
        mixed_iterations += b.iterations;
        let (difference, _) = worst_difference(newton.positions(), mixed.positions());
        let (displacement, _) = worst_difference(newton.positions(), &rest);
        worst = worst.max(difference / displacement.max(1e-12));
    }
    (worst, newton_iterations, mixed_iterations)
}

#[test]
fn converged_mixed_fem_equals_converged_newton() {
    for youngs in [1e5, 1e7, 1e10] {
        for material in [Material::stable_neo_hookean(youngs, 0.45), Material::corotated(youngs, 0.3)] {
            for integrator in [Integrator::BackwardEuler, Integrator::Bdf2] {
                let (worst, newton, mixed) = converged_steps(material.clone(), integrator.clone(), 6);
                println!(
                    "E {youngs:.0e} {:?} {integrator:?}: worst difference {worst:.2e} of the displacement, \
                     iterations newton {newton} mixed {mixed}",
                    material.model()
                );
                assert!(
                    worst < 1e-5,
                    "E {youngs:e} {material:?} {integrator:?}: solutions differ by {worst:e}"
                );
                // With the constraints' curvature in its condensed system it converges as Newton
                // does on the soft bar (without it, linearly: 49 iterations to Newton's 29 at
                // 1e5 Pa, stable neo-Hookean, backward Euler). The stiffer bars reach the round-off
                // floor of the 1e-7 N tolerance, where the counts say how each solver stops there.
                if youngs == 1e5 {
                    assert!(
                        mixed as f64 <= 1.25 * newton as f64,
                        "E {youngs:e} {material:?} {integrator:?}: mixed {mixed} iterations, Newton {newton}"
                    );
                }
            }
        }
    }
}

#[test]
fn refuses_what_it_cannot_do() {
    let build = |integrator| {
        Simulation::builder()
            .tet_body(TetMesh::bar([2, 1, 1], [0.2, 0.1, 0.1]), Material::corotated(1e5, 0.3), 1000.0)
            .integrator(integrator)
            .solver(Solver::mixed_fem())
            .backend(Backend::Cpu)
            .build()
    };
    assert!(matches!(build(Integrator::Avf), Err(Error::Unsupported(m)) if m.contains("AVF")));
    assert!(build(Integrator::ImplicitMidpoint).is_ok(), "one node at theta 1/2 is fine");
}

/// The GPU's mixed-FEM steps follow the CPU's: a pinned bar of every kind of material
/// falling (with a mixed stiff part), converged on both.
/// A bar of 6x2x2 cells, 0.6 m long, corotated 1e7 Pa up to x = 0.2 m and stable
/// neo-Hookean 1e5 Pa beyond, pinned at x = 0, falling under gravity from rest on `backend`.
fn graded_bar(backend: Backend, solver: Solver) -> Simulation {
    let builder = Simulation::builder()
        .tet_body_graded(
            TetMesh::bar([6, 2, 2], [0.6, 0.2, 0.2]),
            |c| {
                if c[0] < 0.2 {
                    Material::corotated(1e7, 0.3)
                } else {
                    Material::stable_neo_hookean(1e5, 0.4)
                }
            },
            1000.0,
        )
        .gravity([0.0, -9.81, 0.0])
        .dt(1.0 / 30.0)
        .integrator(Integrator::BackwardEuler)
        .solver(solver)
        .pin(|p| p[0] == 0.0);
    common::on_backend(builder, backend).build().expect("valid scene")
}

#[test]
fn mixed_fem_steps_on_the_gpu_like_on_the_cpu() {
    if common::gpu().is_none() {
        return;
    }
    let run = |backend| {
        let mut sim = graded_bar(backend, Solver::mixed_fem().tolerance(1e-3));
        let rest = sim.positions().to_vec();
        let (mut iterations, mut device) = (0, None);
        for _ in 0..6 {
            let step = sim.step().expect("step");
            assert!(step.converged, "{backend:?}: {step:?}");
            iterations += step.iterations;
            device = step.device;
            // One readback per iteration (its linearization, condensed solve, local update and
            // the full step's merit; the first also the start picked on the device), one for
            // the final check, one for the end objective with the state's end (measured: 6 for
            // 4 iterations; it was 7), one per further line-search batch, and one per solve
            // deferred and then resumed.
            if let Some(d) = step.device {
                assert!(
                    d.readbacks as usize <= step.iterations + step.resumed_iterations + 2 + 2,
                    "{d:?} for {} iterations",
                    step.iterations
                );
            }
        }
        (sim.positions().to_vec(), rest, iterations, device)
    };
    let (cpu, rest, cpu_iterations, _) = run(Backend::Cpu);
    let (gpu, _, gpu_iterations, device) = run(Backend::Gpu);
    let (difference, _) = worst_difference(&cpu, &gpu);
    let (displacement, _) = worst_difference(&cpu, &rest);
    println!(
        "mixed FEM, 6 steps: GPU vs CPU {difference:.2e} m of {displacement:.3} m; iterations CPU {cpu_iterations}, \
         GPU {gpu_iterations}; device work per step {device:?}"
    );
    assert!(difference < 1e-6 * displacement.max(1.0) + 1e-6, "{difference} m");
}

/// A fixed budget (`Solver::budget`) runs the whole mixed-FEM solve on the device: every
/// step is one readback, and the steps follow the CPU's, whose decisions are made on the host
/// by the same rule. The graded bar, 3 SQP iterations of 40 CG iterations.
#[test]
fn a_budgeted_mixed_step_reads_back_once_and_steps_as_on_the_cpu() {
    if common::gpu().is_none() {
        return;
    }
    let run = |backend| {
        let mut sim = graded_bar(backend, Solver::mixed_fem().budget(3, 40));
        let rest = sim.positions().to_vec();
        let mut iterations = 0;
        for _ in 0..8 {
            let step = sim.step().expect("step");
            assert!(step.iterations > 0 && step.objective_decrease > 0.0, "{backend:?}: {step:?}");
            iterations += step.iterations;
            if let Some(d) = step.device {
                assert_eq!(d.readbacks, 1, "{d:?}");
            }
        }
        (sim.positions().to_vec(), rest, iterations)
    };
    let (cpu, rest, cpu_iterations) = run(Backend::Cpu);
    let (gpu, _, gpu_iterations) = run(Backend::Gpu);
    let (difference, _) = worst_difference(&cpu, &gpu);
    let (displacement, _) = worst_difference(&cpu, &rest);
    println!(
        "budgeted mixed FEM (3 x 40), 8 steps: GPU vs CPU {difference:.2e} m of {displacement:.3} m; iterations CPU \
         {cpu_iterations}, GPU {gpu_iterations}"
    );
    assert_eq!(cpu_iterations, gpu_iterations);
    assert!(difference < 1e-6 * displacement.max(1.0) + 1e-6, "{difference} m");
}

/// A capped step's stretches can stay positive while the positions invert an element, and
/// neo-Hookean's energy is infinite there: the merit is `+inf` where the positions leave the
/// domain, so the line search stops short of it. A bar crushed at 10 and 30 m/s, one to
/// three SQP iterations a step at dt 0.1 s: at 10 m/s and one iteration its second step
/// ended on an inverted element (a step refused with "non-finite energy") before. Both
/// engines, each step finite.
#[test]
fn capped_steps_never_end_on_an_inverted_neo_hookean_element() {
    let mut backends = vec![Backend::Cpu];
    if common::gpu().is_some() {
        backends.push(Backend::Gpu);
    }
    for backend in backends {
        for iterations in 1..=3 {
            for speed in [10.0, 30.0] {
                let builder = Simulation::builder()
                    .tet_body(
                        TetMesh::bar([8, 2, 2], [0.8, 0.2, 0.2]),
                        Material::neo_hookean(1e5, 0.3),
                        1000.0,
                    )
                    .gravity([0.0, -9.81, 0.0])
                    .dt(0.1)
                    .integrator(Integrator::BackwardEuler)
                    .solver(Solver::mixed_fem().max_iterations(iterations))
                    .pin(|p| p[0] == 0.0);
                let mut sim = common::on_backend(builder, backend).build().expect("valid scene");
                let x = sim.positions().to_vec();
                let v: Vec<[f64; 3]> =
                    x.iter().map(|p| [-speed * p[0], -speed * (p[1] - 0.1), -speed * (p[2] - 0.1)]).collect();
                sim.set_state(&x, &v).expect("finite state");
                for step in 0..20 {
                    let label = format!("{backend:?}, {iterations} iterations, {speed} m/s, step {step}");
                    sim.step().unwrap_or_else(|e| panic!("{label}: {e}"));
                    let energy = sim.energy();
                    assert!(
                        energy.potential.is_finite() && energy.kinetic.is_finite(),
                        "{label}: {energy:?}"
                    );
                }
            }
        }
    }
}

/// A stiff stable neo-Hookean bar, 0.8 x 0.1 x 0.1 m, hinged along one top edge and
/// released horizontally under gravity: it swings down like a rigid pendulum (the paper's
/// swinging gecko, re-created with a generated mesh).
fn hinged_bar(youngs: f64, solver: Solver) -> Simulation {
    Simulation::builder()
        .tet_body(
            TetMesh::bar([8, 2, 2], [0.8, 0.1, 0.1]),
            Material::stable_neo_hookean(youngs, 0.45),
            1000.0,
        )
        .gravity([0.0, -9.81, 0.0])
        .dt(1.0 / 30.0)
        .integrator(Integrator::BackwardEuler)
        .solver(solver)
        .backend(Backend::Cpu)
        .pin(|p| p[0] == 0.0 && p[1] == 0.1)
        .build()
        .expect("valid scene")
}

fn tip_height(sim: &Simulation) -> f64 {
    sim.positions().last().expect("vertices")[1]
}

/// The stiffer the body, the more mixed FEM saves: at E 1e10 Pa it takes 504 iterations to
/// Newton's 575 over the 30 steps, at 1e12 776 to 2672 (Newton no longer takes
/// round-off-sized steps that leave the objective unchanged: before, one such step at 1e10
/// ran to the iteration cap and put Newton at 1595).
#[test]
fn stiff_bodies_converge_in_far_fewer_iterations() {
    for (youngs, at_most) in [(1e10, 0.95), (1e12, 0.5)] {
        let mut newton = hinged_bar(youngs, Solver::newton().max_iterations(500));
        let mut mixed = hinged_bar(youngs, Solver::mixed_fem().max_iterations(500));
        let (mut newton_iterations, mut mixed_iterations, mut mixed_converged) = (0, 0, 0);
        for _ in 0..30 {
            newton_iterations += newton.step().expect("newton step").iterations;
            let step = mixed.step().expect("mixed step");
            mixed_iterations += step.iterations;
            mixed_converged += step.converged as usize;
        }
        println!(
            "hinged bar, E {youngs:.0e}, 30 steps to 1e-6 N: Newton {newton_iterations} iterations, \
             mixed {mixed_iterations} ({mixed_converged} of 30 steps converged); H at the end: Newton {:.3} J, \
             mixed {:.3} J",
            newton.energy().total,
            mixed.energy().total
        );
        assert_eq!(mixed_converged, 30, "E {youngs:e}: every mixed step converges");
        assert!(
            (mixed_iterations as f64) <= at_most * newton_iterations as f64,
            "E {youngs:e}: mixed {mixed_iterations} iterations against Newton's {newton_iterations}"
        );
    }
}

#[test]
fn capped_at_a_few_iterations_it_follows_the_motion_newton_freezes() {
    for youngs in [1e10, 1e12] {
        let mut reference = hinged_bar(youngs, Solver::mixed_fem().max_iterations(500));
        for cap in [3, 5] {
            let mut newton = hinged_bar(youngs, Solver::newton().max_iterations(cap));
            let mut mixed = hinged_bar(youngs, Solver::mixed_fem().max_iterations(cap));
            if cap == 5 {
                reference = hinged_bar(youngs, Solver::mixed_fem().max_iterations(500));
            }
            let (mut newton_error, mut mixed_error) = (0.0, 0.0);
            for _ in 0..30 {
                reference.step().expect("reference step");
                newton.step().expect("newton step");
                mixed.step().expect("mixed step");
                newton_error += (tip_height(&newton) - tip_height(&reference)).powi(2);
                mixed_error += (tip_height(&mixed) - tip_height(&reference)).powi(2);
            }
            let (newton_rms, mixed_rms) = ((newton_error / 30.0f64).sqrt(), (mixed_error / 30.0f64).sqrt());
            println!(
                "hinged bar, E {youngs:.0e}, capped at {cap} iterations: tip height RMS from the converged swing \
                 Newton {newton_rms:.3} m, mixed {mixed_rms:.3} m; H after 1 s: converged {:.3} J, Newton {:.3} J, \
                 mixed {:.3} J",
                reference.energy().total,
                newton.energy().total,
                mixed.energy().total
            );
            assert!(
                mixed_rms < 0.8 * newton_rms,
                "E {youngs:e}, cap {cap}: mixed {mixed_rms} m against Newton's {newton_rms} m"
            );
        }
    }
}

#[test]
fn soft_flesh_with_rigid_inclusions_is_stable() {
    // A 0.3 m block of 6e4 Pa flesh hanging from its top face, with two balls of 1e14 Pa
    // inside (per-tet materials by rest centroid), jolted sideways at 2 m/s. A direct solve
    // converges every step; PCG, whose condensed system has a condition number near 1e12
    // here, stops at the iteration cap in some but stays stable.
    for linear in [lively::LinearSolver::Cholesky, lively::LinearSolver::PcgProjective] {
        flesh_with_inclusions(linear);
    }
}

fn flesh_with_inclusions(linear: lively::LinearSolver) {
    let centers = [[0.08, -0.08, 0.08], [0.22, -0.22, 0.22]];
    let inside = move |c: [f64; 3]| {
        centers.iter().any(|k| (0..3).map(|i| (c[i] - k[i]).powi(2)).sum::<f64>() < 0.05f64.powi(2))
    };
    let bar = TetMesh::bar([5, 5, 5], [0.3, 0.3, 0.3]);
    // Hang the block below y = 0 (mirrored in y, corners reordered to keep the tets positive).
    let mesh = TetMesh::new(
        bar.positions().iter().map(|p| [p[0], -p[1], p[2]]).collect(),
        bar.tets().iter().map(|t| [t[0], t[2], t[1], t[3]]).collect(),
    )
    .expect("valid mesh");
    let inclusions: Vec<bool> = mesh
        .tets()
        .iter()
        .map(|t| {
            inside(std::array::from_fn(|c| {
                t.iter().map(|&v| mesh.positions()[v as usize][c]).sum::<f64>() / 4.0
            }))
        })
        .collect();
    let rigid = inclusions.iter().filter(|&&b| b).count();
    assert!(rigid >= 20, "the inclusions hold {rigid} tets");
    let mut sim = Simulation::builder()
        .tet_body_graded(
            mesh.clone(),
            move |c| Material::stable_neo_hookean(if inside(c) { 1e14 } else { 6e4 }, 0.45),
            1000.0,
        )
        .gravity([0.0, -9.81, 0.0])
        .dt(1.0 / 30.0)
        .integrator(Integrator::BackwardEuler)
        .solver(Solver::mixed_fem().linear_solver(linear))
        .backend(Backend::Cpu)
        .pin(|p| p[1] == 0.0)
        .build()
        .expect("valid scene");
    let n = sim.positions().len();
    let jolt: Vec<[f64; 3]> =
        mesh.positions().iter().map(|p| if p[1] == 0.0 { [0.0; 3] } else { [2.0, 0.0, 0.0] }).collect();
    sim.set_state(mesh.positions(), &jolt).unwrap();
    assert_eq!(jolt.len(), n);
    let start = sim.energy().total;
    let (mut converged, mut largest_sway) = (0, 0.0f64);
    for _ in 0..45 {
        let step = sim.step().expect("mixed step");
        converged += step.converged as usize;
        assert!(sim.energy().total <= start + 1e-6 * start.abs(), "backward Euler never gains energy");
        largest_sway = largest_sway.max(sim.positions().iter().map(|p| p[0]).fold(f64::MIN, f64::max) - 0.3);
    }
    // The inclusions stay rigid: their tets' edge lengths keep their rest values.
    let worst_strain = mesh
        .tets()
        .iter()
        .zip(&inclusions)
        .filter(|(_, rigid)| **rigid)
        .flat_map(|(t, _)| [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)].map(|(a, b)| (t[a], t[b])))
        .map(|(a, b)| {
            let length = |x: &[[f64; 3]]| {
                let (p, q) = (x[a as usize], x[b as usize]);
                ((p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2) + (p[2] - q[2]).powi(2)).sqrt()
            };
            (length(sim.positions()) / length(mesh.positions()) - 1.0).abs()
        })
        .fold(0.0, f64::max);
    println!(
        "{linear:?}: flesh 6e4 Pa with {rigid} tets at 1e14 Pa: {converged} of 45 steps converged, largest sway {largest_sway:.3} m, \
         H {start:.3} -> {:.3} J, worst inclusion edge strain {worst_strain:.1e}",
        sim.energy().total
    );
    assert!(sim.positions().iter().flatten().all(|c| c.is_finite()));
    assert!(largest_sway > 0.02, "the flesh moves: sway {largest_sway} m");
    assert!(worst_strain < 1e-6, "inclusion edges strained by {worst_strain:e}");
    if linear == lively::LinearSolver::Cholesky {
        assert_eq!(converged, 45, "with a direct solve every step converges");
    }
}

/// A free steel-stiff cube of 0.1 m, 24x12x12 cells, E 1e11 Pa, squashed to 0.3 of its size,
/// one backward-Euler step at 1/30 s: mixed FEM and Newton lose nearly all the energy on both
/// backends. On the GPU the local/global matrix's inverse preconditions their CG (FSAI
/// and its coarse correction here, on lavapipe); for a body this stiff its translations came
/// back garbled from CG's f32 products, and the mixed step ended at 2e23 J (4e8 J before the
/// inverses were split along the translations). Such bodies took Jacobi's, whose solves then
/// lost the step's translation, one step of gravity (0.704 J against the CPU's 0.651). Their
/// solves are now split along the translations, which the inverses then leave out: they end
/// within 1.2e-4 of the CPU's energy.
#[test]
fn a_squashed_free_steel_cube_steps_without_exploding() {
    for (name, solver) in [("mixed FEM", Solver::mixed_fem()), ("Newton", Solver::newton())] {
        let mut ends = Vec::new();
        for backend in backends() {
            let mut sim = squashed_steel_cube([24, 12, 12], solver.clone(), backend);
            let before = sim.energy().total;
            let stats = sim.step().unwrap();
            let after = sim.energy().total;
            println!("{backend:?}, {name}: {before:.4e} J -> {after:.4e} J ({:?})", stats.outcome);
            ends.push(after);
        }
        let cpu = ends[0];
        assert!(cpu < 1e-8 * 6.125e8, "{name}, CPU: {cpu:e} J");
        for &after in &ends {
            assert!(
                after.is_finite() && (after - cpu).abs() <= 1e-3 * cpu,
                "{name}: {after:e} J against the CPU's {cpu:e} J"
            );
        }
    }
}

/// A free bar of 1.1e11 Pa stable neo-Hookean flesh with a 5.9e4 Pa StVK end, squashed to a
/// third, one backward-Euler step of mixed FEM capped at 5 iterations (found by comparing the
/// backends on random scenes). SQP's merit lets `G` rise on the way; on the GPU its f32
/// directions came out 50 times too long and the capped step ended 14 m out, the energy 4e10
/// J from 2.8e8 J, where the CPU's moved 0.07 m and kept 209 J. A mixed solve that raised `G`
/// and ended more than ten times as high above the objective's floor as the step's start
/// (46 times here) now gives the step to Newton, whose line search lowers `G` itself.
#[test]
fn a_capped_step_never_ends_above_where_it_started() {
    let cells = [3usize, 2, 2];
    let size = cells.map(|c| 0.1 * c as f64);
    let mut ends = Vec::new();
    for backend in backends() {
        let material_at = move |c: [f64; 3]| match c[0] > 0.5 * size[0] {
            true => Material::stvk(5.85e4, 0.33),
            false => Material::stable_neo_hookean(1.14e11, 0.33),
        };
        let builder = Simulation::builder()
            .tet_body_graded(TetMesh::bar(cells, size), material_at, 2235.0)
            .dt(0.0175)
            .gravity([0.0, -9.81, 0.0])
            .integrator(Integrator::BackwardEuler)
            .solver(Solver::mixed_fem().max_iterations(5));
        let mut sim = common::on_backend(builder, backend).build().unwrap();
        let squashed: Vec<[f64; 3]> =
            sim.positions().iter().map(|p| [0.594 * p[0], 0.569 * p[1], 0.315 * p[2]]).collect();
        sim.set_state(&squashed, &vec![[0.0; 3]; squashed.len()]).unwrap();
        let before = sim.energy().total;
        let stats = sim.step().unwrap();
        let after = sim.energy().total;
        let (moved, _) = worst_difference(sim.positions(), &squashed);
        println!(
            "{backend:?}: {before:.4e} J -> {after:.4e} J, moved {moved:.3} m ({} iterations)",
            stats.iterations
        );
        assert!(after < 1e-3 * before, "{backend:?}: {before:e} J -> {after:e} J");
        ends.push(sim.positions().to_vec());
    }
    if let [cpu, gpu] = &ends[..] {
        let (apart, _) = worst_difference(cpu, gpu);
        assert!(apart < 0.05, "the GPU's step ended {apart} m from the CPU's");
    }
}
