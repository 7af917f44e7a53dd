//! The dataset's memory map, page-locked for DMA (`cuMemHostRegister`), so that
//! raw records go to the device straight from the page cache: no reader copies
//! them into pinned staging first.
//!
//! Why: host threads writing into memory at the rate staging needs (which is
//! what the staging copies are) slow the device's reads of pinned memory below
//! the copy ceiling, whatever the store kind; host *reads* (the record CRC)
//! leave it at the ceiling (`examples/h2d_probe`; figures in docs/BENCHMARKS.md).
//!
//! FFI layers: `cudarc::driver::sys` (raw) → [`host_register`] / [`host_unregister`]
//! (`CUresult` to `Result`) → [`RegisteredMaps`] (holds the registrations,
//! unregisters on drop).
//!
//! A range can be registered once per process, and every loader over one dataset
//! shares its memory map: registrations are counted in a process-wide table and
//! undone when the last loader using them drops. They are PORTABLE, so loaders on
//! several devices share them too. A dataset over the page-lock limit is locked a
//! window of shards at a time ([`DirectMaps::Windowed`], `window_locker`), through
//! the same table, so shards two consecutive windows share stay locked.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaEvent, CudaStream, DriverError};
use stoker_decode::bind_context;
use stoker_formats::Dataset;

use super::window_locker::{Locker, Registrar};

/// Page-locks `len` bytes at `ptr` for the device (`cuMemHostRegister`).
///
/// # Safety
/// `ptr..ptr + len` must be mapped for the life of the registration, and only
/// `flags` the driver accepts for such memory may be given (`READ_ONLY` for a
/// read-only mapping).
unsafe fn host_register(ptr: *const u8, len: usize, flags: u32) -> Result<(), DriverError> {
    // SAFETY: per this function's contract; the driver only reads the range
    // (READ_ONLY) and keeps the pages resident until `host_unregister`.
    unsafe { sys::cuMemHostRegister_v2(ptr.cast_mut().cast(), len, flags) }.result()
}

/// Undoes [`host_register`] for the registration that starts at `ptr`.
///
/// # Safety
/// `ptr` must start a live registration, and no queued copy may read it any more.
unsafe fn host_unregister(ptr: *const u8) -> Result<(), DriverError> {
    // SAFETY: per this function's contract.
    unsafe { sys::cuMemHostUnregister(ptr.cast_mut().cast()) }.result()
}

/// Registered ranges of this process: start → (length, users).
fn table() -> &'static Mutex<HashMap<usize, (usize, usize)>> {
    static TABLE: OnceLock<Mutex<HashMap<usize, (usize, usize)>>> = OnceLock::new();
    TABLE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The shards of a dataset, page-locked for the device while this lives.
pub(crate) struct RegisteredMaps {
    /// `(start, len)` of each registered range.
    ranges: Vec<(usize, usize)>,
    ctx: Arc<CudaContext>,
    /// Keeps the mappings alive (the ranges point into them).
    _dataset: Dataset,
}

impl std::fmt::Debug for RegisteredMaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredMaps")
            .field("ranges", &self.ranges.len())
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl RegisteredMaps {
    /// Page-locks every shard of `dataset` for `ctx`'s device, or says why not
    /// (the caller then stages through pinned buffers, or locks a moving window,
    /// `window_locker`):
    /// - the shards together exceed `max_bytes` (they would all stay resident);
    /// - as [`RegisteredMaps::register_shards`].
    ///
    /// Registering reads any page not yet in the page cache from disk.
    pub(crate) fn register(
        ctx: &Arc<CudaContext>,
        dataset: &Dataset,
        max_bytes: u64,
    ) -> Result<RegisteredMaps, String> {
        let total = total_bytes(dataset);
        if total > max_bytes {
            return Err(format!(
                "the shards hold {} MiB, more than the {} MiB allowed to stay page-locked",
                total >> 20,
                max_bytes >> 20
            ));
        }
        let all: Vec<usize> = (0..dataset.manifest().shards.len()).collect();
        RegisteredMaps::register_shards(ctx, dataset, &all)
    }

    /// Page-locks the shards `shards` (positions in the manifest) of `dataset`
    /// for `ctx`'s device, or says why not:
    /// - a shard's mapping could not be found;
    /// - the driver refused (e.g. a kernel that does not allow pinning file pages).
    ///
    /// Registering reads any page not yet in the page cache from disk.
    pub(crate) fn register_shards(
        ctx: &Arc<CudaContext>,
        dataset: &Dataset,
        shards: &[usize],
    ) -> Result<RegisteredMaps, String> {
        // Not `bind_to_thread`: a stale error would leave the window unlocked.
        bind_context(ctx).map_err(|e| format!("binding the CUDA context: {e}"))?;
        let page = page_size();
        let mut maps = RegisteredMaps {
            ranges: Vec::new(),
            ctx: Arc::clone(ctx),
            _dataset: dataset.clone(),
        };
        let entries = &dataset.manifest().shards;
        let mut table = table().lock().unwrap_or_else(|p| p.into_inner());
        let registered = shards.iter().try_for_each(|&i| {
            let entry = entries
                .get(i)
                .ok_or_else(|| format!("the dataset has no shard {i}"))?;
            match dataset.shard_bytes(i).filter(|b| !b.is_empty()) {
                Some(bytes) => maps.add(&mut table, &entry.file, bytes, page),
                None if entry.count == 0 => Ok(()),
                None => Err(format!(
                    "the memory map of shard {} was not found",
                    entry.file
                )),
            }
        });
        // Released before `maps` can drop on an error: its `Drop` takes the lock too.
        drop(table);
        registered.map(|()| maps)
    }

    /// Registers the mapping `bytes` of shard `file` (or counts one more user of
    /// its registration) and adds it to `self`.
    fn add(
        &mut self,
        table: &mut HashMap<usize, (usize, usize)>,
        file: &str,
        bytes: &[u8],
        page: usize,
    ) -> Result<(), String> {
        let start = bytes.as_ptr() as usize;
        // Whole pages: the last one is backed by the file up to its end and
        // zero-filled after it; pages past it are not mapped for reading.
        let len = bytes.len().div_ceil(page) * page;
        debug_assert_eq!(start % page, 0, "mappings start on a page");
        match table.get_mut(&start) {
            // Another loader over this dataset registered it.
            Some((l, users)) if *l == len => *users += 1,
            Some((l, _)) => {
                return Err(format!(
                    "shard {file} is registered with {l} bytes, not {len}"
                ))
            }
            None => {
                // SAFETY: `start..start + len` lies in the shard's read-only mapping
                // (every page of it holds file bytes), which `self._dataset` keeps
                // alive until the registration is undone in `Drop` (by the last
                // user); READ_ONLY is what a read-only mapping needs, PORTABLE makes
                // it usable from every context.
                unsafe {
                    host_register(
                        bytes.as_ptr(),
                        len,
                        sys::CU_MEMHOSTREGISTER_READ_ONLY | sys::CU_MEMHOSTREGISTER_PORTABLE,
                    )
                }
                .map_err(|e| {
                    format!(
                        "cuMemHostRegister of shard {file} ({} MiB) failed: {e}",
                        len >> 20
                    )
                })?;
                table.insert(start, (len, 1));
            }
        }
        self.ranges.push((start, len));
        Ok(())
    }

    /// Whether `bytes` lies wholly inside one registered range.
    pub(crate) fn contains(&self, bytes: &[u8]) -> bool {
        let (a, n) = (bytes.as_ptr() as usize, bytes.len());
        self.ranges
            .iter()
            .any(|&(start, len)| a >= start && a + n <= start + len)
    }

    /// Bytes page-locked.
    pub(crate) fn bytes(&self) -> u64 {
        self.ranges.iter().map(|r| r.1 as u64).sum()
    }
}

impl Drop for RegisteredMaps {
    /// Undoes the registrations this was the last user of; the loader's streams
    /// were synchronized before (`Shared`'s `Drop` runs before its fields drop),
    /// and earlier users' loaders before theirs. Failures are logged.
    fn drop(&mut self) {
        let mut table = table().lock().unwrap_or_else(|p| p.into_inner());
        // Not `bind_to_thread`: a stale error would leave the registration in place.
        let bound = bind_context(&self.ctx);
        for &(start, _) in &self.ranges {
            let Some((_, users)) = table.get_mut(&start) else {
                continue;
            };
            *users -= 1;
            if *users > 0 {
                continue;
            }
            table.remove(&start);
            if let Err(e) = &bound {
                tracing::warn!("unregistering the dataset's memory map: {e}");
                continue;
            }
            // SAFETY: `start` began a registration made in `register` whose last
            // user this is, and the copies that read it have completed (see above).
            if let Err(e) = unsafe { host_unregister(start as *const u8) } {
                tracing::warn!("cuMemHostUnregister failed: {e}");
            }
        }
    }
}

/// How raw records reach the device from the dataset's map.
pub(crate) enum DirectMaps {
    /// The whole dataset, page-locked at build.
    Whole(RegisteredMaps),
    /// A moving window of shards, locked per epoch ahead of the producer.
    Windowed(Locker<CudaRegistrar>),
}

impl std::fmt::Debug for DirectMaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DirectMaps::Whole(maps) => f.debug_tuple("Whole").field(maps).finish(),
            DirectMaps::Windowed(locker) => f.debug_tuple("Windowed").field(locker).finish(),
        }
    }
}

impl DirectMaps {
    /// The whole dataset's maps, when it is locked whole (a window's maps are
    /// the batch's own, taken by the producer).
    pub(crate) fn whole(&self) -> Option<&RegisteredMaps> {
        match self {
            DirectMaps::Whole(maps) => Some(maps),
            DirectMaps::Windowed(_) => None,
        }
    }
}

/// Bytes of every shard of `dataset` (what locking it whole pins).
pub(crate) fn total_bytes(dataset: &Dataset) -> u64 {
    dataset.manifest().shards.iter().map(|s| s.bytes).sum()
}

/// Locks windows of shards for [`super::window_locker::Locker`] on a CUDA
/// device, and waits for copies with events recorded on the copy stream.
pub(crate) struct CudaRegistrar {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) dataset: Dataset,
    /// The stream that copies records out of the windows: waited for whole when
    /// a fence could not be recorded.
    pub(crate) copy: Arc<CudaStream>,
}

impl Registrar for CudaRegistrar {
    type Maps = RegisteredMaps;
    /// An event after the copies that read the window; `None` when it could not
    /// be recorded (the whole copy stream is waited for instead).
    type Fence = Option<CudaEvent>;

    fn lock(&self, shards: &[usize]) -> Result<RegisteredMaps, String> {
        RegisteredMaps::register_shards(&self.ctx, &self.dataset, shards)
    }

    fn wait(&self, fence: Option<CudaEvent>) {
        if fence.as_ref().is_none_or(|ev| ev.synchronize().is_err()) {
            // The maps are unlocked after this returns: a copy still reading
            // them must be done first, whatever failed.
            if let Err(e) = self.copy.synchronize() {
                tracing::warn!("waiting for the copies of a page-locked window: {e}");
            }
        }
    }
}

/// The page size of this machine (4 KiB when it cannot be asked).
fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// Half the machine's memory (`MemTotal` in `/proc/meminfo`), the most the
/// dataset's map may keep page-locked; `None` when it cannot be read. Not divided
/// among the processes on the node (unlike their staging,
/// [`crate::launcher::NodeShare`]): they map the same shard files, so their
/// registrations lock the same page-cache pages.
pub(crate) fn half_of_memory() -> Option<u64> {
    crate::launcher::memory_total().map(|b| b / 2)
}
