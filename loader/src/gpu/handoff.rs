//! Hand-off without host synchronization: a batch in device memory carries the
//! event recorded after its transform kernel; the consumer's stream waits on it
//! ([`CudaImages::wait`]), and dropping the batch records, on every stream that
//! waited, the point after which the slot may be rewritten.

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use crossbeam_channel::Sender;
use cudarc::driver::sys::CUstream;
use cudarc::driver::{CudaContext, CudaEvent, CudaStream, CudaView};

use super::staging::Slot;
use crate::config::DType;
use crate::dlpack::{self, sys::DLDevice, ConsumerStream, ManagedTensor};
use crate::error::driver_err;
use crate::LoaderError;

/// The images of a GPU batch: a device tensor of shape [`CudaImages::shape`] and
/// element type [`CudaImages::dtype`], ready once the consumer's stream has
/// waited on it.
///
/// Use it in two steps: [`CudaImages::wait`] with the stream your training step
/// runs on (GPU-side wait, the host does not block), then read it through
/// [`CudaImages::as_f16_bits`] / [`CudaImages::as_f32`] / [`CudaImages::as_u8`]
/// (cudarc views) or [`CudaImages::device_ptr`] (for other frameworks). The
/// views are `None` until `wait` was called, so the data cannot be read before
/// it is ready. Dropping the batch hands its slot back to the loader; the slot
/// is rewritten only after every stream that waited has passed the drop point.
///
/// # Examples
///
/// ```no_run
/// # fn demo(loader: &stoker_loader::Loader) -> Result<(), Box<dyn std::error::Error>> {
/// use stoker_loader::Images;
/// for batch in loader.epoch(0) {
///     let batch = batch?;
///     if let Images::Cuda(images) = &batch.images {
///         let stream = images.context().new_stream()?;
///         images.wait(&stream)?;
///         let x = images.as_f16_bits().expect("F16Nchw output, waited");
///         // ... launch the training step on `stream` reading `x` ...
///         let _ = x;
///     }
/// }
/// # Ok(()) }
/// ```
pub struct CudaImages {
    /// `Some` until `Drop` hands it back.
    slot: Option<Box<Slot>>,
    /// Where the slot goes back to (the pipeline's free list).
    home: Sender<Box<Slot>>,
    shape: [usize; 4],
    dtype: DType,
    /// Streams that waited on the batch; each gets a release event on drop.
    waited: Mutex<Vec<Arc<CudaStream>>>,
}

impl std::fmt::Debug for CudaImages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaImages")
            .field("shape", &self.shape)
            .field("dtype", &self.dtype)
            .field("waited_streams", &self.waited_len())
            .finish()
    }
}

impl CudaImages {
    pub(crate) fn new(
        slot: Box<Slot>,
        home: Sender<Box<Slot>>,
        shape: [usize; 4],
        dtype: DType,
    ) -> Self {
        CudaImages {
            slot: Some(slot),
            home,
            shape,
            dtype,
            waited: Mutex::new(Vec::new()),
        }
    }

    fn slot(&self) -> &Slot {
        // Invariant: `slot` is only taken in `Drop`.
        self.slot
            .as_deref()
            .expect("CudaImages slot present until drop")
    }

    fn waited_len(&self) -> usize {
        self.waited.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// `[n, h, w, 3]` for the interleaved outputs (`…Nhwc`), `[n, 3, h, w]` for the planar ones.
    pub fn shape(&self) -> [usize; 4] {
        self.shape
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Bytes of the batch tensor (`shape` product × element size).
    pub fn num_bytes(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.size()
    }

    /// The CUDA context the batch lives in (make your streams from it).
    pub fn context(&self) -> &Arc<CudaContext> {
        self.slot().compute.context()
    }

    /// The event recorded after the batch was written, for frameworks that wait on
    /// their own (`cudaStreamWaitEvent(stream, ready_event().cu_event())`). Prefer
    /// [`CudaImages::wait`] / [`CudaImages::wait_raw`], which also make the slot's
    /// reuse wait for that stream.
    pub fn ready_event(&self) -> &CudaEvent {
        &self.slot().ready
    }

    /// Makes `stream` wait (on the GPU, the host does not block) until the batch is
    /// written, and registers `stream` as a consumer: the slot is reused only after
    /// `stream` has passed the point where this batch is dropped.
    ///
    /// # Errors
    /// [`LoaderError::Gpu`] if the wait cannot be enqueued (e.g. `stream` belongs
    /// to another device).
    pub fn wait(&self, stream: &Arc<CudaStream>) -> Result<(), LoaderError> {
        stream
            .wait(&self.slot().ready)
            .map_err(|e| driver_err("cuStreamWaitEvent (batch ready)", e))?;
        let mut waited = self.waited.lock().unwrap_or_else(|p| p.into_inner());
        if !waited
            .iter()
            .any(|s| Arc::ptr_eq(s, stream) || **s == **stream)
        {
            waited.push(Arc::clone(stream));
        }
        Ok(())
    }

    /// [`CudaImages::wait`] for a stream owned by another framework (e.g. PyTorch's
    /// current stream), given as a raw `CUstream` of this batch's context.
    ///
    /// # Errors
    /// As [`CudaImages::wait`].
    ///
    /// # Safety
    /// `stream` must be a valid stream of [`CudaImages::context`] and stay alive
    /// until this batch is dropped.
    pub unsafe fn wait_raw(&self, stream: CUstream) -> Result<(), LoaderError> {
        // SAFETY: the caller guarantees `stream` is a live stream of this context
        // that outlives the batch; the wrapper does not destroy it.
        let wrapped = unsafe { self.context().wrap_borrowed_stream(stream) };
        self.wait(&wrapped)
    }

    fn waited(&self) -> bool {
        self.waited_len() > 0
    }

    /// The batch as `u8` (`U8Nhwc`); `None` for another dtype or before [`CudaImages::wait`].
    pub fn as_u8(&self) -> Option<CudaView<'_, u8>> {
        (self.dtype == DType::U8 && self.waited())
            .then(|| self.slot().out.slice(..self.num_bytes()))
    }

    /// The batch as IEEE half bit patterns (`F16Nchw`, `F16Nhwc`); `None` for another dtype or
    /// before [`CudaImages::wait`].
    pub fn as_f16_bits(&self) -> Option<CudaView<'_, u16>> {
        self.bits_of(DType::F16)
    }

    /// The batch as bfloat16 bit patterns (`Bf16Nchw`, `Bf16Nhwc`); `None` for another dtype
    /// or before [`CudaImages::wait`].
    pub fn as_bf16_bits(&self) -> Option<CudaView<'_, u16>> {
        self.bits_of(DType::Bf16)
    }

    /// The batch as the 16-bit patterns of `dtype` (a 2-byte type), if it holds that type
    /// and was waited for.
    fn bits_of(&self, dtype: DType) -> Option<CudaView<'_, u16>> {
        if self.dtype != dtype || !self.waited() {
            return None;
        }
        let n = self.num_bytes() / 2;
        // SAFETY: `out` holds at least `num_bytes` bytes written by the kernel of a 2-byte
        // type as u16 bit patterns; any bit pattern is a valid u16; device allocations are
        // 256-byte aligned.
        unsafe { self.slot().out.transmute::<u16>(n) }
    }

    /// The batch as `f32` (`F32Nchw`, `F32Nhwc`); `None` for another dtype or before [`CudaImages::wait`].
    pub fn as_f32(&self) -> Option<CudaView<'_, f32>> {
        if self.dtype != DType::F32 || !self.waited() {
            return None;
        }
        let n = self.num_bytes() / 4;
        // SAFETY: as in `bits_of`, for f32 values written by the f32 kernel.
        unsafe { self.slot().out.transmute::<f32>(n) }
    }

    /// The batch as a DLPack tensor on its device ([`crate::dlpack`]) that owns it:
    /// first makes `stream` wait (on the GPU) for the batch, as the DLPack protocol asks
    /// of a producer, and registers it like [`CudaImages::wait`]; the slot goes back to
    /// the loader's ring only when the consumer releases the tensor (and every stream
    /// that waited has passed that point). Shared behind an [`Arc`] so one batch can be
    /// exported more than once (each export keeps it alive).
    ///
    /// # Errors
    ///
    /// [`LoaderError::Gpu`] if the wait cannot be enqueued.
    ///
    /// # Safety
    ///
    /// A [`ConsumerStream::Handle`] must be a valid stream of [`CudaImages::context`] that
    /// stays alive until this batch is dropped (as for [`CudaImages::wait_raw`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(loader: &stoker_loader::Loader) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use stoker_loader::dlpack::ConsumerStream;
    /// use stoker_loader::Images;
    /// let batch = loader.epoch(0).next().expect("a batch")?;
    /// if let Images::Cuda(images) = batch.images {
    ///     // SAFETY: the legacy default stream is always valid.
    ///     let tensor = unsafe { Arc::new(images).to_dlpack(ConsumerStream::Legacy)? };
    ///     let _raw = tensor.into_raw(); // to the consumer, which calls the deleter
    /// }
    /// # Ok(()) }
    /// ```
    pub unsafe fn to_dlpack(
        self: &Arc<Self>,
        stream: ConsumerStream,
    ) -> Result<ManagedTensor, LoaderError> {
        match stream.handle() {
            // SAFETY: the reserved handles are valid in every context; a caller's
            // handle is valid and outlives the batch by this function's contract.
            Some(handle) => {
                unsafe { self.wait_raw(handle)? };
                // The per-thread default stream is the one of the thread that
                // uses the handle, and the release is recorded by whichever
                // thread drops the batch: the legacy stream too, whose events
                // complete only after every blocking stream's earlier work
                // (each thread's default stream included).
                if stream == ConsumerStream::PerThread {
                    // SAFETY: as above, a reserved handle.
                    unsafe { self.wait_raw(0x1 as CUstream)? };
                }
            }
            None => self
                .slot()
                .ready
                .synchronize()
                .map_err(|e| driver_err("cuEventSynchronize (batch ready)", e))?,
        }
        let device = DLDevice {
            device_type: dlpack::sys::K_DL_CUDA,
            device_id: self.context().ordinal() as i32,
        };
        // SAFETY: `out_ptr` is the device address of the slot's output buffer, which
        // holds at least `num_bytes` bytes of `dtype` elements in `shape`, and is not
        // rewritten until this `CudaImages` is dropped (its slot is then handed back),
        // which the clone of the `Arc` in the owner delays until the consumer releases
        // the tensor. The batch is ready on the consumer's stream (waited above).
        Ok(unsafe {
            ManagedTensor::new(
                Box::new(Arc::clone(self)),
                self.slot().out_ptr as usize as *mut c_void,
                device,
                dlpack::dl_dtype(self.dtype),
                &self.shape,
            )
        })
    }

    /// The raw device address of the tensor (for DLPack / `__cuda_array_interface__`);
    /// `None` before [`CudaImages::wait`]. Valid until the batch is dropped.
    pub fn device_ptr(&self) -> Option<u64> {
        self.waited().then(|| self.slot().out_ptr)
    }
}

impl Drop for CudaImages {
    fn drop(&mut self) {
        let Some(mut slot) = self.slot.take() else {
            return;
        };
        let waited = std::mem::take(&mut *self.waited.lock().unwrap_or_else(|p| p.into_inner()));
        for stream in waited {
            // The release point: everything the consumer enqueued on `stream` so far.
            match stream.record_event(None) {
                Ok(ev) => slot.release.push(ev),
                // Cannot record: wait for the consumer's stream here instead, so
                // the slot is not rewritten under a read (error path only; no
                // panic in Drop).
                Err(e) => {
                    tracing::warn!("recording a release event failed ({e}); synchronizing");
                    if let Err(e) = stream.synchronize() {
                        tracing::warn!("consumer stream synchronize failed: {e}");
                    }
                }
            }
        }
        // The pipeline may be gone: then the slot is dropped here, and its Drop
        // orders the frees after the release events.
        let _ = self.home.try_send(slot);
    }
}
