//! DLPack export: a batch handed to any DLPack consumer without a copy.
//!
//! DLPack is the hand-off between array libraries (in Python `torch.from_dlpack`,
//! `numpy.from_dlpack`, CuPy, JAX; in C++ libtorch's `at::fromDLPack`...). tch-rs has no
//! DLPack import: the crate docs' [Other frameworks](crate#other-frameworks) say how a
//! tch user takes a batch. A [`ManagedTensor`] describes the memory of a batch (host or
//! device pointer, shape, strides, element type) and **owns** what keeps that memory alive: the
//! [`crate::HostImages`] / [`crate::CudaImages`] themselves. The consumer calls the
//! tensor's deleter when it frees its tensor; only then is the batch dropped, and
//! only then does its buffer (host ring) or slot (GPU ring) go back to the loader to
//! be rewritten. So a tensor kept alive is never overwritten, however far the
//! loader runs ahead.
//!
//! Exports: [`crate::HostImages::into_dlpack`] / [`crate::HostImages::to_dlpack`],
//! [`crate::CudaImages::to_dlpack`] (which first makes the consumer's stream wait
//! for the batch, see [`ConsumerStream`]), and [`ManagedTensor::from_vec`] for
//! labels and indices.
//!
//! A tensor goes out as the legacy `DLManagedTensor` ([`ManagedTensor::into_raw`],
//! Python capsule `"dltensor"`), which every consumer accepts, or as DLPack 1.0's
//! `DLManagedTensorVersioned` ([`ManagedTensor::into_raw_versioned`], capsule
//! `"dltensor_versioned"`) to a consumer that asks for it, with flags the legacy struct
//! cannot carry: host images that other exports and Rust readers share are read-only,
//! copies are marked as copies ([`ManagedTensor::flags`]).
//!
//! # Examples
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use stoker_loader::{Images, Loader};
//! let loader = Loader::builder(stoker_formats::Dataset::open("data/train")?).build()?;
//! for batch in loader.epoch(0) {
//!     let batch = batch?;
//!     if let Images::Host(images) = batch.images {
//!         let tensor = images.into_dlpack();
//!         assert_eq!(tensor.shape().len(), 4);
//!         // Hand it to a C consumer: it calls the deleter when done.
//!         let raw = tensor.into_raw();
//!         # unsafe { ((*raw).deleter.unwrap())(raw) };
//!     }
//! }
//! # Ok(()) }
//! ```

pub mod sys;

use std::any::Any;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;

use cudarc::driver::sys::CUstream;
use half::{bf16, f16};

use crate::config::DType;
use crate::error::LoaderError;
use sys::{
    DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLTensor,
    DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_READ_ONLY,
};

/// A DLPack tensor that owns the memory it describes.
///
/// Dropping it runs the deleter (the memory's owner is dropped); [`ManagedTensor::into_raw`]
/// hands the pointer and the duty to call the deleter to a consumer.
#[derive(Debug)]
pub struct ManagedTensor {
    /// Allocated by [`ManagedTensor::new`] (a leaked `Box`); valid until the deleter runs,
    /// which happens exactly once: in `Drop`, or by whoever got it from `into_raw`.
    raw: NonNull<DLManagedTensor>,
    /// `DLPACK_FLAG_BITMASK_*` bits for a versioned export.
    flags: u64,
}

// SAFETY: the tensor's context owns only `Send` values (the owner is `Box<dyn Any + Send>`,
// the shape and strides are plain `Vec`s), and the raw pointers it holds are into that
// context or into memory the owner keeps alive, which no other code frees.
unsafe impl Send for ManagedTensor {}

/// What `manager_ctx` points to: the owner of the memory, and the shape and strides
/// arrays `DLTensor` points into.
struct Context {
    _owner: Box<dyn Any + Send>,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

impl ManagedTensor {
    /// A tensor of `shape` (compact, row-major) and `dtype` at `data` on `device`, kept
    /// alive by `owner`.
    ///
    /// # Safety
    ///
    /// `data` must point to at least `shape.iter().product()` elements of `dtype` on
    /// `device`, valid for reads and for the consumer's writes for as long as `owner` is
    /// alive, and dropping `owner` must be what releases them.
    pub(crate) unsafe fn new(
        owner: Box<dyn Any + Send>,
        data: *mut c_void,
        device: DLDevice,
        dtype: DLDataType,
        shape: &[usize],
    ) -> Self {
        let shape: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        let mut strides = vec![1i64; shape.len()];
        for i in (0..shape.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * shape[i + 1].max(1);
        }
        let mut ctx = Box::new(Context {
            _owner: owner,
            shape,
            strides,
        });
        // The `Vec` buffers do not move when the `Box` does, so these stay valid.
        let tensor = DLTensor {
            data,
            device,
            ndim: ctx.shape.len() as i32,
            dtype,
            shape: ctx.shape.as_mut_ptr(),
            strides: ctx.strides.as_mut_ptr(),
            byte_offset: 0,
        };
        let managed = Box::new(DLManagedTensor {
            dl_tensor: tensor,
            manager_ctx: Box::into_raw(ctx).cast(),
            deleter: Some(delete),
        });
        ManagedTensor {
            raw: NonNull::from(Box::leak(managed)),
            flags: 0,
        }
    }

    /// Marks the tensor read-only: its memory is shared with other exports or with Rust
    /// readers, so a consumer writing into it would change what they see.
    pub(crate) fn read_only(mut self) -> Self {
        self.flags = (self.flags | DLPACK_FLAG_BITMASK_READ_ONLY) & !DLPACK_FLAG_BITMASK_IS_COPIED;
        self
    }

    /// Marks the tensor as a copy made for this consumer alone (writable).
    pub(crate) fn copied(mut self) -> Self {
        self.flags = (self.flags | DLPACK_FLAG_BITMASK_IS_COPIED) & !DLPACK_FLAG_BITMASK_READ_ONLY;
        self
    }

    /// A 1-D host tensor that owns `values` (labels, indices).
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_loader::dlpack::{sys, ManagedTensor};
    /// let labels: Vec<i64> = vec![3, 1, 4];
    /// let t = ManagedTensor::from_vec(labels);
    /// assert_eq!(t.shape(), &[3]);
    /// assert_eq!(t.device().device_type, sys::K_DL_CPU);
    /// assert_eq!(t.dtype().code, sys::K_DL_INT);
    /// ```
    pub fn from_vec<T: Element>(mut values: Vec<T>) -> Self {
        let len = values.len();
        let data = values.as_mut_ptr().cast::<c_void>();
        // SAFETY: `data` points to `len` elements of `T` (whose DLPack type is
        // `T::DTYPE`) in host memory owned by `values`, which the context keeps (its
        // heap buffer does not move with the `Vec`) and frees when dropped.
        unsafe { ManagedTensor::new(Box::new(values), data, host(), T::DTYPE, &[len]) }.copied()
    }

    fn tensor(&self) -> &DLTensor {
        // SAFETY: `raw` is valid until the deleter runs, which needs `self` by value.
        unsafe { &self.raw.as_ref().dl_tensor }
    }

    /// Where the data lives.
    pub fn device(&self) -> DLDevice {
        self.tensor().device
    }

    /// The element type.
    pub fn dtype(&self) -> DLDataType {
        self.tensor().dtype
    }

    /// The extents, outermost first.
    pub fn shape(&self) -> &[i64] {
        let t = self.tensor();
        // SAFETY: `shape` points to `ndim` values in the context, alive as long as `self`.
        unsafe { std::slice::from_raw_parts(t.shape, t.ndim as usize) }
    }

    /// The strides in elements (compact row-major).
    pub fn strides(&self) -> &[i64] {
        let t = self.tensor();
        // SAFETY: as for `shape`.
        unsafe { std::slice::from_raw_parts(t.strides, t.ndim as usize) }
    }

    /// The `DLPACK_FLAG_BITMASK_*` bits a versioned export carries:
    /// [`sys::DLPACK_FLAG_BITMASK_READ_ONLY`] for host images shared with other exports
    /// ([`crate::HostImages::to_dlpack`]), [`sys::DLPACK_FLAG_BITMASK_IS_COPIED`] for
    /// copies ([`ManagedTensor::from_vec`], [`crate::HostImages::copy_to_dlpack`]), none
    /// for memory the tensor alone owns or that only the device reads.
    pub fn flags(&self) -> u64 {
        self.flags
    }

    /// The address of the first element (a device address for CUDA tensors).
    pub fn data_ptr(&self) -> *const c_void {
        self.tensor().data
    }

    /// Gives up ownership: the caller (a DLPack consumer) must call the returned tensor's
    /// `deleter` exactly once when it no longer uses the memory.
    pub fn into_raw(self) -> *mut DLManagedTensor {
        let raw = self.raw.as_ptr();
        std::mem::forget(self);
        raw
    }

    /// [`ManagedTensor::into_raw`] as DLPack 1.0's versioned struct, with
    /// [`ManagedTensor::flags`]: for a consumer that asked for it (`max_version ≥ (1, 0)`).
    /// The caller must call its `deleter` exactly once.
    pub fn into_raw_versioned(self) -> *mut DLManagedTensorVersioned {
        let flags = self.flags;
        // SAFETY: `into_raw` hands over the leaked `Box` of `ManagedTensor::new`, whose
        // deleter has not run; taking the `Box` back moves its view and context into the
        // versioned struct, and the legacy struct is freed without its deleter (the
        // context lives on, released by the versioned deleter).
        let legacy = unsafe { Box::from_raw(self.into_raw()) };
        let DLManagedTensor {
            dl_tensor,
            manager_ctx,
            ..
        } = *legacy;
        Box::into_raw(Box::new(DLManagedTensorVersioned {
            version: sys::DLPACK_VERSION,
            manager_ctx,
            deleter: Some(delete_versioned),
            flags,
            dl_tensor,
        }))
    }
}

impl Drop for ManagedTensor {
    fn drop(&mut self) {
        // SAFETY: not handed out with `into_raw` (that forgets `self`), so the deleter
        // has not run; `raw` came from `ManagedTensor::new`.
        unsafe { delete(self.raw.as_ptr()) }
    }
}

/// The deleter of every exported tensor: frees the `DLManagedTensor` and drops its
/// context (the owner: the batch goes back to the loader).
///
/// # Safety
///
/// `managed` comes from [`ManagedTensor::new`] and this is the one call for it.
unsafe extern "C" fn delete(managed: *mut DLManagedTensor) {
    if managed.is_null() {
        return;
    }
    // SAFETY: per the contract, `managed` is the leaked `Box` of `ManagedTensor::new`
    // and `manager_ctx` its leaked `Box<Context>`; nobody uses either after this call.
    unsafe {
        let managed = Box::from_raw(managed);
        release(managed.manager_ctx);
    }
}

/// The deleter of a versioned export ([`ManagedTensor::into_raw_versioned`]).
///
/// # Safety
///
/// `managed` comes from [`ManagedTensor::into_raw_versioned`] and this is the one call
/// for it.
unsafe extern "C" fn delete_versioned(managed: *mut DLManagedTensorVersioned) {
    if managed.is_null() {
        return;
    }
    // SAFETY: per the contract, `managed` is the leaked `Box` of `into_raw_versioned`
    // and `manager_ctx` the leaked `Box<Context>` it took over; nobody uses either after
    // this call.
    unsafe {
        let managed = Box::from_raw(managed);
        release(managed.manager_ctx);
    }
}

/// Drops an exported tensor's context (the owner: the batch goes back to the loader).
///
/// # Safety
///
/// `ctx` is the leaked `Box<Context>` of [`ManagedTensor::new`], released once.
unsafe fn release(ctx: *mut c_void) {
    // SAFETY: per the contract.
    let ctx = unsafe { Box::from_raw(ctx.cast::<Context>()) };
    // Dropping a batch does not panic, but a panic must not unwind into C.
    if catch_unwind(AssertUnwindSafe(move || drop(ctx))).is_err() {
        tracing::error!("panic while releasing a DLPack tensor's batch");
    }
}

/// The host device.
pub(crate) fn host() -> DLDevice {
    DLDevice {
        device_type: sys::K_DL_CPU,
        device_id: 0,
    }
}

/// The DLPack type of a batch element type.
pub(crate) fn dl_dtype(dtype: DType) -> DLDataType {
    let (code, bits) = match dtype {
        DType::U8 => (sys::K_DL_UINT, 8),
        DType::F16 => (sys::K_DL_FLOAT, 16),
        DType::Bf16 => (sys::K_DL_BFLOAT, 16),
        DType::F32 => (sys::K_DL_FLOAT, 32),
    };
    DLDataType {
        code,
        bits,
        lanes: 1,
    }
}

/// Element types [`ManagedTensor::from_vec`] exports.
pub trait Element: sealed::Sealed + Send + 'static {
    /// The DLPack type of the element.
    const DTYPE: DLDataType;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! element {
    ($($t:ty => $code:expr, $bits:expr;)*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DLDataType = DLDataType { code: $code, bits: $bits, lanes: 1 };
        }
    )*};
}

element! {
    u8 => sys::K_DL_UINT, 8;
    u32 => sys::K_DL_UINT, 32;
    u64 => sys::K_DL_UINT, 64;
    i32 => sys::K_DL_INT, 32;
    i64 => sys::K_DL_INT, 64;
    f16 => sys::K_DL_FLOAT, 16;
    bf16 => sys::K_DL_BFLOAT, 16;
    f32 => sys::K_DL_FLOAT, 32;
}

/// The stream a DLPack consumer will read a CUDA batch on: the `stream` argument of
/// `__dlpack__` ([`ConsumerStream::from_dlpack_arg`]).
///
/// [`crate::CudaImages::to_dlpack`] makes that stream wait (on the GPU) for the batch's
/// ready event, and records on it, when the tensor is released, the point after which
/// the batch's slot may be rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConsumerStream {
    /// The legacy default stream (`stream=None` or `1`).
    Legacy,
    /// The per-thread default stream (`2`).
    PerThread,
    /// A stream handle (`cudaStream_t` / `CUstream`) of the batch's context.
    Handle(CUstream),
    /// `-1`: the consumer synchronizes itself. The export waits for the batch on the
    /// host, and the slot is reused as soon as the tensor is released, so the consumer
    /// must have finished reading by then.
    Unsynchronized,
}

impl ConsumerStream {
    /// The DLPack `stream` argument as a stream.
    ///
    /// # Errors
    ///
    /// [`LoaderError::DlpackStream`] for `0` (forbidden by the protocol: ambiguous) and
    /// negative values other than `-1`.
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_loader::dlpack::ConsumerStream;
    /// assert_eq!(ConsumerStream::from_dlpack_arg(None).unwrap(), ConsumerStream::Legacy);
    /// assert_eq!(ConsumerStream::from_dlpack_arg(Some(2)).unwrap(), ConsumerStream::PerThread);
    /// assert!(ConsumerStream::from_dlpack_arg(Some(0)).is_err());
    /// ```
    pub fn from_dlpack_arg(stream: Option<i64>) -> Result<Self, LoaderError> {
        match stream {
            None | Some(1) => Ok(ConsumerStream::Legacy),
            Some(2) => Ok(ConsumerStream::PerThread),
            Some(-1) => Ok(ConsumerStream::Unsynchronized),
            Some(s) if s > 2 => Ok(ConsumerStream::Handle(s as usize as CUstream)),
            Some(s) => Err(LoaderError::DlpackStream { stream: s }),
        }
    }

    /// The handle to wait on, `None` for [`ConsumerStream::Unsynchronized`].
    pub(crate) fn handle(self) -> Option<CUstream> {
        // CUDA's reserved handles CU_STREAM_LEGACY and CU_STREAM_PER_THREAD.
        match self {
            ConsumerStream::Legacy => Some(0x1 as CUstream),
            ConsumerStream::PerThread => Some(0x2 as CUstream),
            ConsumerStream::Handle(h) => Some(h),
            ConsumerStream::Unsynchronized => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Counts its drops: stands for a batch whose release must happen exactly once.
    struct DropCounter(Arc<AtomicUsize>);
    impl Drop for DropCounter {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn strides_are_compact_row_major() {
        let mut data = vec![0f32; 2 * 3 * 4 * 5];
        let ptr = data.as_mut_ptr().cast();
        // SAFETY: `data` holds 120 f32s and is moved into the owner.
        let t = unsafe {
            ManagedTensor::new(
                Box::new(data),
                ptr,
                host(),
                dl_dtype(DType::F32),
                &[2, 3, 4, 5],
            )
        };
        assert_eq!(t.shape(), &[2, 3, 4, 5]);
        assert_eq!(t.strides(), &[60, 20, 5, 1]);
        assert_eq!(
            t.dtype(),
            DLDataType {
                code: sys::K_DL_FLOAT,
                bits: 32,
                lanes: 1
            }
        );
    }

    #[test]
    fn deleter_drops_the_owner_once_whether_dropped_or_handed_out() {
        let drops = Arc::new(AtomicUsize::new(0));
        let t = unsafe {
            // SAFETY: a null data pointer with zero elements is never read.
            ManagedTensor::new(
                Box::new(DropCounter(Arc::clone(&drops))),
                std::ptr::null_mut(),
                host(),
                dl_dtype(DType::U8),
                &[0],
            )
        };
        drop(t);
        assert_eq!(drops.load(Ordering::SeqCst), 1);

        let t = unsafe {
            // SAFETY: as above.
            ManagedTensor::new(
                Box::new(DropCounter(Arc::clone(&drops))),
                std::ptr::null_mut(),
                host(),
                dl_dtype(DType::U8),
                &[0],
            )
        };
        let raw = t.into_raw();
        assert_eq!(
            drops.load(Ordering::SeqCst),
            1,
            "handed out: not released yet"
        );
        // SAFETY: `raw` came from `into_raw`; this is its one deleter call (the consumer's).
        unsafe { ((*raw).deleter.expect("deleter set"))(raw) };
        assert_eq!(drops.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_versioned_export_carries_the_view_flags_and_one_release() {
        let drops = Arc::new(AtomicUsize::new(0));
        let mut data = vec![0u8; 6];
        let ptr = data.as_mut_ptr().cast();
        // SAFETY: `data` holds 6 bytes and is moved into the owner with the counter.
        let t = unsafe {
            ManagedTensor::new(
                Box::new((data, DropCounter(Arc::clone(&drops)))),
                ptr,
                host(),
                dl_dtype(DType::U8),
                &[2, 3],
            )
        }
        .read_only();
        assert_eq!(t.flags(), sys::DLPACK_FLAG_BITMASK_READ_ONLY);
        let raw = t.into_raw_versioned();
        // SAFETY: `raw` is live until its deleter runs below.
        let v = unsafe { &*raw };
        assert_eq!(v.version, sys::DLPACK_VERSION);
        assert_eq!(v.flags, sys::DLPACK_FLAG_BITMASK_READ_ONLY);
        assert_eq!(v.dl_tensor.data, ptr);
        assert_eq!(v.dl_tensor.ndim, 2);
        // SAFETY: shape and strides point to `ndim` values in the live context.
        let (shape, strides) = unsafe {
            (
                std::slice::from_raw_parts(v.dl_tensor.shape, 2),
                std::slice::from_raw_parts(v.dl_tensor.strides, 2),
            )
        };
        assert_eq!((shape, strides), (&[2i64, 3][..], &[3i64, 1][..]));
        assert_eq!(
            drops.load(Ordering::SeqCst),
            0,
            "handed out: not released yet"
        );
        // SAFETY: the consumer's one deleter call.
        unsafe { (v.deleter.expect("deleter set"))(raw) };
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        // Copies are writable and say so.
        let labels = ManagedTensor::from_vec(vec![1i64]);
        assert_eq!(labels.flags(), sys::DLPACK_FLAG_BITMASK_IS_COPIED);
        assert_eq!(
            labels.read_only().flags(),
            sys::DLPACK_FLAG_BITMASK_READ_ONLY
        );
    }

    #[test]
    fn from_vec_exposes_the_values() {
        let t = ManagedTensor::from_vec(vec![7i64, 8, 9]);
        let p = t.data_ptr().cast::<i64>();
        // SAFETY: the tensor owns three i64s at `p`.
        let got = unsafe { std::slice::from_raw_parts(p, 3) };
        assert_eq!(got, &[7, 8, 9]);
        assert_eq!(
            t.dtype(),
            DLDataType {
                code: sys::K_DL_INT,
                bits: 64,
                lanes: 1
            }
        );
    }

    #[test]
    fn stream_zero_is_rejected() {
        assert!(matches!(
            ConsumerStream::from_dlpack_arg(Some(0)),
            Err(LoaderError::DlpackStream { stream: 0 })
        ));
        assert!(ConsumerStream::from_dlpack_arg(Some(-5)).is_err());
        assert_eq!(
            ConsumerStream::from_dlpack_arg(Some(-1)).unwrap(),
            ConsumerStream::Unsynchronized
        );
    }
}
