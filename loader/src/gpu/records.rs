//! One record on the host: read and check it, and stage its pixels for the
//! device (raw records as they are, or from the registered dataset map; JPEG
//! records decoded on the CPU; images larger than a staging stride cropped and
//! resized on the CPU first). The record → pixels step is the CPU path's own
//! ([`crate::pixels`]), so both crop the same pixels. Each reader thread keeps
//! its own [`ReaderState`], lent from [`ThreadStates`] for one epoch.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use stoker_decode::{CpuDecoder, Limits};
use stoker_formats::{DatasetReader, Encoding};

use super::registered::{DirectMaps, RegisteredMaps};
use super::shared::Shared;
use super::stream_copy::copy_streaming;
use crate::error::LoaderError;
use crate::metrics::Metrics;
use crate::pipeline::{reader_unavailable, EpochPlan};
use crate::pixels::{decode_jpeg, load_record, read_checked, still_readable, Dest, Draw, Place};
use crate::scratch_memory::{retry_short_of_memory, Scratch};
use crate::transform::resize::CropResizer;
use crate::transform::{DrawKey, SampleParams};

/// A record read, CRC-checked and probed (by the read-ahead or the producer).
pub(super) struct Checked<'r> {
    pub(super) payload: &'r [u8],
    pub(super) label: u32,
    pub(super) info: stoker_decode::ImageInfo,
}

/// Reads record `index`, checks its CRC, that it is a JPEG, and its header.
pub(super) fn check_record<'r>(
    shared: &Shared,
    reader: &'r DatasetReader,
    index: u64,
    limits: &Limits,
) -> Result<Checked<'r>, LoaderError> {
    let r = read_checked(reader, index, &shared.metrics)?;
    if r.header.encoding != Encoding::Jpeg {
        return Err(LoaderError::UnusableRecord {
            index,
            reason: "a raw record in a JPEG dataset".into(),
        });
    }
    let info = stoker_decode::probe(r.payload, limits)
        .map_err(|source| LoaderError::Decode { index, source })?;
    Ok(Checked {
        payload: r.payload,
        label: r.header.label,
        info,
    })
}

/// One image staged in a slot.
#[derive(Clone, Copy, Debug)]
pub(super) struct Staged {
    pub(super) index: u64,
    pub(super) label: u32,
    pub(super) width: u32,
    pub(super) height: u32,
    pub(super) channels: u32,
    pub(super) crop: (u32, u32, u32, u32),
    pub(super) flip: bool,
    /// Bytes of the staged image (`width * height * channels`).
    pub(super) bytes: usize,
    /// Host address of the record's pixels in the registered dataset map, when
    /// they are copied to the device from there (`Shared::direct`) instead of
    /// from the slot's pinned staging.
    pub(super) source: Option<usize>,
}

/// Per-reader-thread state (see [`ThreadStates`]).
pub(super) struct ReaderState {
    pub(super) reader: Result<DatasetReader, String>,
    pub(super) decoder: CpuDecoder,
    /// Decoded pixels of images larger than a staging stride, and their resizer.
    pub(super) scratch: Scratch,
}

impl ReaderState {
    pub(super) fn new(shared: &Shared) -> ReaderState {
        ReaderState {
            reader: shared.dataset.reader().map_err(|e| e.to_string()),
            decoder: CpuDecoder::new(shared.limits),
            scratch: Scratch::new(shared.size),
        }
    }
}

/// A pool thread's place in [`ThreadStates`]: its state and spill buffer.
type Kept = Mutex<Option<(ReaderState, Vec<u8>)>>;

/// The reader pool's states for one epoch, one per pool thread, lent to each
/// rayon split and kept across the epoch's batches, with a spill buffer.
///
/// Why not one per split: making a [`ReaderState`] opens a reader, which checks
/// every shard file (a `stat` each), and a batch has tens of splits: on a dataset
/// of hundreds of shards (the ones read through a moving page-locked window) that
/// is thousands of `stat`s per batch (docs/BENCHMARKS.md, "A batch's readers on a
/// dataset of many shards"). Made again each epoch, so that a shard file replaced
/// meanwhile is still found (`Dataset::reader`).
pub(super) struct ThreadStates {
    /// One per pool thread: `None` until that thread first needs it, and while
    /// it is lent.
    states: Vec<Kept>,
    /// States made so far (for the tests).
    made: AtomicUsize,
}

impl ThreadStates {
    /// Room for a pool of `threads` threads.
    pub(super) fn new(threads: usize) -> ThreadStates {
        ThreadStates {
            states: (0..threads).map(|_| Mutex::new(None)).collect(),
            made: AtomicUsize::new(0),
        }
    }

    /// The state of the pool thread this runs on (made by `make` on its first
    /// use), or one made for this call off the pool or when that one is lent
    /// already (a split started while another waits on the same thread).
    pub(super) fn lend(&self, make: impl FnOnce() -> ReaderState) -> Lent<'_> {
        let home = rayon::current_thread_index().and_then(|i| self.states.get(i));
        let kept = home.and_then(|m| m.try_lock().ok().and_then(|mut g| g.take()));
        let state = kept.unwrap_or_else(|| {
            self.made.fetch_add(1, Ordering::Relaxed);
            (make(), Vec::new())
        });
        Lent {
            state: Some(state),
            home,
        }
    }

    /// States made so far.
    #[cfg(test)]
    fn made(&self) -> usize {
        self.made.load(Ordering::Relaxed)
    }
}

/// A [`ReaderState`] and a spill buffer lent by [`ThreadStates::lend`]; back
/// to its thread's place when dropped (kept if that place is taken).
pub(super) struct Lent<'a> {
    /// `Some` until dropped.
    state: Option<(ReaderState, Vec<u8>)>,
    home: Option<&'a Kept>,
}

impl Lent<'_> {
    /// The state and the spill buffer, grown to `len` bytes.
    pub(super) fn with_spill(&mut self, len: usize) -> (&mut ReaderState, &mut [u8]) {
        let (state, spill) = self.state.as_mut().expect("lent until dropped");
        if spill.len() < len {
            spill.resize(len, 0);
        }
        (state, &mut spill[..len])
    }
}

impl Deref for Lent<'_> {
    type Target = ReaderState;
    fn deref(&self) -> &ReaderState {
        &self.state.as_ref().expect("lent until dropped").0
    }
}

impl DerefMut for Lent<'_> {
    fn deref_mut(&mut self) -> &mut ReaderState {
        &mut self.state.as_mut().expect("lent until dropped").0
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let (Some(home), Some(state)) = (self.home, self.state.take()) {
            if let Ok(mut place) = home.try_lock() {
                if place.is_none() {
                    *place = Some(state);
                }
            }
        }
    }
}

/// Resolves sample position `pos` (with replacements) and stages it into `dst`,
/// or points at it in `direct` (the page-locked maps this batch may copy from).
pub(super) fn stage_position(
    shared: &Shared,
    plan: &EpochPlan,
    pos: usize,
    state: &mut ReaderState,
    dst: &mut [u8],
    direct: Option<&RegisteredMaps>,
) -> Result<Staged, LoaderError> {
    let host = HostStaging {
        direct,
        ..HostStaging::new(shared, plan)
    };
    let mut index = plan.order[pos];
    let mut attempt = 0;
    loop {
        let host = host.keyed(plan.draw_key(pos, attempt));
        let staged = retry_short_of_memory(
            state,
            false,
            |s| s.scratch.release(),
            |state| stage_one(&host, index, state, dst),
        );
        state.scratch.trim_if_asked();
        match staged {
            Ok(s) => return Ok(s),
            Err(error) => plan.replace_failed(pos, error, &mut attempt, &mut index)?,
        }
    }
}

/// What staging one record on the host reads of the backend: the settings of
/// [`Shared`] that matter there, and the epoch's crop and flip draw.
#[derive(Clone, Copy)]
pub(super) struct HostStaging<'a> {
    pub(super) metrics: &'a Metrics,
    /// The crop and flip of each sample, drawn as the CPU path draws them.
    pub(super) draw: Draw<'a>,
    /// Output side: images larger than their staging are resized to `size × size`.
    pub(super) size: u32,
    /// Raw records inside these page-locked maps are copied from there (the
    /// whole dataset's, or the window of the batch being built).
    pub(super) direct: Option<&'a RegisteredMaps>,
    /// Raw records are staged with streaming stores.
    pub(super) streaming_stores: bool,
}

impl<'a> HostStaging<'a> {
    /// `shared`'s settings, for the epoch of `plan`; `direct` is the whole
    /// dataset's map when it is locked whole (a window's is the batch's own).
    pub(super) fn new(shared: &'a Shared, plan: &EpochPlan) -> HostStaging<'a> {
        HostStaging {
            metrics: &shared.metrics,
            draw: Draw {
                transform: &shared.transform,
                seed: plan.seed,
                epoch: plan.epoch,
                // Set per record (`keyed`).
                key: DrawKey::default(),
            },
            size: shared.size,
            direct: shared.direct.as_ref().and_then(DirectMaps::fixed),
            streaming_stores: shared.streaming_stores,
        }
    }

    /// This staging for the sample at `key` ([`EpochPlan::draw_key`]).
    pub(super) fn keyed(self, key: DrawKey) -> HostStaging<'a> {
        HostStaging {
            draw: self.draw.keyed(key),
            ..self
        }
    }
}

/// Reads record `index`, checks it, and writes its pixels (HWC, 1 or 3 channels)
/// at the start of `dst`, through the record → pixels step both backends share
/// ([`load_record`]). Images larger than `dst` are cropped and resized on the
/// CPU first (then the kernel only flips, normalizes and lays them out).
fn stage_one(
    host: &HostStaging<'_>,
    index: u64,
    state: &mut ReaderState,
    dst: &mut [u8],
) -> Result<Staged, LoaderError> {
    let reader = state
        .reader
        .as_ref()
        .map_err(|reason| reader_unavailable("stoker-gpu-reader", reason))?;
    let loaded = load_record(
        reader,
        index,
        host.draw,
        (&state.decoder, &mut state.scratch.pixels),
        Dest::Slot(&mut *dst),
        host.metrics,
    )?;
    // Raw records inside the registered dataset map are copied from there.
    let mut source = None;
    match loaded.place {
        // Decoded into `dst`.
        Place::Slot => {}
        // A raw record that fits, as stored (`raw_payload_len` checked its size).
        Place::Payload => {
            let payload = loaded.payload;
            if host.direct.is_some_and(|maps| maps.contains(payload)) {
                // The CRC was checked (`read_checked`): the device copies exactly
                // these bytes, which nobody writes.
                source = Some(payload.as_ptr() as usize);
            } else {
                if host.streaming_stores {
                    copy_streaming(&mut dst[..payload.len()], payload);
                } else {
                    dst[..payload.len()].copy_from_slice(payload);
                }
                // Copied from the shard's map: its pages were still the file's.
                still_readable(reader, index)?;
            }
        }
        // Too large to stage: crop + resize here (same filter as the CPU path).
        Place::Scratch => {
            let (width, height) = (loaded.width, loaded.height);
            return resize_into_slot(
                host,
                (index, loaded.label),
                (&state.scratch.pixels, width, height, loaded.params),
                &mut state.scratch.resizer,
                dst,
            );
        }
    }
    Ok(Staged {
        index,
        label: loaded.label,
        width: loaded.width,
        height: loaded.height,
        channels: loaded.channels,
        crop: loaded.params.crop,
        flip: loaded.params.flip,
        bytes: loaded.bytes(),
        source,
    })
}

/// Decodes an image too large for a staging stride on the CPU (only its crop),
/// crops and resizes it (same filter as the CPU path) and stages the
/// `size × size` result in `dst`.
pub(super) fn stage_oversize(
    host: &HostStaging<'_>,
    index: u64,
    label: u32,
    payload: &[u8],
    (decoder, scratch): (&CpuDecoder, &mut Scratch),
    dst: &mut [u8],
) -> Result<Staged, LoaderError> {
    let t_decode = Instant::now();
    let (info, params, _) = decode_jpeg(
        payload,
        index,
        host.draw,
        (decoder, &mut scratch.pixels),
        Dest::Scratch,
        host.metrics,
        t_decode,
    )?;
    resize_into_slot(
        host,
        (index, label),
        (&scratch.pixels, info.width, info.height, params),
        &mut scratch.resizer,
        dst,
    )
}

/// Crops and resizes `pixels` (RGB, `width × height`) to the output size and
/// stages the result at the start of `dst`; the kernel then samples it 1:1
/// (crop = the whole image) and only flips, normalizes and lays it out.
fn resize_into_slot(
    host: &HostStaging<'_>,
    (index, label): (u64, u32),
    (pixels, width, height, params): (&[u8], u32, u32, SampleParams),
    resizer: &mut CropResizer,
    dst: &mut [u8],
) -> Result<Staged, LoaderError> {
    let resized = resizer
        .apply(pixels, width, height, params.crop)
        .map_err(|e| e.for_record(index))?;
    let bytes = resized.len();
    dst[..bytes].copy_from_slice(resized);
    host.metrics.count_route("cpu_resize_oversize");
    let s = host.size;
    Ok(Staged {
        index,
        label,
        width: s,
        height: s,
        channels: 3,
        crop: (0, 0, s, s),
        flip: params.flip,
        bytes,
        source: None,
    })
}

#[cfg(test)]
mod tests {
    use stoker_decode::Limits;
    use stoker_formats::{Dataset, DatasetWriter, Provenance, RecordMeta, WriterOptions};

    use super::*;
    use crate::pixels::sample_pixels;
    use crate::transform::Transform;

    const SEED: u64 = 11;
    const EPOCH: u64 = 4;
    const SIZE: u32 = 32;

    /// A one-record dataset in `dir`: `payload`, `width × height × channels`.
    fn dataset(
        dir: &std::path::Path,
        encoding: Encoding,
        (width, height, channels): (u32, u32, u8),
        payload: &[u8],
    ) -> Dataset {
        let options = WriterOptions {
            encoding: Some(encoding),
            ..WriterOptions::default()
        };
        let mut w = DatasetWriter::create(dir, options).unwrap();
        let meta = RecordMeta {
            encoding,
            height,
            width,
            channels,
            label: 9,
        };
        w.push(meta, payload).unwrap();
        let classes = (0..10).map(|c| c.to_string()).collect();
        w.finish(classes, Provenance::stoker("gpu staging unit test"))
            .unwrap();
        Dataset::open(dir).unwrap()
    }

    /// What the CPU path makes of record 0 of `ds` (the GPU path must agree).
    fn cpu_sample(ds: &Dataset, transform: &Transform) -> crate::pixels::SamplePixels {
        sample_pixels(
            &ds.reader().unwrap(),
            0,
            transform,
            SEED,
            EPOCH,
            DrawKey::at(0),
        )
        .unwrap()
    }

    fn photo() -> Vec<u8> {
        std::fs::read(stoker_testdata::bench_dir().join("00000.jpg")).unwrap()
    }

    fn state(ds: &Dataset) -> ReaderState {
        ReaderState {
            reader: ds.reader().map_err(|e| e.to_string()),
            decoder: CpuDecoder::new(Limits::default()),
            scratch: Scratch::new(SIZE),
        }
    }

    fn host<'a>(
        metrics: &'a Metrics,
        transform: &'a Transform,
        streaming_stores: bool,
    ) -> HostStaging<'a> {
        HostStaging {
            metrics,
            draw: Draw {
                transform,
                seed: SEED,
                epoch: EPOCH,
                key: DrawKey::at(0),
            },
            size: SIZE,
            direct: None,
            streaming_stores,
        }
    }

    /// The `(x, y, w, h)` rectangle of a `width`-wide image of `channels` channels.
    fn crop_of(
        pixels: &[u8],
        width: u32,
        channels: u32,
        (x, y, w, h): (u32, u32, u32, u32),
    ) -> Vec<u8> {
        let (row, c) = ((width * channels) as usize, channels as usize);
        (y as usize..(y + h) as usize)
            .flat_map(|r| pixels[r * row + x as usize * c..r * row + (x + w) as usize * c].to_vec())
            .collect()
    }

    #[test]
    fn a_staged_jpeg_holds_the_cpu_paths_crop() {
        let dir = tempfile::tempdir().unwrap();
        let ds = dataset(dir.path(), Encoding::Jpeg, (500, 375, 3), &photo());
        let (metrics, transform) = (
            Metrics::default(),
            Transform::random_resized_crop(SIZE).hflip(0.5),
        );
        let mut st = state(&ds);
        let mut dst = vec![0u8; 500 * 375 * 3];
        let staged = stage_one(&host(&metrics, &transform, false), 0, &mut st, &mut dst).unwrap();
        let cpu = cpu_sample(&ds, &transform);
        assert_eq!(
            (staged.width, staged.height, staged.channels),
            (500, 375, 3)
        );
        assert_eq!(
            (staged.crop, staged.flip),
            (cpu.params.crop, cpu.params.flip)
        );
        assert_eq!(
            (staged.label, staged.bytes, staged.source),
            (9, dst.len(), None)
        );
        assert!(
            crop_of(&dst, 500, 3, staged.crop) == cpu.crop_rgb(),
            "the kernel would crop other pixels than the CPU path"
        );
    }

    #[test]
    fn an_oversize_jpeg_is_staged_as_the_cpu_paths_resize_of_its_crop() {
        let dir = tempfile::tempdir().unwrap();
        let ds = dataset(dir.path(), Encoding::Jpeg, (500, 375, 3), &photo());
        let (metrics, transform) = (
            Metrics::default(),
            Transform::random_resized_crop(SIZE).hflip(0.5),
        );
        let cpu = cpu_sample(&ds, &transform);
        let want = CropResizer::new(SIZE)
            .apply(&cpu.rgb, cpu.width, cpu.height, cpu.params.crop)
            .unwrap()
            .to_vec();
        let full = SampleParams {
            crop: (0, 0, SIZE, SIZE),
            flip: cpu.params.flip,
        };
        // The raw route: a staging stride smaller than the image.
        let mut st = state(&ds);
        let mut dst = vec![0u8; (SIZE * SIZE * 3) as usize];
        let staged = stage_one(&host(&metrics, &transform, false), 0, &mut st, &mut dst).unwrap();
        assert_eq!(
            (staged.width, staged.height, staged.channels),
            (SIZE, SIZE, 3)
        );
        assert_eq!((staged.crop, staged.flip), (full.crop, full.flip));
        assert!(dst == want, "raw route: not the CPU path's resize");
        // The nvJPEG route's oversize images.
        let mut st = state(&ds);
        let mut dst = vec![0u8; (SIZE * SIZE * 3) as usize];
        let payload = photo();
        let cpu_tools = (&st.decoder, &mut st.scratch);
        let staged = stage_oversize(
            &host(&metrics, &transform, false),
            0,
            9,
            &payload,
            cpu_tools,
            &mut dst,
        )
        .unwrap();
        assert_eq!(
            (staged.crop, staged.flip, staged.bytes),
            (full.crop, full.flip, dst.len())
        );
        assert!(dst == want, "nvJPEG route: not the CPU path's resize");
        assert_eq!(
            metrics.snapshot().decode_routes.get("cpu_resize_oversize"),
            Some(&2)
        );
    }

    #[test]
    fn a_raw_record_is_staged_as_stored_and_a_larger_one_resized_like_the_cpu_path() {
        let gray: Vec<u8> = (0..48u8).map(|i| i * 5).collect();
        let dir = tempfile::tempdir().unwrap();
        let ds = dataset(dir.path(), Encoding::Raw, (8, 6, 1), &gray);
        let (metrics, transform) = (Metrics::default(), Transform::random_resized_crop(SIZE));
        for streaming in [false, true] {
            let mut st = state(&ds);
            let mut dst = vec![0u8; 8 * 6 * 3];
            let host = host(&metrics, &transform, streaming);
            let staged = stage_one(&host, 0, &mut st, &mut dst).unwrap();
            assert_eq!((staged.width, staged.height), (8, 6));
            assert_eq!(
                (staged.channels, staged.bytes, staged.source),
                (1, 48, None)
            );
            assert_eq!(
                staged.crop,
                transform.params(SEED, EPOCH, DrawKey::at(0), 8, 6).crop
            );
            assert_eq!(&dst[..48], &gray[..], "streaming stores: {streaming}");
        }
        // An RGB record larger than its stride: resized as the CPU path resizes it.
        let rgb: Vec<u8> = (0..(40 * 30 * 3)).map(|i| (i * 7 % 251) as u8).collect();
        let dir = tempfile::tempdir().unwrap();
        let ds = dataset(dir.path(), Encoding::Raw, (40, 30, 3), &rgb);
        let cpu = cpu_sample(&ds, &transform);
        let want = CropResizer::new(SIZE)
            .apply(&cpu.rgb, 40, 30, cpu.params.crop)
            .unwrap()
            .to_vec();
        let mut st = state(&ds);
        let mut dst = vec![0u8; (SIZE * SIZE * 3) as usize];
        let host = host(&metrics, &transform, false);
        let staged = stage_one(&host, 0, &mut st, &mut dst).unwrap();
        assert_eq!(
            (staged.width, staged.height, staged.channels),
            (SIZE, SIZE, 3)
        );
        assert_eq!(staged.crop, (0, 0, SIZE, SIZE));
        assert!(dst == want, "not the CPU path's resize");
    }

    #[test]
    fn a_bad_record_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut jpeg = photo();
        jpeg.truncate(100);
        let ds = dataset(dir.path(), Encoding::Jpeg, (500, 375, 3), &jpeg);
        let (metrics, transform) = (Metrics::default(), Transform::random_resized_crop(SIZE));
        let mut st = state(&ds);
        let mut dst = vec![0u8; 500 * 375 * 3];
        match stage_one(&host(&metrics, &transform, false), 0, &mut st, &mut dst) {
            Err(e) => assert_eq!(e.record_index(), Some(0), "{e}"),
            Ok(s) => panic!("a truncated JPEG was staged: {s:?}"),
        }
    }

    #[test]
    fn reader_states_are_made_once_per_pool_thread_over_an_epochs_batches() {
        let dir = tempfile::tempdir().unwrap();
        let ds = dataset(dir.path(), Encoding::Raw, (2, 2, 3), &[7; 12]);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let states = ThreadStates::new(pool.current_num_threads());
        let read: usize = pool.install(|| {
            use rayon::prelude::*;
            (0..20)
                .map(|_batch| {
                    (0..256)
                        .into_par_iter()
                        .map_init(
                            || states.lend(|| state(&ds)),
                            |lent, _| {
                                let (st, spill) = lent.with_spill(12);
                                spill.copy_from_slice(&[1; 12]);
                                st.reader.as_ref().unwrap().get(0).unwrap().payload.len()
                            },
                        )
                        .sum::<usize>()
                })
                .sum()
        });
        assert_eq!(read, 20 * 256 * 12);
        // One per rayon split of every batch would be dozens.
        let made = states.made();
        assert!((1..=2).contains(&made), "{made} states made for 2 threads");
        // Off the pool: a state of its own, not kept.
        drop(states.lend(|| state(&ds)));
        drop(states.lend(|| state(&ds)));
        assert_eq!(states.made(), made + 2);
    }
}
