//! The loader's life as a training script lives it, in a seeded random order: epochs asked
//! for in order and out of it, left early, batches kept past their iterator, waits with a
//! deadline, checkpoints saved and loaded into the same loader or a new one, the early start
//! cancelled, the counters read and reset, the loader rebuilt with other worker and
//! prefetch settings. Every batch handed out must be the batch a plain loader gives at that
//! epoch and position; every start must follow the documented resume rules; nothing may
//! hang. The other tests check each of these alone; their interleavings are where an
//! early-started epoch or a drawn-ahead order could be handed to the wrong call.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use common::{fingerprint, sample_dataset};
use stoker_formats::seeded::Rng;
use stoker_formats::Dataset;
use stoker_loader::{
    Batch, Loader, LoaderBuilder, LoaderError, LoaderState, Next, Output, Shuffle, Transform,
};

/// Epochs the script visits: enough for early starts, out-of-order calls and resumes
/// across epoch ends.
const EPOCHS: u64 = 5;

/// Operations in one run.
const OPERATIONS: usize = 400;

/// (dataset indices, labels, pixel fingerprint) of a batch.
type Seen = (Vec<u64>, Vec<u32>, u64);

fn seen(batch: &Batch) -> Seen {
    (
        batch.indices.clone(),
        batch.labels.clone(),
        fingerprint(batch.images.as_u8().expect("u8 output")),
    )
}

/// The loader's settings that decide its batches; `workers`, `prefetch` and the early start
/// do not.
fn builder(ds: &Dataset) -> LoaderBuilder {
    Loader::builder(ds.clone())
        .batch_size(4)
        .shuffle(Shuffle::Global { seed: 23 })
        .transform(Transform::random_resized_crop(16).hflip(0.5))
        .output(Output::U8Nhwc)
}

/// Every batch of epochs `0..EPOCHS` from a loader of one worker without an early start.
fn reference(ds: &Dataset) -> Vec<Vec<Seen>> {
    let loader = builder(ds)
        .workers(1)
        .prefetch_next_epoch(false)
        .build()
        .unwrap();
    (0..EPOCHS)
        .map(|e| {
            loader
                .epoch(e)
                .map(|b| seen(&b.expect("a batch")))
                .collect()
        })
        .collect()
}

/// The loader under test and what the script knows of it.
struct Script {
    ds: Dataset,
    want: Vec<Vec<Seen>>,
    loader: Loader,
    /// The state loaded and not yet taken by an epoch, as the docs of `load_state` say.
    pending: Option<LoaderState>,
    /// The last epoch started, for asking for the next one as a training loop does.
    last: Option<u64>,
    /// Batches kept past their iterator (a consumer that holds on to a few).
    kept: Vec<(u64, u64, Batch)>,
    rng: Rng,
    log: Vec<String>,
    /// Starts refused by a pending state, and batches compared with the plain loader's.
    refused: u64,
    checked: u64,
}

impl Script {
    fn batches(&self) -> u64 {
        self.want[0].len() as u64
    }

    /// A loader with random worker, prefetch and early-start settings.
    fn build(&mut self, resume: Option<LoaderState>) -> Loader {
        let workers = 1 + self.rng.below(3) as usize;
        let prefetch = 1 + self.rng.below(4) as usize;
        let early = self.rng.below(4) != 0;
        self.log.push(format!(
            "build workers={workers} prefetch={prefetch} early={early} resume={:?}",
            resume.map(|s| (s.epoch, s.position))
        ));
        let mut b = builder(&self.ds)
            .workers(workers)
            .prefetch(prefetch)
            .prefetch_next_epoch(early);
        if let Some(state) = resume {
            b = b.resume(state);
        }
        b.build().unwrap()
    }

    /// The first batch `epoch` yields now, or `None` for a start the pending state refuses
    /// (`LoaderError::ResumeEpoch`); the rules of `Loader::load_state`.
    fn expected_start(&self, epoch: u64) -> Option<u64> {
        match self.pending {
            None => Some(0),
            Some(s) if s.epoch == epoch => Some(s.position),
            Some(s) if s.epoch + 1 == epoch && s.position > 0 => Some(0),
            Some(_) => None,
        }
    }

    fn check(&self, epoch: u64, batch: &Batch) {
        let want = &self.want[epoch as usize][batch.index as usize];
        assert!(
            &seen(batch) == want,
            "epoch {epoch} batch {} differs from the plain loader's; script so far: {:#?}",
            batch.index,
            self.log
        );
    }

    /// Asks for an epoch (mostly the next one) and takes some of its batches.
    fn run_epoch(&mut self) {
        // Mostly what a training loop asks for: the epoch a loaded state continues (or the
        // one after it), else the one after the last; now and then any epoch.
        let usual = match self.pending {
            Some(s) => s.epoch + self.rng.below(2),
            None => self.last.map_or(0, |e| e + 1),
        };
        let epoch = if usual < EPOCHS && self.rng.below(4) != 0 {
            usual
        } else {
            self.rng.below(EPOCHS)
        };
        let take = self.rng.below(self.batches() + 2);
        let keep = self.rng.below(3) == 0;
        let deadline = self.rng.below(3) == 0;
        self.log.push(format!(
            "epoch {epoch} take {take} keep {keep} deadline {deadline}"
        ));
        let start = self.expected_start(epoch);
        let mut it = self.loader.epoch(epoch);
        let Some(start) = start else {
            match it.next() {
                Some(Err(LoaderError::ResumeEpoch { requested, .. })) => {
                    assert_eq!(requested, epoch);
                    self.refused += 1;
                }
                other => panic!(
                    "epoch {epoch} under pending {:?}: {other:?}; script: {:#?}",
                    self.pending, self.log
                ),
            }
            return;
        };
        assert_eq!(it.epoch(), epoch);
        self.pending = None;
        self.last = Some(epoch);
        let mut next = start;
        let mut done = false;
        for _ in 0..take {
            let item = if deadline {
                match it.next_timeout(Duration::from_millis(self.rng.below(3))) {
                    Next::Ready(item) => Some(item),
                    Next::Done => None,
                    _ => continue,
                }
            } else {
                it.next()
            };
            let Some(item) = item else {
                assert_eq!(next, self.batches(), "ended early; script: {:#?}", self.log);
                done = true;
                break;
            };
            let batch = item.expect("a batch");
            assert_eq!(batch.index, next, "script: {:#?}", self.log);
            self.check(epoch, &batch);
            self.checked += 1;
            next += 1;
            if keep && self.kept.len() < 4 {
                self.kept.push((epoch, batch.index, batch));
            }
        }
        drop(it);
        // An epoch seen to its end leaves "the next epoch from its start" (`LoaderState`).
        let want = if done { (epoch + 1, 0) } else { (epoch, next) };
        let state = self.loader.state();
        assert_eq!(
            (state.epoch, state.position),
            want,
            "state after the iterator; script: {:#?}",
            self.log
        );
    }

    /// Saves the state and loads it into this loader or a new one.
    fn checkpoint(&mut self) {
        let state = self.loader.state();
        if self.rng.below(2) == 0 {
            self.log
                .push(format!("load_state {:?}", (state.epoch, state.position)));
            self.loader.load_state(state).unwrap();
        } else {
            self.loader = self.build(Some(state));
        }
        // A state of epoch e at its first batch is still to be run (and a start of e + 1
        // refused); the script's own first state (0, 0) is that too.
        self.pending = Some(state);
    }

    fn step(&mut self) {
        match self.rng.below(10) {
            0..=4 => self.run_epoch(),
            5 | 6 => self.checkpoint(),
            7 => {
                self.log.push("cancel_prefetch".into());
                self.loader.cancel_prefetch();
            }
            8 => {
                self.log.push("stats, reset_stats".into());
                let _ = self.loader.stats().to_string();
                self.loader.reset_stats();
            }
            _ if self.rng.below(2) == 0 => {
                // A new loader with the state of this one, as after a restart.
                let state = self.loader.state();
                self.loader = self.build(Some(state));
                self.pending = Some(state);
            }
            _ => {
                // A new run from scratch (also the way out of a state past the last epoch
                // the script visits, which refuses every epoch it asks for).
                self.loader = self.build(None);
                self.pending = None;
                self.last = None;
            }
        }
        // Kept batches stay what they were while the loader goes on.
        for (epoch, _, batch) in &self.kept {
            self.check(*epoch, batch);
        }
        if self.rng.below(5) == 0 {
            self.kept.clear();
        }
    }
}

/// One seeded script of `OPERATIONS` steps.
fn run(seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(dir.path());
    let want = reference(&ds);
    assert!(
        want[0].len() >= 3,
        "too few batches an epoch to leave one early"
    );
    let mut script = Script {
        loader: builder(&ds).build().unwrap(),
        ds,
        want,
        pending: None,
        last: None,
        kept: Vec::new(),
        rng: Rng::new(&[seed]),
        log: Vec::new(),
        refused: 0,
        checked: 0,
    };
    for _ in 0..OPERATIONS {
        script.step();
    }
    // The script did what it is for: many batches compared, starts refused too.
    assert!(
        script.checked > 150 && script.refused > 10,
        "seed {seed:#x}: {} batches checked, {} starts refused",
        script.checked,
        script.refused
    );
}

#[test]
fn any_interleaving_of_epochs_checkpoints_and_restarts_gives_the_plain_loaders_batches() {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for seed in [
            0x9E37_79B9_7F4A_7C15,
            0xD1B5_4A32_D192_ED03,
            0x94D0_49BB_1331_11EB,
            0xBF58_476D_1CE4_E5B9,
        ] {
            run(seed);
        }
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(240)) {
        Ok(()) => {}
        // The script's thread panicked: its message is above.
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the script failed (above)"),
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("the script hung"),
    }
}
