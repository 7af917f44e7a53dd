//! Color conversion of decoder outputs to RGB interleaved u8.

/// Expands `px` gray bytes at the start of `buf` to RGB in place (back to front).
pub(crate) fn expand_gray_in_place(buf: &mut [u8], px: usize) {
    debug_assert!(buf.len() >= px * 3);
    for i in (0..px).rev() {
        let g = buf[i];
        buf[3 * i] = g;
        buf[3 * i + 1] = g;
        buf[3 * i + 2] = g;
    }
}

/// Gray `src` to RGB `out` (`out.len() == 3 * src.len()`).
pub(crate) fn gray_to_rgb(src: &[u8], out: &mut [u8]) {
    for (o, &g) in out.chunks_exact_mut(3).zip(src) {
        o.copy_from_slice(&[g, g, g]);
    }
}

/// jpeg-decoder's CMYK32 output (each channel `255 - stored`) to RGB.
///
/// The stored values are always taken as Adobe's inverted CMYK (`255 - ink`),
/// so what jpeg-decoder hands back is the ink, whether or not the file has a
/// (well-formed) Adobe APP14 segment: libjpeg reports CMYK without looking at
/// one, Pillow reads every CMYK JPEG as inverted (`CMYK;I`), and zune-jpeg
/// converts the same way, so a file decodes alike on every route.
/// RGB = (255 - C)(255 - K)/255 per channel, as Pillow converts.
pub(crate) fn inverted_cmyk_to_rgb(src: &[u8], out: &mut [u8]) {
    for (o, p) in out.chunks_exact_mut(3).zip(src.chunks_exact(4)) {
        let (c, m, y, k) = (p[0], p[1], p[2], p[3]);
        let nk = 255 - u32::from(k);
        let ch = |x: u8| ((255 - u32::from(x)) * nk + 127) / 255;
        o[0] = ch(c) as u8;
        o[1] = ch(m) as u8;
        o[2] = ch(y) as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gray_expands_in_place() {
        let mut b = vec![1, 2, 0, 0, 0, 0];
        expand_gray_in_place(&mut b, 2);
        assert_eq!(b, [1, 1, 1, 2, 2, 2]);
    }

    #[test]
    fn cmyk_white_and_black() {
        let mut o = [0u8; 6];
        // No ink (the decoder hands back ink = 0) and full black.
        inverted_cmyk_to_rgb(&[0, 0, 0, 0, 0, 0, 0, 255], &mut o);
        assert_eq!(o, [255, 255, 255, 0, 0, 0]);
    }
}
