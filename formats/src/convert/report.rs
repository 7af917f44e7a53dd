//! What a conversion tells its caller: progress while it runs, the inputs it skipped, and
//! the report at the end.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::audit::Audit;
use crate::text::Lossless;

/// Receives progress while converting. All methods have empty defaults.
pub trait Progress: Sync {
    /// Called once with the number of inputs.
    fn start(&self, _inputs: u64) {}
    /// Called as inputs are finished (in input order): how many, and their source bytes.
    fn advance(&self, _inputs: u64, _bytes: u64) {}
    /// Called for each skipped input.
    fn skipped(&self, _path: &Path, _reason: &str) {}
    /// Called once, after the source is listed and before the output is touched, with
    /// what the listing noted ([`ConvertReport::warnings`]); [`Progress::cancelled`] is
    /// asked right after, so a caller that treats a warning as an error stops the
    /// conversion before anything is written.
    fn warnings(&self, _warnings: &[String]) {}
    /// Called once when done (also on failure).
    fn finish(&self) {}
    /// Polled by the writer before each input and every 100 ms while it waits: `true`
    /// stops the conversion with [`crate::FormatError::Cancelled`] (e.g. on Ctrl-C where
    /// the signal does not end the process, as in Python), leaving the output as a kill
    /// would, resumable.
    fn cancelled(&self) -> bool {
        false
    }
}

/// A [`Progress`] that reports nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;
impl Progress for NoProgress {}

/// An input that was not converted, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// The input file. In JSON, bytes of a name that are not UTF-8 are written `\xNN` (as
    /// Python's `backslashreplace` does), so a report of any tree can be written.
    #[serde(serialize_with = "path_as_text")]
    pub path: PathBuf,
    /// Why it was skipped.
    pub reason: String,
}

/// The longest skip reason kept, in bytes: a decoder's message can quote a whole header
/// (a TIFF's BitsPerSample of 65,535 values made one of 327,833 bytes), which filled
/// stderr and the report, and made the journal larger than its bound for the inputs, so
/// that `--resume` refused the journal the conversion had written. At JSON's worst
/// escaping (6 bytes for a control character) a reason this long still leaves a skip's
/// journal line within its allowance beside a 4 KiB path.
pub(crate) const MAX_REASON_BYTES: usize = 4096;

/// `reason`, at most [`MAX_REASON_BYTES`] long: its start and its end (where an I/O error
/// says its cause), and how much was left out between them.
pub(crate) fn capped_reason(reason: String) -> String {
    if reason.len() <= MAX_REASON_BYTES {
        return reason;
    }
    let floor = |mut i: usize| {
        while !reason.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let head = floor(3072);
    let tail = floor(reason.len() - 512);
    format!(
        "{} [... {} bytes left out ...] {}",
        &reason[..head],
        tail - head,
        &reason[tail..]
    )
}

/// How many skips are shown when a conversion or writer that wrote nothing says why.
pub(crate) const SKIPS_SHOWN: usize = 3;

/// The first [`SKIPS_SHOWN`] skips, "path: reason" joined by "; ", then "; ..." when there
/// are more: why a conversion or writer wrote nothing.
pub(crate) fn first_skipped(skipped: &[Skipped]) -> String {
    let reasons: Vec<String> = skipped
        .iter()
        .take(SKIPS_SHOWN)
        .map(|s| format!("{}: {}", s.path.lossless(), s.reason))
        .collect();
    let more = if skipped.len() > SKIPS_SHOWN {
        "; ..."
    } else {
        ""
    };
    format!("{}{more}", reasons.join("; "))
}

/// The outcome of a conversion; `written + skipped.len() == inputs` holds for every
/// conversion that ran (not for one found `already_done`, whose skips are not recorded).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ConvertReport {
    /// Input files found.
    pub inputs: u64,
    /// Records written.
    pub written: u64,
    /// Inputs not converted, with reasons, in input order.
    pub skipped: Vec<Skipped>,
    /// Files directly in an ImageFolder root: in no class folder, so not inputs (not
    /// counted); for WebDataset shards, the folder's entries that are not `.tar` files.
    /// In JSON, written as [`Skipped::path`] is.
    #[serde(serialize_with = "paths_as_text")]
    pub ignored: Vec<PathBuf>,
    /// The ImageFolder source was converted as one class of unlabelled images (label 0).
    #[serde(default)]
    pub flat: bool,
    /// The source was read as WebDataset tar shards (`--layout webdataset`, or `auto` on a
    /// `.tar` file or a folder of only `.tar` files); skipped samples are named
    /// `TAR:MEMBER`.
    #[serde(default)]
    pub webdataset: bool,
    /// How the source was read where it may not be what was meant, one sentence each: an
    /// empty class folder, a hidden folder (`.ipynb_checkpoints`) taken as a class or read
    /// as part of a flat layout, list rows commented out with `#`. Labels are as listed
    /// all the same. After the conversion, one more when `shards` asked for shards under
    /// [`super::MIN_SHARD_BYTES`] and fewer, larger ones were written.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Names of the ImageFolder class folders with no sample (they keep their labels):
    /// empty folders, then (in a conversion that is not a part) folders whose every input
    /// was skipped; each warning names the first 20.
    #[serde(default)]
    pub empty_classes: Vec<String>,
    /// Shard files written.
    pub shards: u64,
    /// Bytes of all shard files.
    pub bytes: u64,
    /// Bytes of the source files read.
    pub input_bytes: u64,
    /// Wall time of this run in seconds.
    pub seconds: f64,
    /// Records that are the original JPEG bytes.
    pub stored: u64,
    /// Records that were decoded and re-encoded (or stored raw).
    pub transcoded: u64,
    /// Records carried over from an interrupted run (`--resume`).
    pub resumed: u64,
    /// JPEG compatibility audit.
    pub audit: Audit,
    /// The output directory. In JSON, written as [`Skipped::path`] is.
    #[serde(serialize_with = "path_as_text")]
    pub out: PathBuf,
    /// With `resume`: the output was already finished by an earlier run of the same listing
    /// and flags (a retried task, a run killed after its manifest landed), so nothing was
    /// converted; `written` and `resumed` are its record count.
    #[serde(default)]
    pub already_done: bool,
}

/// A path as JSON text, its bytes that are not UTF-8 as `\xNN`: serde's own refuses such a
/// path, and a report of a conversion that succeeded failed to print (exit 1).
pub(crate) fn path_as_text<S: serde::Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::text::lossless_text(path.as_os_str()))
}

/// [`path_as_text`] for each of `paths`.
pub(crate) fn paths_as_text<S: serde::Serializer>(
    paths: &[PathBuf],
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_seq(
        paths
            .iter()
            .map(|p| crate::text::lossless_text(p.as_os_str())),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_reason_keeps_its_start_and_end() {
        let short = "not a JPEG".to_string();
        assert_eq!(capped_reason(short.clone()), short);
        let long = format!("unsupported BitsPerSample {}: cause", "é,".repeat(100_000));
        let capped = capped_reason(long.clone());
        assert!(capped.len() <= MAX_REASON_BYTES, "{}", capped.len());
        assert!(capped.starts_with("unsupported BitsPerSample é,"));
        assert!(capped.ends_with(": cause"));
        let kept = capped.len() - capped.split(" [... ").nth(1).unwrap().len();
        assert!(
            kept > 3000 && capped.contains(" bytes left out ...] "),
            "{capped}"
        );
    }
}
