//! Where a JPEG's primary image ends, found by walking its markers.
//!
//! The CPU and GPU decoders fill missing scan data in without an error, so a cut-off file
//! would train on gray rows: the converter must find truncation itself. Looking for the last
//! `FF D9` in the file is not enough, because many files carry data after the primary image:
//! multi-picture (MPF/MPO) files append whole JPEGs, and motion photos append a video whose
//! bytes hold any marker-like pair. So the walk follows the primary image segment by segment,
//! as a decoder reads it: header segments are skipped by their length, each scan's
//! entropy-coded data is skipped up to the next marker, and the image is complete when its
//! end-of-image marker arrives before the data ends.

/// The offset just past the primary image's end-of-image marker (`FF D9`), or `None` when the
/// data ends first, a second start-of-image marker comes first (a cut-off image followed by
/// an appended one), no scan came before it, or a segment's length runs past the data.
/// The converter uses it to tell a cut-off file, and the CPU decoder to count the scans
/// jpeg-decoder will decode (those of this image, not of what is appended).
///
/// # Examples
/// ```
/// let jpeg = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"),
///     "/../testdata/conformance/core/go__video-001.q50.420.jpeg")).unwrap();
/// assert_eq!(stoker_decode::primary_image_end(&jpeg), Some(jpeg.len()));
/// assert_eq!(stoker_decode::primary_image_end(&jpeg[..jpeg.len() - 1]), None);
/// ```
///
/// Bytes that are not a marker where one is expected are skipped up to the next `0xFF`, as
/// libjpeg does ("extraneous bytes before marker"), and fill bytes (`FF FF …`) before a marker
/// are allowed.
pub fn primary_image_end(data: &[u8]) -> Option<usize> {
    walk(data, |_| {})
}

/// Where each scan's entropy-coded data in the primary image ends: the offset of the
/// marker (its fill bytes included) that ends the scan. A scan that runs to the end of the
/// data has none; so does every scan when the primary image has no end (see
/// [`primary_image_end`]).
pub(crate) fn scan_data_ends(data: &[u8]) -> Vec<usize> {
    let mut ends = Vec::new();
    match walk(data, |end| ends.push(end)) {
        Some(_) => ends,
        None => Vec::new(),
    }
}

/// The walk of [`primary_image_end`], telling `on_scan_end` where each scan's data ends.
fn walk(data: &[u8], mut on_scan_end: impl FnMut(usize)) -> Option<usize> {
    if !data.starts_with(&[0xFF, 0xD8]) {
        return None;
    }
    let mut i = 2;
    let mut scans = 0usize;
    loop {
        i += data.get(i..)?.iter().position(|&b| b == 0xFF)?;
        // Fill bytes: any number of 0xFF before the marker's code.
        i += data.get(i..)?.iter().position(|&b| b != 0xFF)?;
        let code = data[i];
        i += 1;
        match code {
            0xD9 => return (scans > 0).then_some(i),
            // A new image starts before this one ended.
            0xD8 => return None,
            // `FF 00` outside a scan, restart markers between segments and TEM stand alone.
            0x00 | 0x01 | 0xD0..=0xD7 => {}
            _ => {
                let len = usize::from(u16::from_be_bytes([*data.get(i)?, *data.get(i + 1)?]));
                if len < 2 || i + len > data.len() {
                    return None;
                }
                i += len;
                if code == 0xDA {
                    scans += 1;
                    let start = i;
                    i = super::entropy::entropy_coded_end(data, i);
                    if i < data.len() {
                        // Back to the first of the fill bytes before the marker's code.
                        let fill = data[start..i].iter().rev().take_while(|&&b| b == 0xFF);
                        on_scan_end(i - fill.count());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SOI, a DQT-like segment whose payload holds `FF D9` and `FF DA`, one scan, then EOI.
    fn tiny() -> Vec<u8> {
        let mut v = vec![0xFF, 0xD8];
        v.extend_from_slice(&[0xFF, 0xDB, 0, 6, 0xFF, 0xD9, 0xFF, 0xDA]);
        v.extend_from_slice(&[0xFF, 0xDA, 0, 3, 1]);
        v.extend_from_slice(&[7, 0xFF, 0x00, 9, 0xFF, 0xD3, 4, 0xFF, 0xFF, 0xD9]);
        v
    }

    #[test]
    fn a_complete_image_ends_at_its_eoi() {
        let v = tiny();
        assert_eq!(primary_image_end(&v), Some(v.len()));
    }

    #[test]
    fn data_after_the_image_does_not_matter() {
        let mut v = tiny();
        let end = v.len();
        // A trailer holding a start-of-scan pair and no EOI after it: a motion photo's video.
        v.extend_from_slice(b"\0\0ftypmp42\xFF\xDA\x01\x02");
        assert_eq!(primary_image_end(&v), Some(end));
        // An appended image (MPF): complete or not, the primary decides.
        v.extend_from_slice(&tiny()[..10]);
        assert_eq!(primary_image_end(&v), Some(end));
    }

    #[test]
    fn every_cut_before_the_eoi_is_truncation() {
        let v = tiny();
        for cut in 0..v.len() {
            assert_eq!(primary_image_end(&v[..cut]), None, "cut at {cut}");
        }
    }

    /// Cut between segments or inside the scan. (A cut inside a header segment can leave a
    /// length that reaches into the next image and swallows its start; the walk reads on as a
    /// decoder would. Most of a photo's bytes are scan data, so most cuts land there.)
    #[test]
    fn a_cut_image_followed_by_a_whole_one_is_truncation() {
        let t = tiny();
        for cut in [2, 10].into_iter().chain(15..t.len() - 1) {
            let mut v = t[..cut].to_vec();
            v.extend_from_slice(&t);
            assert_eq!(primary_image_end(&v), None, "cut at {cut}");
        }
    }

    #[test]
    fn arbitrary_bytes_give_an_answer_without_panicking() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..2000 {
            let len = (x % 200) as usize;
            let mut v = vec![0xFF, 0xD8];
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Many 0xFF bytes and marker codes, so the walk takes every branch.
                v.push(match x % 4 {
                    0 => 0xFF,
                    1 => [0x00, 0xD9, 0xDA, 0xD8, 0xD3, 0xC4, 0x01][(x >> 8) as usize % 7],
                    _ => (x >> 16) as u8,
                });
            }
            if let Some(end) = primary_image_end(&v) {
                assert!(end <= v.len() && v[end - 2..end] == [0xFF, 0xD9]);
            }
        }
    }

    #[test]
    fn an_eoi_before_any_scan_is_not_an_image() {
        assert_eq!(primary_image_end(&[0xFF, 0xD8, 0xFF, 0xD9]), None);
    }

    #[test]
    fn markers_are_found_at_every_alignment() {
        for pad in 0..17 {
            let mut v = vec![0xFF, 0xD8, 0xFF, 0xDA, 0, 2];
            v.extend(std::iter::repeat_n(0x12, pad));
            v.extend_from_slice(&[0xFF, 0x00]);
            v.extend(std::iter::repeat_n(0x34, pad));
            v.extend_from_slice(&[0xFF, 0xD9]);
            assert_eq!(primary_image_end(&v), Some(v.len()), "pad {pad}");
            assert_eq!(primary_image_end(&v[..v.len() - 1]), None, "pad {pad}");
        }
    }
}
