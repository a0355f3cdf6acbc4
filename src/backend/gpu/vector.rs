//! Stage `vector` (`shaders/vector.wgsl`), the GPU twin of `backend/cpu/vector.rs`: Newton's
//! vector updates on the iterate and the direction, and their dot products.

use encase::ShaderType;

use super::buffers::GpuBuffers;
use super::context::GpuContext;
use super::recording::{Recording, Staged};
use super::stage::{Bound, WORKGROUP, WgStage};
use crate::error::Result;

/// Parameters of `shaders/vector.wgsl`.
#[derive(Clone, Copy, Debug, Default, ShaderType)]
pub struct VectorParams {
    pub vertex_count: u32,
    pub alpha: f32,
    /// `batch_offsets`: how many candidates, and their step lengths.
    pub count: u32,
    pub steps: [Vec4; 2],
}

/// A `vec4<f32>` of the shader's parameters.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Vec4(pub [f32; 4]);

impl AsRef<[f32; 4]> for Vec4 {
    fn as_ref(&self) -> &[f32; 4] {
        &self.0
    }
}

impl AsMut<[f32; 4]> for Vec4 {
    fn as_mut(&mut self) -> &mut [f32; 4] {
        &mut self.0
    }
}

impl From<[f32; 4]> for Vec4 {
    fn from(values: [f32; 4]) -> Vec4 {
        Vec4(values)
    }
}

encase::impl_vector!(4, Vec4, f32; using AsRef AsMut From);

/// The vector stage's pipelines.
pub struct WgVector(pub(crate) WgStage);

/// The vector stage bound to one model's buffers.
pub struct VectorGroups {
    param: super::recording::ParamGroup,
    groups: Bound,
    vertex_count: usize,
}

impl WgVector {
    pub fn new(context: &GpuContext) -> Result<WgVector> {
        Ok(WgVector(WgStage::new(context, "vector")?))
    }

    pub fn bind(
        &self,
        context: &GpuContext,
        recording: &Recording,
        buffers: &GpuBuffers,
    ) -> Result<VectorGroups> {
        Ok(VectorGroups {
            param: recording.param_group(context, &self.0),
            groups: self.0.bind(context, |g, n| buffers.resolve(g, n))?,
            vertex_count: buffers.vertex_count,
        })
    }

    /// Records entry point `entry` with `alpha`: `gradient_from_rhs` (g = -rhs),
    /// `use_gradient` (direction = -g), `save` (x_saved = x), `start_step` (x_saved = x_start =
    /// x), `offset` (x = x_saved + alpha direction), `advance` (save and offset), `retreat` (x =
    /// x_start + alpha (x - x_start)), `scale` (direction *= alpha) or `dots` (partials of g.d,
    /// d.d, g.g).
    pub fn queue(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        groups: &VectorGroups,
        entry: &'static str,
        alpha: f64,
    ) -> Result<()> {
        let params = VectorParams {
            vertex_count: groups.vertex_count as u32,
            alpha: alpha as f32,
            ..Default::default()
        };
        let threads = if entry == "dots" { groups.vertex_count } else { 3 * groups.vertex_count };
        self.dispatch(context, recording, groups, entry, &params, threads)
    }

    /// Records the batch of line-search candidates `x_saved + alpha d`, one per step length
    /// (at most [`BATCH`](super::buffers::BATCH)), into the `batch` buffer.
    pub fn batch_offsets(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        groups: &VectorGroups,
        alphas: &[f64],
    ) -> Result<()> {
        debug_assert!(alphas.len() <= super::buffers::BATCH);
        let mut steps = [Vec4::default(); 2];
        for (k, &alpha) in alphas.iter().enumerate() {
            steps[k / 4].0[k % 4] = alpha as f32;
        }
        let count = alphas.len() as u32;
        let params = VectorParams { vertex_count: groups.vertex_count as u32, alpha: 0.0, count, steps };
        self.dispatch(
            context,
            recording,
            groups,
            "batch_offsets",
            &params,
            alphas.len() * 3 * groups.vertex_count,
        )
    }

    fn dispatch(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        groups: &VectorGroups,
        entry: &'static str,
        params: &VectorParams,
        threads: usize,
    ) -> Result<()> {
        let offset = recording.params(context, params)?;
        let bound = &groups.groups;
        let workgroups = (threads as u32).div_ceil(WORKGROUP);
        recording.dispatch(context, self.0.kernel(entry), &groups.param, offset, bound, workgroups);
        Ok(())
    }

    /// Records the dots `(g.d, d.d, g.g)` of the gradient and the direction and stages their
    /// per-workgroup partials.
    pub fn dots(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        groups: &VectorGroups,
        buffers: &GpuBuffers,
    ) -> Result<Staged> {
        self.queue(context, recording, groups, "dots", 0.0)?;
        let partials = buffers.scratch.named("dot_partials");
        recording.stage(context, partials, partials.size())
    }
}
