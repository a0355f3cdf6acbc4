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

/// Override constants that specialize a pipeline, by name.
pub type Constants = Vec<(&'static str, f64)>;

/// A stage's module, layouts and pipelines: one per entry point, and one per entry point and
/// set of override constants, compiled when first asked for.
pub struct WgStage {
    name: &'static str,
    layouts: Vec<wgpu::BindGroupLayout>,
    module: wgpu::ShaderModule,
    layout: wgpu::PipelineLayout,
    pipelines: std::sync::Mutex<Vec<((&'static str, Constants), wgpu::ComputePipeline)>>,
}

/// One entry point of a stage, specialized by override constants, and how its passes are
/// named in profiles.
#[derive(Clone, Copy)]
pub struct Kernel<'a> {
    pub stage: &'a WgStage,
    pub entry: &'static str,
    pub constants: &'a [(&'static str, f64)],
    pub label: &'static str,
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
        let stage = WgStage { name, layouts, module, layout, pipelines: Default::default() };
        for &entry in entries {
            stage.pipeline(context, entry, &[]);
        }
        Ok(stage)
    }

    /// The pipeline of `entry` with `constants`, compiled on first use.
    pub fn pipeline(
        &self,
        context: &GpuContext,
        entry: &'static str,
        constants: &[(&'static str, f64)],
    ) -> wgpu::ComputePipeline {
        let mut pipelines = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, pipeline)) = pipelines.iter().find(|((e, c), _)| *e == entry && c == constants) {
            return pipeline.clone();
        }
        let pipeline = context.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(entry),
            layout: Some(&self.layout),
            module: &self.module,
            entry_point: Some(entry),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants,
                // Every kernel writes its workgroup memory before reading it.
                zero_initialize_workgroup_memory: false,
            },
            cache: None,
        });
        pipelines.push(((entry, constants.to_vec()), pipeline.clone()));
        pipeline
    }

    /// `entry` unspecialized, named in profiles by the stage for a single `main`, else by the
    /// entry point.
    pub fn kernel(&self, entry: &'static str) -> Kernel<'_> {
        Kernel { stage: self, entry, constants: &[], label: if entry == "main" { self.name } else { entry } }
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
