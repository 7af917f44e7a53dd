//! The crate's one error type.

use stoker_decode::DecodeError;
use stoker_formats::FormatError;

/// Everything that can go wrong while building or running a [`crate::Loader`].
///
/// Per-record failures carry the dataset index of the record so a caller can find it
/// (`stoker inspect`), and are only returned when the loader was built with
/// [`crate::OnError::Error`]; by default a bad record is replaced and counted in
/// [`crate::Stats`].
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum LoaderError {
    /// A builder setting is out of range or inconsistent with another one.
    #[error("invalid loader setting `{field}`: {reason}")]
    InvalidConfig {
        /// The builder method / field at fault.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The launcher's environment variables (torchrun's, MPI's, Horovod's, Slurm's) are
    /// incomplete, do not parse, or contradict each other
    /// ([`crate::launcher::Placement::from_vars`]).
    #[error("{launcher} environment: {problem} ({})", crate::launcher::list_vars(.variables))]
    LauncherEnv {
        /// The launcher whose variables were read.
        launcher: crate::launcher::Launcher,
        /// What is wrong with them.
        problem: crate::launcher::EnvProblem,
        /// The variables at fault, with their values.
        variables: Vec<crate::launcher::EnvVar>,
    },
    /// The dataset has no records.
    #[error("the dataset has no records")]
    EmptyDataset,
    /// Opening the dataset or a reader failed.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// A record could not be read (missing, truncated, CRC mismatch).
    #[error("record {index}: read failed: {}", without_record_prefix(*index, source))]
    Read {
        /// Dataset index of the record.
        index: u64,
        /// The shard reader's error.
        #[source]
        source: FormatError,
    },
    /// A record could not be decoded.
    #[error("record {index}: decode failed: {source}")]
    Decode {
        /// Dataset index of the record.
        index: u64,
        /// The decoder's error.
        #[source]
        source: DecodeError,
    },
    /// A record's header describes something the loader cannot turn into an image
    /// (zero size, an unsupported channel count for a raw record, a payload of the wrong size).
    #[error("record {index}: unusable record: {reason}")]
    UnusableRecord {
        /// Dataset index of the record.
        index: u64,
        /// Why it cannot be used.
        reason: String,
    },
    /// Memory for record `index` could not be allocated, also after the loader freed its
    /// own scratch and let the other large images finish (about a second): the process is
    /// out of memory or at its limit. The record is not bad, so it is not replaced: which
    /// record stood in would depend on what the other threads held at that moment, and
    /// two runs with the same seed would train on different images.
    #[error("record {index}: the {bytes} bytes of {what} cannot be allocated: this process is out of memory or at its limit (ulimit -v, a container's); the record itself is not bad, so it is not replaced (which record stood in would depend on timing, and runs with the same seed would differ): give the process more memory, or the loader fewer workers")]
    OutOfMemory {
        /// Dataset index of the record.
        index: u64,
        /// The allocation that failed.
        bytes: u64,
        /// What it was for (`"its pixels"`, `"the crop's window"`).
        what: &'static str,
    },
    /// A batch's buffer could not be allocated: the caller holds every buffer of the CPU
    /// path's ring (it keeps batches alive), so each further batch needs one more, and the
    /// process is out of memory or at its limit, also after the worker freed its scratch
    /// and waited for a buffer to come back (about a second).
    #[error("batch {batch}: its buffer of {bytes} bytes cannot be allocated: this process is out of memory or at its limit (ulimit -v, a container's); every buffer of the loader's ring is held by batches still alive, so each further batch needs one more: drop batches once used (copy what must be kept), or give the process more memory")]
    BatchOutOfMemory {
        /// The batch's position in the epoch.
        batch: u64,
        /// The buffer's size.
        bytes: u64,
    },
    /// Memory for the GPU path's batch slots could not be allocated: device memory
    /// (`cuMemAlloc`, or less free on the device than the ring needs) or page-locked host
    /// memory for staging (`cuMemHostAlloc`), `CUDA_ERROR_OUT_OF_MEMORY`. Most often the
    /// model holds the GPU's memory, or the batch and prefetch ask for more than is left.
    #[error("{what}: {bytes} bytes ({:.1} MiB) cannot be allocated: {reason}; lower batch_size or prefetch, or leave the loader more of that memory (a model or another process may hold it)", *.bytes as f64 / 1048576.0)]
    GpuOutOfMemory {
        /// The allocation that failed (`"device batch tensor (cuMemAlloc)"`).
        what: &'static str,
        /// Its size.
        bytes: u64,
        /// The driver's error, or what the device had free.
        reason: String,
    },
    /// A bad record could not be replaced: random picks from this rank's share of the epoch,
    /// then a scan of the whole dataset (of the records given to
    /// [`crate::LoaderBuilder::indices`], for a loader over part of it), found no usable
    /// record (every record is bad).
    #[error("{}", all_bad(*.index, *.attempts))]
    TooManyBadRecords {
        /// Dataset index of the record the order put at the failing position.
        index: u64,
        /// How many replacements were tried (0 when an earlier position of the epoch had
        /// already found the whole dataset bad).
        attempts: u32,
    },
    /// A saved [`crate::LoaderState`] does not match the loader it is resumed into.
    #[error("cannot resume: `{field}` is {got} in the saved state but {expected} in this loader")]
    ResumeMismatch {
        /// Which part of the state disagrees.
        field: &'static str,
        /// The value in this loader.
        expected: String,
        /// The value in the saved state.
        got: String,
    },
    /// [`crate::Loader::epoch`] was asked for another epoch than the one a resumed
    /// state continues ([`crate::Loader::load_state`], [`crate::LoaderBuilder::resume`])
    /// or the one after it; the state stays pending.
    #[error("the resumed state continues epoch {saved} at batch {position}, but epoch {requested} was asked: start the loop at epoch {saved} (`Loader::state().epoch`; Python: iterate the loader, or set_epoch({saved})), or build the loader without the state to start afresh")]
    ResumeEpoch {
        /// The epoch of the pending state.
        saved: u64,
        /// The batches of it already consumed.
        position: u64,
        /// The epoch asked for.
        requested: u64,
    },
    /// [`crate::Loader::epoch`] was called while another epoch iterator of the same loader is alive.
    #[error("epoch {requested} requested while epoch {running} is still being iterated; drop that iterator first (it may be kept alive by a variable, another thread, or a saved exception or traceback, as in a notebook: in Python, `it.close()` or `loader.close()` ends it)")]
    EpochInProgress {
        /// The epoch whose iterator is alive.
        running: u64,
        /// The epoch asked for.
        requested: u64,
    },
    /// [`crate::Loader::load_state`] was called while an epoch iterator of the same loader
    /// is alive: the state would change what that iterator yields.
    #[error("load_state (to continue epoch {resumes}) called while epoch {running} is still being iterated; drop that iterator first (it may be kept alive by a variable, another thread, or a saved exception or traceback, as in a notebook: in Python, `it.close()` or `loader.close()` ends it)")]
    StateWhileIterating {
        /// The epoch whose iterator is alive.
        running: u64,
        /// The epoch the state continues.
        resumes: u64,
    },
    /// The loader (or epoch iterator) was built in another process and this one is a
    /// `fork` of it: the pipeline's threads, and any CUDA context, exist only in the
    /// parent, so nothing would ever arrive.
    #[error("this loader was built in process {built}, and process {now} is a fork of it: its threads (and any CUDA context) stay in the parent; build the loader in the process that iterates it (after the fork, e.g. in the worker)")]
    ForkedProcess {
        /// The process that built the loader.
        built: u32,
        /// This process.
        now: u32,
    },
    /// A loader thread could not be started or stopped unexpectedly.
    #[error("loader thread `{thread}` failed: {reason}")]
    Thread {
        /// Thread name.
        thread: String,
        /// What happened (spawn error, panic message).
        reason: String,
    },
    /// A loader thread could not be started: most often a process limit (a container's
    /// `pids.max`, `ulimit -u`) below the threads asked for, not something wrong with the
    /// data.
    #[error("loader thread `{thread}` cannot start: {reason}; the process limit (a container's or job's pids.max, or ulimit -u) or the memory limit (ulimit -v: each thread's stack counts) may be below what the threads the loader starts need: ask for fewer workers (workers=, LoaderBuilder::workers) or raise the limit")]
    ThreadStart {
        /// Thread name.
        thread: String,
        /// The system's reason.
        reason: String,
    },
    /// The GPU path was requested but no usable GPU / CUDA / nvJPEG is present, or this build
    /// does not contain the GPU path.
    #[error("GPU path unavailable: {reason}")]
    GpuUnavailable {
        /// What is missing.
        reason: String,
    },
    /// A CUDA / nvJPEG operation of the GPU path failed.
    #[error("GPU operation `{op}` failed: {source}")]
    Gpu {
        /// The operation (e.g. `"cuMemcpyHtoDAsync"`, `"nvjpegDecodeBatched"`).
        op: &'static str,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A DLPack consumer passed a `stream` argument that does not name a CUDA stream
    /// (`0` is ambiguous and forbidden by the DLPack protocol; negative values other
    /// than `-1` mean nothing).
    #[error("DLPack: stream {stream} is not valid for a CUDA tensor (want None, 1 (legacy default), 2 (per-thread default), -1 (no synchronization) or a stream handle)")]
    DlpackStream {
        /// The value passed.
        stream: i64,
    },
}

/// [`LoaderError::TooManyBadRecords`]'s message. The tries are random picks (which may
/// draw one record twice) and then a scan, so their count is no count of records: 52
/// "replacements tried" in a dataset of 20 read as a miscount, and 0 "tried" as none.
fn all_bad(index: u64, attempts: u32) -> String {
    let what = "(unreadable, undecodable or invalid)";
    match attempts {
        0 => format!(
            "record {index} is unusable, and so is every record the loader draws from: an earlier position of this epoch found that, scanning them all {what}"
        ),
        n => format!(
            "record {index} is unusable, and so is every record the loader draws from: {n} tries to replace it, random picks from this rank's share of the epoch and then a scan of them all, found none usable {what}"
        ),
    }
}

impl LoaderError {
    /// The error of a loader thread (`thread`) that could not start: the system's reason,
    /// and what to change, since it is most often a process limit below the threads asked
    /// for (not something wrong with the data).
    pub(crate) fn thread_start(thread: impl Into<String>, reason: impl std::fmt::Display) -> Self {
        LoaderError::ThreadStart {
            thread: thread.into(),
            reason: reason.to_string(),
        }
    }

    /// The error of a failed allocation of `bytes` for record `index` (`what` they were
    /// for): [`LoaderError::OutOfMemory`], or a bad record when no allocation could ever
    /// hold that much (more than `isize::MAX` bytes: a header's absurd geometry).
    pub(crate) fn short_of_memory(index: u64, bytes: usize, what: &'static str) -> Self {
        if bytes > isize::MAX as usize {
            return LoaderError::UnusableRecord {
                index,
                reason: format!("the {bytes} bytes of {what} cannot be allocated"),
            };
        }
        LoaderError::OutOfMemory {
            index,
            bytes: bytes as u64,
            what,
        }
    }

    /// Whether memory could not be had ([`LoaderError::OutOfMemory`] for a record,
    /// [`LoaderError::BatchOutOfMemory`] for a batch's buffer, [`LoaderError::GpuOutOfMemory`]
    /// for the GPU path's slots): not the data's fault, and Python's `MemoryError`.
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_loader::LoaderError;
    /// assert!(LoaderError::BatchOutOfMemory { batch: 3, bytes: 1 << 20 }.is_short_of_memory());
    /// ```
    pub fn is_short_of_memory(&self) -> bool {
        self.is_short_of_host_memory() || matches!(self, LoaderError::GpuOutOfMemory { .. })
    }

    /// A stop that says nothing of the dataset: memory ran out, a loader thread could not
    /// start (a process limit), or the dataset's files could not be opened or read for no
    /// fault of theirs (no file descriptor left, storage that stopped answering). The CLI
    /// exits 3 for it, `stoker bench` included.
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_loader::LoaderError;
    /// assert!(LoaderError::BatchOutOfMemory { batch: 3, bytes: 1 << 20 }.is_no_fault_of_the_data());
    /// assert!(!LoaderError::EmptyDataset.is_no_fault_of_the_data());
    /// let limit = LoaderError::ThreadStart { thread: "stoker-cpu-3".into(), reason: "EAGAIN".into() };
    /// assert!(limit.is_no_fault_of_the_data());
    /// ```
    pub fn is_no_fault_of_the_data(&self) -> bool {
        self.is_short_of_memory()
            || matches!(self, LoaderError::ThreadStart { .. })
            || matches!(self, LoaderError::Format(f) if f.outside().is_some())
    }

    /// Host memory for one record or batch buffer could not be had: what a worker tries
    /// again after freeing scratch ([`crate::scratch_memory`]). Not the GPU path's slots:
    /// freeing host scratch gives no device memory back.
    pub(crate) fn is_short_of_host_memory(&self) -> bool {
        matches!(
            self,
            LoaderError::OutOfMemory { .. } | LoaderError::BatchOutOfMemory { .. }
        )
    }

    /// The dataset index of the record this error is about, if it is about one record.
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_loader::LoaderError;
    /// let e = LoaderError::UnusableRecord { index: 7, reason: "0×0 image".into() };
    /// assert_eq!(e.record_index(), Some(7));
    /// ```
    pub fn record_index(&self) -> Option<u64> {
        match self {
            LoaderError::Read { index, .. }
            | LoaderError::Decode { index, .. }
            | LoaderError::UnusableRecord { index, .. }
            | LoaderError::OutOfMemory { index, .. }
            | LoaderError::TooManyBadRecords { index, .. } => Some(*index),
            _ => None,
        }
    }
}

/// Wraps a CUDA driver error with the operation that failed.
pub(crate) fn driver_err(op: &'static str, e: cudarc::driver::DriverError) -> LoaderError {
    LoaderError::Gpu {
        op,
        source: Box::new(e),
    }
}

/// `source`'s message without its own `record N: ` where it names the same record, so that
/// a read error says the index once ("record 1: read failed: payload CRC32C is ...").
fn without_record_prefix(index: u64, source: &FormatError) -> String {
    let text = source.to_string();
    match text.strip_prefix(&format!("record {index}: ")) {
        Some(rest) => rest.to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_error_names_its_record_once() {
        let e = LoaderError::Read {
            index: 1,
            source: FormatError::CrcMismatch {
                index: 1,
                got: 1,
                want: 2,
            },
        };
        assert_eq!(
            e.to_string(),
            "record 1: read failed: payload CRC32C is 0x00000001, header says 0x00000002"
        );
        // Another record's error keeps its own index.
        let e = LoaderError::Read {
            index: 7,
            source: FormatError::CrcMismatch {
                index: 1,
                got: 1,
                want: 2,
            },
        };
        assert!(e
            .to_string()
            .starts_with("record 7: read failed: record 1: "));
    }
}
