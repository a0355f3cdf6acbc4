//! Isosurface stuffing (Labelle and Shewchuk, 2007): the tetrahedralization behind
//! [`TetMesh::from_surface`](super::TetMesh::from_surface).
//!
//! A body-centred cubic lattice covers the surface's bounding box: the corners of cubes of
//! edge `h` and their centres. Its tets (each pair of face-neighbouring centres with one edge
//! of the square between them) are all congruent and well shaped. Each lattice vertex is inside
//! (+), outside (-) or on the surface (0); where an edge joins + and -, the surface cuts it. A
//! vertex closer to a cut point on one of its edges than a fixed fraction of that edge (0.25
//! for the long edges, 0.41 for the short ones) is *warped* onto the cut point and becomes 0,
//! which keeps the cut tets away from slivers. Then every tet with a + vertex is filled: whole
//! when it has no - vertex, otherwise clipped at its cut points into a tet, a pyramid or a
//! triangular prism. Those are split into tets by pulling from their least vertex, and every
//! quadrilateral face is split from its least vertex, so the two tets that share a face
//! split it the same way and the mesh conforms.

use std::collections::HashMap;

use glam::DVec3;
use rayon::prelude::*;

use super::distance::{SurfaceTree, inside, lattice_counts};
use super::{TetArrays, TriMesh, signed_volume};
use crate::error::{Error, Result};

/// Warp thresholds, as fractions of the edge, from the paper's uniform-lattice analysis
/// (dihedral angles between 10.7 and 164.8 degrees for smooth surfaces resolved by the lattice).
const ALPHA_LONG: f64 = 0.24999;
const ALPHA_SHORT: f64 = 0.41189;

/// The lattice: cube corners first (x fastest), then cube centres.
struct Lattice {
    origin: DVec3,
    h: f64,
    /// Cubes per axis.
    cells: [usize; 3],
}

impl Lattice {
    fn corner_count(&self) -> usize {
        self.cells.iter().map(|n| n + 1).product()
    }

    fn len(&self) -> usize {
        self.corner_count() + self.cells.iter().product::<usize>()
    }

    fn corner(&self, [i, j, k]: [usize; 3]) -> usize {
        let [nx, ny, _] = self.cells;
        i + (nx + 1) * (j + (ny + 1) * k)
    }

    fn centre(&self, [i, j, k]: [usize; 3]) -> usize {
        let [nx, ny, _] = self.cells;
        self.corner_count() + i + nx * (j + ny * k)
    }

    /// Grid coordinates of a vertex and whether it is a centre.
    fn coordinates(&self, v: usize) -> ([usize; 3], bool) {
        let corners = self.corner_count();
        let (index, dims, centre) =
            if v < corners { (v, self.cells.map(|n| n + 1), false) } else { (v - corners, self.cells, true) };
        ([index % dims[0], (index / dims[0]) % dims[1], index / (dims[0] * dims[1])], centre)
    }

    fn position(&self, v: usize) -> DVec3 {
        let (ijk, centre) = self.coordinates(v);
        let offset = if centre { 0.5 } else { 0.0 };
        self.origin
            + DVec3::new(ijk[0] as f64 + offset, ijk[1] as f64 + offset, ijk[2] as f64 + offset) * self.h
    }

    /// The vertices joined to `v` by a lattice edge: six along the axes of its own kind and the
    /// eight of the other kind around it.
    fn neighbours(&self, v: usize) -> Vec<usize> {
        let (ijk, centre) = self.coordinates(v);
        let mut out = Vec::with_capacity(14);
        let dims = if centre { self.cells } else { self.cells.map(|n| n + 1) };
        for axis in 0..3 {
            for step in [-1i64, 1] {
                let mut n = ijk.map(|c| c as i64);
                n[axis] += step;
                if (0..dims[axis] as i64).contains(&n[axis]) {
                    let n = n.map(|c| c as usize);
                    out.push(if centre { self.centre(n) } else { self.corner(n) });
                }
            }
        }
        for b in 0..8 {
            let offset = [b & 1, (b >> 1) & 1, (b >> 2) & 1];
            if centre {
                out.push(self.corner(std::array::from_fn(|c| ijk[c] + offset[c])));
            } else {
                let n: [i64; 3] = std::array::from_fn(|c| ijk[c] as i64 + offset[c] as i64 - 1);
                if (0..3).all(|c| (0..self.cells[c] as i64).contains(&n[c])) {
                    out.push(self.centre(n.map(|c| c as usize)));
                }
            }
        }
        out
    }

    /// Every lattice tet: two face-neighbouring centres and one edge of their shared square.
    fn tets(&self) -> impl Iterator<Item = [usize; 4]> + '_ {
        let [nx, ny, nz] = self.cells;
        (0..3).flat_map(move |axis| {
            (0..nx * ny * nz).flat_map(move |cell| {
                let ijk = [cell % nx, (cell / nx) % ny, cell / (nx * ny)];
                let next = std::array::from_fn(|c| ijk[c] + usize::from(c == axis));
                let has_next = next[axis] < self.cells[axis];
                let (b, c) = ((axis + 1) % 3, (axis + 2) % 3);
                let square: [usize; 4] = [(0, 0), (1, 0), (1, 1), (0, 1)].map(|(db, dc)| {
                    let mut corner = next;
                    corner[b] += db;
                    corner[c] += dc;
                    self.corner(corner)
                });
                let (a, a_next) = (self.centre(ijk), if has_next { self.centre(next) } else { 0 });
                (0..4).filter(move |_| has_next).map(move |e| [a, a_next, square[e], square[(e + 1) % 4]])
            })
        })
    }

    /// Long edges join two vertices of the same kind.
    fn is_long(&self, a: usize, b: usize) -> bool {
        (a < self.corner_count()) == (b < self.corner_count())
    }
}

/// The sign of a lattice vertex: inside, on the surface, outside.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    Inside,
    On,
    Outside,
}

/// Tetrahedralizes the inside of a closed surface on a lattice of spacing `h`.
pub(crate) fn stuff(surface: &TriMesh, h: f64) -> Result<TetArrays> {
    let (lo, hi) = super::tri_mesh::bounds(surface.positions());
    // One cube of margin on every side keeps the lattice's border outside the surface.
    let origin = DVec3::from(lo) - DVec3::splat(h);
    let cells = lattice_counts(std::array::from_fn(|c| hi[c] - lo[c] + 2.0 * h), h, "target_edge")?;
    let lattice = Lattice { origin, h, cells };
    let mut positions: Vec<DVec3> = (0..lattice.len()).map(|v| lattice.position(v)).collect();
    let tree = SurfaceTree::new(surface);
    let distance: Vec<f64> = positions.par_iter().map(|p| tree.distance(p.to_array())).collect();
    let points: Vec<[f64; 3]> = positions.iter().map(|p| p.to_array()).collect();
    let is_inside = inside(surface, &points, &distance, |v| lattice.neighbours(v));
    let mut side: Vec<Side> = (0..lattice.len())
        .map(|v| match (distance[v] == 0.0, is_inside[v]) {
            (true, _) => Side::On,
            (false, true) => Side::Inside,
            (false, false) => Side::Outside,
        })
        .collect();

    // Only tets with an inside vertex can be kept: warping never makes a vertex inside.
    let tets: Vec<[usize; 4]> =
        lattice.tets().filter(|t| t.iter().any(|&v| side[v] == Side::Inside)).collect();

    // Cut points of the edges from inside to outside, each computed once.
    let mut cut_edges: Vec<(usize, usize)> = tets
        .iter()
        .flat_map(|t| EDGES.map(|(i, j)| (t[i], t[j])))
        .filter_map(|(a, b)| match (side[a], side[b]) {
            (Side::Inside, Side::Outside) => Some((a, b)),
            (Side::Outside, Side::Inside) => Some((b, a)),
            _ => None,
        })
        .collect();
    cut_edges.sort_unstable();
    cut_edges.dedup();
    let cut_points: Vec<(f64, DVec3)> = cut_edges
        .par_iter()
        .map(|&(a, b)| {
            // The surface crossing itself; if round-off hides it (the segment through a
            // triangle's edge), the distances' linear estimate.
            let t = tree
                .first_crossing(points[a], points[b])
                .unwrap_or(distance[a] / (distance[a] + distance[b]));
            (t, positions[a].lerp(positions[b], t))
        })
        .collect();

    // Warp each vertex that violates a threshold onto its nearest violating cut point.
    let mut warp: HashMap<usize, (f64, DVec3)> = HashMap::new();
    for (&(a, b), &(t, point)) in cut_edges.iter().zip(&cut_points) {
        let alpha = if lattice.is_long(a, b) { ALPHA_LONG } else { ALPHA_SHORT };
        let length = positions[a].distance(positions[b]);
        for (v, fraction) in [(a, t), (b, 1.0 - t)] {
            if fraction < alpha {
                let entry = warp.entry(v).or_insert((f64::INFINITY, point));
                if fraction * length < entry.0 {
                    *entry = (fraction * length, point);
                }
            }
        }
    }
    for (&v, &(_, point)) in &warp {
        positions[v] = point;
        side[v] = Side::On;
    }
    let cut_index: HashMap<(usize, usize), usize> =
        cut_edges.iter().enumerate().map(|(i, &e)| (e, i)).collect();

    // Fill. Vertex keys order lattice vertices before cut points; the output numbers vertices
    // as they are first used.
    let lattice_len = lattice.len();
    let key_position =
        |key: usize| if key < lattice_len { positions[key] } else { cut_points[key - lattice_len].1 };
    let mut output_index: HashMap<usize, u32> = HashMap::new();
    let mut out_positions: Vec<[f64; 3]> = Vec::new();
    let mut out_tets: Vec<[u32; 4]> = Vec::new();
    for tet in &tets {
        let cut = |p: usize, m: usize| lattice_len + cut_index[&(p, m)];
        for piece in fill(tet, &side, cut) {
            let mut p = piece.map(key_position);
            let mut piece = piece;
            let volume = (p[1] - p[0]).cross(p[2] - p[0]).dot(p[3] - p[0]);
            if volume < 0.0 {
                piece.swap(2, 3);
                p.swap(2, 3);
            }
            // All-on-surface tets are kept when their centre is inside; the others always.
            if piece.iter().all(|&k| k < lattice_len && side[k] == Side::On)
                && super::tri_mesh::winding_number(surface, (p.iter().sum::<DVec3>() / 4.0).to_array()).abs()
                    <= 0.5
            {
                continue;
            }
            out_tets.push(piece.map(|key| {
                *output_index.entry(key).or_insert_with(|| {
                    out_positions.push(key_position(key).to_array());
                    out_positions.len() as u32 - 1
                })
            }));
        }
    }
    if out_tets.is_empty() {
        return Err(Error::Parameter(format!(
            "the surface encloses no lattice tet at target_edge {h}; use a smaller target_edge"
        )));
    }
    debug_assert!(out_tets.iter().all(|t| {
        let p = t.map(|v| out_positions[v as usize]);
        signed_volume(p[0], p[1], p[2], p[3]) > 0.0
    }));
    Ok((out_positions, out_tets))
}

/// The six edges of a tet.
const EDGES: [(usize, usize); 6] = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)];

/// The part of lattice tet `tet` inside the surface, as tets over vertex keys (lattice vertex
/// index, or the key `cut(inside, outside)` of a cut point).
fn fill(tet: &[usize; 4], side: &[Side], cut: impl Fn(usize, usize) -> usize) -> Vec<[usize; 4]> {
    let of = |s: Side| tet.iter().copied().filter(|&v| side[v] == s).collect::<Vec<_>>();
    let (plus, zero, minus) = (of(Side::Inside), of(Side::On), of(Side::Outside));
    match (plus.len(), minus.len()) {
        (0, _) => vec![],
        (_, 0) => vec![*tet],
        (1, _) => {
            let p = plus[0];
            let mut piece: Vec<usize> = vec![p];
            piece.extend(&zero);
            piece.extend(minus.iter().map(|&m| cut(p, m)));
            vec![[piece[0], piece[1], piece[2], piece[3]]]
        }
        (2, 1) => {
            // A pyramid: its apex on the surface, its base on the face toward the outside vertex.
            let (p, q, m, apex) = (plus[0], plus[1], minus[0], zero[0]);
            let base = [p, q, cut(q, m), cut(p, m)];
            let mut faces = vec![base.to_vec()];
            faces.extend((0..4).map(|i| vec![apex, base[i], base[(i + 1) % 4]]));
            pull(&faces)
        }
        (2, 2) => {
            let rail = |p: usize| [p, cut(p, minus[0]), cut(p, minus[1])];
            prism(rail(plus[0]), rail(plus[1]))
        }
        (3, 1) => {
            let top = [plus[0], plus[1], plus[2]];
            prism(top, top.map(|p| cut(p, minus[0])))
        }
        _ => unreachable!("a tet has four vertices"),
    }
}

/// The triangular prism with end triangles `a` and `b` (rails `a[i]`-`b[i]`), as its faces.
fn prism(a: [usize; 3], b: [usize; 3]) -> Vec<[usize; 4]> {
    let mut faces: Vec<Vec<usize>> = vec![a.to_vec(), b.to_vec()];
    faces.extend((0..3).map(|i| {
        let j = (i + 1) % 3;
        vec![a[i], a[j], b[j], b[i]]
    }));
    pull(&faces)
}

/// Splits a convex polyhedron, given by its faces (vertex keys in cyclic order), into tets:
/// its least vertex joined to every face that does not contain it, each such face fanned from
/// its own least vertex. The faces that do contain the least vertex are thereby fanned from it,
/// so every face is split from its least vertex: the polyhedron on the other side of a shared
/// face splits it the same way.
fn pull(faces: &[Vec<usize>]) -> Vec<[usize; 4]> {
    let least = faces.iter().flatten().copied().min().expect("a polyhedron has vertices");
    let mut out = Vec::new();
    for face in faces.iter().filter(|f| !f.contains(&least)) {
        let k = (0..face.len()).min_by_key(|&i| face[i]).expect("a face has vertices");
        for i in 1..face.len() - 1 {
            out.push([least, face[k], face[(k + i) % face.len()], face[(k + i + 1) % face.len()]]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TetMesh;

    #[test]
    fn a_stuffed_sphere_conforms_to_its_surface_with_good_angles() {
        let surface = super::super::distance::tests::sphere(1.0, 4);
        let tree = SurfaceTree::new(&surface);
        let enclosed = surface.enclosed_volume();
        for h in [0.3, 0.17, 0.1] {
            // TetMesh::new rejects inverted and zero-volume tets.
            let mesh = TetMesh::from_surface(&surface, h).unwrap();
            let volume = mesh.volume();
            // Cut points lie on the surface, so only the chords between them lose volume.
            let error = volume / enclosed - 1.0;
            assert!(error.abs() < 0.3 * h * h, "h {h}: volume {volume} vs {enclosed}");
            // Conforming: the only unshared faces are on the surface, and they close up.
            let boundary = mesh.surface_mesh(None).unwrap();
            super::super::tri_mesh::check_closed(&boundary).unwrap();
            for &v in mesh.surface().iter().flatten() {
                let d = tree.distance(mesh.positions()[v as usize]);
                assert!(d < 1e-12, "h {h}: boundary vertex {v} is {d} off the surface");
            }
            let (smallest, largest) = mesh.dihedral_angle_range();
            assert!(smallest > 10.7 && largest < 164.8, "h {h}: dihedral angles {smallest}..{largest}");
        }
    }
}
