//! Sparse Cholesky (faer) of the assembled Hessian: the symbolic factorization is computed
//! once per model, the numeric one per Newton iteration. A matrix that is not numerically
//! positive definite is retried with a growing diagonal shift (Tikhonov).

use faer::linalg::solvers::Solve;
use faer::sparse::linalg::solvers::{Llt, SymbolicLlt};
use faer::sparse::{SparseColMatRef, SymbolicSparseColMat};
use faer::{ColMut, Side};

use crate::backend::topology::Topology;

pub(crate) struct Cholesky {
    pattern: SymbolicSparseColMat<u32>,
    symbolic: SymbolicLlt<u32>,
    /// For each stored (lower-triangle) value: the Hessian block and the entry in it.
    sources: Vec<(u32, u8)>,
    diagonal_values: Vec<usize>,
    values: Vec<f64>,
}

/// How a factor-and-solve went.
pub(crate) struct Outcome {
    /// The unshifted matrix was not positive definite.
    pub indefinite: bool,
}

impl Cholesky {
    /// Builds the lower-triangular pattern and its symbolic factorization.
    pub fn new(topology: &Topology) -> Option<Cholesky> {
        let n = topology.diagonal.len();
        let mut col_ptr = vec![0u32];
        let mut row_idx = Vec::new();
        let mut sources = Vec::new();
        let mut diagonal_values = Vec::with_capacity(3 * n);
        // Column 3 vj + l of the lower triangle is row vj of the (symmetric) block matrix,
        // transposed: A[3 vi + k][3 vj + l] = B(vj, vi)[l][k].
        for vj in 0..n {
            for l in 0..3 {
                let c = 3 * vj + l;
                for index in topology.row_offsets[vj] as usize..topology.row_offsets[vj + 1] as usize {
                    let vi = topology.columns[index] as usize;
                    for k in 0..3 {
                        let r = 3 * vi + k;
                        if r >= c {
                            if r == c {
                                diagonal_values.push(row_idx.len());
                            }
                            row_idx.push(r as u32);
                            sources.push((index as u32, (3 * l + k) as u8));
                        }
                    }
                }
                col_ptr.push(row_idx.len() as u32);
            }
        }
        let pattern = SymbolicSparseColMat::new_checked(3 * n, 3 * n, col_ptr, None, row_idx);
        let symbolic = SymbolicLlt::try_new(pattern.as_ref(), Side::Lower).ok()?;
        let values = vec![0.0; sources.len()];
        Some(Cholesky { pattern, symbolic, sources, diagonal_values, values })
    }

    /// Solves `A x = b` for the block matrix `blocks`; `x` receives the solution.
    pub fn solve(&mut self, blocks: &[[f64; 9]], b: &[[f64; 3]], x: &mut [[f64; 3]]) -> Option<Outcome> {
        for (value, &(block, entry)) in self.values.iter_mut().zip(&self.sources) {
            *value = blocks[block as usize][entry as usize];
        }
        let largest = self.diagonal_values.iter().map(|&i| self.values[i].abs()).fold(0.0, f64::max);
        let mut shift = 0.0;
        let mut indefinite = false;
        for attempt in 0..6 {
            if attempt > 0 {
                indefinite = true;
                // 1e-10 of the largest diagonal, growing 100x per retry up to 1e0.
                let next = largest * 1e-10 * 100f64.powi(attempt - 1);
                for &i in &self.diagonal_values {
                    self.values[i] += next - shift;
                }
                shift = next;
            }
            let matrix = SparseColMatRef::new(self.pattern.as_ref(), &self.values);
            if let Ok(llt) = Llt::try_new_with_symbolic(self.symbolic.clone(), matrix, Side::Lower) {
                x.copy_from_slice(b);
                llt.solve_in_place(ColMut::from_slice_mut(x.as_flattened_mut()).as_mat_mut());
                return Some(Outcome { indefinite });
            }
        }
        None
    }
}
