//! Triangle surfaces: the input of `TetMesh::from_surface`.

use std::collections::HashMap;

use glam::DVec3;

use crate::error::{Error, Result};

/// A triangle surface.
#[derive(Clone, Debug, PartialEq)]
pub struct TriMesh {
    positions: Vec<[f64; 3]>,
    triangles: Vec<[u32; 3]>,
}

impl TriMesh {
    /// A surface from positions and triangles; rejects out-of-range indices and non-finite
    /// positions.
    pub fn new(positions: Vec<[f64; 3]>, triangles: Vec<[u32; 3]>) -> Result<TriMesh> {
        if let Some(i) = positions.iter().position(|p| p.iter().any(|c| !c.is_finite())) {
            return Err(Error::Mesh(format!("surface vertex {i} has a non-finite coordinate")));
        }
        if let Some(t) = triangles.iter().position(|t| t.iter().any(|&v| v as usize >= positions.len())) {
            return Err(Error::Mesh(format!(
                "triangle {t} {:?} refers to a vertex past the {} the surface has",
                triangles[t],
                positions.len()
            )));
        }
        Ok(TriMesh { positions, triangles })
    }

    /// Reads `.obj` or ASCII `.ply` (polygons are split into fans).
    pub fn load(path: impl AsRef<std::path::Path>) -> Result<TriMesh> {
        let (positions, triangles) = super::io::read_triangles(path.as_ref())?;
        TriMesh::new(positions, triangles)
            .map_err(|e| Error::Mesh(format!("{}: {e}", path.as_ref().display())))
    }

    /// A sphere of `radius` about `center`: an octahedron whose triangles are split in four
    /// `subdivisions` times, the vertices pushed onto the sphere (8 * 4^subdivisions
    /// triangles, outward wound; 4 subdivisions lie within 0.2 % of the radius).
    pub fn sphere(center: [f64; 3], radius: f64, subdivisions: usize) -> Result<TriMesh> {
        crate::error::require_positive("radius", radius)?;
        if subdivisions > 8 {
            return Err(Error::Parameter(format!(
                "{subdivisions} subdivisions make over 500K triangles; use 8 or fewer"
            )));
        }
        let mut p: Vec<DVec3> = vec![DVec3::X, -DVec3::X, DVec3::Y, -DVec3::Y, DVec3::Z, -DVec3::Z];
        let mut t: Vec<[u32; 3]> =
            vec![[0, 2, 4], [2, 1, 4], [1, 3, 4], [3, 0, 4], [2, 0, 5], [1, 2, 5], [3, 1, 5], [0, 3, 5]];
        for _ in 0..subdivisions {
            let mut midpoint = HashMap::new();
            let mut next = Vec::with_capacity(4 * t.len());
            for tri in &t {
                let m: [u32; 3] = std::array::from_fn(|k| {
                    let (a, b) = (tri[k].min(tri[(k + 1) % 3]), tri[k].max(tri[(k + 1) % 3]));
                    *midpoint.entry((a, b)).or_insert_with(|| {
                        p.push(((p[a as usize] + p[b as usize]) / 2.0).normalize());
                        p.len() as u32 - 1
                    })
                });
                next.extend([[tri[0], m[0], m[2]], [m[0], tri[1], m[1]], [m[2], m[1], tri[2]], m]);
            }
            t = next;
        }
        TriMesh::new(p.iter().map(|v| (DVec3::from(center) + *v * radius).to_array()).collect(), t)
    }

    /// A surface from a file's text held in memory: `name`'s extension (`.obj` or `.ply`)
    /// picks the format, and errors name it.
    pub fn parse(name: &str, text: &str) -> Result<TriMesh> {
        let (positions, triangles) = super::io::parse_triangles(std::path::Path::new(name), text)?;
        TriMesh::new(positions, triangles).map_err(|e| Error::Mesh(format!("{name}: {e}")))
    }

    /// The volume a closed surface encloses (m^3, by the divergence theorem; positive whichever
    /// way the triangles are wound).
    pub fn enclosed_volume(&self) -> f64 {
        self.triangles
            .iter()
            .map(|t| {
                let [a, b, c] = t.map(|v| DVec3::from(self.positions[v as usize]));
                a.dot(b.cross(c)) / 6.0
            })
            .sum::<f64>()
            .abs()
    }

    /// Vertex positions.
    pub fn positions(&self) -> &[[f64; 3]] {
        &self.positions
    }

    /// Triangles as vertex indices.
    pub fn triangles(&self) -> &[[u32; 3]] {
        &self.triangles
    }
}

/// Every edge must be shared by exactly two triangles (closed and manifold).
pub(crate) fn check_closed(surface: &TriMesh) -> Result<()> {
    if surface.triangles.is_empty() {
        return Err(Error::Mesh("the surface has no triangles".into()));
    }
    let mut edges: HashMap<(u32, u32), u32> = HashMap::new();
    for t in &surface.triangles {
        for (a, b) in [(t[0], t[1]), (t[1], t[2]), (t[2], t[0])] {
            *edges.entry((a.min(b), a.max(b))).or_default() += 1;
        }
    }
    let mut bad: Vec<_> = edges.into_iter().filter(|(_, n)| *n != 2).collect();
    bad.sort_unstable();
    match bad.first() {
        None => Ok(()),
        Some(((a, b), n)) => Err(Error::Mesh(format!(
            "the surface is not closed and manifold: edge ({a}, {b}) is used by {n} triangles (needs 2)"
        ))),
    }
}

/// Bounding box `(lo, hi)`.
pub(crate) fn bounds(positions: &[[f64; 3]]) -> ([f64; 3], [f64; 3]) {
    positions.iter().fold(([f64::INFINITY; 3], [f64::NEG_INFINITY; 3]), |(lo, hi), p| {
        (std::array::from_fn(|c| lo[c].min(p[c])), std::array::from_fn(|c| hi[c].max(p[c])))
    })
}

/// Generalized winding number of the surface around `point`: the sum of the triangles'
/// signed solid angles over 4 pi (Van Oosterom and Strackee). About +-1 inside a closed
/// surface, 0 outside, whatever the surface's orientation convention.
pub(crate) fn winding_number(surface: &TriMesh, point: [f64; 3]) -> f64 {
    let p = DVec3::from(point);
    let mut total = 0.0;
    for t in &surface.triangles {
        let [a, b, c] = t.map(|v| DVec3::from(surface.positions[v as usize]) - p);
        let (la, lb, lc) = (a.length(), b.length(), c.length());
        let numerator = a.dot(b.cross(c));
        let denominator = la * lb * lc + a.dot(b) * lc + a.dot(c) * lb + b.dot(c) * la;
        total += 2.0 * numerator.atan2(denominator);
    }
    total / (4.0 * std::f64::consts::PI)
}
