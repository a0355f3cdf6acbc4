//! Whole steps on the GPU backend against the CPU backend, for every integrator. Without an
//! adapter these skip with a printed reason unless LIVELY_REQUIRE_GPU=1 (CI sets it and
//! installs the lavapipe software adapter), where a missing adapter fails.

mod common;

use lively::{Backend, Error, Integrator, LinearSolver, Material, Simulation, SolveOutcome, Solver, TetMesh};

fn gpu_available() -> bool {
    common::gpu().is_some()
}

/// A stretched StVK bar, pinned at one end, under gravity.
fn scene(integrator: Integrator, backend: Backend) -> Result<Simulation, Error> {
    let mesh = TetMesh::bar([4, 2, 2], [0.4, 0.2, 0.2]);
    // Explicit schemes need a step inside their stability limit.
    let dt = if matches!(integrator, Integrator::ForwardEuler | Integrator::SymplecticEuler) {
        1e-3
    } else {
        1.0 / 30.0
    };
    let sim = Simulation::builder()
        .tet_body(mesh, Material::stvk(5e4, 0.3), 1000.0)
        .gravity([0.0, -9.81, 0.0])
        .dt(dt)
        .integrator(integrator)
        // The GPU's preconditioner on both backends: the same algorithm. (A-1 gains energy on
        // this stretched StVK bar, and its second backward-Euler solve has more than one
        // minimum; another preconditioner's path can end in another.)
        .solver(Solver::newton().tolerance(1e-6).linear_solver(LinearSolver::Pcg))
        .pin(|p| p[0] < 1e-9);
    let mut sim = common::on_backend(sim, backend).build()?;
    let x: Vec<[f64; 3]> = sim.positions().iter().map(|p| [1.15 * p[0], p[1], p[2]]).collect();
    let v = vec![[0.0; 3]; x.len()];
    sim.set_state(&x, &v)?;
    Ok(sim)
}

#[test]
fn every_integrator_steps_on_the_gpu_like_on_the_cpu() {
    if !gpu_available() {
        return;
    }
    for integrator in common::ALL_INTEGRATORS {
        let mut cpu = scene(integrator.clone(), Backend::Cpu).unwrap();
        let mut gpu = scene(integrator.clone(), Backend::Gpu).unwrap();
        assert_eq!(gpu.backend(), Backend::Gpu);
        let start = cpu.positions().to_vec();
        // Two steps, so BDF2 also takes one with its history.
        for _ in 0..2 {
            cpu.step().unwrap();
            let stats = gpu.step().unwrap_or_else(|e| panic!("{integrator:?} on the GPU: {e}"));
            assert!(stats.converged, "{integrator:?}: GPU step did not converge: {stats:?}");
        }
        let displacement = cpu
            .positions()
            .iter()
            .zip(&start)
            .flat_map(|(a, b)| (0..3).map(move |c| (a[c] - b[c]).abs()))
            .fold(0.0, f64::max);
        let difference = cpu
            .positions()
            .iter()
            .zip(gpu.positions())
            .flat_map(|(a, b)| (0..3).map(move |c| (a[c] - b[c]).abs()))
            .fold(0.0, f64::max);
        // The GPU works in f32 (on displacements) and stops Newton at its round-off, the CPU at
        // 1e-6 N in f64. Measured on lavapipe: 4e-8 .. 3.4e-7 of the displacement for every
        // scheme but A-1 (the explicit ones at the top: their displacement is small), 2.5e-5
        // for A-1, whose correction amplifies the solve's residual by h/m. The bounds keep a
        // margin of about 5; any difference in the scheme itself is O(1) of the displacement.
        println!("{integrator:?}: GPU vs CPU {difference:.2e} m of a {displacement:.2e} m displacement");
        assert!(gpu.gpu_positions().is_some() && cpu.gpu_positions().is_none());
        let bound = if integrator == Integrator::A1 { 1e-4 } else { 2e-6 };
        assert!(
            difference <= bound * displacement,
            "{integrator:?}: GPU differs by {difference:e} m (displacement {displacement:e} m)"
        );
    }
}

#[test]
fn gpu_steps_give_the_same_bits_every_run() {
    if !gpu_available() {
        return;
    }
    let run = || {
        let mut sim = scene(Integrator::Avf, Backend::Gpu).unwrap();
        for _ in 0..3 {
            sim.step().unwrap();
        }
        sim.positions().to_vec()
    };
    assert_eq!(run(), run());
}

#[test]
fn rotation_based_materials_step_on_the_gpu_like_on_the_cpu() {
    if !gpu_available() {
        return;
    }
    for material in
        [Material::corotated(5e4, 0.3), Material::fixed_corotated(5e4, 0.3), Material::arap(5e4, 0.3)]
    {
        let run = |backend: Backend| {
            let builder = Simulation::builder()
                .tet_body(TetMesh::bar([4, 2, 2], [0.4, 0.2, 0.2]), material.clone(), 1000.0)
                .gravity([0.0, -9.81, 0.0])
                .integrator(Integrator::Stabilized { epsilon: 0.01 })
                .pin(|p| p[0] < 1e-9);
            let mut sim = common::on_backend(builder, backend).build().unwrap();
            for _ in 0..3 {
                assert!(sim.step().unwrap().converged);
            }
            sim.positions().to_vec()
        };
        let (cpu, gpu) = (run(Backend::Cpu), run(Backend::Gpu));
        let rest = TetMesh::bar([4, 2, 2], [0.4, 0.2, 0.2]);
        let displacement = cpu
            .iter()
            .zip(rest.positions())
            .flat_map(|(a, b)| (0..3).map(move |c| (a[c] - b[c]).abs()))
            .fold(0.0, f64::max);
        let difference = cpu
            .iter()
            .zip(&gpu)
            .flat_map(|(a, b)| (0..3).map(move |c| (a[c] - b[c]).abs()))
            .fold(0.0, f64::max);
        println!("{:?}: GPU vs CPU {difference:.2e} m of {displacement:.2e} m", material.model());
        // As above: measured 1.3e-7 .. 1.7e-6 of the displacement (fixed corotated's signed SVD
        // the largest), a margin of about 6.
        assert!(
            difference <= 1e-5 * displacement,
            "{:?}: GPU differs by {difference:e} m of {displacement:e} m",
            material.model()
        );
    }
}

/// A soft cube dropped onto a rough floor, with Rayleigh and ether damping, one corner held by
/// a handle that moves: every vertex term and every kind of damping at once.
fn contact_scene(integrator: Integrator, backend: Backend) -> Simulation {
    contact_scene_on(integrator, common::gpu().filter(|_| backend == Backend::Gpu))
}

/// The contact scene on the CPU, or on the GPU of `context`.
fn contact_scene_on(
    integrator: Integrator,
    context: Option<std::sync::Arc<lively::backend::gpu::GpuContext>>,
) -> Simulation {
    use lively::{Collider, ContactModel, Damping};
    let builder = Simulation::builder()
        .tet_body(TetMesh::bar([3, 3, 3], [0.3, 0.3, 0.3]), Material::stable_neo_hookean(2e4, 0.4), 1000.0)
        .gravity([0.0, -9.81, 0.0])
        .integrator(integrator)
        .solver(Solver::newton().tolerance(1e-5))
        .collider(Collider::plane([0.0, 1.0, 0.0], -0.02).friction(0.5))
        .collider(Collider::sphere([0.15, -0.25, 0.15], 0.25))
        .contact_model(ContactModel::Penalty { stiffness: 2e4 })
        .damping(Damping::Rayleigh { stiffness: 0.01 })
        .damping(Damping::Ether { coefficient: 0.5 });
    let builder = match context {
        Some(context) => builder.backend(Backend::Gpu).gpu_context(context),
        None => builder.backend(Backend::Cpu),
    };
    let mut sim = builder.build().unwrap();
    // Sliding sideways as it lands.
    let v = vec![[0.8, -0.5, 0.3]; sim.positions().len()];
    let x = sim.positions().to_vec();
    sim.set_state(&x, &v).unwrap();
    let corner = sim.positions().iter().position(|p| p[0] > 0.29 && p[1] > 0.29 && p[2] > 0.29).unwrap();
    let handle = sim.add_handle(corner, 300.0).unwrap();
    sim.move_handle(handle, [0.35, 0.4, 0.3]).unwrap();
    sim
}

/// `gpu_memory` is what one simulation holds, each arena of ranges counted once: two
/// simulations of one model on one context hold the same, and the second does not add to the
/// first's (the context's running total did, and counted a buffer moved into the arena twice).
#[test]
fn each_simulation_reports_the_device_memory_it_holds() {
    if !gpu_available() {
        return;
    }
    let context = common::gpu().unwrap();
    let first = contact_scene_on(Integrator::BackwardEuler, Some(context.clone()));
    let held = first.gpu_memory().expect("a GPU simulation reports its memory");
    let second = contact_scene_on(Integrator::BackwardEuler, Some(context));
    assert_eq!(first.gpu_memory(), Some(held));
    assert_eq!(second.gpu_memory(), Some(held));
    println!("{held} bytes held");
    // 64 vertices and 162 tets: kilobytes of vectors and matrices, not megabytes.
    assert!((10_000..4_000_000).contains(&held), "{held} bytes");
}

#[test]
fn contact_handles_and_damping_step_on_the_gpu_like_on_the_cpu() {
    if !gpu_available() {
        return;
    }
    for integrator in [Integrator::BackwardEuler, Integrator::Stabilized { epsilon: 0.01 }, Integrator::Avf] {
        let (mut cpu, mut gpu) = (
            contact_scene(integrator.clone(), Backend::Cpu),
            contact_scene(integrator.clone(), Backend::Gpu),
        );
        let start = cpu.positions().to_vec();
        for _ in 0..6 {
            cpu.step().unwrap();
            let stats = gpu.step().unwrap_or_else(|e| panic!("{integrator:?} on the GPU: {e}"));
            assert!(stats.converged, "{integrator:?}: GPU step did not converge: {stats:?}");
        }
        let largest = |a: &[[f64; 3]], b: &[[f64; 3]]| {
            a.iter().zip(b).flat_map(|(p, q)| (0..3).map(move |c| (p[c] - q[c]).abs())).fold(0.0, f64::max)
        };
        let displacement = largest(cpu.positions(), &start);
        let difference = largest(cpu.positions(), gpu.positions());
        let (cpu_lost, gpu_lost) = (cpu.ledger().dissipated(), gpu.ledger().dissipated());
        println!(
            "{integrator:?} with contact: GPU vs CPU {difference:.2e} m of {displacement:.2e} m; \
             dissipated {gpu_lost:.6} J vs {cpu_lost:.6} J"
        );
        // The floor and the sphere must have been reached, or contact went untested.
        assert!(
            cpu.positions().iter().any(|p| p[1] < -0.02),
            "{integrator:?}: the cube never reached the floor"
        );
        // f32 round-off against O(1) differences in any term (measured 2.8 .. 3.3e-7 of the
        // displacement), a margin of about 6.
        assert!(
            difference <= 2e-6 * displacement,
            "{integrator:?}: GPU differs by {difference:e} m (displacement {displacement:e} m)"
        );
        assert!(
            // Measured to 2.7e-7 of it; a missing damping or friction term would be O(1).
            cpu_lost > 0.0 && (gpu_lost - cpu_lost).abs() <= 2e-6 * cpu_lost,
            "dissipated {gpu_lost} vs {cpu_lost}"
        );
    }
}

/// Adapters without subgroups, and applications' own devices, make the stages' workgroup sums
/// by the tree: on a context that does, whole steps with contact match the CPU as the shared
/// context's do (on lavapipe and NVIDIA that one sums through subgroups).
#[test]
fn steps_summed_by_the_tree_match_the_cpu() {
    use lively::backend::gpu::{GpuContext, shaders::Reductions};
    if !gpu_available() {
        return;
    }
    let tree = std::sync::Arc::new(GpuContext::new().unwrap().with_tree_reductions());
    assert_eq!(tree.reductions(), Reductions::Tree);
    println!("the shared context sums by {:?}", common::gpu().unwrap().reductions());
    for integrator in [Integrator::BackwardEuler, Integrator::Avf] {
        let mut cpu = contact_scene_on(integrator.clone(), None);
        let mut gpu = contact_scene_on(integrator.clone(), Some(tree.clone()));
        let start = cpu.positions().to_vec();
        for _ in 0..6 {
            cpu.step().unwrap();
            let stats = gpu.step().unwrap();
            assert!(stats.converged, "{integrator:?}: the tree's step did not converge: {stats:?}");
        }
        let (displacement, _) = common::worst_difference(cpu.positions(), &start);
        let (difference, _) = common::worst_difference(cpu.positions(), gpu.positions());
        println!("{integrator:?}, tree sums: GPU vs CPU {difference:.2e} m of {displacement:.2e} m");
        // The bound of the contact test above: f32 round-off against O(1) differences.
        assert!(
            difference <= 2e-6 * displacement,
            "{integrator:?}: GPU differs by {difference:e} m (displacement {displacement:e} m)"
        );
    }
}

/// Devices with immediates take the stages' parameters in the command stream; others (and
/// applications' devices opened without them) from a uniform arena each submission fills.
/// And the solvers' read-write buffers are ranges of one arena, or apart on request; and
/// workers finish the command buffers in order, or each recording thread its own. The
/// kernels compute the same every way: whole steps on one device — Newton with contact,
/// handles and damping, local/global and mixed FEM — end in the same bits.
#[test]
fn parameters_and_buffer_layouts_step_to_the_same_bits() {
    use lively::backend::gpu::GpuContext;
    if !gpu_available() {
        return;
    }
    let shared = common::gpu().unwrap();
    println!("the shared context takes parameters as immediates: {}", shared.params_in_immediates());
    // Shaped as the shared context (LIVELY_TEST_SHAPE), so that only the one choice differs.
    let shaped = |mut context: GpuContext| {
        context.software = shared.software;
        std::sync::Arc::new(context)
    };
    let arena = shaped(GpuContext::new().unwrap().with_params_in_arena());
    assert!(!arena.params_in_immediates());
    let separate = shaped(GpuContext::new().unwrap().with_separate_buffers());
    let inline = shaped(GpuContext::new().unwrap().with_encoder_threads(0));
    assert_eq!(inline.encoder_threads(), 0);
    println!("the shared context finishes command buffers on {} workers", shared.encoder_threads());
    fn bar(solver: Solver, context: std::sync::Arc<GpuContext>) -> Simulation {
        let builder = Simulation::builder()
            .tet_body(TetMesh::bar([4, 2, 2], [0.4, 0.2, 0.2]), Material::corotated(5e4, 0.3), 1000.0)
            .gravity([0.0, -9.81, 0.0])
            .integrator(Integrator::Stabilized { epsilon: 0.01 })
            .solver(solver)
            .pin(|p| p[0] < 1e-9)
            .backend(Backend::Gpu)
            .gpu_context(context);
        builder.build().unwrap()
    }
    type Scene = fn(std::sync::Arc<GpuContext>) -> Simulation;
    let scenes: [(&str, Scene); 3] = [
        ("Newton with contact", |c| contact_scene_on(Integrator::BackwardEuler, Some(c))),
        ("local/global", |c| bar(Solver::local_global(10), c)),
        ("mixed FEM", |c| bar(Solver::mixed_fem(), c)),
    ];
    let variants =
        [("parameters from the arena", arena), ("buffers apart", separate), ("finished inline", inline)];
    for (variant, context) in variants {
        for (name, scene) in scenes {
            let mut reference = scene(shared.clone());
            let mut other = scene(context.clone());
            for step in 0..4 {
                let packed = reference.step().unwrap().device.unwrap();
                let apart = other.step().unwrap().device.unwrap();
                assert_eq!(reference.positions(), other.positions(), "{name}, {variant}, step {step}");
                if variant == "finished inline" {
                    // The same submissions, finished on the stepping thread.
                    assert_eq!(packed.dispatches, apart.dispatches, "{name}, step {step}");
                    assert_eq!(packed.submissions, apart.submissions, "{name}, step {step}");
                }
                if variant == "buffers apart" {
                    // The same dispatches, binding more distinct buffers for writing.
                    assert_eq!(packed.dispatches, apart.dispatches, "{name}, step {step}");
                    assert!(
                        packed.writable_buffers < apart.writable_buffers,
                        "{name}, step {step}: {} writable buffers in the arena, {} apart",
                        packed.writable_buffers,
                        apart.writable_buffers
                    );
                }
            }
        }
    }
}

#[test]
fn a_gpu_step_waits_for_the_device_once_per_newton_iteration_plus_a_fixed_few() {
    if !gpu_available() {
        return;
    }
    for integrator in [
        Integrator::BackwardEuler,
        Integrator::Avf,
        Integrator::ASearch { alpha_min: 0.0, alpha_max: 1.1, decay: None },
        Integrator::Stabilized { epsilon: 0.01 },
    ] {
        let mut sim = scene(integrator.clone(), Backend::Gpu).unwrap();
        for _ in 0..3 {
            let stats = sim.step().unwrap();
            let device = stats.device.expect("a GPU step counts its device work");
            println!(
                "{integrator:?}: {} Newton ({} projected, {} resumed), {} CG, alpha {:?}: {device:?}",
                stats.iterations,
                stats.projected_iterations,
                stats.resumed_iterations,
                stats.linear_iterations,
                stats.alpha
            );
            // One readback per Newton iteration (its linearization, whole CG solve, dots and
            // first line-search candidates; the first also the initial guesses' pick, made on
            // the device), one per projected retry, one per iteration whose solve was deferred
            // and then asked for, one for the final convergence check, and
            // at most one more: the solution with its potential, forces and dissipation when
            // the check's convergence was not foreseen (foreseen, they come with it). The
            // forces at x_n and A-search's correction are the last step's end state, already
            // read (measured: 0 or 1 more; it was 4 to 6). A stabilized step that bisected 6
            // levels took 11 (it was one more per level, two with damping).
            let fixed = 1;
            // A stabilized step solves midpoint, and backward Euler too when it blends toward
            // it (alpha > 0); its bisection evaluates three levels of blends per round trip.
            let (solves, blends) = match stats.alpha {
                Some(alpha) if integrator == (Integrator::Stabilized { epsilon: 0.01 }) => {
                    (1 + usize::from(alpha > 0.0), common::stabilized_blend_readbacks(alpha))
                }
                _ => (1, 0),
            };
            let linearized = stats.iterations + stats.projected_iterations + stats.resumed_iterations;
            let bound = (linearized + solves * (1 + fixed) + blends) as u64;
            assert!(device.readbacks <= bound, "{integrator:?}: {device:?} > {bound} readbacks");
            // Work is submitted when the host waits for it, and once more per Newton direction:
            // its linearization goes to the device while the host records the solve.
            let linearized = linearized as u64;
            assert!(device.submissions <= device.readbacks + linearized + 1, "{integrator:?}: {device:?}");
            // This small body solves each system in one workgroup: the dispatches do not grow
            // with the CG iterations (the two-dispatch loop would need two per iteration). About
            // twenty per Newton direction — element pass, gather, assembly, the solve, dots, four
            // candidates — a fixed few per solve (the guesses and their pick, the end state) and
            // a few per blend evaluated (measured: 196 for 8 directions and 71 CG).
            let directions = stats.iterations + stats.projected_iterations + stats.resumed_iterations + 1;
            let bound = (24 * directions + 32 * solves + 28 * blends) as u64;
            assert!(device.dispatches <= bound, "{integrator:?}: {device:?}");
        }
    }
}

/// The device buffer `buffer` (f32) read back through the simulation's context.
fn read_device_positions(sim: &Simulation) -> Vec<[f64; 3]> {
    let context = sim.gpu_context().expect("a GPU simulation");
    let buffer = sim.gpu_positions().expect("a GPU simulation");
    let staging = context.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("test readback"),
        size: buffer.size(),
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut encoder = context.device.create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(buffer, 0, &staging, 0, buffer.size());
    context.queue.submit([encoder.finish()]);
    staging.slice(..).map_async(wgpu::MapMode::Read, |result| result.expect("mapped"));
    context.device.poll(wgpu::PollType::wait_indefinitely()).expect("device");
    let floats: Vec<f32> = bytemuck::pod_collect_to_vec(&staging.get_mapped_range(..).expect("mapped range"));
    floats.chunks_exact(3).map(|c| [c[0] as f64, c[1] as f64, c[2] as f64]).collect()
}

#[test]
fn the_drawable_positions_show_the_state_and_survive_a_failed_step() {
    if !gpu_available() {
        return;
    }
    let mut sim = scene(Integrator::BackwardEuler, Backend::Gpu).unwrap();
    for _ in 0..2 {
        sim.step().unwrap();
        // f32 copies of the f64 state: within an f32 ulp of ~0.5 m.
        let (difference, at) = common::worst_difference(&read_device_positions(&sim), sim.positions());
        assert!(difference < 1e-7, "vertex {at} drawn {difference:e} m away from the state");
    }
    // Forward Euler at a step far past its stability limit blows up: the failed step must
    // leave the drawn positions at the state.
    let builder = Simulation::builder()
        .tet_body(TetMesh::bar([4, 2, 2], [0.4, 0.2, 0.2]), Material::stvk(5e4, 0.3), 1000.0)
        .integrator(Integrator::ForwardEuler)
        .dt(1.0);
    let mut exploding = common::on_backend(builder, Backend::Gpu).build().unwrap();
    let stretched: Vec<[f64; 3]> = exploding.positions().iter().map(|p| [3.0 * p[0], p[1], p[2]]).collect();
    exploding.set_state(&stretched, &vec![[0.0; 3]; stretched.len()]).unwrap();
    let mut failed = false;
    for _ in 0..50 {
        let before = exploding.positions().to_vec();
        if exploding.step().is_err() {
            // f32 copies of positions that have grown large: an f32 ulp of the largest.
            let largest = before.iter().flatten().fold(1.0, |m: f64, c| m.max(c.abs()));
            let (difference, at) = common::worst_difference(&read_device_positions(&exploding), &before);
            assert!(
                difference <= 1e-7 * largest,
                "after a failed step vertex {at} is drawn {difference:e} m from the state"
            );
            failed = true;
            break;
        }
    }
    assert!(failed, "forward Euler at dt = 1 s should blow up");
}

/// A builder given a device runs on it without also being told `Backend::Gpu` (as the docs of
/// `gpu_context` say); an explicit `Backend::Cpu` still decides. A context given alone used to
/// leave the simulation on the CPU.
#[test]
fn a_shared_context_alone_puts_the_simulation_on_the_gpu() {
    let Some(context) = common::gpu() else { return };
    let builder = || {
        Simulation::builder().tet_body(
            TetMesh::bar([2, 1, 1], [0.2, 0.1, 0.1]),
            Material::stvk(5e4, 0.3),
            1000.0,
        )
    };
    let sim = builder().gpu_context(context.clone()).build().unwrap();
    assert_eq!(sim.backend(), Backend::Gpu);
    assert!(sim.gpu_context().is_some());
    let sim = builder().gpu_context(context).backend(Backend::Cpu).build().unwrap();
    assert_eq!(sim.backend(), Backend::Cpu);
    assert!(sim.gpu_context().is_none());
    assert_eq!(builder().build().unwrap().backend(), Backend::Cpu);
}

/// The largest distance between the CPU's and the GPU's vertices over `steps` steps of both.
fn stepped_apart(cpu: &mut Simulation, gpu: &mut Simulation, steps: usize) -> f64 {
    let mut worst: f64 = 0.0;
    for _ in 0..steps {
        cpu.step().unwrap();
        gpu.step().unwrap();
        worst = worst.max(common::worst_difference(cpu.positions(), gpu.positions()).0);
    }
    worst
}

/// A free cube of Young's modulus `youngs` (0.1 m, 1.25-2.5 cm cells) falls `steps` steps on
/// both backends, by Newton and by mixed FEM: it falls further than `fallen` metres, and the
/// GPU's vertices stay within `within` metres of the CPU's.
fn a_free_cube_falls_as_on_the_cpu(youngs: f64, steps: usize, fallen: f64, within: f64) {
    let cube = |solver: Solver, backend: Backend| {
        let builder = Simulation::builder()
            .tet_body(TetMesh::bar([8, 4, 4], [0.1; 3]), Material::corotated(youngs, 0.44), 1000.0)
            .gravity([0.0, -9.81, 0.0])
            .solver(solver);
        common::on_backend(builder, backend).build().unwrap()
    };
    for solver in [Solver::newton().tolerance(1e-4), Solver::mixed_fem()] {
        let (mut cpu, mut gpu) = (cube(solver.clone(), Backend::Cpu), cube(solver.clone(), Backend::Gpu));
        let worst = stepped_apart(&mut cpu, &mut gpu, steps);
        let fell = -cpu.positions().iter().map(|p| p[1]).sum::<f64>() / cpu.positions().len() as f64;
        println!("{:?}: fell {fell:.3} m, the GPU at most {worst:.2e} m from the CPU", solver.kind());
        assert!(fell > fallen, "{fell}");
        assert!(worst <= within, "{:?}: {worst:e} m", solver.kind());
    }
}

/// A free cube stiff at its step (E 1e9 Pa) falls on the GPU as on the CPU. Its GPU solves
/// lost gravity's pull in f32 (the translations are 1e6 times softer than the elasticity
/// there): after 20 steps the cube was 1.0 (Newton) and 1.3 m (mixed FEM) above the CPU's,
/// of 2.2 m fallen; now their Jacobi solves split along the translations
/// (`shaders/pcg.wgsl`, `deflate`).
#[test]
fn a_stiff_free_cube_falls_on_the_gpu_as_on_the_cpu() {
    if gpu_available() {
        a_free_cube_falls_as_on_the_cpu(1e9, 20, 2.0, 1e-4);
    }
}

/// A steel cube (E 1e11 Pa) falls 8.9 m in 40 steps on the GPU as on the CPU. The device held
/// its positions as displacements from the rest shape: past 3 m of fall their f32 rounding
/// strained its cells a thousand times more than its weight does, Newton's steps stalled at
/// that noise and the cube ended 0.21 m above the CPU's. Each part's displacements are now
/// measured from an offset that follows it (`gpu/buffers.rs`, `Frame`): 1.5e-7 m (Newton)
/// and 1.8e-6 m (mixed FEM) from the CPU's, at most, over the 40 steps.
#[test]
fn a_steel_cube_falls_far_on_the_gpu_as_on_the_cpu() {
    if gpu_available() {
        a_free_cube_falls_as_on_the_cpu(1e11, 40, 8.0, 1e-5);
    }
}

/// A free steel-stiff cube squashed to 0.3 and released: one converged backward-Euler step of
/// Newton and of mixed FEM on the GPU, in both of the tests' shapes, ends where the CPU's does,
/// within a CG budget. A body this stiff loses its translations in CG's f32 products, so its
/// solves split them off, and the local/global matrix's inverse had given way to Jacobi
/// there: at 8x8x8 cells (729 vertices, the dense inverse) 14 Newton iterations and 230-277
/// CG iterations where the CPU takes 2-5 and 31-34, and at 24x12x12 (4 225 vertices, FSAI on
/// lavapipe) 628 CG iterations. The inverses now precondition the split solve, leaving the
/// translations out (`shaders/pcg.wgsl`, the split): 78-83 and 127-244 CG iterations. The
/// step is compared where f32 determines it, the centre and the energy: at 24x12x12 a corner
/// moves along a mode so soft that the CPU's Newton moved it 5e-5 m at |g| 0.35 N for 1.5e-10
/// J of `G`, below what the GPU's f32 `G` resolves, and the GPU's ends 1.2e-5 m from it there.
#[test]
fn a_squashed_steel_cube_keeps_its_preconditioner_split_along_its_translations() {
    for (shape, context) in common::gpu_shapes() {
        for (cells, most_cg) in [([8, 8, 8], 120), ([24, 12, 12], 320)] {
            for (name, solver) in [("Newton", Solver::newton()), ("mixed FEM", Solver::mixed_fem())] {
                let mut cpu = common::squashed_steel_cube(cells, solver.clone(), Backend::Cpu);
                cpu.step().unwrap();
                let place = |builder: lively::SimulationBuilder| {
                    builder.backend(Backend::Gpu).gpu_context(context.clone())
                };
                let mut gpu = common::squashed_steel_cube_on(cells, solver.clone(), place);
                let stats = gpu.step().unwrap();
                let (apart, _) = common::worst_difference(cpu.positions(), gpu.positions());
                let (moved, _) =
                    common::worst_difference(&[common::centroid(&cpu)], &[common::centroid(&gpu)]);
                let energy = (gpu.energy().total - cpu.energy().total).abs() / cpu.energy().total;
                println!(
                    "{shape}, {cells:?}, {name}: {} iterations, {} CG; from the CPU's: the centre {moved:.2e} m, \
                     a vertex at most {apart:.2e} m, the energy {energy:.1e} of it",
                    stats.iterations, stats.linear_iterations
                );
                assert!(stats.linear_iterations <= most_cg, "{shape}, {cells:?}, {name}: {stats:?}");
                assert!(
                    moved <= 1e-8 && energy <= 1e-6,
                    "{shape}, {cells:?}, {name}: {moved:e} m, {energy:e}"
                );
            }
        }
    }
}

/// A neo-Hookean bar hung 1 km up, stretched to twice its length and released, steps on the
/// GPU as on the CPU, and its energies agree. The device summed gravity's potential from
/// absolute positions in f32 (the potential at rest 1.7e-2 J from the CPU's), and counted the
/// noise of G from them, so that steps which raised G passed as flat: one backward-Euler step
/// stalled and the bar ended 0.15 m from the CPU's; A-search, which follows the energy, ended
/// 2.7e-4 m from it. Gravity at the reference positions is now the host's, in f64, and the
/// terms that see no absolute position count their noise from the displacements: 5.8e-11 J at
/// rest, 6.0e-8 and 1.4e-6 m.
#[test]
fn a_bar_a_kilometre_up_steps_as_on_the_cpu() {
    if !gpu_available() {
        return;
    }
    let bar = |backend: Backend, integrator: Integrator| {
        let mesh = TetMesh::bar([8, 2, 2], [0.8, 0.2, 0.2]);
        let raised: Vec<[f64; 3]> = mesh.positions().iter().map(|p| [p[0], p[1] + 1000.0, p[2]]).collect();
        let builder = Simulation::builder()
            .tet_body(
                TetMesh::new(raised, mesh.tets().to_vec()).unwrap(),
                Material::neo_hookean(1e6, 0.4),
                1000.0,
            )
            .gravity([0.0, -9.81, 0.0])
            .integrator(integrator)
            .pin(|p| p[0] < 1e-9);
        common::on_backend(builder, backend).build().unwrap()
    };
    // Released stretched to twice its length (backward Euler), and from rest (A-search, whose
    // steps follow the energy).
    let a_search = Integrator::ASearch { alpha_min: 0.0, alpha_max: 1.1, decay: None };
    for (integrator, stretch) in [(Integrator::BackwardEuler, 2.0), (a_search, 1.0)] {
        let (mut cpu, mut gpu) =
            (bar(Backend::Cpu, integrator.clone()), bar(Backend::Gpu, integrator.clone()));
        // At rest the potential is gravity's alone, -3.1e5 J.
        let at_rest = (cpu.energy().potential - gpu.energy().potential).abs();
        for sim in [&mut cpu, &mut gpu] {
            let stretched: Vec<[f64; 3]> =
                sim.positions().iter().map(|p| [stretch * p[0], p[1], p[2]]).collect();
            sim.set_state(&stretched, &vec![[0.0; 3]; stretched.len()]).unwrap();
        }
        let (mut worst, mut stalled): (f64, usize) = (0.0, 0);
        for _ in 0..30 {
            cpu.step().unwrap();
            stalled += (gpu.step().unwrap().outcome == lively::SolveOutcome::Stalled) as usize;
            worst = worst.max(common::worst_difference(cpu.positions(), gpu.positions()).0);
        }
        println!(
            "{integrator:?}, a bar 1 km up: potential at rest {at_rest:.2e} J from the CPU's; {stalled} steps \
             stalled, at most {worst:.2e} m from the CPU's"
        );
        assert!(at_rest <= 1e-4, "{at_rest:e} J");
        assert_eq!(stalled, 0);
        assert!(worst <= 1e-5, "{integrator:?}: {worst:e} m");
    }
}

/// Two stiff cubes in one simulation (E 1e9 Pa), the lower pinned at an edge or free, the
/// other free, dropped onto a floor: each free cube's GPU solves split along its own
/// translations (each free part of the model is a translation group), by Newton, mixed FEM
/// and local/global. When only a model free of pins was split, and that by one translation,
/// the free cube beside the pinned one came 8.4e-3 m from the CPU's by Newton, by mixed FEM it
/// flew off (30 m up after 30 steps), and by local/global it hung in the air, every step
/// `Stalled` after 588 CG iterations; with both cubes free, local/global's CG iterations a
/// step grew past 8 000 by the eighth.
#[test]
fn stiff_free_cubes_beside_others_fall_as_on_the_cpu() {
    if !gpu_available() {
        return;
    }
    let scene = |solver: Solver, backend: Backend, held: bool| {
        let lower = TetMesh::bar([8, 4, 4], [0.1; 3]);
        let raised: Vec<[f64; 3]> =
            lower.positions().iter().map(|p| [p[0] + 0.3, p[1] + 0.2, p[2]]).collect();
        let upper = TetMesh::new(raised, lower.tets().to_vec()).unwrap();
        let mut builder = Simulation::builder()
            .tet_body(lower, Material::corotated(1e9, 0.44), 1000.0)
            .tet_body(upper, Material::corotated(1e9, 0.44), 1000.0)
            .gravity([0.0, -9.81, 0.0])
            .collider(lively::Collider::plane([0.0, 1.0, 0.0], -0.1))
            .contact_model(lively::ContactModel::Penalty { stiffness: 1e6 })
            .solver(solver);
        if held {
            builder = builder.pin(|p| p[0] < 1e-9 && p[1] < 0.15);
        }
        common::on_backend(builder, backend).build().unwrap()
    };
    let solvers = [Solver::newton().tolerance(1e-4), Solver::mixed_fem(), Solver::local_global(10)];
    for (solver, held) in solvers.iter().flat_map(|s| [(s, true), (s, false)]) {
        let (mut cpu, mut gpu) =
            (scene(solver.clone(), Backend::Cpu, held), scene(solver.clone(), Backend::Gpu, held));
        let worst = stepped_apart(&mut cpu, &mut gpu, 30);
        let n = cpu.positions().len();
        let landed = cpu.positions()[n / 2..].iter().map(|p| p[1]).sum::<f64>() / (n - n / 2) as f64;
        println!(
            "{:?}, lower cube held {held}: the upper cube's centre at {landed:.4} m, the GPU at most {worst:.2e} m from the CPU",
            solver.kind()
        );
        assert!((landed + 0.05).abs() < 1e-3, "the upper cube rests on the floor: {landed}");
        assert!(worst <= 1e-4, "{:?}, held {held}: {worst:e} m", solver.kind());
        if matches!(solver.kind(), lively::solver::SolverKind::LocalGlobal { .. }) {
            // At rest the cubes took 16 CG iterations a step while the device measured them
            // from their rest shape: after the fall |grad G| was 14 N of f32 noise, the same
            // at every global step, which the warm start (`untranslate`) solved again at once.
            // From frames that follow them it is 2.5 N, it changes from one global step to the
            // next, and a step takes 54-65 (two builds that differ only in how the offsets
            // round), as these cubes made resting on the floor take (56, in the old build too);
            // the GPU rests 3e-8 m from the CPU, not 1e-7 m. The bound is the cold starts' 80
            // a step, which the warm start was made to beat; before either, the CG iterations
            // of a step grew past 8 000.
            let resting: usize = (0..5).map(|_| gpu.step().unwrap().linear_iterations).sum();
            println!("  at rest: {resting} CG iterations in 5 steps");
            assert!(resting <= 5 * 80, "{resting} CG iterations in 5 steps at rest");
        }
    }
}

/// Twelve stiff free cubes (E 1e9 Pa) dropped in a row onto a penalty floor, each a part with
/// a translation of its own: every solver's GPU steps split each cube's solves along its own
/// translations, however many cubes. When the device split at most eight, the ninth and
/// later shared a group with an earlier cube, their relative translation lost in f32: here
/// Newton's steps ended 6.5e-5 m from the CPU (now 8e-8); in cubes of 4x4x4 cells, after 8
/// steps, mixed FEM's 1.3e-2 m and local/global's 0.1 m, with thousands of CG iterations a step.
#[test]
fn a_pile_of_stiff_free_cubes_falls_as_on_the_cpu() {
    if !gpu_available() {
        return;
    }
    let scene = |solver: Solver, backend: Backend| {
        let mut builder = Simulation::builder()
            .gravity([0.0, -9.81, 0.0])
            .collider(lively::Collider::plane([0.0, 1.0, 0.0], -0.1))
            .contact_model(lively::ContactModel::Penalty { stiffness: 1e6 })
            .solver(solver);
        for k in 0..12 {
            let cube = TetMesh::bar([2, 2, 2], [0.1; 3]);
            let placed: Vec<[f64; 3]> = cube
                .positions()
                .iter()
                .map(|p| [p[0] + 0.2 * k as f64, p[1] + 0.05 * (k % 3) as f64, p[2]])
                .collect();
            let cube = TetMesh::new(placed, cube.tets().to_vec()).unwrap();
            builder = builder.tet_body(cube, Material::corotated(1e9, 0.44), 1000.0);
        }
        common::on_backend(builder, backend).build().unwrap()
    };
    for solver in [Solver::newton().tolerance(1e-4), Solver::mixed_fem(), Solver::local_global(10)] {
        let (mut cpu, mut gpu) = (scene(solver.clone(), Backend::Cpu), scene(solver.clone(), Backend::Gpu));
        let worst = stepped_apart(&mut cpu, &mut gpu, 12);
        let lowest = cpu.positions().iter().map(|p| p[1]).fold(f64::INFINITY, f64::min);
        println!(
            "{:?}: twelve cubes landed (lowest vertex {lowest:.4} m), the GPU at most {worst:.2e} m from the CPU",
            solver.kind()
        );
        assert!((lowest + 0.1).abs() < 1e-3, "the cubes rest on the floor: {lowest}");
        assert!(worst <= 1e-6, "{:?}: {worst:e} m", solver.kind());
    }
}

/// A light free cube squashed into a capsule that holds it with friction (found by
/// `api_properties`, seed 3003). Lagged friction's blocks reach 1e13 here, and the GPU's split
/// along the translations solved its 3x3 system by cofactors in f32: the determinant, the
/// blocks' scale cubed, overflowed, and every budgeted step's direction was NaN (refused, for
/// integrators that must always step), while a converged solve fell back to a gradient step.
#[test]
fn a_light_body_held_deep_in_a_collider_by_friction_steps() {
    if !gpu_available() {
        return;
    }
    for integrator in [Integrator::BackwardEuler, Integrator::Stabilized { epsilon: 0.5 }] {
        for solver in [Solver::newton().budget(1, 1), Solver::newton().max_iterations(1)] {
            let builder = Simulation::builder()
                .tet_body(TetMesh::bar([1, 1, 1], [0.1; 3]), Material::stvk(100.0, 0.0), 10.0)
                .dt(3e-4)
                .gravity([0.0, -9.81, 0.0])
                .integrator(integrator.clone())
                .solver(solver.clone())
                .collider(lively::Collider::capsule([0.0; 3], [0.38, 0.0, -0.17], 0.16).friction(0.8))
                .contact_model(lively::ContactModel::Penalty { stiffness: 2e8 });
            let mut sim = common::on_backend(builder, Backend::Gpu).build().unwrap();
            let squashed: Vec<[f64; 3]> = sim.positions().iter().map(|p| p.map(|c| 0.3 * c)).collect();
            let still = vec![[0.0; 3]; squashed.len()];
            sim.set_state(&squashed, &still).unwrap();
            let stats = sim.step().unwrap_or_else(|e| panic!("{integrator:?}, {solver:?}: {e}"));
            let finite = |v: &[[f64; 3]]| v.iter().flatten().all(|c| c.is_finite());
            assert!(finite(sim.positions()) && finite(sim.velocities()), "{integrator:?}, {solver:?}");
            assert!(stats.objective_decrease > 0.0, "{integrator:?}, {solver:?}: {stats:?}");
        }
    }
}

/// A light cloth beside a cube, both on a tilted plane with friction (found by
/// `api_properties`, seed 9009): friction's blocks `c (I - n n^T)`, off the axes, dwarf the
/// cloth's mass along the normal, and the split along the cloth's translation met a 3x3
/// system singular in f32. Its cofactor solve gave an infinite translation, and the step a
/// NaN. Such a part now keeps its translation in the solve.
#[test]
fn a_light_cloth_held_by_friction_on_a_tilted_plane_steps() {
    if !gpu_available() {
        return;
    }
    let cloth = lively::SpringMesh::cloth(2, 2, [0.2, 0.2]);
    let behind: Vec<[f64; 3]> = cloth.positions().iter().map(|p| [p[0], p[1], p[2] - 0.5]).collect();
    let cloth =
        cloth.springs().iter().fold(lively::SpringMesh::new(behind, cloth.masses().to_vec()), |mesh, s| {
            mesh.spring_with_rest(s.ends[0], s.ends[1], s.rest, s.stiffness, s.kind)
        });
    let builder = Simulation::builder()
        .tet_body(TetMesh::bar([1, 1, 1], [0.1; 3]), Material::stvk(100.0, 0.0), 10.0)
        .spring_body(cloth)
        .dt(0.0241)
        .gravity([0.0, -9.81, 0.0])
        .integrator(Integrator::Stabilized { epsilon: 0.5 })
        .solver(Solver::newton().budget(1, 1))
        .collider(lively::Collider::plane([-0.3415, 0.0, 0.5719], -0.2424).friction(0.77))
        .contact_model(lively::ContactModel::Penalty { stiffness: 1.5e6 });
    let mut sim = common::on_backend(builder, Backend::Gpu).build().unwrap();
    let squash = [0.61, 0.3, 1.055];
    let start: Vec<[f64; 3]> = sim.positions().iter().map(|p| [0, 1, 2].map(|c| p[c] * squash[c])).collect();
    let still = vec![[0.0; 3]; start.len()];
    sim.set_state(&start, &still).unwrap();
    sim.step().unwrap();
    let finite = |v: &[[f64; 3]]| v.iter().flatten().all(|c| c.is_finite());
    assert!(finite(sim.positions()) && finite(sim.velocities()));
}

/// A thrown cube, soft or stiff: the GPU measures it from a pose that travels with it, and
/// its Newton solves reach the 1e-4 N tolerance every step, as on the CPU, 2-5e-8 m from it
/// (lavapipe). Measured from a frame that moved only once the cube had gone further than its
/// size, f32 rounded the displacements so coarsely that most GPU steps ended `RoundOff` (9
/// and 10 of these 12), at 4e-4 N (E 1e6) and 0.3 N (E 1e9).
#[test]
fn a_thrown_cube_converges_on_the_gpu_as_on_the_cpu() {
    if !gpu_available() {
        return;
    }
    for youngs in [1e6, 1e9] {
        let newton = Solver::newton().tolerance(1e-4);
        let mut cpu = common::thrown_cube(youngs, 0.0, newton.clone(), Backend::Cpu);
        let mut gpu = common::thrown_cube(youngs, 0.0, newton, Backend::Gpu);
        let mut worst: f64 = 0.0;
        for step in 0..12 {
            cpu.step().unwrap();
            let stats = gpu.step().unwrap();
            let difference = common::worst_difference(cpu.positions(), gpu.positions()).0;
            worst = worst.max(difference);
            assert_eq!(
                stats.outcome,
                lively::SolveOutcome::Converged,
                "E {youngs:e}, step {step}: the GPU's gradient stayed at {:e} N",
                stats.gradient_norm
            );
        }
        println!("E {youngs:e}: twelve GPU steps converged, at most {worst:.2e} m from the CPU");
        assert!(worst < 1e-6, "E {youngs:e}: {worst:e} m");
    }
}

/// The cube thrown spinning at 10 rad/s, stiff and steel-stiff: each solve starts from the
/// rigid guess, where the step turns the cube, and the GPU measures the cube from the same
/// rigid step, so that its displacements are what it deforms. The GPU then follows the CPU
/// (measured on lavapipe over these 20 steps: 6-7e-8 m for both solvers at both moduli, every
/// Newton step converged). Measured in the world's axes, the displacements were the size of
/// the cube, and the GPU came 1.45e-3 m (Newton) and 1.1e-4 m (mixed FEM) off the CPU at
/// E 1e7. With a pose of its own but neither the rigid guess nor its step, 2.0e-5 and
/// 4.5e-7 m at E 1e7; Newton's run at E 1e9 was erratic, 1.2e-2 m off in 30 steps, as every
/// solve had to find the rotation back from straight-line guesses.
/// The same steel-stiff cube under implicit midpoint, and under the stabilized integrator that
/// blends it with backward Euler, stays within 2e-6 m of the CPU over 20 steps (measured
/// 4.6e-7 and 8.4e-7 m on lavapipe). A midpoint step's end is stretched where its midpoint is
/// not (`2 z - x_n` for a rigid node `z`): while the next step's rigid guess and poses carried
/// that stretched start, the GPU's Newton iterations went 8-50 a step, ended on its f32
/// rounding, and came 6.0e-3 m (midpoint) and 2.8e-5 m (stabilized) off the CPU.
#[test]
fn a_stiff_cube_spinning_under_midpoint_flies_as_on_the_cpu() {
    if !gpu_available() {
        return;
    }
    for integrator in [Integrator::ImplicitMidpoint, Integrator::Stabilized { epsilon: 0.01 }] {
        let solver = Solver::newton().tolerance(1e-4);
        let mut cpu = common::thrown_cube_by(integrator.clone(), 1e9, 10.0, solver.clone(), Backend::Cpu);
        let mut gpu = common::thrown_cube_by(integrator.clone(), 1e9, 10.0, solver, Backend::Gpu);
        let worst = stepped_apart(&mut cpu, &mut gpu, 20);
        println!("{integrator:?}: the spinning cube's GPU vertices at most {worst:.2e} m from the CPU's");
        assert!(worst < 2e-6, "{integrator:?}: {worst:e} m");
    }
}

/// AVF's target holds `h^2/12 M^-1 f(x_n)`, which for this stiff spinning cube lies metres
/// from the start. While the gather summed inertia as `1/2 m/h^2 |x - y|^2` in f32, the
/// objective (about 1.4e4 J) rounded away decreases of a few mJ that its noise floor said it
/// resolved: steps 16 and 18 stalled with 190-280 N of force left, and the energy rose 29 %
/// in 20 steps (3.10 -> 3.98 J). Measured from the start, with the target's own inertia
/// added on the host in f64, no step stalls and the energy rises 4.2 %; with the noise floor
/// a root sum of squares over the vertices (it was their plain sum, the worst case), the
/// solves go on where the objective still resolves their decrease, and it rises 1.6 % on
/// lavapipe. What is left is f32's: its positions leave 1-3 N of force in every step (the
/// CPU converges to 1e-4 N and holds the energy to 1e-5).
#[test]
fn a_stiff_cube_spinning_under_avf_neither_stalls_nor_runs_away() {
    if !gpu_available() {
        return;
    }
    let solver = Solver::newton().tolerance(1e-4);
    let mut gpu = common::thrown_cube_by(Integrator::Avf, 1e9, 10.0, solver, Backend::Gpu);
    let start = gpu.energy().total;
    for step in 0..20 {
        let stats = gpu.step().unwrap();
        assert_ne!(stats.outcome, SolveOutcome::Stalled, "step {step}: {stats:?}");
    }
    let rise = gpu.energy().total / start - 1.0;
    println!("AVF's spinning steel cube on the GPU: energy {:+.2} % in 20 steps", 100.0 * rise);
    assert!(rise.abs() < 0.03, "{rise:e}");
}

#[test]
fn a_stiff_cube_thrown_spinning_flies_as_on_the_cpu() {
    if !gpu_available() {
        return;
    }
    for youngs in [1e7, 1e9] {
        for solver in [Solver::newton().tolerance(1e-4), Solver::mixed_fem()] {
            let mut cpu = common::thrown_cube(youngs, 10.0, solver.clone(), Backend::Cpu);
            let mut gpu = common::thrown_cube(youngs, 10.0, solver.clone(), Backend::Gpu);
            let worst = stepped_apart(&mut cpu, &mut gpu, 20);
            println!(
                "{:?}, E {youngs:e}: the spinning cube's GPU vertices at most {worst:.2e} m from the CPU's",
                solver.kind()
            );
            assert!(worst < 1e-6, "{:?}, E {youngs:e}: {worst:e} m", solver.kind());
        }
    }
}

/// A converged solve of a body past 384 vertices (here 539, which one workgroup could solve)
/// multiplies by the dense inverse of the local/global matrix in the CG loop, two dispatches an
/// iteration, and needs a fraction of Jacobi's iterations in one workgroup, one dispatch a
/// solve; a budget, which spends its iterations whatever the preconditioner, keeps the one
/// workgroup.
#[test]
fn mid_sized_bodies_solve_with_the_dense_inverse_unless_on_a_budget() {
    if !gpu_available() {
        return;
    }
    let step = |solver: Solver| {
        let builder = Simulation::builder()
            .tet_body(TetMesh::bar([10, 6, 6], [1.0, 0.6, 0.6]), Material::neo_hookean(3e4, 0.3), 1000.0)
            .gravity([0.0, -9.81, 0.0])
            .solver(solver.clone())
            .pin(|p| p[0] < 1e-9);
        let mut sim = common::on_backend(builder, Backend::Gpu).build().unwrap();
        assert_eq!(sim.positions().len(), 539);
        let stats = sim.step().unwrap();
        let device = stats.device.expect("a GPU step counts its device work");
        println!("{solver:?}: {} Newton / {} CG, {device:?}", stats.iterations, stats.linear_iterations);
        (stats.linear_iterations as u64, device)
    };
    let newton = Solver::newton().tolerance(1e-6);
    let (dense, dense_work) = step(newton.clone());
    let (jacobi, jacobi_work) = step(newton.clone().linear_solver(LinearSolver::Pcg));
    let (budget, budget_work) = step(newton.budget(2, 40));
    // The loop dispatches twice a CG iteration; fewer dispatches in all than that is one
    // workgroup's solves. Measured on lavapipe: 27 CG iterations and 235 dispatches with the
    // dense inverse, 64 and 76 with Jacobi, 66 and 35 on the budget.
    assert!(dense_work.dispatches >= 2 * dense, "dense: {dense} CG, {dense_work:?}");
    assert!(jacobi_work.dispatches < 2 * jacobi, "Jacobi: {jacobi} CG, {jacobi_work:?}");
    assert!(budget_work.dispatches < 2 * budget, "budget: {budget} CG, {budget_work:?}");
    assert!(3 * dense < 2 * jacobi, "dense {dense} against Jacobi's {jacobi} CG iterations");
}

/// A light free bar, half soft and half a 3.8e12 Pa inclusion, squashed and let go under
/// A-search on a budget (found by `api_properties`, seed 11011), of 8 vertices (solved in one
/// workgroup) and of 2 187 (in the multi-workgroup loop, on lavapipe too). Its elastic forces
/// reach 3e9 N on 0.01 kg: their f32 sum over the bar, zero but for rounding, came to 3e3 N,
/// and the split along the bar's translation moved it by E^-1 of that, 6 km in the first
/// Newton solve. The first step ended 1.8e7 m away and the second was NaN (8 vertices), or
/// 196 m and 9e9 m away (2 187). With the translation from the
/// vertex terms alone and CG's stray translation taken out, the bars fall as on the CPU: their
/// centroids were 4.9e-3 and 8.8e-4 m from the CPU's after each step (8 vertices), 6.4e-4 and
/// 5.8e-3 m (2 187).
#[test]
fn a_light_free_bar_with_a_rigid_inclusion_steps_from_a_squash() {
    if !gpu_available() {
        return;
    }
    let scene = |(cells, size): ([usize; 3], [f64; 3]), backend| {
        let material_at = move |c: [f64; 3]| match c[0] > 0.5 * size[0] {
            true => Material::fixed_corotated(3.84e12, 0.0),
            false => Material::fixed_corotated(3.35e4, 0.0),
        };
        let builder = Simulation::builder()
            .tet_body_graded(TetMesh::bar(cells, size), material_at, 10.0)
            .dt(0.14)
            .gravity([0.0, -9.81, 0.0])
            .integrator(Integrator::ASearch { alpha_min: 0.0, alpha_max: 1.0, decay: None })
            .solver(Solver::newton().budget(2, 14))
            .damping(lively::Damping::Rayleigh { stiffness: 8.8e-4 });
        let mut sim = common::on_backend(builder, backend).build().unwrap();
        let squash = [0.77, 0.96, 0.48];
        let start: Vec<[f64; 3]> =
            sim.positions().iter().map(|p| [0, 1, 2].map(|c| p[c] * squash[c])).collect();
        let still = vec![[0.0; 3]; start.len()];
        sim.set_state(&start, &still).unwrap();
        sim
    };
    for (cells, size) in [([1, 1, 1], [0.1; 3]), ([26, 8, 8], [0.26, 0.08, 0.08])] {
        let bar = (cells, size);
        let (mut cpu, mut gpu) = (scene(bar, Backend::Cpu), scene(bar, Backend::Gpu));
        let start = gpu.energy().total;
        for step in 0..2 {
            cpu.step().unwrap();
            gpu.step().unwrap_or_else(|e| panic!("{cells:?}, step {step}: {e}"));
            let (on_cpu, on_gpu) = (common::centroid(&cpu), common::centroid(&gpu));
            let apart = (0..3).map(|c| (on_cpu[c] - on_gpu[c]).abs()).fold(0.0, f64::max);
            println!(
                "{cells:?}, step {step}: centroid {on_gpu:.4?} on the GPU, {apart:.1e} m from the CPU's"
            );
            assert!(
                apart < 0.02,
                "{cells:?}, step {step}: the GPU's centroid {on_gpu:?}, the CPU's {on_cpu:?}"
            );
            assert!(gpu.energy().total < start, "{cells:?}, step {step}: {:?} from {start}", gpu.energy());
        }
    }
}

/// A light cloth (0.4 m, 25 vertices) dragged by a stiff handle (2.3e6 N/m) at h = 0.5 s
/// (found by comparing the backends on random scenes). The step's rigid prediction of the
/// free cloth, an explicit step through the handle's spring, put it 5e5 m away, and the GPU
/// placed the cloth's frame there: displacements of 5e5 m in f32 resolve 3 cm. Its solve
/// stalled 0.36 m from the CPU's, at 1 123 J of potential against 0.04 J. The prediction now
/// moves a free part by inertia and gravity alone. The GPU then stops at f32's round-off (the
/// handle's 2.3e6 N/m times the positions' rounding is a tenth of a newton, on soft springs).
/// Handle moves of 21-32 mm a step showed a second failure: where Newton's forcing term asked
/// a relative residual of 1/2, one CG iteration met it by resolving the handle's vertex, and
/// the GPU's full steps lowered the gradient by 1-3 % each until the 40-iteration cap, 0.2 m
/// from the CPU at 5 times its energy (3 of 12 moves; 1-3 cm in others). Newton now tightens
/// the forcing term after a full step that made little progress (far above the gradient's
/// noise): over the 12 moves and their three steps the GPU ends at most 1.2-3.9 mm from the
/// CPU, its energy within 0.11 %.
#[test]
fn a_light_cloth_on_a_stiff_handle_steps_as_on_the_cpu() {
    if !gpu_available() {
        return;
    }
    let scene = |backend| {
        let builder = Simulation::builder()
            .spring_body(lively::SpringMesh::cloth(4, 4, [0.4, 0.4]))
            .dt(0.5)
            .gravity([0.0, -9.81, 0.0])
            .integrator(Integrator::BackwardEuler)
            .solver(Solver::newton().tolerance(1e-3).max_iterations(40));
        let mut sim = common::on_backend(builder, backend).build().unwrap();
        let handle = sim.add_handle(sim.positions().len() - 1, 2.3e6).unwrap();
        (sim, handle)
    };
    // Moves that ended 0.2 m, 3 cm and 3 cm from the CPU before the forcing term's cap.
    for moved in [0.022, 0.027, 0.032] {
        let ((mut cpu, cpu_handle), (mut gpu, gpu_handle)) = (scene(Backend::Cpu), scene(Backend::Gpu));
        for step in 0..3 {
            for (sim, handle) in [(&mut cpu, cpu_handle), (&mut gpu, gpu_handle)] {
                let p = sim.positions()[sim.handle_vertex(handle).unwrap()];
                sim.move_handle(handle, [p[0] + moved, p[1], p[2]]).unwrap();
            }
            let (done, stats) = (cpu.step().unwrap(), gpu.step().unwrap());
            let (apart, _) = common::worst_difference(cpu.positions(), gpu.positions());
            let (on_cpu, on_gpu) = (cpu.energy().total, gpu.energy().total);
            println!(
                "moved {moved} m, step {step}: {apart:.2e} m apart, {on_gpu:.6e} J against the CPU's \
                 {on_cpu:.6e} J ({:?}, {:?})",
                done.outcome, stats.outcome
            );
            assert!(apart < 0.01, "moved {moved} m, step {step}: {apart} m apart");
            assert!(
                (on_gpu - on_cpu).abs() < 0.005 * on_cpu,
                "moved {moved} m, step {step}: {on_gpu} J against {on_cpu} J"
            );
        }
    }
}

/// A light cloth squashed into a capsule with cubic penalty contact and friction, stepped by
/// one Newton iteration (found by comparing the backends on random scenes). Its lagged
/// friction sticks: blocks `c (I - n n^T)` with c/h near 6.5e11 N/m. The explicit guess,
/// flung 2 km out of the capsule by the penalty's forces, moves each vertex along its n, where
/// the block rounded to f32 is off by 1e-7 c, either way: the guess's damping energy came to
/// -5e10 J, it was picked as by far the best, and the step ended 2.9 km from the CPU's. The
/// GPU now takes the damping's vertex blocks as factors, `|F^T dx|^2 / 2`, which f32 keeps at
/// zero or above: 3.3 cm from the CPU's one-iteration step (its f32 CG solve's), the energy
/// within 0.03 %. (The scene's digits are the search's: rounded, the same error can fall on
/// the safe side.)
#[test]
fn a_light_cloth_stuck_in_a_capsule_by_friction_steps_as_on_the_cpu() {
    if !gpu_available() {
        return;
    }
    let scene = |backend| {
        let (a, b) = (
            [0.02992791951500384, 0.04362270136782081, -0.05055546962776544],
            [0.35384881678178737, -0.09306544955421539, 0.1832188303001461],
        );
        let capsule = lively::Collider::capsule(a, b, 0.17732979932951953).friction(0.11935019418441828);
        let cloth = lively::SpringMesh::cloth(3, 3, [0.4, 0.4]);
        let last = cloth.positions().len() as u32 - 1;
        let builder = Simulation::builder()
            .spring_body(cloth.spring(0, last, 1.0, lively::SpringKind::Hooke))
            .dt(0.0014543341538460677)
            .gravity([0.0, -9.81, 0.0])
            .integrator(Integrator::Stabilized { epsilon: 0.01 })
            .solver(Solver::newton().tolerance(0.01).max_iterations(1).linear_solver(LinearSolver::Pcg))
            .collider(capsule)
            .contact_model(lively::ContactModel::CubicPenalty { stiffness: 86647771.85384028 });
        let mut sim = common::on_backend(builder, backend).build().unwrap();
        let squashed: Vec<[f64; 3]> =
            sim.positions().iter().map(|p| [0.9595045302591662 * p[0], 0.3 * p[1], 0.3 * p[2]]).collect();
        sim.set_state(&squashed, &vec![[0.0; 3]; squashed.len()]).unwrap();
        sim
    };
    let (mut cpu, mut gpu) = (scene(Backend::Cpu), scene(Backend::Gpu));
    cpu.step().unwrap();
    gpu.step().unwrap();
    let (apart, _) = common::worst_difference(cpu.positions(), gpu.positions());
    let (on_cpu, on_gpu) = (cpu.energy().total, gpu.energy().total);
    println!("{apart:.2e} m apart, {on_gpu:.6e} J against the CPU's {on_cpu:.6e} J");
    assert!(apart < 0.1, "{apart} m apart");
    assert!((on_gpu - on_cpu).abs() < 0.01 * on_cpu, "{on_gpu} J against {on_cpu} J");
}

/// A pinned bar of 3.2e10 Pa, squashed to 0.3 and let go under A-search at h = 0.5 s,
/// converged to 1e-3 N (a scene found by comparing the backends on random scenes). The release
/// turns its strain into hundreds of m/s, so the second step's predictions lie hundreds of
/// metres out, and Newton comes back from there. The GPU steps where the CPU does: 1e-8 m
/// apart on lavapipe, and 3e-6 m with the start moved 1e-9 to 1e-6 m.
///
/// The scene as found had a 100 Pa StVK end. Its positions are not determined in f32: moving
/// the start 1e-8 m moved the GPU's second step 0.05-0.17 m (the CPU's 1e-6 m; on an H200 the
/// unmoved scene ended 0.13 m apart). The end's soft mode takes forces of a few newtons, the
/// f32 rounding of the bar's forces. With ends of 1e4-1e8 Pa the CPU's own step jumped 0.075
/// m between two minima for a 1e-9 m move. The overflow of the noise floor that the scene
/// found is tested at the gather (`the_noise_floor_stays_finite_at_huge_forces_far_out`).
///
/// A-search's energy on the GPU is known to about 1e-3 here, not f32's 1e-7: its alpha is
/// the root of `q alpha^2 / 2 = target - ...`, and `q = |dv|^2_M` comes from the difference
/// of the potential's forces at the two ends of the step, each rounded in f32 at 1e8 N, whose
/// difference is 1e4 times smaller. Moving the start 1e-9 m moved the GPU's `q` by 3e-4, its
/// alpha from 0.99993 to a clipped 1.0, and its energy by 9e-4.
#[test]
fn a_stiff_bar_whose_prediction_flies_far_steps_as_on_the_cpu() {
    if !gpu_available() {
        return;
    }
    let (mut cpu, mut gpu) = (
        common::squash_released_bar_with_end(3.2e10, 3.2e10, Backend::Cpu),
        common::squash_released_bar_with_end(3.2e10, 3.2e10, Backend::Gpu),
    );
    for step in 0..2 {
        let (done, stats) = (cpu.step().unwrap(), gpu.step().unwrap());
        let (apart, _) = common::worst_difference(cpu.positions(), gpu.positions());
        let (on_cpu, on_gpu) = (cpu.energy().total, gpu.energy().total);
        println!(
            "step {step}: {apart:.2e} m apart, {on_gpu:.6e} J against the CPU's {on_cpu:.6e} J, {} and {} iterations",
            done.iterations, stats.iterations
        );
        assert!(done.converged && stats.converged, "step {step}: {done:?}, {stats:?}");
        assert!(apart < 1e-3, "step {step}: {apart} m apart");
        assert!((on_gpu - on_cpu).abs() < 1e-2 * on_cpu, "step {step}: {on_gpu} J against {on_cpu} J");
    }
}
