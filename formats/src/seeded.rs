//! The deterministic generator behind the converter's `--shuffle` and the loader's orders
//! and crop draws: one generator, so a seed means the same thing everywhere.

/// A small deterministic generator (SplitMix64): fast, seedable from a tuple, and identical on
/// every platform and release, which is all a stored order, an epoch's order or a crop draw
/// needs. Not for anything secret.
///
/// # Examples
///
/// ```
/// use stoker_formats::seeded::Rng;
/// let mut a: Vec<u32> = (0..10).collect();
/// let mut b = a.clone();
/// Rng::new(&[7, 1]).shuffle(&mut a);
/// Rng::new(&[7, 1]).shuffle(&mut b);
/// assert_eq!(a, b);
/// assert_ne!(a, (0..10).collect::<Vec<_>>());
/// ```
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator seeded from a tuple of words (each one mixed in, so `(1, 2) ≠ (2, 1)`).
    pub fn new(words: &[u64]) -> Self {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for &w in words {
            state = mix(state ^ mix(w.wrapping_add(0x2545_f491_4f6c_dd1d)));
        }
        Rng { state }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.state)
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }

    /// Uniform integer in `0..n` (`n ≥ 1`), unbiased (Lemire's multiply-and-reject).
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = u128::from(self.next_u64()) * u128::from(n);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }

    /// Fisher–Yates.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        self.shuffle_while(items, || true);
    }

    /// [`Rng::shuffle`], asking `go_on` every 2¹⁶ swaps whether to finish: a shuffle of
    /// a hundred million items takes seconds, and one nobody waits for any more (a
    /// loader dropped while it draws the next epoch's order) should not go on. Returns
    /// whether it finished; when it did, `items` are exactly as [`Rng::shuffle`] leaves
    /// them (the same draws).
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_formats::seeded::Rng;
    /// let mut a: Vec<u32> = (0..1 << 18).collect();
    /// assert!(!Rng::new(&[7]).shuffle_while(&mut a, || false));
    /// ```
    pub fn shuffle_while<T>(&mut self, items: &mut [T], mut go_on: impl FnMut() -> bool) -> bool {
        const ASK_EVERY: usize = 1 << 16;
        // Fisher–Yates from the end, a run of ASK_EVERY swaps between questions (not a
        // test in every swap: the loop is the hot part of a global order's draw).
        let mut end = items.len();
        while end > 1 {
            let start = end.saturating_sub(ASK_EVERY).max(1);
            for i in (start..end).rev() {
                let j = self.below(i as u64 + 1) as usize;
                items.swap(i, j);
            }
            end = start;
            if end > 1 && !go_on() {
                return false;
            }
        }
        true
    }
}

/// A keyed pseudo-random permutation of `0..n`, evaluated one index at a time: `n` distinct
/// draws without building (or holding) the permutation, which a handful of draws out of
/// a share of millions does not want to. A four-round Feistel network over the smallest
/// power of four that holds `n` (so each half has the same width), with indices that land
/// outside `0..n` walked on through the network until they land inside: a permutation of
/// the larger domain restricted this way is a permutation of `0..n`, and as the domain
/// is under `4n`, a draw takes under four rounds on average.
///
/// # Examples
///
/// ```
/// use stoker_formats::seeded::Permutation;
/// let p = Permutation::new(&[7, 1], 10);
/// let mut all: Vec<u64> = (0..10).map(|i| p.at(i)).collect();
/// assert_ne!(all, (0..10).collect::<Vec<_>>());
/// all.sort();
/// assert_eq!(all, (0..10).collect::<Vec<_>>());
/// ```
#[derive(Debug, Clone)]
pub struct Permutation {
    n: u64,
    half_bits: u32,
    keys: [u64; 4],
}

impl Permutation {
    /// The permutation of `0..n` (`n ≥ 1`) keyed by a tuple of words, as [`Rng::new`].
    pub fn new(words: &[u64], n: u64) -> Self {
        assert!(n > 0, "a permutation of nothing");
        let bits = u64::BITS - (n - 1).leading_zeros();
        let mut rng = Rng::new(words);
        Permutation {
            n,
            half_bits: bits.div_ceil(2).max(1),
            keys: std::array::from_fn(|_| rng.next_u64()),
        }
    }

    /// The image of `i` (`i < n`).
    pub fn at(&self, i: u64) -> u64 {
        assert!(i < self.n, "index {i} of a permutation of {}", self.n);
        let mut x = i;
        loop {
            x = self.round_trip(x);
            if x < self.n {
                return x;
            }
        }
    }

    /// One pass through the Feistel network over `0..4^half_bits`.
    fn round_trip(&self, x: u64) -> u64 {
        let mask = (1u64 << self.half_bits) - 1;
        let (mut left, mut right) = (x >> self.half_bits, x & mask);
        for key in self.keys {
            (left, right) = (right, left ^ (mix(right ^ key) & mask));
        }
        (left << self.half_bits) | right
    }
}

pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shuffle_asked_to_stop_stops_and_one_left_to_finish_draws_as_shuffle() {
        let whole: Vec<u32> = (0..300_000).collect();
        let mut plain = whole.clone();
        Rng::new(&[3, 4]).shuffle(&mut plain);
        let mut asked = 0;
        let mut finished = whole.clone();
        assert!(Rng::new(&[3, 4]).shuffle_while(&mut finished, || {
            asked += 1;
            true
        }));
        assert_eq!(finished, plain);
        assert_eq!(asked, 300_000 / (1 << 16));
        let mut stopped = whole.clone();
        let mut left = 2;
        assert!(!Rng::new(&[3, 4]).shuffle_while(&mut stopped, || {
            left -= 1;
            left > 0
        }));
        assert_ne!(stopped, plain);
    }

    #[test]
    fn the_shuffle_is_the_plain_fisher_yates_loop() {
        // The loop as it was before the shuffle could be stopped: the orders of every
        // saved state depend on these draws.
        for len in [0usize, 1, 2, 65_535, 65_536, 65_537, 200_003] {
            let mut plain: Vec<u32> = (0..len as u32).collect();
            let mut rng = Rng::new(&[11, len as u64]);
            for i in (1..plain.len()).rev() {
                let j = rng.below(i as u64 + 1) as usize;
                plain.swap(i, j);
            }
            let mut now: Vec<u32> = (0..len as u32).collect();
            Rng::new(&[11, len as u64]).shuffle(&mut now);
            assert_eq!(now, plain, "{len}");
        }
    }

    #[test]
    fn below_is_in_range_and_covers() {
        let mut rng = Rng::new(&[1]);
        let mut hit = [0u32; 7];
        for _ in 0..7000 {
            hit[rng.below(7) as usize] += 1;
        }
        assert!(hit.iter().all(|&h| h > 800), "{hit:?}");
    }

    #[test]
    fn permutations_are_permutations_and_follow_their_key() {
        for n in [1u64, 2, 3, 4, 5, 17, 64, 100, 1000, 4097] {
            let p = Permutation::new(&[3, n], n);
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let x = p.at(i);
                assert!(!seen[x as usize], "n {n}: {x} twice");
                seen[x as usize] = true;
            }
        }
        let (a, b) = (Permutation::new(&[1], 1000), Permutation::new(&[2], 1000));
        let same = (0..1000).filter(|&i| a.at(i) == b.at(i)).count();
        assert!(same < 10, "{same} of 1000 equal");
        // Not a shift or a stride: neighbours land far apart.
        let near = (0..999)
            .filter(|&i| a.at(i).abs_diff(a.at(i + 1)) < 10)
            .count();
        assert!(near < 40, "{near} of 999 neighbours stay near");
        // The widest domain (64 bits) stays a bijection on what it is asked.
        let wide = Permutation::new(&[9], u64::MAX);
        let draws: std::collections::HashSet<u64> = (0..1000).map(|i| wide.at(i)).collect();
        assert_eq!(draws.len(), 1000);
    }

    /// Stored datasets and saved loader states depend on these exact values: a change to
    /// the generator would silently change every `--shuffle` conversion and resumed order.
    #[test]
    fn output_is_pinned() {
        let mut rng = Rng::new(&[0]);
        let first: Vec<u64> = (0..3).map(|_| rng.next_u64()).collect();
        assert_eq!(first, PINNED);
    }

    const PINNED: [u64; 3] = [
        13_624_239_866_400_845_387,
        13_661_822_084_099_680_877,
        15_128_014_372_054_601_538,
    ];
}
