//! `WgStage`: a composed shader module, its bind-group layouts — built from the binding table
//! naga reads off the composed source, so bindings are written once, in WGSL — and its
//! compute pipelines. Group 0, the parameters, is a slot of the recording's uniform arena,
//! bound at a dynamic offset per dispatch; groups 1-3 (model, state, scratch) are bound by
//! buffer name: a buffer has the same name in Rust and in every shader that binds it.

use super::context::GpuContext;
use super::shaders::{Binding, BindingKind, module, reflect};
use crate::error::{Error, Result};

/// Invocations per workgroup in every stage (`WORKGROUP` in the shaders).
pub const WORKGROUP: u32 = 256;

/// Override constants that specialize a pipeline, by name.
type Constants = Vec<(&'static str, f64)>;

/// A stage's module, layouts and pipelines: one per entry point and set of override
/// constants, compiled when first asked for.
pub struct WgStage {
    name: &'static str,
    table: Vec<Binding>,
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
    /// Composes stage `name`, reads its bindings and builds their layouts.
    pub fn new(context: &GpuContext, name: &'static str) -> Result<WgStage> {
        let device = &context.device;
        let (source, parsed) = module(name, context.reductions())?;
        let table = reflect(&parsed)?;
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(name),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        });
        let groups = table.iter().map(|b| b.group + 1).max().unwrap_or(0);
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
        Ok(WgStage { name, table, layouts, module, layout, pipelines: Default::default() })
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

    /// Bind groups 1.. (those after the parameters), each binding the buffer `resolve`
    /// gives for its name in that group; an unknown name is an error naming it.
    pub fn bind<'b>(
        &self,
        context: &GpuContext,
        resolve: impl Fn(u32, &str) -> Option<&'b wgpu::Buffer>,
    ) -> Result<Vec<wgpu::BindGroup>> {
        (1..self.layouts.len() as u32)
            .map(|group| {
                let entries = self
                    .table
                    .iter()
                    .filter(|b| b.group == group)
                    .map(|b| {
                        let buffer = resolve(group, &b.name).ok_or_else(|| {
                            Error::Unsupported(format!(
                                "stage {} binds {:?} in group {group}, which no buffer is called",
                                self.name, b.name
                            ))
                        })?;
                        Ok(wgpu::BindGroupEntry { binding: b.binding, resource: buffer.as_entire_binding() })
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok(context.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some(self.name),
                    layout: &self.layouts[group as usize],
                    entries: &entries,
                }))
            })
            .collect()
    }
}
