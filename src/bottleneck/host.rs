//! What the host says about itself: this process's CPU time, the load average
//! and the cores, read by the stages that report CPU figures.

use std::time::Duration;

/// User + system CPU time of this process.
pub(crate) fn process_cpu_time() -> Option<Duration> {
    cpu_time(libc::RUSAGE_SELF)
}

/// User + system CPU time of `who` (`RUSAGE_SELF`, or `RUSAGE_THREAD` for the calling
/// thread, which the tests read: other tests' threads do not move it).
fn cpu_time(who: libc::c_int) -> Option<Duration> {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `ru` points to writable memory of the size of `rusage`; getrusage
    // fills it completely on success (return 0), which is checked before use.
    let rc = unsafe { libc::getrusage(who, ru.as_mut_ptr()) };
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

/// The machine's online CPUs (`sysconf(_SC_NPROCESSORS_ONLN)`), at least 1: what the
/// load average is measured against, whatever share of them this process may use.
pub(crate) fn machine_cpus() -> usize {
    // SAFETY: sysconf takes a constant name and has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1).max(1)
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
        let thread = || cpu_time(libc::RUSAGE_THREAD).expect("getrusage works on Linux");
        let before = process_cpu_time().expect("getrusage works on Linux");
        let t0 = thread();
        // Spin until this thread has had 200 ms of CPU: a wall-clock spin gets less when
        // the machine is busy (other tests, other builds on 2 cores).
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut x = 0u64;
        while thread() < t0 + Duration::from_millis(200) {
            assert!(std::time::Instant::now() < deadline, "no CPU time in 60 s");
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
        let after = process_cpu_time().unwrap();
        // The process's time includes this thread's; the kernel's accounting is
        // tick-grained, hence the margin.
        assert!(
            after >= before + Duration::from_millis(150),
            "{before:?} -> {after:?} after 200 ms of busy work"
        );
        // Sleeping costs (almost) none: read for this thread alone, since other tests
        // run in this process meanwhile.
        let t1 = thread();
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            thread() - t1 < Duration::from_millis(50),
            "{t1:?} -> {:?}",
            thread()
        );
    }
}
