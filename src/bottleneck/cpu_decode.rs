//! CPU decode stage: JPEG → RGB with every core, from payloads already in memory,
//! so the figure is the decoder's capacity alone (no storage, no transforms).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use stoker_decode::{CpuDecoder, Limits};

use super::host::process_cpu_time;

/// What the CPU decode stage measured.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuDecodeFigures {
    /// Images decoded per second, all threads together.
    pub img_per_s: f64,
    /// Decoded megapixels per second.
    pub mpix_per_s: f64,
    /// Threads used.
    pub threads: usize,
    /// Images decoded.
    pub decoded: u64,
    /// Decode attempts that failed (counted, skipped).
    pub failed: u64,
    /// Distinct payloads that failed to decode at least once.
    pub failed_records: u64,
    /// Images per second of process CPU time: the per-core rate, unaffected by
    /// other processes competing for the cores.
    pub img_per_cpu_s: Option<f64>,
    /// Images per decoder route (`cpu-zune=… cpu-fallback=…`).
    pub routes: String,
}

/// Decodes `payloads` round-robin on `threads` threads for about `budget`.
///
/// Returns `None` when nothing decoded (every payload failed, or none given). However
/// short the budget, it decodes until one image decoded or every payload was tried.
/// The decoder is the library's routed [`CpuDecoder`], shared by all threads,
/// exactly as the loader's CPU path uses it.
pub fn measure(
    payloads: &[Vec<u8>],
    limits: Limits,
    threads: usize,
    budget: Duration,
    tick: &(dyn Fn(f64) + Sync),
) -> Option<CpuDecodeFigures> {
    if payloads.is_empty() {
        return None;
    }
    let threads = threads.max(1);
    let next = AtomicUsize::new(0);
    let decoded = AtomicU64::new(0);
    let failed = AtomicU64::new(0);
    let running = AtomicUsize::new(0);
    let failed_once: Vec<AtomicBool> = payloads.iter().map(|_| AtomicBool::new(false)).collect();
    let pixels = AtomicU64::new(0);
    // The largest decoded size, so each thread allocates its buffer once.
    let max_rgb_len = payloads
        .iter()
        .filter_map(|p| stoker_decode::probe(p, &limits).ok())
        .map(|info| info.rgb_len())
        .max()?;
    let decoder = CpuDecoder::new(limits);
    let cpu0 = process_cpu_time();
    let start = Instant::now();
    let work = |t: usize| {
        // Threads × the largest image may not fit (a dataset of huge images on many
        // cores, a `ulimit -v`): a thread whose buffer cannot be had does not run,
        // and the figures count the threads that did.
        let mut out = Vec::new();
        if out.try_reserve_exact(max_rgb_len).is_err() {
            return;
        }
        out.resize(max_rgb_len, 0);
        running.fetch_add(1, Ordering::Relaxed);
        let mut since_tick = 0u32;
        // Past the budget, still until one image decoded or every payload was tried: a
        // budget shorter than one decode would otherwise decode nothing, and nothing
        // decoded reads as every record undecodable.
        while start.elapsed() < budget
            || (decoded.load(Ordering::Relaxed) == 0
                && next.load(Ordering::Relaxed) < payloads.len())
        {
            let i = next.fetch_add(1, Ordering::Relaxed) % payloads.len();
            match decoder.decode_into(&payloads[i], &mut out) {
                Ok(info) => {
                    decoded.fetch_add(1, Ordering::Relaxed);
                    pixels.fetch_add(
                        u64::from(info.width) * u64::from(info.height),
                        Ordering::Relaxed,
                    );
                }
                Err(_) => {
                    failed.fetch_add(1, Ordering::Relaxed);
                    failed_once[i].store(true, Ordering::Relaxed);
                }
            }
            since_tick += 1;
            if t == 0 && since_tick >= 16 {
                since_tick = 0;
                tick((start.elapsed().as_secs_f64() / budget.as_secs_f64()).min(1.0));
            }
        }
    };
    std::thread::scope(|s| {
        // A thread that cannot start (a container's pids limit below its cores) is one
        // fewer, as one without its buffer: the figures count those that ran. With none,
        // this thread decodes: else every sampled record read as undecodable, and the
        // report sent the user to `stoker verify --decode` over sound records.
        let work = &work;
        let started = (0..threads)
            .filter(|&t| {
                std::thread::Builder::new()
                    .spawn_scoped(s, move || work(t))
                    .is_ok()
            })
            .count();
        if started == 0 {
            work(0);
        }
    });
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    let cpu_secs = match (cpu0, process_cpu_time()) {
        (Some(a), Some(b)) => Some((b - a).as_secs_f64()).filter(|s| *s > 0.0),
        _ => None,
    };
    let decoded = decoded.into_inner();
    if decoded == 0 {
        return None;
    }
    Some(CpuDecodeFigures {
        img_per_s: decoded as f64 / secs,
        mpix_per_s: pixels.into_inner() as f64 / 1e6 / secs,
        threads: running.into_inner(),
        decoded,
        failed: failed.into_inner(),
        failed_records: failed_once
            .iter()
            .filter(|f| f.load(Ordering::Relaxed))
            .count() as u64,
        img_per_cpu_s: cpu_secs.map(|c| decoded as f64 / c),
        routes: decoder.route_counts().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `stoker bench --seconds 1e-9` said every sampled record was undecodable and exited 1.
    #[test]
    fn a_budget_shorter_than_one_decode_still_decodes_one() {
        let payloads: Vec<Vec<u8>> = stoker_testdata::bench_files(3)
            .iter()
            .map(|p| std::fs::read(p).unwrap())
            .collect();
        let f = measure(
            &payloads,
            Limits::default(),
            2,
            Duration::from_nanos(1),
            &|_| {},
        )
        .expect("one decoded");
        assert!(f.decoded >= 1 && f.failed == 0, "{f:?}");
        // The limits given are the decoder's (the dataset's, from the bench's sample):
        // under one below these photos' size, none decodes.
        let small = Limits {
            max_pixels: 1000,
            ..Limits::default()
        };
        assert!(measure(&payloads, small, 2, Duration::from_nanos(1), &|_| {}).is_none());

        // Only undecodable payloads: every one tried, then None.
        let junk = vec![b"\xff\xd8\xff\xdb junk".to_vec(); 2];
        assert!(measure(
            &junk,
            Limits::default(),
            2,
            Duration::from_nanos(1),
            &|_| {}
        )
        .is_none());
    }
}
