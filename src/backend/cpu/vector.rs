//! Stage `vector`: reductions and updates on per-vertex 3-vectors. Dot products are summed
//! in fixed chunks and then in chunk order, so they are bit-identical run to run.

use rayon::prelude::*;

/// Vertices per work item of a reduction.
const CHUNK: usize = 1024;

/// `sum_i a_i . b_i`, deterministic.
pub(crate) fn dot(a: &[[f64; 3]], b: &[[f64; 3]]) -> f64 {
    let partial: Vec<f64> = a
        .par_chunks(CHUNK)
        .zip(b.par_chunks(CHUNK))
        .map(|(a, b)| a.iter().zip(b).map(|(p, q)| p[0] * q[0] + p[1] * q[1] + p[2] * q[2]).sum::<f64>())
        .collect();
    partial.iter().sum()
}

/// `y += alpha x`.
pub(crate) fn axpy(alpha: f64, x: &[[f64; 3]], y: &mut [[f64; 3]]) {
    y.par_iter_mut().with_min_len(CHUNK).zip(x.par_iter()).for_each(|(y, x)| {
        for c in 0..3 {
            y[c] += alpha * x[c];
        }
    });
}

/// `out = x + alpha d`.
pub(crate) fn offset(x: &[[f64; 3]], alpha: f64, d: &[[f64; 3]], out: &mut [[f64; 3]]) {
    out.par_iter_mut().with_min_len(CHUNK).zip(x.par_iter().zip(d.par_iter())).for_each(|(o, (x, d))| {
        *o = [x[0] + alpha * d[0], x[1] + alpha * d[1], x[2] + alpha * d[2]];
    });
}
