//! # Overview
//!
//! `stoker-formats` is stoker's on-disk dataset format and the converter that produces it.
//!
//! A dataset is a directory holding LMDB shards (`shard-00000.lmdb`, one single-file LMDB
//! environment each) and a `manifest.json`. Keys are the sample index as u64 big-endian
//! (offset by the shard's `key_base` in a merged dataset); values are a 32-byte header (encoding, size, label, payload length, CRC32C) followed by
//! the payload: JPEG bytes or raw HWC u8 pixels. docs/FORMAT.md documents the bytes.
//!
//! - [`Dataset::open`] / [`Dataset::reader`] / [`DatasetReader::get`]: zero-copy reads
//!   (payloads are `&[u8]` into the memory map), shards opened read-only without a lock file.
//! - [`DatasetWriter`]: writes records in index order; shards are renamed into place when
//!   complete and the manifest comes last, so an interrupted write never looks finished.
//! - [`convert()`]: an ImageFolder tree, list file or WebDataset tar shards
//!   ([`Layout::WebDataset`], members read in place) into a dataset, in parallel and
//!   deterministically, skipping and reporting bad inputs, with a JPEG compatibility
//!   [`Audit`].
//! - [`SampleWriter`]: the same dataset from samples handed over one at a time (encoded
//!   image bytes and a label), for images that are not files (a Hugging Face dataset, a
//!   database), each processed exactly as `convert` processes a file.
//! - [`merge()`]: joins the parts of a conversion split over a job array
//!   ([`ConvertOptions::part`]) into one dataset, without copying shards.
//! - [`verify()`] and [`inspect()`]: check every record; summarize a dataset. [`verify_dir()`]
//!   checks a dataset too damaged to open, and names the records of each shard it lost.
//! - [`Dataset::source_of`] / [`SourceMap`]: which input file (or tar member) a record
//!   came from, from the source map `convert` and `merge` write beside the manifest;
//!   [`inspect_record()`] reports one record with it.
//!
//! ```
//! use stoker_formats::{convert, verify, ConvertOptions, Dataset, NoProgress, Source};
//!
//! let src = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/imagefolder");
//! let out = tempfile::tempdir()?;
//! let mut opts = ConvertOptions::new(Source::ImageFolder(src.into()), out.path().join("ds"));
//! opts.check_decode = false; // store original bytes after a header check only
//! let report = convert(&opts, &NoProgress)?;
//! println!("{} written, {} skipped", report.written, report.skipped.len());
//!
//! let ds = Dataset::open(out.path().join("ds"))?;
//! let reader = ds.reader()?;
//! let rec = reader.get(0)?;
//! rec.check_crc()?;
//! println!("label {} ({}), {} JPEG bytes", rec.header.label,
//!          ds.manifest().classes[rec.header.label as usize], rec.payload.len());
//! assert!(verify(&ds, false)?.ok());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Features
//!
//! - `progress-bar` (off by default): `convert::TerminalBar`, a [`Progress`] that draws a
//!   conversion's images, images/s, MB/s and ETA as a bar on stderr (the `stoker` CLI's
//!   and the Python package's). It brings indicatif, a terminal crate the library itself
//!   does without; [`NoProgress`] or a [`Progress`] of your own need no feature.
//!
//! ```toml
//! stoker-formats = { git = "<stoker's repository>", features = ["progress-bar"] }
//! ```
//!
//! Through the `stoker` crate alone this crate is `stoker::formats` (write
//! `stoker::formats::Dataset` where these pages write `stoker_formats::Dataset`), and the
//! feature is `stoker`'s `progress-bar`.
//!
//! # The process's SIGBUS handler
//!
//! Records are read through memory maps of the shards. A page the storage cannot deliver
//! (a shard cut short under a running reader by `cp` or `rsync --inplace`, an NFS or FUSE
//! error) raises SIGBUS, which would end the process; stoker makes it a bad record instead
//! ([`DatasetReader::check_read`]). For that, [`Dataset::open`] installs a SIGBUS handler
//! for the whole process, which passes every fault outside a shard map on to the handler it
//! found in place (or to the default action). Readers put it back in front when another
//! handler has replaced it since, at most once a millisecond per reading thread
//! ([`refresh_read_fault_handler`]): a SIGBUS handler your program installs after opening a
//! dataset still gets every fault outside shard maps, but not first.

mod bounded;
mod buffer_pool;
pub mod convert;
mod dataset;
mod digest;
mod error;
mod held_dir;
mod input_file;
mod inspect;
mod inspect_record;
mod lmdb_layout;
mod lmdb_lookup;
mod lmdb_meta;
mod lmdb_walk;
mod lmdb_write;
mod manifest;
mod map_guard;
mod merge;
mod out_dir;
mod out_of_space;
mod outside_fault;
mod path_nesting;
mod read_ahead;
mod record;
mod record_check;
pub mod seeded;
mod shard;
mod source_map;
mod source_spool;
mod text;
mod verify;
mod writer;

pub use convert::audit::Audit;
pub use convert::{
    convert, jpeg_is_complete, lossless_text, ChunkDone, ConvertOptions, ConvertReport, Layout,
    NoProgress, Part, Progress, ResizeMode, SampleOptions, SampleWriter, Skipped, Source,
    MAX_PARTS, MAX_SIDE,
};
pub use dataset::{Dataset, DatasetReader};
pub use error::FormatError;
pub use input_file::{read_input_file, DEFAULT_MAX_FILE_SIZE};
pub use inspect::{inspect, ClassCount, Distribution, InspectReport};
pub use inspect_record::{inspect_record, inspect_record_with, RecordFields, RecordReport};
pub use manifest::{
    Manifest, PartInfo, Provenance, RawSize, ShardEntry, SourcesEntry, FORMAT_NAME, FORMAT_VERSION,
    MANIFEST_FILE, MAX_MANIFEST_BYTES, OLDEST_FORMAT_VERSION,
};
pub use map_guard::install as install_read_fault_handler;
pub use map_guard::refresh as refresh_read_fault_handler;
pub use map_guard::REFRESH_INTERVAL as READ_FAULT_HANDLER_REFRESH;
pub use merge::{merge, MergeReport};
pub use outside_fault::{FaultStage, OutsideFault};
pub use record::{
    Encoding, Record, RecordHeader, HEADER_LEN, RAW_CHANNELS, RECORD_MAGIC, RECORD_VERSION,
};
pub use record_check::{label_problem, raw_problems};
pub use source_map::{SourceMap, MAX_SOURCE_NAME, SOURCES_FILE};
pub use text::one_line;
pub use verify::{
    verify, verify_dir, verify_dir_until, BadRecord, LostCause, LostRecords, VerifyReport,
};
pub use writer::{shard_file_name, DatasetWriter, RecordMeta, WriterOptions, DEFAULT_SHARD_BYTES};
