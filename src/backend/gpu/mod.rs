//! The GPU backend: WGSL compute stages through wgpu, f32 on the device, every stage the twin
//! of a CPU stage in `backend/cpu` (same meaning, tested against it).
//!
//! The layout follows the lifetimes of what it holds: `Wg*` own pipelines (compiled once per
//! context), `Gpu*` own buffers (one set per model: `GpuModel`, `GpuState` and `GpuScratch`
//! for bind groups 1-3, each buffer known by its name in the shaders), and each stage file
//! `gpu/<stage>.rs` sits beside `shaders/<stage>.wgsl` and `cpu/<stage>.rs`, binds itself to
//! the buffers once per model and records its dispatches into a [`Recording`] through
//! `queue`. `GpuBackend` is the engine: it records a Newton iteration and submits it with one
//! readback. `GpuContext::start_profiling` times every pass with timestamp queries where the
//! adapter has them.
//!
//! [`Recording`]: recording::Recording

pub mod assemble;
mod backend;
pub mod buffers;
pub mod contact;
pub(crate) mod context;
pub mod element;
pub mod gather;
pub mod line_search;
pub mod local;
pub mod mixed;
pub mod pcg;
pub mod recording;
pub mod self_contact;
pub mod shaders;
mod stage;
mod subgroups;
mod submissions;
pub mod vector;

pub use backend::GpuBackend;
pub use context::{GpuContext, PARAMS_BYTES, PassTime};
pub use recording::DeviceCounts;

use crate::error::Result;

/// Which positions the element and gather stages read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Positions {
    /// The iterate `x`, between the step's start and target.
    Iterate,
    /// The auxiliary buffer, as both `x` and start (the potential at a given state).
    Aux,
    /// The first `n` positions of the `batch` buffer as `x`, member after member (with the
    /// iterate's start and target): the energy passes of several positions at once.
    Batch(usize),
}

impl Positions {
    /// How many positions a pass at these evaluates.
    pub fn members(self) -> usize {
        match self {
            Positions::Batch(members) => members,
            _ => 1,
        }
    }
}

/// Every stage's pipelines: the one registry of stages.
pub struct WgStages {
    pub element: element::WgElement,
    pub local: local::WgLocal,
    pub mixed: mixed::WgMixed,
    pub gather: gather::WgGather,
    pub contact: contact::WgContact,
    pub self_contact: self_contact::WgSelfContact,
    pub line_search: line_search::WgLineSearch,
    pub assemble: assemble::WgAssemble,
    pub pcg: pcg::WgPcg,
    pub vector: vector::WgVector,
}

impl WgStages {
    /// Compiles every stage's module (pipelines are created when first used).
    pub fn new(context: &GpuContext) -> Result<WgStages> {
        Ok(WgStages {
            element: element::WgElement::new(context)?,
            local: local::WgLocal::new(context)?,
            mixed: mixed::WgMixed::new(context)?,
            gather: gather::WgGather::new(context)?,
            contact: contact::WgContact::new(context)?,
            self_contact: self_contact::WgSelfContact::new(context)?,
            line_search: line_search::WgLineSearch::new(context)?,
            assemble: assemble::WgAssemble::new(context)?,
            pcg: pcg::WgPcg::new(context)?,
            vector: vector::WgVector::new(context)?,
        })
    }
}

/// The size of each stage's parameter block on the Rust side, by stage name (what the
/// shaders' uniform blocks must match).
pub fn params_size(stage: &str) -> Option<u64> {
    use encase::ShaderType;
    Some(match stage {
        "element" | "local" | "mixed" => element::ElementParams::min_size().get(),
        "gather" => gather::GatherParams::min_size().get(),
        "contact" => contact::ContactParams::min_size().get(),
        "self_contact" => self_contact::SelfContactParams::min_size().get(),
        "assemble" => assemble::AssembleParams::min_size().get(),
        "pcg" => pcg::PcgParams::min_size().get(),
        "vector" => vector::VectorParams::min_size().get(),
        "line_search" => line_search::LineSearchParams::min_size().get(),
        _ => return None,
    })
}

#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;
