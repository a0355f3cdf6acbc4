//! Colliders and contact models (API only for now: a simulation with colliders is refused
//! at build time with a clear error until contact handling lands).

/// A static collision shape.
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
