//! Stage `local` of the local/global solver: each tet's projections at each quadrature node
//! (the closest rotation, by Newton's method on SO(3) warm-started from the element's rotation
//! of the previous iteration) and the corner gradients of its projective energy. With the
//! projections exact these are the corotated/ARAP gradients, at a fraction of an SVD's cost.
//! Springs are Hooke springs, whose gradient is already the projective one.

use super::element::{self, Rotations};
use crate::material::RotationSearch;
use crate::model::Model;
use crate::objective::Node;

/// The projective energy of every element at the nodes and its corner gradients (slots as in
/// `Topology`), updating the rotations. Returns the energy. For the models local/global takes
/// (corotated and ARAP tets, Hooke springs) this is the element stage's gradient pass: their
/// energies are evaluated through the closest rotation, warm-started from `rotations` and
/// searched as far as `search` says (`LocalGlobalRequest::rotation_search`).
pub(crate) fn forces(
    model: &Model,
    x: &[[f64; 3]],
    start: &[[f64; 3]],
    nodes: &[Node],
    rotations: &mut Rotations,
    search: RotationSearch,
    corner_gradients: &mut [[f64; 3]],
) -> f64 {
    element::derivatives(model, x, start, nodes, None, Some(rotations), search, corner_gradients, &mut [])
}
