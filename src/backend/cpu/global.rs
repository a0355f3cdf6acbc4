//! The local/global solver's global step on the CPU: the scalar matrix `S` of
//! [`projective`](crate::backend::projective) factored by faer's sparse Cholesky — the symbolic
//! factorization (fill-reducing order and the factor's pattern) once per model, the numeric
//! one only when the step weight, the time step or the per-vertex diagonal (handles, contacts,
//! damping) changes — and solved for the three coordinates at once.
//!
//! faer picks the factor's form: simplicial (one sparse column per vertex: small or thin
//! bodies) or supernodal (large compact bodies: groups of columns that share their rows below
//! a dense diagonal block, which factor many times faster). Either form is solved by our own
//! substitutions: the right-hand sides a core solves sit together, so each entry of `L` is
//! read once for them all, and no division is left in the loop. A simplicial factor is kept
//! by rows as well as by columns, so that both substitutions are dot products summed in
//! registers (by rows, the forward one took a third less time than scattering column
//! updates on the 7680-tet beam's factor). A supernode's rows below its
//! diagonal block are kept row by row, so that each is one dense dot product (forward) or
//! update (backward) with the supernode's unknowns and one indexed access, where faer's solve
//! runs a dense product that, for one to three right-hand sides, spends more time packing
//! operands than multiplying.

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
    /// The factor's pattern, in the layout the substitutions read.
    layout: Layout,
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
    all: Vec<[f64; 4]>,
    pair: Vec<[f64; 2]>,
    single: Vec<[f64; 1]>,
    /// Stored values of the factor per stored value of the matrix (lower triangles).
    pub fill: f64,
}

/// The numeric factor `L` of one `(a, diagonal)`.
struct Factor {
    a: f64,
    diagonal: Vec<f64>,
    /// `L`'s values in the layout's order.
    values: Vec<f64>,
    /// `1 / L_jj`.
    inverse_diagonal: Vec<f64>,
}

/// The factor's pattern as the substitutions read it.
enum Layout {
    /// A simplicial factor: sparse columns (pointers, and row indices with each column's
    /// diagonal first), values as faer stores them, followed by the entries below the
    /// diagonal again row by row (pointers and column indices; `from` says where each is
    /// among the columns' values). The forward substitution reads rows and the backward one
    /// columns, so that both sum dot products in registers instead of scattering updates.
    Columns { col_ptr: Vec<u32>, row_idx: Vec<u32>, row_ptr: Vec<u32>, col_idx: Vec<u32>, from: Vec<u32> },
    /// A supernodal factor: supernode `s` is the columns `begin[s]..begin[s + 1]`, with rows
    /// `pattern[pattern_ptr[s]..pattern_ptr[s + 1]]` below its diagonal block. Its values
    /// start at `value_ptr[s]`: the diagonal block column-major, then the rows below row by
    /// row; `from` says where each value is in faer's (column-major) blocks.
    Supernodes {
        begin: Vec<u32>,
        pattern_ptr: Vec<u32>,
        pattern: Vec<u32>,
        value_ptr: Vec<u32>,
        from: Vec<u32>,
    },
}

impl Layout {
    fn new(symbolic: &SymbolicCholesky<u32>) -> Layout {
        let s = match symbolic.raw() {
            SymbolicCholeskyRaw::Simplicial(s) => {
                let (col_ptr, row_idx) = (s.col_ptr().to_vec(), s.row_idx().to_vec());
                // Counting sort of the entries below the diagonal by row.
                let n = col_ptr.len() - 1;
                let mut row_ptr = vec![0u32; n + 1];
                for j in 0..n {
                    for &i in &row_idx[col_ptr[j] as usize + 1..col_ptr[j + 1] as usize] {
                        row_ptr[i as usize + 1] += 1;
                    }
                }
                for i in 0..n {
                    row_ptr[i + 1] += row_ptr[i];
                }
                let mut next = row_ptr.clone();
                let below = row_ptr[n] as usize;
                let (mut col_idx, mut from) = (vec![0u32; below], vec![0u32; below]);
                for j in 0..n {
                    for k in col_ptr[j] as usize + 1..col_ptr[j + 1] as usize {
                        let slot = &mut next[row_idx[k] as usize];
                        (col_idx[*slot as usize], from[*slot as usize]) = (j as u32, k as u32);
                        *slot += 1;
                    }
                }
                return Layout::Columns { col_ptr, row_idx, row_ptr, col_idx, from };
            }
            SymbolicCholeskyRaw::Supernodal(s) => s,
        };
        let count = s.n_supernodes();
        let (mut begin, mut pattern_ptr, mut pattern, mut from) =
            (vec![0u32], vec![0u32], Vec::new(), Vec::new());
        for k in 0..count {
            let (first, end) = (s.supernode_begin()[k] as usize, s.supernode_end()[k] as usize);
            let at = s.col_ptr_for_row_idx()[k] as usize;
            let rows = &s.row_idx()[at..at + s.nnz_per_super()[k] as usize];
            // faer's block: column-major, the supernode's own rows first.
            let (size, base) = (end - first, s.col_ptr_for_val()[k] as usize);
            let height = size + rows.len();
            for j in 0..size {
                from.extend((0..size).map(|i| (base + j * height + i) as u32));
            }
            for r in 0..rows.len() {
                from.extend((0..size).map(|j| (base + j * height + size + r) as u32));
            }
            pattern.extend_from_slice(rows);
            begin.push(end as u32);
            pattern_ptr.push(pattern.len() as u32);
        }
        let value_ptr = s.col_ptr_for_val()[..=count].to_vec();
        Layout::Supernodes { begin, pattern_ptr, pattern, value_ptr, from }
    }

    /// Stored entries of `L` (for the choice of one core or two).
    fn entries(&self) -> usize {
        match self {
            Layout::Columns { row_idx, .. } => row_idx.len(),
            Layout::Supernodes { from, .. } => from.len(),
        }
    }

    /// `L`'s values in this layout's order, from faer's.
    fn values(&self, faer: Vec<f64>) -> Vec<f64> {
        match self {
            Layout::Columns { from, .. } => {
                let by_row: Vec<f64> = from.iter().map(|&k| faer[k as usize]).collect();
                [faer, by_row].concat()
            }
            Layout::Supernodes { from, .. } => from.iter().map(|&k| faer[k as usize]).collect(),
        }
    }

    /// `1 / L_jj` for every column.
    fn inverse_diagonal(&self, values: &[f64]) -> Vec<f64> {
        match self {
            Layout::Columns { col_ptr, row_idx, .. } => col_ptr[..col_ptr.len() - 1]
                .iter()
                .enumerate()
                .map(|(j, &first)| {
                    debug_assert_eq!(row_idx[first as usize] as usize, j, "a column starts at its diagonal");
                    1.0 / values[first as usize]
                })
                .collect(),
            Layout::Supernodes { begin, value_ptr, .. } => (0..begin.len() - 1)
                .flat_map(|s| {
                    let size = (begin[s + 1] - begin[s]) as usize;
                    (0..size).map(move |j| 1.0 / values[value_ptr[s] as usize + j * size + j])
                })
                .collect(),
        }
    }

    /// [`substitute`](Self::substitute) on rows of four (three right-hand sides and a
    /// zero), in AVX2 registers where the CPU has them: a row of `y` is then one load and
    /// each entry of `L` one multiply and one add, where three scalar ones took about twice
    /// the time. Each lane is computed as alone, so the results are the same bits.
    fn substitute_four(&self, l: &[f64], inverse_diagonal: &[f64], y: &mut [[f64; 4]]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2.
            return unsafe { self.substitute_avx2(l, inverse_diagonal, y) };
        }
        self.substitute(l, inverse_diagonal, y)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn substitute_avx2(&self, l: &[f64], inverse_diagonal: &[f64], y: &mut [[f64; 4]]) {
        self.substitute(l, inverse_diagonal, y)
    }

    /// Solves `L L^T x = y` in place for `N` right-hand sides stored together.
    #[inline(always)]
    fn substitute<const N: usize>(&self, l: &[f64], inverse_diagonal: &[f64], y: &mut [[f64; N]]) {
        match self {
            Layout::Columns { col_ptr, row_idx, row_ptr, col_idx, .. } => {
                let (by_column, by_row) = l.split_at(row_idx.len());
                forward_rows(row_ptr, col_idx, by_row, inverse_diagonal, y);
                backward_columns(col_ptr, row_idx, by_column, inverse_diagonal, y);
            }
            Layout::Supernodes { begin, pattern_ptr, pattern, value_ptr, .. } => {
                substitute_supernodes(begin, pattern_ptr, pattern, value_ptr, l, inverse_diagonal, y)
            }
        }
    }
}

/// Solves `L L^T x = y` in place for `N` right-hand sides stored together, `L` supernodal (laid
/// out as [`Layout::Supernodes`] says, with `1 / L_jj`).
#[inline(always)]
fn substitute_supernodes<const N: usize>(
    begin: &[u32],
    pattern_ptr: &[u32],
    pattern: &[u32],
    value_ptr: &[u32],
    l: &[f64],
    inverse_diagonal: &[f64],
    y: &mut [[f64; N]],
) {
    let supernode = |s: usize| {
        let (first, size) = (begin[s] as usize, (begin[s + 1] - begin[s]) as usize);
        let rows = &pattern[pattern_ptr[s] as usize..pattern_ptr[s + 1] as usize];
        let (diagonal, below) = l[value_ptr[s] as usize..value_ptr[s + 1] as usize].split_at(size * size);
        (first, size, rows, diagonal, below)
    };
    // L z = y: the diagonal block's forward substitution, then each row below
    // less its dot product with the block's unknowns.
    for s in 0..begin.len() - 1 {
        let (first, size, rows, diagonal, below) = supernode(s);
        let (head, tail) = y.split_at_mut(first + size);
        let block = &mut head[first..];
        for j in 0..size {
            let zj = block[j].map(|c| c * inverse_diagonal[first + j]);
            block[j] = zj;
            for (i, &d) in (j + 1..size).zip(&diagonal[j * size + j + 1..(j + 1) * size]) {
                for c in 0..N {
                    block[i][c] -= d * zj[c];
                }
            }
        }
        for (&row, values) in rows.iter().zip(below.chunks_exact(size)) {
            let mut dot = [0.0; N];
            for (v, z) in values.iter().zip(block.iter()) {
                for c in 0..N {
                    dot[c] += v * z[c];
                }
            }
            let target = &mut tail[row as usize - first - size];
            for c in 0..N {
                target[c] -= dot[c];
            }
        }
    }
    // L^T x = z, from the last supernode: the rows below first, then the block's
    // back substitution.
    for s in (0..begin.len() - 1).rev() {
        let (first, size, rows, diagonal, below) = supernode(s);
        let (head, tail) = y.split_at_mut(first + size);
        let block = &mut head[first..];
        for (&row, values) in rows.iter().zip(below.chunks_exact(size)) {
            let x = tail[row as usize - first - size];
            for (v, b) in values.iter().zip(block.iter_mut()) {
                for c in 0..N {
                    b[c] -= v * x[c];
                }
            }
        }
        for j in (0..size).rev() {
            let mut sum = block[j];
            for (i, &d) in (j + 1..size).zip(&diagonal[j * size + j + 1..(j + 1) * size]) {
                for c in 0..N {
                    sum[c] -= d * block[i][c];
                }
            }
            block[j] = sum.map(|c| c * inverse_diagonal[first + j]);
        }
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
            layout: Layout::new(&symbolic),
            pattern,
            symbolic,
            values: vec![0.0; sources.len()],
            sources,
            laplacian: projective::laplacian(model, topology),
            factors: Vec::new(),
            fill,
            entries: Vec::new(),
            all: vec![[0.0; 4]; n],
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
        let values = self.layout.values(values);
        let inverse_diagonal = self.layout.inverse_diagonal(&values);
        self.factors.truncate(1);
        self.factors.insert(0, Factor { a, diagonal: diagonal.to_vec(), values, inverse_diagonal });
        true
    }

    /// Overwrites `rhs` with `S^-1 rhs`: two coordinates on one core, the third on the other,
    /// or all three on one for a small factor.
    pub fn solve(&mut self, rhs: &mut [[f64; 3]]) {
        let factor = self.factors.first().expect("prepare before solve");
        let layout = &self.layout;
        let permutation = self.symbolic.perm().map(|p| p.arrays());
        let (l, inverse) = (&factor.values, &factor.inverse_diagonal);
        let all = &mut self.all;
        for (i, yi) in all.iter_mut().enumerate() {
            let [a, b, c] = rhs[permutation.map_or(i, |(forward, _)| forward[i] as usize)];
            *yi = [a, b, c, 0.0];
        }
        if layout.entries() < PARALLEL_SOLVE_ENTRIES {
            // Small: waking the second core would cost more than its share of the work.
            layout.substitute_four(l, inverse, all);
        } else {
            let (pair, single) = (&mut self.pair, &mut self.single);
            for ((p, s), y) in pair.iter_mut().zip(single.iter_mut()).zip(all.iter()) {
                (*p, *s) = ([y[0], y[1]], [y[2]]);
            }
            rayon::join(|| layout.substitute(l, inverse, pair), || layout.substitute(l, inverse, single));
            for ((y, p), s) in all.iter_mut().zip(pair.iter()).zip(single.iter()) {
                *y = [p[0], p[1], s[0], 0.0];
            }
        }
        for (i, r) in rhs.iter_mut().enumerate() {
            let [a, b, c, _] = all[permutation.map_or(i, |(_, backward)| backward[i] as usize)];
            *r = [a, b, c];
        }
    }
}

/// `y <- L^-1 y` for `N` right-hand sides stored together, `L`'s entries below the diagonal
/// in sparse rows (pointers, column indices, values) and `1 / L_jj`: row by row, `z_i = (y_i -
/// sum_j L_ij z_j) / L_ii`, the sum in four independent partial sums so that it is not one
/// chain of dependent additions.
#[inline(always)]
fn forward_rows<const N: usize>(
    row_ptr: &[u32],
    col_idx: &[u32],
    l: &[f64],
    inverse_diagonal: &[f64],
    y: &mut [[f64; N]],
) {
    for i in 0..y.len() {
        let range = row_ptr[i] as usize..row_ptr[i + 1] as usize;
        let sum = partial_dot(&col_idx[range.clone()], &l[range], y);
        y[i] = std::array::from_fn(|c| (y[i][c] - sum[c]) * inverse_diagonal[i]);
    }
}

/// `sum_k values[k] y[indices[k]]`, in four partial sums.
#[inline(always)]
fn partial_dot<const N: usize>(indices: &[u32], values: &[f64], y: &[[f64; N]]) -> [f64; N] {
    let mut partial = [[0.0; N]; 4];
    let whole = indices.len() / 4 * 4;
    for (four, lij) in indices[..whole].chunks_exact(4).zip(values[..whole].chunks_exact(4)) {
        for k in 0..4 {
            let xi = y[four[k] as usize];
            for c in 0..N {
                partial[k][c] += lij[k] * xi[c];
            }
        }
    }
    for (&i, &lij) in indices[whole..].iter().zip(&values[whole..]) {
        let xi = y[i as usize];
        for c in 0..N {
            partial[0][c] += lij * xi[c];
        }
    }
    std::array::from_fn(|c| (partial[0][c] + partial[1][c]) + (partial[2][c] + partial[3][c]))
}

/// `y <- L^-T y` for `N` right-hand sides stored together, `L` in sparse columns (pointers,
/// row indices with each column's diagonal first, values) and `1 / L_jj`.
#[inline(always)]
fn backward_columns<const N: usize>(
    col_ptr: &[u32],
    row_idx: &[u32],
    l: &[f64],
    inverse_diagonal: &[f64],
    y: &mut [[f64; N]],
) {
    // From the last column: x_j = (z_j - sum_i L_ij x_i) / L_jj.
    for j in (0..y.len()).rev() {
        let range = col_ptr[j] as usize + 1..col_ptr[j + 1] as usize;
        let sum = partial_dot(&row_idx[range.clone()], &l[range], y);
        y[j] = std::array::from_fn(|c| (y[j][c] - sum[c]) * inverse_diagonal[j]);
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
    /// on two, and four-wide) and a cube (a supernodal one, faer's solve), with two vertex
    /// diagonals and after switching between cached factors.
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
        assert_eq!(
            matches!(global.layout, Layout::Supernodes { .. }),
            supernodal,
            "{cells:?}: faer chose otherwise"
        );
        if cells == [24, 8, 8] {
            let entries = global.layout.entries();
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
            // Three right-hand sides together and padded to four (in AVX2 registers where the
            // CPU has them) give the same bits.
            let factor = &global.factors[0];
            let mut three = b.clone();
            global.layout.substitute(&factor.values, &factor.inverse_diagonal, &mut three);
            let mut four: Vec<[f64; 4]> = b.iter().map(|&[p, q, r]| [p, q, r, 0.0]).collect();
            global.layout.substitute_four(&factor.values, &factor.inverse_diagonal, &mut four);
            assert!(three.iter().zip(&four).all(|(t, f)| t[..] == f[..3]), "{cells:?}: four-wide differs");
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
