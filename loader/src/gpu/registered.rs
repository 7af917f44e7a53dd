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
//!
//! The page-lock limit holds for the process: every registration reserves its
//! shards' bytes in one ledger (`lock_ledger`) first, under the table's lock, and
//! gives them back once unregistered; a range loaders share is reserved once.

use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaEvent, CudaStream, DriverError};
use stoker_decode::bind_context;
use stoker_formats::Dataset;

use super::lock_ledger::{Ledger, Ranges, Reservation};
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

/// The bytes this process keeps page-locked, all loaders together.
static LEDGER: Ledger = Ledger::new();

/// Registered ranges of this process. Its lock is held across each set of
/// registrations and unregistrations, and the ledger's reservations change only
/// under it: a range is never seen as registered before the driver has it, nor
/// as free before the driver has let it go.
fn table() -> &'static Mutex<Ranges<'static>> {
    static TABLE: OnceLock<Mutex<Ranges<'static>>> = OnceLock::new();
    TABLE.get_or_init(|| Mutex::new(Ranges::default()))
}

/// The table, locked; taken over from a thread that panicked holding it (every
/// change to it is a single insert or removal, so it is whole between them).
fn lock_table() -> std::sync::MutexGuard<'static, Ranges<'static>> {
    table().lock().unwrap_or_else(|p| p.into_inner())
}

/// Bytes of `dataset`'s shards page-locked already in this process (by loaders
/// over the same shard maps: a dataset opened again while open shares them), and the bytes the process holds page-locked in
/// all: what [`super::lock_ledger::route`] decides from.
pub(crate) fn locked_now(dataset: &Dataset) -> (u64, u64) {
    let table = lock_table();
    let shards = dataset.manifest().shards.iter();
    let shared = shards
        .zip(locked_in(&table, dataset))
        .filter(|(_, locked)| *locked)
        .map(|(entry, _)| entry.bytes)
        .sum();
    (shared, LEDGER.held())
}

/// For each shard of `dataset`, whether `table` holds its map.
fn locked_in(table: &Ranges<'_>, dataset: &Dataset) -> Vec<bool> {
    (0..dataset.manifest().shards.len())
        .map(|i| {
            dataset
                .shard_bytes(i)
                .is_some_and(|b| !b.is_empty() && table.contains(b.as_ptr() as usize))
        })
        .collect()
}

/// A shard's mapping as registered: whole pages from `start`, `len` bytes, and
/// `charge`, its bytes in the manifest (what the ledger counts).
struct Span<'d> {
    file: &'d str,
    start: usize,
    len: usize,
    charge: u64,
}

/// The span of shard `i` of `dataset`: `None` for an empty shard (nothing to
/// register); an error when its map was not found.
fn span(dataset: &Dataset, i: usize, page: usize) -> Result<Option<Span<'_>>, String> {
    let entry = dataset
        .manifest()
        .shards
        .get(i)
        .ok_or_else(|| format!("the dataset has no shard {i}"))?;
    match dataset.shard_bytes(i).filter(|b| !b.is_empty()) {
        Some(bytes) => {
            let start = bytes.as_ptr() as usize;
            debug_assert_eq!(start % page, 0, "mappings start on a page");
            Ok(Some(Span {
                file: &entry.file,
                start,
                // Whole pages: the last one is backed by the file up to its end and
                // zero-filled after it; pages past it are not mapped for reading.
                len: bytes.len().div_ceil(page) * page,
                charge: entry.bytes,
            }))
        }
        None if entry.count == 0 => Ok(None),
        None => Err(format!(
            "the memory map of shard {} was not found",
            entry.file
        )),
    }
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
    /// (the caller then stages through pinned buffers), as
    /// [`RegisteredMaps::register_shards`].
    ///
    /// Registering reads any page not yet in the page cache from disk.
    pub(crate) fn register(
        ctx: &Arc<CudaContext>,
        dataset: &Dataset,
        limit: u64,
    ) -> Result<RegisteredMaps, String> {
        let all: Vec<usize> = (0..dataset.manifest().shards.len()).collect();
        RegisteredMaps::register_shards(ctx, dataset, &all, limit)
    }

    /// Page-locks the shards `shards` (positions in the manifest) of `dataset`
    /// for `ctx`'s device, or says why not:
    /// - the shards not yet registered would take the process past `limit`
    ///   bytes page-locked (the ledger's refusal, naming what it holds);
    /// - a shard's mapping could not be found;
    /// - the driver refused (e.g. a kernel that does not allow pinning file pages).
    ///
    /// Registering reads any page not yet in the page cache from disk.
    pub(crate) fn register_shards(
        ctx: &Arc<CudaContext>,
        dataset: &Dataset,
        shards: &[usize],
        limit: u64,
    ) -> Result<RegisteredMaps, String> {
        // Not `bind_to_thread`: a stale error would leave the window unlocked.
        bind_context(ctx).map_err(|e| format!("binding the CUDA context: {e}"))?;
        let page = page_size();
        let spans = shards
            .iter()
            .filter_map(|&i| span(dataset, i, page).transpose())
            .collect::<Result<Vec<Span<'_>>, String>>()?;
        let mut maps = RegisteredMaps {
            ranges: Vec::new(),
            ctx: Arc::clone(ctx),
            _dataset: dataset.clone(),
        };
        let mut table = lock_table();
        let new = table.unregistered(spans.iter().map(|s| (s.start, s.charge)));
        let registered = match LEDGER.reserve(new, limit) {
            // What is left of `reserved` on an error (the shards not registered)
            // is given back when it drops.
            Ok(mut reserved) => {
                let added = spans
                    .iter()
                    .try_for_each(|s| maps.add(&mut table, s, &mut reserved));
                // Every new range took its charge: nothing reserved is left unowned.
                debug_assert!(added.is_err() || reserved.bytes() == 0);
                added
            }
            Err(refused) => Err(refused.to_string()),
        };
        // Released before `maps` can drop on an error: its `Drop` takes the lock too.
        drop(table);
        registered.map(|()| maps)
    }

    /// Registers `span` (or counts one more user of its registration) and adds
    /// it to `self`; a new registration takes its bytes out of `reserved`.
    fn add(
        &mut self,
        table: &mut Ranges<'static>,
        span: &Span<'_>,
        reserved: &mut Reservation<'static>,
    ) -> Result<(), String> {
        let Span {
            file, start, len, ..
        } = *span;
        match table.join(start, len) {
            // Another loader over this dataset registered it.
            Ok(true) => {}
            Err(other) => {
                return Err(format!(
                    "shard {file} is registered with {} bytes, not {len}",
                    other.0
                ))
            }
            Ok(false) => {
                // SAFETY: `start..start + len` lies in the shard's read-only mapping
                // (every page of it holds file bytes; `span`), which `self._dataset`
                // keeps alive until the registration is undone in `Drop` (by the
                // last user); READ_ONLY is what a read-only mapping needs, PORTABLE
                // makes it usable from every context.
                unsafe {
                    host_register(
                        start as *const u8,
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
                table.insert(start, len, reserved.split_off(span.charge));
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
    /// Undoes the registrations this was the last user of, and gives their bytes
    /// back to the ledger; the loader's streams were synchronized before
    /// (`Shared`'s `Drop` runs before its fields drop), and earlier users'
    /// loaders before theirs. Failures are logged, and the bytes of a
    /// registration not undone stay counted: its pages may stay locked.
    fn drop(&mut self) {
        let mut table = lock_table();
        // Not `bind_to_thread`: a stale error would leave the registration in place.
        let bound = bind_context(&self.ctx);
        for &(start, _) in &self.ranges {
            let Some(charge) = table.leave(start) else {
                continue;
            };
            if let Err(e) = &bound {
                tracing::warn!("unregistering the dataset's memory map: {e}");
                charge.keep();
                continue;
            }
            // SAFETY: `start` began a registration made in `register_shards` whose
            // last user this is, and the copies that read it have completed (see
            // above).
            match unsafe { host_unregister(start as *const u8) } {
                Ok(()) => drop(charge),
                Err(e) => {
                    tracing::warn!("cuMemHostUnregister failed: {e}");
                    charge.keep();
                }
            }
        }
    }
}

/// How raw records reach the device from the dataset's map.
pub(crate) enum DirectMaps {
    /// The whole dataset, page-locked at build.
    Whole(RegisteredMaps),
    /// Some of its shards (`lock_part`), page-locked at build; the records of the
    /// others are staged.
    Part {
        maps: RegisteredMaps,
        /// Shards locked, of `of`.
        shards: usize,
        of: usize,
    },
    /// A moving window of shards, locked per epoch ahead of the producer.
    Windowed(Locker<CudaRegistrar>),
}

impl std::fmt::Debug for DirectMaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DirectMaps::Whole(maps) => f.debug_tuple("Whole").field(maps).finish(),
            DirectMaps::Part { maps, shards, of } => f
                .debug_struct("Part")
                .field("maps", maps)
                .field("shards", shards)
                .field("of", of)
                .finish(),
            DirectMaps::Windowed(locker) => f.debug_tuple("Windowed").field(locker).finish(),
        }
    }
}

impl DirectMaps {
    /// The maps locked at build, whole or a part (a window's maps are the
    /// batch's own, taken by the producer).
    pub(crate) fn fixed(&self) -> Option<&RegisteredMaps> {
        match self {
            DirectMaps::Whole(maps) | DirectMaps::Part { maps, .. } => Some(maps),
            DirectMaps::Windowed(_) => None,
        }
    }
}

/// For each shard of `dataset`, whether its map is page-locked in this process
/// already (by other loaders over the same shard maps).
pub(crate) fn locked_shards(dataset: &Dataset) -> Vec<bool> {
    locked_in(&lock_table(), dataset)
}

/// Bytes of every shard of `dataset` (what locking it whole pins).
pub(crate) fn total_bytes(dataset: &Dataset) -> u64 {
    dataset.manifest().shard_bytes()
}

/// Locks windows of shards for [`super::window_locker::Locker`] on a CUDA
/// device, and waits for copies with events recorded on the copy stream.
pub(crate) struct CudaRegistrar {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) dataset: Dataset,
    /// The loader's page-lock limit, which each window's reservation is checked
    /// against (with what the process's other loaders hold).
    pub(crate) limit: u64,
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
        RegisteredMaps::register_shards(&self.ctx, &self.dataset, shards, self.limit)
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

/// Half the machine's memory (`MemTotal` in `/proc/meminfo`), the most this
/// process's loaders may keep page-locked of their datasets' maps, all together,
/// unless `page_lock_limit` says; `None` when it cannot be read. Not divided
/// among the processes on the node (unlike their staging,
/// [`crate::launcher::NodeShare`]): they map the same shard files, so their
/// registrations lock the same page-cache pages.
pub(crate) fn half_of_memory() -> Option<u64> {
    crate::launcher::memory_total().map(|b| b / 2)
}
