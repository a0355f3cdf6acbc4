//! Stage `mixed` (`shaders/mixed.wgsl`), the GPU twin of `backend/cpu/mixed.rs`: the per-tet
//! part of the mixed-FEM SQP iteration. It writes the condensed system's corner gradients and
//! blocks where the element stage writes them (the gather and assembly then run as for
//! Newton), the displacement formulation's corner gradients into `displacement_corners` (for a
//! second gather, the convergence test's), and its slope and merit sums into the element
//! stage's energy partials of the tets.

use super::buffers::GpuBuffers;
use super::context::GpuContext;
use super::element::{ElementGroups, WgElement};
use super::gather::{GatherGroups, WgGather};
use super::recording::{Recording, Staged};
use super::stage::{Bound, Kernel, WORKGROUP, WgStage};
use crate::error::Result;
use crate::material::Projection;
use crate::model::Model;
use crate::objective::Node;

use super::Positions;

/// The mixed stage's pipelines.
pub struct WgMixed(pub(crate) WgStage);

/// The mixed stage bound to one model's buffers, with the element and gather stages bound to
/// the displacement formulation's corner gradients.
pub struct MixedGroups {
    param: super::recording::ParamGroup,
    iterate: Bound,
    /// Reading a batch of positions (the merit's, at a line search's step lengths).
    batch: Bound,
    /// The springs' gradients into `displacement_corners`.
    pub displacement_elements: ElementGroups,
    /// The gather of `displacement_corners`.
    pub displacement_gather: GatherGroups,
}

impl WgMixed {
    pub fn new(context: &GpuContext) -> Result<WgMixed> {
        Ok(WgMixed(WgStage::new(context, "mixed")?))
    }

    pub fn bind(
        &self,
        context: &GpuContext,
        recording: &Recording,
        model: &Model,
        buffers: &GpuBuffers,
        element: &WgElement,
        gather: &WgGather,
    ) -> Result<MixedGroups> {
        const CORNERS: &str = "displacement_corners";
        Ok(MixedGroups {
            param: recording.param_group(context, &self.0),
            iterate: self.0.bind(context, |g, n| buffers.resolve(g, n))?,
            batch: self.0.bind(context, |g, n| match (g, n) {
                (2, "x") => buffers.scratch.get("batch"),
                _ => buffers.resolve(g, n),
            })?,
            displacement_elements: element.bind_corners(context, recording, model, buffers, CORNERS)?,
            displacement_gather: gather.bind_corners(context, recording, buffers, CORNERS)?,
        })
    }

    /// Records entry point `entry` over the tets, run by run as the element stage splits them
    /// (`elements`), at the objective's one node and step length `alpha`, at the iterate or
    /// (`merit` alone) over a batch of positions; `linearize` with the stretch curvature exact
    /// or projected as `projection` says.
    #[allow(clippy::too_many_arguments)]
    pub fn queue(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        groups: &MixedGroups,
        elements: &ElementGroups,
        (node, at): (Node, Positions),
        entry: &'static str,
        alpha: f64,
        projection: Projection,
    ) -> Result<()> {
        let members = at.members() as u32;
        let bound = match at {
            Positions::Batch(_) => &groups.batch,
            _ => &groups.iterate,
        };
        debug_assert!(matches!(at, Positions::Iterate) || (entry == "merit" && members > 1));
        for mut params in elements.tet_runs(&[node])? {
            params.alpha = alpha as f32;
            params.members = members;
            let offset = recording.params(context, &params)?;
            let constants: &[_] =
                if projection == Projection::None { &[("EXACT_CURVATURE", 1.0)] } else { &[] };
            let kernel = Kernel { stage: &self.0, entry, constants, label: entry };
            let workgroups = members * params.count.div_ceil(WORKGROUP);
            recording.dispatch_batch(context, kernel, (&groups.param, offset), bound, workgroups, members);
        }
        Ok(())
    }

    /// Stages the tets' energy partials (the sums `local_update` and `merit` leave there).
    pub fn stage_tet_sums(
        context: &GpuContext,
        recording: &mut Recording,
        buffers: &GpuBuffers,
        elements: &ElementGroups,
    ) -> Result<Staged> {
        let partials = buffers.scratch.named("energy_partials");
        recording.stage(context, partials, 4 * elements.tet_partials().max(1) as u64)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::backend::cpu::{CpuBackend, hessian_product};
    use crate::backend::gpu::test_support::context;
    use crate::backend::gpu::test_support::worst;
    use crate::backend::topology::Topology;
    use crate::backend::{Deferral, DirectionRequest, LinearSolver, MixedDirection, Stages};
    use crate::material::{Material, Projection};
    use crate::mesh::TetMesh;
    use crate::model::Model;
    use crate::objective::{Node, StepProblem};

    /// The parity tests' body: a bar of 3x2x2 cells of `material` and `density`, pinned at
    /// x = 0.
    fn pinned_bar(material: Material, density: f64) -> Arc<Model> {
        let mut model = Model::empty([0.0, -9.81, 0.0]);
        model.add_tet_body(&TetMesh::bar([3, 2, 2], [0.3, 0.2, 0.2]), &[material], density).unwrap();
        for v in 0..model.vertex_count() {
            model.pinned[v] = model.rest[v][0] < 1e-9;
        }
        Arc::new(model)
    }

    /// The rest shape scaled by `squeeze`, its free vertices moved by up to `scale` at random.
    fn moved(model: &Model, rng: &mut impl rand::Rng, squeeze: f64, scale: f64) -> Vec<[f64; 3]> {
        use rand::RngExt;
        (model.rest.iter().enumerate())
            .map(|(v, p)| {
                if model.pinned[v] {
                    *p
                } else {
                    std::array::from_fn(|c| squeeze * p[c] + rng.random_range(-scale..scale))
                }
            })
            .collect()
    }

    /// A condensed solve to 1e-6 relative, with the stretch curvature `projection`.
    fn request(projection: Projection) -> DirectionRequest<'static> {
        DirectionRequest {
            projection,
            solve: true,
            deferral: Deferral::Solve,
            solver: LinearSolver::Pcg,
            gradient_tolerance: 1e-9,
            relative_tolerance: Some(1e-6),
            max_iterations: 500,
            candidates: &[],
            likely_converged: false,
            previous_gradient_norm: None,
            forcing_cap: 1.0,
        }
    }

    /// A mixed solve's first direction: the step `problem` begun, the iterate set to `x`, the
    /// stretches readied, and `request` linearized (and solved) there.
    fn first_direction(
        backend: &mut dyn Stages,
        problem: StepProblem<'_>,
        x: &[[f64; 3]],
        request: &DirectionRequest<'_>,
    ) -> MixedDirection {
        backend.begin_step(problem);
        backend.set_iterate(x);
        backend.mixed_begin();
        backend.mixed_direction(request)
    }

    /// A mixed-FEM iteration on the GPU against its CPU twin, for every material, from random
    /// states with stretches off the positions' (the first step's warm start is the start's
    /// stretch; the iterate is elsewhere), with the stretch curvature projected and exact: the
    /// same displacement gradient norm, direction slope, merit at the iterate and at a step
    /// along it, and the same positions after the step.
    #[test]
    fn mixed_iteration_matches_its_cpu_twin() {
        use rand::{RngExt, SeedableRng};
        let Some(context) = context() else { return };
        let materials: [fn(f64, f64) -> Material; 6] = [
            Material::stvk,
            Material::corotated,
            Material::fixed_corotated,
            Material::neo_hookean,
            Material::stable_neo_hookean,
            Material::arap,
        ];
        // Squeezed to 0.8 of its size, the body's stretch Hessians turn indefinite (the
        // projection's Jacobi sweeps run); unsqueezed they are positive definite.
        for ((m, material), squeeze) in materials.iter().enumerate().flat_map(|m| [(m, 1.0), (m, 0.8)]) {
            let model = pinned_bar(material(2e4, 0.3), 1000.0);
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(70 + m as u64);
            let mut moved = |scale: f64| moved(&model, &mut rng, squeeze, scale);
            let (start, target, x) = (moved(0.01), moved(0.02), moved(0.02));
            let nodes = [Node { weight: 1.0, theta: 1.0 }];
            let problem = StepProblem::undamped(&start, &target, &nodes, 1.0 / 30.0, 1.0);
            for projection in [Projection::Psd, Projection::None] {
                let request = request(projection);
                let label = format!(
                    "{:?} squeezed to {squeeze}, curvature {projection:?}",
                    material(2e4, 0.3).model()
                );
                let mut cpu = CpuBackend::new(model.clone());
                let mut gpu = super::super::GpuBackend::new(context.clone(), model.clone()).unwrap();
                let mut results = Vec::new();
                for backend in [&mut cpu as &mut dyn Stages, &mut gpu] {
                    let done = first_direction(backend, problem, &x, &request);
                    let direction = done.direction.expect("a direction");
                    let merits = backend.mixed_merits(&[0.5, 1.0]);
                    backend.mixed_advance(0.5);
                    let mut after = vec![[0.0; 3]; x.len()];
                    backend.read_iterate(&mut after);
                    // A second iteration from the advanced stretches.
                    let again = backend.mixed_direction(&request);
                    let second_solve =
                        again.direction.map_or((false, 0), |d| (d.negative_curvature, d.iterations));
                    results.push((
                        done.linearization.gradient_norm,
                        direction.slope,
                        done.merit,
                        merits,
                        after,
                        again,
                        (direction.negative_curvature, direction.iterations),
                        second_solve,
                    ));
                    assert!(backend.take_error().is_none());
                }
                // The second iteration's condensed matrices (the first has no multipliers for
                // the curvature), through their products with a random vector: f32 against
                // f64, 1e-5 of the largest entry (the element stage's bound).
                let (_, gpu_blocks) = gpu.read_linearization();
                let blocks: Vec<[f64; 9]> =
                    gpu_blocks.chunks(9).map(|b| std::array::from_fn(|k| b[k] as f64)).collect();
                let probe: Vec<[f64; 3]> =
                    (0..x.len()).map(|_| std::array::from_fn(|_| rng.random_range(-1.0..1.0))).collect();
                let mut gpu_product = vec![[0.0; 3]; x.len()];
                hessian_product::apply(&Topology::new(&model), &blocks, &probe, &mut gpu_product);
                let gpu_product: Vec<f32> = gpu_product.as_flattened().iter().map(|&v| v as f32).collect();
                let (matrix_error, at) = worst(&gpu_product, cpu.hessian_times(&probe).as_flattened());
                assert!(matrix_error < 1e-5, "{label}: condensed H v entry {at} off by {matrix_error:e}");
                let relative = |a: f64, b: f64| (a - b).abs() / b.abs().max(1e-12);
                let (c, g) = (&results[0], &results[1]);
                // Both twins meet negative curvature in the same solves; the first, without
                // multipliers for the curvature, never.
                assert_eq!(c.6.0, g.6.0, "{label}: the first solve's negative curvature");
                assert_eq!(c.7.0, g.7.0, "{label}: the second solve's negative curvature");
                assert!(!c.6.0, "{label}: the first solve meets negative curvature");
                println!(
                    "{label}: H v {matrix_error:.1e}, CG {} / {} then {:?} / {:?}, |g| {:.1e}, slope {:.1e}, merit {:.1e}, merits {:.1e} {:.1e}, second |g| {:.1e}",
                    c.6.1,
                    g.6.1,
                    c.7,
                    g.7,
                    relative(g.0, c.0),
                    relative(g.1, c.1),
                    relative(g.2, c.2),
                    relative(g.3[0], c.3[0]),
                    relative(g.3[1], c.3[1]),
                    relative(g.5.linearization.gradient_norm, c.5.linearization.gradient_norm),
                );
                // f32 on the GPU against f64: the element stage's parity bound (1e-5 relative) for
                // values summed over the body, 1e-4 for the slope (a difference of such sums).
                assert!(relative(g.0, c.0) < 1e-5, "{label}: |g| {} vs {}", g.0, c.0);
                assert!(relative(g.1, c.1) < 1e-4, "{label}: slope {} vs {}", g.1, c.1);
                assert!(relative(g.2, c.2) < 1e-5, "{label}: merit {} vs {}", g.2, c.2);
                for k in 0..2 {
                    assert!(relative(g.3[k], c.3[k]) < 1e-5, "{label}: merit {k} {} vs {}", g.3[k], c.3[k]);
                }
                let apart =
                    c.4.iter()
                        .zip(&g.4)
                        .flat_map(|(a, b)| (0..3).map(move |i| (a[i] - b[i]).abs()))
                        .fold(0.0, f64::max);
                assert!(apart < 1e-6, "{label}: positions after the step differ by {apart:e} m");
                let second = relative(g.5.linearization.gradient_norm, c.5.linearization.gradient_norm);
                assert!(second < 1e-4, "{label}: second |g| off by {second:e}");
            }
        }
    }

    /// A solve deferred and then resumed (`Deferral`) gives the bits of the same solve made
    /// with its linearization, on both twins: the resumed request solves from the
    /// linearization the deferred one kept, with no second polar decomposition to move the
    /// stretches' last bits. Checked at a second iterate (multipliers for the curvature, and
    /// the full step's decompositions kept), with the stretch curvature exact and projected,
    /// through the line search's merits, the step and the iteration after it.
    #[test]
    fn a_deferred_mixed_solve_resumes_to_the_bits_of_an_undeferred_one() {
        use rand::SeedableRng;
        let model = pinned_bar(Material::stable_neo_hookean(2e4, 0.3), 1000.0);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let mut moved = |scale: f64| moved(&model, &mut rng, 0.9, scale);
        let (start, target, x) = (moved(0.01), moved(0.02), moved(0.02));
        let nodes = [Node { weight: 1.0, theta: 1.0 }];
        let problem = StepProblem::undamped(&start, &target, &nodes, 1.0 / 30.0, 1.0);
        let run = |backend: &mut dyn Stages, projection: Projection, defers: bool| {
            first_direction(backend, problem, &x, &request(Projection::Psd));
            backend.mixed_advance(1.0);
            let found = if defers {
                let deferred = backend
                    .mixed_direction(&DirectionRequest { deferral: Deferral::Defer, ..request(projection) });
                assert!(deferred.direction.is_none(), "a deferred request solved");
                let resumed = backend
                    .mixed_direction(&DirectionRequest { deferral: Deferral::Resume, ..request(projection) });
                assert_eq!(resumed.linearization, deferred.linearization);
                resumed
            } else {
                backend.mixed_direction(&request(projection))
            };
            let merits = backend.mixed_merits(&[0.5, 1.0]);
            backend.mixed_advance(1.0);
            let mut after = vec![[0.0; 3]; x.len()];
            backend.read_iterate(&mut after);
            let next = backend.mixed_direction(&request(Projection::Psd));
            assert!(backend.take_error().is_none());
            let bits = |values: &[f64]| values.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            (
                found.linearization,
                found.direction.expect("a direction"),
                bits(&[found.merit, found.full_step_merit]),
                bits(&merits),
                bits(after.as_flattened()),
                next.linearization,
                next.direction.expect("a direction"),
            )
        };
        let context = context();
        let make = |gpu: bool| -> Box<dyn Stages> {
            match &context {
                Some(context) if gpu => {
                    Box::new(super::super::GpuBackend::new(context.clone(), model.clone()).unwrap())
                }
                _ => Box::new(CpuBackend::new(model.clone())),
            }
        };
        let sides = if context.is_some() { &[("CPU", false), ("GPU", true)][..] } else { &[("CPU", false)] };
        for &(name, gpu) in sides {
            for projection in [Projection::None, Projection::Psd] {
                let solved = run(make(gpu).as_mut(), projection, false);
                let resumed = run(make(gpu).as_mut(), projection, true);
                assert_eq!(resumed, solved, "{name}, curvature {projection:?}");
            }
        }
    }

    /// A positive definite stretch Hessian is left as it is, however stiff: a body 2^32 times
    /// as stiff and as dense (8.6e13 Pa) has the same iterates, and its condensed matrices are
    /// 2^32 times the first body's, bit for bit, as f32 scales by a power of two exactly where
    /// nothing overflows. The definiteness test's determinants, the stiffness cubed, did: every
    /// tet of the stiff body took the Jacobi projection it did not need, and 1827 of 2529
    /// entries differed by its rounding.
    /// A budgeted mixed-FEM solve run whole on the device, in one readback, against the same
    /// solve with every decision made on the host, stage by stage: on the GPU's stages (the
    /// same f32 arithmetic, so the same steps) and on the CPU's.
    #[test]
    fn a_budgeted_mixed_solve_decides_on_the_device_as_the_host_does() {
        use crate::backend::{BudgetRequest, BudgetSolve, budget_solve_by_stages};
        use rand::SeedableRng;
        let Some(context) = context() else { return };
        let model = pinned_bar(Material::stable_neo_hookean(2e4, 0.3), 1000.0);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(23);
        let mut moved = |scale: f64| moved(&model, &mut rng, 0.95, scale);
        let (start, target, guess) = (moved(0.01), moved(0.03), moved(0.02));
        let nodes = [Node { weight: 1.0, theta: 1.0 }];
        let problem = StepProblem::undamped(&start, &target, &nodes, 1.0 / 30.0, 1.0);
        let guesses: [&[[f64; 3]]; 2] = [&guess, &start];
        let request = BudgetRequest {
            guesses: &guesses,
            mixed: true,
            iterations: 4,
            projection: Projection::Psd,
            solver: LinearSolver::Pcg,
            gradient_tolerance: 1e-9,
            relative_tolerance: 1e-6,
            max_linear_iterations: 200,
            steps: 5,
            extrapolate: false,
        };
        let run = |backend: &mut dyn Stages, on_host: bool| -> BudgetSolve {
            backend.begin_step(problem);
            let solve = if on_host {
                budget_solve_by_stages(backend, &request)
            } else {
                backend.budget_solve(&request)
            };
            assert!(backend.take_error().is_none());
            solve
        };
        let gpu = || super::super::GpuBackend::new(context.clone(), model.clone()).unwrap();
        let mut on_device = gpu();
        let before = on_device.device_counts().unwrap().readbacks;
        let device = run(&mut on_device, false);
        let readbacks = on_device.device_counts().unwrap().readbacks - before;
        let host = run(&mut gpu(), true);
        let cpu = run(&mut CpuBackend::new(model.clone()), false);
        let apart = |a: &BudgetSolve, b: &BudgetSolve| {
            a.x.iter()
                .zip(&b.x)
                .flat_map(|(p, q)| (0..3).map(move |i| (p[i] - q[i]).abs()))
                .fold(0.0, f64::max)
        };
        let moved_by = apart(&device, &BudgetSolve { x: start.clone(), ..BudgetSolve::default() });
        println!(
            "mixed budget 4 x 200: device {} its / {} CG, G {:.6e} -> {:.6e}, |g| {:.2e}, moved {moved_by:.3e} m; \
             host {} / {}, G {:.6e}; CPU {} / {}, G {:.6e}; device vs host {:.2e} m, vs CPU {:.2e} m; {readbacks} readback(s)",
            device.iterations,
            device.linear_iterations,
            device.start_objective,
            device.objective,
            device.gradient_norm,
            host.iterations,
            host.linear_iterations,
            host.objective,
            cpu.iterations,
            cpu.linear_iterations,
            cpu.objective,
            apart(&device, &host),
            apart(&device, &cpu),
        );
        assert_eq!(readbacks, 1, "the whole budgeted solve reads back once");
        assert_eq!(device.guess, Some(0));
        assert_eq!((device.iterations, host.iterations, cpu.iterations), (4, 4, 4));
        assert!(!device.stalled && !host.stalled);
        // The solve descends: G falls, and far more than the f32 round-off of its sums.
        assert!(device.objective < device.start_objective - 1e-3 * device.start_objective.abs());
        let relative = |a: f64, b: f64| (a - b).abs() / b.abs();
        assert!(
            relative(device.objective, host.objective) < 1e-5,
            "G {} vs {}",
            device.objective,
            host.objective
        );
        assert!(
            relative(device.objective, cpu.objective) < 1e-5,
            "G {} vs {}",
            device.objective,
            cpu.objective
        );
        assert!(apart(&device, &host) < 1e-6 && apart(&device, &cpu) < 1e-5 * moved_by);
        assert!(relative(device.gradient_norm, host.gradient_norm) < 1e-3);
    }

    /// The merits a budgeted solve evaluates on the device, at the iterate and over a batch of
    /// the line search's step lengths (positions and stretches), against the host's one at a
    /// time on the same GPU and the CPU twin's, on a bar with springs and colliders: the same
    /// differences from the iterate's merit.
    #[test]
    fn a_batch_of_merits_on_the_device_matches_them_one_at_a_time() {
        use crate::backend::cpu::line_search::step_lengths;
        use rand::SeedableRng;
        let Some(context) = context() else { return };
        let model = Arc::new(crate::backend::cpu::tests::mixed_model(Material::stable_neo_hookean(2e4, 0.3)));
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(31);
        let mut moved = |scale: f64| moved(&model, &mut rng, 0.9, scale);
        let (start, target, x) = (moved(0.01), moved(0.03), moved(0.02));
        let nodes = [Node { weight: 1.0, theta: 1.0 }];
        let problem = StepProblem::undamped(&start, &target, &nodes, 1.0 / 30.0, 1.0);
        let alphas = step_lengths(5, false);
        let mut cpu = CpuBackend::new(model.clone());
        let mut gpu = super::super::GpuBackend::new(context.clone(), model.clone()).unwrap();
        let mut merits = Vec::new();
        for backend in [&mut cpu as &mut dyn Stages, &mut gpu] {
            let done = first_direction(backend, problem, &x, &request(Projection::Psd));
            assert!(done.direction.is_some());
            let at: Vec<f64> = backend.mixed_merits(&alphas).iter().map(|m| m - done.merit).collect();
            merits.push(at);
        }
        let (value, candidates) = gpu.mixed_candidates_on_device(&alphas);
        let batched: Vec<f64> = candidates.iter().map(|c| c - value).collect();
        assert!(gpu.take_error().is_none());
        println!("merit - merit(0): CPU {:?}\n GPU {:?}\n batch {batched:?}", merits[0], merits[1]);
        for k in 0..alphas.len() {
            let scale = merits[0][0].abs();
            let (cpu, gpu) = (merits[0][k], merits[1][k]);
            assert!(
                (batched[k] - gpu).abs() < 1e-4 * scale,
                "step {}: batch {} vs one at a time {gpu}",
                alphas[k],
                batched[k]
            );
            assert!(
                (batched[k] - cpu).abs() < 1e-3 * scale,
                "step {}: batch {} vs CPU {cpu}",
                alphas[k],
                batched[k]
            );
        }
    }

    #[test]
    fn a_definite_stretch_hessian_is_not_projected_however_stiff() {
        use rand::SeedableRng;
        let Some(context) = context() else { return };
        let scale = 2f64.powi(32);
        let blocks: [Vec<f32>; 2] = [1.0, scale].map(|factor| {
            let model = pinned_bar(Material::stable_neo_hookean(2e4 * factor, 0.3), 1000.0 * factor);
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
            let mut moved = |scale: f64| moved(&model, &mut rng, 1.0, scale);
            let (start, target, x) = (moved(0.01), moved(0.02), moved(0.02));
            let nodes = [Node { weight: 1.0, theta: 1.0 }];
            let problem = StepProblem::undamped(&start, &target, &nodes, 1.0 / 30.0, 1.0);
            let mut gpu = super::super::GpuBackend::new(context.clone(), model.clone()).unwrap();
            first_direction(&mut gpu, problem, &x, &request(Projection::Psd));
            gpu.mixed_advance(0.5);
            gpu.mixed_direction(&request(Projection::Psd));
            assert!(gpu.take_error().is_none());
            gpu.read_linearization().1
        });
        // (A pinned vertex's block is the identity, at any scale.)
        let free = |k: &usize| blocks[0][9 * (k / 9)..][..9] != [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
        let entries: Vec<usize> = (0..blocks[0].len()).filter(free).collect();
        let scaled = |k: &&usize| (blocks[0][**k] * scale as f32).to_bits() == blocks[1][**k].to_bits();
        let differing = entries.iter().filter(|k| !scaled(k)).count();
        assert_eq!(differing, 0, "{differing} of {} entries differ", entries.len());
    }

    /// An iteration from a state with inverted neo-Hookean tets, whose stretches are outside
    /// the model's domain: no finite direction comes of it, and on both twins the iterate
    /// stays where it was (the GPU evaluates the line search's first candidates in place and
    /// goes back; going back by adding 0 times a NaN direction left NaN positions, and the
    /// retry with the projected curvature then linearized there).
    #[test]
    fn an_iteration_without_a_finite_direction_leaves_the_iterate() {
        use rand::SeedableRng;
        let Some(context) = context() else { return };
        let model = pinned_bar(Material::neo_hookean(2e4, 0.3), 1000.0);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(95);
        let mut x = moved(&model, &mut rng, 1.0, 0.005);
        // A free vertex pushed 1.5 cells down, through the tets below it.
        let v = (0..x.len()).find(|&v| !model.pinned[v] && model.rest[v][1] > 0.15).unwrap();
        x[v][1] -= 0.15;
        let nodes = [Node { weight: 1.0, theta: 1.0 }];
        let problem = StepProblem::undamped(&x, &x, &nodes, 1.0 / 30.0, 1.0);
        let mut cpu = CpuBackend::new(model.clone());
        let mut gpu = super::super::GpuBackend::new(context.clone(), model.clone()).unwrap();
        for (name, backend) in [("CPU", &mut cpu as &mut dyn Stages), ("GPU", &mut gpu)] {
            let done = first_direction(backend, problem, &x, &request(Projection::None));
            let finite = done.direction.is_some_and(|d| d.slope.is_finite());
            assert!(!finite, "{name}: a finite direction from inverted tets: {:?}", done.direction);
            let merits = backend.mixed_merits(&[0.5, 1.0]);
            let mut after = vec![[0.0; 3]; x.len()];
            backend.read_iterate(&mut after);
            assert!(
                after.iter().flatten().all(|c| c.is_finite()),
                "{name}: non-finite positions (merits {merits:?})"
            );
            let gap = (x.iter().zip(&after))
                .flat_map(|(a, b)| (0..3).map(move |i| (a[i] - b[i]).abs()))
                .fold(0.0, f64::max);
            // The GPU keeps positions in f32.
            assert!(gap <= 1e-7, "{name}: the iterate moved by {gap:e} m");
        }
    }

    /// Along a long enough step a neo-Hookean body's positions or stretches invert an element,
    /// where its energy is infinite: both twins' merits turn `+inf` at the same step lengths
    /// (the line search stops short of them), and agree where finite. The iterate is squeezed
    /// to half its height, so that a step of 0.1 to 4 crosses the domain's edge.
    #[test]
    fn merits_turn_infinite_at_the_same_steps_past_neo_hookeans_domain() {
        use rand::SeedableRng;
        let Some(context) = context() else { return };
        let model = pinned_bar(Material::neo_hookean(2e4, 0.3), 1000.0);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(90);
        let (start, target) = (moved(&model, &mut rng, 1.0, 0.01), moved(&model, &mut rng, 1.0, 0.03));
        // Squeezed to half its height.
        let x: Vec<[f64; 3]> =
            moved(&model, &mut rng, 1.0, 0.01).iter().map(|p| [p[0], 0.5 * p[1], p[2]]).collect();
        let nodes = [Node { weight: 1.0, theta: 1.0 }];
        let problem = StepProblem::undamped(&start, &target, &nodes, 1.0 / 30.0, 1.0);
        let request = request(Projection::Psd);
        let alphas: Vec<f64> = (1..=40).map(|k| 0.1 * k as f64).collect();
        let mut cpu = CpuBackend::new(model.clone());
        let mut gpu = super::super::GpuBackend::new(context.clone(), model.clone()).unwrap();
        let mut merits = Vec::new();
        for backend in [&mut cpu as &mut dyn Stages, &mut gpu] {
            first_direction(backend, problem, &x, &request).direction.expect("a direction");
            merits.push(backend.mixed_merits(&alphas));
            assert!(backend.take_error().is_none());
        }
        let (c, g) = (&merits[0], &merits[1]);
        let first_infinite = |m: &[f64]| m.iter().position(|m| m.is_infinite()).map(|k| alphas[k]);
        println!(
            "merits infinite from a step of {:?} (CPU) and {:?} (GPU)",
            first_infinite(c),
            first_infinite(g)
        );
        assert!(c.iter().any(|m| m.is_infinite()), "no step in {alphas:?} leaves the domain: {c:?}");
        for k in 0..alphas.len() {
            assert_eq!(
                c[k].is_infinite(),
                g[k].is_infinite(),
                "alpha {}: CPU {} GPU {}",
                alphas[k],
                c[k],
                g[k]
            );
            if c[k].is_finite() {
                assert!(
                    (c[k] - g[k]).abs() <= 1e-5 * c[k].abs().max(1.0),
                    "alpha {}: CPU {} GPU {}",
                    alphas[k],
                    c[k],
                    g[k]
                );
            }
        }
    }
}
