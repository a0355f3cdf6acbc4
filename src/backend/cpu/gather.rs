//! Stage `gather`: everything that lives on one vertex — inertia, gravity, collider contact
//! (penalty or barrier) and handle springs — and the gather of element corner gradients into vertex gradients. One
//! invocation per vertex. (The lagged damping matrix, which the GPU gather applies row by row,
//! is applied here by the backend with the block-sparse product.)

use glam::{DMat3, DVec3};
use rayon::prelude::*;

use crate::backend::topology::{Anchors, Topology};
use crate::material::Projection;
use crate::model::Model;
use crate::objective::Node;

/// Vertices per work item.
const CHUNK: usize = 512;

/// The inputs of the per-vertex terms of one objective.
pub(crate) struct VertexTerms<'a> {
    pub model: &'a Model,
    pub start: &'a [[f64; 3]],
    pub target: &'a [[f64; 3]],
    pub nodes: &'a [Node],
    /// `1/h^2`; zero leaves inertia out (the potential alone).
    pub inv_h2: f64,
    pub anchors: &'a Anchors,
    /// The colliders where they are this step (kinematic ones move).
    pub colliders: &'a [crate::contact::Collider],
}

impl VertexTerms<'_> {
    /// Contact energy at `z`.
    fn contact(&self, z: DVec3) -> f64 {
        let law = self.model.contact;
        self.colliders
            .iter()
            .map(|c| c.distance(z).phi)
            .filter(|&phi| law.active(phi))
            .map(|phi| law.energy(phi))
            .sum()
    }

    /// Gradient, Hessian and force magnitude of [`contact`](Self::contact).
    #[inline(always)]
    fn contact_derivatives(&self, z: DVec3, projection: Projection) -> (DVec3, DMat3, f64) {
        let law = self.model.contact;
        let (mut g, mut h, mut magnitude) = (DVec3::ZERO, DMat3::ZERO, 0.0);
        for collider in self.colliders {
            let d = collider.distance(z);
            if law.active(d.phi) {
                let (first, second) = law.derivatives(d.phi);
                g += d.normal * first;
                magnitude += first.abs();
                // Along the normal the law's own curvature; across it, the surface's curvature
                // times the law's slope, which pushes outward (first < 0): negative on convex
                // shapes, and the projection drops it.
                h += crate::math::outer(d.normal, d.normal) * second;
                if projection == Projection::None {
                    h += d.hessian * first;
                }
            }
        }
        (g, h, magnitude)
    }

    /// The weight of a barrier's contact energy, which is evaluated at the end positions `x`
    /// and not at the nodes `z`: a midpoint-like node keeps `z` outside the colliders while
    /// `x` goes on, into them. The weight is the nodes' `sum w theta`, so that the contact
    /// force enters `grad G` as a node's force would (1 for backward Euler and the potential).
    /// Zero for pinned vertices (they cannot move away, and one on a surface would make every
    /// state infinitely expensive) and for the penalty, which acts at the nodes.
    fn end_contact_weight(&self, v: usize) -> f64 {
        if !self.model.contact.is_barrier() || self.model.pinned[v] {
            return 0.0;
        }
        self.nodes.iter().map(|node| node.weight * node.theta).sum()
    }

    /// Conservative potential of vertex `v` at `z`: gravity, penalty contact, handles.
    fn potential(&self, v: usize, z: DVec3) -> f64 {
        let m = self.model;
        let mut u = -m.masses[v] * DVec3::from(m.gravity).dot(z);
        if !m.contact.is_barrier() {
            u += self.contact(z);
        }
        for &(k, p) in self.anchors.of(v) {
            u += 0.5 * k * (z - p).length_squared();
        }
        u
    }

    /// Gradient and Hessian of [`potential`](Self::potential), and the magnitude of the forces in it.
    #[inline(always)]
    fn potential_derivatives(&self, v: usize, z: DVec3, projection: Projection) -> (DVec3, DMat3, f64) {
        let m = self.model;
        let weight = m.masses[v] * DVec3::from(m.gravity);
        let (mut g, mut h, mut magnitude) = (-weight, DMat3::ZERO, weight.length());
        if !m.contact.is_barrier() {
            let (gc, hc, fc) = self.contact_derivatives(z, projection);
            (g, h, magnitude) = (g + gc, h + hc, magnitude + fc);
        }
        for &(k, p) in self.anchors.of(v) {
            g += (z - p) * k;
            magnitude += k * (z - p).length();
            h += DMat3::IDENTITY * k;
        }
        (g, h, magnitude)
    }

    /// The vertex's part of the objective.
    fn energy(&self, v: usize, x: DVec3) -> f64 {
        let m = self.model;
        let start = DVec3::from(self.start[v]);
        let mut sum = 0.0;
        if !m.pinned[v] && self.inv_h2 > 0.0 {
            sum += 0.5 * self.inv_h2 * m.masses[v] * (x - DVec3::from(self.target[v])).length_squared();
        }
        for node in self.nodes {
            sum += node.weight * self.potential(v, x * node.theta + start * (1.0 - node.theta));
        }
        let end = self.end_contact_weight(v);
        if end > 0.0 {
            sum += end * self.contact(x);
        }
        sum
    }

    /// Gradient, Hessian block and force magnitude of the vertex's part of the objective
    /// (inlined: a gather that asks for the gradient alone leaves the rest out).
    #[inline(always)]
    fn derivatives(&self, v: usize, x: DVec3, projection: Projection) -> (DVec3, DMat3, f64) {
        let m = self.model;
        let start = DVec3::from(self.start[v]);
        let mass = m.masses[v] * self.inv_h2;
        let inertia = (x - DVec3::from(self.target[v])) * mass;
        let (mut g, mut h, mut magnitude) = (inertia, DMat3::IDENTITY * mass, inertia.length());
        for node in self.nodes {
            let z = x * node.theta + start * (1.0 - node.theta);
            let (gz, hz, fz) = self.potential_derivatives(v, z, projection);
            g += gz * (node.weight * node.theta);
            h += hz * (node.weight * node.theta * node.theta);
            magnitude += fz * node.weight * node.theta;
        }
        let end = self.end_contact_weight(v);
        if end > 0.0 {
            let (gc, hc, fc) = self.contact_derivatives(x, projection);
            (g, h, magnitude) = (g + gc * end, h + hc * end, magnitude + fc * end);
        }
        (g, h, magnitude)
    }
}

/// Sum of the vertex parts of the objective at `x`, reduced in chunk order.
pub(crate) fn vertex_energy(terms: &VertexTerms<'_>, x: &[[f64; 3]]) -> f64 {
    let partial: Vec<f64> = (0..x.len().div_ceil(CHUNK))
        .into_par_iter()
        .map(|c| {
            (c * CHUNK..((c + 1) * CHUNK).min(x.len())).map(|v| terms.energy(v, DVec3::from(x[v]))).sum()
        })
        .collect();
    partial.iter().sum()
}

/// What [`gradient`] gathers besides `grad G`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Gathered {
    /// The vertex Hessian blocks, the force scale and the noise floor too (a linearization).
    Everything,
    /// `grad G` alone (the local/global solver's local steps, the potential's gradient): the
    /// blocks are left as they are and the force scale and noise floor come back 0. The
    /// forces' lengths are a square root per element corner; skipping them and the blocks
    /// made a 15K-tet local/global step about 3 % faster on two cores.
    GradientOnly,
}

/// `grad G` per vertex (gathered element corners plus the vertex terms; zero on pinned
/// vertices) and, unless `GradientOnly`, the vertex Hessian blocks (identity on pinned
/// vertices). Returns `|grad G|^2`, the force scale and the noise floor of `G` (see
/// `Linearization`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gradient(
    terms: &VertexTerms<'_>,
    topology: &Topology,
    corner_gradients: &[[f64; 3]],
    x: &[[f64; 3]],
    projection: Projection,
    gathered: Gathered,
    out: &mut [[f64; 3]],
    vertex_blocks: &mut [[f64; 9]],
) -> (f64, f64, f64) {
    let everything = gathered == Gathered::Everything;
    let partial: Vec<(f64, f64, f64)> = out
        .par_chunks_mut(CHUNK)
        .zip(vertex_blocks.par_chunks_mut(CHUNK))
        .enumerate()
        .map(|(c, (out, blocks))| {
            let at = Gather { terms, topology, corner_gradients, x, projection, first: c * CHUNK };
            // Compiled apart, so that `GradientOnly` leaves out the blocks and force lengths.
            if everything { at.chunk::<true>(out, blocks) } else { at.chunk::<false>(out, blocks) }
        })
        .collect();
    partial.iter().fold((0.0, 0.0, 0.0), |(a, b, c), (d, e, f)| (a + d, b + e, c + f))
}

/// What [`gradient`] gathers from, for the chunk of vertices from `first`.
struct Gather<'a> {
    terms: &'a VertexTerms<'a>,
    topology: &'a Topology,
    corner_gradients: &'a [[f64; 3]],
    x: &'a [[f64; 3]],
    projection: Projection,
    first: usize,
}

impl Gather<'_> {
    /// [`gradient`] on one chunk, with its blocks, force scale and noise floor if `EVERYTHING`.
    #[inline(always)]
    fn chunk<const EVERYTHING: bool>(
        &self,
        out: &mut [[f64; 3]],
        blocks: &mut [[f64; 9]],
    ) -> (f64, f64, f64) {
        let Gather { terms, topology, corner_gradients, x, projection, first } = *self;
        let (mut sum, mut scale, mut magnitude) = (0.0, 0.0, 0.0);
        for (local, (o, block)) in out.iter_mut().zip(blocks.iter_mut()).enumerate() {
            let v = first + local;
            if terms.model.pinned[v] {
                *o = [0.0; 3];
                if EVERYTHING {
                    *block = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
                }
                continue;
            }
            let xv = DVec3::from(x[v]);
            let (vertex, h, forces) = terms.derivatives(v, xv, projection);
            let range = topology.corner_offsets[v] as usize..topology.corner_offsets[v + 1] as usize;
            let (acc, forces) =
                add_corners::<EVERYTHING>((vertex, forces), &topology.corners[range], corner_gradients);
            sum += acc.length_squared();
            *o = acc.into();
            if EVERYTHING {
                scale += forces;
                magnitude += forces * xv.abs().max_element();
                *block = h.transpose().to_cols_array();
            }
        }
        (sum, scale, magnitude)
    }
}

/// `acc` plus the corner gradients at `corners`, in their order, and `lengths` plus their
/// lengths if `LENGTHS`. Out of line: inlined into the gather's vertex loop, LLVM kept one
/// lane of the sum in memory, a store and a load on every addition's chain (two thirds of
/// the gather's time in a 15K-tet local/global step).
#[inline(never)]
fn add_corners<const LENGTHS: bool>(
    (mut acc, mut lengths): (DVec3, f64),
    corners: &[u32],
    corner_gradients: &[[f64; 3]],
) -> (DVec3, f64) {
    for &corner in corners {
        let f = DVec3::from(corner_gradients[corner as usize]);
        acc += f;
        if LENGTHS {
            lengths += f.length();
        }
    }
    (acc, lengths)
}

/// The projection model's active set: a free vertex resting on a collider whose gradient
/// presses it in (`g . n > 0`) loses the gradient's normal part, which the collider balances;
/// one the objective pulls away is free to leave. Fills `pressed` (the outward normal where a
/// vertex is pressed) and `pressing` (the normal force, zero elsewhere); returns the new
/// `|g|^2`.
pub(crate) fn press_against_colliders(
    colliders: &[crate::contact::Collider],
    pinned: &[bool],
    x: &[[f64; 3]],
    gradient: &mut [[f64; 3]],
    pressed: &mut Vec<Option<DVec3>>,
    pressing: &mut Vec<f64>,
) -> f64 {
    pressing.clear();
    pressed.clear();
    let mut squared = 0.0;
    for (v, (x, g)) in x.iter().zip(gradient.iter_mut()).enumerate() {
        let n = crate::contact::resting_normal(colliders, *x).filter(|_| !pinned[v]);
        let gv = DVec3::from(*g);
        let force = n.map_or(0.0, |n| gv.dot(n).max(0.0));
        pressing.push(force);
        pressed.push(n.filter(|_| force > 0.0));
        if let Some(n) = n.filter(|_| force > 0.0) {
            *g = (gv - n * force).to_array();
        }
        squared += DVec3::from(*g).length_squared();
    }
    squared
}

/// Removes the normal part of `direction` at the pressed vertices (`d -= n (n . d)`); true if
/// any vertex is pressed.
pub(crate) fn keep_pressed(direction: &mut [[f64; 3]], pressed: &[Option<DVec3>]) -> bool {
    let mut any = false;
    for (d, n) in direction.iter_mut().zip(pressed) {
        if let Some(n) = n {
            let dv = DVec3::from(*d);
            *d = (dv - *n * dv.dot(*n)).to_array();
            any = true;
        }
    }
    any
}
