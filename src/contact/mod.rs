//! Colliders and contact models: static shapes with signed distances, the penalty contact
//! model, and lagged Coulomb friction.

/// A collision shape: static, or kinematic when the application moves it between steps
/// (`Simulation::move_collider`).
#[derive(Clone, Debug, PartialEq)]
pub struct Collider {
    /// The shape.
    pub shape: Shape,
    /// Coulomb friction coefficient.
    pub friction: f64,
}

/// Collider geometry.
#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    /// Half-space `normal . x >= offset`.
    Plane { normal: [f64; 3], offset: f64 },
    /// Ball.
    Sphere { center: [f64; 3], radius: f64 },
    /// Axis-aligned box.
    Cuboid { center: [f64; 3], half_extents: [f64; 3] },
    /// Segment `a`-`b` swept by a ball.
    Capsule { a: [f64; 3], b: [f64; 3], radius: f64 },
    /// Any closed shape, by its sampled signed distance (trilinear between the samples),
    /// shifted by `offset` (m) from where it was sampled.
    Sdf { grid: std::sync::Arc<crate::mesh::SignedDistanceGrid>, offset: [f64; 3] },
}

impl Collider {
    fn new(shape: Shape) -> Collider {
        Collider { shape, friction: 0.0 }
    }

    /// The half-space `normal . x >= offset`.
    pub fn plane(normal: [f64; 3], offset: f64) -> Collider {
        Collider::new(Shape::Plane { normal, offset })
    }

    /// A sphere.
    pub fn sphere(center: [f64; 3], radius: f64) -> Collider {
        Collider::new(Shape::Sphere { center, radius })
    }

    /// An axis-aligned box.
    pub fn cuboid(center: [f64; 3], half_extents: [f64; 3]) -> Collider {
        Collider::new(Shape::Cuboid { center, half_extents })
    }

    /// A capsule.
    pub fn capsule(a: [f64; 3], b: [f64; 3], radius: f64) -> Collider {
        Collider::new(Shape::Capsule { a, b, radius })
    }

    /// A static shape given by its signed-distance grid, such as
    /// `SignedDistanceGrid::from_surface(&level_mesh, spacing, margin)`: level geometry,
    /// a bowl, any closed surface. Its distance is the grid's trilinear interpolant, so
    /// contact resolves features down to the grid spacing.
    pub fn sdf(grid: crate::mesh::SignedDistanceGrid) -> Collider {
        Collider::new(Shape::Sdf { grid: std::sync::Arc::new(grid), offset: [0.0; 3] })
    }

    /// Sets the Coulomb friction coefficient.
    pub fn friction(mut self, mu: f64) -> Collider {
        self.friction = mu;
        self
    }
}

/// How contact with colliders is enforced.
#[derive(Clone, Debug, PartialEq)]
pub enum ContactModel {
    /// Quadratic penalty on penetration.
    Penalty {
        /// Penalty stiffness (N/m).
        stiffness: f64,
    },
    /// Projection onto the feasible set inside Newton (gradient projection).
    Projection,
    /// Smooth barrier active within `distance` of a collider.
    Barrier {
        /// Activation distance (m).
        distance: f64,
        /// Barrier stiffness.
        stiffness: f64,
    },
}

use glam::{DMat3, DVec3};

/// Signed distance to a collider's surface (negative inside the solid), its gradient (the
/// outward normal) and its Hessian.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Distance {
    pub phi: f64,
    pub normal: DVec3,
    pub hessian: DMat3,
}

/// `(I - n n^T - a a^T) / rho`: the curvature of a distance to a point (`a = 0`) or a line.
fn curvature(normal: DVec3, axis: DVec3, rho: f64) -> DMat3 {
    let outer = |u: DVec3| DMat3::from_cols(u * u.x, u * u.y, u * u.z);
    (DMat3::IDENTITY - outer(normal) - outer(axis)) / rho
}

/// The direction from `center` to `x`, or a fixed one where they coincide.
fn direction(x: DVec3, center: DVec3) -> (DVec3, f64) {
    let d = x - center;
    let rho = d.length();
    if rho > 1e-300 { (d / rho, rho) } else { (DVec3::Y, 0.0) }
}

impl Collider {
    /// Validates the geometry, naming what is wrong.
    pub(crate) fn validate(&self, index: usize) -> crate::Result<()> {
        let finite = |v: &[f64]| v.iter().all(|c| c.is_finite());
        let ok = match &self.shape {
            Shape::Plane { normal, offset } => {
                finite(normal) && offset.is_finite() && DVec3::from(*normal).length() > 0.0
            }
            Shape::Sphere { center, radius } => finite(center) && radius.is_finite() && *radius > 0.0,
            Shape::Cuboid { center, half_extents } => {
                finite(center) && half_extents.iter().all(|h| h.is_finite() && *h > 0.0)
            }
            Shape::Capsule { a, b, radius } => finite(a) && finite(b) && radius.is_finite() && *radius > 0.0,
            // Built from a validated surface.
            Shape::Sdf { offset, .. } => finite(offset),
        };
        if !ok {
            return Err(crate::Error::Parameter(format!(
                "collider {index} ({:?}) needs finite coordinates, a non-zero plane normal and positive sizes",
                self.shape
            )));
        }
        if !(self.friction.is_finite() && self.friction >= 0.0) {
            return Err(crate::Error::Parameter(format!(
                "collider {index}: friction must be finite and not negative, got {}",
                self.friction
            )));
        }
        Ok(())
    }

    /// The collider moved by `t` (m); a plane moves along its normal only.
    pub(crate) fn translated(&self, t: DVec3) -> Collider {
        let add = |p: &[f64; 3]| (DVec3::from(*p) + t).to_array();
        let shape = match &self.shape {
            Shape::Plane { normal, offset } => {
                Shape::Plane { normal: *normal, offset: offset + DVec3::from(*normal).dot(t) }
            }
            Shape::Sphere { center, radius } => Shape::Sphere { center: add(center), radius: *radius },
            Shape::Cuboid { center, half_extents } => {
                Shape::Cuboid { center: add(center), half_extents: *half_extents }
            }
            Shape::Capsule { a, b, radius } => Shape::Capsule { a: add(a), b: add(b), radius: *radius },
            Shape::Sdf { grid, offset } => Shape::Sdf { grid: grid.clone(), offset: add(offset) },
        };
        Collider { shape, ..self.clone() }
    }

    /// Signed distance at `x`. Exact for planes, spheres and capsules; inside a cuboid, the
    /// distance to the nearest face; a grid's trilinear interpolant, whose gradient (the
    /// `normal`) is unit length only up to the sampling.
    pub(crate) fn distance(&self, x: DVec3) -> Distance {
        match &self.shape {
            Shape::Plane { normal, offset } => {
                let length = DVec3::from(*normal).length();
                let n = DVec3::from(*normal) / length;
                Distance { phi: n.dot(x) - offset / length, normal: n, hessian: DMat3::ZERO }
            }
            Shape::Sphere { center, radius } => {
                let (n, rho) = direction(x, DVec3::from(*center));
                let hessian = if rho > 0.0 { curvature(n, DVec3::ZERO, rho) } else { DMat3::ZERO };
                Distance { phi: rho - radius, normal: n, hessian }
            }
            Shape::Cuboid { center, half_extents } => {
                let d = x - DVec3::from(*center);
                let q = d.abs() - DVec3::from(*half_extents);
                if q.max_element() <= 0.0 {
                    // Inside: the nearest face decides.
                    let axis = if q.x >= q.y && q.x >= q.z {
                        0
                    } else if q.y >= q.z {
                        1
                    } else {
                        2
                    };
                    let mut n = DVec3::ZERO;
                    n[axis] = d[axis].signum();
                    Distance { phi: q[axis], normal: n, hessian: DMat3::ZERO }
                } else {
                    let outside = q.max(DVec3::ZERO);
                    let normal = (outside * d.signum()).normalize();
                    Distance { phi: outside.length(), normal, hessian: DMat3::ZERO }
                }
            }
            Shape::Capsule { a, b, radius } => {
                let (a, b) = (DVec3::from(*a), DVec3::from(*b));
                let axis = b - a;
                let length2 = axis.length_squared();
                let t = if length2 > 0.0 { ((x - a).dot(axis) / length2).clamp(0.0, 1.0) } else { 0.0 };
                let (n, rho) = direction(x, a + axis * t);
                let along = if t > 0.0 && t < 1.0 { axis / length2.sqrt() } else { DVec3::ZERO };
                let hessian = if rho > 0.0 { curvature(n, along, rho) } else { DMat3::ZERO };
                Distance { phi: rho - radius, normal: n, hessian }
            }
            Shape::Sdf { grid, offset } => {
                let (phi, normal, hessian) = grid.sample(x - DVec3::from(*offset));
                Distance { phi, normal, hessian }
            }
        }
    }
}

/// The colliders and the penalty stiffness (N/m) a contact evaluation needs: plain data the
/// model holds, handed over without the model.
pub(crate) struct Contacts<'a> {
    pub colliders: &'a [Collider],
    pub stiffness: f64,
}

/// Below this tangential speed (m/s) lagged friction acts as a stiff viscous stick.
const STICK_SPEED: f64 = 1e-3;

/// Adds lagged Coulomb friction to the per-vertex lagged quadratics: for a vertex inside a
/// collider at `x_n`, with normal force `lambda = k |phi|` and tangential velocity `v_t`
/// relative to the collider, the pseudo-potential `c/(2h) |P_t (dx - s)|^2`,
/// `c = mu lambda / max(|v_t|, STICK_SPEED)`, `s` the collider's motion over the step
/// (`collider_motion`, empty for none), whose force `-c v_t` has the Coulomb magnitude
/// `mu lambda` while sliding (DESIGN.md: lagged friction; the ledger books twice the
/// pseudo-potential). The quadratic goes into `out`; with a moving collider its linear term
/// `-b . dx + c0`, `b = A s`, `c0 = 1/2 s^T A s`, into `linear` (as `[b, c0]`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn add_lagged_friction(
    contacts: &Contacts<'_>,
    collider_motion: &[[f64; 3]],
    pinned: &[bool],
    x: &[[f64; 3]],
    v: &[[f64; 3]],
    dt: f64,
    out: &mut [[f64; 9]],
    linear: &mut [[f64; 4]],
) {
    for (i, block) in out.iter_mut().enumerate() {
        if pinned[i] {
            continue;
        }
        for (j, collider) in contacts.colliders.iter().enumerate().filter(|(_, c)| c.friction > 0.0) {
            let d = collider.distance(DVec3::from(x[i]));
            if d.phi >= 0.0 {
                continue;
            }
            let motion = collider_motion.get(j).map_or(DVec3::ZERO, |m| DVec3::from(*m));
            let n = d.normal.normalize_or_zero();
            let tangent = DMat3::IDENTITY - DMat3::from_cols(n * n.x, n * n.y, n * n.z);
            let v_t = tangent * (DVec3::from(v[i]) - motion / dt);
            let c = collider.friction * contacts.stiffness * d.phi.abs() / v_t.length().max(STICK_SPEED);
            if motion != DVec3::ZERO {
                let b = tangent * motion * (c / dt);
                let l = &mut linear[i];
                l[0] += b.x;
                l[1] += b.y;
                l[2] += b.z;
                l[3] += 0.5 * b.dot(motion);
            }
            let a = (tangent * (c / dt)).transpose().to_cols_array();
            for k in 0..9 {
                block[k] += a[k];
            }
        }
    }
}
