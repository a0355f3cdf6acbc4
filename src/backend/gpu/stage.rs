//! `WgStage`: a composed shader module, its bind-group layouts (built from the stage's
//! binding table, the same table the shader test checks against naga) and one compute
//! pipeline per entry point. Group 0, the parameters, is a slot of the recording's uniform
//! arena, bound at a dynamic offset per dispatch.

use encase::ShaderType;

use super::context::GpuContext;
use super::shaders::{Binding, BindingKind, compose};
use crate::error::Result;

/// Invocations per workgroup in every stage (`WORKGROUP` in the shaders).
pub const WORKGROUP: u32 = 256;

/// A storage binding.
pub(crate) const fn storage(group: u32, binding: u32, name: &'static str, read_only: bool) -> Binding {
    Binding { group, binding, name, kind: BindingKind::Storage { read_only } }
}

/// The uniform parameter block at (0, 0).
pub(crate) fn uniform<T: ShaderType>() -> Binding {
    Binding { group: 0, binding: 0, name: "params", kind: BindingKind::Uniform { size: T::min_size().get() } }
}

/// A stage's pipelines.
pub struct WgStage {
    name: &'static str,
    layouts: Vec<wgpu::BindGroupLayout>,
    pipelines: Vec<(&'static str, wgpu::ComputePipeline)>,
}

impl WgStage {
    /// Compiles stage `name` with the layouts of `table` and a pipeline per entry point.
    pub fn new(
        context: &GpuContext,
        name: &'static str,
        table: &[Binding],
        entries: &[&'static str],
    ) -> Result<WgStage> {
        let device = &context.device;
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(name),
            source: wgpu::ShaderSource::Wgsl(compose(name)?.into()),
        });
        let groups = table.iter().map(|b| b.group).max().map_or(0, |g| g + 1);
        let layouts: Vec<wgpu::BindGroupLayout> = (0..groups)
            .map(|group| {
                let entries: Vec<wgpu::BindGroupLayoutEntry> = table
                    .iter()
                    .filter(|b| b.group == group)
                    .map(|b| wgpu::BindGroupLayoutEntry {
                        binding: b.binding,
                        visibility: wgpu::ShaderStages::COMPUTE,
                        ty: wgpu::BindingType::Buffer {
                            ty: match b.kind {
                                BindingKind::Uniform { .. } => wgpu::BufferBindingType::Uniform,
                                BindingKind::Storage { read_only } => {
                                    wgpu::BufferBindingType::Storage { read_only }
                                }
                            },
                            // Parameters are slots of one arena (see `Recording`).
                            has_dynamic_offset: matches!(b.kind, BindingKind::Uniform { .. }),
                            min_binding_size: None,
                        },
                        count: None,
                    })
                    .collect();
                device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                    label: Some(name),
                    entries: &entries,
                })
            })
            .collect();
        let refs: Vec<Option<&wgpu::BindGroupLayout>> = layouts.iter().map(Some).collect();
        let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(name),
            bind_group_layouts: &refs,
            immediate_size: 0,
        });
        let pipelines = entries
            .iter()
            .map(|&entry| {
                let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(entry),
                    layout: Some(&layout),
                    module: &module,
                    entry_point: Some(entry),
                    compilation_options: Default::default(),
                    cache: None,
                });
                (entry, pipeline)
            })
            .collect();
        Ok(WgStage { name, layouts, pipelines })
    }

    /// How a pass of `entry` is named in profiles: the stage for a stage's single `main`,
    /// else the entry point.
    pub fn pass_label(&self, entry: &str) -> &'static str {
        match self.pipelines.iter().find(|(e, _)| *e == entry) {
            Some((e, _)) if *e != "main" => e,
            _ => self.name,
        }
    }

    /// The pipeline of an entry point.
    pub fn pipeline(&self, entry: &str) -> &wgpu::ComputePipeline {
        &self.pipelines.iter().find(|(e, _)| *e == entry).expect("entry points are fixed at construction").1
    }

    /// The parameter group (0) over a recording's arena, one slot bound per dispatch.
    pub fn param_group(&self, context: &GpuContext, arena: &wgpu::Buffer) -> wgpu::BindGroup {
        context.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(self.name),
            layout: &self.layouts[0],
            entries: &[wgpu::BindGroupEntry {
                binding: 0,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: arena,
                    offset: 0,
                    size: std::num::NonZeroU64::new(super::recording::PARAM_SLOT),
                }),
            }],
        })
    }

    /// A bind group for `group` over `buffers` in binding order. Groups a stage does not use
    /// are bound empty.
    pub fn bind_group(
        &self,
        context: &GpuContext,
        group: usize,
        buffers: &[&wgpu::Buffer],
    ) -> wgpu::BindGroup {
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .enumerate()
            .map(|(b, buffer)| wgpu::BindGroupEntry {
                binding: b as u32,
                resource: buffer.as_entire_binding(),
            })
            .collect();
        context.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &self.layouts[group],
            entries: &entries,
        })
    }

    /// The number of bind groups.
    pub fn group_count(&self) -> usize {
        self.layouts.len()
    }
}
