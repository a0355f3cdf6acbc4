//! A fine surface carried by a coarse simulation mesh (barycentric skinning): each point is
//! bound to one tet by its barycentric coordinates, and follows that tet's deformation.

use glam::DVec3;

use super::TetMesh;
use super::distance::closest_on_triangle;
use crate::error::{Error, Result};

/// Points bound to the tets of a mesh. Build it once at rest with [`Embedding::new`]; every
/// frame, [`Embedding::deform`] places the points from the simulation's positions.
#[derive(Clone, Debug)]
pub struct Embedding {
    /// Per point: its tet's vertices and its barycentric weights in them.
    bindings: Vec<([u32; 4], [f64; 4])>,
    vertex_count: usize,
    largest_gap: f64,
}

impl Embedding {
    /// Binds each point to the rest-shape tet that contains it, or, for a point outside the
    /// mesh (a render surface a little outside a coarse simulation mesh), to the nearest tet,
    /// whose deformation is then extrapolated.
    pub fn new(mesh: &TetMesh, points: &[[f64; 3]]) -> Result<Embedding> {
        if let Some(i) = points.iter().position(|p| p.iter().any(|c| !c.is_finite())) {
            return Err(Error::Mesh(format!(
                "embedded point {i} has a non-finite coordinate {:?}",
                points[i]
            )));
        }
        let grid = TetGrid::new(mesh);
        let mut largest_gap = 0.0f64;
        let bindings = points
            .iter()
            .map(|&p| {
                let (tet, gap) = grid.locate(mesh, DVec3::from(p));
                largest_gap = largest_gap.max(gap);
                let vertices = mesh.tets()[tet];
                (
                    vertices,
                    barycentric(vertices.map(|v| DVec3::from(mesh.positions()[v as usize])), DVec3::from(p)),
                )
            })
            .collect();
        Ok(Embedding { bindings, vertex_count: mesh.vertex_count(), largest_gap })
    }

    /// The points placed by the mesh's current `positions` (one per mesh vertex).
    pub fn deform(&self, positions: &[[f64; 3]]) -> Result<Vec<[f64; 3]>> {
        if positions.len() != self.vertex_count {
            return Err(Error::Mesh(format!(
                "{} positions given for an embedding in a mesh of {} vertices",
                positions.len(),
                self.vertex_count
            )));
        }
        Ok(self
            .bindings
            .iter()
            .map(|(tet, w)| {
                let p: DVec3 = (0..4).map(|k| w[k] * DVec3::from(positions[tet[k] as usize])).sum();
                p.to_array()
            })
            .collect())
    }

    /// Number of embedded points.
    pub fn len(&self) -> usize {
        self.bindings.len()
    }

    /// Whether no point is embedded.
    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }

    /// The largest distance from a point to its tet at rest: 0 when every point lies inside
    /// the mesh; otherwise how far the farthest one is extrapolated.
    pub fn largest_gap(&self) -> f64 {
        self.largest_gap
    }
}

/// Barycentric coordinates of `p` in the tet `x` (they sum to 1; all non-negative inside).
fn barycentric(x: [DVec3; 4], p: DVec3) -> [f64; 4] {
    let m = glam::DMat3::from_cols(x[1] - x[0], x[2] - x[0], x[3] - x[0]);
    let w = m.inverse() * (p - x[0]);
    [1.0 - w.x - w.y - w.z, w.x, w.y, w.z]
}

/// Tets binned by their bounding boxes on a uniform grid, for point location.
struct TetGrid {
    origin: DVec3,
    cell: f64,
    counts: [usize; 3],
    /// Per cell, the tets whose boxes overlap it.
    bins: Vec<Vec<u32>>,
}

impl TetGrid {
    fn new(mesh: &TetMesh) -> TetGrid {
        let (lo, hi) = super::tri_mesh::bounds(mesh.positions());
        let (lo, hi) = (DVec3::from(lo), DVec3::from(hi));
        // About two tets' size per cell: few tets per bin, few bins per tet.
        let volume = (hi - lo).max(DVec3::splat(1e-300)).element_product();
        let mut cell = 2.0 * (volume / mesh.tets().len() as f64).cbrt();
        // A flat or needle-shaped box holds little volume, so the cells come out small: widen
        // them until there are at most a few bins per tet.
        let budget = (8 * mesh.tets().len() + 64) as f64;
        let counts = loop {
            let counts = ((hi - lo) / cell).ceil().max(DVec3::ONE);
            if counts.element_product() <= budget {
                break counts.to_array().map(|n| n as usize);
            }
            cell *= 2.0;
        };
        let cell = (0..3).map(|c| (hi[c] - lo[c]) / counts[c] as f64).fold(cell * 1e-9, f64::max);
        let mut grid = TetGrid { origin: lo, cell, counts, bins: vec![Vec::new(); counts.iter().product()] };
        for (t, tet) in mesh.tets().iter().enumerate() {
            let p = tet.map(|v| DVec3::from(mesh.positions()[v as usize]));
            let (a, b) = (
                grid.cell_of(p.iter().copied().fold(p[0], DVec3::min)),
                grid.cell_of(p.iter().copied().fold(p[0], DVec3::max)),
            );
            for k in a[2]..=b[2] {
                for j in a[1]..=b[1] {
                    for i in a[0]..=b[0] {
                        let bin = grid.bin([i, j, k]);
                        grid.bins[bin].push(t as u32);
                    }
                }
            }
        }
        grid
    }

    fn cell_of(&self, p: DVec3) -> [usize; 3] {
        std::array::from_fn(|c| {
            (((p[c] - self.origin[c]) / self.cell).floor().max(0.0) as usize).min(self.counts[c] - 1)
        })
    }

    fn bin(&self, [i, j, k]: [usize; 3]) -> usize {
        i + self.counts[0] * (j + self.counts[1] * k)
    }

    /// The tet containing `p`, or the nearest one, with the distance to it (0 inside).
    fn locate(&self, mesh: &TetMesh, p: DVec3) -> (usize, f64) {
        let home = self.cell_of(p);
        let mut best: Option<(usize, f64)> = None;
        // Rings of cells around p's cell. A tet found in ring r is within r + 1 cells' reach;
        // any tet in a farther ring is at least (r' - 1) cells away, so searching stops once
        // that bound exceeds the best distance found.
        for ring in 0..=self.counts.iter().copied().max().unwrap_or(1) {
            if best.is_some_and(|(_, d)| (ring as f64 - 1.0) * self.cell > d) {
                break;
            }
            for cell in ring_cells(home, ring, self.counts) {
                for &t in &self.bins[self.bin(cell)] {
                    let d = distance_to_tet(mesh, t as usize, p);
                    if best.is_none_or(|(_, b)| d < b) {
                        best = Some((t as usize, d));
                    }
                    if d == 0.0 {
                        return (t as usize, 0.0);
                    }
                }
            }
        }
        best.expect("a TetMesh has at least one tet")
    }
}

/// The cells at Chebyshev distance exactly `ring` from `home`, inside the grid.
fn ring_cells(home: [usize; 3], ring: usize, counts: [usize; 3]) -> impl Iterator<Item = [usize; 3]> {
    let r = ring as i64;
    let range = move |c: usize| (home[c] as i64 - r).max(0)..=(home[c] as i64 + r).min(counts[c] as i64 - 1);
    range(2).flat_map(move |k| {
        range(1).flat_map(move |j| {
            range(0).filter_map(move |i| {
                let d = (i - home[0] as i64)
                    .abs()
                    .max((j - home[1] as i64).abs())
                    .max((k - home[2] as i64).abs());
                (d == r).then_some([i as usize, j as usize, k as usize])
            })
        })
    })
}

/// Distance from `p` to tet `t` (0 inside).
fn distance_to_tet(mesh: &TetMesh, t: usize, p: DVec3) -> f64 {
    let x = mesh.tets()[t].map(|v| DVec3::from(mesh.positions()[v as usize]));
    if barycentric(x, p).iter().all(|&w| w >= 0.0) {
        return 0.0;
    }
    [[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]]
        .iter()
        .map(|f| closest_on_triangle(p, x[f[0]], x[f[1]], x[f[2]]).distance(p))
        .fold(f64::INFINITY, f64::min)
}
