//! The options of a [`super::SampleWriter`]: how samples are turned into records.

use std::path::PathBuf;

use super::options::{ConvertOptions, ResizeMode};
use crate::record::Encoding;
#[cfg(doc)]
use crate::FormatError;

/// How samples are turned into records: [`ConvertOptions`]' fields that apply to samples
/// (not the source, layout, shuffle, resume or a shard count, which need a listing known in
/// advance), with the same defaults; and a part, for writing one dataset from several
/// processes.
#[derive(Debug, Clone)]
pub struct SampleOptions {
    /// Where the samples came from, for the manifest's `provenance.source` (e.g.
    /// `"hf:cifar10/train"`).
    pub source: String,
    /// As [`ConvertOptions::encoding`].
    pub encoding: Encoding,
    /// As [`ConvertOptions::max_side`].
    pub max_side: Option<u32>,
    /// As [`ConvertOptions::quality`].
    pub quality: u8,
    /// As [`ConvertOptions::raw_size`].
    pub raw_size: Option<(u32, u32)>,
    /// As [`ConvertOptions::resize`].
    pub resize: ResizeMode,
    /// As [`ConvertOptions::jobs`].
    pub jobs: Option<usize>,
    /// As [`ConvertOptions::shard_bytes`].
    pub shard_bytes: u64,
    /// As [`ConvertOptions::strict`]: a sample that cannot be converted stops the writer
    /// with [`FormatError::StrictSample`] (from a later `write` or from `finish`, since
    /// samples are transcoded in chunks), and the writer takes its output away.
    pub strict: bool,
    /// As [`ConvertOptions::max_pixels`].
    pub max_pixels: u64,
    /// As [`ConvertOptions::max_file_size`]: larger samples are skipped.
    pub max_file_size: u64,
    /// As [`ConvertOptions::gpu_friendly`].
    pub gpu_friendly: bool,
    /// As [`ConvertOptions::check_decode`].
    pub check_decode: bool,
    /// Write part `index` of `count` of one dataset, into `out/part-IIIII-of-NNNNN/` (as
    /// `convert --part` names its parts), for [`crate::merge()`] to join: the merged dataset
    /// holds part 0's samples, then part 1's, and so on. Needs the classes (a part cannot
    /// know the largest label the others see), the same in every part, as are the options
    /// and the source.
    pub part: Option<super::Part>,
}

impl SampleOptions {
    /// Options with `convert`'s defaults, the samples described as `source`.
    ///
    /// # Examples
    ///
    /// ```
    /// let o = stoker_formats::SampleOptions::new("hf:beans/train");
    /// assert_eq!((o.quality, o.check_decode), (90, true));
    /// ```
    pub fn new(source: impl Into<String>) -> SampleOptions {
        let c = ConvertOptions::new(super::source::Source::ImageFolder(PathBuf::new()), "");
        SampleOptions {
            source: source.into(),
            encoding: c.encoding,
            max_side: c.max_side,
            quality: c.quality,
            raw_size: c.raw_size,
            resize: c.resize,
            jobs: c.jobs,
            shard_bytes: c.shard_bytes,
            strict: c.strict,
            max_pixels: c.max_pixels,
            max_file_size: c.max_file_size,
            gpu_friendly: c.gpu_friendly,
            check_decode: c.check_decode,
            part: None,
        }
    }

    /// The conversion options that process a sample as `convert` processes a file into
    /// `out` (the source is never read: samples come from the caller).
    pub(super) fn as_convert(&self, out: PathBuf) -> ConvertOptions {
        let mut c = ConvertOptions::new(super::source::Source::ImageFolder(PathBuf::new()), out);
        c.encoding = self.encoding;
        c.max_side = self.max_side;
        c.quality = self.quality;
        c.raw_size = self.raw_size;
        c.resize = self.resize;
        c.jobs = self.jobs;
        c.shard_bytes = self.shard_bytes;
        c.strict = self.strict;
        c.max_pixels = self.max_pixels;
        c.max_file_size = self.max_file_size;
        c.gpu_friendly = self.gpu_friendly;
        c.check_decode = self.check_decode;
        c
    }
}
