//! `Recording`: the GPU work of a backend between two readbacks. Stages append their
//! dispatches to it instead of submitting them: consecutive dispatches share one compute pass
//! (wgpu orders them inside it), every dispatch's parameters go into one uniform arena bound
//! at a dynamic offset, and results the host needs are copied into one staging buffer as the
//! work is recorded. A readback submits what is pending (a fixed-budget step and a
//! local/global solve also submit each iteration as it is recorded, so that the device starts
//! early), so a Newton iteration is one readback however many stages it runs. Parts submitted
//! before a readback are finished for the driver on the context's workers, in order
//! (`submissions.rs`), while this thread records the next.

use encase::ShaderType;
use encase::internal::WriteInto;

use super::buffers::BufferSpan;
use super::context::GpuContext;
use super::stage::{Bound, Kernel, WgStage};
use super::submissions::{Part, Submissions};
use crate::error::{Error, Result};

/// Bytes of one parameter slot: every stage's parameter block fits, and it is the largest
/// dynamic-offset alignment a device may ask for.
pub const PARAM_SLOT: u64 = 256;
/// Parameter slots per submission; a recording that needs more submits early.
const PARAM_SLOTS: u64 = 1024;

/// Device work done for one backend, counted as it is recorded and submitted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounts {
    /// Host time spent waiting for results: from the submission before a readback until its
    /// bytes are in hand. A step's wall time less this is the host's own work.
    pub wait: std::time::Duration,
    /// Host time spent recording dispatches into command encoders (wgpu's validation and state
    /// tracking of each).
    pub record: std::time::Duration,
    /// Host time spent finishing command encoders, where wgpu validates and encodes the
    /// recorded passes for the driver (their barriers included): on the context's workers for
    /// parts submitted before a readback, where it overlaps the recording; on the recording
    /// thread, inside `wait`, for the last.
    pub encode: std::time::Duration,
    /// Host time spent handing finished command buffers and the dispatch parameters to the
    /// queue (`write_buffer` and `submit`, where the driver takes them), wherever `encode` was
    /// spent.
    pub submit: std::time::Duration,
    /// Command buffers submitted to the queue.
    pub submissions: u64,
    /// Times the host waited for results (each maps one staging buffer).
    pub readbacks: u64,
    /// Compute passes recorded.
    pub passes: u64,
    /// Compute dispatches recorded, including the CG loop's indirect ones, which dispatch no
    /// workgroups once their solve has stopped.
    pub dispatches: u64,
    /// Distinct buffers bound for writing, summed over the dispatches: wgpu tracks each at
    /// every dispatch and records a barrier for it, host work that `encode` times (a range of
    /// an arena counts as its arena, `GpuBuffers::pack`).
    pub writable_buffers: u64,
    /// Bytes written from the host into device buffers: uploads, and the dispatch parameters
    /// where they go through the uniform arena (not where they are immediate data).
    pub uploaded: u64,
    /// Bytes read back to the host.
    pub downloaded: u64,
}

impl DeviceCounts {
    /// The work done since `earlier`.
    pub fn since(&self, earlier: &DeviceCounts) -> DeviceCounts {
        DeviceCounts {
            submissions: self.submissions - earlier.submissions,
            readbacks: self.readbacks - earlier.readbacks,
            passes: self.passes - earlier.passes,
            dispatches: self.dispatches - earlier.dispatches,
            writable_buffers: self.writable_buffers - earlier.writable_buffers,
            uploaded: self.uploaded - earlier.uploaded,
            downloaded: self.downloaded - earlier.downloaded,
            wait: self.wait.saturating_sub(earlier.wait),
            record: self.record.saturating_sub(earlier.record),
            encode: self.encode.saturating_sub(earlier.encode),
            submit: self.submit.saturating_sub(earlier.submit),
        }
    }
}

/// Dispatches after which a recording is submitted in the middle of a long run of them (a PCG
/// solve); each later part between two readbacks is twice as long as the one before. wgpu
/// encodes a command buffer for the driver when it is submitted (about 4 us a dispatch on the
/// H200's host), and a device waiting for a whole solve's encoding idled through it: 2.5 ms of
/// the 100K-tet Newton step's 13.9 (docs/perf/gpu.md). In parts, the device runs one while the
/// host records the next (and the context's workers encode it); a readback still waits once.
/// Doubling keeps the parts few where the device has work queued anyway (a local/global step's
/// iterations, a budgeted step).
pub const FIRST_PART: u64 = 16;

/// The most submissions [`Recording::submit_part`] adds between two readbacks that record
/// `dispatches` dispatches: one at 16 dispatches, then at 48, 112, ...
pub fn most_parts(dispatches: u64) -> u64 {
    (1..64).take_while(|&k| FIRST_PART * ((1 << k) - 1) <= dispatches).count() as u64
}

/// Where a staged result lies in the staging buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Staged {
    offset: u64,
    size: u64,
}

/// The workgroups of a dispatch: a count, or the arguments (x, y, z) that bytes `offset..offset
/// + 12` of a buffer hold when the device reaches it.
pub enum Grid<'a> {
    Workgroups(u32),
    Indirect(&'a BufferSpan, u64),
}

/// A stage's parameter group (0) over the recording's arena; none where the device takes
/// parameters as immediate data.
pub type ParamGroup = Option<wgpu::BindGroup>;

/// Recorded, not yet submitted GPU work and its parameter and staging buffers.
pub struct Recording {
    encoder: Option<wgpu::CommandEncoder>,
    pass: Option<wgpu::ComputePass<'static>>,
    /// The parameter slots of the recorded dispatches, written to the arena at submission.
    params: Vec<u8>,
    arena: wgpu::Buffer,
    staging: wgpu::Buffer,
    staging_capacity: u64,
    staged: u64,
    /// Dispatches recorded since the last submission.
    pending_dispatches: u32,
    /// Parts submitted by [`submit_part`](Self::submit_part) since the last readback.
    parts: u32,
    /// Parts handed over to be finished and submitted.
    submissions: Submissions,
    counts: DeviceCounts,
}

impl Recording {
    /// A recording whose staged results may take up to `staging_capacity` bytes.
    pub fn new(context: &GpuContext, staging_capacity: u64) -> Recording {
        let staging_capacity = staging_capacity.next_multiple_of(4).max(16);
        Recording {
            encoder: None,
            pass: None,
            params: Vec::new(),
            arena: context.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("parameter arena"),
                size: PARAM_SLOT * PARAM_SLOTS,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
            staging: context.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("staging"),
                size: staging_capacity,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
            staging_capacity,
            staged: 0,
            pending_dispatches: 0,
            parts: 0,
            submissions: Submissions::default(),
            counts: DeviceCounts::default(),
        }
    }

    /// Bind group 0 of `stage`: the parameter arena, one slot per dispatch; none where the
    /// parameters are immediate data.
    pub fn param_group(&self, context: &GpuContext, stage: &WgStage) -> ParamGroup {
        stage.param_group(context, &self.arena)
    }

    /// The counts so far.
    pub fn counts(&self) -> DeviceCounts {
        let (encode, submit) = self.submissions.times();
        DeviceCounts { encode, submit, ..self.counts }
    }

    /// Whether work is recorded and not yet submitted.
    pub fn is_pending(&self) -> bool {
        self.encoder.is_some()
    }

    /// Submits what is recorded where it holds the next part since the last readback — at
    /// least [`FIRST_PART`] dispatches, twice as many as the part before — and says whether it
    /// did (parameter offsets taken before it no longer hold). A long run of dispatches calls
    /// it between them.
    pub fn submit_part(&mut self, context: &GpuContext) -> bool {
        if (self.pending_dispatches as u64) < FIRST_PART << self.parts {
            return false;
        }
        self.submit(context);
        self.parts += 1;
        true
    }

    /// Stores `value` in the next parameter slot; returns its dynamic offset.
    pub fn params<T: ShaderType + WriteInto>(&mut self, context: &GpuContext, value: &T) -> Result<u32> {
        if self.params.len() as u64 >= PARAM_SLOT * PARAM_SLOTS {
            self.submit(context);
        }
        let offset = self.params.len();
        let mut bytes = encase::UniformBuffer::new(Vec::<u8>::new());
        bytes.write(value).map_err(|e| Error::DeviceLost(format!("encoding parameters: {e}")))?;
        let bytes = bytes.into_inner();
        debug_assert!(bytes.len() as u64 <= PARAM_SLOT);
        self.params.extend_from_slice(&bytes);
        self.params.resize(offset + PARAM_SLOT as usize, 0);
        Ok(offset as u32)
    }

    fn encoder(&mut self, context: &GpuContext) -> &mut wgpu::CommandEncoder {
        self.encoder.get_or_insert_with(|| context.device.create_command_encoder(&Default::default()))
    }

    fn end_pass(&mut self) {
        self.pass = None;
    }

    /// Records a dispatch of `kernel` over `workgroups` workgroups with its groups of `bound`
    /// after its parameters (the slot at `param_offset`: bound through the parameter group, or
    /// set as immediate data where there is none). Dispatches share the open pass; when
    /// profiling, each gets a pass of its own with timestamps.
    pub fn dispatch(
        &mut self,
        context: &GpuContext,
        kernel: Kernel<'_>,
        param_group: &ParamGroup,
        param_offset: u32,
        bound: &Bound,
        workgroups: u32,
    ) {
        self.record_dispatch(
            context,
            kernel,
            (param_group, param_offset),
            bound,
            Grid::Workgroups(workgroups),
            1,
        );
    }

    /// [`dispatch`](Self::dispatch) over `grid`.
    pub fn dispatch_over(
        &mut self,
        context: &GpuContext,
        kernel: Kernel<'_>,
        param_group: &ParamGroup,
        param_offset: u32,
        bound: &Bound,
        grid: Grid<'_>,
    ) {
        self.record_dispatch(context, kernel, (param_group, param_offset), bound, grid, 1);
    }

    /// [`dispatch`](Self::dispatch) of a pass that evaluates a batch of `members` positions
    /// (profiling counts it as that many evaluations).
    pub fn dispatch_batch(
        &mut self,
        context: &GpuContext,
        kernel: Kernel<'_>,
        (param_group, param_offset): (&ParamGroup, u32),
        bound: &Bound,
        workgroups: u32,
        members: u32,
    ) {
        let grid = Grid::Workgroups(workgroups);
        self.record_dispatch(context, kernel, (param_group, param_offset), bound, grid, members as u64);
    }

    fn record_dispatch(
        &mut self,
        context: &GpuContext,
        kernel: Kernel<'_>,
        (param_group, param_offset): (&ParamGroup, u32),
        bound: &Bound,
        grid: Grid<'_>,
        evaluations: u64,
    ) {
        let started = std::time::Instant::now();
        let label = kernel.label;
        let pipeline = kernel.stage.pipeline(context, kernel.entry, kernel.constants);
        let timestamps = context.timestamp_writes(label, evaluations);
        if timestamps.is_some() || self.pass.is_none() {
            self.end_pass();
            let pass = self.encoder(context).begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(label),
                timestamp_writes: timestamps,
            });
            self.pass = Some(pass.forget_lifetime());
            self.counts.passes += 1;
        }
        let profiled = context.is_profiling();
        let pass = self.pass.as_mut().expect("a pass was opened above");
        pass.set_pipeline(&pipeline);
        match param_group {
            Some(group) => pass.set_bind_group(0, group, &[param_offset]),
            None => {
                let at = param_offset as usize;
                pass.set_immediates(0, &self.params[at..at + kernel.stage.immediate_bytes() as usize]);
            }
        }
        let (groups, writable) = bound.groups_for(kernel.entry);
        for (g, group) in groups.enumerate() {
            pass.set_bind_group(g as u32 + 1, group, &[]);
        }
        self.counts.writable_buffers += writable as u64;
        match grid {
            Grid::Workgroups(workgroups) => context.dispatch(pass, workgroups),
            Grid::Indirect(arguments, offset) => {
                pass.dispatch_workgroups_indirect(&arguments.buffer, arguments.offset + offset)
            }
        }
        self.counts.dispatches += 1;
        self.pending_dispatches += 1;
        if profiled {
            // Its timestamps close with the pass.
            self.end_pass();
        }
        self.counts.record += started.elapsed();
    }

    /// Writes `data` into `buffer` after the recorded work (before it when nothing is
    /// pending, straight through the queue).
    pub fn upload(&mut self, context: &GpuContext, buffer: &BufferSpan, data: &[u8]) {
        self.upload_at(context, buffer, 0, data);
    }

    /// [`upload`](Self::upload) into `buffer` from byte `offset` on.
    pub fn upload_at(&mut self, context: &GpuContext, span: &BufferSpan, offset: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let (buffer, offset) = (&span.buffer, span.offset + offset);
        self.counts.uploaded += data.len() as u64;
        // Straight through the queue only after every part recorded before: it writes ahead
        // of the next submission.
        if !self.is_pending() && self.submissions.all_submitted() {
            context.queue.write_buffer(buffer, offset, data);
            return;
        }
        use wgpu::util::DeviceExt;
        let source = context.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("upload"),
            contents: data,
            usage: wgpu::BufferUsages::COPY_SRC,
        });
        self.end_pass();
        self.encoder(context).copy_buffer_to_buffer(&source, 0, buffer, offset, data.len() as u64);
    }

    /// Records a copy of the first `bytes` of `source` into `target` from byte `offset` on,
    /// on the device.
    pub fn copy(
        &mut self,
        context: &GpuContext,
        source: &BufferSpan,
        target: &BufferSpan,
        offset: u64,
        bytes: u64,
    ) {
        self.end_pass();
        let (from, to) = (source.offset, target.offset + offset);
        self.encoder(context).copy_buffer_to_buffer(&source.buffer, from, &target.buffer, to, bytes);
    }

    /// Records a copy of the first `bytes` of `buffer`, as they are at this point of the
    /// recording, into the staging buffer for the next [`read`](Self::read).
    pub fn stage(&mut self, context: &GpuContext, span: &BufferSpan, bytes: u64) -> Result<Staged> {
        let size = bytes.next_multiple_of(4);
        if self.staged + size > self.staging_capacity {
            return Err(Error::DeviceLost(format!(
                "a readback of {} bytes exceeds the staging buffer of {} bytes",
                self.staged + size,
                self.staging_capacity
            )));
        }
        let offset = self.staged;
        self.end_pass();
        let staging = self.staging.clone();
        self.encoder(context).copy_buffer_to_buffer(&span.buffer, span.offset, &staging, offset, bytes);
        self.staged += size;
        Ok(Staged { offset, size: bytes })
    }

    /// Submits the recorded work (nothing when none is pending): the context's workers finish
    /// it for the driver and the queue takes it after the work submitted before.
    pub fn submit(&mut self, context: &GpuContext) {
        if let Some(part) = self.take_part(context) {
            self.submissions.hand_over(context.finishers(), &context.queue, &self.arena, part);
        }
    }

    /// Submits the recorded work, finishing it on this thread, and returns once the queue has
    /// taken it and everything submitted before it (for work that other submissions to the
    /// queue, not this recording's readbacks, must see).
    pub fn submit_now(&mut self, context: &GpuContext) -> Result<()> {
        match self.take_part(context) {
            Some(part) => self.submissions.submit_here(&context.queue, &self.arena, part),
            None => self.submissions.wait(),
        }
    }

    /// The recorded work as a part for the queue, with the dispatch parameters that go into
    /// the arena before it.
    fn take_part(&mut self, context: &GpuContext) -> Option<Part> {
        self.end_pass();
        let encoder = self.encoder.take()?;
        self.pending_dispatches = 0;
        self.counts.submissions += 1;
        let params = if context.params_in_immediates() {
            self.params.clear();
            Vec::new()
        } else {
            self.counts.uploaded += self.params.len() as u64;
            std::mem::take(&mut self.params)
        };
        Some(Part { encoder, params })
    }

    /// Submits, waits, and returns the staged results in the order they were staged.
    pub fn read(&mut self, context: &GpuContext, staged: &[Staged]) -> Result<Vec<Vec<u8>>> {
        let started = std::time::Instant::now();
        self.parts = 0;
        let submitted = self.submit_now(context);
        let used = std::mem::take(&mut self.staged);
        submitted?;
        if used == 0 {
            return Ok(staged.iter().map(|_| Vec::new()).collect());
        }
        self.counts.readbacks += 1;
        self.counts.downloaded += used;
        let pieces: Vec<_> = staged.iter().map(|s| s.offset as usize..(s.offset + s.size) as usize).collect();
        let results = context.map_read(&self.staging, used, &pieces);
        self.counts.wait += started.elapsed();
        results
    }

    /// Submits and reads `len` elements of `T` from `buffer` through a staging buffer of
    /// their own (for whole vectors, larger than the staged statuses).
    pub fn read_buffer<T: bytemuck::Pod>(
        &mut self,
        context: &GpuContext,
        span: &BufferSpan,
        len: usize,
    ) -> Result<Vec<T>> {
        debug_assert_eq!(self.staged, 0, "staged results would be left unread");
        let started = std::time::Instant::now();
        self.parts = 0;
        self.submit_now(context)?;
        self.counts.readbacks += 1;
        self.counts.downloaded += (std::mem::size_of::<T>() * len) as u64;
        let bytes = context.read_bytes(&span.buffer, span.offset, (std::mem::size_of::<T>() * len) as u64);
        self.counts.wait += started.elapsed();
        let bytes = bytes?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }
}
