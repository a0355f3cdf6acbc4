//! Stage `element`: per-element energy, corner gradients and Hessian blocks, evaluated at the
//! step objective's quadrature nodes. One invocation per element; no element writes outside
//! its own slots, so the pass is embarrassingly parallel and its sums deterministic.

use std::borrow::Cow;
use std::ops::Range;

use glam::{DMat3, DQuat, DVec3};
use rayon::prelude::*;

use crate::backend::topology::upper;
use crate::material::projective::{
    RotationSearch, closest_rotations, corotated_hessian_lanes, projective_lanes,
};
use crate::material::stable_neo_hookean::{stable_neo_hookean_hessian_lanes, stable_neo_hookean_lanes};
use crate::material::{CORNER_PAIRS, MaterialModel, Projection};
use crate::math::Mat9;
use crate::math::lanes::{self, Lane, Lanes, mat_lane};
use crate::model::Model;
use crate::objective::Node;

/// Elements per work item; fixed so the energy sum is reduced in the same order every run.
pub(crate) const CHUNK: usize = 256;

/// Every tet's last closest rotation at each quadrature node, tet by tet: the warm start of
/// the next evaluation of corotated and ARAP, which then converges in a Newton step or two on
/// SO(3) instead of four to eight from the identity. Other materials leave theirs alone.
#[derive(Clone, Debug, Default)]
pub(crate) struct Rotations {
    nodes: usize,
    values: Vec<DQuat>,
}

impl Rotations {
    /// The rotations of `tets` tets at `nodes` nodes (tet-major), reset to the identity when
    /// the node count changes.
    pub(crate) fn at_nodes(&mut self, tets: usize, nodes: usize) -> &mut [DQuat] {
        if self.nodes != nodes || self.values.len() != tets * nodes {
            self.nodes = nodes;
            self.values.clear();
            self.values.resize(tets * nodes, DQuat::IDENTITY);
        }
        &mut self.values
    }

    /// The rotations node by node (the GPU's layout).
    #[cfg(test)]
    pub(crate) fn node_major(&self) -> Vec<DQuat> {
        let tets = self.values.len() / self.nodes.max(1);
        (0..self.nodes).flat_map(|q| (0..tets).map(move |e| self.values[e * self.nodes + q])).collect()
    }
}

fn add9(block: &mut [f64; 9], add: &[f64; 9]) {
    for (b, a) in block.iter_mut().zip(add) {
        *b += a;
    }
}

/// `F = sum_a z_a beta_a^T` of a tet with corners `z` and shape gradients `beta`.
pub(crate) fn deformation_gradient(z: &[DVec3; 4], beta: &[DVec3; 4]) -> DMat3 {
    // Column j is sum_a z_a beta_a[j].
    DMat3::from_cols(
        z[0] * beta[0].x + z[1] * beta[1].x + z[2] * beta[2].x + z[3] * beta[3].x,
        z[0] * beta[0].y + z[1] * beta[1].y + z[2] * beta[2].y + z[3] * beta[3].y,
        z[0] * beta[0].z + z[1] * beta[1].z + z[2] * beta[2].z + z[3] * beta[3].z,
    )
}

pub(crate) fn point(x: &[[f64; 3]], start: &[[f64; 3]], v: u32, theta: f64) -> DVec3 {
    DVec3::from(x[v as usize]) * theta + DVec3::from(start[v as usize]) * (1.0 - theta)
}

/// Where the tets are evaluated: the positions at each quadrature node (see
/// [`node_positions`]) and the nodes; and how far the rotation-based models' closest
/// rotations go.
#[derive(Clone, Copy)]
struct At<'a> {
    positions: &'a [Cow<'a, [[f64; 3]]>],
    nodes: &'a [Node],
    search: RotationSearch,
}

/// Every vertex's position at each node, `theta x + (1 - theta) start` (the iterate itself at
/// theta = 1, which is the same bits): made once a pass rather than at each of a vertex's
/// corners.
fn node_positions<'a>(x: &'a [[f64; 3]], start: &[[f64; 3]], nodes: &[Node]) -> Vec<Cow<'a, [[f64; 3]]>> {
    nodes
        .iter()
        .map(|node| match node.theta {
            1.0 => Cow::Borrowed(x),
            theta => Cow::Owned((0..x.len() as u32).map(|v| point(x, start, v, theta).into()).collect()),
        })
        .collect()
}

/// Energy of tet `e`, accumulating `c theta grad` into `gradient` and
/// `c theta^2 hessian` into `blocks` when asked; `rotations` holds its warm starts, one per
/// node, and receives the new rotations.
fn tet(
    model: &Model,
    e: usize,
    at: &At,
    rotations: &mut [DQuat],
    mut gradient: Option<&mut [[f64; 3]]>,
    mut blocks: Option<(&mut [[f64; 9]], Projection)>,
) -> f64 {
    let At { positions, nodes, search } = *at;
    let tet = model.tets[e];
    let rest = &model.tet_rest[e];
    let material = &model.tet_material[e];
    let beta = rest.shape_gradients.map(DVec3::from);
    let mut energy = 0.0;
    for ((node, positions), rotation) in nodes.iter().zip(positions).zip(rotations) {
        let z = tet.map(|v| DVec3::from(positions[v as usize]));
        let f = deformation_gradient(&z, &beta);
        // One evaluation per node: the rotation-based models share one SVD among the three.
        // The Hessian blocks come in closed form where the model has one, else from dP/dF.
        let projection = blocks.as_ref().map(|(_, projection)| *projection);
        let direct = projection.and_then(|p| material.tet_hessian(&f, &beta, p));
        let mut k: Option<Mat9> = projection.filter(|_| direct.is_none()).map(|_| [[0.0; 9]; 9]);
        let tangent = projection.zip(k.as_mut());
        let (psi, stress) = material.evaluate(&f, rotation, search, gradient.is_some(), tangent);
        energy += node.weight * rest.volume * psi;
        if let (Some(g), Some(stress)) = (gradient.as_deref_mut(), stress) {
            let p = stress * (node.weight * node.theta * rest.volume);
            for a in 0..4 {
                let ga = p * beta[a];
                g[a] = (DVec3::from(g[a]) + ga).into();
            }
        }
        if let Some((h, _)) = blocks.as_mut() {
            let w = node.weight * node.theta * node.theta * rest.volume;
            let inner = match (&direct, &k) {
                // Row-major blocks: the transpose's columns are the block's rows.
                (Some(direct), _) => direct.map(|row| row.map(|b| (b.transpose() * w).to_cols_array())),
                (None, Some(k)) => tangent_blocks(k, &beta, w),
                (None, None) => unreachable!("a Hessian is asked for"),
            };
            add_tet_blocks(&inner, h);
        }
    }
    energy
}

/// The Hessian blocks `(a, b)` of corners 0-2 (both triangles) of a tet with shape gradients
/// `beta` and stress derivative `k`, times `w`: `H_ab[i][kk] = w sum_jl beta_a[j]
/// K[3 i + j][3 kk + l] beta_b[l]`.
fn tangent_blocks(k: &Mat9, beta: &[DVec3; 4], w: f64) -> [[[f64; 9]; 3]; 3] {
    // t[r][b][kk] = sum_l K[r][3 kk + l] beta_b[l], b < 3.
    let mut t = [[[0.0; 3]; 3]; 9];
    for r in 0..9 {
        for b in 0..3 {
            for kk in 0..3 {
                t[r][b][kk] =
                    k[r][3 * kk] * beta[b].x + k[r][3 * kk + 1] * beta[b].y + k[r][3 * kk + 2] * beta[b].z;
            }
        }
    }
    // H_ab[i][kk] = w sum_j beta_a[j] t[3 i + j][b][kk] for a <= b < 3; H_ba = H_ab^T.
    let mut inner = [[[0.0; 9]; 3]; 3];
    for a in 0..3 {
        for b in a..3 {
            for i in 0..3 {
                for kk in 0..3 {
                    let s = beta[a].x * t[3 * i][b][kk]
                        + beta[a].y * t[3 * i + 1][b][kk]
                        + beta[a].z * t[3 * i + 2][b][kk];
                    inner[a][b][3 * i + kk] = w * s;
                    inner[b][a][3 * kk + i] = w * s;
                }
            }
        }
    }
    inner
}

/// Adds a tet's ten upper Hessian blocks to `h`, given the blocks `(a, b)` of corners 0-2
/// (both triangles): the shape gradients sum to zero, so corner 3's blocks are sums of those,
/// `H_a3 = -sum_b H_ab` and `H_33 = -sum_a H_a3`.
pub(crate) fn add_tet_blocks(inner: &[[[f64; 9]; 3]; 3], h: &mut [[f64; 9]]) {
    let mut last = [0.0; 9];
    for a in 0..3 {
        let mut column = [0.0; 9];
        for block in &inner[a] {
            for (c, value) in column.iter_mut().zip(block) {
                *c -= value;
            }
        }
        for b in a..3 {
            add9(&mut h[upper(a, b, 4)], &inner[a][b]);
        }
        add9(&mut h[upper(a, 3, 4)], &column);
        for c in 0..9 {
            last[c] -= column[c];
        }
    }
    add9(&mut h[upper(3, 3, 4)], &last);
}

/// Energy of spring `s`, with its gradient and Hessian blocks as for [`tet`].
fn spring(
    model: &Model,
    s: usize,
    x: &[[f64; 3]],
    start: &[[f64; 3]],
    nodes: &[Node],
    mut gradient: Option<&mut [[f64; 3]]>,
    mut blocks: Option<(&mut [[f64; 9]], Projection)>,
) -> f64 {
    let [i, j] = model.springs[s];
    let law = &model.spring_law[s];
    let mut energy = 0.0;
    for node in nodes {
        let d = point(x, start, j, node.theta) - point(x, start, i, node.theta);
        energy += node.weight * law.energy(d);
        if let Some(g) = gradient.as_deref_mut() {
            let gd = law.gradient(d) * (node.weight * node.theta);
            g[0] = (DVec3::from(g[0]) - gd).into();
            g[1] = (DVec3::from(g[1]) + gd).into();
        }
        if let Some((h, projection)) = blocks.as_mut() {
            let hd = law.hessian(d, *projection) * (node.weight * node.theta * node.theta);
            let rows = crate::math::to_rows(&hd);
            // Upper blocks (0,0), (0,1), (1,1) of [[H, -H], [-H, H]].
            for (b, sign) in [(0, 1.0), (1, -1.0), (2, 1.0)] {
                for r in 0..3 {
                    for c in 0..3 {
                        h[b][3 * r + c] += sign * rows[r][c];
                    }
                }
            }
        }
    }
    energy
}

/// Runs `kernel` over `count` elements in fixed chunks (a range each) and sums the energies
/// in chunk order.
fn energy_pass(count: usize, kernel: impl Fn(Range<usize>) -> f64 + Sync) -> f64 {
    let partial: Vec<f64> = (0..count.div_ceil(CHUNK))
        .into_par_iter()
        .map(|c| kernel(c * CHUNK..((c + 1) * CHUNK).min(count)))
        .collect();
    partial.iter().sum()
}

/// The warm rotations of the tets in `range` at `nodes` nodes: a copy of `warm`'s, or the
/// identity without.
fn chunk_rotations(warm: Option<&[DQuat]>, range: Range<usize>, nodes: usize) -> Vec<DQuat> {
    match warm {
        Some(warm) => warm[range.start * nodes..range.end * nodes].to_vec(),
        None => vec![DQuat::IDENTITY; range.len() * nodes],
    }
}

/// Runs `kernel` over `count` elements of `arity` corners in fixed chunks, handing each chunk
/// its range, its gradient and upper Hessian-block slots (zeroed first; empty when `blocks` is
/// empty, for passes without Hessians) and its `per_element` rotations per element (from
/// `rotations`, updated, or the identity); sums the energies in chunk order.
fn derivative_pass(
    count: usize,
    arity: usize,
    gradients: &mut [[f64; 3]],
    blocks: &mut [[f64; 9]],
    per_element: usize,
    rotations: Option<&mut [DQuat]>,
    kernel: impl Fn(Range<usize>, &mut [[f64; 3]], &mut [[f64; 9]], &mut [DQuat]) -> f64 + Sync,
) -> f64 {
    let chunks = count.div_ceil(CHUNK);
    let blocks_per = if blocks.is_empty() { 0 } else { upper(arity - 1, arity - 1, arity) + 1 };
    let mut block_chunks: Vec<&mut [[f64; 9]]> = if blocks_per == 0 {
        (0..chunks).map(|_| &mut [][..]).collect()
    } else {
        blocks[..blocks_per * count].chunks_mut(blocks_per * CHUNK).collect()
    };
    let mut rotation_chunks: Vec<Option<&mut [DQuat]>> = match rotations {
        Some(r) if per_element > 0 => r.chunks_mut(per_element * CHUNK).map(Some).collect(),
        _ => (0..chunks).map(|_| None).collect(),
    };
    let partial: Vec<f64> = gradients[..arity * count]
        .par_chunks_mut(arity * CHUNK)
        .zip(block_chunks.par_iter_mut())
        .zip(rotation_chunks.par_iter_mut())
        .enumerate()
        .map(|(c, ((g, h), r))| {
            g.fill([0.0; 3]);
            h.fill([0.0; 9]);
            let range = c * CHUNK..((c + 1) * CHUNK).min(count);
            match r {
                Some(r) => kernel(range, g, h, r),
                None => kernel(range.clone(), g, h, &mut chunk_rotations(None, range, per_element)),
            }
        })
        .collect();
    partial.iter().sum()
}

/// Energies of the tets in `range` (with `gradient`, their corner gradients; with `blocks`,
/// their Hessian blocks), `rotations` and the output slots being the range's own. Runs of four
/// tets of one [`LaneModel`] go through [`lane_tets`] unless a projected Hessian is asked for.
fn tets(
    model: &Model,
    range: Range<usize>,
    at: &At,
    rotations: &mut [DQuat],
    mut gradient: Option<&mut [[f64; 3]]>,
    mut blocks: Option<(&mut [[f64; 9]], Projection)>,
) -> f64 {
    let k = at.nodes.len();
    let kind = |e: usize| LaneModel::of(model.tet_material[e].model());
    // The lane kernel forms true Hessians only (a projected one needs the SVD).
    let true_hessian = blocks.as_ref().is_none_or(|(_, p)| *p == Projection::None);
    let (first, mut sum) = (range.start, 0.0);
    let mut e = first;
    while e < range.end {
        let local = e - first;
        let lanes = kind(e).filter(|&lane_model| {
            true_hessian && e + LANES <= range.end && (e..e + LANES).all(|e| kind(e) == Some(lane_model))
        });
        let count = if lanes.is_some() { LANES } else { 1 };
        let r = &mut rotations[k * local..k * (local + count)];
        let g = gradient.as_deref_mut().map(|g| &mut g[4 * local..4 * (local + count)]);
        let h = blocks.as_mut().map(|(h, p)| (&mut h[10 * local..10 * (local + count)], *p));
        sum += match lanes {
            Some(kind) => {
                let h = h.map(|(h, _)| h);
                lane_tets(model, at, Batch { first: e, kind, rotations: r, gradient: g, blocks: h })
            }
            None => tet(model, e, at, r, g, h),
        };
        e += count;
    }
    sum
}

/// Tets evaluated together by [`lane_tets`].
const LANES: usize = 4;

/// The models [`lane_tets`] evaluates, four tets of one of them at a time.
#[derive(Clone, Copy, Debug, PartialEq)]
enum LaneModel {
    /// Corotated and ARAP: the closest rotation, the projective form and
    /// [`corotated_hessian_lanes`].
    Rotation,
    /// [`stable_neo_hookean_lanes`] and its Hessian.
    StableNeoHookean,
}

impl LaneModel {
    fn of(model: MaterialModel) -> Option<LaneModel> {
        match model {
            MaterialModel::Corotated | MaterialModel::Arap => Some(LaneModel::Rotation),
            MaterialModel::StableNeoHookean => Some(LaneModel::StableNeoHookean),
            _ => None,
        }
    }
}

/// `LANES` tets of one [`LaneModel`] from `first`, with their rotations (`k` per tet at `k`
/// nodes) and, when asked, their corner-gradient and (true) Hessian-block slots.
struct Batch<'a> {
    first: usize,
    kind: LaneModel,
    rotations: &'a mut [DQuat],
    gradient: Option<&'a mut [[f64; 3]]>,
    blocks: Option<&'a mut [[f64; 9]]>,
}

/// [`tet`] with true Hessian blocks or none for a batch of tets, one per lane: their energies,
/// corner gradients and Hessian blocks (and the rotation-based models' closest rotations)
/// computed together.
fn lane_tets(model: &Model, at: &At, batch: Batch) -> f64 {
    lane_tets_on(LaneCode::best(), model, at, batch)
}

/// The compiled forms of the lane kernel. Only [`LaneCode::best`] and
/// [`LaneCode::available`] make them, after run-time detection, so that the CPU runs each
/// one it is given.
#[derive(Clone, Copy, Debug, PartialEq)]
enum LaneCode {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512Vl,
}

impl LaneCode {
    /// Those this CPU runs, the fastest last.
    fn available() -> Vec<LaneCode> {
        #[allow(unused_mut)]
        let mut codes = vec![LaneCode::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                codes.push(LaneCode::Avx2);
                if std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                {
                    codes.push(LaneCode::Avx512Vl);
                }
            }
        }
        codes
    }

    fn best() -> LaneCode {
        static BEST: std::sync::OnceLock<LaneCode> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| *LaneCode::available().last().expect("the portable lanes run anywhere"))
    }
}

/// [`lane_tets`] compiled as `code` says.
fn lane_tets_on(code: LaneCode, model: &Model, at: &At, batch: Batch) -> f64 {
    // One compiled kernel per model and output: all in one, the Hessian's temporaries spilled
    // the gradient pass's registers too.
    fn run<const ROTATION: bool, const HESSIAN: bool>(
        code: LaneCode,
        model: &Model,
        at: &At,
        batch: Batch,
    ) -> f64 {
        match code {
            LaneCode::Portable => lane_tets_portable::<ROTATION, HESSIAN>(model, at, batch),
            // SAFETY: a `LaneCode` names only instructions the CPU was found to have.
            #[cfg(target_arch = "x86_64")]
            LaneCode::Avx2 => unsafe { lane_tets_avx2::<ROTATION, HESSIAN>(model, at, batch) },
            #[cfg(target_arch = "x86_64")]
            LaneCode::Avx512Vl => unsafe { lane_tets_avx512vl::<ROTATION, HESSIAN>(model, at, batch) },
        }
    }
    match (batch.kind == LaneModel::Rotation, batch.blocks.is_some()) {
        (true, false) => run::<true, false>(code, model, at, batch),
        (true, true) => run::<true, true>(code, model, at, batch),
        (false, false) => run::<false, false>(code, model, at, batch),
        (false, true) => run::<false, true>(code, model, at, batch),
    }
}

/// [`lane_tets_with`] compiled for AVX2, its lanes an AVX register.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn lane_tets_avx2<const ROTATION: bool, const HESSIAN: bool>(model: &Model, at: &At, batch: Batch) -> f64 {
    lane_tets_with::<lanes::avx::Avx, ROTATION, HESSIAN>(model, at, batch)
}

/// [`lane_tets_avx2`] with AVX-512VL's encodings: the same four-lane AVX registers, but 32 of
/// them rather than 16, so that fewer of the kernel's values are spilled (the same bits).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f,avx512vl")]
fn lane_tets_avx512vl<const ROTATION: bool, const HESSIAN: bool>(
    model: &Model,
    at: &At,
    batch: Batch,
) -> f64 {
    lane_tets_with::<lanes::avx::Avx, ROTATION, HESSIAN>(model, at, batch)
}

/// [`lane_tets_with`] on plain lanes, for any CPU.
fn lane_tets_portable<const ROTATION: bool, const HESSIAN: bool>(
    model: &Model,
    at: &At,
    batch: Batch,
) -> f64 {
    lane_tets_with::<Lanes<LANES>, ROTATION, HESSIAN>(model, at, batch)
}

/// The lane kernel for rotation-based tets (`ROTATION`) or stable neo-Hookean ones, with
/// Hessian blocks (`HESSIAN`, which `batch` then has room for) or without, on lanes `L`.
/// Loops rather than closures over the lanes, in the kernel and all it calls: a closure is
/// compiled without the target features of the kernel around it (see `math::lanes::avx`).
#[inline(always)]
fn lane_tets_with<L: Lane<LANES>, const ROTATION: bool, const HESSIAN: bool>(
    model: &Model,
    at: &At,
    batch: Batch,
) -> f64 {
    let Batch { first, kind: _, rotations, mut gradient, blocks } = batch;
    let mut blocks = blocks.filter(|_| HESSIAN);
    let At { positions, nodes, search } = *at;
    let k = nodes.len();
    let (mut beta_lanes, mut rest_lanes) = ([[[0.0; LANES]; 3]; 4], [[0.0; LANES]; 3]);
    for l in 0..LANES {
        let rest = &model.tet_rest[first + l];
        for (beta, gradient) in beta_lanes.iter_mut().zip(&rest.shape_gradients) {
            for (b, g) in beta.iter_mut().zip(gradient) {
                b[l] = *g;
            }
        }
        rest_lanes[0][l] = rest.volume;
        (rest_lanes[1][l], rest_lanes[2][l]) = model.tet_material[first + l].lane_moduli();
    }
    let mut beta = [[L::splat(0.0); 3]; 4];
    for (beta, lanes) in beta.iter_mut().zip(&beta_lanes) {
        for (b, lanes) in beta.iter_mut().zip(lanes) {
            *b = L::from_array(*lanes);
        }
    }
    let [volume, mu, lambda] = rest_lanes;
    let (volume, mu, lambda) = (L::from_array(volume), L::from_array(mu), L::from_array(lambda));
    let mut energy = L::splat(0.0);
    for (q, node) in nodes.iter().enumerate() {
        // Dereferenced once: each index through the `Cow` tests which it holds.
        let positions: &[[f64; 3]] = &positions[q];
        let mut corner_lanes = [[[0.0; LANES]; 3]; 4];
        for l in 0..LANES {
            for (a, &v) in model.tets[first + l].iter().enumerate() {
                for c in 0..3 {
                    corner_lanes[a][c][l] = positions[v as usize][c];
                }
            }
        }
        let mut z = [[L::splat(0.0); 3]; 4];
        for (z, lanes) in z.iter_mut().zip(&corner_lanes) {
            for (z, lanes) in z.iter_mut().zip(lanes) {
                *z = L::from_array(*lanes);
            }
        }
        // Column j of F is sum_a z_a beta_a[j].
        let f = lanes::mat3s!(|j, c| z[0][c] * beta[0][j]
            + z[1][c] * beta[1][j]
            + z[2][c] * beta[2][j]
            + z[3][c] * beta[3][j]);
        let corners = [beta[0], beta[1], beta[2]];
        let (psi, stress, hessian) = if ROTATION {
            let mut warm = [DQuat::IDENTITY; LANES];
            for (l, w) in warm.iter_mut().enumerate() {
                *w = rotations[k * l + q];
            }
            // A Hessian needs the closest rotation itself (as `Elastic::evaluate`).
            let search = if HESSIAN { RotationSearch::Converged } else { search };
            let (warm, r) = closest_rotations(&f, warm, search);
            for (l, w) in warm.into_iter().enumerate() {
                rotations[k * l + q] = w;
            }
            let (psi, stress) = projective_lanes(mu, lambda, &f, &r);
            let hessian =
                if HESSIAN { Some(corotated_hessian_lanes(mu, lambda, &f, &r, &corners)) } else { None };
            (psi, stress, hessian)
        } else {
            let (psi, stress) = stable_neo_hookean_lanes(mu, lambda, &f);
            let hessian = if HESSIAN {
                Some(([true; LANES], stable_neo_hookean_hessian_lanes(mu, lambda, &f, &corners)))
            } else {
                None
            };
            (psi, stress, hessian)
        };
        energy += volume * node.weight * psi;
        if let Some(g) = gradient.as_deref_mut() {
            let scale = volume * (node.weight * node.theta);
            let p = lanes::mat3s!(|c, k| stress[c][k] * scale);
            for (a, beta) in beta.iter().enumerate() {
                let ga = lanes::mat_vec(&p, beta);
                let ga = [ga[0].to_array(), ga[1].to_array(), ga[2].to_array()];
                for l in 0..LANES {
                    for c in 0..3 {
                        g[4 * l + a][c] += ga[c][l];
                    }
                }
            }
        }
        if let (Some(h), Some((valid, upper))) = (blocks.as_deref_mut(), hessian) {
            let scale = (volume * (node.weight * node.theta * node.theta)).to_array();
            let mut upper_lanes = [[[[0.0; LANES]; 3]; 3]; 6];
            for (lanes, block) in upper_lanes.iter_mut().zip(&upper) {
                for (lanes, column) in lanes.iter_mut().zip(block) {
                    for (lanes, x) in lanes.iter_mut().zip(column) {
                        *lanes = x.to_array();
                    }
                }
            }
            for l in 0..LANES {
                let e = first + l;
                let w = scale[l];
                let inner = if valid[l] {
                    let mut inner = [[[0.0; 9]; 3]; 3];
                    for (block, &(a, b)) in upper_lanes.iter().zip(&CORNER_PAIRS) {
                        for i in 0..3 {
                            for kk in 0..3 {
                                let value = w * block[kk][i][l];
                                inner[a][b][3 * i + kk] = value;
                                inner[b][a][3 * kk + i] = value;
                            }
                        }
                    }
                    inner
                } else {
                    // A flat or half-inverted corotated tet: the tangent from the eigensystem.
                    let k = model.tet_material[e].stress_derivative(&mat_lane(&f, l), Projection::None);
                    let beta = model.tet_rest[e].shape_gradients.map(DVec3::from);
                    tangent_blocks(&k, &beta, w)
                };
                add_tet_blocks(&inner, &mut h[10 * l..10 * (l + 1)]);
            }
        }
    }
    energy.sum()
}

/// Sum of all element energies at the nodes (no derivatives): the line-search pass. The
/// rotation-based models start from `warm` (the iterate's rotations), which stays as it is.
pub(crate) fn energy(
    model: &Model,
    x: &[[f64; 3]],
    start: &[[f64; 3]],
    nodes: &[Node],
    warm: Option<&Rotations>,
) -> f64 {
    let k = nodes.len();
    let warm = warm.filter(|w| w.nodes == k && w.values.len() == k * model.tets.len());
    let positions = node_positions(x, start, nodes);
    energy_pass(model.tets.len(), |range| {
        let mut rotations = chunk_rotations(warm.map(|w| &w.values[..]), range.clone(), k);
        let at = At { positions: &positions, nodes, search: RotationSearch::Converged };
        tets(model, range, &at, &mut rotations, None, None)
    }) + spring_energy(model, x, start, nodes)
}

/// Sum of the springs' energies at the nodes.
pub(crate) fn spring_energy(model: &Model, x: &[[f64; 3]], start: &[[f64; 3]], nodes: &[Node]) -> f64 {
    energy_pass(model.springs.len(), |range| {
        range.map(|s| spring(model, s, x, start, nodes, None, None)).sum()
    })
}

/// Element energies plus corner gradients (slots as in `Topology`) and, when `projection` is
/// given, Hessian blocks (not touched otherwise, and may be empty). Output slots are
/// overwritten. The rotation-based models start from `rotations` and leave theirs there (or
/// start from the identity without), searched as far as `search` says (to convergence where
/// Hessian blocks are asked for).
#[allow(clippy::too_many_arguments)]
pub(crate) fn derivatives(
    model: &Model,
    x: &[[f64; 3]],
    start: &[[f64; 3]],
    nodes: &[Node],
    projection: Option<Projection>,
    rotations: Option<&mut Rotations>,
    search: RotationSearch,
    corner_gradients: &mut [[f64; 3]],
    element_blocks: &mut [[f64; 9]],
) -> f64 {
    let nt = model.tets.len();
    let k = nodes.len();
    let (tet_gradients, spring_gradients) = corner_gradients.split_at_mut(4 * nt);
    let (tet_blocks, spring_blocks) =
        if projection.is_some() { element_blocks.split_at_mut(10 * nt) } else { (&mut [][..], &mut [][..]) };
    let rotations = rotations.map(|r| r.at_nodes(nt, k));
    let positions = node_positions(x, start, nodes);
    derivative_pass(nt, 4, tet_gradients, tet_blocks, k, rotations, |range, g, h, r| {
        let at = At { positions: &positions, nodes, search };
        tets(model, range, &at, r, Some(g), projection.map(|p| (h, p)))
    }) + spring_derivatives(model, x, start, nodes, projection, spring_gradients, spring_blocks)
}

/// The springs' part of [`derivatives`]: their energy, corner gradients and (with a
/// projection) Hessian blocks, in the springs' own slots (from `4T` and `10T`).
pub(crate) fn spring_derivatives(
    model: &Model,
    x: &[[f64; 3]],
    start: &[[f64; 3]],
    nodes: &[Node],
    projection: Option<Projection>,
    spring_gradients: &mut [[f64; 3]],
    spring_blocks: &mut [[f64; 9]],
) -> f64 {
    derivative_pass(model.springs.len(), 2, spring_gradients, spring_blocks, 0, None, |range, g, h, _| {
        let first = range.start;
        range
            .map(|s| {
                let (local, h) = (s - first, &mut *h);
                let blocks = projection.map(|p| (&mut h[3 * local..3 * (local + 1)], p));
                spring(model, s, x, start, nodes, Some(&mut g[2 * local..2 * (local + 1)]), blocks)
            })
            .sum()
    })
}

#[cfg(test)]
mod tests {
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::material::Material;
    use crate::mesh::TetMesh;

    /// The lane kernel is [`tet`] lane by lane: on a bar whose materials repeat five
    /// corotated, four ARAP, five stable neo-Hookean and one StVK tet (so runs of four of each
    /// lane model alternate with single tets), at a
    /// random deformation that inverts some tets, from cold and from warm rotations, searched
    /// to convergence and by one step, the energies, corner gradients and rotations equal the
    /// one-tet-at-a-time evaluation.
    #[test]
    fn lanes_match_one_tet_at_a_time() {
        let mut rng = ChaCha8Rng::seed_from_u64(31);
        let mut model = Model::empty([0.0; 3]);
        let materials: Vec<Material> = (0..270)
            .map(|e| match e % 15 {
                0..5 => Material::corotated(2e5, 0.3),
                5..9 => Material::arap(1e5, 0.3),
                9..14 => Material::stable_neo_hookean(3e5, 0.4),
                _ => Material::stvk(1e5, 0.3),
            })
            .collect();
        model.add_tet_body(&TetMesh::bar([6, 3, 3], [0.6, 0.3, 0.3]), &materials, 1000.0).unwrap();
        let moved = |scale: f64, rng: &mut ChaCha8Rng| -> Vec<[f64; 3]> {
            model.rest.iter().map(|p| p.map(|c| c + rng.random_range(-scale..scale))).collect()
        };
        let (start, x) = (moved(0.01, &mut rng), moved(0.06, &mut rng));
        let inverted = (0..model.tets.len())
            .filter(|&e| {
                let z = model.tets[e].map(|v| DVec3::from(x[v as usize]));
                (z[1] - z[0]).cross(z[2] - z[0]).dot(z[3] - z[0]) * model.tet_rest[e].volume < 0.0
            })
            .count();
        assert!(inverted > 0, "the deformation inverts no tet");
        let nodes = [Node { weight: 0.5, theta: 0.5 }, Node { weight: 0.5, theta: 1.0 }];
        let nt = model.tets.len();
        for (search, warm) in [
            (RotationSearch::Converged, false),
            (RotationSearch::Converged, true),
            (RotationSearch::OneStep, false),
            (RotationSearch::OneStep, true),
        ] {
            let mut rotations = Rotations::default();
            if warm {
                // Warm starts near, not at, the answers.
                derivatives(
                    &model,
                    &start,
                    &start,
                    &nodes,
                    None,
                    Some(&mut rotations),
                    RotationSearch::Converged,
                    &mut vec![[0.0; 3]; 4 * nt],
                    &mut [],
                );
            }
            let before = rotations.at_nodes(nt, nodes.len()).to_vec();
            let mut gradients = vec![[0.0; 3]; 4 * nt];
            let energy = derivatives(
                &model,
                &x,
                &start,
                &nodes,
                None,
                Some(&mut rotations),
                search,
                &mut gradients,
                &mut [],
            );
            let lane_rotations = rotations.at_nodes(nt, nodes.len()).to_vec();
            let lane_energy = super::energy(
                &model,
                &x,
                &start,
                &nodes,
                Some(&Rotations { nodes: 2, values: before.clone() }),
            );
            let (mut expected, mut scale) = (0.0, 0.0_f64);
            let positions = node_positions(&x, &start, &nodes);
            for e in 0..nt {
                let mut r = before[2 * e..2 * e + 2].to_vec();
                let mut g = [[0.0; 3]; 4];
                let at = At { positions: &positions, nodes: &nodes, search };
                let psi = tet(&model, e, &at, &mut r, Some(&mut g), None);
                expected += psi;
                for ga in g {
                    scale = scale.max(DVec3::from(ga).abs().max_element());
                }
                for a in 0..4 {
                    let gap = (DVec3::from(g[a]) - DVec3::from(gradients[4 * e + a])).abs().max_element();
                    assert!(
                        gap <= 1e-13 * scale.max(1e-300),
                        "tet {e} corner {a}: gradient off by {gap:e} ({search:?}, warm {warm})"
                    );
                }
                for (q, (one, lane)) in r.iter().zip(&lane_rotations[2 * e..2 * e + 2]).enumerate() {
                    assert!(
                        (*one - *lane).length() < 1e-14,
                        "tet {e} node {q}: rotation {one} against {lane}"
                    );
                }
            }
            // `energy` converges the rotations whatever the derivatives' search.
            let converged = search == RotationSearch::Converged;
            for value in [energy].into_iter().chain(converged.then_some(lane_energy)) {
                assert!(
                    (value - expected).abs() <= 1e-13 * expected.abs(),
                    "energy {value} against {expected} ({search:?}, warm {warm})"
                );
            }
            assert_hessians_match(&model, &x, &start, &nodes, &before);
        }
    }

    /// The true Hessian blocks of [`derivatives`] (lanes for runs of rotation-based tets)
    /// equal [`tet`]'s (the 9x9 tangent contracted), from the rotations `warm`.
    fn assert_hessians_match(
        model: &Model,
        x: &[[f64; 3]],
        start: &[[f64; 3]],
        nodes: &[Node],
        warm: &[DQuat],
    ) {
        let (nt, k) = (model.tets.len(), nodes.len());
        let mut rotations = Rotations { nodes: k, values: warm.to_vec() };
        let mut blocks = vec![[0.0; 9]; 10 * nt];
        let positions = node_positions(x, start, nodes);
        let mut gradients = vec![[0.0; 3]; 4 * nt];
        derivatives(
            model,
            x,
            start,
            nodes,
            Some(Projection::None),
            Some(&mut rotations),
            RotationSearch::Converged,
            &mut gradients,
            &mut blocks,
        );
        for e in 0..nt {
            let mut r = warm[k * e..k * (e + 1)].to_vec();
            let mut h = [[0.0; 9]; 10];
            let at = At { positions: &positions, nodes, search: RotationSearch::Converged };
            tet(model, e, &at, &mut r, None, Some((&mut h, Projection::None)));
            let scale = h.iter().flatten().fold(0.0_f64, |m, v| m.max(v.abs()));
            for (b, (one, lane)) in h.iter().zip(&blocks[10 * e..10 * (e + 1)]).enumerate() {
                let gap = one.iter().zip(lane).fold(0.0_f64, |m, (p, q)| m.max((p - q).abs()));
                assert!(gap <= 1e-12 * scale, "tet {e} block {b}: off by {gap:e} of {scale:e}");
            }
        }
    }

    /// A reflected bar: every tet's `F` is `diag(1, 1, -1)`, where the rotation's derivative is
    /// singular; the lane kernel hands each such tet to the eigensystem, as [`tet`] does.
    #[test]
    fn lanes_hand_flat_tets_to_the_eigensystem() {
        let mut model = Model::empty([0.0; 3]);
        model
            .add_tet_body(&TetMesh::bar([2, 1, 1], [0.2, 0.1, 0.1]), &[Material::corotated(2e5, 0.3)], 1000.0)
            .unwrap();
        let reflected: Vec<[f64; 3]> = model.rest.iter().map(|p| [p[0], p[1], -p[2]]).collect();
        let e = 3;
        let f = deformation_gradient(
            &model.tets[e].map(|v| DVec3::from(reflected[v as usize])),
            &model.tet_rest[e].shape_gradients.map(DVec3::from),
        );
        let mut k = [[0.0; 9]; 9];
        let (_, r) = crate::material::projective::closest_rotation(&f, DQuat::IDENTITY);
        assert!(
            !model.tet_material[e].corotated_tangent(&f, &r, &mut k),
            "F = {f}: the tangent is not refused"
        );
        let nodes = [Node { weight: 1.0, theta: 1.0 }];
        assert_hessians_match(
            &model,
            &reflected,
            &reflected,
            &nodes,
            &vec![DQuat::IDENTITY; model.tets.len()],
        );
    }

    /// Every compiled form of the lane kernel this CPU runs (AVX2, AVX2 with AVX-512VL's 32
    /// registers) gives the portable kernel's bits: all round each operation as f64 does.
    /// Four tets of each lane model, a deformation that inverts some, every output.
    #[test]
    fn lane_codes_give_the_portable_bits() {
        let codes = LaneCode::available();
        if codes.len() == 1 {
            eprintln!("skipped: this CPU runs only the portable lanes");
            return;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(32);
        let mut model = Model::empty([0.0; 3]);
        let materials: Vec<Material> =
            (0..30)
                .map(|e| {
                    if e < 15 {
                        Material::corotated(2e5, 0.3)
                    } else {
                        Material::stable_neo_hookean(3e5, 0.4)
                    }
                })
                .collect();
        model.add_tet_body(&TetMesh::bar([3, 1, 2], [0.3, 0.1, 0.2]), &materials, 1000.0).unwrap();
        let moved: Vec<[f64; 3]> =
            model.rest.iter().map(|p| p.map(|c| c + rng.random_range(-0.06..0.06))).collect();
        let nodes = [Node { weight: 0.5, theta: 0.5 }, Node { weight: 0.5, theta: 1.0 }];
        let positions = node_positions(&moved, &model.rest, &nodes);
        let warm: Vec<DQuat> = (0..8)
            .map(|_| DQuat::from_scaled_axis(DVec3::new(rng.random_range(-0.3..0.3), 0.1, -0.2)).normalize())
            .collect();
        for (first, rotation) in [(0, true), (16, false)] {
            for search in [RotationSearch::Converged, RotationSearch::OneStep] {
                let at = At { positions: &positions, nodes: &nodes, search };
                let run = |code: LaneCode, hessian: bool| {
                    let (mut rotations, mut g, mut h) = (warm.clone(), [[0.0; 3]; 16], [[0.0; 9]; 40]);
                    let batch = Batch {
                        first,
                        kind: if rotation { LaneModel::Rotation } else { LaneModel::StableNeoHookean },
                        rotations: &mut rotations,
                        gradient: Some(&mut g),
                        blocks: hessian.then_some(&mut h[..]),
                    };
                    let energy = lane_tets_on(code, &model, &at, batch);
                    (
                        energy.to_bits(),
                        rotations,
                        g.map(|g| g.map(f64::to_bits)),
                        h.map(|h| h.map(f64::to_bits)),
                    )
                };
                for hessian in [false, true] {
                    let portable = run(LaneCode::Portable, hessian);
                    assert!(
                        portable.0 != 0.0_f64.to_bits() && portable.2 != [[0; 3]; 16],
                        "nothing was evaluated"
                    );
                    for &code in &codes[1..] {
                        let compiled = run(code, hessian);
                        assert_eq!(
                            compiled, portable,
                            "{code:?}, first tet {first}, {search:?}, Hessian {hessian}"
                        );
                    }
                }
            }
        }
    }
}
