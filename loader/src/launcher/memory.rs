//! The memory this process may use: the machine's (`MemTotal`), or less where a cgroup
//! limits it (a container's memory limit, a Slurm job's `--mem`). Pinned staging and
//! page-locked maps count against such a limit, and going past it gets the process
//! killed, so the loader's memory defaults are sized from the smaller of the two.

use std::path::Path;

/// The memory this process may use, bytes: `MemTotal`, or a cgroup's lower limit;
/// `None` when `/proc/meminfo` cannot be read.
pub(crate) fn memory_total() -> Option<u64> {
    let total = mem_total(&std::fs::read_to_string("/proc/meminfo").ok()?)?;
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let limit = cgroup_limit(&cgroups, Path::new("/sys/fs/cgroup"));
    Some(limit.map_or(total, |l| l.min(total)))
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_ascii_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
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
