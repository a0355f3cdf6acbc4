//! Meshes: tetrahedral bodies and mass-spring bodies, their generators and validation, and
//! their readers and writers.

pub(crate) mod bvh;
mod distance;
mod embedding;
mod io;
mod spring_mesh;
mod stuffing;
mod tet_mesh;
mod tri_mesh;
mod write;

pub use distance::SignedDistanceGrid;
pub(crate) use distance::closest_weights_on_triangle;
pub use embedding::Embedding;
pub use spring_mesh::{Spring, SpringKind, SpringMesh};
pub(crate) use tet_mesh::boundary_triangles;
pub use tet_mesh::{LoadReport, TetMesh};
pub use tri_mesh::TriMesh;
pub use write::VtuSeries;

use crate::error::{Error, Result};

/// A tet mesh as arrays: vertex positions and the tets' vertex indices.
pub(crate) type TetArrays = (Vec<[f64; 3]>, Vec<[u32; 4]>);
/// A surface as arrays: vertex positions and the triangles' vertex indices.
pub(crate) type TriangleArrays = (Vec<[f64; 3]>, Vec<[u32; 3]>);
/// A surface as read from a polygon file, before triangulation: positions and faces.
pub(crate) type PolygonArrays = (Vec<[f64; 3]>, Vec<Vec<u32>>);

/// The number of vertices of a grid of `cells` (each vertex count `cells[c] + 1`), or an error
/// where it would not fit the meshes' `u32` vertex ids.
pub(crate) fn grid_vertex_count(what: &str, cells: &[usize]) -> Result<usize> {
    let count = cells.iter().try_fold(1usize, |n, &c| n.checked_mul(c.checked_add(1)?));
    match count {
        Some(n) if n <= u32::MAX as usize => Ok(n),
        _ => Err(Error::Parameter(format!(
            "a {what} of {cells:?} cells has more vertices than the {} that vertex ids (u32) can \
             name; use fewer cells",
            u32::MAX
        ))),
    }
}

/// An empty vector with room for `count` items, or an error (not an abort) where memory
/// cannot hold them: a generated mesh's size comes from user input.
pub(crate) fn reserve<T>(what: &str, count: usize) -> Result<Vec<T>> {
    let mut items = Vec::new();
    items.try_reserve_exact(count).map_err(|_| {
        let bytes = count as f64 * std::mem::size_of::<T>() as f64;
        Error::Parameter(format!(
            "{what}: {count} items ({:.3} GB) do not fit in this machine's memory; ask for fewer",
            bytes / 1e9
        ))
    })?;
    Ok(items)
}

/// Signed volume of the tetrahedron `(a, b, c, d)`: positive when `d` lies on the side of
/// `(a, b, c)` that their counter-clockwise normal points to.
pub(crate) fn signed_volume(a: [f64; 3], b: [f64; 3], c: [f64; 3], d: [f64; 3]) -> f64 {
    let e = |p: [f64; 3]| glam::DVec3::from(p) - glam::DVec3::from(a);
    e(b).cross(e(c)).dot(e(d)) / 6.0
}
