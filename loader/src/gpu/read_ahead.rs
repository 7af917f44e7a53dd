//! The read-ahead thread of the nvJPEG route: reads, CRC-checks and probes the
//! records of batch k+1 while the producer decodes batch k, one batch ahead at
//! most; the payloads stay borrowed from the thread's memory-mapped reader.

use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_channel::Sender;
use stoker_formats::DatasetReader;

use super::records::{check_record, Checked};
use super::shared::Shared;
use crate::error::LoaderError;
use crate::pipeline::EpochPlan;

/// What the read-ahead prepared for one batch.
pub(super) enum Prepared<'r> {
    /// One entry per position of the batch, in order.
    Records(Vec<Result<Checked<'r>, LoaderError>>),
    /// The read-ahead is gone (or out of step): the producer reads the batch itself.
    Missing,
    /// The epoch is being stopped.
    Stopped,
}

/// The read-ahead thread of the nvJPEG route: checks the records of each batch
/// of the plan in order and hands them over, one batch ahead at most.
pub(super) fn read_ahead<'r>(
    shared: &Shared,
    plan: &EpochPlan,
    reader: &'r DatasetReader,
    stop: &AtomicBool,
    out: &Sender<(u64, Prepared<'r>)>,
) {
    let limits = shared.limits;
    for k in plan.start_batch..plan.num_batches {
        if stop.load(Ordering::Acquire) {
            return;
        }
        let records = plan
            .batch_range(k)
            .map(|pos| check_record(shared, reader, plan.order[pos], &limits))
            .collect();
        // Fails once the producer is done (its receiver dropped).
        if out.send((k, Prepared::Records(records))).is_err() {
            return;
        }
    }
}
