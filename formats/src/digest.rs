//! Whole-file digests of shards: xxh3-64 (format version 2) and CRC32C (version 1).
//!
//! Shards that may be shared are read with `read`, not mapped: a shard truncated while it is
//! hashed gives a short read (reported as a size or digest mismatch), where a mapping would
//! raise SIGBUS. The writer hashes its own just-written temporary file through a map
//! (guarded: a page the disk cannot give back is an error, see [`crate::map_guard`]).

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::map_guard::GuardedMap;
use crate::FormatError;

/// Which digest to compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DigestKind {
    Xxh3,
    Crc32c,
}

/// Bytes read at a time by [`digest_file`].
const READ_BUFFER: usize = 1 << 20;

/// Length and digest of everything read from `file` (from its current position).
pub(crate) fn digest_file(
    path: &Path,
    file: &mut File,
    kind: DigestKind,
) -> Result<(u64, u64), FormatError> {
    // Fallible: under a memory limit, an error (an outside fault) rather than an abort.
    let mut buf = Vec::new();
    if buf.try_reserve_exact(READ_BUFFER).is_err() {
        let what = format!("a read buffer of {READ_BUFFER} bytes cannot be allocated");
        let e = std::io::Error::new(std::io::ErrorKind::OutOfMemory, what);
        return Err(FormatError::io(path, e));
    }
    buf.resize(READ_BUFFER, 0);
    let mut len = 0u64;
    let mut xxh = xxhash_rust::xxh3::Xxh3::new();
    let mut crc = 0u32;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(FormatError::io(path, e)),
        };
        len += n as u64;
        match kind {
            DigestKind::Xxh3 => xxh.update(&buf[..n]),
            DigestKind::Crc32c => crc = crc32c::crc32c_append(crc, &buf[..n]),
        }
    }
    Ok(match kind {
        DigestKind::Xxh3 => (len, xxh.digest()),
        DigestKind::Crc32c => (len, u64::from(crc)),
    })
}

/// Length and xxh3-64 of the file at `path`.
pub(crate) fn xxh3_of(path: &Path) -> Result<(u64, u64), FormatError> {
    let mut f = File::open(path).map_err(|e| FormatError::io(path, e))?;
    digest_file(path, &mut f, DigestKind::Xxh3)
}

/// Length and xxh3-64 of the shard file this process has just written and synced (`file`,
/// open for reading; `path` names it in errors), hashed
/// from its pages in place (read-only maps) rather than copied out with `read`.
///
/// Setting up the mappings, not hashing, is most of the cost, and the hash has to run in
/// file order; so the second half of the file is mapped (with `MAP_POPULATE`, which maps
/// every page in one call instead of one fault per page) on a second thread while this one
/// maps the first half, and the hash then runs over both maps in order.
///
/// Only for the writer's own temporary file: its name is private to one conversion, which
/// holds the output directory's lock, and nothing else writes it.
pub(crate) fn xxh3_of_written(file: &File, path: &Path) -> Result<(u64, u64), FormatError> {
    let len = file.metadata().map_err(|e| FormatError::io(path, e))?.len();
    if len == 0 {
        return Ok((0, xxhash_rust::xxh3::xxh3_64(&[])));
    }
    // Below this a second thread costs more than it saves.
    const PARALLEL_FROM: u64 = 8 << 20;
    let split = if len < PARALLEL_FROM {
        len
    } else {
        (len / 2).next_multiple_of(1 << 16)
    };
    let map = |offset: u64, len: u64| -> Result<GuardedMap, FormatError> {
        // SAFETY: the map is read-only and dropped before this function returns; the file
        // is the writer's finished temporary shard, written by nobody else while it is
        // mapped (see above), so its bytes and length do not change under the map.
        unsafe {
            memmap2::MmapOptions::new()
                .offset(offset)
                .len(len as usize)
                .populate()
                .map(file)
        }
        .map(GuardedMap::new)
        .map_err(|e| FormatError::io(path, e))
    };
    let (first, second) = std::thread::scope(|s| {
        // Where no thread can start (a process limit), this thread maps both halves.
        let second = (split < len).then(|| {
            std::thread::Builder::new()
                .name("stoker-digest".into())
                .spawn_scoped(s, || map(split, len - split))
        });
        let first = map(0, split);
        let second = second.map(|h| match h {
            Ok(h) => h.join().expect("mapping does not panic"),
            Err(_) => map(split, len - split),
        });
        (first, second)
    });
    let (first, second) = (first?, second.transpose()?);
    let mut hash = xxhash_rust::xxh3::Xxh3::new();
    hash.update(first.bytes());
    if let Some(second) = &second {
        hash.update(second.bytes());
    }
    // A page the disk could not give back read as zeros (crate::map_guard).
    if first.faulted() || second.as_ref().is_some_and(GuardedMap::faulted) {
        return Err(FormatError::ShardUnreadable {
            shard: path.to_path_buf(),
        });
    }
    Ok((len, hash.digest()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Why version 2 exists: each record's header ends with the CRC32C of the bytes before
    /// it, so rewriting a label and its header CRC together leaves the CRC32C of the whole
    /// file unchanged. xxh3 changes.
    #[test]
    fn relabelled_record_header_leaves_crc32c_unchanged_but_not_xxh3() {
        use crate::{Encoding, RecordHeader};
        let h = RecordHeader {
            encoding: Encoding::Jpeg,
            height: 4,
            width: 4,
            channels: 3,
            label: 1,
            payload_len: 3,
            crc32c: 7,
        };
        let file = |label| {
            let mut v = vec![0xAAu8; 100];
            v.extend_from_slice(&RecordHeader { label, ..h }.to_bytes());
            v.extend_from_slice(&[0x55; 100]);
            v
        };
        let (a, b) = (file(1), file(2));
        assert_ne!(a, b);
        assert_eq!(crc32c::crc32c(&a), crc32c::crc32c(&b));
        assert_ne!(
            xxhash_rust::xxh3::xxh3_64(&a),
            xxhash_rust::xxh3::xxh3_64(&b)
        );
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, &a).unwrap();
        assert_eq!(
            xxh3_of(&p).unwrap(),
            (200 + 32, xxhash_rust::xxh3::xxh3_64(&a))
        );
        let written = xxh3_of_written(&File::open(&p).unwrap(), &p).unwrap();
        assert_eq!(written, xxh3_of(&p).unwrap());
    }
}
