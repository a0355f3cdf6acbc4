//! Colliders and contact models: static shapes with signed distances, the penalty, barrier
//! and projection models, the path bounds that keep vertices from crossing a surface, and
//! lagged Coulomb friction; self-collision and contact between bodies in `self_contact`.

pub(crate) mod self_contact;

pub use self_contact::SelfCollision;

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

    /// Signed distance (m) from `point` to the collider's surface, negative inside: what the
    /// contact models act on.
    pub fn signed_distance(&self, point: [f64; 3]) -> f64 {
        self.distance(DVec3::from(point)).phi
    }
}

/// How contact with colliders is enforced.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ContactModel {
    /// Quadratic penalty on penetration, `k phi^2 / 2` at depth `-phi`: collision springs
    /// instanced where a vertex is inside (the AVF and stabilizing papers).
    Penalty {
        /// Penalty stiffness (N/m).
        stiffness: f64,
    },
    /// The optimization integrator's level-set penalty (section 5.2), `k |phi|^3` at depth
    /// `-phi`: soft at first touch, its force `3 k phi^2` growing with the depth's square,
    /// so deep impacts stop in a shallower depth than a quadratic penalty of the same resting
    /// depth allows. Not with the local/global solver (its energy is not a projective one).
    CubicPenalty {
        /// Stiffness `k` (N/m^2).
        stiffness: f64,
    },
    /// Exact non-penetration as a constraint, with no contact energy (the optimization
    /// integrator's projection, section 3.2, Newton's solver on the CPU or the GPU; analytic colliders
    /// only, and not with A-1, A-search or Newmark, whose velocities leave out the constraint
    /// forces): every trial position
    /// of a vertex stops where its straight path from the last iterate first meets a collider
    /// (a curved line search, so nothing tunnels), and a vertex resting on a collider moves
    /// only along it while the objective presses it in: the normal parts of its gradient and
    /// of its Newton step are removed, and the part removed is the normal force that lagged
    /// friction uses at the next step.
    Projection,
    /// IPC's log barrier, `-k (d - d^)^2 ln(d / d^)` for a vertex at distance `d < d^` from a
    /// collider: zero at the activation distance `d^` with its first two derivatives, infinite
    /// on the surface, so no step can end inside a collider; every Newton step is also cut
    /// short where a vertex's straight path would cross a surface (no tunnelling). Needs
    /// Newton's solver (on the CPU or the GPU) and every free vertex outside the colliders at
    /// the start.
    Barrier {
        /// Activation distance `d^` (m).
        distance: f64,
        /// Barrier stiffness `k` (N/m: the barrier's energy is `k` times an area).
        stiffness: f64,
    },
}

/// What each contact model does with a vertex at signed distance `phi` from a collider.
impl ContactModel {
    /// The penalty stiffness (N/m); zero for the other models.
    pub(crate) fn penalty_stiffness(&self) -> f64 {
        match *self {
            ContactModel::Penalty { stiffness } => stiffness,
            ContactModel::CubicPenalty { .. } | ContactModel::Barrier { .. } | ContactModel::Projection => {
                0.0
            }
        }
    }

    pub(crate) fn is_barrier(&self) -> bool {
        matches!(self, ContactModel::Barrier { .. })
    }

    pub(crate) fn is_projection(&self) -> bool {
        matches!(self, ContactModel::Projection)
    }

    /// For the laws that keep vertices out of the colliders, the signed distance at or below
    /// which a free vertex counts as inside: the barrier's surface, or just below the
    /// projection's (which lets a vertex rest on it).
    pub(crate) fn floor(&self) -> Option<f64> {
        match self {
            ContactModel::Penalty { .. } | ContactModel::CubicPenalty { .. } => None,
            ContactModel::Barrier { .. } => Some(0.0),
            ContactModel::Projection => Some(-RESTING_GAP),
        }
    }

    /// The contact model's name, for messages.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            ContactModel::Penalty { .. } => "penalty",
            ContactModel::CubicPenalty { .. } => "cubic penalty",
            ContactModel::Barrier { .. } => "barrier",
            ContactModel::Projection => "projection",
        }
    }

    /// Whether a vertex at `phi` feels the collider's energy. The quadratic penalty counts a
    /// vertex on the surface, where its energy and force are zero but its curvature is `k`
    /// (the one-sided second derivative from inside): without it Newton's model of a body
    /// resting exactly on a collider has no contact in it, overshoots by the whole step's
    /// fall, and no step length of a budget's search finds a decrease, so the body never moves.
    pub(crate) fn active(&self, phi: f64) -> bool {
        match *self {
            ContactModel::Penalty { .. } => phi <= 0.0,
            ContactModel::CubicPenalty { .. } => phi < 0.0,
            ContactModel::Barrier { distance, .. } => phi < distance,
            ContactModel::Projection => false,
        }
    }

    /// The energy at `phi`.
    pub(crate) fn energy(&self, phi: f64) -> f64 {
        match *self {
            ContactModel::Penalty { stiffness } => {
                if phi < 0.0 {
                    0.5 * stiffness * phi * phi
                } else {
                    0.0
                }
            }
            ContactModel::CubicPenalty { stiffness } => {
                if phi < 0.0 {
                    -stiffness * phi * phi * phi
                } else {
                    0.0
                }
            }
            ContactModel::Barrier { distance, stiffness } => {
                if phi <= 0.0 {
                    f64::INFINITY
                } else if phi < distance {
                    -stiffness * (phi - distance).powi(2) * (phi / distance).ln()
                } else {
                    0.0
                }
            }
            ContactModel::Projection => 0.0,
        }
    }

    /// The energy's first and second derivatives in `phi` where [`active`](Self::active).
    pub(crate) fn derivatives(&self, phi: f64) -> (f64, f64) {
        match *self {
            ContactModel::Penalty { stiffness } => (stiffness * phi, stiffness),
            ContactModel::CubicPenalty { stiffness } => {
                (-3.0 * stiffness * phi * phi, -6.0 * stiffness * phi)
            }
            ContactModel::Barrier { distance, stiffness } => {
                let (gap, log) = (phi - distance, (phi / distance).ln());
                let first = -stiffness * (2.0 * gap * log + gap * gap / phi);
                let second = -stiffness * (2.0 * log + 4.0 * gap / phi - gap * gap / (phi * phi));
                (first, second)
            }
            ContactModel::Projection => (0.0, 0.0),
        }
    }

    /// The normal force (N) on a vertex at `phi`: the penalty's `k |phi|` inside, the
    /// barrier's `-b'(phi)` within its distance.
    pub(crate) fn normal_force(&self, phi: f64) -> f64 {
        if self.active(phi) { -self.derivatives(phi).0 } else { 0.0 }
    }
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

    /// The collider moved by `offset` (m), to place a shape built about the origin; a plane
    /// moves along its normal only. [`Simulation::move_collider`](crate::Simulation::move_collider)
    /// moves one of a running scene (a kinematic collider).
    pub fn translated(&self, offset: [f64; 3]) -> Collider {
        let t = DVec3::from(offset);
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

/// The colliders and the contact law a contact evaluation needs: plain data the model holds,
/// handed over without the model; under the projection model, which has no contact energy to
/// differentiate, the normal force (N) on each vertex its last solve pressed against a
/// collider (empty otherwise).
pub(crate) struct Contacts<'a> {
    pub colliders: &'a [Collider],
    pub law: ContactModel,
    pub pressing: &'a [f64],
}

/// Below this tangential speed (m/s) lagged friction acts as a stiff viscous stick.
const STICK_SPEED: f64 = 1e-3;

/// Adds lagged Coulomb friction to the per-vertex lagged quadratics: for a vertex touching a
/// collider at `x_n`, with normal force `lambda` (the law's) and tangential velocity `v_t`
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
            let lambda = if contacts.law.is_projection() {
                if d.phi <= resting_gap(DVec3::from(x[i])) {
                    contacts.pressing.get(i).copied().unwrap_or(0.0)
                } else {
                    0.0
                }
            } else {
                contacts.law.normal_force(d.phi)
            };
            if lambda <= 0.0 || lambda.is_nan() {
                continue;
            }
            let motion = collider_motion.get(j).map_or(DVec3::ZERO, |m| DVec3::from(*m));
            let n = d.normal.normalize_or_zero();
            let tangent = DMat3::IDENTITY - DMat3::from_cols(n * n.x, n * n.y, n * n.z);
            let v_t = tangent * (DVec3::from(v[i]) - motion / dt);
            let c = collider.friction * lambda / v_t.length().max(STICK_SPEED);
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

/// The first free vertex at a signed distance at most `floor` from a collider (see
/// [`ContactModel::floor`]), as `(vertex, collider)`: a state the law cannot start from.
pub(crate) fn first_penetration(
    colliders: &[Collider],
    pinned: &[bool],
    x: &[[f64; 3]],
    floor: f64,
) -> Option<(usize, usize)> {
    x.iter().enumerate().filter(|&(v, _)| !pinned[v]).find_map(|(v, p)| {
        colliders.iter().position(|c| c.distance(DVec3::from(*p)).phi <= floor).map(|i| (v, i))
    })
}

/// The error for a state with vertex `v` inside collider `i`, under contact law `name`.
pub(crate) fn penetration_error(v: usize, i: usize, x: &[[f64; 3]], what: &str, name: &str) -> crate::Error {
    crate::Error::State(format!(
        "{what} vertex {v} (at {:?}) inside collider {i}; the {name} contact model needs every \
         free vertex outside the colliders",
        x[v]
    ))
}

/// A vertex this close to a collider (m) rests on it, for the projection model, or closer
/// than [`resting_gap`] says.
pub(crate) const RESTING_GAP: f64 = 1e-9;
/// f32 roundings of a position within which a vertex rests on a collider.
const RESTING_ROUNDINGS: f64 = 4.0;

/// The distance within which a vertex at `x` rests on a collider: [`RESTING_GAP`], or a few
/// f32 roundings of its position, which is what the GPU resolves (`shared/collider.wgsl`);
/// the CPU uses the same, so that the twins agree on who rests.
pub(crate) fn resting_gap(x: DVec3) -> f64 {
    RESTING_GAP.max(RESTING_ROUNDINGS * f32::EPSILON as f64 * x.abs().max_element())
}

/// The projection model's trial positions, for each free vertex moving from `x` to `y`: a
/// vertex resting on a collider slides along it (its move loses the part into the
/// collider); the move then stops where its straight path first meets a collider, if it
/// does, so nothing tunnels; and a point that rounding left just inside goes back out along
/// the normal.
pub(crate) fn stop_at_contact(colliders: &[Collider], pinned: &[bool], x: &[[f64; 3]], y: &mut [[f64; 3]]) {
    for (v, (x, y)) in x.iter().zip(y.iter_mut()).enumerate() {
        let from = DVec3::from(*x);
        let mut d = DVec3::from(*y) - from;
        if pinned[v] || d == DVec3::ZERO {
            continue;
        }
        if let Some(n) = resting_normal(colliders, *x) {
            d -= n * d.dot(n).min(0.0);
        }
        let t = colliders.iter().fold(1.0, |t: f64, c| t.min(path_bound(c, from, d, 1.0, t)));
        let mut stop = from + d * t;
        for collider in colliders {
            let at = collider.distance(stop);
            if at.phi < 0.0 {
                stop -= at.normal * at.phi;
            }
        }
        *y = stop.to_array();
    }
}

/// The outward normal of the collider vertex `x` rests on, if it rests on one.
pub(crate) fn resting_normal(colliders: &[Collider], x: [f64; 3]) -> Option<DVec3> {
    let gap = resting_gap(DVec3::from(x));
    colliders.iter().map(|c| c.distance(DVec3::from(x))).find(|d| d.phi <= gap).map(|d| d.normal.normalize())
}

/// The part of a gap a Newton step may close: a barrier step leaves every vertex at least a
/// tenth of its distance from each collider, as IPC's line search does.
pub(crate) const CLOSABLE: f64 = 0.9;
/// Rounds per vertex and collider before the bound settles for what it has cleared.
const BOUND_ROUNDS: usize = 64;
/// A sampled grid's distance can change faster than the point moves (its trilinear gradient
/// is a unit normal only up to the sampling); its advancement assumes twice.
const SDF_LIPSCHITZ: f64 = 2.0;

/// The largest `t` in `[0, 1]` (checked, not exact) for which every free vertex's straight
/// path from `x` to `x + t d` closes at most `closable` of its distance to every collider
/// (1: the path only has to stay outside). A vertex already on or in a collider bounds the
/// step to zero.
pub(crate) fn step_bound(
    colliders: &[Collider],
    pinned: &[bool],
    x: &[[f64; 3]],
    d: &[[f64; 3]],
    closable: f64,
) -> f64 {
    let mut bound: f64 = 1.0;
    for (v, (x, d)) in x.iter().zip(d).enumerate() {
        let (x, d) = (DVec3::from(*x), DVec3::from(*d));
        if pinned[v] || d == DVec3::ZERO {
            continue;
        }
        for collider in colliders {
            bound = bound.min(path_bound(collider, x, d, closable, bound));
            if bound == 0.0 {
                return 0.0;
            }
        }
    }
    bound
}

/// Whether every free vertex's straight path from `from` to `to` stays outside the colliders:
/// under the barrier, a state reached by jumping through a thin collider would have a finite
/// objective, so an initial guess must pass this too.
pub(crate) fn path_clear(
    colliders: &[Collider],
    pinned: &[bool],
    from: &[[f64; 3]],
    to: &[[f64; 3]],
) -> bool {
    let path: Vec<[f64; 3]> =
        from.iter().zip(to).map(|(a, b)| [b[0] - a[0], b[1] - a[1], b[2] - a[2]]).collect();
    step_bound(colliders, pinned, from, &path, 1.0) == 1.0
}

/// [`step_bound`] for one vertex and collider, no further than `limit`.
///
/// The analytic shapes are convex, so their signed distance is convex along any line: Newton's
/// method on `phi(x + t d) = keep` from `t = 0` moves along tangents that lie below the
/// function, so every iterate stays short of the first crossing and they converge to it (a
/// slope that turns upward first means no crossing). A sampled grid may be any shape: there
/// the bound advances conservatively, by `(phi - keep) / (L |d|)` at a time, which no
/// surface can be nearer than. A vertex resting on a surface (`closable` 1, `phi <= 0`) may
/// move along it or away, not in.
pub(crate) fn path_bound(collider: &Collider, x: DVec3, d: DVec3, closable: f64, limit: f64) -> f64 {
    let phi = collider.distance(x).phi;
    if phi <= 0.0 && closable < 1.0 {
        return 0.0;
    }
    let keep = (1.0 - closable) * phi.max(0.0);
    let sampled = matches!(collider.shape, Shape::Sdf { .. });
    let length = d.length();
    // Slopes this small are a tangent's round-off.
    let level = -1e-9 * length;
    let mut t: f64 = 0.0;
    for _ in 0..BOUND_ROUNDS {
        let here = collider.distance(x + d * t);
        let slope = here.normal.dot(d);
        let gap = here.phi - keep;
        if gap <= 0.0 {
            return if t == 0.0 && slope >= level { limit } else { t };
        }
        let advance = if sampled {
            gap / (SDF_LIPSCHITZ * length)
        } else if slope >= level {
            return limit;
        } else {
            gap / -slope
        };
        if t + advance >= limit {
            return limit;
        }
        t += advance;
    }
    t
}

#[cfg(test)]
mod tests {
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    const BARRIER: ContactModel = ContactModel::Barrier { distance: 0.01, stiffness: 1e4 };

    /// A translated collider is the same shape moved: its signed distance and normal at a
    /// point moved with it are the original's, for every analytic shape (a plane's normal
    /// need not be unit length).
    #[test]
    fn a_translated_collider_is_the_same_shape_moved() {
        let mut rng = ChaCha8Rng::seed_from_u64(29);
        let shapes = [
            Collider::plane([0.3, 2.0, -0.5], 0.4),
            Collider::sphere([0.1, -0.2, 0.3], 0.25),
            Collider::cuboid([0.2, 0.1, -0.1], [0.3, 0.05, 0.2]),
            Collider::capsule([-0.2, 0.0, 0.1], [0.3, 0.2, -0.1], 0.08),
        ];
        for shape in shapes {
            let offset =
                [rng.random_range(-2e3..2e3), rng.random_range(-5.0..5.0), rng.random_range(-2e3..2e3)];
            let moved = shape.translated(offset);
            for _ in 0..20 {
                let x = DVec3::new(
                    rng.random_range(-0.6..0.6),
                    rng.random_range(-0.6..0.6),
                    rng.random_range(-0.6..0.6),
                );
                let (at, there) = (shape.distance(x), moved.distance(x + DVec3::from(offset)));
                assert!((at.phi - there.phi).abs() < 1e-9, "{shape:?} at {x}: {} / {}", at.phi, there.phi);
                assert!(at.normal.distance(there.normal) < 1e-9, "{shape:?} at {x}");
            }
        }
    }

    /// The barrier's derivatives are its energy's, it vanishes with them at the activation
    /// distance (C2), and it is infinite on the surface.
    #[test]
    fn the_barrier_is_smooth_at_its_distance_and_infinite_at_the_surface() {
        let h = 1e-7;
        for phi in [1e-4, 1e-3, 4e-3, 9e-3, 0.0099] {
            let (first, second) = BARRIER.derivatives(phi);
            let fd_first = (BARRIER.energy(phi + h) - BARRIER.energy(phi - h)) / (2.0 * h);
            let fd_second = (BARRIER.derivatives(phi + h).0 - BARRIER.derivatives(phi - h).0) / (2.0 * h);
            assert!(
                (first - fd_first).abs() < 1e-6 * first.abs().max(1e-3),
                "phi {phi}: {first} vs {fd_first}"
            );
            assert!(
                (second - fd_second).abs() < 1e-5 * second.abs().max(1.0),
                "phi {phi}: {second} vs {fd_second}"
            );
            assert!(first < 0.0 && second > 0.0, "phi {phi}: it pushes out and is convex");
            assert_eq!(BARRIER.normal_force(phi), -first);
        }
        let (first, second) = BARRIER.derivatives(0.01 * (1.0 - 1e-9));
        assert!(
            BARRIER.energy(0.01 * (1.0 - 1e-9)).abs() < 1e-20 && first.abs() < 1e-10 && second.abs() < 1e-3
        );
        assert_eq!(BARRIER.energy(0.01), 0.0);
        assert!(!BARRIER.active(0.02) && BARRIER.normal_force(0.02) == 0.0);
        assert_eq!(BARRIER.energy(0.0), f64::INFINITY);
        assert_eq!(BARRIER.energy(-1e-3), f64::INFINITY);
    }

    /// The cubic penalty's derivatives are its energy's (finite differences), it is C2 at the
    /// surface (value and both derivatives vanish) and inactive outside.
    #[test]
    fn the_cubic_penalty_is_k_depth_cubed_and_smooth_at_the_surface() {
        let law = ContactModel::CubicPenalty { stiffness: 2e6 };
        let h = 1e-7;
        for phi in [-2e-2, -5e-3, -1e-3, -1e-4] {
            let (first, second) = law.derivatives(phi);
            let fd_first = (law.energy(phi + h) - law.energy(phi - h)) / (2.0 * h);
            let fd_second = (law.derivatives(phi + h).0 - law.derivatives(phi - h).0) / (2.0 * h);
            assert!((first - fd_first).abs() < 1e-6 * first.abs(), "phi {phi}: {first} vs {fd_first}");
            assert!((second - fd_second).abs() < 1e-6 * second.abs(), "phi {phi}: {second} vs {fd_second}");
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-14 * b.abs();
            assert!(close(law.energy(phi), 2e6 * (-phi).powi(3)), "phi {phi}: energy {}", law.energy(phi));
            assert!(first < 0.0 && second > 0.0, "phi {phi}: it pushes out and is convex");
            assert!(close(law.normal_force(phi), 3.0 * 2e6 * phi * phi), "phi {phi}: force");
        }
        let (first, second) = law.derivatives(-1e-12);
        assert!(law.energy(-1e-12) < 1e-29 && first.abs() < 1e-17 && second.abs() < 1e-4);
        assert!(!law.active(0.0) && law.energy(1e-3) == 0.0 && law.normal_force(1e-3) == 0.0);
        assert_eq!(law.floor(), None);
    }

    /// On random straight paths toward every analytic shape, the bound is safe: the path up
    /// to it closes no more than the allowed part of the gap (sampled densely), and it is
    /// tight where the path really closes in (within 1 % of the last safe sample).
    #[test]
    fn the_step_bound_never_lets_a_path_cross() {
        let colliders = [
            Collider::plane([0.0, 1.0, 0.0], 0.0),
            Collider::sphere([0.0, 0.5, 0.0], 0.2),
            Collider::cuboid([0.3, 0.4, 0.0], [0.2, 0.025, 0.3]),
            Collider::capsule([-0.4, 0.3, -0.2], [-0.2, 0.6, 0.2], 0.05),
        ];
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut bounded = 0;
        for _ in 0..2000 {
            let x = [rng.random_range(-0.6..0.6), rng.random_range(0.0..1.0), rng.random_range(-0.4..0.4)];
            let d: [f64; 3] = std::array::from_fn(|_| rng.random_range(-1.0..1.0));
            if colliders.iter().any(|c| c.distance(DVec3::from(x)).phi <= 0.0) {
                continue;
            }
            for closable in [CLOSABLE, 1.0] {
                let t = step_bound(&colliders, &[false], &[x], &[d], closable);
                assert!((0.0..=1.0).contains(&t));
                bounded += usize::from(t < 1.0);
                let (x, d) = (DVec3::from(x), DVec3::from(d));
                for c in &colliders {
                    let keep = (1.0 - closable) * c.distance(x).phi;
                    for k in 0..=1000 {
                        let phi = c.distance(x + d * (t * k as f64 / 1000.0)).phi;
                        assert!(phi >= keep - 1e-12, "{c:?}: the path to t = {t} reaches {phi} < {keep}");
                    }
                }
                if t < 1.0 && closable == CLOSABLE {
                    // Some collider is almost reached at the bound.
                    let reached = colliders.iter().any(|c| {
                        let keep = (1.0 - closable) * c.distance(x).phi;
                        c.distance(x + d * t).phi - keep < 0.01 * c.distance(x).phi
                    });
                    assert!(reached, "the bound {t} from {x:?} along {d:?} stops short of every collider");
                }
            }
        }
        assert!(bounded > 200, "only {bounded} paths were bounded: the test would not see a crossing");
        // A pinned vertex is never bounded. One resting on the plane may leave it (up to the
        // sphere above) or slide along it, not go in; a barrier allows it no step at all.
        assert_eq!(step_bound(&colliders, &[true], &[[0.0, -1.0, 0.0]], &[[0.0, -1.0, 0.0]], 1.0), 1.0);
        let resting = [[0.5, 0.0, 0.0]];
        assert!(
            (step_bound(&colliders, &[false], &[[0.0, 0.0, 0.0]], &[[0.0, 1.0, 0.0]], 1.0) - 0.3).abs()
                < 1e-12
        );
        assert_eq!(step_bound(&colliders, &[false], &resting, &[[0.0, 0.0, 0.3]], 1.0), 1.0);
        assert_eq!(step_bound(&colliders, &[false], &resting, &[[0.0, -0.1, 0.3]], 1.0), 0.0);
        assert_eq!(step_bound(&colliders, &[false], &resting, &[[0.0, 0.0, 0.3]], CLOSABLE), 0.0);
    }

    /// The projection's trial positions: never inside a collider, never through one (a 5 cm
    /// slab crossed in one move stops at its near face), and a vertex resting on a surface
    /// keeps the part of its move along it.
    #[test]
    fn trial_positions_stop_at_contact_and_slide_along_it() {
        let colliders = [
            Collider::plane([0.0, 1.0, 0.0], 0.0),
            Collider::sphere([0.0, 0.5, 0.0], 0.2),
            Collider::cuboid([0.5, 0.5, 0.0], [0.025, 0.4, 0.4]),
        ];
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        for _ in 0..2000 {
            let x = [rng.random_range(-0.6..0.6), rng.random_range(0.0..1.0), rng.random_range(-0.4..0.4)];
            if colliders.iter().any(|c| c.distance(DVec3::from(x)).phi < 0.0) {
                continue;
            }
            let mut y = [std::array::from_fn(|c| x[c] + rng.random_range(-1.0..1.0))];
            stop_at_contact(&colliders, &[false], &[x], &mut y);
            for c in &colliders {
                let phi = c.distance(DVec3::from(y[0])).phi;
                assert!(phi >= -1e-12, "{c:?}: {x:?} moved to {:?}, {phi} inside", y[0]);
            }
            // Never across the slab: a path that stays within its height and depth (both ends
            // do, and the slab's cross-section is convex) ends on the side it started.
            let across = |p: [f64; 3]| (p[1] - 0.5).abs() < 0.4 && p[2].abs() < 0.4;
            if across(x) && across(y[0]) {
                assert_eq!(x[0] < 0.5, y[0][0] < 0.5, "{x:?} went through the slab to {:?}", y[0]);
            }
        }
        let mut y = [[0.3, -0.2, 0.1]];
        stop_at_contact(&colliders, &[false], &[[0.0, 0.0, 0.0]], &mut y);
        assert_eq!(y, [[0.3, 0.0, 0.1]], "a resting vertex slides");
        let mut y = [[0.8, 0.5, 0.0]];
        stop_at_contact(&colliders, &[false], &[[0.2, 0.5, 0.0]], &mut y);
        assert!((y[0][0] - 0.475).abs() < 1e-12 && y[0][1] == 0.5, "stopped at the slab's face: {y:?}");
    }
}
