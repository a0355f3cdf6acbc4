//! Tetrahedral meshes.

use std::collections::HashMap;

use super::{TetArrays, signed_volume};
use crate::error::{Error, Result};

/// A tetrahedral mesh: rest positions, positively oriented tets and the boundary triangles.
#[derive(Clone, Debug, PartialEq)]
pub struct TetMesh {
    positions: Vec<[f64; 3]>,
    tets: Vec<[u32; 4]>,
    surface: Vec<[u32; 3]>,
}

/// What [`TetMesh::load_with_report`] repaired while loading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Tets stored with negative orientation, flipped on load.
    pub flipped: usize,
    /// Vertices no tet uses, dropped.
    pub unused_vertices: usize,
}

/// The four faces of a positively oriented tet, each wound so its normal points outward.
const OUTWARD_FACES: [[usize; 3]; 4] = [[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]];

impl TetMesh {
    /// A mesh from rest positions and tets. Rejects out-of-range indices, repeated vertices,
    /// non-finite positions and inverted or zero-volume elements, naming the element.
    pub fn new(positions: Vec<[f64; 3]>, tets: Vec<[u32; 4]>) -> Result<TetMesh> {
        validate(&positions, &tets)?;
        let surface = boundary_triangles(&tets);
        Ok(TetMesh { positions, tets, surface })
    }

    /// Checks the mesh as [`TetMesh::new`] does: a generated bar of a zero, tiny or
    /// non-finite size fails here, where a simulation builder takes it.
    pub(crate) fn validate(&self) -> Result<()> {
        validate(&self.positions, &self.tets)
    }

    /// A box `[0, size]` split into `cells` cubes of five tets each. Neighbouring cubes use
    /// mirrored splits so their shared faces agree, and the central tet of each cube is
    /// regular for cubic cells, so the mesh has no slivers. A count of 0 cells is taken as 1.
    ///
    /// # Panics
    ///
    /// Where [`TetMesh::try_bar`] fails: more vertices than `u32` ids can name, or more than
    /// memory holds. Sizes from user input go to `try_bar`.
    pub fn bar(cells: [usize; 3], size: [f64; 3]) -> TetMesh {
        TetMesh::try_bar(cells, size).unwrap_or_else(|e| panic!("TetMesh::bar: {e}"))
    }

    /// [`TetMesh::bar`], or an error where its vertices would not fit `u32` ids or its arrays
    /// the memory.
    pub fn try_bar(cells: [usize; 3], size: [f64; 3]) -> Result<TetMesh> {
        let [nx, ny, nz] = cells.map(|c| c.max(1));
        let vertices = super::grid_vertex_count("bar", &[nx, ny, nz])?;
        let id = |i: usize, j: usize, k: usize| (i + (nx + 1) * (j + (ny + 1) * k)) as u32;
        // Both reserved before either is filled, so that a refusal comes at once. No overflow:
        // 5 nx ny nz < 5 (nx + 1)(ny + 1)(nz + 1) <= 5 u32::MAX.
        let mut tets = super::reserve("bar tets", 5 * nx * ny * nz)?;
        let mut positions = super::reserve("bar vertices", vertices)?;
        grid(
            &mut positions,
            [nx, ny, nz],
            [0.0; 3],
            std::array::from_fn(|c| size[c] / [nx, ny, nz][c] as f64),
        );
        for k in 0..nz {
            for j in 0..ny {
                for i in 0..nx {
                    let corner = |c: usize| id(i + (c & 1), j + ((c >> 1) & 1), k + ((c >> 2) & 1));
                    tets.extend(split_cube([i, j, k], corner, &positions));
                }
            }
        }
        let surface = boundary_triangles(&tets);
        Ok(TetMesh { positions, tets, surface })
    }

    /// Reads a tet mesh, choosing the reader by extension: Gmsh `.msh` (2.2 or 4.1 ASCII),
    /// TetGen `.node` with its `.ele`, legacy VTK `.vtk` (ASCII), Medit `.mesh`. Tets are
    /// oriented positively (file conventions differ) and vertices no tet uses are dropped;
    /// [`TetMesh::load_with_report`] says how many. Degenerate tets are an error naming the
    /// element.
    pub fn load(path: impl AsRef<std::path::Path>) -> Result<TetMesh> {
        TetMesh::load_with_report(path).map(|(mesh, _)| mesh)
    }

    /// [`TetMesh::load`], also reporting what loading repaired.
    pub fn load_with_report(path: impl AsRef<std::path::Path>) -> Result<(TetMesh, LoadReport)> {
        let path = path.as_ref();
        TetMesh::repaired(path, super::io::read_tets(path)?)
    }

    /// A tet mesh from a file's text held in memory: `name`'s extension picks the format as in
    /// [`TetMesh::load`] (`.msh`, `.vtk`, `.mesh`), and errors name it. TetGen's two files go
    /// to [`TetMesh::parse_tetgen`].
    pub fn parse(name: &str, text: &str) -> Result<(TetMesh, LoadReport)> {
        let path = std::path::Path::new(name);
        TetMesh::repaired(path, super::io::parse_tets(path, text)?)
    }

    /// A tet mesh from the texts of a TetGen `.node` file and its `.ele` file.
    pub fn parse_tetgen(node: &str, ele: &str) -> Result<(TetMesh, LoadReport)> {
        let (node_name, ele_name) = (std::path::Path::new("(node)"), std::path::Path::new("(ele)"));
        TetMesh::repaired(node_name, super::io::tetgen(node_name, node, ele_name, ele)?)
    }

    /// Drops unused vertices, flips negative tets and validates, counting the repairs.
    fn repaired(source: &std::path::Path, (positions, tets): TetArrays) -> Result<(TetMesh, LoadReport)> {
        let read_vertices = positions.len();
        let (positions, tets) = compact(positions, tets);
        let mut report = LoadReport { flipped: 0, unused_vertices: read_vertices - positions.len() };
        let tets = tets
            .into_iter()
            .map(|mut t| {
                // Out-of-range indices are left for TetMesh::new to report.
                let p = t.map(|v| positions.get(v as usize).copied().unwrap_or_default());
                if signed_volume(p[0], p[1], p[2], p[3]) < 0.0 {
                    t.swap(2, 3);
                    report.flipped += 1;
                }
                t
            })
            .collect();
        let mesh =
            TetMesh::new(positions, tets).map_err(|e| Error::Mesh(format!("{}: {e}", source.display())))?;
        Ok((mesh, report))
    }

    /// Tetrahedralizes the inside of a closed surface by isosurface stuffing (Labelle and
    /// Shewchuk 2007): a body-centred cubic lattice of spacing `target_edge` (its long edges;
    /// the short ones are 0.87 of that), clipped by the surface's generalized winding number, with
    /// the boundary vertices on the surface. Every tet is positively oriented; the dihedral
    /// angles are bounded away from 0 and 180 degrees where the lattice resolves the surface
    /// ([`TetMesh::dihedral_angle_range`] reports them). Deterministic. A surface that is not
    /// closed and manifold, or a `target_edge` too small to fit in memory, is an error.
    pub fn from_surface(surface: &super::TriMesh, target_edge: f64) -> Result<TetMesh> {
        crate::error::require_positive("target_edge", target_edge)?;
        super::tri_mesh::check_closed(surface)?;
        let (positions, tets) = super::stuffing::stuff(surface, target_edge)?;
        TetMesh::new(positions, tets)
    }

    /// The total rest volume (m^3).
    pub fn volume(&self) -> f64 {
        self.tets
            .iter()
            .map(|t| {
                let p = t.map(|v| self.positions[v as usize]);
                signed_volume(p[0], p[1], p[2], p[3])
            })
            .sum()
    }

    /// The smallest and largest dihedral angle over all tets, in degrees: the usual measure of
    /// a tet mesh's quality (slivers have angles near 0 and 180).
    pub fn dihedral_angle_range(&self) -> (f64, f64) {
        let mut range = (180.0f64, 0.0f64);
        for tet in &self.tets {
            let p = tet.map(|v| glam::DVec3::from(self.positions[v as usize]));
            let normal = |f: [usize; 3]| (p[f[1]] - p[f[0]]).cross(p[f[2]] - p[f[0]]);
            let normals = OUTWARD_FACES.map(normal);
            for a in 0..4 {
                for b in a + 1..4 {
                    // The angle between the outward normals by atan2, which keeps a sliver's
                    // tiny angle where acos of a dot product near -1 rounds it to 0.
                    let (n, m) = (normals[a], normals[b]);
                    let angle = 180.0 - n.cross(m).length().atan2(n.dot(m)).to_degrees();
                    range = (range.0.min(angle), range.1.max(angle));
                }
            }
        }
        range
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

/// The five positively oriented tets of the cube at cell `cell`, whose corners (by bit
/// pattern x | y << 1 | z << 2) are vertex `corner(bits)`. Neighbouring cubes use mirrored
/// splits so their shared faces agree; the central tet is regular for cubic cells.
fn split_cube(cell: [usize; 3], corner: impl Fn(usize) -> u32, positions: &[[f64; 3]]) -> [[u32; 4]; 5] {
    const EVEN: [[usize; 4]; 5] = [[1, 2, 4, 7], [0, 1, 2, 4], [3, 1, 2, 7], [5, 1, 4, 7], [6, 2, 4, 7]];
    const ODD: [[usize; 4]; 5] = [[0, 3, 5, 6], [1, 0, 3, 5], [2, 0, 3, 6], [4, 0, 5, 6], [7, 3, 5, 6]];
    let split = if (cell[0] + cell[1] + cell[2]).is_multiple_of(2) { &EVEN } else { &ODD };
    split.map(|t| {
        let mut tet = t.map(&corner);
        let p = tet.map(|v| positions[v as usize]);
        if signed_volume(p[0], p[1], p[2], p[3]) < 0.0 {
            tet.swap(2, 3);
        }
        tet
    })
}

/// Out-of-range indices, repeated vertices, non-finite positions and inverted or zero-volume
/// elements, naming the element.
fn validate(positions: &[[f64; 3]], tets: &[[u32; 4]]) -> Result<()> {
    if let Some(i) = positions.iter().position(|p| p.iter().any(|c| !c.is_finite())) {
        return Err(Error::Mesh(format!("vertex {i} has a non-finite coordinate {:?}", positions[i])));
    }
    let extent = bounding_extent(positions);
    // Volumes below 1e-12 of the body's bounding cube are zero to f64 round-off.
    let min_volume = 1e-12 * extent.powi(3);
    if !min_volume.is_finite() {
        return Err(Error::Mesh(format!(
            "the mesh spans {extent:e}: its volumes overflow f64; rescale it (lengths are in meters)"
        )));
    }
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
                "element {e} {tet:?} has zero volume to round-off: {volume:e}, at most 1e-12 of \
                 the body's bounding cube ({:e}); remove or repair it",
                extent.powi(3)
            )));
        }
        if volume < 0.0 {
            return Err(Error::Mesh(format!(
                "element {e} {tet:?} is inverted (signed volume {volume:e}); swap two of its vertices"
            )));
        }
    }
    Ok(())
}

/// Appends the vertices of a grid of `cells` starting at `origin`, x fastest.
fn grid(positions: &mut Vec<[f64; 3]>, cells: [usize; 3], origin: [f64; 3], spacing: [f64; 3]) {
    let [nx, ny, nz] = cells;
    for k in 0..=nz {
        for j in 0..=ny {
            for i in 0..=nx {
                let index = [i, j, k];
                positions.push(std::array::from_fn(|c| origin[c] + index[c] as f64 * spacing[c]));
            }
        }
    }
}

/// Drops vertices no tet uses and renumbers the tets.
fn compact(positions: Vec<[f64; 3]>, tets: Vec<[u32; 4]>) -> TetArrays {
    let mut index = vec![u32::MAX; positions.len()];
    let mut kept = Vec::new();
    for tet in &tets {
        for &v in tet {
            // Out-of-range indices are left for TetMesh::new to report.
            if let Some(slot) = index.get_mut(v as usize).filter(|slot| **slot == u32::MAX) {
                *slot = kept.len() as u32;
                kept.push(positions[v as usize]);
            }
        }
    }
    if kept.len() == positions.len() {
        return (positions, tets);
    }
    let tets = tets.into_iter().map(|t| t.map(|v| index.get(v as usize).copied().unwrap_or(v))).collect();
    (kept, tets)
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
pub(crate) fn boundary_triangles(tets: &[[u32; 4]]) -> Vec<[u32; 3]> {
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

    /// Generated meshes too large for `u32` ids or for memory are errors, not a wrap or an
    /// abort. (A count memory cannot hold on every machine: more bytes than an address has.)
    #[test]
    fn oversized_generated_meshes_are_errors() {
        let ids = TetMesh::try_bar([1 << 11, 1 << 11, 1 << 10], [1.0; 3]).unwrap_err().to_string();
        assert!(ids.contains("vertex ids"), "{ids}");
        let cloth = crate::SpringMesh::try_cloth(1 << 16, 1 << 16, [1.0; 2]).unwrap_err().to_string();
        assert!(cloth.contains("vertex ids"), "{cloth}");
        let memory =
            super::super::reserve::<[f64; 3]>("bar vertices", usize::MAX / 16).unwrap_err().to_string();
        assert!(memory.contains("bar vertices") && memory.contains("memory"), "{memory}");
        assert_eq!(
            TetMesh::try_bar([3, 2, 2], [0.3, 0.2, 0.2]).unwrap(),
            TetMesh::bar([3, 2, 2], [0.3, 0.2, 0.2])
        );
    }

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
        let huge: Vec<[f64; 3]> = p.iter().map(|v| v.map(|c| c * 1e300)).collect();
        assert!(TetMesh::new(huge, vec![good]).unwrap_err().to_string().contains("overflow"));
        let mut nan = p;
        nan[2][1] = f64::NAN;
        assert!(TetMesh::new(nan, vec![good]).unwrap_err().to_string().contains("non-finite"));
    }
}
