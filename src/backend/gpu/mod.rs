//! The GPU backend: WGSL compute stages through wgpu, f32 on the device, every stage the twin
//! of a CPU stage in `backend/cpu` (same slots, same meaning) and tested against it.
//!
//! Landed so far: the device context (own or the application's), the `#import` shader
//! preprocessor with naga validation of every composed module, and the element stage for
//! the polynomial materials and both spring kinds. The remaining stages (gather, assembly,
//! PCG, line-search batches) and `Backend::Gpu` in `Simulation` come next.

mod backend;
mod context;
pub mod element;
pub mod linear;
pub mod shaders;
mod stage;

pub use backend::GpuBackend;
pub use context::GpuContext;

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
