//! Lane-parallel f64 arithmetic: `N` independent values (one per element of a batch) carried
//! through the same straight-line code. Batching elements this way both fills the vector units
//! and hides the long dependency chains (divisions, square roots) of one element's evaluation
//! behind its neighbours'. Kernels are written once, generic over a [`Lane`] type:
//!
//! - [`Lanes`], a plain array whose operations are loops the compiler vectorizes as it can.
//!   Compiled for AVX2 it still packs many of them two lanes at a time or not at all, and
//!   moves values between registers and the stack around them;
//! - `avx::Avx`, one AVX register, whose operations are the instructions themselves. On the
//!   15 000-tet local/global bar it took the local step from 17.1 to 12.6 ms (two cores).
//!
//! Everything here is `#[inline(always)]`, so that it is compiled with the target features of
//! the kernel that uses it.

use std::ops::{Add, AddAssign, Div, Mul, Neg, Sub};

/// One flag per lane.
pub type Mask<const N: usize> = [bool; N];

/// A 3-vector per lane.
pub type Vec3s<L> = [L; 3];

/// A 3x3 matrix per lane, column-major: `m[column][row]`.
pub type Mat3s<L> = [Vec3s<L>; 3];

/// `N` f64 values carried through the same arithmetic, one per lane: [`Lanes`] on every
/// machine, `avx::Avx` inside kernels compiled for AVX2. Both round every operation as
/// f64 does (no fused multiply-add), so a kernel gives the same bits on either.
pub trait Lane<const N: usize>:
    Copy
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + Add<f64, Output = Self>
    + Sub<f64, Output = Self>
    + Mul<f64, Output = Self>
    + Div<f64, Output = Self>
{
    fn splat(value: f64) -> Self;
    fn from_array(values: [f64; N]) -> Self;
    fn to_array(self) -> [f64; N];
    fn sqrt(self) -> Self;
    fn abs(self) -> Self;
    /// Lane-wise `f64::max` (a NaN lane takes the other operand's value).
    fn max(self, other: Self) -> Self;
    /// Lane-wise `self > other` (false where either is NaN).
    fn gt(self, other: Self) -> Mask<N>;
    /// `on` where the mask is set, `off` elsewhere.
    fn select(mask: Mask<N>, on: Self, off: Self) -> Self;

    /// Lane-wise `self < other` (false where either is NaN).
    #[inline(always)]
    fn lt(self, other: Self) -> Mask<N> {
        other.gt(self)
    }

    /// Lane `l`.
    #[inline(always)]
    fn lane(self, l: usize) -> f64 {
        self.to_array()[l]
    }

    /// The lanes' sum, in lane order.
    #[inline(always)]
    fn sum(self) -> f64 {
        self.to_array().iter().sum()
    }
}

/// `N` f64 values, one per lane, as a plain array: each operation is a loop over the lanes,
/// which the compiler turns into vector instructions where it can.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lanes<const N: usize>(pub [f64; N]);

impl<const N: usize> Lanes<N> {
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
}

impl<const N: usize> Lane<N> for Lanes<N> {
    #[inline(always)]
    fn splat(value: f64) -> Self {
        Lanes([value; N])
    }

    #[inline(always)]
    fn from_array(values: [f64; N]) -> Self {
        Lanes(values)
    }

    #[inline(always)]
    fn to_array(self) -> [f64; N] {
        self.0
    }

    #[inline(always)]
    fn sqrt(self) -> Self {
        Lanes::from_fn(|l| self.0[l].sqrt())
    }

    #[inline(always)]
    fn abs(self) -> Self {
        Lanes::from_fn(|l| self.0[l].abs())
    }

    #[inline(always)]
    fn max(self, other: Self) -> Self {
        Lanes::from_fn(|l| self.0[l].max(other.0[l]))
    }

    #[inline(always)]
    fn gt(self, other: Self) -> Mask<N> {
        let mut out = [false; N];
        for (l, x) in out.iter_mut().enumerate() {
            *x = self.0[l] > other.0[l];
        }
        out
    }

    #[inline(always)]
    fn select(mask: Mask<N>, on: Self, off: Self) -> Self {
        Lanes::from_fn(|l| if mask[l] { on.0[l] } else { off.0[l] })
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
        Lanes::from_fn(|l| -self.0[l])
    }
}

impl<const N: usize> AddAssign for Lanes<N> {
    #[inline(always)]
    fn add_assign(&mut self, other: Self) {
        *self = *self + other;
    }
}

/// Four lanes in one AVX register. Its arithmetic is the AVX instructions themselves, which
/// inline only into code compiled for AVX: the type is made and used only inside kernels
/// that are (`#[target_feature(enable = "avx2")]`, entered after run-time detection), and
/// their lane code takes no closures, since a closure is compiled without its caller's
/// target features and would call every instruction out of line.
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx {
    use std::arch::x86_64::*;
    use std::ops::{Add, AddAssign, Div, Mul, Neg, Sub};

    use super::{Lane, Mask};

    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Avx(__m256d);

    // SAFETY (every `unsafe` below): an `Avx` is only made inside kernels that run after the
    // CPU was found to have AVX2 (see the type's documentation).
    impl Lane<4> for Avx {
        #[inline(always)]
        fn splat(value: f64) -> Self {
            Avx(unsafe { _mm256_set1_pd(value) })
        }

        #[inline(always)]
        fn from_array(values: [f64; 4]) -> Self {
            Avx(unsafe { _mm256_loadu_pd(values.as_ptr()) })
        }

        #[inline(always)]
        fn to_array(self) -> [f64; 4] {
            let mut out = [0.0; 4];
            unsafe { _mm256_storeu_pd(out.as_mut_ptr(), self.0) };
            out
        }

        #[inline(always)]
        fn sqrt(self) -> Self {
            Avx(unsafe { _mm256_sqrt_pd(self.0) })
        }

        #[inline(always)]
        fn abs(self) -> Self {
            Avx(unsafe { _mm256_andnot_pd(_mm256_set1_pd(-0.0), self.0) })
        }

        #[inline(always)]
        fn max(self, other: Self) -> Self {
            // `maxpd(a, b)` gives `b` where either is NaN: `self` where `other` is NaN; the
            // blend gives `other` where `self` is.
            unsafe {
                let max = _mm256_max_pd(other.0, self.0);
                Avx(_mm256_blendv_pd(max, other.0, _mm256_cmp_pd::<_CMP_UNORD_Q>(self.0, self.0)))
            }
        }

        #[inline(always)]
        fn gt(self, other: Self) -> Mask<4> {
            let bits = unsafe { _mm256_movemask_pd(_mm256_cmp_pd::<_CMP_GT_OQ>(self.0, other.0)) };
            [bits & 1 != 0, bits & 2 != 0, bits & 4 != 0, bits & 8 != 0]
        }

        #[inline(always)]
        fn select(mask: Mask<4>, on: Self, off: Self) -> Self {
            let m = mask.map(|set| -(set as i64));
            unsafe {
                let mask = _mm256_castsi256_pd(_mm256_set_epi64x(m[3], m[2], m[1], m[0]));
                Avx(_mm256_blendv_pd(off.0, on.0, mask))
            }
        }
    }

    macro_rules! avx_op {
        ($trait:ident, $method:ident, $intrinsic:ident) => {
            impl $trait for Avx {
                type Output = Self;
                #[inline(always)]
                fn $method(self, other: Self) -> Self {
                    Avx(unsafe { $intrinsic(self.0, other.0) })
                }
            }
            impl $trait<f64> for Avx {
                type Output = Self;
                #[inline(always)]
                fn $method(self, other: f64) -> Self {
                    Avx(unsafe { $intrinsic(self.0, _mm256_set1_pd(other)) })
                }
            }
        };
    }
    avx_op!(Add, add, _mm256_add_pd);
    avx_op!(Sub, sub, _mm256_sub_pd);
    avx_op!(Mul, mul, _mm256_mul_pd);
    avx_op!(Div, div, _mm256_div_pd);

    impl Neg for Avx {
        type Output = Self;
        #[inline(always)]
        fn neg(self) -> Self {
            Avx(unsafe { _mm256_xor_pd(self.0, _mm256_set1_pd(-0.0)) })
        }
    }

    impl AddAssign for Avx {
        #[inline(always)]
        fn add_assign(&mut self, other: Self) {
            *self = *self + other;
        }
    }
}

/// `a . b` per lane.
#[inline(always)]
pub fn dot<const N: usize, L: Lane<N>>(a: &Vec3s<L>, b: &Vec3s<L>) -> L {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// `m v` per lane.
#[inline(always)]
pub fn mat_vec<const N: usize, L: Lane<N>>(m: &Mat3s<L>, v: &Vec3s<L>) -> Vec3s<L> {
    [
        m[0][0] * v[0] + m[1][0] * v[1] + m[2][0] * v[2],
        m[0][1] * v[0] + m[1][1] * v[1] + m[2][1] * v[2],
        m[0][2] * v[0] + m[1][2] * v[1] + m[2][2] * v[2],
    ]
}

/// The matrix of entries `expr(column, row)`, written out entry by entry where it is used
/// (a macro, not a closure: see [`avx`]).
macro_rules! mat3s {
    (|$c:ident, $r:ident| $entry:expr) => {
        [
            [$crate::math::lanes::mat3s!(@ 0, 0, $c, $r, $entry), $crate::math::lanes::mat3s!(@ 0, 1, $c, $r, $entry), $crate::math::lanes::mat3s!(@ 0, 2, $c, $r, $entry)],
            [$crate::math::lanes::mat3s!(@ 1, 0, $c, $r, $entry), $crate::math::lanes::mat3s!(@ 1, 1, $c, $r, $entry), $crate::math::lanes::mat3s!(@ 1, 2, $c, $r, $entry)],
            [$crate::math::lanes::mat3s!(@ 2, 0, $c, $r, $entry), $crate::math::lanes::mat3s!(@ 2, 1, $c, $r, $entry), $crate::math::lanes::mat3s!(@ 2, 2, $c, $r, $entry)],
        ]
    };
    (@ $column:literal, $row:literal, $c:ident, $r:ident, $entry:expr) => {{
        let ($c, $r): (usize, usize) = ($column, $row);
        $entry
    }};
}
pub(crate) use mat3s;

/// Lane `lane` of `m` as a glam matrix.
#[inline(always)]
pub fn mat_lane<const N: usize, L: Lane<N>>(m: &Mat3s<L>, lane: usize) -> glam::DMat3 {
    let mut columns = [0.0; 9];
    for (k, x) in columns.iter_mut().enumerate() {
        *x = m[k / 3][k % 3].lane(lane);
    }
    glam::DMat3::from_cols_array(&columns)
}

/// The matrices `m`, one per lane.
#[inline(always)]
pub fn mats_to_lanes<const N: usize, L: Lane<N>>(m: &[glam::DMat3; N]) -> Mat3s<L> {
    let mut entries = [[0.0; N]; 9];
    for (l, m) in m.iter().enumerate() {
        for (k, x) in m.to_cols_array().into_iter().enumerate() {
            entries[k][l] = x;
        }
    }
    let mut out = [[L::splat(0.0); 3]; 3];
    for (k, lanes) in entries.iter().enumerate() {
        out[k / 3][k % 3] = L::from_array(*lanes);
    }
    out
}

/// The matrix `m` as one lane (the one-element forms of the lane kernels).
#[inline(always)]
pub fn one_lane(m: &glam::DMat3) -> Mat3s<Lanes<1>> {
    mats_to_lanes(&[*m])
}

/// Sets lane `lane` of `m` to `value`.
#[inline(always)]
pub fn set_mat_lane<const N: usize, L: Lane<N>>(m: &mut Mat3s<L>, lane: usize, value: &glam::DMat3) {
    for (k, x) in value.to_cols_array().into_iter().enumerate() {
        let mut values = m[k / 3][k % 3].to_array();
        values[lane] = x;
        m[k / 3][k % 3] = L::from_array(values);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every operation of `L`, lane by lane, with the NaN rules of `f64`.
    fn computes_lane_by_lane<L: Lane<4>>() {
        let a = L::from_array([1.0, -2.0, 4.0, 9.0]);
        let b = L::from_array([3.0, 5.0, -1.0, 0.5]);
        assert_eq!((a + b).to_array(), [4.0, 3.0, 3.0, 9.5]);
        assert_eq!((a - b).to_array(), [-2.0, -7.0, 5.0, 8.5]);
        assert_eq!((a * b).to_array(), [3.0, -10.0, -4.0, 4.5]);
        assert_eq!((a / b).to_array(), [1.0 / 3.0, -0.4, -4.0, 18.0]);
        assert_eq!((a * 2.0).to_array(), [2.0, -4.0, 8.0, 18.0]);
        assert_eq!((a + 1.0 - 0.5).to_array(), [1.5, -1.5, 4.5, 9.5]);
        assert_eq!((a / 4.0).to_array(), [0.25, -0.5, 1.0, 2.25]);
        assert_eq!((-a).abs().sqrt().to_array(), [1.0, 2.0_f64.sqrt(), 2.0, 3.0]);
        assert_eq!(a.max(b).to_array(), [3.0, 5.0, 4.0, 9.0]);
        let nan = f64::NAN;
        let maxed = L::from_array([nan, 1.0, nan, 2.0]).max(L::from_array([3.0, nan, nan, 1.0]));
        assert_eq!(maxed.to_array().map(|x| x.is_nan()), [false, false, true, false]);
        assert_eq!([maxed.lane(0), maxed.lane(1), maxed.lane(3)], [3.0, 1.0, 2.0]);
        assert_eq!(a.gt(b), [false, false, true, true]);
        assert_eq!(a.lt(b), [true, true, false, false]);
        assert_eq!(L::from_array([nan; 4]).gt(a), [false; 4]);
        assert_eq!(L::select([true, false, true, false], a, b).to_array(), [1.0, 5.0, 4.0, 0.5]);
        assert_eq!(a.sum(), 12.0);
        let mut c = a;
        c += b;
        assert_eq!(c.to_array(), [4.0, 3.0, 3.0, 9.5]);
        let m: Mat3s<L> = mat3s!(|c, r| L::splat((3 * c + r) as f64));
        let v = [a, b, L::splat(1.0)];
        let mv = mat_vec(&m, &v);
        for lane in 0..4 {
            let expected = mat_lane(&m, lane) * glam::DVec3::new(a.lane(lane), b.lane(lane), 1.0);
            assert_eq!([mv[0].lane(lane), mv[1].lane(lane), mv[2].lane(lane)], expected.to_array());
        }
        assert_eq!(dot(&v, &v).lane(1), 4.0 + 25.0 + 1.0);
        let matrices =
            [0.5, 1.0, -2.0, 3.0].map(|x| glam::DMat3::from_cols_array(&[x; 9]) + glam::DMat3::IDENTITY);
        let m2: Mat3s<L> = mats_to_lanes(&matrices);
        for (lane, matrix) in matrices.iter().enumerate() {
            assert_eq!(mat_lane(&m2, lane), *matrix);
        }
        let mut m = m;
        set_mat_lane(&mut m, 2, &glam::DMat3::IDENTITY);
        assert_eq!(mat_lane(&m, 2), glam::DMat3::IDENTITY);
        assert_eq!(m[1][0].to_array(), [3.0, 3.0, 0.0, 3.0]);
    }

    #[test]
    fn lanes_compute_lane_by_lane() {
        computes_lane_by_lane::<Lanes<4>>();
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx_lanes_compute_lane_by_lane() {
        if std::arch::is_x86_feature_detected!("avx2") {
            computes_lane_by_lane::<avx::Avx>();
        } else {
            eprintln!("skipped: this CPU has no AVX2");
        }
    }
}
