//! The local/global solver's global step on the CPU: the scalar matrix `S` of
//! [`projective`](crate::backend::projective) factored by faer's sparse Cholesky — the symbolic
//! factorization once per model, the numeric one only when the step weight, the time step or
//! the per-vertex diagonal (handles, contacts, damping) changes — and solved for the three
//! coordinates at once.

use faer::linalg::solvers::Solve;
use faer::sparse::linalg::solvers::{Llt, SymbolicLlt};
use faer::sparse::{SparseColMatRef, SymbolicSparseColMat};
use faer::{MatMut, Side};

use crate::backend::projective;
use crate::backend::topology::Topology;
use crate::model::Model;

pub(crate) struct GlobalSolve {
    pattern: SymbolicSparseColMat<u32>,
    symbolic: SymbolicLlt<u32>,
    /// For each stored (lower-triangle) value, the pattern entry it comes from.
    sources: Vec<u32>,
    /// The weighted Laplacian on the pattern.
    laplacian: Vec<f64>,
    /// The last two factors with their `(a, diagonal)`, the latest first: a stabilized step
    /// alternates the midpoint and backward-Euler weights.
    factors: Vec<(f64, Vec<f64>, Llt<u32, f64>)>,
    entries: Vec<f64>,
    values: Vec<f64>,
    /// Column-major right-hand sides.
    columns: Vec<f64>,
    /// Stored values of the factor per stored value of the matrix (lower triangles).
    pub fill: f64,
}

impl GlobalSolve {
    pub fn new(model: &Model, topology: &Topology) -> Option<GlobalSolve> {
        let n = topology.diagonal.len();
        let mut col_ptr = vec![0u32];
        let mut row_idx = Vec::new();
        let mut sources = Vec::new();
        // The pattern is symmetric: column j of the lower triangle is row j's entries >= j.
        for j in 0..n {
            for index in topology.row_offsets[j] as usize..topology.row_offsets[j + 1] as usize {
                let i = topology.columns[index];
                if i as usize >= j {
                    row_idx.push(i);
                    sources.push(index as u32);
                }
            }
            col_ptr.push(row_idx.len() as u32);
        }
        let pattern = SymbolicSparseColMat::new_checked(n, n, col_ptr, None, row_idx);
        let symbolic = SymbolicLlt::try_new(pattern.as_ref(), Side::Lower).ok()?;
        // The factor's size against the matrix's (faer's high-level symbolic does not say).
        let fill = faer::sparse::linalg::cholesky::factorize_symbolic_cholesky(
            pattern.as_ref(),
            Side::Lower,
            Default::default(),
            Default::default(),
        )
        .ok()?
        .len_val() as f64
            / sources.len() as f64;

        Some(GlobalSolve {
            pattern,
            symbolic,
            values: vec![0.0; sources.len()],
            sources,
            laplacian: projective::laplacian(model, topology),
            factors: Vec::new(),
            fill,
            entries: Vec::new(),
            columns: vec![0.0; 3 * n],
        })
    }

    /// Factors `S` for the step weight `a` and the vertex diagonal, unless one of the two
    /// factors in hand is already that. False if `S` is not positive definite (it always is
    /// for valid models).
    pub fn prepare(&mut self, model: &Model, topology: &Topology, a: f64, diagonal: &[f64]) -> bool {
        if let Some(k) = self.factors.iter().position(|(fa, fd, _)| *fa == a && fd.as_slice() == diagonal) {
            self.factors.swap(0, k);
            return true;
        }
        projective::matrix(model, topology, &self.laplacian, a, diagonal, &mut self.entries);
        for (value, &source) in self.values.iter_mut().zip(&self.sources) {
            *value = self.entries[source as usize];
        }
        let matrix = SparseColMatRef::new(self.pattern.as_ref(), &self.values);
        let Ok(factor) = Llt::try_new_with_symbolic(self.symbolic.clone(), matrix, Side::Lower) else {
            return false;
        };
        self.factors.truncate(1);
        self.factors.insert(0, (a, diagonal.to_vec(), factor));
        true
    }

    /// Overwrites `rhs` with `S^-1 rhs`, coordinate by coordinate.
    pub fn solve(&mut self, rhs: &mut [[f64; 3]]) {
        let factor = &self.factors.first().expect("prepare before solve").2;
        let n = rhs.len();
        for (v, r) in rhs.iter().enumerate() {
            for (c, value) in r.iter().enumerate() {
                self.columns[c * n + v] = *value;
            }
        }
        // Two coordinates on one core, the third on the other.
        let (two, one) = self.columns.split_at_mut(2 * n);
        rayon::join(
            || factor.solve_in_place(MatMut::from_column_major_slice_mut(two, n, 2)),
            || factor.solve_in_place(MatMut::from_column_major_slice_mut(one, n, 1)),
        );
        for (v, r) in rhs.iter_mut().enumerate() {
            for (c, value) in r.iter_mut().enumerate() {
                *value = self.columns[c * n + v];
            }
        }
    }
}
