//! A coarse correction for PCG: the second level of a two-level additive preconditioner,
//! `P_fine + C`, `C = Z (Z^T S Z)^+ Z^T`.
//!
//! One-level preconditioners (Jacobi, FSAI) act within a few edges, so CG needs many
//! iterations to carry a correction across a large body: the smooth, low-energy modes (a bar's
//! bending, a slab's sag) converge last, and their count grows with the body's size. `Z` spans
//! those modes: the free vertices are grouped into spatial clusters (the cells of a grid over
//! the rest shape, about [`VERTICES_PER_CLUSTER`] vertices each) and each cluster moves
//! affinely, four weights per vertex (`1` and its rest offset from the cluster's centre, in
//! cell widths) per coordinate. The coarse matrix is the local/global matrix `S` of
//! [`projective`](super::projective) seen through `Z`: fixed for a step weight, so it is
//! assembled and factored once (dense, a few hundred unknowns), like the other preconditioners
//! of `S`, and it preconditions the Newton matrix as well as `S` itself. On the gpu_step bar of
//! 100K tets (five converged backward-Euler steps, 2-core CPU) Jacobi's 1 851 CG iterations
//! became 350 and a step 545 -> 300 ms. A prototype with 24 clusters took FSAI's 664 (three
//! steps) to 207; there `Z^T A Z` of the Newton matrix did no better than `Z^T S Z` (226),
//! and a coarse warm start alone (the mixed-FEM paper's affine one) saved only 18 %.
//!
//! `S` is a scalar matrix times the identity in the three coordinates, so `Z^T S Z` is one
//! matrix `K` of `4 x clusters` unknowns shared by the coordinates. A cluster whose vertices
//! do not span its affine modes (too few, or coplanar) makes `K` singular; the factorization
//! drops such modes (the pseudo-inverse on the rest), which keeps `C` positive semidefinite,
//! and `P_fine + C` positive definite.

use std::sync::Arc;

use rayon::prelude::*;

use super::topology::{NO_GROUP, Topology};
use crate::model::Model;

/// Vertices per cluster, about: at 22K vertices (the 100K-tet bar) 86 clusters, whose `K`
/// of 344 unknowns costs a CG iteration about as much as a tenth of its matrix product.
pub(crate) const VERTICES_PER_CLUSTER: usize = 256;
/// At most this many clusters: `K`'s factor is dense.
pub(crate) const MAX_CLUSTERS: usize = 128;
/// Affine modes per cluster and coordinate.
const MODES: usize = 4;
/// A pivot of `K`'s factor at or below this fraction of its largest diagonal entry drops its
/// mode: a mode the cluster's vertices do not span is (in exact arithmetic) a zero pivot.
const DROPPED_PIVOT: f64 = 1e-10;
/// Vertices per work item of the restriction's sums (fixed, so the sums' order, and their
/// bits, do not depend on the thread count).
const CHUNK: usize = 1024;

/// The clusters and each free vertex's weights on its cluster's modes.
#[derive(Clone, Debug)]
pub(crate) struct CoarseSpace {
    /// Per vertex: its cluster, or `None` where pinned.
    cluster: Vec<Option<u32>>,
    weights: Vec<[f64; MODES]>,
    clusters: usize,
    /// Per cluster: the translation group of its vertices (`Model::translation_groups`;
    /// a cluster holds one group's), `NO_GROUP` for a part some pin holds.
    group: Vec<u32>,
}

impl CoarseSpace {
    /// Clusters of about [`VERTICES_PER_CLUSTER`] free vertices each, at most
    /// [`MAX_CLUSTERS`], from a grid of cells over the free vertices' rest positions, a cell's
    /// vertices of each translation group (`groups`, per vertex) a cluster of their own;
    /// `None` where fewer than two clusters would result (nothing to carry across), or where
    /// the groups alone make more than [`MAX_CLUSTERS`] (a pile of many free parts).
    pub(crate) fn new(model: &Model, groups: &[u32]) -> Option<CoarseSpace> {
        let free: Vec<usize> = (0..model.vertex_count()).filter(|&v| !model.pinned[v]).collect();
        let target = (free.len() / VERTICES_PER_CLUSTER).min(MAX_CLUSTERS);
        let mut present: Vec<u32> = free.iter().map(|&v| groups[v]).collect();
        present.sort_unstable();
        present.dedup();
        if target < 2 || present.len() > MAX_CLUSTERS {
            return None;
        }
        let (mut low, mut high) = ([f64::INFINITY; 3], [f64::NEG_INFINITY; 3]);
        for &v in &free {
            for c in 0..3 {
                low[c] = low[c].min(model.rest[v][c]);
                high[c] = high[c].max(model.rest[v][c]);
            }
        }
        let longest = (0..3).map(|c| high[c] - low[c]).fold(0.0, f64::max);
        if !(longest > 0.0) {
            return None;
        }
        // Flat or thin bodies keep at least one cell across their thin extents.
        let extent: [f64; 3] = std::array::from_fn(|c| (high[c] - low[c]).max(1e-3 * longest));
        let mut width = (extent.iter().product::<f64>() / target as f64).cbrt();
        let cells_for = |width: f64| extent.map(|e| ((e / width).ceil() as usize).max(1));
        // The cells of `width` split each extent evenly: no sliver of a cell (a single layer
        // of vertices, which spans no affine mode across it) at the far side. A vertex's
        // cluster is keyed by its group and its cell.
        let layout = |width: f64| {
            let cells = cells_for(width);
            let widths: [f64; 3] = std::array::from_fn(|c| extent[c] / cells[c] as f64);
            let key = move |v: usize| -> (u32, usize) {
                let p = &model.rest[v];
                let index = |c: usize| (((p[c] - low[c]) / widths[c]) as usize).min(cells[c] - 1);
                (groups[v], index(0) + cells[0] * (index(1) + cells[1] * index(2)))
            };
            let mut keys: Vec<(u32, usize)> = free.iter().map(|&v| key(v)).collect();
            keys.sort_unstable();
            keys.dedup();
            (widths, key, keys)
        };
        // Rounding up overshoots the target severalfold on thin bodies (a bar's cross-section
        // two cells wide instead of one): widen until within twice the target and the cap,
        // or down to a cluster per group.
        let most = (2 * target).min(MAX_CLUSTERS).max(present.len());
        while layout(width).2.len() > most {
            width *= 1.1;
        }
        // The occupied keys, numbered in order, and their centres.
        let (widths, key, keys) = layout(width);
        let number = |v: usize| keys.binary_search(&key(v)).expect("every free vertex's key is kept") as u32;
        let mut sums: Vec<[f64; 4]> = vec![[0.0; 4]; keys.len()];
        let mut group = vec![NO_GROUP; keys.len()];
        for &v in &free {
            let k = number(v) as usize;
            group[k] = groups[v];
            let sum = &mut sums[k];
            for (total, p) in sum.iter_mut().zip(model.rest[v]) {
                *total += p;
            }
            sum[3] += 1.0;
        }
        if sums.len() < 2 {
            return None;
        }
        let mut cluster = vec![None; model.vertex_count()];
        let mut weights = vec![[0.0; MODES]; model.vertex_count()];
        for &v in &free {
            let k = number(v);
            let sum = sums[k as usize];
            let p = model.rest[v];
            cluster[v] = Some(k);
            weights[v] = [1.0, 0.0, 0.0, 0.0];
            for c in 0..3 {
                weights[v][1 + c] = (p[c] - sum[c] / sum[3]) / widths[c];
            }
        }
        Some(CoarseSpace { cluster, weights, clusters: sums.len(), group })
    }

    /// Unknowns of `K`: four per cluster.
    pub(crate) fn size(&self) -> usize {
        MODES * self.clusters
    }

    pub(crate) fn clusters(&self) -> usize {
        self.clusters
    }

    /// Floats of a GPU's `K^+` ([`CoarseCorrection::inverse`]): `D`, then four per cluster.
    pub(crate) fn inverse_length(&self) -> usize {
        self.size() * self.size() + MODES * self.clusters
    }

    /// The clusters as a GPU walks them: the members' offsets (`clusters + 1`) then the
    /// members (free vertices, by cluster, in vertex order), and each member's weights.
    pub(crate) fn members(&self) -> (Vec<u32>, Vec<[f32; MODES]>) {
        let mut by_cluster: Vec<Vec<u32>> = vec![Vec::new(); self.clusters];
        for (v, k) in self.cluster.iter().enumerate() {
            if let Some(k) = k {
                by_cluster[*k as usize].push(v as u32);
            }
        }
        let mut offsets = vec![0u32];
        for members in &by_cluster {
            offsets.push(offsets.last().copied().unwrap_or(0) + members.len() as u32);
        }
        let members: Vec<u32> = by_cluster.concat();
        let weights = members.iter().map(|&v| self.weights[v as usize].map(|w| w as f32)).collect();
        ([offsets, members].concat(), weights)
    }

    /// `Z^T r` per coordinate: `out[c][MODES k + m]`, summed per fixed chunk, then in chunk
    /// order.
    fn restrict(&self, r: &[[f64; 3]]) -> [Vec<f64>; 3] {
        let size = self.size();
        let partials: Vec<[Vec<f64>; 3]> = (0..r.len().div_ceil(CHUNK))
            .into_par_iter()
            .map(|chunk| {
                let mut out: [Vec<f64>; 3] = std::array::from_fn(|_| vec![0.0; size]);
                let vertices = chunk * CHUNK..((chunk + 1) * CHUNK).min(r.len());
                for (v, rv) in vertices.clone().zip(&r[vertices]) {
                    let Some(k) = self.cluster[v] else { continue };
                    for (m, w) in self.weights[v].iter().enumerate() {
                        for c in 0..3 {
                            out[c][MODES * k as usize + m] += w * rv[c];
                        }
                    }
                }
                out
            })
            .collect();
        let mut out: [Vec<f64>; 3] = std::array::from_fn(|_| vec![0.0; size]);
        for partial in &partials {
            for c in 0..3 {
                for (o, p) in out[c].iter_mut().zip(&partial[c]) {
                    *o += p;
                }
            }
        }
        out
    }
}

/// `C = Z K^+ Z^T` for one `S`: the space and `K`'s factor, split along the translations of
/// the model's free parts.
///
/// A free part's translations are `S`'s softest modes, `Z c_g` with `c_g` the constant modes
/// of the clusters of its translation group `g`, and for a body stiff at its step
/// (`h^2 a / (m dx^2)` from about 1e7) `K^-1` along them exceeds its elastic part so far that
/// f32 entries keep only the translations, and a factor of `K` may drop their pivots as
/// round-off. So `K^-1` is taken as `D + sum_g c_g c_g^T / e_g`, `e_g = c_g^T K c_g`:
/// `D = Q^T K^-1 Q` with `Q = I - sum_g K c_g c_g^T / e_g` holds the elastic part alone
/// (`D K c_g = 0`), and `D = Q^T K~^+ Q` as well for `K~ = K + sum_g l_g (K c_g)(K c_g)^T`,
/// whose factor is made instead: `l_g` lifts each translation to the size of `K`'s diagonal.
/// (`Q^T` takes out whatever a solve leaves along the `c_g`; and for any generalized inverse
/// `K~^+`, `K (D + sum_g c_g c_g^T / e_g) q = q` on `K`'s range. `K` couples no two groups,
/// whose clusters are apart, so the `K c_g` are apart too.) Clusters of parts that pins hold
/// are of no group.
#[derive(Clone, Debug)]
pub(crate) struct CoarseCorrection {
    /// Shared by the corrections of every `S` of the model.
    space: Arc<CoarseSpace>,
    /// `K~ = L L^T` on the kept modes: `L` lower, dense, row-major; a dropped mode's row and
    /// column are zero.
    factor: Vec<f64>,
    kept: Vec<bool>,
    /// Per translation group (its index): its clusters' constant modes (the unknowns of
    /// `c_g`'s ones), `K c_g`, and `e_g = c_g^T K c_g` (0 for a group without clusters).
    translations: Vec<Translation>,
}

/// A translation group's part of [`CoarseCorrection`].
#[derive(Clone, Debug)]
struct Translation {
    modes: Vec<usize>,
    kc: Vec<f64>,
    e: f64,
}

impl Translation {
    /// `c_g^T q`.
    fn along(&self, q: &[f64]) -> f64 {
        self.modes.iter().map(|&i| q[i]).sum()
    }

    /// Whether the group splits off (it has clusters, and `K` is positive along it).
    fn splits(&self) -> bool {
        self.e > 0.0
    }
}

impl CoarseCorrection {
    /// Assembles `K = Z^T S Z` from `S`'s entries (one per pattern slot of `topology`) and
    /// factors it.
    pub(crate) fn new(space: Arc<CoarseSpace>, topology: &Topology, s: &[f64]) -> CoarseCorrection {
        let size = space.size();
        let mut k = vec![0.0; size * size];
        for v in 0..space.cluster.len() {
            let Some(kv) = space.cluster[v] else { continue };
            for slot in topology.row_offsets[v] as usize..topology.row_offsets[v + 1] as usize {
                let w = topology.columns[slot] as usize;
                let Some(kw) = space.cluster[w] else { continue };
                for (m, a) in space.weights[v].iter().enumerate() {
                    let row = &mut k[(MODES * kv as usize + m) * size..][..size];
                    for (n, b) in space.weights[w].iter().enumerate() {
                        row[MODES * kw as usize + n] += a * s[slot] * b;
                    }
                }
            }
        }
        Self::from_k(space, k)
    }

    /// The correction of the coarse matrix `k` (`size x size`, row-major).
    fn from_k(space: Arc<CoarseSpace>, mut k: Vec<f64>) -> CoarseCorrection {
        let size = space.size();
        let count =
            space.group.iter().filter(|&&g| g != NO_GROUP).map(|&g| g as usize + 1).max().unwrap_or(0);
        let translations: Vec<Translation> = (0..count as u32)
            .map(|g| {
                let modes: Vec<usize> =
                    (0..space.clusters).filter(|&c| space.group[c] == g).map(|c| MODES * c).collect();
                let kc: Vec<f64> = (0..size).map(|i| modes.iter().map(|&j| k[i * size + j]).sum()).collect();
                let e = modes.iter().map(|&i| kc[i]).sum();
                Translation { modes, kc, e }
            })
            .collect();
        let diagonal = (0..size).map(|i| k[i * size + i]).sum::<f64>() / size as f64;
        for translation in translations.iter().filter(|t| t.splits()) {
            // The translation's Rayleigh quotient is e_g / |c_g|^2; lift it to the mean diagonal.
            let Translation { modes, kc, e } = translation;
            let lift = diagonal * modes.len() as f64 / e;
            if lift > 1.0 {
                let g = (lift - 1.0) / e;
                for i in 0..size {
                    for j in 0..size {
                        k[i * size + j] += g * kc[i] * kc[j];
                    }
                }
            }
        }
        let (factor, kept) = factor_dropping(k, size);
        CoarseCorrection { space, factor, kept, translations }
    }

    /// `z += C r`; returns `r . C r` (`(Z^T r) . K^+ (Z^T r)`), the correction's share of
    /// `r . z`.
    pub(crate) fn add(&self, r: &[[f64; 3]], z: &mut [[f64; 3]]) -> f64 {
        let mut q = self.space.restrict(r);
        let mut rz = 0.0;
        for coordinate in &mut q {
            let y = self.solve(coordinate);
            rz += coordinate.iter().zip(&y).map(|(a, b)| a * b).sum::<f64>();
            *coordinate = y;
        }
        let space = &self.space;
        z.par_iter_mut().enumerate().for_each(|(v, z)| {
            if let Some(k) = space.cluster[v] {
                for (m, w) in space.weights[v].iter().enumerate() {
                    for c in 0..3 {
                        z[c] += w * q[c][MODES * k as usize + m];
                    }
                }
            }
        });
        rz
    }

    /// `K^+` for a GPU, in f32: `D` row-major (symmetric, as `D` is), then per cluster
    /// `1 / e_g` of its group `g` (0 for none) and `g` (-1 for none), and two zeros; the GPU
    /// adds `c_g (c_g^T q) / e_g` to `D q` (`shaders/pcg.wgsl`, `coarse_prolong`).
    pub(crate) fn inverse(&self) -> Vec<f32> {
        let size = self.space.size();
        let mut columns = vec![0.0f64; size * size];
        for j in 0..size {
            let unit: Vec<f64> = (0..size).map(|i| f64::from(u8::from(i == j))).collect();
            columns[j * size..][..size].copy_from_slice(&self.elastic(&unit));
        }
        let cluster = |c: usize| -> [f32; MODES] {
            let g = self.space.group[c];
            match self.translations.get(g as usize).filter(|t| t.splits()) {
                Some(t) => [(1.0 / t.e) as f32, g as f32, 0.0, 0.0],
                None => [0.0, -1.0, 0.0, 0.0],
            }
        };
        (0..size * size)
            .map(|e| {
                let (i, j) = (e / size, e % size);
                (0.5 * (columns[i * size + j] + columns[j * size + i])) as f32
            })
            .chain((0..self.space.clusters).flat_map(cluster))
            .collect()
    }

    /// `K^+ q = D q + sum_g c_g (c_g^T q) / e_g`.
    fn solve(&self, q: &[f64]) -> Vec<f64> {
        let mut y = self.elastic(q);
        for t in self.translations.iter().filter(|t| t.splits()) {
            let along = t.along(q) / t.e;
            for &i in &t.modes {
                y[i] += along;
            }
        }
        y
    }

    /// `D q = Q^T K~^+ Q q` (`K^+ q` where no translation splits).
    fn elastic(&self, q: &[f64]) -> Vec<f64> {
        let splitting: Vec<&Translation> = self.translations.iter().filter(|t| t.splits()).collect();
        let mut projected = q.to_vec();
        for t in &splitting {
            let along = t.along(q) / t.e;
            for (p, kc) in projected.iter_mut().zip(&t.kc) {
                *p -= kc * along;
            }
        }
        let mut y = self.solve_lifted(&projected);
        let alongs: Vec<f64> =
            splitting.iter().map(|t| y.iter().zip(&t.kc).map(|(y, kc)| y * kc).sum::<f64>() / t.e).collect();
        for (t, along) in splitting.iter().zip(alongs) {
            for &i in &t.modes {
                y[i] -= along;
            }
        }
        y
    }

    /// `K~^+ q` on the kept modes (zero on the dropped ones).
    fn solve_lifted(&self, q: &[f64]) -> Vec<f64> {
        let size = q.len();
        let l = |i: usize, j: usize| self.factor[i * size + j];
        let mut y: Vec<f64> =
            q.iter().zip(&self.kept).map(|(q, &kept)| if kept { *q } else { 0.0 }).collect();
        for i in 0..size {
            if self.kept[i] {
                let sum: f64 = (0..i).map(|j| l(i, j) * y[j]).sum();
                y[i] = (y[i] - sum) / l(i, i);
            }
        }
        for i in (0..size).rev() {
            if self.kept[i] {
                let sum: f64 = (i + 1..size).map(|j| l(j, i) * y[j]).sum();
                y[i] = (y[i] - sum) / l(i, i);
            }
        }
        y
    }
}

/// The dense Cholesky factor `L` (row-major, lower) of the symmetric positive semidefinite
/// `k`, dropping each mode whose pivot is at most [`DROPPED_PIVOT`] of the largest diagonal
/// entry (its row and column are left zero); returns `L` and which modes are kept.
fn factor_dropping(mut k: Vec<f64>, size: usize) -> (Vec<f64>, Vec<bool>) {
    let largest = (0..size).map(|i| k[i * size + i]).fold(0.0, f64::max);
    let mut kept = vec![true; size];
    for j in 0..size {
        let pivot = k[j * size + j] - (0..j).map(|p| k[j * size + p].powi(2)).sum::<f64>();
        if !(pivot > DROPPED_PIVOT * largest) {
            kept[j] = false;
            for i in j..size {
                k[i * size + j] = 0.0;
            }
            continue;
        }
        let d = pivot.sqrt();
        k[j * size + j] = d;
        for i in j + 1..size {
            let sum: f64 = (0..j).map(|p| k[i * size + p] * k[j * size + p]).sum();
            k[i * size + j] = (k[i * size + j] - sum) / d;
        }
    }
    // The upper triangle held K; the factor is the lower one.
    for i in 0..size {
        for j in i + 1..size {
            k[i * size + j] = 0.0;
        }
    }
    (k, kept)
}

/// A model's coarse correction, made when first asked for and remade when `S` changes: the
/// space once, `K` per step weight and vertex diagonal (the last two kept: a stabilized step
/// alternates two weights).
#[derive(Default)]
pub(crate) struct Coarse {
    /// `None` until asked for; then the space, or `None` for a body too small for one.
    space: Option<Option<Arc<CoarseSpace>>>,
    laplacian: Vec<f64>,
    /// The latest first.
    corrections: Vec<(f64, Vec<f64>, CoarseCorrection)>,
}

impl Coarse {
    /// The correction for `S` of step weight `a` and vertex diagonal `diagonal`
    /// ([`projective::matrix`](super::projective::matrix)); `None` for a body too small.
    pub(crate) fn correction(
        &mut self,
        model: &Model,
        topology: &Topology,
        a: f64,
        diagonal: &[f64],
    ) -> Option<&CoarseCorrection> {
        let space = self
            .space
            .get_or_insert_with(|| CoarseSpace::new(model, &model.translation_groups().0).map(Arc::new))
            .as_ref()?;
        match self.corrections.iter().position(|(weight, d, _)| *weight == a && d.as_slice() == diagonal) {
            Some(k) => {
                let found = self.corrections.remove(k);
                self.corrections.insert(0, found);
            }
            None => {
                if self.laplacian.is_empty() {
                    self.laplacian = super::projective::laplacian(model, topology);
                }
                let mut s = Vec::new();
                super::projective::matrix(model, topology, &self.laplacian, a, diagonal, &mut s);
                let correction = CoarseCorrection::new(space.clone(), topology, &s);
                self.corrections.truncate(1);
                self.corrections.insert(0, (a, diagonal.to_vec(), correction));
            }
        }
        self.corrections.first().map(|(_, _, correction)| correction)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use super::{CoarseCorrection, CoarseSpace, MODES};
    use crate::backend::topology::Topology;
    use crate::material::Material;
    use crate::mesh::TetMesh;
    use crate::model::Model;
    use rand::{RngExt, SeedableRng};

    /// A bar pinned at one end and its local/global matrix `S` (a = 0.1, mass / h^2 on the
    /// diagonal).
    fn bar() -> (Model, Topology, Vec<f64>) {
        let mut model = Model::empty([0.0; 3]);
        model
            .add_tet_body(
                &TetMesh::bar([40, 6, 6], [2.0, 0.3, 0.3]),
                &[Material::corotated(1e6, 0.3)],
                1000.0,
            )
            .unwrap();
        for v in 0..model.vertex_count() {
            model.pinned[v] = model.rest[v][0] < 1e-9;
        }
        let topology = Topology::new(&model);
        let laplacian = crate::backend::projective::laplacian(&model, &topology);
        let diagonal: Vec<f64> = model.masses.iter().map(|m| m * 900.0).collect();
        let mut s = Vec::new();
        crate::backend::projective::matrix(&model, &topology, &laplacian, 0.1, &diagonal, &mut s);
        (model, topology, s)
    }

    /// `S u` for the scalar `S` on the pattern, in each coordinate.
    fn s_times(topology: &Topology, s: &[f64], u: &[[f64; 3]]) -> Vec<[f64; 3]> {
        (0..u.len())
            .map(|v| {
                let slots = topology.row_offsets[v] as usize..topology.row_offsets[v + 1] as usize;
                slots.fold([0.0; 3], |acc, e| {
                    std::array::from_fn(|c| acc[c] + s[e] * u[topology.columns[e] as usize][c])
                })
            })
            .collect()
    }

    /// The clusters cover the free vertices, about `VERTICES_PER_CLUSTER` each, and `C`
    /// inverts `S` on the coarse space: for `u = Z y`, `C S u = u`, and the correction's share
    /// of `r . z` is `u . S u`.
    #[test]
    fn the_correction_inverts_s_on_its_space() {
        let (model, topology, s) = bar();
        let groups = model.translation_groups().0;
        let space = Arc::new(CoarseSpace::new(&model, &groups).expect("a bar of 2K vertices has clusters"));
        let free = model.pinned.iter().filter(|p| !**p).count();
        assert!((4..=16).contains(&space.clusters), "{} clusters for {free} free vertices", space.clusters);
        for v in 0..model.vertex_count() {
            assert_eq!(space.cluster[v].is_none(), model.pinned[v], "vertex {v}");
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let y: Vec<[f64; 3]> =
            (0..space.size()).map(|_| std::array::from_fn(|_| rng.random_range(-1.0..1.0))).collect();
        let u: Vec<[f64; 3]> = (0..model.vertex_count())
            .map(|v| match space.cluster[v] {
                Some(k) => std::array::from_fn(|c| {
                    (0..MODES).map(|m| space.weights[v][m] * y[MODES * k as usize + m][c]).sum()
                }),
                None => [0.0; 3],
            })
            .collect();
        let r = s_times(&topology, &s, &u);
        let correction = CoarseCorrection::new(space, &topology, &s);
        assert!(correction.kept.iter().all(|k| *k), "every cluster of a bar spans its modes");
        let mut z = vec![[0.0; 3]; u.len()];
        let rz = correction.add(&r, &mut z);
        let scale = u.iter().flatten().fold(0.0f64, |a, b| a.max(b.abs()));
        for (v, (z, u)) in z.iter().zip(&u).enumerate() {
            for c in 0..3 {
                assert!((z[c] - u[c]).abs() <= 1e-9 * scale, "vertex {v}: C S u = {z:?}, u = {u:?}");
            }
        }
        let energy: f64 = u.iter().zip(&r).map(|(u, r)| (0..3).map(|c| u[c] * r[c]).sum::<f64>()).sum();
        assert!((rz - energy).abs() <= 1e-9 * energy, "r . C r = {rz}, u . S u = {energy}");
    }

    /// Two free bars of `cells` and `size`, the second `apart` higher (they may overlap:
    /// separate meshes).
    pub(crate) fn free_bars(cells: [usize; 3], size: [f64; 3], apart: f64) -> Model {
        let mut model = Model::empty([0.0; 3]);
        let bar = TetMesh::bar(cells, size);
        for k in 0..2 {
            let raised: Vec<[f64; 3]> =
                bar.positions().iter().map(|p| [p[0], p[1] + apart * k as f64, p[2]]).collect();
            let mesh = TetMesh::new(raised, bar.tets().to_vec()).unwrap();
            model.add_tet_body(&mesh, &[Material::corotated(1e6, 0.3)], 1000.0).unwrap();
        }
        model
    }

    /// A cell over two free bars that overlap (separate meshes) gives a cluster per bar, each
    /// of the bar's translation group (one cluster over both would move them as one).
    #[test]
    fn clusters_keep_to_one_translation_group() {
        let model = free_bars([20, 4, 4], [2.0, 0.4, 0.4], 0.2);
        let (groups, _) = model.translation_groups();
        let space = CoarseSpace::new(&model, &groups).unwrap();
        let common = CoarseSpace::new(&model, &vec![0; groups.len()]).unwrap();
        let straddling = |space: &CoarseSpace| {
            (0..space.clusters)
                .filter(|&k| {
                    let of = |g: u32| {
                        (0..groups.len()).any(|v| space.cluster[v] == Some(k as u32) && groups[v] == g)
                    };
                    of(0) && of(1)
                })
                .count()
        };
        println!("{} clusters by cell and group, {} by cell alone", space.clusters, common.clusters);
        assert!(straddling(&common) > 0, "the test wants cells over both bars");
        assert_eq!(straddling(&space), 0);
        for v in 0..groups.len() {
            assert_eq!(space.group[space.cluster[v].unwrap() as usize], groups[v], "vertex {v}");
        }
    }

    /// A pile of free parts: the clusters come down to one per part where the parts outnumber
    /// twice the target (the cells widen no further than that), and a pile of more parts
    /// than [`MAX_CLUSTERS`](super::MAX_CLUSTERS) takes no coarse space.
    #[test]
    fn piles_of_free_parts_get_a_cluster_each_or_none() {
        let pile = |parts: usize| {
            let mut model = Model::empty([0.0; 3]);
            let cube = TetMesh::bar([3, 3, 3], [0.1; 3]);
            for k in 0..parts {
                let placed: Vec<[f64; 3]> =
                    cube.positions().iter().map(|p| [p[0] + 0.2 * k as f64, p[1], p[2]]).collect();
                model
                    .add_tet_body(
                        &TetMesh::new(placed, cube.tets().to_vec()).unwrap(),
                        &[Material::corotated(1e6, 0.3)],
                        1000.0,
                    )
                    .unwrap();
            }
            let (groups, _) = model.translation_groups();
            CoarseSpace::new(&model, &groups)
        };
        // 64 vertices a part: 40 parts make a target of 10 clusters.
        let space = pile(40).expect("a coarse space");
        assert_eq!(space.clusters, 40);
        assert!(pile(super::MAX_CLUSTERS + 1).is_none());
    }

    /// `K^+ q` as the GPU applies [`CoarseCorrection::inverse`]'s f32 values: `D q`, then each
    /// cluster's constant mode takes its group's `c_g^T q / e_g` (in f64).
    fn apply_inverse(inverse: &[f32], clusters: usize, q: &[f64]) -> Vec<f64> {
        let size = MODES * clusters;
        let (d, translations) = inverse.split_at(size * size);
        let mut y: Vec<f64> =
            d.chunks(size).map(|row| row.iter().zip(q).map(|(d, q)| *d as f64 * q).sum()).collect();
        let group = |c: usize| translations[MODES * c + 1];
        for c in (0..clusters).filter(|&c| group(c) >= 0.0) {
            let sum: f64 = (0..clusters).filter(|&l| group(l) == group(c)).map(|l| q[MODES * l]).sum();
            y[MODES * c] += translations[MODES * c] as f64 * sum;
        }
        y
    }

    /// Two free bars stiff at their step (`a L` 1e9 times their inertia): the GPU's f32 `K^+`
    /// keeps each bar's translation and the elastic part (what each bar's translation
    /// leaves) to f32's resolution where it splits each bar along its own translation; split
    /// along their common one alone, the elastic part comes out a thousand times worse.
    #[test]
    fn the_gpus_coarse_inverse_of_stiff_free_parts_keeps_their_elastic_parts() {
        let model = free_bars([20, 4, 4], [2.0, 0.4, 0.4], 1.0);
        let topology = Topology::new(&model);
        let laplacian = crate::backend::projective::laplacian(&model, &topology);
        let inertia: Vec<f64> = model.masses.iter().map(|m| m * 900.0).collect();
        let stiffest = topology.diagonal.iter().map(|&at| laplacian[at as usize]).fold(0.0, f64::max);
        let lightest = inertia.iter().copied().fold(f64::INFINITY, f64::min);
        let mut s = Vec::new();
        crate::backend::projective::matrix(
            &model,
            &topology,
            &laplacian,
            1e9 * lightest / stiffest,
            &inertia,
            &mut s,
        );
        let (groups, count) = model.translation_groups();
        assert_eq!(count, 2);
        let split =
            CoarseCorrection::new(Arc::new(CoarseSpace::new(&model, &groups).unwrap()), &topology, &s);
        let clusters = split.space.clusters;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let q: Vec<f64> = (0..MODES * clusters).map(|_| rng.random_range(-1.0..1.0)).collect();
        let exact = split.solve(&q);
        // What each bar's translation leaves of `y`.
        let elastic = |y: &[f64]| -> Vec<f64> {
            let mut y = y.to_vec();
            for t in &split.translations {
                let along = y.iter().zip(&t.kc).map(|(y, kc)| y * kc).sum::<f64>() / t.e;
                t.modes.iter().for_each(|&i| y[i] -= along);
            }
            y
        };
        let size = |p: &[f64]| p.iter().fold(0.0f64, |m, p| m.max(p.abs()));
        let distance = |p: &[f64], q: &[f64]| p.iter().zip(q).fold(0.0f64, |m, (p, q)| m.max((p - q).abs()));
        let exact_elastic = elastic(&exact);
        let scale = size(&exact_elastic);
        let off = |correction: &CoarseCorrection| {
            let y = apply_inverse(&correction.inverse(), correction.space.clusters, &q);
            // The same clusters (each keeps to one bar either way), so the same unknowns.
            assert_eq!(correction.space.cluster, split.space.cluster);
            assert!(
                distance(&y, &exact) <= 1e-5 * size(&exact),
                "{:e} of {:e}",
                distance(&y, &exact),
                size(&exact)
            );
            distance(&elastic(&y), &exact_elastic) / scale
        };
        let common = CoarseCorrection::new(
            Arc::new(CoarseSpace::new(&model, &vec![0; groups.len()]).unwrap()),
            &topology,
            &s,
        );
        let (split_off, common_off) = (off(&split), off(&common));
        println!(
            "{clusters} clusters; the elastic part ({:.1e} of the whole) off by {split_off:.1e} split per bar, {common_off:.1e} by the common translation",
            scale / size(&exact)
        );
        assert!(split_off <= 1e-4, "{split_off:e}");
        assert!(common_off >= 1e3 * split_off, "common {common_off:e}, split {split_off:e}");
    }

    /// A rank-deficient `K` (a cluster that does not span its modes) drops the dependent
    /// modes and still solves `K y = q` for `q` in its range, split along the translations
    /// or not (a constant mode among the dependent ones).
    #[test]
    fn a_singular_k_drops_its_dependent_modes() {
        let size = 2 * MODES;
        // K = B B^T with B 8 x 5: rank 5, the last three modes dependent.
        let b = [
            [1.0, 0.0, 2.0, 0.5, 0.0],
            [0.5, 1.0, 0.0, 0.0, 1.0],
            [0.0, 3.0, 1.0, 1.0, 0.0],
            [1.5, 1.0, 2.0, 0.0, 2.0],
            [1.0, 0.0, 1.0, 2.0, 1.0],
            [1.0, 4.0, 3.0, 1.5, 3.0],
            [2.5, 1.0, 2.0, 0.5, 2.0],
            [0.5, 1.0, 3.0, 2.5, 1.0],
        ];
        let k: Vec<f64> =
            (0..size * size).map(|e| (0..5).map(|j| b[e / size][j] * b[e % size][j]).sum()).collect();
        let space = Arc::new(CoarseSpace {
            cluster: Vec::new(),
            weights: Vec::new(),
            clusters: 2,
            group: vec![0; 2],
        });
        let correction = CoarseCorrection::from_k(space, k.clone());
        assert_eq!(correction.kept.iter().filter(|kept| !**kept).count(), 3);
        let x = [0.3, -1.0, 0.7, 0.2, 0.5, -0.4, 0.9, 0.1];
        let q: Vec<f64> = (0..size).map(|i| (0..size).map(|j| k[i * size + j] * x[j]).sum()).collect();
        let y = correction.solve(&q);
        for i in 0..size {
            let ky: f64 = (0..size).map(|j| k[i * size + j] * y[j]).sum();
            assert!((ky - q[i]).abs() <= 1e-12 * 100.0, "row {i}: K y = {ky}, q = {}", q[i]);
        }
    }
}
