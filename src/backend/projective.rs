//! The local/global (projective dynamics) solver's global matrix, defined once for both
//! backends (stabilizing-integrators-realtime.md §4.2, DESIGN §3).
//!
//! Every term of the step objective `G` is either a projective energy `w/2 |G_i x - p_i|^2`
//! (corotated and ARAP tets, Hooke springs, collider penalties, handle springs), linear in `x`
//! (gravity), or a per-vertex quadratic (inertia, lagged ether drag and friction). Freezing the
//! projections at the iterate turns `G` into a quadratic with the same value and gradient there
//! and a Hessian `A` that does not depend on `x`:
//!
//! `A = M/h^2 + a (L + K_v) + D_v`, `a = sum_q c_q theta_q^2`,
//!
//! with `L` the elements' weighted Laplacian (`w V beta_a . beta_b` per tet corner pair, `k` per
//! spring end pair), `K_v` the handle and contact stiffness of each vertex and `D_v` each
//! vertex's damping block bounded by a multiple of the identity. Because the frozen quadratic
//! bounds `G` from above, the global step `x -= A^-1 grad G(x)` never increases `G`. `A` is
//! `S (x) I_3` for a scalar matrix `S` on the Hessian's pattern: the CPU factors `S` once per
//! step weight, a GPU runs PCG on it.

use glam::DVec3;

use crate::backend::topology::{Anchors, Topology};
use crate::error::{Error, Result};
use crate::mesh::SpringKind;
use crate::model::Model;
use crate::objective::{Node, StepProblem};

/// Refuses a model whose energy has no projective form, naming what to change.
pub(crate) fn check(model: &Model) -> Result<()> {
    if let Some((e, material)) =
        model.tet_material.iter().enumerate().find(|(_, m)| m.projective_weight().is_none())
    {
        return Err(Error::Unsupported(format!(
            "the local/global solver needs projective energies; element {e} uses {:?}{} \
             (use Material::corotated or Material::arap with a Poisson ratio of at least 0, or Solver::newton())",
            material.model(),
            if matches!(material.model(), crate::MaterialModel::Corotated) {
                " with negative lambda"
            } else {
                ""
            }
        )));
    }
    if let crate::contact::ContactModel::CubicPenalty { .. } = model.contact {
        return Err(Error::Unsupported(
            "the local/global solver needs projective energies; the cubic penalty is not one \
             (use ContactModel::Penalty, or Solver::newton())"
                .into(),
        ));
    }
    if let Some(s) = model.spring_law.iter().position(|law| law.kind != SpringKind::Hooke) {
        return Err(Error::Unsupported(format!(
            "the local/global solver needs projective energies; spring {s} is a StVK spring \
             (use SpringKind::Hooke, or Solver::newton())"
        )));
    }
    Ok(())
}

/// The weighted Laplacian `L`, one value per stored block of the Hessian's pattern.
pub(crate) fn laplacian(model: &Model, topology: &Topology) -> Vec<f64> {
    // Upper blocks of each element as scalars, in the element-block slots of `Topology`.
    let nt = model.tets.len();
    let mut element = vec![0.0; 10 * nt + 3 * model.springs.len()];
    for (e, rest) in model.tet_rest.iter().enumerate() {
        // Models without a projective form (refused by the solver) still get a stiffness
        // weight: the matrix also preconditions Newton's CG (`LinearSolver::PcgProjective`).
        let w = model.tet_material[e].laplacian_weight() * rest.volume;
        let beta = rest.shape_gradients.map(DVec3::from);
        for a in 0..4 {
            for b in a..4 {
                element[10 * e + crate::backend::topology::upper(a, b, 4)] = w * beta[a].dot(beta[b]);
            }
        }
    }
    for (s, law) in model.spring_law.iter().enumerate() {
        // A StVK spring's stiffness along itself at rest is 4 k r^2.
        let k = match law.kind {
            SpringKind::Hooke => law.stiffness,
            SpringKind::StVK => 4.0 * law.stiffness * law.rest * law.rest,
        };
        element[10 * nt + 3 * s..10 * nt + 3 * s + 3].copy_from_slice(&[k, -k, k]);
    }
    (0..topology.block_count())
        .map(|block| {
            let sources =
                topology.source_offsets[block] as usize..topology.source_offsets[block + 1] as usize;
            topology.block_sources[sources]
                .iter()
                .map(|&source| element[(source & !crate::backend::topology::TRANSPOSED) as usize])
                .sum()
        })
        .collect()
}

/// `a = sum_q c_q theta_q^2`: how the nodes weight the potential's Hessian.
pub(crate) fn stiffness_weight(nodes: &[Node]) -> f64 {
    nodes.iter().map(|q| q.weight * q.theta * q.theta).sum()
}

/// The vertices whose diagonal carries their colliders' stiffness as Newton's preconditioner
/// sees it: the free ones inside a collider at the step's start or at its inertial target,
/// this step's contacts. (The local/global solver grows its own at the iterates,
/// [`LocalContact::grow_set`].)
pub(crate) fn contact_set(
    model: &Model,
    colliders: &[crate::contact::Collider],
    problem: &StepProblem<'_>,
) -> Vec<bool> {
    let inside = |x: [f64; 3]| colliders.iter().any(|c| c.distance(DVec3::from(x)).phi <= 0.0);
    // On the worker pool: a GPU step finds the set for bodies of every size.
    crate::math::per_vertex(model.vertex_count(), |v| {
        !model.pinned[v]
            && model.contact.penalty_stiffness() > 0.0
            && (inside(problem.start[v]) || inside(problem.target[v]))
    })
}

/// What the local/global solver's contact set is found from: the model's pins, the colliders
/// where they are this step, the scheme's nodes and the step's start positions.
pub(crate) struct LocalContact<'a> {
    pub model: &'a Model,
    pub colliders: &'a [crate::contact::Collider],
    pub nodes: &'a [Node],
    pub start: &'a [[f64; 3]],
}

impl LocalContact<'_> {
    /// Where node `q` puts vertex `v` at iterate `x`: `theta x + (1 - theta) x_n`.
    fn at_node(&self, q: &Node, v: usize, x: [f64; 3]) -> DVec3 {
        DVec3::from(x) * q.theta + DVec3::from(self.start[v]) * (1.0 - q.theta)
    }

    /// Grows the contact set at the iterate `x`: the free vertices inside a collider
    /// (`phi <= 0`) at one of the nodes, and those the last step stopped at a collider's
    /// surface (`stopped`, cleared here), join `set` for the rest of the solve. Their penalty
    /// is bounded by the curvature `a k` the diagonal gives them; the others feel none, and
    /// [`bound_outside`](Self::bound_outside) keeps them out. A solve starts from an empty set,
    /// so that a vertex held by a stiffness it no longer feels is held for one solve at most (a
    /// set taken from the step's start and target froze its vertices, and a landing cube sank
    /// through the floor); within a solve the set only grows, since a vertex resting on the
    /// surface would otherwise leave and rejoin it every other iteration, each time cutting the
    /// step short.
    pub fn grow_set(&self, x: &[[f64; 3]], stopped: &mut [bool], set: &mut [bool]) {
        for v in 0..x.len() {
            let inside = || {
                self.nodes
                    .iter()
                    .any(|q| self.colliders.iter().any(|c| c.distance(self.at_node(q, v, x[v])).phi <= 0.0))
            };
            let was_stopped = std::mem::take(&mut stopped[v]);
            set[v] = !self.model.pinned[v] && (set[v] || was_stopped || inside());
        }
    }

    /// The step's length: the largest `t` in `[0, 1]` (checked, as `contact::step_bound`) for
    /// which no free vertex outside `set` enters a collider at any node on the way from `x` to
    /// `x + t d`; the vertices whose paths would enter before the full step are marked
    /// `stopped`. The frozen quadratic then bounds `G` from above on the whole step.
    pub fn bound_outside(&self, x: &[[f64; 3]], d: &[[f64; 3]], set: &[bool], stopped: &mut [bool]) -> f64 {
        let mut bound: f64 = 1.0;
        for v in 0..x.len() {
            let step = DVec3::from(d[v]);
            if self.model.pinned[v] || set[v] || step == DVec3::ZERO {
                continue;
            }
            let mut own: f64 = 1.0;
            for q in self.nodes {
                for c in self.colliders {
                    let at = self.at_node(q, v, x[v]);
                    own = own.min(crate::contact::path_bound(c, at, step * q.theta, 1.0, own));
                }
            }
            if own < 1.0 {
                stopped[v] = true;
                bound = bound.min(own);
            }
        }
        bound
    }
}

/// Whether the local/global solver keeps a contact set: penalty contact with colliders.
pub(crate) fn has_penalty_contact(model: &Model, colliders: &[crate::contact::Collider]) -> bool {
    model.contact.penalty_stiffness() > 0.0 && !colliders.is_empty()
}

/// `a k`: what a vertex in the contact set adds to its diagonal, `k` the penalty stiffness.
pub(crate) fn contact_stiffness(model: &Model, nodes: &[Node]) -> f64 {
    stiffness_weight(nodes) * model.contact.penalty_stiffness()
}

/// The step's diagonal `M/h^2 + a K_v + D_v` per vertex (pinned vertices get 1: their rows
/// are the identity), `K_v` the handles' stiffness and `D_v` from the step's damping matrix;
/// the colliders' is added per vertex in a contact set by [`with_contacts`].
pub(crate) fn vertex_diagonal(
    model: &Model,
    anchors: &Anchors,
    inv_h2: f64,
    nodes: &[Node],
    damping: Option<&crate::objective::DampingMatrix>,
) -> Vec<f64> {
    let a = stiffness_weight(nodes);
    crate::math::per_vertex(model.vertex_count(), |v| {
        if model.pinned[v] {
            return 1.0;
        }
        let stiffness: f64 = anchors.of(v).iter().map(|(k, _)| k).sum();
        // The largest eigenvalue of a damping block, bounded by its largest absolute row sum.
        let damping = damping.map_or(0.0, |d| {
            let b = &d.vertex_blocks[v];
            (0..3).map(|r| b[3 * r].abs() + b[3 * r + 1].abs() + b[3 * r + 2].abs()).fold(0.0, f64::max)
        });
        model.masses[v] * inv_h2 + a * stiffness + damping
    })
}

/// `base` with `stiffness` (`a k`, [`contact_stiffness`]) added for the vertices in `set`.
pub(crate) fn with_contacts(base: &[f64], set: &[bool], stiffness: f64, out: &mut Vec<f64>) {
    out.clear();
    out.extend(base.iter().zip(set).map(|(&d, &member)| if member { d + stiffness } else { d }));
}

/// The scalar matrix `S` on the Hessian's pattern: `a L` plus the diagonal, with the rows and
/// columns of pinned vertices those of the identity.
pub(crate) fn matrix(
    model: &Model,
    topology: &Topology,
    laplacian: &[f64],
    a: f64,
    diagonal: &[f64],
    out: &mut Vec<f64>,
) {
    out.clear();
    out.resize(laplacian.len(), 0.0);
    for (row, vertex_term) in diagonal.iter().enumerate() {
        for index in topology.row_offsets[row] as usize..topology.row_offsets[row + 1] as usize {
            let column = topology.columns[index] as usize;
            out[index] = if row == column {
                if model.pinned[row] { 1.0 } else { a * laplacian[index] + vertex_term }
            } else if model.pinned[row] || model.pinned[column] {
                0.0
            } else {
                a * laplacian[index]
            };
        }
    }
}

/// `S^-1` for a GPU's global steps on a body small enough to hold it: dense, row-major with
/// rows `stride` (at least n) floats apart, the rest of each zero, in f32 (`S` is symmetric,
/// so row `i` is column `i`). Each column is solved with `S`'s sparse Cholesky factor in f64,
/// a block of columns per task.
pub(crate) fn dense_inverse(topology: &Topology, s: &[f64], stride: usize) -> Vec<f32> {
    use faer::linalg::solvers::Solve;
    use rayon::prelude::*;
    let n = topology.row_offsets.len() - 1;
    let lower: Vec<faer::sparse::Triplet<usize, usize, f64>> = (0..n)
        .flat_map(|row| {
            (topology.row_offsets[row] as usize..topology.row_offsets[row + 1] as usize)
                .filter(move |&e| topology.columns[e] as usize >= row)
                .map(move |e| faer::sparse::Triplet::new(topology.columns[e] as usize, row, s[e]))
        })
        .collect();
    let matrix = faer::sparse::SparseColMat::<usize, f64>::try_new_from_triplets(n, n, &lower)
        .expect("the pattern's entries are distinct");
    debug_assert!(stride >= n);
    let mut inverse = vec![0.0f32; n * stride];
    let Ok(factor) = matrix.sp_cholesky(faer::Side::Lower) else {
        // Valid models always give a positive definite `S`; otherwise Jacobi's inverse, as a
        // dense matrix, still preconditions CG.
        for (row, &at) in topology.diagonal.iter().enumerate() {
            let d = s[at as usize].abs();
            inverse[row * stride + row] = if d > 0.0 { (1.0 / d) as f32 } else { 1.0 };
        }
        return inverse;
    };
    const COLUMNS: usize = 64;
    inverse.par_chunks_mut(COLUMNS * stride).enumerate().for_each(|(block, rows)| {
        let first = block * COLUMNS;
        let width = rows.len() / stride;
        let mut x = faer::Mat::<f64>::from_fn(n, width, |i, k| if i == first + k { 1.0 } else { 0.0 });
        factor.solve_in_place(x.as_mut());
        for (k, row) in rows.chunks_mut(stride).enumerate() {
            for (i, value) in row[..n].iter_mut().enumerate() {
                *value = x[(i, k)] as f32;
            }
        }
    });
    inverse
}

#[cfg(test)]
mod tests {
    /// `S X = I` to f32's resolution for a pinned bar's matrix, and `X` symmetric: each row
    /// is the column the device reads it as. The rows' padding is zero.
    #[test]
    fn the_dense_inverse_inverts_the_matrix() {
        let (model, topology, s) = crate::backend::fsai::tests::projective_matrix([6, 3, 2], 0.25);
        let n = model.vertex_count();
        let stride = n + 5;
        let padded = super::dense_inverse(&topology, &s, stride);
        assert_eq!(padded.len(), n * stride);
        assert!(padded.chunks(stride).all(|row| row[n..].iter().all(|&v| v == 0.0)));
        let x: Vec<f32> = padded.chunks(stride).flat_map(|row| row[..n].to_vec()).collect();
        let largest = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let mut worst: f64 = 0.0;
        for j in 0..n {
            for i in 0..n {
                let sx: f64 = (topology.row_offsets[i] as usize..topology.row_offsets[i + 1] as usize)
                    .map(|e| s[e] * x[topology.columns[e] as usize * n + j] as f64)
                    .sum();
                worst = worst.max((sx - if i == j { 1.0 } else { 0.0 }).abs());
                assert!((x[i * n + j] - x[j * n + i]).abs() <= 1e-6 * largest, "({i}, {j})");
            }
        }
        assert!(worst < 1e-5, "S X - I reaches {worst:e}");
    }

    /// A matrix that is not positive definite (which valid models never give) is not a
    /// panic: its inverse is Jacobi's, as a dense matrix.
    #[test]
    fn an_indefinite_matrix_gets_jacobis_inverse() {
        let (model, topology, mut s) = crate::backend::fsai::tests::projective_matrix([3, 2, 2], 0.25);
        let n = model.vertex_count();
        let free = (0..n).find(|&v| !model.pinned[v]).unwrap();
        s[topology.diagonal[free] as usize] *= -1.0;
        let stride = n + 3;
        let x = super::dense_inverse(&topology, &s, stride);
        for i in 0..n {
            for j in 0..stride {
                let expected = if i == j { 1.0 / s[topology.diagonal[i] as usize].abs() } else { 0.0 };
                assert_eq!(x[i * stride + j], expected as f32, "({i}, {j})");
            }
        }
    }
}
