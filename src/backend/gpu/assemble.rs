//! Stage `assemble` (`shaders/assemble.wgsl`), the GPU twin of `backend/cpu/assemble.rs`: the
//! block-sparse Newton matrix from the element blocks, the vertex blocks and Rayleigh's
//! damping matrix; at the start of a step with Rayleigh damping, that damping matrix itself;
//! and the local/global solver's fixed matrix.

use encase::ShaderType;

use super::buffers::GpuBuffers;
use super::context::GpuContext;
use super::recording::Recording;
use super::stage::{Bound, WgStage};
use crate::error::Result;

/// Parameters of `shaders/assemble.wgsl`.
#[derive(Clone, Copy, Debug, Default, ShaderType)]
pub struct AssembleParams {
    pub vertex_count: u32,
    /// 0 leaves the element blocks out.
    pub element_scale: f32,
    /// 1: add Rayleigh's damping matrix.
    pub damped: u32,
    pub tet_count: u32,
    pub spring_count: u32,
    /// 1: keep pressed vertices on their colliders (the projection model).
    pub constrained: u32,
    /// 1: the vertex blocks on the diagonal; 0: a plain stiffness matrix.
    pub with_vertex_blocks: u32,
}

/// The assembly's pipeline.
pub struct WgAssemble(pub(crate) WgStage);

/// The assembly bound to one model's buffers: into the Newton matrix `blocks`, and into the
/// damping matrix (reading a placeholder where the damping input would be).
pub struct AssembleGroups {
    param: super::recording::ParamGroup,
    newton: Bound,
    damping: Bound,
    workgroups: u32,
}

/// What an assembly builds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target {
    /// The Newton matrix, with Rayleigh's damping matrix added when `rayleigh`, restricted at
    /// pressed vertices when `constrained`.
    Newton { rayleigh: bool, constrained: bool },
    /// Rayleigh's damping matrix, `element_scale K` (the damping's vertex blocks join the
    /// Newton matrix's).
    Damping { element_scale: f64 },
    /// The local/global solver's matrix for the step weight `a` (`backend::projective`), from
    /// the Laplacian and the vertex diagonal in `projective_diagonal`.
    Projective { a: f64 },
}

impl WgAssemble {
    pub fn new(context: &GpuContext) -> Result<WgAssemble> {
        Ok(WgAssemble(WgStage::new(context, "assemble")?))
    }

    pub fn bind(
        &self,
        context: &GpuContext,
        recording: &Recording,
        buffers: &GpuBuffers,
    ) -> Result<AssembleGroups> {
        let damping = |group: u32, name: &str| match (group, name) {
            (3, "vertex_blocks") => buffers.scratch.get("placeholder"),
            (3, "damping_blocks") => buffers.scratch.get("placeholder"),
            (3, "blocks") => buffers.scratch.get("damping_blocks"),
            _ => buffers.resolve(group, name),
        };
        Ok(AssembleGroups {
            param: recording.param_group(context, &self.0),
            newton: self.0.bind(context, |g, n| buffers.resolve(g, n))?,
            damping: self.0.bind(context, damping)?,
            // A workgroup per slice of the sliced layout's rows (`slice_task` in the shader).
            workgroups: buffers.vertex_count.div_ceil(crate::backend::topology::SLICE) as u32,
        })
    }

    /// Records an assembly of `target`.
    pub fn queue(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        groups: &AssembleGroups,
        buffers: &GpuBuffers,
        target: Target,
    ) -> Result<()> {
        let (element_scale, damped, bound) = match target {
            Target::Newton { rayleigh, .. } => (1.0, rayleigh && buffers.has_damping(), &groups.newton),
            Target::Damping { element_scale } => (element_scale, false, &groups.damping),
            Target::Projective { a } => (a, false, &groups.newton),
        };
        let constrained = matches!(target, Target::Newton { constrained: true, .. });
        let entry = if matches!(target, Target::Projective { .. }) { "projective" } else { "main" };
        let params = AssembleParams {
            vertex_count: buffers.vertex_count as u32,
            element_scale: element_scale as f32,
            damped: damped as u32,
            tet_count: buffers.tet_count as u32,
            spring_count: buffers.spring_count as u32,
            constrained: constrained as u32,
            with_vertex_blocks: !matches!(target, Target::Damping { .. }) as u32,
        };
        let offset = recording.params(context, &params)?;
        recording.dispatch(context, self.0.kernel(entry), &groups.param, offset, bound, groups.workgroups);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::Target;
    use crate::backend::cpu::tests::mixed_model;
    use crate::backend::gpu::test_support::{Rig, context, to_f32, worst};
    use crate::backend::projective;
    use crate::backend::topology::Topology;
    use crate::material::Material;

    /// The local/global matrix assembled on the device is `backend::projective::matrix` times
    /// the identity in every block, pinned rows and columns included, for a random diagonal.
    #[test]
    fn projective_assembly_matches_its_cpu_twin() {
        use rand::{RngExt, SeedableRng};
        let Some(context) = context() else { return };
        let model = Arc::new(mixed_model(Material::corotated(2e4, 0.3)));
        let topology = Topology::new(&model);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(41);
        let diagonal: Vec<f64> = (0..model.vertex_count()).map(|_| rng.random_range(1.0..1e3)).collect();
        let a = 0.37;
        let mut cpu = Vec::new();
        projective::matrix(
            &model,
            &topology,
            &projective::laplacian(&model, &topology),
            a,
            &diagonal,
            &mut cpu,
        );
        let expected: Vec<f64> = cpu.iter().flat_map(|&s| [s, 0.0, 0.0, 0.0, s, 0.0, 0.0, 0.0, s]).collect();
        let mut rig = Rig::new(&context, &model);
        rig.upload(3, "projective_diagonal", &to_f32(&diagonal));
        let groups = rig.stages.assemble.bind(&rig.context, &rig.rec, &rig.buffers).unwrap();
        rig.stages
            .assemble
            .queue(&rig.context, &mut rig.rec, &groups, &rig.buffers, Target::Projective { a })
            .unwrap();
        let slots = rig.read(3, "blocks", 9 * rig.buffers.slot_count);
        let (error, at) = worst(&rig.buffers.blocks_from_slots(&slots), &expected);
        println!("projective assembly parity: {error:.1e}");
        // f32 entries against f64: a few ulps of the largest entry.
        assert!(error < 1e-6, "block entry {at} off by {error:e}");
    }
}
