//! One record on the host: read and check it, and stage its pixels for the
//! device (raw records as they are, or from the registered dataset map; JPEG
//! records decoded on the CPU; images larger than a staging stride cropped and
//! resized on the CPU first). The record → pixels step is the CPU path's own
//! ([`crate::pixels`]), so both crop the same pixels. Each reader thread keeps
//! its own [`ReaderState`].

use std::time::Instant;

use stoker_decode::{CpuDecoder, Limits};
use stoker_formats::{DatasetReader, Encoding};

use super::shared::Shared;
use super::stream_copy::copy_streaming;
use crate::error::LoaderError;
use crate::pipeline::{reader_unavailable, EpochPlan};
use crate::pixels::{decode_jpeg, load_record, read_checked, Dest, Draw, Place};
use crate::transform::resize::CropResizer;
use crate::transform::SampleParams;

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

/// Per-reader-thread state, made once per rayon split.
pub(super) struct ReaderState {
    pub(super) reader: Result<DatasetReader, String>,
    pub(super) decoder: CpuDecoder,
    /// Decoded pixels of images larger than a staging stride.
    pub(super) scratch: Vec<u8>,
    pub(super) resizer: CropResizer,
}

impl ReaderState {
    pub(super) fn new(shared: &Shared) -> ReaderState {
        ReaderState {
            reader: shared.dataset.reader().map_err(|e| e.to_string()),
            decoder: CpuDecoder::new(shared.limits),
            scratch: Vec::new(),
            resizer: CropResizer::new(shared.size),
        }
    }
}

/// Resolves sample position `pos` (with replacements) and stages it into `dst`.
pub(super) fn stage_position(
    shared: &Shared,
    plan: &EpochPlan,
    pos: usize,
    state: &mut ReaderState,
    dst: &mut [u8],
) -> Result<Staged, LoaderError> {
    let mut index = plan.order[pos];
    let mut attempt = 0;
    loop {
        match stage_one(shared, plan, index, state, dst) {
            Ok(s) => return Ok(s),
            Err(error) => plan.replace_failed(pos, error, &mut attempt, &mut index)?,
        }
    }
}

/// The crop and flip draw of `plan`'s epoch, as the CPU path makes it.
pub(super) fn draw<'a>(shared: &'a Shared, plan: &EpochPlan) -> Draw<'a> {
    Draw {
        transform: &shared.transform,
        seed: plan.seed,
        epoch: plan.epoch,
    }
}

/// Reads record `index`, checks it, and writes its pixels (HWC, 1 or 3 channels)
/// at the start of `dst`, through the record → pixels step both backends share
/// ([`load_record`]). Images larger than `dst` are cropped and resized on the
/// CPU first (then the kernel only flips, normalizes and lays them out).
fn stage_one(
    shared: &Shared,
    plan: &EpochPlan,
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
        draw(shared, plan),
        (&state.decoder, &mut state.scratch),
        Dest::Slot(&mut *dst),
        &shared.metrics,
    )?;
    // Raw records inside the registered dataset map are copied from there.
    let mut source = None;
    match loaded.place {
        // Decoded into `dst`.
        Place::Slot => {}
        // A raw record that fits, as stored (`raw_payload_len` checked its size).
        Place::Payload => {
            let payload = loaded.payload;
            if shared
                .direct
                .as_ref()
                .is_some_and(|maps| maps.contains(payload))
            {
                // The CRC was checked (`read_checked`): the device copies exactly
                // these bytes, which nobody writes.
                source = Some(payload.as_ptr() as usize);
            } else if shared.streaming_stores {
                copy_streaming(&mut dst[..payload.len()], payload);
            } else {
                dst[..payload.len()].copy_from_slice(payload);
            }
        }
        // Too large to stage: crop + resize here (same filter as the CPU path).
        Place::Scratch => {
            let (width, height) = (loaded.width, loaded.height);
            return resize_into_slot(
                shared,
                (index, loaded.label),
                (&state.scratch, width, height, loaded.params),
                &mut state.resizer,
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
    shared: &Shared,
    plan: &EpochPlan,
    index: u64,
    label: u32,
    payload: &[u8],
    (decoder, scratch, resizer): (&CpuDecoder, &mut Vec<u8>, &mut CropResizer),
    dst: &mut [u8],
) -> Result<Staged, LoaderError> {
    let t_decode = Instant::now();
    let (info, params, _) = decode_jpeg(
        payload,
        index,
        draw(shared, plan),
        (decoder, scratch),
        Dest::Scratch,
        &shared.metrics,
        t_decode,
    )?;
    resize_into_slot(
        shared,
        (index, label),
        (scratch, info.width, info.height, params),
        resizer,
        dst,
    )
}

/// Crops and resizes `pixels` (RGB, `width × height`) to the output size and
/// stages the result at the start of `dst`; the kernel then samples it 1:1
/// (crop = the whole image) and only flips, normalizes and lays it out.
fn resize_into_slot(
    shared: &Shared,
    (index, label): (u64, u32),
    (pixels, width, height, params): (&[u8], u32, u32, SampleParams),
    resizer: &mut CropResizer,
    dst: &mut [u8],
) -> Result<Staged, LoaderError> {
    let resized = resizer
        .apply(pixels, width, height, params.crop)
        .map_err(|reason| LoaderError::UnusableRecord { index, reason })?;
    let bytes = resized.len();
    dst[..bytes].copy_from_slice(resized);
    shared.metrics.count_route("cpu_resize_oversize");
    let s = shared.size;
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
