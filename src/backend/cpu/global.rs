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
//! diagonal block are each one dense dot product (forward) or update (backward) with the
//! supernode's unknowns and one indexed access, taken four rows at a time (and stored so) so
//! that the unknowns are read once for four and four sums are in flight (in each sum's own
//! order, so the bits are those of a row at a time), where faer's solve runs a dense product
//! that, for one to three right-hand sides, spends more time packing operands than
//! multiplying. Its diagonal block is solved by panels of four columns: a row under a panel
//! takes the four columns' updates in one load and store (forward), and four sums are in
//! flight (backward), which took the 258-column separator's two substitutions from 86 to
//! 54 us.
//!
//! On two cores either form is split along its elimination tree, each core taking whole
//! subtrees (about equal work) and the top separators following on one. On the 15K-tet bar's
//! supernodal factor (288K entries, its top separator a dense block of 258 columns) that took
//! a local/global step's ten solves from 3.7 to 2.5 ms, where the three coordinates split two
//! and one had each core read all of `L`; on a thin beam's simplicial factor the two cost
//! the same.

use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::cholesky::llt::factor::LltRegularization;
use faer::sparse::linalg::cholesky::{
    SymbolicCholesky, SymbolicCholeskyRaw, SymmetricOrdering, factorize_symbolic_cholesky,
};
use faer::sparse::{SparseColMatRef, SymbolicSparseColMat};
use faer::{Par, Side};
use std::ops::Range;

use crate::backend::projective;
use crate::backend::topology::Topology;
use crate::math::lanes::{Lane, Lanes};
use crate::model::Model;

/// Entries of `L` from which a solve is split between two cores.
const PARALLEL_SOLVE_ENTRIES: usize = 20_000;

pub(crate) struct GlobalSolve {
    pattern: SymbolicSparseColMat<u32>,
    symbolic: SymbolicCholesky<u32>,
    /// The factor's pattern, in the layout the substitutions read.
    layout: Layout,
    /// The vertex of each of the layout's columns, and the column of each vertex.
    order: Vec<u32>,
    position: Vec<u32>,
    /// For each stored (lower-triangle) value, the pattern entry it comes from.
    sources: Vec<u32>,
    /// The weighted Laplacian on the pattern.
    laplacian: Vec<f64>,
    /// The last two factors, the latest first: a stabilized step alternates the midpoint and
    /// backward-Euler weights.
    factors: Vec<Factor>,
    entries: Vec<f64>,
    values: Vec<f64>,
    /// The right-hand sides in the layout's order, padded to four.
    all: Vec<[f64; 4]>,
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

/// The factor's pattern as the substitutions read it. Its columns are renumbered (through
/// [`split_subtrees`]) so that `parts` splits them, or their supernodes, into three runs:
/// `0..parts[0]` and `parts[0]..parts[1]` are two sets of whole subtrees of the elimination
/// tree, of about equal work, and the rest are their ancestors (the top separators). Neither
/// part's columns appear in the other's rows, so each part is substituted on a core of its
/// own; only the top waits for both (forward) or goes first (backward). Both forms keep
/// `from`: where each of their values is among faer's.
enum Layout {
    /// A simplicial factor: sparse columns (pointers, and row indices with each column's
    /// diagonal first), then the entries below the diagonal again row by row (pointers and
    /// column indices). The forward substitution reads rows and the backward one columns, so
    /// that both sum dot products in registers instead of scattering updates.
    Columns {
        col_ptr: Vec<u32>,
        row_idx: Vec<u32>,
        row_ptr: Vec<u32>,
        col_idx: Vec<u32>,
        from: Vec<u32>,
        parts: [usize; 2],
    },
    /// A supernodal factor: supernode `s` is the columns `begin[s]..begin[s + 1]`, with rows
    /// `pattern[pattern_ptr[s]..pattern_ptr[s + 1]]` below its diagonal block. Its values
    /// start at `value_ptr[s]`: the diagonal block's lower triangle by panels of [`PANEL`]
    /// columns (each panel's rows from its first column down, a row's entries together, a
    /// zero above the diagonal), then the rows below by fours (a column's four entries
    /// together) and the last `rows % 4` row by row.
    Supernodes {
        begin: Vec<u32>,
        pattern_ptr: Vec<u32>,
        pattern: Vec<u32>,
        value_ptr: Vec<u32>,
        from: Vec<u32>,
        parts: [usize; 2],
    },
}

impl Layout {
    /// The layout of `symbolic`'s factor, and for each of its columns the factor's column it
    /// is.
    fn new(symbolic: &SymbolicCholesky<u32>) -> (Layout, Vec<u32>) {
        let s = match symbolic.raw() {
            SymbolicCholeskyRaw::Simplicial(s) => {
                let (faer_ptr, faer_rows) = (s.col_ptr(), s.row_idx());
                let n = faer_ptr.len() - 1;
                let below = |j: usize| &faer_rows[faer_ptr[j] as usize + 1..faer_ptr[j + 1] as usize];
                // A column's parent is its first row below.
                let (order, parts) =
                    split_subtrees(n, |j| below(j).len() + 1, |j| below(j).iter().min().map(|&i| i as usize));
                let mut renumbered = vec![0u32; n];
                for (ours, &theirs) in order.iter().enumerate() {
                    renumbered[theirs] = ours as u32;
                }
                let (mut col_ptr, mut row_idx, mut from) = (vec![0u32], Vec::new(), Vec::new());
                for &j in &order {
                    for k in faer_ptr[j] as usize..faer_ptr[j + 1] as usize {
                        row_idx.push(renumbered[faer_rows[k] as usize]);
                        from.push(k as u32);
                    }
                    col_ptr.push(row_idx.len() as u32);
                }
                // Counting sort of the entries below the diagonal by row.
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
                let mut col_idx = vec![0u32; row_ptr[n] as usize];
                let mut by_row = vec![0u32; row_ptr[n] as usize];
                for j in 0..n {
                    for k in col_ptr[j] as usize + 1..col_ptr[j + 1] as usize {
                        let slot = &mut next[row_idx[k] as usize];
                        (col_idx[*slot as usize], by_row[*slot as usize]) = (j as u32, from[k]);
                        *slot += 1;
                    }
                }
                from.extend(by_row);
                let columns = order.iter().map(|&j| j as u32).collect();
                return (Layout::Columns { col_ptr, row_idx, row_ptr, col_idx, from, parts }, columns);
            }
            SymbolicCholeskyRaw::Supernodal(s) => s,
        };
        let count = s.n_supernodes();
        let (supernode_begin, supernode_end) = (s.supernode_begin(), s.supernode_end());
        let rows_of = |k: usize| {
            let at = s.col_ptr_for_row_idx()[k] as usize;
            &s.row_idx()[at..at + s.nnz_per_super()[k] as usize]
        };
        let work = |k: usize| {
            let size = (supernode_end[k] - supernode_begin[k]) as usize;
            size * (size + 1) / 2 + size * rows_of(k).len()
        };
        let (order, parts) = split_subtrees(count, work, |k| {
            // The parent holds the first row below (a supernode's columns are consecutive).
            rows_of(k).iter().min().map(|&row| supernode_end.partition_point(|&end| end <= row))
        });
        // The factor's column of each of ours, and ours of each of its.
        let mut columns = Vec::with_capacity(symbolic.ncols());
        for &k in &order {
            columns.extend(supernode_begin[k]..supernode_end[k]);
        }
        let mut renumbered = vec![0u32; columns.len()];
        for (ours, &theirs) in columns.iter().enumerate() {
            renumbered[theirs as usize] = ours as u32;
        }
        let (mut begin, mut pattern_ptr, mut value_ptr) = (vec![0u32], vec![0u32], vec![0u32]);
        let (mut pattern, mut from) = (Vec::new(), Vec::new());
        for &k in &order {
            let (first, end) = (supernode_begin[k] as usize, supernode_end[k] as usize);
            let rows = rows_of(k);
            // faer's block: column-major, the supernode's own rows first.
            let (size, base) = (end - first, s.col_ptr_for_val()[k] as usize);
            let height = size + rows.len();
            let at = |i: usize, j: usize| if i < j { UNUSED } else { (base + j * height + i) as u32 };
            // The diagonal block by panels of four columns, each row of a panel together.
            for first in (0..size).step_by(PANEL) {
                let width = PANEL.min(size - first);
                for i in first..size {
                    from.extend((first..first + width).map(|j| at(i, j)));
                }
            }
            // The rows below by fours, each column of four rows together; the rest row by row.
            let whole = rows.len() / 4 * 4;
            for group in (0..whole).step_by(4) {
                for j in 0..size {
                    from.extend((group..group + 4).map(|r| at(size + r, j)));
                }
            }
            for r in whole..rows.len() {
                from.extend((0..size).map(|j| at(size + r, j)));
            }
            pattern.extend(rows.iter().map(|&row| renumbered[row as usize]));
            begin.push(begin.last().unwrap() + size as u32);
            pattern_ptr.push(pattern.len() as u32);
            value_ptr.push(from.len() as u32);
        }
        (Layout::Supernodes { begin, pattern_ptr, pattern, value_ptr, from, parts }, columns)
    }

    /// `L`'s values in this layout's order, from faer's (zero where [`UNUSED`]).
    fn values(&self, faer: &[f64]) -> Vec<f64> {
        let (Layout::Columns { from, .. } | Layout::Supernodes { from, .. }) = self;
        from.iter().map(|&k| if k == UNUSED { 0.0 } else { faer[k as usize] }).collect()
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
                    (0..size).map(move |j| 1.0 / values[value_ptr[s] as usize + panel_entry(size, j, j)])
                })
                .collect(),
        }
    }

    /// [`substitute`](Self::substitute) on rows of four (three right-hand sides and a
    /// zero), in AVX2 registers where the CPU has them: a row of `y` is then one load and
    /// each entry of `L` one multiply and one add, where three scalar ones took about twice
    /// the time. Each lane is computed as alone, so the results are the same bits.
    fn substitute_four(&self, l: &[f64], inverse_diagonal: &[f64], y: &mut [[f64; 4]], parallel: bool) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2.
            return unsafe { self.substitute_avx2(l, inverse_diagonal, y, parallel) };
        }
        self.substitute::<4, Lanes<4>>(l, inverse_diagonal, y, parallel)
    }

    /// The rows as AVX registers ([`crate::math::lanes::avx::Avx`]): on plain arrays the compiler
    /// vectorized the column updates across four rows instead, transposing them in and out
    /// of registers, and the 15K-tet bar's ten solves took 18 % longer.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn substitute_avx2(&self, l: &[f64], inverse_diagonal: &[f64], y: &mut [[f64; 4]], parallel: bool) {
        self.substitute::<4, crate::math::lanes::avx::Avx>(l, inverse_diagonal, y, parallel)
    }

    /// Solves `L L^T x = y` in place for `N` right-hand sides stored together, a row at a
    /// time in lanes `L`; with `parallel`, the two parts go to two cores (the same bits).
    #[inline(always)]
    fn substitute<const N: usize, L: Lane<N>>(
        &self,
        l: &[f64],
        inverse_diagonal: &[f64],
        y: &mut [[f64; N]],
        parallel: bool,
    ) {
        match self {
            Layout::Columns { col_ptr, row_idx, row_ptr, col_idx, parts, .. } => {
                let (by_column, by_row) = l.split_at(row_idx.len());
                let factor =
                    Simplicial { col_ptr, row_idx, row_ptr, col_idx, by_column, by_row, inverse_diagonal };
                solve_in_parts::<_, N, L>(&factor, *parts, y, parallel)
            }
            Layout::Supernodes { begin, pattern_ptr, pattern, value_ptr, parts, .. } => {
                let factor = Supernodal { begin, pattern_ptr, pattern, value_ptr, l, inverse_diagonal };
                solve_in_parts::<_, N, L>(&factor, *parts, y, parallel)
            }
        }
    }
}

/// The renumbering of a [`Layout`]: its column groups (supernodes, or single columns) in
/// their new order and the ends of the two parts, for `count` groups of `work(k)` stored
/// entries whose parents are `parent(k)` (a parent's number above its children's).
///
/// The top is grown from the roots down, a heaviest subtree at a time, and the parts are the
/// subtrees below it dealt to the lighter part, heaviest first; of the tops tried (until the
/// top alone outweighs the best), the one with the least work on the slower core
/// (`max(part) + top`) is kept. A factor of less work than `PARALLEL_SOLVE_ENTRIES` is all
/// top: waking the second core would cost more than its share.
fn split_subtrees(
    count: usize,
    work: impl Fn(usize) -> usize,
    parent: impl Fn(usize) -> Option<usize>,
) -> (Vec<usize>, [usize; 2]) {
    let parents: Vec<Option<usize>> = (0..count).map(&parent).collect();
    let mut children = vec![Vec::new(); count];
    let mut roots = Vec::new();
    for (k, p) in parents.iter().enumerate() {
        match p {
            Some(p) => children[*p].push(k),
            None => roots.push(k),
        }
    }
    let mut subtree = vec![0usize; count];
    for k in 0..count {
        subtree[k] += work(k);
        if let Some(p) = parents[k] {
            subtree[p] += subtree[k];
        }
    }
    let total: usize = roots.iter().map(|&r| subtree[r]).sum();
    // The subtrees of each part (none: all is top) and the work on the slower core.
    let (mut parts, mut least) = ([Vec::new(), Vec::new()], total);
    if total >= PARALLEL_SOLVE_ENTRIES {
        let (mut frontier, mut top) = (roots, 0);
        // Past `least`, the top alone costs more than the best split.
        while top < least && !frontier.is_empty() {
            frontier.sort_by_key(|&k| std::cmp::Reverse((subtree[k], k)));
            let (mut dealt, mut load) = ([Vec::new(), Vec::new()], [0, 0]);
            for &k in &frontier {
                let lighter = usize::from(load[1] < load[0]);
                dealt[lighter].push(k);
                load[lighter] += subtree[k];
            }
            let cost = load[0].max(load[1]) + top;
            if cost < least {
                (parts, least) = (dealt, cost);
            }
            let heaviest = frontier.remove(0);
            top += work(heaviest);
            frontier.extend(&children[heaviest]);
        }
    }
    // Each group's part (2: the top), from the roots down.
    let mut part = vec![2usize; count];
    for (index, roots) in parts.iter().enumerate() {
        for &r in roots {
            part[r] = index;
        }
    }
    for k in (0..count).rev() {
        if let Some(p) = parents[k].filter(|&p| part[p] < 2) {
            part[k] = part[p];
        }
    }
    let mut order: Vec<usize> = (0..count).collect();
    order.sort_by_key(|&k| (part[k], k));
    let ends = [part.iter().filter(|&&p| p == 0).count(), part.iter().filter(|&&p| p < 2).count()];
    (order, ends)
}

/// Runs `a` and `b`, on two cores with `parallel`.
#[inline(always)]
fn both(parallel: bool, a: impl FnOnce() + Send, b: impl FnOnce() + Send) {
    if parallel {
        rayon::join(a, b);
    } else {
        a();
        b();
    }
}

/// A supernodal `L` laid out as [`Layout::Supernodes`] says, with `1 / L_jj`.
struct Supernodal<'a> {
    begin: &'a [u32],
    pattern_ptr: &'a [u32],
    pattern: &'a [u32],
    value_ptr: &'a [u32],
    l: &'a [f64],
    inverse_diagonal: &'a [f64],
}

/// A factor's substitutions on a range of its column groups (supernodes, or single columns),
/// the columns of the group `g` starting at `column(g)`, for [`solve_in_parts`].
trait Substitutions: Sync {
    fn groups(&self) -> usize;
    fn column(&self, g: usize) -> usize;
    /// `L z = y` on the groups `range`, whose columns are the rows of `y` from `offset`.
    /// Updates of the rows beyond `y` (the top's) go to `spill`, which starts at row
    /// `spill_offset`.
    fn forward<const N: usize, L: Lane<N>>(
        &self,
        range: Range<usize>,
        y: &mut [[f64; N]],
        offset: usize,
        spill: &mut [[f64; N]],
        spill_offset: usize,
    );
    /// `L^T x = z` on the groups `range`, laid out as for [`forward`](Self::forward); the
    /// unknowns of rows beyond `y` are read from `above`, which starts at row `above_offset`.
    fn backward<const N: usize, L: Lane<N>>(
        &self,
        range: Range<usize>,
        y: &mut [[f64; N]],
        offset: usize,
        above: &[[f64; N]],
        above_offset: usize,
    );
}

/// Solves `L L^T x = y` in place: each part's forward substitution (on a core of its own
/// with `parallel`), the top's forward and backward ones, then each part's backward one.
#[inline(always)]
fn solve_in_parts<F: Substitutions, const N: usize, L: Lane<N>>(
    factor: &F,
    parts: [usize; 2],
    y: &mut [[f64; N]],
    parallel: bool,
) {
    let (count, n, split) = (factor.groups(), y.len(), parts[0] > 0);
    let ends = parts.map(|p| factor.column(p));
    if split {
        // A part's updates of the top's rows, added to them once both parts are done.
        let (mut spill_first, mut spill_second) = (vec![[0.0; N]; n - ends[1]], vec![[0.0; N]; n - ends[1]]);
        let (lower, top) = y.split_at_mut(ends[1]);
        let (first, second) = lower.split_at_mut(ends[0]);
        both(
            parallel,
            || part_forward::<F, N, L>(factor, 0..parts[0], first, 0, &mut spill_first, ends[1]),
            || {
                part_forward::<F, N, L>(
                    factor,
                    parts[0]..parts[1],
                    second,
                    ends[0],
                    &mut spill_second,
                    ends[1],
                )
            },
        );
        for ((t, a), b) in top.iter_mut().zip(&spill_first).zip(&spill_second) {
            for c in 0..N {
                t[c] += a[c] + b[c];
            }
        }
    }
    factor.forward::<N, L>(parts[1]..count, y, 0, &mut [], n);
    factor.backward::<N, L>(parts[1]..count, y, 0, &[], n);
    if split {
        let (lower, top) = y.split_at_mut(ends[1]);
        let (first, second) = lower.split_at_mut(ends[0]);
        let top = &*top;
        both(
            parallel,
            || part_backward::<F, N, L>(factor, 0..parts[0], first, 0, top, ends[1]),
            || part_backward::<F, N, L>(factor, parts[0]..parts[1], second, ends[0], top, ends[1]),
        );
    }
}

/// [`Substitutions::forward`] on a part, in AVX2 registers where the CPU has them: the
/// closures handed to the other core are functions of their own, compiled without.
fn part_forward<F: Substitutions, const N: usize, L: Lane<N>>(
    factor: &F,
    range: Range<usize>,
    y: &mut [[f64; N]],
    offset: usize,
    spill: &mut [[f64; N]],
    spill_offset: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        #[target_feature(enable = "avx2")]
        fn avx2<F: Substitutions, const N: usize, L: Lane<N>>(
            factor: &F,
            range: Range<usize>,
            y: &mut [[f64; N]],
            offset: usize,
            spill: &mut [[f64; N]],
            spill_offset: usize,
        ) {
            factor.forward::<N, L>(range, y, offset, spill, spill_offset)
        }
        // SAFETY: the CPU has AVX2.
        return unsafe { avx2::<F, N, L>(factor, range, y, offset, spill, spill_offset) };
    }
    factor.forward::<N, L>(range, y, offset, spill, spill_offset)
}

/// [`Substitutions::backward`] on a part, as [`part_forward`].
fn part_backward<F: Substitutions, const N: usize, L: Lane<N>>(
    factor: &F,
    range: Range<usize>,
    y: &mut [[f64; N]],
    offset: usize,
    above: &[[f64; N]],
    above_offset: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        #[target_feature(enable = "avx2")]
        fn avx2<F: Substitutions, const N: usize, L: Lane<N>>(
            factor: &F,
            range: Range<usize>,
            y: &mut [[f64; N]],
            offset: usize,
            above: &[[f64; N]],
            above_offset: usize,
        ) {
            factor.backward::<N, L>(range, y, offset, above, above_offset)
        }
        // SAFETY: the CPU has AVX2.
        return unsafe { avx2::<F, N, L>(factor, range, y, offset, above, above_offset) };
    }
    factor.backward::<N, L>(range, y, offset, above, above_offset)
}

/// Columns of a supernode's diagonal block solved together: each row of a panel is one
/// stored run of four, so the rows below a panel take its four columns' updates with one load
/// and one store of `y` (forward) and give four independent sums (backward).
const PANEL: usize = 4;

/// The placeholder of an entry of a panel above the diagonal, stored as a zero.
const UNUSED: u32 = u32::MAX;

/// Where the panel of columns from `start` (a multiple of [`PANEL`]) begins in a diagonal
/// block of `size` columns: after `size - q PANEL` rows of `PANEL` for each panel `q` before.
fn panel_offset(size: usize, start: usize) -> usize {
    let panels = start / PANEL;
    PANEL * panels * size - PANEL * PANEL * panels * panels.saturating_sub(1) / 2
}

/// Where entry `(i, j)`, `i >= j`, of a diagonal block of `size` columns is stored.
fn panel_entry(size: usize, i: usize, j: usize) -> usize {
    let start = j / PANEL * PANEL;
    panel_offset(size, start) + (i - start) * PANEL.min(size - start) + (j - start)
}

impl Supernodal<'_> {
    /// Supernode `s`: its first column, size, rows below, diagonal block and values below.
    #[inline(always)]
    fn supernode(&self, s: usize) -> (usize, usize, &[u32], &[f64], &[f64]) {
        let (first, size) = (self.begin[s] as usize, (self.begin[s + 1] - self.begin[s]) as usize);
        let rows = &self.pattern[self.pattern_ptr[s] as usize..self.pattern_ptr[s + 1] as usize];
        let last = size.saturating_sub(1) / PANEL * PANEL;
        let diagonal_len = panel_offset(size, last) + (size - last) * (size - last);
        let (diagonal, below) =
            self.l[self.value_ptr[s] as usize..self.value_ptr[s + 1] as usize].split_at(diagonal_len);
        (first, size, rows, diagonal, below)
    }
}

impl Substitutions for Supernodal<'_> {
    fn groups(&self) -> usize {
        self.begin.len() - 1
    }

    fn column(&self, g: usize) -> usize {
        self.begin[g] as usize
    }

    /// Each diagonal block's forward substitution, a panel at a time, then each row below
    /// less its dot product with the block's unknowns. Every row of `y` takes its updates
    /// in column order, as a column at a time would.
    #[inline(always)]
    fn forward<const N: usize, L: Lane<N>>(
        &self,
        range: Range<usize>,
        y: &mut [[f64; N]],
        offset: usize,
        spill: &mut [[f64; N]],
        spill_offset: usize,
    ) {
        let end = offset + y.len();
        for s in range {
            let (first, size, rows, diagonal, below) = self.supernode(s);
            if size == 1 {
                // A single column (most of a factor's supernodes, few of its entries): its
                // rows below are in row order, and the general path's setup cost more than
                // their updates.
                let zj = L::from_array(y[first - offset]) * self.inverse_diagonal[first];
                y[first - offset] = zj.to_array();
                for (&row, &l) in rows.iter().zip(below) {
                    let row = row as usize;
                    let target =
                        if row < end { &mut y[row - offset] } else { &mut spill[row - spill_offset] };
                    *target = (L::from_array(*target) - zj * l).to_array();
                }
                continue;
            }
            let (head, tail) = y.split_at_mut(first + size - offset);
            let block = &mut head[first - offset..];
            let inverse = &self.inverse_diagonal[first..first + size];
            let mut panels = diagonal;
            for start in (0..size).step_by(PANEL) {
                let width = PANEL.min(size - start);
                let (panel, rest) = panels.split_at((size - start) * width);
                let (triangle, under) = panel.split_at(width * width);
                let mut z = [L::splat(0.0); PANEL];
                for k in 0..width {
                    z[k] = L::from_array(block[start + k]) * inverse[start + k];
                    block[start + k] = z[k].to_array();
                    for i in k + 1..width {
                        let yi = L::from_array(block[start + i]) - z[k] * triangle[i * width + k];
                        block[start + i] = yi.to_array();
                    }
                }
                // A narrower panel is the last: no rows under it.
                if width == PANEL {
                    let (under, _) = under.as_chunks::<PANEL>();
                    for (yi, l) in block[start + PANEL..].iter_mut().zip(under) {
                        *yi = (L::from_array(*yi) - z[0] * l[0] - z[1] * l[1] - z[2] * l[2] - z[3] * l[3])
                            .to_array();
                    }
                }
                panels = rest;
            }
            // Row `row` of `y`, in `tail` or, past its end, in `spill`.
            macro_rules! target {
                ($row:expr) => {{
                    let row = $row as usize;
                    if row < end { &mut tail[row - first - size] } else { &mut spill[row - spill_offset] }
                }};
            }
            // Four rows at a time, stored column by column (one stream of `L` to read): the
            // block's unknowns are read once for the four, and four sums are in flight where
            // one waited on its last addition; each still adds in column order.
            let whole = rows.len() / 4 * 4;
            let (grouped, single) = below.split_at(whole * size);
            for (rows, values) in rows[..whole].chunks_exact(4).zip(grouped.chunks_exact(4 * size)) {
                let (values, _) = values.as_chunks::<4>();
                let mut dots = [L::splat(0.0); 4];
                for (z, l) in block.iter().zip(values) {
                    let z = L::from_array(*z);
                    dots[0] += z * l[0];
                    dots[1] += z * l[1];
                    dots[2] += z * l[2];
                    dots[3] += z * l[3];
                }
                for (&row, &dot) in rows.iter().zip(&dots) {
                    let target = target!(row);
                    *target = (L::from_array(*target) - dot).to_array();
                }
            }
            for (&row, values) in rows[whole..].iter().zip(single.chunks_exact(size)) {
                let mut dot = L::splat(0.0);
                for (v, z) in values.iter().zip(block.iter()) {
                    dot += L::from_array(*z) * *v;
                }
                let target = target!(row);
                *target = (L::from_array(*target) - dot).to_array();
            }
        }
    }

    /// From the last supernode: the rows below first, then the block's back substitution,
    /// a panel at a time from the last: the rows under the panel first (four sums in
    /// flight), then its triangle.
    #[inline(always)]
    fn backward<const N: usize, L: Lane<N>>(
        &self,
        range: Range<usize>,
        y: &mut [[f64; N]],
        offset: usize,
        above: &[[f64; N]],
        above_offset: usize,
    ) {
        let end = offset + y.len();
        for s in range.rev() {
            let (first, size, rows, diagonal, below) = self.supernode(s);
            if size == 1 {
                // A single column, as in `forward`.
                let mut sum = L::from_array(y[first - offset]);
                for (&row, &l) in rows.iter().zip(below) {
                    let row = row as usize;
                    let x = if row < end { y[row - offset] } else { above[row - above_offset] };
                    sum = sum - L::from_array(x) * l;
                }
                y[first - offset] = (sum * self.inverse_diagonal[first]).to_array();
                continue;
            }
            let (head, tail) = y.split_at_mut(first + size - offset);
            let block = &mut head[first - offset..];
            // (A closure over plain arrays: lane arithmetic stays out of closures.)
            let unknown = |row: u32| {
                let row = row as usize;
                if row < end { tail[row - first - size] } else { above[row - above_offset] }
            };
            // Four rows at a time, stored as in `forward`: each of the block's unknowns is
            // loaded and stored once for the four and takes their updates in row order.
            let whole = rows.len() / 4 * 4;
            let (grouped, single) = below.split_at(whole * size);
            for (rows, values) in rows[..whole].chunks_exact(4).zip(grouped.chunks_exact(4 * size)) {
                let x = [
                    L::from_array(unknown(rows[0])),
                    L::from_array(unknown(rows[1])),
                    L::from_array(unknown(rows[2])),
                    L::from_array(unknown(rows[3])),
                ];
                let (values, _) = values.as_chunks::<4>();
                for (b, l) in block.iter_mut().zip(values) {
                    *b = (L::from_array(*b) - x[0] * l[0] - x[1] * l[1] - x[2] * l[2] - x[3] * l[3])
                        .to_array();
                }
            }
            for (&row, values) in rows[whole..].iter().zip(single.chunks_exact(size)) {
                let x = L::from_array(unknown(row));
                for (v, b) in values.iter().zip(block.iter_mut()) {
                    *b = (L::from_array(*b) - x * *v).to_array();
                }
            }
            let inverse = &self.inverse_diagonal[first..first + size];
            for start in (0..size).step_by(PANEL).rev() {
                let width = PANEL.min(size - start);
                let panel = &diagonal[panel_offset(size, start)..][..(size - start) * width];
                let (triangle, under) = panel.split_at(width * width);
                let mut sums = [L::splat(0.0); PANEL];
                for k in 0..width {
                    sums[k] = L::from_array(block[start + k]);
                }
                if width == PANEL {
                    let (under, _) = under.as_chunks::<PANEL>();
                    for (xi, l) in block[start + PANEL..].iter().zip(under) {
                        let xi = L::from_array(*xi);
                        sums[0] = sums[0] - xi * l[0];
                        sums[1] = sums[1] - xi * l[1];
                        sums[2] = sums[2] - xi * l[2];
                        sums[3] = sums[3] - xi * l[3];
                    }
                }
                for k in (0..width).rev() {
                    let mut sum = sums[k];
                    for i in k + 1..width {
                        sum = sum - L::from_array(block[start + i]) * triangle[i * width + k];
                    }
                    block[start + k] = (sum * inverse[start + k]).to_array();
                }
            }
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
        let (layout, columns) = Layout::new(&symbolic);
        // The vertex of each of the layout's columns, through faer's fill-reducing order.
        let order: Vec<u32> = match symbolic.perm() {
            Some(perm) => columns.iter().map(|&c| perm.arrays().0[c as usize]).collect(),
            None => columns,
        };
        let mut position = vec![0u32; n];
        for (column, &vertex) in order.iter().enumerate() {
            position[vertex as usize] = column as u32;
        }
        Some(GlobalSolve {
            layout,
            order,
            position,
            pattern,
            symbolic,
            values: vec![0.0; sources.len()],
            sources,
            laplacian: projective::laplacian(model, topology),
            factors: Vec::new(),
            fill,
            entries: Vec::new(),
            all: vec![[0.0; 4]; n],
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
        let values = self.layout.values(&values);
        let inverse_diagonal = self.layout.inverse_diagonal(&values);
        self.factors.truncate(1);
        self.factors.insert(0, Factor { a, diagonal: diagonal.to_vec(), values, inverse_diagonal });
        true
    }

    /// Overwrites `rhs` with `S^-1 rhs`, the factor's two parts on two cores.
    pub fn solve(&mut self, rhs: &mut [[f64; 3]]) {
        let factor = self.factors.first().expect("prepare before solve");
        for (yi, &vertex) in self.all.iter_mut().zip(&self.order) {
            let [a, b, c] = rhs[vertex as usize];
            *yi = [a, b, c, 0.0];
        }
        self.layout.substitute_four(&factor.values, &factor.inverse_diagonal, &mut self.all, true);
        for (r, &column) in rhs.iter_mut().zip(&self.position) {
            let [a, b, c, _] = self.all[column as usize];
            *r = [a, b, c];
        }
    }
}

/// A simplicial `L` laid out as [`Layout::Columns`] says (its values by columns and by
/// rows), with `1 / L_jj`.
struct Simplicial<'a> {
    col_ptr: &'a [u32],
    row_idx: &'a [u32],
    row_ptr: &'a [u32],
    col_idx: &'a [u32],
    by_column: &'a [f64],
    by_row: &'a [f64],
    inverse_diagonal: &'a [f64],
}

impl Substitutions for Simplicial<'_> {
    fn groups(&self) -> usize {
        self.col_ptr.len() - 1
    }

    fn column(&self, g: usize) -> usize {
        g
    }

    /// Row by row, `z_i = (y_i - sum_j L_ij z_j) / L_ii`: a row's columns are its
    /// descendants, in `y` (nothing spills).
    #[inline(always)]
    fn forward<const N: usize, L: Lane<N>>(
        &self,
        range: Range<usize>,
        y: &mut [[f64; N]],
        offset: usize,
        _: &mut [[f64; N]],
        _: usize,
    ) {
        for i in range {
            let entries = self.row_ptr[i] as usize..self.row_ptr[i + 1] as usize;
            let sum: L =
                partial_dot(&self.col_idx[entries.clone()], &self.by_row[entries], |j| y[j - offset]);
            let yi = &mut y[i - offset];
            *yi = ((L::from_array(*yi) - sum) * self.inverse_diagonal[i]).to_array();
        }
    }

    /// From the last column, `x_j = (z_j - sum_i L_ij x_i) / L_jj`: a column's rows are its
    /// ancestors, in `y` or `above`.
    #[inline(always)]
    fn backward<const N: usize, L: Lane<N>>(
        &self,
        range: Range<usize>,
        y: &mut [[f64; N]],
        offset: usize,
        above: &[[f64; N]],
        above_offset: usize,
    ) {
        let end = offset + y.len();
        for j in range.rev() {
            let entries = self.col_ptr[j] as usize + 1..self.col_ptr[j + 1] as usize;
            let sum: L = partial_dot(&self.row_idx[entries.clone()], &self.by_column[entries], |i| {
                if i < end { y[i - offset] } else { above[i - above_offset] }
            });
            let yj = &mut y[j - offset];
            *yj = ((L::from_array(*yj) - sum) * self.inverse_diagonal[j]).to_array();
        }
    }
}

/// `sum_k values[k] at(indices[k])`, in four partial sums so that it is not one chain of
/// dependent additions.
#[inline(always)]
fn partial_dot<const N: usize, L: Lane<N>>(
    indices: &[u32],
    values: &[f64],
    at: impl Fn(usize) -> [f64; N],
) -> L {
    let mut partial = [L::splat(0.0); 4];
    let whole = indices.len() / 4 * 4;
    for (four, lij) in indices[..whole].chunks_exact(4).zip(values[..whole].chunks_exact(4)) {
        for k in 0..4 {
            partial[k] += L::from_array(at(four[k] as usize)) * lij[k];
        }
    }
    for (&i, &lij) in indices[whole..].iter().zip(&values[whole..]) {
        partial[0] += L::from_array(at(i as usize)) * lij;
    }
    (partial[0] + partial[1]) + (partial[2] + partial[3])
}

#[cfg(test)]
mod tests {
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::material::Material;
    use crate::mesh::TetMesh;

    /// The solve inverts the matrix it factored: `S (S^-1 b) = b` on random right-hand sides,
    /// for a small bar (a simplicial factor on one core), a long beam (simplicial, in two
    /// parts) and a cube (supernodal, in two parts), with two vertex diagonals and after
    /// switching between cached factors; on one core or two, three right-hand sides or four,
    /// the bits are the same.
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
        // The bar's factor is small for two cores; the beam's and the cube's are split.
        let (Layout::Columns { parts, .. } | Layout::Supernodes { parts, .. }) = global.layout;
        // The cube's supernodes take every path of the panels: full ones, narrower last ones.
        if let Layout::Supernodes { begin, .. } = &global.layout {
            let sizes: Vec<u32> = begin.windows(2).map(|w| w[1] - w[0]).collect();
            assert!(
                sizes.iter().any(|&s| s > 4 && s % 4 != 0),
                "{cells:?}: no supernode ends in a narrow panel"
            );
            assert!(sizes.iter().any(|&s| s > 4 && s % 4 == 0), "{cells:?}: no supernode of whole panels");
        }
        if cells == [5, 3, 2] {
            assert_eq!(parts, [0, 0], "the small bar's factor is split");
        } else {
            assert!(0 < parts[0] && parts[0] < parts[1], "{cells:?}: parts {parts:?}, not two");
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
            // On one core, three right-hand sides together and padded to four (in AVX2
            // registers where the CPU has them) give the bits of the solve on two.
            let factor = &global.factors[0];
            let permuted: Vec<[f64; 3]> = global.order.iter().map(|&v| b[v as usize]).collect();
            let mut three = permuted.clone();
            global.layout.substitute::<3, Lanes<3>>(
                &factor.values,
                &factor.inverse_diagonal,
                &mut three,
                false,
            );
            let mut four: Vec<[f64; 4]> = permuted.iter().map(|&[p, q, r]| [p, q, r, 0.0]).collect();
            global.layout.substitute_four(&factor.values, &factor.inverse_diagonal, &mut four, false);
            assert!(three.iter().zip(&four).all(|(t, f)| t[..] == f[..3]), "{cells:?}: four-wide differs");
            assert!(
                x.iter().zip(&global.position).all(|(xv, &column)| *xv == three[column as usize]),
                "{cells:?}: the solve on two cores differs from one"
            );
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
