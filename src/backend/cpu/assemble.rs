//! Stage `assemble`: a block-sparse matrix from element blocks (each block summing its
//! sources in a fixed order), one invocation per block row. With `vertex_blocks` it is the
//! Hessian `M/h^2 + sum_q c_q theta_q^2 hess E + ...` (pinned vertices get identity rows and
//! columns); without, a plain stiffness matrix (pinned rows and columns zero), as the lagged
//! Rayleigh damping needs. `extra` is added block by block.

use rayon::prelude::*;

use crate::backend::topology::{TRANSPOSED, Topology};
use crate::model::Model;

pub(crate) fn matrix(
    model: &Model,
    topology: &Topology,
    element_blocks: &[[f64; 9]],
    vertex_blocks: Option<&[[f64; 9]]>,
    extra: Option<&[[f64; 9]]>,
    blocks: &mut [[f64; 9]],
) {
    // Split the block array by rows so each row is written by one task.
    let mut rows: Vec<&mut [[f64; 9]]> = Vec::with_capacity(model.vertex_count());
    let mut rest = blocks;
    for v in 0..model.vertex_count() {
        let len = (topology.row_offsets[v + 1] - topology.row_offsets[v]) as usize;
        let (row, tail) = rest.split_at_mut(len);
        rows.push(row);
        rest = tail;
    }
    rows.into_par_iter().enumerate().with_min_len(64).for_each(|(v, row)| {
        let first = topology.row_offsets[v] as usize;
        for (local, block) in row.iter_mut().enumerate() {
            let index = first + local;
            let column = topology.columns[index] as usize;
            *block = [0.0; 9];
            if model.pinned[v] || model.pinned[column] {
                if let (true, Some(vertex)) = (column == v, vertex_blocks) {
                    *block = vertex[v];
                }
                continue;
            }
            let sources =
                topology.source_offsets[index] as usize..topology.source_offsets[index + 1] as usize;
            for &source in &topology.block_sources[sources] {
                let b = &element_blocks[(source & !TRANSPOSED) as usize];
                if source & TRANSPOSED == 0 {
                    for k in 0..9 {
                        block[k] += b[k];
                    }
                } else {
                    for r in 0..3 {
                        for c in 0..3 {
                            block[3 * r + c] += b[3 * c + r];
                        }
                    }
                }
            }
            if let (true, Some(vertex)) = (column == v, vertex_blocks) {
                for k in 0..9 {
                    block[k] += vertex[v][k];
                }
            }
            if let Some(extra) = extra {
                for k in 0..9 {
                    block[k] += extra[index][k];
                }
            }
        }
    });
}

/// Restricts the system to steps that keep pressed vertices on their colliders (the
/// projection model): every block `B_ij` becomes `P_i B_ij P_j`, `P = I - n n^T` at a pressed
/// vertex (`I` elsewhere), and a pressed vertex's diagonal block gets `c n n^T`, `c` half its
/// trace (the mean of the two diagonal entries left), so that the matrix stays definite and
/// the step's normal part is zero (the right-hand side has none).
pub(crate) fn constrain_pressed(
    topology: &Topology,
    pressed: &[Option<glam::DVec3>],
    blocks: &mut [[f64; 9]],
) {
    use glam::DMat3;
    if pressed.iter().all(Option::is_none) {
        return;
    }
    let projector =
        |n: &Option<glam::DVec3>| n.map(|n| DMat3::IDENTITY - DMat3::from_cols(n * n.x, n * n.y, n * n.z));
    for (row, normal) in pressed.iter().enumerate() {
        let p_row = projector(normal);
        let range = topology.row_offsets[row] as usize..topology.row_offsets[row + 1] as usize;
        for (stored, &column) in blocks[range.clone()].iter_mut().zip(&topology.columns[range]) {
            let p_column = projector(&pressed[column as usize]);
            if p_row.is_none() && p_column.is_none() {
                continue;
            }
            // Blocks are stored row-major: the transpose of glam's column-major layout.
            let mut b = DMat3::from_cols_array(stored).transpose();
            if let Some(p) = p_row {
                b = p * b;
            }
            if let Some(p) = p_column {
                b *= p;
            }
            if let (true, Some(n)) = (column as usize == row, normal) {
                let c = (b.x_axis.x + b.y_axis.y + b.z_axis.z) / 2.0;
                b += DMat3::from_cols(*n * n.x, *n * n.y, *n * n.z) * c.max(f64::MIN_POSITIVE);
            }
            *stored = b.transpose().to_cols_array();
        }
    }
}
