//! The names of a [`crate::SampleWriter`]'s records, kept on disk as the records are
//! written, for the source map written with the manifest ([`crate::source_map`]).
//!
//! A conversion derives its map from the listing afterwards; samples handed over one at a
//! time have no listing, and their names held in memory would grow with the dataset. The
//! spool is two unnamed files in the output directory (no name to leave behind, whatever
//! ends the process), the map's offset table and its names, copied behind the map's header
//! when the writer finishes.

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::PathBuf;

use crate::held_dir::HeldDir;
use crate::manifest::SourcesEntry;
use crate::source_map::MAX_SOURCE_NAME;
use crate::FormatError;

/// The spooled names of the records written so far (record 0's first).
#[derive(Debug)]
pub(crate) struct SourceSpool {
    /// Where the unnamed files are, for error messages.
    dir: PathBuf,
    /// Each record's end offset in the names, as the map's table holds it (without the
    /// leading 0).
    offsets: BufWriter<File>,
    names: BufWriter<File>,
    /// Bytes of names so far, and records named.
    at: u64,
    records: u64,
}

impl SourceSpool {
    /// An empty spool in `dir`, the writer's directory (held open).
    ///
    /// # Errors
    ///
    /// I/O errors creating its files.
    pub(crate) fn new(dir: &HeldDir) -> Result<SourceSpool, FormatError> {
        let file = || dir.unnamed_file().map(BufWriter::new);
        Ok(SourceSpool {
            dir: dir.path().to_path_buf(),
            offsets: file()?,
            names: file()?,
            at: 0,
            records: 0,
        })
    }

    /// Records named so far.
    pub(crate) fn records(&self) -> u64 {
        self.records
    }

    /// Names the next record `name` (a longer name than [`MAX_SOURCE_NAME`] keeps its first
    /// that many bytes, as every map does).
    ///
    /// # Errors
    ///
    /// I/O errors writing the spool (a full disk among them).
    pub(crate) fn push(&mut self, name: &[u8]) -> Result<(), FormatError> {
        let name = &name[..name.len().min(MAX_SOURCE_NAME)];
        self.at += name.len() as u64;
        self.offsets
            .write_all(&self.at.to_le_bytes())
            .and_then(|()| self.names.write_all(name))
            .map_err(|e| FormatError::io(&self.dir, e))?;
        self.records += 1;
        Ok(())
    }

    /// Writes the source map of the names spooled into `dir` (atomically, as every map is)
    /// and returns its manifest entry.
    ///
    /// # Errors
    ///
    /// I/O errors reading the spool or writing the map.
    pub(crate) fn finish(self, dir: &HeldDir) -> Result<SourcesEntry, FormatError> {
        let spool = &self.dir;
        let rewound = |w: BufWriter<File>| -> Result<File, FormatError> {
            let mut f = w
                .into_inner()
                .map_err(|e| FormatError::io(spool, e.into_error()))?;
            f.seek(SeekFrom::Start(0))
                .map_err(|e| FormatError::io(spool, e))?;
            Ok(f)
        };
        let mut offsets = rewound(self.offsets)?;
        let mut names = rewound(self.names)?;
        crate::source_map::write_copied(dir, self.records, &mut offsets, &mut names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_spooled_names_read_back_as_a_map() {
        let dir = tempfile::tempdir().unwrap();
        let held = HeldDir::open(dir.path()).unwrap();
        let mut spool = SourceSpool::new(&held).unwrap();
        let long = vec![b'x'; MAX_SOURCE_NAME + 10];
        for name in [&b"a/b.jpg"[..], b"", &long, b"sample 3"] {
            spool.push(name).unwrap();
        }
        assert_eq!(spool.records(), 4);
        let entry = spool.finish(&held).unwrap();
        // The unnamed spool files leave nothing beside the map.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [crate::source_map::SOURCES_FILE]);
        let map = crate::source_map::SourceMap::open(dir.path(), &entry, 4).unwrap();
        assert_eq!(map.get(0).unwrap(), Path::new("a/b.jpg"));
        assert_eq!(map.get(1).unwrap(), Path::new(""));
        assert_eq!(map.get(2).unwrap().as_os_str().len(), MAX_SOURCE_NAME);
        assert_eq!(map.get(3).unwrap(), Path::new("sample 3"));
    }
}
