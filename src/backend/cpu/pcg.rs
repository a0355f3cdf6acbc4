//! Stage `pcg`: preconditioned conjugate gradients on the assembled Hessian, starting from
//! zero. The preconditioner is Jacobi (the GPU twin's), or on the CPU for
//! `LinearSolver::PcgProjective` the factored projective-dynamics matrix `M/h^2 + a L`, or
//! Jacobi with that matrix's coarse correction (`backend/coarse.rs`) where the factor is too
//! large. Following the optimization integrator, a direction of non-positive curvature ends
//! the solve: the last iterate is returned (or the right-hand side, if it happens on the first
//! iteration), which is still a descent direction for the Newton step.
//!
//! Each iteration is three passes over the vertices: (1) `Ap` and `p.Ap`; (2) the updates of
//! `x`, `r` and `z = P r` with `r.r` and `r.z`; (3) `p = z + beta p`. The GPU twin fuses (3)
//! into (1) — it forms `z + beta p` at each neighbour inside the product — to need two
//! dispatches; the values are the same (the same f64 expression here, per entry there).
//! Reductions are summed per fixed chunk and then in chunk order, so results are
//! bit-identical run to run whatever the thread count.

use rayon::prelude::*;

use super::global::GlobalSolve;
use super::hessian_product;
use crate::backend::coarse::CoarseCorrection;
use crate::backend::fsai::Fsai;
use crate::backend::topology::Topology;
use crate::objective::Coupling;

/// What `z = P r` applies.
pub(crate) enum Preconditioner<'a> {
    /// The inverse of the matrix's diagonal entries.
    Jacobi,
    /// `S^-1`, the factored local/global matrix: the elasticity's Laplacian, which a
    /// rotation of the body leaves unchanged, so it keeps preconditioning a bending body.
    Factored(&'a mut GlobalSolve),
    /// `G^T G ~ S^-1`, the sparse approximate inverse of the local/global matrix, with
    /// Jacobi's rows on a penalty contact set (empty: none), or the coarse correction of the
    /// same matrix where the GPU has one (a solve without contacts): the reference for the
    /// GPU twin's FSAI solves (the CPU solver itself uses the exact factor, or Jacobi and the
    /// coarse correction, whose `K` has the contacts' stiffness).
    #[cfg_attr(not(test), allow(dead_code))]
    Fsai { fsai: &'a Fsai, contact: &'a [bool], coarse: Option<&'a CoarseCorrection> },
    /// Jacobi plus the coarse correction of `backend/coarse.rs`: the two-level preconditioner
    /// of bodies too large for the factor.
    Coarse(&'a CoarseCorrection),
}

impl Preconditioner<'_> {
    /// `z = P r`, where `z` holds Jacobi's `r / diag(A)` and `jacobi` its `r . z`; returns
    /// `r . z` (`y` is scratch).
    fn apply(
        &mut self,
        topology: &Topology,
        r: &[[f64; 3]],
        y: &mut [[f64; 3]],
        z: &mut [[f64; 3]],
        inverse_diagonal: &[[f64; 3]],
        jacobi: f64,
    ) -> f64 {
        match self {
            Preconditioner::Jacobi => jacobi,
            Preconditioner::Factored(global) => apply_factor(global, r, z),
            Preconditioner::Fsai { fsai, contact, coarse } => {
                let rz = fsai.apply(topology, r, y, z, contact, inverse_diagonal);
                rz + coarse.map_or(0.0, |coarse| coarse.add(r, z))
            }
            Preconditioner::Coarse(coarse) => jacobi + coarse.add(r, z),
        }
    }
}

/// `z = S^-1 r` and `r . z`, where the preconditioner is a factor.
fn apply_factor(global: &mut GlobalSolve, r: &[[f64; 3]], z: &mut [[f64; 3]]) -> f64 {
    z.copy_from_slice(r);
    global.solve(z);
    r.iter().zip(z.iter()).map(|(r, z)| dot3(r, z)).sum()
}

/// Vertices per work item: large enough that fork-join overhead stays small next to the work.
const CHUNK: usize = 512;
/// Bodies below this many vertices run each pass on one core. Above it, up to `2 CHUNK`
/// vertices, a pass is split in two halves, and beyond, in chunks of `CHUNK` that let a late
/// core join as soon as it is up (2025 vertices in two chunks of 1024: 13 % slower than four
/// of 512). Since a step keeps the pool's workers polling (`sim::with_workers_awake`), the
/// second core costs no wake-up, and halves pay from a few hundred vertices on: the 637-vertex
/// bar's Newton iteration 2.23 -> 2.03 ms, its mixed-FEM iteration 3.54 -> 3.37 ms (2-core VM,
/// in turns), where before the polling workers one core was faster (60 -> 49 us a CG iteration).
const PARALLEL_VERTICES: usize = 128;

/// The chunk length for `n` vertices (a function of `n` alone, so that the reductions' order,
/// and the result's bits, do not depend on the thread count).
fn chunk_length(n: usize) -> usize {
    if n < PARALLEL_VERTICES {
        n.max(1)
    } else if n < 2 * CHUNK {
        n.div_ceil(2)
    } else {
        CHUNK
    }
}

/// Work vectors, kept between solves.
#[derive(Default)]
pub(crate) struct Scratch {
    r: Vec<[f64; 3]>,
    z: Vec<[f64; 3]>,
    p: Vec<[f64; 3]>,
    ap: Vec<[f64; 3]>,
    inverse_diagonal: Vec<[f64; 3]>,
    /// `G r`, between FSAI's two passes.
    y: Vec<[f64; 3]>,
}

impl Scratch {
    /// `b - A x` where the last solve stopped (its recurrence).
    pub(crate) fn residual(&self) -> &[[f64; 3]] {
        &self.r
    }

    /// Moves each free part of the solution `x` of the last solve by the translation that
    /// leaves no translational residual, `t = E^-1 U^T r` with `E = U^T A U` the sum of the
    /// part's vertex blocks (the elements' and Rayleigh's blocks have no translational part),
    /// and updates the residual. It minimizes the quadratic model over `x + U t`, so it never
    /// loses what CG found. A CG stopped at a relative residual that a stiff body's elastic
    /// forces dominate leaves gravity's pull, far under it, unresolved: a 1-cell bar with a
    /// 9e13 Pa inclusion, squashed, did not fall at all in 8 Newton iterations at h = 0.46 s
    /// (the GPU's split, `deflate` in shaders/pcg.wgsl, moves it 2.2 m, as it should).
    /// `groups` are the vertices' translation groups (`Model::translation_groups`).
    pub(crate) fn correct_translations(
        &mut self,
        x: &mut [[f64; 3]],
        vertex_blocks: &[[f64; 9]],
        groups: &[u32],
        group_count: usize,
    ) {
        use glam::{DMat3, DVec3};
        let mut sums = vec![(DMat3::ZERO, DVec3::ZERO); group_count];
        for ((&g, block), r) in groups.iter().zip(vertex_blocks).zip(&self.r) {
            if let Some((e, s)) = sums.get_mut(g as usize) {
                *e += crate::math::unvec9(block);
                *s += DVec3::from(*r);
            }
        }
        let steps: Vec<Option<DVec3>> = sums
            .iter()
            .map(|(e, s)| (e.determinant() > 0.0).then(|| e.inverse() * *s).filter(|t| t.is_finite()))
            .collect();
        for ((&g, block), (x, r)) in groups.iter().zip(vertex_blocks).zip(x.iter_mut().zip(&mut self.r)) {
            let Some(Some(t)) = steps.get(g as usize) else { continue };
            let moved = crate::math::unvec9(block) * *t;
            *x = (DVec3::from(*x) + *t).to_array();
            *r = (DVec3::from(*r) - moved).to_array();
        }
    }
}

/// How a solve ended.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Outcome {
    pub iterations: usize,
    pub negative_curvature: bool,
    /// `|b - A x| / |b|` when the solve stopped.
    pub relative_residual: f64,
}

fn dot3(a: &[f64; 3], b: &[f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// Sums per-chunk partials in chunk order.
fn ordered_sum<const K: usize>(partials: Vec<[f64; K]>) -> [f64; K] {
    partials.iter().fold([0.0; K], |acc, p| std::array::from_fn(|k| acc[k] + p[k]))
}

/// Solves `A x = b` to `|r| <= tolerance |b|`, at most `max_iterations` iterations. `A` is
/// the block-sparse matrix plus the couplings' blocks between vertices of no common element
/// (self-contact; their diagonal blocks are in `blocks`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn solve(
    topology: &Topology,
    blocks: &[[f64; 9]],
    couplings: &[Coupling],
    b: &[[f64; 3]],
    x: &mut [[f64; 3]],
    scratch: &mut Scratch,
    mut preconditioner: Preconditioner<'_>,
    tolerance: f64,
    max_iterations: usize,
) -> Outcome {
    let n = b.len();
    for v in [
        &mut scratch.r,
        &mut scratch.z,
        &mut scratch.p,
        &mut scratch.ap,
        &mut scratch.inverse_diagonal,
        &mut scratch.y,
    ] {
        v.resize(n, [0.0; 3]);
    }
    let Scratch { r, z, p, ap, inverse_diagonal, y } = scratch;
    let chunk = chunk_length(n);
    // Setup: x = 0, r = b, z = P b, p = z, with |b|^2 and r.z.
    let [bb, mut rz] = ordered_sum(
        (x.par_chunks_mut(chunk), r.par_chunks_mut(chunk), z.par_chunks_mut(chunk), p.par_chunks_mut(chunk))
            .into_par_iter()
            .zip(inverse_diagonal.par_chunks_mut(chunk))
            .enumerate()
            .map(|(c, ((x, r, z, p), inv))| {
                let mut sums = [0.0; 2];
                for k in 0..x.len() {
                    let v = c * chunk + k;
                    let block = &blocks[topology.diagonal[v] as usize];
                    // An indefinite diagonal cannot precondition CG; its magnitude still scales well.
                    inv[k] =
                        [block[0], block[4], block[8]].map(|a| if a != 0.0 { 1.0 / a.abs() } else { 1.0 });
                    x[k] = [0.0; 3];
                    r[k] = b[v];
                    z[k] = std::array::from_fn(|i| inv[k][i] * r[k][i]);
                    p[k] = z[k];
                    sums[0] += dot3(&r[k], &r[k]);
                    sums[1] += dot3(&r[k], &z[k]);
                }
                sums
            })
            .collect(),
    );
    if !matches!(preconditioner, Preconditioner::Jacobi) {
        rz = preconditioner.apply(topology, r, y, z, inverse_diagonal, rz);
        p.copy_from_slice(z);
    }
    let b_norm = bb.sqrt();
    if b_norm == 0.0 {
        return Outcome { iterations: 0, negative_curvature: false, relative_residual: 0.0 };
    }
    let mut residual = 1.0;
    for iteration in 0..max_iterations {
        // Pass 1: Ap and p.Ap.
        let [mut curvature] = ordered_sum(
            ap.par_chunks_mut(chunk)
                .enumerate()
                .map(|(c, ap)| [hessian_product::rows(topology, blocks, p, c * chunk, ap)])
                .collect(),
        );
        if !couplings.is_empty() {
            curvature += hessian_product::couplings(couplings, p, ap);
        }
        if !(curvature > 0.0) {
            if iteration == 0 {
                x.copy_from_slice(b);
            }
            return Outcome {
                iterations: iteration + 1,
                negative_curvature: true,
                relative_residual: residual,
            };
        }
        let alpha = rz / curvature;
        // Pass 2: x += alpha p, r -= alpha Ap, z = P r, with r.r and r.z.
        let [rr, rz_next] = ordered_sum(
            (x.par_chunks_mut(chunk), r.par_chunks_mut(chunk), z.par_chunks_mut(chunk))
                .into_par_iter()
                .zip((p.par_chunks(chunk), ap.par_chunks(chunk), inverse_diagonal.par_chunks(chunk)))
                .map(|((x, r, z), (p, ap, inv))| {
                    let mut sums = [0.0; 2];
                    for k in 0..x.len() {
                        for i in 0..3 {
                            x[k][i] += alpha * p[k][i];
                            r[k][i] -= alpha * ap[k][i];
                            z[k][i] = inv[k][i] * r[k][i];
                        }
                        sums[0] += dot3(&r[k], &r[k]);
                        sums[1] += dot3(&r[k], &z[k]);
                    }
                    sums
                })
                .collect(),
        );
        let rz_next = preconditioner.apply(topology, r, y, z, inverse_diagonal, rz_next);
        residual = rr.sqrt() / b_norm;
        if residual <= tolerance {
            return Outcome {
                iterations: iteration + 1,
                negative_curvature: false,
                relative_residual: residual,
            };
        }
        let beta = rz_next / rz;
        rz = rz_next;
        // Pass 3: p = z + beta p.
        p.par_chunks_mut(chunk).zip(z.par_chunks(chunk)).for_each(|(p, z)| {
            for (p, z) in p.iter_mut().zip(z) {
                for i in 0..3 {
                    p[i] = z[i] + beta * p[i];
                }
            }
        });
    }
    Outcome { iterations: max_iterations, negative_curvature: false, relative_residual: residual }
}
