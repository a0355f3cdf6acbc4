//! The device buffers of one model, grouped by lifetime as the shaders' bind groups are:
//! `GpuModel` (group 1: what never changes in a run), `GpuState` (group 2: positions and
//! handles) and `GpuScratch` (group 3: per-iteration work). Each buffer is known by the name
//! the shaders give it; stages bind them by that name. A name is a [`BufferSpan`]: a buffer
//! of its own, or, for the solvers' read-write vectors (`ARENA`), a range of one arena, so
//! that a dispatch binds few distinct buffers for writing.
//!
//! Positions on the device (the iterate `x`, the step's start `x_start` and inertial target
//! `target_positions`, `aux` and `x_saved`) are displacements from a reference: the rest shape,
//! each part turned and moved by a pose that follows it (`Frame`), each displacement in its
//! part's axes. f32 quantizes absolute positions of ~1 m to ~6e-8 m, which shape gradients of
//! ~20/m turn into strain noise of ~1e-6 and a gradient noise floor far above Newton's
//! tolerances; displacements of millimetres are stored ~1000x finer. The host converts in f64
//! on the way in and out. What lives in the world (gravity, colliders, handles) the shaders
//! see through the part's pose (`frame_offsets`): colliders and handles the host has placed
//! from each part's offset, in f64; self-contact alone places `rest` with the pose.
//! `positions` holds the published state's absolute positions, for drawing.

use super::context::GpuContext;
use super::gather::GpuCollider;
use super::pcg::{INVERSE_FACTORS, InverseSlots, PcgStatus};
use super::recording::Recording;
use super::stage::WORKGROUP;
use crate::backend::Anchor;
use crate::backend::topology::{Anchors, NO_GROUP, Topology};
use crate::material::MaterialModel;
use crate::math::outer;
use crate::mesh::SpringKind;
use crate::model::Model;
use crate::objective::{RigidStep, StepProblem};
use glam::{DMat3, DQuat, DVec3};

/// Initial guesses a budgeted solve holds on the device: the explicit, inertial and rigid guesses,
/// a warm start, and the step's start as the fallback.
pub const GUESSES: usize = 5;

/// Positions evaluated in one energy pass at most (the guesses, or a line search's
/// candidates): the `batch` buffer holds them, and the element and gather partials have room
/// for each.
pub const BATCH: usize = super::line_search::CANDIDATES;
const _: () = assert!(GUESSES <= BATCH);

/// The buffers that share one arena ([`GpuBuffers::pack`]), by group and name. wgpu tracks
/// every buffer a dispatch binds, and records a barrier for each writable one, at every
/// dispatch, on the host; ranges of one buffer count once. A CG iteration's kernels bound 14
/// writable buffers each and now bind 3, and encoding them takes 30 % less host time on the
/// development VM (docs/perf/gpu.md). A member must be declared `read_write` by every stage
/// that binds it, since one dispatch may not bind a buffer both for reading only and for
/// writing (`WgStage::bind` refuses it), and no dispatch may take its arguments from one.
/// So not here: `p_even` and `p_odd`, which the loop reads and writes by turns; the corner
/// gradients (the mixed solver's `displacement_corners` too), which the gather only reads;
/// and the loop's dispatch rings.
const ARENA: &[(u32, &str)] = &[
    (2, "rotations"),
    (2, "stretch"),
    (2, "mixed_rotations"),
    (3, "direction"),
    (3, "rhs"),
    (3, "r"),
    (3, "z"),
    (3, "ap"),
    (3, "inverse_diagonal"),
    (3, "residual_partials"),
    (3, "curvature_partials"),
    (3, "scalars_even"),
    (3, "scalars_odd"),
    (3, "fsai_y"),
    (3, "warm_partials"),
    (3, "earlier_direction"),
    (3, "earlier_product"),
    (3, "pipelined_vectors"),
    (3, "coarse_restricted"),
    (3, "coarse_partials"),
    (3, "translation_partials"),
    (3, "translation"),
    (3, "rhs_saved"),
    (3, "gradient"),
    (3, "x_start"),
    (3, "coupling_counts"),
    (3, "search"),
    (3, "mixed_linearization"),
];

/// The bytes a stage binds under one name: a buffer of its own, or a range of the arena
/// that holds the loop's read-write buffers ([`GpuBuffers::pack`]).
#[derive(Clone, Debug)]
pub struct BufferSpan {
    pub buffer: wgpu::Buffer,
    pub offset: u64,
    size: u64,
}

impl BufferSpan {
    /// All of `buffer`.
    pub fn whole(buffer: wgpu::Buffer) -> BufferSpan {
        let size = buffer.size();
        BufferSpan { buffer, offset: 0, size }
    }

    /// Its length in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The span as a binding.
    pub fn binding(&self) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &self.buffer,
            offset: self.offset,
            size: std::num::NonZeroU64::new(self.size),
        })
    }
}

/// Device buffers of one lifetime, by name.
#[derive(Default)]
pub struct NamedBuffers(Vec<(&'static str, BufferSpan)>);

impl NamedBuffers {
    /// The buffer called `name`.
    pub fn get(&self, name: &str) -> Option<&BufferSpan> {
        self.0.iter().find(|(n, _)| *n == name).map(|(_, b)| b)
    }

    /// Adds `buffer` as `name`, replacing one of that name.
    pub(crate) fn set(&mut self, name: &'static str, buffer: wgpu::Buffer) {
        self.place(name, BufferSpan::whole(buffer));
    }

    /// Binds `name` to `span`, replacing what it was.
    fn place(&mut self, name: &'static str, span: BufferSpan) {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = span,
            None => self.0.push((name, span)),
        }
    }

    /// The buffer called `name`, which the backend created.
    pub(crate) fn named(&self, name: &str) -> &BufferSpan {
        self.get(name).unwrap_or_else(|| panic!("the GPU backend creates a buffer called {name:?}"))
    }
}

/// Group 1: the model.
pub type GpuModel = NamedBuffers;
/// Group 2: the state.
pub type GpuState = NamedBuffers;
/// Group 3: scratch.
pub type GpuScratch = NamedBuffers;

/// The id of a material model in the shaders (`MATERIAL`).
pub(crate) fn material_id(model: MaterialModel) -> u32 {
    match model {
        MaterialModel::StVK => 0,
        MaterialModel::NeoHookean => 1,
        MaterialModel::StableNeoHookean => 2,
        MaterialModel::Corotated => 3,
        MaterialModel::FixedCorotated => 4,
        MaterialModel::Arap => 5,
    }
}

/// Vertex `v`'s vector of `values`, three floats a vertex, in f64.
fn vector_at(values: &[f32], v: usize) -> DVec3 {
    DVec3::new(values[3 * v] as f64, values[3 * v + 1] as f64, values[3 * v + 2] as f64)
}

fn to_f32(values: &[f64]) -> Vec<f32> {
    values.iter().map(|&v| v as f32).collect()
}

/// All device buffers of one model, and the sizes they were made for.
pub struct GpuBuffers {
    pub model: GpuModel,
    pub state: GpuState,
    pub scratch: GpuScratch,
    pub vertex_count: usize,
    pub tet_count: usize,
    pub spring_count: usize,
    /// Slots of the sliced-ELLPACK matrix (`shaders/shared/matrix.wgsl`): blocks and padding.
    pub slot_count: usize,
    /// Per stored block (CSR index), its slot.
    pub slot_of: Vec<u32>,
    /// Energy partials of one element pass.
    pub energy_partial_count: usize,
    /// The model's self-contact, where it has it (its buffers exist as placeholders without).
    pub self_contact: Option<super::self_contact::SelfContactLayout>,
    /// The free parts' translation groups (`Model::translation_groups`; 0: none free), and
    /// the chunks their vertices are summed in (`translation_chunks`).
    pub translation_groups: u32,
    pub translation_chunks: u32,
    /// What the displacements are measured from.
    frame: Frame,
    /// The colliders and handles in the world's coordinates, and each collider's first grid
    /// sample: the device holds them as each part's frame sees them, written anew when a pose
    /// moves.
    colliders: Vec<crate::contact::Collider>,
    first_samples: Vec<u32>,
    anchors: Anchors,
    anchor_capacity: usize,
}

/// Where the device's displacements are measured from: each part (the vertices the elements
/// connect, `Model::parts`) has a pose of its own, its rest shape (about the part's own
/// centre where it was modelled away from the origin; the first pose places it) turned and
/// moved as a whole, and vertex `v` lies at
/// `offset + turn (rest_v + u_v)`: its displacement `u_v` is
/// in the part's own axes (`frame_offsets`; shaders/shared/frame.wgsl). Elements, inertia and
/// the solves see `rest + u` alone, which are the same in any axes; the shaders turn what
/// lives in the world's axes (gravity, colliders, handles) into the part's, and the host
/// turns the damping's vertex terms.
///
/// A part's pose follows it: at a step's start ([`GpuBuffers::rebase`]) it is fitted to where
/// the step will evaluate the part, as a rigid body (`Frame::fit`: the part's rigid step, at
/// the nodes' mean `theta`, the one its rigid guess takes), and taken once
/// the fit puts a probe vertex further than a fraction of the part's reach from where the
/// pose has it ([`REPOSE_FRACTION`]). So a travelling, spinning body's displacements stay near
/// what it deforms, and f32 rounds them finely.
/// Left at rest, a steel cube that had fallen 3 m held displacements whose f32 rounding
/// (2.4e-7 m) strained its 1.25 cm cells by 2e-5, a thousand times what its weight does: its
/// Newton steps stalled at that noise and it fell 21 cm behind the CPU in 40 steps. A stiff
/// cube spinning at 10 rad/s, its axes left the world's, held displacements of its own size,
/// and its GPU solves stalled at gradients of 5 N.
///
/// Moving a pose rounds the state's displacements anew (more finely than before): an element
/// that a stiff solve left at the edge of its material's domain (J at f32's noise) can fall
/// either side of it, so the backend checks the start's potential after a move and takes the
/// move back where it is infinite (a pass and a readback, which only neo-Hookean tets and the
/// barrier need). A model with self-contact keeps every part in the world's axes: its
/// couplings join the parts.
struct Frame {
    rest: Vec<[f64; 3]>,
    part_of: Vec<u32>,
    poses: Vec<PartPose>,
    /// Per part, the vertices its pose is fitted to and its reach; `None` for a lone vertex,
    /// whose displacement strains nothing.
    probes: Vec<Option<Probes>>,
    /// Whether the parts may turn (not with self-contact).
    turns: bool,
    /// Per part, its translation group (`Model::translation_groups`), which indexes the
    /// step's rigid steps; `NO_GROUP` for a part some pin holds.
    groups: Vec<u32>,
    /// Per part, `sum_v m_v rest_v` and its mass: with the poses, the reference positions'
    /// first moment of mass, which gravity's potential there is.
    rest_moments: Vec<DVec3>,
    part_masses: Vec<f64>,
    /// The probes' positions at the start of the step the poses were last fitted for.
    last_starts: Vec<DVec3>,
}

/// A part's pose: its rest shape turned by `turn` and moved by `offset`, each rounded as the
/// shaders hold it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PartPose {
    pub offset: DVec3,
    pub turn: DQuat,
}

impl PartPose {
    /// The pose as the shaders read it (the host's is the same, in f64).
    pub fn rounded(offset: DVec3, turn: DQuat) -> PartPose {
        PartPose { offset: offset.as_vec3().as_dvec3(), turn: turn.as_quat().as_dquat().normalize() }
    }

    fn place(&self, rest: DVec3) -> DVec3 {
        self.offset + self.turn * rest
    }
}

/// A part's pose as the host applies it to every vertex of a vector: the turn as matrices (a
/// quaternion's rotation takes twice the flops), and none where the part has not turned. The
/// host converts several vectors of the state a step: at 100K tets, over half of its passes
/// over the vertices in a budget step (docs/perf/gpu.md).
struct Placement {
    offset: DVec3,
    /// The turn and its inverse; `None` for the identity.
    turn: Option<(DMat3, DMat3)>,
}

impl Placement {
    fn of(pose: &PartPose) -> Placement {
        let turn = (pose.turn != DQuat::IDENTITY).then(|| {
            let m = DMat3::from_quat(pose.turn);
            (m, m.transpose())
        });
        Placement { offset: pose.offset, turn }
    }

    /// `a`, in the part's axes, in the world's.
    fn to_world(&self, a: DVec3) -> DVec3 {
        self.turn.map_or(a, |(turn, _)| turn * a)
    }

    /// `a`, in the world's axes, in the part's.
    fn to_part(&self, a: DVec3) -> DVec3 {
        self.turn.map_or(a, |(_, inverse)| inverse * a)
    }

    /// The displacement, in the part's axes, of a vertex at rest at `rest` that is at `x`.
    fn displacement(&self, rest: DVec3, x: DVec3) -> DVec3 {
        self.to_part(x - self.offset) - rest
    }

    /// Where a vertex at rest at `rest` is when displaced by `u`.
    fn position(&self, rest: DVec3, u: DVec3) -> DVec3 {
        self.offset + self.to_world(rest + u)
    }
}

/// Every part's placement, looked up by vertex: made once for a pass over the vertices.
pub(crate) struct Placements<'a> {
    part_of: &'a [u32],
    parts: Vec<Placement>,
}

impl Placements<'_> {
    fn at(&self, v: usize) -> &Placement {
        &self.parts[self.part_of[v] as usize]
    }

    /// The turn of vertex `v`'s part: `a` in the part's axes is `turn a` in the world's, and
    /// `a` in the world's is `turn^T a` in the part's.
    pub(crate) fn turn(&self, v: usize) -> DMat3 {
        self.at(v).turn.map_or(DMat3::IDENTITY, |(turn, _)| turn)
    }
}

/// The vertices a part's pose is fitted to — the one nearest its rest centroid first, then
/// the outermost along each axis — and the part's reach around the first.
struct Probes {
    vertices: Vec<usize>,
    reach: f64,
}

/// A part's pose is fitted anew once it is off by this much of the part's reach. The f32
/// rounding of a displacement grows with its size, and with it the strain noise that stiff
/// solves stall at; a new pose costs a neo-Hookean body a readback.
pub const REPOSE_FRACTION: f64 = 1.0 / 16.0;

impl Frame {
    /// The frame of `model`'s parts, `groups` the vertices' translation groups.
    fn new(model: &Model, groups: &[u32]) -> Frame {
        let (part_of, parts) = model.parts();
        let parts = parts as usize;
        let mut part_groups = vec![NO_GROUP; parts];
        for (&p, &group) in part_of.iter().zip(groups) {
            part_groups[p as usize] = group;
        }
        let point = |v: usize| DVec3::from(model.rest[v]);
        let mut sums = vec![(DVec3::ZERO, 0usize); parts];
        for (v, &p) in part_of.iter().enumerate() {
            sums[p as usize].0 += point(v);
            sums[p as usize].1 += 1;
        }
        let mut nearest = vec![(usize::MAX, f64::INFINITY); parts];
        // Per part and axis, the vertices of least and greatest rest coordinate.
        let mut outermost = vec![[(usize::MAX, f64::INFINITY, usize::MAX, f64::NEG_INFINITY); 3]; parts];
        for (v, &p) in part_of.iter().enumerate() {
            let (sum, count) = sums[p as usize];
            let distance = point(v).distance(sum / count as f64);
            if distance < nearest[p as usize].1 {
                nearest[p as usize] = (v, distance);
            }
            for (axis, out) in outermost[p as usize].iter_mut().enumerate() {
                let c = point(v)[axis];
                if c < out.1 {
                    (out.0, out.1) = (v, c);
                }
                if c > out.3 {
                    (out.2, out.3) = (v, c);
                }
            }
        }
        let mut reach = vec![0.0f64; parts];
        for (v, &p) in part_of.iter().enumerate() {
            reach[p as usize] = reach[p as usize].max(point(v).distance(point(nearest[p as usize].0)));
        }
        let probes = (0..parts)
            .map(|p| {
                let mut vertices = vec![nearest[p].0];
                for &(low, _, high, _) in &outermost[p] {
                    for v in [low, high] {
                        if !vertices.contains(&v) {
                            vertices.push(v);
                        }
                    }
                }
                (reach[p] > 0.0).then_some(Probes { vertices, reach: reach[p] })
            })
            .collect();
        // The rest shape of a part modelled away from the origin (further than its reach) is
        // held about the part's centre (rounded to f32, so that the pose that places it is
        // exact): the device adds displacements to these, and a cube modelled 10 km out held
        // rest positions that f32 rounds to 1 mm, and rested on a collider 0.9 mm from the
        // CPU (3e-8 m with its centre taken out). Nearer, the rounding is the part's own size
        // either way, and the rest shape stays as modelled.
        let centres: Vec<DVec3> = (0..parts)
            .map(|p| {
                let (sum, count) = sums[p];
                let centre = sum / count.max(1) as f64;
                let away = centre.abs().max_element() > reach[p];
                if away { centre.as_vec3().as_dvec3() } else { DVec3::ZERO }
            })
            .collect();
        let rest: Vec<[f64; 3]> =
            (0..model.rest.len()).map(|v| (point(v) - centres[part_of[v] as usize]).to_array()).collect();
        let mut rest_moments = vec![DVec3::ZERO; parts];
        let mut part_masses = vec![0.0; parts];
        for (v, (&p, &m)) in part_of.iter().zip(&model.masses).enumerate() {
            rest_moments[p as usize] += DVec3::from(rest[v]) * m;
            part_masses[p as usize] += m;
        }
        Frame {
            rest,
            part_of,
            poses: centres.iter().map(|&offset| PartPose { offset, turn: DQuat::IDENTITY }).collect(),
            probes,
            turns: model.self_collision.is_none(),
            groups: part_groups,
            rest_moments,
            part_masses,
            last_starts: Vec::new(),
        }
    }

    /// `sum_v m_v reference_v`.
    fn first_moment(&self) -> DVec3 {
        (0..self.poses.len())
            .map(|p| self.poses[p].offset * self.part_masses[p] + self.poses[p].turn * self.rest_moments[p])
            .sum()
    }

    fn pose(&self, v: usize) -> &PartPose {
        &self.poses[self.part_of[v] as usize]
    }

    /// Each part's placement, looked up by vertex.
    fn placements(&self) -> Placements<'_> {
        Placements { part_of: &self.part_of, parts: self.poses.iter().map(Placement::of).collect() }
    }

    /// Vertex `v`'s displacement at the absolute position `x`, in its part's axes.
    #[cfg(test)]
    fn displacement(&self, v: usize, x: DVec3) -> DVec3 {
        Placement::of(self.pose(v)).displacement(DVec3::from(self.rest[v]), x)
    }

    /// Vertex `v`'s absolute position at the displacement `u`.
    #[cfg(test)]
    fn position(&self, v: usize, u: DVec3) -> DVec3 {
        Placement::of(self.pose(v)).position(DVec3::from(self.rest[v]), u)
    }

    /// The pose of part `p` where the step will evaluate it: its pose in the rigid steps'
    /// shape (a least-squares rigid fit of the probes), carried on by the part's rigid step
    /// (`StepProblem::rigid_steps`, the nodes' placement that the rigid guess takes). A
    /// translation of the first probe alone where the part may not turn, its probes do not
    /// span space, or it has no rigid step: then `theta` of the way to the target, or its
    /// start for a part some pin holds.
    fn fit(&self, p: usize, probes: &Probes, heading: &Heading) -> (DVec3, DQuat) {
        let rest = |v: usize| DVec3::from(self.rest[v]);
        let current = self.poses[p];
        let centre = probes.vertices[0];
        let step = heading.steps.get(self.groups[p] as usize).copied().flatten();
        let placed = match step {
            Some(step) => heading.shape(centre) + step.to - step.from,
            // A part some pin holds stays within its reach of pins that never leave the start.
            // Its inertial target can lie anywhere (A-1's velocity correction once put a stiff
            // pinned bar's 9e9 m off): a frame there rounded the bar's displacements to
            // hundreds of metres, and the gather's noise floor hid every Newton step.
            None if self.groups[p] == NO_GROUP => heading.start(centre),
            None => heading.start(centre) + (heading.target(centre) - heading.start(centre)) * heading.theta,
        };
        let translated = (placed - current.turn * rest(centre), current.turn);
        let Some(step) = step.filter(|_| self.turns) else { return translated };
        let count = probes.vertices.len() as f64;
        let mean = probes.vertices.iter().map(|&v| heading.shape(v)).sum::<DVec3>() / count;
        let rest_mean = probes.vertices.iter().map(|&v| rest(v)).sum::<DVec3>() / count;
        let (mut cross, mut spread) = (DMat3::ZERO, DMat3::ZERO);
        for &v in &probes.vertices {
            let (r, x) = (rest(v) - rest_mean, heading.shape(v) - mean);
            cross += outer(x, r);
            spread += outer(r, r);
        }
        let scale = spread.col(0).x + spread.col(1).y + spread.col(2).z;
        if !(spread.determinant() > 1e-6 * scale * scale * scale) {
            return translated;
        }
        let shape_turn = crate::material::closest_rotation(&cross, current.turn).0;
        let turn = step.turn * shape_turn;
        // The rest shape's centre of mass goes where the step takes the part's.
        let rest_centre = self.rest_moments[p] / self.part_masses[p];
        (step.to - turn * rest_centre, turn)
    }

    /// Whether a step from `start` is one the poses were not fitted for yet (remembering it).
    /// The poses are fitted once a step: the solves of one step (an energy-controlled step's
    /// blends) share them, so that the energies they compare are rounded alike.
    fn begins_step(&mut self, start: &[[f64; 3]]) -> bool {
        let probed = self.probes.iter().flatten().flat_map(|probes| &probes.vertices);
        let starts: Vec<DVec3> = probed.map(|&v| DVec3::from(start[v])).collect();
        if starts == self.last_starts {
            return false;
        }
        self.last_starts = starts;
        true
    }

    /// Fits the pose of each part that `heading` takes off its own; returns the poses before,
    /// when some moved.
    fn rebase(&mut self, heading: &Heading) -> Option<Vec<PartPose>> {
        let mut before = None;
        for (p, probes) in self.probes.iter().enumerate() {
            let Some(probes) = probes else { continue };
            let (offset, turn) = self.fit(p, probes, heading);
            let fitted = PartPose::rounded(offset, turn);
            let current = self.poses[p];
            let off = probes.vertices.iter().fold(0.0f64, |worst, &v| {
                let rest = DVec3::from(self.rest[v]);
                worst.max(fitted.place(rest).distance(current.place(rest)))
            });
            if fitted.offset.is_finite() && fitted.turn.is_finite() && off > REPOSE_FRACTION * probes.reach {
                before.get_or_insert_with(|| self.poses.clone());
                self.poses[p] = fitted;
            }
        }
        before
    }

    /// Each part's offset: where its frame's origin lies in the world.
    fn origins(&self) -> Vec<DVec3> {
        self.poses.iter().map(|pose| pose.offset).collect()
    }

    /// The poses as the shaders read them: per part, the offset with the part's reach (the
    /// gather's noise floor), then the turn.
    fn device_poses(&self) -> Vec<[f32; 4]> {
        let reach = |p: usize| self.probes[p].as_ref().map_or(0.0, |probes| probes.reach as f32);
        let mut out = Vec::with_capacity(2 * self.poses.len());
        for (p, pose) in self.poses.iter().enumerate() {
            let (o, q) = (pose.offset.as_vec3(), pose.turn.as_quat());
            out.push([o.x, o.y, o.z, reach(p)]);
            out.push([q.x, q.y, q.z, q.w]);
        }
        out
    }
}

/// Where a step takes the parts: the free ones by their rigid steps, the others from
/// `start` towards the inertial `target`, `theta` of the way (the nodes' mean).
struct Heading<'a> {
    start: &'a [[f64; 3]],
    target: &'a [[f64; 3]],
    steps: &'a [Option<RigidStep>],
    /// The positions whose shape the steps carry (`StepProblem::rigid_shape`).
    shape: &'a [[f64; 3]],
    theta: f64,
}

impl Heading<'_> {
    fn start(&self, v: usize) -> DVec3 {
        DVec3::from(self.start[v])
    }

    fn shape(&self, v: usize) -> DVec3 {
        DVec3::from(self.shape[v])
    }

    fn target(&self, v: usize) -> DVec3 {
        DVec3::from(self.target[v])
    }
}

impl GpuBuffers {
    /// Uploads `model` and allocates every buffer the stages use; `energy_partials` is the
    /// element stage's partial count.
    pub fn new(context: &GpuContext, model: &Model, energy_partials: usize) -> GpuBuffers {
        let c = context;
        let n = model.vertex_count();
        let (nt, ns) = (model.tets.len(), model.springs.len());
        let topology = Topology::new(model);
        let slots = topology.matrix_slots();
        let slot_count = slots.slot_columns.len();
        let partials = n.div_ceil(WORKGROUP as usize);

        let mut m = GpuModel::default();
        m.set("masses", c.storage("masses", &to_f32(&model.masses)));
        let pinned: Vec<u32> = model.pinned.iter().map(|&p| p as u32).collect();
        m.set("pinned", c.storage("pinned", &pinned));
        // The free parts, each split off along its translations in the GPU solves.
        let (groups, translation_groups) = model.translation_groups();
        m.set("translation_groups", c.storage("translation_groups", &groups));
        let (chunks, translation_chunks) = self::translation_chunks(&groups, translation_groups);
        m.set("translation_chunks", c.storage("translation_chunks", &chunks));
        let frame = Frame::new(model, &groups);
        m.set("rest", c.storage("rest", &to_f32(frame.rest.as_flattened())));
        m.set("frame_parts", c.storage("frame_parts", &frame.part_of));
        let (first_samples, sdf_values) = GpuCollider::samples(&model.colliders);
        let colliders = GpuCollider::pack(&model.colliders, &first_samples, &frame.origins());
        m.set("colliders", c.storage("colliders", &colliders));
        m.set("sdf_values", c.storage("sdf_values", &sdf_values));
        m.set("corner_offsets", c.storage("corner_offsets", &topology.corner_offsets));
        m.set("corners", c.storage("corners", &topology.corners));
        m.set("row_offsets", c.storage("row_offsets", &topology.row_offsets));
        m.set("columns", c.storage("columns", &topology.columns));
        m.set("diagonal", c.storage("diagonal", &topology.diagonal));
        m.set("source_offsets", c.storage("source_offsets", &topology.source_offsets));
        m.set("block_sources", c.storage("block_sources", &topology.block_sources));
        m.set("row_slices", c.storage("row_slices", &slots.row_slices()));
        m.set("slot_columns", c.storage("slot_columns", &slots.slot_columns));
        // The pattern of the local/global solver's FSAI product, made when it first runs.
        m.set("fsai_inverse_pattern", c.scratch::<u32>("fsai_inverse_pattern", 1));
        // The coarse correction's clusters and weights (`reserve_coarse`), with FSAI's.
        m.set("coarse_members", c.scratch::<u32>("coarse_members", 1));
        m.set("coarse_weights", c.scratch::<[f32; 4]>("coarse_weights", 1));
        // The local/global solver's weighted Laplacian.
        let laplacian = crate::backend::projective::laplacian(model, &topology);
        m.set("laplacian", c.storage("laplacian", &to_f32(&laplacian)));
        let projective = crate::backend::projective::check(model).is_ok();
        let tets: Vec<u32> = model.tets.iter().flatten().copied().collect();
        m.set("tets", c.storage("tets", &tets));
        let mut tet_rest = Vec::with_capacity(4 * nt);
        for rest in &model.tet_rest {
            for (a, g) in rest.shape_gradients.iter().enumerate() {
                let w = if a == 0 { rest.volume } else { 0.0 };
                tet_rest.push([g[0] as f32, g[1] as f32, g[2] as f32, w as f32]);
            }
        }
        m.set("tet_rest", c.storage("tet_rest", &tet_rest));
        let tet_material: Vec<[f32; 4]> = model
            .tet_material
            .iter()
            .map(|m| {
                let (mu, lambda) = m.lame();
                [material_id(m.model()) as f32, mu as f32, lambda as f32, 0.0]
            })
            .collect();
        m.set("tet_material", c.storage("tet_material", &tet_material));
        let springs: Vec<u32> = model.springs.iter().flatten().copied().collect();
        m.set("springs", c.storage("springs", &springs));
        let spring_laws: Vec<[f32; 4]> = model
            .spring_law
            .iter()
            .map(|s| {
                [if s.kind == SpringKind::Hooke { 0.0 } else { 1.0 }, s.stiffness as f32, s.rest as f32, 0.0]
            })
            .collect();
        m.set("spring_laws", c.storage("spring_laws", &spring_laws));
        // Rest edges in f64, so that the shader adds displacements to exact rest geometry.
        let spring_edges: Vec<[f32; 4]> = model
            .springs
            .iter()
            .map(|&[i, j]| {
                let (a, b) = (model.rest[i as usize], model.rest[j as usize]);
                [(b[0] - a[0]) as f32, (b[1] - a[1]) as f32, (b[2] - a[2]) as f32, 0.0]
            })
            .collect();
        m.set("spring_edges", c.storage("spring_edges", &spring_edges));

        let vector = |label: &'static str| c.scratch::<f32>(label, 3 * n);
        let mut s = GpuState::default();
        for name in ["x", "x_start", "target_positions", "aux"] {
            s.set(name, vector(name));
        }
        s.set("positions", c.storage("positions", &to_f32(model.rest.as_flattened())));
        s.set("frame_offsets", c.storage("frame_offsets", &frame.device_poses()));
        s.set("anchor_offsets", c.scratch::<u32>("anchor_offsets", n + 1));
        s.set("anchors", c.scratch::<[f32; 4]>("anchors", 1));
        // The local/global solver's rotations, per node and tet (identity to start), for
        // models it can solve.
        let rotations = if projective { 2 * nt } else { 1 };
        s.set("rotations", c.storage("rotations", &vec![[0.0f32, 0.0, 0.0, 1.0]; rotations]));
        // The mixed solver's stretches and rotations, allocated when it first runs.
        s.set("stretch", c.scratch::<f32>("stretch", 1));
        s.set("mixed_rotations", c.scratch::<[f32; 4]>("mixed_rotations", 1));

        let mut w = GpuScratch::default();
        w.set(
            "corner_gradients",
            c.scratch::<f32>("corner_gradients", super::element::corner_floats(nt, ns)),
        );
        w.set("element_blocks", c.scratch::<f32>("element_blocks", super::element::block_floats(nt, ns)));
        w.set("energy_partials", c.scratch::<f32>("energy_partials", BATCH * energy_partials));
        for name in ["gradient", "rhs", "direction", "x_saved", "x_start", "r", "z", "ap"] {
            w.set(name, vector(name));
        }
        w.set("inverse_diagonal", vector("inverse_diagonal"));
        // The local/global matrix's inverse, FSAI's product or dense, made when a solve first
        // asks for it (`reserve_fsai`, `reserve_dense`), and the loop's next residual.
        // Read as vec4s (a dense inverse's rows), so at least one.
        w.set("fsai_inverse", c.scratch::<f32>("fsai_inverse", 4));
        w.set("fsai_y", vector("fsai_y"));
        // The coarse correction's inverses, Z^T r and shares of r.z (`reserve_coarse`).
        w.set("coarse_inverse", c.scratch::<[f32; 4]>("coarse_inverse", 1));
        w.set("coarse_restricted", c.scratch::<[f32; 4]>("coarse_restricted", 1));
        w.set("coarse_partials", c.scratch::<f32>("coarse_partials", 1));
        w.set("projective_diagonal", c.scratch::<f32>("projective_diagonal", n));
        w.set("projective_base", c.scratch::<f32>("projective_base", n));
        w.set("contact_flags", c.scratch::<u32>("contact_flags", n));
        w.set("vertex_blocks", c.scratch::<f32>("vertex_blocks", 9 * n));
        w.set("blocks", c.scratch::<f32>("blocks", 9 * slot_count));
        w.set("gather_partials", c.scratch::<[f32; 4]>("gather_partials", BATCH * partials));
        w.set("bound_partials", c.scratch::<f32>("bound_partials", partials));
        // The projection model's pressed vertices: outward normal and normal force.
        w.set("pressed", c.scratch::<[f32; 4]>("pressed", n));
        w.set("dot_partials", c.scratch::<[f32; 4]>("dot_partials", partials));
        // PCG's loop has a partial per workgroup, and as many workgroups as lanes per row.
        let pcg_partials = (n * super::pcg::MAX_LANES as usize).div_ceil(WORKGROUP as usize);
        w.set("residual_partials", c.scratch::<[f32; 2]>("residual_partials", pcg_partials));
        // A free body's split along its translations: sums per chunk (three vec4s), the
        // groups' translations (three each: see `store_translation`), and b before the split.
        let chunk_sums = 3 * translation_chunks.max(1) as usize;
        w.set("translation_partials", c.scratch::<[f32; 4]>("translation_partials", chunk_sums));
        w.set("translation", c.scratch::<[f32; 4]>("translation", 3 * translation_groups.max(1) as usize));
        w.set("rhs_saved", c.scratch::<f32>("rhs_saved", 3 * n));
        // b's vertex terms' part (the gather's), for the split of a model with free parts.
        let vertex_rhs = if translation_groups > 0 { 3 * n } else { 1 };
        w.set("vertex_rhs", c.scratch::<f32>("vertex_rhs", vertex_rhs));
        w.set("curvature_partials", c.scratch::<f32>("curvature_partials", pcg_partials));
        // PCG's ping-pong vectors, each followed by the pipelined loop's partials (r.r, r.u,
        // w.u, 0), which also ping-pong; and that loop's p, w = A u and A q, one after another.
        for name in ["p_even", "p_odd"] {
            w.set(name, c.scratch::<f32>(name, 3 * n + 4 * pcg_partials));
        }
        w.set("pipelined_vectors", c.scratch::<f32>("pipelined_vectors", 9 * n));
        // The local/global warm start's partials (two per workgroup), the solution before the
        // last and its product.
        w.set("warm_partials", c.scratch::<[f32; 4]>("warm_partials", 2 * pcg_partials));
        w.set("earlier_direction", vector("earlier_direction"));
        w.set("earlier_product", vector("earlier_product"));
        // A budgeted solve's decisions (`line_search`), and positions evaluated together.
        w.set("search", c.scratch::<super::line_search::SearchRecord>("search", 1));
        w.set("batch", c.scratch::<f32>("batch", BATCH * 3 * n));
        // The loop's indirect dispatch arguments, rings of LOOP_RING entries
        // (`shaders/pcg.wgsl`); zero until a solve's `setup` arms them.
        for name in ["product_dispatches", "update_dispatches"] {
            w.set(name, c.dispatch_arguments::<[u32; 3]>(name, super::pcg::LOOP_RING as usize));
        }
        w.set("scalars_even", c.scratch::<PcgStatus>("scalars_even", 1));
        w.set("scalars_odd", c.scratch::<PcgStatus>("scalars_odd", 1));
        // Bound where a stage's damping input is unused (a buffer may not be bound for
        // reading and writing in one dispatch); the damping matrix replaces it when a step
        // first has damping.
        w.set("placeholder", c.scratch::<f32>("placeholder", 1));
        w.set("damping_blocks", c.scratch::<f32>("damping_blocks", 1));
        w.set("damping_linear", c.scratch::<[f32; 4]>("damping_linear", 1));
        w.set("damping_vertex_factors", c.scratch::<f32>("damping_vertex_factors", 1));
        // The mixed solver's buffers, allocated when it first runs (`reserve_mixed`).
        w.set("displacement_corners", c.scratch::<[f32; 4]>("displacement_corners", 1));
        w.set("mixed_linearization", c.scratch::<f32>("mixed_linearization", 1));
        let self_contact = super::self_contact::add_buffers(c, model, &mut m, &mut w);
        GpuBuffers {
            model: m,
            state: s,
            scratch: w,
            vertex_count: n,
            tet_count: nt,
            spring_count: ns,
            slot_count,
            slot_of: slots.slot_of,
            energy_partial_count: energy_partials,
            self_contact,
            translation_groups,
            translation_chunks,
            frame,
            colliders: model.colliders.clone(),
            first_samples,
            anchors: Anchors::default(),
            anchor_capacity: 1,
        }
    }

    /// The buffer called `name` in bind group `group` (1 model, 2 state, 3 scratch).
    pub fn resolve(&self, group: u32, name: &str) -> Option<&BufferSpan> {
        self.group(group)?.get(name)
    }

    fn group(&self, group: u32) -> Option<&NamedBuffers> {
        match group {
            1 => Some(&self.model),
            2 => Some(&self.state),
            3 => Some(&self.scratch),
            _ => None,
        }
    }

    fn group_mut(&mut self, group: u32) -> Option<&mut NamedBuffers> {
        match group {
            1 => Some(&mut self.model),
            2 => Some(&mut self.state),
            3 => Some(&mut self.scratch),
            _ => None,
        }
    }

    /// Moves the buffers of `ARENA` into one arena, each a range of it, and records the copy
    /// of what they hold (after the recorded work). Bind groups over them must be made again.
    /// A CG iteration's kernel then tracks 3 writable buffers where it tracked 14.
    /// Nothing where the context keeps buffers apart (`GpuContext::with_separate_buffers`).
    pub fn pack(&mut self, context: &GpuContext, recording: &mut Recording) {
        if !context.buffer_arena {
            return;
        }
        let limits = context.device.limits();
        let align = limits.min_storage_buffer_offset_alignment as u64;
        let mut places = Vec::new();
        let mut end = 0u64;
        for &(group, name) in ARENA {
            let Some(span) = self.resolve(group, name) else { continue };
            let at = end.next_multiple_of(align);
            // A member the arena has no room for stays a buffer of its own.
            if at + span.size() <= limits.max_buffer_size {
                places.push((group, name, at));
                end = at + span.size();
            }
        }
        let arena = context.scratch::<u8>("arena", end as usize);
        for (group, name, at) in places {
            let group = self.group_mut(group).expect("ARENA names groups 1-3");
            let source = group.named(name).clone();
            let target = BufferSpan { buffer: arena.clone(), offset: at, size: source.size() };
            recording.copy(context, &source, &target, 0, source.size());
            group.place(name, target);
        }
    }

    /// Bytes of the buffers held, each arena once.
    pub fn held_bytes(&self) -> u64 {
        let mut held: Vec<&wgpu::Buffer> = Vec::new();
        for (_, span) in self.model.0.iter().chain(&self.state.0).chain(&self.scratch.0) {
            if !held.contains(&&span.buffer) {
                held.push(&span.buffer);
            }
        }
        held.iter().map(|b| b.size()).sum()
    }

    /// The displacements of `positions` in f32, each in its part's axes (`Frame`).
    pub fn displacements(&self, positions: &[[f64; 3]]) -> Vec<[f32; 3]> {
        let (rest, placements) = (&self.frame.rest, self.frame.placements());
        crate::math::per_vertex(positions.len(), |v| {
            let at = placements.at(v);
            at.displacement(DVec3::from(rest[v]), DVec3::from(positions[v])).as_vec3().to_array()
        })
    }

    /// The positions of `displacements`, in f64.
    pub fn positions(&self, displacements: &[f32], out: &mut [[f64; 3]]) {
        let (rest, placements) = (&self.frame.rest, self.frame.placements());
        crate::math::fill_per_vertex(out, |v| {
            placements.at(v).position(DVec3::from(rest[v]), vector_at(displacements, v)).to_array()
        });
    }

    /// Vectors per vertex in its part's axes (`values`, three floats a vertex), in the world's.
    pub fn to_world(&self, values: &[f32], out: &mut [[f64; 3]]) {
        let placements = self.frame.placements();
        crate::math::fill_per_vertex(out, |v| placements.at(v).to_world(vector_at(values, v)).to_array());
    }

    /// The parts' turns, looked up by vertex (`Placements::turn`).
    pub(crate) fn turns(&self) -> Placements<'_> {
        self.frame.placements()
    }

    /// Fits anew the poses of the parts that `problem` evaluates off them (`Frame`) and
    /// records their upload; returns the poses before, when some moved. Displacements
    /// already on the device are then stale: a step uploads its start and target after this.
    pub fn rebase(
        &mut self,
        context: &GpuContext,
        recording: &mut Recording,
        problem: &StepProblem<'_>,
    ) -> Option<Vec<PartPose>> {
        if !self.frame.begins_step(problem.start) {
            return None;
        }
        let theta = crate::objective::Node::mean_theta(problem.nodes);
        let heading = Heading {
            start: problem.start,
            target: problem.target,
            steps: problem.rigid_steps,
            shape: problem.rigid_shape,
            theta,
        };
        let before = self.frame.rebase(&heading)?;
        self.upload_poses(context, recording);
        Some(before)
    }

    /// Gravity's potential at the reference positions, `-g . sum_v m_v reference_v`: the
    /// host's share of the vertex terms' energy, once per unit of node weight. The gather
    /// weighs gravity against the displacements only (`shaders/gather.wgsl`, `potential`),
    /// which f32 holds finely wherever the body is; this is the rest, in f64.
    pub fn reference_gravity_energy(&self, gravity: [f64; 3]) -> f64 {
        -DVec3::from(gravity).dot(self.frame.first_moment())
    }

    /// The number of parts, each with a pose.
    pub fn part_count(&self) -> usize {
        self.frame.poses.len()
    }

    /// Sets the parts' poses and records their upload (a rebase taken back; the stage tests'
    /// moved frames).
    pub fn set_poses(&mut self, context: &GpuContext, recording: &mut Recording, poses: Vec<PartPose>) {
        assert_eq!(poses.len(), self.frame.poses.len(), "one pose per part");
        self.frame.poses = poses;
        self.upload_poses(context, recording);
    }

    /// Records the upload of the poses and of what the parts' frames see from them: the
    /// colliders and the handles' positions.
    fn upload_poses(&self, context: &GpuContext, recording: &mut Recording) {
        let poses = self.frame.device_poses();
        recording.upload(context, self.state.named("frame_offsets"), bytemuck::cast_slice(&poses));
        self.upload_colliders(context, recording);
        self.upload_anchors(context, recording);
    }

    /// The colliders as they are this step, in the world's coordinates.
    pub(crate) fn colliders(&self) -> &[crate::contact::Collider] {
        &self.colliders
    }

    /// The handles, grouped by vertex, in the world's coordinates.
    pub(crate) fn anchors(&self) -> &Anchors {
        &self.anchors
    }

    /// Moves the colliders (the same count and kinds, so their buffer keeps its size and the
    /// bind groups over it stay valid; grid samples do not move) and records their upload.
    pub fn set_colliders(
        &mut self,
        context: &GpuContext,
        recording: &mut Recording,
        colliders: &[crate::contact::Collider],
    ) {
        self.colliders = colliders.to_vec();
        self.upload_colliders(context, recording);
    }

    fn upload_colliders(&self, context: &GpuContext, recording: &mut Recording) {
        if self.colliders.is_empty() {
            return;
        }
        let packed = GpuCollider::pack(&self.colliders, &self.first_samples, &self.frame.origins());
        recording.upload(context, self.model.named("colliders"), bytemuck::cast_slice(&packed));
    }

    /// Sets the handles and records their upload; true when their buffer was replaced (bind
    /// groups over it must be rebuilt).
    pub fn set_anchors(
        &mut self,
        context: &GpuContext,
        recording: &mut Recording,
        anchors: &[Anchor],
    ) -> bool {
        self.anchors = Anchors::new(self.vertex_count, anchors);
        let offsets = if self.anchors.offsets.is_empty() {
            vec![0u32; self.vertex_count + 1]
        } else {
            self.anchors.offsets.clone()
        };
        // Work recorded before keeps the old buffer (wgpu holds it until that work is done).
        let grown = self.reserve_anchors(context, self.anchors.springs.len());
        recording.upload(context, self.state.named("anchor_offsets"), bytemuck::cast_slice(&offsets));
        self.upload_anchors(context, recording);
        grown
    }

    /// The handles' held positions as their vertices' frames see them (less the part's offset,
    /// in f64, then rounded; see [`GpuCollider::pack`]), with their stiffness.
    fn upload_anchors(&self, context: &GpuContext, recording: &mut Recording) {
        if self.anchors.springs.is_empty() {
            return;
        }
        let mut springs = Vec::with_capacity(self.anchors.springs.len());
        for v in 0..self.vertex_count {
            let origin = self.frame.pose(v).offset;
            let range = self.anchors.offsets[v] as usize..self.anchors.offsets[v + 1] as usize;
            springs.extend(self.anchors.springs[range].iter().map(|(k, p)| {
                let p = (*p - origin).as_vec3();
                [p.x, p.y, p.z, *k as f32]
            }));
        }
        recording.upload(context, self.state.named("anchors"), bytemuck::cast_slice(&springs));
    }

    /// Grows the handle buffer to hold `count` springs; true when it was replaced (bind groups
    /// over it must be rebuilt).
    pub fn reserve_anchors(&mut self, context: &GpuContext, count: usize) -> bool {
        if count <= self.anchor_capacity {
            return false;
        }
        self.anchor_capacity = count.next_power_of_two();
        self.state.set("anchors", context.scratch::<[f32; 4]>("anchors", self.anchor_capacity));
        true
    }

    /// Allocates the lagged damping matrix and linear terms; true the first time (bind groups over it must be
    /// rebuilt).
    pub fn reserve_damping(&mut self, context: &GpuContext) -> bool {
        if self.has_damping() {
            return false;
        }
        self.scratch.set("damping_blocks", context.scratch::<f32>("damping_blocks", 9 * self.slot_count));
        self.scratch.set("damping_linear", context.scratch::<[f32; 4]>("damping_linear", self.vertex_count));
        // Its vertex blocks, as factors (`GpuBackend::begin_step`).
        self.scratch.set(
            "damping_vertex_factors",
            context.scratch::<f32>("damping_vertex_factors", 9 * self.vertex_count),
        );
        true
    }

    /// Allocates the mixed solver's per-tet buffers; true the first time (bind groups over them
    /// must be rebuilt).
    pub fn reserve_mixed(&mut self, context: &GpuContext) -> bool {
        let nt = self.tet_count.max(1);
        if self.state.named("stretch").size() >= (24 * nt) as u64 {
            return false;
        }
        let corners = super::element::corner_floats(self.tet_count, self.spring_count);
        self.state.set("stretch", context.scratch::<f32>("stretch", 6 * nt));
        self.state.set("mixed_rotations", context.scratch::<[f32; 4]>("mixed_rotations", nt));
        self.scratch
            .set("displacement_corners", context.scratch::<f32>("displacement_corners", corners.max(1)));
        self.scratch.set("mixed_linearization", context.scratch::<f32>("mixed_linearization", 111 * nt));
        true
    }

    /// Makes the buffers of [`INVERSE_FACTORS`] FSAI products in `inverse`'s slots, one after
    /// another, and of their pattern, unless they exist; true when it made them (the bind
    /// groups must then be made again).
    pub fn reserve_fsai(&mut self, context: &GpuContext, inverse: &InverseSlots) -> bool {
        let pattern = &inverse.pattern;
        if self.model.named("fsai_inverse_pattern").size() >= 4 * pattern.len() as u64 {
            return false;
        }
        let entries = inverse.slot_count();
        self.model.set("fsai_inverse_pattern", context.storage("fsai_inverse_pattern", pattern));
        let values = (INVERSE_FACTORS * entries).next_multiple_of(4).max(4);
        self.scratch.set("fsai_inverse", context.scratch::<f32>("fsai_inverse", values));
        true
    }

    /// Makes the coarse correction's buffers for `space` (its clusters, and
    /// [`INVERSE_FACTORS`] inverses of `K`), unless they exist; true when it made them.
    pub(crate) fn reserve_coarse(
        &mut self,
        context: &GpuContext,
        space: &crate::backend::coarse::CoarseSpace,
    ) -> bool {
        let (members, weights) = space.members();
        if self.model.named("coarse_members").size() >= 4 * members.len() as u64 {
            return false;
        }
        let clusters = space.clusters();
        self.model.set("coarse_members", context.storage("coarse_members", &members));
        self.model.set("coarse_weights", context.storage("coarse_weights", &weights));
        let inverse = INVERSE_FACTORS * space.inverse_length() / 4;
        self.scratch.set("coarse_inverse", context.scratch::<[f32; 4]>("coarse_inverse", inverse));
        self.scratch.set("coarse_restricted", context.scratch::<[f32; 4]>("coarse_restricted", 3 * clusters));
        self.scratch.set("coarse_partials", context.scratch::<f32>("coarse_partials", clusters));
        true
    }

    /// Makes `fsai_inverse` hold [`INVERSE_FACTORS`] dense inverses of the local/global matrix,
    /// one after another, unless it does; true when it made it.
    pub fn reserve_dense(&mut self, context: &GpuContext) -> bool {
        let n = self.vertex_count;
        let values = INVERSE_FACTORS * super::pcg::dense_stride(n) * n;
        if self.scratch.named("fsai_inverse").size() >= 4 * values as u64 {
            return false;
        }
        self.scratch.set("fsai_inverse", context.scratch::<f32>("fsai_inverse", values));
        true
    }

    /// Whether the damping matrix exists.
    pub fn has_damping(&self) -> bool {
        self.scratch.named("damping_blocks").size() >= (36 * self.slot_count).max(4) as u64
    }

    /// Matrix blocks read back from slot order (`entries`, 9 per slot, entry-major) into the CPU
    /// twin's order (9 row-major floats per stored block).
    pub fn blocks_from_slots(&self, entries: &[f32]) -> Vec<f32> {
        let s = self.slot_count;
        self.slot_of.iter().flat_map(|&slot| (0..9).map(move |k| entries[k * s + slot as usize])).collect()
    }

    /// Matrix blocks in the CPU twin's order laid out in slots (padding zero).
    pub fn blocks_to_slots(&self, blocks: &[f32]) -> Vec<f32> {
        let s = self.slot_count;
        let mut entries = vec![0.0; 9 * s];
        for (block, &slot) in blocks.chunks_exact(9).zip(&self.slot_of) {
            for (k, &value) in block.iter().enumerate() {
                entries[k * s + slot as usize] = value;
            }
        }
        entries
    }

    /// Workgroups of a pass over the vertices (and their partial sums).
    pub fn vertex_workgroups(&self) -> u32 {
        (self.vertex_count as u32).div_ceil(WORKGROUP)
    }
}

/// The layout of the translation groups' sums on the device (`translation_chunks` in
/// shaders/pcg.wgsl), from the group of every vertex (`groups`, `NO_GROUP` for none) and their
/// `count`: each group's vertices in chunks of at most [`WORKGROUP`], a workgroup's sum each,
/// so that a group of any size, and any number of groups, sums in two passes. Per group the
/// range of its chunks (`count + 1` offsets), per chunk the range of its members (two u32),
/// then the members, by group and in vertex order; returns it and the number of chunks.
fn translation_chunks(groups: &[u32], count: u32) -> (Vec<u32>, u32) {
    let mut members: Vec<Vec<u32>> = vec![Vec::new(); count as usize];
    for (v, &g) in groups.iter().enumerate() {
        if g != crate::backend::topology::NO_GROUP {
            members[g as usize].push(v as u32);
        }
    }
    let (mut chunk_offsets, mut chunks, mut order) = (vec![0u32], Vec::new(), Vec::new());
    for group in &members {
        for chunk in group.chunks(WORKGROUP as usize) {
            chunks.extend([order.len() as u32, (order.len() + chunk.len()) as u32]);
            order.extend_from_slice(chunk);
        }
        chunk_offsets.push((chunks.len() / 2) as u32);
    }
    let chunk_count = (chunks.len() / 2) as u32;
    ([chunk_offsets, chunks, order].concat(), chunk_count)
}

#[cfg(test)]
mod tests {
    use glam::DVec3;

    /// Groups of any size, and any number of them, in chunks of at most a workgroup's
    /// vertices, each chunk in one group, every free vertex once and pinned parts' none.
    #[test]
    fn translation_chunks_cover_every_group() {
        use crate::backend::topology::NO_GROUP;
        // Group 0: 600 vertices (three chunks), interleaved with a pinned part; then 300
        // groups of two vertices, in reverse order.
        let mut groups: Vec<u32> = (0..800).map(|v| if v % 4 == 3 { NO_GROUP } else { 0 }).collect();
        groups.extend((1..=300).rev().flat_map(|g| [g, g]));
        let (layout, chunks) = super::translation_chunks(&groups, 301);
        let offsets = &layout[..302];
        assert_eq!(chunks, 3 + 300);
        assert_eq!(offsets[..3], [0, 3, 4]);
        assert_eq!(offsets[301], chunks);
        let spans = &layout[302..302 + 2 * chunks as usize];
        let members = &layout[302 + 2 * chunks as usize..];
        assert_eq!(members.len(), groups.iter().filter(|&&g| g != NO_GROUP).count());
        for g in 0..301 {
            let mut seen = Vec::new();
            for chunk in offsets[g] as usize..offsets[g + 1] as usize {
                let (first, end) = (spans[2 * chunk] as usize, spans[2 * chunk + 1] as usize);
                assert!(first < end && end - first <= super::WORKGROUP as usize, "chunk {chunk}");
                seen.extend_from_slice(&members[first..end]);
            }
            let expected: Vec<u32> =
                (0..groups.len() as u32).filter(|&v| groups[v as usize] == g as u32).collect();
            assert_eq!(seen, expected, "group {g}");
        }
    }

    use super::{Frame, Heading, PartPose, Placement, REPOSE_FRACTION};
    use crate::integrator::rigid_guess::FreeParts;
    use crate::material::Material;
    use crate::mesh::TetMesh;
    use crate::model::Model;

    /// The host's passes turn by matrices: they place and measure vertices as the pose's
    /// quaternion does, to f64's round-off, and where a part has not turned exactly as its
    /// offset alone.
    #[test]
    fn placements_turn_as_the_poses_quaternions_do() {
        let axis = DVec3::new(1.0, 2.0, -0.5).normalize();
        let turned =
            PartPose { offset: DVec3::new(3.0, -7.0, 2.0), turn: glam::DQuat::from_axis_angle(axis, 0.7) };
        let (rest, u, a) =
            (DVec3::new(0.3, -0.2, 0.45), DVec3::new(1e-3, -2e-3, 5e-4), DVec3::new(-2.0, 0.5, 9.0));
        let at = Placement::of(&turned);
        let x = turned.offset + turned.turn * (rest + u);
        assert!(at.position(rest, u).distance(x) < 1e-15 * x.length());
        assert!(at.displacement(rest, x).distance(u) < 1e-15 * x.length());
        assert!(at.to_world(a).distance(turned.turn * a) < 1e-15 * a.length());
        assert!(at.to_part(turned.turn * a).distance(a) < 1e-15 * a.length());
        let still = PartPose { offset: DVec3::new(0.25, 1.5, -4.0), turn: glam::DQuat::IDENTITY };
        let at = Placement::of(&still);
        assert_eq!(at.position(rest, u), still.offset + (rest + u));
        assert_eq!(at.displacement(rest, x), (x - still.offset) - rest);
        assert_eq!((at.to_world(a), at.to_part(a)), (a, a));
    }

    /// Two bars, each a part with a pose of its own: the one moved or turned further than a
    /// fraction of its reach gets the motion as its pose, so that its displacements are what
    /// it deformed since (none, for a rigid motion); the other keeps its pose, and so do both
    /// when nothing moves again. Parts that may not turn follow their probe alone.
    #[test]
    fn a_parts_pose_follows_it_once_it_has_moved_further_than_a_fraction_of_its_reach() {
        let mut model = Model::empty([0.0; 3]);
        let mesh = TetMesh::bar([4, 2, 2], [0.4, 0.2, 0.2]);
        for _ in 0..2 {
            model.add_tet_body(&mesh, &[Material::stvk(1e4, 0.3)], 1000.0).unwrap();
        }
        let (mut frame, parts) = frame_of(&model);
        // A new step that stays at `x`.
        let rebase = |frame: &mut Frame, x: &[DVec3]| {
            let at: Vec<[f64; 3]> = x.iter().map(|p| p.to_array()).collect();
            let steps = parts.steps(&model.masses, &at, &at, &at, &at, 1.0);
            frame.rebase(&Heading { start: &at, target: &at, steps: &steps, shape: &at, theta: 1.0 })
        };
        let initial = frame.poses.clone();
        // Each bar's rest shape about its own centre, the pose placing it there.
        for v in 0..model.rest.len() {
            assert!(frame.position(v, DVec3::ZERO).distance(DVec3::from(model.rest[v])) < 1e-15);
        }
        let each = mesh.vertex_count();
        // The bar's centre is a vertex; its corners lie sqrt(0.06) m from it.
        let (probe, reach) = frame.probes[1].as_ref().map(|p| (p.vertices[0], p.reach)).unwrap();
        assert_eq!(model.rest[probe], [0.2, 0.1, 0.1]);
        assert!(probe >= each && (reach - 0.06f64.sqrt()).abs() < 1e-12, "{probe} {reach}");
        let rest: Vec<DVec3> = model.rest.iter().map(|&p| DVec3::from(p)).collect();
        let (small, far) = (DVec3::new(0.0, -0.9 * REPOSE_FRACTION * reach, 0.0), DVec3::new(3.0, -7.0, 2.0));
        let mut x: Vec<DVec3> =
            (0..rest.len()).map(|v| rest[v] + if v < each { small } else { far }).collect();
        assert!(rebase(&mut frame, &x).is_some());
        assert_eq!(frame.poses[0], initial[0]);
        // The move, rounded to f32 as the shaders add it (this one is exact in f32: the bars,
        // modelled at the origin, are held as modelled).
        assert_eq!(initial[1].offset, DVec3::ZERO);
        assert_eq!(frame.poses[1].offset, far.as_vec3().as_dvec3());
        for v in each..rest.len() {
            assert!(frame.displacement(v, x[v]).length() < 1e-12, "vertex {v}");
            assert!(frame.position(v, DVec3::ZERO).distance(x[v]) < 1e-12, "vertex {v}");
        }
        assert!(rebase(&mut frame, &x).is_none());
        // A quarter turn about the bar's centre moves the probe nowhere, and the pose turns.
        let centre = x[probe];
        for p in &mut x[each..] {
            let d = *p - centre;
            *p = centre + DVec3::new(-d.y, d.x, d.z);
        }
        let turned = frame.poses.clone();
        assert!(rebase(&mut frame, &x).is_some());
        assert!(
            frame.poses[1].turn.angle_between(glam::DQuat::from_rotation_z(std::f64::consts::FRAC_PI_2))
                < 1e-6
        );
        for v in each..rest.len() {
            // The pose is rounded to f32: what is left is the rounding of an offset of 8 m
            // (5e-7 m) and of the turn.
            assert!(frame.displacement(v, x[v]).length() < 1e-6, "vertex {v}");
            let u = DVec3::new(1e-3, -2e-3, 5e-4);
            assert!(frame.displacement(v, frame.position(v, u)).distance(u) < 1e-15, "vertex {v}");
        }
        assert!(rebase(&mut frame, &x).is_none());
        // Without turns the same turn keeps the pose: the probe has not moved.
        frame.poses = turned;
        frame.turns = false;
        assert!(rebase(&mut frame, &x).is_none());
    }

    /// A pinned bar whose inertial target lies 9e9 m off (A-1's velocity correction of a stiff
    /// bar at a long step put it there) keeps its pose where its pins hold it: at its start.
    /// Its displacements stay of its own size, and f32 rounds them finely. Pins moved to a new
    /// start take the pose with them.
    #[test]
    fn a_pinned_parts_pose_stays_at_its_start_whatever_its_target() {
        let mut model = Model::empty([0.0; 3]);
        let mesh = TetMesh::bar([4, 2, 2], [0.4, 0.2, 0.2]);
        model.add_tet_body(&mesh, &[Material::stvk(1e4, 0.3)], 1000.0).unwrap();
        for v in 0..model.rest.len() {
            model.pinned[v] = model.rest[v][0] == 0.0;
        }
        let (mut frame, parts) = frame_of(&model);
        let initial = frame.poses[0];
        let reach = frame.probes[0].as_ref().unwrap().reach;
        let rest: Vec<DVec3> = model.rest.iter().map(|&p| DVec3::from(p)).collect();
        let rebase = |frame: &mut Frame, start: &[DVec3], target: DVec3| {
            let at: Vec<[f64; 3]> = start.iter().map(|p| p.to_array()).collect();
            let targets: Vec<[f64; 3]> = start.iter().map(|&p| (p + target).to_array()).collect();
            let steps = parts.steps(&model.masses, &at, &at, &targets, &at, 1.0);
            assert!(steps.iter().all(Option::is_none), "a pinned bar has no rigid step");
            frame.rebase(&Heading { start: &at, target: &targets, steps: &steps, shape: &at, theta: 1.0 })
        };
        assert!(rebase(&mut frame, &rest, DVec3::new(-9.3e9, -6.7e9, 500.0)).is_none());
        assert_eq!(frame.poses[0], initial);
        // The pins moved 3 m (between steps, as a user moves them): the pose follows the start.
        let moved = DVec3::new(3.0, -7.0, 2.0);
        let start: Vec<DVec3> = rest.iter().map(|&p| p + moved).collect();
        assert!(rebase(&mut frame, &start, DVec3::new(1e9, 0.0, 0.0)).is_some());
        assert_eq!(frame.poses[0].offset, (initial.offset + moved).as_vec3().as_dvec3());
        let worst = (0..rest.len()).map(|v| frame.displacement(v, start[v]).length()).fold(0.0, f64::max);
        assert!(worst < 1e-6 * reach, "displacements {worst:e} m at the start");
    }

    /// A bar modelled 10 km out holds its rest shape about its centre, which its first pose
    /// places exactly: the rest positions the device adds displacements to are of the bar's
    /// size, and f32 rounds them as finely as at the origin. A bar modelled at the origin
    /// keeps its rest shape as modelled.
    #[test]
    fn a_part_modelled_far_away_is_held_about_its_centre() {
        let mesh = TetMesh::bar([4, 2, 2], [0.4, 0.2, 0.2]);
        let far = DVec3::new(1e4, 5e3, -7e3);
        let moved: Vec<[f64; 3]> =
            mesh.positions().iter().map(|&p| (DVec3::from(p) + far).to_array()).collect();
        let mut model = Model::empty([0.0; 3]);
        model.add_tet_body(&mesh, &[Material::stvk(1e4, 0.3)], 1000.0).unwrap();
        model
            .add_tet_body(
                &TetMesh::new(moved, mesh.tets().to_vec()).unwrap(),
                &[Material::stvk(1e4, 0.3)],
                1000.0,
            )
            .unwrap();
        let (frame, _) = frame_of(&model);
        let each = mesh.vertex_count();
        assert_eq!(frame.poses[0].offset, DVec3::ZERO);
        assert_eq!(frame.poses[1].offset, (far + DVec3::new(0.2, 0.1, 0.1)).as_vec3().as_dvec3());
        for v in 0..model.rest.len() {
            let rest = DVec3::from(frame.rest[v]);
            if v < each {
                assert_eq!(frame.rest[v], model.rest[v]);
            } else {
                assert!(rest.abs().max_element() <= 0.2 + 1e-3, "vertex {v}: {rest}");
            }
            // Placed where it was modelled, to f64's rounding of 10 km.
            assert!(
                frame.position(v, DVec3::ZERO).distance(DVec3::from(model.rest[v])) < 1e-11,
                "vertex {v}"
            );
        }
    }

    /// The frame of `model`'s parts, and its free parts.
    fn frame_of(model: &Model) -> (Frame, FreeParts) {
        let (groups, _) = model.translation_groups();
        (Frame::new(model, &groups), FreeParts::new(model))
    }

    /// A body thrown spinning: the pose is fitted where its rigid step takes it (the rigid
    /// motion nearest the inertial target, turning a spinning body by about atan(h w), and
    /// its fall), which its rigid guess takes too, and halfway for a midpoint node, whatever
    /// the probes.
    #[test]
    fn a_spinning_bodys_pose_is_where_its_rigid_step_takes_it() {
        let mut model = Model::empty([0.0, -9.81, 0.0]);
        let mesh = TetMesh::bar([4, 3, 2], [0.4, 0.3, 0.2]);
        model.add_tet_body(&mesh, &[Material::stvk(1e4, 0.3)], 1000.0).unwrap();
        let (mut frame, parts) = frame_of(&model);
        let rest: Vec<DVec3> = model.rest.iter().map(|&p| DVec3::from(p)).collect();
        let centre = rest.iter().zip(&model.masses).map(|(&p, &m)| p * m).sum::<DVec3>()
            / model.masses.iter().sum::<f64>();
        let (placed, turned) = (
            DVec3::new(1.0, 2.0, -0.5),
            glam::DQuat::from_axis_angle(DVec3::new(1.0, 2.0, 0.5).normalize(), 0.7),
        );
        let (spin, velocity, h) = (DVec3::new(3.0, -10.0, 4.0), DVec3::new(2.0, 1.0, 0.0), 1.0 / 30.0);
        let start: Vec<DVec3> = rest.iter().map(|&p| placed + turned * (p - centre)).collect();
        let target: Vec<[f64; 3]> =
            start.iter().map(|&x| (x + (velocity + spin.cross(x - placed)) * h).to_array()).collect();
        let explicit: Vec<[f64; 3]> = target.iter().map(|&y| [y[0], y[1] - 9.81 * h * h, y[2]]).collect();
        let start: Vec<[f64; 3]> = start.iter().map(|p| p.to_array()).collect();
        let steps = parts.steps(&model.masses, &start, &start, &target, &explicit, 1.0);
        let step = steps[0].unwrap();
        // About atan(h w) about the spin (exactly that for a body of isotropic inertia).
        let expected_turn = glam::DQuat::from_axis_angle(spin.normalize(), (h * spin.length()).atan());
        assert!(step.turn.angle_between(expected_turn) < 0.02, "{:?}", step.turn);
        for theta in [1.0, 0.5] {
            let steps = parts.steps(&model.masses, &start, &start, &target, &explicit, theta);
            let heading = Heading { start: &start, target: &target, steps: &steps, shape: &start, theta };
            // Once a step: another solve of the same step keeps the poses.
            assert_eq!(frame.begins_step(&start), theta == 1.0);
            assert!(frame.rebase(&heading).is_some());
            for (v, &x) in start.iter().enumerate() {
                let expected = steps[0].unwrap().place(DVec3::from(x));
                // The pose is rounded to f32.
                let off = frame.position(v, DVec3::ZERO).distance(expected);
                assert!(off < 1e-6, "theta {theta}, vertex {v}: {off:e} m off");
            }
        }
    }
}
