//! Pinned staging: the buffers that bitstreams and CPU-decoded pixels pass
//! through on their way to the device, reused in turn and guarded by events.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaEvent, CudaStream, PinnedHostSlice};

use super::device::record_or_synchronize;
use super::options::WaitMode;
use crate::DecodeError;

/// Two pinned host buffers used in turn, each with the event after which the
/// device no longer reads it: a batch waits (on that event, never on a whole
/// stream) only until the batch before last is done with its buffer.
pub(super) struct PinnedRing {
    bufs: [Option<PinnedHostSlice<u8>>; 2],
    free: [Option<CudaEvent>; 2],
    next: usize,
    /// How the host waits for a buffer: the kind of event `put` records.
    wait: WaitMode,
}

impl PinnedRing {
    /// An empty ring whose waits are `wait`'s (resolved).
    pub(super) fn new(wait: WaitMode) -> PinnedRing {
        PinnedRing {
            bufs: [None, None],
            free: [None, None],
            next: 0,
            wait,
        }
    }

    /// The next buffer, with at least `len` bytes, once the device no longer
    /// reads it. Give it back with [`put`](Self::put) and the same index.
    pub(super) fn take(
        &mut self,
        ctx: &Arc<CudaContext>,
        len: usize,
    ) -> Result<(usize, PinnedHostSlice<u8>), DecodeError> {
        let k = self.next;
        self.next = (k + 1) % self.bufs.len();
        if let Some(ev) = self.free[k].take() {
            ev.synchronize()?;
        }
        match self.bufs[k].take() {
            Some(b) if b.len() >= len => Ok((k, b)),
            // A smaller buffer is dropped here, after its event completed.
            _ => {
                // SAFETY: the memory is written before it is read. Plain pinned
                // memory (flags 0), not write-combined: it is read on the host
                // (nvJPEG parses bitstreams there).
                let b = unsafe {
                    ctx.alloc_pinned_with_flags::<u8>(len.max(1).next_power_of_two(), 0)
                }?;
                Ok((k, b))
            }
        }
    }

    /// The events of the buffers the device may still read.
    pub(super) fn events(&self) -> impl Iterator<Item = &CudaEvent> {
        self.free.iter().flatten()
    }

    /// Returns buffer `k`, which work queued on `stream` so far may still read.
    pub(super) fn put(&mut self, k: usize, buf: PinnedHostSlice<u8>, stream: &CudaStream) {
        // Without the event (or the wait) the next user could overwrite it in flight.
        match record_or_synchronize(stream, self.wait, "a staging event") {
            Ok(ev) => self.free[k] = ev,
            Err(e) => tracing::warn!("stream synchronize failed: {e}"),
        }
        self.bufs[k] = Some(buf);
    }
}

/// Copies the bitstreams of `list` (indices into `inputs`) one after another
/// into `dst` (pinned staging) and returns the pointer and length arrays
/// `nvjpegDecodeBatched` takes; the pointers stay valid while the staging
/// buffer lives and nothing writes it again.
///
/// # Panics
/// When `dst` is shorter than the listed inputs together (callers take the
/// staging with at least that size).
pub(super) fn stage_bitstreams(
    dst: &mut [u8],
    inputs: &[&[u8]],
    list: &[usize],
) -> (Vec<*const u8>, Vec<usize>) {
    let mut data = Vec::with_capacity(list.len());
    let mut lens = Vec::with_capacity(list.len());
    let mut off = 0;
    for &i in list {
        let src = inputs[i];
        let to = &mut dst[off..off + src.len()];
        to.copy_from_slice(src);
        data.push(to.as_ptr());
        lens.push(src.len());
        off += src.len();
    }
    (data, lens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_bitstreams_packs_the_listed_inputs_back_to_back() {
        let inputs: [&[u8]; 4] = [b"abc", b"", b"defg", b"hi"];
        let mut dst = vec![0u8; 16];
        let (data, lens) = stage_bitstreams(&mut dst, &inputs, &[3, 0, 1, 2]);
        assert_eq!(lens, vec![2, 3, 0, 4]);
        assert_eq!(&dst[..9], b"hiabcdefg");
        let base = dst.as_ptr();
        let offsets: Vec<usize> = data.iter().map(|p| *p as usize - base as usize).collect();
        assert_eq!(offsets, vec![0, 2, 5, 5]);
        assert!(dst[9..].iter().all(|&b| b == 0));
    }
}
