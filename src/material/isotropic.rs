//! Isotropic hyperelastic models.
//!
//! Every model is written once in principal stretches (`psi(sigma)` and its derivatives).
//! From those, the analytic eigensystem of `dP/dF` (Teran et al. 2005, Smith et al. 2019)
//! gives three scaling modes (the 3x3 block `d2psi/dsigma2`) and, for each pair of
//! stretches, a flip mode with eigenvalue `(psi_i - psi_j)/(s_i - s_j)` and a twist mode with
//! `(psi_i + psi_j)/(s_i + s_j)`. Clamping those eigenvalues is the exact PSD projection.
//!
//! StVK and the two neo-Hookean models also have polynomial forms in `F` that need no SVD;
//! they are used for the energy, stress and true tangent on the hot path, and tests check
//! that both forms agree.

use glam::{DMat3, DVec3};

use super::projective::{RotationSearch, closest_rotation_by};
use super::stable_neo_hookean::{self, stable_neo_hookean_hessian_lanes, stable_neo_hookean_lanes};
use super::{CORNER_PAIRS, MaterialModel, Projection};
use crate::math::lanes::{Lanes, mat_lane, one_lane};
use crate::math::{Mat9, add_outer9, outer, signed_svd, symmetric_eigen3, vec9};

/// A model with its Lame parameters: the per-element evaluator.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Elastic {
    model: MaterialModel,
    pub(super) mu: f64,
    pub(super) lambda: f64,
}

/// First and second derivatives of `psi` in principal stretches, plus the pair quotients
/// written without the removable singularity at `s_i = s_j`.
struct StretchDerivatives {
    grad: [f64; 3],
    hess: [[f64; 3]; 3],
    /// Flip eigenvalue of the pair that excludes index k: `(psi_i - psi_j)/(s_i - s_j)`.
    flip: [f64; 3],
    /// Twist eigenvalue of the pair that excludes index k: `(psi_i + psi_j)/(s_i + s_j)`.
    twist: [f64; 3],
}

/// The pair (i, j) that excludes k, with i < j.
const PAIRS: [(usize, usize); 3] = [(1, 2), (0, 2), (0, 1)];

/// `(a + b)` kept away from zero, sign preserved: the twist modes of the rotation-based
/// models are singular where two stretches cancel (a flat, half-inverted element).
fn guarded_sum(a: f64, b: f64) -> f64 {
    let s = a + b;
    // Below 1e-8 the twist eigenvalue would exceed 1e8 mu; the clamp keeps it finite.
    if s.abs() < 1e-8 { 1e-8_f64.copysign(s) } else { s }
}

impl Elastic {
    pub(crate) fn new(model: MaterialModel, mu: f64, lambda: f64) -> Elastic {
        Elastic { model, mu, lambda }
    }

    /// The model this evaluator implements.
    pub fn model(&self) -> MaterialModel {
        self.model
    }

    /// Lame parameters `(mu, lambda)` as given (before any model-specific reparametrization).
    pub fn lame(&self) -> (f64, f64) {
        (self.mu, self.lambda)
    }

    /// Lame `lambda` as the stable neo-Hookean formula uses it (`lambda + mu`, see the model docs).
    fn snh_lambda(&self) -> f64 {
        self.lambda + self.mu
    }

    /// The two moduli the CPU's lane kernel takes: the projective form's `(mu, lambda)` for
    /// corotated and ARAP (`lambda` zero for ARAP), `(mu, lambda + mu)` for stable
    /// neo-Hookean.
    pub(crate) fn lane_moduli(&self) -> (f64, f64) {
        match self.model {
            MaterialModel::StableNeoHookean => (self.mu, self.snh_lambda()),
            _ => (self.mu, self.corotated_lambda()),
        }
    }

    /// Effective `lambda` of the rotation-based family (ARAP has none).
    pub(super) fn corotated_lambda(&self) -> f64 {
        if self.model == MaterialModel::Arap { 0.0 } else { self.lambda }
    }

    /// Energy density. `+inf` where the model is undefined (neo-Hookean with `J <= 0`).
    ///
    /// The polynomial models are written in the displacement gradient `H = F - I`, so that no
    /// term cancels near rest: `I_C - 3 = |H|^2 + 2 tr H` and `J - 1 = tr H + (tr^2 H -
    /// tr H^2)/2 + det H`. Evaluated from `F` directly, neo-Hookean's `mu/2 (I_C - 3) - mu ln J`
    /// loses everything to rounding at small strain, and the line search then compares noise.
    pub fn energy(&self, f: &DMat3) -> f64 {
        let (mu, lambda) = (self.mu, self.lambda);
        let h = *f - DMat3::IDENTITY;
        let squared = |m: &DMat3| m.to_cols_array().iter().map(|x| x * x).sum::<f64>();
        let trace = |m: &DMat3| m.x_axis.x + m.y_axis.y + m.z_axis.z;
        match self.model {
            MaterialModel::StVK => {
                let e = (h + h.transpose() + h.transpose() * h) * 0.5;
                let tr = trace(&e);
                mu * squared(&e) + 0.5 * lambda * tr * tr
            }
            MaterialModel::NeoHookean => {
                let jm1 = j_minus_one(&h);
                if jm1 <= -1.0 {
                    return f64::INFINITY;
                }
                let lnj = jm1.ln_1p();
                // mu/2 (I_C - 3) - mu ln J with the first-order terms paired: mu (tr H - ln J).
                0.5 * mu * squared(&h) + mu * (trace(&h) - lnj) + 0.5 * lambda * lnj * lnj
            }
            MaterialModel::StableNeoHookean => self.stable_neo_hookean(f).0,
            // The closest rotation by Newton's method (~170 ns from the identity, for rotations
            // up to 50 degrees) costs less than the singular values (~400 ns).
            MaterialModel::Corotated | MaterialModel::Arap => {
                self.projective(f, &super::closest_rotation(f, glam::DQuat::IDENTITY).1).0
            }
            _ => self.stretch_energy(crate::math::signed_singular_values(f)),
        }
    }

    /// First Piola-Kirchhoff stress `P = dpsi/dF`.
    pub fn stress(&self, f: &DMat3) -> DMat3 {
        let (mu, lambda) = (self.mu, self.lambda);
        match self.model {
            MaterialModel::StVK => {
                let e = (f.transpose() * *f - DMat3::IDENTITY) * 0.5;
                let tr = e.x_axis.x + e.y_axis.y + e.z_axis.z;
                *f * (e * (2.0 * mu) + DMat3::IDENTITY * (lambda * tr))
            }
            MaterialModel::NeoHookean => {
                // F^-T = cof F / J, with J as the energy takes it.
                let jm1 = j_minus_one(&(*f - DMat3::IDENTITY));
                *f * mu + cofactor(f) * ((lambda * jm1.ln_1p() - mu) / (1.0 + jm1))
            }
            MaterialModel::StableNeoHookean => self.stable_neo_hookean(f).1,
            _ => {
                let (u, s, v) = signed_svd(f);
                let d = self.stretch_derivatives(s);
                u * DMat3::from_diagonal(DVec3::from(d.grad)) * v.transpose()
            }
        }
    }

    /// The energy density and, when asked, the stress and the tangent at one `F`, sharing one
    /// signed SVD where the model needs it (the rotation-based models, and projected tangents);
    /// the same values as [`energy`](Self::energy), [`stress`](Self::stress) and
    /// [`stress_derivative`](Self::stress_derivative). `rotation` is the warm start of
    /// corotated's and ARAP's closest rotation (the element's rotation at its last
    /// evaluation; the identity will do) and receives the new one; other models leave it.
    /// `search` says how far that rotation goes: with [`RotationSearch::OneStep`] the energy
    /// and stress are the projective form's at the rotation reached (a local/global local
    /// step's), and a tangent, which needs the closest rotation, converges it anyway. The
    /// tangent, when asked, is written into the given matrix (by reference: it is 648 bytes,
    /// and moving it out of here cost an element pass a twentieth of its time).
    #[inline]
    pub fn evaluate(
        &self,
        f: &DMat3,
        rotation: &mut glam::DQuat,
        search: RotationSearch,
        stress: bool,
        tangent: Option<(Projection, &mut Mat9)>,
    ) -> (f64, Option<DMat3>) {
        let rotation_based = !matches!(
            self.model,
            MaterialModel::StVK | MaterialModel::NeoHookean | MaterialModel::StableNeoHookean
        );
        if !rotation_based {
            if let Some((projection, k)) = tangent {
                self.stress_derivative_into(f, projection, k);
            }
            return (self.energy(f), stress.then(|| self.stress(f)));
        }
        // Corotated and ARAP need no SVD unless the tangent is projected: the closest rotation
        // gives energy and stress, and its derivative the true tangent.
        let projection = tangent.as_ref().map(|(projection, _)| *projection);
        let mut tangent = tangent.map(|(_, k)| k);
        if matches!(self.model, MaterialModel::Corotated | MaterialModel::Arap)
            && projection != Some(Projection::Psd)
        {
            let search = if tangent.is_some() { RotationSearch::Converged } else { search };
            let (q, r) = closest_rotation_by(f, *rotation, search);
            *rotation = q;
            let exact = match tangent.as_deref_mut() {
                Some(k) => self.corotated_tangent(f, &r, k),
                None => true,
            };
            if exact {
                let (energy, p) = self.projective(f, &r);
                return (energy, stress.then_some(p));
            }
        }
        let (u, s, v) = signed_svd(f);
        let energy = self.stretch_energy(s);
        let stress = stress.then(|| {
            let d = self.stretch_derivatives(s);
            u * DMat3::from_diagonal(DVec3::from(d.grad)) * v.transpose()
        });
        if let (Some(projection), Some(k)) = (projection, tangent) {
            self.eigensystem_tangent(&u, s, &v, projection, k);
        }
        (energy, stress)
    }

    /// `dP/dF` as a 9x9 matrix on `vec(F)` (row-major), exact or PSD-projected.
    pub fn stress_derivative(&self, f: &DMat3, projection: Projection) -> Mat9 {
        let mut k = [[0.0; 9]; 9];
        self.stress_derivative_into(f, projection, &mut k);
        k
    }

    /// [`stress_derivative`](Self::stress_derivative) into `k`.
    fn stress_derivative_into(&self, f: &DMat3, projection: Projection, k: &mut Mat9) {
        if projection == Projection::None {
            match self.model {
                MaterialModel::StVK | MaterialModel::NeoHookean | MaterialModel::StableNeoHookean => {
                    return self.polynomial_tangent(f, k);
                }
                MaterialModel::Corotated | MaterialModel::Arap => {
                    let (_, r) = super::closest_rotation(f, glam::DQuat::IDENTITY);
                    if self.corotated_tangent(f, &r, k) {
                        return;
                    }
                }
                _ => {}
            }
        }
        let (u, s, v) = signed_svd(f);
        self.eigensystem_tangent(&u, s, &v, projection, k)
    }

    /// The true tangent of corotated and ARAP at `F` with its closest rotation `r`, without an SVD:
    /// from `P = 2 mu (F - R) + lambda (tr S - 3) R` with `S = R^T F`,
    /// `dP = 2 mu dF + lambda (R : dF) R + (lambda (tr S - 3) - 2 mu) dR`, and the polar
    /// rotation's derivative `dR = R [w]x` with `(tr S I - S) w = axial(R^T dF - dF^T R)`.
    /// Written into `k`; false (and `k` left) where `tr S I - S` is near singular (a flat or
    /// half-inverted element), which the eigensystem handles.
    pub(crate) fn corotated_tangent(&self, f: &DMat3, r: &DMat3, k: &mut Mat9) -> bool {
        let a = r.transpose() * *f;
        let sym = (a + a.transpose()) * 0.5;
        let trace = sym.x_axis.x + sym.y_axis.y + sym.z_axis.z;
        let h = DMat3::from_diagonal(DVec3::splat(trace)) - sym;
        let scale = f.to_cols_array().iter().map(|x| x.abs()).fold(f64::MIN_POSITIVE, f64::max);
        if !(h.determinant() > 1e-6 * scale * scale * scale && h.x_axis.x > 1e-6 * scale) {
            return false;
        }
        let h_inv = h.inverse();
        let lambda = self.corotated_lambda();
        let rotation_scale = lambda * (trace - 3.0) - 2.0 * self.mu;
        let rows = crate::math::to_rows(r);
        for kk in 0..3 {
            for l in 0..3 {
                // dF = e_kk e_l^T: B = R^T dF has column l equal to row kk of R.
                let b = |m: usize, n: usize| if n == l { rows[kk][m] } else { 0.0 };
                let axial = DVec3::new(b(2, 1) - b(1, 2), b(0, 2) - b(2, 0), b(1, 0) - b(0, 1));
                let w = h_inv * axial;
                let cross = DMat3::from_cols(
                    DVec3::new(0.0, w.z, -w.y),
                    DVec3::new(-w.z, 0.0, w.x),
                    DVec3::new(w.y, -w.x, 0.0),
                );
                let dr = crate::math::to_rows(&(r * cross));
                for i in 0..3 {
                    for j in 0..3 {
                        let mut value = lambda * rows[kk][l] * rows[i][j] + rotation_scale * dr[i][j];
                        if i == kk && j == l {
                            value += 2.0 * self.mu;
                        }
                        k[3 * i + j][3 * kk + l] = value;
                    }
                }
            }
        }
        true
    }

    /// The true Hessian blocks `d2 psi / dx_a dx_b` of a tet (corners `a, b < 3`, shape
    /// gradients `beta`) where the model has them in closed form, without the 9x9 tangent:
    /// stable neo-Hookean's `dP = mu dF + l (cof F : dF) cof F + s d(cof F)`, `s = l (J - 1) -
    /// mu`, contracted with `dF = e_k beta_b^T` and `beta_a`, is
    /// `mu (beta_a . beta_b) I + l (cof F beta_a)(cof F beta_b)^T - s [F (beta_a x beta_b)]x`.
    /// `None` for the other models (and for projected Hessians).
    pub(crate) fn tet_hessian(
        &self,
        f: &DMat3,
        beta: &[DVec3; 4],
        projection: Projection,
    ) -> Option<[[DMat3; 3]; 3]> {
        if self.model != MaterialModel::StableNeoHookean || projection != Projection::None {
            return None;
        }
        let beta = [0, 1, 2].map(|a| beta[a].to_array().map(|x| Lanes([x])));
        let upper = stable_neo_hookean_hessian_lanes(
            Lanes([self.mu]),
            Lanes([self.snh_lambda()]),
            &one_lane(f),
            &beta,
        );
        let mut blocks = [[DMat3::ZERO; 3]; 3];
        for (block, &(a, b)) in upper.iter().zip(&CORNER_PAIRS) {
            blocks[a][b] = mat_lane(block, 0);
            blocks[b][a] = blocks[a][b].transpose();
        }
        Some(blocks)
    }

    /// Stable neo-Hookean's energy density and stress at `F`: one lane of
    /// [`stable_neo_hookean_lanes`].
    fn stable_neo_hookean(&self, f: &DMat3) -> (f64, DMat3) {
        let (energy, stress) =
            stable_neo_hookean_lanes(Lanes([self.mu]), Lanes([self.snh_lambda()]), &one_lane(f));
        (energy.0[0], mat_lane(&stress, 0))
    }

    /// The true tangent of the models with closed forms in `F`, entry by entry:
    /// `K[(i,j),(k,l)] = dP_ij / dF_kl`.
    fn polynomial_tangent(&self, f: &DMat3, k: &mut Mat9) {
        let (mu, lambda) = (self.mu, self.lambda);
        let fr = crate::math::to_rows(f);
        *k = [[0.0; 9]; 9];
        match self.model {
            MaterialModel::StVK => {
                // dP = dF S + F (mu (dF^T F + F^T dF) + lambda tr(F^T dF) I)
                let e = (f.transpose() * *f - DMat3::IDENTITY) * 0.5;
                let tr = e.x_axis.x + e.y_axis.y + e.z_axis.z;
                let s = crate::math::to_rows(&(e * (2.0 * mu) + DMat3::IDENTITY * (lambda * tr)));
                let ff = crate::math::to_rows(&(*f * f.transpose()));
                for i in 0..3 {
                    for j in 0..3 {
                        for kk in 0..3 {
                            for l in 0..3 {
                                let mut value = mu * fr[i][l] * fr[kk][j] + lambda * fr[i][j] * fr[kk][l];
                                if i == kk {
                                    value += s[l][j];
                                }
                                if j == l {
                                    value += mu * ff[i][kk];
                                }
                                k[3 * i + j][3 * kk + l] = value;
                            }
                        }
                    }
                }
            }
            MaterialModel::NeoHookean => {
                // dP = mu dF - (lambda ln J - mu) G dF^T G + lambda tr(F^-1 dF) G, G = F^-T
                let jm1 = j_minus_one(&(*f - DMat3::IDENTITY));
                let g = crate::math::to_rows(&(cofactor(f) * (1.0 / (1.0 + jm1))));
                let c = lambda * jm1.ln_1p() - mu;
                for i in 0..3 {
                    for j in 0..3 {
                        for kk in 0..3 {
                            for l in 0..3 {
                                k[3 * i + j][3 * kk + l] =
                                    lambda * g[kk][l] * g[i][j] - c * g[i][l] * g[kk][j];
                            }
                        }
                    }
                }
                for r in 0..9 {
                    k[r][r] += mu;
                }
            }
            MaterialModel::StableNeoHookean => {
                // dP = mu dF + l (cof F : dF) cof F + s d(cof F), where
                // d2J / dF_ij dF_kl = eps_ikm eps_jln F_mn.
                let l_snh = self.snh_lambda();
                let c = crate::math::to_rows(&cofactor(f));
                let s = l_snh * (f.determinant() - 1.0) - mu;
                for i in 0..3 {
                    for j in 0..3 {
                        for kk in 0..3 {
                            for l in 0..3 {
                                let mut value = l_snh * c[i][j] * c[kk][l];
                                if i != kk && j != l {
                                    let (m, n) = (3 - i - kk, 3 - j - l);
                                    value += s * LEVI_CIVITA[i][kk] * LEVI_CIVITA[j][l] * fr[m][n];
                                }
                                k[3 * i + j][3 * kk + l] = value;
                            }
                        }
                    }
                }
                for r in 0..9 {
                    k[r][r] += mu;
                }
            }
            _ => unreachable!("only polynomial models have a closed-form tangent"),
        }
    }

    /// Reassembles `dP/dF` from its analytic eigensystem, with negative eigenvalues replaced by
    /// their magnitudes when projecting.
    pub(super) fn eigensystem_tangent(
        &self,
        u: &DMat3,
        s: DVec3,
        v: &DMat3,
        projection: Projection,
        k: &mut Mat9,
    ) {
        let d = self.stretch_derivatives(s);
        let clamp = |x: f64| {
            if projection == Projection::Psd { x.abs() } else { x }
        };
        *k = [[0.0; 9]; 9];
        // Scaling modes: D_a = u_a v_a^T, coupled through d2psi/dsigma2: exactly, sum_ab
        // hess_ab D_a D_b^T; projected, through the eigensystem of hess.
        let scaling: [[f64; 9]; 3] = std::array::from_fn(|a| vec9(&outer(u.col(a), v.col(a))));
        if projection == Projection::None {
            for a in 0..3 {
                for b in 0..3 {
                    let w = d.hess[a][b];
                    for (r, row) in k.iter_mut().enumerate() {
                        for (c, entry) in row.iter_mut().enumerate() {
                            *entry += w * scaling[a][r] * scaling[b][c];
                        }
                    }
                }
            }
        } else {
            let (block_values, block_vectors) = symmetric_eigen3(&DMat3::from_cols_array_2d(&d.hess));
            for (m, value) in block_values.iter().enumerate() {
                let q = block_vectors.col(m);
                let mut mode = [0.0; 9];
                for a in 0..3 {
                    for (r, entry) in mode.iter_mut().enumerate() {
                        *entry += q[a] * scaling[a][r];
                    }
                }
                add_outer9(k, clamp(*value), &mode);
            }
        }
        // Flip and twist modes of each pair of stretches.
        let half = std::f64::consts::FRAC_1_SQRT_2;
        for (pair, &(i, j)) in PAIRS.iter().enumerate() {
            let ij = outer(u.col(i), v.col(j));
            let ji = outer(u.col(j), v.col(i));
            add_outer9(k, clamp(d.flip[pair]), &vec9(&((ij + ji) * half)));
            add_outer9(k, clamp(d.twist[pair]), &vec9(&((ij - ji) * half)));
        }
    }

    /// `psi(sigma)` in principal stretches (the signed stretches of [`signed_svd`]).
    pub(super) fn stretch_energy(&self, s: DVec3) -> f64 {
        let (mu, lambda) = (self.mu, self.lambda);
        let j = s.x * s.y * s.z;
        match self.model {
            MaterialModel::StVK => {
                let e = (s * s - DVec3::ONE) * 0.5;
                mu * e.length_squared() + 0.5 * lambda * e.element_sum().powi(2)
            }
            MaterialModel::Corotated | MaterialModel::Arap => {
                let l = self.corotated_lambda();
                mu * (s - DVec3::ONE).length_squared() + 0.5 * l * (s.element_sum() - 3.0).powi(2)
            }
            MaterialModel::FixedCorotated => {
                mu * (s - DVec3::ONE).length_squared() + 0.5 * lambda * (j - 1.0).powi(2)
            }
            MaterialModel::NeoHookean => {
                if j <= 0.0 {
                    return f64::INFINITY;
                }
                0.5 * mu * (s.length_squared() - 3.0) - mu * j.ln() + 0.5 * lambda * j.ln().powi(2)
            }
            MaterialModel::StableNeoHookean => {
                0.5 * mu * (s.length_squared() - 3.0) - mu * (j - 1.0)
                    + 0.5 * self.snh_lambda() * (j - 1.0).powi(2)
            }
        }
    }

    fn stretch_derivatives(&self, s: DVec3) -> StretchDerivatives {
        let (mu, lambda) = (self.mu, self.lambda);
        let s = s.to_array();
        let j = s[0] * s[1] * s[2];
        // Product of the two stretches other than k.
        let others = |k: usize| j_without(&s, k);
        let mut out =
            StretchDerivatives { grad: [0.0; 3], hess: [[0.0; 3]; 3], flip: [0.0; 3], twist: [0.0; 3] };
        match self.model {
            MaterialModel::StVK => {
                let c = 0.5 * lambda * (s.iter().map(|x| x * x).sum::<f64>() - 3.0) - mu;
                for i in 0..3 {
                    out.grad[i] = mu * s[i].powi(3) + c * s[i];
                    for k in 0..3 {
                        out.hess[i][k] = lambda * s[i] * s[k];
                    }
                    out.hess[i][i] += 3.0 * mu * s[i] * s[i] + c;
                }
                for (p, &(a, b)) in PAIRS.iter().enumerate() {
                    out.flip[p] = mu * (s[a] * s[a] + s[a] * s[b] + s[b] * s[b]) + c;
                    out.twist[p] = mu * (s[a] * s[a] - s[a] * s[b] + s[b] * s[b]) + c;
                }
            }
            MaterialModel::Corotated | MaterialModel::Arap => {
                let l = self.corotated_lambda();
                let t = s.iter().sum::<f64>() - 3.0;
                for i in 0..3 {
                    out.grad[i] = 2.0 * mu * (s[i] - 1.0) + l * t;
                    for k in 0..3 {
                        out.hess[i][k] = l;
                    }
                    out.hess[i][i] += 2.0 * mu;
                }
                for (p, &(a, b)) in PAIRS.iter().enumerate() {
                    out.flip[p] = 2.0 * mu;
                    out.twist[p] = 2.0 * mu + (2.0 * l * t - 4.0 * mu) / guarded_sum(s[a], s[b]);
                }
            }
            MaterialModel::FixedCorotated => {
                for i in 0..3 {
                    out.grad[i] = 2.0 * mu * (s[i] - 1.0) + lambda * (j - 1.0) * others(i);
                    for k in 0..3 {
                        out.hess[i][k] = if i == k {
                            2.0 * mu + lambda * others(i).powi(2)
                        } else {
                            lambda * s[3 - i - k] * (2.0 * j - 1.0)
                        };
                    }
                }
                for (p, &(a, b)) in PAIRS.iter().enumerate() {
                    out.flip[p] = 2.0 * mu - lambda * (j - 1.0) * s[p];
                    out.twist[p] = 2.0 * mu - 4.0 * mu / guarded_sum(s[a], s[b]) + lambda * (j - 1.0) * s[p];
                }
            }
            MaterialModel::NeoHookean => {
                // Only reached with J > 0: iterates never enter the infinite-energy region.
                let lnj = j.max(f64::MIN_POSITIVE).ln();
                for i in 0..3 {
                    out.grad[i] = mu * s[i] + (lambda * lnj - mu) / s[i];
                    for k in 0..3 {
                        out.hess[i][k] = lambda / (s[i] * s[k]);
                    }
                    out.hess[i][i] += mu + (mu - lambda * lnj) / (s[i] * s[i]);
                }
                for (p, &(a, b)) in PAIRS.iter().enumerate() {
                    out.flip[p] = mu + (mu - lambda * lnj) / (s[a] * s[b]);
                    out.twist[p] = mu + (lambda * lnj - mu) / (s[a] * s[b]);
                }
            }
            MaterialModel::StableNeoHookean => {
                let l = self.snh_lambda();
                let sc = l * (j - 1.0) - mu;
                for i in 0..3 {
                    out.grad[i] = mu * s[i] + sc * others(i);
                    for k in 0..3 {
                        out.hess[i][k] =
                            if i == k { mu + l * others(i).powi(2) } else { s[3 - i - k] * (l * j + sc) };
                    }
                }
                for p in 0..3 {
                    out.flip[p] = mu - sc * s[p];
                    out.twist[p] = mu + sc * s[p];
                }
            }
        }
        out
    }
}

/// Product of the stretches other than `k`.
fn j_without(s: &[f64; 3], k: usize) -> f64 {
    match k {
        0 => s[1] * s[2],
        1 => s[0] * s[2],
        _ => s[0] * s[1],
    }
}

/// `J - 1` at `F = I + h`, without cancellation near rest (see
/// [`stable_neo_hookean::j_minus_one`]).
#[inline(always)]
pub(crate) fn j_minus_one(h: &DMat3) -> f64 {
    stable_neo_hookean::j_minus_one(&one_lane(h)).0[0]
}

/// `dJ/dF = cof(F)`, column by column as cross products (defined for singular `F`).
pub(crate) fn cofactor(f: &DMat3) -> DMat3 {
    let (f0, f1, f2) = (f.x_axis, f.y_axis, f.z_axis);
    DMat3::from_cols(f1.cross(f2), f2.cross(f0), f0.cross(f1))
}

/// `eps_{a b m}` for distinct `a`, `b` (with `m` the third index); zero on the diagonal.
const LEVI_CIVITA: [[f64; 3]; 3] = [[0.0, 1.0, -1.0], [-1.0, 0.0, 1.0], [1.0, -1.0, 0.0]];
