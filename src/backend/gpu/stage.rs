//! `WgStage`: a composed shader module, its bind-group layouts — built from the binding table
//! naga reads off the composed source, so bindings are written once, in WGSL — and its
//! compute pipelines. Group 0, the parameters, is a slot of the recording's uniform arena,
//! bound at a dynamic offset per dispatch, where they are not immediate data; groups 1-3
//! (model, state, scratch) are bound by buffer name: a buffer has the same name in Rust and in
//! every shader that binds it, and may be a range of an arena (`GpuBuffers::pack`).

use super::buffers::BufferSpan;
use super::context::GpuContext;
use super::shaders::{Binding, BindingKind, entry_bindings, immediate_size, module, reflect};
use crate::error::{Error, Result};

/// Invocations per workgroup in every stage (`WORKGROUP` in the shaders).
pub const WORKGROUP: u32 = 256;

/// Override constants that specialize a pipeline, by name.
type Constants = Vec<(&'static str, f64)>;

/// A stage's module, layouts and pipelines: one per entry point and set of override
/// constants, compiled when first asked for. Each entry point's layout holds the bindings it
/// uses and no others: wgpu tracks, and barriers, every buffer of the bound groups at each
/// dispatch, and with the stage's whole table bound that cost 9-11 us of host time a dispatch
/// on an H200's host (about 30 buffers each).
pub struct WgStage {
    name: &'static str,
    table: Vec<Binding>,
    /// The parameters' layout (group 0), the same for every entry point; none where they are
    /// immediate data.
    params: Option<wgpu::BindGroupLayout>,
    /// The bytes of the parameters as immediate data (0 where they are a uniform block).
    immediate_bytes: u32,
    /// Per group 1..: the distinct sets of bindings the entry points use, with their layouts.
    sets: Vec<Vec<(Vec<u32>, wgpu::BindGroupLayout)>>,
    /// Per entry point: its set in each group 1.. (shared with every `Bound`), and its pipeline
    /// layout, in the same order.
    entry_sets: std::sync::Arc<Vec<(String, Vec<usize>)>>,
    layouts: Vec<wgpu::PipelineLayout>,
    module: wgpu::ShaderModule,
    pipelines: std::sync::Mutex<Vec<((&'static str, Constants), wgpu::ComputePipeline)>>,
}

/// A stage's bind groups 1.. over one choice of buffers: one group per distinct set of
/// bindings, and for each entry point the groups it is dispatched with and how many distinct
/// buffers they bind for writing.
pub struct Bound {
    groups: Vec<Vec<wgpu::BindGroup>>,
    entries: std::sync::Arc<Vec<(String, Vec<usize>)>>,
    writable: Vec<u32>,
}

impl Bound {
    /// The groups 1.. that `entry` is dispatched with, in order, and the distinct buffers they
    /// bind for writing.
    pub fn groups_for<'a>(&'a self, entry: &str) -> (impl Iterator<Item = &'a wgpu::BindGroup>, u32) {
        let index = self
            .entries
            .iter()
            .position(|(name, _)| name == entry)
            .unwrap_or_else(|| panic!("no entry point {entry:?} in this stage"));
        let sets = &self.entries[index].1;
        (sets.iter().zip(&self.groups).map(|(&set, groups)| &groups[set]), self.writable[index])
    }
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
        let immediates = context.params_in_immediates();
        let (source, parsed, info) = module(name, context.reductions(), immediates)?;
        let immediate_bytes = immediate_size(&parsed)?;
        let table = reflect(&parsed)?;
        let uses = entry_bindings(&parsed, &info);
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(name),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        });
        let layout_of = |group: u32, bindings: &[u32]| {
            let entries: Vec<wgpu::BindGroupLayoutEntry> = table
                .iter()
                .filter(|b| b.group == group && bindings.contains(&b.binding))
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
        };
        let groups = table.iter().map(|b| b.group + 1).max().unwrap_or(1);
        let all_params: Vec<u32> = table.iter().filter(|b| b.group == 0).map(|b| b.binding).collect();
        let params = (!immediates).then(|| layout_of(0, &all_params));
        let mut sets: Vec<Vec<(Vec<u32>, wgpu::BindGroupLayout)>> = (1..groups).map(|_| Vec::new()).collect();
        let mut entry_sets = Vec::new();
        let mut layouts = Vec::new();
        for (entry, used) in uses {
            let mut chosen = Vec::new();
            for group in 1..groups {
                let bindings: Vec<u32> = used.iter().filter(|(g, _)| *g == group).map(|&(_, b)| b).collect();
                let known = &mut sets[group as usize - 1];
                let index = match known.iter().position(|(set, _)| *set == bindings) {
                    Some(index) => index,
                    None => {
                        let layout = layout_of(group, &bindings);
                        known.push((bindings, layout));
                        known.len() - 1
                    }
                };
                chosen.push(index);
            }
            let mut refs: Vec<Option<&wgpu::BindGroupLayout>> = vec![params.as_ref()];
            refs.extend(chosen.iter().enumerate().map(|(g, &set)| Some(&sets[g][set].1)));
            let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(name),
                bind_group_layouts: &refs,
                immediate_size: immediate_bytes,
            });
            entry_sets.push((entry, chosen));
            layouts.push(layout);
        }
        let entry_sets = std::sync::Arc::new(entry_sets);
        Ok(WgStage {
            name,
            table,
            params,
            immediate_bytes,
            sets,
            entry_sets,
            layouts,
            module,
            pipelines: Default::default(),
        })
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
        let index = self
            .entry_sets
            .iter()
            .position(|(name, _)| name == entry)
            .unwrap_or_else(|| panic!("stage {} has no entry point {entry:?}", self.name));
        let layout = &self.layouts[index];
        let pipeline = context.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(entry),
            layout: Some(layout),
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

    /// The bytes of the stage's parameters as immediate data; 0 where they are a uniform block.
    pub fn immediate_bytes(&self) -> u32 {
        self.immediate_bytes
    }

    /// The parameter group (0) over a recording's arena, one slot bound per dispatch; none
    /// where the parameters are immediate data.
    pub fn param_group(&self, context: &GpuContext, arena: &wgpu::Buffer) -> Option<wgpu::BindGroup> {
        let layout = self.params.as_ref()?;
        Some(context.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(self.name),
            layout,
            entries: &[wgpu::BindGroupEntry {
                binding: 0,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: arena,
                    offset: 0,
                    size: std::num::NonZeroU64::new(super::recording::PARAM_SLOT),
                }),
            }],
        }))
    }

    /// Bind groups 1.. (those after the parameters), each binding the buffer `resolve`
    /// gives for its name in that group; an unknown name is an error naming it, and so is an
    /// entry point that would bind one buffer (ranges of an arena) both for reading only and
    /// for writing, which a dispatch may not.
    pub fn bind<'b>(
        &self,
        context: &GpuContext,
        resolve: impl Fn(u32, &str) -> Option<&'b BufferSpan>,
    ) -> Result<Bound> {
        let resolved = |group: u32, b: &Binding| {
            resolve(group, &b.name).ok_or_else(|| {
                Error::Unsupported(format!(
                    "stage {} binds {:?} in group {group}, which no buffer is called",
                    self.name, b.name
                ))
            })
        };
        let bindings = |group: u32, set: &'_ [u32]| -> Vec<&Binding> {
            self.table.iter().filter(|b| b.group == group && set.contains(&b.binding)).collect()
        };
        let mut writable = Vec::new();
        for (entry, sets) in self.entry_sets.iter() {
            let mut uses: Vec<(&wgpu::Buffer, bool, &str)> = Vec::new();
            for (&set, (group_sets, group)) in sets.iter().zip(self.sets.iter().zip(1u32..)) {
                for b in bindings(group, &group_sets[set].0) {
                    let writes = matches!(b.kind, BindingKind::Storage { read_only: false });
                    let buffer = &resolved(group, b)?.buffer;
                    match uses.iter().find(|(u, _, _)| *u == buffer) {
                        Some((_, w, other)) if *w != writes => {
                            return Err(Error::Unsupported(format!(
                                "{}::{entry} binds {:?} and {other:?} from one buffer, one of them read-only",
                                self.name, b.name
                            )));
                        }
                        Some(_) => {}
                        None => uses.push((buffer, writes, &b.name)),
                    }
                }
            }
            writable.push(uses.iter().filter(|(_, writes, _)| *writes).count() as u32);
        }
        let groups = self
            .sets
            .iter()
            .zip(1u32..)
            .map(|(sets, group)| {
                sets.iter()
                    .map(|(set, layout)| {
                        let entries = bindings(group, set)
                            .into_iter()
                            .map(|b| {
                                Ok(wgpu::BindGroupEntry {
                                    binding: b.binding,
                                    resource: resolved(group, b)?.binding(),
                                })
                            })
                            .collect::<Result<Vec<_>>>()?;
                        Ok(context.device.create_bind_group(&wgpu::BindGroupDescriptor {
                            label: Some(self.name),
                            layout,
                            entries: &entries,
                        }))
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Bound { groups, entries: self.entry_sets.clone(), writable })
    }
}
