//! How busy the CPUs this process may use are: the figure behind the input-bound rule
//! ([`crate::metrics::Utilization`]'s `cpu`, `stoker bench`'s `cpu_util`).
//!
//! `/proc/stat` counts the whole machine. In a container limited to 16 of a node's 128
//! CPUs (a CPU quota, a cpuset, a Slurm allocation), a loader using all 16 read as 12 %
//! busy, and a node busy with other tenants read as the loader's own load, so the rule
//! ("GPU under 70 % while the CPUs are over 85 %") said the wrong thing in both
//! directions. Where the process may run on only some CPUs (its affinity: a cpuset
//! container, a Slurm allocation, `taskset`, `numactl`), the figure is how busy those CPUs
//! are (their `/proc/stat` lines). Where a CPU quota leaves fewer CPUs available than the
//! machine has but every CPU may run it, it is the CPU time of this process's cgroup (the
//! container, the job step) over the available CPUs' time, or this process's own CPU time
//! where no cgroup counter can be read. Not the cgroup's time for an affinity alone: there
//! the cgroup is often the host's root or a session shared with other processes, whose
//! time divided by this process's CPUs read as a busy machine.

use std::path::Path;

/// A reading `(busy, capacity)` in one unit: the busy fraction between two readings is
/// `Δbusy / Δcapacity` (clamp it: a cgroup can hold more than this process).
/// Machine-wide jiffies ([`super::system_cpu_jiffies`]) when every CPU of the machine is
/// available, else nanoseconds of cgroup (or process) CPU time and of wall time × the
/// available CPUs. `None` where neither can be read.
///
/// # Examples
///
/// ```
/// let a = stoker_loader::metrics::cpu_busy_reading();
/// let b = stoker_loader::metrics::cpu_busy_reading();
/// if let (Some((b0, t0)), Some((b1, t1))) = (a, b) {
///     assert!(b1 >= b0 && t1 >= t0);
/// }
/// ```
pub fn cpu_busy_reading() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    let machine = machine_cpus(&stat);
    if !restricted(machine, available) {
        return super::system_cpu_jiffies();
    }
    if let Some(cpus) = affinity().filter(|cpus| restricted(machine, cpus.len())) {
        if let Some(reading) = cpus_jiffies(&stat, &cpus) {
            return Some(reading);
        }
    }
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let busy_ns = cgroup_usage_ns(&cgroups, Path::new("/sys/fs/cgroup")).or_else(process_ns)?;
    let wall_ns = super::clock_ns();
    Some((busy_ns, wall_ns.saturating_mul(available as u64)))
}

/// Whether this process may use fewer CPUs than the machine has (`machine` 0: unknown).
fn restricted(machine: usize, available: usize) -> bool {
    machine > 0 && available < machine
}

/// The CPUs this process may run on (`sched_getaffinity`), `None` where that cannot be
/// read (more than `CPU_SETSIZE` CPUs).
fn affinity() -> Option<Vec<usize>> {
    // SAFETY: an all-zero `cpu_set_t` is a valid (empty) set; the call writes at most
    // `size_of::<cpu_set_t>()` bytes into it, and `CPU_ISSET` reads it in bounds.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        Some(
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect(),
        )
    }
}

/// `(busy, total)` jiffies of the CPUs `cpus`, summed over their `cpuN` lines of a
/// `/proc/stat` text; `None` when none of them has a line.
fn cpus_jiffies(stat: &str, cpus: &[usize]) -> Option<(u64, u64)> {
    let mut found = false;
    let (mut busy, mut total) = (0u64, 0u64);
    for line in stat.lines() {
        let Some(n) = line
            .strip_prefix("cpu")
            .and_then(|rest| rest.split_ascii_whitespace().next())
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        if cpus.contains(&n) {
            if let Some((b, t)) = super::counters::stat_line_jiffies(line) {
                found = true;
                busy += b;
                total += t;
            }
        }
    }
    found.then_some((busy, total))
}

/// The machine's CPUs: the `cpuN` lines of a `/proc/stat` text.
fn machine_cpus(stat: &str) -> usize {
    stat.lines()
        .filter(|l| {
            l.strip_prefix("cpu")
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        })
        .count()
}

/// CPU time used by this process's cgroup, nanoseconds, from `/proc/self/cgroup` lines
/// under the cgroup file system at `root`: v2's `cpu.stat` (`usage_usec`) or v1's
/// `cpuacct.usage`. The group's own directory first, then the root of the mount: a
/// container without its own cgroup namespace sees its group mounted there.
fn cgroup_usage_ns(cgroups: &str, root: &Path) -> Option<u64> {
    let read = |path: &Path| std::fs::read_to_string(path).ok();
    cgroups.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, group) = (parts.next()?, parts.next()?, parts.next()?);
        let group = group.strip_prefix('/').unwrap_or(group);
        if controllers.is_empty() {
            [root.join(group), root.to_path_buf()]
                .iter()
                .find_map(|dir| {
                    let text = read(&dir.join("cpu.stat"))?;
                    let line = text.lines().find(|l| l.starts_with("usage_usec "))?;
                    let usec: u64 = line.split_ascii_whitespace().nth(1)?.parse().ok()?;
                    usec.checked_mul(1000)
                })
        } else if controllers.split(',').any(|c| c == "cpuacct") {
            ["cpuacct", "cpu,cpuacct", "cpuacct,cpu"]
                .iter()
                .flat_map(|mount| [root.join(mount).join(group), root.join(mount)])
                .find_map(|dir| read(&dir.join("cpuacct.usage"))?.trim().parse().ok())
        } else {
            None
        }
    })
}

/// This process's CPU time, nanoseconds (`CLOCK_PROCESS_CPUTIME_ID`).
fn process_ns() -> Option<u64> {
    let mut ts = std::mem::MaybeUninit::<libc::timespec>::uninit();
    // SAFETY: `ts` is a valid place for one timespec; the clock id is a constant.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, ts.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: clock_gettime returned 0, so it wrote the struct.
    let ts = unsafe { ts.assume_init() };
    Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_figure_only_where_every_cpu_is_available() {
        let stat =
            "cpu  10 0 5 100 0 0 0 0 0 0\ncpu0 5 0 2 50 0 0 0 0\ncpu1 5 0 3 50 0 0 0 0\nintr 1\n";
        assert_eq!(machine_cpus(stat), 2);
        assert!(!restricted(2, 2));
        // A container allowed 16 CPUs of a 128-CPU node.
        assert!(restricted(128, 16));
        // /proc/stat unreadable: nothing to compare, the machine figure (if any) stays.
        assert!(!restricted(0, 4));
    }

    #[test]
    fn an_affinity_reads_how_busy_its_own_cpus_are() {
        // `taskset -c 1` beside a busy CPU 0: CPU 1 is idle whoever keeps CPU 0 busy
        // (the cgroup figure, the host's root there, read it as 100 % busy).
        let stat = "cpu  110 0 0 100 0 0 0 0\ncpu0 100 0 0 0 0 0 0 0\ncpu1 10 0 0 90 5 0 0 0\n\
                    cpu2 1 0 0 1 0 0 0 0\nintr 1\n";
        assert_eq!(cpus_jiffies(stat, &[1]), Some((10, 105)));
        assert_eq!(cpus_jiffies(stat, &[0, 1]), Some((110, 205)));
        assert_eq!(cpus_jiffies(stat, &[7]), None);
        // This process's own affinity is a set of CPUs that exist.
        let mine = affinity().expect("sched_getaffinity");
        assert!(!mine.is_empty());
    }

    #[test]
    fn cgroup_cpu_time_is_read_from_the_group_or_the_mount_root() {
        let root = tempfile::tempdir().unwrap();
        let write = |rel: &str, text: &str| {
            let p = root.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        // v2, the group's own directory (a Slurm step, a systemd scope).
        write(
            "job/step/cpu.stat",
            "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n",
        );
        assert_eq!(
            cgroup_usage_ns("0::/job/step\n", root.path()),
            Some(2_500_000)
        );
        // v2 in a container without a cgroup namespace: its group is the mount's root.
        write("cpu.stat", "usage_usec 7\n");
        assert_eq!(
            cgroup_usage_ns("0::/kubepods/pod1/abc\n", root.path()),
            Some(7000)
        );
        // v1: the cpuacct controller's line, under whichever mount name the host uses.
        write("cpu,cpuacct/docker/abc/cpuacct.usage", "123456789\n");
        let v1 = "5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n";
        assert_eq!(cgroup_usage_ns(v1, root.path()), Some(123_456_789));
        // No CPU accounting anywhere: none (the caller falls back to the process's time).
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(cgroup_usage_ns("0::/x\n", empty.path()), None);
        assert_eq!(cgroup_usage_ns("3:memory:/x\n", root.path()), None);
    }

    #[test]
    fn a_reading_grows() {
        let Some((b0, t0)) = cpu_busy_reading() else {
            return;
        };
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let (b1, t1) = cpu_busy_reading().expect("read once, read again");
        assert!(b1 >= b0 && t1 >= t0, "{b0} {t0} -> {b1} {t1}");
    }
}
