//! Projective-dynamics form of the rotation-based models (stabilizing-integrators-realtime.md
//! §4.2): an energy `sum_k w_k/2 |F - p_k|^2` with each `p_k` the projection of `F` onto a
//! constraint set. Corotated is exactly such an energy with two sets:
//!
//! - `SO(3)`, weight `2 mu`: the projection is the closest rotation `R`, and
//!   `mu |F - R|^2` is the shear term;
//! - the matrices whose signed stretches sum to 3, weight `3 lambda`: the projection shifts
//!   every stretch by `(tr S - 3)/3`, so `|F - p|^2 = (tr S - 3)^2 / 3` and
//!   `3 lambda / 2 |F - p|^2 = lambda/2 (tr S - 3)^2` is the volume term.
//!
//! ARAP is the first alone. With the projections held fixed the energy is a quadratic in `F`
//! whose Hessian is the constant `(2 mu + 3 lambda) I`: that constant is what lets the
//! local/global solver factor its matrix once.

use glam::{DMat3, DQuat};

use crate::math::lanes::{self, Lane, Lanes, Mask, Mat3s, Vec3s, mat_lane, mat3s, one_lane, set_mat_lane};

use super::{CORNER_PAIRS, Elastic, MaterialModel};

/// Newton iterations of the rotation search before falling back to the SVD.
const MAX_ROTATION_ITERATIONS: usize = 8;
/// A Newton step on SO(3) below this angle leaves an error near its square: f64 round-off.
const ROTATION_CONVERGED: f64 = 1e-9;

/// How far a closest-rotation search goes from its warm start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RotationSearch {
    /// To f64 round-off: energies and stresses are the model's own.
    Converged,
    /// One Newton step (the signed SVD where the step cannot be taken). A local/global local
    /// step needs only to lower `|F - R|`, not to minimize it: from the last iteration's
    /// rotation, one step leaves an angle near the square of what it moved (1e-6 and below
    /// in the benchmark's bar), and the next local step goes on from there. The iteration's
    /// fixed point is the same, and the objective still never rises (each half of the
    /// iteration lowers it). Which local steps take it: `LocalGlobalRequest::rotation_search`.
    OneStep,
}

/// The rotation `R` that maximizes `tr(R^T F)` (the closest rotation to `F`, with the
/// signed-SVD convention for inverted `F`), by Newton's method on SO(3) from `warm`. Returns
/// the rotation as a quaternion (the next warm start) and a matrix. One lane of the
/// lane-parallel `closest_rotations`.
pub fn closest_rotation(f: &DMat3, warm: DQuat) -> (DQuat, DMat3) {
    closest_rotation_by(f, warm, RotationSearch::Converged)
}

/// [`closest_rotation`] as far as `search` goes.
pub fn closest_rotation_by(f: &DMat3, warm: DQuat, search: RotationSearch) -> (DQuat, DMat3) {
    let ([q], r) = closest_rotations(&one_lane(f), [warm], search);
    (q, mat_lane(&r, 0))
}

/// [`closest_rotation`] of `N` matrices at once, lane by lane (each lane's result is what it
/// would be alone: a lane stops changing once it has converged).
///
/// With `A = R^T F`, the objective changes under `R exp([w]x)` as `w . a - 1/2 w^T H w`, where
/// `a` is the axial vector of `A - A^T` and `H = tr(A) I - sym(A)`. Near the maximum `H` is
/// positive definite (its eigenvalues are the pair sums of signed stretches), and the Newton
/// step `H^-1 a` converges quadratically; where it is not (a cold start far away, or a flat,
/// half-inverted element) the signed SVD gives the answer directly.
#[inline(always)]
pub fn closest_rotations<const N: usize, L: Lane<N>>(
    f: &Mat3s<L>,
    warm: [DQuat; N],
    search: RotationSearch,
) -> ([DQuat; N], Mat3s<L>) {
    // Sylvester's criterion is scaled to |F|, so that a near-singular H counts as not definite.
    let mut scale = L::splat(f64::MIN_POSITIVE);
    for column in f {
        for x in column {
            scale = scale.max(x.abs());
        }
    }
    let floor = scale * 1e-6;
    let mut components = [[0.0; N]; 4];
    for (l, warm) in warm.iter().enumerate() {
        (components[0][l], components[1][l], components[2][l], components[3][l]) =
            (warm.x, warm.y, warm.z, warm.w);
    }
    let mut q = [
        L::from_array(components[0]),
        L::from_array(components[1]),
        L::from_array(components[2]),
        L::from_array(components[3]),
    ];
    let mut r = rotation_matrix(&q);
    // Lanes still iterating, and lanes that need the SVD.
    let mut active = [true; N];
    let mut failed = [false; N];
    let iterations = match search {
        RotationSearch::Converged => MAX_ROTATION_ITERATIONS,
        RotationSearch::OneStep => 1,
    };
    for _ in 0..iterations {
        // A = R^T F: a[j][i] = column i of R . column j of F.
        let a = mat3s!(|j, i| lanes::dot(&r[i], &f[j]));
        let axial = [a[1][2] - a[2][1], a[2][0] - a[0][2], a[0][1] - a[1][0]];
        // H = tr(A) I - sym(A), symmetric: diagonal d, off-diagonal (xy, xz, yz).
        let trace = a[0][0] + a[1][1] + a[2][2];
        let d = [trace - a[0][0], trace - a[1][1], trace - a[2][2]];
        let (xy, xz, yz) =
            ((a[1][0] + a[0][1]) * -0.5, (a[2][0] + a[0][2]) * -0.5, (a[2][1] + a[1][2]) * -0.5);
        // Cofactors of the symmetric H; its determinant from the first row.
        let c = [d[1] * d[2] - yz * yz, d[0] * d[2] - xz * xz, d[0] * d[1] - xy * xy];
        let (cxy, cxz, cyz) = (xz * yz - xy * d[2], xy * yz - xz * d[1], xy * xz - yz * d[0]);
        let det = d[0] * c[0] + xy * cxy + xz * cxz;
        let definite = [d[0].gt(floor), c[2].gt(floor * scale), det.gt(floor * scale * scale)];
        for l in 0..N {
            let ok = definite[0][l] && definite[1][l] && definite[2][l];
            failed[l] |= active[l] && !ok;
            active[l] &= ok;
        }
        if !active.contains(&true) {
            break;
        }
        let step = [
            (c[0] * axial[0] + cxy * axial[1] + cxz * axial[2]) / det,
            (cxy * axial[0] + c[1] * axial[1] + cyz * axial[2]) / det,
            (cxz * axial[0] + cyz * axial[1] + c[2] * axial[2]) / det,
        ];
        // exp of the step to second order, (w/2, 1) normalized: the third-order difference
        // keeps the convergence quadratic and needs no sin or cos.
        let next = normalized(&multiply(&q, &[step[0] * 0.5, step[1] * 0.5, step[2] * 0.5, L::splat(1.0)]));
        for k in 0..4 {
            q[k] = L::select(active, next[k], q[k]);
        }
        r = rotation_matrix(&q);
        let converged = lanes::dot(&step, &step).lt(L::splat(ROTATION_CONVERGED * ROTATION_CONVERGED));
        for l in 0..N {
            active[l] &= !converged[l];
        }
        if !active.contains(&true) {
            break;
        }
    }
    let components = [q[0].to_array(), q[1].to_array(), q[2].to_array(), q[3].to_array()];
    let mut out = [DQuat::IDENTITY; N];
    for l in 0..N {
        // A lane still moving after all its iterations takes the SVD, unless one step was asked.
        if failed[l] || (active[l] && search == RotationSearch::Converged) {
            let (u, _, v) = crate::math::signed_svd(&mat_lane(f, l));
            let rotation = u * v.transpose();
            set_mat_lane(&mut r, l, &rotation);
            out[l] = DQuat::from_mat3(&rotation).normalize();
        } else {
            out[l] = DQuat::from_xyzw(components[0][l], components[1][l], components[2][l], components[3][l]);
        }
    }
    (out, r)
}

/// The rotation matrix of unit quaternions `(x, y, z, w)`.
#[inline(always)]
fn rotation_matrix<const N: usize, L: Lane<N>>(q: &[L; 4]) -> Mat3s<L> {
    let [x, y, z, w] = *q;
    let (x2, y2, z2) = (x + x, y + y, z + z);
    let (xx, xy, xz) = (x * x2, x * y2, x * z2);
    let (yy, yz, zz) = (y * y2, y * z2, z * z2);
    let (wx, wy, wz) = (w * x2, w * y2, w * z2);
    let one = L::splat(1.0);
    [
        [one - (yy + zz), xy + wz, xz - wy],
        [xy - wz, one - (xx + zz), yz + wx],
        [xz + wy, yz - wx, one - (xx + yy)],
    ]
}

/// The quaternion product `a b`, components `(x, y, z, w)`.
#[inline(always)]
fn multiply<const N: usize, L: Lane<N>>(a: &[L; 4], b: &[L; 4]) -> [L; 4] {
    let [ax, ay, az, aw] = *a;
    let [bx, by, bz, bw] = *b;
    [
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
        aw * bw - ax * bx - ay * by - az * bz,
    ]
}

#[inline(always)]
fn normalized<const N: usize, L: Lane<N>>(q: &[L; 4]) -> [L; 4] {
    let inverse = L::splat(1.0) / (q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]).sqrt();
    [q[0] * inverse, q[1] * inverse, q[2] * inverse, q[3] * inverse]
}

impl Elastic {
    /// The constant Hessian weight of the projective form (`2 mu + 3 lambda` for corotated,
    /// `2 mu` for ARAP), or `None` for a model without one (or a negative `lambda`, whose
    /// volume term is no distance).
    pub fn projective_weight(&self) -> Option<f64> {
        match self.model() {
            MaterialModel::Arap => Some(2.0 * self.mu),
            MaterialModel::Corotated if self.lambda >= 0.0 => Some(2.0 * self.mu + 3.0 * self.lambda),
            _ => None,
        }
    }

    /// The weight of the Laplacian that stands for this model's stiffness in a preconditioner:
    /// the projective weight where there is one, `2 mu + 3 max(lambda, 0)` otherwise (the
    /// same for the corotated family, and the small-strain stiffness of the rest).
    pub fn laplacian_weight(&self) -> f64 {
        self.projective_weight().unwrap_or(2.0 * self.mu + 3.0 * self.lambda.max(0.0))
    }

    /// Energy density and stress at `F` with the projections taken through the rotation `r`:
    /// `mu |F - R|^2 + lambda/2 (tr(R^T F) - 3)^2` and `2 mu (F - R) + lambda (tr(R^T F) - 3) R`.
    /// With `r` the closest rotation these are the model's energy and stress.
    #[inline]
    pub fn projective(&self, f: &DMat3, r: &DMat3) -> (f64, DMat3) {
        let (energy, stress) =
            projective_lanes(Lanes([self.mu]), Lanes([self.corotated_lambda()]), &one_lane(f), &one_lane(r));
        (energy.0[0], mat_lane(&stress, 0))
    }
}

/// [`Elastic::projective`] of `N` elements at once, lane by lane, with their `mu` and
/// `lambda` (zero for ARAP).
#[inline(always)]
pub(crate) fn projective_lanes<const N: usize, L: Lane<N>>(
    mu: L,
    lambda: L,
    f: &Mat3s<L>,
    r: &Mat3s<L>,
) -> (L, Mat3s<L>) {
    let trace = lanes::dot(&r[0], &f[0]) + lanes::dot(&r[1], &f[1]) + lanes::dot(&r[2], &f[2]) - 3.0;
    let shear = mat3s!(|c, k| f[c][k] - r[c][k]);
    let squared = lanes::dot(&shear[0], &shear[0])
        + lanes::dot(&shear[1], &shear[1])
        + lanes::dot(&shear[2], &shear[2]);
    let energy = mu * squared + lambda * 0.5 * trace * trace;
    let (two_mu, volume) = (mu * 2.0, lambda * trace);
    (energy, mat3s!(|c, k| shear[c][k] * two_mu + r[c][k] * volume))
}

/// The corotated (and ARAP) Hessian of a tet, `N` tets at once: `d2 psi / dx_a dx_b` per
/// unit volume for corners `a <= b < 3` with shape gradients `beta` (corner 3's blocks follow,
/// the gradients summing to zero), in the order `(0,0), (0,1), (0,2), (1,1), (1,2), (2,2)`;
/// block `m[kk][i]` is row `i`, column `kk`. With `R` the closest rotation and `S = R^T F`, the
/// tangent `dP = 2 mu dF + lambda (R : dF) R + c dR`, `c = lambda (tr S - 3) - 2 mu`, and the
/// polar rotation's derivative `dR = R [w]x`, `(tr S I - sym S) w = axial(R^T dF - dF^T R)`
/// (`Elastic::corotated_tangent`), contracted with `dF = e_k beta_b^T` and `beta_a`, give
///
/// `H_ab = 2 mu (beta_a . beta_b) I + lambda (R beta_a)(R beta_b)^T + c T_a^T H^-1 T_b`,
/// `T_a = [beta_a]x R^T`, `H = tr S I - sym S`,
///
/// with no 9x9 tangent formed. A lane is false in the mask where `H` is near singular (a flat
/// or half-inverted element), as `corotated_tangent` refuses; its blocks are then not valid.
#[inline(always)]
pub(crate) fn corotated_hessian_lanes<const N: usize, L: Lane<N>>(
    mu: L,
    lambda: L,
    f: &Mat3s<L>,
    r: &Mat3s<L>,
    beta: &[Vec3s<L>; 3],
) -> (Mask<N>, [Mat3s<L>; 6]) {
    let mut scale = L::splat(f64::MIN_POSITIVE);
    for column in f {
        for x in column {
            scale = scale.max(x.abs());
        }
    }
    // S = R^T F, s[j][i] = column i of R . column j of F; H = tr S I - sym S.
    let s = mat3s!(|j, i| lanes::dot(&r[i], &f[j]));
    let trace = s[0][0] + s[1][1] + s[2][2];
    let d = [trace - s[0][0], trace - s[1][1], trace - s[2][2]];
    let (xy, xz, yz) = ((s[1][0] + s[0][1]) * -0.5, (s[2][0] + s[0][2]) * -0.5, (s[2][1] + s[1][2]) * -0.5);
    let c = [d[1] * d[2] - yz * yz, d[0] * d[2] - xz * xz, d[0] * d[1] - xy * xy];
    let (cxy, cxz, cyz) = (xz * yz - xy * d[2], xy * yz - xz * d[1], xy * xz - yz * d[0]);
    let det = d[0] * c[0] + xy * cxy + xz * cxz;
    let (det_ok, first_ok) = (det.gt(scale * scale * scale * 1e-6), d[0].gt(scale * 1e-6));
    let mut valid = [false; N];
    for l in 0..N {
        valid[l] = det_ok[l] && first_ok[l];
    }
    // H^-1 from the cofactors; a refused lane divides by 1 instead of a tiny determinant.
    let inverse_det = L::splat(1.0) / L::select(valid, det, L::splat(1.0));
    let h_inv = [
        [c[0] * inverse_det, cxy * inverse_det, cxz * inverse_det],
        [cxy * inverse_det, c[1] * inverse_det, cyz * inverse_det],
        [cxz * inverse_det, cyz * inverse_det, c[2] * inverse_det],
    ];
    let rotation_scale = lambda * (trace - 3.0) - mu * 2.0;
    // Column k of T_a is beta_a x (row k of R); column k of W_b = H^-1 T_b. (Loops, not
    // closures: see `math::lanes::avx`.)
    let zero = L::splat(0.0);
    let (mut t, mut w, mut u) = ([[[zero; 3]; 3]; 3], [[[zero; 3]; 3]; 3], [[zero; 3]; 3]);
    for a in 0..3 {
        let g = &beta[a];
        for k in 0..3 {
            let row = [r[0][k], r[1][k], r[2][k]];
            t[a][k] =
                [g[1] * row[2] - g[2] * row[1], g[2] * row[0] - g[0] * row[2], g[0] * row[1] - g[1] * row[0]];
            w[a][k] = lanes::mat_vec(&h_inv, &t[a][k]);
        }
        u[a] = lanes::mat_vec(r, g);
    }
    let mut out = [[[zero; 3]; 3]; 6];
    for (block, &(a, b)) in out.iter_mut().zip(&CORNER_PAIRS) {
        let shear = mu * 2.0 * lanes::dot(&beta[a], &beta[b]);
        for kk in 0..3 {
            for i in 0..3 {
                let mut value =
                    lambda * u[a][i] * u[b][kk] + rotation_scale * lanes::dot(&t[a][i], &w[b][kk]);
                if i == kk {
                    value += shear;
                }
                block[kk][i] = value;
            }
        }
    }
    (valid, out)
}

#[cfg(test)]
mod tests {
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use glam::DVec3;

    use super::*;
    use crate::material::Material;

    fn random_f(rng: &mut ChaCha8Rng, scale: f64) -> DMat3 {
        DMat3::IDENTITY + DMat3::from_cols_array(&std::array::from_fn(|_| rng.random_range(-scale..scale)))
    }

    fn max_abs(m: &DMat3) -> f64 {
        m.to_cols_array().iter().map(|x| x.abs()).fold(0.0, f64::max)
    }

    /// Cold and warm starts, small and large deformations, inverted and near-degenerate `F`:
    /// the result is a proper rotation (orthogonal, det +1) equal to the signed SVD's `U V^T`.
    #[test]
    fn closest_rotation_is_the_signed_polar_rotation() {
        let mut rng = ChaCha8Rng::seed_from_u64(21);
        let mut worst = 0.0_f64;
        for k in 0..3000 {
            let mut f = random_f(&mut rng, [0.05, 0.5, 1.5][k % 3]);
            match k % 5 {
                3 => f.z_axis = -f.z_axis,                        // inverted
                4 => f.z_axis = f.x_axis * 0.3 + f.y_axis * 1e-7, // nearly flat
                _ => {}
            }
            let f = f * rng.random_range(0.2..5.0);
            let (u, _, v) = crate::math::signed_svd(&f);
            let expected = u * v.transpose();
            // Warm starts near the answer (the solver's case) and cold ones.
            let near =
                DQuat::from_mat3(&expected) * DQuat::from_scaled_axis(DVec3::splat(0.01 * (k % 4) as f64));
            for warm in [DQuat::IDENTITY, near.normalize()] {
                let (_, r) = closest_rotation(&f, warm);
                assert!(max_abs(&(r.transpose() * r - DMat3::IDENTITY)) < 1e-14, "not orthogonal at {k}");
                assert!((r.determinant() - 1.0).abs() < 1e-14, "det {} at {k}", r.determinant());
                // The maximum of tr(R^T F) is unique unless F is (nearly) rank-deficient in two
                // directions; compare objectives there, rotations elsewhere.
                let objective =
                    |r: &DMat3| r.x_axis.dot(f.x_axis) + r.y_axis.dot(f.y_axis) + r.z_axis.dot(f.z_axis);
                let gap = objective(&expected) - objective(&r);
                assert!(gap < 1e-12 * max_abs(&f), "objective short by {gap} at {k}");
                if k % 5 != 4 {
                    worst = worst.max(max_abs(&(r - expected)));
                }
            }
        }
        assert!(worst < 1e-10, "largest rotation difference {worst:e}");
    }

    /// With the closest rotation, the projective energy and stress are the model's own.
    #[test]
    fn projective_form_equals_the_model() {
        let mut rng = ChaCha8Rng::seed_from_u64(22);
        for model in [MaterialModel::Corotated, MaterialModel::Arap] {
            let elastic = Material::lame(model, 1.3, 2.1).elastic().unwrap();
            for k in 0..500 {
                let mut f = random_f(&mut rng, [0.1, 0.6][k % 2]);
                if k % 4 == 3 {
                    f.z_axis = -f.z_axis;
                }
                let (_, r) = closest_rotation(&f, DQuat::IDENTITY);
                let (energy, stress) = elastic.projective(&f, &r);
                let scale = 1.0 + elastic.energy(&f).abs();
                assert!((energy - elastic.energy(&f)).abs() < 1e-12 * scale, "{model:?} energy at {k}");
                assert!(max_abs(&(stress - elastic.stress(&f))) < 1e-11 * scale, "{model:?} stress at {k}");
            }
        }
    }

    /// With the projections frozen at `F0` (the rotation `R0` and the shifted `F0 - c R0`), the
    /// energy is a quadratic in `F` that bounds the model's energy from above and touches it at
    /// `F0`, with the projective stress as its gradient there: what makes every local/global
    /// iteration a descent step.
    #[test]
    fn frozen_projections_bound_the_energy() {
        let mut rng = ChaCha8Rng::seed_from_u64(23);
        let elastic = Material::corotated(1e5, 0.3).elastic().unwrap();
        let (mu, lambda) = elastic.lame();
        let squared = |m: DMat3| m.to_cols_array().iter().map(|x| x * x).sum::<f64>();
        for k in 0..500 {
            let f0 = random_f(&mut rng, 0.4);
            let (_, r0) = closest_rotation(&f0, DQuat::IDENTITY);
            let c0 =
                (r0.x_axis.dot(f0.x_axis) + r0.y_axis.dot(f0.y_axis) + r0.z_axis.dot(f0.z_axis) - 3.0) / 3.0;
            let volume = f0 - r0 * c0;
            let frozen = |f: DMat3| mu * squared(f - r0) + 1.5 * lambda * squared(f - volume);
            assert!((frozen(f0) - elastic.energy(&f0)).abs() < 1e-9 * (1.0 + elastic.energy(&f0)));
            let gradient = (f0 - r0) * (2.0 * mu) + (f0 - volume) * (3.0 * lambda);
            assert!(max_abs(&(gradient - elastic.projective(&f0, &r0).1)) < 1e-9 * mu);
            for _ in 0..4 {
                let f = f0 + DMat3::from_cols_array(&std::array::from_fn(|_| rng.random_range(-0.5..0.5)));
                let psi = elastic.energy(&f);
                assert!(frozen(f) >= psi - 1e-9 * (1.0 + psi), "bound {} below {psi} at {k}", frozen(f));
            }
        }
        assert_eq!(Material::stvk(1e5, 0.3).elastic().unwrap().projective_weight(), None);
        assert_eq!(
            Material::lame(MaterialModel::Corotated, 1.0, 2.0).elastic().unwrap().projective_weight(),
            Some(8.0)
        );
        assert_eq!(
            Material::lame(MaterialModel::Arap, 1.0, 2.0).elastic().unwrap().projective_weight(),
            Some(2.0)
        );
    }
}
