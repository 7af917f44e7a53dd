//! The host side of h2d_probe's contention cases: what the host threads do to
//! memory while the ring copies, and which cases run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How the host threads of a contention case touch memory.
#[derive(Clone, Copy, PartialEq)]
pub enum HostWork {
    /// `copy_from_slice` (glibc memcpy; cached stores at this size).
    Copy,
    /// Non-temporal (streaming) stores: no read-for-ownership of the destination.
    CopyNt,
    /// Reads only (a checksum of the source, like the record CRC).
    Read,
}

/// One contention case: `threads` host threads doing `work`, paced to `pace`
/// GB/s in all when given.
#[derive(Clone, Copy)]
pub struct HostCase {
    pub work: HostWork,
    pub threads: usize,
    pub pace: Option<f64>,
}

impl HostCase {
    /// Every count of `threads` (`--threads`) copying; from 4 threads on, also with
    /// non-temporal stores and reading only; then the `paced` rates (`--paced`) on `max_threads`.
    pub fn all(threads: &[usize], paced: &[f64], max_threads: usize) -> Vec<HostCase> {
        let case = |work, threads, pace| HostCase {
            work,
            threads,
            pace,
        };
        let mut cases = Vec::new();
        for &t in threads {
            cases.push(case(HostWork::Copy, t, None));
        }
        for &t in threads {
            if t >= 4 {
                cases.push(case(HostWork::CopyNt, t, None));
                cases.push(case(HostWork::Read, t, None));
            }
        }
        for &rate in paced {
            cases.push(case(HostWork::CopyNt, max_threads, Some(rate)));
        }
        cases
    }

    /// The row name's part for this case.
    pub fn name(&self) -> String {
        match (self.work, self.pace) {
            (HostWork::Copy, _) => "host".to_string(),
            (HostWork::CopyNt, None) => "hostnt".to_string(),
            (HostWork::CopyNt, Some(r)) => format!("paced{r:.0}_hostnt"),
            (HostWork::Read, _) => "hostread".to_string(),
        }
    }

    /// What the host threads do, for the note.
    pub fn what(&self) -> String {
        match (self.work, self.pace) {
            (HostWork::Copy, _) => "copy 562,500 B records into pinned memory (memcpy)".to_string(),
            (HostWork::CopyNt, None) => "copy records with non-temporal stores".to_string(),
            (HostWork::CopyNt, Some(r)) => {
                format!("copy records with non-temporal stores, paced to {r} GB/s in all")
            }
            (HostWork::Read, _) => "read records only (a checksum)".to_string(),
        }
    }
}

/// One host thread of a contention case: records from `src` (starting at a
/// per-thread offset) into `dst`, cycling, until `stop`; bytes counted in `moved`.
#[allow(clippy::too_many_arguments)]
pub fn host_loop(
    work: HostWork,
    k: usize,
    src: &[u8],
    dst: &mut [u8],
    record: usize,
    rate: Option<f64>,
    stop: &AtomicBool,
    moved: &AtomicU64,
) {
    let records_src = src.len() / record;
    let records_dst = dst.len() / record;
    let mut i = k * 97;
    let mut sum = 0u64;
    let start = Instant::now();
    let mut mine = 0f64;
    while !stop.load(Ordering::Relaxed) {
        if let Some(rate) = rate {
            // Evenly paced: no further ahead than `mine / rate` seconds. A rate that makes
            // no duration (`--paced` refuses those) paces nothing rather than panicking.
            let due = Duration::try_from_secs_f64(mine / rate).unwrap_or_default();
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
            mine += record as f64;
        }
        let from = &src[(i % records_src) * record..][..record];
        let to = &mut dst[(i % records_dst) * record..][..record];
        match work {
            HostWork::Copy => to.copy_from_slice(from),
            HostWork::CopyNt => stoker::loader::gpu::copy_streaming(to, from),
            HostWork::Read => {
                sum = from.chunks_exact(8).fold(sum, |a, c| {
                    a ^ u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))
                });
            }
        }
        moved.fetch_add(record as u64, Ordering::Relaxed);
        i += 1;
    }
    std::hint::black_box(sum);
}
