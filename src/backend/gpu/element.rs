//! `WgElement` (the element stage's pipelines) and `GpuElements` (its buffers): the GPU twin
//! of `backend/cpu/element.rs`, run on the model's tets and springs. Outputs are stored as
//! structure of arrays (`shaders/shared/slots.wgsl`); pipelines are specialized per output
//! level and, for each run of tets of one material, per material.

use encase::ShaderType;

use super::context::GpuContext;
use super::linear::{GpuLinear, Positions};
use super::recording::{Recording, Staged};
use super::shaders::Binding;
use super::stage::{Kernel, WORKGROUP, WgStage, storage, uniform};
use crate::backend::Node;
use crate::error::{Error, Result};
use crate::material::MaterialModel;
use crate::mesh::SpringKind;
use crate::model::Model;

/// The stage's per-dispatch parameters (group 0).
#[derive(Clone, Copy, Debug, Default, ShaderType)]
pub struct ElementParams {
    pub tet_count: u32,
    pub spring_count: u32,
    pub node_count: u32,
    /// The run of elements of this dispatch, and where its energy partials go.
    pub first: u32,
    pub count: u32,
    pub partial_base: u32,
    pub weight_0: f32,
    pub theta_0: f32,
    pub weight_1: f32,
    pub theta_1: f32,
}

/// The bindings `shaders/element.wgsl` declares, by lifetime: 0 parameters, 1 model,
/// 2 state, 3 scratch.
pub fn bindings() -> Vec<Binding> {
    vec![
        uniform::<ElementParams>(),
        storage(1, 0, "tets", true),
        storage(1, 1, "tet_rest", true),
        storage(1, 2, "tet_material", true),
        storage(1, 3, "springs", true),
        storage(1, 4, "spring_laws", true),
        storage(1, 5, "spring_edges", true),
        storage(2, 0, "x", true),
        storage(2, 1, "x_start", true),
        storage(3, 0, "corner_gradients", false),
        storage(3, 1, "element_blocks", false),
        storage(3, 2, "energy_partials", false),
    ]
}

/// The id of a material model in the shaders (`MATERIAL`); `ANY_MATERIAL` reads it per tet.
fn material_id(model: MaterialModel) -> u32 {
    match model {
        MaterialModel::StVK => 0,
        MaterialModel::NeoHookean => 1,
        MaterialModel::StableNeoHookean => 2,
        MaterialModel::Corotated => 3,
        MaterialModel::FixedCorotated => 4,
        MaterialModel::Arap => 5,
    }
}
const ANY_MATERIAL: u32 = 6;
/// Beyond this many runs of one material, one generic pipeline serves all tets.
const MAX_RUNS: usize = 8;

/// What an element pass computes (the shader's `OUTPUTS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outputs {
    /// Energy only.
    Energy = 0,
    /// And corner gradients.
    Gradient = 1,
    /// And exact Hessian blocks.
    Hessian = 2,
    /// And PSD-projected Hessian blocks.
    ProjectedHessian = 3,
}

impl Outputs {
    fn label(self) -> &'static str {
        ["element energy", "element gradient", "element hessian", "element projected"][self as usize]
    }
}

/// The element stage's compute pipelines.
pub struct WgElement(WgStage);

impl WgElement {
    pub fn new(context: &GpuContext) -> Result<WgElement> {
        // Pipelines are specialized when first used.
        Ok(WgElement(WgStage::new(context, "element", &bindings(), &[])?))
    }
}

/// Elements one dispatch covers: a run of tets of one material, or the springs.
#[derive(Clone, Copy, Debug)]
struct Run {
    entry: &'static str,
    first: u32,
    count: u32,
    material: u32,
    partial_base: u32,
}

/// The element stage's buffers for one model; positions and outputs are the shared buffers
/// of [`GpuLinear`].
pub struct GpuElements {
    tet_count: u32,
    spring_count: u32,
    runs: Vec<Run>,
    partial_count: usize,
    param_group: wgpu::BindGroup,
    energy_partials: wgpu::Buffer,
    /// Bind groups reading the iterate, and reading the auxiliary positions.
    iterate_groups: Vec<wgpu::BindGroup>,
    aux_groups: Vec<wgpu::BindGroup>,
}

/// Runs of tets of one material, then the springs, each with its first energy partial.
fn runs(model: &Model) -> Vec<Run> {
    let mut tet_runs: Vec<(u32, u32, u32)> = Vec::new();
    for (e, material) in model.tet_material.iter().enumerate() {
        let id = material_id(material.model());
        match tet_runs.last_mut() {
            Some((_, count, m)) if *m == id => *count += 1,
            _ => tet_runs.push((e as u32, 1, id)),
        }
    }
    if tet_runs.len() > MAX_RUNS {
        tet_runs = vec![(0, model.tets.len() as u32, ANY_MATERIAL)];
    }
    let springs = model.springs.len() as u32;
    let mut runs = Vec::new();
    let mut partial_base = 0;
    let mut push = |entry, first, count: u32, material| {
        runs.push(Run { entry, first, count, material, partial_base });
        partial_base += count.div_ceil(WORKGROUP);
    };
    for (first, count, material) in tet_runs {
        push("tets_main", first, count, material);
    }
    if springs > 0 {
        push("springs_main", 0, springs, ANY_MATERIAL);
    }
    runs
}

impl GpuElements {
    /// Uploads the model's topology, rest data and materials.
    pub fn new(
        context: &GpuContext,
        stage: &WgElement,
        recording: &Recording,
        model: &Model,
        linear: &GpuLinear,
    ) -> Result<GpuElements> {
        let tets: Vec<u32> = model.tets.iter().flatten().copied().collect();
        let mut tet_rest = Vec::with_capacity(4 * model.tets.len());
        for rest in &model.tet_rest {
            for (a, g) in rest.shape_gradients.iter().enumerate() {
                let w = if a == 0 { rest.volume } else { 0.0 };
                tet_rest.push([g[0] as f32, g[1] as f32, g[2] as f32, w as f32]);
            }
        }
        let tet_material = model
            .tet_material
            .iter()
            .map(|m| {
                let (mu, lambda) = m.lame();
                [material_id(m.model()) as f32, mu as f32, lambda as f32, 0.0]
            })
            .collect::<Vec<[f32; 4]>>();
        let springs: Vec<u32> = model.springs.iter().flatten().copied().collect();
        let spring_laws: Vec<[f32; 4]> = model
            .spring_law
            .iter()
            .map(|s| {
                [if s.kind == SpringKind::Hooke { 0.0 } else { 1.0 }, s.stiffness as f32, s.rest as f32, 0.0]
            })
            .collect();
        // Rest edges in f64, so that the shader adds displacements to exact rest geometry.
        let spring_edges: Vec<[f32; 4]> = model
            .springs
            .iter()
            .map(|&[i, j]| {
                let (a, b) = (model.rest[i as usize], model.rest[j as usize]);
                [(b[0] - a[0]) as f32, (b[1] - a[1]) as f32, (b[2] - a[2]) as f32, 0.0]
            })
            .collect();
        let runs = runs(model);
        let partial_count = runs.iter().map(|r| r.count.div_ceil(WORKGROUP) as usize).sum();
        let c = context;
        let model_buffers = [
            c.storage("tets", &tets),
            c.storage("tet_rest", &tet_rest),
            c.storage("tet_material", &tet_material),
            c.storage("springs", &springs),
            c.storage("spring_laws", &spring_laws),
            c.storage("spring_edges", &spring_edges),
        ];
        let energy_partials = c.scratch::<f32>("energy_partials", partial_count);
        let model_refs: Vec<&wgpu::Buffer> = model_buffers.iter().collect();
        let groups = |x: &wgpu::Buffer, start: &wgpu::Buffer| {
            vec![
                stage.0.bind_group(c, 1, &model_refs),
                stage.0.bind_group(c, 2, &[x, start]),
                stage.0.bind_group(
                    c,
                    3,
                    &[&linear.corner_gradients, &linear.element_blocks, &energy_partials],
                ),
            ]
        };
        let iterate_groups = groups(&linear.x, &linear.x_start);
        let aux_groups = groups(&linear.aux, &linear.aux);
        Ok(GpuElements {
            tet_count: model.tets.len() as u32,
            spring_count: model.springs.len() as u32,
            runs,
            partial_count,
            param_group: recording.param_group(c, &stage.0),
            energy_partials,
            iterate_groups,
            aux_groups,
        })
    }

    /// Records the element pass at `at`, leaving its outputs in the shared buffers.
    pub fn encode(
        &self,
        context: &GpuContext,
        stage: &WgElement,
        recording: &mut Recording,
        at: Positions,
        nodes: &[Node],
        outputs: Outputs,
    ) -> Result<()> {
        if nodes.is_empty() || nodes.len() > 2 {
            return Err(Error::State("the GPU element stage takes 1 or 2 quadrature nodes".into()));
        }
        let second = nodes.get(1).copied().unwrap_or(Node { weight: 0.0, theta: 0.0 });
        let groups = if at == Positions::Iterate { &self.iterate_groups } else { &self.aux_groups };
        let groups: Vec<&wgpu::BindGroup> = groups.iter().collect();
        for run in &self.runs {
            let params = ElementParams {
                tet_count: self.tet_count,
                spring_count: self.spring_count,
                node_count: nodes.len() as u32,
                first: run.first,
                count: run.count,
                partial_base: run.partial_base,
                weight_0: nodes[0].weight as f32,
                theta_0: nodes[0].theta as f32,
                weight_1: second.weight as f32,
                theta_1: second.theta as f32,
            };
            let offset = recording.params(context, &params)?;
            let constants = [("OUTPUTS", outputs as u32 as f64), ("MATERIAL", run.material as f64)];
            let kernel =
                Kernel { stage: &stage.0, entry: run.entry, constants: &constants, label: outputs.label() };
            recording.dispatch(
                context,
                kernel,
                &self.param_group,
                offset,
                &groups,
                run.count.div_ceil(WORKGROUP),
            );
        }
        Ok(())
    }

    /// Stages the energy partials of the last recorded pass.
    pub fn stage_energy(&self, context: &GpuContext, recording: &mut Recording) -> Result<Staged> {
        recording.stage(context, &self.energy_partials, 4 * self.partial_count as u64)
    }

    /// The energy from its staged partials (added in order, in f64).
    pub fn energy(bytes: &[u8]) -> f64 {
        bytemuck::pod_collect_to_vec::<u8, f32>(bytes).iter().map(|&e| e as f64).sum()
    }

    /// The number of energy partials a pass writes.
    pub fn partial_count(&self) -> usize {
        self.partial_count
    }

    /// Reads the corner gradients (3 floats per corner slot) and Hessian blocks (9 floats per
    /// block, row-major) of the last pass, in the CPU twin's slot order.
    #[cfg(test)]
    pub fn read_outputs(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        linear: &GpuLinear,
    ) -> Result<(Vec<f32>, Vec<f32>)> {
        let (nt, ns) = (self.tet_count as usize, self.spring_count as usize);
        let corners: Vec<f32> = recording.read_buffer(context, &linear.corner_gradients, 12 * nt + 6 * ns)?;
        let blocks: Vec<f32> = recording.read_buffer(context, &linear.element_blocks, 90 * nt + 27 * ns)?;
        Ok((
            (0..12 * nt + 6 * ns).map(|entry| corners[corner_entry(entry / 3, entry % 3, nt, ns)]).collect(),
            (0..90 * nt + 27 * ns).map(|entry| blocks[block_entry(entry / 9, entry % 9, nt, ns)]).collect(),
        ))
    }
}

/// Where entry `i` of corner slot `slot` lies on the GPU (`shaders/shared/slots.wgsl`).
#[cfg(test)]
pub(crate) fn corner_entry(slot: usize, i: usize, tet_count: usize, spring_count: usize) -> usize {
    if slot < 4 * tet_count {
        (3 * (slot % 4) + i) * tet_count + slot / 4
    } else {
        let local = slot - 4 * tet_count;
        12 * tet_count + (3 * (local % 2) + i) * spring_count + local / 2
    }
}

/// Where entry `k` of stored block `source` lies on the GPU (`shaders/shared/slots.wgsl`).
#[cfg(test)]
pub(crate) fn block_entry(source: usize, k: usize, tet_count: usize, spring_count: usize) -> usize {
    if source < 10 * tet_count {
        (9 * (source % 10) + k) * tet_count + source / 10
    } else {
        let local = source - 10 * tet_count;
        90 * tet_count + (9 * (local % 3) + k) * spring_count + local / 3
    }
}
