//! Finding where entropy-coded data ends: what lets the header walk skip a
//! scan, and the converter find where an image ends.

/// The offset of the `0xFF` that starts the first marker at or after `start`
/// which is not part of entropy-coded data, or `data.len()` when there is
/// none. In entropy-coded data a coded `0xFF` is followed by a stuffed `00`,
/// and restart markers (`FF D0`–`FF D7`) belong to the scan; any other
/// `FF xx` (after fill bytes, the last of which is returned) ends it. Used by
/// [`probe`](crate::probe()) to count scans and by the converter to find where an image ends.
///
/// # Examples
/// ```
/// use stoker_decode::entropy_coded_end;
/// // Scan data with a stuffed byte and a restart marker, then fill bytes and EOI.
/// let data = [1, 0xFF, 0x00, 2, 0xFF, 0xD3, 3, 0xFF, 0xFF, 0xD9];
/// assert_eq!(entropy_coded_end(&data, 0), 8);
/// assert_eq!(entropy_coded_end(&data[..7], 0), 7);
/// ```
pub fn entropy_coded_end(data: &[u8], start: usize) -> usize {
    let mut i = start;
    while let Some(off) = data.get(i..).and_then(next_ff) {
        let ff = i + off;
        // Skip fill bytes to find the code.
        let Some(code_off) = data[ff..].iter().position(|&b| b != 0xFF) else {
            return data.len();
        };
        let code = data[ff + code_off];
        if code == 0x00 || (0xD0..=0xD7).contains(&code) {
            i = ff + code_off + 1;
        } else {
            return ff + code_off - 1;
        }
    }
    data.len()
}

/// How many times the scan marker code `FF DA` occurs in `data`. Entropy-coded
/// data cannot hold it (a coded `0xFF` is followed by `00`), so this bounds the
/// scans a decoder can find, whichever way it reads segment lengths or skips junk.
pub(crate) fn scan_marker_codes(data: &[u8]) -> u64 {
    memchr::memmem::find_iter(data, &[0xFF, 0xDA]).count() as u64
}

/// The position of the first `0xFF` byte. Compressed data has few of them (about one in
/// 256 bytes, each followed by a stuffed `0x00`), so a vectorised search skips most of the
/// bytes: [`probe`](super::probe) reads progressive files to their end, and store-mode
/// conversion every file, so this scan shows in both profiles.
fn next_ff(data: &[u8]) -> Option<usize> {
    memchr::memchr(0xFF, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entropy_coded_end_ignores_stuffing_and_restarts() {
        let d = [1, 0xFF, 0x00, 2, 0xFF, 0xD3, 3, 0xFF, 0xFF, 0xD9];
        assert_eq!(entropy_coded_end(&d, 0), 8);
    }

    /// The word-at-a-time scan finds what a byte-by-byte scan finds, from
    /// every start, on buffers with few and many 0xFF bytes, stuffing,
    /// restart markers and real markers at every alignment.
    #[test]
    fn entropy_coded_end_equals_a_byte_by_byte_scan() {
        fn bytewise(d: &[u8], mut pos: usize) -> usize {
            while pos + 1 < d.len() {
                if d[pos] == 0xFF {
                    let next = d[pos + 1];
                    if next != 0x00 && next != 0xFF && !(0xD0..=0xD7).contains(&next) {
                        return pos;
                    }
                    pos += if next == 0xFF { 1 } else { 2 };
                } else {
                    pos += 1;
                }
            }
            d.len()
        }
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for case in 0..3000 {
            let len = (next() % 80) as usize;
            let ff_every = [2, 5, 17, 64][case % 4];
            let d: Vec<u8> = (0..len)
                .map(|_| {
                    let r = next();
                    if r % ff_every == 0 {
                        0xFF
                    } else {
                        [0x00, 0xD3, 0xD9, 0xC4, 0x12, 0xFE][(r >> 8) as usize % 6]
                    }
                })
                .collect();
            for start in 0..=len {
                assert_eq!(
                    entropy_coded_end(&d, start),
                    bytewise(&d, start),
                    "{d:02X?} from {start}"
                );
            }
        }
    }
}
