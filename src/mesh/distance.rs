//! Distance queries on a closed triangle surface: a bounding-volume hierarchy for the closest
//! point and for segment crossings, the inside/outside sign of many points at once (the
//! generalized winding number, evaluated once per region no surface separates), and the
//! sampled signed-distance grid built from them.

use glam::DVec3;
use rayon::prelude::*;

use super::TriMesh;
use super::bvh::{Aabb, Bvh};
use crate::error::{Error, Result};

/// A bounding-box tree over a surface's triangles.
pub(crate) struct SurfaceTree<'a> {
    surface: &'a TriMesh,
    tree: Bvh,
}

impl<'a> SurfaceTree<'a> {
    pub(crate) fn new(surface: &'a TriMesh) -> SurfaceTree<'a> {
        let boxes: Vec<Aabb> =
            (0..surface.triangles().len()).map(|t| Aabb::of(corners(surface, t))).collect();
        SurfaceTree { surface, tree: Bvh::new(&boxes) }
    }

    /// Distance from `point` to the surface.
    pub(crate) fn distance(&self, point: [f64; 3]) -> f64 {
        let p = DVec3::from(point);
        let nearest = self.tree.nearest(p, |t| {
            let [a, b, c] = corners(self.surface, t as usize);
            Some((closest_on_triangle(p, a, b, c) - p).length_squared())
        });
        nearest.map_or(f64::INFINITY, |(_, d)| d.sqrt())
    }

    /// Where the segment from `a` to `b` first crosses the surface, as the fraction of the way
    /// from `a`; `None` when it crosses nowhere (or only through a triangle's edge, which
    /// round-off can hide).
    pub(crate) fn first_crossing(&self, a: [f64; 3], b: [f64; 3]) -> Option<f64> {
        let (a, b) = (DVec3::from(a), DVec3::from(b));
        let mut first: Option<f64> = None;
        self.tree.overlapping(&Aabb::of([a, b]), |t| {
            let [p, q, r] = corners(self.surface, t as usize);
            if let Some(s) = segment_triangle(a, b, p, q, r) {
                first = Some(first.map_or(s, |f| f.min(s)));
            }
        });
        first
    }
}

fn corners(surface: &TriMesh, t: usize) -> [DVec3; 3] {
    surface.triangles()[t].map(|v| DVec3::from(surface.positions()[v as usize]))
}

/// The point of triangle `abc` closest to `p`.
pub(crate) fn closest_on_triangle(p: DVec3, a: DVec3, b: DVec3, c: DVec3) -> DVec3 {
    let [u, v, w] = closest_weights_on_triangle(p, a, b, c);
    a * u + b * v + c * w
}

/// The barycentric weights of the point of triangle `abc` closest to `p`, by the Voronoi
/// region `p` falls in (Ericson, Real-Time Collision Detection, 5.1.5).
pub(crate) fn closest_weights_on_triangle(p: DVec3, a: DVec3, b: DVec3, c: DVec3) -> [f64; 3] {
    let (ab, ac, ap) = (b - a, c - a, p - a);
    let (d1, d2) = (ab.dot(ap), ac.dot(ap));
    if d1 <= 0.0 && d2 <= 0.0 {
        return [1.0, 0.0, 0.0];
    }
    let bp = p - b;
    let (d3, d4) = (ab.dot(bp), ac.dot(bp));
    if d3 >= 0.0 && d4 <= d3 {
        return [0.0, 1.0, 0.0];
    }
    let vc = d1 * d4 - d3 * d2;
    if vc <= 0.0 && d1 >= 0.0 && d3 <= 0.0 {
        let t = d1 / (d1 - d3);
        return [1.0 - t, t, 0.0];
    }
    let cp = p - c;
    let (d5, d6) = (ab.dot(cp), ac.dot(cp));
    if d6 >= 0.0 && d5 <= d6 {
        return [0.0, 0.0, 1.0];
    }
    let vb = d5 * d2 - d1 * d6;
    if vb <= 0.0 && d2 >= 0.0 && d6 <= 0.0 {
        let t = d2 / (d2 - d6);
        return [1.0 - t, 0.0, t];
    }
    let va = d3 * d6 - d5 * d4;
    if va <= 0.0 && d4 - d3 >= 0.0 && d5 - d6 >= 0.0 {
        let t = (d4 - d3) / ((d4 - d3) + (d5 - d6));
        return [0.0, 1.0 - t, t];
    }
    let denominator = 1.0 / (va + vb + vc);
    let (v, w) = (vb * denominator, vc * denominator);
    [1.0 - v - w, v, w]
}

/// The fraction of the way from `a` to `b` at which the segment meets triangle `pqr`
/// (Möller-Trumbore, both sides).
fn segment_triangle(a: DVec3, b: DVec3, p: DVec3, q: DVec3, r: DVec3) -> Option<f64> {
    let direction = b - a;
    let (e1, e2) = (q - p, r - p);
    let h = direction.cross(e2);
    let det = e1.dot(h);
    if det.abs() <= 1e-300 {
        return None;
    }
    let s = a - p;
    let u = s.dot(h) / det;
    if !(0.0..=1.0).contains(&u) {
        return None;
    }
    let k = s.cross(e1);
    let v = direction.dot(k) / det;
    if v < 0.0 || u + v > 1.0 {
        return None;
    }
    let t = e2.dot(k) / det;
    (0.0..=1.0).contains(&t).then_some(t)
}

/// Whether each of `points` lies inside the closed `surface`. `distance[i]` is point i's
/// distance to the surface, and `neighbours(i)` lists points near it. Two neighbours with
/// `distance[i] + distance[j] > |p_i - p_j|` cannot have the surface between them (a
/// surface point on the segment would be nearer to one of them), so they share their side:
/// the winding number is evaluated once per group so connected, in parallel. The test keeps a
/// relative margin: where the surface crosses the segment at right angles, the two sides are
/// equal but for round-off, and one wrong link would join the inside to the outside.
pub(crate) fn inside<N: IntoIterator<Item = usize>>(
    surface: &TriMesh,
    points: &[[f64; 3]],
    distance: &[f64],
    neighbours: impl Fn(usize) -> N,
) -> Vec<bool> {
    let mut group = vec![u32::MAX; points.len()];
    let mut seeds = Vec::new();
    let mut queue = Vec::new();
    for start in 0..points.len() {
        if group[start] != u32::MAX {
            continue;
        }
        let id = seeds.len() as u32;
        seeds.push(start);
        group[start] = id;
        queue.push(start);
        while let Some(i) = queue.pop() {
            for j in neighbours(i) {
                if group[j] == u32::MAX
                    && distance[i] + distance[j]
                        > (1.0 + 1e-6) * DVec3::from(points[i]).distance(DVec3::from(points[j]))
                {
                    group[j] = id;
                    queue.push(j);
                }
            }
        }
    }
    let seed_inside: Vec<bool> =
        seeds.par_iter().map(|&s| super::tri_mesh::winding_number(surface, points[s]).abs() > 0.5).collect();
    group.iter().map(|&g| seed_inside[g as usize]).collect()
}

/// A surface's signed distance sampled on a regular grid (negative inside), read back by
/// trilinear interpolation: the collider form of an arbitrary closed shape
/// ([`Collider::sdf`](crate::Collider::sdf)).
#[derive(Clone, PartialEq)]
pub struct SignedDistanceGrid {
    origin: [f64; 3],
    spacing: f64,
    /// Samples per axis.
    counts: [usize; 3],
    /// x fastest.
    values: Vec<f64>,
}

impl SignedDistanceGrid {
    /// Samples the signed distance of a closed surface every `spacing` over its bounding box
    /// grown by `margin` on every side. Distances are exact at the samples (closest point on the
    /// surface), signs come from the generalized winding number.
    pub fn from_surface(surface: &TriMesh, spacing: f64, margin: f64) -> Result<SignedDistanceGrid> {
        crate::error::require_positive("spacing", spacing)?;
        if !(margin.is_finite() && margin >= 0.0) {
            return Err(Error::Parameter(format!("margin must be finite and not negative, got {margin}")));
        }
        super::tri_mesh::check_closed(surface)?;
        let (lo, hi) = super::tri_mesh::bounds(surface.positions());
        let origin: [f64; 3] = std::array::from_fn(|c| lo[c] - margin);
        let counts = lattice_counts(std::array::from_fn(|c| hi[c] + margin - origin[c]), spacing, "spacing")?;
        let counts = counts.map(|n| n + 1);
        let index = |i: usize| [i % counts[0], (i / counts[0]) % counts[1], i / (counts[0] * counts[1])];
        let points: Vec<[f64; 3]> = (0..counts.iter().product())
            .map(|i| {
                let ijk = index(i);
                std::array::from_fn(|c| origin[c] + ijk[c] as f64 * spacing)
            })
            .collect();
        let tree = SurfaceTree::new(surface);
        let distance: Vec<f64> = points.par_iter().map(|&p| tree.distance(p)).collect();
        let strides = [1, counts[0], counts[0] * counts[1]];
        let inside = inside(surface, &points, &distance, |i| {
            let ijk = index(i);
            (0..3).flat_map(move |c| {
                let down = (ijk[c] > 0).then(|| i - strides[c]);
                let up = (ijk[c] + 1 < counts[c]).then(|| i + strides[c]);
                down.into_iter().chain(up)
            })
        });
        let values = distance.iter().zip(&inside).map(|(&d, &inside)| if inside { -d } else { d }).collect();
        Ok(SignedDistanceGrid { origin, spacing, counts, values })
    }

    /// The interpolated signed distance at `point` (negative inside), and its gradient. Outside
    /// the grid the nearest grid cell is extrapolated linearly.
    pub fn distance(&self, point: [f64; 3]) -> (f64, [f64; 3]) {
        let (d, gradient, _) = self.sample(DVec3::from(point));
        (d, gradient.to_array())
    }

    /// The trilinear interpolant at `p`: value, gradient and Hessian (its diagonal is zero; the
    /// mixed derivatives are not).
    pub(crate) fn sample(&self, p: DVec3) -> (f64, DVec3, glam::DMat3) {
        let mut cell = [0usize; 3];
        let mut f = [0.0; 3];
        for c in 0..3 {
            let x = (p[c] - self.origin[c]) / self.spacing;
            let i = (x.floor().max(0.0) as usize).min(self.counts[c] - 2);
            cell[c] = i;
            f[c] = x - i as f64;
        }
        let (mut d, mut gradient, mut hessian) = (0.0, DVec3::ZERO, glam::DMat3::ZERO);
        for corner in 0..8 {
            let b = [corner & 1, (corner >> 1) & 1, (corner >> 2) & 1];
            let v = self.values
                [cell[0] + b[0] + self.counts[0] * (cell[1] + b[1] + self.counts[1] * (cell[2] + b[2]))];
            // Weight per axis and its derivative.
            let w: [f64; 3] = std::array::from_fn(|c| if b[c] == 1 { f[c] } else { 1.0 - f[c] });
            let dw: [f64; 3] = std::array::from_fn(|c| if b[c] == 1 { 1.0 } else { -1.0 } / self.spacing);
            d += w[0] * w[1] * w[2] * v;
            gradient += DVec3::new(dw[0] * w[1] * w[2], w[0] * dw[1] * w[2], w[0] * w[1] * dw[2]) * v;
            let (xy, xz, yz) = (dw[0] * dw[1] * w[2] * v, dw[0] * w[1] * dw[2] * v, w[0] * dw[1] * dw[2] * v);
            hessian += glam::DMat3::from_cols(
                DVec3::new(0.0, xy, xz),
                DVec3::new(xy, 0.0, yz),
                DVec3::new(xz, yz, 0.0),
            );
        }
        (d, gradient, hessian)
    }

    /// The grid's first sample point.
    pub fn origin(&self) -> [f64; 3] {
        self.origin
    }

    /// The samples, x fastest.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// Grid spacing.
    pub fn spacing(&self) -> f64 {
        self.spacing
    }

    /// Samples per axis.
    pub fn counts(&self) -> [usize; 3] {
        self.counts
    }
}

impl std::fmt::Debug for SignedDistanceGrid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the samples: there are many.
        f.debug_struct("SignedDistanceGrid")
            .field("origin", &self.origin)
            .field("spacing", &self.spacing)
            .field("counts", &self.counts)
            .finish_non_exhaustive()
    }
}

/// Cells per axis to cover `extent` with cells of `spacing`, at least 1, refusing counts that
/// would not fit in memory (checked in f64 first, so a tiny spacing cannot overflow).
pub(crate) fn lattice_counts(extent: [f64; 3], spacing: f64, name: &str) -> Result<[usize; 3]> {
    const MAX_CELLS: f64 = 50_000_000.0;
    let per_axis: [f64; 3] = extent.map(|e| (e / spacing).ceil().max(1.0));
    let cells = per_axis[0] * per_axis[1] * per_axis[2];
    // A NaN count (from a NaN extent) is refused too.
    if cells.is_nan() || cells > MAX_CELLS {
        return Err(Error::Parameter(format!(
            "{name} {spacing} gives {cells:.3e} cells; use a larger {name}"
        )));
    }
    Ok(per_axis.map(|n| n as usize))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn brute_force_distance(surface: &TriMesh, p: [f64; 3]) -> f64 {
        (0..surface.triangles().len())
            .map(|t| {
                let [a, b, c] = corners(surface, t);
                closest_on_triangle(DVec3::from(p), a, b, c).distance(DVec3::from(p))
            })
            .fold(f64::INFINITY, f64::min)
    }

    /// The unit-sphere family the tests use.
    pub(crate) fn sphere(radius: f64, levels: usize) -> TriMesh {
        TriMesh::sphere([0.0; 3], radius, levels).unwrap()
    }

    #[test]
    fn tree_distance_and_crossings_match_brute_force() {
        let surface = sphere(1.0, 3);
        let tree = SurfaceTree::new(&surface);
        let mut seed = 7u64;
        let mut random = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0
        };
        for _ in 0..200 {
            let p = [random(), random(), random()];
            let (fast, slow) = (tree.distance(p), brute_force_distance(&surface, p));
            assert!((fast - slow).abs() < 1e-14, "{fast} vs {slow}");
        }
        // From the centre outward the segment crosses once, at the (faceted) sphere.
        let t = tree.first_crossing([0.0; 3], [2.0, 0.3, 0.1]).unwrap();
        let hit = DVec3::new(2.0, 0.3, 0.1) * t;
        assert!((hit.length() - 1.0).abs() < 0.02 && tree.distance(hit.to_array()) < 1e-12, "{hit}");
        assert_eq!(tree.first_crossing([0.0; 3], [0.5, 0.0, 0.0]), None);
    }

    #[test]
    fn signed_distance_grid_of_a_sphere() {
        let surface = sphere(1.0, 4);
        let grid = SignedDistanceGrid::from_surface(&surface, 0.05, 0.2).unwrap();
        // The faceted sphere's inscribed radius is within 0.3% of 1 at this subdivision.
        for p in [[0.0, 0.0, 0.0], [0.3, -0.2, 0.1], [1.1, 0.0, 0.0], [-0.4, 0.8, 0.5], [0.0, 0.0, -1.15]] {
            let expected = DVec3::from(p).length() - 1.0;
            let (d, g) = grid.distance(p);
            assert!((d - expected).abs() < 0.01, "{p:?}: {d} vs {expected}");
            if DVec3::from(p).length() > 0.05 {
                let radial = DVec3::from(p).normalize();
                assert!(DVec3::from(g).dot(radial) > 0.95, "{p:?}: gradient {g:?}");
            }
        }
        // The Hessian is the interpolant's: central differences of its gradient agree.
        let p = DVec3::new(0.31, -0.22, 0.47);
        let (_, _, hessian) = grid.sample(p);
        for c in 0..3 {
            let mut e = DVec3::ZERO;
            e[c] = 1e-6;
            let difference = (grid.sample(p + e).1 - grid.sample(p - e).1) / 2e-6;
            assert!(
                (difference - hessian.col(c)).length() < 1e-6,
                "column {c}: {difference} vs {}",
                hessian.col(c)
            );
        }
        assert!(SignedDistanceGrid::from_surface(&surface, 0.0, 0.1).is_err());
        assert!(
            SignedDistanceGrid::from_surface(&surface, 1e-9, 0.1)
                .unwrap_err()
                .to_string()
                .contains("spacing")
        );
    }
}
