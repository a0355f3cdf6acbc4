//! Stage `element`: per-element energy, corner gradients and Hessian blocks, evaluated at the
//! step objective's quadrature nodes. One invocation per element; no element writes outside
//! its own slots, so the pass is embarrassingly parallel and its sums deterministic.

use glam::{DMat3, DVec3};
use rayon::prelude::*;

use crate::backend::topology::upper;
use crate::material::Projection;
use crate::model::Model;
use crate::objective::Node;

/// Elements per work item; fixed so the energy sum is reduced in the same order every run.
pub(crate) const CHUNK: usize = 256;

fn point(x: &[[f64; 3]], start: &[[f64; 3]], v: u32, theta: f64) -> DVec3 {
    DVec3::from(x[v as usize]) * theta + DVec3::from(start[v as usize]) * (1.0 - theta)
}

/// Energy of tet `e`, accumulating `c theta grad` into `gradient` and
/// `c theta^2 hessian` into `blocks` when asked.
fn tet(
    model: &Model,
    e: usize,
    x: &[[f64; 3]],
    start: &[[f64; 3]],
    nodes: &[Node],
    mut gradient: Option<&mut [[f64; 3]]>,
    mut blocks: Option<(&mut [[f64; 9]], Projection)>,
) -> f64 {
    let tet = model.tets[e];
    let rest = &model.tet_rest[e];
    let material = &model.tet_material[e];
    let beta = rest.shape_gradients.map(DVec3::from);
    let mut energy = 0.0;
    for node in nodes {
        let z = tet.map(|v| point(x, start, v, node.theta));
        // F = sum_a z_a beta_a^T: column j is sum_a z_a beta_a[j].
        let f = DMat3::from_cols(
            z[0] * beta[0].x + z[1] * beta[1].x + z[2] * beta[2].x + z[3] * beta[3].x,
            z[0] * beta[0].y + z[1] * beta[1].y + z[2] * beta[2].y + z[3] * beta[3].y,
            z[0] * beta[0].z + z[1] * beta[1].z + z[2] * beta[2].z + z[3] * beta[3].z,
        );
        // One evaluation per node: the rotation-based models share one SVD among the three.
        let projection = blocks.as_ref().map(|(_, projection)| *projection);
        let (psi, stress, tangent) = material.evaluate(&f, gradient.is_some(), projection);
        energy += node.weight * rest.volume * psi;
        if let (Some(g), Some(stress)) = (gradient.as_deref_mut(), stress) {
            let p = stress * (node.weight * node.theta * rest.volume);
            for a in 0..4 {
                let ga = p * beta[a];
                g[a] = (DVec3::from(g[a]) + ga).into();
            }
        }
        if let (Some((h, _)), Some(k)) = (blocks.as_mut(), tangent) {
            let w = node.weight * node.theta * node.theta * rest.volume;
            // t[r][b][kk] = sum_l K[r][3 kk + l] beta_b[l]
            let mut t = [[[0.0; 3]; 4]; 9];
            for r in 0..9 {
                for b in 0..4 {
                    for kk in 0..3 {
                        t[r][b][kk] = k[r][3 * kk] * beta[b].x
                            + k[r][3 * kk + 1] * beta[b].y
                            + k[r][3 * kk + 2] * beta[b].z;
                    }
                }
            }
            // H_ab[i][kk] = sum_j beta_a[j] t[3 i + j][b][kk], upper blocks only (symmetric).
            for a in 0..4 {
                for b in a..4 {
                    let block = &mut h[upper(a, b, 4)];
                    for i in 0..3 {
                        for kk in 0..3 {
                            let s = beta[a].x * t[3 * i][b][kk]
                                + beta[a].y * t[3 * i + 1][b][kk]
                                + beta[a].z * t[3 * i + 2][b][kk];
                            block[3 * i + kk] += w * s;
                        }
                    }
                }
            }
        }
    }
    energy
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

/// Runs `kernel` over `count` elements in fixed chunks and sums the energies in chunk order.
fn energy_pass(count: usize, kernel: impl Fn(usize) -> f64 + Sync) -> f64 {
    let partial: Vec<f64> = (0..count.div_ceil(CHUNK))
        .into_par_iter()
        .map(|c| (c * CHUNK..((c + 1) * CHUNK).min(count)).map(&kernel).sum())
        .collect();
    partial.iter().sum()
}

/// Runs `kernel` over `count` elements of `arity` corners, handing each its own gradient and
/// upper Hessian-block slots (zeroed first; an empty slice when `blocks` is empty, for passes
/// without Hessians); sums the energies in chunk order.
fn derivative_pass(
    count: usize,
    arity: usize,
    gradients: &mut [[f64; 3]],
    blocks: &mut [[f64; 9]],
    kernel: impl Fn(usize, &mut [[f64; 3]], &mut [[f64; 9]]) -> f64 + Sync,
) -> f64 {
    let per_element = if blocks.is_empty() { 0 } else { upper(arity - 1, arity - 1, arity) + 1 };
    let mut block_chunks: Vec<&mut [[f64; 9]]> = if per_element == 0 {
        (0..count.div_ceil(CHUNK)).map(|_| &mut [][..]).collect()
    } else {
        blocks[..per_element * count].chunks_mut(per_element * CHUNK).collect()
    };
    let partial: Vec<f64> = gradients[..arity * count]
        .par_chunks_mut(arity * CHUNK)
        .zip(block_chunks.par_iter_mut())
        .enumerate()
        .map(|(c, (g, h))| {
            g.fill([0.0; 3]);
            h.fill([0.0; 9]);
            let mut sum = 0.0;
            for (local, e) in (c * CHUNK..((c + 1) * CHUNK).min(count)).enumerate() {
                let g = &mut g[arity * local..arity * (local + 1)];
                let h = &mut h[per_element * local..per_element * (local + 1)];
                sum += kernel(e, g, h);
            }
            sum
        })
        .collect();
    partial.iter().sum()
}

/// Sum of all element energies at the nodes (no derivatives): the line-search pass.
pub(crate) fn energy(model: &Model, x: &[[f64; 3]], start: &[[f64; 3]], nodes: &[Node]) -> f64 {
    energy_pass(model.tets.len(), |e| tet(model, e, x, start, nodes, None, None))
        + energy_pass(model.springs.len(), |s| spring(model, s, x, start, nodes, None, None))
}

/// Element energies plus corner gradients (slots as in `Topology`) and, when `projection` is
/// given, Hessian blocks (left as they were otherwise). Output slots are overwritten.
pub(crate) fn derivatives(
    model: &Model,
    x: &[[f64; 3]],
    start: &[[f64; 3]],
    nodes: &[Node],
    projection: Option<Projection>,
    corner_gradients: &mut [[f64; 3]],
    element_blocks: &mut [[f64; 9]],
) -> f64 {
    let nt = model.tets.len();
    let (tet_gradients, spring_gradients) = corner_gradients.split_at_mut(4 * nt);
    let (tet_blocks, spring_blocks) = element_blocks.split_at_mut(10 * nt);
    let (tet_blocks, spring_blocks) =
        if projection.is_some() { (tet_blocks, spring_blocks) } else { (&mut [][..], &mut [][..]) };
    derivative_pass(nt, 4, tet_gradients, tet_blocks, |e, g, h| {
        tet(model, e, x, start, nodes, Some(g), projection.map(|p| (h, p)))
    }) + derivative_pass(model.springs.len(), 2, spring_gradients, spring_blocks, |s, g, h| {
        spring(model, s, x, start, nodes, Some(g), projection.map(|p| (h, p)))
    })
}

/// Spring energies at the nodes and their corner gradients (the spring slots only).
pub(crate) fn spring_gradients(
    model: &Model,
    x: &[[f64; 3]],
    start: &[[f64; 3]],
    nodes: &[Node],
    spring_gradients: &mut [[f64; 3]],
) -> f64 {
    derivative_pass(model.springs.len(), 2, spring_gradients, &mut [], |s, g, _| {
        spring(model, s, x, start, nodes, Some(g), None)
    })
}
