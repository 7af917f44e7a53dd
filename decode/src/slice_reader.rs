//! zune-jpeg's input reader over a borrowed slice, apart from the decoder that uses it
//! ([`crate::cpu`]).

use zune_core::bytestream::{ZByteIoError, ZSeekFrom};

/// zune-jpeg's input: a byte slice behind `ZByteReaderTrait`, every method
/// inlined into the decoder.
///
/// zune-core implements the trait for `ZCursor` through its blanket impl for
/// `std::io::BufRead + Seek` once its `std` feature is on (and `tiff` turns it
/// on): then every 4-byte refill of the Huffman decoder goes through
/// `io::Read::read` and a `memcpy` call. This reader does the same things
/// directly, with the same results as that path in every case, including
/// reads past the end (a byte read there gives 0 and does not advance; a short
/// exact read leaves the position where it was), so decodes are unchanged
/// (`tests/zune_patch.rs` pins them; the test below compares it with `ZCursor`).
pub(crate) struct SliceReader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> SliceReader<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        SliceReader { data, pos: 0 }
    }

    /// The bytes after the position (none when it is at or past the end).
    #[inline(always)]
    fn rest(&self) -> &'a [u8] {
        &self.data[self.pos.min(self.data.len())..]
    }
}

impl zune_core::bytestream::ZByteReaderTrait for SliceReader<'_> {
    #[inline(always)]
    fn read_byte_no_error(&mut self) -> u8 {
        match self.data.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    #[inline(always)]
    fn read_exact_bytes(&mut self, buf: &mut [u8]) -> Result<(), ZByteIoError> {
        let rest = self.rest();
        match rest.get(..buf.len()) {
            Some(src) => {
                buf.copy_from_slice(src);
                self.pos += buf.len();
                Ok(())
            }
            None => {
                buf[..rest.len()].copy_from_slice(rest);
                Err(ZByteIoError::NotEnoughBytes(rest.len(), buf.len()))
            }
        }
    }

    #[inline(always)]
    fn read_bytes(&mut self, buf: &mut [u8]) -> Result<usize, ZByteIoError> {
        let n = self.peek_bytes(buf)?;
        self.pos = self.pos.wrapping_add(n);
        Ok(n)
    }

    #[inline(always)]
    fn peek_bytes(&mut self, buf: &mut [u8]) -> Result<usize, ZByteIoError> {
        let rest = self.rest();
        let n = buf.len().min(rest.len());
        buf[..n].copy_from_slice(&rest[..n]);
        Ok(n)
    }

    #[inline(always)]
    fn peek_exact_bytes(&mut self, buf: &mut [u8]) -> Result<(), ZByteIoError> {
        self.read_exact_bytes(buf)?;
        self.pos -= buf.len();
        Ok(())
    }

    #[inline(always)]
    fn z_seek(&mut self, from: ZSeekFrom) -> Result<u64, ZByteIoError> {
        let (base, offset) = match from {
            ZSeekFrom::Start(n) => {
                self.pos = n as usize;
                return Ok(n);
            }
            ZSeekFrom::End(n) => (self.data.len(), n as isize),
            ZSeekFrom::Current(n) => (self.pos, n as isize),
        };
        match base.checked_add_signed(offset) {
            Some(p) => {
                self.pos = p;
                Ok(p as u64)
            }
            None => Err(ZByteIoError::SeekError("Negative seek")),
        }
    }

    #[inline(always)]
    fn is_eof(&mut self) -> Result<bool, ZByteIoError> {
        Ok(self.pos >= self.data.len())
    }

    #[inline(always)]
    fn z_position(&mut self) -> Result<u64, ZByteIoError> {
        Ok(self.pos as u64)
    }

    fn read_remaining(&mut self, sink: &mut Vec<u8>) -> Result<usize, ZByteIoError> {
        let rest = self.rest();
        sink.extend_from_slice(rest);
        self.pos += rest.len();
        Ok(rest.len())
    }
}

#[cfg(test)]
mod tests {
    use super::SliceReader;
    use zune_core::bytestream::{ZByteReaderTrait, ZCursor, ZSeekFrom};

    /// One step of a script run on both readers; what it returns, as comparable data.
    fn step<R: ZByteReaderTrait>(r: &mut R, op: u8, n: usize) -> String {
        let mut buf = vec![0xAAu8; n];
        let out = match op {
            0 => format!("{}", r.read_byte_no_error()),
            1 => format!("{:?}", r.read_exact_bytes(&mut buf).is_ok()),
            2 => format!("{:?}", r.read_bytes(&mut buf).ok()),
            3 => format!("{:?}", r.peek_bytes(&mut buf).ok()),
            4 => format!("{:?}", r.peek_exact_bytes(&mut buf).is_ok()),
            5 => format!("{:?}", r.z_seek(ZSeekFrom::Current(n as i64 - 6)).ok()),
            6 => format!("{:?}", r.z_seek(ZSeekFrom::Start(n as u64)).ok()),
            7 => format!("{:?}", r.z_seek(ZSeekFrom::End(-(n as i64))).ok()),
            8 => format!("{:?}", r.is_eof().ok()),
            _ => {
                let mut sink = Vec::new();
                format!("{:?} {sink:?}", r.read_remaining(&mut sink).ok())
            }
        };
        // Successful exact reads fill `buf`; a failed one leaves it unspecified.
        let shown = if op == 1 && out == "false" {
            Vec::new()
        } else {
            buf
        };
        format!("{out} {shown:?} at {:?}", r.z_position().ok())
    }

    /// `SliceReader` must behave exactly as zune-core's `ZCursor` does through
    /// its `std::io` path (the reader zune-jpeg would otherwise use), including past the end:
    /// a fixed pseudo-random script of every operation on short slices.
    #[test]
    fn slice_reader_matches_zcursor_step_for_step() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for len in [0usize, 1, 3, 4, 7, 16] {
            let data: Vec<u8> = (0..len as u8).map(|b| b.wrapping_mul(37)).collect();
            for _ in 0..200 {
                let (mut a, mut b) = (SliceReader::new(&data), ZCursor::new(&data[..]));
                for _ in 0..12 {
                    let (op, n) = (next(10) as u8, next(10) as usize);
                    assert_eq!(
                        step(&mut a, op, n),
                        step(&mut b, op, n),
                        "len {len}, op {op}, n {n}"
                    );
                }
            }
        }
    }
}
