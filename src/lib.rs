//! # lively
//!
//! Real-time simulation of deformable solids — tetrahedral finite elements and mass-spring
//! cloth — whose motion stays lively at the fixed 1/30 s steps games use: implicit schemes
//! written as one minimization (DESIGN.md section 2), solved by a safeguarded Newton method,
//! with energy-conserving (AVF) and energy-tracking integrators.
//!
//! ```
//! use lively::{Integrator, Material, Simulation, Solver, TetMesh};
//!
//! # fn main() -> Result<(), lively::Error> {
//! let mesh = TetMesh::bar([6, 2, 2], [0.6, 0.2, 0.2]);
//! let mut sim = Simulation::builder()
//!     .tet_body(mesh, Material::stvk(1e5, 0.3), 1000.0)
//!     .dt(1.0 / 30.0)
//!     .gravity([0.0, -9.81, 0.0])
//!     .integrator(Integrator::Avf)
//!     .solver(Solver::newton().tolerance(1e-8).max_iterations(50))
//!     .pin(|p| p[0] < 1e-9)
//!     .build()?;
//! let stats = sim.step()?;
//! assert!(stats.converged);
//! let e = sim.energy();
//! assert!((e.total - e.target).abs() < 1e-6 * e.kinetic.abs().max(1.0));
//! # Ok(())
//! # }
//! ```

// `!(a > b)` is how this crate says "not greater, or NaN": the NaN case is the point.
#![allow(clippy::neg_cmp_op_on_partial_ord)]
// The numeric kernels index several arrays by the same loop variables, as the math and
// their WGSL twins do.
#![allow(clippy::needless_range_loop)]

pub mod backend;
mod contact;
mod damping;
mod error;
pub mod integrator;
pub mod material;
pub mod math;
pub mod mesh;
mod model;
pub mod objective;
pub mod plot;
pub mod presets;
pub mod render;
pub mod scene;
mod sim;
pub mod solver;
mod state;
pub mod viewer;

pub use backend::LinearSolver;
pub use contact::{Collider, ContactModel, SelfCollision, Shape};
pub use damping::Damping;
pub use error::{Error, Result};
pub use integrator::{Decay, EnergyLedger, Integrator};
pub use material::{Material, MaterialModel};
pub use mesh::{
    Embedding, LoadReport, SignedDistanceGrid, Spring, SpringKind, SpringMesh, TetMesh, TriMesh, VtuSeries,
};
pub use model::Model;
pub use sim::{
    Backend, EnergyReport, FixedStep, FrameStats, HandleId, Simulation, SimulationBuilder, SolveOutcome,
    StepStats, StepTimings,
};
pub use solver::{HessianPolicy, Solver};
pub use state::State;
