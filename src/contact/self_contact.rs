//! Self-collision and contact between bodies, as the optimization integrator does it
//! (optimization-integrator-large-steps.md §5.3): a boundary vertex found inside a tet it
//! does not belong to is pushed out by `Phi = k d sqrt(d + eps)`, `d` the squared distance to
//! the nearest boundary triangle of the part it is in. `Phi` is about `k |depth|^3`, zero and
//! flat at the surface, so the energy is continuous and so is its gradient.
//!
//! The energy is a function of the positions alone (detection included), and its gradient is
//! exact: by the envelope theorem, moving the nearest point along the triangle changes `d` by
//! nothing to first order, so `grad d = 2 c_i u` with `u = x_v - sum_j w_j x_j` and the
//! nearest point's weights `w` held. The Hessian holds the weights too: `c c^T` times
//! `2 Phi' P + 4 Phi'' u u^T`, where `P` is `d`'s own curvature for the vertex alone (`n n^T`
//! off a face, the plane square to the edge off an edge, `I` off a corner), which makes it
//! exact for the vertex's motion and positive semi-definite. It couples the vertex with the
//! triangle's corners, which need not share a tet, so the product applies it from the contact
//! list ([`Coupling`]) and not from the block pattern.
//!
//! Within one connected part a vertex ignores the tets and triangles whose rest boxes lie
//! within its longest incident rest edge: its own neighbourhood (the tets around its
//! neighbours included), where an inverted element, not a collision, would put it inside.

use glam::{DMat3, DVec3};
use rayon::prelude::*;

use crate::mesh::bvh::{Aabb, Bvh};
use crate::model::Model;
use crate::objective::{Coupling, Node};

/// `eps` of `Phi` (m^2), the paper's value: keeps `Phi''` finite at `d = 0`.
const EPSILON: f64 = 1e-15;

/// Boundary vertices per work item.
const CHUNK: usize = 256;

/// Contact of the tet bodies with themselves and each other
/// ([`SimulationBuilder::self_collision`](crate::SimulationBuilder::self_collision)).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SelfCollision {
    /// `k` (N/m^2) of the penalty `k d sqrt(d + 1e-15)`, `d` the squared depth (m^2).
    pub stiffness: f64,
    /// Coulomb friction coefficient between the surfaces in contact (lagged, as against
    /// colliders).
    pub friction: f64,
}

/// A boundary vertex inside a tet of some part, and the nearest boundary point of that part.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Contact {
    /// The vertex, then the nearest triangle's corners.
    pub vertices: [u32; 4],
    /// `u = sum_i c_i x_i` is the vertex minus its nearest boundary point: `[1, -w]`.
    pub coefficients: [f64; 4],
    /// `u`.
    pub offset: DVec3,
    /// `d`'s Hessian in the vertex's position over 2: `n n^T` off the triangle's face,
    /// `I - e e^T` off its edge along `e`, `I` off a corner.
    pub curvature: DMat3,
}

/// `Phi(d)`, `Phi'(d)` and `Phi''(d)`.
fn penalty(k: f64, d: f64) -> [f64; 3] {
    let s = (d + EPSILON).sqrt();
    [k * d * s, k * (s + d / (2.0 * s)), k * (1.0 / s - d / (4.0 * s * s * s))]
}

/// The settings and detection structures, built once per model from its rest shape (the GPU
/// twin, `backend/gpu/self_contact.rs`, uploads them).
#[derive(Clone, Debug)]
pub(crate) struct SelfContact {
    pub settings: SelfCollision,
    /// Boundary vertices of the tet bodies: the ones that can enter another tet.
    pub(crate) surface_vertices: Vec<u32>,
    /// Boundary triangles, outward wound: what depth is measured to.
    pub(crate) triangles: Vec<[u32; 3]>,
    /// The connected part (tets sharing vertices) of every vertex.
    pub(crate) part: Vec<u32>,
    /// Trees over the tets and the triangles, built at rest.
    pub(crate) tet_tree: Bvh,
    pub(crate) triangle_tree: Bvh,
    /// Per boundary vertex `s`, its own neighbourhood, which it ignores: the tets of its part
    /// in `near[near_offsets[2 s]..near_offsets[2 s + 1]]` and the triangles in
    /// `near[near_offsets[2 s + 1]..near_offsets[2 s + 2]]`, each run sorted.
    pub(crate) near_offsets: Vec<u32>,
    pub(crate) near: Vec<u32>,
}

fn box_of(x: &[[f64; 3]], vertices: &[u32]) -> Aabb {
    Aabb::of(vertices.iter().map(|&v| DVec3::from(x[v as usize])))
}

/// Labels the connected parts of the tets' vertex graph (vertices of no tet get their own).
fn parts(vertex_count: usize, tets: &[[u32; 4]]) -> Vec<u32> {
    let mut parent: Vec<u32> = (0..vertex_count as u32).collect();
    fn root(parent: &mut [u32], mut v: u32) -> u32 {
        while parent[v as usize] != v {
            parent[v as usize] = parent[parent[v as usize] as usize];
            v = parent[v as usize];
        }
        v
    }
    for tet in tets {
        for &v in &tet[1..] {
            let (a, b) = (root(&mut parent, tet[0]), root(&mut parent, v));
            parent[a.max(b) as usize] = a.min(b);
        }
    }
    (0..vertex_count as u32).map(|v| root(&mut parent, v)).collect()
}

impl SelfContact {
    pub(crate) fn new(model: &Model, settings: SelfCollision) -> SelfContact {
        let rest = &model.rest;
        let triangles = crate::mesh::boundary_triangles(&model.tets);
        let mut surface_vertices: Vec<u32> = triangles.iter().flatten().copied().collect();
        surface_vertices.sort_unstable();
        surface_vertices.dedup();
        let mut longest_edge = vec![0.0f64; rest.len()];
        for tet in &model.tets {
            for (i, &a) in tet.iter().enumerate() {
                for &b in &tet[i + 1..] {
                    let length = DVec3::from(rest[a as usize]).distance(DVec3::from(rest[b as usize]));
                    for v in [a, b] {
                        longest_edge[v as usize] = longest_edge[v as usize].max(length);
                    }
                }
            }
        }
        let rest_tet_boxes: Vec<Aabb> = model.tets.iter().map(|t| box_of(rest, t)).collect();
        let rest_triangle_boxes: Vec<Aabb> = triangles.iter().map(|t| box_of(rest, t)).collect();
        let part = parts(rest.len(), &model.tets);
        let tet_tree = Bvh::new(&rest_tet_boxes);
        let triangle_tree = Bvh::new(&rest_triangle_boxes);
        // A vertex's neighbourhood: the tets and triangles of its part whose rest boxes lie
        // within its longest incident rest edge (its own among them).
        let neighbourhood = |v: u32, tree: &Bvh, boxes: &[Aabb], first_vertex: &dyn Fn(u32) -> u32| {
            let (at, reach) = (DVec3::from(rest[v as usize]), longest_edge[v as usize]);
            let mut near = Vec::new();
            tree.overlapping(&Aabb { lo: at - reach, hi: at + reach }, |t| {
                let own = part[first_vertex(t) as usize] == part[v as usize];
                if own && boxes[t as usize].distance_squared(at) <= reach * reach {
                    near.push(t);
                }
            });
            near.sort_unstable();
            near
        };
        let runs: Vec<[Vec<u32>; 2]> = surface_vertices
            .par_iter()
            .map(|&v| {
                [
                    neighbourhood(v, &tet_tree, &rest_tet_boxes, &|t| model.tets[t as usize][0]),
                    neighbourhood(v, &triangle_tree, &rest_triangle_boxes, &|t| triangles[t as usize][0]),
                ]
            })
            .collect();
        let mut near_offsets = vec![0u32];
        let mut near = Vec::new();
        for run in runs.iter().flatten() {
            near.extend_from_slice(run);
            near_offsets.push(near.len() as u32);
        }
        SelfContact {
            settings,
            surface_vertices,
            triangles,
            part,
            tet_tree,
            triangle_tree,
            near_offsets,
            near,
        }
    }

    /// Boundary vertex `s`'s neighbourhood: its tets (`kind` 0) or triangles (1).
    fn near(&self, s: usize, kind: usize) -> &[u32] {
        &self.near[self.near_offsets[2 * s + kind] as usize..self.near_offsets[2 * s + kind + 1] as usize]
    }

    /// Every boundary vertex inside a tet other than its own at `x`, in vertex order.
    pub(crate) fn contacts(&self, model: &Model, x: &[[f64; 3]]) -> Vec<Contact> {
        let mut tet_tree = self.tet_tree.clone();
        tet_tree.refit(&model.tets.par_iter().map(|t| box_of(x, t)).collect::<Vec<_>>());
        let mut triangle_tree = self.triangle_tree.clone();
        triangle_tree.refit(&self.triangles.par_iter().map(|t| box_of(x, t)).collect::<Vec<_>>());
        let chunks = self.surface_vertices.len().div_ceil(CHUNK);
        let found: Vec<Vec<Contact>> = (0..chunks)
            .into_par_iter()
            .map(|c| {
                (c * CHUNK..((c + 1) * CHUNK).min(self.surface_vertices.len()))
                    .filter_map(|s| self.contact(model, x, &tet_tree, &triangle_tree, s))
                    .collect()
            })
            .collect();
        found.concat()
    }

    /// Boundary vertex `s`'s contact at `x`, if it is inside a tet that is not its own
    /// neighbourhood.
    fn contact(
        &self,
        model: &Model,
        x: &[[f64; 3]],
        tet_tree: &Bvh,
        triangle_tree: &Bvh,
        s: usize,
    ) -> Option<Contact> {
        let v = self.surface_vertices[s];
        let p = DVec3::from(x[v as usize]);
        let (near_tets, near_triangles) = (self.near(s, 0), self.near(s, 1));
        let mut host = None;
        tet_tree.overlapping(&Aabb { lo: p, hi: p }, |t| {
            if host.is_some() || near_tets.binary_search(&t).is_ok() {
                return;
            }
            let tet = model.tets[t as usize];
            if inside_tet(p, tet.map(|c| DVec3::from(x[c as usize]))) {
                host = Some(self.part[tet[0] as usize]);
            }
        });
        let host = host?;
        let (t, _) = triangle_tree.nearest(p, |t| {
            let triangle = self.triangles[t as usize];
            let eligible =
                self.part[triangle[0] as usize] == host && near_triangles.binary_search(&t).is_err();
            eligible.then(|| {
                let [a, b, c] = triangle.map(|c| DVec3::from(x[c as usize]));
                let [wa, wb, wc] = crate::mesh::closest_weights_on_triangle(p, a, b, c);
                (p - (a * wa + b * wb + c * wc)).length_squared()
            })
        })?;
        let triangle = self.triangles[t as usize];
        let corners = triangle.map(|c| DVec3::from(x[c as usize]));
        let [wa, wb, wc] = crate::mesh::closest_weights_on_triangle(p, corners[0], corners[1], corners[2]);
        let offset = p - (corners[0] * wa + corners[1] * wb + corners[2] * wc);
        let weights = [wa, wb, wc];
        let touching: Vec<usize> = (0..3).filter(|&i| weights[i] != 0.0).collect();
        let curvature = match touching[..] {
            [i, j] => {
                let e = (corners[j] - corners[i]).normalize();
                DMat3::IDENTITY - outer(e)
            }
            [_] => DMat3::IDENTITY,
            _ => outer(offset.normalize()),
        };
        (offset != DVec3::ZERO).then_some(Contact {
            vertices: [v, triangle[0], triangle[1], triangle[2]],
            coefficients: [1.0, -wa, -wb, -wc],
            offset,
            curvature,
        })
    }

    /// Lagged Coulomb friction between the surfaces in contact at `x` moving at `v`, for a
    /// step of `dt`: per contact, with normal force `lambda = |grad_v Phi|` and the tangential
    /// part `v_t` of the vertex's velocity relative to its nearest point, the pseudo-potential
    /// `c/(2h) |P_t sum_i c_i dx_i|^2`, `c = mu lambda / max(|v_t|, STICK_SPEED)`: the same
    /// law as against colliders (`add_lagged_friction`), on the relative motion.
    pub(crate) fn lagged_friction(
        &self,
        model: &Model,
        x: &[[f64; 3]],
        v: &[[f64; 3]],
        dt: f64,
    ) -> Vec<Coupling> {
        if self.settings.friction <= 0.0 {
            return Vec::new();
        }
        self.contacts(model, x)
            .iter()
            .filter_map(|contact| {
                let u = contact.offset;
                let lambda = 2.0 * penalty(self.settings.stiffness, u.length_squared())[1] * u.length();
                let n = u.normalize();
                let tangent = DMat3::IDENTITY - outer(n);
                let relative: DVec3 = (0..4)
                    .map(|i| DVec3::from(v[contact.vertices[i] as usize]) * contact.coefficients[i])
                    .sum();
                let c =
                    self.settings.friction * lambda / (tangent * relative).length().max(super::STICK_SPEED);
                let coefficients = std::array::from_fn(|i| {
                    if model.pinned[contact.vertices[i] as usize] { 0.0 } else { contact.coefficients[i] }
                });
                (lambda > 0.0).then(|| Coupling {
                    vertices: contact.vertices,
                    coefficients,
                    block: (tangent * (c / dt)).to_cols_array(),
                })
            })
            .collect()
    }

    /// The energy of `contacts`.
    pub(crate) fn energy(&self, contacts: &[Contact]) -> f64 {
        contacts.iter().map(|c| penalty(self.settings.stiffness, c.offset.length_squared())[0]).sum()
    }

    /// The energy over the step's nodes, `sum_q c_q E(theta_q x + (1 - theta_q) x_n)`.
    pub(crate) fn energy_at_nodes(
        &self,
        model: &Model,
        x: &[[f64; 3]],
        start: &[[f64; 3]],
        nodes: &[Node],
    ) -> f64 {
        nodes
            .iter()
            .map(|node| node.weight * self.energy(&self.contacts(model, &at_node(x, start, node))))
            .sum()
    }

    /// Adds the gradient of the energy over the nodes to `gradient` and the diagonal of its
    /// Hessian to `vertex_blocks` (row-major), skipping pinned vertices; returns the couplings
    /// between vertices and the magnitude of the forces (the sum of their lengths).
    pub(crate) fn derivatives_at_nodes(
        &self,
        model: &Model,
        x: &[[f64; 3]],
        start: &[[f64; 3]],
        nodes: &[Node],
        gradient: &mut [[f64; 3]],
        vertex_blocks: &mut [[f64; 9]],
    ) -> (Vec<Coupling>, f64) {
        let mut couplings = Vec::new();
        let mut magnitude = 0.0;
        for node in nodes {
            for contact in self.contacts(model, &at_node(x, start, node)) {
                let u = contact.offset;
                let [_, first, second] = penalty(self.settings.stiffness, u.length_squared());
                let coefficients = std::array::from_fn(|i| {
                    let free = !model.pinned[contact.vertices[i] as usize];
                    if free { contact.coefficients[i] } else { 0.0 }
                });
                // Phi' grad^2 d + Phi'' grad d grad d^T, grad d = 2 c u, grad^2 d = 2 c c^T P.
                let block = (contact.curvature * (2.0 * first) + outer(u) * (4.0 * second))
                    * (node.weight * node.theta * node.theta);
                for (i, &c) in coefficients.iter().enumerate() {
                    let v = contact.vertices[i] as usize;
                    let force = u * (2.0 * first * c * node.weight * node.theta);
                    gradient[v] = (DVec3::from(gradient[v]) + force).to_array();
                    magnitude += force.length();
                }
                let coupling =
                    Coupling { vertices: contact.vertices, coefficients, block: block.to_cols_array() };
                coupling.add_diagonal(vertex_blocks);
                couplings.push(coupling);
            }
        }
        (couplings, magnitude)
    }
}

/// `theta x + (1 - theta) x_n`.
pub(crate) fn at_node(x: &[[f64; 3]], start: &[[f64; 3]], node: &Node) -> Vec<[f64; 3]> {
    if node.theta == 1.0 {
        return x.to_vec();
    }
    x.iter()
        .zip(start)
        .map(|(x, s)| std::array::from_fn(|i| node.theta * x[i] + (1.0 - node.theta) * s[i]))
        .collect()
}

/// `p` lies in the tet with corners `c` (on its faces included); false for a flat one.
fn inside_tet(p: DVec3, c: [DVec3; 4]) -> bool {
    let edges = DMat3::from_cols(c[1] - c[0], c[2] - c[0], c[3] - c[0]);
    let det = edges.determinant();
    if det == 0.0 || !det.is_finite() {
        return false;
    }
    let b = edges.inverse() * (p - c[0]);
    b.min_element() >= 0.0 && b.x + b.y + b.z <= 1.0
}

/// `u u^T`.
fn outer(u: DVec3) -> DMat3 {
    crate::math::outer(u, u)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::material::Material;
    use crate::mesh::TetMesh;

    /// Two unit-ish cubes of one model, the second shifted by `shift`.
    fn two_cubes(shift: [f64; 3]) -> Model {
        let mesh = TetMesh::bar([2, 2, 2], [0.2, 0.2, 0.2]);
        let moved = TetMesh::new(
            mesh.positions().iter().map(|p| std::array::from_fn(|i| p[i] + shift[i])).collect(),
            mesh.tets().to_vec(),
        )
        .unwrap();
        let mut model = Model::empty([0.0; 3]);
        let material = Material::stable_neo_hookean(1e5, 0.3);
        model.add_tet_body(&mesh, std::slice::from_ref(&material), 1000.0).unwrap();
        model.add_tet_body(&moved, &[material], 1000.0).unwrap();
        model
    }

    #[test]
    fn rest_shapes_and_separated_bodies_have_no_contacts() {
        let model = two_cubes([0.3, 0.0, 0.0]);
        let contact = SelfContact::new(&model, SelfCollision { stiffness: 1e6, friction: 0.0 });
        assert!(contact.contacts(&model, &model.rest).is_empty());
        // Touching faces are not inside each other either: zero depth is no contact.
        let touching = two_cubes([0.2, 0.0, 0.0]);
        let contact = SelfContact::new(&touching, SelfCollision { stiffness: 1e6, friction: 0.0 });
        assert_eq!(contact.energy(&contact.contacts(&touching, &touching.rest)), 0.0);
    }

    #[test]
    fn overlapping_cubes_find_every_vertex_inside_with_its_depth() {
        // The second cube's left face is 2 cm inside the first, its corner rows 4 cm inside in y.
        let model = two_cubes([0.18, 0.04, 0.01]);
        let contact = SelfContact::new(&model, SelfCollision { stiffness: 1e6, friction: 0.0 });
        let contacts = contact.contacts(&model, &model.rest);
        let first_count = 27u32;
        let inside = |p: [f64; 3], lo: [f64; 3], hi: [f64; 3]| (0..3).all(|i| p[i] >= lo[i] && p[i] <= hi[i]);
        let mut expected = 0;
        for (v, p) in model.rest.iter().enumerate() {
            let (lo, hi) = if (v as u32) < first_count {
                ([0.18, 0.04, 0.01], [0.38, 0.24, 0.21])
            } else {
                ([0.0; 3], [0.2; 3])
            };
            // Strictly inside the other cube's box, away from its faces.
            let strictly = (0..3).all(|i| p[i] > lo[i] + 1e-12 && p[i] < hi[i] - 1e-12);
            if strictly {
                expected += 1;
                let c = contacts.iter().find(|c| c.vertices[0] == v as u32).expect("a contact");
                // The depth is the distance to the nearest face of the other box.
                let depth = (0..3).map(|i| (p[i] - lo[i]).min(hi[i] - p[i])).fold(f64::INFINITY, f64::min);
                assert!(
                    (c.offset.length() - depth).abs() < 1e-12,
                    "vertex {v}: {} vs {depth}",
                    c.offset.length()
                );
                let host_first = c.vertices[1] < first_count;
                assert_ne!(host_first, (v as u32) < first_count, "the nearest triangle is the other body's");
            } else {
                assert!(
                    !inside(*p, lo, hi)
                        || contacts.iter().all(|c| c.vertices[0] != v as u32 || c.offset.length() < 1e-12),
                    "vertex {v}"
                );
            }
        }
        // Four of each cube's vertices: x = 0.18 or 0.2, two rows in y, two layers in z.
        assert_eq!(expected, 8);
        assert_eq!(contacts.len(), expected);
    }

    /// A random configuration near `model`'s rest shape with the two bodies overlapping.
    fn jiggled(model: &Model, seed: u64, amount: f64) -> Vec<[f64; 3]> {
        let mut state = seed;
        model
            .rest
            .iter()
            .map(|p| {
                p.map(|c| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    c + ((state >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * amount
                })
            })
            .collect()
    }

    #[test]
    fn gradient_matches_finite_differences_and_the_hessian_is_its_gauss_newton_part() {
        let model = two_cubes([0.05, 0.03, 0.02]);
        let contact = SelfContact::new(&model, SelfCollision { stiffness: 1e7, friction: 0.0 });
        let x = jiggled(&model, 5, 0.01);
        let start = jiggled(&model, 9, 0.01);
        let nodes = [Node { weight: 0.5, theta: 1.0 }, Node { weight: 0.5, theta: 0.5 }];
        let n = x.len();
        let mut gradient = vec![[0.0; 3]; n];
        let mut blocks = vec![[0.0; 9]; n];
        let (couplings, magnitude) =
            contact.derivatives_at_nodes(&model, &x, &start, &nodes, &mut gradient, &mut blocks);
        assert!(couplings.len() >= 10 && magnitude > 0.0, "{} contacts", couplings.len());
        let energy = |x: &[[f64; 3]]| contact.energy_at_nodes(&model, x, &start, &nodes);
        let h = 1e-7;
        let mut checked = 0;
        for v in 0..n {
            for i in 0..3 {
                let (mut plus, mut minus) = (x.clone(), x.clone());
                plus[v][i] += h;
                minus[v][i] -= h;
                let difference = (energy(&plus) - energy(&minus)) / (2.0 * h);
                let scale = gradient[v][i].abs().max(1e-3);
                assert!(
                    (difference - gradient[v][i]).abs() < 1e-5 * scale.max(1.0),
                    "{v} {i}: {difference} vs {}",
                    gradient[v][i]
                );
                checked += (gradient[v][i] != 0.0) as usize;
            }
        }
        assert!(checked > 30, "{checked} nonzero gradient entries");
        // For contact vertices that are nobody's triangle corner, moved in random directions
        // with the triangles held, the Hessian is the true one: (g(x + e p) - g(x - e p)) / 2e
        // . p = p^T H p.
        let nodes = [Node { weight: 1.0, theta: 1.0 }];
        let mut blocks = vec![[0.0; 9]; n];
        let (couplings, _) =
            contact.derivatives_at_nodes(&model, &x, &start, &nodes, &mut vec![[0.0; 3]; n], &mut blocks);
        let corner = |v: u32| couplings.iter().any(|c| c.vertices[1..].contains(&v));
        let mut p = vec![[0.0; 3]; n];
        let directions = jiggled(&model, 17, 2.0);
        for c in couplings.iter().filter(|c| !corner(c.vertices[0])) {
            let v = c.vertices[0] as usize;
            p[v] = std::array::from_fn(|i| directions[v][i] - model.rest[v][i]);
        }
        let moved = p.iter().filter(|p| **p != [0.0; 3]).count();
        assert!(moved >= 5, "{moved} of {} contacts", couplings.len());
        let mut product = vec![[0.0; 3]; n];
        let mut curvature = crate::backend::cpu::hessian_product::couplings(&couplings, &p, &mut product);
        for v in 0..n {
            let b = DMat3::from_cols_array(&blocks[v]);
            curvature += DVec3::from(p[v]).dot(b * DVec3::from(p[v]));
        }
        assert!(curvature > 0.0);
        let shifted = |sign: f64| -> Vec<[f64; 3]> {
            x.iter().zip(&p).map(|(x, p)| std::array::from_fn(|i| x[i] + sign * 1e-7 * p[i])).collect()
        };
        let slope = |y: &[[f64; 3]]| {
            let mut g = vec![[0.0; 3]; n];
            contact.derivatives_at_nodes(&model, y, &start, &nodes, &mut g, &mut vec![[0.0; 9]; n]);
            g.iter().zip(&p).map(|(g, p)| DVec3::from(*g).dot(DVec3::from(*p))).sum::<f64>()
        };
        let measured = (slope(&shifted(1.0)) - slope(&shifted(-1.0))) / 2e-7;
        assert!((measured - curvature).abs() < 1e-5 * curvature, "{measured} vs {curvature}");
    }

    #[test]
    fn a_vertex_ignores_its_own_neighbourhood_but_not_far_parts_of_its_body() {
        // One long bar folded onto itself would put far vertices inside; here a bar whose
        // neighbour elements are squashed (vertex 0 pushed into the tets around it) has none.
        let mesh = TetMesh::bar([6, 1, 1], [0.6, 0.1, 0.1]);
        let mut model = Model::empty([0.0; 3]);
        model.add_tet_body(&mesh, &[Material::stable_neo_hookean(1e5, 0.3)], 1000.0).unwrap();
        let contact = SelfContact::new(&model, SelfCollision { stiffness: 1e6, friction: 0.0 });
        let mut x = model.rest.clone();
        x[0] = [0.06, 0.04, 0.03];
        assert!(contact.contacts(&model, &x).is_empty(), "an inverted neighbourhood is no collision");
        // The bar's far end moved onto its start: its end vertices are inside the first cells,
        // and every contact is between parts of the bar that are far apart at rest.
        let mut x = model.rest.clone();
        for (p, r) in x.iter_mut().zip(&model.rest) {
            if r[0] > 0.55 {
                *p = [r[0] - 0.55, r[1] + 0.01, r[2] + 0.01];
            }
        }
        let contacts = contact.contacts(&model, &x);
        assert!(contacts.iter().any(|c| model.rest[c.vertices[0] as usize][0] > 0.55));
        for c in &contacts {
            let rest = c.vertices.map(|v| DVec3::from(model.rest[v as usize]));
            let nearest = rest[1..].iter().map(|r| r.distance(rest[0])).fold(f64::INFINITY, f64::min);
            assert!(nearest > 0.1, "{c:?}");
        }
    }
}
