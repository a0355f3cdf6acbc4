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

use glam::{DMat3, DQuat, DVec3};

use super::{Elastic, MaterialModel};

/// Newton iterations of the rotation search before falling back to the SVD.
const MAX_ROTATION_ITERATIONS: usize = 8;
/// A Newton step on SO(3) below this angle leaves an error near its square: f64 round-off.
const ROTATION_CONVERGED: f64 = 1e-9;

/// The rotation `R` that maximizes `tr(R^T F)` (the closest rotation to `F`, with the
/// signed-SVD convention for inverted `F`), by Newton's method on SO(3) from `warm`.
///
/// With `A = R^T F`, the objective changes under `R exp([w]x)` as `w . a - 1/2 w^T H w`, where
/// `a` is the axial vector of `A - A^T` and `H = tr(A) I - sym(A)`. Near the maximum `H` is
/// positive definite (its eigenvalues are the pair sums of signed stretches), and the Newton
/// step `H^-1 a` converges quadratically; where it is not (a cold start far away, or a flat,
/// half-inverted element) the signed SVD gives the answer directly. Returns the rotation as
/// a quaternion (the next warm start) and a matrix.
pub fn closest_rotation(f: &DMat3, warm: DQuat) -> (DQuat, DMat3) {
    // Sylvester's criterion is scaled to |F|, so that a near-singular H counts as not definite.
    let scale = f.to_cols_array().iter().map(|x| x.abs()).fold(f64::MIN_POSITIVE, f64::max);
    let floor = 1e-6 * scale;
    let mut q = warm;
    let mut r = DMat3::from_quat(q);
    for _ in 0..MAX_ROTATION_ITERATIONS {
        let a = r.transpose() * *f;
        let axial = DVec3::new(a.y_axis.z - a.z_axis.y, a.z_axis.x - a.x_axis.z, a.x_axis.y - a.y_axis.x);
        // H = tr(A) I - sym(A), symmetric: diagonal d, off-diagonal (xy, xz, yz).
        let trace = a.x_axis.x + a.y_axis.y + a.z_axis.z;
        let d = DVec3::new(trace - a.x_axis.x, trace - a.y_axis.y, trace - a.z_axis.z);
        let (xy, xz, yz) = (
            -0.5 * (a.y_axis.x + a.x_axis.y),
            -0.5 * (a.z_axis.x + a.x_axis.z),
            -0.5 * (a.z_axis.y + a.y_axis.z),
        );
        // Cofactors of the symmetric H; its determinant from the first row.
        let c = DVec3::new(d.y * d.z - yz * yz, d.x * d.z - xz * xz, d.x * d.y - xy * xy);
        let (cxy, cxz, cyz) = (xz * yz - xy * d.z, xy * yz - xz * d.y, xy * xz - yz * d.x);
        let det = d.x * c.x + xy * cxy + xz * cxz;
        if !(d.x > floor && c.z > floor * scale && det > floor * scale * scale) {
            break;
        }
        let step = DVec3::new(
            c.x * axial.x + cxy * axial.y + cxz * axial.z,
            cxy * axial.x + c.y * axial.y + cyz * axial.z,
            cxz * axial.x + cyz * axial.y + c.z * axial.z,
        ) / det;
        // exp of the step to second order, (1, w/2) normalized: the third-order difference
        // keeps the convergence quadratic and needs no sin or cos.
        q = (q * DQuat::from_xyzw(0.5 * step.x, 0.5 * step.y, 0.5 * step.z, 1.0)).normalize();
        r = DMat3::from_quat(q);
        if step.length_squared() < ROTATION_CONVERGED * ROTATION_CONVERGED {
            return (q, r);
        }
    }
    let (u, _, v) = crate::math::signed_svd(f);
    let r = u * v.transpose();
    (DQuat::from_mat3(&r).normalize(), r)
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
        let lambda = self.corotated_lambda();
        let shear = *f - *r;
        let trace = r.x_axis.dot(f.x_axis) + r.y_axis.dot(f.y_axis) + r.z_axis.dot(f.z_axis) - 3.0;
        let squared: f64 = shear.to_cols_array().iter().map(|x| x * x).sum();
        let energy = self.mu * squared + 0.5 * lambda * trace * trace;
        (energy, shear * (2.0 * self.mu) + *r * (lambda * trace))
    }
}

#[cfg(test)]
mod tests {
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

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
