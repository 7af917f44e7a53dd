//! Which shards of a raw dataset too large to page-lock whole are page-locked
//! while which batches are built: the epoch's batches cut into windows, each a
//! run of consecutive batches whose records lie in a set of shards that fits
//! the window budget. Pure planning (no CUDA): `window_locker` locks the
//! windows ahead of the producer and unlocks them behind it.
//!
//! Why windows of shards: the page-locked map lets the device read records where
//! they lie, with no host write on the way (see `registered`), but a dataset
//! over half the memory cannot stay locked whole. An order with locality
//! ([`crate::Shuffle::Sequential`], [`crate::Shuffle::Quasi`] with blocks that
//! fit in a window) visits a few shards at a time; a whole-dataset shuffle
//! touches most shards in every batch, so no window of a useful size holds even
//! one batch: such epochs are staged through pinned memory, as before.

use std::ops::Range;

/// A run of consecutive batches and the shards their records lie in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Window {
    /// Batches of the epoch, in order.
    pub(crate) batches: Range<u64>,
    /// Positions in the manifest's shard list, ascending, each once.
    pub(crate) shards: Vec<usize>,
    /// Bytes of those shards (what locking them pins).
    pub(crate) bytes: u64,
}

/// Cuts batches `start..end` into windows of at most `budget` shard bytes each,
/// as many batches per window as fit (greedy, in order).
///
/// `batch(k)` gives the sample indices of batch `k`, `shard_of` the shard of a
/// sample (`None`: not in any shard, which cannot be page-locked), `shard_bytes`
/// the size of each shard.
///
/// # Errors
/// Why no plan holds: a batch whose shards alone exceed the budget (an order
/// without locality), or a sample outside every shard.
pub(crate) fn plan_windows<'a>(
    batches: Range<u64>,
    batch: impl Fn(u64) -> &'a [u64],
    shard_of: impl Fn(u64) -> Option<usize>,
    shard_bytes: &[u64],
    budget: u64,
) -> Result<Vec<Window>, String> {
    let mut windows: Vec<Window> = Vec::new();
    // Shards of the window being filled (a bitmap over the manifest) and the
    // batch's own, collected before it is added.
    let mut in_window = vec![false; shard_bytes.len()];
    let mut current = Window {
        batches: batches.start..batches.start,
        shards: Vec::new(),
        bytes: 0,
    };
    let mut in_batch = vec![false; shard_bytes.len()];
    let mut batch_shards: Vec<usize> = Vec::new();
    for k in batches.clone() {
        batch_shards.clear();
        for &index in batch(k) {
            let s = shard_of(index)
                .filter(|&s| s < shard_bytes.len())
                .ok_or_else(|| format!("sample {index} of batch {k} is in no shard"))?;
            if !in_batch[s] {
                in_batch[s] = true;
                batch_shards.push(s);
            }
        }
        for &s in &batch_shards {
            in_batch[s] = false;
        }
        let own: u64 = batch_shards.iter().map(|&s| shard_bytes[s]).sum();
        if own > budget {
            return Err(format!(
                "batch {k} reads {} shards ({} MiB), more than a window holds ({} MiB): \
                 an order over the whole dataset (Shuffle::Quasi or Sequential keep batches \
                 inside a few shards)",
                batch_shards.len(),
                own >> 20,
                budget >> 20
            ));
        }
        let added: u64 = batch_shards
            .iter()
            .filter(|&&s| !in_window[s])
            .map(|&s| shard_bytes[s])
            .sum();
        if current.bytes + added > budget {
            for &s in &current.shards {
                in_window[s] = false;
            }
            let next = Window {
                batches: k..k,
                shards: Vec::new(),
                bytes: 0,
            };
            windows.push(std::mem::replace(&mut current, next));
        }
        for &s in &batch_shards {
            if !in_window[s] {
                in_window[s] = true;
                current.shards.push(s);
                current.bytes += shard_bytes[s];
            }
        }
        current.batches.end = k + 1;
    }
    if !current.batches.is_empty() {
        windows.push(current);
    }
    for w in &mut windows {
        w.shards.sort_unstable();
    }
    Ok(windows)
}

/// The window that holds batch `k` among `windows` (in order, contiguous),
/// found from `hint` (the window of the previous batch) onwards.
pub(crate) fn window_of(windows: &[Window], k: u64, hint: usize) -> Option<usize> {
    (hint..windows.len()).find(|&w| windows[w].batches.contains(&k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Sampler, Shuffle};

    /// `shards` shards of `per` samples each, 10 bytes per sample.
    fn layout(shards: usize, per: u64) -> (Vec<u64>, impl Fn(u64) -> Option<usize>) {
        let total = shards as u64 * per;
        (vec![per * 10; shards], move |i: u64| {
            (i < total).then_some((i / per) as usize)
        })
    }

    fn plan(
        order: &[u64],
        batch: u64,
        shards: usize,
        per: u64,
        budget: u64,
    ) -> Result<Vec<Window>, String> {
        let (bytes, shard_of) = layout(shards, per);
        let n = order.len().div_ceil(batch as usize) as u64;
        plan_windows(
            0..n,
            |k| {
                let s = (k * batch) as usize;
                &order[s..(s + batch as usize).min(order.len())]
            },
            shard_of,
            &bytes,
            budget,
        )
    }

    /// Every batch in exactly one window, in order; every sample's shard in its
    /// batch's window; no window over the budget.
    fn check(windows: &[Window], order: &[u64], batch: u64, per: u64, budget: u64) {
        let mut next = 0;
        for w in windows {
            assert_eq!(w.batches.start, next, "windows are contiguous");
            assert!(!w.batches.is_empty());
            assert!(w.bytes <= budget, "{} > {budget}", w.bytes);
            assert_eq!(w.bytes, w.shards.len() as u64 * per * 10);
            assert!(w.shards.windows(2).all(|p| p[0] < p[1]));
            for k in w.batches.clone() {
                let s = (k * batch) as usize;
                for &i in &order[s..(s + batch as usize).min(order.len())] {
                    assert!(w.shards.contains(&((i / per) as usize)), "sample {i}");
                }
            }
            next = w.batches.end;
        }
        assert_eq!(next, order.len().div_ceil(batch as usize) as u64);
    }

    #[test]
    fn a_sequential_epoch_moves_through_the_shards_in_windows_that_fit() {
        // 40 shards of 100 samples (1,000 bytes each); windows of at most 8 shards.
        let order: Vec<u64> = (0..4000).collect();
        let windows = plan(&order, 64, 40, 100, 8_000).unwrap();
        check(&windows, &order, 64, 100, 8_000);
        assert!(windows.len() >= 5, "{} windows", windows.len());
        // Consecutive windows share at most the shard a batch straddles.
        for pair in windows.windows(2) {
            let shared = pair[1]
                .shards
                .iter()
                .filter(|s| pair[0].shards.contains(s))
                .count();
            assert!(shared <= 1);
        }
    }

    #[test]
    fn a_quasi_shuffled_epoch_of_every_rank_fits_in_windows() {
        // Blocks of one shard's worth: each batch reads at most the 8 blocks of its
        // window (+ the neighbours a block boundary straddles).
        for rank in 0..2 {
            let sampler = Sampler::new(
                6400,
                Shuffle::Quasi {
                    seed: 7,
                    block: 100,
                },
                rank,
                2,
                50,
                true,
            )
            .unwrap();
            let order = sampler.order(3);
            let windows = plan(&order, 50, 64, 100, 16_000).unwrap();
            check(&windows, &order, 50, 100, 16_000);
            assert!(windows.len() > 1);
        }
    }

    #[test]
    fn a_whole_dataset_shuffle_has_no_plan_and_says_why() {
        let sampler = Sampler::new(6400, Shuffle::Global { seed: 1 }, 0, 1, 256, true).unwrap();
        let err = plan(&sampler.order(0), 256, 64, 100, 16_000).unwrap_err();
        assert!(
            err.contains("batch 0 reads") && err.contains("Quasi"),
            "{err}"
        );
    }

    #[test]
    fn one_window_when_everything_fits_and_none_for_no_batch() {
        let order: Vec<u64> = (0..1000).rev().collect();
        let windows = plan(&order, 100, 10, 100, 10_000).unwrap();
        assert_eq!(windows.len(), 1);
        assert_eq!(windows[0].shards, (0..10).collect::<Vec<_>>());
        check(&windows, &order, 100, 100, 10_000);
        assert!(plan(&[], 100, 10, 100, 10_000).unwrap().is_empty());
    }

    #[test]
    fn a_sample_outside_every_shard_is_an_error() {
        let err = plan(&[5, 99_999], 2, 10, 100, 10_000).unwrap_err();
        assert!(err.contains("sample 99999"), "{err}");
    }

    #[test]
    fn a_resumed_epoch_plans_from_its_first_batch() {
        let order: Vec<u64> = (0..1000).collect();
        let (bytes, shard_of) = layout(10, 100);
        let windows = plan_windows(
            4..10,
            |k| &order[(k * 100) as usize..((k + 1) * 100) as usize],
            shard_of,
            &bytes,
            3_000,
        )
        .unwrap();
        assert_eq!(windows[0].batches.start, 4);
        assert_eq!(windows.last().unwrap().batches.end, 10);
        assert_eq!(window_of(&windows, 4, 0), Some(0));
        assert_eq!(window_of(&windows, 9, 0), Some(windows.len() - 1));
        assert_eq!(window_of(&windows, 3, 0), None);
    }
}
