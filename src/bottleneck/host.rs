//! What the host says about itself: this process's CPU time, the load average
//! and the cores, read by the stages that report CPU figures.

use std::time::Duration;

/// User + system CPU time of this process.
pub(crate) fn process_cpu_time() -> Option<Duration> {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `ru` points to writable memory of the size of `rusage`; getrusage
    // fills it completely on success (return 0), which is checked before use.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: getrusage returned 0, so it initialized the struct.
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    Some(tv(ru.ru_utime) + tv(ru.ru_stime))
}

/// The 1-minute load average from `/proc/loadavg`, where there is one.
pub(crate) fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Logical cores available to this process.
pub fn available_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_cpu_time_grows_with_busy_work() {
        let before = process_cpu_time().expect("getrusage works on Linux");
        // Spin on this thread for a wall-clock while: CPU time, not sleep.
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(200) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let after = process_cpu_time().unwrap();
        // The kernel's accounting is tick-grained: allow a generous margin.
        assert!(
            after >= before + Duration::from_millis(100),
            "{before:?} -> {after:?} after 200 ms of busy work"
        );
        // Sleeping costs (almost) none.
        std::thread::sleep(Duration::from_millis(200));
        let slept = process_cpu_time().unwrap();
        assert!(
            slept - after < Duration::from_millis(100),
            "{after:?} -> {slept:?}"
        );
    }
}
