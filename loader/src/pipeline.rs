//! The internal contract between [`crate::Loader`] and a backend (CPU in `cpu.rs`, GPU in
//! `loader/src/gpu/`): what a backend is given for an epoch ([`EpochPlan`]) and what it hands
//! back ([`EpochStream`]). Backends import this module, never the builder or the loader.
//!
//! # Contract
//!
//! - The loader computes this rank's order for the epoch with the [`crate::Sampler`] and
//!   passes it in an [`EpochPlan`] to [`Pipeline::start_epoch`].
//! - The backend produces batches `plan.start_batch .. plan.num_batches` of
//!   `plan.order` and returns them **in order** from [`EpochStream::next_batch`] (blocking),
//!   then `None`. Batch `k` holds the samples `plan.order[plan.batch_range(k)]`; a sample that
//!   fails is replaced through [`EpochPlan::replace_failed`] (which notes it; the consumer
//!   side counts it when its batch is handed out)
//!   unless `plan.on_error` is
//!   [`crate::OnError::Error`], in which case batch `k` is an `Err` naming the record and the
//!   stream continues with batch `k + 1`.
//! - Per-sample crop/flip come from [`crate::Transform::params`] with `plan.seed`,
//!   `plan.epoch` and [`EpochPlan::draw_key`]`(pos, attempt)`: the sample's place in the
//!   epoch (and which replacement it is), not the record, so that a record used twice in
//!   an epoch gets two draws.
//! - The backend keeps at most `prefetch` batches in flight, records the read / decode /
//!   transform / h2d stages into the shared metrics, and reports how many finished batches
//!   are waiting ([`EpochStream::ready`]).
//! - Dropping the stream stops production promptly (well under a second): no thread may stay
//!   blocked on a consumer that is gone. Dropping the backend joins its threads.
//! - The loader, not the backend, measures consumer wait, handoff, elapsed time and the resume
//!   position.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::batch::Batch;
use crate::config::OnError;
use crate::error::LoaderError;
use crate::metrics::Metrics;
use crate::sampler::{Permutation, Rng};
use crate::transform::DrawKey;

/// Replacements for one bad sample drawn at random from the rank's share before the
/// scan ([`EpochPlan::replacement`]). Bad records cluster (a damaged region of a shard),
/// so a neighbour in the order is likely bad too; a random pick is bad only with the
/// share's bad fraction `f`, and 32 distinct ones all fail with probability under `f³²`
/// (10⁻⁹ at half the share bad).
const RANDOM_PICKS: u32 = 32;

/// Tags the replacement draws, so they are independent of the order and crop draws.
const STREAM_REPLACE: u64 = 0x7265_706c_6163_0003;

/// What to produce for one epoch on this rank.
#[derive(Debug, Clone)]
pub(crate) struct EpochPlan {
    /// The epoch number (seeds the transforms and replacements).
    pub(crate) epoch: u64,
    /// The loader's seed (seeds the transforms and replacements together with `epoch`).
    pub(crate) seed: u64,
    /// This rank's sample indices for the epoch, in order (not empty).
    pub(crate) order: Arc<Vec<u64>>,
    /// Position in the epoch's global order of `order[0]`
    /// ([`crate::Sampler::global_position`]`(0)`).
    pub(crate) global_offset: u64,
    /// Samples the epoch draws from (the last replacements scan all of them): the
    /// dataset's records, or the indices a subset loader was given.
    pub(crate) dataset_len: u64,
    /// The records of a subset loader ([`crate::LoaderBuilder::indices`]): scan position
    /// `i` is record `indices[i]`; `None`, record `i`.
    pub(crate) indices: Option<Arc<[u64]>>,
    /// Full batch size; the last batch may be shorter.
    pub(crate) batch_size: u64,
    /// Batches in the epoch.
    pub(crate) num_batches: u64,
    /// First batch to produce (`> 0` when resuming mid-epoch).
    pub(crate) start_batch: u64,
    /// Replace bad records or fail the batch.
    pub(crate) on_error: OnError,
    /// The bad records met while building this epoch's batches (shared with the
    /// consumer side, which counts them as their batches are handed out).
    pub(crate) bad: Arc<BadLog>,
}

impl EpochPlan {
    /// Positions in `order` of batch `batch`.
    pub(crate) fn batch_range(&self, batch: u64) -> Range<usize> {
        let start = (batch * self.batch_size) as usize;
        start..(start + self.batch_size as usize).min(self.order.len())
    }

    /// The key of the crop and flip draw of the record tried at position `pos` after
    /// `attempt` failures there: the position in the epoch's global order, and the attempt.
    pub(crate) fn draw_key(&self, pos: usize, attempt: u32) -> DrawKey {
        DrawKey {
            position: self.global_offset + pos as u64,
            attempt,
        }
    }

    /// Attempts at one position before its batch fails: the random picks, then a scan of
    /// the whole dataset, so a batch fails only when every record is bad. A rank's share
    /// alone would not do: with as many ranks as records (a small validation set) it is
    /// one record, and its rank alone would fail while the others wait in a collective.
    fn max_attempts(&self) -> u32 {
        let records = u32::try_from(self.dataset_len).unwrap_or(u32::MAX);
        RANDOM_PICKS.saturating_add(records)
    }

    /// The sample that stands in for position `pos` after `attempt` (≥ 1) failures there.
    /// The first [`RANDOM_PICKS`] are picks over this rank's order outside the batch
    /// holding `pos`, then the dataset's records are scanned from a random start, wrapping
    /// around, until every one has been tried. The picks of a batch are the first places of
    /// one random permutation of those outside it, handed out by (attempt, position), so
    /// no two of the batch's picks, at any positions and attempts, are the same sample,
    /// and none is one of the batch's own samples: a batch holds a record twice only when
    /// the order itself does (padding) or the share outside the batch is exhausted. Each is
    /// drawn from `(seed, epoch, the batch's global position, batch size, position,
    /// attempt)` alone, so the replacement depends neither on thread timing nor on the
    /// number of workers, and a resumed epoch replaces as the uninterrupted one did.
    pub(crate) fn replacement(&self, pos: usize, attempt: u32) -> u64 {
        let position = self.global_offset + pos as u64;
        if attempt <= RANDOM_PICKS {
            let batch = self.batch_range(pos as u64 / self.batch_size.max(1));
            let outside = (self.order.len() - batch.len()) as u64;
            if outside == 0 {
                // The share is this one batch: any pick repeats one of its samples.
                let pick = Rng::new(&[
                    self.seed,
                    self.epoch,
                    position,
                    u64::from(attempt),
                    STREAM_REPLACE,
                ])
                .below(self.order.len() as u64);
                return self.order[pick as usize];
            }
            let draw = (pos - batch.start) as u64 + self.batch_size * u64::from(attempt - 1);
            let batch_position = self.global_offset + batch.start as u64;
            let picks = Permutation::new(
                &[self.seed, self.epoch, batch_position, STREAM_REPLACE],
                outside,
            );
            let mut pick = picks.at(draw % outside) as usize;
            if pick >= batch.start {
                pick += batch.len();
            }
            return self.order[pick];
        }
        let len = self.dataset_len.max(1);
        let start = Rng::new(&[self.seed, self.epoch, position, STREAM_REPLACE]).below(len);
        let at = (start + u64::from(attempt - RANDOM_PICKS - 1)) % len;
        // A subset loader scans its own records: a validation split must not be padded
        // with training images.
        self.indices
            .as_ref()
            .map_or(at, |indices| indices[at as usize])
    }

    /// Notes that record `*current`, tried for position `pos`, failed with `error`, and
    /// moves `*current` to the next replacement (`*attempt` counts them), or returns the
    /// error that ends the batch: [`OnError::Error`]; an error that is not the record's
    /// (a reader that cannot open, a device error: nothing is noted, another record would
    /// fail alike); or [`LoaderError::TooManyBadRecords`] once every record was tried.
    /// A dataset found all bad fails the positions that meet a bad record after that at
    /// once, instead of scanning it again for each.
    pub(crate) fn replace_failed(
        &self,
        pos: usize,
        error: LoaderError,
        attempt: &mut u32,
        current: &mut u64,
    ) -> Result<(), LoaderError> {
        if !is_bad_record(&error) {
            return Err(error);
        }
        self.note_bad(pos, *current, &error);
        if self.on_error == OnError::Error {
            return Err(error);
        }
        let all_bad = self.bad.exhausted.load(Ordering::Acquire);
        let failed = *current;
        loop {
            *attempt += 1;
            if all_bad || *attempt > self.max_attempts() {
                self.bad.exhausted.store(true, Ordering::Release);
                return Err(LoaderError::TooManyBadRecords {
                    index: self.order[pos],
                    attempts: *attempt - 1,
                });
            }
            // The record that just failed would fail again (and be counted again): in a
            // share of one record every random pick is that record.
            let next = self.replacement(pos, *attempt);
            if next != failed {
                *current = next;
                return Ok(());
            }
        }
    }

    /// Notes that record `index`, tried for position `pos`, failed with `error`. It is
    /// counted in [`crate::Stats::bad_records`] (and logged) when the batch holding
    /// `pos` is handed out, not before.
    fn note_bad(&self, pos: usize, index: u64, error: &LoaderError) {
        let entry = BadEntry {
            batch: pos as u64 / self.batch_size.max(1),
            index,
            error: error.to_string(),
        };
        self.bad
            .entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(entry);
    }
}

/// Bad records met while an epoch's batches are built, held until their batch is
/// handed out: [`crate::Stats::bad_records`] counts a bad record only when the consumer
/// gets the batch it was met in (replaced, or as that batch's error), so batches built
/// and never handed out (an early start that is discarded, the batches prefetched when
/// an epoch is dropped mid-way) count nothing, and no record counts twice.
#[derive(Debug, Default)]
pub(crate) struct BadLog {
    entries: Mutex<Vec<BadEntry>>,
    /// Set when a position tried every record of the dataset and all failed.
    exhausted: AtomicBool,
    /// The dataset, whose source map names the input each logged bad record came from.
    dataset: Option<stoker_formats::Dataset>,
}

/// Whether `error` is a bad record (replaced under [`OnError::Replace`]) rather than a
/// failure of the machinery reading it.
fn is_bad_record(error: &LoaderError) -> bool {
    matches!(
        error,
        LoaderError::Read { .. } | LoaderError::Decode { .. } | LoaderError::UnusableRecord { .. }
    )
}

#[derive(Debug)]
struct BadEntry {
    batch: u64,
    index: u64,
    error: String,
}

/// Distinct bad records logged one by one; after them a line now and then.
const LOGGED_BAD_RECORDS: u64 = 20;

impl BadLog {
    /// A log for the records of `dataset`.
    pub(crate) fn new(dataset: &stoker_formats::Dataset) -> BadLog {
        BadLog {
            dataset: Some(dataset.clone()),
            ..BadLog::default()
        }
    }

    /// The input record `index` came from, for a log line (kept to one line: a name with
    /// a newline forged a log line): its name in the dataset's source map, or why there
    /// is none.
    fn source(&self, index: u64) -> String {
        match self.dataset.as_ref().map(|d| d.source_of(index)) {
            Some(Ok(Some(path))) => {
                stoker_formats::one_line(&stoker_formats::lossless_text(path.as_os_str()))
            }
            Some(Ok(None)) | None => "unknown (the dataset has no source map)".to_owned(),
            Some(Err(e)) => format!("unknown ({e})"),
        }
    }

    /// Counts (and logs, the first time an index is seen, for the first
    /// [`LOGGED_BAD_RECORDS`]) the bad records of batch `batch`, which is being handed out.
    pub(crate) fn hand_out(&self, batch: u64, epoch: u64, on_error: OnError, metrics: &Metrics) {
        let handed: Vec<BadEntry> = {
            let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            if entries.is_empty() {
                return;
            }
            let (handed, kept) = std::mem::take(&mut *entries)
                .into_iter()
                .partition(|e| e.batch == batch);
            *entries = kept;
            handed
        };
        for e in handed {
            let Some(distinct) = metrics.bad_record_distinct(e.index) else {
                continue;
            };
            // The first ones by name, then a line at each power of two: a shard lost under
            // a running epoch makes every one of its records bad, which would otherwise be
            // a line each. All of them are counted in the stats.
            if distinct > LOGGED_BAD_RECORDS {
                if distinct.is_power_of_two() {
                    tracing::warn!(distinct, latest = e.index, epoch, error = %e.error, "bad records so far (counted in the stats; no longer logged one by one)");
                }
                continue;
            }
            // Which input it was, so that it can be found and mended: only for the ones
            // logged by name, each lookup reading the source map once.
            let source = self.source(e.index);
            match on_error {
                OnError::Replace => {
                    tracing::warn!(index = e.index, %source, epoch, error = %e.error, "bad record replaced by another sample of the epoch")
                }
                OnError::Error => {
                    tracing::warn!(index = e.index, %source, epoch, error = %e.error, "bad record: its batch is an error (the loader's on_error setting)")
                }
            }
        }
    }
}

/// A backend: builds batches for an epoch.
pub(crate) trait Pipeline: Send + Sync {
    /// Starts producing `plan`'s batches.
    ///
    /// # Errors
    ///
    /// Whatever prevents the epoch from starting (the backend is unusable).
    fn start_epoch(&self, plan: EpochPlan) -> Result<Box<dyn EpochStream + Send>, LoaderError>;
}

/// What a wait for the next batch of an epoch came to ([`crate::Epoch::next_until`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum Next {
    /// The next batch (or its error; iteration may continue).
    Ready(Result<Batch, LoaderError>),
    /// The deadline passed first; ask again.
    Pending,
    /// The epoch has no more batches.
    Done,
}

/// The batches of one epoch, in order.
pub(crate) trait EpochStream {
    /// The next batch, waiting for it until `deadline` (for ever with `None`):
    /// [`Next::Pending`] when the deadline passed, or at once when the stream has just
    /// become [`EpochStream::all_claimed`]; [`Next::Done`] after the last one.
    fn next_batch(&mut self, deadline: Option<Instant>) -> Next;
    /// Finished batches waiting right now (queue occupancy).
    fn ready(&self) -> u64;
    /// Whether the workers have taken up every batch of the epoch, so that starting the
    /// next epoch now keeps idle workers busy without delaying this one's batches.
    fn all_claimed(&self) -> bool {
        false
    }
}

/// The error of a worker (`thread`) whose shard reader could not be opened (`reason`): not a
/// bad record, the worker cannot read at all.
pub(crate) fn reader_unavailable(thread: &str, reason: &str) -> LoaderError {
    LoaderError::Thread {
        thread: thread.to_owned(),
        reason: format!("cannot open a shard reader: {reason}"),
    }
}

/// The message of a caught panic (a worker's or the producer's), for
/// [`LoaderError::Thread`].
pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        format!("panicked: {s}")
    } else if let Some(s) = panic.downcast_ref::<String>() {
        format!("panicked: {s}")
    } else {
        "panicked".into()
    }
}

/// Puts the SIGBUS handler that turns a shard read fault into a bad record back in front,
/// before a record's reads: a library that installs its own after the dataset was opened
/// (Python's `faulthandler.enable()`, a DataLoader worker's, a user's `signal.signal`)
/// would make a shard cut short while it is read kill the process. Per record, not per
/// batch: a batch already being read when the handler was replaced would read the rest of
/// its records unguarded. Checked at most once a millisecond per thread
/// ([`stoker_formats::refresh_read_fault_handler`]).
pub(crate) fn guard_reads() {
    stoker_formats::refresh_read_fault_handler();
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    /// A shard lost mid-epoch makes thousands of records bad at once: the first 20 are
    /// logged by index, then one line per power of two; every one is counted.
    #[test]
    fn many_bad_records_log_a_few_lines_and_count_them_all() {
        let lines = stoker_testdata::Captured::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let log = BadLog::default();
        let metrics = Metrics::default();
        log.entries
            .lock()
            .unwrap()
            .extend((0..1000).map(|index| BadEntry {
                batch: 0,
                index,
                error: "shard unreadable".into(),
            }));
        tracing::subscriber::with_default(subscriber, || {
            log.hand_out(0, 1, OnError::Replace, &metrics);
        });
        let text = lines.text();
        assert_eq!(text.lines().count(), 20 + 5, "{text}"); // then 32, 64, ..., 512
        assert!(text.contains("distinct=512"), "{text}");
        let stats = metrics.snapshot();
        assert_eq!((stats.bad_records, stats.bad_distinct), (1000, 1000));
    }

    fn plan(len: u64, global_offset: u64) -> EpochPlan {
        EpochPlan {
            epoch: 2,
            seed: 9,
            order: Arc::new((0..len).map(|i| i * 3 % len).collect()),
            global_offset,
            dataset_len: len,
            indices: None,
            batch_size: 4,
            num_batches: len.div_ceil(4),
            start_batch: 0,
            on_error: OnError::Replace,
            bad: Arc::default(),
        }
    }

    fn bad(index: u64) -> LoaderError {
        LoaderError::UnusableRecord {
            index,
            reason: "test".into(),
        }
    }

    /// A few draws of each kind `DRAWS_VERSION` covers, pinned: a change to the rules
    /// fails here, and must raise `DRAWS_VERSION` (states saved under the old rules are
    /// then refused instead of resumed with other samples) before these are updated.
    #[test]
    fn the_draws_are_those_of_draws_version_1() {
        use crate::resume::DRAWS_VERSION;
        use crate::sampler::{Sampler, Shuffle};
        use crate::transform::{DrawKey, Transform};
        assert_eq!(
            DRAWS_VERSION, 1,
            "update the pinned draws below with the version"
        );
        let order = |shuffle| {
            Sampler::new(1000, shuffle, 1, 3, 16, false)
                .unwrap()
                .order(3)
        };
        let global = order(Shuffle::Global { seed: 7 });
        let quasi = order(Shuffle::Quasi { seed: 7, block: 8 });
        let crop = Transform::random_resized_crop(224).hflip(0.5);
        let crops: Vec<_> = (0..4)
            .map(|at| {
                let p = crop.params(9, 2, DrawKey::at(at), 500, 375);
                (p.crop, p.flip)
            })
            .collect();
        let p = plan(50, 100);
        let replacements: Vec<u64> = [1, 2, RANDOM_PICKS, RANDOM_PICKS + 1, RANDOM_PICKS + 7]
            .into_iter()
            .map(|a| p.replacement(7, a))
            .collect();
        assert_eq!(global[..8], [308, 901, 201, 104, 266, 683, 621, 528]);
        assert_eq!(quasi[..8], [246, 764, 992, 762, 994, 480, 453, 766]);
        assert_eq!(
            crops,
            [
                ((85, 169, 265, 203), true),
                ((36, 2, 380, 358), false),
                ((145, 21, 298, 332), true),
                ((246, 8, 193, 257), true)
            ]
        );
        assert_eq!(replacements, [46, 22, 45, 31, 37]);
    }

    #[test]
    fn replacements_are_random_picks_then_a_scan_of_the_whole_dataset() {
        let p = plan(50, 100);
        // Random picks: spread over the share, not the next neighbours.
        let picks: HashSet<u64> = (1..=RANDOM_PICKS).map(|a| p.replacement(7, a)).collect();
        assert!(picks.len() > 16, "{picks:?}");
        assert_ne!(p.replacement(7, 1), p.order[8]);
        // Then every record of the dataset (here: the share) once.
        let scan: HashSet<u64> = (RANDOM_PICKS + 1..=p.max_attempts())
            .map(|a| p.replacement(7, a))
            .collect();
        assert_eq!(scan, p.order.iter().copied().collect());
        // A pure function of (seed, epoch, global position, attempt).
        assert_eq!(p.replacement(7, 3), plan(50, 100).replacement(7, 3));
        let other_rank = plan(50, 150);
        let differ = (1..=RANDOM_PICKS)
            .filter(|&a| p.replacement(7, a) != other_rank.replacement(7, a))
            .count();
        assert!(differ > 16, "{differ} of {RANDOM_PICKS} picks differ");
    }

    #[test]
    fn a_batch_never_picks_a_sample_twice_nor_one_of_its_own() {
        let p = plan(1000, 40);
        for batch in [0, 7, 249] {
            let range = p.batch_range(batch);
            let own: HashSet<u64> = p.order[range.clone()].iter().copied().collect();
            let mut picks = HashSet::new();
            for pos in range {
                for attempt in 1..=RANDOM_PICKS {
                    let pick = p.replacement(pos, attempt);
                    assert!(!own.contains(&pick), "batch {batch}: {pick} is its own");
                    assert!(picks.insert(pick), "batch {batch}: {pick} twice");
                }
            }
        }
        // Spread over the share (a permutation's first places, not a stride): the 128
        // picks of a batch cover all four quarters of the order.
        let quarters: HashSet<usize> = p
            .batch_range(3)
            .flat_map(|pos| (1..=RANDOM_PICKS).map(move |a| (pos, a)))
            .map(|(pos, a)| {
                p.order
                    .iter()
                    .position(|&x| x == p.replacement(pos, a))
                    .unwrap()
                    / 250
            })
            .collect();
        assert_eq!(quarters.len(), 4);
        // A share smaller than a batch's picks wraps around, still never the batch's own.
        let small = plan(13, 0);
        let own: HashSet<u64> = small.order[0..4].iter().copied().collect();
        assert!((0..4)
            .flat_map(|pos| (1..=RANDOM_PICKS).map(move |a| (pos, a)))
            .all(|(pos, a)| !own.contains(&small.replacement(pos, a))));
    }

    #[test]
    fn a_position_fails_only_after_trying_every_record_and_the_next_fail_at_once() {
        let p = plan(10, 0);
        let (mut attempt, mut current) = (0, p.order[0]);
        let mut tried = HashSet::from([current]);
        let err = loop {
            match p.replace_failed(0, bad(current), &mut attempt, &mut current) {
                Ok(()) => {
                    tried.insert(current);
                }
                Err(e) => break e,
            }
        };
        // Every record was tried before the batch failed.
        assert_eq!(tried.len(), 10);
        assert!(
            matches!(err, LoaderError::TooManyBadRecords { index: 0, attempts } if attempts == RANDOM_PICKS + 10),
            "{err}"
        );
        let (mut attempt, mut current) = (0, p.order[5]);
        let err = p
            .replace_failed(5, bad(current), &mut attempt, &mut current)
            .unwrap_err();
        assert!(
            matches!(err, LoaderError::TooManyBadRecords { attempts: 0, .. }),
            "{err}"
        );
        // Neither message counts the tries as records, nor says none were tried.
        let text = err.to_string();
        assert!(
            text.contains("an earlier position of this epoch found that") && !text.contains(" 0 "),
            "{text}"
        );
    }

    #[test]
    fn a_share_of_one_bad_record_is_replaced_from_the_rest_of_the_dataset() {
        // 8 ranks over 3 records: this rank's share is record 1 alone, and it is bad.
        let p = EpochPlan {
            order: Arc::new(vec![1]),
            dataset_len: 3,
            indices: None,
            ..plan(1, 5)
        };
        let (mut attempt, mut current) = (0, 1);
        // One failure: the random picks (all record 1 again) are passed over, not retried.
        p.replace_failed(0, bad(current), &mut attempt, &mut current)
            .unwrap();
        assert!(current == 0 || current == 2, "{current}");
        assert!(attempt > RANDOM_PICKS, "{attempt}");
        assert_eq!(p.bad.entries.lock().unwrap().len(), 1);
    }

    #[test]
    fn a_subset_loader_scans_its_own_records_for_replacements() {
        // A validation split of records 10, 20 and 30 of a larger dataset, over 8 ranks:
        // this rank's share is record 20 alone, and it is bad.
        let p = EpochPlan {
            order: Arc::new(vec![20]),
            dataset_len: 3,
            indices: Some(Arc::from(vec![10, 20, 30])),
            ..plan(1, 5)
        };
        for pos_attempt in RANDOM_PICKS + 1..RANDOM_PICKS + 4 {
            let r = p.replacement(0, pos_attempt);
            assert!(
                [10, 20, 30].contains(&r),
                "{r} is not one of the subset's records"
            );
        }
        let (mut attempt, mut current) = (0, 20);
        p.replace_failed(0, bad(current), &mut attempt, &mut current)
            .unwrap();
        assert!(current == 10 || current == 30, "{current}");
    }

    #[test]
    fn only_bad_records_are_replaced_and_noted() {
        let p = plan(10, 0);
        let (mut attempt, mut current) = (0, 4);
        // A reader that cannot open; memory the process could not give (which record
        // stood in would depend on timing): neither is the record's fault.
        for error in [
            reader_unavailable("stoker-test", "gone"),
            LoaderError::short_of_memory(4, 1 << 20, "its pixels"),
        ] {
            let err = p
                .replace_failed(1, error, &mut attempt, &mut current)
                .unwrap_err();
            assert!(
                matches!(
                    err,
                    LoaderError::Thread { .. } | LoaderError::OutOfMemory { .. }
                ),
                "{err}"
            );
            assert_eq!((attempt, current), (0, 4));
            assert!(p.bad.entries.lock().unwrap().is_empty());
        }
        p.replace_failed(1, bad(4), &mut attempt, &mut current)
            .unwrap();
        assert_eq!(attempt, 1);
        assert_eq!(current, p.replacement(1, 1));
        assert_eq!(
            p.draw_key(1, attempt),
            DrawKey {
                position: 1,
                attempt: 1
            }
        );
        assert_eq!(p.bad.entries.lock().unwrap().len(), 1);
    }
}
