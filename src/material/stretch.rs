//! Materials in the symmetric stretch `S = R^T F` of the signed polar decomposition
//! `F = R S` (mixed-fem-sqp.md §3.3): the per-element variable of the mixed solver.
//!
//! Every isotropic energy of the crate is a function of `S` alone, written here with the
//! displacement `D = S - I` so that nothing cancels near rest, exactly as
//! [`Elastic::energy`] writes it in `F`: `psi_S(S(F)) = psi(F)`. A symmetric `S` is stored as
//! six numbers ([`Sym6`]) `S00, S11, S22, S12, S02, S01`, each off-diagonal entry once: a
//! change `ds` is the matrix `sum_k ds_k E_k` with `E_k` the diagonal units and the
//! symmetric pairs `e_i e_j^T + e_j e_i^T`. Gradients and Hessians are taken in those six
//! coordinates, so `d psi = g . ds` and `d^2 psi = ds^T H ds` (the paper's `Sym` weighting is
//! the Frobenius product in them).

use glam::{DMat3, DQuat, DVec3};

use super::isotropic::{cofactor, j_minus_one};
use super::projective::{RotationSearch, closest_rotations};
use super::{Elastic, MaterialModel, Projection};
use crate::math::lanes::{Lane, Lanes, Mat3s, mat_lane, mats_to_lanes};
use crate::math::outer;

/// A symmetric 3x3 matrix: `S00, S11, S22, S12, S02, S01`.
pub type Sym6 = [f64; 6];

/// The [`Sym6`] of entries `f(0), ..., f(5)`. A plain loop: `std::array::from_fn`'s closures
/// were left out of line in the mixed kernels, and so compiled without their AVX2.
#[inline(always)]
pub fn sym6(mut f: impl FnMut(usize) -> f64) -> Sym6 {
    let mut out = [0.0; 6];
    for (k, x) in out.iter_mut().enumerate() {
        *x = f(k);
    }
    out
}

/// A 6x6 matrix on [`Sym6`] coordinates.
pub type Mat6 = [[f64; 6]; 6];

/// Row and column of coordinate `k`.
const INDEX: [(usize, usize); 6] = [(0, 0), (1, 1), (2, 2), (1, 2), (0, 2), (0, 1)];

/// The symmetric matrix of `s`.
pub fn sym_matrix(s: &Sym6) -> DMat3 {
    DMat3::from_cols(DVec3::new(s[0], s[5], s[4]), DVec3::new(s[5], s[1], s[3]), DVec3::new(s[4], s[3], s[2]))
}

/// The coordinates of the symmetric part of `m`.
pub fn sym_coordinates(m: &DMat3) -> Sym6 {
    let at = |i: usize, j: usize| 0.5 * (m.col(j)[i] + m.col(i)[j]);
    sym6(|k| at(INDEX[k].0, INDEX[k].1))
}

/// The unit change of coordinate `k`, as a matrix.
fn unit(k: usize) -> DMat3 {
    let mut s = [0.0; 6];
    s[k] = 1.0;
    sym_matrix(&s)
}

/// `<A, B>`, the Frobenius product.
fn dot(a: &DMat3, b: &DMat3) -> f64 {
    a.x_axis.dot(b.x_axis) + a.y_axis.dot(b.y_axis) + a.z_axis.dot(b.z_axis)
}

fn trace(m: &DMat3) -> f64 {
    m.x_axis.x + m.y_axis.y + m.z_axis.z
}

/// The signed polar stretch of `F` and its derivative: `S = R^T F` with `R` the closest
/// rotation (from `warm`, which receives it), and `dS/dF` as six rows over `vec(F)` (row-major,
/// as [`crate::math::vec9`]).
///
/// With `dR = R [w]x`, symmetry of `dS = R^T dF - [w]x S` requires `(tr S I - S) w =
/// axial(M - M^T)`, `M = R^T dF`. `tr S I - S` has the pair sums of the signed stretches as
/// eigenvalues; where two cancel (a flat, half-inverted element) the derivative is singular,
/// and the solve is shifted as the isotropic models' twist modes are.
pub fn polar_stretch(f: &DMat3, warm: &mut DQuat) -> (Sym6, [[f64; 9]; 6]) {
    let (s, r) = signed_polar(f, warm);
    (s, stretch_derivative(&s, &r))
}

/// `dS/dF` (see [`polar_stretch`]) at the signed polar decomposition `F = R S`. Inlined,
/// so that the mixed linearization's AVX2 kernel compiles it with AVX2.
#[inline(always)]
pub fn stretch_derivative(s: &Sym6, r: &DMat3) -> [[f64; 9]; 6] {
    let s_matrix = sym_matrix(s);
    let pair_sums = DMat3::IDENTITY * trace(&s_matrix) - s_matrix;
    let scale = trace(&s_matrix).abs().max(1.0);
    let determinant = pair_sums.determinant();
    let inverse = if determinant.abs() > 1e-12 * scale * scale * scale {
        pair_sums.inverse()
    } else {
        (pair_sums + DMat3::IDENTITY * 1e-6 * scale).inverse()
    };
    // sym([w]x S) is linear in w: sym([e_m]x S) is column m of L (6 x 3), and with
    // w = inverse axial the whole correction is G axial, G = L inverse.
    let columns = [s_matrix.x_axis, s_matrix.y_axis, s_matrix.z_axis];
    let l: [Sym6; 3] = std::array::from_fn(|m| {
        let axis = DVec3::AXES[m];
        let x = [axis.cross(columns[0]), axis.cross(columns[1]), axis.cross(columns[2])];
        sym6(|k| {
            let (a, b) = INDEX[k];
            0.5 * (x[b][a] + x[a][b])
        })
    });
    let g: [Sym6; 3] = std::array::from_fn(|n| {
        let column = inverse.col(n);
        sym6(|k| l[0][k] * column.x + l[1][k] * column.y + l[2][k] * column.z)
    });
    let mut jacobian = [[0.0; 9]; 6];
    for i in 0..3 {
        // dF = e_i e_j^T: M = R^T e_i e_j^T = r e_j^T with r the row i of R, whose skew part
        // has the axial vector e_j x r (two entries); dS = sym(M) - G axial.
        let row = r.row(i);
        for j in 0..3 {
            let (p, q) = ((j + 1) % 3, (j + 2) % 3);
            let (axial_p, axial_q) = (-row[q], row[p]);
            for (k, &(a, b)) in INDEX.iter().enumerate() {
                let m = 0.5 * (if b == j { row[a] } else { 0.0 } + if a == j { row[b] } else { 0.0 });
                jacobian[k][3 * i + j] = m - (g[p][k] * axial_p + g[q][k] * axial_q);
            }
        }
    }
    jacobian
}

/// One pair of principal stretches' share of the stretch's curvature (see
/// [`stretch_curvature`]): the Hessian in the pair's unit twist and flip directions,
/// `[[twist, coupling], [coupling, 0]]`.
#[derive(Clone, Copy, Debug)]
pub struct CurvaturePair {
    pub twist: f64,
    pub coupling: f64,
}

impl CurvaturePair {
    /// The Hessian in the pair's directions: exact, or its non-negative part (the pair's
    /// other eigenvalue is never positive).
    #[inline(always)]
    pub fn form(&self, projection: Projection) -> [[f64; 2]; 2] {
        let (twist, coupling) = (self.twist, self.coupling);
        if projection == Projection::None {
            return [[twist, coupling], [coupling, 0.0]];
        }
        let root = (twist * twist + 4.0 * coupling * coupling).sqrt();
        // Without cancellation where the twist is negative.
        let lambda =
            if twist < 0.0 { 2.0 * coupling * coupling / (root - twist) } else { 0.5 * (twist + root) };
        if lambda <= 0.0 {
            return [[0.0; 2]; 2];
        }
        // The eigenvector (lambda, coupling), normalized: lambda e e^T.
        let scale = lambda / (lambda * lambda + coupling * coupling);
        [
            [scale * lambda * lambda, scale * lambda * coupling],
            [scale * lambda * coupling, scale * coupling * coupling],
        ]
    }
}

/// The pairs `(i, k)` of principal stretches, in the order of [`StretchCurvature::pairs`].
pub const STRETCH_PAIRS: [(usize, usize); 3] = [(0, 1), (0, 2), (1, 2)];

/// The stretch's curvature (see [`stretch_curvature`]): the eigenvectors `V` of `S` (as
/// columns), `U = R V`, and each pair's form.
#[derive(Clone, Copy, Debug)]
pub struct StretchCurvature {
    pub u: DMat3,
    pub v: DMat3,
    pub pairs: [CurvaturePair; 3],
}

impl StretchCurvature {
    /// Pair `p`'s unit twist and flip directions `D` applied to a vector `b`, given
    /// `w = V^T b`: `D b = (u_i w_k -+ u_k w_i) / sqrt 2`. (Directions as vectors: the
    /// matrices cost a tet three times the arithmetic.)
    #[inline(always)]
    pub fn directions_times(&self, p: usize, w: DVec3) -> (DVec3, DVec3) {
        let (i, k) = STRETCH_PAIRS[p];
        let half = std::f64::consts::FRAC_1_SQRT_2;
        let (a, b) = (self.u.col(i) * (w[k] * half), self.u.col(k) * (w[i] * half));
        (a - b, a + b)
    }

    /// Pair `p`'s unit twist and flip directions as matrices,
    /// `U (e_i e_k^T -+ e_k e_i^T) V^T / sqrt 2`.
    pub fn directions(&self, p: usize) -> (DMat3, DMat3) {
        let (i, k) = STRETCH_PAIRS[p];
        let half = std::f64::consts::FRAC_1_SQRT_2;
        let (ik, ki) = (outer(self.u.col(i), self.v.col(k)), outer(self.u.col(k), self.v.col(i)));
        ((ik - ki) * half, (ik + ki) * half)
    }
}

/// The stretch's curvature, the term of the displacement formulation's Hessian that the
/// mixed solver's condensed system lacks: `d^2 (sigma : S(F)) / dF^2` at `F = R S` for the
/// stress `sigma` (in [`Sym6`] gradient coordinates), by pairs of principal stretches.
///
/// With `S = V diag(s) V^T`, `U = R V` and `t_i = v_i^T sigma v_i`, a change `dF` with
/// `U^T dF V = E` moves `sigma : S` to second order only through each pair's off-diagonal
/// entries `(E_ik, E_ki)` (the polar rotation's second-order response). In the unit twist
/// `U (e_i e_k^T - e_k e_i^T) V^T / sqrt 2` and flip `U (e_i e_k^T + e_k e_i^T) V^T / sqrt 2`
/// directions its Hessian is `[[2 (t_i s_k + t_k s_i) / (s_i + s_k)^2, (t_k - t_i) / (s_i +
/// s_k)], [., 0]]`: exact where `sigma` commutes with `S` (always at the solution), the part
/// of `sigma` off `V`'s diagonal dropped otherwise. Added to `J^T psi'' J`, it gives the
/// twist eigenvalue of an isotropic energy, `(t_i + t_k) / (s_i + s_k)`, which turns negative
/// under compression. Pairs whose stretches nearly cancel (a flat element) are left out, as
/// [`stretch_derivative`] shifts them.
///
/// Takes `S`'s eigen-decomposition `(s, V)` as [`crate::math::symmetric_eigen3`] gives it
/// (the mixed solver makes it for a batch of tets at once, warm-started).
#[inline(always)]
pub fn stretch_curvature(eigen: &([f64; 3], DMat3), r: &DMat3, stress: &Sym6) -> StretchCurvature {
    let (stretches, v) = *eigen;
    let sigma =
        sym_matrix(&[stress[0], stress[1], stress[2], 0.5 * stress[3], 0.5 * stress[4], 0.5 * stress[5]]);
    let t: [f64; 3] = std::array::from_fn(|i| v.col(i).dot(sigma * v.col(i)));
    let scale = stretches.iter().map(|x| x.abs()).fold(1.0, f64::max);
    let pairs = STRETCH_PAIRS.map(|(i, k)| {
        let sum = stretches[i] + stretches[k];
        if sum <= 1e-6 * scale {
            CurvaturePair { twist: 0.0, coupling: 0.0 }
        } else {
            CurvaturePair {
                twist: 2.0 * (t[i] * stretches[k] + t[k] * stretches[i]) / (sum * sum),
                coupling: (t[k] - t[i]) / sum,
            }
        }
    });
    StretchCurvature { u: *r * v, v, pairs }
}

/// The signed polar stretch of `F` alone (see [`polar_stretch`]).
pub fn signed_stretch(f: &DMat3, warm: &mut DQuat) -> Sym6 {
    signed_polar(f, warm).0
}

/// The signed polar decomposition `F = R S`: `S` and `R`, the closest rotation (from `warm`,
/// which receives it).
pub fn signed_polar(f: &DMat3, warm: &mut DQuat) -> (Sym6, DMat3) {
    let mut batch = [*warm];
    let [decomposed] = signed_polars::<1, Lanes<1>>(&[*f], &mut batch);
    *warm = batch[0];
    decomposed
}

/// [`signed_polar`] of `N` matrices at once, lane by lane (each lane's result is what it
/// would be alone; the closest rotations' Newton steps hide each other's divisions).
#[inline(always)]
pub fn signed_polars<const N: usize, L: Lane<N>>(
    f: &[DMat3; N],
    warm: &mut [DQuat; N],
) -> [(Sym6, DMat3); N] {
    let lanes: Mat3s<L> = mats_to_lanes(f);
    let (rotations, r) = closest_rotations(&lanes, *warm, RotationSearch::Converged);
    *warm = rotations;
    let mut out = [([0.0; 6], DMat3::IDENTITY); N];
    for l in 0..N {
        let r = mat_lane(&r, l);
        out[l] = (sym_coordinates(&(r.transpose() * f[l])), r);
    }
    out
}

/// `psi_S` with its gradient and Hessian in [`Sym6`] coordinates.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SymmetricDerivatives {
    /// `psi(S)`; `+inf` outside the model's domain.
    pub energy: f64,
    /// `d psi / ds`.
    pub gradient: Sym6,
    /// `d^2 psi / ds^2`, exact or PSD-projected.
    pub hessian: Mat6,
}

impl Elastic {
    /// Whether the energy is defined at the stretch `s`: everywhere but where neo-Hookean's
    /// `ln J` is not (`J <= 0`, with `J - 1` as the energy takes it; the GPU twin's test in
    /// `shaders/mixed.wgsl` is the same). Per tet and line-search candidate, so the
    /// determinant alone, not the energy.
    #[inline(always)]
    pub(crate) fn defined_at(&self, s: &Sym6) -> bool {
        self.model() != MaterialModel::NeoHookean || j_minus_one(&(sym_matrix(s) - DMat3::IDENTITY)) > -1.0
    }

    /// The energy density at the symmetric stretch `s`: the same value as
    /// [`energy`](Self::energy) at any `F` whose signed polar stretch is `s`. Inlined, as
    /// [`symmetric_derivatives`](Self::symmetric_derivatives) is, into the mixed solver's AVX2
    /// kernels.
    #[inline(always)]
    pub fn symmetric_energy(&self, s: &Sym6) -> f64 {
        let (mu, lambda) = self.lame();
        let d = sym_matrix(s) - DMat3::IDENTITY;
        let tr = trace(&d);
        let squared = dot(&d, &d);
        match self.model() {
            MaterialModel::Arap => mu * squared,
            MaterialModel::Corotated => mu * squared + 0.5 * lambda * tr * tr,
            MaterialModel::FixedCorotated => {
                let jm1 = j_minus_one(&d);
                mu * squared + 0.5 * lambda * jm1 * jm1
            }
            MaterialModel::StableNeoHookean => {
                let jm1 = j_minus_one(&d);
                0.5 * mu * squared - mu * (jm1 - tr) + 0.5 * (lambda + mu) * jm1 * jm1
            }
            MaterialModel::NeoHookean => {
                let jm1 = j_minus_one(&d);
                if jm1 <= -1.0 {
                    return f64::INFINITY;
                }
                let lnj = jm1.ln_1p();
                0.5 * mu * squared + mu * (tr - lnj) + 0.5 * lambda * lnj * lnj
            }
            MaterialModel::StVK => {
                let e = d + d * d * 0.5;
                let tr_e = trace(&e);
                mu * dot(&e, &e) + 0.5 * lambda * tr_e * tr_e
            }
        }
    }

    /// Energy density, gradient and, when asked, Hessian (zero otherwise) at the symmetric
    /// stretch `s`; with [`Projection::Psd`] the Hessian's negative eigenvalues are replaced
    /// by their magnitudes, as the tangents in `F` are. Inlined, so that the mixed solver's
    /// AVX2 kernels compile it with AVX2 (out of line it was SSE2): 1.92 -> 1.85 ms an
    /// iteration at 2 160 tets on the 2-core VM (10th-percentile steps, three alternations).
    #[inline(always)]
    pub fn symmetric_derivatives(&self, s: &Sym6, hessian: Option<Projection>) -> SymmetricDerivatives {
        let (mu, lambda) = self.lame();
        let s_matrix = sym_matrix(s);
        let d = s_matrix - DMat3::IDENTITY;
        let tr = trace(&d);
        // J as the energy takes it, so that the derivatives are finite where it is.
        let jm1 = j_minus_one(&d);
        let j = 1.0 + jm1;
        let cof = cofactor(&s_matrix);
        let (wanted, projection) = (hessian.is_some(), hessian);
        // The invariants' derivatives in coordinates: `<E_k, E_l>` is diagonal (GRAM), `d tr`
        // is TRACE, `dJ = c`, and `d^2 J` is a 6x6 matrix linear in S.
        let c = coordinates(&cof);
        // Inlined at each model's call: as a closure it was left out of line, and its 6x6
        // result copied back.
        #[inline(always)]
        fn combine(
            s: &Sym6,
            c: &Sym6,
            wanted: bool,
            gram: f64,
            trace_outer: f64,
            c_outer: f64,
            second_j: f64,
        ) -> Mat6 {
            let mut h = [[0.0; 6]; 6];
            if !wanted {
                return h;
            }
            if second_j != 0.0 {
                determinant_hessian(s, second_j, &mut h);
            }
            for k in 0..6 {
                h[k][k] += gram * GRAM[k];
                for l in 0..6 {
                    h[k][l] += trace_outer * TRACE[k] * TRACE[l] + c_outer * c[k] * c[l];
                }
            }
            h
        }
        let combine = |gram, trace_outer, c_outer, second_j| {
            combine(s, &c, wanted, gram, trace_outer, c_outer, second_j)
        };
        let (gradient, mut hessian) = match self.model() {
            MaterialModel::Arap | MaterialModel::Corotated => {
                let l = if self.model() == MaterialModel::Arap { 0.0 } else { lambda };
                (coordinates(&(d * (2.0 * mu) + DMat3::IDENTITY * (l * tr))), combine(2.0 * mu, l, 0.0, 0.0))
            }
            MaterialModel::FixedCorotated => (
                coordinates(&(d * (2.0 * mu) + cof * (lambda * jm1))),
                combine(2.0 * mu, 0.0, lambda, lambda * jm1),
            ),
            MaterialModel::StableNeoHookean => {
                let l = lambda + mu;
                (coordinates(&(s_matrix * mu + cof * (l * jm1 - mu))), combine(mu, 0.0, l, l * jm1 - mu))
            }
            MaterialModel::NeoHookean => {
                let lnj = jm1.ln_1p();
                let stress_j = lambda * lnj - mu;
                (
                    coordinates(&(s_matrix * mu + cof * (stress_j / j))),
                    combine(mu, 0.0, (lambda - stress_j) / (j * j), stress_j / j),
                )
            }
            MaterialModel::StVK => {
                let e = d + d * d * 0.5;
                let tr_e = trace(&e);
                let de = |a: &DMat3| (s_matrix * *a + *a * s_matrix) * 0.5;
                in_coordinates(
                    (e * s_matrix + s_matrix * e) * mu + s_matrix * (lambda * tr_e),
                    wanted,
                    |a, b| {
                        let ab = (*a * *b + *b * *a) * 0.5;
                        let (da, db) = (de(a), de(b));
                        2.0 * mu * (dot(&da, &db) + dot(&e, &ab))
                            + lambda * (trace(&da) * trace(&db) + tr_e * trace(&ab))
                    },
                )
            }
        };
        if projection == Some(Projection::Psd) {
            crate::math::make_positive_semidefinite(&mut hessian);
        }
        let energy = self.symmetric_energy(s);
        if !energy.is_finite() {
            return SymmetricDerivatives { energy, gradient: [f64::NAN; 6], hessian: [[f64::NAN; 6]; 6] };
        }
        SymmetricDerivatives { energy, gradient, hessian }
    }
}

/// `<E_k, E_k>`: the coordinates' Gram matrix is diagonal.
const GRAM: Sym6 = [1.0, 1.0, 1.0, 2.0, 2.0, 2.0];
/// `tr E_k`.
const TRACE: Sym6 = [1.0, 1.0, 1.0, 0.0, 0.0, 0.0];

/// `<P, E_k>` for each coordinate: the gradient whose matrix form is `P`.
#[inline(always)]
fn coordinates(p: &DMat3) -> Sym6 {
    sym6(|k| {
        let (i, j) = INDEX[k];
        if i == j { p.col(i)[i] } else { p.col(j)[i] + p.col(i)[j] }
    })
}

/// Adds `scale d^2 det` at `s` to `h`. In coordinates `det = s0 s1 s2 + 2 s3 s4 s5 - s0 s3^2
/// - s1 s4^2 - s2 s5^2`, so its second derivatives are the coordinates themselves.
fn determinant_hessian(s: &Sym6, scale: f64, h: &mut Mat6) {
    let [s0, s1, s2, s3, s4, s5] = s.map(|v| scale * v);
    let upper = [
        (0, 1, s2),
        (0, 2, s1),
        (1, 2, s0),
        (0, 3, -2.0 * s3),
        (1, 4, -2.0 * s4),
        (2, 5, -2.0 * s5),
        (3, 4, 2.0 * s5),
        (3, 5, 2.0 * s4),
        (4, 5, 2.0 * s3),
    ];
    for (k, l, value) in upper {
        h[k][l] += value;
        h[l][k] += value;
    }
    h[3][3] -= 2.0 * s0;
    h[4][4] -= 2.0 * s1;
    h[5][5] -= 2.0 * s2;
}

/// A gradient `<P, dS>` and a bilinear form in [`Sym6`] coordinates.
fn in_coordinates(stress: DMat3, wanted: bool, second: impl Fn(&DMat3, &DMat3) -> f64) -> (Sym6, Mat6) {
    let units: [DMat3; 6] = std::array::from_fn(unit);
    let gradient = units.map(|u| dot(&stress, &u));
    let mut hessian = [[0.0; 6]; 6];
    for k in (0..6).filter(|_| wanted) {
        for l in k..6 {
            hessian[k][l] = second(&units[k], &units[l]);
            hessian[l][k] = hessian[k][l];
        }
    }
    (gradient, hessian)
}
