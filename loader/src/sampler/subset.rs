//! A loader over part of a dataset: the record indices an epoch draws from
//! ([`crate::LoaderBuilder::indices`], [`crate::Sampler::with_indices`]), checked against
//! the dataset, and their fingerprint for [`crate::LoaderState::indices`].

use std::sync::Arc;

use stoker_formats::seeded::Rng;

use crate::error::LoaderError;

/// Tags the fingerprint's words, so it never equals another hash of the same numbers.
const SUBSET_TAG: u64 = 0x7375_6273_6574_0001;

/// The records an epoch draws from, when not the whole dataset: position `p` of the
/// epoch's order over `0..len()` is record `get(p)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Subset {
    indices: Arc<[u64]>,
    fingerprint: u64,
}

impl Subset {
    /// `indices` into a dataset of `records`: kept in the order given when `sort` is
    /// false (a sequential order yields them so), sorted otherwise, so that a shuffled
    /// order depends on which records were given and the seed alone, not on how the list
    /// was built, and a quasi order's blocks are runs of nearby records.
    pub(crate) fn new(
        mut indices: Vec<u64>,
        records: u64,
        sort: bool,
    ) -> Result<Subset, LoaderError> {
        let invalid = |reason: String| LoaderError::InvalidConfig {
            field: "indices",
            reason,
        };
        if indices.is_empty() {
            return Err(invalid(
                "the list is empty: give at least one record index (leave it out for the whole dataset)"
                    .into(),
            ));
        }
        if let Some((at, &index)) = indices.iter().enumerate().find(|(_, &i)| i >= records) {
            return Err(invalid(format!(
                "indices[{at}] is {index}, past the dataset's last record (it holds {records} records, 0..={})",
                records.saturating_sub(1)
            )));
        }
        if sort {
            indices.sort_unstable();
        }
        let mut words = Vec::with_capacity(indices.len() + 2);
        words.extend([SUBSET_TAG, indices.len() as u64]);
        words.extend_from_slice(&indices);
        let fingerprint = Rng::new(&words).next_u64();
        Ok(Subset {
            indices: indices.into(),
            fingerprint,
        })
    }

    /// Positions in an epoch's order (indices given, repeats counted).
    pub(crate) fn len(&self) -> u64 {
        self.indices.len() as u64
    }

    /// The record at position `p` (`p < len()`).
    pub(crate) fn get(&self, p: u64) -> u64 {
        self.indices[p as usize]
    }

    /// The indices, in the order positions take them.
    pub(crate) fn indices(&self) -> &[u64] {
        &self.indices
    }

    /// The indices, shared.
    pub(crate) fn shared(&self) -> Arc<[u64]> {
        Arc::clone(&self.indices)
    }

    /// What [`crate::LoaderState::indices`] records of them.
    pub(crate) fn selection(&self) -> Selection {
        Selection::Indices(self.fingerprint)
    }
}

/// Which records a loader draws from, as [`crate::LoaderState::indices`] records it: all of the
/// dataset's, or the list given to [`crate::LoaderBuilder::indices`] (a 64-bit hash of the
/// list as the sampler keeps it: sorted for a shuffled order, as given for a sequential
/// one). Written `all` or as 16 hex digits.
///
/// # Examples
///
/// ```
/// use stoker_loader::Selection;
/// assert_eq!("all".parse::<Selection>(), Ok(Selection::All));
/// assert_eq!(Selection::Indices(255).to_string(), "00000000000000ff");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Selection {
    /// Every record of the dataset.
    All,
    /// The records of a list of indices, by the list's hash.
    Indices(u64),
}

impl std::fmt::Display for Selection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Selection::All => f.write_str("all"),
            Selection::Indices(hash) => write!(f, "{hash:016x}"),
        }
    }
}

impl std::str::FromStr for Selection {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "all" => Ok(Selection::All),
            _ if s.len() == 16 => u64::from_str_radix(s, 16)
                .map(Selection::Indices)
                .map_err(|_| format!("indices {s:?} is not \"all\" or 16 hex digits")),
            _ => Err(format!("indices {s:?} is not \"all\" or 16 hex digits")),
        }
    }
}

impl From<Selection> for String {
    fn from(s: Selection) -> String {
        s.to_string()
    }
}

impl TryFrom<String> for Selection {
    type Error = String;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::sampler::{Sampler, Shuffle};

    fn counts(v: &[u64]) -> HashMap<u64, usize> {
        let mut c = HashMap::new();
        for &i in v {
            *c.entry(i).or_default() += 1;
        }
        c
    }

    #[test]
    fn an_epoch_visits_the_indices_given_as_often_as_given() {
        let given: Vec<u64> = vec![90, 3, 3, 41, 7, 88, 12, 5, 60, 61, 62, 0];
        for shuffle in [
            Shuffle::Sequential,
            Shuffle::Global { seed: 2 },
            Shuffle::Quasi { seed: 2, block: 3 },
        ] {
            let s = Sampler::new(100, shuffle, 0, 1, 5, false)
                .unwrap()
                .with_indices(given.clone(), 100)
                .unwrap();
            assert_eq!((s.dataset_len(), s.num_batches()), (12, 3), "{shuffle:?}");
            let order = s.order(4);
            assert_eq!(counts(&order), counts(&given), "{shuffle:?}");
            if shuffle == Shuffle::Sequential {
                assert_eq!(order, given, "a sequential order keeps the order given");
            }
            // The order is over the indices as a set: the same however they were listed.
            let mut reversed = given.clone();
            reversed.reverse();
            let r = Sampler::new(100, shuffle, 0, 1, 5, false)
                .unwrap()
                .with_indices(reversed.clone(), 100)
                .unwrap();
            if shuffle == Shuffle::Sequential {
                assert_eq!(r.order(4), reversed);
            } else {
                assert_eq!(r.order(4), order, "{shuffle:?}");
                assert_eq!(r.selection(), s.selection());
            }
        }
    }

    #[test]
    fn ranks_split_the_indices_as_they_split_a_dataset_of_that_many_records() {
        let given: Vec<u64> = (0..37).map(|i| i * 3 + 1).collect();
        for shuffle in [
            Shuffle::Global { seed: 5 },
            Shuffle::Quasi { seed: 5, block: 4 },
        ] {
            for (world, drop_last) in [(3, false), (3, true), (4, false)] {
                for rank in 0..world {
                    let whole = Sampler::new(37, shuffle, rank, world, 4, drop_last).unwrap();
                    let part = Sampler::new(200, shuffle, rank, world, 4, drop_last)
                        .unwrap()
                        .with_indices(given.clone(), 200)
                        .unwrap();
                    assert_eq!(part.num_batches(), whole.num_batches());
                    let mapped: Vec<u64> =
                        whole.order(1).iter().map(|&p| given[p as usize]).collect();
                    assert_eq!(part.order(1), mapped, "{shuffle:?} {rank}/{world}");
                }
            }
        }
    }

    #[test]
    fn empty_and_out_of_range_indices_are_refused_by_name() {
        let s = || Sampler::new(10, Shuffle::Sequential, 0, 1, 2, false).unwrap();
        let e = s().with_indices(vec![], 10).unwrap_err().to_string();
        assert!(e.contains("`indices`") && e.contains("empty"), "{e}");
        let e = s()
            .with_indices(vec![0, 9, 10, 3], 10)
            .unwrap_err()
            .to_string();
        assert!(e.contains("indices[2] is 10") && e.contains("0..=9"), "{e}");
    }

    #[test]
    fn the_selection_tells_other_indices_apart() {
        let of = |v: Vec<u64>| Subset::new(v, 50, true).unwrap().selection();
        assert_eq!(of(vec![1, 2, 3]), of(vec![3, 2, 1]));
        assert_ne!(of(vec![1, 2, 3]), of(vec![1, 2, 4]));
        assert_ne!(of(vec![1, 2, 3]), of(vec![1, 2, 3, 3]));
        let listed = Subset::new(vec![3, 2, 1], 50, false).unwrap().selection();
        assert_ne!(
            listed,
            of(vec![1, 2, 3]),
            "a sequential order is the list's own"
        );
    }
}
