//! Command buffers finished off the recording thread and submitted in order.
//!
//! wgpu encodes recorded passes for the driver in `CommandEncoder::finish`: about 4 us a
//! dispatch on the H200's host (docs/perf/gpu.md), more than recording them. Finished on the
//! thread that records, a long solve's parts reached the device one encoding after another,
//! and the device waited for each. Here a context's workers finish each part while the
//! recording thread records the next, and a part reaches the queue only after every part
//! recorded before it, so the device sees the same commands in the same order.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, mpsc};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

type Job = Box<dyn FnOnce() + Send>;

/// Threads that finish command encoders for the recordings on one context; none where the
/// recording thread finishes its own (`GpuContext::with_encoder_threads`).
pub struct Finishers {
    jobs: Option<mpsc::Sender<Job>>,
    threads: usize,
}

impl Finishers {
    /// `threads` workers (none: finish on the caller's thread). They end when this is dropped.
    pub fn new(threads: usize) -> Finishers {
        if threads == 0 {
            return Finishers { jobs: None, threads };
        }
        let (sender, receiver) = mpsc::channel::<Job>();
        let receiver = Arc::new(Mutex::new(receiver));
        for k in 0..threads {
            let receiver = receiver.clone();
            let spawned = std::thread::Builder::new().name(format!("lively-finish-{k}")).spawn(move || {
                loop {
                    let job = match receiver.lock() {
                        Ok(receiver) => receiver.recv(),
                        Err(_) => return,
                    };
                    let Ok(job) = job else { return };
                    // A job records its own failure; the worker stays for the next.
                    let _ = catch_unwind(AssertUnwindSafe(job));
                }
            });
            if spawned.is_err() {
                // No thread to be had: the recording thread finishes its own.
                return Finishers { jobs: None, threads: 0 };
            }
        }
        Finishers { jobs: Some(sender), threads }
    }

    /// The workers a host with `cores` cores gets: one core left to the recording thread, at
    /// most four (a part's encoding is serial; a few at once keep up with the recording).
    pub fn for_cores(cores: usize) -> usize {
        cores.saturating_sub(1).min(4)
    }

    /// How many workers there are.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `job` on a worker, or here where there is none (or the workers are gone).
    fn run(&self, job: Job) {
        match &self.jobs {
            Some(jobs) => {
                if let Err(mpsc::SendError(job)) = jobs.send(job) {
                    job();
                }
            }
            None => job(),
        }
    }
}

impl Default for Finishers {
    /// As many workers as [`for_cores`](Self::for_cores) gives this host.
    fn default() -> Finishers {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Finishers::new(Finishers::for_cores(cores))
    }
}

/// What the queue needs to take one part: its command encoder and the dispatch parameters
/// that go into the arena just before it (none where they are immediate data).
pub struct Part {
    pub encoder: wgpu::CommandEncoder,
    pub params: Vec<u8>,
}

/// One recording's parts in flight: numbered as they are handed over, submitted by number.
#[derive(Default)]
pub struct Submissions {
    handed: u64,
    order: Arc<Order>,
}

#[derive(Default)]
struct Order {
    state: Mutex<OrderState>,
    submitted: Condvar,
}

#[derive(Default)]
struct OrderState {
    /// The number of the next part to submit.
    next: u64,
    /// Finished parts waiting for an earlier one; `None` where finishing failed.
    finished: BTreeMap<u64, (Option<wgpu::CommandBuffer>, Vec<u8>)>,
    encode: Duration,
    submit: Duration,
    failure: Option<String>,
}

impl Submissions {
    /// Finishes `part` on a worker and submits it after the parts handed over before it.
    pub fn hand_over(
        &mut self,
        finishers: &Finishers,
        queue: &wgpu::Queue,
        arena: &wgpu::Buffer,
        part: Part,
    ) {
        let job = self.job(queue, arena, part);
        finishers.run(Box::new(job));
    }

    /// Finishes `part` here, and returns once it and every part before it are submitted
    /// (with the first failure to finish one, if any did).
    pub fn submit_here(&mut self, queue: &wgpu::Queue, arena: &wgpu::Buffer, part: Part) -> Result<()> {
        self.job(queue, arena, part)();
        self.wait()
    }

    /// Returns once every part handed over is submitted (with the first failure to finish one).
    pub fn wait(&self) -> Result<()> {
        let mut state = self.order.lock();
        while state.next < self.handed {
            state = self.order.submitted.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        match state.failure.take() {
            Some(failure) => Err(Error::DeviceLost(failure)),
            None => Ok(()),
        }
    }

    /// Whether every part handed over is submitted: then the queue's own writes come after them.
    pub fn all_submitted(&self) -> bool {
        self.order.lock().next == self.handed
    }

    /// Host time the parts took to finish, and to reach the queue (their parameters written
    /// and the command buffers submitted), so far.
    pub fn times(&self) -> (Duration, Duration) {
        let state = self.order.lock();
        (state.encode, state.submit)
    }

    fn job(
        &mut self,
        queue: &wgpu::Queue,
        arena: &wgpu::Buffer,
        part: Part,
    ) -> impl FnOnce() + Send + 'static {
        let number = self.handed;
        self.handed += 1;
        let (order, queue, arena) = (self.order.clone(), queue.clone(), arena.clone());
        move || {
            let started = Instant::now();
            let Part { encoder, params } = part;
            let buffer = catch_unwind(AssertUnwindSafe(|| encoder.finish())).ok();
            let encoded = started.elapsed();
            let mut state = order.lock();
            state.encode += encoded;
            state.finished.insert(number, (buffer, params));
            // Whoever finishes the part next in line submits it and every finished one after it,
            // holding the lock, so that the queue takes them in order.
            let started = Instant::now();
            loop {
                let next = state.next;
                let Some((buffer, params)) = state.finished.remove(&next) else { break };
                match buffer {
                    Some(buffer) => {
                        if !params.is_empty() {
                            queue.write_buffer(&arena, 0, &params);
                        }
                        queue.submit([buffer]);
                    }
                    None => {
                        state
                            .failure
                            .get_or_insert_with(|| format!("finishing command buffer {next} failed"));
                    }
                }
                state.next += 1;
            }
            state.submit += started.elapsed();
            drop(state);
            order.submitted.notify_all();
        }
    }
}

impl Order {
    fn lock(&self) -> MutexGuard<'_, OrderState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::super::buffers::BufferSpan;
    use super::super::recording::Recording;
    use super::super::test_support::fresh_context;

    /// Parts of uneven length, finished by four workers, reach the queue in the order they were
    /// recorded, and so do the uploads between them: part k copies a cell into the k-th place
    /// of a log, then the host writes k into the cell. In order, the log reads 0, 1, ..., and a
    /// part taken before an earlier one, or an upload ahead of a part, leaves another number.
    #[test]
    fn parts_finished_on_workers_reach_the_queue_in_order() {
        let Some(context) = fresh_context() else { return };
        let context = context.with_encoder_threads(4);
        let parts = 96u32;
        let storage = |label, bytes| {
            BufferSpan::whole(context.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }))
        };
        let (cell, log, scratch) =
            (storage("cell", 4), storage("log", 4 * parts as u64), storage("scratch", 4));
        let mut recording = Recording::new(&context, 16);
        recording.upload(&context, &cell, bytemuck::bytes_of(&0u32));
        for k in 0..parts {
            // Uneven work to finish, so that the workers end out of turn.
            for _ in 0..(k * 37) % 11 * 40 {
                recording.copy(&context, &cell, &scratch, 0, 4);
            }
            recording.copy(&context, &cell, &log, 4 * k as u64, 4);
            recording.submit(&context);
            recording.upload(&context, &cell, bytemuck::bytes_of(&(k + 1)));
            if k % 3 == 0 {
                recording.submit(&context);
            }
        }
        let logged: Vec<u32> = recording.read_buffer(&context, &log, parts as usize).unwrap();
        assert_eq!(logged, (0..parts).collect::<Vec<_>>());
        let last: Vec<u32> = recording.read_buffer(&context, &cell, 1).unwrap();
        assert_eq!(last, [parts]);
        assert!(recording.counts().submissions >= parts as u64);
    }
}
