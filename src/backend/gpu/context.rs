//! The wgpu device and queue the GPU stages run on: created here, or the application's own.

use wgpu::util::DeviceExt;

use super::shaders::Reductions;
use super::submissions::Finishers;
use crate::error::{Error, Result};

/// A device and queue for the GPU stages.
pub struct GpuContext {
    /// The device.
    pub device: wgpu::Device,
    /// Its queue.
    pub queue: wgpu::Queue,
    /// The adapter's name, for reports.
    pub adapter: String,
    /// The adapter is a software rasterizer (e.g. lavapipe): correct, but no faster than the
    /// CPU backend, so `Backend::Auto` does not pick it.
    pub software: bool,
    allocated: std::sync::atomic::AtomicU64,
    /// The first error the device reported outside an error scope (device loss, out of memory
    /// during a step), kept instead of wgpu's default panic.
    failure: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    /// Workgroups per dispatch dimension (the device's limit); larger dispatches span two
    /// dimensions (`shaders/shared/dispatch.wgsl`).
    pub(crate) dispatch_width: u32,
    /// The CG loop's iterations are dispatched indirectly, so that those recorded past a
    /// solve's end dispatch no workgroups. Only on the device this context opened, whose
    /// instance leaves out wgpu's validation of indirect calls: that validation adds a
    /// dispatch and two barriers to every indirect dispatch, more than an idle iteration costs.
    pub(crate) indirect_loop: bool,
    /// Timestamp queries, once profiling is first switched on.
    queries: std::sync::OnceLock<Queries>,
    profiling: std::sync::atomic::AtomicBool,
    profile: std::sync::Mutex<Profile>,
    /// How the stages make workgroup sums: through subgroups where the device allows.
    reductions: Reductions,
    /// Whether the stages take their parameters as immediate data (see
    /// [`params_in_immediates`](Self::params_in_immediates)).
    immediates: bool,
    /// Whether the solvers' read-write buffers are ranges of one arena (see
    /// [`with_separate_buffers`](Self::with_separate_buffers)).
    pub(crate) buffer_arena: bool,
    /// The stages' pipelines, compiled once for every simulation on this context.
    stages: std::sync::Mutex<Option<std::sync::Arc<super::WgStages>>>,
    /// The workers that finish the simulations' command buffers while they record more.
    finishers: Finishers,
}

/// GPU time spent in one kind of compute pass, from timestamp queries.
#[derive(Clone, Debug, PartialEq)]
pub struct PassTime {
    /// The pass: a stage (`element`, `gather`, `assemble`) or an entry point (`product`, ...).
    pub pass: &'static str,
    /// GPU time summed over its passes (s).
    pub seconds: f64,
    /// How many passes were timed.
    pub count: u64,
    /// How many evaluations those passes made: a pass over a batch of `k` positions (the
    /// element stage's energies of line-search candidates) counts `k`, any other pass 1.
    pub evaluations: u64,
}

/// Timestamp queries: two per pass, resolved at the next readback.
const QUERY_CAPACITY: u32 = 1024;

struct Queries {
    set: wgpu::QuerySet,
    resolved: wgpu::Buffer,
    nanoseconds_per_tick: f64,
}

#[derive(Default)]
struct Profile {
    /// The labels of the passes whose timestamps await resolution, by query pair, with the
    /// evaluations each made.
    pending: Vec<(&'static str, u64)>,
    totals: Vec<PassTime>,
}

/// Room for the largest stage's parameters (the gather's, 108 bytes): Vulkan's guaranteed
/// push-constant size.
pub const PARAMS_BYTES: u32 = 128;

impl GpuContext {
    /// Picks the highest-performance adapter and opens a device with that adapter's own
    /// limits, so that buffers beyond the default binding limits fit where the hardware allows.
    pub fn new() -> Result<GpuContext> {
        // One at a time: some drivers crash when instances are created concurrently (seen in
        // NVIDIA's libEGL when tests opened devices in parallel).
        static CREATING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one_at_a_time = CREATING.lock().unwrap_or_else(|e| e.into_inner());
        // One instance for the process; each context opens its own adapter and device on it.
        // On an H200, with an instance per context, the 30th context (each made after the
        // last was dropped) found no adapter; other projects saw NVIDIA's Vulkan driver
        // misbehave after 10-11 instance create/destroy cycles, so none are cycled here
        // (`contexts_made_and_dropped_in_turn_keep_finding_the_gpu` makes 40 in turn; it
        // passes on the H200).
        static INSTANCE: std::sync::OnceLock<wgpu::Instance> = std::sync::OnceLock::new();
        let instance = INSTANCE.get_or_init(|| {
            let mut descriptor = wgpu::InstanceDescriptor::new_without_display_handle();
            // The loop's indirect arguments are the loop's own grid or zero (`shaders/pcg.wgsl`).
            descriptor.flags.remove(wgpu::InstanceFlags::VALIDATION_INDIRECT_CALL);
            wgpu::Instance::new(descriptor)
        });
        let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            compatible_surface: None,
            ..Default::default()
        }))
        .map_err(|e| {
            Error::NoGpu(format!("{e}; install a Vulkan, Metal or DX12 driver, or use Backend::Cpu"))
        })?;
        let info = adapter.get_info();
        let failure: std::sync::Arc<std::sync::Mutex<Option<String>>> = Default::default();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("lively"),
            required_features: GpuContext::wanted_features(&adapter),
            required_limits: adapter.limits(),
            ..Default::default()
        }))
        .map_err(|e| Error::NoGpu(format!("adapter {} refused a device: {e}", info.name)))?;
        fn record(failure: &std::sync::Arc<std::sync::Mutex<Option<String>>>, message: String) {
            if let Ok(mut slot) = failure.lock() {
                slot.get_or_insert(message);
            }
        }
        let on_error = failure.clone();
        device
            .on_uncaptured_error(std::sync::Arc::new(move |e: wgpu::Error| record(&on_error, e.to_string())));
        let on_loss = failure.clone();
        device.set_device_lost_callback(move |reason, message| {
            record(&on_loss, format!("{reason:?}: {message}"))
        });
        let dispatch_width = device.limits().max_compute_workgroups_per_dimension;
        let context = GpuContext {
            device,
            queue,
            adapter: format!("{} ({:?})", info.name, info.backend),
            software: info.device_type == wgpu::DeviceType::Cpu,
            allocated: 0.into(),
            failure,
            dispatch_width,
            indirect_loop: true,
            queries: Default::default(),
            profiling: Default::default(),
            profile: Default::default(),
            reductions: Reductions::Tree,
            immediates: false,
            buffer_arena: true,
            stages: Default::default(),
            finishers: Finishers::default(),
        };
        Ok(context.with_device_choices())
    }

    /// The features of `adapter` the stages use where it has them: subgroups, for their
    /// workgroup sums (see [`reductions`](Self::reductions)), immediates, for their parameters
    /// ([`params_in_immediates`](Self::params_in_immediates)), and timestamp queries, for
    /// [`start_profiling`](Self::start_profiling). An application that opens its own device
    /// for [`from_device`](Self::from_device) asks for these too.
    pub fn wanted_features(adapter: &wgpu::Adapter) -> wgpu::Features {
        (adapter.features() & (wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::IMMEDIATES))
            | super::subgroups::wanted(adapter)
    }

    /// Whether the stages take their parameters as immediate data (push constants), set in
    /// the command stream at each dispatch, rather than from a uniform arena that each
    /// submission fills with `write_buffer`: where the device has immediates of
    /// [`PARAMS_BYTES`]. A `write_buffer` makes and later frees a staging buffer; on the
    /// development VM (lavapipe) that was a fifth of a local/global step's host time.
    pub fn params_in_immediates(&self) -> bool {
        self.immediates
    }

    /// Wraps the application's own device and queue (e.g. its renderer's). Its stages sum
    /// through subgroups only if the device was opened with them
    /// ([`wanted_features`](Self::wanted_features)).
    pub fn from_device(device: wgpu::Device, queue: wgpu::Queue) -> GpuContext {
        let dispatch_width = device.limits().max_compute_workgroups_per_dimension;
        GpuContext {
            device,
            queue,
            adapter: "application device".into(),
            software: false,
            allocated: 0.into(),
            // The application's own error handlers stay in place.
            failure: Default::default(),
            dispatch_width,
            // Its instance may validate indirect calls (wgpu's default, even in release builds).
            indirect_loop: false,
            queries: Default::default(),
            profiling: Default::default(),
            profile: Default::default(),
            reductions: Reductions::Tree,
            immediates: false,
            buffer_arena: true,
            stages: Default::default(),
            finishers: Finishers::default(),
        }
        .with_device_choices()
    }

    /// The context with its stages' sums through subgroups, and their parameters in immediate
    /// data, where its device allows.
    fn with_device_choices(mut self) -> GpuContext {
        let widths = super::pcg::workgroup_widths(&self.device.limits());
        self.reductions = super::subgroups::reductions(&self, &widths);
        self.immediates = self.device.features().contains(wgpu::Features::IMMEDIATES)
            && self.device.limits().max_immediate_size >= PARAMS_BYTES;
        self
    }

    /// How the stages on this context make their workgroup sums.
    pub fn reductions(&self) -> Reductions {
        self.reductions
    }

    /// This context with its stages' workgroup sums made by the tree even where the device
    /// has subgroups: for tests of that path, and for comparing the two on one device.
    pub fn with_tree_reductions(mut self) -> GpuContext {
        self.reductions = Reductions::Tree;
        self.stages = Default::default();
        self
    }

    /// This context with its stages' parameters in the uniform arena even where the device
    /// has immediates: for tests of that path, and for comparing the two on one device.
    pub fn with_params_in_arena(mut self) -> GpuContext {
        self.immediates = false;
        self.stages = Default::default();
        self
    }

    /// This context with every buffer of its simulations apart, none in the arena that the
    /// solvers' read-write buffers otherwise share (`GpuBuffers::pack`): for comparing the two
    /// on one device.
    pub fn with_separate_buffers(mut self) -> GpuContext {
        self.buffer_arena = false;
        self
    }

    /// This context with `threads` workers to finish its command buffers (`submissions.rs`);
    /// none finishes each on the thread that recorded it, as before there were workers: for
    /// comparing the two on one device.
    pub fn with_encoder_threads(mut self, threads: usize) -> GpuContext {
        self.finishers = Finishers::new(threads);
        self
    }

    /// The workers that finish command buffers for this context's recordings.
    pub(crate) fn finishers(&self) -> &Finishers {
        &self.finishers
    }

    /// How many workers finish command buffers while the simulations record more (none: each
    /// recording thread finishes its own).
    pub fn encoder_threads(&self) -> usize {
        self.finishers.threads()
    }

    /// The stages' pipelines on this device, compiled by the first simulation that asks.
    pub fn stages(&self) -> Result<std::sync::Arc<super::WgStages>> {
        let mut slot = self.stages.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(stages) = slot.as_ref() {
            return Ok(stages.clone());
        }
        let stages = std::sync::Arc::new(super::WgStages::new(self)?);
        *slot = Some(stages.clone());
        Ok(stages)
    }

    /// Records a dispatch of `workgroups` workgroups, in rows of at most `dispatch_width`.
    pub(crate) fn dispatch(&self, pass: &mut wgpu::ComputePass<'_>, workgroups: u32) {
        let width = workgroups.clamp(1, self.dispatch_width.max(1));
        pass.dispatch_workgroups(width, workgroups.max(1).div_ceil(width), 1);
    }

    /// Starts timing every compute pass with timestamp queries (for benchmarks: it adds a
    /// small readback to every readback). Refused where the device lacks
    /// `Features::TIMESTAMP_QUERY`.
    pub fn start_profiling(&self) -> Result<()> {
        if !self.device.features().contains(wgpu::Features::TIMESTAMP_QUERY) {
            return Err(Error::Unsupported(format!("{} has no timestamp queries", self.adapter)));
        }
        self.queries.get_or_init(|| Queries {
            set: self.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("pass timestamps"),
                ty: wgpu::QueryType::Timestamp,
                count: QUERY_CAPACITY,
            }),
            resolved: self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("resolved timestamps"),
                size: 8 * QUERY_CAPACITY as u64,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            }),
            nanoseconds_per_tick: self.queue.get_timestamp_period() as f64,
        });
        self.profiling.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Stops timing passes (the times so far stay for `pass_times`).
    pub fn stop_profiling(&self) {
        self.profiling.store(false, std::sync::atomic::Ordering::Relaxed);
    }

    /// GPU time per kind of pass since the last call (empty unless profiling is on), the
    /// most expensive first.
    pub fn pass_times(&self) -> Vec<PassTime> {
        let mut totals = self.profile.lock().map(|mut p| std::mem::take(&mut p.totals)).unwrap_or_default();
        totals.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        totals
    }

    /// The timestamp writes for a pass labelled `pass` that makes `evaluations` evaluations,
    /// when profiling (passes beyond the query capacity between two readbacks go untimed).
    pub(crate) fn timestamp_writes(
        &self,
        pass: &'static str,
        evaluations: u64,
    ) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        if !self.profiling.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        let queries = self.queries.get()?;
        let mut profile = self.profile.lock().ok()?;
        let index = profile.pending.len() as u32;
        if 2 * index + 2 > QUERY_CAPACITY {
            return None;
        }
        profile.pending.push((pass, evaluations));
        Some(wgpu::ComputePassTimestampWrites {
            query_set: &queries.set,
            beginning_of_pass_write_index: Some(2 * index),
            end_of_pass_write_index: Some(2 * index + 1),
        })
    }

    /// Resolves the pending timestamps (every pass recorded so far has been submitted: the
    /// stages submit before they read back).
    fn collect_times(&self) -> Result<()> {
        let Some(queries) = self.queries.get() else { return Ok(()) };
        let pending = match self.profile.lock() {
            Ok(mut profile) => std::mem::take(&mut profile.pending),
            Err(_) => return Ok(()),
        };
        if pending.is_empty() {
            return Ok(());
        }
        let count = 2 * pending.len() as u32;
        let mut encoder = self.device.create_command_encoder(&Default::default());
        encoder.resolve_query_set(&queries.set, 0..count, &queries.resolved, 0);
        self.queue.submit([encoder.finish()]);
        let ticks: Vec<u64> =
            bytemuck::pod_collect_to_vec(&self.download(&queries.resolved, 0, 8 * count as u64)?);
        if let Ok(mut profile) = self.profile.lock() {
            for (&(pass, evaluations), pair) in pending.iter().zip(ticks.chunks_exact(2)) {
                let seconds = pair[1].saturating_sub(pair[0]) as f64 * queries.nanoseconds_per_tick * 1e-9;
                match profile.totals.iter_mut().find(|t| t.pass == pass) {
                    Some(total) => {
                        total.seconds += seconds;
                        total.count += 1;
                        total.evaluations += evaluations;
                    }
                    None => profile.totals.push(PassTime { pass, seconds, count: 1, evaluations }),
                }
            }
        }
        Ok(())
    }

    /// The first device failure reported since the last call, as an error.
    pub(crate) fn take_failure(&self) -> Option<Error> {
        let message = self.failure.lock().ok()?.take()?;
        Some(Error::DeviceLost(format!("{message}; the step was not applied")))
    }

    /// Runs `create` with out-of-memory and validation errors captured, so that a model too
    /// large for the device is an error rather than a panic.
    pub(crate) fn guarded<T>(&self, create: impl FnOnce() -> Result<T>) -> Result<T> {
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let memory = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let value = create();
        let oom = pollster::block_on(memory.pop());
        let invalid = pollster::block_on(validation.pop());
        if let Some(e) = oom {
            return Err(Error::DeviceLost(format!(
                "out of GPU memory for this model ({e}); use Backend::Cpu or a smaller model"
            )));
        }
        if let Some(e) = invalid {
            return Err(Error::Unsupported(format!(
                "the GPU refused the model's buffers ({e}); use Backend::Cpu"
            )));
        }
        value
    }

    /// Bytes of storage this context has allocated for lively.
    pub fn allocated_bytes(&self) -> u64 {
        self.allocated.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn count(&self, bytes: u64) {
        self.allocated.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// A storage buffer initialised with `data`.
    pub(crate) fn storage<T: bytemuck::Pod>(&self, label: &str, data: &[T]) -> wgpu::Buffer {
        // wgpu rejects zero-sized bindings; an empty array still gets one zeroed element.
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let padded;
        let contents = if bytes.is_empty() {
            padded = vec![0u8; std::mem::size_of::<T>().max(16)];
            &padded[..]
        } else {
            bytes
        };
        self.count(contents.len() as u64);
        self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        })
    }

    /// A zeroed storage buffer of `len` elements of `T`.
    pub(crate) fn scratch<T: bytemuck::Pod>(&self, label: &str, len: usize) -> wgpu::Buffer {
        self.zeroed::<T>(label, len, wgpu::BufferUsages::empty())
    }

    /// [`scratch`](Self::scratch) that kernels also dispatch from.
    pub(crate) fn dispatch_arguments<T: bytemuck::Pod>(&self, label: &str, len: usize) -> wgpu::Buffer {
        self.zeroed::<T>(label, len, wgpu::BufferUsages::INDIRECT)
    }

    fn zeroed<T: bytemuck::Pod>(&self, label: &str, len: usize, usage: wgpu::BufferUsages) -> wgpu::Buffer {
        let size = (std::mem::size_of::<T>() * len.max(1)).next_multiple_of(4) as u64;
        self.count(size);
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: usage
                | wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// Waits for the queue and copies the byte ranges `pieces` of the first `size` bytes of
    /// `staging` (a `MAP_READ` buffer the submitted work copied into) out.
    pub(crate) fn map_read(
        &self,
        staging: &wgpu::Buffer,
        size: u64,
        pieces: &[std::ops::Range<usize>],
    ) -> Result<Vec<Vec<u8>>> {
        let bytes = read_mapped_pieces(&self.device, staging, size, pieces)?;
        self.collect_times()?;
        Ok(bytes)
    }

    /// Waits for the queue and copies the first `size` bytes of `buffer` out.
    pub(crate) fn read_bytes(&self, buffer: &wgpu::Buffer, offset: u64, size: u64) -> Result<Vec<u8>> {
        if size == 0 {
            return Ok(Vec::new());
        }
        let bytes = self.download(buffer, offset, size)?;
        self.collect_times()?;
        Ok(bytes)
    }

    /// Whether passes are being timed.
    pub(crate) fn is_profiling(&self) -> bool {
        self.profiling.load(std::sync::atomic::Ordering::Relaxed) && self.queries.get().is_some()
    }

    /// The first `size` bytes of `buffer` through a staging buffer of its own (waits for the
    /// queue).
    fn download(&self, buffer: &wgpu::Buffer, offset: u64, size: u64) -> Result<Vec<u8>> {
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder =
            self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("readback") });
        encoder.copy_buffer_to_buffer(buffer, offset, &staging, 0, size);
        self.queue.submit([encoder.finish()]);
        self.map(&staging, size)
    }

    /// Maps the first `size` bytes of a `MAP_READ` buffer, copies them out and unmaps it.
    fn map(&self, staging: &wgpu::Buffer, size: u64) -> Result<Vec<u8>> {
        read_mapped(&self.device, staging, size)
    }
}

/// Waits for `device`, then copies the first `size` bytes of a `MAP_READ` buffer out and unmaps
/// it.
pub(crate) fn read_mapped(device: &wgpu::Device, staging: &wgpu::Buffer, size: u64) -> Result<Vec<u8>> {
    let whole = 0..size as usize;
    let mut pieces = read_mapped_pieces(device, staging, size, std::slice::from_ref(&whole))?;
    Ok(pieces.pop().expect("one piece was asked for"))
}

/// Waits for `device`, then copies the byte ranges `pieces` of a `MAP_READ` buffer's first
/// `size` bytes out, each into a vector of its own (straight from the mapping: a million-tet
/// body's state read back is megabytes), and unmaps it.
pub(crate) fn read_mapped_pieces(
    device: &wgpu::Device,
    staging: &wgpu::Buffer,
    size: u64,
    pieces: &[std::ops::Range<usize>],
) -> Result<Vec<Vec<u8>>> {
    let (sender, receiver) = std::sync::mpsc::channel();
    staging.slice(..size).map_async(wgpu::MapMode::Read, move |result| {
        let _ = sender.send(result);
    });
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .map_err(|e| Error::DeviceLost(format!("waiting for a readback: {e}")))?;
    receiver
        .recv()
        .map_err(|_| Error::DeviceLost("the readback was dropped".into()))?
        .map_err(|e| Error::DeviceLost(format!("mapping a readback buffer: {e}")))?;
    let view = staging
        .get_mapped_range(..size)
        .map_err(|e| Error::DeviceLost(format!("reading a mapped buffer: {e}")))?;
    let out = pieces.iter().map(|piece| view[piece.clone()].to_vec()).collect();
    drop(view);
    staging.unmap();
    Ok(out)
}
