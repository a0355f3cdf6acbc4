//! Stage `hessian_product`: `out = H v` with the assembled block-sparse Hessian, one
//! invocation per block row.

use rayon::prelude::*;

use crate::backend::topology::Topology;

/// Row `row` of `H v`.
#[inline]
pub(crate) fn row(topology: &Topology, blocks: &[[f64; 9]], v: &[[f64; 3]], row: usize) -> [f64; 3] {
    let mut acc = [0.0; 3];
    for index in topology.row_offsets[row] as usize..topology.row_offsets[row + 1] as usize {
        let b = &blocks[index];
        let x = &v[topology.columns[index] as usize];
        acc[0] += b[0] * x[0] + b[1] * x[1] + b[2] * x[2];
        acc[1] += b[3] * x[0] + b[4] * x[1] + b[5] * x[2];
        acc[2] += b[6] * x[0] + b[7] * x[1] + b[8] * x[2];
    }
    acc
}

/// `out = H v`.
pub(crate) fn apply(topology: &Topology, blocks: &[[f64; 9]], v: &[[f64; 3]], out: &mut [[f64; 3]]) {
    out.par_iter_mut().with_min_len(256).enumerate().for_each(|(r, o)| *o = row(topology, blocks, v, r));
}
