//! Buffers of record payloads, recycled from the writer back to the converter's readers.
//!
//! A reader fills one buffer per input file; a JPEG stored unchanged keeps that buffer as
//! its payload, which the writer writes to the shard file and then returns here. The next
//! reads refill it without a fresh allocation, so its pages are not faulted in again.

use std::sync::Mutex;

/// Buffers of committed payloads, waiting to be filled by the next reads.
///
/// Bounded by bytes of capacity: a buffer that would take the pool past `max_bytes` is freed
/// instead, so a run of large files cannot leave the pool holding more than that.
#[derive(Debug)]
pub(crate) struct BufferPool {
    /// Free buffers and the sum of their capacities.
    free: Mutex<(Vec<Vec<u8>>, usize)>,
    max_bytes: usize,
}

impl BufferPool {
    /// A pool that keeps at most `max_bytes` of buffer capacity.
    pub(crate) fn new(max_bytes: usize) -> BufferPool {
        BufferPool {
            free: Mutex::new((Vec::new(), 0)),
            max_bytes,
        }
    }

    /// A recycled buffer, or an empty one when none is free.
    pub(crate) fn take(&self) -> Vec<u8> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        match free.0.pop() {
            Some(b) => {
                free.1 -= b.capacity();
                b
            }
            None => Vec::new(),
        }
    }

    /// Returns `buf` to the pool (or frees it when the pool is full).
    pub(crate) fn give(&self, buf: Vec<u8>) {
        if buf.capacity() == 0 {
            return;
        }
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        if free.1 + buf.capacity() <= self.max_bytes {
            free.1 += buf.capacity();
            free.0.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recycled_buffer_keeps_its_capacity() {
        let pool = BufferPool::new(1 << 20);
        let mut v = Vec::with_capacity(100);
        v.extend_from_slice(&[7u8; 10]);
        pool.give(v);
        let buf = pool.take();
        assert!(buf.capacity() >= 100);
        assert!(pool.take().capacity() == 0);
    }

    #[test]
    fn pool_frees_buffers_past_its_byte_bound() {
        let pool = BufferPool::new(150);
        pool.give(vec![0u8; 100]);
        pool.give(vec![0u8; 100]);
        assert!(pool.take().capacity() >= 100);
        assert_eq!(
            pool.take().capacity(),
            0,
            "the second buffer was over the bound"
        );
    }
}
