//! Stage `local` of the local/global solver: each tet's projections at each quadrature node
//! (the closest rotation, by Newton's method on SO(3) warm-started from the element's rotation
//! of the previous iteration) and the corner gradients of its projective energy. With the
//! projections exact these are the corotated/ARAP gradients, at a fraction of an SVD's cost.
//! Springs are Hooke springs, whose gradient is already the projective one.

use glam::{DMat3, DQuat, DVec3};
use rayon::prelude::*;

use super::element::{CHUNK, spring_gradients};
use crate::material::closest_rotation;
use crate::model::Model;
use crate::objective::Node;

/// Every tet's last rotation at each quadrature node: the local step's warm start.
#[derive(Clone, Debug, Default)]
pub(crate) struct Rotations {
    per_node: Vec<Vec<DQuat>>,
}

impl Rotations {
    /// The rotations of the first `nodes` nodes, node by node.
    #[cfg(test)]
    pub(crate) fn all(&self, nodes: usize) -> Vec<DQuat> {
        self.per_node[..nodes].concat()
    }

    fn node(&mut self, q: usize, tets: usize) -> &mut [DQuat] {
        if self.per_node.len() <= q {
            self.per_node.resize(q + 1, Vec::new());
        }
        let rotations = &mut self.per_node[q];
        rotations.resize(tets, DQuat::IDENTITY);
        rotations
    }
}

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
    let (tet_gradients, spring_gradients_out) = corner_gradients.split_at_mut(4 * nt);
    tet_gradients.fill([0.0; 3]);
    let mut energy = 0.0;
    for (q, node) in nodes.iter().enumerate() {
        let rotations = rotations.node(q, nt);
        let point = |v: u32| {
            DVec3::from(x[v as usize]) * node.theta + DVec3::from(start[v as usize]) * (1.0 - node.theta)
        };
        let partial: Vec<f64> = tet_gradients
            .par_chunks_mut(4 * CHUNK)
            .zip(rotations.par_chunks_mut(CHUNK))
            .enumerate()
            .map(|(c, (gradients, rotations))| {
                let mut sum = 0.0;
                for (local, rotation) in rotations.iter_mut().enumerate() {
                    let e = c * CHUNK + local;
                    let rest = &model.tet_rest[e];
                    let beta = rest.shape_gradients.map(DVec3::from);
                    let z = model.tets[e].map(point);
                    let f = DMat3::from_cols(
                        z[0] * beta[0].x + z[1] * beta[1].x + z[2] * beta[2].x + z[3] * beta[3].x,
                        z[0] * beta[0].y + z[1] * beta[1].y + z[2] * beta[2].y + z[3] * beta[3].y,
                        z[0] * beta[0].z + z[1] * beta[1].z + z[2] * beta[2].z + z[3] * beta[3].z,
                    );
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
                sum
            })
            .collect();
        energy += partial.iter().sum::<f64>();
    }
    energy + spring_gradients(model, x, start, nodes, spring_gradients_out)
}
