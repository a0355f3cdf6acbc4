//! Stage `mixed`: the per-element part of the mixed-FEM SQP iteration (mixed-fem-sqp.md
//! §3.3-3.6), for the tets of a step objective with one quadrature node `(c, theta)`.
//!
//! Each tet carries a symmetric stretch `s` (six numbers) besides the positions, tied to
//! them by the constraint `s(F) = s`, `s(F)` the signed polar stretch of `F` at the node. With
//! `J = d s(F) / dx` (6 x 12, `theta` included), `H` the PSD-projected Hessian of `psi` at `s`,
//! `g` its gradient and `a = c V` the tet's weight, the SQP step condenses statically to the
//! tet's share of
//!
//! `(A + sum a (J^T H J + C)) dx = -grad(vertex terms) - sum a J^T (g + H (s(F) - s))`,
//!
//! `C` the constraint's curvature in the Lagrangian's x-Hessian, `d^2 (-m . s(F)) / dx^2` for
//! the multipliers `m` of the last step taken (`stretch_curvature`). The paper drops it (keeping
//! only the mass-like block `A`); without it the iteration converges linearly, at 0.4-0.65 an
//! iteration on a soft hanging bar, where with it SQP converges as Newton does (that bar's
//! steps: 23-25 iterations to 4-5). Exact, it can make the system indefinite; the solver
//! then takes its non-negative part for that iteration (`Projection::Psd`), which keeps the
//! system positive definite.
//!
//! then `ds = s(F) - s + J dx` and the multiplier `m = Sym lambda = -(g + H ds)` locally.
//! The line search runs on the paper's merit, the Lagrangian with the new multipliers held:
//! `phi = vertex terms + sum a (psi(s) - m . c)`, `c = s(F) - s`. Its slope along `(dx, ds)` is
//! `-dx^T (A + sum a C) dx - sum a ds^T H ds`, negative whenever `A + sum a C` is definite (so
//! always with `C`'s non-negative part), also for an inexact CG solve started from zero (its
//! residual is orthogonal to `dx`). It charges a violated
//! constraint only through the multipliers, not quadratically: a stiff body may then take a
//! whole rotation in one step and straighten its stretch in the next, where a quadratic
//! penalty (tried: `+ 1/2 c^T H c`) cuts the step as Newton's energy does; on a hinged bar of
//! E 1e12 that took 2.5x the iterations and froze its swing when capped.

use glam::{DMat3, DQuat, DVec3};
use rayon::prelude::*;

use super::element::{deformation_gradient, point};
use crate::backend::topology::upper;
use crate::material::stretch::{
    Mat6, StretchCurvature, Sym6, signed_polars, signed_stretch, stretch_curvature, stretch_derivative,
    sym_matrix, sym6,
};
use crate::material::{Elastic, Projection};
use crate::math::lanes::{Lane, Lanes};
use crate::math::symmetric_eigen3_from;
use crate::model::Model;
use crate::objective::Node;

/// Tets per work item. Fewer than the element pass's 256: a tet costs more here, and a
/// game-sized body must still split evenly over the cores (2 160 tets are 34 items, not 9,
/// which left one of two cores a ninth idle).
const CHUNK: usize = 64;

/// One tet's linearization, kept for the local update and the line search.
#[derive(Clone, Copy, Debug, Default)]
struct Linearized {
    /// `d s(F) / d x_corner` (columns `3 corner + axis`), times `theta`.
    jacobian: [[f64; 12]; 6],
    /// `s(F)` at the iterate.
    stretch_of_x: Sym6,
    /// `psi''(s)`, PSD-projected.
    hessian: Mat6,
    /// `psi(s)`.
    energy: f64,
    /// `psi'(s)`.
    gradient: Sym6,
    /// `psi'(s(F))`: the tet's stress as the displacement formulation sees it.
    gradient_of_x: Sym6,
    /// The step of `s`.
    step: Sym6,
    /// `m = Sym lambda`, the multipliers of the step's constraints.
    multiplier: Sym6,
    /// The multipliers of the last step taken: the stress of the constraint's curvature (a
    /// direction thrown away, to be solved for again projected, leaves them).
    accepted: Sym6,
    /// The eigenvectors of `s(F)` at the last linearization: the next eigensolve's warm start.
    eigenvectors: DMat3,
}

/// A tet's signed polar decomposition `F = R S` at some positions: `R` as the matrix the
/// linearization uses and as the quaternion that warm-starts the next solve (not the same
/// bits where the rotation came from the SVD fallback).
#[derive(Clone, Copy, Debug, Default)]
struct Polar {
    stretch: Sym6,
    rotation: DMat3,
    quaternion: DQuat,
}

/// The tets' stretches and their linearization.
#[derive(Clone, Debug, Default)]
pub(crate) struct MixedElements {
    /// `s`, per tet: the solver's variable, kept from step to step as the warm start.
    pub stretch: Vec<Sym6>,
    /// The closest rotations of the last linearization (warm starts).
    rotations: Vec<DQuat>,
    linearized: Vec<Linearized>,
    /// The decompositions at the full step, from the merit at `alpha = 1`: the next
    /// linearization's, if the line search takes that step (it mostly does), so that it
    /// need not solve for the rotations again.
    full_step: Vec<Polar>,
    /// Where `full_step` stands.
    full_step_state: FullStep,
    /// The iterate and node position at which the stretches were left.
    left_at: Option<(Vec<[f64; 3]>, f64)>,
}

/// What [`MixedElements::full_step`] holds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
enum FullStep {
    #[default]
    Stale,
    /// The decompositions at the current linearization's full step.
    Evaluated,
    /// The decompositions at the iterate: the full step was taken.
    Taken,
}

// The small helpers below are inlined into the AVX2 kernels that call them.

#[inline(always)]
fn add(a: &Sym6, b: &Sym6, scale: f64) -> Sym6 {
    sym6(|k| a[k] + scale * b[k])
}

#[inline(always)]
fn dot(a: &Sym6, b: &Sym6) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[inline(always)]
fn times(h: &Mat6, v: &Sym6) -> Sym6 {
    sym6(|k| dot(&h[k], v))
}

/// `J v` for the tet's corners' values `v`.
#[inline(always)]
fn jacobian_times(jacobian: &[[f64; 12]; 6], tet: [u32; 4], v: &[[f64; 3]]) -> Sym6 {
    sym6(|k| {
        (0..4).map(|a| (0..3).map(|i| jacobian[k][3 * a + i] * v[tet[a] as usize][i]).sum::<f64>()).sum()
    })
}

impl MixedElements {
    /// Makes the stretches the warm start for a solve whose node is `node` and whose step
    /// starts at `start`: kept where the last solve left them at `start`, else `s(F)` there.
    pub(crate) fn begin(&mut self, model: &Model, start: &[[f64; 3]], node: Node) {
        let tets = model.tets.len();
        self.full_step_state = FullStep::Stale;
        if self.stretch.len() == tets
            && self.left_at.as_ref().is_some_and(|(x, theta)| x.as_slice() == start && *theta == node.theta)
        {
            return;
        }
        // The last rotations, where there are any, are the best guess there is (a state set
        // by the application is mostly near the last one): from the identity, each tet's
        // rotation takes several times the iterations.
        if self.rotations.len() != tets {
            self.rotations = vec![DQuat::IDENTITY; tets];
            self.linearized = vec![Linearized::default(); tets];
            self.full_step = vec![Polar::default(); tets];
        }
        self.stretch = (0..tets)
            .into_par_iter()
            .zip(self.rotations.par_iter_mut())
            .map(|(e, rotation)| {
                let beta = model.tet_rest[e].shape_gradients.map(DVec3::from);
                let z = model.tets[e].map(|v| DVec3::from(start[v as usize]));
                signed_stretch(&deformation_gradient(&z, &beta), rotation)
            })
            .collect();
    }

    /// Records that the stretches belong with the iterate `x`.
    pub(crate) fn leave_at(&mut self, x: &[[f64; 3]], node: Node) {
        match &mut self.left_at {
            Some((at, theta)) if at.len() == x.len() => {
                at.copy_from_slice(x);
                *theta = node.theta;
            }
            _ => self.left_at = Some((x.to_vec(), node.theta)),
        }
    }

    /// Linearizes every tet at the iterate `x`: the displacement formulation's corner
    /// gradients into `corners` (`a J^T psi'(s(F))`, for the convergence test) and, when
    /// `condense` (a step is to be solved for), the condensed system's into `condensed`
    /// (`a J^T (g + H (s(F) - s))`) and its Hessian blocks `a (J^T H J + C)` into `blocks`
    /// (ten upper blocks per tet), `C` the stretch's curvature under the multipliers of the
    /// last step taken, exact or its non-negative part as `condense` says. Returns the tets' energy `sum a psi(s(F))`,
    /// the displacement formulation's.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn linearize(
        &mut self,
        model: &Model,
        x: &[[f64; 3]],
        start: &[[f64; 3]],
        node: Node,
        corners: &mut [[f64; 3]],
        condensed: &mut [[f64; 3]],
        blocks: &mut [[f64; 9]],
        condense: Option<Projection>,
    ) -> f64 {
        let stretch = &self.stretch;
        let full_step = (self.full_step_state == FullStep::Taken).then_some(self.full_step.as_slice());
        let partial: Vec<f64> = self
            .linearized
            .par_chunks_mut(CHUNK)
            .zip(self.rotations.par_chunks_mut(CHUNK))
            .zip(corners.par_chunks_mut(4 * CHUNK))
            .zip(condensed.par_chunks_mut(4 * CHUNK))
            .zip(blocks.par_chunks_mut(10 * CHUNK))
            .enumerate()
            .map(|(c, ((((linearized, rotations), corners), condensed), blocks))| {
                let first = c * CHUNK;
                let decomposed = full_step.map(|polar| &polar[first..first + linearized.len()]);
                let chunk = Chunk { first, linearized, rotations, decomposed, corners, condensed, blocks };
                linearize_chunk(model, stretch, &At { x, start, node, condense }, chunk)
            })
            .collect();
        self.full_step_state = FullStep::Stale;
        partial.iter().sum()
    }

    /// The local solves after the global one: `ds` and the multipliers from the position step
    /// `dx`, with what the line search needs of the tets, in one pass: their part of the
    /// merit's slope along `(dx, ds)` apart from the displacement gradient's `grad . dx`,
    /// `sum a ((-psi'(s(F)) - m) . J dx + (g + m) . ds)`, and of the merit at the iterate and
    /// after the full step, whose positions are `full` (the same values as
    /// [`merit`](Self::merit) at `alpha = 0` and `1`). The full step's decompositions are
    /// kept for the next linearization.
    pub(crate) fn local_update(
        &mut self,
        model: &Model,
        at: (&[[f64; 3]], Node),
        dx: &[[f64; 3]],
        full: &[[f64; 3]],
    ) -> LocalUpdate {
        let (start, node) = at;
        let Self { stretch, rotations, linearized, full_step, .. } = self;
        let local_step = LocalStep { stretch, rotations, start, node, dx, full };
        let partial: Vec<LocalUpdate> = linearized
            .par_chunks_mut(CHUNK)
            .zip(full_step.par_chunks_mut(CHUNK))
            .enumerate()
            .map(|(c, (linearized, full_step))| {
                local_chunk(model, &local_step, LocalChunk { first: c * CHUNK, linearized, full_step })
            })
            .collect();
        self.full_step_state = FullStep::Evaluated;
        partial.iter().fold(LocalUpdate::default(), |a, b| LocalUpdate {
            slope: a.slope + b.slope,
            merit: a.merit + b.merit,
            full_step_merit: a.full_step_merit + b.full_step_merit,
        })
    }

    /// The tets' part of the merit at `x` (the iterate moved by `alpha` along the step) and
    /// `s + alpha ds`: `sum a (psi(s) - m . c)`; `+inf` where a stretch leaves its model's
    /// domain. The rotations start warm from the linearization's and are not kept.
    pub(crate) fn merit(
        &self,
        model: &Model,
        x: &[[f64; 3]],
        start: &[[f64; 3]],
        node: Node,
        alpha: f64,
    ) -> f64 {
        let partial: Vec<f64> = self
            .linearized
            .par_chunks(CHUNK)
            .enumerate()
            .map(|(c, linearized)| {
                let mut merit = 0.0;
                for (local, lin) in linearized.iter().enumerate() {
                    let e = c * CHUNK + local;
                    // At the iterate itself, the linearization's stretch: solving for the
                    // rotation again from its converged value moves it by round-off.
                    let stretch_of_x = if alpha == 0.0 {
                        lin.stretch_of_x
                    } else {
                        signed_stretch(&deformation_at(model, e, x, start, node), &mut { self.rotations[e] })
                    };
                    let weight = node.weight * model.tet_rest[e].volume;
                    merit += merit_term(
                        &model.tet_material[e],
                        weight,
                        lin,
                        &self.stretch[e],
                        &stretch_of_x,
                        alpha,
                    );
                }
                merit
            })
            .collect();
        partial.iter().sum()
    }

    /// Drops the full step's decompositions, so that the next linearization makes its own;
    /// whether there were any for it to use.
    #[cfg(test)]
    pub(crate) fn forget_full_step(&mut self) -> bool {
        std::mem::take(&mut self.full_step_state) == FullStep::Taken
    }

    /// `s += alpha ds`, with the iterate moved to `x + alpha dx` (`vector::axpy`, the same
    /// expression as the merit's `vector::offset`, so that at `alpha = 1` the positions are
    /// bit for bit those the full step's decompositions were made at).
    pub(crate) fn advance(&mut self, alpha: f64) {
        for (s, lin) in self.stretch.iter_mut().zip(&mut self.linearized) {
            *s = add(s, &lin.step, alpha);
            lin.accepted = lin.multiplier;
        }
        self.full_step_state = if alpha == 1.0 && self.full_step_state == FullStep::Evaluated {
            FullStep::Taken
        } else {
            FullStep::Stale
        };
    }
}

/// What [`MixedElements::local_update`] sums over the tets.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LocalUpdate {
    /// The merit's slope, less the displacement gradient's part.
    pub slope: f64,
    /// The merit at the iterate.
    pub merit: f64,
    /// The merit after the full step.
    pub full_step_merit: f64,
}

/// What the local update reads: the stretches and the iterate's rotations, the step's start
/// and node, the position step and the full step's positions.
struct LocalStep<'a> {
    stretch: &'a [Sym6],
    rotations: &'a [DQuat],
    start: &'a [[f64; 3]],
    node: Node,
    dx: &'a [[f64; 3]],
    full: &'a [[f64; 3]],
}

/// A run of tets from `first`: their linearizations and full-step decompositions.
struct LocalChunk<'a> {
    first: usize,
    linearized: &'a mut [Linearized],
    full_step: &'a mut [Polar],
}

/// [`MixedElements::local_update`] on one chunk: its tets' sums.
fn local_chunk(model: &Model, step: &LocalStep, chunk: LocalChunk) -> LocalUpdate {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { local_chunk_avx2(model, step, chunk) };
    }
    local_chunk_with::<Lanes<BATCH>>(model, step, chunk)
}

/// [`local_chunk_with`] compiled for AVX2, the batched polar decompositions' lanes an AVX
/// register.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn local_chunk_avx2(model: &Model, step: &LocalStep, chunk: LocalChunk) -> LocalUpdate {
    local_chunk_with::<crate::math::lanes::avx::Avx>(model, step, chunk)
}

#[inline(always)]
fn local_chunk_with<L: Lane<BATCH>>(model: &Model, step: &LocalStep, chunk: LocalChunk) -> LocalUpdate {
    let LocalStep { stretch, rotations, start, node, dx, full } = *step;
    let LocalChunk { first: chunk_first, linearized, full_step } = chunk;
    let mut sums = LocalUpdate::default();
    let batches = linearized.chunks_mut(BATCH).zip(full_step.chunks_mut(BATCH));
    for (b, (linearized, full_step)) in batches.enumerate() {
        let first = chunk_first + b * BATCH;
        // The full step's decompositions, a batch at a time (lanes past the end
        // repeat the last tet).
        let mut f = [DMat3::IDENTITY; BATCH];
        let mut quaternions = [DQuat::IDENTITY; BATCH];
        for l in 0..BATCH {
            let e = first + l.min(linearized.len() - 1);
            f[l] = deformation_at(model, e, full, start, node);
            quaternions[l] = rotations[e];
        }
        let decomposed = signed_polars::<BATCH, L>(&f, &mut quaternions);
        for (l, (lin, polar)) in linearized.iter_mut().zip(full_step).enumerate() {
            let e = first + l;
            let s = &stretch[e];
            let j_dx = jacobian_times(&lin.jacobian, model.tets[e], dx);
            lin.step = add(&add(&lin.stretch_of_x, s, -1.0), &j_dx, 1.0);
            let h_step = times(&lin.hessian, &lin.step);
            lin.multiplier = sym6(|k| -(lin.gradient[k] + h_step[k]));
            let along_x = sym6(|k| -lin.gradient_of_x[k] - lin.multiplier[k]);
            let along_s = sym6(|k| lin.gradient[k] + lin.multiplier[k]);
            let weight = node.weight * model.tet_rest[e].volume;
            sums.slope += weight * (dot(&along_x, &j_dx) + dot(&along_s, &lin.step));
            let material = &model.tet_material[e];
            sums.merit += merit_term(material, weight, lin, s, &lin.stretch_of_x, 0.0);
            let (stretch, rotation) = decomposed[l];
            *polar = Polar { stretch, rotation, quaternion: quaternions[l] };
            sums.full_step_merit += merit_term(material, weight, lin, s, &stretch, 1.0);
        }
    }
    sums
}

/// Tet `e`'s deformation gradient at the positions `x` and the node.
#[inline(always)]
fn deformation_at(model: &Model, e: usize, x: &[[f64; 3]], start: &[[f64; 3]], node: Node) -> DMat3 {
    let rest = &model.tet_rest[e].shape_gradients;
    let [a, b, c, d] = model.tets[e];
    // Spelled out: `[T; 4]::map`'s closures were left out of line here.
    let beta = [DVec3::from(rest[0]), DVec3::from(rest[1]), DVec3::from(rest[2]), DVec3::from(rest[3])];
    let corners = [
        point(x, start, a, node.theta),
        point(x, start, b, node.theta),
        point(x, start, c, node.theta),
        point(x, start, d, node.theta),
    ];
    deformation_gradient(&corners, &beta)
}

/// A tet's term of the merit at `s + alpha ds`, its weight `a` and its stretch `s(F)` at the
/// moved positions given: `a (psi(s + alpha ds) - m . (s(F) - s - alpha ds))`; `+inf` where
/// `s(F)` leaves the model's domain.
#[inline(always)]
fn merit_term(
    material: &Elastic,
    weight: f64,
    lin: &Linearized,
    s: &Sym6,
    stretch_of_x: &Sym6,
    alpha: f64,
) -> f64 {
    // The positions' own energy must stay defined too: a capped solve whose `s` is still
    // positive could otherwise end on an element that neo-Hookean calls inverted.
    if !material.defined_at(stretch_of_x) {
        return f64::INFINITY;
    }
    let moved = add(s, &lin.step, alpha);
    let gap = add(stretch_of_x, &moved, -1.0);
    // At `alpha = 0`, `psi(s)` is the linearization's (the same function, the same bits).
    let energy = if alpha == 0.0 { lin.energy } else { material.symmetric_energy(&moved) };
    weight * (energy - dot(&lin.multiplier, &gap))
}

/// Where the tets are linearized: the iterate, the step's start and the node; and whether
/// the condensed system is wanted, with its stretch curvature exact or projected.
struct At<'a> {
    x: &'a [[f64; 3]],
    start: &'a [[f64; 3]],
    node: Node,
    condense: Option<Projection>,
}

/// A run of tets from `first` and their slices of the linearization's outputs.
struct Chunk<'a> {
    first: usize,
    linearized: &'a mut [Linearized],
    rotations: &'a mut [DQuat],
    /// The decompositions at `x`, where the merit already made them.
    decomposed: Option<&'a [Polar]>,
    corners: &'a mut [[f64; 3]],
    condensed: &'a mut [[f64; 3]],
    blocks: &'a mut [[f64; 9]],
}

/// [`MixedElements::linearize`] on one chunk: returns its tets' energy.
fn linearize_chunk(model: &Model, stretch: &[Sym6], at: &At, chunk: Chunk) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { linearize_chunk_avx2(model, stretch, at, chunk) };
    }
    linearize_chunk_with::<Lanes<BATCH>>(model, stretch, at, chunk)
}

/// [`linearize_chunk_with`] compiled for AVX2: the twelve columns of a tet's Jacobian
/// are three vectors of four, and the batched polar decompositions' lanes an AVX register.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn linearize_chunk_avx2(model: &Model, stretch: &[Sym6], at: &At, chunk: Chunk) -> f64 {
    linearize_chunk_with::<crate::math::lanes::avx::Avx>(model, stretch, at, chunk)
}

/// Tets whose polar decompositions, and stretches' eigen-decompositions, are solved for
/// together, lane by lane (AVX2's four).
const BATCH: usize = 4;

#[inline(always)]
fn linearize_chunk_with<L: Lane<BATCH>>(model: &Model, stretch: &[Sym6], at: &At, chunk: Chunk) -> f64 {
    let At { x, start, node, condense } = *at;
    let Chunk { first, linearized, rotations, decomposed, corners, condensed, blocks } = chunk;
    let mut energy = 0.0;
    let mut batch = 0;
    while batch < linearized.len() {
        let count = (linearized.len() - batch).min(BATCH);
        // The batch's decompositions, then (for a step to solve for) the eigen-decompositions
        // of their stretches, lane by lane, each from its tet's last eigenvectors. Lanes past
        // the chunk's end repeat its last tet.
        let mut polar = [(Sym6::default(), DMat3::IDENTITY); BATCH];
        match decomposed {
            Some(decomposed) => {
                for (l, polar) in polar.iter_mut().enumerate() {
                    let local = batch + l.min(count - 1);
                    rotations[local] = decomposed[local].quaternion;
                    *polar = (decomposed[local].stretch, decomposed[local].rotation);
                }
            }
            None => {
                let mut f = [DMat3::IDENTITY; BATCH];
                let mut quaternions = [DQuat::IDENTITY; BATCH];
                for l in 0..BATCH {
                    let local = batch + l.min(count - 1);
                    f[l] = deformation_at(model, first + local, x, start, node);
                    quaternions[l] = rotations[local];
                }
                polar = signed_polars::<BATCH, L>(&f, &mut quaternions);
                rotations[batch..batch + count].copy_from_slice(&quaternions[..count]);
            }
        }
        // An `if`, not `map`: a closure left out of line is compiled without AVX2.
        let eigen = if condense.is_some() {
            let mut matrices = [DMat3::IDENTITY; BATCH];
            let mut warm = [DMat3::IDENTITY; BATCH];
            for l in 0..BATCH {
                matrices[l] = sym_matrix(&polar[l].0);
                warm[l] = linearized[batch + l.min(count - 1)].eigenvectors;
            }
            Some(symmetric_eigen3_from(&matrices, &warm))
        } else {
            None
        };
        for l in 0..count {
            let local = batch + l;
            let eigen = eigen.as_ref().map(|eigen| &eigen[l]);
            let outputs = (&mut corners[4 * local..4 * local + 4], &mut condensed[4 * local..4 * local + 4]);
            let blocks = &mut blocks[10 * local..10 * local + 10];
            energy += linearize_tet(
                model,
                stretch,
                at,
                first + local,
                &mut linearized[local],
                polar[l],
                eigen,
                outputs,
                blocks,
            );
        }
        batch += count;
    }
    energy
}

/// One tet of [`linearize_chunk_with`], at its signed polar decomposition `(S, R)` and,
/// for a step to solve for, `S`'s eigen-decomposition: returns its energy.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn linearize_tet(
    model: &Model,
    stretch: &[Sym6],
    at: &At,
    e: usize,
    lin: &mut Linearized,
    (stretch_of_x, rotation): (Sym6, DMat3),
    eigen: Option<&([f64; 3], DMat3)>,
    (corners, condensed): (&mut [[f64; 3]], &mut [[f64; 3]]),
    blocks: &mut [[f64; 9]],
) -> f64 {
    let (node, condense) = (at.node, at.condense);
    let rest = &model.tet_rest[e];
    let material = &model.tet_material[e];
    // Loops, not `map`: a closure left out of line is compiled without AVX2.
    let mut beta = [DVec3::ZERO; 4];
    for a in 0..4 {
        beta[a] = DVec3::from(rest.shape_gradients[a]);
    }
    let ds_df = stretch_derivative(&stretch_of_x, &rotation);
    // dF = theta e_i beta_a^T: column 3a + i of J is theta sum_j dS/dF[3i + j] beta_a[j].
    // The shape gradients sum to zero, so corner 3's columns are minus the sum of the others'.
    let jacobian = &mut lin.jacobian;
    for (k, row) in jacobian.iter_mut().enumerate() {
        for i in 0..3 {
            let d = DVec3::from_slice(&ds_df[k][3 * i..3 * i + 3]) * node.theta;
            let columns = [d.dot(beta[0]), d.dot(beta[1]), d.dot(beta[2])];
            row[i] = columns[0];
            row[3 + i] = columns[1];
            row[6 + i] = columns[2];
            row[9 + i] = -(columns[0] + columns[1] + columns[2]);
        }
    }
    let at_x = material.symmetric_derivatives(&stretch_of_x, None);
    let weight = node.weight * rest.volume;
    // Without a solve to follow, the condensed system's residual is left zero.
    let mut residual = [0.0; 6];
    if let (Some(projection), Some(eigen)) = (condense, eigen) {
        let s = &stretch[e];
        let at_s = material.symmetric_derivatives(s, Some(Projection::Psd));
        residual = add(&at_s.gradient, &times(&at_s.hessian, &add(&stretch_of_x, s, -1.0)), 1.0);
        // The curvature's stress is the multipliers of the last step taken (SQP's
        // Lagrangian Hessian; the last time step's at a step's first iteration, none at the
        // first step's). psi'(s) would serve a soft body as well, but not a stiff one: on
        // 1e14 Pa inclusions it is large wherever s is off by round-off (a step that should
        // have lost energy gained 8x its start).
        lin.eigenvectors = eigen.1;
        let curvature = (&stretch_curvature(eigen, &rotation, &sym6(|k| -lin.accepted[k])), projection);
        condensed_blocks(jacobian, &at_s.hessian, curvature, &beta, node.theta, weight, blocks);
        lin.hessian = at_s.hessian;
        lin.energy = at_s.energy;
        lin.gradient = at_s.gradient;
    }
    // a J^T v for v = psi'(s(F)) and for the condensed residual: combinations of J's rows.
    let (mut plain, mut mixed) = ([0.0; 12], [0.0; 12]);
    for k in 0..6 {
        let (g, r) = (weight * at_x.gradient[k], weight * residual[k]);
        for c in 0..12 {
            plain[c] += g * jacobian[k][c];
            mixed[c] += r * jacobian[k][c];
        }
    }
    for a in 0..4 {
        corners[a] = [plain[3 * a], plain[3 * a + 1], plain[3 * a + 2]];
        condensed[a] = [mixed[3 * a], mixed[3 * a + 1], mixed[3 * a + 2]];
    }
    // Stored last: right after the material's derivatives, copying the gradient read across
    // the two stores that had just made it, and waited for them (a failed store forwarding,
    // 2-4 % of the linearization's samples).
    lin.stretch_of_x = stretch_of_x;
    lin.gradient_of_x = at_x.gradient;
    weight * at_x.energy
}

/// The ten upper blocks of `w (J^T H J + C)`, `C` the stretch's curvature (`projection`
/// says which form), as one sum over rows, `sum_k r_k^T (W r)_k`: `J`'s six rows with
/// `W = H`, then each kept pair's twist and flip rows `(D beta_a) theta` with `W` its 2x2
/// form. Only the first three corners' nine columns are multiplied: the shape gradients sum
/// to zero, so every row's fourth corner is minus the sum of the others, and so are the
/// fourth corner's blocks (by row and by column). Whole rows vectorize, where the
/// curvature's blocks one by one did not. The diagonal blocks are made exactly symmetric.
#[inline(always)]
fn condensed_blocks(
    jacobian: &[[f64; 12]; 6],
    hessian: &Mat6,
    (curvature, projection): (&StretchCurvature, Projection),
    beta: &[DVec3; 4],
    theta: f64,
    weight: f64,
    blocks: &mut [[f64; 9]],
) {
    let (mut rows, mut weighted) = ([[0.0; 9]; 12], [[0.0; 9]; 12]);
    for k in 0..6 {
        rows[k].copy_from_slice(&jacobian[k][..9]);
        for l in 0..6 {
            let h = weight * hessian[k][l];
            for c in 0..9 {
                weighted[k][c] += h * jacobian[l][c];
            }
        }
    }
    let mut count = 6;
    let mut unrotated = [DVec3::ZERO; 3];
    for a in 0..3 {
        unrotated[a] = curvature.v.transpose() * beta[a] * theta;
    }
    for (p, pair) in curvature.pairs.iter().enumerate() {
        let form = pair.form(projection);
        if form == [[0.0; 2]; 2] {
            continue;
        }
        let (twist, flip) = (count, count + 1);
        for a in 0..3 {
            let (along_twist, along_flip) = curvature.directions_times(p, unrotated[a]);
            for i in 0..3 {
                rows[twist][3 * a + i] = along_twist[i];
                rows[flip][3 * a + i] = along_flip[i];
            }
        }
        for c in 0..9 {
            let (t, f) = (rows[twist][c], rows[flip][c]);
            weighted[twist][c] = weight * (form[0][0] * t + form[0][1] * f);
            weighted[flip][c] = weight * (form[1][0] * t + form[1][1] * f);
        }
        count += 2;
    }
    let mut product = [[0.0; 9]; 9];
    for (r, row) in product.iter_mut().enumerate() {
        for k in 0..count {
            let j = rows[k][r];
            for c in 0..9 {
                row[c] += j * weighted[k][c];
            }
        }
    }
    // The fourth corner's column of blocks, then its diagonal block.
    let mut last = [[[0.0; 3]; 3]; 4];
    for a in 0..3 {
        for i in 0..3 {
            for j in 0..3 {
                last[a][i][j] =
                    -(product[3 * a + i][j] + product[3 * a + i][3 + j] + product[3 * a + i][6 + j]);
                last[3][i][j] -= last[a][i][j];
            }
        }
    }
    // Entry by entry: a row's vectors do not line up with the blocks' thirds, and reading
    // them back in pieces that straddle two stores stalls on store forwarding.
    for a in 0..4 {
        for b in a..4 {
            let block = &mut blocks[upper(a, b, 4)];
            for i in 0..3 {
                for j in 0..3 {
                    // The diagonal blocks' lower triangles mirror their upper ones.
                    let (row, column) = if a == b && j < i { (j, i) } else { (i, j) };
                    block[3 * i + j] =
                        if b < 3 { product[3 * a + row][3 * b + column] } else { last[a][row][column] };
                }
            }
        }
    }
}
