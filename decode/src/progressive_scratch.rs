//! Coefficient buffers kept per thread for zune-jpeg's progressive decodes.
//!
//! A progressive decode holds every coefficient of the image until its last scan, about
//! 3 bytes per pixel at 4:2:0. Allocated afresh per image, buffers of that size go back
//! to the system when freed, so the next image faults every page in again (the cost is
//! measured in docs/BENCHMARKS.md, "CPU decode of progressive files with each thread's
//! coefficient buffers kept"). Each decoding thread lends its buffers to one decode after
//! another instead (`StokerScratch`, change 14 of the fork), and keeps them only up to
//! [`KEPT_PER_THREAD`], so that one huge image does not hold memory on every thread for
//! good.

use std::cell::Cell;

use stoker_zune_jpeg::StokerScratch;

/// The most buffer bytes a thread keeps between decodes: a progressive image of about
/// 2.7 megapixels at 4:2:0 (1.8 at 4:4:4). A decode that needed more frees its buffers
/// when it ends, as before.
pub(crate) const KEPT_PER_THREAD: usize = 8 << 20;

thread_local! {
    static KEPT: Cell<StokerScratch> = Cell::new(StokerScratch::default());
}

/// This thread's buffers, empty the first time (or while a decode on this thread holds
/// them, which cannot happen: decodes on one thread do not nest).
pub(crate) fn take() -> StokerScratch {
    // A thread whose locals are being destroyed gets fresh buffers.
    KEPT.try_with(Cell::take).unwrap_or_default()
}

/// Keeps `scratch` for this thread's next decode, or frees it when it is over
/// [`KEPT_PER_THREAD`].
pub(crate) fn give(scratch: StokerScratch) {
    if scratch.capacity_bytes() <= KEPT_PER_THREAD {
        // Dropped instead while the thread's locals are destroyed.
        let _ = KEPT.try_with(|kept| kept.set(scratch));
    }
}

/// What this thread keeps now, in bytes (for the tests of the bound).
#[cfg(test)]
pub(crate) fn kept_bytes() -> usize {
    let scratch = take();
    let bytes = scratch.capacity_bytes();
    give(scratch);
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CpuDecoder, Limits};
    use jpeg_encoder::{ColorType, Encoder, SamplingFactor};

    /// A progressive JPEG of a pattern that differs with `seed`, so that what one decode
    /// leaves in the buffers is never what the next one writes.
    fn progressive(w: u16, h: u16, seed: u32, sampling: SamplingFactor) -> Vec<u8> {
        let rgb: Vec<u8> = (0..u32::from(w) * u32::from(h) * 3)
            .map(|i| {
                let (px, c) = (i / 3, i % 3);
                let (x, y) = (px % u32::from(w), px / u32::from(w));
                ((x * (seed + c + 1) + y * (seed * 7 + 3) + (x * y) % (seed + 5)) & 0xFF) as u8
            })
            .collect();
        let mut out = Vec::new();
        let mut enc = Encoder::new(&mut out, 90);
        enc.set_progressive(true);
        enc.set_sampling_factor(sampling);
        enc.encode(&rgb, w, h, ColorType::Rgb).unwrap();
        out
    }

    /// Decoded on a thread of its own, whose buffers start empty: what a decode that
    /// reuses nothing gives.
    fn fresh_decode(data: &[u8]) -> Vec<u8> {
        let data = data.to_vec();
        std::thread::spawn(move || {
            assert_eq!(kept_bytes(), 0);
            CpuDecoder::new(Limits::default())
                .decode_to_vec(&data)
                .unwrap()
                .1
        })
        .join()
        .unwrap()
    }

    #[test]
    fn one_thread_reuses_its_buffers_and_each_decode_equals_a_fresh_one() {
        let large = progressive(640, 480, 1, SamplingFactor::R_4_2_0);
        let images = [
            large.clone(),
            progressive(320, 200, 2, SamplingFactor::R_4_4_4),
            progressive(96, 64, 3, SamplingFactor::R_4_2_2),
            progressive(640, 480, 4, SamplingFactor::R_4_2_0),
            large,
        ];
        std::thread::spawn(move || {
            let dec = CpuDecoder::new(Limits::default());
            let mut kept_after_first = 0;
            for (i, data) in images.iter().enumerate() {
                let (_, rgb) = dec.decode_to_vec(data).unwrap();
                assert!(
                    rgb == fresh_decode(data),
                    "image {i} differs from a fresh decode"
                );
                // The largest image comes first: the others fit in its buffers.
                if i == 0 {
                    kept_after_first = kept_bytes();
                    assert!(
                        kept_after_first > 640 * 480 * 2,
                        "{kept_after_first} bytes kept"
                    );
                } else {
                    assert_eq!(kept_bytes(), kept_after_first, "image {i} reallocated");
                }
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_failed_progressive_decode_gives_its_buffers_back_and_leaves_nothing_behind() {
        let good = progressive(320, 240, 5, SamplingFactor::R_4_2_0);
        // Cut inside the first scan, closed with EOI: zune-jpeg fills the rest, stoker
        // reports it corrupt.
        let mut cut = good[..good.len() / 3].to_vec();
        cut.extend_from_slice(&[0xFF, 0xD9]);
        std::thread::spawn(move || {
            let dec = CpuDecoder::new(Limits::default());
            assert!(dec.decode_to_vec(&cut).is_err());
            assert!(kept_bytes() > 0, "the failed decode's buffers are kept");
            assert!(dec.decode_to_vec(&good).unwrap().1 == fresh_decode(&good));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_thread_keeps_no_more_than_its_bound() {
        // About 11 MiB of coefficients at 4:2:0, over the bound.
        let huge = progressive(2200, 1700, 6, SamplingFactor::R_4_2_0);
        let small = progressive(64, 48, 7, SamplingFactor::R_4_2_0);
        std::thread::spawn(move || {
            let dec = CpuDecoder::new(Limits::default());
            dec.decode_to_vec(&small).unwrap();
            assert!(kept_bytes() > 0);
            dec.decode_to_vec(&huge).unwrap();
            assert_eq!(
                kept_bytes(),
                0,
                "buffers over {KEPT_PER_THREAD} bytes are freed"
            );
            assert!(dec.decode_to_vec(&small).unwrap().1 == fresh_decode(&small));
            assert!(kept_bytes() > 0 && kept_bytes() <= KEPT_PER_THREAD);
        })
        .join()
        .unwrap();
    }
}
