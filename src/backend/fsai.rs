//! The factorized sparse approximate inverse (FSAI) of a scalar SPD matrix `S` on the
//! Hessian's pattern: a lower-triangular `G` with `G^T G ~ S^-1`, applied to each coordinate
//! of a vertex vector as a preconditioner for CG on `S (x) I_3` (the local/global matrix).
//!
//! Row `i` of `G` lives on the pattern's columns `P_i = { j <= i }` of row `i` and solves
//! `S[P_i, P_i] g = e_i`, scaled by `1 / sqrt(g_i)`; then `(G S)_ij = 0` for `j` in `P_i`
//! below `i` and `(G S G^T)_ii = 1` — the `G` on that pattern that minimizes
//! `|I - G L|_F` for the Cholesky factor `L` of `S`, up to row scaling (Kolotilina and
//! Yeremin). Each row is its own small dense solve, so the factor is built in
//! parallel, and applying it is two passes over the pattern with no recurrence: what a GPU
//! can run where it cannot run a triangular solve. On the local/global matrices of the
//! benchmark bodies it needs half to a third of Jacobi-PCG's iterations
//! (docs/perf/local-global.md).
//!
//! Both triangles are kept in one value per pattern entry: `(i, j)` holds `G_ij` for
//! `j <= i` and `G_ji` for `j > i`, so that `y = G r` reads the lower part of row `i` and
//! `z = G^T y` the upper part, each a gather.
//!
//! A GPU iteration that applies `G` and `G^T` as two gathers pays a dispatch for each, so the
//! multi-workgroup GPU loop multiplies by the product `M = G^T G` instead ([`Inverse`]): one
//! gather, fused into CG's update, over a pattern about 2.2x the matrix's (the pairs of
//! vertices with a common neighbour numbered after both: 26-28 entries per row against 12 on
//! the benchmark bars and cubes), so the preconditioner costs no dispatch of its own.

use rayon::prelude::*;

use crate::backend::topology::Topology;

/// The factor, one value per entry of the pattern (see the module's documentation).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Fsai {
    pub values: Vec<f64>,
}

/// Where `(row, column)` is stored in the pattern, if it is.
fn entry(topology: &Topology, row: usize, column: usize) -> Option<usize> {
    let begin = topology.row_offsets[row] as usize;
    let columns = &topology.columns[begin..topology.row_offsets[row + 1] as usize];
    columns.binary_search(&(column as u32)).ok().map(|k| begin + k)
}

/// Row `row` of `G` on its lower pattern (the diagonal last: columns are sorted).
fn factor_row(topology: &Topology, s: &[f64], row: usize) -> Vec<f64> {
    let begin = topology.row_offsets[row] as usize;
    let end = topology.diagonal[row] as usize + 1;
    let columns = &topology.columns[begin..end];
    let k = columns.len();
    // S[P, P] by rows, then its Cholesky factor in place.
    let mut a = vec![0.0; k * k];
    for (p, &cp) in columns.iter().enumerate() {
        for (q, &cq) in columns.iter().enumerate().take(p + 1) {
            a[p * k + q] = entry(topology, cp as usize, cq as usize).map_or(0.0, |e| s[e]);
        }
    }
    for j in 0..k {
        let mut d = a[j * k + j];
        for m in 0..j {
            d -= a[j * k + m] * a[j * k + m];
        }
        let d = d.max(f64::MIN_POSITIVE).sqrt();
        a[j * k + j] = d;
        for i in j + 1..k {
            let mut v = a[i * k + j];
            for m in 0..j {
                v -= a[i * k + m] * a[j * k + m];
            }
            a[i * k + j] = v / d;
        }
    }
    // S[P, P] g = e_k: L u = e_k gives u = e_k / L_kk; then L^T g = u. g_k = 1 / L_kk^2, so
    // G's row, g / sqrt(g_k), is L_kk g.
    let mut g = vec![0.0; k];
    g[k - 1] = 1.0 / a[(k - 1) * k + k - 1];
    for i in (0..k).rev() {
        let mut v = if i == k - 1 { g[i] } else { 0.0 };
        for m in i + 1..k {
            v -= a[m * k + i] * g[m];
        }
        g[i] = v / a[i * k + i];
    }
    let scale = a[(k - 1) * k + k - 1];
    g.iter().map(|v| v * scale).collect()
}

impl Fsai {
    /// The factor of `s`, one value per entry of `topology`'s pattern (symmetric, positive
    /// definite).
    pub fn new(topology: &Topology, s: &[f64]) -> Fsai {
        let n = topology.diagonal.len();
        let rows: Vec<Vec<f64>> = (0..n).into_par_iter().map(|row| factor_row(topology, s, row)).collect();
        let mut values = vec![0.0; topology.columns.len()];
        values.par_chunks_mut(crate::math::VERTEX_CHUNK).enumerate().for_each(|(chunk, out)| {
            let first = chunk * crate::math::VERTEX_CHUNK;
            for (k, value) in out.iter_mut().enumerate() {
                let index = first + k;
                let row = topology.row_offsets.partition_point(|&o| o as usize <= index) - 1;
                let column = topology.columns[index] as usize;
                *value = if column <= row {
                    rows[row][index - topology.row_offsets[row] as usize]
                } else {
                    // G_ji: entry (j, i) of row j's lower part.
                    let mirror = entry(topology, column, row).expect("the pattern is symmetric");
                    rows[column][mirror - topology.row_offsets[column] as usize]
                };
            }
        });
        Fsai { values }
    }

    /// `z = P r` per coordinate, `P = E G^T G E` plus Jacobi's `inverse_diagonal` on the
    /// penalty `contact` set that `E` drops (empty: none), as `shaders/pcg.wgsl` applies it;
    /// `y` is scratch. Returns `r . z`.
    pub fn apply(
        &self,
        topology: &Topology,
        r: &[[f64; 3]],
        y: &mut [[f64; 3]],
        z: &mut [[f64; 3]],
        contact: &[bool],
        inverse_diagonal: &[[f64; 3]],
    ) -> f64 {
        let (t, values) = (topology, &self.values);
        let in_contact = |v: usize| contact.get(v).copied().unwrap_or(false);
        // Row v of G E (lower) or of G^T (upper) times u.
        let row = |v: usize, u: &[[f64; 3]], lower: bool| {
            let mut acc = [0.0; 3];
            let entries = t.row_offsets[v] as usize..t.row_offsets[v + 1] as usize;
            for (&column, &value) in t.columns[entries.clone()].iter().zip(&values[entries]) {
                let column = column as usize;
                let kept = if lower { column <= v && !in_contact(column) } else { column >= v };
                if kept {
                    for c in 0..3 {
                        acc[c] += value * u[column][c];
                    }
                }
            }
            acc
        };
        crate::math::fill_per_vertex(y, |v| row(v, r, true));
        crate::math::fill_per_vertex(z, |v| {
            if in_contact(v) {
                std::array::from_fn(|c| inverse_diagonal[v][c] * r[v][c])
            } else {
                row(v, y, false)
            }
        });
        crate::math::sum_per_vertex(r.len(), |v| (0..3).map(|c| r[v][c] * z[v][c]).sum())
    }
}

/// `M = G^T G` in compressed rows: `pattern` holds the `n + 1` row offsets, then the sorted
/// columns of every row; `values` one value per column entry.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Inverse {
    pub pattern: Vec<u32>,
    pub values: Vec<f64>,
}

impl Inverse {
    /// The pattern of `G^T G` for a factor on `topology`'s pattern: `(i, j)` where some row
    /// `k >= i, j` of `G` holds both columns, that is, where `i` and `j` share a neighbour `k`
    /// numbered after both. Values zero.
    pub fn new(topology: &Topology) -> Inverse {
        let n = topology.diagonal.len();
        let rows: Vec<Vec<u32>> = (0..n)
            .into_par_iter()
            .map(|i| {
                let mut columns: Vec<u32> = later_neighbours(topology, i)
                    .flat_map(|(k, _)| lower_columns(topology, k).map(|(j, _)| j as u32))
                    .collect();
                columns.sort_unstable();
                columns.dedup();
                columns
            })
            .collect();
        let mut pattern = Vec::with_capacity(n + 1 + rows.iter().map(Vec::len).sum::<usize>());
        pattern.push(0);
        for row in &rows {
            pattern.push(pattern.last().unwrap() + row.len() as u32);
        }
        let values = vec![0.0; rows.iter().map(Vec::len).sum()];
        pattern.extend(rows.into_iter().flatten());
        Inverse { pattern, values }
    }

    /// The values of `G^T G` for `fsai` on `topology`: row `i` sums `G_ki G_kj` over the rows
    /// `k` of `G` that hold column `i`.
    pub fn fill(&mut self, topology: &Topology, fsai: &Fsai) {
        let n = topology.diagonal.len();
        let (offsets, columns) = self.pattern.split_at(n + 1);
        let mut rows: Vec<&mut [f64]> = Vec::with_capacity(n);
        let mut rest = self.values.as_mut_slice();
        for i in 0..n {
            let (row, tail) = rest.split_at_mut((offsets[i + 1] - offsets[i]) as usize);
            rows.push(row);
            rest = tail;
        }
        rows.into_par_iter().enumerate().for_each(|(i, row)| {
            let row_columns = &columns[offsets[i] as usize..offsets[i + 1] as usize];
            row.fill(0.0);
            for (k, g_ki) in later_neighbours(topology, i) {
                for (j, g_kj) in lower_columns(topology, k) {
                    let at = row_columns.binary_search(&(j as u32)).expect("the pattern holds (i, j)");
                    row[at] += fsai.values[g_ki] * fsai.values[g_kj];
                }
            }
        });
    }

    /// `z = M r` per coordinate.
    #[cfg(test)]
    pub fn apply(&self, r: &[[f64; 3]], z: &mut [[f64; 3]]) {
        let n = r.len();
        let (offsets, columns) = self.pattern.split_at(n + 1);
        crate::math::fill_per_vertex(z, |i| {
            let mut acc = [0.0; 3];
            for e in offsets[i] as usize..offsets[i + 1] as usize {
                for c in 0..3 {
                    acc[c] += self.values[e] * r[columns[e] as usize][c];
                }
            }
            acc
        });
    }
}

/// The neighbours `k >= i` of vertex `i` (itself first), with the entry in row `i` that holds
/// `G_ki`.
fn later_neighbours(topology: &Topology, i: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
    let entries = topology.diagonal[i] as usize..topology.row_offsets[i + 1] as usize;
    entries.map(move |e| (topology.columns[e] as usize, e))
}

/// The columns `j <= k` of row `k` of `G`, with the entry that holds `G_kj`.
fn lower_columns(topology: &Topology, k: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
    let entries = topology.row_offsets[k] as usize..topology.diagonal[k] as usize + 1;
    entries.map(move |e| (topology.columns[e] as usize, e))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::backend::projective;
    use crate::material::Material;
    use crate::mesh::TetMesh;
    use crate::model::Model;

    /// A local/global matrix of a bar with its first end pinned.
    pub(crate) fn projective_matrix(cells: [usize; 3], a: f64) -> (Model, Topology, Vec<f64>) {
        projective_matrix_of_bars(cells, 0, a)
    }

    /// A local/global matrix of a bar with its first end pinned and `free` bars above it
    /// that no pin holds (translation groups of their own).
    pub(crate) fn projective_matrix_of_bars(
        cells: [usize; 3],
        free: usize,
        a: f64,
    ) -> (Model, Topology, Vec<f64>) {
        let mut model = Model::empty([0.0, -9.81, 0.0]);
        let bar = TetMesh::bar(cells, [1.0, 0.4, 0.3]);
        for k in 0..=free {
            let raised: Vec<[f64; 3]> =
                bar.positions().iter().map(|p| [p[0], p[1] + k as f64, p[2]]).collect();
            let mesh = TetMesh::new(raised, bar.tets().to_vec()).unwrap();
            model.add_tet_body(&mesh, &[Material::corotated(1e6, 0.3)], 1000.0).unwrap();
        }
        for v in 0..model.vertex_count() {
            model.pinned[v] = model.rest[v][0] < 1e-9 && model.rest[v][1] < 0.5;
        }
        let topology = Topology::new(&model);
        let laplacian = projective::laplacian(&model, &topology);
        let h = 1.0 / 30.0;
        let diagonal: Vec<f64> = (0..model.vertex_count())
            .map(|v| if model.pinned[v] { 1.0 } else { model.masses[v] / (h * h) })
            .collect();
        let mut s = Vec::new();
        projective::matrix(&model, &topology, &laplacian, a, &diagonal, &mut s);
        (model, topology, s)
    }

    /// The defining property: `G S` vanishes at the pattern's entries left of the diagonal,
    /// row by row, and `G S G^T` has a unit diagonal; `G` is lower triangular with a positive
    /// diagonal, and the stored upper entries are its transpose.
    #[test]
    fn the_factor_inverts_the_matrix_on_its_pattern() {
        let (model, topology, s) = projective_matrix([6, 3, 2], 0.25);
        let fsai = Fsai::new(&topology, &s);
        let n = model.vertex_count();
        let dense = |values: &[f64], lower_only: bool| {
            let mut m = vec![vec![0.0; n]; n];
            for i in 0..n {
                for e in topology.row_offsets[i] as usize..topology.row_offsets[i + 1] as usize {
                    let j = topology.columns[e] as usize;
                    if !lower_only || j <= i {
                        m[i][j] = values[e];
                    }
                }
            }
            m
        };
        let (g, sm, stored) = (dense(&fsai.values, true), dense(&s, false), dense(&fsai.values, false));
        let mut worst = 0.0f64;
        for i in 0..n {
            assert!(g[i][i] > 0.0, "G_{i}{i} = {}", g[i][i]);
            for j in 0..n {
                assert_eq!(stored[i][j], if j <= i { g[i][j] } else { g[j][i] }, "({i}, {j})");
            }
            // Row i of G S at the lower pattern of row i, and (G S G^T)_ii.
            let gs: Vec<f64> = (0..n).map(|q| (0..n).map(|p| g[i][p] * sm[p][q]).sum()).collect();
            for e in topology.row_offsets[i] as usize..topology.diagonal[i] as usize {
                worst = worst.max(gs[topology.columns[e] as usize].abs() / gs[i].abs());
            }
            let gsg: f64 = (0..n).map(|q| gs[q] * g[i][q]).sum();
            worst = worst.max((gsg - 1.0).abs());
        }
        assert!(worst < 1e-12, "G S G^T is off by {worst:e} on the pattern");
    }

    /// `apply` is `G^T G r` (against the dense product) and returns `r . z`.
    #[test]
    fn apply_multiplies_by_both_triangles() {
        use rand::{RngExt, SeedableRng};
        let (model, topology, s) = projective_matrix([5, 3, 3], 1.0);
        let fsai = Fsai::new(&topology, &s);
        let n = model.vertex_count();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let r: Vec<[f64; 3]> = (0..n).map(|_| std::array::from_fn(|_| rng.random_range(-1.0..1.0))).collect();
        let (mut y, mut z) = (vec![[0.0; 3]; n], vec![[0.0; 3]; n]);
        let rz = fsai.apply(&topology, &r, &mut y, &mut z, &[], &[]);
        // G's entries (i, j, G_ij), then y = G r and z = G^T y entry by entry.
        let (t, values) = (&topology, &fsai.values);
        let lower: Vec<(usize, usize, f64)> = (0..n)
            .flat_map(|i| {
                let entries = t.row_offsets[i] as usize..t.row_offsets[i + 1] as usize;
                entries.map(move |e| (i, t.columns[e] as usize, values[e]))
            })
            .filter(|&(i, j, _)| j <= i)
            .collect();
        let (mut gr, mut expected) = (vec![[0.0; 3]; n], vec![[0.0; 3]; n]);
        for &(i, j, g) in &lower {
            (0..3).for_each(|c| gr[i][c] += g * r[j][c]);
        }
        for &(i, j, g) in &lower {
            (0..3).for_each(|c| expected[j][c] += g * gr[i][c]);
        }
        let worst =
            z.iter().flatten().zip(expected.iter().flatten()).fold(0.0f64, |w, (a, b)| w.max((a - b).abs()));
        assert!(worst < 1e-12, "G^T G r off by {worst:e}");
        let dot: f64 = r.iter().zip(&z).map(|(a, b)| (0..3).map(|c| a[c] * b[c]).sum::<f64>()).sum();
        assert!((rz - dot).abs() <= 1e-12 * dot.abs(), "{rz} against {dot}");
        assert!(rz > 0.0, "G^T G is positive definite");
    }

    /// The explicit product `M = G^T G` multiplies as `G^T G` does, and is symmetric.
    #[test]
    fn the_explicit_product_is_the_factor_applied_twice() {
        use rand::{RngExt, SeedableRng};
        let (model, topology, s) = projective_matrix([7, 3, 4], 0.5);
        let fsai = Fsai::new(&topology, &s);
        let mut inverse = Inverse::new(&topology);
        inverse.fill(&topology, &fsai);
        let n = model.vertex_count();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        let r: Vec<[f64; 3]> = (0..n).map(|_| std::array::from_fn(|_| rng.random_range(-1.0..1.0))).collect();
        let (mut y, mut expected, mut z) = (vec![[0.0; 3]; n], vec![[0.0; 3]; n], vec![[0.0; 3]; n]);
        fsai.apply(&topology, &r, &mut y, &mut expected, &[], &[]);
        inverse.apply(&r, &mut z);
        let scale = expected.iter().flatten().fold(0.0f64, |w, v| w.max(v.abs()));
        let worst =
            z.iter().flatten().zip(expected.iter().flatten()).fold(0.0f64, |w, (a, b)| w.max((a - b).abs()));
        assert!(worst < 1e-12 * scale, "M r off by {worst:e} of {scale:e}");
        let (offsets, columns) = inverse.pattern.split_at(n + 1);
        let at = |i: usize, j: usize| {
            let row = &columns[offsets[i] as usize..offsets[i + 1] as usize];
            row.binary_search(&(j as u32)).map(|k| inverse.values[offsets[i] as usize + k])
        };
        for i in 0..n {
            for e in offsets[i] as usize..offsets[i + 1] as usize {
                let j = columns[e] as usize;
                assert_eq!(at(j, i), Ok(inverse.values[e]), "M is symmetric at ({i}, {j})");
            }
        }
    }
}
