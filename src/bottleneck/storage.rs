//! Storage stage: sequential reads of the shard files, cold and warm.
//!
//! Cold reads drop the files' pages from the page cache first with
//! `fdatasync` + `posix_fadvise(POSIX_FADV_DONTNEED)` (no root needed, unlike
//! `drop_caches`; no alignment rules, unlike `O_DIRECT`). Whether the drop
//! took is checked with `mincore(2)` on a fresh mapping: on tmpfs, or when
//! another process has the pages mapped, they stay resident, and the figure is
//! then reported as warm, not passed off as cold.
//!
//! Throughput is counted in bytes and converted to records with the dataset's
//! mean stored bytes per record, so a read that stops mid-file (a dataset larger
//! than `seconds` allows) still gives a fair records/s.

use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::error::BenchError;

/// Read buffer per thread.
const CHUNK: usize = 4 << 20;
/// The warm set: at most this many bytes from the start of the shard files, so
/// that "warm" means "in page cache" even for datasets larger than memory.
const WARM_SET: u64 = 1 << 30;
/// At most this many bytes are checked with `mincore` after a drop.
const RESIDENCY_PROBE: u64 = 256 << 20;

/// What the storage stage measured.
#[derive(Debug, Clone, PartialEq)]
pub struct StorageFigures {
    /// Cold read MB/s (10^6 bytes), when the page cache could be dropped.
    pub cold_mb_per_s: Option<f64>,
    /// Fraction of the probed pages still resident right after the drop.
    pub resident_after_drop: f64,
    /// Warm (page cache) read MB/s.
    pub warm_mb_per_s: f64,
    /// Stored bytes per record (shard bytes / records).
    pub bytes_per_record: f64,
    /// Threads that read.
    pub threads: usize,
}

impl StorageFigures {
    /// Records/s at `mb_per_s`.
    pub fn records_per_s(&self, mb_per_s: f64) -> f64 {
        mb_per_s * 1e6 / self.bytes_per_record
    }
}

/// Whether a dataset of `dataset_bytes` stays in the page cache after a first epoch: it
/// fits in half the memory the process may use (`memory`; the rest is the training's
/// own). Not when the memory size is unknown.
pub fn fits_page_cache(dataset_bytes: u64, memory: Option<u64>) -> bool {
    memory.is_some_and(|m| dataset_bytes <= m / 2)
}

/// The read rate that bounds training, MB/s, and whether it is the cold one.
///
/// A dataset that fits in the page cache ([`fits_page_cache`]) is read warm by every epoch
/// after the first: the cold rate bounds that first epoch only, and naming it as the bound
/// of the whole run sent users to faster storage they did not need (the bench set, 50
/// MB, was "storage-bound" on a 128 GB machine). A larger dataset, or one of unknown
/// fit, is read cold every epoch.
pub fn steady_read(cold_mb_per_s: Option<f64>, warm_mb_per_s: f64, cached: bool) -> (f64, bool) {
    match cold_mb_per_s {
        Some(cold) if !cached => (cold, true),
        _ => (warm_mb_per_s, false),
    }
}

/// One shard file and the part of it that is read.
#[derive(Debug, Clone)]
struct Extent {
    path: PathBuf,
    len: u64,
}

/// Measures cold then warm reads of `files` (the shard files) for about `budget` in all.
///
/// `records` is the number of records the files hold. Each phase gets half of `budget`.
///
/// # Errors
///
/// [`BenchError::Io`] when a shard file cannot be opened or read.
pub fn measure(
    files: &[PathBuf],
    records: u64,
    threads: usize,
    budget: Duration,
    tick: &(dyn Fn(f64) + Sync),
) -> Result<StorageFigures, BenchError> {
    let mut extents = Vec::with_capacity(files.len());
    let mut total = 0u64;
    for path in files {
        let len = std::fs::metadata(path)
            .map_err(|e| BenchError::io(path, e))?
            .len();
        total += len;
        extents.push(Extent {
            path: path.clone(),
            len,
        });
    }
    let bytes_per_record = if records > 0 {
        total as f64 / records as f64
    } else {
        0.0
    };
    let threads = threads.clamp(1, extents.len().max(1));
    let half = budget / 2;

    // Cold: drop, then read from the start until the budget is spent.
    let start = Instant::now();
    let mut cold_bytes = 0u64;
    let mut cold_time = Duration::ZERO;
    // The first drop comes before the loop, so that the residency reported is measured
    // even when the budget leaves no time for a read (`--seconds 1e-9` said "could not be
    // dropped: 100% resident" of a drop never tried); each later read follows a drop too.
    let resident = drop_cache(&extents)?;
    while start.elapsed() < half {
        let deadline = half.saturating_sub(start.elapsed());
        let t = Instant::now();
        cold_bytes += read_all(&extents, threads, Some(deadline))?;
        cold_time += t.elapsed();
        tick(0.5 * (start.elapsed().as_secs_f64() / half.as_secs_f64()).min(1.0));
        if start.elapsed() < half {
            drop_cache(&extents)?;
        }
    }
    let cold_mb_per_s = (resident < 0.5 && cold_time > Duration::ZERO)
        .then(|| cold_bytes as f64 / 1e6 / cold_time.as_secs_f64());

    // Warm: load the warm set once (untimed), then re-read it.
    let warm: Vec<Extent> = {
        let mut left = WARM_SET;
        let mut v = Vec::new();
        for e in &extents {
            if left == 0 {
                break;
            }
            let len = e.len.min(left);
            left -= len;
            v.push(Extent {
                path: e.path.clone(),
                len,
            });
        }
        v
    };
    read_all(&warm, threads, None)?;
    let start = Instant::now();
    let mut warm_bytes = 0u64;
    loop {
        warm_bytes += read_all(&warm, threads, None)?;
        let el = start.elapsed();
        tick(0.5 + 0.5 * (el.as_secs_f64() / half.as_secs_f64()).min(1.0));
        if el >= half || warm_bytes == 0 {
            break;
        }
    }
    let warm_time = start.elapsed().as_secs_f64().max(1e-9);
    Ok(StorageFigures {
        cold_mb_per_s,
        resident_after_drop: resident,
        warm_mb_per_s: warm_bytes as f64 / 1e6 / warm_time,
        bytes_per_record,
        threads,
    })
}

/// Reads every extent once (or until `deadline`) with `threads` threads; returns bytes read.
fn read_all(
    extents: &[Extent],
    threads: usize,
    deadline: Option<Duration>,
) -> Result<u64, BenchError> {
    let start = Instant::now();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let read = || -> Result<u64, BenchError> {
        let mut buf = vec![0u8; CHUNK];
        let mut got = 0u64;
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(e) = extents.get(i) else { break };
            let mut f = File::open(&e.path).map_err(|err| BenchError::io(&e.path, err))?;
            let mut left = e.len;
            while left > 0 {
                if deadline.is_some_and(|d| start.elapsed() >= d) {
                    return Ok(got);
                }
                let want = (left as usize).min(CHUNK);
                let n = f
                    .read(&mut buf[..want])
                    .map_err(|err| BenchError::io(&e.path, err))?;
                if n == 0 {
                    break; // the file shrank: count what was there
                }
                got += n as u64;
                left -= n as u64;
            }
        }
        Ok(got)
    };
    let results: Vec<Result<u64, BenchError>> = std::thread::scope(|s| {
        // A thread that cannot start (a container's pids limit below its cores) is one
        // reader fewer, not a panic; with none, this thread reads.
        let handles: Vec<_> = (0..threads)
            .filter_map(|_| std::thread::Builder::new().spawn_scoped(s, read).ok())
            .collect();
        if handles.is_empty() {
            return vec![read()];
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("reader thread does not panic"))
            .collect()
    });
    let mut total = 0;
    for r in results {
        total += r?;
    }
    Ok(total)
}

/// Asks the kernel to drop the files' cached pages; returns the fraction of the
/// probed pages still resident afterwards (0 = cold, 1 = nothing dropped).
fn drop_cache(extents: &[Extent]) -> Result<f64, BenchError> {
    let mut probed = 0u64;
    let mut resident_pages = 0u64;
    let mut total_pages = 0u64;
    for e in extents {
        let f = File::open(&e.path).map_err(|err| BenchError::io(&e.path, err))?;
        let fd = f.as_raw_fd();
        // SAFETY: `fd` is a valid descriptor owned by `f` for the whole call;
        // fdatasync and posix_fadvise only act on the kernel's file state and
        // never touch our memory. Failures are harmless (the residency check
        // below reports what actually happened).
        unsafe {
            libc::fdatasync(fd);
            libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED);
        }
        if probed < RESIDENCY_PROBE && e.len > 0 {
            let (r, t) = residency(&f, &e.path)?;
            resident_pages += r;
            total_pages += t;
            probed += e.len;
        }
    }
    Ok(if total_pages == 0 {
        1.0
    } else {
        resident_pages as f64 / total_pages as f64
    })
}

/// (resident pages, total pages) of `f` per `mincore(2)`.
fn residency(f: &File, path: &Path) -> Result<(u64, u64), BenchError> {
    // SAFETY: the mapping is read-only and never dereferenced by us: only its
    // address range is handed to mincore. Shard files are immutable once written
    // (see stoker-formats), so no truncation can invalidate the range meanwhile.
    let map = unsafe { memmap2::MmapOptions::new().map(f) }.map_err(|e| BenchError::io(path, e))?;
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    let pages = map.len().div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: `map` covers `map.len()` bytes starting at a page-aligned address
    // (mmap returns page-aligned mappings) and `vec` has one byte per page of
    // that range, as mincore requires.
    let rc = unsafe {
        libc::mincore(
            map.as_ptr() as *mut libc::c_void,
            map.len(),
            vec.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(BenchError::io(path, std::io::Error::last_os_error()));
    }
    let resident = vec.iter().filter(|b| **b & 1 == 1).count() as u64;
    Ok((resident, pages as u64))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_dataset_in_half_the_memory_is_bounded_by_warm_reads_a_larger_one_by_cold() {
        use super::{fits_page_cache, steady_read};
        let gb = 1u64 << 30;
        // 4 GiB in 23 GiB: later epochs come from the page cache.
        assert_eq!(
            steady_read(Some(900.0), 6_000.0, fits_page_cache(4 * gb, Some(23 * gb))),
            (6_000.0, false)
        );
        // Exactly half still fits; a byte more does not.
        assert_eq!(
            steady_read(Some(900.0), 6_000.0, fits_page_cache(8 * gb, Some(16 * gb))),
            (6_000.0, false)
        );
        assert_eq!(
            steady_read(
                Some(900.0),
                6_000.0,
                fits_page_cache(8 * gb + 1, Some(16 * gb))
            ),
            (900.0, true)
        );
        // ImageNet raw (190 GB) on a 128 GB machine: cold every epoch.
        assert_eq!(
            steady_read(
                Some(900.0),
                6_000.0,
                fits_page_cache(190 * gb, Some(128 * gb))
            ),
            (900.0, true)
        );
        // Memory unknown: cold, as before.
        assert_eq!(
            steady_read(Some(900.0), 6_000.0, fits_page_cache(gb, None)),
            (900.0, true)
        );
        // No cold figure (the drop did not take): warm either way.
        assert_eq!(
            steady_read(None, 6_000.0, fits_page_cache(190 * gb, Some(128 * gb))),
            (6_000.0, false)
        );
    }

    use super::*;

    #[test]
    fn reads_every_byte_and_converts_to_records() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = Vec::new();
        let mut total = 0;
        for (i, len) in [3_000_000usize, 1_234_567, 10].into_iter().enumerate() {
            let p = dir.path().join(format!("shard-{i}.lmdb"));
            std::fs::write(&p, vec![7u8; len]).unwrap();
            files.push(p);
            total += len as u64;
        }
        let extents: Vec<Extent> = files
            .iter()
            .map(|p| Extent {
                path: p.clone(),
                len: std::fs::metadata(p).unwrap().len(),
            })
            .collect();
        assert_eq!(read_all(&extents, 2, None).unwrap(), total);
        let r = drop_cache(&extents).unwrap();
        assert!((0.0..=1.0).contains(&r));
        let f = measure(&files, 100, 2, Duration::from_millis(200), &|_| {}).unwrap();
        assert!(f.warm_mb_per_s > 0.0);
        assert!((f.bytes_per_record - total as f64 / 100.0).abs() < 1e-6);
        assert!((f.records_per_s(1.0) - 1e6 / f.bytes_per_record).abs() < 1e-6);

        // A budget too short for any read still drops the cache once and says what stayed
        // resident: it said 100%, of a drop never tried (the same on tmpfs, where nothing
        // can be dropped; not on a disk).
        let f = measure(&files, 100, 2, Duration::ZERO, &|_| {}).unwrap();
        let after = drop_cache(&extents).unwrap();
        assert!(
            (f.resident_after_drop - after).abs() < 0.5,
            "{} vs {after}",
            f.resident_after_drop
        );
        assert!(f.cold_mb_per_s.is_none());
    }

    #[test]
    fn missing_shard_is_an_io_error_naming_the_file() {
        let p = PathBuf::from("/nonexistent/stoker/shard-00000.lmdb");
        let err = measure(
            std::slice::from_ref(&p),
            1,
            1,
            Duration::from_millis(10),
            &|_| {},
        )
        .unwrap_err();
        assert!(err.to_string().contains("shard-00000.lmdb"), "{err}");
    }
}
