//! Stage `line_search` (`shaders/line_search.wgsl`), the GPU twin of
//! `backend/cpu/line_search.rs`: a fixed-budget solve's choice of initial guess and step
//! length, made on the device from the partial sums the other stages leave, so that a whole
//! budgeted solve is recorded without a readback.

use encase::ShaderType;

use super::buffers::GpuBuffers;
use super::context::GpuContext;
use super::recording::{Recording, Staged};
use super::stage::{WORKGROUP, WgStage};
use crate::error::Result;

/// Candidate slots of [`SearchRecord`]: the guesses, or a line search's halvings and `2`.
pub const CANDIDATES: usize = 8;
/// The slot `energy` writes for the iterate's own objective; `take_guess`'s for the picked guess.
const VALUE: u32 = u32::MAX;
/// `SearchRecord::picked` when no guess has a finite objective.
pub const NONE: u32 = u32::MAX;

/// The shader's `Search`: what the solve knows of its iterate and direction.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct SearchRecord {
    /// `G` at the iterate.
    pub value: f32,
    /// The step length taken last.
    pub alpha: f32,
    pub gradient_norm: f32,
    pub force_scale: f32,
    pub noise_floor: f32,
    /// `grad G . d`.
    pub slope: f32,
    pub direction_norm: f32,
    /// The guess taken ([`NONE`] when none has a finite objective).
    pub picked: u32,
    pub candidates: [f32; CANDIDATES],
}

/// Parameters of `shaders/line_search.wgsl`.
#[derive(Clone, Copy, Debug, Default, ShaderType)]
pub struct LineSearchParams {
    pub vertex_count: u32,
    pub energy_partial_count: u32,
    pub vertex_partial_count: u32,
    pub slot: u32,
    pub count: u32,
    pub extrapolate: u32,
    pub fallback: u32,
}

/// The line-search stage's pipelines.
pub struct WgLineSearch(pub(crate) WgStage);

/// The line-search stage bound to one model's buffers.
pub struct LineSearchGroups {
    param: wgpu::BindGroup,
    groups: Vec<wgpu::BindGroup>,
    base: LineSearchParams,
}

/// What one dispatch of the stage does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Decision {
    /// The objective of the last energy pass and gather into candidate slot `Some(k)`, or as
    /// the iterate's value (`None`).
    Energy(Option<usize>),
    /// `|grad G|`, force scale and noise floor of the last linearization.
    Linearization,
    /// The slope and length of the direction from the last dots.
    Direction,
    /// The initial guess among `count` candidates, the last a fallback when `fallback`.
    Pick { count: usize, fallback: bool },
    /// The step among `halvings` candidates (and `2` after them when `extrapolate`).
    Choose { halvings: usize, extrapolate: bool },
    /// `x` = guess `Some(k)`, or the picked one (`None`).
    TakeGuess(Option<usize>),
    /// `x = x_saved + alpha d` with the chosen step.
    Advance,
}

impl WgLineSearch {
    pub fn new(context: &GpuContext) -> Result<WgLineSearch> {
        Ok(WgLineSearch(WgStage::new(context, "line_search")?))
    }

    pub fn bind(
        &self,
        context: &GpuContext,
        recording: &Recording,
        buffers: &GpuBuffers,
        energy_partials: usize,
    ) -> Result<LineSearchGroups> {
        Ok(LineSearchGroups {
            param: recording.param_group(context, &self.0),
            groups: self.0.bind(context, |g, n| buffers.resolve(g, n))?,
            base: LineSearchParams {
                vertex_count: buffers.vertex_count as u32,
                energy_partial_count: energy_partials as u32,
                vertex_partial_count: buffers.vertex_workgroups(),
                ..LineSearchParams::default()
            },
        })
    }

    /// Records `decision`.
    pub fn queue(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        groups: &LineSearchGroups,
        decision: Decision,
    ) -> Result<()> {
        let slot = |k: Option<usize>| k.map_or(VALUE, |k| k as u32);
        let base = groups.base;
        let (entry, params, threads) = match decision {
            Decision::Energy(k) => ("energy", LineSearchParams { slot: slot(k), ..base }, WORKGROUP),
            Decision::Linearization => ("linearization", base, WORKGROUP),
            Decision::Direction => ("direction_dots", base, WORKGROUP),
            Decision::Pick { count, fallback } => {
                debug_assert!(count <= CANDIDATES);
                ("pick", LineSearchParams { count: count as u32, fallback: fallback as u32, ..base }, 1)
            }
            Decision::Choose { halvings, extrapolate } => {
                debug_assert!(halvings + usize::from(extrapolate) <= CANDIDATES);
                let params =
                    LineSearchParams { count: halvings as u32, extrapolate: extrapolate as u32, ..base };
                ("choose", params, 1)
            }
            Decision::TakeGuess(k) => {
                ("take_guess", LineSearchParams { slot: slot(k), ..base }, 3 * base.vertex_count)
            }
            Decision::Advance => ("advance", base, 3 * base.vertex_count),
        };
        let offset = recording.params(context, &params)?;
        let bound: Vec<&wgpu::BindGroup> = groups.groups.iter().collect();
        let workgroups = if threads <= WORKGROUP { 1 } else { threads.div_ceil(WORKGROUP) };
        recording.dispatch(context, self.0.kernel(entry), &groups.param, offset, &bound, workgroups);
        Ok(())
    }

    /// Stages the search record as it is at this point of the recording.
    pub fn stage(context: &GpuContext, recording: &mut Recording, buffers: &GpuBuffers) -> Result<Staged> {
        let search = buffers.scratch.named("search");
        recording.stage(context, search, std::mem::size_of::<SearchRecord>() as u64)
    }
}
