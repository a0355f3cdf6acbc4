//! The GPU backend: WGSL compute stages through wgpu, f32 on the device, every stage the twin
//! of a CPU stage in `backend/cpu` (same slots, same meaning) and tested against it.
//!
//! `GpuBackend` implements the step's `Stages` with the `element` (every material, exact or
//! projected Hessians), `gather` (inertia, gravity, colliders, handles, lagged damping),
//! `assemble`, `pcg` and `vector` stages, all recorded into one `Recording` that is
//! submitted only when the host needs a result. `GpuContext::start_profiling` times every pass with
//! timestamp queries where the adapter has them.

mod backend;
mod context;
pub mod element;
pub mod linear;
pub mod recording;
pub mod shaders;
mod stage;

pub use backend::GpuBackend;
pub use context::{GpuContext, PassTime};
pub use recording::DeviceCounts;

/// The binding table the Rust side declares for a stage, by stage name.
pub fn stage_bindings(stage: &str) -> Option<Vec<shaders::Binding>> {
    match stage {
        "element" => Some(element::bindings()),
        "gather" => Some(linear::gather_bindings()),
        "assemble" => Some(linear::assemble_bindings()),
        "pcg" => Some(linear::pcg_bindings()),
        "vector" => Some(linear::vector_bindings()),
        _ => None,
    }
}
pub use element::{GpuElements, WgElement};
pub use linear::{GpuLinear, PcgStatus, Positions, WgLinear};

#[cfg(test)]
mod tests;
