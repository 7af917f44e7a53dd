//! What an epoch's order costs one rank: time and peak heap of `Sampler::order` for each
//! shuffle at N records, and the same for the whole-permutation way (all N indices in
//! 8 bytes, shuffled, then the rank's slice copied out: how stoker drew orders before, and
//! how FFCV and torch's `DistributedSampler` still do, whose own cost
//! `benches/peers/epoch_order.py` measures in the same run).
//!
//!     cargo bench --bench epoch_order -- 100000000
//!
//! Prints one JSON line per case.

use std::time::Instant;

use stoker::loader::{Sampler, Shuffle};

#[global_allocator]
static HEAP: stoker_testdata::heap::Counting = stoker_testdata::heap::Counting;

/// Rank 0's order the whole-permutation way: all `len` indices in 8 bytes, shuffled, then
/// the rank's slice copied out.
fn whole_permutation(s: &Sampler, epoch: u64) -> Vec<u64> {
    assert_eq!(s.global_position(0), 0, "rank 0 only");
    let all = Sampler::new(s.dataset_len(), s.shuffle(), 0, 1, 1, false)
        .expect("valid")
        .global_order(epoch);
    (0..s.samples_per_epoch())
        .map(|p| all[(p % s.dataset_len()) as usize])
        .collect()
}

fn measure(case: &str, n: u64, world: u64, f: impl Fn() -> Vec<u64>) {
    let base = stoker_testdata::heap::start_peak();
    let t = Instant::now();
    let order = std::hint::black_box(f());
    let seconds = t.elapsed().as_secs_f64();
    let peak = stoker_testdata::heap::peak() - base;
    println!(
        "{{\"case\": \"{case}\", \"records\": {n}, \"world\": {world}, \"seconds\": {seconds:.3}, \"peak_mb\": {:.1}, \"kept_mb\": {:.1}}}",
        peak as f64 / 1e6,
        (order.capacity() * 8) as f64 / 1e6
    );
}

fn main() {
    let n: u64 = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map_or(10_000_000, |a| a.parse().expect("N: a record count"));
    let shuffles = [
        ("global", Shuffle::Global { seed: 1 }),
        (
            "quasi:512",
            Shuffle::Quasi {
                seed: 1,
                block: 512,
            },
        ),
        ("sequential", Shuffle::Sequential),
    ];
    for world in [1, 64] {
        for (name, shuffle) in shuffles {
            let s = Sampler::new(n, shuffle, 0, world, 256, false).expect("valid");
            measure(&format!("stoker {name}"), n, world, || s.order(3));
            measure(&format!("whole permutation {name}"), n, world, || {
                whole_permutation(&s, 3)
            });
        }
    }
}
