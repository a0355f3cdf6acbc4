//! Stage `local` of the local/global solver: each tet's projections at each quadrature node
//! (the closest rotation, by Newton's method on SO(3) warm-started from the element's rotation
//! of the previous iteration) and the corner gradients of its projective energy. With the
//! projections exact these are the corotated/ARAP gradients, at a fraction of an SVD's cost.
//! Springs are Hooke springs, whose gradient is already the projective one.

use glam::DVec3;
use rayon::prelude::*;

use super::element::{CHUNK, Rotations, deformation_gradient, spring_gradients};
use crate::material::closest_rotation;
use crate::model::Model;
use crate::objective::Node;

/// The projective energy of every element at the nodes and its corner gradients (slots as in
/// `Topology`), updating the rotations. Returns the energy.
pub(crate) fn forces(
    model: &Model,
    x: &[[f64; 3]],
    start: &[[f64; 3]],
    nodes: &[Node],
    rotations: &mut Rotations,
    corner_gradients: &mut [[f64; 3]],
) -> f64 {
    let nt = model.tets.len();
    let k = nodes.len();
    let (tet_gradients, spring_gradients_out) = corner_gradients.split_at_mut(4 * nt);
    let rotations = rotations.at_nodes(nt, k);
    let partial: Vec<f64> = tet_gradients
        .par_chunks_mut(4 * CHUNK)
        .zip(rotations.par_chunks_mut(k * CHUNK))
        .enumerate()
        .map(|(c, (gradients, rotations))| {
            gradients.fill([0.0; 3]);
            let mut sum = 0.0;
            for (local, rotations) in rotations.chunks_mut(k).enumerate() {
                let e = c * CHUNK + local;
                let rest = &model.tet_rest[e];
                let beta = rest.shape_gradients.map(DVec3::from);
                for (node, rotation) in nodes.iter().zip(rotations) {
                    let z = model.tets[e].map(|v| {
                        DVec3::from(x[v as usize]) * node.theta + DVec3::from(start[v as usize]) * (1.0 - node.theta)
                    });
                    let f = deformation_gradient(&z, &beta);
                    let (q, r) = closest_rotation(&f, *rotation);
                    *rotation = q;
                    let (psi, stress) = model.tet_material[e].projective(&f, &r);
                    sum += node.weight * rest.volume * psi;
                    let p = stress * (node.weight * node.theta * rest.volume);
                    for a in 0..4 {
                        let g = &mut gradients[4 * local + a];
                        *g = (DVec3::from(*g) + p * beta[a]).into();
                    }
                }
            }
            sum
        })
        .collect();
    let energy: f64 = partial.iter().sum();
    energy + spring_gradients(model, x, start, nodes, spring_gradients_out)
}
