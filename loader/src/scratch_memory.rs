//! The memory a worker keeps from record to record (decoded pixels, the crop window), and
//! what happens when there is not enough of it: large images take turns, and a record
//! whose memory could not be allocated is tried again after the other workers freed
//! theirs, so that a short moment never changes which images an epoch trains on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use stoker_formats::DatasetReader;

use crate::error::LoaderError;
use crate::transform::resize::CropResizer;

/// Decoded images above this many bytes (about 22 Mpx of RGB) are loaded one at a time
/// in the process ([`large_image_turn`]), and their scratch is freed after: otherwise every
/// worker could hold one at once (16 workers × a 100 Mpx image is 4.8 GB, more with the
/// decoder's own buffers), where ordinary photos need a small part of that.
pub(crate) const LARGE_IMAGE_BYTES: u64 = 64 << 20;

/// The turn of a worker loading record `index`, when its header says it decodes to more
/// than [`LARGE_IMAGE_BYTES`]: held while it is decoded and transformed. `None` (no wait)
/// for the others, and for a record that cannot be read (its load reports why).
pub(crate) fn large_image_turn(
    reader: &DatasetReader,
    index: u64,
) -> Option<MutexGuard<'static, ()>> {
    crate::pipeline::guard_reads();
    let h = reader.get(index).ok()?.header;
    // Saturating: a damaged header's sides can multiply past u64 (its load says why).
    let bytes = (u64::from(h.width) * u64::from(h.height)).saturating_mul(3);
    (bytes > LARGE_IMAGE_BYTES).then(|| LARGE_TURN.lock().unwrap_or_else(|p| p.into_inner()))
}

/// The process's one turn for large images ([`large_image_turn`]) and for records tried
/// again when short of memory ([`retry_short_of_memory`]).
static LARGE_TURN: Mutex<()> = Mutex::new(());

/// The pauses before each new try of a record whose memory could not be allocated: the
/// other workers' images are done within milliseconds, and about a second in all tells
/// a short moment from a process that is at its limit.
const MEMORY_RETRY_PAUSES_MS: [u64; 6] = [1, 4, 16, 64, 256, 640];

/// How many times a worker of this process ran short of memory for a record: each time,
/// every worker frees the scratch it keeps between records ([`ScratchTrim`]).
static SHORT_OF_MEMORY: AtomicU64 = AtomicU64::new(0);

/// Tells a worker, between two records, that another ran short of memory since it last
/// asked: the scratch it keeps (grown to the largest image it has seen) is then freed, so
/// that the one waiting gets the memory instead of failing.
#[derive(Debug)]
struct ScratchTrim(u64);

impl ScratchTrim {
    fn new() -> Self {
        ScratchTrim(SHORT_OF_MEMORY.load(Ordering::Relaxed))
    }

    /// Whether a worker ran short of memory since the last call.
    fn asked(&mut self) -> bool {
        let now = SHORT_OF_MEMORY.load(Ordering::Relaxed);
        std::mem::replace(&mut self.0, now) != now
    }
}

/// What a worker keeps from record to record, each grown to the largest image it has
/// seen: decoded pixels that did not go straight into a batch, and the resizer with its
/// crop window.
pub(crate) struct Scratch {
    pub(crate) pixels: Vec<u8>,
    pub(crate) resizer: CropResizer,
    trim: ScratchTrim,
}

impl Scratch {
    /// Empty scratch for outputs of `size × size`.
    pub(crate) fn new(size: u32) -> Self {
        Scratch {
            pixels: Vec::new(),
            resizer: CropResizer::new(size),
            trim: ScratchTrim::new(),
        }
    }

    /// Frees the pixels and the crop window (they grow back as needed).
    pub(crate) fn release(&mut self) {
        self.pixels = Vec::new();
        self.resizer.release();
    }

    /// [`Scratch::release`], when a worker of the process ran short of memory since the
    /// last call ([`retry_short_of_memory`]): between two records.
    pub(crate) fn trim_if_asked(&mut self) {
        if self.trim.asked() {
            self.release();
        }
    }
}

/// `load(state)` for one record (or a batch's buffer), tried again when memory for it
/// could not be allocated ([`LoaderError::OutOfMemory`], [`LoaderError::BatchOutOfMemory`]):
/// first `release(state)` frees the worker's own scratch
/// and the other workers are asked to free theirs after their current record
/// ([`ScratchTrim`]), then, unless the caller `holds_turn` already, the worker takes the
/// large images' turn ([`large_image_turn`]) so that none starts meanwhile, and tries
/// after each of [`MEMORY_RETRY_PAUSES_MS`]. The same record comes out either way, so a
/// short moment changes nothing of what is trained on; still short after that, the error
/// stands, and the record is not replaced.
pub(crate) fn retry_short_of_memory<S, T>(
    state: &mut S,
    holds_turn: bool,
    release: impl Fn(&mut S),
    mut load: impl FnMut(&mut S) -> Result<T, LoaderError>,
) -> Result<T, LoaderError> {
    let short =
        |r: &Result<T, LoaderError>| r.as_ref().is_err_and(LoaderError::is_short_of_host_memory);
    let mut result = load(state);
    if !short(&result) {
        return result;
    }
    release(state);
    SHORT_OF_MEMORY.fetch_add(1, Ordering::Relaxed);
    let _turn = (!holds_turn).then(|| LARGE_TURN.lock().unwrap_or_else(|p| p.into_inner()));
    for pause in MEMORY_RETRY_PAUSES_MS {
        std::thread::sleep(std::time::Duration::from_millis(pause));
        result = load(state);
        if !short(&result) {
            break;
        }
        release(state);
    }
    result
}

/// Hands the pages of memory just freed back to the system, where the allocator would
/// keep them: glibc raises its mmap threshold to the size of a large block once one is
/// freed, so the next loader's batch buffers come from the heap, which it keeps after
/// they are freed too. Closed loaders left their rings' size in the process's resident
/// memory (557 MiB after five loaders at size 224 were closed), which `close()` is
/// documented to free. Elsewhere a no-op.
pub(crate) fn give_back_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only walks glibc's own free lists and returns unused pages to
    // the system; it takes no pointer and has no precondition.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn short(index: u64) -> LoaderError {
        LoaderError::OutOfMemory {
            index,
            bytes: 36_000_000,
            what: "its pixels",
        }
    }

    /// Counts of a fake worker: loads tried, scratch releases.
    #[derive(Default)]
    struct Fake {
        loads: u32,
        releases: u32,
    }

    /// [`retry_short_of_memory`] over `fake`, whose load number `n` (from 1) gives `outcome(n)`.
    fn retried(
        fake: &mut Fake,
        holds_turn: bool,
        outcome: impl Fn(u32) -> Result<u64, LoaderError>,
    ) -> Result<u64, LoaderError> {
        retry_short_of_memory(
            fake,
            holds_turn,
            |f| f.releases += 1,
            |f| {
                f.loads += 1;
                outcome(f.loads)
            },
        )
    }

    #[test]
    fn a_short_moment_is_waited_out_and_the_same_record_comes_back() {
        let mut trim = ScratchTrim::new();
        let mut fake = Fake::default();
        let got = retried(
            &mut fake,
            false,
            |n| if n < 3 { Err(short(4)) } else { Ok(4) },
        );
        assert_eq!(got.unwrap(), 4);
        assert_eq!((fake.loads, fake.releases), (3, 2));
        // The other workers are told to free their scratch between records.
        assert!(trim.asked());
    }

    #[test]
    fn still_short_after_the_pauses_the_error_stands() {
        let mut fake = Fake::default();
        let t = std::time::Instant::now();
        // The caller holds the turn already (a large image): no second lock, no deadlock.
        let _turn = LARGE_TURN.lock().unwrap_or_else(|p| p.into_inner());
        let got = retried(&mut fake, true, |_| Err(short(4)));
        assert!(
            matches!(got, Err(LoaderError::OutOfMemory { index: 4, .. })),
            "{got:?}"
        );
        assert_eq!(fake.loads as usize, 1 + MEMORY_RETRY_PAUSES_MS.len());
        let paused: u64 = MEMORY_RETRY_PAUSES_MS.iter().sum();
        assert!(t.elapsed() >= std::time::Duration::from_millis(paused));
    }

    #[test]
    fn a_bad_record_or_a_success_is_not_tried_again() {
        let mut fake = Fake::default();
        let bad = retried(&mut fake, false, |_| {
            Err(LoaderError::UnusableRecord {
                index: 2,
                reason: "0×0 image".into(),
            })
        });
        assert!(matches!(bad, Err(LoaderError::UnusableRecord { .. })));
        assert_eq!(retried(&mut fake, false, |_| Ok(1)).unwrap(), 1);
        assert_eq!((fake.loads, fake.releases), (2, 0));
    }

    /// Only an allocation no memory could ever hold is the record's fault (its header's
    /// geometry): it is replaced as a bad record, deterministically.
    #[test]
    fn an_impossible_size_is_a_bad_record_and_a_possible_one_is_not() {
        assert!(matches!(
            LoaderError::short_of_memory(3, usize::MAX, "its pixels"),
            LoaderError::UnusableRecord { index: 3, .. }
        ));
        let e = LoaderError::short_of_memory(3, 36_000_000, "its pixels");
        assert!(matches!(e, LoaderError::OutOfMemory { index: 3, .. }));
        assert_eq!(e.record_index(), Some(3));
        assert!(e.to_string().contains("not replaced"), "{e}");
    }
}
