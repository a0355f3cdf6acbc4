//! Stage `assemble` (`shaders/assemble.wgsl`), the GPU twin of `backend/cpu/assemble.rs`: the
//! block-sparse Newton matrix from the element blocks, the vertex blocks and the lagged
//! damping matrix; at the start of a damped step, that damping matrix itself; and the
//! local/global solver's fixed matrix.

use encase::ShaderType;

use super::buffers::GpuBuffers;
use super::context::GpuContext;
use super::recording::Recording;
use super::stage::WgStage;
use crate::error::Result;

/// Parameters of `shaders/assemble.wgsl`.
#[derive(Clone, Copy, Debug, Default, ShaderType)]
pub struct AssembleParams {
    pub vertex_count: u32,
    /// 0 leaves the element blocks out.
    pub element_scale: f32,
    /// 1: add the lagged damping matrix.
    pub damped: u32,
    pub tet_count: u32,
    pub spring_count: u32,
}

/// The assembly's pipeline.
pub struct WgAssemble(pub(crate) WgStage);

/// The assembly bound to one model's buffers: into the Newton matrix `blocks`, and into the
/// damping matrix (reading a placeholder where the damping input would be).
pub struct AssembleGroups {
    param: wgpu::BindGroup,
    newton: Vec<wgpu::BindGroup>,
    damping: Vec<wgpu::BindGroup>,
    workgroups: u32,
}

/// What an assembly builds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target {
    /// The Newton matrix, with the damping matrix added when `damped`.
    Newton { damped: bool },
    /// The lagged damping matrix, `element_scale K + diag(A_v)`.
    Damping { element_scale: f64 },
    /// The local/global solver's matrix for the step weight `a` (`backend::projective`), from
    /// the Laplacian and the vertex diagonal in `projective_diagonal`.
    Projective { a: f64 },
}

impl WgAssemble {
    pub fn new(context: &GpuContext) -> Result<WgAssemble> {
        Ok(WgAssemble(WgStage::new(context, "assemble")?))
    }

    pub fn bind(
        &self,
        context: &GpuContext,
        recording: &Recording,
        buffers: &GpuBuffers,
    ) -> Result<AssembleGroups> {
        let damping = |group: u32, name: &str| match (group, name) {
            (3, "damping_blocks") => buffers.scratch.get("placeholder"),
            (3, "blocks") => buffers.scratch.get("damping_blocks"),
            _ => buffers.resolve(group, name),
        };
        Ok(AssembleGroups {
            param: recording.param_group(context, &self.0),
            newton: self.0.bind(context, |g, n| buffers.resolve(g, n))?,
            damping: self.0.bind(context, damping)?,
            workgroups: buffers.vertex_workgroups(),
        })
    }

    /// Records an assembly of `target`.
    pub fn queue(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        groups: &AssembleGroups,
        buffers: &GpuBuffers,
        target: Target,
    ) -> Result<()> {
        let (element_scale, damped, bound) = match target {
            Target::Newton { damped } => (1.0, damped && buffers.has_damping(), &groups.newton),
            Target::Damping { element_scale } => (element_scale, false, &groups.damping),
            Target::Projective { a } => (a, false, &groups.newton),
        };
        let entry = if matches!(target, Target::Projective { .. }) { "projective" } else { "main" };
        let params = AssembleParams {
            vertex_count: buffers.vertex_count as u32,
            element_scale: element_scale as f32,
            damped: damped as u32,
            tet_count: buffers.tet_count as u32,
            spring_count: buffers.spring_count as u32,
        };
        let offset = recording.params(context, &params)?;
        let bound: Vec<&wgpu::BindGroup> = bound.iter().collect();
        recording.dispatch(context, self.0.kernel(entry), &groups.param, offset, &bound, groups.workgroups);
        Ok(())
    }
}
