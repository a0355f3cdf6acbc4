//! The local/global solver (stabilizing-integrators-realtime.md §4.2): every iteration lowers
//! the step objective, many iterations reach Newton's answer, the stabilized real-time path
//! keeps the energy where projective dynamics with backward Euler loses it, and the GPU
//! follows the CPU.

mod common;

use common::{backends, gpu, on_backend, worst_difference};
use lively::{
    Backend, Collider, ContactModel, Damping, Error, Integrator, Material, Simulation, SimulationBuilder,
    Solver, SpringMesh, TetMesh,
};

/// A free ARAP (or corotated) bar, 0.6 m of 6x2x2 cells, stretched 1.3x along x and released
/// without gravity.
fn stretched_bar(material: Material, integrator: Integrator, solver: Solver, backend: Backend) -> Simulation {
    let mesh = TetMesh::bar([6, 2, 2], [0.6, 0.2, 0.2]);
    let stretched: Vec<[f64; 3]> = mesh.positions().iter().map(|p| [1.3 * p[0], p[1], p[2]]).collect();
    let builder = Simulation::builder()
        .tet_body(mesh, material, 1000.0)
        .gravity([0.0; 3])
        .dt(1.0 / 30.0)
        .integrator(integrator)
        .solver(solver);
    let mut sim = on_backend(builder, backend).build().expect("valid scene");
    sim.set_state(&stretched, &vec![[0.0; 3]; stretched.len()]).unwrap();
    sim
}

/// The stretched corotated bar, released with ether drag. The GPU's first dense inverse is of
/// the matrix without the drag (lagged damping would move it every step) and preconditions CG;
/// once the drag has held still for a step, the inverse is of the damped matrix and solves it
/// directly.
fn dragged_bar(backend: Backend) -> Simulation {
    let mesh = TetMesh::bar([6, 2, 2], [0.6, 0.2, 0.2]);
    let stretched: Vec<[f64; 3]> = mesh.positions().iter().map(|p| [1.3 * p[0], p[1], p[2]]).collect();
    let builder = Simulation::builder()
        .tet_body(mesh, Material::corotated(1e5, 0.3), 1000.0)
        .gravity([0.0; 3])
        .dt(1.0 / 30.0)
        .integrator(Integrator::BackwardEuler)
        .solver(Solver::local_global(10).global_tolerance(1e-5))
        .damping(Damping::Ether { coefficient: 2.0 });
    let mut sim = on_backend(builder, backend).build().expect("valid scene");
    sim.set_state(&stretched, &vec![[0.0; 3]; stretched.len()]).unwrap();
    sim
}

/// A corotated bar pinned at one end, under gravity, held by a handle and resting on a plane:
/// every projective term at once.
fn hanging_bar(integrator: Integrator, solver: Solver, backend: Backend) -> Simulation {
    let builder = Simulation::builder()
        .tet_body(TetMesh::bar([6, 2, 2], [0.6, 0.2, 0.2]), Material::corotated(2e5, 0.3), 1000.0)
        .dt(1.0 / 30.0)
        .integrator(integrator)
        .solver(solver)
        .pin(|p| p[0] == 0.0)
        .collider(Collider::plane([0.0, 1.0, 0.0], -0.15).friction(0.3))
        .contact_model(ContactModel::Penalty { stiffness: 2e4 })
        .damping(Damping::Ether { coefficient: 0.05 });
    let mut sim = on_backend(builder, backend).build().expect("valid scene");
    let handle = sim.add_handle(sim.positions().len() - 1, 500.0).unwrap();
    sim.move_handle(handle, [0.7, 0.1, 0.1]).unwrap();
    sim
}

/// A hanging cloth of Hooke springs (stretch, shear, bend), pinned along its top edge and
/// falling from flat: the sphere projections of projective dynamics.
fn hanging_cloth(solver: Solver, backend: Backend) -> Simulation {
    let builder = Simulation::builder()
        .spring_body(SpringMesh::cloth(8, 8, [1.0, 1.0]))
        .dt(1.0 / 30.0)
        .integrator(Integrator::BackwardEuler)
        .solver(solver)
        .gravity([0.0, 0.0, -9.81])
        .pin(|p| p[1] > 0.999);
    on_backend(builder, backend).build().expect("valid scene")
}

/// Every iteration of every solve lowers `G` (CPU: to f64 round-off; GPU: to the f32
/// resolution of its energy sums), on the stretched ARAP bar under three schemes and on the
/// hanging bar with gravity, a handle, friction and drag.
#[test]
fn no_local_global_iteration_increases_the_objective() {
    let solver = || Solver::local_global(12).record_objectives(true);
    for backend in backends() {
        let slack = if backend == Backend::Gpu { 2e-6 } else { 1e-13 };
        let mut sims = Vec::new();
        for integrator in [Integrator::BackwardEuler, Integrator::ImplicitMidpoint, Integrator::Avf] {
            sims.push((
                integrator.name(),
                stretched_bar(Material::arap(1e5, 0.3), integrator, solver(), backend),
            ));
        }
        sims.push(("hanging", hanging_bar(Integrator::BackwardEuler, solver(), backend)));
        sims.push(("cloth", hanging_cloth(solver(), backend)));
        for (name, mut sim) in sims {
            for step in 0..4 {
                let stats = sim.step().unwrap();
                assert!(!stats.objectives.is_empty(), "{name}: no objectives recorded");
                for objectives in &stats.objectives {
                    assert_eq!(objectives.len(), 13, "{name} step {step}: {objectives:?}");
                    let scale = objectives[0].abs().max(1e-9);
                    for (k, pair) in objectives.windows(2).enumerate() {
                        assert!(
                            pair[1] <= pair[0] + slack * scale,
                            "{backend:?} {name} step {step}: G rose from {} to {} at iteration {}",
                            pair[0],
                            pair[1],
                            k + 1
                        );
                    }
                    assert!(objectives[12] < objectives[0], "{backend:?} {name} step {step}: no progress");
                }
            }
        }
    }
}

/// A steel-stiff corotated cube of 1.25 cm cells (E 1e11 Pa) released squashed to 0.3 of its
/// size, at a game's step (`h^2 E / (rho dx^2)` 7e8): the backward-Euler step converges on
/// both backends and loses nearly all the energy, and the GPU ends where the CPU does. Its
/// dense inverse in f32 kept only the body's translation (now it is split along them:
/// `backend/projective.rs`, `dense_inverse`), and the global steps raised the objective from
/// 6e8 to 2e20 in a probe of this cube (to NaN here, and the step was refused).
///
/// A single iteration already lands on the CPU's: the direct global step's translation
/// summed the elements' forces in b, zero in exact arithmetic but not in f32 for a body this
/// stiff, and its first iteration ended 0.19 m from the CPU's (G 34 J against 0.7) on
/// lavapipe; on an H200, whose 16 lanes a row sum in another order, the solve diverged (G
/// 2e21 J) and the step was taken back. It sums b's vertex terms now (`shaders/pcg.wgsl`,
/// `dense_rows_product`).
#[test]
fn a_backward_euler_step_of_a_steel_stiff_cube_converges() {
    for iterations in [1, 15] {
        let cube = |place: &dyn Fn(SimulationBuilder) -> SimulationBuilder| {
            common::squashed_steel_cube_on([8, 4, 4], Solver::local_global(iterations), place)
        };
        let mut sides = vec![("CPU", cube(&|b| b.backend(Backend::Cpu)))];
        for (name, context) in common::gpu_shapes() {
            sides.push((name, cube(&|b| b.backend(Backend::Gpu).gpu_context(context.clone()))));
        }
        let mut ends = Vec::new();
        for (name, sim) in &mut sides {
            let before = sim.energy().total;
            let stats = sim.step().unwrap();
            let after = sim.energy().total;
            println!(
                "{iterations} iterations, {name}: {before:.4e} J -> {after:.4e} J ({:?})",
                stats.outcome
            );
            assert!(after < 1e-6 * before, "{name}, {iterations} iterations: {before:e} J -> {after:e} J");
            ends.push((*name, sim.positions().to_vec()));
        }
        let (_, cpu) = &ends[0];
        for (name, gpu) in &ends[1..] {
            let (difference, vertex) = worst_difference(gpu, cpu);
            println!("{iterations} iterations: the {name} ends {difference:.1e} m from the CPU");
            assert!(difference <= 1e-6, "the {name} ends {difference:e} m from the CPU at vertex {vertex}");
        }
    }
}

/// The steel-stiff cube falls with ether drag onto a penalty floor and rests there, at a
/// game's step: the GPU's global steps, PCG on the dragged matrix (split along the body's
/// translations, `shaders/pcg.wgsl`) and then on the matrix with the contacts, follow the
/// CPU's exact ones. Before the split the GPU's cube hung in the air (every solve raised its
/// objective and was undone), or fell a few millimetres behind. In free fall a solve changes
/// `G` by nothing, and f32's rounding picks the sign: a rise of 1.5e-8 J had a GPU solve taken
/// back (its drag lost, 9.5e-7 m from the CPU) until rises within G's noise counted as none.
#[test]
fn a_steel_stiff_cube_falls_and_lands_as_on_the_cpu() {
    let mut paths = Vec::new();
    for backend in backends() {
        let builder = Simulation::builder()
            .tet_body(TetMesh::bar([8, 4, 4], [0.1; 3]), Material::corotated(1e11, 0.44), 1000.0)
            .gravity([0.0, -9.81, 0.0])
            .dt(1.0 / 30.0)
            .damping(Damping::Ether { coefficient: 0.5 })
            .collider(Collider::plane([0.0, 1.0, 0.0], -0.05))
            .contact_model(ContactModel::Penalty { stiffness: 1e7 })
            .integrator(Integrator::BackwardEuler)
            .solver(Solver::local_global(10));
        let mut sim = on_backend(builder, backend).build().expect("valid scene");
        let mut path = Vec::new();
        for _ in 0..30 {
            sim.step().unwrap();
            path.push(sim.positions().to_vec());
        }
        let lowest = sim.positions().iter().map(|p| p[1]).fold(f64::INFINITY, f64::min);
        println!("{backend:?}: the lowest vertex ends at y = {lowest:.4} m, {:.4e} J", sim.energy().total);
        assert!(
            (-0.051..-0.049).contains(&lowest),
            "{backend:?}: the cube ends at y = {lowest} m, not on the floor"
        );
        paths.push(path);
    }
    if let [cpu, gpu] = &paths[..] {
        for (step, (p, q)) in cpu.iter().zip(gpu).enumerate() {
            let (difference, vertex) = worst_difference(q, p);
            if step % 5 == 4 {
                println!("step {step}: the GPU is {difference:.1e} m from the CPU");
            }
            assert!(
                difference <= 1e-7,
                "step {step}: the GPU is {difference:e} m from the CPU at vertex {vertex}"
            );
        }
    }
}

/// Run long enough, local/global reaches the converged Newton step of the same energy: the
/// stretched ARAP bar (backward Euler) and the stretched corotated bar (implicit midpoint) to
/// 1e-6 of the step's displacement after 2000 iterations (the issue asks 1e-3), and the
/// falling cloth of springs to 1e-3 after 20000.
#[test]
fn many_iterations_reach_the_newton_step() {
    // Springs: the falling cloth's first step. Its springs lie flat and at rest length, where
    // they have no stiffness across themselves, while the local/global matrix gives them the
    // full stiffness in every direction: the iteration converges, but slowly (measured:
    // 1.5e-3 m off after 2000 iterations, 1.8e-6 m after 20000).
    let mut reference = hanging_cloth(Solver::newton().tolerance(1e-9), Backend::Cpu);
    let start = reference.positions().to_vec();
    assert!(reference.step().unwrap().converged);
    let mut solved = hanging_cloth(Solver::local_global(20_000), Backend::Cpu);
    solved.step().unwrap();
    let (displacement, _) = worst_difference(reference.positions(), &start);
    let (difference, vertex) = worst_difference(solved.positions(), reference.positions());
    println!("cloth: local/global differs from Newton by {difference:.2e} m of {displacement:.3} m");
    assert!(difference <= 1e-3 * displacement, "cloth: {difference:e} m from Newton at vertex {vertex}");
    for (material, integrator) in [
        (Material::arap(1e5, 0.3), Integrator::BackwardEuler),
        (Material::corotated(1e5, 0.3), Integrator::ImplicitMidpoint),
    ] {
        let newton = || Solver::newton().tolerance(1e-9);
        let mut reference = stretched_bar(material.clone(), integrator.clone(), newton(), Backend::Cpu);
        let start = reference.positions().to_vec();
        let stats = reference.step().unwrap();
        assert!(stats.converged);
        let mut solved = stretched_bar(material, integrator, Solver::local_global(2000), Backend::Cpu);
        solved.step().unwrap();
        let (displacement, _) = worst_difference(reference.positions(), &start);
        let (difference, vertex) = worst_difference(solved.positions(), reference.positions());
        println!(
            "{}: local/global differs from Newton by {difference:.2e} m of {displacement:.3} m",
            reference.integrator().name()
        );
        // Measured 6e-11 (ARAP) and 3e-10 m (corotated) of 0.07-0.1 m; the issue asks 1e-3.
        assert!(
            difference <= 1e-6 * displacement,
            "local/global is {difference:e} m from Newton at vertex {vertex} (displacement {displacement})"
        );
    }
}

/// The paper's real-time path — 10 midpoint iterations, one backward-Euler iteration for the
/// blend — keeps the stretched ARAP bar's energy within a few percent over 300 steps at
/// h = 1/30 s; projective dynamics with backward Euler loses most of it.
#[test]
fn stabilized_local_global_keeps_the_energy_that_projective_dynamics_loses() {
    let run = |integrator: Integrator| {
        let mut sim =
            stretched_bar(Material::arap(1e5, 0.3), integrator, Solver::local_global(10), Backend::Cpu);
        let initial = sim.energy().total;
        let mut extremes = (f64::INFINITY, f64::NEG_INFINITY);
        for _ in 0..300 {
            sim.step().unwrap();
            let h = sim.energy().total;
            extremes = (extremes.0.min(h), extremes.1.max(h));
        }
        (initial, sim.energy().total, extremes)
    };
    let (initial, stabilized, (low, high)) = run(Integrator::Stabilized { epsilon: 0.01 });
    let (_, backward, _) = run(Integrator::BackwardEuler);
    println!(
        "initial {initial:.3} J; stabilized ends at {stabilized:.3} J (range {low:.3}..{high:.3}); backward Euler at {backward:.3} J"
    );
    assert!((low - initial).abs() <= 0.05 * initial && (high - initial).abs() <= 0.05 * initial);
    assert!(backward < 0.5 * initial, "projective dynamics kept {backward} of {initial} J");
}

/// After a backward-Euler local/global step the CPU books the new state's potential from the
/// last local step (the element pass at the result, whose node is the potential's) instead of
/// evaluating it again: the same potential as a fresh evaluation of that state.
#[test]
fn the_potential_booked_after_a_local_global_step_is_the_new_states() {
    let mut sim = hanging_bar(Integrator::BackwardEuler, Solver::local_global(10), Backend::Cpu);
    for step in 0..4 {
        sim.step().unwrap();
        let mut fresh = hanging_bar(Integrator::BackwardEuler, Solver::local_global(10), Backend::Cpu);
        fresh.set_state(sim.positions(), sim.velocities()).unwrap();
        let (booked, evaluated) = (sim.energy().potential, fresh.energy().potential);
        println!("step {step}: booked {booked:.12e} J, evaluated {evaluated:.12e} J");
        // The two passes start the rotations' Newton iterations from different guesses.
        assert!((booked - evaluated).abs() <= 1e-9 * evaluated.abs().max(1.0), "step {step}");
    }
}

/// The GPU's local/global steps (PCG global solves in f32) follow the CPU's (Cholesky in
/// f64), step by step, on the stabilized real-time path and on the hanging bar.
#[test]
fn gpu_local_global_steps_follow_the_cpu() {
    if gpu().is_none() {
        return;
    }
    let solver = || Solver::local_global(10).global_tolerance(1e-5);
    let pairs = [
        (
            stretched_bar(
                Material::arap(1e5, 0.3),
                Integrator::Stabilized { epsilon: 0.01 },
                solver(),
                Backend::Cpu,
            ),
            stretched_bar(
                Material::arap(1e5, 0.3),
                Integrator::Stabilized { epsilon: 0.01 },
                solver(),
                Backend::Gpu,
            ),
        ),
        (
            hanging_bar(Integrator::BackwardEuler, solver(), Backend::Cpu),
            hanging_bar(Integrator::BackwardEuler, solver(), Backend::Gpu),
        ),
        (dragged_bar(Backend::Cpu), dragged_bar(Backend::Gpu)),
    ];
    let dragged = pairs.len() - 1;
    for (pair, (mut cpu, mut gpu)) in pairs.into_iter().enumerate() {
        let start = cpu.positions().to_vec();
        for step in 0..10 {
            let (a, b) = (cpu.step().unwrap(), gpu.step().unwrap());
            assert_eq!(a.iterations, b.iterations, "step {step}");
            if pair == dragged && step > 0 {
                // One direct solve a global step.
                assert_eq!(b.linear_iterations, b.iterations, "step {step}");
            }
            let (displacement, _) = worst_difference(cpu.positions(), &start);
            let (difference, vertex) = worst_difference(cpu.positions(), gpu.positions());
            let device = b.device.expect("GPU counts");
            println!(
                "step {step}: GPU differs by {difference:.2e} m of {displacement:.3} m; {} CG, {} readbacks, {} dispatches",
                b.linear_iterations, device.readbacks, device.dispatches
            );
            // Each solve reads its statuses and the state it ends in once; a stabilized step's
            // blends add a round trip per three bisection levels (measured: 1 per step, every
            // stabilized step within the band at midpoint).
            let solves = 1 + usize::from(b.alpha.is_some_and(|alpha| alpha > 0.0));
            let blends = b.alpha.map_or(0, common::stabilized_blend_readbacks);
            assert!(device.readbacks as usize <= solves + blends, "step {step}: {device:?}");
            // Measured at most 1.4e-7 m on lavapipe (f32 on the device, f64 here) on a 0.6 m bar.
            assert!(
                difference <= 2e-6,
                "step {step}: GPU is {difference:e} m from the CPU at vertex {vertex}"
            );
        }
    }
}

/// A 0.2 m corotated cube (E 1e5) tipped by `tilt` about z and dropped from rest 0.5 m onto a
/// penalty floor (k 1e5, friction 0.5).
fn dropped_cube(integrator: Integrator, solver: Solver, tilt: f64, backend: Backend) -> Simulation {
    let builder = Simulation::builder()
        .tet_body(TetMesh::bar([3; 3], [0.2; 3]), Material::corotated(1e5, 0.3), 1000.0)
        .gravity([0.0, -9.81, 0.0])
        .dt(1.0 / 30.0)
        .integrator(integrator)
        .solver(solver)
        .collider(Collider::plane([0.0, 1.0, 0.0], -0.5).friction(0.5))
        .contact_model(ContactModel::Penalty { stiffness: 1e5 });
    let mut sim = on_backend(builder, backend).build().expect("valid scene");
    let (c, s) = (tilt.cos(), tilt.sin());
    let tipped: Vec<[f64; 3]> =
        sim.positions().iter().map(|p| [c * p[0] - s * p[1], s * p[0] + c * p[1], p[2]]).collect();
    sim.set_state(&tipped, &vec![[0.0; 3]; tipped.len()]).unwrap();
    sim
}

/// Dropped onto a penalty floor, flat or tipped, a cube lands under backward Euler, BDF2 and
/// A-search without its energy rising above the start, and under the stabilized integrator
/// without rising above its band; no iteration raises `G`. The global matrix carries the penalty's stiffness for the vertices
/// inside the floor at the iterate, and no step takes another one in. Before, the matrix had
/// it only for the vertices inside at the step's start or its inertial target: a vertex
/// entering elsewhere was flung out by its whole penalty force, `G` rose from -30 to 23421 J
/// in one iteration, and backward Euler went from 7.9 to 761 J; a set fixed for the whole
/// solve froze its vertices, and the stabilized cube fell through the floor at 1e6 J.
#[test]
fn a_cube_dropped_onto_a_penalty_floor_lands_without_gaining_energy() {
    let integrators = [
        Integrator::BackwardEuler,
        Integrator::Bdf2,
        Integrator::ASearch { alpha_min: 0.0, alpha_max: 1.1, decay: None },
        Integrator::Stabilized { epsilon: 0.01 },
    ];
    for backend in backends() {
        let slack = if backend == Backend::Gpu { 2e-6 } else { 1e-13 };
        for integrator in &integrators {
            for tilt in [0.0, 0.3] {
                let solver = Solver::local_global(10).record_objectives(true);
                let mut sim = dropped_cube(integrator.clone(), solver, tilt, backend);
                let start = sim.energy().total;
                let (mut highest, mut lowest) = (start, f64::INFINITY);
                for step in 0..45 {
                    let stats = sim.step().unwrap();
                    for objectives in &stats.objectives {
                        let scale = objectives[0].abs().max(1.0);
                        for pair in objectives.windows(2) {
                            assert!(
                                pair[1] <= pair[0] + slack * scale,
                                "{backend:?} {integrator:?} tilt {tilt} step {step}: G rose {objectives:?}"
                            );
                        }
                    }
                    highest = highest.max(sim.energy().total);
                    lowest = sim.positions().iter().fold(lowest, |low, p| low.min(p[1]));
                }
                println!(
                    "{backend:?} {integrator:?} tilt {tilt}: {start:.6} J, at most {highest:.6} J, lowest {lowest:.4} m"
                );
                // The dissipative integrators never gain (to the f32 resolution of a GPU's
                // positions); the stabilized one tracks its target to within its band, epsilon
                // times the energy.
                let allowed = match integrator {
                    Integrator::Stabilized { epsilon } => epsilon * highest.abs(),
                    _ => 1e-6 * start.abs(),
                };
                assert!(
                    highest <= start + allowed,
                    "{backend:?} {integrator:?} tilt {tilt}: {highest} J from {start} J"
                );
                // The stabilized integrator keeps the energy, which the 1e5 N/m penalty stores
                // 2.4 cm deep at the impact (Newton's converged steps too).
                assert!(lowest > -0.53, "{backend:?} {integrator:?} tilt {tilt}: down to {lowest} m");
            }
        }
    }
}

/// Through the landing of a tipped cube on the penalty floor, each GPU step follows the CPU's
/// from the same state: the contact set, the matrix it gives and the step's bound are decided
/// on the device, in the solve's one submission and readback.
#[test]
fn gpu_local_global_landings_follow_the_cpu() {
    if gpu().is_none() {
        return;
    }
    for integrator in [Integrator::BackwardEuler, Integrator::Stabilized { epsilon: 0.01 }] {
        let solver = || Solver::local_global(10).global_tolerance(1e-5);
        let mut cpu = dropped_cube(integrator.clone(), solver(), 0.3, Backend::Cpu);
        let mut gpu = dropped_cube(integrator.clone(), solver(), 0.3, Backend::Gpu);
        let mut worst: f64 = 0.0;
        for step in 0..20 {
            // Both from the CPU's state (each resets its energy target the same way).
            let (x, v) = (cpu.positions().to_vec(), cpu.velocities().to_vec());
            cpu.set_state(&x, &v).unwrap();
            gpu.set_state(&x, &v).unwrap();
            cpu.step().unwrap();
            let b = gpu.step().unwrap();
            let (difference, vertex) = worst_difference(cpu.positions(), gpu.positions());
            let device = b.device.expect("GPU counts");
            println!(
                "{integrator:?} step {step}: GPU differs by {difference:.2e} m (vertex {vertex}); {} readbacks, {} dispatches, alpha {:?}",
                device.readbacks, device.dispatches, b.alpha
            );
            worst = worst.max(difference);
            // One readback a solve, and the stabilized blends' (see the test above).
            let solves = 1 + usize::from(b.alpha.is_some_and(|alpha| alpha > 0.0));
            let blends = b.alpha.map_or(0, common::stabilized_blend_readbacks);
            assert!(device.readbacks as usize <= solves + blends, "step {step}: {device:?}");
        }
        assert!(worst <= 2e-6, "{integrator:?}: {worst}");
    }
}

/// A model without a projective form is refused when the simulation is built, naming what to
/// change.
#[test]
fn local_global_refuses_energies_without_a_projective_form() {
    let build = |material: Material, damping: Option<Damping>| {
        let mut builder = Simulation::builder()
            .tet_body(TetMesh::bar([2, 1, 1], [0.2, 0.1, 0.1]), material, 1000.0)
            .solver(Solver::local_global(10));
        if let Some(d) = damping {
            builder = builder.damping(d);
        }
        builder.build().err()
    };
    for material in
        [Material::stvk(1e5, 0.3), Material::stable_neo_hookean(1e5, 0.3), Material::corotated(1e5, -0.2)]
    {
        match build(material.clone(), None) {
            Some(Error::Unsupported(message)) => assert!(message.contains("local/global"), "{message}"),
            other => panic!("{material:?} gave {other:?}"),
        }
    }
    match build(Material::arap(1e5, 0.3), Some(Damping::Rayleigh { stiffness: 0.01 })) {
        Some(Error::Unsupported(message)) => assert!(message.contains("Rayleigh"), "{message}"),
        other => panic!("Rayleigh damping gave {other:?}"),
    }
    assert!(build(Material::arap(1e5, 0.3), Some(Damping::Ether { coefficient: 0.1 })).is_none());
    assert!(matches!(
        Simulation::builder()
            .tet_body(TetMesh::bar([2, 1, 1], [0.2, 0.1, 0.1]), Material::arap(1e5, 0.3), 1000.0)
            .solver(Solver::local_global(0))
            .build(),
        Err(Error::Parameter(_))
    ));
}
