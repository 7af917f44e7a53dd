//! The memory this process may use: the machine's (`MemTotal`), or less where a cgroup
//! limits it (a container's memory limit, a Slurm job's `--mem`). Pinned staging and
//! page-locked maps count against such a limit, and going past it gets the process
//! killed, so the loader's memory defaults are sized from the smaller of the two.

use std::path::Path;

/// The memory this process may use, bytes: `MemTotal`, or a cgroup's lower limit;
/// `None` when `/proc/meminfo` cannot be read.
pub fn memory_total() -> Option<u64> {
    let total = mem_total(&std::fs::read_to_string("/proc/meminfo").ok()?)?;
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let limit = cgroup_limit(&cgroups, Path::new("/sys/fs/cgroup"));
    Some(limit.map_or(total, |l| l.min(total)))
}

/// Why rings of `ring` bytes in each of `processes` loader processes may not fit in the
/// `total` bytes this process may use, when together they take more than half of it (the
/// rest is the training's): a batch check against the whole limit passed each of them.
pub(crate) fn rings_note(ring: u64, processes: u64, total: u64) -> Option<String> {
    let all = ring.saturating_mul(processes.max(1));
    let others = if processes > 1 {
        format!(" and as much in each of the {processes} processes on this node")
    } else {
        String::new()
    };
    (all > total / 2).then(|| {
        format!(
            "the batches in flight take {ring} bytes in this process{others}, {:.0}% of the {total} bytes of memory it may use (the machine's, or its cgroup's limit); with the training's own memory that can pass the limit, where the kernel's OOM killer ends processes without a message: lower batch_size, prefetch or workers",
            100.0 * all as f64 / total.max(1) as f64
        )
    })
}

/// The anonymous memory this process holds now (`RssAnon`: its heap, stacks and pinned
/// buffers, not file pages the kernel can drop), bytes; 0 when it cannot be read. A ring
/// that fits the limit only without it cannot be filled without the OOM killer.
pub(crate) fn memory_in_use() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| kib_field(&status, "RssAnon:"))
        .unwrap_or(0)
}

/// A `Name:   N kB` field of a `/proc` text, in bytes.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    let kib: u64 = line.split_ascii_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    kib_field(meminfo, "MemTotal:")
}

/// The lowest memory limit over this process's cgroups (`/proc/self/cgroup` lines) and
/// their ancestors (a parent's limit binds its children), under the cgroup file system
/// at `root`: `memory.max` (v2, the `0::/path` line) or `memory.limit_in_bytes` (v1, the
/// line whose controllers include `memory`).
fn cgroup_limit(cgroups: &str, root: &Path) -> Option<u64> {
    cgroups
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, group) = (parts.next()?, parts.next()?, parts.next()?);
            let (dir, file) = if controllers.is_empty() {
                (root.to_path_buf(), "memory.max")
            } else if controllers.split(',').any(|c| c == "memory") {
                (root.join("memory"), "memory.limit_in_bytes")
            } else {
                return None;
            };
            Path::new(group)
                .ancestors()
                .filter_map(|g| {
                    let at = dir.join(g.strip_prefix("/").unwrap_or(g)).join(file);
                    parse_limit(&std::fs::read_to_string(at).ok()?)
                })
                .min()
        })
        .min()
}

/// A cgroup memory limit file's value; `None` for no limit (`max` in v2, v1's
/// page-rounded `i64::MAX`).
fn parse_limit(text: &str) -> Option<u64> {
    let value: u64 = text.trim().parse().ok()?;
    (value < 1 << 62).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_total_reads_kib() {
        let text = "MemTotal:       131891264 kB\nMemFree:         1024 kB\n";
        assert_eq!(mem_total(text), Some(131_891_264 * 1024));
        assert_eq!(mem_total("MemFree: 3 kB\n"), None);
        assert_eq!(mem_total("MemTotal: lots kB\n"), None);
    }

    #[test]
    fn this_process_holds_some_anonymous_memory() {
        let held = vec![1u8; 8 << 20];
        assert!(memory_in_use() >= 8 << 20, "{}", memory_in_use());
        drop(held);
        assert_eq!(
            kib_field("RssAnon:\t  2048 kB\n", "RssAnon:"),
            Some(2 << 20)
        );
    }

    #[test]
    fn rings_over_half_the_memory_of_all_the_node_s_processes_are_noted() {
        const GIB: u64 = 1 << 30;
        // One process whose 925 MB ring nearly fills a 940 MB container: OOM-killed (137).
        let note = rings_note(925_000_000, 1, 940 << 20).expect("noted");
        assert!(
            note.contains("94% of the") && note.contains("lower batch_size"),
            "{note}"
        );
        // Eight processes of 3 GiB each in a 32 GiB pod: each passed the build's check.
        let note = rings_note(3 * GIB, 8, 32 * GIB).expect("noted");
        assert!(
            note.contains("each of the 8 processes") && note.contains("75%"),
            "{note}"
        );
        // Room to spare.
        assert_eq!(rings_note(GIB, 8, 32 * GIB), None);
    }

    #[test]
    fn the_lowest_cgroup_limit_on_the_path_binds() {
        let root = tempfile::tempdir().unwrap();
        let write = |rel: &str, text: &str| {
            let p = root.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        // v2: the job's group is unlimited, its parent is limited to 64 GiB.
        write("memory.max", "max\n");
        write("job/memory.max", "68719476736\n");
        write("job/step/memory.max", "max\n");
        let v2 = "0::/job/step\n";
        assert_eq!(cgroup_limit(v2, root.path()), Some(64 << 30));
        // v1: the memory controller's line, "unlimited" being i64::MAX rounded to pages.
        write("memory/docker/abc/memory.limit_in_bytes", "8589934592\n");
        write("memory/memory.limit_in_bytes", "9223372036854771712\n");
        let v1 = "12:cpu,cpuacct:/docker/abc\n11:memory:/docker/abc\n";
        assert_eq!(cgroup_limit(v1, root.path()), Some(8 << 30));
        // No limit anywhere, or no memory controller: none.
        assert_eq!(cgroup_limit("0::/\n", root.path()), None);
        assert_eq!(cgroup_limit("3:cpu:/x\n", root.path()), None);
        assert_eq!(cgroup_limit("", root.path()), None);
    }
}
