//! `WgElement` (the element stage's pipelines) and `GpuElements` (its buffers): the GPU twin
//! of `backend/cpu/element.rs`, run on the model's tets and springs.

use encase::ShaderType;

use super::context::GpuContext;
use super::linear::{GpuLinear, Positions};
use super::recording::{Recording, Staged};
use super::shaders::Binding;
use super::stage::{WORKGROUP, WgStage, storage, uniform};
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
    /// 0: energy only; 1: and gradients; 2: and Hessian blocks.
    pub outputs: u32,
    pub node_count: u32,
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
        storage(2, 0, "x", true),
        storage(2, 1, "x_start", true),
        storage(3, 0, "corner_gradients", false),
        storage(3, 1, "element_blocks", false),
        storage(3, 2, "energy_partials", false),
    ]
}

/// The element stage's compute pipelines.
pub struct WgElement(WgStage);

impl WgElement {
    pub fn new(context: &GpuContext) -> Result<WgElement> {
        Ok(WgElement(WgStage::new(context, "element", &bindings(), &["tets_main", "springs_main"])?))
    }
}

/// The element stage's buffers for one model; positions and outputs are the shared buffers
/// of [`GpuLinear`].
pub struct GpuElements {
    tet_count: u32,
    spring_count: u32,
    param_group: wgpu::BindGroup,
    energy_partials: wgpu::Buffer,
    /// Bind groups reading the iterate, and reading the auxiliary positions.
    iterate_groups: Vec<wgpu::BindGroup>,
    aux_groups: Vec<wgpu::BindGroup>,
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
                let id = match m.model() {
                    MaterialModel::StVK => 0.0,
                    MaterialModel::NeoHookean => 1.0,
                    MaterialModel::StableNeoHookean => 2.0,
                    MaterialModel::Corotated => 3.0,
                    MaterialModel::FixedCorotated => 4.0,
                    MaterialModel::Arap => 5.0,
                };
                let (mu, lambda) = m.lame();
                [id, mu as f32, lambda as f32, 0.0]
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
        let (nt, ns) = (model.tets.len(), model.springs.len());
        let partials = nt.div_ceil(WORKGROUP as usize) + ns.div_ceil(WORKGROUP as usize);
        let c = context;
        let model_buffers = [
            c.storage("tets", &tets),
            c.storage("tet_rest", &tet_rest),
            c.storage("tet_material", &tet_material),
            c.storage("springs", &springs),
            c.storage("spring_laws", &spring_laws),
        ];
        let energy_partials = c.scratch::<f32>("energy_partials", partials);
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
            tet_count: nt as u32,
            spring_count: ns as u32,
            param_group: recording.param_group(c, &stage.0),
            energy_partials,
            iterate_groups,
            aux_groups,
        })
    }

    /// Records the element pass at `at`. `outputs`: 0 energy, 1 and corner gradients, 2 and
    /// exact Hessian blocks, 3 and projected ones (left in the shared buffers).
    pub fn encode(
        &self,
        context: &GpuContext,
        stage: &WgElement,
        recording: &mut Recording,
        at: Positions,
        nodes: &[Node],
        outputs: u32,
    ) -> Result<()> {
        if nodes.is_empty() || nodes.len() > 2 {
            return Err(Error::State("the GPU element stage takes 1 or 2 quadrature nodes".into()));
        }
        let second = nodes.get(1).copied().unwrap_or(Node { weight: 0.0, theta: 0.0 });
        let params = ElementParams {
            tet_count: self.tet_count,
            spring_count: self.spring_count,
            outputs,
            node_count: nodes.len() as u32,
            weight_0: nodes[0].weight as f32,
            theta_0: nodes[0].theta as f32,
            weight_1: second.weight as f32,
            theta_1: second.theta as f32,
        };
        let offset = recording.params(context, &params)?;
        let groups = if at == Positions::Iterate { &self.iterate_groups } else { &self.aux_groups };
        let groups: Vec<&wgpu::BindGroup> = groups.iter().collect();
        for (entry, count) in [("tets_main", self.tet_count), ("springs_main", self.spring_count)] {
            if count > 0 {
                let workgroups = count.div_ceil(WORKGROUP);
                recording.dispatch(context, &stage.0, entry, &self.param_group, offset, &groups, workgroups);
            }
        }
        Ok(())
    }

    /// Stages the energy partials of the last recorded pass.
    pub fn stage_energy(&self, context: &GpuContext, recording: &mut Recording) -> Result<Staged> {
        recording.stage(context, &self.energy_partials, 4 * self.partial_count() as u64)
    }

    /// The energy from its staged partials (added in order, in f64).
    pub fn energy(bytes: &[u8]) -> f64 {
        bytemuck::pod_collect_to_vec::<u8, f32>(bytes).iter().map(|&e| e as f64).sum()
    }

    /// The number of energy partials a pass writes.
    pub fn partial_count(&self) -> usize {
        (self.tet_count as usize).div_ceil(WORKGROUP as usize)
            + (self.spring_count as usize).div_ceil(WORKGROUP as usize)
    }

    /// Reads the corner gradients and Hessian blocks of the last pass.
    #[cfg(test)]
    pub fn read_outputs(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        linear: &GpuLinear,
    ) -> Result<(Vec<f32>, Vec<f32>)> {
        let (nt, ns) = (self.tet_count as usize, self.spring_count as usize);
        Ok((
            recording.read_buffer(context, &linear.corner_gradients, 3 * (4 * nt + 2 * ns))?,
            recording.read_buffer(context, &linear.element_blocks, 9 * (10 * nt + 3 * ns))?,
        ))
    }
}
