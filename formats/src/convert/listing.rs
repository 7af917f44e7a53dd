//! What listing a source yields: the inputs in conversion order, the class names, and
//! what the user should hear about how the source was read.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::input_file::{read_input_into, read_range_into, FileIdentity};
use crate::FormatError;

/// One input and its label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Input {
    /// What reports, the journal and the listing's fingerprint call it: the file's path,
    /// or `TAR:MEMBER` for a member of a tar shard.
    pub path: PathBuf,
    pub label: u32,
    /// Why the walker already knows this entry cannot be converted (an unreadable or
    /// repeated directory, a broken symlink, a damaged tar shard): it is skipped and
    /// counted like a bad file.
    pub refused: Option<String>,
    /// Where its bytes are.
    pub bytes: InputBytes,
}

/// Where an input's bytes are: the one thing the pipeline asks of an input's kind, so a
/// file and a member of a tar go through the same workers, checks and writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InputBytes {
    /// The whole file at the input's `path`.
    File,
    /// `len` bytes from byte `offset` of the tar file `tar`, read in place.
    TarMember {
        tar: Arc<ListedTar>,
        offset: u64,
        len: u64,
    },
}

/// A tar shard as listed: its members' byte ranges hold only while it is this file.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ListedTar {
    pub path: PathBuf,
    pub id: FileIdentity,
}

impl Input {
    /// A file to read.
    pub(crate) fn file(path: PathBuf, label: u32) -> Input {
        Input {
            path,
            label,
            refused: None,
            bytes: InputBytes::File,
        }
    }

    /// An entry that is skipped, with `reason`, without being read.
    pub(crate) fn refused(path: PathBuf, label: u32, reason: String) -> Input {
        Input {
            path,
            label,
            refused: Some(reason),
            bytes: InputBytes::File,
        }
    }

    /// Reads the input's bytes into `buf` (recycled: its contents are discarded) if it is
    /// at most `limit` bytes; a tar member over the limit is refused without being read.
    ///
    /// # Errors
    ///
    /// [`FormatError::NotRegularFile`], [`FormatError::FileTooLarge`],
    /// [`FormatError::Io`], [`FormatError::TarChanged`] for a tar that changed since it
    /// was listed.
    pub(crate) fn read_into(&self, limit: u64, buf: Vec<u8>) -> Result<Vec<u8>, FormatError> {
        match &self.bytes {
            InputBytes::File => read_input_into(&self.path, limit, buf),
            InputBytes::TarMember { tar, offset, len } => {
                read_range_into(&tar.path, &tar.id, *offset, *len, limit, buf)
            }
        }
    }

    /// Its size in bytes as of now (a `stat` for a file), `None` when unknown.
    pub(crate) fn size_now(&self) -> Option<u64> {
        match &self.bytes {
            InputBytes::File => std::fs::metadata(&self.path).ok().map(|m| m.len()),
            InputBytes::TarMember { len, .. } => Some(*len),
        }
    }
}

/// The inputs in conversion order, and the class names.
#[derive(Debug)]
pub(crate) struct Listing {
    pub inputs: Vec<Input>,
    /// One name per label, `classes[label]`.
    pub classes: Vec<String>,
    /// Entries of the source folder that are not inputs: files directly in an ImageFolder
    /// root (in no class), or what is not a `.tar` file in a folder of WebDataset shards.
    pub ignored: Vec<PathBuf>,
    /// An ImageFolder source was read as one class of unlabelled images.
    pub flat: bool,
    /// The source was read as WebDataset tar shards.
    pub webdataset: bool,
    /// How the source was read where it may not be what the user meant (an empty class
    /// folder, a hidden folder taken as a class, a commented-out list row); the labels
    /// are as listed all the same.
    pub warnings: Vec<String>,
}

impl Listing {
    /// Bytes of all the inputs' paths (what bounds the size of a resume journal).
    pub(crate) fn path_bytes(&self) -> u64 {
        self.inputs
            .iter()
            .map(|i| i.path.as_os_str().len() as u64)
            .sum()
    }
}

/// `TAR:MEMBER`, the name of a member of the tar file `tar` in reports.
pub(crate) fn member_name(tar: &Path, member: &[u8]) -> PathBuf {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let tar = tar.as_os_str().as_bytes();
    let mut name = Vec::with_capacity(tar.len() + 1 + member.len());
    name.extend_from_slice(tar);
    name.push(b':');
    name.extend_from_slice(member);
    PathBuf::from(std::ffi::OsString::from_vec(name))
}
