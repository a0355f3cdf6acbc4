//! Stage `pcg` (`shaders/pcg.wgsl`), the GPU twin of `backend/cpu/pcg.rs`: PCG on the
//! assembled matrix, preconditioned by Jacobi or by the sparse approximate inverse of
//! `backend/fsai.rs`, its scalars on the device: two dispatches per iteration, one in a
//! budget's Jacobi solve (pipelined CG, the same iterates). The search direction `p` (the
//! pipelined loop's `m`) and the scalars ping-pong between two buffers each; the bind groups
//! of both parities are built once.

use encase::ShaderType;

use super::buffers::GpuBuffers;
use super::context::GpuContext;
use super::recording::{Grid, Recording, Staged};
use super::stage::{Bound, Kernel, WgStage};
use crate::backend::coarse::{CoarseCorrection, CoarseSpace};
use crate::backend::fsai::{Fsai, Inverse};
use crate::backend::topology::{MatrixSlots, NO_GROUP, Topology};
use crate::error::Result;
use crate::model::Model;

/// Parameters of `shaders/pcg.wgsl`.
#[derive(Clone, Copy, Debug, Default, ShaderType)]
pub struct PcgParams {
    pub vertex_count: u32,
    /// The gather's partial count (for the forcing term).
    pub partial_count: u32,
    pub max_iterations: u32,
    /// Relative residual to reach; with `forcing`, the cap of the forcing term.
    pub tolerance: f32,
    /// 1: the relative tolerance is Newton's forcing term of the last gather.
    pub forcing: u32,
    /// The nonlinear solver's gradient tolerance (N): at or below it (as the last gather
    /// found it) the solve does nothing; 0 for none.
    pub gradient_tolerance: f32,
    /// Self-contact's boundary vertex count (0: none; the linearization's records are set 0),
    /// and 1 where the step's friction records are part of the matrix.
    pub surface_count: u32,
    pub friction: u32,
    /// [`JACOBI`], [`FSAI`] (`M = G^T G` in `fsai_inverse` from `fsai_inverse_offset` on) or
    /// [`DENSE`] (`S^-1` there): see [`ProjectiveInverse`]. The one-workgroup solve takes
    /// Jacobi only.
    pub preconditioner: u32,
    pub fsai_inverse_offset: u32,
    /// Invocations per row in the loop's kernels, or in the one-workgroup solve's walks: set
    /// from the bound groups when recorded.
    pub lanes: u32,
    /// 0: start from zero; 1 or 2: from the Galerkin combination of the last solution (in the
    /// `direction` buffer) or of the last two (the one before in `earlier_direction`), which
    /// minimizes the quadratic over their span (see `shaders/pcg.wgsl`).
    pub warm: u32,
    /// 1: the loop's `finish` takes the step `x += direction` (`x_saved` is left as it was);
    /// such a solve is not read on.
    pub advance: u32,
    /// The iterations recorded by the end of the chunk (set by [`WgPcg::iterate`]).
    pub recorded_to: u32,
    /// With FSAI, the clusters of its coarse correction (0: none), and where the latest
    /// `K^-1` starts in `coarse_inverse` (in vec4s): see [`ProjectiveInverse`].
    pub coarse_clusters: u32,
    pub coarse_offset: u32,
    /// A free body's solve split along its translations (`deflate` in `shaders/pcg.wgsl`):
    /// `b` loses its translation before the loop and `finish` adds it to the step (to `x`
    /// with `advance`, else to the direction). 0: none; [`SPLIT_PROJECTIVE`] or
    /// [`SPLIT_BLOCKS`].
    pub translation: u32,
    /// The translation groups split off: the model's free parts (`translation_groups` per
    /// vertex, `Model::translation_groups`).
    pub translation_groups: u32,
}

/// `PcgParams::translation` of a local/global solve, whose matrix's vertex terms are its
/// diagonal: the explicit inverses leave the free parts' translations out. Like `advance`,
/// for solves not read on.
pub const SPLIT_PROJECTIVE: u32 = 1;
/// `PcgParams::translation` of a Newton or mixed-FEM Jacobi solve, whose vertex terms are the
/// gather's vertex blocks (the lagged damping's among them); `finish` puts `b` back once the
/// solve has stopped.
pub const SPLIT_BLOCKS: u32 = 2;

/// `PcgParams::preconditioner`: the inverse diagonal.
pub const JACOBI: u32 = 0;
/// `PcgParams::preconditioner`: FSAI's `M = G^T G` in `fsai_inverse`, in slots.
pub const FSAI: u32 = 1;
/// `PcgParams::preconditioner`: `S^-1` in `fsai_inverse`, dense.
pub const DENSE: u32 = 2;

/// How the loop iterates a Jacobi solve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JacobiLoop {
    /// CG: `product` and `update`, two dispatches an iteration.
    Cg,
    /// Pipelined CG: the same iterates, one dispatch an iteration. Its f32 recurrences drift
    /// from the true residual over long solves to tight tolerances (a Newton direction solved
    /// to 1e-6 in 54 iterations ended 1e-3 from the FSAI solve's, where CG's ended 8e-7 from
    /// it), so it is for solves a fixed budget cuts short, and it stops at
    /// [`PIPELINED_FLOOR`] at the latest.
    Pipelined,
}

/// The relative residual below which the pipelined loop does not go on, whatever its
/// tolerance: about where its true residual stops following its recurrences. Past it the
/// recursive residual fell while the true one stayed, and a few iterations later both grew
/// (20-fold) and the loop stopped on a wrong sign of curvature. On a local/global bar (600
/// vertices, Jacobi), with 1 and 16 lanes on lavapipe: at 50 iterations the recursive
/// residual was 9.3e-4 of |b| and the true one 1.4-1.5e-3, the quadratic 2e-6 above its least
/// (CG's 1e-6); at 60, 0.7-1.3e-4 against 1.2-1.3e-3; by 69 it had blown up and stopped at
/// 1e-5 (one lane) or 1.2e-4 (16 lanes) above the least, where CG went on down to 1e-10. On
/// an H100 the same run ended 2.4 % above it.
pub const PIPELINED_FLOOR: f32 = 1e-3;

/// At most this many invocations share a row of the loop's kernels (`lanes` in the shader).
pub const MAX_LANES: u32 = 16;

/// About as many invocations as the loop's kernels should have on a hardware GPU: a body of
/// a few thousand vertices with one per row fills a few dozen workgroups, each invocation
/// waiting on a chain of dependent loads, so small bodies share each row among more lanes.
/// On an H200 a `product` or `update` took 17 us at 3.7K-4.9K vertices with one lane and
/// 10.7-11.3 us with 16; at 36K vertices 21-23 us with one, 16-17 with two or four, and
/// 31-37 with 16.
const LOOP_INVOCATIONS: usize = 1 << 17;

/// Invocations per row for a body of `vertex_count` vertices: a power of two up to
/// [`MAX_LANES`]; one on a software adapter, whose few threads have no latency to hide.
pub fn lanes_for(vertex_count: usize, software: bool) -> u32 {
    lanes_filling(LOOP_INVOCATIONS, vertex_count, software)
}

/// The lanes per row that give `invocations` about one row each.
fn lanes_filling(invocations: usize, vertex_count: usize, software: bool) -> u32 {
    if software {
        return 1;
    }
    let lanes = (invocations / vertex_count.max(1)).clamp(1, MAX_LANES as usize);
    1 << lanes.ilog2()
}

/// The one-workgroup solve's shape: its invocations (`INVOCATIONS` in the shader) and the
/// lanes sharing each row of its walks over the matrix.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SmallSolve {
    pub invocations: u32,
    pub lanes: u32,
    /// On a software adapter (see [`SmallSolve::vertex_limit`]).
    pub software: bool,
}

/// The widest one-workgroup solve's invocations.
const WIDE_SOLVE: u32 = 1024;

/// Whether a device of `limits` runs a one-workgroup solve of `invocations`: the stages'
/// WORKGROUP always; more where the workgroup may be that large and hold its reduction.
fn allows(limits: &wgpu::Limits, invocations: u32) -> bool {
    invocations == super::stage::WORKGROUP
        || (limits.max_compute_invocations_per_workgroup >= invocations
            && limits.max_compute_workgroup_size_x >= invocations
            && limits.max_compute_workgroup_storage_size >= reduction_bytes(invocations))
}

/// The workgroup memory of a one-workgroup solve's reduction: a `vec4` per invocation, and a
/// flag.
fn reduction_bytes(invocations: u32) -> u32 {
    16 * invocations + 16
}

/// The workgroup widths the stages run at on a device of `limits`: WORKGROUP, and the widest
/// one-workgroup solve's where the device allows it.
pub(crate) fn workgroup_widths(limits: &wgpu::Limits) -> Vec<u32> {
    let mut widths = vec![super::stage::WORKGROUP];
    if allows(limits, WIDE_SOLVE) {
        widths.push(WIDE_SOLVE);
    }
    widths
}

impl SmallSolve {
    /// For a body of `vertex_count` vertices on `context`'s device: 1 024 invocations where
    /// the device allows, their rows shared among lanes so that each invocation has about
    /// one (a row's dozen or more blocks walked by one invocation is a chain of dependent
    /// loads); the stages' WORKGROUP and one lane on a software adapter, which runs a
    /// workgroup on one thread.
    pub fn for_body(context: &GpuContext, vertex_count: usize) -> SmallSolve {
        let wide = !context.software && allows(&context.device.limits(), WIDE_SOLVE);
        let invocations = if wide { WIDE_SOLVE } else { super::stage::WORKGROUP };
        let lanes = lanes_filling(invocations as usize, vertex_count, context.software);
        SmallSolve { invocations, lanes, software: context.software }
    }

    /// The largest body this shape solves faster than the loop, whose CG iteration costs two
    /// dispatches (about 19 us with Jacobi on an H200) however small the body; one
    /// workgroup's cost grows with the rows each invocation walks. On the H200, with 1 024
    /// invocations, Jacobi took 12.8 us a CG iteration at 330 vertices and 44 us at 2 541
    /// (the loop's equal near 770); with 256, 17.9 us at 330. (Measured before the solve kept
    /// its vectors in registers and workgroup memory; not measured since.) A software adapter
    /// has no dispatch latency to save, and keeps the 2 048 vertices the limit was before these
    /// measurements, so that the tests' bodies run both forms. It runs Jacobi only: the
    /// local/global matrix's inverses (FSAI, dense) run in the loop, where with the dense one
    /// a solve takes one or a few CG iterations, and FSAI serves bodies too large for it.
    pub fn vertex_limit(&self) -> usize {
        if self.software { 2048 } else { 3 * self.invocations as usize / 4 }
    }

    /// Whether `context`'s device can run this shape.
    pub fn fits(&self, context: &GpuContext) -> bool {
        allows(&context.device.limits(), self.invocations)
    }

    /// The sweeps of `invocations / lanes` rows that cover `vertex_count` rows
    /// (`SMALL_SWEEPS` in the shader).
    pub fn sweeps(&self, vertex_count: usize) -> u32 {
        (vertex_count.div_ceil((self.invocations / self.lanes) as usize) as u32).max(1)
    }

    /// The floats of workgroup memory its `p` takes for a body of `vertex_count` vertices
    /// (`SMALL_FLOATS`): three a row of its sweeps.
    fn p_floats(&self, vertex_count: usize) -> u32 {
        3 * self.sweeps(vertex_count) * (self.invocations / self.lanes)
    }

    /// Whether a device whose workgroups hold `workgroup_bytes` runs this shape's solve of a
    /// body of `vertex_count` vertices: at most `MAX_SMALL_SWEEPS` sweeps, and `p` beside the
    /// reduction.
    pub fn holds(&self, workgroup_bytes: u32, vertex_count: usize) -> bool {
        self.sweeps(vertex_count) <= MAX_SMALL_SWEEPS
            && reduction_bytes(self.invocations) + 4 * self.p_floats(vertex_count) <= workgroup_bytes
    }

    /// The override constants of its pipeline for a body of `vertex_count` vertices.
    fn constants(&self, vertex_count: usize) -> [(&'static str, f64); 3] {
        [
            ("INVOCATIONS", self.invocations as f64),
            ("SMALL_SWEEPS", self.sweeps(vertex_count) as f64),
            ("SMALL_FLOATS", self.p_floats(vertex_count) as f64),
        ]
    }
}

/// The most sweeps of a one-workgroup solve (`MAX_SMALL_SWEEPS` in `shaders/pcg.wgsl`): each
/// invocation keeps the vectors of a row a sweep in registers. The limit of a software
/// adapter (2 048 vertices in 256 invocations, one lane) takes all 8; a hardware GPU's bodies
/// take one.
const MAX_SMALL_SWEEPS: u32 = 8;

/// How many inverses of the local/global matrix stay on the device at once: a stabilized
/// step alternates two step weights, and before they stayed, a 15K-tet bar's step uploaded
/// both FSAI factors (about 0.6 MB each) every step.
pub const INVERSE_FACTORS: usize = 2;

/// The largest body whose solves with the local/global matrix multiply by `S^-1` itself
/// ([`DENSE`]), where the device's storage binding holds its [`INVERSE_FACTORS`] inverses
/// (128 MiB at 4 096 vertices, WebGPU's least binding; 302 MB at this limit). On an H200 a
/// 10-iteration local/global step took 1.95-2.37 ms dense against FSAI's 3.8-7.6 at 4.7-4.9K
/// vertices, and 5.5 ms against 3.3-3.7 at 13.2K, where the product's n^2 bytes dominate. The
/// host makes an inverse in about 0.2 s at 3 718 vertices (two cores).
pub const DENSE_VERTICES: usize = 6144;

/// The most vertices whose diagonal may move (by more than 1 %) before a dense inverse is
/// made again: CG resolves a change at k vertices in about k more iterations (on a 540-vertex
/// bar, a diagonal doubled at 1, 4 and 16 vertices took 2, 5 and 9 iterations to 1e-5), so a
/// grabbed vertex's handle does not stall the host for a new inverse.
pub const DENSE_MOVED_VERTICES: usize = 4;

/// The most free parts (translation groups) a model whose solves multiply by a dense `S^-1`
/// may have: its product reads a column's group as a byte, 0xff for none.
pub const DENSE_GROUPS: u32 = 0xff;

/// Whether a device of `limits` holds [`INVERSE_FACTORS`] dense inverses of a body of
/// `vertex_count` vertices in one binding, and the body is small enough for them, and has
/// fewer than [`DENSE_GROUPS`] free parts (`translation_groups`).
pub fn dense_fits(limits: &wgpu::Limits, vertex_count: usize, translation_groups: u32) -> bool {
    let bytes = (4 * INVERSE_FACTORS * dense_stride(vertex_count) * vertex_count) as u64;
    vertex_count <= DENSE_VERTICES
        && translation_groups < DENSE_GROUPS
        && bytes <= limits.max_storage_buffer_binding_size
        && bytes <= limits.max_buffer_size
}

/// The floats between the rows of a dense inverse on the device: the vertex count and one
/// (the row's `1 / e_g`, see `backend::projective::dense_inverse`)
/// rounded up to a multiple of four, so that the loop reads the rows a vec4 at a time.
pub fn dense_stride(vertex_count: usize) -> usize {
    (vertex_count + 1).next_multiple_of(4)
}

/// The local/global matrix `S = a L + diagonal` inverted for the GPU's solves, on the host in
/// f64 and uploaded in f32, in one of two forms:
/// - dense ([`DENSE`]), for bodies of at most [`DENSE_VERTICES`]: `S^-1` itself, row-major
///   with rows [`dense_stride`] apart. A global step then multiplies by it in one dispatch
///   where it is the step's own inverse ([`inverts`](Self::inverts)), else takes one CG
///   iteration preconditioned by it (a few where lagged damping or contacts move the matrix
///   from the one inverted): a handful of dispatches instead of two per CG iteration, the
///   loop's latency at game sizes. The backend has it made for the matrix without lagged
///   damping, which moves a little every step and would have the host invert `S` every step.
/// - FSAI ([`FSAI`]) above: the approximate inverse `G^T G` of `backend/fsai.rs`, as the
///   product `M` in the slots of its own pattern (see [`InverseSlots`]), made for the step's
///   diagonal.
///
/// The `fsai_inverse` buffer holds [`INVERSE_FACTORS`] of them, one per part; a
/// factor serves while its diagonal stays within 1 % of the one it was built for, at all
/// but [`DENSE_MOVED_VERTICES`] vertices for a dense one (an inverse of a nearby matrix
/// preconditions as well), and a new one takes the part of the factor used longest ago.
pub struct ProjectiveInverse {
    topology: Topology,
    laplacian: Vec<f64>,
    /// FSAI's pattern and its product's slots; `None` in the dense form.
    fsai: Option<(Inverse, InverseSlots)>,
    /// With FSAI, the coarse correction's space (`backend/coarse.rs`; `None` for a body too
    /// small for one): each factor comes with its `K^-1` in `coarse_inverse`.
    coarse: Option<std::sync::Arc<CoarseSpace>>,
    /// The latest first.
    factors: Vec<InverseFactor>,
    /// The translation group of every vertex (`Model::translation_groups`), whether
    /// there is any (a part no pin holds), and the largest diagonal entry of the Laplacian `L`
    /// among their vertices.
    groups: Vec<u32>,
    free: bool,
    stiffest: f64,
}

/// How much stiffer than its lightest vertex's inertia a free body's stiffest vertex may be
/// (`a L_vv / diagonal_v`) before its local/global solves split along its translations
/// (`PcgParams::translation`). The steel-stiff cubes the split is for are at 8e9, where f32
/// products by `S` lost the translation entirely; the floor benchmark's soft bar (E 1e5 Pa,
/// 5 cm cells) is at 1.6e4 (backward Euler) and 4e3 (midpoint), where split solves came out
/// worse on lavapipe: with contacts they start cold, and its landing took 77-122 CG
/// iterations a step against 37-40 and ended 1e-4 m from the CPU against 1e-6.
pub const SPLIT_STIFFNESS: f64 = 1e6;

/// A factor on the device: the step weight and the vertex diagonal it was built for, and
/// its part of the buffers.
struct InverseFactor {
    a: f64,
    diagonal: Vec<f64>,
    part: usize,
}

impl ProjectiveInverse {
    /// The inverse of `model`'s local/global matrix, dense (`dense`) or FSAI's.
    pub fn new(model: &Model, dense: bool) -> ProjectiveInverse {
        let topology = Topology::new(model);
        let laplacian = crate::backend::projective::laplacian(model, &topology);
        let fsai = (!dense).then(|| {
            let inverse = Inverse::new(&topology);
            let slots = InverseSlots::new(&inverse, &topology);
            (inverse, slots)
        });
        let (groups, count) = model.translation_groups();
        let coarse = if dense { None } else { CoarseSpace::new(model, &groups).map(std::sync::Arc::new) };
        let stiffest = (topology.diagonal.iter().zip(&groups))
            .filter(|(_, g)| **g != NO_GROUP)
            .map(|(&at, _)| laplacian[at as usize])
            .fold(0.0, f64::max);
        ProjectiveInverse {
            topology,
            laplacian,
            fsai,
            coarse,
            factors: Vec::new(),
            groups,
            free: count > 0,
            stiffest,
        }
    }

    /// [`DENSE`] or [`FSAI`].
    pub fn preconditioner(&self) -> u32 {
        if self.fsai.is_some() { FSAI } else { DENSE }
    }

    /// Makes the buffers of this form's factors unless they exist; true when it made them
    /// (the bind groups must then be made again).
    pub fn reserve(&self, context: &GpuContext, buffers: &mut GpuBuffers) -> bool {
        let made = match &self.fsai {
            Some((_, slots)) => buffers.reserve_fsai(context, slots),
            None => buffers.reserve_dense(context),
        };
        let coarse = self.coarse.as_ref().is_some_and(|space| buffers.reserve_coarse(context, space));
        made || coarse
    }

    /// The coarse correction's clusters (0: none).
    pub fn coarse_clusters(&self) -> u32 {
        self.coarse.as_ref().map_or(0, |space| space.clusters() as u32)
    }

    /// Where the latest factor's `K^-1` starts in `coarse_inverse`, in vec4s.
    pub fn coarse_offset(&self) -> usize {
        let length = self.coarse.as_ref().map_or(0, |space| space.inverse_length());
        self.factors.first().map_or(0, |f| f.part) * length / 4
    }

    /// Values per factor in `fsai_inverse`.
    pub fn part_length(&self) -> usize {
        let n = self.topology.row_offsets.len() - 1;
        self.fsai.as_ref().map_or(n * dense_stride(n), |(_, slots)| slots.slot_count())
    }

    /// Where the latest factor (the one the next solve uses) starts in `fsai_inverse`.
    pub fn offset(&self) -> usize {
        self.factors.first().map_or(0, |f| f.part) * self.part_length()
    }

    /// Whether `S = a L + diagonal`, `lightest` the least entry of the diagonal's at free
    /// vertices, is stiff enough at its step, in a part no pin holds, to split along the free
    /// parts' translations ([`SPLIT_STIFFNESS`]).
    pub fn splits(&self, a: f64, lightest: f64) -> bool {
        self.free && a * self.stiffest > SPLIT_STIFFNESS * lightest
    }

    /// Whether the latest factor is dense and made for `S = a L + diagonal` itself: then it
    /// solves with that matrix directly, where otherwise it preconditions CG.
    pub fn inverts(&self, a: f64, diagonal: &[f64]) -> bool {
        self.fsai.is_none() && self.factors.first().is_some_and(|f| f.a == a && f.diagonal == diagonal)
    }

    /// Makes the factor of `S = a L + diagonal` the latest, building it (and returning its
    /// values, to upload at [`offset`](Self::offset), and its coarse correction's `K^-1`, to
    /// upload at [`coarse_offset`](Self::coarse_offset)) when none is close enough:
    /// `M = G^T G` in slots, or `S^-1` row-major.
    pub fn for_matrix(&mut self, model: &Model, a: f64, diagonal: &[f64]) -> Option<(Vec<f32>, Vec<f32>)> {
        let moved_limit = if self.fsai.is_some() { 0 } else { DENSE_MOVED_VERTICES };
        let close = |d: &[f64]| {
            d.iter().zip(diagonal).filter(|(p, q)| (*p - *q).abs() > 0.01 * q.abs()).count() <= moved_limit
        };
        if let Some(k) = self.factors.iter().position(|f| f.a == a && close(&f.diagonal)) {
            let factor = self.factors.remove(k);
            self.factors.insert(0, factor);
            return None;
        }
        let part = if self.factors.len() < INVERSE_FACTORS {
            (0..INVERSE_FACTORS).find(|p| self.factors.iter().all(|f| f.part != *p)).expect("a free part")
        } else {
            self.factors.pop().expect("full").part
        };
        let mut matrix = Vec::new();
        let (topology, laplacian) = (&self.topology, &self.laplacian);
        crate::backend::projective::matrix(model, topology, laplacian, a, diagonal, &mut matrix);
        let upload = match &mut self.fsai {
            Some((inverse, slots)) => {
                inverse.fill(topology, &Fsai::new(topology, &matrix));
                slots.values(&inverse.values)
            }
            None => {
                let n = model.vertex_count();
                crate::backend::projective::dense_inverse(topology, &matrix, &self.groups, dense_stride(n))
            }
        };
        let coarse = self
            .coarse
            .as_ref()
            .map_or(Vec::new(), |space| CoarseCorrection::new(space.clone(), topology, &matrix).inverse());
        self.factors.insert(0, InverseFactor { a, diagonal: diagonal.to_vec(), part });
        Some((upload, coarse))
    }
}

/// `M = G^T G` as the loop reads it: its rows in the matrix's sliced layout, at the
/// matrix's positions (the `k`-th entry of the row at position `p` in slot
/// `base(p / SLICE) + SLICE k + p % SLICE`), so that a warp's rows read their `k`-th entries
/// as one contiguous run. In compressed rows, one row an
/// invocation, each of a warp's loads touched 32 sectors: an FSAI iteration at 1M tets took
/// 240 us on an H100, against Jacobi's 104.
pub struct InverseSlots {
    /// For `fsai_inverse_pattern`: the row offsets (`n + 1`), the slice bases, then each
    /// slot's column (a padding slot holds its own row).
    pub pattern: Vec<u32>,
    /// Per compressed-row entry, its slot.
    slot_of: Vec<u32>,
    slots: usize,
}

impl InverseSlots {
    /// `inverse`'s slots with its rows at the matrix's positions (`topology`'s, so that the
    /// loop's rows are the same in both).
    pub(crate) fn new(inverse: &Inverse, topology: &Topology) -> InverseSlots {
        let rows = topology.matrix_slots().rows;
        let (offsets, columns) = inverse.pattern.split_at(rows.len() + 1);
        let MatrixSlots { slice_bases, slot_columns, slot_of, .. } =
            MatrixSlots::in_order(offsets, columns, rows);
        let slots = slot_columns.len();
        let pattern = [offsets, &slice_bases, &slot_columns].concat();
        InverseSlots { pattern, slot_of, slots }
    }

    /// Slots per factor.
    pub fn slot_count(&self) -> usize {
        self.slots
    }

    /// `M`'s values (one per compressed-row entry) in slot order, zero in the padding.
    pub fn values(&self, values: &[f64]) -> Vec<f32> {
        let mut slotted = vec![0.0f32; self.slots];
        for (&slot, &value) in self.slot_of.iter().zip(values) {
            slotted[slot as usize] = value as f32;
        }
        slotted
    }
}

/// The PCG scalars as the shader keeps them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct PcgStatus {
    pub rz: f32,
    pub residual_squared: f32,
    pub threshold_squared: f32,
    /// The relative residual aimed at.
    pub tolerance: f32,
    pub iterations: u32,
    /// 0 running, 1 converged, 2 negative curvature at once, 3 negative curvature later,
    /// 4 iteration limit.
    pub state: u32,
    pub started: u32,
    pub negative: u32,
    /// The pipelined loop's last step length.
    pub alpha: f32,
}

impl PcgStatus {
    /// The solve met non-positive curvature.
    pub fn negative_curvature(&self) -> bool {
        self.state == 2 || self.state == 3
    }

    /// The solve has not stopped.
    pub fn running(&self) -> bool {
        self.state == 0
    }

    /// Iterations a running solve likely still needs: its residual has fallen at a steady
    /// rate from the start's (the threshold over the relative tolerance: |b|, which a warm
    /// start's residual is below from the outset), and goes on at that rate to the threshold.
    /// `None` before it has made progress.
    pub fn iterations_left(&self) -> Option<u32> {
        let start = self.threshold_squared / (self.tolerance * self.tolerance);
        let (now, goal) = (self.residual_squared as f64, self.threshold_squared as f64);
        let rate = (now / start as f64).ln() / self.iterations as f64;
        let left = (goal / now).ln() / rate;
        (self.iterations > 0 && rate < 0.0 && left.is_finite()).then(|| left.max(0.0).ceil() as u32)
    }
}

/// The PCG stage's pipelines.
pub struct WgPcg(pub(crate) WgStage);

/// Entries of the loop's rings of indirect dispatch arguments (`product_dispatches` in
/// `shaders/pcg.wgsl`): the iterations a solve records past its end are emptied, however many.
pub const LOOP_RING: u64 = 256;

/// The PCG stage bound to one model's buffers, by parity of the iteration: for every kernel
/// but the loop's, and for `product` and `update`, each with the ring it is dispatched from
/// bound to a placeholder.
pub struct PcgGroups {
    param: super::recording::ParamGroup,
    parity: [Bound; 2],
    product: [Bound; 2],
    update: [Bound; 2],
    /// `product` and `update` are dispatched from the rings (`GpuContext::indirect_loop`).
    indirect: bool,
    /// Invocations per row in the loop's kernels, and their workgroups.
    lanes: u32,
    workgroups: u32,
    /// The chunks the translation groups' sums take a workgroup each (`GpuBuffers`).
    translation_chunks: u32,
    /// The one-workgroup solve's shape, and its pipeline's overrides.
    small: SmallSolve,
    small_constants: [(&'static str, f64); 3],
    vertex_count: usize,
    /// The device's workgroup memory (bytes).
    workgroup_bytes: u32,
}

impl PcgGroups {
    /// Whether the model's Jacobi solves run in one workgroup where its body has at most
    /// `limit` vertices (none: as many as the shape is faster for), and the device holds them.
    pub fn solves_in_one_workgroup(&self, limit: Option<usize>) -> bool {
        self.vertex_count <= limit.unwrap_or(self.small.vertex_limit())
            && self.small.holds(self.workgroup_bytes, self.vertex_count)
    }

    /// Gives the one-workgroup solve this shape (one the device [fits](SmallSolve::fits)).
    pub fn shape_small(&mut self, small: SmallSolve) {
        self.small = small;
        self.small_constants = small.constants(self.vertex_count);
    }
}

/// A solve being recorded: the parameters, how many iterations are recorded so far, and
/// whether they are the pipelined loop's (Jacobi: one dispatch an iteration).
pub struct Solve {
    pub params: PcgParams,
    recorded: u32,
    pipelined: bool,
}

impl Solve {
    /// Iterations recorded so far.
    pub fn recorded(&self) -> u32 {
        self.recorded
    }
}

impl WgPcg {
    pub fn new(context: &GpuContext) -> Result<WgPcg> {
        Ok(WgPcg(WgStage::new(context, "pcg")?))
    }

    /// Binds the stage to a model's buffers, with the lanes [`lanes_for`] its size.
    pub fn bind(
        &self,
        context: &GpuContext,
        recording: &Recording,
        buffers: &GpuBuffers,
    ) -> Result<PcgGroups> {
        self.bind_lanes(context, recording, buffers, lanes_for(buffers.vertex_count, context.software))
    }

    /// Binds the stage with `lanes` (a power of two up to [`MAX_LANES`]) per row.
    pub fn bind_lanes(
        &self,
        context: &GpuContext,
        recording: &Recording,
        buffers: &GpuBuffers,
        lanes: u32,
    ) -> Result<PcgGroups> {
        assert!(lanes.is_power_of_two() && lanes <= MAX_LANES, "lanes {lanes}");
        // `dispatched_from`: the ring the kernel is dispatched from, if any.
        let parity = |even: bool, dispatched_from: Option<&str>| {
            self.0.bind(context, |group, name| match (group, name) {
                (3, "p_in") => buffers.scratch.get(if even { "p_even" } else { "p_odd" }),
                (3, "p_out") => buffers.scratch.get(if even { "p_odd" } else { "p_even" }),
                (3, "scalars_in") => buffers.scratch.get(if even { "scalars_even" } else { "scalars_odd" }),
                (3, "scalars_out") => buffers.scratch.get(if even { "scalars_odd" } else { "scalars_even" }),
                (3, ring) if Some(ring) == dispatched_from => buffers.scratch.get("placeholder"),
                _ => buffers.resolve(group, name),
            })
        };
        let (product, update) = (Some("product_dispatches"), Some("update_dispatches"));
        let mut groups = PcgGroups {
            param: recording.param_group(context, &self.0),
            parity: [parity(true, None)?, parity(false, None)?],
            product: [parity(true, product)?, parity(false, product)?],
            update: [parity(true, update)?, parity(false, update)?],
            indirect: context.indirect_loop,
            lanes,
            workgroups: (buffers.vertex_count as u32 * lanes).div_ceil(super::stage::WORKGROUP),
            translation_chunks: buffers.translation_chunks,
            small: SmallSolve { invocations: super::stage::WORKGROUP, lanes: 1, software: context.software },
            small_constants: [("INVOCATIONS", 0.0); 3],
            vertex_count: buffers.vertex_count,
            workgroup_bytes: context.device.limits().max_compute_workgroup_storage_size,
        };
        groups.shape_small(SmallSolve::for_body(context, buffers.vertex_count));
        Ok(groups)
    }

    /// Records the start of a solve of `blocks direction = rhs`, iterated, with Jacobi, as
    /// `jacobi_loop` says.
    pub fn start(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        groups: &PcgGroups,
        params: PcgParams,
        jacobi_loop: JacobiLoop,
    ) -> Result<Solve> {
        let pipelined = params.preconditioner == JACOBI && jacobi_loop == JacobiLoop::Pipelined;
        // (Budgets, its only users, fix their tolerance: no forcing term to floor on the device.)
        debug_assert!(
            !pipelined || params.forcing == 0,
            "the pipelined loop's floor needs a fixed tolerance"
        );
        let tolerance = if pipelined { params.tolerance.max(PIPELINED_FLOOR) } else { params.tolerance };
        let params = PcgParams { lanes: groups.lanes, tolerance, ..params };
        let offset = recording.params(context, &params)?;
        let bound = &groups.parity[0];
        if params.translation != 0 {
            let vertices = params.vertex_count.div_ceil(super::stage::WORKGROUP);
            let split = [
                ("translation_sums", groups.translation_chunks),
                ("translation_solve", params.translation_groups),
                ("deflate", vertices),
            ];
            for (entry, grid) in split {
                recording.dispatch(context, self.0.kernel(entry), &groups.param, offset, bound, grid);
            }
        }
        if params.warm != 0 {
            let kernel = self.0.kernel("warm_product");
            recording.dispatch(context, kernel, &groups.param, offset, bound, groups.workgroups);
        }
        // S^-1's setup has an entry point of its own (see `setup_dense` in the shader),
        // profiled as the setup.
        let setup = match params.preconditioner {
            DENSE => Kernel { label: "setup", ..self.0.kernel("setup_dense") },
            _ => self.0.kernel("setup"),
        };
        // A coarse correction's clusters take a workgroup each past the loop's.
        let grid = groups.workgroups + params.coarse_clusters;
        recording.dispatch(context, setup, &groups.param, offset, bound, grid);
        if params.coarse_clusters > 0 {
            // The correction of setup's z (its workgroups past the loop's restricted r).
            let kernel = self.0.kernel("coarse_prolong");
            recording.dispatch(context, kernel, &groups.param, offset, bound, params.coarse_clusters);
        }
        if pipelined {
            // Bound with the odd parity: its m is the first iteration's `p_in`.
            let odd = &groups.parity[1];
            let kernel = self.0.kernel("pipeline_start");
            recording.dispatch(context, kernel, &groups.param, offset, odd, groups.workgroups);
        }
        Ok(Solve { params, recorded: 0, pipelined })
    }

    /// Records a solve by the dense inverse itself, in one dispatch (`solve_dense`), for a
    /// matrix it inverts exactly (see [`ProjectiveInverse::inverts`]); returns where its
    /// status will be.
    pub fn solve_dense(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        groups: &PcgGroups,
        buffers: &GpuBuffers,
        params: PcgParams,
    ) -> Result<Staged> {
        debug_assert_eq!(params.preconditioner, DENSE, "a direct solve needs the dense inverse");
        debug_assert_eq!(params.warm, 0, "a direct solve starts from nothing");
        let params = PcgParams { lanes: groups.lanes, ..params };
        let kernel = self.0.kernel("solve_dense");
        Self::solve_in_a_dispatch(context, recording, groups, buffers, params, kernel, groups.workgroups)
    }

    /// Records `untranslate`: the translation the split solve of `params` added to its
    /// direction taken back out (see the shader).
    pub fn untranslate(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        groups: &PcgGroups,
        params: PcgParams,
    ) -> Result<()> {
        debug_assert_ne!(params.translation, 0, "only a split solve has a translation");
        let offset = recording.params(context, &params)?;
        let grid = params.vertex_count.div_ceil(super::stage::WORKGROUP);
        recording.dispatch(
            context,
            self.0.kernel("untranslate"),
            &groups.param,
            offset,
            &groups.parity[0],
            grid,
        );
        Ok(())
    }

    /// Records a whole solve in one dispatch of one workgroup (`solve_small`), for bodies of
    /// which [`PcgGroups::solves_in_one_workgroup`]; returns where its status will be.
    pub fn solve_small(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        groups: &PcgGroups,
        buffers: &GpuBuffers,
        params: PcgParams,
    ) -> Result<Staged> {
        debug_assert_eq!(params.preconditioner, JACOBI, "the one-workgroup solve takes Jacobi only");
        debug_assert!(groups.small.holds(groups.workgroup_bytes, groups.vertex_count), "{:?}", groups.small);
        let params = PcgParams { lanes: groups.small.lanes, ..params };
        let kernel = Kernel { constants: &groups.small_constants, ..self.0.kernel("solve_small") };
        Self::solve_in_a_dispatch(context, recording, groups, buffers, params, kernel, 1)
    }

    /// Records a solve that `kernel` makes in one dispatch of `workgroups`, its status left in
    /// `scalars_odd`; returns where the status will be.
    fn solve_in_a_dispatch(
        context: &GpuContext,
        recording: &mut Recording,
        groups: &PcgGroups,
        buffers: &GpuBuffers,
        params: PcgParams,
        kernel: Kernel<'_>,
        workgroups: u32,
    ) -> Result<Staged> {
        let offset = recording.params(context, &params)?;
        let bound = &groups.parity[0];
        recording.dispatch(context, kernel, &groups.param, offset, bound, workgroups);
        recording.stage(
            context,
            buffers.scratch.named("scalars_odd"),
            std::mem::size_of::<PcgStatus>() as u64,
        )
    }

    /// Records `iterations` more iterations (each does nothing once the solve has stopped)
    /// and the `finish` that settles the status; returns where the status will be.
    pub fn iterate(
        &self,
        context: &GpuContext,
        recording: &mut Recording,
        groups: &PcgGroups,
        buffers: &GpuBuffers,
        solve: &mut Solve,
        iterations: u32,
    ) -> Result<Staged> {
        // The first iteration starts the solve, so it is recorded even when none is asked for.
        let iterations = if solve.recorded == 0 { iterations.max(1) } else { iterations };
        let params = PcgParams { recorded_to: solve.recorded + iterations, ..solve.params };
        let mut offset = recording.params(context, &params)?;
        // So has its update, profiled as the update.
        let update = match params.preconditioner {
            DENSE => Kernel { label: "update", ..self.0.kernel("update_dense") },
            _ => self.0.kernel("update"),
        };
        for _ in 0..iterations {
            if recording.submit_part(context) {
                // The parameters went with the iterations submitted.
                offset = recording.params(context, &params)?;
            }
            let parity = (solve.recorded % 2) as usize;
            if solve.pipelined {
                let bound = &groups.parity[parity];
                let kernel = self.0.kernel("pipelined");
                recording.dispatch(context, kernel, &groups.param, offset, bound, groups.workgroups);
            } else {
                let entry = 12 * (solve.recorded as u64 % LOOP_RING);
                // The first product starts from setup's sums (profiled as a product).
                let product = if solve.recorded == 0 {
                    Kernel { label: "product", ..self.0.kernel("first_product") }
                } else {
                    self.0.kernel("product")
                };
                for (kernel, bound, ring) in [
                    (product, &groups.product[parity], "product_dispatches"),
                    (update, &groups.update[parity], "update_dispatches"),
                ] {
                    let grid = if groups.indirect {
                        Grid::Indirect(buffers.scratch.named(ring), entry)
                    } else {
                        Grid::Workgroups(groups.workgroups + params.coarse_clusters)
                    };
                    recording.dispatch_over(context, kernel, &groups.param, offset, bound, grid);
                }
                if params.coarse_clusters > 0 {
                    // From the update's ring: an iteration after the solve's end dispatches
                    // none of its workgroups either.
                    let grid = if groups.indirect {
                        Grid::Indirect(buffers.scratch.named("update_dispatches"), entry)
                    } else {
                        Grid::Workgroups(params.coarse_clusters)
                    };
                    let (kernel, bound) = (self.0.kernel("coarse_prolong"), &groups.parity[parity]);
                    recording.dispatch_over(context, kernel, &groups.param, offset, bound, grid);
                }
            }
            solve.recorded += 1;
        }
        if params.translation != 0 {
            // The stray translation of the direction, which `finish` takes out (see the shader).
            let split =
                [("stray_sums", groups.translation_chunks), ("stray_solve", params.translation_groups)];
            for (entry, grid) in split {
                recording.dispatch(
                    context,
                    self.0.kernel(entry),
                    &groups.param,
                    offset,
                    &groups.parity[0],
                    grid,
                );
            }
        }
        let even = solve.recorded.is_multiple_of(2);
        let bound = &groups.parity[(!even) as usize];
        recording.dispatch(
            context,
            self.0.kernel(if solve.pipelined { "finish_pipelined" } else { "finish" }),
            &groups.param,
            offset,
            bound,
            groups.workgroups,
        );
        // `finish` writes the scalars the next iteration would write.
        let status = buffers.scratch.named(if even { "scalars_odd" } else { "scalars_even" });
        recording.stage(context, status, std::mem::size_of::<PcgStatus>() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::{JacobiLoop, PcgParams, PcgStatus, SmallSolve};
    use crate::backend::gpu::test_support::{H, Rig, context, linear_model, random_state, reference, to_f32};
    use crate::material::{Material, Projection};

    /// A scalar matrix's entries as 3x3 blocks (`S (x) I_3`, the local/global form).
    fn scalar_blocks(s: &[f64]) -> Vec<[f64; 9]> {
        s.iter().map(|&v| [v, 0.0, 0.0, 0.0, v, 0.0, 0.0, 0.0, v]).collect()
    }

    /// f32 values read back as f64 vectors.
    fn to_vectors(values: &[f32]) -> Vec<[f64; 3]> {
        values.chunks(3).map(|c| [c[0] as f64, c[1] as f64, c[2] as f64]).collect()
    }

    /// A random right-hand side, zero at the pinned vertices.
    fn random_rhs(model: &crate::model::Model, seed: u64) -> Vec<[f64; 3]> {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        (0..model.vertex_count())
            .map(|v| {
                if model.pinned[v] { [0.0; 3] } else { std::array::from_fn(|_| rng.random_range(-1.0..1.0)) }
            })
            .collect()
    }

    /// A StVK model's projected Hessian at a random state (`seed`) and the right-hand side
    /// `-gradient` in f32: a system for the loop.
    fn linear_system(
        seed: u64,
    ) -> (std::sync::Arc<crate::model::Model>, crate::backend::gpu::test_support::Reference, Vec<f32>) {
        let model = linear_model(Material::stvk(2e4, 0.3));
        let (x, start) = random_state(&model, seed);
        let cpu = reference(&model, &x, &start, Projection::Psd);
        let b = to_f32(cpu.gradient.iter().flat_map(|g| g.map(|c| -c)).collect::<Vec<_>>().as_slice());
        (model, cpu, b)
    }

    /// A solve to a fixed relative residual.
    fn fixed_tolerance(rig: &Rig, tolerance: f64, max_iterations: u32) -> PcgParams {
        PcgParams {
            vertex_count: rig.buffers.vertex_count as u32,
            partial_count: rig.buffers.vertex_workgroups(),
            max_iterations,
            tolerance: tolerance as f32,
            forcing: 0,
            gradient_tolerance: 0.0,
            translation_groups: rig.buffers.translation_groups,
            ..PcgParams::default()
        }
    }

    /// Runs the stage's loop on the uploaded matrix and right-hand side with `lanes` per row,
    /// reading its status every 64 iterations.
    fn solve(rig: &mut Rig, tolerance: f64, max_iterations: u32, lanes: u32) -> PcgStatus {
        solve_with(rig, fixed_tolerance(rig, tolerance, max_iterations), lanes)
    }

    fn solve_with(rig: &mut Rig, params: PcgParams, lanes: u32) -> PcgStatus {
        solve_looped(rig, params, lanes, JacobiLoop::Cg)
    }

    fn solve_looped(rig: &mut Rig, params: PcgParams, lanes: u32, jacobi_loop: JacobiLoop) -> PcgStatus {
        let groups = rig.stages.pcg.bind_lanes(&rig.context, &rig.rec, &rig.buffers, lanes).unwrap();
        let mut solve =
            rig.stages.pcg.start(&rig.context, &mut rig.rec, &groups, params, jacobi_loop).unwrap();
        loop {
            let staged = rig
                .stages
                .pcg
                .iterate(&rig.context, &mut rig.rec, &groups, &rig.buffers, &mut solve, 64)
                .unwrap();
            let status: PcgStatus =
                bytemuck::pod_read_unaligned(&rig.rec.read(&rig.context, &[staged]).unwrap()[0]);
            if !status.running() {
                return status;
            }
        }
    }

    /// Runs the stage's loop on `groups`, recording `chunk` iterations before each read of
    /// its status.
    fn solve_in_chunks(rig: &mut Rig, groups: &super::PcgGroups, params: PcgParams, chunk: u32) -> PcgStatus {
        let mut solve =
            rig.stages.pcg.start(&rig.context, &mut rig.rec, groups, params, JacobiLoop::Cg).unwrap();
        loop {
            let staged = rig
                .stages
                .pcg
                .iterate(&rig.context, &mut rig.rec, groups, &rig.buffers, &mut solve, chunk)
                .unwrap();
            let status: PcgStatus =
                bytemuck::pod_read_unaligned(&rig.rec.read(&rig.context, &[staged]).unwrap()[0]);
            if !status.running() {
                return status;
            }
        }
    }

    /// Runs the whole solve in one workgroup of the given shape.
    fn solve_small(rig: &mut Rig, tolerance: f64, max_iterations: u32, shape: SmallSolve) -> PcgStatus {
        solve_small_with(rig, fixed_tolerance(rig, tolerance, max_iterations), shape)
    }

    fn solve_small_with(rig: &mut Rig, params: PcgParams, shape: SmallSolve) -> PcgStatus {
        let mut groups = rig.stages.pcg.bind(&rig.context, &rig.rec, &rig.buffers).unwrap();
        groups.shape_small(shape);
        let staged =
            rig.stages.pcg.solve_small(&rig.context, &mut rig.rec, &groups, &rig.buffers, params).unwrap();
        bytemuck::pod_read_unaligned(&rig.rec.read(&rig.context, &[staged]).unwrap()[0])
    }

    /// The one-workgroup solve's shapes the tests run, those the device fits of: the stages'
    /// workgroup with one lane per row, and with sixteen (16 rows a sweep: the tests' 39-vertex
    /// bodies take three sweeps), and 1 024 invocations with one, two and eight lanes per row.
    fn small_shapes(context: &crate::backend::gpu::GpuContext) -> Vec<SmallSolve> {
        [(256, 1), (256, 16), (1024, 1), (1024, 2), (1024, 8)]
            .into_iter()
            .map(|(invocations, lanes)| SmallSolve { invocations, lanes, software: context.software })
            .filter(|shape| shape.fits(context))
            .collect()
    }

    /// A warm start from the last solutions, as local/global's later global steps take it, in
    /// the loop with one and four lanes a row: from a multiple of the solution (0.9 of it) the
    /// Galerkin multiple is the solution, met within a couple of iterations (16 from zero);
    /// from a direction near it (0.9 of it plus 0.001 of another system's solution y) the same
    /// true residual takes fewer iterations than from zero; from two directions whose span
    /// holds the solution (0.9 x + 0.5 y, and y) the combination is the solution, where the
    /// first alone is not; from an unrelated direction and from zero (whose multiple is 0) it
    /// is still met. A warm solve keeps its last solution as the earlier one.
    #[test]
    fn a_warm_start_needs_fewer_iterations() {
        use rand::{RngExt, SeedableRng};

        use super::FSAI;
        use crate::backend::cpu::hessian_product;
        use crate::backend::fsai::Fsai;
        let Some(context) = context() else { return };
        let (model, topology, s) = crate::backend::fsai::tests::projective_matrix([12, 4, 3], 1.0);
        let model = std::sync::Arc::new(model);
        let n = model.vertex_count();
        let fsai = Fsai::new(&topology, &s);
        let mut inverse = crate::backend::fsai::Inverse::new(&topology);
        inverse.fill(&topology, &fsai);
        let inverse_slots = super::InverseSlots::new(&inverse, &topology);
        let mut rig = Rig::new(&context, &model);
        assert!(rig.buffers.reserve_fsai(&rig.context, &inverse_slots));
        rig.upload(3, "fsai_inverse", &inverse_slots.values(&inverse.values));
        rig.upload(3, "contact_flags", &vec![0u32; n]);
        let blocks = scalar_blocks(&s);
        let block_slots = rig.buffers.blocks_to_slots(&to_f32(blocks.as_flattened()));
        rig.upload(3, "blocks", &block_slots);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let mut random = |scale: f64| -> Vec<f64> {
            (0..3 * n)
                .map(|i| if model.pinned[i / 3] { 0.0 } else { scale * rng.random_range(-1.0..1.0) })
                .collect()
        };
        let (b, other) = (random(1.0), random(1.0));
        let relative_residual = |x: &[f32]| {
            let x = to_vectors(x);
            let mut product = vec![[0.0; 3]; n];
            hessian_product::apply(&topology, &blocks, &x, &mut product);
            let norm = |v: &mut dyn Iterator<Item = f64>| v.map(|c| c * c).sum::<f64>().sqrt();
            norm(&mut product.as_flattened().iter().zip(&b).map(|(a, b)| b - a))
                / norm(&mut b.iter().copied())
        };
        let tolerance = 1e-4;
        let params = PcgParams { preconditioner: FSAI, ..fixed_tolerance(&rig, tolerance, 1000) };
        let unrelated = random(1e-2);
        let run = |rig: &mut Rig, starts: &[&[f64]], lanes: u32| {
            for (name, start) in ["direction", "earlier_direction"].iter().zip(starts) {
                rig.upload(3, name, &to_f32(start));
            }
            let params = PcgParams { warm: starts.len() as u32, ..params };
            let status = solve_with(rig, params, lanes);
            (status, rig.read(3, "direction", 3 * n))
        };
        for lanes in [1, 4] {
            rig.upload(3, "rhs", &to_f32(&other));
            let (_, other_solution) = run(&mut rig, &[], lanes);
            rig.upload(3, "rhs", &to_f32(&b));
            let (cold, solution) = run(&mut rig, &[], lanes);
            let multiple: Vec<f64> = solution.iter().map(|&x| 0.9 * x as f64).collect();
            let near: Vec<f64> =
                multiple.iter().zip(&other_solution).map(|(&x, &y)| x + 0.001 * y as f64).collect();
            let zero = vec![0.0; 3 * n];
            let (exact, _) = run(&mut rig, &[&multiple], lanes);
            let (warm, x) = run(&mut rig, &[&near], lanes);
            let other_solution: Vec<f64> = other_solution.iter().map(|&y| y as f64).collect();
            let mixed: Vec<f64> = multiple.iter().zip(&other_solution).map(|(x, y)| x + 0.5 * y).collect();
            let (first_alone, _) = run(&mut rig, &[&mixed], lanes);
            let (both, both_x) = run(&mut rig, &[&mixed, &other_solution], lanes);
            assert_eq!(rig.read(3, "earlier_direction", 3 * n), to_f32(&mixed), "{lanes} lanes");
            println!(
                "{lanes} lanes: from zero {} iterations, from 0.9 x {}, from near it {} (true relative residual \
                 {:.2e}); from 0.9 x + 0.5 y {}, and with y {}",
                cold.iterations,
                exact.iterations,
                warm.iterations,
                relative_residual(&x),
                first_alone.iterations,
                both.iterations
            );
            let states = [cold.state, exact.state, warm.state, first_alone.state, both.state];
            assert_eq!(states, [1; 5], "{lanes} lanes: {cold:?} {warm:?}");
            assert!(
                cold.iterations >= 10 && exact.iterations <= 3,
                "{lanes} lanes: {exact:?} against {cold:?}"
            );
            assert!(warm.iterations < cold.iterations, "{lanes} lanes: {warm:?} against {cold:?}");
            assert!(
                both.iterations <= 3 && first_alone.iterations > 3,
                "{lanes} lanes: {both:?} {first_alone:?}"
            );
            assert!(relative_residual(&x) < 3.0 * tolerance, "{lanes} lanes");
            assert!(relative_residual(&both_x) < 3.0 * tolerance, "{lanes} lanes");
            for start in [&unrelated, &zero] {
                let (status, x) = run(&mut rig, &[start], lanes);
                assert_eq!(status.state, 1, "{lanes} lanes: {status:?}");
                assert!(relative_residual(&x) < 3.0 * tolerance, "{lanes} lanes");
            }
        }
    }

    /// The loop preconditioned by the dense `S^-1` solves a local/global matrix (random
    /// right-hand sides; a pinned bar, then the same with two free bars, whose translations
    /// `S^-1` adds each from its own group's sum) in at most two CG iterations to a relative
    /// residual of 1e-5, f32's reach for the inverse, where FSAI takes dozens; the direct
    /// solve, by `S^-1` alone, to the same residual in its one dispatch. With penalty contacts
    /// on some free vertices of the pinned bar (their stiffness on the diagonal, their rows on
    /// Jacobi; both inverses are of the matrix without it), it still meets the tolerance, in
    /// fewer iterations than FSAI. (Not so on free bars, whose contacts hold the translation
    /// `S^-1` keeps soft: 19 against FSAI's 17 at 10 % of the vertices.) The true residual,
    /// formed in f64, is at the tolerance in every case.
    #[test]
    fn the_dense_inverse_solves_in_an_iteration() {
        let Some(context) = context() else { return };
        dense_inverse_solves(&context, 0, &[false, true]);
        dense_inverse_solves(&context, 2, &[false]);
    }

    /// [`the_dense_inverse_solves_in_an_iteration`] on a pinned bar and `free_bars` free ones,
    /// with and (`contacts`) without penalty contacts.
    fn dense_inverse_solves(
        context: &std::sync::Arc<super::GpuContext>,
        free_bars: usize,
        contacts: &[bool],
    ) {
        use rand::{RngExt, SeedableRng};

        use super::{DENSE, FSAI};
        use crate::backend::cpu::hessian_product;
        use crate::backend::fsai::Fsai;
        let (model, topology, s) =
            crate::backend::fsai::tests::projective_matrix_of_bars([12, 4, 2], free_bars, 1.0);
        let model = std::sync::Arc::new(model);
        let n = model.vertex_count();
        let (groups, count) = model.translation_groups();
        assert_eq!(count as usize, free_bars);
        let dense = crate::backend::projective::dense_inverse(&topology, &s, &groups, super::dense_stride(n));
        let fsai = Fsai::new(&topology, &s);
        let mut inverse = crate::backend::fsai::Inverse::new(&topology);
        inverse.fill(&topology, &fsai);
        let inverse_slots = super::InverseSlots::new(&inverse, &topology);
        let mut rig = Rig::new(context, &model);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(17);
        let free: Vec<usize> = (0..n).filter(|&v| !model.pinned[v]).collect();
        let contact: Vec<bool> =
            (0..n).map(|v| !model.pinned[v] && rng.random_range(0.0..1.0) < 0.1).collect();
        let tolerance = 1e-5;
        for &with_contact in contacts {
            let flags: Vec<u32> = contact.iter().map(|&c| u32::from(c && with_contact)).collect();
            // The penalty adds 1e4 times a free vertex's diagonal.
            let mut blocks = scalar_blocks(&s);
            for v in (0..n).filter(|&v| flags[v] != 0) {
                let k = 1e4 * s[topology.diagonal[v] as usize];
                for c in [0, 4, 8] {
                    blocks[topology.diagonal[v] as usize][c] += k;
                }
            }
            let block_slots = rig.buffers.blocks_to_slots(&to_f32(blocks.as_flattened()));
            rig.upload(3, "blocks", &block_slots);
            rig.upload(3, "contact_flags", &flags);
            for seed in 0..3u64 {
                let b = random_rhs(&model, seed);
                rig.upload(3, "rhs", &to_f32(b.as_flattened()));
                // The direct solve takes a free part's translation from b's vertex terms,
                // whose sum over the part is b's (the elements' forces sum to zero): this b is
                // all vertex terms.
                if free_bars > 0 {
                    rig.upload(3, "vertex_rhs", &to_f32(b.as_flattened()));
                }
                let mut iterations = Vec::new();
                // The loop with each inverse, and (free, where S^-1 is the matrix's own) the
                // direct solve by S^-1.
                let forms: &[&str] =
                    if with_contact { &["dense", "FSAI"] } else { &["dense", "FSAI", "direct"] };
                for &form in forms {
                    let preconditioner = if form == "FSAI" { FSAI } else { DENSE };
                    if preconditioner == FSAI {
                        rig.buffers.reserve_fsai(&rig.context, &inverse_slots);
                        rig.upload(3, "fsai_inverse", &inverse_slots.values(&inverse.values));
                    } else {
                        rig.buffers.reserve_dense(&rig.context);
                        rig.upload(3, "fsai_inverse", &dense);
                    }
                    let params = PcgParams { preconditioner, ..fixed_tolerance(&rig, tolerance, 1000) };
                    let status = if form == "direct" {
                        let groups =
                            rig.stages.pcg.bind_lanes(&rig.context, &rig.rec, &rig.buffers, 4).unwrap();
                        let staged = rig.stages.pcg.solve_dense(
                            &rig.context,
                            &mut rig.rec,
                            &groups,
                            &rig.buffers,
                            params,
                        );
                        bytemuck::pod_read_unaligned(
                            &rig.rec.read(&rig.context, &[staged.unwrap()]).unwrap()[0],
                        )
                    } else {
                        solve_with(&mut rig, params, 4)
                    };
                    assert_eq!(status.state, 1, "{form} {with_contact}: {status:?}");
                    let x = to_vectors(&rig.read(3, "direction", 3 * n));
                    let mut product = vec![[0.0; 3]; n];
                    hessian_product::apply(&topology, &blocks, &x, &mut product);
                    let norm = |v: &mut dyn Iterator<Item = f64>| v.map(|c| c * c).sum::<f64>().sqrt();
                    let residual = norm(
                        &mut free
                            .iter()
                            .flat_map(|&v| (0..3).map(move |c| (v, c)))
                            .map(|(v, c)| b[v][c] - product[v][c]),
                    ) / norm(&mut b.as_flattened().iter().copied());
                    println!(
                        "{} contact {with_contact}, seed {seed}: {} CG iterations, true relative residual {residual:.2e}",
                        form, status.iterations
                    );
                    assert!(residual < 3.0 * tolerance, "{form} {with_contact}: {residual:e}");
                    iterations.push(status.iterations);
                }
                if with_contact {
                    assert!(iterations[0] < iterations[1], "{iterations:?}");
                } else {
                    assert!(iterations[0] <= 2 && iterations[1] > 10 && iterations[2] == 1, "{iterations:?}");
                }
            }
        }
    }

    /// The device keeps the last two factors, in either form: a stabilized step's two step
    /// weights upload theirs once, not every step; a third weight takes the part of the one
    /// used longest ago, and a diagonal that moves by more than 1 % makes a new factor.
    #[test]
    fn inverse_factors_stay_on_the_device() {
        let (model, _, _) = crate::backend::fsai::tests::projective_matrix([6, 3, 2], 1.0);
        for dense in [false, true] {
            let mut factors = super::ProjectiveInverse::new(&model, dense);
            assert_eq!(factors.preconditioner(), if dense { super::DENSE } else { super::FSAI });
            let diagonal: Vec<f64> = model.masses.iter().map(|m| 900.0 * m).collect();
            let moved: Vec<f64> = diagonal.iter().map(|d| 1.02 * d).collect();
            let place = |factors: &mut super::ProjectiveInverse, a: f64, d: &[f64]| {
                let upload = factors.for_matrix(&model, a, d);
                (factors.offset() / factors.part_length(), upload.is_some())
            };
            let (midpoint, backward) = (0.25, 1.0);
            let parts: Vec<(usize, bool)> = [midpoint, backward, midpoint, backward, midpoint, backward]
                .iter()
                .map(|&a| place(&mut factors, a, &diagonal))
                .collect();
            assert_eq!(parts, [(0, true), (1, true), (0, false), (1, false), (0, false), (1, false)]);
            // The midpoint's factor was used longest ago.
            assert_eq!(place(&mut factors, 0.5, &diagonal), (0, true));
            assert_eq!(place(&mut factors, backward, &diagonal), (1, false));
            assert_eq!(place(&mut factors, midpoint, &diagonal), (0, true));
            assert_eq!(place(&mut factors, midpoint, &moved), (1, true));
            assert_eq!(place(&mut factors, midpoint, &moved), (1, false));
            // A few vertices' handles keep a dense inverse; one more makes a new one.
            let mut grabbed = moved.clone();
            for d in &mut grabbed[..super::DENSE_MOVED_VERTICES] {
                *d *= 2.0;
            }
            // (FSAI's takes the part used longest ago, then the other.)
            let expected = if dense { [(1, false), (0, true)] } else { [(0, true), (1, true)] };
            assert_eq!(place(&mut factors, midpoint, &grabbed), expected[0]);
            // Only a dense factor of the very matrix solves with it directly.
            assert_eq!(factors.inverts(midpoint, &moved), dense);
            assert!(!factors.inverts(midpoint, &grabbed));
            grabbed[super::DENSE_MOVED_VERTICES] *= 2.0;
            assert_eq!(place(&mut factors, midpoint, &grabbed), expected[1]);
            assert_eq!(factors.inverts(midpoint, &grabbed), dense);
            assert!(!factors.inverts(backward, &grabbed));
            // A dense part is n^2 values long, as its upload.
            let n = model.vertex_count();
            let per_part = if dense {
                super::dense_stride(n) * n
            } else {
                factors.fsai.as_ref().unwrap().1.slot_count()
            };
            assert_eq!(factors.part_length(), per_part);
            assert_eq!(factors.for_matrix(&model, 0.75, &diagonal).map(|(v, _)| v.len()), Some(per_part));
        }
    }

    /// The loop's read-write buffers are ranges of one arena (`GpuBuffers::pack`): each kernel
    /// of a CG iteration binds at most three buffers for writing (the arena, the `p` it
    /// writes, a dispatch ring), which wgpu tracks and barriers at every dispatch; each bound
    /// 6-15 before. A stage that would bind the arena both for reading only and for writing
    /// is refused, naming the two.
    #[test]
    fn the_loops_kernels_bind_the_arena_and_few_other_writable_buffers() {
        let Some(context) = context() else { return };
        let model = linear_model(Material::stable_neo_hookean(2e4, 0.4));
        let rig = Rig::new(&context, &model);
        let arena = &rig.buffers.scratch.named("r").buffer;
        for name in ["z", "ap", "rhs", "direction", "scalars_even", "scalars_odd"] {
            assert!(rig.buffers.scratch.named(name).buffer == *arena, "{name} is not in the arena");
        }
        assert!(rig.buffers.scratch.named("p_even").buffer != *arena);
        let groups = rig.stages.pcg.bind(&rig.context, &rig.rec, &rig.buffers).unwrap();
        let loop_kernels = ["first_product", "product", "update", "update_dense", "coarse_prolong", "finish"];
        for bound in groups.parity.iter().chain(&groups.product).chain(&groups.update) {
            for entry in loop_kernels {
                let (_, writable) = bound.groups_for(entry);
                assert!(writable <= 3, "{entry} binds {writable} buffers for writing");
            }
        }
        let refused = rig.stages.gather.bind_corners(&rig.context, &rig.rec, &rig.buffers, "rhs");
        let message = refused.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("read-only") && message.contains("corner_gradients"), "{message}");
    }

    /// Lanes fill about 2^17 invocations on hardware: 16 for small bodies, fewer as they grow,
    /// one for a million tets and on a software adapter.
    #[test]
    fn lanes_shrink_as_bodies_grow() {
        use super::lanes_for;
        let chosen: Vec<u32> = [375, 3_718, 8_192, 8_193, 22_386, 35_937, 65_536, 65_537, 211_191]
            .iter()
            .map(|&n| lanes_for(n, false))
            .collect();
        assert_eq!(chosen, [16, 16, 16, 8, 4, 2, 2, 1, 1]);
        assert_eq!(lanes_for(3_718, true), 1);
        assert_eq!(lanes_for(0, false), 16);
    }

    /// A one-workgroup solve takes a body whose sweeps keep their rows in registers (at most
    /// eight) and whose `p` fits in workgroup memory beside the reduction; the shapes the
    /// backend chooses hold the bodies they are chosen for.
    #[test]
    fn one_workgroup_solves_hold_what_the_device_allows() {
        let software = SmallSolve { invocations: 256, lanes: 1, software: true };
        // lavapipe's 32 KiB: 2 048 vertices take 8 sweeps and 4 096 + 16 + 24 576 bytes.
        assert_eq!(software.sweeps(2048), 8);
        assert!(software.holds(32_768, 2048));
        assert!(!software.holds(32_768, 2049), "nine sweeps");
        assert!(!software.holds(16_384, 2048), "WebGPU's least workgroup memory");
        assert!(software.holds(16_384, 768) && !software.holds(16_384, 769), "three sweeps, not four");
        assert_eq!(software.vertex_limit(), 2048);
        for n in [1, 63, 64, 330, 513, 768] {
            let lanes = super::lanes_filling(1024, n, false);
            let wide = SmallSolve { invocations: 1024, lanes, software: false };
            assert_eq!(wide.sweeps(n), 1, "{n} vertices, {lanes} lanes");
            assert!(wide.holds(49_152, n) && n <= wide.vertex_limit(), "{n} vertices");
        }
    }

    /// The one-workgroup solve runs the same algorithm as the two-dispatch loop, whatever the
    /// loop's lanes per row: on the same system, the same iteration count (to a couple, from
    /// the other summation order in f32) and solution, the same limit, and negative curvature
    /// caught.
    #[test]
    fn one_workgroup_pcg_follows_the_loop() {
        let Some(context) = context() else { return };
        let (model, cpu, b) = linear_system(13);
        let mut rig = Rig::new(&context, &model);
        let slots = rig.buffers.blocks_to_slots(&to_f32(cpu.blocks.as_flattened()));
        rig.upload(3, "blocks", &slots);
        rig.upload(3, "rhs", &b);
        let n = 3 * model.vertex_count();
        let shapes = small_shapes(&context);
        // lavapipe and the NVIDIA GPUs measured allow 1 024 invocations.
        assert_eq!(shapes.len(), 5, "the test device runs only {shapes:?}");
        assert_eq!(shapes[1].sweeps(model.vertex_count()), 3, "{:?}", shapes[1]);
        let mut wholes = Vec::new();
        for &shape in &shapes {
            let whole = solve_small(&mut rig, 1e-4, 2000, shape);
            wholes.push((shape, whole, rig.read(3, "direction", n)));
        }
        for lanes in [1, 4, 16] {
            let looped = solve(&mut rig, 1e-4, 2000, lanes);
            let looped_x = rig.read(3, "direction", n);
            for (shape, whole, whole_x) in &wholes {
                println!(
                    "PCG in one workgroup {shape:?}: {} iterations, the loop with {lanes} lanes {}",
                    whole.iterations, looped.iterations
                );
                assert_eq!((whole.state, looped.state), (1, 1), "{shape:?}: {whole:?} {looped:?}");
                assert!(whole.iterations.abs_diff(looped.iterations) <= 2, "{shape:?}: {whole:?} {looped:?}");
                let scale = looped_x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
                let worst = whole_x.iter().zip(&looped_x).fold(0.0f32, |a, (p, q)| a.max((p - q).abs()));
                assert!(worst <= 1e-3 * scale, "{shape:?}: solutions differ by {worst} of {scale}");
            }
        }
        let negative: Vec<[f64; 9]> =
            cpu.blocks.iter().map(|_| [-1.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, -1.0]).collect();
        let negative = rig.buffers.blocks_to_slots(&to_f32(negative.as_flattened()));
        for &shape in &shapes {
            let limited = solve_small(&mut rig, 1e-12, 5, shape);
            assert_eq!((limited.state, limited.iterations), (4, 5), "{shape:?}: {limited:?}");
        }
        // Negative curvature: the identity's negative.
        rig.upload(3, "blocks", &negative);
        for &shape in &shapes {
            rig.upload(3, "direction", &vec![0.0f32; n]);
            let status = solve_small(&mut rig, 1e-4, 100, shape);
            assert_eq!(status.state, 2, "{shape:?}: {status:?}");
            assert_eq!(rig.read(3, "direction", n), b, "{shape:?}: the right-hand side is returned");
        }
    }

    /// The loop dispatched from its rings gives the bits it gives dispatched directly, where a
    /// solve converges, runs out of iterations or meets negative curvature, within one chunk or
    /// over several (read in between); and after a solve that stopped inside its chunk, every
    /// entry of both rings is empty but the one its last `update` ran from: every iteration
    /// recorded after the stop dispatched nothing.
    #[test]
    fn idle_iterations_dispatch_nothing() {
        let Some(context) = context() else { return };
        assert!(context.indirect_loop, "the tests' context dispatches the loop indirectly");
        let (model, cpu, b) = linear_system(29);
        let mut rig = Rig::new(&context, &model);
        let n = 3 * model.vertex_count();
        let negative: Vec<[f64; 9]> =
            cpu.blocks.iter().map(|_| [-1.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, -1.0]).collect();
        let mut groups = rig.stages.pcg.bind_lanes(&rig.context, &rig.rec, &rig.buffers, 4).unwrap();
        let ring_entries = super::LOOP_RING as usize;
        let grid = [groups.workgroups, 1, 1];
        for (blocks, tolerance, max_iterations, state) in
            [(&cpu.blocks, 1e-4, 2000, 1), (&cpu.blocks, 1e-8, 7, 4), (&negative, 1e-4, 100, 2)]
        {
            rig.upload(3, "blocks", &rig.buffers.blocks_to_slots(&to_f32(blocks.as_flattened())));
            rig.upload(3, "rhs", &b);
            let params = fixed_tolerance(&rig, tolerance, max_iterations);
            for chunk in [2000, 5] {
                let mut runs = Vec::new();
                for indirect in [true, false] {
                    groups.indirect = indirect;
                    rig.upload(3, "direction", &vec![1.0f32; n]);
                    let status = solve_in_chunks(&mut rig, &groups, params, chunk);
                    let rings = ["product_dispatches", "update_dispatches"].map(|name| {
                        let ring = rig.buffers.scratch.named(name);
                        rig.rec.read_buffer::<u32>(&rig.context, ring, 3 * ring_entries).unwrap()
                    });
                    runs.push((status, rig.read(3, "direction", n), rings));
                }
                let ((status, x, rings), (direct_status, direct_x, _)) = (&runs[0], &runs[1]);
                println!("chunks of {chunk}: {status:?}");
                assert_eq!(status.state, state, "{status:?}");
                assert_eq!((status, x), (direct_status, direct_x), "chunks of {chunk}");
                let last = status.iterations as usize;
                if !last.is_multiple_of(chunk as usize) {
                    assert!(rings[0].iter().all(|&w| w == 0), "a product ran after the stop");
                    for (entry, arguments) in rings[1].chunks(3).enumerate() {
                        let expected = if entry == last % ring_entries { grid } else { [0; 3] };
                        assert_eq!(arguments, expected, "update entry {entry} after {last} iterations");
                    }
                }
            }
        }
    }

    #[test]
    fn gpu_pcg_meets_its_residual_and_stops_on_negative_curvature() {
        use crate::backend::cpu::{hessian_product, pcg};
        let Some(context) = context() else { return };
        let model = linear_model(Material::stvk(2e4, 0.3));
        let (x, start) = random_state(&model, 13);
        let cpu = reference(&model, &x, &start, Projection::Psd);
        let topology = crate::backend::topology::Topology::new(&model);
        let b: Vec<[f64; 3]> = cpu.gradient.iter().map(|g| g.map(|c| -c)).collect();
        let mut rig = Rig::new(&context, &model);
        let slots = rig.buffers.blocks_to_slots(&to_f32(cpu.blocks.as_flattened()));
        rig.upload(3, "blocks", &slots);
        rig.upload(3, "rhs", &to_f32(b.as_flattened()));
        let mut cpu_x = vec![[0.0; 3]; b.len()];
        let cpu_outcome = pcg::solve(
            &topology,
            &cpu.blocks,
            &[],
            &b,
            &mut cpu_x,
            &mut pcg::Scratch::default(),
            pcg::Preconditioner::Jacobi,
            1e-4,
            2000,
        );
        let n = model.vertex_count();
        for (lanes, jacobi_loop) in [(1, JacobiLoop::Cg), (8, JacobiLoop::Cg), (8, JacobiLoop::Pipelined)] {
            // f32 CG: the recursive residual drifts from the true one by about condition x
            // 1e-7, so ask for 1e-4 and check the true residual in f64 against 3e-4 (the
            // pipelined loop stops at its floor, 1e-3: against 3e-3).
            let params = fixed_tolerance(&rig, 1e-4, 2000);
            let reached = match jacobi_loop {
                JacobiLoop::Cg => 1e-4,
                JacobiLoop::Pipelined => super::PIPELINED_FLOOR as f64,
            };
            let status = solve_looped(&mut rig, params, lanes, jacobi_loop);
            assert_eq!(status.state, 1, "GPU PCG should converge: {status:?}");
            let solution = to_vectors(&rig.read(3, "direction", 3 * n));
            let mut product = vec![[0.0; 3]; b.len()];
            hessian_product::apply(&topology, &cpu.blocks, &solution, &mut product);
            let norm = |v: &[[f64; 3]]| v.iter().flatten().map(|c| c * c).sum::<f64>().sqrt();
            let residual: Vec<[f64; 3]> =
                product.iter().zip(&b).map(|(a, b)| std::array::from_fn(|c| b[c] - a[c])).collect();
            let relative = norm(&residual) / norm(&b);
            println!(
                "GPU PCG, {lanes} lanes, {jacobi_loop:?}: {} iterations (CPU {}), true relative residual {relative:.2e}",
                status.iterations, cpu_outcome.iterations
            );
            assert!(relative < 3.0 * reached, "true relative residual {relative:e}");
            assert!((status.iterations as f64) < 1.5 * cpu_outcome.iterations as f64 + 5.0);
        }

        // A squeezed StVK bar at a huge step is indefinite: the loop must stop, descending.
        let squeezed: Vec<[f64; 3]> = model.rest.iter().map(|p| [0.5 * p[0], 0.6 * p[1], p[2]]).collect();
        let indefinite = reference(&model, &squeezed, &squeezed, Projection::None);
        let big_step: Vec<[f64; 9]> = indefinite
            .blocks
            .iter()
            .zip(&topology.columns)
            .enumerate()
            .map(|(index, (block, _))| {
                // Remove most of the mass term (as a step of 10 s would) from the diagonal blocks.
                let mut out = *block;
                let row = topology.row_offsets.partition_point(|&o| o as usize <= index) - 1;
                if topology.columns[index] as usize == row && !model.pinned[row] {
                    let m = model.masses[row] / (H * H) * (1.0 - 1e-5);
                    out[0] -= m;
                    out[4] -= m;
                    out[8] -= m;
                }
                out
            })
            .collect();
        let rhs: Vec<[f64; 3]> = indefinite.gradient.iter().map(|g| g.map(|c| -c)).collect();
        let slots = rig.buffers.blocks_to_slots(&to_f32(big_step.as_flattened()));
        rig.upload(3, "blocks", &slots);
        rig.upload(3, "rhs", &to_f32(rhs.as_flattened()));
        for (lanes, jacobi_loop) in [(1, JacobiLoop::Cg), (16, JacobiLoop::Cg), (16, JacobiLoop::Pipelined)] {
            let params = fixed_tolerance(&rig, 1e-8, 2000);
            let status = solve_looped(&mut rig, params, lanes, jacobi_loop);
            assert!(
                status.negative_curvature(),
                "{jacobi_loop:?}: expected negative curvature, got {status:?}"
            );
            let d = rig.read(3, "direction", 3 * n);
            let slope: f64 = d.iter().zip(rhs.as_flattened()).map(|(d, r)| -(*d as f64) * r).sum();
            assert!(slope < 0.0, "the direction must go downhill (slope {slope})");
        }
    }

    /// FSAI-PCG on a local/global matrix (`S (x) I_3`, random right-hand side) follows its CPU
    /// twin in the loop (with `G^T G` multiplied out), with 1, 4 and 16 lanes a row: the same
    /// iteration count (to a couple, f32 against f64), the solution to
    /// the tolerance's scale, the true residual met; and it takes far fewer iterations than
    /// Jacobi on the same system. Twice: as it is, and with every fifth free vertex in a
    /// penalty contact set that stiffens its diagonal 10^4-fold (the factor made without it,
    /// the set's rows preconditioned by Jacobi). The factor lies in the buffers' second part,
    /// the first part zero: a solve that read the wrong part would stop at once.
    #[test]
    fn fsai_pcg_follows_its_cpu_twin() {
        let Some(context) = context() else { return };
        for contact_every in [None, Some(5)] {
            fsai_pcg_case(&context, contact_every);
        }
    }

    /// FSAI-PCG with the coarse correction (`backend/coarse.rs`) on a long bar's local/global
    /// matrix follows its CPU twin in the loop, with one and four lanes a row: the iteration
    /// count to a couple, the solution to the tolerance's scale, the true residual met; and
    /// it takes fewer iterations than FSAI alone (16 against 44). Read every five iterations,
    /// the loop dispatched from its rings and directly gives the same bits (iterations past
    /// the end dispatched or not). Both inverses lie in their buffers' second parts, the
    /// first parts zero.
    #[test]
    fn the_coarse_correction_follows_its_cpu_twin() {
        use super::FSAI;
        use crate::backend::coarse::{CoarseCorrection, CoarseSpace};
        use crate::backend::cpu::{hessian_product, pcg};
        use crate::backend::fsai::Fsai;
        let Some(context) = context() else { return };
        let (model, topology, s) = crate::backend::fsai::tests::projective_matrix([48, 4, 4], 0.5);
        let model = std::sync::Arc::new(model);
        let n = model.vertex_count();
        let fsai = Fsai::new(&topology, &s);
        let space = std::sync::Arc::new(
            CoarseSpace::new(&model, &model.translation_groups().0)
                .expect("a bar of 1.2K vertices has clusters"),
        );
        let correction = CoarseCorrection::new(space.clone(), &topology, &s);
        let blocks = scalar_blocks(&s);
        let b = random_rhs(&model, 8);
        let tolerance = 1e-4;
        let mut cpu_x = vec![[0.0; 3]; n];
        let preconditioner =
            pcg::Preconditioner::Fsai { fsai: &fsai, contact: &[], coarse: Some(&correction) };
        let (blocks_ref, scratch) = (&blocks, &mut pcg::Scratch::default());
        let cpu =
            pcg::solve(&topology, blocks_ref, &[], &b, &mut cpu_x, scratch, preconditioner, tolerance, 1000);
        let mut rig = Rig::new(&context, &model);
        rig.upload(3, "contact_flags", &vec![0u32; n]);
        let mut inverse = crate::backend::fsai::Inverse::new(&topology);
        inverse.fill(&topology, &fsai);
        let inverse_slots = super::InverseSlots::new(&inverse, &topology);
        assert!(rig.buffers.reserve_fsai(&rig.context, &inverse_slots));
        assert!(rig.buffers.reserve_coarse(&rig.context, &space));
        let entries = inverse_slots.slot_count();
        let second_part = |first: usize, values: Vec<f32>| [vec![0.0f32; first], values].concat();
        rig.upload(3, "fsai_inverse", &second_part(entries, inverse_slots.values(&inverse.values)));
        let coarse_values = space.inverse_length();
        rig.upload(3, "coarse_inverse", &second_part(coarse_values, correction.inverse()));
        let block_slots = rig.buffers.blocks_to_slots(&to_f32(blocks.as_flattened()));
        rig.upload(3, "blocks", &block_slots);
        rig.upload(3, "rhs", &to_f32(b.as_flattened()));
        let fsai_only = PcgParams {
            preconditioner: FSAI,
            fsai_inverse_offset: entries as u32,
            ..fixed_tolerance(&rig, tolerance, 1000)
        };
        let params = PcgParams {
            coarse_clusters: space.clusters() as u32,
            coarse_offset: (coarse_values / 4) as u32,
            ..fsai_only
        };
        let alone = solve_with(&mut rig, fsai_only, 1);
        let scale = cpu_x.iter().flatten().fold(0.0f64, |a, v| a.max(v.abs()));
        for lanes in [1, 4] {
            // The loop dispatched from its rings and directly, read every five iterations.
            let mut groups = rig.stages.pcg.bind_lanes(&rig.context, &rig.rec, &rig.buffers, lanes).unwrap();
            let mut runs = Vec::new();
            for indirect in [true, false] {
                groups.indirect = indirect;
                let status = solve_in_chunks(&mut rig, &groups, params, 5);
                runs.push((status, rig.read(3, "direction", 3 * n)));
            }
            assert_eq!(runs[0], runs[1], "{lanes} lanes: indirect and direct dispatches differ");
            let status = runs[0].0;
            assert_eq!(status.state, 1, "{lanes} lanes: {status:?}");
            assert!(status.iterations.abs_diff(cpu.iterations as u32) <= 2, "{status:?} against {cpu:?}");
            assert!(status.iterations < alone.iterations, "{status:?} against FSAI alone's {alone:?}");
            let solution = to_vectors(&runs[0].1);
            let worst = solution
                .iter()
                .flatten()
                .zip(cpu_x.iter().flatten())
                .fold(0.0f64, |a, (p, q)| a.max((p - q).abs()));
            println!(
                "FSAI-PCG with {} clusters, {lanes} lanes: CPU {} iterations, GPU {}; FSAI alone {}; \
                 solutions {:.1e} apart (of the largest entry)",
                space.clusters(),
                cpu.iterations,
                status.iterations,
                alone.iterations,
                worst / scale
            );
            assert!(worst <= 1e-3 * scale, "{lanes} lanes: the solutions differ by {worst:e} of {scale:e}");
            let mut product = vec![[0.0; 3]; n];
            hessian_product::apply(&topology, &blocks, &solution, &mut product);
            let norm = |v: &mut dyn Iterator<Item = f64>| v.map(|c| c * c).sum::<f64>().sqrt();
            let residual = norm(&mut product.iter().flatten().zip(b.iter().flatten()).map(|(a, b)| b - a));
            let relative = residual / norm(&mut b.iter().flatten().copied());
            assert!(relative < 3.0 * tolerance, "{lanes} lanes: true relative residual {relative:e}");
        }
    }

    fn fsai_pcg_case(
        context: &std::sync::Arc<crate::backend::gpu::GpuContext>,
        contact_every: Option<usize>,
    ) {
        use super::{FSAI, JACOBI};
        use crate::backend::cpu::{hessian_product, pcg};
        use crate::backend::fsai::Fsai;
        let (model, topology, mut s) = crate::backend::fsai::tests::projective_matrix([12, 4, 3], 1.0);
        let model = std::sync::Arc::new(model);
        let fsai = Fsai::new(&topology, &s);
        let n = model.vertex_count();
        let contact: Vec<bool> =
            (0..n).map(|v| !model.pinned[v] && contact_every.is_some_and(|k| v % k == 0)).collect();
        for v in (0..n).filter(|&v| contact[v]) {
            s[topology.diagonal[v] as usize] *= 1e4;
        }
        let blocks = scalar_blocks(&s);
        let b = random_rhs(&model, 21);
        let tolerance = 1e-4;
        let mut cpu_x = vec![[0.0; 3]; n];
        let cpu = pcg::solve(
            &topology,
            &blocks,
            &[],
            &b,
            &mut cpu_x,
            &mut pcg::Scratch::default(),
            pcg::Preconditioner::Fsai { fsai: &fsai, contact: &contact, coarse: None },
            tolerance,
            1000,
        );
        let mut rig = Rig::new(context, &model);
        let flags: Vec<u32> = contact.iter().map(|&c| c as u32).collect();
        rig.upload(3, "contact_flags", &flags);
        let mut inverse = crate::backend::fsai::Inverse::new(&topology);
        inverse.fill(&topology, &fsai);
        let inverse_slots = super::InverseSlots::new(&inverse, &topology);
        assert!(rig.buffers.reserve_fsai(&rig.context, &inverse_slots));
        let entries = inverse_slots.slot_count();
        let second_part = |first: usize, values: Vec<f32>| [vec![0.0f32; first], values].concat();
        rig.upload(3, "fsai_inverse", &second_part(entries, inverse_slots.values(&inverse.values)));
        let blocks_f32: Vec<f64> = blocks.iter().flatten().copied().collect();
        let block_slots = rig.buffers.blocks_to_slots(&to_f32(&blocks_f32));
        rig.upload(3, "blocks", &block_slots);
        rig.upload(3, "rhs", &to_f32(b.as_flattened()));
        let params = PcgParams {
            preconditioner: FSAI,
            fsai_inverse_offset: entries as u32,
            ..fixed_tolerance(&rig, tolerance, 1000)
        };
        let mut solves = Vec::new();
        for lanes in [1, 4, 16] {
            let looped = solve_with(&mut rig, params, lanes);
            solves.push((format!("loop, {lanes} lanes"), looped, rig.read(3, "direction", 3 * n)));
        }
        let jacobi = solve_with(&mut rig, PcgParams { preconditioner: JACOBI, ..params }, 1);
        let counts: Vec<String> =
            solves.iter().map(|(name, status, _)| format!("{name} {}", status.iterations)).collect();
        println!(
            "FSAI-PCG, {} contacts: CPU {} iterations, GPU {}; Jacobi {}",
            flags.iter().sum::<u32>(),
            cpu.iterations,
            counts.join(", "),
            jacobi.iterations
        );
        let scale = cpu_x.iter().flatten().fold(0.0f64, |a, v| a.max(v.abs()));
        for (name, status, x) in &solves {
            assert_eq!(status.state, 1, "{name}: {status:?}");
            assert!(
                status.iterations.abs_diff(cpu.iterations as u32) <= 2,
                "{name}: {status:?} against {cpu:?}"
            );
            let solution = to_vectors(x);
            let worst = solution
                .iter()
                .flatten()
                .zip(cpu_x.iter().flatten())
                .fold(0.0f64, |a, (p, q)| a.max((p - q).abs()));
            assert!(worst <= 1e-3 * scale, "{name}: the solutions differ by {worst:e} of {scale:e}");
            let mut product = vec![[0.0; 3]; n];
            hessian_product::apply(&topology, &blocks, &solution, &mut product);
            let norm = |v: &mut dyn Iterator<Item = f64>| v.map(|c| c * c).sum::<f64>().sqrt();
            let residual = norm(&mut product.iter().flatten().zip(b.iter().flatten()).map(|(a, b)| b - a));
            let relative = residual / norm(&mut b.iter().flatten().copied());
            assert!(relative < 3e-4, "{name}: true relative residual {relative:e}");
        }
        let looped = solves[0].1;
        assert!(
            (looped.iterations as f64) < 0.7 * jacobi.iterations as f64,
            "FSAI {} against Jacobi {} iterations",
            looped.iterations,
            jacobi.iterations
        );
    }

    /// The pipelined loop's iterates are CG's. On a local/global matrix, with every lane count:
    /// to a loose tolerance it stops with the CPU's Jacobi-PCG, to an iteration or two; cut off
    /// after 10 or 40 iterations, as a budget does, its solution lowers the quadratic
    /// `q(x) = x.A x / 2 - b.x` as far as the two-dispatch loop's, to 1 % of what that loop
    /// leaves undone (the exact minimum from the CPU in f64). Asked for 1e-9 in 100
    /// iterations, past what its f32 recurrences resolve, it stops at [`PIPELINED_FLOOR`]
    /// with the quadratic within 1e-5 of its least (1.8-1.9e-6 on lavapipe).
    #[test]
    fn pipelined_jacobi_pcg_follows_cg() {
        use super::{JACOBI, PIPELINED_FLOOR};
        use crate::backend::cpu::{hessian_product, pcg};
        let Some(context) = context() else { return };
        let (model, topology, s) = crate::backend::fsai::tests::projective_matrix([30, 5, 4], 300.0);
        let model = std::sync::Arc::new(model);
        let n = model.vertex_count();
        let blocks = scalar_blocks(&s);
        let b = random_rhs(&model, 34);
        let cpu_solve = |tolerance: f64| {
            let mut x = vec![[0.0; 3]; n];
            let outcome = pcg::solve(
                &topology,
                &blocks,
                &[],
                &b,
                &mut x,
                &mut pcg::Scratch::default(),
                pcg::Preconditioner::Jacobi,
                tolerance,
                20_000,
            );
            (outcome, x)
        };
        let quadratic = |x: &[[f64; 3]]| {
            let mut product = vec![[0.0; 3]; n];
            hessian_product::apply(&topology, &blocks, x, &mut product);
            x.iter().flatten().zip(product.iter().flatten()).map(|(x, a)| 0.5 * x * a).sum::<f64>()
                - x.iter().flatten().zip(b.iter().flatten()).map(|(x, b)| x * b).sum::<f64>()
        };
        let (_, exact) = cpu_solve(1e-12);
        let least = quadratic(&exact);
        let mut rig = Rig::new(&context, &model);
        let blocks_f64: Vec<f64> = blocks.iter().flatten().copied().collect();
        rig.upload(3, "blocks", &rig.buffers.blocks_to_slots(&to_f32(&blocks_f64)));
        rig.upload(3, "rhs", &to_f32(b.as_flattened()));
        let base = PcgParams { preconditioner: JACOBI, ..fixed_tolerance(&rig, 1e-2, 5000) };
        let mut solve = |params: PcgParams, lanes: u32, jacobi_loop: JacobiLoop| {
            let status = solve_looped(&mut rig, params, lanes, jacobi_loop);
            let x = to_vectors(&rig.read(3, "direction", 3 * n));
            (status, quadratic(&x))
        };
        for lanes in [1, 4, 16] {
            for tolerance in [1e-2, 1e-3] {
                let (cpu, _) = cpu_solve(tolerance);
                let params = PcgParams { tolerance: tolerance as f32, ..base };
                let (status, _) = solve(params, lanes, JacobiLoop::Pipelined);
                println!(
                    "{lanes} lanes, to {tolerance:e}: {} iterations (CPU {})",
                    status.iterations, cpu.iterations
                );
                assert_eq!(status.state, 1, "{lanes} lanes: {status:?}");
                assert!(
                    status.iterations.abs_diff(cpu.iterations as u32) <= 2,
                    "{lanes} lanes: {status:?} {cpu:?}"
                );
            }
            for count in [10, 40, 100] {
                let params = PcgParams { tolerance: 1e-9, max_iterations: count, ..base };
                let (cg_status, cg) = solve(params, lanes, JacobiLoop::Cg);
                let (status, pipelined) = solve(params, lanes, JacobiLoop::Pipelined);
                println!(
                    "{lanes} lanes, {count} iterations: the quadratic is {:.4e} above its least ({least:.4e}) \
                     after CG, pipelined {:+.2e} of that",
                    cg - least,
                    (pipelined - cg) / (cg - least)
                );
                assert_eq!((cg_status.state, cg_status.iterations), (4, count), "{cg_status:?}");
                if count < 100 {
                    assert_eq!((status.state, status.iterations), (4, count), "{status:?}");
                    let undone = cg - least;
                    assert!(
                        (pipelined - cg).abs() <= 0.01 * undone,
                        "{lanes} lanes, {count}: {pipelined} {cg} {least}"
                    );
                } else {
                    // Asked for more than its recurrences resolve, it stops at its floor,
                    // where CG does, with the quadratic as close to its least (without the
                    // floor it drifted on and stopped 1e-5 to 2.4e-2 above it).
                    let (floor, _) = cpu_solve(PIPELINED_FLOOR as f64);
                    assert_eq!(status.state, 1, "{lanes} lanes: {status:?}");
                    assert!(status.iterations.abs_diff(floor.iterations as u32) <= 2, "{status:?} {floor:?}");
                    assert!(
                        pipelined - least <= 1e-5 * least.abs(),
                        "{lanes} lanes: {pipelined} against {least}"
                    );
                }
            }
        }
    }
}
