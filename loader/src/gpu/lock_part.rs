//! A raw dataset over the page-lock limit, read in an order without locality (a
//! whole-dataset shuffle): as many of its shards as the limit leaves room for are
//! page-locked once, at build, and stay locked; the records of the others are staged
//! through pinned memory.
//!
//! Why: the moving window (`window_locker`) serves only orders that visit a few shards
//! at a time. A whole-dataset shuffle touches most shards in every batch, so no window
//! holds a batch and every record of such an epoch was staged. Locking a part for good
//! lets that share of every batch's records go to the device straight from the map (no
//! host write on the way, which is what keeps copies at the ceiling, see `registered`)
//! and costs no locking per epoch; the rest is staged as before.

use crate::Shuffle;

/// How raw records over the page-lock limit reach the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OverLimit {
    /// A moving window of shards, locked per epoch (`window_locker`).
    Window,
    /// A fixed part of the shards, locked at build ([`part_shards`]).
    Part,
}

/// The variable that overrides [`OverLimit::choose`], read at build: `window` or `part`
/// (a diagnostic, for measuring one route against the other).
pub(crate) const OVER_LIMIT_VAR: &str = "STOKER_RAW_OVER_LIMIT";

impl OverLimit {
    /// The route for `shuffle`: a whole-dataset shuffle has no window plan (its epochs
    /// would be staged whole), so it locks a part; orders with locality move a window.
    /// `var` is [`OVER_LIMIT_VAR`]'s value; another value than the two (but empty) is
    /// warned of and ignored.
    pub(crate) fn choose(shuffle: &Shuffle, var: Option<&str>) -> OverLimit {
        match var {
            Some("window") => return OverLimit::Window,
            Some("part") => return OverLimit::Part,
            // Set and empty is unset (a script passing an empty default).
            None | Some("") => {}
            Some(other) => tracing::warn!(
                "{OVER_LIMIT_VAR}={other:?} is neither \"window\" nor \"part\"; ignored"
            ),
        }
        match shuffle {
            Shuffle::Global { .. } => OverLimit::Part,
            Shuffle::Sequential | Shuffle::Quasi { .. } => OverLimit::Window,
        }
    }
}

/// The shards to lock for good, in manifest order: every shard already locked in this
/// process (`locked`: other loaders over the same maps hold it, so joining it costs
/// nothing), and each other non-empty one that fits in what is left of `budget` bytes
/// (first fit: a large shard that does not fit leaves room for smaller ones after it).
pub(crate) fn part_shards(bytes: &[u64], locked: &[bool], budget: u64) -> Vec<usize> {
    let mut left = budget;
    let mut chosen = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        if locked.get(i).copied().unwrap_or(false) {
            chosen.push(i);
        } else if b > 0 && b <= left {
            left -= b;
            chosen.push(i);
        }
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_dataset_shuffle_locks_a_part_orders_with_locality_move_a_window() {
        let global = Shuffle::Global { seed: 3 };
        let quasi = Shuffle::Quasi { seed: 3, block: 64 };
        assert_eq!(OverLimit::choose(&global, None), OverLimit::Part);
        assert_eq!(
            OverLimit::choose(&Shuffle::Sequential, None),
            OverLimit::Window
        );
        assert_eq!(OverLimit::choose(&quasi, None), OverLimit::Window);
        // The variable decides either way; an unknown value is ignored.
        assert_eq!(
            OverLimit::choose(&global, Some("window")),
            OverLimit::Window
        );
        assert_eq!(OverLimit::choose(&quasi, Some("part")), OverLimit::Part);
        assert_eq!(OverLimit::choose(&global, Some("both")), OverLimit::Part);
        assert_eq!(OverLimit::choose(&quasi, Some("")), OverLimit::Window);
    }

    #[test]
    fn shards_are_taken_in_order_while_they_fit_and_locked_ones_cost_nothing() {
        // 100 of budget: 40 + 30 fit, 50 does not, 20 after it does, 15 then does not.
        assert_eq!(
            part_shards(&[40, 30, 50, 20, 15], &[false; 5], 100),
            [0, 1, 3]
        );
        // Shard 2 locked by another loader: joined at no cost, the rest as before.
        assert_eq!(
            part_shards(
                &[40, 30, 50, 20, 15],
                &[false, false, true, false, false],
                100
            ),
            [0, 1, 2, 3]
        );
        // Empty shards have nothing to lock; no budget, only what is locked already.
        assert_eq!(part_shards(&[0, 10], &[false; 2], 100), [1]);
        assert_eq!(part_shards(&[10, 10], &[false, true], 0), [1]);
        assert!(part_shards(&[10, 10], &[], 5).is_empty());
    }
}
