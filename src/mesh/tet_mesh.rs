//! Tetrahedral meshes.

use std::collections::HashMap;

use super::signed_volume;
use crate::error::{Error, Result};

/// A tetrahedral mesh: rest positions, positively oriented tets and the boundary triangles.
#[derive(Clone, Debug, PartialEq)]
pub struct TetMesh {
    positions: Vec<[f64; 3]>,
    tets: Vec<[u32; 4]>,
    surface: Vec<[u32; 3]>,
}

/// The four faces of a positively oriented tet, each wound so its normal points outward.
const OUTWARD_FACES: [[usize; 3]; 4] = [[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]];

impl TetMesh {
    /// A mesh from rest positions and tets. Rejects out-of-range indices, repeated vertices,
    /// non-finite positions and inverted or zero-volume elements, naming the element.
    pub fn new(positions: Vec<[f64; 3]>, tets: Vec<[u32; 4]>) -> Result<TetMesh> {
        if let Some(i) = positions.iter().position(|p| p.iter().any(|c| !c.is_finite())) {
            return Err(Error::Mesh(format!("vertex {i} has a non-finite coordinate {:?}", positions[i])));
        }
        let extent = bounding_extent(&positions);
        // Volumes below 1e-12 of the body's bounding cube are zero to f64 round-off.
        let min_volume = 1e-12 * extent.powi(3);
        for (e, tet) in tets.iter().enumerate() {
            if let Some(&bad) = tet.iter().find(|&&v| v as usize >= positions.len()) {
                return Err(Error::Mesh(format!(
                    "element {e} refers to vertex {bad}, but the mesh has {} vertices",
                    positions.len()
                )));
            }
            let mut sorted = *tet;
            sorted.sort_unstable();
            if sorted.windows(2).any(|w| w[0] == w[1]) {
                return Err(Error::Mesh(format!("element {e} repeats a vertex: {tet:?}")));
            }
            let p = tet.map(|v| positions[v as usize]);
            let volume = signed_volume(p[0], p[1], p[2], p[3]);
            if volume.abs() <= min_volume {
                return Err(Error::Mesh(format!(
                    "element {e} {tet:?} has zero volume ({volume:e}); remove or repair it"
                )));
            }
            if volume < 0.0 {
                return Err(Error::Mesh(format!(
                    "element {e} {tet:?} is inverted (signed volume {volume:e}); swap two of its vertices"
                )));
            }
        }
        let surface = boundary_triangles(&tets);
        Ok(TetMesh { positions, tets, surface })
    }

    /// A box `[0, size]` split into `cells` cubes of five tets each. Neighbouring cubes use
    /// mirrored splits so their shared faces agree, and the central tet of each cube is
    /// regular for cubic cells, so the mesh has no slivers.
    pub fn bar(cells: [usize; 3], size: [f64; 3]) -> TetMesh {
        let [nx, ny, nz] = cells.map(|c| c.max(1));
        let id = |i: usize, j: usize, k: usize| (i + (nx + 1) * (j + (ny + 1) * k)) as u32;
        let mut positions = Vec::with_capacity((nx + 1) * (ny + 1) * (nz + 1));
        for k in 0..=nz {
            for j in 0..=ny {
                for i in 0..=nx {
                    positions.push([
                        size[0] * i as f64 / nx as f64,
                        size[1] * j as f64 / ny as f64,
                        size[2] * k as f64 / nz as f64,
                    ]);
                }
            }
        }
        // Cube corners by bit pattern (x | y << 1 | z << 2). Each split has one central tet
        // on four corners of equal parity and four corner tets on the other four.
        const EVEN: [[usize; 4]; 5] = [[1, 2, 4, 7], [0, 1, 2, 4], [3, 1, 2, 7], [5, 1, 4, 7], [6, 2, 4, 7]];
        const ODD: [[usize; 4]; 5] = [[0, 3, 5, 6], [1, 0, 3, 5], [2, 0, 3, 6], [4, 0, 5, 6], [7, 3, 5, 6]];
        let mut tets = Vec::with_capacity(5 * nx * ny * nz);
        for k in 0..nz {
            for j in 0..ny {
                for i in 0..nx {
                    let corner = |c: usize| id(i + (c & 1), j + ((c >> 1) & 1), k + ((c >> 2) & 1));
                    let split = if (i + j + k) % 2 == 0 { &EVEN } else { &ODD };
                    for t in split {
                        let mut tet = t.map(corner);
                        let p = tet.map(|v| positions[v as usize]);
                        if signed_volume(p[0], p[1], p[2], p[3]) < 0.0 {
                            tet.swap(2, 3);
                        }
                        tets.push(tet);
                    }
                }
            }
        }
        let surface = boundary_triangles(&tets);
        TetMesh { positions, tets, surface }
    }

    /// Rest positions.
    pub fn positions(&self) -> &[[f64; 3]] {
        &self.positions
    }

    /// Tets as vertex indices, positively oriented.
    pub fn tets(&self) -> &[[u32; 4]] {
        &self.tets
    }

    /// Boundary triangles, wound counter-clockwise seen from outside.
    pub fn surface(&self) -> &[[u32; 3]] {
        &self.surface
    }

    /// Number of vertices.
    pub fn vertex_count(&self) -> usize {
        self.positions.len()
    }
}

fn bounding_extent(positions: &[[f64; 3]]) -> f64 {
    let mut lo = [f64::INFINITY; 3];
    let mut hi = [f64::NEG_INFINITY; 3];
    for p in positions {
        for c in 0..3 {
            lo[c] = lo[c].min(p[c]);
            hi[c] = hi[c].max(p[c]);
        }
    }
    (0..3).map(|c| hi[c] - lo[c]).fold(0.0, f64::max)
}

/// Faces that belong to exactly one tet, outward wound.
fn boundary_triangles(tets: &[[u32; 4]]) -> Vec<[u32; 3]> {
    let mut count: HashMap<[u32; 3], (u32, [u32; 3])> = HashMap::new();
    for tet in tets {
        for face in OUTWARD_FACES {
            let tri = face.map(|f| tet[f]);
            let mut key = tri;
            key.sort_unstable();
            count.entry(key).or_insert((0, tri)).0 += 1;
        }
    }
    let mut surface: Vec<[u32; 3]> = count.into_values().filter(|(n, _)| *n == 1).map(|(_, t)| t).collect();
    surface.sort_unstable();
    surface
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_is_positively_oriented_and_conforming() {
        let mesh = TetMesh::bar([3, 2, 2], [0.3, 0.2, 0.2]);
        assert_eq!(mesh.tets().len(), 5 * 12);
        assert_eq!(mesh.vertex_count(), 4 * 3 * 3);
        let total: f64 = mesh
            .tets()
            .iter()
            .map(|t| {
                let p = t.map(|v| mesh.positions()[v as usize]);
                let v = signed_volume(p[0], p[1], p[2], p[3]);
                assert!(v > 0.0);
                v
            })
            .sum();
        assert!((total - 0.3 * 0.2 * 0.2).abs() < 1e-15);
        // A conforming mesh of a box has exactly the box's boundary as surface: 2 triangles
        // per boundary square.
        let squares = 2 * (3 * 2 + 3 * 2 + 2 * 2);
        assert_eq!(mesh.surface().len(), 2 * squares);
        // Re-validating the generated mesh accepts it.
        TetMesh::new(mesh.positions().to_vec(), mesh.tets().to_vec()).unwrap();
    }

    #[test]
    fn validation_names_the_bad_element() {
        let p = vec![[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]];
        let good = [0, 1, 2, 3];
        let cases: [(Vec<[u32; 4]>, &str); 4] = [
            (vec![good, [0, 2, 1, 3]], "element 1"),
            (vec![good, [0, 1, 4, 2]], "zero volume"),
            (vec![good, [0, 1, 2, 9]], "vertex 9"),
            (vec![[0, 1, 1, 3]], "repeats"),
        ];
        for (tets, needle) in cases {
            let message = TetMesh::new(p.clone(), tets).unwrap_err().to_string();
            assert!(message.contains(needle), "{message:?} should contain {needle:?}");
        }
        assert!(TetMesh::new(p.clone(), vec![[0, 2, 1, 3]]).unwrap_err().to_string().contains("inverted"));
        let mut nan = p;
        nan[2][1] = f64::NAN;
        assert!(TetMesh::new(nan, vec![good]).unwrap_err().to_string().contains("non-finite"));
    }
}
