//! Step 4 of a batch: nvJPEG's CUDA decoder (hybrid backend, decoupled
//! API, its own handle) for what the engines do not take, on a thread of its
//! own beside them ([`CudaPath::decode_list`]). Host phases (Huffman decoding
//! on the CPU) run in parallel over the slots; transfers and device phases are
//! queued on the path's own stream, ordered after the caller's work before the
//! engines start and joined back into the caller's stream after.
//!
//! Why a stream of its own: the engines' stage makes the caller's stream wait
//! for their lanes, and their lanes wait for what the caller's stream holds
//! when they start. On the caller's stream, CUDA-decoder work queued after
//! either point waited for all the engines' work (and the slots' host threads,
//! which wait for their transfers, with it), although the two write different
//! outputs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaContext, CudaEvent, CudaStream, DriverError};

use super::batch::{Batch, Plan};
use super::device::{bind_context, record_or_synchronize};
use super::options::WaitMode;
use crate::nvjpeg::{
    Backend, CachedMemory, DecodeParams, Decoder, DecoderState, DeviceBuffer, Handle, JpegStream,
    NvJpeg, OutputImage, PinnedBuffer,
};
use crate::threads::spawn_or_run;
use crate::{DecodeError, DecodeTimings, Route};

/// One CUDA-decoder state with its buffers.
pub(super) struct CudaSlot {
    /// Recorded on the path's stream after this slot's last host-to-device
    /// transfer, which reads the slot's pinned buffer: the next host phase on
    /// this slot waits for it (and for nothing else).
    pub(super) free: Option<CudaEvent>,
    /// Recorded after this slot's last `nvjpegDecodeJpegDevice`, which reads
    /// the slot's device buffer: the next transfer into that buffer waits for
    /// it on the device. Needed when consecutive uses come on different
    /// streams (the path's own, or the caller's when joining them failed),
    /// which do not order each other.
    pub(super) device_free: Option<CudaEvent>,
    /// How the host waits for `free`: the kind of event recorded.
    wait: WaitMode,
    params: DecodeParams,
    jstream: JpegStream,
    /// Owns the pinned and device buffers attached to it.
    state: DecoderState,
}

/// The CUDA (hybrid) path via the decoupled API.
pub(super) struct CudaPath {
    /// At least one. The decoder and the handle are held by the slots' objects
    /// and released after the last of them.
    pub(super) slots: Vec<CudaSlot>,
    /// Where the slots queue their transfers and device phases, between
    /// [`begin`](Self::begin) and [`end`](Self::end).
    pub(super) stream: Arc<CudaStream>,
}

impl CudaPath {
    /// A default-backend handle (allocating through `memory` when given), a
    /// hybrid decoder, a stream on `ctx` at `priority` and `states` slots (at
    /// least one), on the context current on this thread; the host waits for a
    /// slot as `wait` says.
    pub(super) fn new(
        (lib, memory): (&'static NvJpeg, Option<&Arc<CachedMemory>>),
        (ctx, priority): (&Arc<CudaContext>, i32),
        states: usize,
        wait: WaitMode,
    ) -> Result<CudaPath, DecodeError> {
        let stream = ctx.new_stream_with_priority(priority)?;
        let handle = Handle::new(lib, Backend::Default, memory)?;
        let decoder = Decoder::new(&handle, Backend::Hybrid)?;
        let mut slots = Vec::new();
        for _ in 0..states.max(1) {
            let mut state = DecoderState::new(&decoder)?;
            let pinned = PinnedBuffer::new(&handle)?;
            let device = DeviceBuffer::new(&handle)?;
            state.attach_pinned(pinned)?;
            state.attach_device(device)?;
            let jstream = JpegStream::new(&handle)?;
            let params = DecodeParams::rgbi(&handle)?;
            slots.push(CudaSlot {
                free: None,
                device_free: None,
                wait,
                params,
                jstream,
                state,
            });
        }
        Ok(CudaPath { slots, stream })
    }

    /// Orders the path's stream after what the caller's stream holds so far
    /// (the waits on the outputs' earlier uses). Called before the engines
    /// start, so that it does not also wait for them. `false`: it failed, and
    /// the list must be decoded on the caller's stream (`on_own` false).
    pub(super) fn begin(&self, caller: &CudaStream) -> bool {
        match self.stream.join(caller) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(
                    "ordering the CUDA decoder's stream failed ({e}); using the caller's"
                );
                false
            }
        }
    }

    /// Has the caller's stream wait for what the path queued since
    /// [`begin`](Self::begin), or the host when that fails. `Err`: neither
    /// could be done, and the path's images cannot be trusted.
    pub(super) fn end(&self, caller: &CudaStream) -> Result<(), DriverError> {
        caller.join(&self.stream).or_else(|e| {
            tracing::warn!("joining the CUDA decoder's stream failed ({e}); synchronizing");
            self.stream.synchronize()
        })
    }

    /// Step 4: decodes the plan's CUDA list; what fails goes to the CPU.
    pub(super) fn decode_stage(
        &mut self,
        ctx: &Arc<CudaContext>,
        timings: &mut DecodeTimings,
        batch: Batch<'_>,
        plan: &mut Plan,
    ) {
        if plan.cuda.is_empty() {
            return;
        }
        let list = std::mem::take(&mut plan.cuda);
        let on_own = self.begin(batch.stream);
        let done = self.decode_list(ctx, batch, &list, on_own);
        self.finish(done, on_own, &list, batch, plan, timings);
    }

    /// After [`decode_list`](Self::decode_list): joins the path's stream back
    /// into the caller's (when `on_own`), then records `done`'s results.
    pub(super) fn finish(
        &self,
        done: CudaDone,
        on_own: bool,
        list: &[usize],
        batch: Batch<'_>,
        plan: &mut Plan,
        timings: &mut DecodeTimings,
    ) {
        let ended = if on_own {
            self.end(batch.stream)
        } else {
            Ok(())
        };
        done.apply(list, batch, plan, timings, ended);
    }

    /// Step 4 on a list taken out of the plan (so that it can run on a thread
    /// of its own beside the engines): decodes `list` and says what failed and
    /// how long it took. The slots' threads bind `ctx` themselves. `on_own`:
    /// [`begin`](Self::begin) succeeded, and the work goes on the path's
    /// stream (the caller then calls [`end`](Self::end)); otherwise on the
    /// caller's.
    pub(super) fn decode_list(
        &mut self,
        ctx: &Arc<CudaContext>,
        batch: Batch<'_>,
        list: &[usize],
        on_own: bool,
    ) -> CudaDone {
        let started = Instant::now();
        let stream = self.stream.clone();
        let batch = if on_own {
            Batch {
                stream: &stream,
                ..batch
            }
        } else {
            batch
        };
        let failed = self.decode(ctx, batch, list);
        CudaDone {
            failed,
            seconds: started.elapsed().as_secs_f64(),
        }
    }

    /// Decodes the list with the CUDA decoder: one thread per slot takes the
    /// list's next image, runs its host phase and queues its transfer and
    /// device phases on `batch.stream`, until the list is done. Returns
    /// the failures.
    ///
    /// Why not rounds of one image per slot: each round waited for its
    /// slowest host phase, and the images this path gets (progressive files
    /// of any size) differ in cost by far more than baseline ones.
    fn decode(&mut self, ctx: &Arc<CudaContext>, batch: Batch<'_>, list: &[usize]) -> Vec<usize> {
        let next = AtomicUsize::new(0);
        let threads = self.slots.len().min(list.len());
        let next = &next;
        let taken: Vec<(Vec<usize>, Vec<usize>)> = std::thread::scope(|s| {
            let joins: Vec<_> = self
                .slots
                .iter_mut()
                .take(threads)
                .map(|slot| {
                    spawn_or_run(s, "stoker-cuda-slot", move || {
                        slot.decode_from(ctx, batch, list, next)
                    })
                })
                .collect();
            joins
                .into_iter()
                .map(|j| j.join().unwrap_or_else(|_| (Vec::new(), Vec::new())))
                .collect()
        });
        let mut failed: Vec<usize> = taken.iter().flat_map(|(_, f)| f.iter().copied()).collect();
        // An image whose thread panicked before it said how the image went
        // (its slot's images are not in any thread's account): the CPU.
        let accounted: usize = taken.iter().map(|(done, f)| done.len() + f.len()).sum();
        if accounted < list.len() {
            tracing::warn!("a CUDA-decoder thread panicked; its images go to the CPU");
            let seen: std::collections::HashSet<usize> = taken
                .iter()
                .flat_map(|(done, f)| done.iter().chain(f))
                .copied()
                .collect();
            failed.extend(list.iter().copied().filter(|i| !seen.contains(i)));
        }
        failed
    }
}

/// What [`CudaPath::decode_list`] did with its list.
pub(super) struct CudaDone {
    /// The images of the list the CUDA decoder could not decode.
    failed: Vec<usize>,
    seconds: f64,
}

impl CudaDone {
    /// Images of `list` (the list decoded) the CUDA decoder decoded, and its
    /// wall time.
    pub(super) fn part(&self, list: &[usize]) -> (usize, f64) {
        (list.len() - self.failed.len(), self.seconds)
    }

    /// Every image of a list whose thread was lost: each goes to the CPU.
    pub(super) fn lost(list: &[usize]) -> CudaDone {
        CudaDone {
            failed: list.to_vec(),
            seconds: 0.0,
        }
    }

    /// Records the results of `list` (the list decoded) in `plan` (the
    /// failures go to the CPU) and the time. `ended`: what
    /// [`CudaPath::end`] returned (an error fails the images decoded).
    pub(super) fn apply(
        self,
        list: &[usize],
        batch: Batch<'_>,
        plan: &mut Plan,
        timings: &mut DecodeTimings,
        ended: Result<(), DriverError>,
    ) {
        timings.cuda_s += self.seconds;
        for &i in list {
            if !self.failed.contains(&i) {
                plan.results[i] = Some(match ended {
                    Ok(()) => Ok((batch.info(i).clone(), Route::NvjpegCuda)),
                    Err(e) => Err(DecodeError::Cuda(e)),
                });
            }
        }
        plan.cpu.extend(self.failed);
    }
}

impl CudaSlot {
    /// One slot's thread of [`CudaPath::decode`]: binds `ctx`, then takes the
    /// images of `list` at the positions `next` hands out, one at a time.
    /// Returns the images decoded and those that failed.
    fn decode_from(
        &mut self,
        ctx: &Arc<CudaContext>,
        batch: Batch<'_>,
        list: &[usize],
        next: &AtomicUsize,
    ) -> (Vec<usize>, Vec<usize>) {
        let (mut done, mut failed) = (Vec::new(), Vec::new());
        // Not `bind_to_thread`: a stale error would fail every image here.
        let bound = bind_context(ctx);
        loop {
            let at = next.fetch_add(1, Ordering::Relaxed);
            let Some(&i) = list.get(at) else {
                return (done, failed);
            };
            let r = match &bound {
                Ok(()) => self.decode_one(batch, i),
                Err(e) => Err(DecodeError::Cuda(*e)),
            };
            match r {
                Ok(()) => done.push(i),
                Err(e) => {
                    tracing::debug!("nvJPEG CUDA path failed on image {i}: {e}; using the CPU");
                    failed.push(i);
                }
            }
        }
    }

    /// Image `i` of `batch` through this slot: host phase, then its transfer
    /// and device phases queued on `batch.stream`.
    fn decode_one(&mut self, batch: Batch<'_>, i: usize) -> Result<(), DecodeError> {
        self.host_phase(batch.inputs[i])?;
        let info = batch.info(i);
        let mut img = OutputImage::interleaved(batch.dst[i], info.width as usize * 3);
        // SAFETY: the host phase of this slot succeeded (above); the output
        // holds width*3*height bytes (checked in step 1).
        unsafe { self.device_phases(&mut img, batch) }
    }

    /// Parses `data` and runs the host phase on this slot.
    fn host_phase(&mut self, data: &[u8]) -> Result<(), DecodeError> {
        // The slot's previous transfer (this batch's earlier round or an
        // earlier batch) may still read its pinned buffer, which the host
        // phase overwrites.
        if let Some(ev) = &self.free {
            ev.synchronize()?;
        }
        self.jstream.parse(data)?;
        // SAFETY: the transfer that last read the pinned buffer is done (its
        // event was waited for above; without one, none is queued).
        unsafe { self.state.decode_host(&self.params, &self.jstream) }
    }

    /// Queues the transfer and device phases of this slot's image on
    /// `batch.stream`, writing `img`, with the events that guard the slot's
    /// buffers.
    ///
    /// # Safety
    /// This slot's last host phase succeeded; `img` addresses `pitch * height`
    /// writable device bytes for the image's header.
    unsafe fn device_phases(
        &mut self,
        img: &mut OutputImage,
        batch: Batch<'_>,
    ) -> Result<(), DecodeError> {
        let stream = batch.stream;
        // The previous device phase on this slot (maybe on another
        // stream) must be done reading the device buffer first.
        // The event stays until a new one replaces it, so a
        // failure below leaves the next transfer still ordered.
        if let Some(ev) = &self.device_free {
            stream.wait(ev)?;
        }
        // SAFETY: the host phase succeeded (caller's contract); the state
        // lives until `GpuDecoder::drop` has waited for the events recorded below,
        // and its next host phase waits for `free`.
        unsafe { self.state.transfer_to_device(&self.jstream, stream) }?;
        // The transfer reads the slot's pinned buffer: the slot's next
        // host phase waits for this event (not for the whole stream).
        self.free = record_or_synchronize(stream, self.wait, "a slot event")?;
        // SAFETY: as above; the device phase reads the slot's device buffer,
        // ordered after the transfer on the same stream, and writes `img`
        // (caller's contract); the next transfer waits for `device_free`.
        let device = unsafe { self.state.decode_device(img, stream) };
        // Recorded whatever the call returned: a failed call may still
        // have queued work that reads the device buffer.
        self.device_free = record_or_synchronize(stream, self.wait, "a slot event")?;
        device?;
        Ok(())
    }
}
