//! Resuming: what a saved [`LoaderState`] records, which dataset it was taken on
//! ([`DatasetFingerprint`]), and the check that refuses a state that would mean other
//! samples to this loader (`check_resume`, run by the builder and `Loader::load_state`).

use stoker_formats::Manifest;

use crate::error::LoaderError;
use crate::sampler::{Order, Sampler, Selection};

/// The version of the rules that turn a seed, an epoch and a position into samples: the
/// epoch's order ([`Sampler::order`]), each sample's crop and flip
/// ([`crate::transform::Transform::params`] keyed by [`crate::transform::DrawKey`]) and
/// the records that stand in for bad ones. Recorded in [`LoaderState::draws`]: a state
/// resumes exactly only under the same rules, so one saved under others is refused
/// rather than continued with other crops or replacements. Raise it with any change to
/// those rules (a test pins a few draws of each).
pub const DRAWS_VERSION: u32 = 1;

/// Where a loader stands: enough to continue exactly where it stopped.
///
/// Returned by [`crate::Loader::state`] and consumed by [`crate::LoaderBuilder::resume`].
/// Serializable so it can go into a training checkpoint.
///
/// `position` counts batches of one rank's order, so it means the same samples only to a
/// loader with the same seed, batch size, number of ranks, dataset, records drawn from
/// (all, or the same `indices`), `drop_last`, `drop_partial_batch` and kind of order: [`crate::Loader::state`] records them, and a
/// resume with any of them different is refused rather than repeating or skipping samples.
/// (The rank is not recorded: the ranks advance in step, so rank 0's saved state resumes
/// every rank.) The optional fields may be left out (a state written by hand or by an older
/// stoker): what a state does not record is not checked.
///
/// # Examples
///
/// ```
/// use stoker_loader::LoaderState;
/// // A state saved by an older stoker (no dataset fingerprint) still loads.
/// let old: LoaderState = serde_json::from_str(r#"{"seed": 3, "epoch": 1, "position": 5}"#).unwrap();
/// assert_eq!((old.seed, old.dataset), (3, None));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LoaderState {
    /// The loader's seed ([`crate::Loader::seed`]: the order's and every random draw's;
    /// checked on resume).
    pub seed: u64,
    /// The epoch in progress (or the next epoch, with `position == 0`; after the last
    /// batch of epoch `u64::MAX`, which has no next, that epoch with `position` its batch
    /// count).
    pub epoch: u64,
    /// Batches of `epoch` already handed to the consumer on this rank.
    pub position: u64,
    /// The batch size `position` counts in (checked on resume when given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u64>,
    /// The number of ranks the dataset is split over (checked on resume when given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size: Option<u64>,
    /// The samples an epoch draws from: the dataset's records, or the number of indices
    /// given to [`crate::LoaderBuilder::indices`] (checked on resume when given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
    /// Which records: all of the dataset's, or which indices (checked on resume; a state
    /// from before 2026-12-04 does not record it, and drew from every record when it
    /// records its `dataset`, which stokers that had no subsets did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub indices: Option<Selection>,
    /// Whether the tail that does not divide evenly over the ranks is cut: it changes each
    /// rank's share, so where its slice starts (checked on resume when given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop_last: Option<bool>,
    /// Whether each rank's short last batch is dropped: it changes the number of batches
    /// (checked on resume; a state without it, from before 2026-12-04, dropped them
    /// exactly with `drop_last`, and is checked on that).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop_partial_batch: Option<bool>,
    /// The kind of order (checked on resume when given: the seed alone does not tell a
    /// sequential loader from a shuffled one with seed 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<Order>,
    /// Which dataset `position` counts in (checked on resume when given: two datasets of
    /// the same length are not the same samples).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<DatasetFingerprint>,
    /// The [`DRAWS_VERSION`] of the stoker that saved the state (checked on resume when
    /// given; a state without it, from a stoker before 2026-12-03, resumes its order
    /// exactly but may get other crops, flips and bad-record replacements, and says so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draws: Option<u32>,
}

impl LoaderState {
    /// What a state without [`LoaderState::draws`] cannot promise, for the warning its
    /// resume gives; `None` for a state that records them.
    pub fn unversioned_note(&self) -> Option<String> {
        self.draws.is_none().then(|| {
            format!(
                "the resumed state records no draw rules (saved by a stoker before 2026-12-03, \
                 or written by hand): epoch {} continues at batch {} in the same order, but its \
                 crops, flips and bad-record replacements are this stoker's (rules {DRAWS_VERSION}), \
                 which may not be those of the run that saved it",
                self.epoch, self.position
            )
        })
    }
}

/// A dataset's identity for [`LoaderState`]: a 64-bit hash of what its manifest says of
/// its content: the sample count, the payload bytes, the class names, and each shard's
/// first index, record count, size and digest. Not its path or its shards' file names, so
/// a dataset moved or copied elsewhere resumes; a dataset rewritten with other records
/// (or the same records in another order, or other labels) does not.
///
/// Written as 16 hex digits ([`std::fmt::Display`], [`std::str::FromStr`], serde): a JSON
/// number above 2⁵³ does not survive every JSON reader.
///
/// # Examples
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use stoker_loader::resume::DatasetFingerprint;
/// let dataset = stoker_formats::Dataset::open("data/train")?;
/// let fp = DatasetFingerprint::of(dataset.manifest());
/// assert_eq!(fp.to_string().parse::<DatasetFingerprint>()?, fp);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct DatasetFingerprint(pub u64);

/// Tags the fingerprint's words, so it never equals another hash of the same numbers.
const FINGERPRINT_TAG: u64 = 0x6461_7461_7365_7401;

impl DatasetFingerprint {
    /// The fingerprint of the dataset `manifest` describes: no file is read.
    pub fn of(manifest: &Manifest) -> DatasetFingerprint {
        let mut words = vec![
            FINGERPRINT_TAG,
            manifest.samples,
            manifest.payload_bytes,
            manifest.classes.len() as u64,
        ];
        for class in &manifest.classes {
            words.push(class.len() as u64);
            words.extend(class.as_bytes().chunks(8).map(|chunk| {
                let mut word = [0u8; 8];
                word[..chunk.len()].copy_from_slice(chunk);
                u64::from_le_bytes(word)
            }));
        }
        words.push(manifest.shards.len() as u64);
        for shard in &manifest.shards {
            words.extend([
                shard.first_index,
                shard.count,
                shard.bytes,
                shard.xxh3.unwrap_or(0),
                shard.crc32c.map_or(0, u64::from),
            ]);
        }
        DatasetFingerprint(crate::sampler::Rng::new(&words).next_u64())
    }
}

impl std::fmt::Display for DatasetFingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl std::str::FromStr for DatasetFingerprint {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 16 {
            return Err(format!("dataset fingerprint {s:?} is not 16 hex digits"));
        }
        u64::from_str_radix(s, 16)
            .map(DatasetFingerprint)
            .map_err(|_| format!("dataset fingerprint {s:?} is not hex"))
    }
}

impl From<DatasetFingerprint> for String {
    fn from(fp: DatasetFingerprint) -> String {
        fp.to_string()
    }
}

impl TryFrom<String> for DatasetFingerprint {
    type Error = String;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// Checks that `state` can resume a loader with seed `seed`, `sampler` and dataset
/// `dataset`: each thing the state records must be this loader's, and its position
/// inside the epoch. Returns the state to resume from (with the loader's seed, which an
/// older sequential state did not record).
pub(crate) fn check_resume(
    state: &LoaderState,
    seed: u64,
    sampler: &Sampler,
    dataset: DatasetFingerprint,
) -> Result<LoaderState, LoaderError> {
    let text = |v: Option<u64>| v.map(|v| v.to_string());
    // Releases before the dataset fingerprint recorded the shuffle's seed, which a
    // sequential order did not have (0), whatever seed the caller gave.
    let older_sequential = state.dataset.is_none()
        && state.seed == 0
        && matches!(sampler.shuffle(), crate::sampler::Shuffle::Sequential);
    let state_seed = if older_sequential { seed } else { state.seed };
    let recorded = [
        ("seed", Some(state_seed.to_string()), seed.to_string()),
        (
            "batch_size",
            text(state.batch_size),
            sampler.batch_size().to_string(),
        ),
        (
            "world_size",
            text(state.world_size),
            sampler.world_size().to_string(),
        ),
        // Before `indices`: a sequential order keeps the list as given, a shuffled one
        // sorts it, so another order would read as other indices.
        (
            "order",
            state.order.map(|o| o.to_string()),
            sampler.shuffle().order().to_string(),
        ),
        // Before `samples`: a list of other indices is the better reason to give. A state
        // that records its dataset but not `indices` was saved by a stoker that had no
        // subsets: it drew from every record.
        (
            "indices",
            state
                .indices
                .or(state.dataset.map(|_| Selection::All))
                .map(|s| s.to_string()),
            sampler.selection().to_string(),
        ),
        (
            "samples",
            text(state.samples),
            sampler.dataset_len().to_string(),
        ),
        (
            "drop_last",
            state.drop_last.map(|d| d.to_string()),
            sampler.drop_last().to_string(),
        ),
        (
            "drop_partial_batch",
            // A state from before the field dropped partial batches exactly with drop_last.
            state
                .drop_partial_batch
                .or(state.drop_last)
                .map(|d| d.to_string()),
            sampler.drop_partial_batch().to_string(),
        ),
        (
            "dataset",
            state.dataset.map(|d| d.to_string()),
            dataset.to_string(),
        ),
    ];
    for (field, got, expected) in recorded {
        match got {
            Some(got) if got != expected => {
                return Err(LoaderError::ResumeMismatch {
                    field,
                    expected,
                    got,
                })
            }
            _ => {}
        }
    }
    if let Some(got) = state.draws.filter(|&d| d != DRAWS_VERSION) {
        return Err(LoaderError::ResumeMismatch {
            field: "draws",
            expected: format!(
                "{DRAWS_VERSION} (this stoker's rules for orders, crops, flips and bad-record replacements)"
            ),
            got: got.to_string(),
        });
    }
    let num_batches = sampler.num_batches();
    if state.position > num_batches {
        return Err(LoaderError::ResumeMismatch {
            field: "position",
            expected: format!("at most {num_batches}"),
            got: state.position.to_string(),
        });
    }
    // A state taken after an epoch's last batch stays (e, batches): asked for epoch e,
    // the resumed loader yields nothing, and the caller's loop goes on to e + 1, as the
    // documented `set_epoch(state.epoch)` / `loader.epoch(state.epoch)` loops expect.
    if let Some(note) = state.unversioned_note() {
        tracing::warn!("{note}");
    }
    let mut state = *state;
    state.seed = seed;
    Ok(state)
}

/// The first batch of `epoch` given the state pending from [`crate::Loader::load_state`] or
/// [`crate::LoaderBuilder::resume`]: its position for its own epoch, 0 for the epoch after
/// it, 0 with no state.
///
/// The epoch after a state saved inside its epoch (not at its first batch) starts from its
/// first batch, as it did in the loader that saved the state when its loop left the epoch
/// early (a fixed number of steps per epoch, Lightning's `limit_train_batches`); it is
/// logged, as the same call also comes from a loop that miscounts its epochs.
///
/// # Errors
///
/// [`LoaderError::ResumeEpoch`] for any other epoch: a loop that starts at epoch 0 after
/// a resume would otherwise drop the state without a word and train the epochs it had
/// done again.
pub(crate) fn resume_start(
    pending: Option<&LoaderState>,
    epoch: u64,
    num_batches: u64,
) -> Result<u64, LoaderError> {
    let start = first_batch(pending, epoch, num_batches)?;
    if let Some(note) = pending.and_then(|state| skip_note(state, epoch, num_batches)) {
        tracing::warn!("{note}");
    }
    Ok(start)
}

/// [`resume_start`] without its log: also for asking what an epoch would yield
/// ([`crate::Loader::batches_if_started`]).
pub(crate) fn first_batch(
    pending: Option<&LoaderState>,
    epoch: u64,
    num_batches: u64,
) -> Result<u64, LoaderError> {
    match pending {
        None => Ok(0),
        Some(state) if state.epoch == epoch => Ok(state.position),
        // Not from a state at its epoch's first batch: nothing of that epoch was trained,
        // and the loop asking for the next one is more likely off by one.
        Some(state)
            if state.epoch.checked_add(1) == Some(epoch)
                && (state.position > 0 || num_batches == 0) =>
        {
            Ok(0)
        }
        Some(state) => Err(LoaderError::ResumeEpoch {
            saved: state.epoch,
            position: state.position,
            requested: epoch,
        }),
    }
}

/// What [`resume_start`] logs when starting `epoch` skips the rest of the pending
/// `state`'s epoch: for the epoch after it, while batches of its own were left.
pub(crate) fn skip_note(state: &LoaderState, epoch: u64, num_batches: u64) -> Option<String> {
    let next = state.epoch.checked_add(1) == Some(epoch);
    (next && state.position > 0 && state.position < num_batches).then(|| {
        format!(
            "the resumed state stopped epoch {} at batch {} of {num_batches}; epoch {epoch} \
             was asked, so the rest of epoch {} is skipped (as after a loop that left it \
             early) and epoch {epoch} starts at its first batch",
            state.epoch, state.position, state.epoch
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Manifest {
        serde_json::from_value(serde_json::json!({
            "format": "stoker-lmdb",
            "format_version": 2,
            "samples": 20,
            "encoding": "jpeg",
            "raw_size": null,
            "classes": ["cat", "dog"],
            "shards": [
                {"file": "shard-00000.lmdb", "first_index": 0, "count": 12, "bytes": 4096, "xxh3": "00000000000000aa"},
                {"file": "shard-00001.lmdb", "first_index": 12, "count": 8, "bytes": 2048, "xxh3": "00000000000000bb"}
            ],
            "bytes": 6144,
            "payload_bytes": 5000,
            "provenance": {"tool": "stoker", "tool_version": "0", "source": "test", "flags": {}}
        }))
        .unwrap()
    }

    #[test]
    fn the_fingerprint_follows_the_content_not_the_file_names() {
        let m = manifest();
        let fp = DatasetFingerprint::of(&m);
        let mut renamed = m.clone();
        renamed.shards[0].file = "elsewhere/shard-00000.lmdb".into();
        renamed.provenance.source = "another path".into();
        assert_eq!(DatasetFingerprint::of(&renamed), fp);
        let changes: [fn(&mut Manifest); 5] = [
            |m| m.shards[1].xxh3 = Some(0xbc),
            |m| m.shards[0].bytes += 1,
            |m| m.classes[1] = "dogs".into(),
            |m| m.classes.swap(0, 1),
            |m| m.payload_bytes += 1,
        ];
        for (i, change) in changes.iter().enumerate() {
            let mut other = m.clone();
            change(&mut other);
            assert_ne!(DatasetFingerprint::of(&other), fp, "change {i}");
        }
    }

    #[test]
    fn the_fingerprint_is_16_hex_digits_in_text_and_json() {
        let fp = DatasetFingerprint(0x00ab_cdef_0123_4567);
        assert_eq!(fp.to_string(), "00abcdef01234567");
        assert_eq!("00abcdef01234567".parse::<DatasetFingerprint>(), Ok(fp));
        assert!("abc".parse::<DatasetFingerprint>().is_err());
        assert!("zzzzzzzzzzzzzzzz".parse::<DatasetFingerprint>().is_err());
        let state = LoaderState {
            dataset: Some(fp),
            ..LoaderState::default()
        };
        let json = serde_json::to_string(&state).unwrap();
        assert!(json.contains(r#""dataset":"00abcdef01234567""#), "{json}");
        assert_eq!(serde_json::from_str::<LoaderState>(&json).unwrap(), state);
    }

    #[test]
    fn a_state_after_the_last_batch_resumes_that_epoch_at_its_end() {
        use crate::sampler::Shuffle;
        let sampler = Sampler::new(20, Shuffle::Global { seed: 3 }, 0, 1, 4, false).unwrap();
        let fp = DatasetFingerprint(1);
        let at = |epoch, position| LoaderState {
            seed: 3,
            epoch,
            position,
            ..LoaderState::default()
        };
        let resumed = check_resume(&at(2, 5), 3, &sampler, fp).unwrap();
        assert_eq!((resumed.epoch, resumed.position), (2, 5));
        assert!(check_resume(&at(2, 6), 3, &sampler, fp).is_err());
    }

    #[test]
    fn a_state_saved_with_partial_batches_kept_is_refused_where_they_are_dropped() {
        use crate::sampler::Shuffle;
        // 18 samples over 2 ranks, batches of 4: 9 each, 3 batches kept or 2 without the
        // partial one; the batches counted differ, so the state must not resume.
        let cut = Sampler::new(18, Shuffle::Global { seed: 3 }, 0, 2, 4, true).unwrap();
        let keep = cut.clone().with_drop_partial_batch(false);
        assert_eq!((cut.num_batches(), keep.num_batches()), (2, 3));
        let fp = DatasetFingerprint(1);
        let state = |drop_partial_batch| LoaderState {
            seed: 3,
            epoch: 1,
            position: 2,
            drop_last: Some(true),
            drop_partial_batch,
            ..LoaderState::default()
        };
        let e = check_resume(&state(Some(false)), 3, &cut, fp).unwrap_err();
        assert!(e.to_string().contains("drop_partial_batch"), "{e}");
        check_resume(&state(Some(false)), 3, &keep, fp).unwrap();
        // A state from before the setting dropped partial batches with drop_last: this
        // one (drop_last true) did, and does not resume where they are kept.
        assert!(check_resume(&state(None), 3, &keep, fp).is_err());
        check_resume(&state(None), 3, &cut, fp).unwrap();
        // One that records neither is not checked on either.
        let bare = LoaderState {
            drop_last: None,
            ..state(None)
        };
        check_resume(&bare, 3, &keep, fp).unwrap();
    }

    #[test]
    fn a_state_saved_under_other_draw_rules_is_refused_and_one_without_them_warns() {
        use crate::sampler::Shuffle;
        let sampler = Sampler::new(20, Shuffle::Global { seed: 3 }, 0, 1, 4, false).unwrap();
        let fp = DatasetFingerprint(1);
        let with = |draws| LoaderState {
            seed: 3,
            epoch: 1,
            position: 2,
            draws,
            ..LoaderState::default()
        };
        assert!(check_resume(&with(Some(DRAWS_VERSION)), 3, &sampler, fp).is_ok());
        let other = check_resume(&with(Some(DRAWS_VERSION + 1)), 3, &sampler, fp).unwrap_err();
        assert!(
            matches!(other, LoaderError::ResumeMismatch { field: "draws", .. }),
            "{other}"
        );
        assert!(other.to_string().contains("crops"), "{other}");
        // Older states (no `draws`) still resume, with a note saying what may differ.
        assert!(check_resume(&with(None), 3, &sampler, fp).is_ok());
        let note = with(None).unversioned_note().unwrap();
        assert!(note.contains("epoch 1 continues at batch 2"), "{note}");
        assert_eq!(with(Some(DRAWS_VERSION)).unversioned_note(), None);
        let json = serde_json::to_string(&with(Some(DRAWS_VERSION))).unwrap();
        assert!(json.contains(r#""draws":1"#), "{json}");
    }

    #[test]
    fn an_older_sequential_state_recorded_seed_0_whatever_the_loader_seed() {
        use crate::sampler::Shuffle;
        let fp = DatasetFingerprint(1);
        let old = LoaderState {
            seed: 0,
            epoch: 1,
            position: 2,
            ..LoaderState::default()
        };
        let sequential = Sampler::new(20, Shuffle::Sequential, 0, 1, 4, false).unwrap();
        assert_eq!(check_resume(&old, 5, &sequential, fp).unwrap().seed, 5);
        // A state with the fingerprint is of this release: its seed is the loader's.
        let new = LoaderState {
            dataset: Some(fp),
            ..old
        };
        assert!(check_resume(&new, 5, &sequential, fp).is_err());
        let global = Sampler::new(20, Shuffle::Global { seed: 5 }, 0, 1, 4, false).unwrap();
        assert!(check_resume(&old, 5, &global, fp).is_err());
    }
}
