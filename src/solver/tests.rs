//! Newton's guarantees: the objective never rises, every linear solver and Hessian policy
//! reaches the same minimizer, and the tolerance means what it says.

use std::sync::Arc;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{HessianPolicy, LinearSolver, Role, Solver};
use crate::backend::cpu::CpuBackend;
use crate::backend::{
    Deferral, DirectionReport, DirectionRequest, Linearization, NewtonDirection, Stages,
    newton_direction_by_stages,
};
use crate::material::{Material, Projection};
use crate::mesh::TetMesh;
use crate::model::Model;
use crate::objective::{Node, StepProblem};

/// Forwards to a backend and records the objective at every iterate Newton moves to. Its
/// linearizations may report their noise `noise` times larger (a GPU's f32 against f64), and
/// it may solve every direction, deferred or not.
struct Recording {
    inner: CpuBackend,
    pending: Vec<(f64, f64)>,
    accepted: Vec<f64>,
    noise: f64,
    defers: bool,
    /// Directions solved, and requests that deferred theirs.
    solves: usize,
    deferred: usize,
}

impl Recording {
    fn new(model: &Arc<Model>) -> Recording {
        Recording {
            inner: CpuBackend::new(model.clone()),
            pending: Vec::new(),
            accepted: Vec::new(),
            noise: 1.0,
            defers: true,
            solves: 0,
            deferred: 0,
        }
    }

    fn noisier(&self, linearization: Linearization) -> Linearization {
        Linearization {
            noise_floor: self.noise * linearization.noise_floor,
            gradient_floor: self.noise * linearization.gradient_floor,
            ..linearization
        }
    }
}

impl Stages for Recording {
    fn begin_step(&mut self, problem: StepProblem<'_>) {
        self.inner.begin_step(problem)
    }
    fn set_anchors(&mut self, anchors: &[crate::backend::Anchor]) {
        self.inner.set_anchors(anchors)
    }
    fn set_colliders(&mut self, colliders: &[crate::contact::Collider]) {
        self.inner.set_colliders(colliders)
    }
    fn dissipation(&mut self) -> f64 {
        self.inner.dissipation()
    }
    fn set_iterate(&mut self, x: &[[f64; 3]]) {
        self.inner.set_iterate(x)
    }
    fn read_iterate(&mut self, out: &mut [[f64; 3]]) {
        self.inner.read_iterate(out)
    }
    fn objective(&mut self) -> f64 {
        let value = self.inner.objective();
        self.accepted.push(value);
        value
    }
    fn linearize(&mut self, projection: Projection) -> Linearization {
        let linearization = self.inner.linearize(projection);
        self.noisier(linearization)
    }
    fn linearize_gradient(&mut self, projection: Projection) -> Linearization {
        let linearization = self.inner.linearize_gradient(projection);
        self.noisier(linearization)
    }
    fn newton_direction(&mut self, request: &DirectionRequest<'_>) -> NewtonDirection {
        let deferral = if self.defers { request.deferral } else { Deferral::Solve };
        self.deferred += usize::from(deferral == Deferral::Defer && request.solve);
        newton_direction_by_stages(self, &DirectionRequest { deferral, ..*request })
    }
    fn solve_direction(
        &mut self,
        solver: LinearSolver,
        tolerance: f64,
        max_iterations: usize,
    ) -> DirectionReport {
        self.solves += 1;
        self.inner.solve_direction(solver, tolerance, max_iterations)
    }
    fn use_negative_gradient(&mut self) -> DirectionReport {
        self.inner.use_negative_gradient()
    }
    fn local_global(
        &mut self,
        request: &crate::backend::LocalGlobalRequest,
    ) -> crate::backend::LocalGlobalReport {
        self.inner.local_global(request)
    }
    fn scale_direction(&mut self, factor: f64) {
        self.inner.scale_direction(factor)
    }
    fn candidate_objectives(&mut self, alphas: &[f64]) -> Vec<f64> {
        let values = self.inner.candidate_objectives(alphas);
        self.pending.extend(alphas.iter().copied().zip(values.iter().copied()));
        values
    }
    fn preferred_batch(&self) -> usize {
        self.inner.preferred_batch()
    }
    fn advance(&mut self, alpha: f64) {
        let value = self.pending.iter().find(|(a, _)| *a == alpha).map(|(_, v)| *v);
        self.accepted.push(value.expect("Newton advances only to an evaluated candidate"));
        self.pending.clear();
        self.inner.advance(alpha)
    }
    fn retreat(&mut self, fraction: f64) {
        self.pending.clear();
        self.inner.retreat(fraction)
    }
    fn potential(&mut self, x: &[[f64; 3]]) -> f64 {
        self.inner.potential(x)
    }
    fn potential_gradient(&mut self, x: &[[f64; 3]], out: &mut [[f64; 3]]) {
        self.inner.potential_gradient(x, out)
    }
    fn mixed_begin(&mut self) {
        self.inner.mixed_begin()
    }
    fn mixed_direction(
        &mut self,
        request: &crate::backend::DirectionRequest<'_>,
    ) -> crate::backend::MixedDirection {
        let deferral = if self.defers { request.deferral } else { Deferral::Solve };
        self.deferred += usize::from(deferral == Deferral::Defer && request.solve);
        let mut found = self.inner.mixed_direction(&DirectionRequest { deferral, ..*request });
        self.solves += usize::from(found.direction.is_some());
        found.linearization = self.noisier(found.linearization);
        found
    }
    fn mixed_merits(&mut self, alphas: &[f64]) -> Vec<f64> {
        self.inner.mixed_merits(alphas)
    }
    fn mixed_advance(&mut self, alpha: f64) {
        self.inner.mixed_advance(alpha)
    }
}

/// A hard backward-Euler step: a stiff bar, pinned at one end, far from equilibrium.
fn hard_step(material: Material, seed: u64) -> (Arc<Model>, Vec<[f64; 3]>, Vec<[f64; 3]>) {
    let mut model = Model::empty([0.0, -9.81, 0.0]);
    model.add_tet_body(&TetMesh::bar([6, 2, 2], [0.6, 0.2, 0.2]), &[material], 1000.0).unwrap();
    for v in 0..model.vertex_count() {
        model.pinned[v] = model.rest[v][0] < 1e-9;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let start: Vec<[f64; 3]> =
        model
            .rest
            .iter()
            .zip(&model.pinned)
            .map(|(p, &pinned)| {
                if pinned { *p } else { std::array::from_fn(|c| p[c] * 1.2 + rng.random_range(-0.03..0.03)) }
            })
            .collect();
    let target = start.iter().map(|p| [p[0], p[1] - 0.05, p[2]]).collect();
    (Arc::new(model), start, target)
}

fn solve(
    model: &Arc<Model>,
    start: &[[f64; 3]],
    target: &[[f64; 3]],
    settings: &Solver,
) -> (Vec<[f64; 3]>, Vec<f64>, super::SolveReport) {
    let (x, stages, report) = solve_with(Recording::new(model), start, target, settings);
    (x, stages.accepted, report)
}

fn solve_with(
    mut stages: Recording,
    start: &[[f64; 3]],
    target: &[[f64; 3]],
    settings: &Solver,
) -> (Vec<[f64; 3]>, Recording, super::SolveReport) {
    let nodes = [Node { weight: 1.0, theta: 1.0 }];
    stages.begin_step(StepProblem::undamped(start, target, &nodes, 1.0 / 30.0, 1.0));
    let crate::backend::Start::Known { objective: value, .. } =
        // The lower of the two; the last, the fallback, is never needed here.
        crate::backend::start_from_best_by_stages(&mut stages, &[start, target, start])
    else {
        panic!("both guesses are valid")
    };
    stages.accepted = vec![value];
    let report = settings.minimize(&mut stages, Role::Solve, Some(value));
    let mut x = vec![[0.0; 3]; start.len()];
    stages.read_iterate(&mut x);
    (x, stages, report)
}

#[test]
fn the_objective_never_rises_and_the_tolerance_holds() {
    for (k, material) in [
        Material::stvk(1e6, 0.3),
        Material::fixed_corotated(1e6, 0.3),
        Material::stable_neo_hookean(1e6, 0.45),
    ]
    .into_iter()
    .enumerate()
    {
        let (model, start, target) = hard_step(material, k as u64);
        let settings = Solver::newton().tolerance(1e-7);
        let (_, values, report) = solve(&model, &start, &target, &settings);
        assert!(report.converged, "case {k}: {report:?}");
        assert!(report.gradient_norm <= 1e-7);
        assert!(values.len() >= 3, "case {k}: a hard step takes several iterations");
        for w in values.windows(2) {
            // Rises are allowed only at round-off, where G's last digits are noise.
            assert!(w[1] <= w[0] + 1e-13 * w[0].abs(), "case {k}: objective rose from {} to {}", w[0], w[1]);
        }
    }
}

#[test]
fn every_linear_solver_and_hessian_policy_reaches_the_same_minimizer() {
    let (model, start, target) = hard_step(Material::stvk(1e6, 0.3), 7);
    let configurations = [
        Solver::newton().tolerance(1e-9),
        Solver::newton().tolerance(1e-9).linear_solver(LinearSolver::Cholesky),
        Solver::newton().tolerance(1e-9).hessian(HessianPolicy::AlwaysProject).max_iterations(200),
    ];
    let results: Vec<_> = configurations.iter().map(|s| solve(&model, &start, &target, s)).collect();
    for (k, (x, _, report)) in results.iter().enumerate() {
        assert!(report.converged, "configuration {k}: {report:?}");
        let difference = x
            .iter()
            .zip(&results[0].0)
            .flat_map(|(a, b)| (0..3).map(move |c| (a[c] - b[c]).abs()))
            .fold(0.0, f64::max);
        // Gradients below 1e-9 N on a system with stiffness ~1e5 N/m bound position error by ~1e-14 m;
        // 1e-10 m leaves room for the conditioning of the bar's bending modes.
        assert!(difference < 1e-10, "configuration {k} differs by {difference:e} m");
    }
    let (always, adaptive) = (results[2].2.iterations, results[0].2.iterations);
    println!("Newton iterations: exact Hessian where PD {adaptive}, always projected {always}");
    assert!(adaptive <= always, "the exact Hessian should never need more iterations here");
}

/// At a GPU's noise (f32's epsilon, 5e8 times f64's), Newton's last iterations are flat steps
/// at the gradient's noise, after which the next linearization usually ends the solve.
/// Deferring that linearization's solve changes nothing Newton does: the same iterates, bit
/// for bit, except that corotated's closest rotations, warm-started from the last evaluation,
/// move in their last bits when a deferred request linearizes twice. It saves the directions
/// the solve would have thrown away, and where Newton goes on after all, it gets its
/// direction from the same request.
#[test]
fn a_deferred_solve_changes_nothing_and_saves_the_directions_thrown_away() {
    deferring_changes_nothing(&Solver::newton().tolerance(1e-20), true);
}

/// The same for mixed FEM, whose GPU iteration also solves before the host sees the
/// gradient. There no bit moves at all: the resumed request solves from the linearization
/// the deferred one kept.
#[test]
fn a_deferred_mixed_solve_changes_nothing_and_saves_the_directions_thrown_away() {
    deferring_changes_nothing(&Solver::mixed_fem().tolerance(1e-20).max_iterations(100), false);
}

/// Solves hard steps with `settings` (a tolerance below f64's reach: each ends at round-off)
/// at an f32 GPU's noise, deferring solves and not: the same iterates, objectives and
/// iteration counts, except for corotated's last bits where `linearizes_twice`; each deferral
/// saved a solve or was asked for again, and both happened.
fn deferring_changes_nothing(settings: &Solver, linearizes_twice: bool) {
    let noise = f32::EPSILON as f64 / f64::EPSILON;
    let (mut saved, mut asked_again) = (0, 0);
    for (material, warm_started) in [
        (Material::stvk(1e6, 0.3), false),
        (Material::stable_neo_hookean(1e6, 0.45), false),
        (Material::corotated(1e6, 0.4), true),
    ] {
        let exact = !(warm_started && linearizes_twice);
        for seed in 0..4 {
            let (model, start, target) = hard_step(material.clone(), seed);
            let run = |defers: bool| {
                let stages = Recording { noise, defers, ..Recording::new(&model) };
                solve_with(stages, &start, &target, settings)
            };
            let (x_solved, solved, report_solved) = run(false);
            let (x_deferred, deferred, report_deferred) = run(true);
            let case = format!("{material:?}, seed {seed}");
            assert!(report_solved.round_off, "{case}: {report_solved:?}");
            let moved = x_deferred
                .iter()
                .zip(&x_solved)
                .flat_map(|(a, b)| (0..3).map(move |c| (a[c] - b[c]).abs()))
                .fold(0.0, f64::max);
            assert!(moved <= if exact { 0.0 } else { 1e-15 }, "{case}: the iterate moved {moved:e} m");
            assert_eq!(report_deferred.iterations, report_solved.iterations, "{case}");
            if exact {
                assert_eq!(deferred.accepted, solved.accepted, "{case}: the objectives moved");
                assert_eq!(report_deferred.linear_iterations, report_solved.linear_iterations, "{case}");
            }
            assert_eq!((solved.deferred, report_solved.resumed_iterations), (0, 0));
            // Each deferral either saved a solve or was asked again, and solved.
            let saving = solved.solves - deferred.solves;
            assert_eq!(saving + report_deferred.resumed_iterations, deferred.deferred, "{case}");
            saved += saving;
            asked_again += report_deferred.resumed_iterations;
        }
    }
    println!("directions saved {saved}, deferred and asked again {asked_again}");
    assert!(saved >= 6, "only {saved} directions saved");
    assert!(asked_again >= 1, "no deferred solve was asked for again: that path went untested");
}
