//! The consumer side of a GPU epoch: the results channel, the producer thread
//! that fills it, and the epoch's utilization sampler. Dropping the epoch stops
//! and joins the producer and accounts the GPU time of slots already back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::Receiver;

use super::nvml::Sampler;
use super::producer::produce;
use super::shared::{reuse_slot, Shared};
use crate::batch::{Batch, Images};
use crate::error::LoaderError;
use crate::pipeline::{EpochPlan, EpochStream, Next};

/// The consumer side of one GPU epoch.
pub(crate) struct GpuEpoch {
    results: Receiver<Result<Batch, LoaderError>>,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    /// GPU / JPEG-engine / CPU utilization over the epoch (NVML where available).
    sampler: Option<Sampler>,
    producer: Option<JoinHandle<()>>,
    next: u64,
    end: u64,
}

impl GpuEpoch {
    pub(crate) fn start(shared: Arc<Shared>, plan: EpochPlan) -> Result<GpuEpoch, LoaderError> {
        let (tx, rx) = crossbeam_channel::bounded(shared.prefetch.max(1));
        let stop = Arc::new(AtomicBool::new(false));
        let next = plan.start_batch;
        let end = plan.num_batches;
        let producer = {
            let stop = Arc::clone(&stop);
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("stoker-gpu".into())
                .spawn(move || produce(&shared, &plan, &tx, &stop))
                .map_err(|e| LoaderError::thread_start("stoker-gpu", e))?
        };
        let sampler = Sampler::start_for(&shared.ctx, Some(Arc::clone(&shared.metrics)));
        Ok(GpuEpoch {
            results: rx,
            shared,
            stop,
            sampler,
            producer: Some(producer),
            next,
            end,
        })
    }
}

impl EpochStream for GpuEpoch {
    fn next_batch(&mut self, deadline: Option<Instant>) -> Next {
        if self.next >= self.end {
            return Next::Done;
        }
        let received = match deadline {
            None => self.results.recv().map_err(|_| false),
            Some(d) => self.results.recv_deadline(d).map_err(|e| e.is_timeout()),
        };
        match received {
            Err(true) => Next::Pending,
            Ok(item) => {
                self.next += 1;
                Next::Ready(match (item, &self.shared.consumer_stream) {
                    (Ok(batch), Some(stream)) => match &batch.images {
                        // GPU-side wait on the user's stream (`LoaderBuilder::cuda_stream`).
                        Images::Cuda(images) => images.wait(stream).map(|()| batch),
                        Images::Host(_) => Ok(batch),
                    },
                    (item, _) => item,
                })
            }
            Err(false) => {
                // The producer is gone before the end: report it once, then end.
                self.next = self.end;
                Next::Ready(Err(LoaderError::Thread {
                    thread: "stoker-gpu".into(),
                    reason: "the GPU producer stopped before the end of the epoch".into(),
                }))
            }
        }
    }

    fn ready(&self) -> u64 {
        self.results.len() as u64
    }
}

impl Drop for GpuEpoch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Unblock a producer waiting to send: drop our receiver first.
        let (_, dead) = crossbeam_channel::bounded(0);
        drop(std::mem::replace(&mut self.results, dead));
        if let Some(handle) = self.producer.take() {
            let _ = handle.join();
        }
        account_finished(&self.shared);
        if let Some(sampler) = self.sampler.take() {
            let u = sampler.utilization();
            tracing::info!(verdict = %u.verdict(), "GPU loader epoch utilization");
        }
    }
}

/// Accounts the GPU time of returned slots whose work has completed, without
/// blocking (the producer accounts the others when it reuses them).
fn account_finished(shared: &Shared) {
    let mut back = Vec::new();
    while let Ok(mut slot) = shared.free_rx.try_recv() {
        if slot.in_flight.is_some() && slot.ready.try_is_complete().unwrap_or(false) {
            // Accounting only: nothing here could act on a failure.
            let _ = reuse_slot(shared, &mut slot);
        }
        back.push(slot);
    }
    for slot in back {
        let _ = shared.free_tx.try_send(slot);
    }
}
