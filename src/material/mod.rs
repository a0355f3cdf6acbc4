//! Constitutive models in f64. Materials know nothing about meshes: they map a deformation
//! gradient `F` to an energy density, the first Piola stress `P = dpsi/dF`, and the stress
//! derivative `dP/dF` (optionally projected to be positive semi-definite).

mod isotropic;
pub(crate) mod projective;
mod spring;
pub(crate) mod stable_neo_hookean;
pub mod stretch;

pub use isotropic::Elastic;
pub use projective::{RotationSearch, closest_rotation};
pub(crate) use spring::SpringLaw;

use crate::error::{Error, Result};

/// The pairs of a tet's corners `a <= b < 3` whose Hessian blocks the lane kernels give
/// (corner 3's follow: the shape gradients sum to zero), in their order.
pub(crate) const CORNER_PAIRS: [(usize, usize); 6] = [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)];

/// Which isotropic hyperelastic energy an element uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaterialModel {
    /// Saint Venant-Kirchhoff: `mu |E|^2 + lambda/2 tr(E)^2`, `E = (F^T F - I)/2`. Quartic in
    /// positions, which is what lets AVF conserve its energy exactly.
    StVK,
    /// Corotated: `mu |F - R|^2 + lambda/2 tr(S - I)^2` with the signed polar decomposition.
    Corotated,
    /// Fixed corotated (Stomakhin et al. 2012): `mu |F - R|^2 + lambda/2 (J - 1)^2`.
    FixedCorotated,
    /// Compressible neo-Hookean: `mu/2 (I_C - 3) - mu ln J + lambda/2 (ln J)^2`. Infinite for
    /// `J <= 0`, so the line search never steps into an inverted element. The GPU, in f32,
    /// takes it infinite from `J <= 1e-5 s^(3/2)`, `s = max(1, |F|^2 / 3)`, below which f32
    /// does not resolve `J`: a state it accepts is inside the domain in f64 as well.
    NeoHookean,
    /// Stable neo-Hookean (Smith et al. 2018): `mu/2 (I_C - 3) - mu (J - 1) + l/2 (J - 1)^2`
    /// with `l = lambda + mu`, which matches linear elasticity at small strain and is defined
    /// (and smooth) through inversion.
    StableNeoHookean,
    /// As-rigid-as-possible: `mu |F - R|^2`; the Poisson ratio is not used.
    Arap,
}

impl MaterialModel {
    /// Every model.
    pub const ALL: [MaterialModel; 6] = [
        MaterialModel::StVK,
        MaterialModel::Corotated,
        MaterialModel::FixedCorotated,
        MaterialModel::NeoHookean,
        MaterialModel::StableNeoHookean,
        MaterialModel::Arap,
    ];
}

/// How the material's parameters were given.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Parameters {
    Engineering { youngs: f64, poisson: f64 },
    Lame { mu: f64, lambda: f64 },
}

/// A material: a model and its elastic constants. Validated when the simulation is built.
#[derive(Clone, Debug, PartialEq)]
pub struct Material {
    model: MaterialModel,
    parameters: Parameters,
}

macro_rules! engineering_constructor {
    ($name:ident, $model:ident, $doc:literal) => {
        #[doc = $doc]
        pub fn $name(youngs: f64, poisson: f64) -> Material {
            Material { model: MaterialModel::$model, parameters: Parameters::Engineering { youngs, poisson } }
        }
    };
}

impl Material {
    engineering_constructor!(
        stvk,
        StVK,
        "Saint Venant-Kirchhoff from Young's modulus (Pa) and Poisson ratio."
    );
    engineering_constructor!(corotated, Corotated, "Corotated from Young's modulus (Pa) and Poisson ratio.");
    engineering_constructor!(
        fixed_corotated,
        FixedCorotated,
        "Fixed corotated from Young's modulus (Pa) and Poisson ratio."
    );
    engineering_constructor!(
        neo_hookean,
        NeoHookean,
        "Neo-Hookean from Young's modulus (Pa) and Poisson ratio."
    );
    engineering_constructor!(
        stable_neo_hookean,
        StableNeoHookean,
        "Stable neo-Hookean from Young's modulus (Pa) and Poisson ratio."
    );
    engineering_constructor!(
        arap,
        Arap,
        "As-rigid-as-possible from Young's modulus (Pa); the Poisson ratio sets nothing but must be valid."
    );

    /// A material from Lame parameters directly.
    pub fn lame(model: MaterialModel, mu: f64, lambda: f64) -> Material {
        Material { model, parameters: Parameters::Lame { mu, lambda } }
    }

    /// The constitutive model.
    pub fn model(&self) -> MaterialModel {
        self.model
    }

    /// Lame parameters `(mu, lambda)`, or an error naming the bad parameter. A negative
    /// `lambda` (a Poisson ratio below 0, an auxetic material) is refused for the fixed
    /// corotated and neo-Hookean models: their volume terms then fall without bound, so
    /// their energies have no minimum and an implicit step can run off to minus infinity.
    /// StVK, corotated, stable neo-Hookean and ARAP stay bounded below for every valid
    /// ratio.
    pub fn lame_parameters(&self) -> Result<(f64, f64)> {
        let (mu, lambda) = self.given_lame_parameters()?;
        let unbounded = match self.model {
            MaterialModel::FixedCorotated => {
                Some("lambda/2 (J - 1)^2 falls without bound as an element grows")
            }
            MaterialModel::NeoHookean => {
                Some("lambda/2 (ln J)^2 falls without bound as an element is crushed")
            }
            _ => None,
        };
        match unbounded {
            Some(why) if lambda < 0.0 => Err(Error::Parameter(format!(
                "{:?} with lambda = {lambda} < 0 (a Poisson ratio below 0) has an energy with no minimum: \
                 {why}; use a Poisson ratio of at least 0, or Material::stvk, corotated or \
                 stable_neo_hookean, which stay bounded for auxetic materials",
                self.model
            ))),
            _ => Ok((mu, lambda)),
        }
    }

    /// [`Material::lame_parameters`] before the model's own check.
    fn given_lame_parameters(&self) -> Result<(f64, f64)> {
        match self.parameters {
            Parameters::Engineering { youngs, poisson } => {
                crate::error::require_positive("Young's modulus", youngs)?;
                if !(poisson > -1.0 && poisson < 0.5) {
                    return Err(Error::Parameter(format!(
                        "Poisson ratio must lie strictly between -1 and 0.5, got {poisson}"
                    )));
                }
                let mu = youngs / (2.0 * (1.0 + poisson));
                let lambda = youngs * poisson / ((1.0 + poisson) * (1.0 - 2.0 * poisson));
                Ok((mu, lambda))
            }
            Parameters::Lame { mu, lambda } => {
                crate::error::require_positive("Lame mu (shear modulus)", mu)?;
                // Bulk modulus lambda + 2/3 mu must be positive for a stable material.
                if !(lambda.is_finite() && lambda + 2.0 / 3.0 * mu > 0.0) {
                    return Err(Error::Parameter(format!(
                        "Lame lambda must be finite with lambda + 2/3 mu > 0, got lambda = {lambda}, mu = {mu}"
                    )));
                }
                Ok((mu, lambda))
            }
        }
    }

    /// The per-element evaluator, after validation.
    pub(crate) fn elastic(&self) -> Result<Elastic> {
        let (mu, lambda) = self.lame_parameters()?;
        Ok(Elastic::new(self.model, mu, lambda))
    }
}

/// Whether a stress derivative is the true one or its positive semi-definite projection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Projection {
    /// The exact second derivative (may be indefinite).
    None,
    /// Positive semi-definite, from the analytic eigensystem with negative eigenvalues replaced
    /// by their magnitudes. Clamping them to zero (the nearest PSD matrix) leaves the Newton
    /// model flat along directions the energy bends down; on a compressed StVK bar under AVF
    /// that took the hardest step from 25 to 59 Newton iterations.
    Psd,
}

#[cfg(test)]
mod tests;
