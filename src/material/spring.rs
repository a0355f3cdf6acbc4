//! Spring energies as functions of the edge vector `d = x_j - x_i`.

use glam::{DMat3, DVec3};

use super::Projection;
use crate::mesh::SpringKind;

/// One spring's constitutive law: kind, stiffness and rest length.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct SpringLaw {
    pub kind: SpringKind,
    pub stiffness: f64,
    pub rest: f64,
}

impl SpringLaw {
    /// Energy of the spring at edge vector `d`.
    pub fn energy(&self, d: DVec3) -> f64 {
        let k = self.stiffness;
        match self.kind {
            SpringKind::Hooke => 0.5 * k * (d.length() - self.rest).powi(2),
            SpringKind::StVK => 0.5 * k * (d.length_squared() - self.rest * self.rest).powi(2),
        }
    }

    /// `dE/dd`; the force on the second end is its negative.
    pub fn gradient(&self, d: DVec3) -> DVec3 {
        let k = self.stiffness;
        match self.kind {
            SpringKind::Hooke => {
                let len = d.length();
                // A collapsed spring pushes along no particular direction: zero is the
                // subgradient of minimal norm.
                if len <= f64::MIN_POSITIVE { DVec3::ZERO } else { d * (k * (len - self.rest) / len) }
            }
            SpringKind::StVK => d * (2.0 * k * (d.length_squared() - self.rest * self.rest)),
        }
    }

    /// `d2E/dd2`, exact or with its negative eigenvalues replaced by their magnitudes. The
    /// eigenvectors are `d` itself and the plane orthogonal to it, so the projection is analytic.
    pub fn hessian(&self, d: DVec3, projection: Projection) -> DMat3 {
        let k = self.stiffness;
        let len2 = d.length_squared();
        let clamp = |x: f64| {
            if projection == Projection::Psd { x.abs() } else { x }
        };
        let (along, across) = match self.kind {
            SpringKind::Hooke => {
                let len = len2.sqrt();
                let across = if len <= f64::MIN_POSITIVE { 0.0 } else { k * (1.0 - self.rest / len) };
                (k, across)
            }
            SpringKind::StVK => {
                let r2 = self.rest * self.rest;
                (2.0 * k * (3.0 * len2 - r2), 2.0 * k * (len2 - r2))
            }
        };
        let (along, across) = (clamp(along), clamp(across));
        let dd = if len2 <= f64::MIN_POSITIVE {
            DMat3::ZERO
        } else {
            DMat3::from_cols(d * d.x, d * d.y, d * d.z) / len2
        };
        dd * along + (DMat3::IDENTITY - dd) * across
    }
}
