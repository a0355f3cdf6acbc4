//! Damping models, all with their dissipated energy booked in the energy ledger:
//! lagged Rayleigh and ether drag act inside the implicit solve as per-step pseudo-potentials
//! (Gast et al. section 4.2; the ledger books twice the pseudo-potential, the work the lagged
//! force does over the step), the momentum-preserving model (Mueller et al., used by the
//! stabilizing paper) acts on the velocities after the step.

use glam::{DMat3, DVec3};

use crate::error::{Error, Result};
use crate::model::Model;

/// A damping model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Damping {
    /// Lagged Rayleigh damping `f = -k D(x_n) v`, `D` the PSD-projected stiffness at the start
    /// of the step; `stiffness` is `k` (s).
    Rayleigh {
        /// Stiffness-proportional coefficient (s).
        stiffness: f64,
    },
    /// Ether drag `f = -c v` on every vertex; `coefficient` is `c` (kg/s).
    Ether {
        /// Drag coefficient (kg/s).
        coefficient: f64,
    },
    /// Removes the fraction `coefficient` (in [0, 1]) of every vertex's velocity relative to
    /// the best-fit rigid motion after each step; linear and angular momentum are kept.
    MomentumPreserving {
        /// Fraction of the non-rigid velocity removed per step.
        coefficient: f64,
    },
}

impl Damping {
    pub(crate) fn validate(&self) -> Result<()> {
        let (name, value, max) = match *self {
            Damping::Rayleigh { stiffness } => ("Rayleigh stiffness", stiffness, f64::INFINITY),
            Damping::Ether { coefficient } => ("ether drag coefficient", coefficient, f64::INFINITY),
            Damping::MomentumPreserving { coefficient } => {
                ("momentum-preserving coefficient", coefficient, 1.0)
            }
        };
        if value.is_finite() && value >= 0.0 && value <= max {
            Ok(())
        } else {
            Err(Error::Parameter(format!("{name} must be finite, at least 0 and at most {max}, got {value}")))
        }
    }
}

/// Adds ether drag `c/(2h) |dx|^2` to the per-vertex lagged quadratics.
pub(crate) fn add_ether(coefficient: f64, dt: f64, out: &mut [[f64; 9]]) {
    let a = coefficient / dt;
    for block in out {
        block[0] += a;
        block[4] += a;
        block[8] += a;
    }
}

/// Velocities with the fraction `k` of their non-rigid part removed (eqs. 32-36 of the
/// stabilizing paper). Pinned vertices are left alone and excluded from the rigid fit.
pub(crate) fn momentum_preserving(model: &Model, x: &[[f64; 3]], v: &[[f64; 3]], k: f64) -> Vec<[f64; 3]> {
    let free = |i: usize| !model.pinned[i];
    let (mut mass, mut xm, mut vm) = (0.0, DVec3::ZERO, DVec3::ZERO);
    for i in (0..x.len()).filter(|&i| free(i)) {
        let m = model.masses[i];
        mass += m;
        xm += DVec3::from(x[i]) * m;
        vm += DVec3::from(v[i]) * m;
    }
    if mass == 0.0 {
        return v.to_vec();
    }
    let (x_cm, v_cm) = (xm / mass, vm / mass);
    let (mut l, mut inertia) = (DVec3::ZERO, DMat3::ZERO);
    for i in (0..x.len()).filter(|&i| free(i)) {
        let m = model.masses[i];
        let r = DVec3::from(x[i]) - x_cm;
        l += r.cross(DVec3::from(v[i])) * m;
        // R R^T for the cross-product matrix R of r is |r|^2 I - r r^T.
        inertia += (DMat3::IDENTITY * r.length_squared() - DMat3::from_cols(r * r.x, r * r.y, r * r.z)) * m;
    }
    // A degenerate (collinear) body has a singular inertia; its rigid rotation is then only
    // about the line, which the pseudo-inverse through a tiny shift captures well enough.
    let shift = 1e-12 * (inertia.x_axis.x + inertia.y_axis.y + inertia.z_axis.z).max(f64::MIN_POSITIVE);
    let omega = (inertia + DMat3::IDENTITY * shift).inverse() * l;
    (0..x.len())
        .map(|i| {
            if !free(i) {
                return v[i];
            }
            let rigid = v_cm + omega.cross(DVec3::from(x[i]) - x_cm);
            (DVec3::from(v[i]) - (DVec3::from(v[i]) - rigid) * k).into()
        })
        .collect()
}
