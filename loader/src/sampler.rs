//! The order in which an epoch visits the dataset, per rank.
//!
//! The order is a pure function of `(shuffle, seed, epoch, len or indices, rank, world,
//! batch_size, drop_last, drop_partial_batch)`: it never depends on thread timing, the number of workers
//! or the device, so a run is reproducible, the CPU and GPU paths see the same samples, and a
//! resumed run continues with exactly the samples it would have seen.
//!
//! # Distribution
//!
//! All ranks draw the same global permutation of `0..len`. With `drop_last`, each rank gets
//! `len / world` samples (the tail is dropped); otherwise each rank gets `ceil(len / world)`
//! samples, the permutation being extended by wrap-around (its first samples are repeated)
//! to `world · ceil(len / world)`. Each rank's last batch may be partial — with the same size
//! on every rank — unless it is dropped: by default with `drop_last` (PyTorch's
//! `DistributedSampler` and `DataLoader` `drop_last` together), or as
//! [`Sampler::with_drop_partial_batch`] says (the two apart). Rank `r` takes the `r`-th
//! contiguous slice. Either way **every rank yields the same number of batches of the same
//! sizes**: uneven batch counts hang collective operations in distributed training.
//!
//! # Part of a dataset
//!
//! With [`Sampler::with_indices`], an epoch draws from a list of record indices instead
//! of `0..len`: the order is drawn over the list's positions exactly as over a dataset of
//! that many records, and each position stands for its record.

use crate::error::LoaderError;
// Defined beside the resume check; also reachable here, where it used to live.
pub use crate::resume::LoaderState;

mod subset;
pub use subset::Selection;
use subset::Subset;

/// How the order of an epoch is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum Shuffle {
    /// Dataset order, every epoch (evaluation).
    Sequential,
    /// A uniformly random permutation of the whole dataset per epoch.
    Global {
        /// Base seed; epoch `e` uses `(seed, e)`.
        seed: u64,
    },
    /// Page-cache friendly quasi-random order (in the spirit of FFCV's `QUASI_RANDOM`):
    /// the dataset is cut into blocks of `block` consecutive records, the blocks are visited in a
    /// random order, and the records of each window of [`QUASI_WINDOW_BLOCKS`] consecutive
    /// (visited) blocks are shuffled together.
    ///
    /// Locality: at any time the reader works inside one window, i.e. at most
    /// `QUASI_WINDOW_BLOCKS` contiguous runs of `block` records each; a window is read completely
    /// before the next one starts. Mixing: a batch draws from up to `QUASI_WINDOW_BLOCKS` blocks
    /// (not from the whole dataset), so pick `block` so that a window spans several classes.
    Quasi {
        /// Base seed; epoch `e` uses `(seed, e)`.
        seed: u64,
        /// Records per block (≥ 1).
        block: u32,
    },
}

/// How many consecutive blocks [`Shuffle::Quasi`] mixes together.
pub const QUASI_WINDOW_BLOCKS: u64 = 8;

impl Shuffle {
    /// The seed, `0` for [`Shuffle::Sequential`].
    pub fn seed(&self) -> u64 {
        match *self {
            Shuffle::Sequential => 0,
            Shuffle::Global { seed } | Shuffle::Quasi { seed, .. } => seed,
        }
    }

    /// This shuffle with `seed` in place of its own ([`Shuffle::Sequential`] has none and
    /// stays as it is).
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_loader::Shuffle;
    /// assert_eq!(Shuffle::Global { seed: 1 }.with_seed(9), Shuffle::Global { seed: 9 });
    /// assert_eq!(Shuffle::Sequential.with_seed(9), Shuffle::Sequential);
    /// ```
    pub fn with_seed(self, seed: u64) -> Shuffle {
        match self {
            Shuffle::Sequential => Shuffle::Sequential,
            Shuffle::Global { .. } => Shuffle::Global { seed },
            Shuffle::Quasi { block, .. } => Shuffle::Quasi { seed, block },
        }
    }

    /// The kind of order, without the seed.
    pub fn order(&self) -> Order {
        match *self {
            Shuffle::Sequential => Order::Sequential,
            Shuffle::Global { .. } => Order::Global,
            Shuffle::Quasi { block, .. } => Order::Quasi { block },
        }
    }
}

/// The kind of order a [`Shuffle`] gives, without its seed: recorded in [`LoaderState`]
/// so that a state is resumed only into a loader that orders the samples the same way.
/// Written `sequential`, `global` or `quasi:BLOCK` ([`std::fmt::Display`],
/// [`std::str::FromStr`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    /// [`Shuffle::Sequential`].
    Sequential,
    /// [`Shuffle::Global`].
    Global,
    /// [`Shuffle::Quasi`] with this block size.
    Quasi {
        /// Records per block.
        block: u32,
    },
}

impl std::fmt::Display for Order {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Order::Sequential => f.write_str("sequential"),
            Order::Global => f.write_str("global"),
            Order::Quasi { block } => write!(f, "quasi:{block}"),
        }
    }
}

impl std::str::FromStr for Order {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "sequential" => Ok(Order::Sequential),
            "global" => Ok(Order::Global),
            _ => s
                .strip_prefix("quasi:")
                .and_then(|b| b.parse().ok())
                .map(|block| Order::Quasi { block })
                .ok_or_else(|| {
                    format!("order {s:?} is not \"sequential\", \"global\" or \"quasi:BLOCK\"")
                }),
        }
    }
}

/// The per-rank order of sample indices for an epoch.
///
/// # Examples
///
/// ```
/// use stoker_loader::{Sampler, Shuffle};
/// // 10 samples, 2 ranks, batches of 3, keep the tail.
/// let r0 = Sampler::new(10, Shuffle::Global { seed: 1 }, 0, 2, 3, false).unwrap();
/// let r1 = Sampler::new(10, Shuffle::Global { seed: 1 }, 1, 2, 3, false).unwrap();
/// assert_eq!(r0.num_batches(), r1.num_batches());
/// let (a, b) = (r0.order(4), r1.order(4));
/// assert!(a.iter().all(|i| !b.contains(i)));
/// assert_eq!(a, r0.order(4)); // same (seed, epoch) → same order
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sampler {
    /// Samples an epoch draws from (> 0): the dataset's records, or the subset's positions.
    len: u64,
    /// The records drawn from, when not the whole dataset.
    subset: Option<Subset>,
    shuffle: Shuffle,
    /// `rank < world`.
    rank: u64,
    /// `world ≥ 1`.
    world: u64,
    /// `batch_size ≥ 1`.
    batch_size: u64,
    /// The uneven tail is cut (else padded).
    drop_last: bool,
    /// Each rank's short last batch is dropped.
    drop_partial: bool,
}

impl Sampler {
    /// A sampler over `len` records for `rank` of `world`.
    ///
    /// # Errors
    ///
    /// [`LoaderError::EmptyDataset`] when `len == 0`, [`LoaderError::InvalidConfig`] for
    /// `world == 0`, `rank >= world`, `batch_size == 0` or a quasi block of 0.
    pub fn new(
        len: u64,
        shuffle: Shuffle,
        rank: u64,
        world: u64,
        batch_size: u64,
        drop_last: bool,
    ) -> Result<Self, LoaderError> {
        if len == 0 {
            return Err(LoaderError::EmptyDataset);
        }
        if world == 0 || rank >= world {
            return Err(LoaderError::InvalidConfig {
                field: "distributed",
                reason: format!("rank {rank} is not in 0..{world}"),
            });
        }
        if batch_size == 0 {
            return Err(LoaderError::InvalidConfig {
                field: "batch_size",
                reason: "must be at least 1".into(),
            });
        }
        if let Shuffle::Quasi { block: 0, .. } = shuffle {
            return Err(LoaderError::InvalidConfig {
                field: "shuffle",
                reason: "Quasi block must be at least 1 record".into(),
            });
        }
        Ok(Sampler {
            len,
            subset: None,
            shuffle,
            rank,
            world,
            batch_size,
            drop_last,
            drop_partial: drop_last,
        })
    }

    /// This sampler with each rank's short last batch dropped or kept as `drop` says,
    /// whatever `drop_last`: with `drop_last` and `false`, the uneven tail is cut (no
    /// sample twice) and the partial batch kept, as `DistributedSampler(drop_last=True)`
    /// with a `DataLoader` that keeps it.
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_loader::{Sampler, Shuffle};
    /// // 15 samples over 2 ranks, batches of 2: 7 samples each, the last batch of 1 kept.
    /// let s = Sampler::new(15, Shuffle::Sequential, 1, 2, 2, true)?
    ///     .with_drop_partial_batch(false);
    /// assert_eq!((s.num_batches(), s.batch_len(3)), (4, 1));
    /// assert_eq!(s.order(0), vec![7, 8, 9, 10, 11, 12, 13]);
    /// # Ok::<(), stoker_loader::LoaderError>(())
    /// ```
    pub fn with_drop_partial_batch(mut self, drop: bool) -> Self {
        self.drop_partial = drop;
        self
    }

    /// This sampler drawing from the records `indices` of a dataset of `records` instead
    /// of from all of them (as PyTorch's `Subset`, FFCV's `indices`): a train/validation
    /// split or a class kept out of one converted dataset, a quick run on a fraction. An
    /// index given twice is drawn twice an epoch. A sequential order yields them in the
    /// order given; a shuffled order is drawn over them sorted, so it depends on which
    /// indices were given and the seed, not on the list's order, and a quasi order's
    /// blocks are runs of nearby records. Batches report the records' own indices.
    ///
    /// # Errors
    ///
    /// [`LoaderError::InvalidConfig`] (`indices`) for an empty list or an index of
    /// `records` or more.
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_loader::{Sampler, Shuffle};
    /// // Every third record of 10, in batches of 2.
    /// let s = Sampler::new(10, Shuffle::Sequential, 0, 1, 2, false)?
    ///     .with_indices(vec![0, 3, 6, 9], 10)?;
    /// assert_eq!((s.num_batches(), s.order(0)), (2, vec![0, 3, 6, 9]));
    /// # Ok::<(), stoker_loader::LoaderError>(())
    /// ```
    pub fn with_indices(mut self, indices: Vec<u64>, records: u64) -> Result<Self, LoaderError> {
        let sort = self.shuffle != Shuffle::Sequential;
        let subset = Subset::new(indices, records, sort)?;
        self.len = subset.len();
        self.subset = Some(subset);
        Ok(self)
    }

    /// The record indices an epoch draws from ([`Sampler::with_indices`]), sorted for a
    /// shuffled order; `None` for the whole dataset.
    pub fn indices(&self) -> Option<&[u64]> {
        self.subset.as_ref().map(Subset::indices)
    }

    /// The indices of [`Sampler::indices`], shared (the epoch's plan scans them for
    /// replacements).
    pub(crate) fn shared_indices(&self) -> Option<std::sync::Arc<[u64]>> {
        self.subset.as_ref().map(Subset::shared)
    }

    /// Which records an epoch draws from, as [`LoaderState::indices`] records it.
    pub fn selection(&self) -> Selection {
        self.subset
            .as_ref()
            .map_or(Selection::All, Subset::selection)
    }

    /// Whether the tail that does not divide evenly over the ranks is cut (else padded
    /// by repeating the first samples of the order).
    pub fn drop_last(&self) -> bool {
        self.drop_last
    }

    /// Whether each rank's short last batch is dropped (by default, as `drop_last`).
    pub fn drop_partial_batch(&self) -> bool {
        self.drop_partial
    }

    /// The shuffle mode.
    pub fn shuffle(&self) -> Shuffle {
        self.shuffle
    }

    /// The batch size.
    pub fn batch_size(&self) -> u64 {
        self.batch_size
    }

    /// The number of ranks the dataset is split over.
    pub fn world_size(&self) -> u64 {
        self.world
    }

    /// The samples an epoch draws from (all ranks): the dataset's records, or as many as
    /// [`Sampler::with_indices`] was given.
    pub fn dataset_len(&self) -> u64 {
        self.len
    }

    /// Samples this rank visits per epoch (before dropping a partial batch).
    pub(crate) fn rank_share(&self) -> u64 {
        if self.drop_last {
            self.len / self.world
        } else {
            self.len.div_ceil(self.world)
        }
    }

    /// Samples this rank yields per epoch (the same on every rank).
    pub fn samples_per_epoch(&self) -> u64 {
        if self.drop_partial {
            self.num_batches() * self.batch_size
        } else {
            self.rank_share()
        }
    }

    /// Batches per epoch (the same on every rank).
    pub fn num_batches(&self) -> u64 {
        if self.drop_partial {
            self.rank_share() / self.batch_size
        } else {
            self.rank_share().div_ceil(self.batch_size)
        }
    }

    /// Samples in batch `batch` (all full except possibly the last one, unless it is dropped;
    /// 0 past the epoch's last batch, however far past).
    pub fn batch_len(&self, batch: u64) -> u64 {
        // A batch past the end may start past u64: it has no samples, like any other.
        let Some(start) = batch.checked_mul(self.batch_size) else {
            return 0;
        };
        self.samples_per_epoch()
            .saturating_sub(start)
            .min(self.batch_size)
    }

    /// The position in the epoch's global order of this rank's `pos`-th sample
    /// (`order(e)[pos]`): ranks take consecutive slices of the global order (extended by
    /// wrap-around when it does not divide evenly), so positions are distinct across ranks,
    /// and a padding copy's position lies past the dataset's length. What the sample's
    /// crop and flip are drawn from ([`crate::transform::DrawKey`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_loader::{Sampler, Shuffle};
    /// // 10 samples over 3 ranks: shares of 4, the last padded by 2 repeated samples.
    /// let r2 = Sampler::new(10, Shuffle::Sequential, 2, 3, 4, false).unwrap();
    /// assert_eq!(r2.order(0), vec![8, 9, 0, 1]);
    /// assert_eq!(r2.global_position(2), 10);
    /// ```
    pub fn global_position(&self, pos: u64) -> u64 {
        // Saturating: a `pos` past this rank's share (any u64 a caller passes) is past the
        // dataset either way, and must not panic in a debug build.
        self.rank
            .saturating_mul(self.rank_share())
            .saturating_add(pos)
    }

    /// The permutation of `0..len` shared by all ranks for `epoch` (of the indices given
    /// to [`Sampler::with_indices`], when they were).
    pub fn global_order(&self, epoch: u64) -> Vec<u64> {
        finished(self.global_positions(epoch, 0, self.len, &|| true))
    }

    /// This rank's sample indices for `epoch`, in the order they are yielded; batch `k` is
    /// `order[k·batch_size ..][..batch_len(k)]`.
    ///
    /// Only this rank's part of the global order is kept: a global shuffle draws the
    /// whole permutation (in 4-byte indices below 2³² records), a quasi shuffle builds only
    /// the windows this rank reads, and a sequential order builds nothing else.
    pub fn order(&self, epoch: u64) -> Vec<u64> {
        finished(self.order_while(epoch, &|| true))
    }

    /// [`Sampler::order`], asking `go_on` now and then (every 2¹⁶ swaps or 2²⁰ entries)
    /// whether to finish: `None` when told to stop. For the order drawn ahead
    /// (`order_ahead`), which nobody may wait for any more.
    pub(crate) fn order_while(&self, epoch: u64, go_on: &dyn Fn() -> bool) -> Option<Vec<u64>> {
        let take = self.samples_per_epoch();
        self.global_positions(epoch, self.global_position(0), take, go_on)
    }

    /// `take` entries of the epoch's global order from position `from`, wrapping around
    /// past the end (`take ≤ len`), as records: what [`Sampler::order`] and
    /// [`Sampler::global_order`] return. `None` when `go_on` said to stop.
    fn global_positions(
        &self,
        epoch: u64,
        from: u64,
        take: u64,
        go_on: &dyn Fn() -> bool,
    ) -> Option<Vec<u64>> {
        let mut drawn = self.positions_drawn(epoch, from, take, go_on)?;
        if let Some(subset) = &self.subset {
            for p in &mut drawn {
                *p = subset.get(*p);
            }
        }
        Some(drawn)
    }

    /// [`Sampler::global_positions`] as positions in `0..len`.
    fn positions_drawn(
        &self,
        epoch: u64,
        from: u64,
        take: u64,
        go_on: &dyn Fn() -> bool,
    ) -> Option<Vec<u64>> {
        let len = self.len;
        let wanted = Wanted::new(from % len, take, len);
        match self.shuffle {
            Shuffle::Sequential => Some(wanted.positions().collect()),
            Shuffle::Global { seed } => {
                let mut rng = Rng::new(&[seed, epoch, STREAM_ORDER]);
                if len <= 1 << 32 {
                    let perm = permutation(len, &mut rng, |i| i as u32, go_on)?;
                    wanted.pick(|p| u64::from(perm[p as usize]), go_on)
                } else {
                    let perm = permutation(len, &mut rng, |i| i, go_on)?;
                    wanted.pick(|p| perm[p as usize], go_on)
                }
            }
            Shuffle::Quasi { seed, block } => {
                let mut rng = Rng::new(&[seed, epoch, STREAM_ORDER]);
                quasi_positions(len, u64::from(block), &mut rng, &wanted, go_on)
            }
        }
    }
}

/// Positions of the global order to keep: `take` of them from `from`, wrapping past `len`.
struct Wanted {
    from: u64,
    take: u64,
    len: u64,
}

impl Wanted {
    fn new(from: u64, take: u64, len: u64) -> Self {
        debug_assert!(from < len && take <= len);
        Wanted { from, take, len }
    }

    /// The positions, in the order they are yielded.
    fn positions(&self) -> impl Iterator<Item = u64> + '_ {
        (self.from..self.from + self.take).map(|p| p % self.len)
    }

    /// `entry` of each position, in the order they are yielded; `None` when `go_on`,
    /// asked every 2²⁰ entries, says to stop.
    fn pick(&self, entry: impl Fn(u64) -> u64, go_on: &dyn Fn() -> bool) -> Option<Vec<u64>> {
        const ASK_EVERY: u64 = 1 << 20;
        let mut out = Vec::with_capacity(self.take as usize);
        let mut start = self.from;
        let end = self.from + self.take;
        while start < end {
            if start > self.from && !go_on() {
                return None;
            }
            let stop = end.min(start + ASK_EVERY);
            out.extend((start..stop).map(|p| entry(p % self.len)));
            start = stop;
        }
        Some(out)
    }

    /// For global positions `range`, the index in the kept order of each kept one, as
    /// (first kept position, its index, how many follow on).
    fn overlaps(&self, range: std::ops::Range<u64>) -> impl Iterator<Item = (u64, usize, u64)> {
        let end = self.from + self.take;
        // The kept positions as at most two runs: [from, min(end, len)) and the wrapped
        // [0, end - len).
        let runs = [
            (self.from, end.min(self.len), 0u64),
            (0, end.saturating_sub(self.len), self.len - self.from),
        ];
        runs.into_iter().filter_map(move |(start, stop, offset)| {
            let (a, b) = (start.max(range.start), stop.min(range.end));
            (a < b).then(|| (a, (offset + a - start) as usize, b - a))
        })
    }
}

/// A random permutation of `0..len` drawn by `rng`, in indices made by `index` (4 bytes
/// where they fit: half the memory, and a faster shuffle, for the same draws).
fn permutation<T: Copy>(
    len: u64,
    rng: &mut Rng,
    index: impl Fn(u64) -> T,
    go_on: &dyn Fn() -> bool,
) -> Option<Vec<T>> {
    let mut perm: Vec<T> = (0..len).map(index).collect();
    rng.shuffle_while(&mut perm, go_on).then_some(perm)
}

/// The result of a draw that was never told to stop.
fn finished(drawn: Option<Vec<u64>>) -> Vec<u64> {
    drawn.unwrap_or_else(|| unreachable!("a draw whose go_on is always true finishes"))
}

/// The kept positions of a quasi order: blocks of `block` records visited in a random
/// order, the records of each window of [`QUASI_WINDOW_BLOCKS`] blocks shuffled together.
/// Windows holding no kept position are not built: their shuffle's draws are made and
/// dropped, so the windows after them get the same draws as in the whole order.
fn quasi_positions(
    len: u64,
    block: u64,
    rng: &mut Rng,
    wanted: &Wanted,
    go_on: &dyn Fn() -> bool,
) -> Option<Vec<u64>> {
    let mut blocks: Vec<u64> = (0..len.div_ceil(block)).collect();
    rng.shuffle(&mut blocks);
    // The records of block `b` (the last one may be short).
    let records = |b: u64| b * block..((b + 1) * block).min(len);
    let mut out = vec![0u64; wanted.take as usize];
    let mut window: Vec<u64> = Vec::new();
    let mut start = 0u64;
    for group in blocks.chunks(QUASI_WINDOW_BLOCKS as usize) {
        if !go_on() {
            return None;
        }
        let size: u64 = group
            .iter()
            .map(|&b| records(b).end - records(b).start)
            .sum();
        let range = start..start + size;
        start += size;
        if wanted.overlaps(range.clone()).next().is_none() {
            for i in (1..size).rev() {
                rng.below(i + 1);
            }
            continue;
        }
        window.clear();
        for &b in group {
            window.extend(records(b));
        }
        rng.shuffle(&mut window);
        for (first, at, count) in wanted.overlaps(range.clone()) {
            let from = (first - range.start) as usize;
            out[at..at + count as usize].copy_from_slice(&window[from..from + count as usize]);
        }
    }
    Some(out)
}

/// Stream tags keep the order draw and the per-sample transform draws independent.
pub(crate) const STREAM_ORDER: u64 = 0x6f72_6465_7200_0001;
/// See [`STREAM_ORDER`].
pub(crate) const STREAM_TRANSFORM: u64 = 0x7472_616e_7300_0002;

/// The generator behind every order and crop draw (shared with the converter's `--shuffle`).
pub(crate) use stoker_formats::seeded::{Permutation, Rng};

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn modes() -> [Shuffle; 4] {
        [
            Shuffle::Sequential,
            Shuffle::Global { seed: 7 },
            Shuffle::Quasi { seed: 7, block: 5 },
            Shuffle::Quasi {
                seed: 7,
                block: 1000,
            },
        ]
    }

    #[test]
    fn every_sample_once_per_epoch_single_rank() {
        for shuffle in modes() {
            for n in [1u64, 2, 17, 100, 1001] {
                let s = Sampler::new(n, shuffle, 0, 1, 8, false).unwrap();
                let order = s.order(3);
                assert_eq!(order.len() as u64, n, "{shuffle:?} n={n}");
                let set: HashSet<u64> = order.iter().copied().collect();
                assert_eq!(set.len() as u64, n, "{shuffle:?} n={n}: duplicates");
                assert!(order.iter().all(|&i| i < n));
                let total: u64 = (0..s.num_batches()).map(|b| s.batch_len(b)).sum();
                assert_eq!(total, n);
            }
        }
    }

    #[test]
    fn same_seed_epoch_same_order_and_epochs_differ() {
        let s = Sampler::new(500, Shuffle::Global { seed: 3 }, 0, 1, 8, false).unwrap();
        assert_eq!(s.order(2), s.order(2));
        assert_ne!(s.order(2), s.order(3));
        let other_seed = Sampler::new(500, Shuffle::Global { seed: 4 }, 0, 1, 8, false).unwrap();
        assert_ne!(s.order(2), other_seed.order(2));
        // A shuffle is not the identity.
        assert_ne!(s.order(0), (0..500).collect::<Vec<_>>());
    }

    #[test]
    fn ranks_disjoint_and_equal_batches() {
        for shuffle in modes() {
            for n in [1u64, 7, 10, 33, 100, 257] {
                for world in [1u64, 2, 3, 4, 8] {
                    for batch in [1u64, 3, 4, 16] {
                        for (drop_last, drop_partial) in
                            [(false, false), (true, true), (true, false), (false, true)]
                        {
                            let samplers: Vec<Sampler> = (0..world)
                                .map(|r| {
                                    Sampler::new(n, shuffle, r, world, batch, drop_last)
                                        .unwrap()
                                        .with_drop_partial_batch(drop_partial)
                                })
                                .collect();
                            let nb = samplers[0].num_batches();
                            let ctx = format!(
                                "{shuffle:?} n={n} w={world} b={batch} drop={drop_last}/{drop_partial}"
                            );
                            let mut seen = HashSet::new();
                            let mut covered = HashSet::new();
                            for s in &samplers {
                                assert_eq!(s.num_batches(), nb, "{ctx}");
                                let order = s.order(1);
                                let sizes: Vec<u64> = (0..nb).map(|b| s.batch_len(b)).collect();
                                assert_eq!(
                                    sizes,
                                    (0..nb)
                                        .map(|b| samplers[0].batch_len(b))
                                        .collect::<Vec<_>>(),
                                    "{ctx}"
                                );
                                assert_eq!(order.len() as u64, sizes.iter().sum::<u64>(), "{ctx}");
                                if drop_partial {
                                    assert!(sizes.iter().all(|&x| x == batch), "{ctx}");
                                }
                                for &i in &order {
                                    covered.insert(i);
                                    // Padding repeats samples only when n is not divisible by world.
                                    if !seen.insert(i) {
                                        assert!(
                                            !drop_last && n % world != 0,
                                            "{ctx}: {i} on two ranks"
                                        );
                                    }
                                }
                            }
                            let share = if drop_last {
                                n / world
                            } else {
                                n.div_ceil(world)
                            };
                            let want = match drop_partial {
                                true => share / batch,
                                false => share.div_ceil(batch),
                            };
                            assert_eq!(nb, want, "{ctx}");
                            // Nothing but the cut tail (fewer than `world` samples) and the
                            // dropped partial batches is left out.
                            if !drop_partial {
                                let kept = if drop_last { world * (n / world) } else { n };
                                assert_eq!(covered.len() as u64, kept, "{ctx}: samples missing");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn quasi_stays_within_windows() {
        let block = 10u32;
        let s = Sampler::new(1000, Shuffle::Quasi { seed: 1, block }, 0, 1, 16, false).unwrap();
        let order = s.order(0);
        let window = (QUASI_WINDOW_BLOCKS * u64::from(block)) as usize;
        for chunk in order.chunks(window) {
            let blocks: HashSet<u64> = chunk.iter().map(|i| i / u64::from(block)).collect();
            assert!(blocks.len() as u64 <= QUASI_WINDOW_BLOCKS, "{blocks:?}");
        }
        assert_ne!(order, (0..1000).collect::<Vec<_>>());
    }

    /// The orders as they were drawn before ranks built only their own part: the whole
    /// global order in 8-byte indices, then this rank's slice of it.
    fn reference_order(s: &Sampler, epoch: u64) -> Vec<u64> {
        let mut order: Vec<u64> = (0..s.len).collect();
        match s.shuffle {
            Shuffle::Sequential => {}
            Shuffle::Global { seed } => {
                Rng::new(&[seed, epoch, STREAM_ORDER]).shuffle(&mut order);
            }
            Shuffle::Quasi { seed, block } => {
                let block = u64::from(block);
                let mut rng = Rng::new(&[seed, epoch, STREAM_ORDER]);
                let mut blocks: Vec<u64> = (0..s.len.div_ceil(block)).collect();
                rng.shuffle(&mut blocks);
                order.clear();
                for window in blocks.chunks(QUASI_WINDOW_BLOCKS as usize) {
                    let start = order.len();
                    for &b in window {
                        order.extend(b * block..((b + 1) * block).min(s.len));
                    }
                    rng.shuffle(&mut order[start..]);
                }
            }
        }
        let share = s.rank_share();
        let start = s.rank * share;
        (start..start + share)
            .map(|i| order[(i % s.len) as usize])
            .take(s.samples_per_epoch() as usize)
            .collect()
    }

    #[test]
    fn each_rank_gets_the_same_order_as_from_the_whole_global_order() {
        let mut modes = modes().to_vec();
        modes.push(Shuffle::Quasi { seed: 9, block: 1 });
        modes.push(Shuffle::Quasi { seed: 9, block: 3 });
        for shuffle in modes {
            for n in [1u64, 2, 5, 10, 33, 100, 257, 1001, 4099] {
                for world in [1u64, 2, 3, 4, 7, 8, 64] {
                    for drop_last in [false, true] {
                        for rank in [0, world / 2, world - 1] {
                            let s = Sampler::new(n, shuffle, rank, world, 4, drop_last).unwrap();
                            for epoch in [0, 3] {
                                assert_eq!(
                                    s.order(epoch),
                                    reference_order(&s, epoch),
                                    "{shuffle:?} n={n} world={world} rank={rank} drop={drop_last}"
                                );
                            }
                        }
                    }
                }
                let s = Sampler::new(n, shuffle, 0, 1, 4, false).unwrap();
                assert_eq!(s.global_order(2), reference_order(&s, 2));
            }
        }
    }

    #[test]
    fn invalid_settings_are_errors() {
        assert!(matches!(
            Sampler::new(0, Shuffle::Sequential, 0, 1, 1, false),
            Err(LoaderError::EmptyDataset)
        ));
        assert!(Sampler::new(5, Shuffle::Sequential, 2, 2, 1, false).is_err());
        assert!(Sampler::new(5, Shuffle::Sequential, 0, 1, 0, false).is_err());
        assert!(Sampler::new(5, Shuffle::Quasi { seed: 0, block: 0 }, 0, 1, 1, false).is_err());
    }
}
