//! A loader's checkpoint: where it stands ([`Loader::state`]) and continuing from a saved
//! state ([`Loader::load_state`]), as torch's `state_dict` / `load_state_dict`.

use super::Loader;
use crate::error::LoaderError;
use crate::resume::{check_resume, skip_note, LoaderState};

#[cfg(doc)]
use crate::resume::DatasetFingerprint;

impl Loader {
    /// Where this loader stands: `(seed, epoch, position)`, and the batch size, ranks,
    /// dataset (length and [`DatasetFingerprint`]), records drawn from, `drop_last`, `drop_partial_batch` and
    /// kind of order that give `position` its meaning; feed it to
    /// [`crate::LoaderBuilder::resume`] to continue exactly here. In a `fork` of the
    /// process that built the loader (a checkpoint written by a forked process), where
    /// it stood at the fork, without waiting for a lock the parent's training thread may
    /// have held then.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use stoker_loader::{Loader, LoaderState};
    /// # let dataset = stoker_formats::Dataset::open("data")?;
    /// // At checkpoint time:
    /// # let loader = Loader::builder(dataset.clone()).build()?;
    /// std::fs::write("loader.json", serde_json::to_string(&loader.state())?)?;
    /// // After a restart: the same settings, plus the saved state.
    /// let state: LoaderState = serde_json::from_str(&std::fs::read_to_string("loader.json")?)?;
    /// let loader = Loader::builder(dataset).resume(state).build()?;
    /// for batch in loader.epoch(state.epoch) { /* continues after the consumed batches */ }
    /// # Ok(()) }
    /// ```
    pub fn state(&self) -> LoaderState {
        LoaderState {
            batch_size: Some(self.sampler.batch_size()),
            world_size: Some(self.sampler.world_size()),
            samples: Some(self.sampler.dataset_len()),
            indices: Some(self.sampler.selection()),
            drop_last: Some(self.sampler.drop_last()),
            drop_partial_batch: Some(self.sampler.drop_partial_batch()),
            order: Some(self.sampler.shuffle().order()),
            dataset: Some(self.fingerprint),
            draws: Some(crate::resume::DRAWS_VERSION),
            ..self.progress.get().state
        }
    }

    /// Continue from a saved [`Loader::state`] with this loader (what
    /// [`crate::LoaderBuilder::resume`] does at build time, for a loader that already runs, as
    /// torch's `load_state_dict`): the next [`Loader::epoch`] call for `state.epoch`
    /// skips the `state.position` batches already consumed, and [`Loader::state`]
    /// reports `state` until then; for a state past its epoch's first batch, a call for
    /// the epoch after it starts that epoch from its first batch, as the loader that saved
    /// the state did after a loop left its epoch early (logged as a warning when batches of `state.epoch` were left); a call
    /// for another epoch fails with [`LoaderError::ResumeEpoch`] and leaves the state
    /// pending.
    ///
    /// # Errors
    ///
    /// [`LoaderError::ResumeMismatch`] when `state` belongs to another seed, batch size,
    /// number of ranks, dataset (its length or, where the state records it, its
    /// [`DatasetFingerprint`]), records drawn from, `drop_last`, `drop_partial_batch` or kind of order, or lies
    /// past the end of the epoch; [`LoaderError::StateWhileIterating`] while an epoch iterator
    /// is alive (drop it first); [`LoaderError::ForkedProcess`] in a fork of the process
    /// that built it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use stoker_loader::{Loader, LoaderState};
    /// let loader = Loader::builder(stoker_formats::Dataset::open("data/train")?).build()?;
    /// let state = LoaderState { seed: 0, epoch: 3, position: 10, ..LoaderState::default() };
    /// loader.load_state(state)?;
    /// let next = loader.epoch(3).next().expect("batch 10 of epoch 3")?;
    /// assert_eq!(next.index, 10);
    /// # Ok(()) }
    /// ```
    pub fn load_state(&self, state: LoaderState) -> Result<(), LoaderError> {
        // In a fork, dropping the early start below would wait for threads that do not
        // exist there.
        if let Some(e) = self.process.fork_error() {
            return Err(e);
        }
        let state = check_resume(&state, self.config.seed, &self.sampler, self.fingerprint)?;
        let mut progress = self.progress.lock();
        if let Some(running) = progress.active {
            return Err(LoaderError::StateWhileIterating {
                running,
                resumes: state.epoch,
            });
        }
        progress.state = state;
        *self.resume.lock() = Some(state);
        // An early start is for epoch `e + 1` from its first batch: not what comes next.
        drop(self.early.lock().unwrap_or_else(|p| p.into_inner()).take());
        Ok(())
    }

    /// The epoch the state [`Loader::load_state`] or [`crate::LoaderBuilder::resume`] left
    /// pending continues, until an epoch takes it: its own, or the next one for a state
    /// saved after its epoch's last batch (which the loader it came from would run next).
    /// For a front end that picks the epoch (Python's `for` over the loader).
    pub fn pending_epoch(&self) -> Option<u64> {
        let state = self.resume.get()?;
        let batches = self.num_batches();
        let done = batches > 0 && state.position >= batches;
        Some(state.epoch.saturating_add(u64::from(done)))
    }

    /// The batches [`Loader::epoch`] of `epoch` would yield if it started now: the
    /// epoch's, less those a pending resume of it skips (none of a state saved after its
    /// epoch's last batch); 0 for an epoch the pending state refuses
    /// ([`LoaderError::ResumeEpoch`]). For a front end that tells the length of an
    /// iteration before it starts (Python's `len()` of an epoch iterator, a progress bar).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use stoker_loader::{Loader, LoaderState};
    /// let loader = Loader::builder(stoker_formats::Dataset::open("data/train")?).build()?;
    /// let n = loader.num_batches();
    /// loader.load_state(LoaderState { epoch: 2, position: n, ..loader.state() })?;
    /// assert_eq!(loader.batches_if_started(2), 0);
    /// assert_eq!(loader.batches_if_started(3), n);
    /// assert_eq!(loader.batches_if_started(5), 0);
    /// # Ok(()) }
    /// ```
    pub fn batches_if_started(&self, epoch: u64) -> u64 {
        let pending = self.resume.get();
        let batches = self.num_batches();
        crate::resume::first_batch(pending.as_ref(), epoch, batches)
            .map_or(0, |start| batches.saturating_sub(start))
    }

    /// The warning that starting `epoch` now logs because it skips the rest of the
    /// state [`Loader::load_state`] left pending (the epoch after a state saved inside
    /// its epoch; see there), or `None`. For a front end that says it its own way
    /// (Python: a `UserWarning`, as for its other notes about a resumed state).
    pub fn resume_note(&self, epoch: u64) -> Option<String> {
        let state = self.resume.get()?;
        skip_note(&state, epoch, self.num_batches())
    }
}
