//! Stage `hessian_product`: `out = H v` with the assembled block-sparse Hessian, one
//! invocation per block row.
//!
//! A row-major block's nine products are formed in the order the block is stored,
//! `b_k x_(k mod 3)`, as two runs of four and a last one, and summed into the block row's
//! three entries once, at the row's end: two four-wide multiplies and adds per block where
//! the plain form takes nine scalar ones (on the 960-tet beam, a PCG product went from about
//! 14 to 5 us). The AVX2 and portable forms do the same operations in the same order, so
//! their results are identical.

use glam::{DMat3, DVec3};
use rayon::prelude::*;

use crate::backend::topology::Topology;
use crate::objective::Coupling;

/// Rows `first..first + out.len()` of `H v` into `out`; returns `sum_rows v_row . out_row`
/// (PCG's curvature), summed in row order.
pub(crate) fn rows(
    topology: &Topology,
    blocks: &[[f64; 9]],
    v: &[[f64; 3]],
    first: usize,
    out: &mut [[f64; 3]],
) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { rows_avx2(topology, blocks, v, first, out) };
    }
    rows_portable(topology, blocks, v, first, out)
}

/// `out = H v`.
pub(crate) fn apply(topology: &Topology, blocks: &[[f64; 9]], v: &[[f64; 3]], out: &mut [[f64; 3]]) {
    const CHUNK: usize = 256;
    out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, o)| {
        rows(topology, blocks, v, c * CHUNK, o);
    });
}

/// Adds the couplings' blocks between different vertices, `c_i c_j K` for `i != j`, times
/// `v` to `out` (their diagonal blocks are in the assembled matrix); returns their part of
/// `v . A v`. Serial: there are few, and their rows are anyone's.
pub(crate) fn couplings(couplings: &[Coupling], v: &[[f64; 3]], out: &mut [[f64; 3]]) -> f64 {
    let mut curvature = 0.0;
    for coupling in couplings {
        let block = DMat3::from_cols_array(&coupling.block);
        let scaled: [DVec3; 4] =
            std::array::from_fn(|i| DVec3::from(v[coupling.vertices[i] as usize]) * coupling.coefficients[i]);
        let sum: DVec3 = scaled.iter().sum();
        for (i, &vertex) in coupling.vertices.iter().enumerate() {
            let push = block * (sum - scaled[i]);
            let o = &mut out[vertex as usize];
            *o = (DVec3::from(*o) + push * coupling.coefficients[i]).to_array();
            curvature += scaled[i].dot(push);
        }
    }
    curvature
}

/// The three entries of a block row from its accumulated products `(b0 x0, b1 x1, b2 x2,
/// b3 x0)`, `(b4 x1, b5 x2, b6 x0, b7 x1)` and `b8 x2`.
#[inline(always)]
fn finish(low: [f64; 4], high: [f64; 4], last: f64) -> [f64; 3] {
    [low[0] + low[1] + low[2], low[3] + high[0] + high[1], high[2] + high[3] + last]
}

#[inline(always)]
fn curvature_term(p: [f64; 3], out: [f64; 3]) -> f64 {
    p[0] * out[0] + p[1] * out[1] + p[2] * out[2]
}

/// The rows loop both forms share: `add` accumulates one block's products into the row's
/// accumulator, `total` turns it into the row's three entries.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn rows_by<A: Copy>(
    topology: &Topology,
    blocks: &[[f64; 9]],
    v: &[[f64; 3]],
    first: usize,
    out: &mut [[f64; 3]],
    zero: A,
    add: impl Fn(A, &[f64; 9], &[f64; 3]) -> A,
    total: impl Fn(A) -> [f64; 3],
) -> f64 {
    let mut curvature = 0.0;
    for (k, o) in out.iter_mut().enumerate() {
        let row = first + k;
        let range = topology.row_offsets[row] as usize..topology.row_offsets[row + 1] as usize;
        let mut accumulator = zero;
        for (b, &column) in blocks[range.clone()].iter().zip(&topology.columns[range]) {
            accumulator = add(accumulator, b, &v[column as usize]);
        }
        *o = total(accumulator);
        curvature += curvature_term(v[row], *o);
    }
    curvature
}

fn rows_portable(
    topology: &Topology,
    blocks: &[[f64; 9]],
    v: &[[f64; 3]],
    first: usize,
    out: &mut [[f64; 3]],
) -> f64 {
    let add = |(mut low, mut high, last): ([f64; 4], [f64; 4], f64), b: &[f64; 9], x: &[f64; 3]| {
        let (x_low, x_high) = ([x[0], x[1], x[2], x[0]], [x[1], x[2], x[0], x[1]]);
        for k in 0..4 {
            low[k] += b[k] * x_low[k];
            high[k] += b[4 + k] * x_high[k];
        }
        (low, high, last + b[8] * x[2])
    };
    let total = |(low, high, last)| finish(low, high, last);
    rows_by(topology, blocks, v, first, out, ([0.0; 4], [0.0; 4], 0.0), add, total)
}

/// [`rows_portable`] in AVX2 registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn rows_avx2(
    topology: &Topology,
    blocks: &[[f64; 9]],
    v: &[[f64; 3]],
    first: usize,
    out: &mut [[f64; 3]],
) -> f64 {
    use std::arch::x86_64::*;
    let add = |(low, high, last): (__m256d, __m256d, f64), b: &[f64; 9], x: &[f64; 3]| {
        // SAFETY: a vertex is three f64, of which the first two are read; a block is nine,
        // read as four and four (and one).
        let (pairs, b_low, b_high) = unsafe {
            let pairs = _mm256_broadcast_pd(&*(x.as_ptr() as *const __m128d));
            (pairs, _mm256_loadu_pd(b.as_ptr()), _mm256_loadu_pd(b.as_ptr().add(4)))
        };
        let x012 = _mm256_blend_pd::<0b0100>(pairs, _mm256_broadcast_sd(&x[2]));
        let x_low = _mm256_permute4x64_pd::<0b00_10_01_00>(x012);
        let x_high = _mm256_permute4x64_pd::<0b01_00_10_01>(x012);
        let low = _mm256_add_pd(low, _mm256_mul_pd(b_low, x_low));
        let high = _mm256_add_pd(high, _mm256_mul_pd(b_high, x_high));
        (low, high, last + b[8] * x[2])
    };
    let total = |(low, high, last): (__m256d, __m256d, f64)| {
        let (mut low_lanes, mut high_lanes) = ([0.0; 4], [0.0; 4]);
        // SAFETY: four f64 each.
        unsafe {
            _mm256_storeu_pd(low_lanes.as_mut_ptr(), low);
            _mm256_storeu_pd(high_lanes.as_mut_ptr(), high);
        }
        finish(low_lanes, high_lanes, last)
    };
    rows_by(topology, blocks, v, first, out, (_mm256_setzero_pd(), _mm256_setzero_pd(), 0.0), add, total)
}

#[cfg(test)]
mod tests {
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::material::Material;
    use crate::mesh::TetMesh;
    use crate::model::Model;

    #[test]
    fn couplings_add_the_blocks_between_their_vertices() {
        let coupling = Coupling {
            vertices: [0, 2, 3, 1],
            coefficients: [1.0, -0.2, -0.5, -0.3],
            block: [2.0, 0.3, -0.1, 0.3, 1.5, 0.2, -0.1, 0.2, 3.0],
        };
        let v = [[0.3, -1.0, 2.0], [0.5, 0.1, -0.7], [1.5, 0.2, 0.4], [-0.6, 0.9, 0.3]];
        let mut out = [[0.0; 3]; 4];
        let curvature = couplings(&[coupling], &v, &mut out);
        // The dense form: row i is sum over j != i of c_i c_j K v_j.
        let k = DMat3::from_cols_array(&coupling.block);
        let mut expected_curvature = 0.0;
        for (i, &vi) in coupling.vertices.iter().enumerate() {
            let mut row = DVec3::ZERO;
            for (j, &vj) in coupling.vertices.iter().enumerate() {
                if i != j {
                    row += k
                        * DVec3::from(v[vj as usize])
                        * (coupling.coefficients[i] * coupling.coefficients[j]);
                }
            }
            assert!((row - DVec3::from(out[vi as usize])).length() < 1e-14);
            expected_curvature += row.dot(DVec3::from(v[vi as usize]));
        }
        assert!((curvature - expected_curvature).abs() < 1e-13 && curvature != 0.0);
    }

    /// On random blocks and a random vector: the product is the dense one to round-off, and
    /// the AVX2 form (where the CPU has it) gives the portable form's numbers exactly.
    #[test]
    fn rows_are_the_dense_product_on_every_path() {
        let mut model = Model::empty([0.0; 3]);
        model
            .add_tet_body(&TetMesh::bar([4, 2, 2], [1.0, 0.5, 0.5]), &[Material::corotated(1e6, 0.3)], 1000.0)
            .unwrap();
        let topology = Topology::new(&model);
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let blocks: Vec<[f64; 9]> = (0..topology.block_count())
            .map(|_| std::array::from_fn(|_| rng.random_range(-1.0..1.0)))
            .collect();
        let n = model.vertex_count();
        let v: Vec<[f64; 3]> = (0..n).map(|_| std::array::from_fn(|_| rng.random_range(-1.0..1.0))).collect();
        let mut portable = vec![[0.0; 3]; n];
        let portable_curvature = rows_portable(&topology, &blocks, &v, 0, &mut portable);
        let mut dispatched = vec![[0.0; 3]; n];
        let curvature = rows(&topology, &blocks, &v, 0, &mut dispatched);
        assert_eq!(dispatched, portable);
        assert_eq!(curvature.to_bits(), portable_curvature.to_bits());
        let mut dense_curvature = 0.0;
        for row in 0..n {
            let mut dense = [0.0; 3];
            for index in topology.row_offsets[row] as usize..topology.row_offsets[row + 1] as usize {
                let (b, x) = (&blocks[index], &v[topology.columns[index] as usize]);
                for i in 0..3 {
                    dense[i] += (0..3).map(|j| b[3 * i + j] * x[j]).sum::<f64>();
                }
            }
            for i in 0..3 {
                assert!(
                    (dense[i] - portable[row][i]).abs() < 1e-12,
                    "row {row}: {dense:?} vs {:?}",
                    portable[row]
                );
            }
            dense_curvature += curvature_term(v[row], dense);
        }
        assert!((dense_curvature - curvature).abs() < 1e-10);
    }
}
