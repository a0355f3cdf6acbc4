//! The local/global solver's global step on the CPU: the scalar matrix `S` of
//! [`projective`](crate::backend::projective) factored by faer's sparse Cholesky — the symbolic
//! factorization (fill-reducing order and the factor's pattern) once per model, the numeric
//! one only when the step weight, the time step or the per-vertex diagonal (handles, contacts,
//! damping) changes — and solved for the three coordinates at once.
//!
//! faer picks the factor's form: simplicial (one sparse column per vertex: small or thin
//! bodies) or supernodal (large compact bodies, whose dense blocks factor many times faster).
//! Either way the factor is then read into sparse columns and solved by our own
//! substitutions: the right-hand sides a core solves sit together, so each entry of `L` is
//! read once for them all, and no division is left in the loop. (faer's supernodal solve runs
//! a dense product per supernode, which for one to three right-hand sides spends more time
//! packing operands than multiplying: the columns halve the bunny's solves.)

use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::cholesky::llt::factor::LltRegularization;
use faer::sparse::linalg::cholesky::{
    SymbolicCholesky, SymbolicCholeskyRaw, SymmetricOrdering, factorize_symbolic_cholesky,
};
use faer::sparse::{SparseColMatRef, SymbolicSparseColMat};
use faer::{Par, Side};

use crate::backend::projective;
use crate::backend::topology::Topology;
use crate::model::Model;

/// Entries of `L` from which a simplicial solve is split between two cores.
const PARALLEL_SOLVE_ENTRIES: usize = 20_000;

pub(crate) struct GlobalSolve {
    pattern: SymbolicSparseColMat<u32>,
    symbolic: SymbolicCholesky<u32>,
    /// The factor's pattern as sparse columns.
    columns: Columns,
    /// For each stored (lower-triangle) value, the pattern entry it comes from.
    sources: Vec<u32>,
    /// The weighted Laplacian on the pattern.
    laplacian: Vec<f64>,
    /// The last two factors, the latest first: a stabilized step alternates the midpoint and
    /// backward-Euler weights.
    factors: Vec<Factor>,
    entries: Vec<f64>,
    values: Vec<f64>,
    /// The right-hand sides in the factor's order, and split two and one for two cores.
    all: Vec<[f64; 3]>,
    pair: Vec<[f64; 2]>,
    single: Vec<[f64; 1]>,
    /// Stored values of the factor per stored value of the matrix (lower triangles).
    pub fill: f64,
}

/// The numeric factor `L` of one `(a, diagonal)`.
struct Factor {
    a: f64,
    diagonal: Vec<f64>,
    /// `L`'s values on the columns' pattern.
    values: Vec<f64>,
    /// `1 / L_jj`.
    inverse_diagonal: Vec<f64>,
}

/// The factor's pattern column by column, each column's diagonal first, whichever form faer
/// chose. A supernodal factor's dense blocks are read into it entry by entry: `from` says
/// where each entry is in faer's values (the upper triangles of the diagonal blocks left out).
struct Columns {
    col_ptr: Vec<u32>,
    row_idx: Vec<u32>,
    from: Option<Vec<u32>>,
}

impl Columns {
    fn new(symbolic: &SymbolicCholesky<u32>) -> Columns {
        let s = match symbolic.raw() {
            SymbolicCholeskyRaw::Simplicial(s) => {
                return Columns { col_ptr: s.col_ptr().to_vec(), row_idx: s.row_idx().to_vec(), from: None };
            }
            SymbolicCholeskyRaw::Supernodal(s) => s,
        };
        let (mut col_ptr, mut row_idx, mut from) = (vec![0u32], Vec::new(), Vec::new());
        for k in 0..s.n_supernodes() {
            let (begin, end) = (s.supernode_begin()[k] as usize, s.supernode_end()[k] as usize);
            let first = s.col_ptr_for_row_idx()[k] as usize;
            let pattern = &s.row_idx()[first..first + s.nnz_per_super()[k] as usize];
            // The supernode's values: a column-major block, its own columns' rows first.
            let (size, base) = (end - begin, s.col_ptr_for_val()[k] as usize);
            let rows = size + pattern.len();
            for j in 0..size {
                for i in j..size {
                    row_idx.push((begin + i) as u32);
                    from.push((base + j * rows + i) as u32);
                }
                for (r, &p) in pattern.iter().enumerate() {
                    row_idx.push(p);
                    from.push((base + j * rows + size + r) as u32);
                }
                col_ptr.push(row_idx.len() as u32);
            }
        }
        Columns { col_ptr, row_idx, from: Some(from) }
    }
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
        let symbolic = factorize_symbolic_cholesky(
            pattern.as_ref(),
            Side::Lower,
            SymmetricOrdering::Amd,
            Default::default(),
        )
        .ok()?;
        let fill = symbolic.len_val() as f64 / sources.len() as f64;
        Some(GlobalSolve {
            columns: Columns::new(&symbolic),
            pattern,
            symbolic,
            values: vec![0.0; sources.len()],
            sources,
            laplacian: projective::laplacian(model, topology),
            factors: Vec::new(),
            fill,
            entries: Vec::new(),
            all: vec![[0.0; 3]; n],
            pair: vec![[0.0; 2]; n],
            single: vec![[0.0; 1]; n],
        })
    }

    /// Factors `S` for the step weight `a` and the vertex diagonal, unless one of the two
    /// factors in hand is already that. False if `S` is not positive definite (it always is
    /// for valid models).
    pub fn prepare(&mut self, model: &Model, topology: &Topology, a: f64, diagonal: &[f64]) -> bool {
        if let Some(k) = self.factors.iter().position(|f| f.a == a && f.diagonal.as_slice() == diagonal) {
            self.factors.swap(0, k);
            return true;
        }
        projective::matrix(model, topology, &self.laplacian, a, diagonal, &mut self.entries);
        for (value, &source) in self.values.iter_mut().zip(&self.sources) {
            *value = self.entries[source as usize];
        }
        let matrix = SparseColMatRef::new(self.pattern.as_ref(), &self.values);
        let mut values = vec![0.0; self.symbolic.len_val()];
        let scratch = self.symbolic.factorize_numeric_llt_scratch::<f64>(Par::Seq, Default::default());
        let mut buffer = MemBuffer::new(scratch);
        let factored = self.symbolic.factorize_numeric_llt(
            &mut values,
            matrix,
            Side::Lower,
            LltRegularization::default(),
            Par::Seq,
            MemStack::new(&mut buffer),
            Default::default(),
        );
        if factored.is_err() {
            return false;
        }
        let values = match &self.columns.from {
            Some(from) => from.iter().map(|&k| values[k as usize]).collect(),
            None => values,
        };
        let (col_ptr, row_idx) = (&self.columns.col_ptr, &self.columns.row_idx);
        let inverse_diagonal = col_ptr[..diagonal.len()]
            .iter()
            .enumerate()
            .map(|(j, &first)| {
                debug_assert_eq!(row_idx[first as usize] as usize, j, "a column starts at its diagonal");
                1.0 / values[first as usize]
            })
            .collect();
        self.factors.truncate(1);
        self.factors.insert(0, Factor { a, diagonal: diagonal.to_vec(), values, inverse_diagonal });
        true
    }

    /// Overwrites `rhs` with `S^-1 rhs`: two coordinates on one core, the third on the other,
    /// or all three on one for a small factor.
    pub fn solve(&mut self, rhs: &mut [[f64; 3]]) {
        let factor = self.factors.first().expect("prepare before solve");
        let (col_ptr, row_idx) = (&self.columns.col_ptr[..], &self.columns.row_idx[..]);
        let permutation = self.symbolic.perm().map(|p| p.arrays());
        let (l, inverse) = (&factor.values, &factor.inverse_diagonal);
        let all = &mut self.all;
        for (i, yi) in all.iter_mut().enumerate() {
            *yi = rhs[permutation.map_or(i, |(forward, _)| forward[i] as usize)];
        }
        if row_idx.len() < PARALLEL_SOLVE_ENTRIES {
            // Small: waking the second core would cost more than its share of the work.
            substitute(col_ptr, row_idx, l, inverse, all);
        } else {
            let (pair, single) = (&mut self.pair, &mut self.single);
            for ((p, s), y) in pair.iter_mut().zip(single.iter_mut()).zip(all.iter()) {
                (*p, *s) = ([y[0], y[1]], [y[2]]);
            }
            rayon::join(
                || substitute(col_ptr, row_idx, l, inverse, pair),
                || substitute(col_ptr, row_idx, l, inverse, single),
            );
            for ((y, p), s) in all.iter_mut().zip(pair.iter()).zip(single.iter()) {
                *y = [p[0], p[1], s[0]];
            }
        }
        for (i, r) in rhs.iter_mut().enumerate() {
            *r = all[permutation.map_or(i, |(_, backward)| backward[i] as usize)];
        }
    }
}

/// Solves `L L^T x = y` in place for `N` right-hand sides stored together, `L` in sparse
/// columns (column pointers, row indices with each column's diagonal first, values, `1 / L_jj`).
fn substitute<const N: usize>(
    col_ptr: &[u32],
    row_idx: &[u32],
    l: &[f64],
    inverse_diagonal: &[f64],
    y: &mut [[f64; N]],
) {
    // L z = y, column by column: z_j = y_j / L_jj, then y_i -= L_ij z_j below it.
    for j in 0..y.len() {
        let (start, end) = (col_ptr[j] as usize + 1, col_ptr[j + 1] as usize);
        let zj = y[j].map(|c| c * inverse_diagonal[j]);
        y[j] = zj;
        for (&i, &lij) in row_idx[start..end].iter().zip(&l[start..end]) {
            let yi = &mut y[i as usize];
            for c in 0..N {
                yi[c] -= lij * zj[c];
            }
        }
    }
    // L^T x = z, from the last column: x_j = (z_j - sum_i L_ij x_i) / L_jj. The sum runs in
    // four independent partial sums, so that it is not one chain of dependent additions.
    for j in (0..y.len()).rev() {
        let (start, end) = (col_ptr[j] as usize + 1, col_ptr[j + 1] as usize);
        let (rows, values) = (&row_idx[start..end], &l[start..end]);
        let mut partial = [[0.0; N]; 4];
        let whole = rows.len() / 4 * 4;
        for (four, lij) in rows[..whole].chunks_exact(4).zip(values[..whole].chunks_exact(4)) {
            for k in 0..4 {
                let xi = y[four[k] as usize];
                for c in 0..N {
                    partial[k][c] += lij[k] * xi[c];
                }
            }
        }
        for (&i, &lij) in rows[whole..].iter().zip(&values[whole..]) {
            let xi = y[i as usize];
            for c in 0..N {
                partial[0][c] += lij * xi[c];
            }
        }
        let s: [f64; N] = std::array::from_fn(|c| {
            y[j][c] - ((partial[0][c] + partial[1][c]) + (partial[2][c] + partial[3][c]))
        });
        y[j] = s.map(|c| c * inverse_diagonal[j]);
    }
}

#[cfg(test)]
mod tests {
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::material::Material;
    use crate::mesh::TetMesh;

    /// The solve inverts the matrix it factored: `S (S^-1 b) = b` on random right-hand sides,
    /// for a small bar and a long beam (simplicial factors: our substitutions on one core and
    /// on two) and a cube (a supernodal one, faer's solve), with two vertex diagonals and
    /// after switching between cached factors.
    #[test]
    fn solve_inverts_the_projective_matrix() {
        for (cells, supernodal) in [([5, 3, 2], false), ([24, 8, 8], false), ([12, 12, 12], true)] {
            solve_inverts(cells, supernodal);
        }
    }

    fn solve_inverts(cells: [usize; 3], supernodal: bool) {
        let mut model = Model::empty([0.0, -9.81, 0.0]);
        model
            .add_tet_body(&TetMesh::bar(cells, [0.5, 0.3, 0.2]), &[Material::corotated(1e6, 0.3)], 1000.0)
            .unwrap();
        let topology = Topology::new(&model);
        let mut global = GlobalSolve::new(&model, &topology).unwrap();
        assert_eq!(global.columns.from.is_some(), supernodal, "{cells:?}: faer chose otherwise");
        if cells == [24, 8, 8] {
            let entries = global.columns.row_idx.len();
            assert!(
                entries >= PARALLEL_SOLVE_ENTRIES,
                "the beam's factor ({entries} entries) is solved on one core"
            );
        }
        let n = model.vertex_count();
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let masses: Vec<f64> = model.masses.iter().map(|m| m * 900.0).collect();
        let heavier: Vec<f64> = masses.iter().map(|m| m * rng.random_range(1.0..3.0)).collect();
        for (a, diagonal) in [(1.0, &masses), (0.25, &heavier), (1.0, &masses)] {
            assert!(global.prepare(&model, &topology, a, diagonal));
            let b: Vec<[f64; 3]> =
                (0..n).map(|_| std::array::from_fn(|_| rng.random_range(-1.0..1.0))).collect();
            let mut x = b.clone();
            global.solve(&mut x);
            let mut entries = Vec::new();
            projective::matrix(&model, &topology, &global.laplacian, a, diagonal, &mut entries);
            let mut worst = 0.0_f64;
            for (row, bi) in b.iter().enumerate() {
                let mut sx = [0.0; 3];
                let range = topology.row_offsets[row] as usize..topology.row_offsets[row + 1] as usize;
                for (&column, &entry) in topology.columns[range.clone()].iter().zip(&entries[range]) {
                    for (s, xc) in sx.iter_mut().zip(x[column as usize]) {
                        *s += entry * xc;
                    }
                }
                for c in 0..3 {
                    worst = worst.max((sx[c] - bi[c]).abs());
                }
            }
            assert!(worst < 1e-9, "{cells:?}, a = {a}: |S x - b| reaches {worst:e}");
        }
    }
}
