//! Stage `gather`: per-vertex objective terms (inertia and gravity) and the gather of element
//! corner gradients into vertex gradients, one invocation per vertex.

use glam::DVec3;
use rayon::prelude::*;

use crate::backend::Node;
use crate::backend::topology::Topology;
use crate::model::Model;

/// Vertices per work item.
const CHUNK: usize = 512;

/// The vertex part of the objective: `1/(2h^2) |x - y|_M^2` over free vertices plus gravity's
/// potential `-m g . z` at each node. `inv_h2 = 0` leaves gravity alone (the potential).
pub(crate) fn vertex_energy(
    model: &Model,
    x: &[[f64; 3]],
    start: &[[f64; 3]],
    target: &[[f64; 3]],
    nodes: &[Node],
    inv_h2: f64,
) -> f64 {
    let g = DVec3::from(model.gravity);
    let partial: Vec<f64> = (0..x.len().div_ceil(CHUNK))
        .into_par_iter()
        .map(|c| {
            let mut sum = 0.0;
            for v in c * CHUNK..((c + 1) * CHUNK).min(x.len()) {
                let m = model.masses[v];
                let xv = DVec3::from(x[v]);
                if !model.pinned[v] && inv_h2 > 0.0 {
                    sum += 0.5 * inv_h2 * m * (xv - DVec3::from(target[v])).length_squared();
                }
                for node in nodes {
                    let z = xv * node.theta + DVec3::from(start[v]) * (1.0 - node.theta);
                    sum -= node.weight * m * g.dot(z);
                }
            }
            sum
        })
        .collect();
    partial.iter().sum()
}

/// `grad G` per vertex: gathered element corners plus inertia and gravity; zero on pinned
/// vertices. Returns `|grad G|^2`, the force scale and the noise floor of `G` (see
/// `Linearization`).
pub(crate) fn gradient(
    model: &Model,
    topology: &Topology,
    corner_gradients: &[[f64; 3]],
    x: &[[f64; 3]],
    target: &[[f64; 3]],
    nodes: &[Node],
    inv_h2: f64,
    out: &mut [[f64; 3]],
) -> (f64, f64, f64) {
    let gravity_weight: f64 = nodes.iter().map(|n| n.weight * n.theta).sum();
    let g = DVec3::from(model.gravity) * gravity_weight;
    let partial: Vec<(f64, f64, f64)> = out
        .par_chunks_mut(CHUNK)
        .enumerate()
        .map(|(c, out)| {
            let (mut sum, mut scale, mut magnitude) = (0.0, 0.0, 0.0);
            for (local, o) in out.iter_mut().enumerate() {
                let v = c * CHUNK + local;
                if model.pinned[v] {
                    *o = [0.0; 3];
                    continue;
                }
                let m = model.masses[v];
                let inertia = (DVec3::from(x[v]) - DVec3::from(target[v])) * (m * inv_h2);
                let mut acc = inertia - g * m;
                let mut forces = inertia.length() + (g * m).length();
                let range = topology.corner_offsets[v] as usize..topology.corner_offsets[v + 1] as usize;
                for &corner in &topology.corners[range] {
                    let f = DVec3::from(corner_gradients[corner as usize]);
                    acc += f;
                    forces += f.length();
                }
                sum += acc.length_squared();
                scale += forces;
                magnitude += forces * DVec3::from(x[v]).abs().max_element();
                *o = acc.into();
            }
            (sum, scale, magnitude)
        })
        .collect();
    partial.iter().fold((0.0, 0.0, 0.0), |(a, b, c), (d, e, f)| (a + d, b + e, c + f))
}
