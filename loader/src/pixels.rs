//! Record → pixels: the step every backend runs for every sample before its transform.
//!
//! `load_record` reads record `index`, checks its CRC, draws the sample's crop from the
//! image size (the JPEG header, or a raw record's geometry), decodes only what the crop
//! needs, expands grayscale to RGB where the consumer needs RGB, and rejects 0-pixel
//! images. The CPU backend resizes what it returns; the GPU backend stages it for its
//! kernel. Both draw the crop here, so they crop the same rectangle of the same pixels.
//!
//! [`sample_pixels`] is the same step for one record, outside any loader: what a backend
//! resizes for that sample, and the crop and flip it uses.

use std::time::Instant;

use stoker_decode::{CpuDecoder, ImageInfo, Region};
use stoker_formats::{DatasetReader, Encoding, RawSize, Record, RecordHeader};

use crate::error::LoaderError;
use crate::metrics::{Metrics, Stage};
use crate::transform::{DrawKey, SampleParams, Transform};

/// What a sample's crop and flip are drawn from: the transform, the loader's seed, the
/// epoch and the sample's place in the epoch (the image size comes from the record).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Draw<'a> {
    pub(crate) transform: &'a Transform,
    pub(crate) seed: u64,
    pub(crate) epoch: u64,
    /// Where in the epoch the sample stands (set per record: [`Draw::keyed`]).
    pub(crate) key: DrawKey,
}

impl Draw<'_> {
    /// This draw for the sample at `key`.
    pub(crate) fn keyed(self, key: DrawKey) -> Self {
        Draw { key, ..self }
    }

    /// The crop and flip of this sample, a `width × height` image.
    pub(crate) fn params(&self, width: u32, height: u32) -> SampleParams {
        self.transform
            .params(self.seed, self.epoch, self.key, width, height)
    }
}

/// Where the caller wants a record's pixels.
#[derive(Debug)]
pub(crate) enum Dest<'a> {
    /// In the scratch buffer, RGB (the CPU backend's resizer reads them there); a raw
    /// 3-channel record is left in its payload, which already is RGB HWC.
    Scratch,
    /// In this staging slot when the image fits in it, in the scratch buffer (RGB) when it
    /// does not. A raw record that fits is left in its payload as stored (1 or 3 channels):
    /// the caller copies it into the slot or has the device read it where it is.
    // The GPU backend's staging (one slot per image) reads through this variant.
    Slot(&'a mut [u8]),
}

/// Where [`load_record`] left a record's pixels (HWC, [`Loaded::channels`] channels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// At the start of the scratch buffer.
    Scratch,
    /// At the start of the [`Dest::Slot`] slice.
    Slot,
    /// In the record payload ([`Loaded::payload`]), not copied.
    Payload,
}

/// One record's pixels, ready for the transform.
#[derive(Debug)]
pub(crate) struct Loaded<'r> {
    pub(crate) label: u32,
    pub(crate) width: u32,
    pub(crate) height: u32,
    /// Channels of the pixels at `place`: 3, or 1 for a grayscale raw record left in its
    /// payload (only with [`Dest::Slot`], which the GPU backend's staging uses).
    pub(crate) channels: u32,
    /// The crop and flip drawn for this sample from `width × height`. Only the pixels inside
    /// the crop are decoded; the rest of the image is unspecified.
    pub(crate) params: SampleParams,
    pub(crate) place: Place,
    /// The record payload, CRC-checked (raw: exactly `width · height · channels` bytes).
    pub(crate) payload: &'r [u8],
}

impl Loaded<'_> {
    /// Bytes of the pixels at `place` (what the GPU backend stages).
    pub(crate) fn bytes(&self) -> usize {
        self.width as usize * self.height as usize * self.channels as usize
    }
}

/// Reads record `index`, checks it, draws its crop and puts its pixels where `dest` asks
/// (see [`Dest`]): JPEGs are probed, then decoded (only the crop) on the CPU; raw records
/// are checked against their geometry and expanded to RGB when they must go to scratch.
/// Counts the read and decode stages and the decode route (`"raw"` for raw records).
///
/// # Errors
///
/// [`LoaderError::Read`] (the record cannot be read, or its CRC is wrong),
/// [`LoaderError::Decode`] (the JPEG is bad or over the decoder's limits),
/// [`LoaderError::UnusableRecord`] (raw geometry that does not match its payload, a
/// 0-pixel image).
pub(crate) fn load_record<'r>(
    reader: &'r DatasetReader,
    index: u64,
    draw: Draw<'_>,
    (decoder, scratch): (&CpuDecoder, &mut Vec<u8>),
    dest: Dest<'_>,
    metrics: &Metrics,
) -> Result<Loaded<'r>, LoaderError> {
    let record = read_checked(reader, index, metrics)?;
    let header = record.header;
    let t_decode = Instant::now();
    let loaded = match header.encoding {
        Encoding::Jpeg => {
            let (info, params, place) = decode_jpeg(
                record.payload,
                index,
                draw,
                (decoder, scratch),
                dest,
                metrics,
                t_decode,
            )
            .map_err(|e| unreadable_first(reader, index, e))?;
            Loaded {
                label: header.label,
                width: info.width,
                height: info.height,
                channels: 3,
                params,
                place,
                payload: record.payload,
            }
        }
        Encoding::Raw => {
            let (w, h, c) = (header.width, header.height, header.channels);
            let expected = reader.dataset().manifest().raw_size;
            let want = raw_payload_len(index, &header, record.payload.len(), expected)?;
            let in_place = match dest {
                Dest::Scratch => c == 3,
                Dest::Slot(slot) => want <= slot.len(),
            };
            let place = if in_place {
                Place::Payload
            } else {
                let rgb = w as usize * h as usize * 3;
                grow_scratch(scratch, rgb, index)?;
                if c == 3 {
                    scratch[..rgb].copy_from_slice(record.payload);
                } else {
                    for (px, &g) in scratch.chunks_exact_mut(3).zip(record.payload) {
                        px.fill(g);
                    }
                }
                Place::Scratch
            };
            metrics.count_route("raw");
            Loaded {
                label: header.label,
                width: w,
                height: h,
                channels: if in_place { u32::from(c) } else { 3 },
                params: draw.params(w, h),
                place,
                payload: record.payload,
            }
        }
    };
    if loaded.width == 0 || loaded.height == 0 {
        return Err(LoaderError::UnusableRecord {
            index,
            reason: "0-pixel image".into(),
        });
    }
    // The decode or copy read the payload again: its pages were still the file's.
    still_readable(reader, index)?;
    Ok(loaded)
}

/// Probes JPEG `payload` (record `index`), draws its crop from the header and decodes it
/// to RGB where `dest` asks ([`Place::Slot`] when the image fits the slot, else
/// [`Place::Scratch`], grown as needed); counts the decode stage from `started`.
/// The crop is drawn before the decode so that the decoder can skip what lies outside it
/// and stop at its bottom edge: the resize (CPU) and the kernel's taps (GPU) read only the
/// crop.
///
/// # Errors
///
/// [`LoaderError::Decode`] when the JPEG is bad or over the decoder's limits.
pub(crate) fn decode_jpeg(
    payload: &[u8],
    index: u64,
    draw: Draw<'_>,
    (decoder, scratch): (&CpuDecoder, &mut Vec<u8>),
    dest: Dest<'_>,
    metrics: &Metrics,
    started: Instant,
) -> Result<(ImageInfo, SampleParams, Place), LoaderError> {
    let info = stoker_decode::probe(payload, decoder.limits())
        .map_err(|source| LoaderError::Decode { index, source })?;
    let params = draw.params(info.width, info.height);
    let need = info.rgb_len();
    let (out, place): (&mut [u8], Place) = match dest {
        Dest::Slot(slot) if need <= slot.len() => (slot, Place::Slot),
        Dest::Slot(_) | Dest::Scratch => {
            grow_scratch(scratch, need, index)?;
            (scratch, Place::Scratch)
        }
    };
    let info = cpu_decode_counted(
        decoder,
        payload,
        out,
        Some(params.region()),
        index,
        metrics,
        started,
    )?;
    Ok((info, params, place))
}

/// Grows `scratch` to at least `need` bytes, or fails for record `index` when the memory is
/// not there ([`LoaderError::short_of_memory`]): a plain `resize` would abort the process.
fn grow_scratch(scratch: &mut Vec<u8>, need: usize, index: u64) -> Result<(), LoaderError> {
    if scratch.len() < need {
        scratch
            .try_reserve_exact(need - scratch.len())
            .map_err(|_| LoaderError::short_of_memory(index, need, "its pixels"))?;
        scratch.resize(need, 0);
    }
    Ok(())
}

/// `error` for record `index`, unless a page of its shard could not be read (then its
/// bytes were zeros, and that is the error to report: a storage fault, not a bad record
/// that `stoker verify` would find).
fn unreadable_first(reader: &DatasetReader, index: u64, error: LoaderError) -> LoaderError {
    still_readable(reader, index).err().unwrap_or(error)
}

/// [`DatasetReader::check_read`] as a loader error: called after each read of a record's
/// payload (its CRC, a decode, a copy), since a page of the shard lost meanwhile reads as
/// zeros instead of ending the process.
pub(crate) fn still_readable(reader: &DatasetReader, index: u64) -> Result<(), LoaderError> {
    reader
        .check_read(index)
        .map_err(|source| LoaderError::Read { index, source })
}

/// Reads record `index`, checks its payload CRC and counts the read stage (one item, its
/// payload bytes, the time taken): the first step of every backend for every record.
pub(crate) fn read_checked<'r>(
    reader: &'r DatasetReader,
    index: u64,
    metrics: &Metrics,
) -> Result<Record<'r>, LoaderError> {
    crate::pipeline::guard_reads();
    let t_read = Instant::now();
    let record = reader
        .get(index)
        .map_err(|source| LoaderError::Read { index, source })?;
    // The CRC read every payload byte: a page of the shard lost meanwhile (cut short in
    // place, an I/O error) read as zeros, and is reported as such, not as a bad CRC.
    record
        .check_crc()
        .map_err(|source| unreadable_first(reader, index, LoaderError::Read { index, source }))?;
    still_readable(reader, index)?;
    // A label past the class list would reach the training step as an out-of-range class
    // (a device-side assert in a CUDA loss); `verify` reports the same records.
    let classes = reader.dataset().manifest().classes.len();
    if let Some(reason) = stoker_formats::label_problem(record.header.label, classes) {
        return Err(LoaderError::UnusableRecord { index, reason });
    }
    metrics.record(
        Stage::Read,
        1,
        record.payload.len() as u64,
        t_read.elapsed(),
    );
    Ok(record)
}

/// Decodes a JPEG `payload` on the CPU into `out` (RGB HWC), counting its route and the
/// decode stage (one item, its compressed bytes, the time since `started`): the CPU decode
/// step of both backends. With `region`, only its pixels are needed (the crop): the decoder
/// may skip work outside it (and stop below it) and leave the rest unspecified.
pub(crate) fn cpu_decode_counted(
    decoder: &CpuDecoder,
    payload: &[u8],
    out: &mut [u8],
    region: Option<Region>,
    index: u64,
    metrics: &Metrics,
    started: Instant,
) -> Result<ImageInfo, LoaderError> {
    let (info, route) = match region {
        Some(region) => decoder.decode_region_into_routed(payload, out, region),
        None => decoder.decode_into_routed(payload, out),
    }
    .map_err(|source| match source {
        // Not the record's fault: retried, and never replaced (`scratch_memory`).
        stoker_decode::DecodeError::OutOfMemory { what, bytes } => {
            LoaderError::short_of_memory(index, usize::try_from(bytes).unwrap_or(usize::MAX), what)
        }
        source => LoaderError::Decode { index, source },
    })?;
    metrics.count_route(route.name());
    metrics.record(Stage::Decode, 1, payload.len() as u64, started.elapsed());
    Ok(info)
}

/// Checks a raw (pre-decoded) record's geometry against its payload and the dataset's raw
/// size (`expected`, from its manifest), as `verify` judges it. Returns the payload's
/// byte count.
pub(crate) fn raw_payload_len(
    index: u64,
    header: &RecordHeader,
    payload_len: usize,
    expected: Option<RawSize>,
) -> Result<usize, LoaderError> {
    // A record of another size than the dataset's, its header and CRC rewritten together,
    // was trained on at its own size.
    let problems = stoker_formats::raw_problems(RawSize::of(header), payload_len as u64, expected);
    if problems.is_empty() {
        Ok(payload_len)
    } else {
        Err(LoaderError::UnusableRecord {
            index,
            reason: problems.join("; "),
        })
    }
}

/// One sample's pixels as a loader backend resizes them: RGB HWC, `width × height`, with
/// the crop and flip drawn for the sample. Returned by [`sample_pixels`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SamplePixels {
    /// The record's label.
    pub label: u32,
    /// Image width in pixels.
    pub width: u32,
    /// Image height in pixels.
    pub height: u32,
    /// The crop and flip drawn for this sample.
    pub params: SampleParams,
    /// `width · height · 3` bytes, RGB HWC. Only the pixels inside `params.crop` are
    /// decoded (the rest is unspecified): see [`SamplePixels::crop_rgb`].
    pub rgb: Vec<u8>,
}

impl SamplePixels {
    /// The crop rectangle's pixels, RGB HWC (`crop.w · crop.h · 3` bytes), not flipped:
    /// what the loader resizes to the output size.
    pub fn crop_rgb(&self) -> Vec<u8> {
        let (x, y, w, h) = self.params.crop;
        let row = self.width as usize * 3;
        let (x, w) = (x as usize * 3, w as usize * 3);
        (y as usize..(y + h) as usize)
            .flat_map(|r| &self.rgb[r * row + x..r * row + x + w])
            .copied()
            .collect()
    }
}

/// Reads, checks and decodes record `index` of `reader` as the loader's backends do, with
/// the crop and flip the loader draws with `transform` in `epoch` under its seed `seed`
/// ([`crate::Loader::seed`]) at `key`, the sample's place in the epoch (for rank `r`'s
/// `p`-th sample of the epoch, `DrawKey::at(sampler.global_position(p))`): the pixels a
/// batch's image is resized from. For inspecting what the loader feeds a model, one sample
/// at a time.
///
/// # Errors
///
/// As the loader reports a bad record: [`LoaderError::Read`], [`LoaderError::Decode`],
/// [`LoaderError::UnusableRecord`].
///
/// # Examples
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use stoker_loader::{pixels::sample_pixels, transform::DrawKey, Transform};
/// let reader = stoker_formats::Dataset::open("data/train")?.reader()?;
/// let transform = Transform::random_resized_crop(224);
/// // Record 42, met as the 10th sample of epoch 3's order.
/// let sample = sample_pixels(&reader, 42, &transform, 0, 3, DrawKey::at(10))?;
/// let (_x, _y, w, h) = sample.params.crop;
/// assert_eq!(sample.crop_rgb().len(), (w * h * 3) as usize);
/// # Ok(()) }
/// ```
pub fn sample_pixels(
    reader: &DatasetReader,
    index: u64,
    transform: &Transform,
    seed: u64,
    epoch: u64,
    key: DrawKey,
) -> Result<SamplePixels, LoaderError> {
    // The CPU loader's limits: what the conversion accepted.
    let decoder = CpuDecoder::new(reader.dataset().manifest().decode_limits());
    let mut scratch = Vec::new();
    let draw = Draw {
        transform,
        seed,
        epoch,
        key,
    };
    let metrics = Metrics::default();
    let loaded = load_record(
        reader,
        index,
        draw,
        (&decoder, &mut scratch),
        Dest::Scratch,
        &metrics,
    )?;
    let rgb_len = loaded.width as usize * loaded.height as usize * 3;
    let rgb = match loaded.place {
        Place::Payload => loaded.payload.to_vec(),
        Place::Scratch | Place::Slot => {
            scratch.truncate(rgb_len);
            scratch
        }
    };
    Ok(SamplePixels {
        label: loaded.label,
        width: loaded.width,
        height: loaded.height,
        params: loaded.params,
        rgb,
    })
}

#[cfg(test)]
mod tests {
    use stoker_formats::{Dataset, DatasetWriter, Provenance, RecordMeta, WriterOptions};

    use super::*;

    /// Records past the cut of a shard cut short under its map read as zeros: their CRC
    /// fails, but the error says the shard could not be read, which is what happened (a
    /// bad CRC sends users to `stoker verify`, which then finds the file changed or fine).
    #[test]
    fn a_record_past_a_cut_is_unreadable_not_a_bad_crc() {
        let dir = tempfile::tempdir().unwrap();
        let records: Vec<_> = (0..16u8)
            .map(|i| (Encoding::Raw, 64, 64, 3, vec![i + 1; 64 * 64 * 3]))
            .collect();
        let ds = dataset(dir.path(), &records);
        let reader = ds.reader().unwrap();
        let metrics = Metrics::default();
        assert!(read_checked(&reader, 15, &metrics).is_ok());
        // Found before the cut (the tree's pages are at the end of the file, and a lookup
        // after the cut fails on them first); its payload is read after it.
        let record = reader.get(15).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join("shard-00000.lmdb"))
            .unwrap()
            .set_len(8192)
            .unwrap();
        let crc = record.check_crc().unwrap_err();
        assert!(matches!(
            crc,
            stoker_formats::FormatError::CrcMismatch { .. }
        ));
        let e = unreadable_first(
            &reader,
            15,
            LoaderError::Read {
                index: 15,
                source: crc,
            },
        );
        assert!(
            matches!(
                e,
                LoaderError::Read {
                    source: stoker_formats::FormatError::ShardUnreadable { .. },
                    ..
                }
            ),
            "{e}"
        );
        // And so is every later read of it.
        assert!(read_checked(&reader, 3, &metrics).is_err());
    }

    /// `records` (encoding, width, height, channels, payload) as a dataset in `dir`; labels
    /// are the channel counts.
    fn dataset(dir: &std::path::Path, records: &[(Encoding, u32, u32, u8, Vec<u8>)]) -> Dataset {
        let options = WriterOptions {
            encoding: Some(records[0].0),
            ..WriterOptions::default()
        };
        let mut w = DatasetWriter::create(dir, options).unwrap();
        for (encoding, width, height, channels, payload) in records {
            let meta = RecordMeta {
                encoding: *encoding,
                height: *height,
                width: *width,
                channels: *channels,
                label: u32::from(*channels),
            };
            w.push(meta, payload).unwrap();
        }
        let classes = (0..4).map(|c| c.to_string()).collect();
        w.finish(classes, Provenance::stoker("pixels unit test"))
            .unwrap();
        Dataset::open(dir).unwrap()
    }

    /// Sides multiplied unchecked: a damaged header (its own CRC right) past u64 panicked
    /// in a debug build.
    #[test]
    fn a_raw_header_whose_sides_multiply_past_u64_is_an_unusable_record() {
        let header = RecordHeader {
            encoding: Encoding::Raw,
            height: u32::MAX,
            width: u32::MAX,
            channels: 3,
            label: 0,
            payload_len: 12,
            crc32c: 0,
        };
        let err = raw_payload_len(7, &header, 12, None).unwrap_err();
        assert!(
            matches!(&err, LoaderError::UnusableRecord { index: 7, reason } if reason.contains("more than 2^64")),
            "{err}"
        );
    }

    /// A raw record whose header and CRC were rewritten to another shape of the same bytes
    /// was trained on at that shape (verify called it bad).
    #[test]
    fn a_raw_record_of_another_size_than_the_datasets_is_an_unusable_record() {
        let header = RecordHeader {
            encoding: Encoding::Raw,
            height: 1,
            width: 48,
            channels: 3,
            label: 0,
            payload_len: 144,
            crc32c: 0,
        };
        let size = |height, width| RawSize {
            height,
            width,
            channels: 3,
        };
        let err = raw_payload_len(7, &header, 144, Some(size(6, 8))).unwrap_err();
        assert!(
            matches!(&err, LoaderError::UnusableRecord { index: 7, reason } if reason == "raw size 48x1x3 differs from the dataset's 8x6x3"),
            "{err}"
        );
        assert_eq!(
            raw_payload_len(7, &header, 144, Some(size(1, 48))).unwrap(),
            144
        );
    }

    #[test]
    fn a_label_outside_the_class_list_is_an_unusable_record_not_a_batch_label() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
        // Unchecked: `finish` refuses a label outside its classes; a dataset written by
        // another tool (or damaged) can still have one.
        for label in [1, 3] {
            let header = RecordHeader {
                encoding: Encoding::Raw,
                height: 6,
                width: 8,
                channels: 3,
                label,
                payload_len: rgb().len() as u32,
                crc32c: crc32c::crc32c(&rgb()),
            };
            w.push_header_unchecked(header, &rgb()).unwrap();
        }
        w.finish(vec!["a".into(), "b".into()], Provenance::stoker("labels"))
            .unwrap();
        let reader = Dataset::open(dir.path()).unwrap().reader().unwrap();
        let metrics = Metrics::default();
        assert_eq!(read_checked(&reader, 0, &metrics).unwrap().header.label, 1);
        let err = read_checked(&reader, 1, &metrics).unwrap_err();
        assert!(
            matches!(&err, LoaderError::UnusableRecord { index: 1, reason } if reason.contains("label 3 is outside the class list (2 classes)")),
            "{err}"
        );
    }

    fn gray() -> Vec<u8> {
        (0..48u8).map(|i| i * 5).collect()
    }

    fn rgb() -> Vec<u8> {
        (0..144u8).map(|i| i.wrapping_mul(7)).collect()
    }

    /// `(x, y, w, h)` of a `width`-wide RGB image, row by row.
    fn crop_of(rgb: &[u8], width: u32, (x, y, w, h): (u32, u32, u32, u32)) -> Vec<u8> {
        let row = width as usize * 3;
        (y as usize..(y + h) as usize)
            .flat_map(|r| rgb[r * row + x as usize * 3..r * row + (x + w) as usize * 3].to_vec())
            .collect()
    }

    /// One-record datasets: a 500×375 bench JPEG, an 8×6 gray raw record, an 8×6 RGB one.
    struct Fixture {
        _dirs: [tempfile::TempDir; 3],
        jpeg: DatasetReader,
        gray: DatasetReader,
        rgb: DatasetReader,
        transform: Transform,
        decoder: CpuDecoder,
        metrics: Metrics,
    }

    fn fixture() -> Fixture {
        let dirs = [(); 3].map(|()| tempfile::tempdir().unwrap());
        let photo = std::fs::read(stoker_testdata::bench_dir().join("00000.jpg")).unwrap();
        let jpeg = dataset(dirs[0].path(), &[(Encoding::Jpeg, 500, 375, 3, photo)]);
        let gray = dataset(dirs[1].path(), &[(Encoding::Raw, 8, 6, 1, gray())]);
        let rgb = dataset(dirs[2].path(), &[(Encoding::Raw, 8, 6, 3, rgb())]);
        Fixture {
            jpeg: jpeg.reader().unwrap(),
            gray: gray.reader().unwrap(),
            rgb: rgb.reader().unwrap(),
            _dirs: dirs,
            transform: Transform::random_resized_crop(32),
            decoder: CpuDecoder::new(stoker_decode::Limits::default()),
            metrics: Metrics::default(),
        }
    }

    impl Fixture {
        /// Record 0 of the dataset named.
        fn load<'r>(
            &'r self,
            name: &str,
            scratch: &mut Vec<u8>,
            dest: Dest<'_>,
        ) -> Result<Loaded<'r>, LoaderError> {
            let draw = Draw {
                transform: &self.transform,
                seed: 5,
                epoch: 2,
                key: DrawKey::at(0),
            };
            let reader = match name {
                "jpeg" => &self.jpeg,
                "gray" => &self.gray,
                _ => &self.rgb,
            };
            load_record(
                reader,
                0,
                draw,
                (&self.decoder, scratch),
                dest,
                &self.metrics,
            )
        }
    }

    #[test]
    fn a_jpeg_that_fits_the_slot_is_decoded_there_with_the_crop_of_the_scratch_decode() {
        let f = fixture();
        let mut scratch = Vec::new();
        let on_cpu = f.load("jpeg", &mut scratch, Dest::Scratch).unwrap();
        assert_eq!(on_cpu.place, Place::Scratch);
        assert_eq!(
            (on_cpu.width, on_cpu.height, on_cpu.channels),
            (500, 375, 3)
        );
        assert_eq!(
            on_cpu.params,
            f.transform.params(5, 2, DrawKey::at(0), 500, 375)
        );
        let crop = crop_of(&scratch, 500, on_cpu.params.crop);

        let mut slot = vec![0u8; 500 * 375 * 3];
        let mut unused = Vec::new();
        let staged = f.load("jpeg", &mut unused, Dest::Slot(&mut slot)).unwrap();
        assert_eq!(staged.place, Place::Slot);
        assert_eq!(staged.params, on_cpu.params);
        assert_eq!(staged.bytes(), slot.len());
        assert!(unused.is_empty(), "nothing goes to scratch");
        assert!(crop_of(&slot, 500, staged.params.crop) == crop);
    }

    #[test]
    fn a_jpeg_larger_than_the_slot_goes_to_scratch() {
        let f = fixture();
        let mut scratch = Vec::new();
        let mut slot = vec![0u8; 500 * 375 * 3 - 1];
        let loaded = f.load("jpeg", &mut scratch, Dest::Slot(&mut slot)).unwrap();
        assert_eq!(loaded.place, Place::Scratch);
        assert!(scratch.len() >= 500 * 375 * 3);
    }

    #[test]
    fn raw_records_stay_in_their_payload_where_the_consumer_can_read_them() {
        let f = fixture();
        let mut scratch = Vec::new();
        // CPU: RGB is read in place, gray is expanded.
        let rgb_cpu = f.load("rgb", &mut scratch, Dest::Scratch).unwrap();
        assert_eq!((rgb_cpu.place, rgb_cpu.channels), (Place::Payload, 3));
        assert_eq!(rgb_cpu.payload, &rgb()[..]);
        let gray_cpu = f.load("gray", &mut scratch, Dest::Scratch).unwrap();
        assert_eq!((gray_cpu.place, gray_cpu.channels), (Place::Scratch, 3));
        let expanded: Vec<u8> = gray().iter().flat_map(|&g| [g, g, g]).collect();
        assert_eq!(&scratch[..144], &expanded[..]);
        assert_eq!((gray_cpu.label, rgb_cpu.label), (1, 3));
        // GPU staging: what fits stays in the payload as stored, gray included.
        let mut slot = vec![0u8; 48];
        let gray_gpu = f.load("gray", &mut scratch, Dest::Slot(&mut slot)).unwrap();
        assert_eq!((gray_gpu.place, gray_gpu.channels), (Place::Payload, 1));
        assert_eq!(gray_gpu.bytes(), 48);
        // ... and what does not fit goes to scratch as RGB.
        let mut scratch = Vec::new();
        let rgb_gpu = f.load("rgb", &mut scratch, Dest::Slot(&mut slot)).unwrap();
        assert_eq!((rgb_gpu.place, rgb_gpu.channels), (Place::Scratch, 3));
        assert_eq!(&scratch[..144], &rgb()[..]);
        assert_eq!(f.metrics.snapshot().decode_routes.get("raw"), Some(&4));
    }

    #[test]
    fn a_missing_record_is_a_read_error_naming_it() {
        let f = fixture();
        let mut scratch = Vec::new();
        let draw = Draw {
            transform: &f.transform,
            seed: 0,
            epoch: 0,
            key: DrawKey::at(0),
        };
        let tools = (&f.decoder, &mut scratch);
        match load_record(&f.jpeg, 1, draw, tools, Dest::Scratch, &f.metrics) {
            Err(LoaderError::Read { index: 1, .. }) => {}
            other => panic!("expected a read error for record 1, got {other:?}"),
        }
    }
}
