//! Stable neo-Hookean (Smith et al. 2018), `N` elements at once (`math::lanes`): the energy
//! density, the stress and a tet's Hessian blocks, all polynomial in `F`. The one-element
//! forms of [`Elastic`](super::Elastic) are one lane of these.
//!
//! `psi = mu/2 (I_C - 3) - mu (J - 1) + l/2 (J - 1)^2`, `P = mu F + (l (J - 1) - mu) cof F`,
//! with `l` the model's `lambda + mu`.

use crate::math::lanes::{self, Lane, Mat3s, Vec3s};

use super::CORNER_PAIRS;

/// `a x b`, lane by lane.
#[inline(always)]
fn cross<const N: usize, L: Lane<N>>(a: &Vec3s<L>, b: &Vec3s<L>) -> Vec3s<L> {
    [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
}

/// `cof F = det(F) F^-T`, column by column as cross products of `F`'s columns (defined for
/// singular `F`).
#[inline(always)]
fn cofactor<const N: usize, L: Lane<N>>(f: &Mat3s<L>) -> Mat3s<L> {
    [cross(&f[1], &f[2]), cross(&f[2], &f[0]), cross(&f[0], &f[1])]
}

/// `J - 1` from the displacement gradient `H = F - I`: `tr H + (tr^2 H - tr H^2)/2 + det H`,
/// so that nothing cancels near rest. The models' energies and derivatives in `F` and in the
/// symmetric stretch take `J` from here, so that where an energy is finite its derivatives are
/// too (a determinant taken apart can round to the other side of zero on a nearly flat
/// element). The eigensystem forms take it as the product of the singular values.
#[inline(always)]
pub(crate) fn j_minus_one<const N: usize, L: Lane<N>>(h: &Mat3s<L>) -> L {
    let trace = h[0][0] + h[1][1] + h[2][2];
    let mut trace_of_square = L::splat(0.0);
    for (i, column) in h.iter().enumerate() {
        for (j, x) in column.iter().enumerate() {
            trace_of_square += *x * h[j][i];
        }
    }
    trace + (trace * trace - trace_of_square) * 0.5 + lanes::dot(&h[0], &cross(&h[1], &h[2]))
}

/// Energy density and stress of `N` elements with shear modulus `mu` and `l` (the model's
/// `lambda + mu`). The energy is written in `H = F - I` with `tr H` cancelled analytically:
/// `mu/2 |H|^2 - mu (J - 1 - tr H) + l/2 (J - 1)^2`.
#[inline(always)]
pub(crate) fn stable_neo_hookean_lanes<const N: usize, L: Lane<N>>(
    mu: L,
    l: L,
    f: &Mat3s<L>,
) -> (L, Mat3s<L>) {
    let one = L::splat(1.0);
    let mut h = *f;
    for (k, column) in h.iter_mut().enumerate() {
        column[k] = column[k] - one;
    }
    let squared = lanes::dot(&h[0], &h[0]) + lanes::dot(&h[1], &h[1]) + lanes::dot(&h[2], &h[2]);
    let trace = h[0][0] + h[1][1] + h[2][2];
    let jm1 = j_minus_one(&h);
    let energy = mu * 0.5 * squared - mu * (jm1 - trace) + l * 0.5 * jm1 * jm1;
    let scale = l * jm1 - mu;
    let c = cofactor(f);
    let mut stress = *f;
    for (column, c) in stress.iter_mut().zip(&c) {
        for (p, c) in column.iter_mut().zip(c) {
            *p = *p * mu + *c * scale;
        }
    }
    (energy, stress)
}

/// A tet's Hessian blocks `d2 psi / dx_a dx_b` per unit volume for the corners `a <= b < 3`
/// with shape gradients `beta`, in the order of [`CORNER_PAIRS`] (block `m[kk][i]` is row
/// `i`, column `kk`): the tangent `dP = mu dF + l (cof F : dF) cof F + s d(cof F)`, `s =
/// l (J - 1) - mu`, contracted with `dF = e_k beta_b^T` and `beta_a`, is
///
/// `mu (beta_a . beta_b) I + l (cof F beta_a)(cof F beta_b)^T - s [F (beta_a x beta_b)]x`,
///
/// with no 9x9 tangent formed.
#[inline(always)]
pub(crate) fn stable_neo_hookean_hessian_lanes<const N: usize, L: Lane<N>>(
    mu: L,
    l: L,
    f: &Mat3s<L>,
    beta: &[Vec3s<L>; 3],
) -> [Mat3s<L>; 6] {
    let one = L::splat(1.0);
    let mut h = *f;
    for (k, column) in h.iter_mut().enumerate() {
        column[k] = column[k] - one;
    }
    let s = l * j_minus_one(&h) - mu;
    let c = cofactor(f);
    let zero = L::splat(0.0);
    let mut cb = [[zero; 3]; 3];
    for a in 0..3 {
        cb[a] = lanes::mat_vec(&c, &beta[a]);
    }
    let mut out = [[[zero; 3]; 3]; 6];
    for (block, &(a, b)) in out.iter_mut().zip(&CORNER_PAIRS) {
        let shear = mu * lanes::dot(&beta[a], &beta[b]);
        let v = lanes::mat_vec(f, &cross(&beta[a], &beta[b]));
        let v = [v[0] * s, v[1] * s, v[2] * s];
        // -s [F (beta_a x beta_b)]x, column by column.
        let skew = [[zero, v[2], -v[1]], [-v[2], zero, v[0]], [v[1], -v[0], zero]];
        for kk in 0..3 {
            for i in 0..3 {
                let mut value = l * cb[a][i] * cb[b][kk] - skew[kk][i];
                if i == kk {
                    value += shear;
                }
                block[kk][i] = value;
            }
        }
    }
    out
}
