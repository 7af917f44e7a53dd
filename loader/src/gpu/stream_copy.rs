//! Copies into pinned staging with non-temporal (streaming) stores.
//!
//! A plain `memcpy` of a record (hundreds of kB, below glibc's non-temporal
//! threshold) reads every destination line into the cache before writing it
//! (read-for-ownership) and later writes it back: three memory transfers per byte
//! besides the source read, all competing with the device's DMA reads of the
//! previous slot. Streaming stores write the line once and leave the caches alone;
//! the staging buffer is only read again by the device.

/// `dst.copy_from_slice(src)` with non-temporal stores (x86-64; a plain copy elsewhere).
///
/// The stores are fenced before it returns, so the bytes are visible to whatever
/// the caller orders after it (a device copy enqueued later by another thread that
/// synchronized with this one).
///
/// # Panics
/// If the lengths differ (like `copy_from_slice`).
///
/// # Examples
///
/// ```
/// let src: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
/// let mut dst = vec![0u8; 1000];
/// stoker_loader::gpu::copy_streaming(&mut dst, &src);
/// assert_eq!(dst, src);
/// ```
pub fn copy_streaming(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_streaming: lengths differ");
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        const LANE: usize = 16;
        const STEP: usize = 4 * LANE;
        let head = dst.as_ptr().align_offset(LANE).min(dst.len());
        dst[..head].copy_from_slice(&src[..head]);
        let body = (dst.len() - head) / STEP * STEP;
        let (d, s) = (dst[head..].as_mut_ptr(), src[head..].as_ptr());
        let mut off = 0;
        while off < body {
            // SAFETY: `off + STEP ≤ body ≤ len - head` for both `d` and `s`; `d + off`
            // is 16-byte aligned (`head` aligns `d`, `off` steps by 64), as
            // `_mm_stream_si128` needs; `_mm_loadu_si128` takes any alignment; SSE2
            // is part of the x86-64 baseline.
            unsafe {
                for k in 0..4 {
                    let v = _mm_loadu_si128(s.add(off + k * LANE).cast::<__m128i>());
                    _mm_stream_si128(d.add(off + k * LANE).cast::<__m128i>(), v);
                }
            }
            off += STEP;
        }
        // SAFETY: SSE2 (x86-64 baseline); orders the streaming stores above before
        // any later store, the release that hands the buffer on included.
        unsafe { _mm_sfence() };
        dst[head + body..].copy_from_slice(&src[head + body..]);
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

#[cfg(test)]
mod tests {
    use super::copy_streaming;

    #[test]
    fn equals_a_plain_copy_at_every_alignment_and_length() {
        let src: Vec<u8> = (0..4096u32).map(|i| (i * 31 + 7) as u8).collect();
        for start in 0..20 {
            for len in [0, 1, 15, 16, 17, 63, 64, 65, 130, 1000, 4000] {
                let mut buf = vec![0xAAu8; 4200];
                copy_streaming(&mut buf[start..start + len], &src[3..3 + len]);
                assert_eq!(
                    &buf[start..start + len],
                    &src[3..3 + len],
                    "start {start} len {len}"
                );
                assert!(
                    buf[..start].iter().all(|&b| b == 0xAA),
                    "wrote before, start {start} len {len}"
                );
                assert!(
                    buf[start + len..].iter().all(|&b| b == 0xAA),
                    "wrote after, start {start} len {len}"
                );
            }
        }
    }

    #[test]
    #[should_panic(expected = "lengths differ")]
    fn different_lengths_panic() {
        copy_streaming(&mut [0u8; 3], &[1u8; 4]);
    }
}
