//! Stage `contact` (`shaders/contact.wgsl`), the GPU twin of `contact::step_bound`: the
//! barrier's collision-free bound on a Newton step along the direction on the device, as one
//! partial minimum per workgroup of vertices.

use encase::ShaderType;

use super::buffers::GpuBuffers;
use super::context::GpuContext;
use super::recording::{Recording, Staged};
use super::stage::{Bound, WgStage};
use crate::error::Result;

/// Parameters of `shaders/contact.wgsl`.
#[derive(Clone, Copy, Debug, Default, ShaderType)]
pub struct ContactParams {
    pub vertex_count: u32,
    pub collider_count: u32,
    /// The part of a vertex's distance to a collider a step may close.
    pub closable: f32,
    /// The local/global solver's nodes and contact stiffness (`contact_set`, `bound_outside`).
    pub node_count: u32,
    pub theta_0: f32,
    pub theta_1: f32,
    pub contact_stiffness: f32,
}

impl ContactParams {
    /// The paths' parameters: colliders closing at most `closable` of each gap.
    pub fn new(buffers: &GpuBuffers, collider_count: usize, closable: f64) -> ContactParams {
        ContactParams {
            vertex_count: buffers.vertex_count as u32,
            collider_count: collider_count as u32,
            closable: closable as f32,
            ..ContactParams::default()
        }
    }

    /// The local/global solver's `contact_set` and `bound_outside` at `nodes` (at most two),
    /// a vertex in the set adding `contact_stiffness` to its diagonal.
    pub fn local_global(
        buffers: &GpuBuffers,
        collider_count: usize,
        nodes: &[crate::objective::Node],
        contact_stiffness: f64,
    ) -> ContactParams {
        debug_assert!(nodes.len() <= 2);
        let theta = |q: usize| nodes.get(q).map_or(0.0, |n| n.theta as f32);
        ContactParams {
            node_count: nodes.len() as u32,
            theta_0: theta(0),
            theta_1: theta(1),
            contact_stiffness: contact_stiffness as f32,
            ..ContactParams::new(buffers, collider_count, 1.0)
        }
    }
}

/// The contact stage's pipeline.
pub struct WgContact(pub(crate) WgStage);

/// The contact stage bound to one model's buffers.
pub struct ContactGroups {
    param: super::recording::ParamGroup,
    groups: Bound,
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

    /// Records entry point `entry` (`step_bound`, `stop_at_contact` or `keep_pressed`) for
    /// colliders closing at most `closable` of each gap.
    #[allow(clippy::too_many_arguments)]
    pub fn queue(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        groups: &ContactGroups,
        buffers: &GpuBuffers,
        entry: &'static str,
        collider_count: usize,
        closable: f64,
    ) -> Result<()> {
        self.dispatch(
            context,
            recording,
            groups,
            entry,
            &ContactParams::new(buffers, collider_count, closable),
        )
    }

    /// Records `entry` with `params` (the local/global entries take theirs from
    /// [`ContactParams::local_global`]).
    pub fn dispatch(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        groups: &ContactGroups,
        entry: &'static str,
        params: &ContactParams,
    ) -> Result<()> {
        let offset = recording.params(context, params)?;
        let bound = &groups.groups;
        recording.dispatch(context, self.0.kernel(entry), &groups.param, offset, bound, groups.workgroups);
        Ok(())
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
        self.queue(context, recording, groups, buffers, "step_bound", collider_count, closable)?;
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
    use crate::backend::gpu::test_support::{NODES, Rig, barrier_model, context, rest_on_colliders};
    use crate::backend::projective::{LocalContact, with_contacts};
    use crate::contact::{CLOSABLE, step_bound, stop_at_contact};
    use crate::objective::Node;

    /// Random steps of 10-20 cm, half of them aimed at the nearest collider.
    fn random_steps(model: &crate::model::Model, x: &[[f64; 3]], seed: u64) -> Vec<[f64; 3]> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        x.iter()
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
            .collect()
    }

    /// Per vertex (the direction zero elsewhere) and for all at once, the bound on random
    /// steps aimed at the colliders of every shape agrees with its CPU twin (displacements
    /// and directions in the axes of moved and turned parts, as in the next tests).
    #[test]
    fn the_step_bound_matches_its_cpu_twin() {
        let Some(context) = context() else { return };
        let (model, x, _) = barrier_model(5);
        let steps = random_steps(&model, &x, 9);
        let mut rig = Rig::new(&context, &model);
        rig.turn_frame();
        rig.write_positions(&x, &x, &x);
        let groups = rig.stages.contact.bind(&rig.context, &rig.rec, &rig.buffers).unwrap();
        let gpu_bound = |rig: &mut Rig, direction: &[[f64; 3]]| {
            let values = rig.in_part_axes(direction);
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

    /// The projection model's trial positions: random moves from a state with every third
    /// free vertex resting on a collider, against `contact::stop_at_contact`. The parts'
    /// frames are moved and turned, so that the shader must place the moves in the world.
    #[test]
    fn trial_positions_stop_at_contact_as_on_the_cpu() {
        let Some(context) = context() else { return };
        let (model, mut x, _) = barrier_model(7);
        rest_on_colliders(&model, &mut x);
        let steps = random_steps(&model, &x, 11);
        let target: Vec<[f64; 3]> =
            x.iter().zip(&steps).map(|(p, d)| std::array::from_fn(|c| p[c] + d[c])).collect();
        let mut cpu = target.clone();
        stop_at_contact(&model.colliders, &model.pinned, &x, &mut cpu);
        let mut rig = Rig::new(&context, &model);
        rig.turn_frame();
        let (from, to) = (rig.buffers.displacements(&x), rig.buffers.displacements(&target));
        rig.upload(3, "x_saved", &from);
        rig.upload(2, "x", &to);
        let groups = rig.stages.contact.bind(&rig.context, &rig.rec, &rig.buffers).unwrap();
        let count = model.colliders.len();
        let queued = rig.stages.contact.queue(
            &rig.context,
            &mut rig.rec,
            &groups,
            &rig.buffers,
            "stop_at_contact",
            count,
            1.0,
        );
        queued.unwrap();
        let moved = rig.read(2, "x", 3 * x.len());
        let mut gpu = vec![[0.0; 3]; x.len()];
        rig.buffers.positions(&moved, &mut gpu);
        let stopped = cpu.iter().zip(&target).filter(|(c, t)| c != t).count();
        let worst = cpu
            .iter()
            .zip(&gpu)
            .flat_map(|(c, g)| (0..3).map(move |k| (c[k] - g[k]).abs()))
            .fold(0.0f64, f64::max);
        println!(
            "stop at contact parity: {stopped} of {} moves changed, worst difference {worst:.1e} m",
            x.len()
        );
        assert!(stopped >= 10, "only {stopped} moves met a collider");
        // f32 positions round at 3e-8 m here; a move not stopped, or stopped elsewhere, is off
        // by centimetres.
        assert!(worst < 1e-6, "GPU trial positions differ by {worst:e} m");
    }

    /// The local/global solver's contact set and step bound, at a midpoint node and at AVF's
    /// two, against their CPU twins: a third of the free vertices pushed 1 cm
    /// into their nearest collider, a few marked stopped by a last step, random steps half aimed
    /// at the colliders, a random base diagonal; the parts turned.
    #[test]
    fn the_local_global_contact_set_and_bound_match_their_cpu_twins() {
        let Some(context) = context() else { return };
        let (model, mut x, start) = barrier_model(13);
        for (_, p) in x.iter_mut().enumerate().filter(|(v, _)| v % 3 == 1 && !model.pinned[*v]) {
            let at = glam::DVec3::from(*p);
            let nearest =
                model.colliders.iter().map(|c| c.distance(at)).min_by(|a, b| a.phi.total_cmp(&b.phi));
            let d = nearest.expect("a collider");
            *p = (at - d.normal.normalize() * (d.phi + 0.01)).to_array();
        }
        let steps = random_steps(&model, &x, 17);
        let n = x.len();
        let mut rng = ChaCha8Rng::seed_from_u64(19);
        let base: Vec<f64> = (0..n).map(|_| rng.random_range(1.0..100.0)).collect();
        let stopped: Vec<bool> = (0..n).map(|v| v % 7 == 0).collect();
        let stiffness = 1234.5;
        let mut rig = Rig::new(&context, &model);
        rig.turn_frame();
        rig.write_positions(&x, &start, &x);
        let groups = rig.stages.contact.bind(&rig.context, &rig.rec, &rig.buffers).unwrap();
        for nodes in [vec![Node { weight: 1.0, theta: 0.5 }], NODES.to_vec()] {
            // The CPU twin.
            let (mut set, mut cpu_stopped) = (vec![false; n], stopped.clone());
            let contact =
                LocalContact { model: &model, colliders: &model.colliders, nodes: &nodes, start: &start };
            contact.grow_set(&x, &mut cpu_stopped, &mut set);
            let mut diagonal = Vec::new();
            with_contacts(&base, &set, stiffness, &mut diagonal);
            let bound = contact.bound_outside(&x, &steps, &set, &mut cpu_stopped);
            // The GPU's.
            let flags: Vec<u32> = stopped.iter().map(|&s| if s { 2 } else { 0 }).collect();
            rig.upload(3, "contact_flags", &flags);
            rig.upload(3, "projective_base", &base.iter().map(|&d| d as f32).collect::<Vec<_>>());
            let direction = rig.in_part_axes(&steps);
            rig.upload(3, "direction", &direction);
            let params =
                super::ContactParams::local_global(&rig.buffers, model.colliders.len(), &nodes, stiffness);
            let contact = &rig.stages.contact;
            contact.dispatch(&rig.context, &mut rig.rec, &groups, "contact_set", &params).unwrap();
            let gpu_diagonal = rig.read(3, "projective_diagonal", n);
            let gpu_set: Vec<u32> = bytemuck::cast_slice(&rig.read(3, "contact_flags", n)).to_vec();
            let contact = &rig.stages.contact;
            contact.dispatch(&rig.context, &mut rig.rec, &groups, "bound_outside", &params).unwrap();
            let gpu_flags: Vec<u32> = bytemuck::cast_slice(&rig.read(3, "contact_flags", n)).to_vec();
            let partials = rig.read(3, "bound_partials", rig.buffers.vertex_workgroups() as usize);
            let gpu_bound = WgContact::bound(bytemuck::cast_slice(&partials));
            let members = set.iter().filter(|&&m| m).count();
            let newly_stopped = cpu_stopped.iter().filter(|&&s| s).count();
            println!(
                "{} nodes: {members} of {n} in the set, {newly_stopped} stopped, bound {bound:.6} (GPU {gpu_bound:.6})",
                nodes.len()
            );
            assert!(
                members >= 10 && newly_stopped >= 5,
                "too few members ({members}) or stops ({newly_stopped})"
            );
            for v in 0..n {
                assert_eq!(gpu_set[v] == 1, set[v], "{} nodes: vertex {v}'s membership", nodes.len());
                assert!(
                    (gpu_diagonal[v] as f64 - diagonal[v]).abs() <= 1e-6 * diagonal[v],
                    "vertex {v}'s diagonal"
                );
                let expected = if set[v] {
                    1
                } else if cpu_stopped[v] {
                    2
                } else {
                    0
                };
                assert_eq!(gpu_flags[v], expected, "{} nodes: vertex {v}'s flags", nodes.len());
            }
            // f32 positions on 10-20 cm steps: 1e-6 in t; a wrong crossing is off by O(0.1).
            assert!((gpu_bound - bound).abs() < 1e-4, "GPU bound {gpu_bound} against the CPU's {bound}");
        }
    }
}
