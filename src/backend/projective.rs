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

/// The sparse Cholesky factor of `S` (its entries on `topology`'s pattern), in f64; `None`
/// where `S` is not positive definite.
fn cholesky(topology: &Topology, s: &[f64]) -> Option<faer::sparse::linalg::solvers::Llt<usize, f64>> {
    let n = topology.row_offsets.len() - 1;
    let lower: Vec<faer::sparse::Triplet<usize, usize, f64>> = (0..n)
        .flat_map(|i| {
            (topology.row_offsets[i] as usize..topology.row_offsets[i + 1] as usize)
                .filter(move |&e| topology.columns[e] as usize >= i)
                .map(move |e| faer::sparse::Triplet::new(topology.columns[e] as usize, i, s[e]))
        })
        .collect();
    let matrix = faer::sparse::SparseColMat::<usize, f64>::try_new_from_triplets(n, n, &lower)
        .expect("the pattern's entries are distinct");
    matrix.sp_cholesky(faer::Side::Lower).ok()
}

/// `S^-1` for a GPU's global steps on a body small enough to hold it, in f32, as
/// `S^-1 = D + u u^T / e` with `u` 1 at the free vertices and 0 at the pinned ones, and
/// `e = u^T S u`: row-major rows `stride` (more than n) floats apart, row `i` holding row `i`
/// of `D` (`S` is symmetric, so it is also column `i`), then `u_i / e` at column n, the rest
/// zero.
///
/// Why the split: a free body's `S = M / h^2 + a L` has its translations as its softest mode,
/// and `S^-1`'s part along them, `h^2 / M_total`, exceeds its elastic part by about
/// `h^2 a / (m dx^2)`, the ratio of the stiffness to the mass that makes a body stiff at a
/// step. From about 1e7 on, f32 entries of `S^-1` keep only the translation, and the global
/// steps of steel-stiff cubes raised the objective 60-fold each. `D = Q^T S^-1 Q`,
/// `Q = I - c u^T / e` with `c = S u`, holds the elastic part alone (`D c = 0`), so it rounds
/// well, and the device adds the translation from the sum of the vector it multiplies
/// (`shaders/pcg.wgsl`). Where pins hold the body, `e` is large and the split changes little.
///
/// Each column is solved with `S`'s sparse Cholesky factor in f64, a block of columns per
/// task, as `D e_j = Q^T S^-1 (e_j - c u_j / e)`: `Q^T` takes out what round-off leaves along
/// `u`, where in f64 too the solve's error lies.
pub(crate) fn dense_inverse(topology: &Topology, s: &[f64], pinned: &[bool], stride: usize) -> Vec<f32> {
    use faer::linalg::solvers::Solve;
    use rayon::prelude::*;
    let n = topology.row_offsets.len() - 1;
    let row = |i: usize| topology.row_offsets[i] as usize..topology.row_offsets[i + 1] as usize;
    assert!(stride > n, "a row holds u_i / e after D's n values");
    let mut inverse = vec![0.0f32; n * stride];
    let u: Vec<f64> = pinned.iter().map(|&p| f64::from(u8::from(!p))).collect();
    let c: Vec<f64> =
        (0..n).map(|i| row(i).map(|e| s[e] * u[topology.columns[e] as usize]).sum::<f64>() * u[i]).collect();
    let e: f64 = c.iter().sum();
    let (Some(factor), true) = (cholesky(topology, s), e > 0.0) else {
        // Valid models always give a positive definite `S`; otherwise Jacobi's inverse, as a
        // dense matrix, still preconditions CG.
        for (i, &at) in topology.diagonal.iter().enumerate() {
            let d = s[at as usize].abs();
            inverse[i * stride + i] = if d > 0.0 { (1.0 / d) as f32 } else { 1.0 };
        }
        return inverse;
    };
    const COLUMNS: usize = 64;
    inverse.par_chunks_mut(COLUMNS * stride).enumerate().for_each(|(block, rows)| {
        let first = block * COLUMNS;
        let width = rows.len() / stride;
        let mut x = faer::Mat::<f64>::from_fn(n, width, |i, k| {
            f64::from(u8::from(i == first + k)) - c[i] * u[first + k] / e
        });
        factor.solve_in_place(x.as_mut());
        for (k, out) in rows.chunks_mut(stride).enumerate() {
            let along: f64 = (0..n).map(|i| c[i] * x[(i, k)]).sum::<f64>() / e;
            for (i, value) in out[..n].iter_mut().enumerate() {
                *value = (x[(i, k)] - u[i] * along) as f32;
            }
            out[n] = (u[first + k] / e) as f32;
        }
    });
    inverse
}

#[cfg(test)]
mod tests {
    /// `X = D + u u^T / e` as the device applies a dense inverse's rows (`padded`, `stride`
    /// apart; `r` is zero at pinned vertices): `x_i = D_i . r + (u_i / e) sum(r)`, in f64.
    fn apply(padded: &[f32], stride: usize, r: &[f64]) -> Vec<f64> {
        let n = r.len();
        let sum: f64 = r.iter().sum();
        padded
            .chunks(stride)
            .map(|row| row[..n].iter().zip(r).map(|(d, r)| *d as f64 * r).sum::<f64>() + row[n] as f64 * sum)
            .collect()
    }

    /// `S X = I` to f32's resolution for a pinned bar's matrix, and `X` symmetric: each row
    /// is the column the device reads it as. A pinned vertex's row and column are the
    /// identity's, and the rows' padding is zero.
    #[test]
    fn the_dense_inverse_inverts_the_matrix() {
        let (model, topology, s) = crate::backend::fsai::tests::projective_matrix([6, 3, 2], 0.25);
        let n = model.vertex_count();
        let stride = n + 5;
        let padded = super::dense_inverse(&topology, &s, &model.pinned, stride);
        assert_eq!(padded.len(), n * stride);
        assert!(padded.chunks(stride).all(|row| row[n + 1..].iter().all(|&v| v == 0.0)));
        let x: Vec<f64> = (0..n)
            .flat_map(|j| {
                let unit: Vec<f64> =
                    (0..n).map(|i| if i == j && !model.pinned[j] { 1.0 } else { 0.0 }).collect();
                let mut column = apply(&padded, stride, &unit);
                if model.pinned[j] {
                    column[j] = padded[j * stride + j] as f64;
                }
                column
            })
            .collect();
        let largest = x.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let mut worst: f64 = 0.0;
        for j in 0..n {
            for i in 0..n {
                let sx: f64 = (topology.row_offsets[i] as usize..topology.row_offsets[i + 1] as usize)
                    .map(|e| s[e] * x[j * n + topology.columns[e] as usize])
                    .sum();
                worst = worst.max((sx - if i == j { 1.0 } else { 0.0 }).abs());
                assert!((x[i * n + j] - x[j * n + i]).abs() <= 1e-6 * largest, "({i}, {j})");
            }
        }
        assert!(worst < 1e-5, "S X - I reaches {worst:e}");
        for (v, row) in padded.chunks(stride).enumerate().filter(|(v, _)| model.pinned[*v]) {
            assert_eq!(row[n], 0.0, "pinned vertex {v} takes no translation");
        }
    }

    /// A free body stiff at its step (`h^2 a L` 1e9 times its masses' `M`): `S^-1 b` from the
    /// split f32 inverse has both its translation and its elastic part (what the translation
    /// leaves, `x - u (c . x) / e`) to f32's resolution. `S^-1` rounded to f32 whole gets the
    /// elastic part a thousand times worse.
    #[test]
    fn the_dense_inverse_of_a_stiff_free_body_keeps_its_elastic_part() {
        use faer::linalg::solvers::Solve;
        use rand::{RngExt, SeedableRng};
        let (mut model, topology, _) = crate::backend::fsai::tests::projective_matrix([6, 3, 2], 1.0);
        model.pinned.iter_mut().for_each(|p| *p = false);
        let n = model.vertex_count();
        let laplacian = super::laplacian(&model, &topology);
        let inertia: Vec<f64> = model.masses.iter().map(|m| m * 900.0).collect();
        let stiffest = topology.diagonal.iter().map(|&at| laplacian[at as usize]).fold(0.0, f64::max);
        let lightest = inertia.iter().copied().fold(f64::INFINITY, f64::min);
        let a = 1e9 * lightest / stiffest;
        let mut s = Vec::new();
        super::matrix(&model, &topology, &laplacian, a, &inertia, &mut s);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let b: Vec<f64> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
        let mut exact = faer::Mat::<f64>::from_fn(n, 1, |i, _| b[i]);
        super::cholesky(&topology, &s).expect("S is positive definite").solve_in_place(exact.as_mut());
        let exact: Vec<f64> = (0..n).map(|i| exact[(i, 0)]).collect();
        let e: f64 = inertia.iter().sum();
        let elastic = |x: &[f64]| -> Vec<f64> {
            let along = x.iter().zip(&inertia).map(|(x, c)| x * c).sum::<f64>() / e;
            x.iter().map(|x| x - along).collect()
        };
        let distance = |p: &[f64], q: &[f64]| p.iter().zip(q).fold(0.0f64, |m, (p, q)| m.max((p - q).abs()));
        let size = |p: &[f64]| p.iter().fold(0.0f64, |m, p| m.max(p.abs()));
        let stride = super::super::gpu::pcg::dense_stride(n);
        let padded = super::dense_inverse(&topology, &s, &model.pinned, stride);
        let solved = apply(&padded, stride, &b);
        let exact_elastic = elastic(&exact);
        let (off, elastic_off) = (distance(&solved, &exact), distance(&elastic(&solved), &exact_elastic));
        println!(
            "split: {:.1e} of the solution, {:.1e} of its elastic part ({:.1e} of the whole)",
            off / size(&exact),
            elastic_off / size(&exact_elastic),
            size(&exact_elastic) / size(&exact)
        );
        assert!(off <= 1e-6 * size(&exact), "{off:e} off {:e}", size(&exact));
        assert!(
            elastic_off <= 1e-4 * size(&exact_elastic),
            "elastic part {elastic_off:e} off {:e}",
            size(&exact_elastic)
        );
        // The whole inverse rounded to f32.
        let whole: Vec<f32> = padded
            .chunks(stride)
            .flat_map(|row| row[..n].iter().map(|d| (*d as f64 + row[n] as f64) as f32).collect::<Vec<_>>())
            .collect();
        let rounded: Vec<f64> =
            whole.chunks(n).map(|row| row.iter().zip(&b).map(|(d, b)| *d as f64 * b).sum()).collect();
        let rounded_off = distance(&elastic(&rounded), &exact_elastic);
        println!("rounded whole: {:.1e} of the elastic part", rounded_off / size(&exact_elastic));
        assert!(rounded_off >= 1e3 * elastic_off, "rounded whole: {rounded_off:e}, split {elastic_off:e}");
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
        let x = super::dense_inverse(&topology, &s, &model.pinned, stride);
        for i in 0..n {
            for j in 0..stride {
                let expected = if i == j { 1.0 / s[topology.diagonal[i] as usize].abs() } else { 0.0 };
                assert_eq!(x[i * stride + j], expected as f32, "({i}, {j})");
            }
        }
    }
}
