//! Lane-parallel f64 arithmetic: `N` independent values (one per element of a batch) carried
//! through the same straight-line code. Every operation is written lane by lane on a fixed
//! array, which the compiler turns into vector instructions — SSE2 by default, AVX2 inside a
//! function compiled for it (`#[target_feature(enable = "avx2")]`, chosen at run time). Batching elements this way
//! both fills the vector units and hides the long dependency chains (divisions, square roots)
//! of one element's evaluation behind its neighbours'.
//!
//! Everything here is `#[inline(always)]`, so that it is compiled with the target features of
//! the kernel that uses it.

use std::ops::{Add, AddAssign, Div, Mul, Neg, Sub};

/// `N` f64 values, one per lane.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lanes<const N: usize>(pub [f64; N]);

/// One flag per lane.
pub type Mask<const N: usize> = [bool; N];

/// A 3-vector per lane.
pub type Vec3s<const N: usize> = [Lanes<N>; 3];

/// A 3x3 matrix per lane, column-major: `m[column][row]`.
pub type Mat3s<const N: usize> = [Vec3s<N>; 3];

impl<const N: usize> Lanes<N> {
    #[inline(always)]
    pub fn splat(value: f64) -> Self {
        Lanes([value; N])
    }

    /// The lanes `f(0), ..., f(N - 1)`. (Plain loops here and below: `std::array::from_fn`
    /// is not always unrolled into straight-line code, which keeps it from vectorizing.)
    #[inline(always)]
    pub fn from_fn(mut f: impl FnMut(usize) -> f64) -> Self {
        let mut out = [0.0; N];
        for (l, x) in out.iter_mut().enumerate() {
            *x = f(l);
        }
        Lanes(out)
    }

    #[inline(always)]
    pub fn map(self, f: impl Fn(f64) -> f64) -> Self {
        Lanes::from_fn(|l| f(self.0[l]))
    }

    #[inline(always)]
    pub fn zip(self, other: Self, f: impl Fn(f64, f64) -> f64) -> Self {
        Lanes::from_fn(|l| f(self.0[l], other.0[l]))
    }

    #[inline(always)]
    pub fn sqrt(self) -> Self {
        self.map(f64::sqrt)
    }

    #[inline(always)]
    pub fn abs(self) -> Self {
        self.map(f64::abs)
    }

    #[inline(always)]
    pub fn max(self, other: Self) -> Self {
        self.zip(other, f64::max)
    }

    /// Lane-wise `self > other` (false where either is NaN).
    #[inline(always)]
    pub fn gt(self, other: Self) -> Mask<N> {
        let mut out = [false; N];
        for (l, x) in out.iter_mut().enumerate() {
            *x = self.0[l] > other.0[l];
        }
        out
    }

    /// Lane-wise `self < other` (false where either is NaN).
    #[inline(always)]
    pub fn lt(self, other: Self) -> Mask<N> {
        other.gt(self)
    }

    /// `on` where the mask is set, `off` elsewhere.
    #[inline(always)]
    pub fn select(mask: Mask<N>, on: Self, off: Self) -> Self {
        Lanes::from_fn(|l| if mask[l] { on.0[l] } else { off.0[l] })
    }

    /// The lanes' sum, in lane order.
    #[inline(always)]
    pub fn sum(self) -> f64 {
        self.0.iter().sum()
    }
}

macro_rules! lane_op {
    ($trait:ident, $method:ident, $op:tt) => {
        impl<const N: usize> $trait for Lanes<N> {
            type Output = Self;
            #[inline(always)]
            fn $method(self, other: Self) -> Self {
                Lanes::from_fn(|l| self.0[l] $op other.0[l])
            }
        }
        impl<const N: usize> $trait<f64> for Lanes<N> {
            type Output = Self;
            #[inline(always)]
            fn $method(self, other: f64) -> Self {
                Lanes::from_fn(|l| self.0[l] $op other)
            }
        }
    };
}
lane_op!(Add, add, +);
lane_op!(Sub, sub, -);
lane_op!(Mul, mul, *);
lane_op!(Div, div, /);

impl<const N: usize> Neg for Lanes<N> {
    type Output = Self;
    #[inline(always)]
    fn neg(self) -> Self {
        self.map(|x| -x)
    }
}

impl<const N: usize> AddAssign for Lanes<N> {
    #[inline(always)]
    fn add_assign(&mut self, other: Self) {
        *self = *self + other;
    }
}

/// `a . b` per lane.
#[inline(always)]
pub fn dot<const N: usize>(a: &Vec3s<N>, b: &Vec3s<N>) -> Lanes<N> {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// `m v` per lane.
#[inline(always)]
pub fn mat_vec<const N: usize>(m: &Mat3s<N>, v: &Vec3s<N>) -> Vec3s<N> {
    vec3s(|row| m[0][row] * v[0] + m[1][row] * v[1] + m[2][row] * v[2])
}

/// The vector of components `f(0), f(1), f(2)`.
#[inline(always)]
pub fn vec3s<const N: usize>(mut f: impl FnMut(usize) -> Lanes<N>) -> Vec3s<N> {
    [f(0), f(1), f(2)]
}

/// The matrix of entries `f(column, row)`.
#[inline(always)]
pub fn mat3s<const N: usize>(mut f: impl FnMut(usize, usize) -> Lanes<N>) -> Mat3s<N> {
    [vec3s(|r| f(0, r)), vec3s(|r| f(1, r)), vec3s(|r| f(2, r))]
}

/// Lane `lane` of `m` as a glam matrix.
#[inline(always)]
pub fn mat_lane<const N: usize>(m: &Mat3s<N>, lane: usize) -> glam::DMat3 {
    glam::DMat3::from_cols(
        glam::DVec3::new(m[0][0].0[lane], m[0][1].0[lane], m[0][2].0[lane]),
        glam::DVec3::new(m[1][0].0[lane], m[1][1].0[lane], m[1][2].0[lane]),
        glam::DVec3::new(m[2][0].0[lane], m[2][1].0[lane], m[2][2].0[lane]),
    )
}

/// Sets lane `lane` of `m` to `value`.
#[inline(always)]
pub fn set_mat_lane<const N: usize>(m: &mut Mat3s<N>, lane: usize, value: &glam::DMat3) {
    for (k, x) in value.to_cols_array().into_iter().enumerate() {
        m[k / 3][k % 3].0[lane] = x;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_compute_lane_by_lane() {
        let a = Lanes([1.0, -2.0, 4.0, 9.0]);
        let b = Lanes([3.0, 5.0, -1.0, 0.5]);
        assert_eq!((a + b).0, [4.0, 3.0, 3.0, 9.5]);
        assert_eq!((a - b).0, [-2.0, -7.0, 5.0, 8.5]);
        assert_eq!((a * b).0, [3.0, -10.0, -4.0, 4.5]);
        assert_eq!((a / b).0, [1.0 / 3.0, -0.4, -4.0, 18.0]);
        assert_eq!((a * 2.0).0, [2.0, -4.0, 8.0, 18.0]);
        assert_eq!((-a).abs().sqrt().0, [1.0, 2.0_f64.sqrt(), 2.0, 3.0]);
        assert_eq!(a.max(b).0, [3.0, 5.0, 4.0, 9.0]);
        assert_eq!(a.gt(b), [false, false, true, true]);
        assert_eq!(a.lt(b), [true, true, false, false]);
        assert_eq!(Lanes::select([true, false, true, false], a, b).0, [1.0, 5.0, 4.0, 0.5]);
        assert_eq!(a.sum(), 12.0);
        let m: Mat3s<4> = mat3s(|c, r| Lanes::splat((3 * c + r) as f64));
        let v = [a, b, Lanes::splat(1.0)];
        let mv = mat_vec(&m, &v);
        for lane in 0..4 {
            let expected = mat_lane(&m, lane) * glam::DVec3::new(a.0[lane], b.0[lane], 1.0);
            assert_eq!([mv[0].0[lane], mv[1].0[lane], mv[2].0[lane]], expected.to_array());
        }
        assert_eq!(dot(&v, &v).0[1], 4.0 + 25.0 + 1.0);
    }
}
