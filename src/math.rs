//! Small fixed-size linear algebra in f64: 3x3 symmetric eigenproblems, the signed SVD that
//! isotropic materials need, and the 9x9 tangent matrices of the first Piola stress; and the
//! passes over a body's vertices that run on the worker pool.

use glam::{DMat3, DVec3};

use lanes::{Lane, Lanes};

pub mod lanes;

/// Vertices per work item of a pass over a body's vertices: a body smaller than this stays on
/// the calling thread.
pub(crate) const VERTEX_CHUNK: usize = 4096;

/// `[f(0), f(1), ..., f(n - 1)]`, computed on the worker pool in chunks of vertices. Each
/// entry is computed alone, so the result is the same bits whatever the thread count. (A
/// step on the GPU converts and combines the state's vectors many times on the host: at a
/// million tets those passes were most of its time on one thread.)
pub(crate) fn per_vertex<T: Send, F: Fn(usize) -> T + Sync + Send>(n: usize, f: F) -> Vec<T> {
    use rayon::prelude::*;
    (0..n).into_par_iter().with_min_len(VERTEX_CHUNK).map(f).collect()
}

/// `out[v] = f(v)` for every vertex, on the worker pool as [`per_vertex`].
pub(crate) fn fill_per_vertex<T: Send, F: Fn(usize) -> T + Sync + Send>(out: &mut [T], f: F) {
    use rayon::prelude::*;
    out.par_iter_mut().with_min_len(VERTEX_CHUNK).enumerate().for_each(|(v, o)| *o = f(v));
}

/// The first vertex with a non-finite coordinate, searched on the worker pool as
/// [`per_vertex`].
pub(crate) fn first_non_finite(points: &[[f64; 3]]) -> Option<usize> {
    let found = per_chunk(points.len(), |vertices| {
        let start = vertices.start;
        points[vertices].iter().position(|p| p.iter().any(|c| !c.is_finite())).map(|v| start + v)
    });
    found.into_iter().flatten().next()
}

/// `f` of each chunk of vertices, in chunk order, the chunks on the worker pool (one item each:
/// a chunk is already the work item of [`per_vertex`]).
pub(crate) fn per_chunk<T: Send, F: Fn(std::ops::Range<usize>) -> T + Sync + Send>(n: usize, f: F) -> Vec<T> {
    use rayon::prelude::*;
    (0..n.div_ceil(VERTEX_CHUNK))
        .into_par_iter()
        .map(|chunk| f(chunk * VERTEX_CHUNK..((chunk + 1) * VERTEX_CHUNK).min(n)))
        .collect()
}

/// `sum_v f(v)`, summed in fixed chunks of vertices and then in chunk order: the same bits
/// whatever the thread count.
pub(crate) fn sum_per_vertex<F: Fn(usize) -> f64 + Sync + Send>(n: usize, f: F) -> f64 {
    sums_per_vertex(n, |v| [f(v)])[0]
}

/// Several sums over the vertices in one pass, each summed as [`sum_per_vertex`] sums (the
/// same bits as `K` passes): a large body's host passes are bound by memory, not by flops.
pub(crate) fn sums_per_vertex<const K: usize, F: Fn(usize) -> [f64; K] + Sync + Send>(
    n: usize,
    f: F,
) -> [f64; K] {
    let partials = per_chunk(n, |vertices| {
        vertices.map(&f).fold([-0.0; K], |sums, terms| std::array::from_fn(|k| sums[k] + terms[k]))
    });
    partials.iter().fold([-0.0; K], |sums, chunk| std::array::from_fn(|k| sums[k] + chunk[k]))
}

/// A 9x9 matrix acting on `vec(F)`, with `F[i][j]` stored at index `3 * i + j` (row-major).
pub type Mat9 = [[f64; 9]; 9];

/// Index of `F[i][j]` in `vec(F)`.
#[inline]
pub fn flat(i: usize, j: usize) -> usize {
    3 * i + j
}

/// `F[i][j]` of a glam matrix (glam stores columns).
#[inline]
pub fn at(m: &DMat3, i: usize, j: usize) -> f64 {
    m.col(j)[i]
}

/// `a b^T`.
pub fn outer(a: DVec3, b: DVec3) -> DMat3 {
    DMat3::from_cols(a * b.x, a * b.y, a * b.z)
}

/// Builds a matrix from rows.
pub fn from_rows(r: [[f64; 3]; 3]) -> DMat3 {
    DMat3::from_cols_array_2d(&r).transpose()
}

/// Rows of a matrix.
pub fn to_rows(m: &DMat3) -> [[f64; 3]; 3] {
    m.transpose().to_cols_array_2d()
}

/// `vec(M)` in the row-major convention of [`flat`].
pub fn vec9(m: &DMat3) -> [f64; 9] {
    let r = to_rows(m);
    [r[0][0], r[0][1], r[0][2], r[1][0], r[1][1], r[1][2], r[2][0], r[2][1], r[2][2]]
}

/// Inverse of [`vec9`].
pub fn unvec9(v: &[f64; 9]) -> DMat3 {
    from_rows([[v[0], v[1], v[2]], [v[3], v[4], v[5]], [v[6], v[7], v[8]]])
}

/// Eigen-decomposition of a symmetric 3x3 matrix by cyclic Jacobi rotations.
/// Returns eigenvalues in descending order and the eigenvectors as the columns of a rotation.
pub fn symmetric_eigen3(m: &DMat3) -> ([f64; 3], DMat3) {
    let [decomposed] = jacobi::<true, 1>(rows_lanes(&[*m]), rows_lanes(&[DMat3::IDENTITY]));
    decomposed
}

/// [`symmetric_eigen3`] of `N` matrices at once, lane by lane (each lane's result is what it
/// would be alone, so that a batch hides one solve's chain of divisions and square roots
/// behind its neighbours'), warm-started from `start`: rotations near the eigenvectors, made
/// orthonormal first so that round-off does not build up in a basis carried over many solves.
/// The sweeps begin on `start^T m start`, nearly diagonal, and take one or two where a cold
/// start takes four or five.
#[inline(always)]
pub fn symmetric_eigen3_from<const N: usize>(m: &[DMat3; N], start: &[DMat3; N]) -> [([f64; 3], DMat3); N] {
    let mut bases = [DMat3::IDENTITY; N];
    let mut rotated = [DMat3::IDENTITY; N];
    for l in 0..N {
        let x = start[l].x_axis.normalize_or(DVec3::X);
        let y = (start[l].y_axis - x * x.dot(start[l].y_axis)).normalize_or(any_orthogonal(x));
        bases[l] = DMat3::from_cols(x, y, x.cross(y));
        rotated[l] = bases[l].transpose() * m[l] * bases[l];
    }
    jacobi::<true, N>(rows_lanes(&rotated), rows_lanes(&bases))
}

/// A factor `F` of the symmetric 3x3 `m`'s non-negative part, `F F^T`: its eigenvectors
/// scaled by the square roots of its eigenvalues (negative ones taken as zero). Rounded to
/// f32, `|F^T x|^2` stays a sum of squares where `x^T m x` rounded would not.
pub fn psd_factor(m: &DMat3) -> DMat3 {
    // A diagonal matrix (a drag's block, or none: most of a step's damping) needs no
    // eigensolve.
    let off_diagonal = [m.x_axis.y, m.x_axis.z, m.y_axis.x, m.y_axis.z, m.z_axis.x, m.z_axis.y];
    if off_diagonal.iter().all(|&c| c == 0.0) {
        let root = |d: f64| d.max(0.0).sqrt();
        return DMat3::from_diagonal(DVec3::new(root(m.x_axis.x), root(m.y_axis.y), root(m.z_axis.z)));
    }
    let (values, vectors) = symmetric_eigen3(m);
    vectors * DMat3::from_diagonal(DVec3::from(values.map(|l| l.max(0.0).sqrt())))
}

/// The eigenvalues of a symmetric 3x3 matrix, descending: the rotations of
/// [`symmetric_eigen3`] without accumulating the eigenvectors.
pub fn symmetric_eigenvalues3(m: &DMat3) -> [f64; 3] {
    let [(values, _)] = jacobi::<false, 1>(rows_lanes(&[*m]), rows_lanes(&[DMat3::ZERO]));
    values
}

/// The rows of `N` matrices, lane by lane: `rows[i][j]` holds entry `(i, j)`.
#[inline(always)]
fn rows_lanes<const N: usize>(m: &[DMat3; N]) -> [[Lanes<N>; 3]; 3] {
    let mut rows = [[Lanes::splat(0.0); 3]; 3];
    for (l, m) in m.iter().enumerate() {
        for (i, row) in rows.iter_mut().enumerate() {
            for (j, entry) in row.iter_mut().enumerate() {
                entry.0[l] = m.col(j)[i];
            }
        }
    }
    rows
}

/// Cyclic Jacobi on the rows `a`, lane by lane, with the rotations accumulated onto the basis
/// `v` (rows) only when `VECTORS`. A lane that has converged, or a pair already zero, takes
/// the rotation `c = 1, s = 0`, which leaves its values exactly as they are.
#[inline(always)]
fn jacobi<const VECTORS: bool, const N: usize>(
    mut a: [[Lanes<N>; 3]; 3],
    mut v: [[Lanes<N>; 3]; 3],
) -> [([f64; 3], DMat3); N] {
    let mut squares = Lanes::splat(0.0);
    for x in a.iter().flatten() {
        squares += *x * *x;
    }
    // Converged once the off-diagonal mass is at the f64 round-off of the matrix norm:
    // another sweep would only rotate by angles below an ulp.
    let floor = squares * (f64::EPSILON * f64::EPSILON);
    let mut active = [true; N];
    for _sweep in 0..32 {
        let off = a[0][1] * a[0][1] + a[0][2] * a[0][2] + a[1][2] * a[1][2];
        for l in 0..N {
            active[l] &= !(off.0[l] <= floor.0[l] || off.0[l] == 0.0);
        }
        if !active.contains(&true) {
            break;
        }
        for (p, q) in [(0, 1), (0, 2), (1, 2)] {
            let theta = (a[q][q] - a[p][p]) / (a[p][q] * 2.0);
            let sign = Lanes::from_fn(|l| theta.0[l].signum());
            let t = sign / (theta.abs() + (theta * theta + 1.0).sqrt());
            let t = Lanes::from_fn(|l| if theta.0[l] == 0.0 { 1.0 } else { t.0[l] });
            let c = (t * t + 1.0).sqrt().map(|x| 1.0 / x);
            let s = t * c;
            let rotate: [bool; N] = std::array::from_fn(|l| active[l] && a[p][q].0[l] != 0.0);
            let (c, s) =
                (Lanes::select(rotate, c, Lanes::splat(1.0)), Lanes::select(rotate, s, Lanes::splat(0.0)));
            for row in a.iter_mut() {
                let (akp, akq) = (row[p], row[q]);
                row[p] = c * akp - s * akq;
                row[q] = s * akp + c * akq;
            }
            let (ap, aq) = (a[p], a[q]);
            for k in 0..3 {
                a[p][k] = c * ap[k] - s * aq[k];
                a[q][k] = s * ap[k] + c * aq[k];
            }
            if VECTORS {
                for row in v.iter_mut() {
                    let (vp, vq) = (row[p], row[q]);
                    row[p] = c * vp - s * vq;
                    row[q] = s * vp + c * vq;
                }
            }
        }
    }
    std::array::from_fn(|l| {
        let diagonal = [a[0][0].0[l], a[1][1].0[l], a[2][2].0[l]];
        let mut order = [0usize, 1, 2];
        order.sort_by(|&i, &j| diagonal[j].total_cmp(&diagonal[i]));
        let values = order.map(|i| diagonal[i]);
        if !VECTORS {
            return (values, DMat3::IDENTITY);
        }
        let column = |i: usize| DVec3::new(v[0][i].0[l], v[1][i].0[l], v[2][i].0[l]);
        let mut vectors = DMat3::from_cols(column(order[0]), column(order[1]), column(order[2]));
        if vectors.determinant() < 0.0 {
            vectors.z_axis = -vectors.z_axis;
        }
        (values, vectors)
    })
}

/// Any unit vector orthogonal to `a` (which must be non-zero).
fn any_orthogonal(a: DVec3) -> DVec3 {
    let helper = if a.x.abs() < 0.9 { DVec3::X } else { DVec3::Y };
    a.cross(helper).normalize()
}

/// The signed singular values of `F` (as [`signed_svd`] orders and signs them) without the
/// rotations: the square roots of the eigenvalues of `F^T F`, the smallest negated when
/// `det F < 0`. Enough for the energy of the rotation-based models.
pub fn signed_singular_values(f: &DMat3) -> DVec3 {
    let [a, b, c] = symmetric_eigenvalues3(&(f.transpose() * *f)).map(|l| l.max(0.0).sqrt());
    DVec3::new(a, b, if f.determinant() < 0.0 { -c } else { c })
}

/// Signed ("rotation-variant") SVD: `F = U diag(sigma) V^T` with `U`, `V` proper rotations,
/// `sigma[0] >= sigma[1] >= |sigma[2]|`, and `sigma[2] < 0` exactly when `det F < 0`.
/// Inverted elements then have a well-defined, smooth set of principal stretches.
pub fn signed_svd(f: &DMat3) -> (DMat3, DVec3, DMat3) {
    let (_, v) = symmetric_eigen3(&(f.transpose() * *f));
    let b = *f * v;
    let (b0, b1, b2) = (b.x_axis, b.y_axis, b.z_axis);
    let n0 = b0.length();
    let scale = f.to_cols_array().iter().map(|x| x.abs()).fold(0.0, f64::max);
    // A column below round-off of the matrix is treated as zero (rank-deficient F).
    let tiny = 1e-300_f64.max(1e-15 * scale);
    let u0 = if n0 > tiny { b0 / n0 } else { DVec3::X };
    let r1 = b1 - u0 * u0.dot(b1);
    let n1 = r1.length();
    let u1 = if n1 > tiny { r1 / n1 } else { any_orthogonal(u0) };
    let u2 = u0.cross(u1);
    let sigma = DVec3::new(u0.dot(b0), u1.dot(b1), u2.dot(b2));
    (DMat3::from_cols(u0, u1, u2), sigma, v)
}

/// `a^T M b` for 9-vectors.
pub fn quadratic9(m: &Mat9, a: &[f64; 9], b: &[f64; 9]) -> f64 {
    let mut s = 0.0;
    for i in 0..9 {
        let mut row = 0.0;
        for j in 0..9 {
            row += m[i][j] * b[j];
        }
        s += a[i] * row;
    }
    s
}

/// Adds `w a a^T` to `m`.
#[inline]
pub fn add_outer9(m: &mut Mat9, w: f64, a: &[f64; 9]) {
    for i in 0..9 {
        let wa = w * a[i];
        for j in 0..9 {
            m[i][j] += wa * a[j];
        }
    }
}

/// Smallest eigenvalue of a symmetric matrix of any small size, by Jacobi sweeps.
/// Used by tests and assertions, never on the hot path.
pub fn smallest_eigenvalue(m: &[Vec<f64>]) -> f64 {
    let n = m.len();
    let mut a: Vec<Vec<f64>> = m.to_vec();
    for _ in 0..100 {
        let mut off = 0.0;
        for p in 0..n {
            for q in p + 1..n {
                off += a[p][q] * a[p][q];
            }
        }
        if off < 1e-30 {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                if a[p][q].abs() < 1e-300 {
                    continue;
                }
                let theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
                let t = if theta == 0.0 {
                    1.0
                } else {
                    theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt())
                };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..n {
                    let akp = a[k][p];
                    let akq = a[k][q];
                    a[k][p] = c * akp - s * akq;
                    a[k][q] = s * akp + c * akq;
                }
                for k in 0..n {
                    let apk = a[p][k];
                    let aqk = a[q][k];
                    a[p][k] = c * apk - s * aqk;
                    a[q][k] = s * apk + c * aqk;
                }
            }
        }
    }
    (0..n).map(|i| a[i][i]).fold(f64::INFINITY, f64::min)
}

/// Whether the symmetric `m` is positive definite: an `L D L^T` factorization (Cholesky's
/// without its square roots, one reciprocal per pivot) meets only positive pivots. Inlined,
/// so that the kernels compiled for AVX2 test their element matrices with AVX2.
#[inline(always)]
pub fn is_positive_definite<const N: usize>(m: &[[f64; N]; N]) -> bool {
    // l[i][j] d_j, and 1 / d_j.
    let (mut ld, mut inverse) = ([[0.0; N]; N], [0.0; N]);
    for j in 0..N {
        let mut pivot = m[j][j];
        for k in 0..j {
            pivot -= ld[j][k] * ld[j][k] * inverse[k];
        }
        if !(pivot > 0.0) {
            return false;
        }
        inverse[j] = 1.0 / pivot;
        for i in j + 1..N {
            let mut s = m[i][j];
            for k in 0..j {
                s -= ld[i][k] * ld[j][k] * inverse[k];
            }
            ld[i][j] = s;
        }
    }
    true
}

/// Replaces the negative eigenvalues of the symmetric `m` by their magnitudes (the crate's
/// PSD projection, see `Projection::Psd`), by cyclic Jacobi sweeps; a positive definite `m`
/// is left as it is after one factorization test (inlined, the sweeps are not).
#[inline(always)]
pub fn make_positive_semidefinite<const N: usize>(m: &mut [[f64; N]; N]) {
    if !is_positive_definite(m) {
        project_eigenvalues(m);
    }
}

/// [`make_positive_semidefinite`] of a matrix that is not positive definite.
fn project_eigenvalues<const N: usize>(m: &mut [[f64; N]; N]) {
    let mut a = *m;
    let mut v = [[0.0; N]; N];
    for (i, row) in v.iter_mut().enumerate() {
        row[i] = 1.0;
    }
    let scale = a.iter().flatten().map(|x| x * x).sum::<f64>();
    for _sweep in 0..50 {
        let mut off = 0.0;
        for p in 0..N {
            for q in p + 1..N {
                off += a[p][q] * a[p][q];
            }
        }
        if off <= 1e-30 * scale {
            break;
        }
        for p in 0..N {
            for q in p + 1..N {
                if a[p][q] == 0.0 {
                    continue;
                }
                let theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..N {
                    let (akp, akq) = (a[k][p], a[k][q]);
                    a[k][p] = c * akp - s * akq;
                    a[k][q] = s * akp + c * akq;
                }
                for k in 0..N {
                    let (apk, aqk) = (a[p][k], a[q][k]);
                    a[p][k] = c * apk - s * aqk;
                    a[q][k] = s * apk + c * aqk;
                }
                for row in v.iter_mut() {
                    let (vp, vq) = (row[p], row[q]);
                    row[p] = c * vp - s * vq;
                    row[q] = s * vp + c * vq;
                }
            }
        }
    }
    // m = V |diag(a)| V^T.
    for i in 0..N {
        for j in 0..N {
            m[i][j] = (0..N).map(|k| v[i][k] * a[k][k].abs() * v[j][k]).sum();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Sums made together in one pass are the bits of the same sums made one pass each, over
    /// more vertices than a chunk and a part of one.
    #[test]
    fn sums_in_one_pass_are_the_bits_of_separate_passes() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let n = 2 * VERTEX_CHUNK + 123;
        let values: Vec<[f64; 2]> =
            (0..n).map(|_| [rng.random_range(-1e3..1e3), rng.random_range(-1.0..1.0)]).collect();
        let [first, second] = sums_per_vertex(n, |v| values[v]);
        assert_eq!(first.to_bits(), sum_per_vertex(n, |v| values[v][0]).to_bits());
        assert_eq!(second.to_bits(), sum_per_vertex(n, |v| values[v][1]).to_bits());
        // The chunks' sums in chunk order, each in vertex order.
        let chunked: f64 = (0..n)
            .step_by(VERTEX_CHUNK)
            .map(|s| values[s..(s + VERTEX_CHUNK).min(n)].iter().map(|v| v[0]).sum::<f64>())
            .sum();
        assert_eq!(first.to_bits(), chunked.to_bits());
    }

    fn random_matrix(rng: &mut ChaCha8Rng) -> DMat3 {
        DMat3::from_cols_array(&std::array::from_fn(|_| rng.random_range(-2.0..2.0)))
    }

    /// The batched, warm-started eigensolve: each lane's result is bit for bit its solve
    /// alone (a lane that has converged waits unchanged for the others: here a diagonal
    /// matrix and a multiple of the identity beside general ones), and it decomposes the
    /// matrix into a rotation and descending eigenvalues, those of a cold solve.
    #[test]
    fn batched_eigensolves_are_their_lanes_alone() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        for round in 0..50 {
            let mut m: [DMat3; 4] = std::array::from_fn(|_| {
                let a = random_matrix(&mut rng);
                a + a.transpose()
            });
            m[round % 4] = DMat3::from_diagonal(DVec3::new(1.5, -0.25, 0.75));
            m[(round + 1) % 4] = DMat3::IDENTITY * 0.5;
            let start: [DMat3; 4] = std::array::from_fn(|_| {
                let axis = DVec3::new(rng.random_range(-1.0..1.0), rng.random_range(-1.0..1.0), 0.3);
                DMat3::from_axis_angle(axis.normalize(), rng.random_range(-3.0..3.0))
            });
            let batch = symmetric_eigen3_from(&m, &start);
            for l in 0..4 {
                let [alone] = symmetric_eigen3_from(&[m[l]], &[start[l]]);
                assert_eq!(batch[l], alone, "round {round} lane {l}");
                let (values, v) = alone;
                assert!(values[0] >= values[1] && values[1] >= values[2], "{values:?}");
                assert!(
                    (v.determinant() - 1.0).abs() < 1e-12
                        && (v.transpose() * v).abs_diff_eq(DMat3::IDENTITY, 1e-12)
                );
                let back = v * DMat3::from_diagonal(DVec3::from(values)) * v.transpose();
                assert!(
                    back.abs_diff_eq(m[l], 1e-12 * (1.0 + m[l].abs().to_cols_array().iter().sum::<f64>()))
                );
                let (cold, _) = symmetric_eigen3(&m[l]);
                for (a, b) in values.iter().zip(cold) {
                    assert!((a - b).abs() <= 1e-13 * (1.0 + b.abs()), "warm {values:?}, cold {cold:?}");
                }
            }
        }
    }

    /// `psd_factor` gives back a PSD matrix, and the non-negative part of an indefinite one.
    /// Rounded to f32, a sticking friction block `c (I - n n^T)` (c = 6.5e11 N/m, n off the
    /// axes) times a 2 km step along n, zero exactly, comes to 4e3 J through the factor, a
    /// sum of squares; the block's own product, rounded alike, to 2e10 J, of either sign.
    #[test]
    fn a_psd_factor_keeps_a_rank_deficient_block_non_negative_in_f32() {
        let mut rng = ChaCha8Rng::seed_from_u64(17);
        for _ in 0..100 {
            let a = random_matrix(&mut rng);
            let (values, v) = symmetric_eigen3(&(a + a.transpose()));
            let clipped = v * DMat3::from_diagonal(DVec3::from(values.map(|l| l.max(0.0)))) * v.transpose();
            let f = psd_factor(&(a + a.transpose()));
            let scale = 1.0 + values[0].abs();
            assert!(
                (f * f.transpose()).abs_diff_eq(clipped, 1e-12 * scale),
                "{:?} {clipped:?}",
                f * f.transpose()
            );
            let psd = a * a.transpose();
            let f = psd_factor(&psd);
            assert!(
                (f * f.transpose())
                    .abs_diff_eq(psd, 1e-12 * (1.0 + psd.abs().to_cols_array().iter().sum::<f64>()))
            );
        }
        let diagonal = psd_factor(&DMat3::from_diagonal(DVec3::new(4.0, 0.0, -1.0)));
        assert_eq!(diagonal, DMat3::from_diagonal(DVec3::new(2.0, 0.0, 0.0)));
        let n = DVec3::new(0.48, -0.31, 0.82).normalize();
        let block = (DMat3::IDENTITY - DMat3::from_cols(n * n.x, n * n.y, n * n.z)) * 6.5e11;
        let step = n * 2e3;
        let (block32, f32_factor, step32) = (block.as_mat3(), psd_factor(&block).as_mat3(), step.as_vec3());
        let through_factor = (f32_factor.transpose() * step32).length_squared() as f64;
        let through_block = step32.dot(block32 * step32) as f64;
        assert!((0.0..1e4).contains(&through_factor), "{through_factor:e}");
        assert!(through_block.abs() > 1e9, "the block's own product came to {through_block:e}");
    }

    /// The passes over a large body's vertices: a sum is its fixed chunks' sums added in
    /// order, the same bits on a pool of one thread as on the default one, and the first
    /// non-finite vertex is the first in the order of the vertices, in whichever chunk.
    #[test]
    fn vertex_passes_keep_the_order_of_their_chunks() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let n = 9 * VERTEX_CHUNK + 123;
        let values: Vec<f64> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
        let chunked: f64 = values
            .chunks(VERTEX_CHUNK)
            .map(|chunk| chunk.iter().sum::<f64>())
            .collect::<Vec<_>>()
            .iter()
            .sum();
        let one_thread = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let serial = one_thread.install(|| sum_per_vertex(n, |v| values[v]));
        assert_eq!(sum_per_vertex(n, |v| values[v]).to_bits(), chunked.to_bits());
        assert_eq!(serial.to_bits(), chunked.to_bits());
        let mut points = vec![[0.5; 3]; n];
        assert_eq!(first_non_finite(&points), None);
        points[7 * VERTEX_CHUNK + 5][1] = f64::INFINITY;
        points[2 * VERTEX_CHUNK + 9][2] = f64::NAN;
        assert_eq!(first_non_finite(&points), Some(2 * VERTEX_CHUNK + 9));
    }

    #[test]
    fn signed_svd_reconstructs_and_is_orthogonal() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut worst = 0.0_f64;
        for k in 0..2000 {
            let mut f = random_matrix(&mut rng);
            if k % 7 == 0 {
                f.z_axis = f.x_axis * 0.5; // rank-deficient
            }
            if k % 11 == 0 {
                f = DMat3::from_diagonal(DVec3::new(1.0, 1.0, -1.0)); // repeated singular values
            }
            let (u, s, v) = signed_svd(&f);
            let back = u * DMat3::from_diagonal(s) * v.transpose();
            let err = (back - f).to_cols_array().iter().map(|x| x.abs()).fold(0.0, f64::max);
            let ortho_u = (u.transpose() * u - DMat3::IDENTITY).to_cols_array();
            let ortho_v = (v.transpose() * v - DMat3::IDENTITY).to_cols_array();
            let ortho = ortho_u.iter().chain(&ortho_v).map(|x| x.abs()).fold(0.0, f64::max);
            worst = worst.max(err).max(ortho);
            assert!((u.determinant() - 1.0).abs() < 1e-12 && (v.determinant() - 1.0).abs() < 1e-12);
            assert!(s.x >= s.y - 1e-12 && s.y >= s.z.abs() - 1e-12, "order broken at {k}: {s}");
            // The sign of the smallest stretch is the sign of det F (clear of round-off).
            let det = f.determinant();
            if det.abs() > 1e-9 {
                assert_eq!(s.z < 0.0, det < 0.0, "sign of sigma_3 at {k}: {s}, det {det}");
            }
        }
        // Entries are O(1); reconstruction and orthogonality at a few hundred ulps.
        assert!(worst < 1e-12, "worst SVD error {worst:e}");
    }

    #[test]
    fn signed_singular_values_match_the_signed_svd() {
        let mut rng = ChaCha8Rng::seed_from_u64(8);
        let mut worst = 0.0_f64;
        for k in 0..2000 {
            let mut f = random_matrix(&mut rng);
            if k % 7 == 0 {
                f.z_axis = f.x_axis * 0.5; // rank-deficient
            }
            if k % 13 == 0 {
                f = DMat3::IDENTITY + random_matrix(&mut rng) * 1e-3; // near rest
            }
            let (_, s, _) = signed_svd(&f);
            let values = signed_singular_values(&f);
            let norm2 = f.to_cols_array().iter().map(|x| x * x).sum::<f64>();
            for i in 0..3 {
                // Through F^T F the squares are exact to round-off of |F|^2; a square root
                // turns that into ~1e-8 absolute at a zero singular value, 1e-16 near 1.
                let error = (values[i] * values[i].abs() - s[i] * s[i].abs()).abs() / norm2;
                worst = worst.max(error);
                assert!(error < 1e-14, "singular value {i} of case {k}: {values} vs {s}");
            }
            // The smallest carries the sign of det F wherever that is clear of round-off.
            if f.determinant().abs() > 1e-9 {
                assert_eq!(values.z < 0.0, s.z < 0.0, "sign of the smallest at {k}: {values} vs {s}");
            }
        }
        println!("worst relative error of a squared singular value: {worst:.1e}");
    }
}
