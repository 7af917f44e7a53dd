//! Reading one input image with bounds: regular files only, up to a size limit, and never
//! blocking on a FIFO. The converter and `stoker decode` read every input through here, so a
//! device file, a pipe or a multi-gigabyte file is refused before any of it is read.

use std::fs::{File, Metadata, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::text::Lossless;
use crate::FormatError;

/// Default input size limit: 64 MiB, above any photograph's JPEG (a 100-megapixel camera's
/// finest JPEGs are about 50 MB) while a directory of huge files cannot take a worker's
/// memory. Uncompressed TIFF or PNG inputs may need more (`--max-file-size`).
pub const DEFAULT_MAX_FILE_SIZE: u64 = 64 << 20;

/// What a file that is not a plain one is, for [`FormatError::NotRegularFile`]; from the
/// type `stat` gave (through `std` or, for a file looked at in a directory held open,
/// [`crate::held_dir::HeldDir::read`], through `rustix`).
pub(crate) fn kind_named(t: rustix::fs::FileType) -> &'static str {
    use rustix::fs::FileType as T;
    match t {
        T::Fifo => "a FIFO",
        T::Socket => "a socket",
        T::CharacterDevice => "a character device",
        T::BlockDevice => "a block device",
        T::Directory => "a directory",
        _ => "not a plain file",
    }
}

fn check_regular(path: &Path, meta: &Metadata) -> Result<(), FormatError> {
    if !meta.file_type().is_file() {
        return Err(FormatError::NotRegularFile {
            path: path.to_path_buf(),
            kind: kind_named(rustix::fs::FileType::from_raw_mode(meta.mode())),
        });
    }
    Ok(())
}

fn check(path: &Path, meta: &Metadata, limit: u64) -> Result<(), FormatError> {
    check_regular(path, meta)?;
    if meta.len() > limit {
        return Err(FormatError::FileTooLarge {
            path: path.to_path_buf(),
            bytes: meta.len(),
            limit,
        });
    }
    Ok(())
}

/// Opens `path` (symlinks followed) for reading if it is a regular file: checked with
/// `stat` before the open (a device is never opened) and with `fstat` after it (in case
/// another file was swapped in). The open is non-blocking, so a FIFO swapped in at the
/// last moment cannot hang the caller, and never makes a terminal the controlling one.
///
/// # Errors
///
/// [`FormatError::NotRegularFile`], or [`FormatError::Io`] when it cannot be opened.
pub(crate) fn open_regular(path: &Path) -> Result<(File, Metadata), FormatError> {
    let io = |e| FormatError::io(path, e);
    check_regular(path, &std::fs::metadata(path).map_err(io)?)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    check_regular(path, &meta)?;
    Ok((file, meta))
}

/// Which file a path named when it was listed: a file re-opened later to read part of it
/// (a tar shard) must be the same one, unchanged, or the listed byte ranges mean nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileIdentity {
    dev: u64,
    ino: u64,
    len: u64,
}

impl FileIdentity {
    /// Device, inode and size: not the modification time, which a `touch`, an
    /// `rsync -t` or a file system with unstable times changes with the bytes unchanged
    /// (a shard touched mid-run lost its remaining samples to that).
    pub(crate) fn of(meta: &Metadata) -> FileIdentity {
        FileIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
        }
    }
}

/// Reads the whole file at `path` (symlinks followed) if it is a regular file of at most
/// `limit` bytes.
///
/// The type is checked with `stat` before the file is opened (a device is never opened),
/// type and size again on the open file (in case it was swapped in between), and the read
/// stops at `limit + 1` bytes (in case the file grows). The open is non-blocking, so a FIFO
/// swapped in at the last moment cannot hang the caller.
///
/// # Errors
///
/// [`FormatError::NotRegularFile`], [`FormatError::FileTooLarge`], or
/// [`FormatError::Io`] when the file cannot be opened or read.
///
/// # Examples
///
/// ```
/// use stoker_formats::{read_input_file, FormatError};
/// let dir = tempfile::tempdir()?;
/// let p = dir.path().join("a.jpg");
/// std::fs::write(&p, [0xFF, 0xD8, 0xFF])?;
/// assert_eq!(read_input_file(&p, 3)?.len(), 3);
/// assert!(matches!(read_input_file(&p, 2), Err(FormatError::FileTooLarge { .. })));
/// assert!(matches!(read_input_file("/dev/zero".as_ref(), 1 << 20),
///                  Err(FormatError::NotRegularFile { .. })));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_input_file(path: &Path, limit: u64) -> Result<Vec<u8>, FormatError> {
    read_input_into(path, limit, Vec::new())
}

/// [`read_input_file`] into `buf`, a recycled buffer (its contents are discarded, its
/// capacity is used) or an empty one.
///
/// The bytes go straight into the buffer's spare capacity, which is neither zeroed first nor
/// grown in steps: one `read` sized by `fstat` and one that finds the end.
pub(crate) fn read_input_into(
    path: &Path,
    limit: u64,
    buf: Vec<u8>,
) -> Result<Vec<u8>, FormatError> {
    let (file, meta) = open_regular(path)?;
    read_checked(path, (&file, &meta), limit, buf)
}

/// The read of [`read_input_into`] once `file` is open (`meta`, its `fstat`).
fn read_checked(
    path: &Path,
    (file, meta): (&File, &Metadata),
    limit: u64,
    buf: Vec<u8>,
) -> Result<Vec<u8>, FormatError> {
    check(path, meta, limit)?;
    let data = read_bounded(file, meta.len(), limit, buf).map_err(|e| FormatError::io(path, e))?;
    if data.len() as u64 > limit {
        return Err(FormatError::FileTooLarge {
            path: path.to_path_buf(),
            bytes: data.len() as u64,
            limit,
        });
    }
    Ok(data)
}

/// [`read_input_file`] of a file already opened (`path` names it in errors): its type and
/// size checked on the open file, the read stopped past `limit`.
pub(crate) fn read_opened(path: &Path, file: &File, limit: u64) -> Result<Vec<u8>, FormatError> {
    let meta = file.metadata().map_err(|e| FormatError::io(path, e))?;
    read_checked(path, (file, &meta), limit, Vec::new())
}

/// Reads `len` bytes from byte `offset` of the file at `path` (a member of a tar shard,
/// the file `listed` when it was listed) into `buf` (recycled: its contents are discarded,
/// its capacity is used), if `len` is at most `limit`.
///
/// The size is known from the tar's header, so a member over the limit is refused before
/// the tar is opened. The open file must be the listed one, unchanged (same device, inode
/// and size, [`FileIdentity`]) before a buffer of `len` bytes exists: a tar cut short or
/// replaced since it was listed is an error, not a short record, bytes read at stale
/// offsets, or an allocation of what a header claimed.
pub(crate) fn read_range_into(
    path: &Path,
    listed: &FileIdentity,
    offset: u64,
    len: u64,
    limit: u64,
    mut buf: Vec<u8>,
) -> Result<Vec<u8>, FormatError> {
    if len > limit {
        return Err(FormatError::FileTooLarge {
            path: path.to_path_buf(),
            bytes: len,
            limit,
        });
    }
    let changed = |len_now: u64, replaced: bool| FormatError::TarChanged {
        path: path.to_path_buf(),
        offset,
        listed_len: listed.len,
        len_now,
        replaced,
    };
    let (file, meta) = open_regular(path)?;
    let now = FileIdentity::of(&meta);
    let past_end = offset.checked_add(len).is_none_or(|end| end > now.len);
    if now != *listed || past_end {
        return Err(changed(
            now.len,
            (now.dev, now.ino) != (listed.dev, listed.ino),
        ));
    }
    // Through the file's own `read_buf` (`Take` passes it on): the bytes go into the
    // buffer's spare capacity without zeroing it first, as `read_input_into`'s do, and no
    // further than `len` whatever capacity a recycled buffer has.
    let io = |e| FormatError::io(path, e);
    (&file).seek(SeekFrom::Start(offset)).map_err(io)?;
    buf.clear();
    buf.reserve_exact(usize::try_from(len).unwrap_or(usize::MAX));
    (&file).take(len).read_to_end(&mut buf).map_err(io)?;
    if (buf.len() as u64) < len {
        return Err(changed(offset + buf.len() as u64, false));
    }
    Ok(buf)
}

/// Reads `file` to its end into `buf` (cleared first), stopping once more than `limit` bytes
/// are in: the caller refuses such a file, and a file growing without end cannot take more
/// memory than `limit + 1` bytes beyond what `buf` already had.
///
/// `expected` (the size `fstat` gave) sizes the buffer one byte larger, so that the second
/// read already meets the end; a file that grew since is read on, the buffer doubling.
fn read_bounded(
    file: &File,
    expected: u64,
    limit: u64,
    mut buf: Vec<u8>,
) -> std::io::Result<Vec<u8>> {
    let most = usize::try_from(limit.saturating_add(1)).unwrap_or(usize::MAX);
    let first = usize::try_from(expected.saturating_add(1)).map_or(most, |e| e.min(most));
    buf.clear();
    buf.reserve_exact(first);
    loop {
        if buf.len() == buf.capacity() {
            if buf.len() >= most {
                break;
            }
            let more = buf.len().max(4096).min(most - buf.len());
            buf.reserve_exact(more);
        }
        match rustix::io::read(file, rustix::buffer::spare_capacity(&mut buf)) {
            Ok(0) => break,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        if buf.len() > limit as usize {
            break;
        }
    }
    Ok(buf)
}

/// Why an input was refused, without its path (the converter reports the path beside it).
pub(crate) fn refusal_reason(e: &FormatError) -> String {
    match e {
        FormatError::NotRegularFile { kind, .. } => format!("not a regular file ({kind})"),
        FormatError::FileTooLarge { bytes, limit, .. } => {
            format!("{bytes} bytes is over the input size limit of {limit} bytes (--max-file-size, Python max_file_size=)")
        }
        FormatError::Io { source, .. } => format!("unreadable: {source}"),
        FormatError::TarChanged { path, .. } => {
            let full = e.to_string();
            let prefix = format!("{}: ", path.lossless());
            full.strip_prefix(&prefix).unwrap_or(&full).to_string()
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tar replaced by another file since it was listed (same size: the ranges would
    /// fit) or cut short is refused, never read at the listed offsets.
    #[test]
    fn a_range_is_read_only_from_the_file_that_was_listed() {
        let dir = tempfile::tempdir().unwrap();
        let tar = dir.path().join("a.tar");
        std::fs::write(&tar, b"0123456789").unwrap();
        let listed = FileIdentity::of(&std::fs::metadata(&tar).unwrap());
        let read = |listed: &FileIdentity| read_range_into(&tar, listed, 2, 3, 1 << 20, Vec::new());
        assert_eq!(read(&listed).unwrap(), b"234");

        let other = dir.path().join("b.tar");
        std::fs::write(&other, b"abcdefghij").unwrap();
        std::fs::rename(&other, &tar).unwrap();
        let e = read(&listed).unwrap_err();
        assert!(
            matches!(
                e,
                FormatError::TarChanged {
                    replaced: true,
                    listed_len: 10,
                    len_now: 10,
                    offset: 2,
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            refusal_reason(&e).starts_with("the tar changed since it was listed"),
            "{e}"
        );

        // A new modification time alone (`touch`, `rsync -t`) is not a change: the run
        // reads on (it used to skip the shard's remaining samples).
        let listed = FileIdentity::of(&std::fs::metadata(&tar).unwrap());
        let file = std::fs::File::options().write(true).open(&tar).unwrap();
        file.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(60))
            .unwrap();
        assert_eq!(read(&listed).unwrap(), b"cde");
        file.set_len(4).unwrap();
        let e = read(&listed).unwrap_err();
        assert!(
            matches!(
                e,
                FormatError::TarChanged {
                    replaced: false,
                    len_now: 4,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe.jpg");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        let e = read_input_file(&fifo, 1 << 20).unwrap_err();
        assert!(
            matches!(e, FormatError::NotRegularFile { kind: "a FIFO", .. }),
            "{e}"
        );
    }

    #[test]
    fn symlink_to_dev_zero_is_refused_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("zero.jpg");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let e = read_input_file(&link, 1 << 20).unwrap_err();
        assert!(
            matches!(
                e,
                FormatError::NotRegularFile {
                    kind: "a character device",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("zero.jpg"), "{e}");
    }

    #[test]
    fn recycled_buffer_larger_than_the_file_holds_only_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.jpg");
        std::fs::write(&p, b"abc").unwrap();
        let mut old = Vec::with_capacity(100);
        old.extend_from_slice(&[9u8; 100]);
        assert_eq!(read_input_into(&p, 1 << 20, old).unwrap(), b"abc");
        let e = read_input_into(&p, 2, vec![9u8; 100]).unwrap_err();
        assert!(matches!(e, FormatError::FileTooLarge { .. }), "{e}");
    }

    #[test]
    fn file_that_grew_after_fstat_is_read_to_its_end_or_stopped_past_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.jpg");
        let data: Vec<u8> = (0..20_000u32).map(|i| i as u8).collect();
        std::fs::write(&p, &data).unwrap();
        // `expected` as if fstat had seen an older, shorter file.
        let got = read_bounded(&File::open(&p).unwrap(), 10, 1 << 20, Vec::new()).unwrap();
        assert_eq!(got, data);
        let got = read_bounded(&File::open(&p).unwrap(), 10, 15_000, Vec::new()).unwrap();
        assert!(got.len() > 15_000 && got.len() <= 20_000, "{}", got.len());
        assert_eq!(got[..], data[..got.len()]);
    }

    #[test]
    fn file_over_the_limit_is_refused_by_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.jpg");
        // A sparse 3 GiB file: refused from its size, never read.
        File::create(&big).unwrap().set_len(3 << 30).unwrap();
        let e = read_input_file(&big, DEFAULT_MAX_FILE_SIZE).unwrap_err();
        assert!(
            matches!(e, FormatError::FileTooLarge { bytes, .. } if bytes == 3 << 30),
            "{e}"
        );
        assert_eq!(refusal_reason(&e), format!("3221225472 bytes is over the input size limit of {DEFAULT_MAX_FILE_SIZE} bytes (--max-file-size, Python max_file_size=)"));
    }
}
