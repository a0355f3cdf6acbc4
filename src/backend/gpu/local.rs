//! Stage `local` (`shaders/local.wgsl`), the GPU twin of `backend/cpu/local.rs`: the
//! local/global solver's projections (warm-started closest rotations, kept on the device) and
//! the tets' projective energies and corner gradients, in the element stage's slots and energy
//! partials. The springs' gradients come from the element stage.

use super::buffers::GpuBuffers;
use super::context::GpuContext;
use super::element::{ElementGroups, ElementParams};
use super::recording::Recording;
use super::stage::{Bound, WORKGROUP, WgStage};
use crate::error::Result;
use crate::material::RotationSearch;
use crate::objective::Node;

/// The local stage's pipeline.
pub struct WgLocal(pub(crate) WgStage);

/// The local stage bound to one model's buffers (the iterate).
pub struct LocalGroups {
    param: super::recording::ParamGroup,
    iterate: Bound,
}

impl WgLocal {
    pub fn new(context: &GpuContext) -> Result<WgLocal> {
        Ok(WgLocal(WgStage::new(context, "local")?))
    }

    pub fn bind(
        &self,
        context: &GpuContext,
        recording: &Recording,
        buffers: &GpuBuffers,
    ) -> Result<LocalGroups> {
        Ok(LocalGroups {
            param: recording.param_group(context, &self.0),
            iterate: self.0.bind(context, |g, n| buffers.resolve(g, n))?,
        })
    }

    /// Records the local step at the iterate for the tets, run by run as the element stage
    /// splits them (`elements`), its closest rotations searched as far as `search` says.
    pub fn queue(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        groups: &LocalGroups,
        elements: &ElementGroups,
        nodes: &[Node],
        search: RotationSearch,
    ) -> Result<()> {
        let bound = &groups.iterate;
        for params in elements.tet_runs(nodes)? {
            let params =
                ElementParams { one_rotation_step: (search == RotationSearch::OneStep).into(), ..params };
            let offset = recording.params(context, &params)?;
            let workgroups = params.count.div_ceil(WORKGROUP);
            recording.dispatch(context, self.0.kernel("main"), &groups.param, offset, bound, workgroups);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::backend::cpu::local;
    use crate::backend::gpu::element::WgElement;
    use crate::backend::gpu::test_support::{NODES, Rig, context, random_state, worst};
    use crate::material::{Material, RotationSearch};
    use crate::mesh::TetMesh;
    use crate::model::Model;

    /// On random states of a corotated and an ARAP body, one and two nodes, a cold start and
    /// then warm ones, rotations converged and taken one Newton step: the same energy, corner
    /// gradients and rotations as the CPU twin. The last two rounds measure the body in turned
    /// axes: its gradients are in them, and the rotations kept in the world's stay the warm
    /// start of a step.
    #[test]
    fn local_stage_matches_its_cpu_twin() {
        let Some(context) = context() else { return };
        for (k, material) in [Material::corotated(2e4, 0.3), Material::arap(2e4, 0.3)].into_iter().enumerate()
        {
            let mut model = Model::empty([0.0, -9.81, 0.0]);
            model.add_tet_body(&TetMesh::bar([3, 2, 2], [0.3, 0.2, 0.2]), &[material], 1000.0).unwrap();
            let model = Arc::new(model);
            let mut rig = Rig::new(&context, &model);
            let elements = rig.stages.element.bind(&rig.context, &rig.rec, &model, &rig.buffers).unwrap();
            let groups = rig.stages.local.bind(&rig.context, &rig.rec, &rig.buffers).unwrap();
            let mut rotations = crate::backend::cpu::element::Rotations::default();
            let (one, two) = (&NODES[..1], &NODES[..]);
            let (converged, one_step) = (RotationSearch::Converged, RotationSearch::OneStep);
            // As in a solve, a step's search goes on from a converged one's rotations at the same
            // nodes (the CPU starts from the identity where the node count changes, the device
            // from the last rotations it kept there: a converged search ends at one rotation
            // from either).
            let rounds = [(one, converged), (one, one_step), (two, converged), (two, one_step)];
            for (round, (nodes, search)) in rounds.into_iter().enumerate() {
                let (x, start) = random_state(&model, 60 + (2 * k + round) as u64);
                let mut cpu_corners = vec![[0.0; 3]; 4 * model.tets.len()];
                let mut exact = rotations.clone();
                let cpu_energy =
                    local::forces(&model, &x, &start, nodes, &mut rotations, search, &mut cpu_corners);
                if search == one_step {
                    // The round's one step leaves the rotations short of the closest ones.
                    local::forces(&model, &x, &start, nodes, &mut exact, converged, &mut cpu_corners.clone());
                    let short = exact
                        .node_major()
                        .iter()
                        .zip(rotations.node_major())
                        .map(|(a, b)| a.dot(b).abs().min(1.0).acos())
                        .fold(0.0_f64, f64::max);
                    assert!(
                        short > 1e-6,
                        "material {k} round {round}: one step converged ({short:e} rad off)"
                    );
                }
                if round == 2 {
                    rig.turn_frame();
                }
                rig.write_positions(&x, &start, &start);
                rig.stages
                    .local
                    .queue(&rig.context, &mut rig.rec, &groups, &elements, nodes, search)
                    .unwrap();
                let staged = WgElement::stage_energy(&rig.context, &mut rig.rec, &rig.buffers).unwrap();
                let energy = WgElement::energy(&rig.rec.read(&rig.context, &[staged]).unwrap()[0]);
                let (corners, _) = WgElement::read_outputs(&rig.context, &mut rig.rec, &rig.buffers).unwrap();
                let energy_error = (energy - cpu_energy).abs() / cpu_energy.abs();
                // In the axes of the body (one part).
                let turn = rig.buffers.turns().turn(0).transpose();
                let cpu_corners: Vec<f64> =
                    cpu_corners.iter().flat_map(|&g| (turn * glam::DVec3::from(g)).to_array()).collect();
                let (g_error, g_at) = worst(&corners, &cpu_corners);
                // Measured on lavapipe: at most 8e-8 (energy) and 1.3e-7 (gradient) of the largest
                // entry; the element stage's SVD path gives 3e-7 and 1.5e-6.
                assert!(energy_error < 2e-6, "material {k} round {round}: energy {energy} vs {cpu_energy}");
                assert!(
                    g_error < 2e-6,
                    "material {k} round {round}: gradient entry {g_at} off by {g_error:e}"
                );
                let device: Vec<f32> = rig.read(2, "rotations", 4 * nodes.len() * model.tets.len());
                let host: Vec<f64> = rotations
                    .node_major()
                    .iter()
                    .flat_map(|q| {
                        // q and -q are one rotation: compare with the sign the device chose.
                        let q = [q.x, q.y, q.z, q.w];
                        q.map(|c| c * if q[3] < 0.0 { -1.0 } else { 1.0 })
                    })
                    .collect();
                let device: Vec<f32> = device
                    .chunks(4)
                    .flat_map(|q| {
                        let sign = if q[3] < 0.0 { -1.0 } else { 1.0 };
                        q.iter().map(move |c| c * sign).collect::<Vec<_>>()
                    })
                    .collect();
                let (r_error, r_at) = worst(&device, &host);
                println!(
                    "{} local parity, material {k} round {round}: energy {energy_error:.1e}, gradient {g_error:.1e}, rotation {r_error:.1e}",
                    context.adapter
                );
                assert!(
                    r_error < 2e-6,
                    "material {k} round {round}: rotation entry {r_at} off by {r_error:e}"
                );
            }
        }
    }
}
