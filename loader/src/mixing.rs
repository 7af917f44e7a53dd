//! Whether a quasi-random order mixes the classes of a dataset stored class by class, from
//! the manifest alone (reading the labels would touch every record).

use crate::sampler::{Shuffle, QUASI_WINDOW_BLOCKS};

/// Why `shuffle` would give batches of far fewer classes than a global shuffle on this
/// dataset, if it would. A [`Shuffle::Quasi`] window is [`QUASI_WINDOW_BLOCKS`] blocks of
/// consecutive records, so on records stored class by class (the manifest's `order` flag is
/// `classes`: an ImageFolder converted without `--shuffle`) a batch sees only the classes
/// those blocks cross. `None` when a batch would still hold at least half as many classes
/// as under a global shuffle, or when the records are in another order.
///
/// # Examples
///
/// ```
/// use stoker_loader::{mixing_note, Shuffle};
/// let quasi = Shuffle::Quasi { seed: 0, block: 512 };
/// // ImageNet: 1,281,167 records in 1,000 classes, stored class by class; batches of 256.
/// let note = mixing_note(quasi, 256, 1_281_167, 1000, Some("classes")).unwrap();
/// assert!(note.contains("about 11 classes"), "{note}");
/// assert!(mixing_note(quasi, 256, 1_281_167, 1000, Some("shuffled")).is_none());
/// let global = Shuffle::Global { seed: 0 };
/// assert!(mixing_note(global, 256, 1_281_167, 1000, Some("classes")).is_none());
/// ```
pub fn mixing_note(
    shuffle: Shuffle,
    batch_size: u64,
    records: u64,
    classes: usize,
    stored_order: Option<&str>,
) -> Option<String> {
    let Shuffle::Quasi { block, .. } = shuffle else {
        return None;
    };
    if stored_order != Some("classes") || classes < 2 || records == 0 || batch_size == 0 {
        return None;
    }
    let (c, n, b) = (classes as f64, records as f64, batch_size as f64);
    let block = f64::from(block).min(n);
    let window = block * QUASI_WINDOW_BLOCKS as f64;
    // A block of B records crosses 1 + (B − 1)/L class runs of L = n/c records on average;
    // a batch larger than a window spans several windows.
    let per_window = QUASI_WINDOW_BLOCKS as f64 * (1.0 + (block - 1.0) * c / n);
    let pool = (per_window * (b / window).max(1.0)).min(c);
    let quasi = expected_distinct(pool, b);
    let global = expected_distinct(c, b);
    (quasi * 2.0 < global).then(|| {
        format!(
            "shuffle=quasi (blocks of {block} records) on a dataset stored class by class: a \
             batch of {batch_size} holds about {quasi:.0} classes, where a global shuffle would \
             give about {global:.0} of the {classes}; convert it with --shuffle (Python: \
             stoker.convert(..., shuffle=True)) so that nearby records are of mixed classes, \
             or use a global shuffle"
        )
    })
}

/// Expected distinct classes among `draws` uniform draws from `classes` equally likely ones.
fn expected_distinct(classes: f64, draws: f64) -> f64 {
    classes * (1.0 - (1.0 - 1.0 / classes).powf(draws))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_only_when_batches_hold_under_half_the_classes_of_a_global_shuffle() {
        let quasi = |block| Shuffle::Quasi { seed: 0, block };
        let classes = Some("classes");
        // 100 classes of 100 records, batches of 64: blocks of 10 give windows of 80
        // records across about 9 classes, a global shuffle about 47.
        let note = mixing_note(quasi(10), 64, 10_000, 100, classes).unwrap();
        assert!(note.contains("about 9 classes"), "{note}");
        assert!(note.contains("about 47 of the 100"), "{note}");
        // One-record blocks: a window is 8 random records, as mixed as it gets.
        assert!(mixing_note(quasi(1), 64, 10_000, 100, classes).is_none());
        // Blocks of 1,000 cross 10 classes each: windows reach 80 classes.
        assert!(mixing_note(quasi(1000), 64, 10_000, 100, classes).is_none());
        // A batch of 4 holds about 4 classes either way.
        assert!(mixing_note(quasi(10), 4, 10_000, 100, classes).is_none());
        for order in [None, Some("shuffled"), Some("list"), Some("flat")] {
            assert!(mixing_note(quasi(10), 64, 10_000, 100, order).is_none());
        }
        assert!(mixing_note(Shuffle::Sequential, 64, 10_000, 100, classes).is_none());
        assert!(mixing_note(quasi(10), 64, 0, 100, classes).is_none());
    }
}
