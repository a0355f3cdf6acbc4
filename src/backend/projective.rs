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

use crate::backend::topology::{Anchors, NO_GROUP, Topology};
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
/// `S^-1 = D + sum_g u_g u_g^T / e_g` over the translation groups `g` of `groups`
/// (`Model::translation_groups`: the free parts), `u_g` 1 at the group's vertices and 0
/// elsewhere, `e_g = u_g^T S u_g`: row-major rows `stride` (more than n) floats apart, row `i`
/// holding row `i` of `D` (`S` is symmetric, so it is also column `i`), then `1 / e_g` of its
/// group at column n (0 for a vertex of none), the rest zero.
///
/// Why the split: a free part's block of `S = M / h^2 + a L` has its translations as its
/// softest modes, and `S^-1`'s part along them, `h^2 / M_part`, exceeds its elastic part by
/// about `h^2 a / (m dx^2)`, the ratio of the stiffness to the mass that makes a body stiff at
/// a step. From about 1e7 on, f32 entries of `S^-1` keep only the translations, and the
/// global steps of steel-stiff cubes raised the objective 60-fold each. `D = Q^T S^-1 Q`,
/// `Q = I - sum_g c_g u_g^T / e_g` with `c_g = S u_g`, holds the elastic part alone
/// (`D c_g = 0`), so it rounds well, and the device adds each row's translation from its
/// group's sum of the vector it multiplies (`shaders/pcg.wgsl`). Each part is split by its
/// own translation: split by their sum alone, two free stiff cubes kept their relative
/// translation in `D`, and their global steps needed thousands of CG iterations.
///
/// Each column is solved with `S`'s sparse Cholesky factor in f64, a block of columns per
/// task, as `D e_j = Q^T S^-1 Q e_j`: `Q^T` takes out what round-off leaves along the
/// `u_g`, where in f64 too the solve's error lies. (The decomposition is exact for any
/// indicators; the groups only decide what rounds well.)
pub(crate) fn dense_inverse(topology: &Topology, s: &[f64], groups: &[u32], stride: usize) -> Vec<f32> {
    use faer::linalg::solvers::Solve;
    use rayon::prelude::*;
    let n = topology.row_offsets.len() - 1;
    let row = |i: usize| topology.row_offsets[i] as usize..topology.row_offsets[i + 1] as usize;
    assert!(stride > n, "a row holds 1 / e_g after D's n values");
    let mut inverse = vec![0.0f32; n * stride];
    let group = |i: usize| (groups[i] != NO_GROUP).then_some(groups[i] as usize);
    let count = (0..n).filter_map(group).map(|g| g + 1).max().unwrap_or(0);
    // c = sum_g c_g, each c_g nonzero in its group's part only (S has no entries between
    // parts), and every e_g.
    let c: Vec<f64> = (0..n)
        .map(|i| {
            group(i).map_or(0.0, |g| {
                row(i).filter(|&e| group(topology.columns[e] as usize) == Some(g)).map(|e| s[e]).sum()
            })
        })
        .collect();
    let mut e = vec![0.0; count];
    for i in 0..n {
        if let Some(g) = group(i) {
            e[g] += c[i];
        }
    }
    let (Some(factor), true) = (cholesky(topology, s), e.iter().all(|&e| e > 0.0)) else {
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
        // Q e_j: e_j less c_g / e_g on the part of j's group g.
        let mut x = faer::Mat::<f64>::from_fn(n, width, |i, k| {
            let j = first + k;
            let along = match (group(j), group(i)) {
                (Some(g), Some(h)) if g == h => c[i] / e[g],
                _ => 0.0,
            };
            f64::from(u8::from(i == j)) - along
        });
        factor.solve_in_place(x.as_mut());
        for (k, out) in rows.chunks_mut(stride).enumerate() {
            // Q^T x: each group's (c_g . x) / e_g taken out of its vertices.
            let mut along = vec![0.0; count];
            for i in 0..n {
                if let Some(g) = group(i) {
                    along[g] += c[i] * x[(i, k)];
                }
            }
            for (i, value) in out[..n].iter_mut().enumerate() {
                let moved = group(i).map_or(0.0, |g| along[g] / e[g]);
                *value = (x[(i, k)] - moved) as f32;
            }
            out[n] = group(first + k).map_or(0.0, |g| 1.0 / e[g]) as f32;
        }
    });
    inverse
}

#[cfg(test)]
mod tests {
    use crate::backend::topology::NO_GROUP;

    /// `X = D + sum_g u_g u_g^T / e_g` as the device applies a dense inverse's rows (`padded`,
    /// `stride` apart; `r` is zero at pinned vertices): `x_i = D_i . r + (1 / e_g) sum_g(r)`,
    /// `g` the group of `i`, in f64.
    fn apply(padded: &[f32], stride: usize, groups: &[u32], r: &[f64]) -> Vec<f64> {
        let n = r.len();
        let sum = |g: u32| -> f64 { r.iter().zip(groups).filter(|(_, h)| **h == g).map(|(r, _)| r).sum() };
        padded
            .chunks(stride)
            .zip(groups)
            .map(|(row, &g)| {
                let along = if g == NO_GROUP { 0.0 } else { row[n] as f64 * sum(g) };
                row[..n].iter().zip(r).map(|(d, r)| *d as f64 * r).sum::<f64>() + along
            })
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
        let (groups, _) = model.translation_groups();
        let padded = super::dense_inverse(&topology, &s, &groups, stride);
        assert_eq!(padded.len(), n * stride);
        assert!(padded.chunks(stride).all(|row| row[n + 1..].iter().all(|&v| v == 0.0)));
        let x: Vec<f64> = (0..n)
            .flat_map(|j| {
                let unit: Vec<f64> =
                    (0..n).map(|i| if i == j && !model.pinned[j] { 1.0 } else { 0.0 }).collect();
                let mut column = apply(&padded, stride, &groups, &unit);
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
        for (v, row) in padded.chunks(stride).enumerate() {
            assert_eq!(row[n], 0.0, "vertex {v} of the pinned bar takes no translation");
        }
    }

    /// Two free bars stiff at their step (`h^2 a L` 1e9 times their masses' `M`): `S^-1 b`
    /// from the split f32 inverse has both bars' translations and their elastic parts (what
    /// each bar's translation leaves, `x - u_g (c_g . x) / e_g`) to f32's resolution. Split by
    /// the two bars' common translation alone, the elastic parts come out a thousand times
    /// worse, as does `S^-1` rounded to f32 whole.
    #[test]
    fn the_dense_inverse_of_stiff_free_parts_keeps_their_elastic_parts() {
        use faer::linalg::solvers::Solve;
        use rand::{RngExt, SeedableRng};
        let model = crate::backend::coarse::tests::free_bars([6, 3, 2], [1.0, 0.4, 0.3], 1.0);
        let topology = super::Topology::new(&model);
        let n = model.vertex_count();
        let (groups, count) = model.translation_groups();
        assert_eq!(count, 2);
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
        // Each bar's elastic part: `c_g` is its inertia (`L u_g = 0`).
        let elastic = |x: &[f64]| -> Vec<f64> {
            let along: Vec<f64> = (0..2u32)
                .map(|g| {
                    let of = |v: &usize| groups[*v] == g;
                    let moved: f64 = (0..n).filter(of).map(|v| x[v] * inertia[v]).sum();
                    moved / (0..n).filter(of).map(|v| inertia[v]).sum::<f64>()
                })
                .collect();
            x.iter().zip(&groups).map(|(x, &g)| x - along[g as usize]).collect()
        };
        let distance = |p: &[f64], q: &[f64]| p.iter().zip(q).fold(0.0f64, |m, (p, q)| m.max((p - q).abs()));
        let size = |p: &[f64]| p.iter().fold(0.0f64, |m, p| m.max(p.abs()));
        let exact_elastic = elastic(&exact);
        let stride = super::super::gpu::pcg::dense_stride(n);
        let elastic_off = |groups: &[u32]| {
            let padded = super::dense_inverse(&topology, &s, groups, stride);
            let solved = apply(&padded, stride, groups, &b);
            let off = distance(&solved, &exact);
            assert!(off <= 1e-6 * size(&exact), "{off:e} off {:e}", size(&exact));
            (padded, distance(&elastic(&solved), &exact_elastic))
        };
        let (padded, split_off) = elastic_off(&groups);
        let (_, common_off) = elastic_off(&vec![0; n]);
        let scale = size(&exact_elastic);
        println!(
            "split per bar: {:.1e} of the elastic part ({:.1e} of the whole); by the common translation: {:.1e}",
            split_off / scale,
            scale / size(&exact),
            common_off / scale
        );
        assert!(split_off <= 1e-4 * scale, "elastic part {split_off:e} off {scale:e}");
        assert!(common_off >= 1e3 * split_off, "common: {common_off:e}, split {split_off:e}");
        // The whole inverse rounded to f32.
        let whole: Vec<f32> = padded
            .chunks(stride)
            .enumerate()
            .flat_map(|(i, row)| {
                let along = |j: usize| if groups[j] == groups[i] { row[n] as f64 } else { 0.0 };
                (0..n).map(|j| (row[j] as f64 + along(j)) as f32).collect::<Vec<_>>()
            })
            .collect();
        let rounded: Vec<f64> =
            whole.chunks(n).map(|row| row.iter().zip(&b).map(|(d, b)| *d as f64 * b).sum()).collect();
        let rounded_off = distance(&elastic(&rounded), &exact_elastic);
        println!("rounded whole: {:.1e} of the elastic part", rounded_off / scale);
        assert!(rounded_off >= 1e3 * split_off, "rounded whole: {rounded_off:e}, split {split_off:e}");
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
        let (groups, _) = model.translation_groups();
        let x = super::dense_inverse(&topology, &s, &groups, stride);
        for i in 0..n {
            for j in 0..stride {
                let expected = if i == j { 1.0 / s[topology.diagonal[i] as usize].abs() } else { 0.0 };
                assert_eq!(x[i * stride + j], expected as f32, "({i}, {j})");
            }
        }
    }
}
