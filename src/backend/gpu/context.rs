//! The wgpu device and queue the GPU stages run on: created here, or the application's own.

use wgpu::util::DeviceExt;

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
}

impl GpuContext {
    /// Picks the highest-performance adapter and opens a device with that adapter's own
    /// limits, so that buffers beyond the default binding limits fit where the hardware allows.
    pub fn new() -> Result<GpuContext> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
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
        Ok(GpuContext {
            device,
            queue,
            adapter: format!("{} ({:?})", info.name, info.backend),
            software: info.device_type == wgpu::DeviceType::Cpu,
            allocated: 0.into(),
            failure,
        })
    }

    /// Wraps the application's own device and queue (e.g. its renderer's).
    pub fn from_device(device: wgpu::Device, queue: wgpu::Queue) -> GpuContext {
        GpuContext {
            device,
            queue,
            adapter: "application device".into(),
            software: false,
            allocated: 0.into(),
            // The application's own error handlers stay in place.
            failure: Default::default(),
        }
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
        let size = (std::mem::size_of::<T>() * len.max(1)).next_multiple_of(4) as u64;
        self.count(size);
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// Copies `len` elements of `T` out of `buffer` (waits for the queue).
    pub(crate) fn read<T: bytemuck::Pod>(&self, buffer: &wgpu::Buffer, len: usize) -> Result<Vec<T>> {
        let size = (std::mem::size_of::<T>() * len) as u64;
        if size == 0 {
            return Ok(Vec::new());
        }
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder =
            self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("readback") });
        encoder.copy_buffer_to_buffer(buffer, 0, &staging, 0, size);
        self.queue.submit([encoder.finish()]);
        let (sender, receiver) = std::sync::mpsc::channel();
        staging.slice(..).map_async(wgpu::MapMode::Read, move |result| {
            let _ = sender.send(result);
        });
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::DeviceLost(format!("waiting for a readback: {e}")))?;
        receiver
            .recv()
            .map_err(|_| Error::DeviceLost("the readback was dropped".into()))?
            .map_err(|e| Error::DeviceLost(format!("mapping a readback buffer: {e}")))?;
        let view = staging
            .get_mapped_range(..)
            .map_err(|e| Error::DeviceLost(format!("reading a mapped buffer: {e}")))?;
        let out = bytemuck::cast_slice(&view).to_vec();
        drop(view);
        staging.unmap();
        Ok(out)
    }
}
