//! Self-collision and contact between bodies (`SimulationBuilder::self_collision`), at game
//! steps: a cube dropped on a cube, three stacked cubes, a mat folding onto itself, a U whose
//! prongs are thrown at each other. Each scene also runs without self-collision, to show that
//! the bodies would pass through each other there. The GPU backend steps a stack like the CPU.

mod common;

use lively::{
    Backend, Collider, ContactModel, Damping, Integrator, LinearSolver, Material, SelfCollision, Simulation,
    SimulationBuilder, Solver, TetMesh,
};

const G: f64 = 9.81;
const SIDE: f64 = 0.2;
const DENSITY: f64 = 1000.0;
/// A vertex carrying 5 N rests 0.4 mm deep (`sqrt(W / 3k)`).
const SELF_STIFFNESS: f64 = 1e7;
const MU: f64 = 0.5;

/// A `SIDE` cube (3 cells a side) with its bottom face at height `y`.
fn cube(y: f64) -> TetMesh {
    let mesh = TetMesh::bar([3; 3], [SIDE; 3]);
    let raised = mesh.positions().iter().map(|p| [p[0], p[1] + y, p[2]]).collect();
    TetMesh::new(raised, mesh.tets().to_vec()).unwrap()
}

/// Cubes of Young's modulus `youngs` with their bottoms at `heights`, on the plane y = 0,
/// under gravity, with friction `MU` on the plane and between the cubes.
fn stack(heights: &[f64], youngs: f64, integrator: Integrator, self_collision: bool) -> SimulationBuilder {
    let mut builder = Simulation::builder()
        .gravity([0.0, -G, 0.0])
        .dt(1.0 / 30.0)
        .integrator(integrator)
        .collider(Collider::plane([0.0, 1.0, 0.0], 0.0).friction(MU))
        .contact_model(ContactModel::Penalty { stiffness: 1e5 });
    for &y in heights {
        builder = builder.tet_body(cube(y), Material::stable_neo_hookean(youngs, 0.3), DENSITY);
    }
    if self_collision {
        builder = builder.self_collision(SelfCollision { stiffness: SELF_STIFFNESS, friction: MU });
    }
    builder
}

/// How deep the bodies are in each other now (m).
fn penetration(sim: &Simulation) -> f64 {
    sim.model().self_penetration(sim.positions()).unwrap()
}

/// Shifts body `b` (of `per` vertices each) by `b * offset` in x and z: a stack not quite
/// square, so that no edge lies on another body's side plane.
fn stagger(sim: &mut Simulation, per: usize, offset: f64) {
    let p: Vec<[f64; 3]> = sim
        .positions()
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let k = (i / per) as f64 * offset;
            [p[0] + k, p[1], p[2] + k]
        })
        .collect();
    sim.set_state(&p, &vec![[0.0; 3]; p.len()]).unwrap();
}

/// The largest vertex speed (m/s).
fn fastest(sim: &Simulation) -> f64 {
    sim.velocities().iter().map(|v| (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt()).fold(0.0, f64::max)
}

/// Dropped from 5 cm onto a cube resting on the floor (offset by 1 cm, backward Euler,
/// h = 1/30 s), a cube comes to rest on it, never more than 2 mm inside it. Without
/// self-collision it falls into it.
#[test]
fn a_cube_dropped_on_a_cube_comes_to_rest_on_it() {
    for self_collision in [true, false] {
        let mut sim = stack(&[0.0, 0.25], 1e5, Integrator::BackwardEuler, self_collision).build().unwrap();
        stagger(&mut sim, 64, 0.01);
        let mut deepest: f64 = 0.0;
        for _ in 0..60 {
            sim.step().unwrap();
            deepest = deepest.max(penetration(&sim));
        }
        let speed = fastest(&sim);
        println!("self-collision {self_collision}: deepest {deepest:.2e} m, final speed {speed:.2e} m/s");
        if self_collision {
            assert!(deepest < 2e-3, "{deepest} m deep");
            assert!(speed < 1e-2, "still moving at {speed} m/s");
        } else {
            assert!(deepest > 2e-2, "without self-collision it passes in: {deepest} m");
        }
    }
}

/// Three stiffer cubes (E 1e6 Pa) stacked with 1 cm gaps and 1 cm offsets, with Rayleigh
/// damping: the stack stands, never more than 5 mm in itself, its top cube where it was put.
/// Under backward Euler it comes to rest within 2 s, and the ledger books no more dissipation
/// than the energy lost (it loses more: its own numerical damping). The stabilized integrator keeps it moving, with
/// its energy within its 1 % band of the ledger's target.
#[test]
fn three_stacked_cubes_stand_on_each_other() {
    for integrator in [Integrator::BackwardEuler, Integrator::Stabilized { epsilon: 0.01 }] {
        let mut sim = stack(&[0.0, 0.21, 0.42], 1e6, integrator.clone(), true)
            .damping(Damping::Rayleigh { stiffness: 0.01 })
            .build()
            .unwrap();
        stagger(&mut sim, 64, 0.01);
        let initial = sim.energy().total;
        let mut deepest: f64 = 0.0;
        let mut speeds = Vec::new();
        for _ in 0..90 {
            sim.step().unwrap();
            deepest = deepest.max(penetration(&sim));
            speeds.push(fastest(&sim));
        }
        let energy = sim.energy();
        let last = speeds[60..].iter().copied().fold(0.0, f64::max);
        println!(
            "{integrator:?}: deepest {deepest:.2e} m, fastest over the last second {last:.2e} m/s, \
             energy {initial:.3} -> {:.3} J, booked dissipation {:.3} J, target {:.3} J",
            energy.total,
            sim.ledger().dissipated(),
            energy.target
        );
        assert!(deepest < 5e-3, "{integrator:?}: {deepest} m deep");
        // The top cube stays on the stack: its centroid within a tenth of its side of where
        // it was placed (measured: 0.1 cm under backward Euler; 1.3 cm under the stabilized
        // integrator, which keeps the stack moving and slid it on landing, 0.3 cm before the
        // steps' start competed with the predictions as a starting guess).
        let centroid_x = sim.positions()[128..].iter().map(|p| p[0]).sum::<f64>() / 64.0;
        println!("{integrator:?}: the top cube's centroid at x = {centroid_x:.4} m (placed at 0.12 m)");
        assert!((centroid_x - 0.12).abs() < 0.02, "{integrator:?}: the top cube moved to x = {centroid_x}");
        if integrator == Integrator::BackwardEuler {
            assert!(last < 2e-2, "still moving at {last} m/s");
            assert!(energy.total <= energy.target, "{} J above the target {}", energy.total, energy.target);
        } else {
            let band = 0.01 * energy.target.abs();
            assert!(
                (energy.total - energy.target).abs() <= band,
                "{} J against {}",
                energy.total,
                energy.target
            );
        }
    }
}

/// A `size` box of `cells`, keeping the cells `keep(ix, iy, iz)` says (the bar's five tets
/// per cell go or stay together, so what is left is conforming).
fn carve(cells: [usize; 3], size: [f64; 3], keep: impl Fn(usize, usize, usize) -> bool) -> TetMesh {
    let bar = TetMesh::bar(cells, size);
    let cell =
        |p: [f64; 3], i: usize| ((p[i] / size[i] * cells[i] as f64).floor() as usize).min(cells[i] - 1);
    let tets: Vec<[u32; 4]> = bar
        .tets()
        .iter()
        .filter(|t| {
            let c: [f64; 3] =
                std::array::from_fn(|i| t.iter().map(|&v| bar.positions()[v as usize][i]).sum::<f64>() / 4.0);
            keep(cell(c, 0), cell(c, 1), cell(c, 2))
        })
        .copied()
        .collect();
    let mut index = vec![u32::MAX; bar.positions().len()];
    let mut positions = Vec::new();
    for &v in tets.iter().flatten() {
        if index[v as usize] == u32::MAX {
            index[v as usize] = positions.len() as u32;
            positions.push(bar.positions()[v as usize]);
        }
    }
    TetMesh::new(positions, tets.iter().map(|t| t.map(|v| index[v as usize])).collect()).unwrap()
}

/// A 0.5 m mat, 5 cm thick, lying on the floor with a 0.4 m flap standing at its end, the
/// flap tipped over onto the mat at 2 rad/s: with self-collision it lands on the mat, at
/// most 3 mm in it, and comes to rest, at h = 1/30 s and 1/60 s; without, it sinks into it.
#[test]
fn a_mat_folding_onto_itself_stays_out_of_itself() {
    for (dt, self_collision) in [(1.0 / 30.0, true), (1.0 / 60.0, true), (1.0 / 30.0, false)] {
        let mesh = carve([10, 9, 2], [0.5, 0.45, 0.1], |ix, iy, _| iy == 0 || ix == 0);
        let mut builder = Simulation::builder()
            .tet_body(mesh, Material::stable_neo_hookean(1e5, 0.3), DENSITY)
            .gravity([0.0, -G, 0.0])
            .dt(dt)
            .collider(Collider::plane([0.0, 1.0, 0.0], 0.0).friction(MU))
            .contact_model(ContactModel::Penalty { stiffness: 1e5 });
        if self_collision {
            builder = builder.self_collision(SelfCollision { stiffness: SELF_STIFFNESS, friction: MU });
        }
        let mut sim = builder.build().unwrap();
        let tipped: Vec<[f64; 3]> =
            sim.positions().iter().map(|p| [2.0 * (p[1] - 0.05).max(0.0), 0.0, 0.0]).collect();
        let rest = sim.positions().to_vec();
        sim.set_state(&rest, &tipped).unwrap();
        let mut deepest: f64 = 0.0;
        let steps = (2.0 / dt).round() as usize;
        for _ in 0..steps {
            sim.step().unwrap();
            deepest = deepest.max(penetration(&sim));
        }
        let top = sim.positions().iter().map(|p| p[1]).fold(0.0, f64::max);
        let speed = fastest(&sim);
        println!(
            "h = {dt:.4}, self-collision {self_collision}: deepest {deepest:.2e} m, top {top:.3} m, speed {speed:.1e} m/s"
        );
        // The flap fell: nothing stands above a quarter of its height.
        assert!(top < 0.25, "the flap did not fold: top at {top} m");
        if self_collision {
            assert!(deepest < 3e-3, "h = {dt}: {deepest} m deep");
            assert!(speed < 2e-2, "h = {dt}: still moving at {speed} m/s");
        } else {
            assert!(deepest > 1e-2, "without self-collision it passes in: {deepest} m");
        }
    }
}

/// Self-collision is refused where it cannot run, with errors that say why.
#[test]
fn self_collision_refuses_what_it_cannot_run_on() {
    let settings = SelfCollision { stiffness: SELF_STIFFNESS, friction: MU };
    let refused = |builder: SimulationBuilder, needle: &str| {
        let message = builder.build().err().expect("refused").to_string();
        assert!(message.contains(needle), "{message:?} should say {needle:?}");
    };
    let base = || stack(&[0.0, 0.25], 1e5, Integrator::BackwardEuler, false);
    refused(base().self_collision(SelfCollision { stiffness: 0.0, friction: 0.5 }), "stiffness");
    refused(base().self_collision(SelfCollision { stiffness: 1e7, friction: f64::NAN }), "friction");
    refused(base().self_collision(settings).solver(Solver::mixed_fem()), "Newton");
    refused(base().self_collision(settings).solver(Solver::local_global(10)), "Newton");
    refused(
        base().self_collision(settings).solver(Solver::newton().linear_solver(LinearSolver::Cholesky)),
        "PCG",
    );
    refused(base().self_collision(settings).contact_model(ContactModel::Projection), "projection");
    for integrator in [Integrator::A1, Integrator::Newmark, Integrator::ImplicitMidpoint] {
        refused(base().self_collision(settings).integrator(integrator), "blows up");
    }
    let sim = base().self_collision(settings).build().unwrap();
    assert_eq!(sim.model().self_collision(), Some(settings));
    let model = sim.model();
    assert!(model.self_penetration(&model.rest_positions()[1..]).is_err());
}

/// Two cubes, the top one dropped from 2 mm onto the bottom one (offset by 1 cm), with
/// friction between them and Rayleigh damping, for one and two quadrature nodes: each step
/// on the GPU from the CPU's state, against the CPU's step, while the cubes press into each
/// other (per step, as a bouncing stack is sensitive to where it lands). A second GPU
/// simulation takes each step with the same bits.
#[test]
fn a_stack_steps_on_the_gpu_like_on_the_cpu() {
    if common::gpu().is_none() {
        return;
    }
    for integrator in [Integrator::BackwardEuler, Integrator::Stabilized { epsilon: 0.01 }, Integrator::Avf] {
        let build = |backend: Backend| {
            let builder = stack(&[0.0, 0.202], 1e5, integrator.clone(), true)
                .damping(Damping::Rayleigh { stiffness: 0.01 })
                .solver(Solver::newton().tolerance(1e-5));
            let mut sim = common::on_backend(builder, backend).build().unwrap();
            stagger(&mut sim, 64, 0.01);
            sim
        };
        let (mut cpu, mut gpu, mut again) = (build(Backend::Cpu), build(Backend::Gpu), build(Backend::Gpu));
        assert_eq!(gpu.backend(), Backend::Gpu);
        let (mut deepest, mut worst, mut worst_depth, mut moved): (f64, f64, f64, f64) = (0.0, 0.0, 0.0, 0.0);
        for _ in 0..8 {
            let (x, v) = (cpu.positions().to_vec(), cpu.velocities().to_vec());
            for sim in [&mut cpu, &mut gpu, &mut again] {
                sim.set_state(&x, &v).unwrap();
                let stats = sim.step().unwrap_or_else(|e| panic!("{integrator:?}: {e}"));
                assert!(stats.converged, "{integrator:?}: {stats:?}");
                // Detection runs on the device with the evaluations: a backward Euler step
                // still waits for it once per Newton iteration and twice more at most
                // (tests/gpu_steps.rs has the reasons), and once for the forces of the state
                // set here.
                if let (Some(device), Integrator::BackwardEuler) = (stats.device, &integrator) {
                    let linearized = stats.iterations + stats.projected_iterations + stats.resumed_iterations;
                    let bound = (linearized + 3) as u64;
                    assert!(device.readbacks <= bound, "{device:?} > {bound} readbacks");
                }
            }
            // The detection lists records in whatever order the device's atomics give; the
            // gather sorts them.
            assert_eq!(gpu.positions(), again.positions(), "{integrator:?}: not the same bits");
            let depth = penetration(&cpu);
            deepest = deepest.max(depth);
            worst = worst.max(common::worst_difference(cpu.positions(), gpu.positions()).0);
            worst_depth = worst_depth.max((penetration(&gpu) - depth).abs());
            moved = moved.max(common::worst_difference(cpu.positions(), &x).0);
        }
        println!(
            "{integrator:?}: per step, GPU vs CPU {worst:.2e} m (steps up to {moved:.2e} m), depth \
             {worst_depth:.2e} m (deepest {deepest:.2e} m)"
        );
        // The cubes must have pressed into each other, or self-contact went untested.
        assert!(deepest > 2e-4, "{integrator:?}: the cubes barely touched ({deepest} m)");
        // The GPU's Newton stops where f32 no longer resolves G's decrease (its last step here
        // is ~1e-6 m), so a step agrees to about that: measured 0.3 % of the depth, and the
        // depth itself to 1e-5 of it. A wrong or missing contact term is off by the depth
        // itself. (The records, the linearization and the direction are checked to f32
        // round-off in src/backend/gpu/self_contact.rs.)
        assert!(worst <= 1e-2 * deepest, "{integrator:?}: a GPU step differs by {worst:e} m");
        assert!(worst_depth <= 1e-3 * deepest, "{integrator:?}: depths differ by {worst_depth:e} m");
    }
}

/// The same stack 10 km out (moved there horizontally, on the same plane) steps on the GPU as
/// at the origin. Every part of a self-contact model keeps the world's axes; the device
/// measured the pairs from the world's origin, which rounds positions there to 1 mm, twice
/// the cubes' depth in each other: steps came 5.4e-3 m from the CPU's (3.7e-5 m at 100 m).
/// It measures from the first part's offset now.
#[test]
fn a_stack_10_km_out_steps_on_the_gpu_like_on_the_cpu() {
    if common::gpu().is_none() {
        return;
    }
    let far = [1e4, 0.0, -7e3];
    let build = |backend: Backend| {
        let builder = stack(&[0.0, 0.202], 1e5, Integrator::BackwardEuler, true)
            .damping(Damping::Rayleigh { stiffness: 0.01 })
            .solver(Solver::newton().tolerance(1e-5));
        let mut sim = common::on_backend(builder, backend).build().unwrap();
        stagger(&mut sim, 64, 0.01);
        let moved: Vec<[f64; 3]> =
            sim.positions().iter().map(|p| [p[0] + far[0], p[1] + far[1], p[2] + far[2]]).collect();
        sim.set_state(&moved, &vec![[0.0; 3]; moved.len()]).unwrap();
        sim
    };
    let (mut cpu, mut gpu) = (build(Backend::Cpu), build(Backend::Gpu));
    let (mut deepest, mut worst): (f64, f64) = (0.0, 0.0);
    for _ in 0..8 {
        let (x, v) = (cpu.positions().to_vec(), cpu.velocities().to_vec());
        gpu.set_state(&x, &v).unwrap();
        cpu.step().unwrap();
        let stats = gpu.step().unwrap();
        assert!(stats.converged, "{stats:?}");
        deepest = deepest.max(penetration(&cpu));
        worst = worst.max(common::worst_difference(cpu.positions(), gpu.positions()).0);
    }
    println!("10 km out: per step, GPU vs CPU {worst:.2e} m (deepest {deepest:.2e} m)");
    assert!(deepest > 2e-4, "the cubes barely touched ({deepest} m)");
    // The bound of the stack at the origin above.
    assert!(worst <= 1e-2 * deepest, "a GPU step differs by {worst:e} m");
}

/// A cube placed exactly on another (their faces touching) under a fixed budget of 2 Newton x
/// 40 CG, on both backends: it settles onto it like the converged solve. Newton's model of the
/// first step has no contact in it (nothing is inside yet), so the step falls a whole step's
/// gravity into the lower cube; the budget's search used to stop at 1/8 of it, where the
/// penalty still outweighed the fall, and the whole scene hung still for good.
#[test]
fn a_cube_placed_on_a_cube_settles_under_a_budget() {
    let budget = Solver::newton().tolerance(1e-5).budget(2, 40);
    let backends: &[Backend] =
        if common::gpu().is_some() { &[Backend::Cpu, Backend::Gpu] } else { &[Backend::Cpu] };
    let settle = |solver: Solver, backend: Backend| {
        let builder = stack(&[0.0, 0.2], 1e5, Integrator::BackwardEuler, true).solver(solver);
        let mut sim = common::on_backend(builder, backend).build().unwrap();
        stagger(&mut sim, 64, 0.01);
        let top = |sim: &Simulation| sim.positions()[64..].iter().map(|p| p[1]).fold(f64::INFINITY, f64::min);
        let placed = top(&sim);
        let mut deepest: f64 = 0.0;
        for _ in 0..30 {
            sim.step().unwrap();
            deepest = deepest.max(penetration(&sim));
        }
        (placed - top(&sim), deepest)
    };
    let (converged_sank, _) = settle(Solver::newton().tolerance(1e-5), Backend::Cpu);
    for &backend in backends {
        let (sank, deepest) = settle(budget.clone(), backend);
        println!(
            "{backend:?}: the top cube sank {sank:.3e} m (converged: {converged_sank:.3e} m), at most \
             {deepest:.2e} m into the other"
        );
        // It sinks with the lower cube into the floor and a little into the lower cube.
        assert!(converged_sank > 1e-4, "converged: {converged_sank} m");
        assert!((sank - converged_sank).abs() < 0.1 * converged_sank, "{backend:?}: sank {sank} m");
        assert!(deepest < 2e-3, "{backend:?}: {deepest} m deep");
    }
}
