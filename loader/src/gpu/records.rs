//! One record on the host: read and check it, and stage its pixels for the
//! device (raw records as they are, or from the registered dataset map; JPEG
//! records decoded on the CPU; images larger than a staging stride cropped and
//! resized on the CPU first). Each reader thread keeps its own [`ReaderState`].

use std::time::Instant;

use stoker_decode::{CpuDecoder, Limits};
use stoker_formats::{DatasetReader, Encoding};

use super::shared::Shared;
use crate::error::LoaderError;
use crate::pipeline::{
    cpu_decode_counted, raw_payload_len, read_checked, reader_unavailable, EpochPlan,
};
use crate::transform::resize::CropResizer;

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

/// Reads record `index`, checks it, and writes its pixels (HWC, 1 or 3 channels)
/// at the start of `dst`. Images larger than `dst` are cropped and resized on the
/// CPU first (then the kernel only flips, normalizes and lays them out).
fn stage_one(
    shared: &Shared,
    plan: &EpochPlan,
    index: u64,
    state: &mut ReaderState,
    dst: &mut [u8],
) -> Result<Staged, LoaderError> {
    let metrics = &*shared.metrics;
    let reader = state
        .reader
        .as_ref()
        .map_err(|reason| reader_unavailable("stoker-gpu-reader", reason))?;
    let record = read_checked(reader, index, metrics)?;
    let header = record.header;

    let t_decode = Instant::now();
    let params = |w: u32, h: u32| shared.transform.params(plan.seed, plan.epoch, index, w, h);
    // Raw records inside the registered dataset map are copied from there.
    let mut source = None;
    let (width, height, channels, in_scratch, params) = match header.encoding {
        Encoding::Jpeg => {
            let info = stoker_decode::probe(record.payload, state.decoder.limits())
                .map_err(|source| LoaderError::Decode { index, source })?;
            // The crop is drawn from the header, so that the decode can skip what
            // lies outside it (the kernel and the CPU resizer read only the crop).
            let p = params(info.width, info.height);
            let need = info.rgb_len();
            let in_scratch = need > dst.len();
            let out: &mut [u8] = if in_scratch {
                if state.scratch.len() < need {
                    state.scratch.resize(need, 0);
                }
                &mut state.scratch
            } else {
                dst
            };
            let info = cpu_decode_counted(
                &state.decoder,
                record.payload,
                out,
                Some(p.region()),
                index,
                metrics,
                t_decode,
            )?;
            (info.width, info.height, 3u32, in_scratch, p)
        }
        Encoding::Raw => {
            let (w, h, c) = (header.width, header.height, header.channels);
            let want = raw_payload_len(index, &header, record.payload.len())?;
            let in_scratch = want > dst.len();
            if in_scratch {
                // Expand to RGB for the CPU resizer.
                let rgb = w as usize * h as usize * 3;
                if state.scratch.len() < rgb {
                    state.scratch.resize(rgb, 0);
                }
                if c == 3 {
                    state.scratch[..rgb].copy_from_slice(record.payload);
                } else {
                    for (px, &g) in state.scratch.chunks_exact_mut(3).zip(record.payload) {
                        px.fill(g);
                    }
                }
            } else if shared
                .direct
                .as_ref()
                .is_some_and(|maps| maps.contains(&record.payload[..want]))
            {
                // The CRC was checked above (read_checked): the device copies
                // exactly these bytes, which nobody writes.
                source = Some(record.payload.as_ptr() as usize);
            } else if shared.streaming_stores {
                super::stream_copy::copy_streaming(&mut dst[..want], record.payload);
            } else {
                dst[..want].copy_from_slice(record.payload);
            }
            metrics.count_route("raw");
            let channels = if in_scratch { 3 } else { u32::from(c) };
            (w, h, channels, in_scratch, params(w, h))
        }
    };
    if width == 0 || height == 0 {
        return Err(LoaderError::UnusableRecord {
            index,
            reason: "0-pixel image".into(),
        });
    }
    if in_scratch {
        // Too large to stage: crop + resize here (same filter as the CPU path),
        // stage the `size × size` result; the kernel then samples it 1:1.
        let resized = state
            .resizer
            .apply(&state.scratch, width, height, params.crop)
            .map_err(|reason| LoaderError::UnusableRecord { index, reason })?;
        let s = shared.size;
        let bytes = resized.len();
        dst[..bytes].copy_from_slice(resized);
        metrics.count_route("cpu_resize_oversize");
        return Ok(Staged {
            index,
            label: header.label,
            width: s,
            height: s,
            channels: 3,
            crop: (0, 0, s, s),
            flip: params.flip,
            bytes,
            source: None,
        });
    }
    Ok(Staged {
        index,
        label: header.label,
        width,
        height,
        channels,
        crop: params.crop,
        flip: params.flip,
        bytes: width as usize * height as usize * channels as usize,
        source,
    })
}

/// Decodes an image too large for a staging stride on the CPU, crops and resizes
/// it (same filter as the CPU path) and stages the `size × size` result in `dst`.
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
    let info = stoker_decode::probe(payload, decoder.limits())
        .map_err(|source| LoaderError::Decode { index, source })?;
    if scratch.len() < info.rgb_len() {
        scratch.resize(info.rgb_len(), 0);
    }
    // The crop comes from the header, so the decode can skip what lies outside
    // it (as on the CPU path: the resizer reads only the crop).
    let p = shared
        .transform
        .params(plan.seed, plan.epoch, index, info.width, info.height);
    let info = cpu_decode_counted(
        decoder,
        payload,
        scratch,
        Some(p.region()),
        index,
        &shared.metrics,
        t_decode,
    )?;
    let resized = resizer
        .apply(scratch, info.width, info.height, p.crop)
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
        flip: p.flip,
        bytes,
        source: None,
    })
}
