//! Write failures that mean "no room": the disk, an inode table, a quota or the file size
//! limit ran out. They become [`FormatError::OutOfSpace`], which says which and how much
//! was written, rather than a bare OS error.

use std::path::Path;

use crate::FormatError;

/// Below this much free space, a failed write reported as EIO is taken for a full disk.
const NEARLY_FULL: u64 = 128 << 20;

/// `e` as [`FormatError::OutOfSpace`] when its OS error means the disk, a quota or the file
/// size limit ran out (a failed write can surface as EIO on some file systems: then the free
/// space decides), else `e` unchanged.
pub(crate) fn out_of_space(e: FormatError, dir: &Path, records: u64, bytes: u64) -> FormatError {
    let (path, code) = match &e {
        FormatError::Io { path, source } => (path.clone(), source.raw_os_error()),
        _ => return e,
    };
    let free = fs4::available_space(dir).ok();
    let free_text = free.map_or(String::new(), |f| format!(" ({f} bytes free)"));
    let (cause, errno) = match code {
        Some(libc::ENOSPC) => (no_space_cause(free, free_inodes(dir)), libc::ENOSPC),
        Some(libc::EDQUOT) => ("disk quota exceeded".to_string(), libc::EDQUOT),
        Some(libc::EFBIG) => (
            "file size limit reached (the process's RLIMIT_FSIZE or the file system's largest file)"
                .to_string(),
            libc::EFBIG,
        ),
        // A short write reported as EIO: the disk filled, or the file reached the process's
        // file size limit.
        Some(libc::EIO) if free.is_some_and(|f| f < NEARLY_FULL) => (
            format!("disk full{free_text}; the write failed with an I/O error"),
            libc::ENOSPC,
        ),
        Some(libc::EIO) if at_file_size_limit(&path) => (
            "file size limit reached (the process's RLIMIT_FSIZE)".to_string(),
            libc::EFBIG,
        ),
        _ => return e,
    };
    FormatError::OutOfSpace {
        shard: path,
        cause,
        records,
        bytes,
        errno,
    }
}

/// What ENOSPC means, given the bytes and inodes left to an unprivileged user: a file
/// system can run out of inodes (a tmpfs's `nr_inodes`, millions of small files) with
/// gigabytes free, and "disk full (38 MB free)" would send the user looking for space.
fn no_space_cause(free: Option<u64>, free_inodes: Option<u64>) -> String {
    let free_text = free.map_or(String::new(), |f| format!(" ({f} bytes free)"));
    if free_inodes == Some(0) {
        return format!(
            "no inodes left on the file system (no new file can be created, however much space is free{free_text})"
        );
    }
    format!("disk full{free_text}")
}

/// Inodes available to an unprivileged user on `dir`'s file system (`f_favail`); `None`
/// where the file system does not say (some report 0 total inodes: no fixed table).
fn free_inodes(dir: &Path) -> Option<u64> {
    let s = rustix::fs::statvfs(dir).ok()?;
    (s.f_files > 0).then_some(s.f_favail)
}

/// True when `path` has reached the process's file size limit.
fn at_file_size_limit(path: &Path) -> bool {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Fsize).current;
    match (limit, std::fs::metadata(path)) {
        (Some(limit), Ok(m)) => m.len() >= limit,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_space_with_no_inodes_left_says_so_not_disk_full() {
        let c = no_space_cause(Some(38_506_496), Some(0));
        assert!(
            c.starts_with("no inodes left") && c.contains("38506496 bytes free"),
            "{c}"
        );
        assert_eq!(
            no_space_cause(Some(4096), Some(10)),
            "disk full (4096 bytes free)"
        );
        assert_eq!(no_space_cause(None, None), "disk full");
    }
}
