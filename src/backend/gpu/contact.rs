//! Stage `contact` (`shaders/contact.wgsl`), the GPU twin of [`contact::step_bound`]: the
//! barrier's collision-free bound on a Newton step along the direction on the device, as one
//! partial minimum per workgroup of vertices.
//!
//! [`contact::step_bound`]: crate::contact::step_bound

use encase::ShaderType;

use super::buffers::GpuBuffers;
use super::context::GpuContext;
use super::recording::{Recording, Staged};
use super::stage::WgStage;
use crate::error::Result;

/// Parameters of `shaders/contact.wgsl`.
#[derive(Clone, Copy, Debug, Default, ShaderType)]
pub struct ContactParams {
    pub vertex_count: u32,
    pub collider_count: u32,
    /// The part of a vertex's distance to a collider a step may close.
    pub closable: f32,
}

/// The contact stage's pipeline.
pub struct WgContact(pub(crate) WgStage);

/// The contact stage bound to one model's buffers.
pub struct ContactGroups {
    param: wgpu::BindGroup,
    groups: Vec<wgpu::BindGroup>,
    workgroups: u32,
}

impl WgContact {
    pub fn new(context: &GpuContext) -> Result<WgContact> {
        Ok(WgContact(WgStage::new(context, "contact")?))
    }

    pub fn bind(
        &self,
        context: &GpuContext,
        recording: &Recording,
        buffers: &GpuBuffers,
    ) -> Result<ContactGroups> {
        Ok(ContactGroups {
            param: recording.param_group(context, &self.0),
            groups: self.0.bind(context, |g, n| buffers.resolve(g, n))?,
            workgroups: buffers.vertex_workgroups(),
        })
    }

    /// Records the bound on the step from the iterate along the direction, for colliders
    /// closing at most `closable` of each gap, and stages its partial minima.
    pub fn step_bound(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        groups: &ContactGroups,
        buffers: &GpuBuffers,
        collider_count: usize,
        closable: f64,
    ) -> Result<Staged> {
        let params = ContactParams {
            vertex_count: buffers.vertex_count as u32,
            collider_count: collider_count as u32,
            closable: closable as f32,
        };
        let offset = recording.params(context, &params)?;
        let bound: Vec<&wgpu::BindGroup> = groups.groups.iter().collect();
        recording.dispatch(
            context,
            self.0.kernel("step_bound"),
            &groups.param,
            offset,
            &bound,
            groups.workgroups,
        );
        let partials = buffers.scratch.named("bound_partials");
        recording.stage(context, partials, partials.size())
    }

    /// The bound from its staged partial minima.
    pub fn bound(bytes: &[u8]) -> f64 {
        let partials: Vec<f32> = bytemuck::pod_collect_to_vec(bytes);
        partials.iter().fold(1.0f64, |least, &p| least.min(p as f64))
    }
}

#[cfg(test)]
mod tests {
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::WgContact;
    use crate::backend::gpu::test_support::{Rig, barrier_model, context};
    use crate::contact::{CLOSABLE, step_bound};

    /// Per vertex (the direction zero elsewhere) and for all at once, the bound on random
    /// steps aimed at the colliders of every shape agrees with its CPU twin.
    #[test]
    fn the_step_bound_matches_its_cpu_twin() {
        let Some(context) = context() else { return };
        let (model, x, _) = barrier_model(5);
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        // Half the steps move 10-20 cm toward the nearest collider point, the rest anywhere.
        let steps: Vec<[f64; 3]> = x
            .iter()
            .map(|p| {
                let at = glam::DVec3::from(*p);
                let nearest =
                    model.colliders.iter().map(|c| c.distance(at)).min_by(|a, b| a.phi.total_cmp(&b.phi));
                let random = glam::DVec3::from(std::array::from_fn(|_| rng.random_range(-1.0..1.0)));
                let toward = match nearest {
                    Some(d) if rng.random_bool(0.5) => -d.normal.normalize() + random * 0.3,
                    _ => random,
                };
                (toward.normalize() * rng.random_range(0.1..0.2)).to_array()
            })
            .collect();
        let mut rig = Rig::new(&context, &model);
        rig.write_positions(&x, &x, &x);
        let groups = rig.stages.contact.bind(&rig.context, &rig.rec, &rig.buffers).unwrap();
        let gpu_bound = |rig: &mut Rig, direction: &[[f64; 3]]| {
            let values: Vec<f32> = direction.as_flattened().iter().map(|&v| v as f32).collect();
            rig.upload(3, "direction", &values);
            let count = model.colliders.len();
            let staged = rig.stages.contact.step_bound(
                &rig.context,
                &mut rig.rec,
                &groups,
                &rig.buffers,
                count,
                CLOSABLE,
            );
            WgContact::bound(&rig.rec.read(&context, &[staged.unwrap()]).unwrap()[0])
        };
        let (mut worst, mut cut) = (0.0f64, 0);
        let mut alone = vec![[0.0; 3]; x.len()];
        for v in 0..x.len() {
            alone[v] = steps[v];
            let cpu = step_bound(&model.colliders, &model.pinned, &x, &alone, CLOSABLE);
            let gpu = gpu_bound(&mut rig, &alone);
            alone[v] = [0.0; 3];
            // f32 positions (1e-7 m at 0.3 m) on 10-20 cm steps: 1e-6 in t; 1e-4 leaves room,
            // and a wrong crossing is off by O(0.1).
            assert!((gpu - cpu).abs() < 1e-4, "vertex {v}: GPU bound {gpu} against the CPU's {cpu}");
            worst = worst.max((gpu - cpu).abs());
            cut += usize::from(cpu < 1.0);
        }
        assert!(cut >= 10, "only {cut} of {} steps were cut short", x.len());
        let cpu = step_bound(&model.colliders, &model.pinned, &x, &steps, CLOSABLE);
        let gpu = gpu_bound(&mut rig, &steps);
        assert!((gpu - cpu).abs() < 1e-4, "all at once: GPU bound {gpu} against the CPU's {cpu}");
        println!("step bound parity: {cut} of {} steps cut short, worst difference {worst:.1e}", x.len());
    }
}
