//! Stage `element` (`shaders/element.wgsl`), the GPU twin of `backend/cpu/element.rs`:
//! energies, corner gradients and Hessian blocks of the model's tets and springs. Outputs are
//! stored as structure of arrays (`shaders/shared/slots.wgsl`); pipelines are specialized per
//! output level and, for each run of tets of one material, per material.

use encase::ShaderType;

use super::Positions;
use super::buffers::{GpuBuffers, material_id};
use super::context::GpuContext;
use super::recording::{Recording, Staged};
use super::stage::{Bound, Kernel, WORKGROUP, WgStage};
use crate::error::{Error, Result};
use crate::model::Model;
use crate::objective::Node;

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
    /// A step length (the mixed stage's merit and advance).
    pub alpha: f32,
    /// A batch of energy passes (`members` > 1): member `j` reads its displacements from
    /// `j * vertex_count` on and writes its partials from `j * partial_count` on.
    pub vertex_count: u32,
    pub partial_count: u32,
    pub members: u32,
    /// 1 where the local stage's closest rotations take one Newton step
    /// ([`RotationSearch::OneStep`](crate::material::RotationSearch)), 0 where they converge.
    pub one_rotation_step: u32,
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

/// The element stage's pipelines.
pub struct WgElement(pub(crate) WgStage);

impl WgElement {
    pub fn new(context: &GpuContext) -> Result<WgElement> {
        // Pipelines are specialized when first used.
        Ok(WgElement(WgStage::new(context, "element")?))
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

/// The element stage bound to one model's buffers: its runs and bind groups.
pub struct ElementGroups {
    tet_count: u32,
    spring_count: u32,
    vertex_count: u32,
    partial_count: u32,
    runs: Vec<Run>,
    param: super::recording::ParamGroup,
    /// Reading the iterate, the auxiliary positions, and a batch of positions.
    iterate: Bound,
    aux: Bound,
    batch: Bound,
}

impl ElementGroups {
    /// The parameters of `run` at `nodes`.
    fn params(&self, run: &Run, nodes: &[Node]) -> Result<ElementParams> {
        if nodes.is_empty() || nodes.len() > 2 {
            return Err(Error::State("the GPU element stages take 1 or 2 quadrature nodes".into()));
        }
        let second = nodes.get(1).copied().unwrap_or(Node { weight: 0.0, theta: 0.0 });
        Ok(ElementParams {
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
            alpha: 0.0,
            vertex_count: self.vertex_count,
            partial_count: self.partial_count,
            members: 1,
            one_rotation_step: 0,
        })
    }

    /// How many energy partials the tets' runs write (they come before the springs').
    pub fn tet_partials(&self) -> u32 {
        self.runs.iter().filter(|run| run.entry == "tets_main").map(|run| run.count.div_ceil(WORKGROUP)).sum()
    }

    /// The parameters of each run of tets at `nodes` (a stage that takes over the tets writes
    /// the same energy partials).
    pub fn tet_runs(&self, nodes: &[Node]) -> Result<Vec<ElementParams>> {
        self.runs.iter().filter(|run| run.entry == "tets_main").map(|run| self.params(run, nodes)).collect()
    }
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

/// The number of energy partials an element pass writes for `model`.
pub fn partial_count(model: &Model) -> usize {
    runs(model).iter().map(|r| r.count.div_ceil(WORKGROUP) as usize).sum()
}

impl WgElement {
    /// Binds the stage to `buffers` (positions by name; the auxiliary groups read `aux` as
    /// both `x` and `x_start`).
    pub fn bind(
        &self,
        context: &GpuContext,
        recording: &Recording,
        model: &Model,
        buffers: &GpuBuffers,
    ) -> Result<ElementGroups> {
        self.bind_corners(context, recording, model, buffers, "corner_gradients")
    }

    /// [`bind`](Self::bind), writing the corner gradients into the buffer `corners` (the mixed
    /// solver keeps two sets).
    pub fn bind_corners(
        &self,
        context: &GpuContext,
        recording: &Recording,
        model: &Model,
        buffers: &GpuBuffers,
        corners: &str,
    ) -> Result<ElementGroups> {
        let resolve = |group: u32, name: &str| match (group, name) {
            (3, "corner_gradients") => buffers.scratch.get(corners),
            _ => buffers.resolve(group, name),
        };
        let aux = |group: u32, name: &str| match (group, name) {
            (2, "x" | "x_start") => buffers.state.get("aux"),
            _ => resolve(group, name),
        };
        let batch = |group: u32, name: &str| match (group, name) {
            (2, "x") => buffers.scratch.get("batch"),
            _ => resolve(group, name),
        };
        Ok(ElementGroups {
            tet_count: model.tets.len() as u32,
            spring_count: model.springs.len() as u32,
            vertex_count: buffers.vertex_count as u32,
            partial_count: partial_count(model) as u32,
            runs: runs(model),
            param: recording.param_group(context, &self.0),
            iterate: self.0.bind(context, resolve)?,
            aux: self.0.bind(context, aux)?,
            batch: self.0.bind(context, batch)?,
        })
    }

    /// Records the element pass at `at`, leaving its outputs in the shared buffers; with
    /// `springs_only`, the springs' dispatch alone (the local/global solver's local stage
    /// takes the tets). A batch of positions gives energies alone, one member's partials after
    /// another.
    #[allow(clippy::too_many_arguments)]
    pub fn queue(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        groups: &ElementGroups,
        at: Positions,
        nodes: &[Node],
        outputs: Outputs,
        springs_only: bool,
    ) -> Result<()> {
        let members = at.members();
        debug_assert!(members == 1 || outputs == Outputs::Energy, "a batch evaluates energies alone");
        debug_assert!(members <= super::buffers::BATCH);
        let bound = match at {
            Positions::Iterate => &groups.iterate,
            Positions::Aux => &groups.aux,
            Positions::Batch(_) => &groups.batch,
        };
        for run in groups.runs.iter().filter(|run| !springs_only || run.entry == "springs_main") {
            let params = ElementParams { members: members as u32, ..groups.params(run, nodes)? };
            let offset = recording.params(context, &params)?;
            let constants = [("OUTPUTS", outputs as u32 as f64), ("MATERIAL", run.material as f64)];
            let kernel =
                Kernel { stage: &self.0, entry: run.entry, constants: &constants, label: outputs.label() };
            let workgroups = members as u32 * run.count.div_ceil(WORKGROUP);
            recording.dispatch_batch(
                context,
                kernel,
                (&groups.param, offset),
                bound,
                workgroups,
                members as u32,
            );
        }
        Ok(())
    }

    /// Stages the energy partials of the last recorded pass.
    pub fn stage_energy(
        context: &GpuContext,
        recording: &mut Recording,
        buffers: &GpuBuffers,
    ) -> Result<Staged> {
        Self::stage_batch_energy(context, recording, buffers, 1)
    }

    /// Stages the energy partials of the last recorded batch of `members` positions, one
    /// member's after another.
    pub fn stage_batch_energy(
        context: &GpuContext,
        recording: &mut Recording,
        buffers: &GpuBuffers,
        members: usize,
    ) -> Result<Staged> {
        let partials = buffers.scratch.named("energy_partials");
        recording.stage(context, partials, (4 * members * buffers.energy_partial_count) as u64)
    }

    /// The energy from its staged partials (added in order, in f64).
    pub fn energy(bytes: &[u8]) -> f64 {
        bytemuck::pod_collect_to_vec::<u8, f32>(bytes).iter().map(|&e| e as f64).sum()
    }

    /// Reads the corner gradients (3 floats per corner slot) and Hessian blocks (9 floats per
    /// block, row-major) of the last pass, in the CPU twin's slot order.
    #[cfg(test)]
    pub(crate) fn read_outputs(
        context: &GpuContext,
        recording: &mut Recording,
        buffers: &GpuBuffers,
    ) -> Result<(Vec<f32>, Vec<f32>)> {
        let (nt, ns) = (buffers.tet_count, buffers.spring_count);
        let corners: Vec<f32> = recording.read_buffer(
            context,
            buffers.scratch.named("corner_gradients"),
            corner_floats(nt, ns),
        )?;
        let blocks: Vec<f32> =
            recording.read_buffer(context, buffers.scratch.named("element_blocks"), block_floats(nt, ns))?;
        Ok((
            (0..12 * nt + 6 * ns).map(|entry| corners[corner_entry(entry / 3, entry % 3, nt, ns)]).collect(),
            (0..90 * nt + 27 * ns).map(|entry| blocks[block_entry(entry / 9, entry % 9, nt, ns)]).collect(),
        ))
    }
}

/// Where entry `i` of corner slot `slot` lies on the GPU, in floats: entry `i` of its `vec4`
/// (`shaders/shared/slots.wgsl`).
#[cfg(test)]
pub(crate) fn corner_entry(slot: usize, i: usize, tet_count: usize, spring_count: usize) -> usize {
    let corner = if slot < 4 * tet_count {
        (slot % 4) * tet_count + slot / 4
    } else {
        let local = slot - 4 * tet_count;
        4 * tet_count + (local % 2) * spring_count + local / 2
    };
    4 * corner + i
}

/// Floats the corner gradients take on the GPU: a `vec4` a corner.
pub(crate) fn corner_floats(tet_count: usize, spring_count: usize) -> usize {
    4 * (4 * tet_count + 2 * spring_count)
}

/// Where entry `k` (row-major) of stored block `source` lies on the GPU, in floats: row
/// `k / 3` of its column `k % 3`, a `vec4` (`shaders/shared/slots.wgsl`).
#[cfg(test)]
pub(crate) fn block_entry(source: usize, k: usize, tet_count: usize, spring_count: usize) -> usize {
    let c = k % 3;
    let column = if source < 10 * tet_count {
        (3 * (source % 10) + c) * tet_count + source / 10
    } else {
        let local = source - 10 * tet_count;
        30 * tet_count + (3 * (local % 3) + c) * spring_count + local / 3
    };
    4 * column + k / 3
}

/// Floats the element blocks take on the GPU: three `vec4` columns a block.
pub(crate) fn block_floats(tet_count: usize, spring_count: usize) -> usize {
    12 * (10 * tet_count + 3 * spring_count)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{Outputs, WgElement};
    use crate::backend::cpu::element;
    use crate::backend::cpu::tests::mixed_model;
    use crate::backend::gpu::Positions;
    use crate::backend::gpu::test_support::{NODES, Rig, context, random_state, worst};
    use crate::material::RotationSearch;
    use crate::material::{Material, Projection};
    use crate::objective::Node;

    /// Records the element pass and returns its energy.
    fn evaluate(rig: &mut Rig, nodes: &[Node], outputs: Outputs) -> f64 {
        let groups = rig.stages.element.bind(&rig.context, &rig.rec, &rig.model, &rig.buffers).unwrap();
        rig.stages
            .element
            .queue(&rig.context, &mut rig.rec, &groups, Positions::Iterate, nodes, outputs, false)
            .unwrap();
        let staged = WgElement::stage_energy(&rig.context, &mut rig.rec, &rig.buffers).unwrap();
        WgElement::energy(&rig.rec.read(&rig.context, &[staged]).unwrap()[0])
    }

    #[test]
    fn element_stage_matches_its_cpu_twin() {
        let Some(context) = context() else { return };
        let materials = [
            Material::stvk(2e4, 0.3),
            Material::neo_hookean(2e4, 0.3),
            Material::stable_neo_hookean(2e4, 0.45),
            Material::corotated(2e4, 0.3),
            Material::fixed_corotated(2e4, 0.3),
            Material::arap(2e4, 0.3),
        ];
        for (case, (material, projection)) in materials
            .iter()
            .flat_map(|m| [(m.clone(), Projection::None), (m.clone(), Projection::Psd)])
            .enumerate()
        {
            let k = case / 2;
            let model = Arc::new(mixed_model(material));
            let (x, start) = random_state(&model, 40 + k as u64);
            let corners = 4 * model.tets.len() + 2 * model.springs.len();
            let blocks = 10 * model.tets.len() + 3 * model.springs.len();
            let mut cpu_gradients = vec![[0.0; 3]; corners];
            let mut cpu_blocks = vec![[0.0; 9]; blocks];
            let cpu_energy = element::derivatives(
                &model,
                &x,
                &start,
                &NODES,
                Some(projection),
                None,
                RotationSearch::Converged,
                &mut cpu_gradients,
                &mut cpu_blocks,
            );
            let outputs =
                if projection == Projection::Psd { Outputs::ProjectedHessian } else { Outputs::Hessian };
            let mut rig = Rig::new(&context, &model);
            rig.write_positions(&x, &start, &start);
            let energy = evaluate(&mut rig, &NODES, outputs);
            let (corner_gradients, element_blocks) =
                WgElement::read_outputs(&rig.context, &mut rig.rec, &rig.buffers).unwrap();
            // Displacements of ~1 cm in f32 against shape gradients of ~10/m put ~1e-8 of
            // rounding in H, and the rotation-based models' SVD ~1e-7 in F: measured on
            // lavapipe the worst entries are 3e-7 (energy), 1.5e-6 (gradient) and 9e-7
            // (Hessian), and 2e-6 was the worst on an H100; 1e-5 leaves a margin of five. A
            // wrong term would be off by O(1).
            let energy_error = (energy - cpu_energy).abs() / cpu_energy.abs();
            assert!(energy_error < 1e-5, "material {k}: energy {energy} vs {cpu_energy}");
            let (g_error, g_at) = worst(&corner_gradients, cpu_gradients.as_flattened());
            assert!(g_error < 1e-5, "material {k}: gradient entry {g_at} off by {g_error:e}");
            let (h_error, h_at) = worst(&element_blocks, cpu_blocks.as_flattened());
            assert!(h_error < 1e-5, "material {k}: Hessian entry {h_at} off by {h_error:e}");
            // The energy pass and the Hessian pass are differently specialized pipelines of one
            // shader. Lavapipe gives the same bits; NVIDIA's compiler contracts multiply-adds
            // differently in each (naga emits no NoContraction), 4e-9 apart on an H100. The
            // line search takes both as equal within f32's resolution (`PRECISION` in
            // line_search.wgsl), so that is what must hold.
            let energy_only = evaluate(&mut rig, &NODES, Outputs::Energy);
            let resolution = 4.0 * f32::EPSILON as f64 * energy.abs();
            assert!(
                (energy_only - energy).abs() <= resolution,
                "material {k}: the energy pass gives {energy_only}, the Hessian pass {energy}"
            );
            println!(
                "{} element parity, material {k} {projection:?}: energy {energy_error:.1e}, gradient {g_error:.1e}, Hessian {h_error:.1e}",
                context.adapter
            );
        }
    }

    /// Neo-Hookean's domain in f32 ends where f32 still resolves `J` (`outside_neo_hookean` in
    /// `shaders/shared/material.wgsl`): a cube squashed to height `J` is finite on both twins
    /// at 0.5 and 1e-2 (and agrees) and at 1e-4, but only the CPU's f64 finds it finite at 1e-6
    /// and 1e-8, where `J - 1` in f32 is within a few roundings of -1. So every state the GPU
    /// accepts is one the CPU accepts too.
    #[test]
    fn neo_hookeans_domain_on_the_gpu_ends_where_f32_resolves_j() {
        use crate::mesh::TetMesh;
        use crate::model::Model;
        let Some(context) = context() else { return };
        let mut model = Model::empty([0.0; 3]);
        model
            .add_tet_body(&TetMesh::bar([1, 1, 1], [1.0, 1.0, 1.0]), &[Material::neo_hookean(2e4, 0.3)], 1.0)
            .unwrap();
        let model = Arc::new(model);
        let nodes = [Node { weight: 1.0, theta: 1.0 }];
        for height in [0.5, 1e-2, 1e-4, 1e-6, 1e-8] {
            let x: Vec<[f64; 3]> = model.rest.iter().map(|p| [p[0], height * p[1], p[2]]).collect();
            let mut gradients = vec![[0.0; 3]; 4 * model.tets.len()];
            let mut blocks = vec![[0.0; 9]; 10 * model.tets.len()];
            let (no_projection, search) = (None, RotationSearch::Converged);
            let cpu = element::derivatives(
                &model,
                &x,
                &x,
                &nodes,
                no_projection,
                None,
                search,
                &mut gradients,
                &mut blocks,
            );
            let mut rig = Rig::new(&context, &model);
            rig.write_positions(&x, &x, &x);
            let gpu = evaluate(&mut rig, &nodes, Outputs::Energy);
            println!("neo-Hookean cube at height {height:e}: CPU {cpu:e} J, GPU {gpu:e} J");
            assert!(cpu.is_finite(), "height {height}: the CPU's energy {cpu}");
            match height {
                h if h >= 1e-2 => {
                    assert!((gpu - cpu).abs() <= 1e-5 * cpu.abs(), "height {h}: GPU {gpu}, CPU {cpu}")
                }
                h if h >= 1e-4 => assert!(gpu.is_finite(), "height {h}: GPU {gpu}"),
                h => assert_eq!(gpu, f64::INFINITY, "height {h}: below f32's resolution of J"),
            }
        }
    }

    #[test]
    fn element_stage_gives_the_same_bits_every_run() {
        let Some(context) = context() else { return };
        let model = Arc::new(mixed_model(Material::stable_neo_hookean(3e4, 0.4)));
        let (x, start) = random_state(&model, 7);
        let mut rig = Rig::new(&context, &model);
        rig.write_positions(&x, &start, &start);
        let mut run = || {
            let energy = evaluate(&mut rig, &NODES[..1], Outputs::Hessian);
            (energy.to_bits(), WgElement::read_outputs(&rig.context, &mut rig.rec, &rig.buffers).unwrap())
        };
        assert_eq!(run(), run());
    }
}
