//! What the consumer gets: a [`Batch`] of images (host or device), labels and indices.

use std::ffi::c_void;
use std::sync::Arc;

use crossbeam_channel::Sender;
use half::{bf16, f16};

use crate::dlpack::{self, ManagedTensor};

use crate::config::DType;
use crate::metrics::Metrics;

/// A batch buffer of the host ring. Allocated once at build for a full batch; recycled when
/// the [`HostImages`] holding it is dropped.
#[derive(Debug)]
pub(crate) struct HostBuffer {
    pub(crate) values: HostValues,
    /// Counts the buffer in its loader's `host_bytes` while it exists (`None`: a copy
    /// made for the consumer, which is not the loader's).
    _counted: Option<Counted>,
}

/// A batch buffer's values, by output type.
#[derive(Debug)]
pub(crate) enum HostValues {
    U8(Vec<u8>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
    F32(Vec<f32>),
}

impl HostBuffer {
    /// A buffer of the loader whose counters are `metrics`: its bytes count in
    /// `host_bytes` until it is freed, wherever that happens (a batch the script kept past
    /// its loader, a buffer made while the ring was held and freed when it came back to a
    /// full ring).
    pub(crate) fn counted(values: HostValues, metrics: &Arc<Metrics>) -> Self {
        let bytes = values.bytes() as u64;
        metrics.add_host_bytes(bytes);
        HostBuffer {
            values,
            _counted: Some(Counted {
                metrics: Arc::clone(metrics),
                bytes,
            }),
        }
    }

    pub(crate) fn dtype(&self) -> DType {
        self.values.dtype()
    }
}

impl HostValues {
    fn dtype(&self) -> DType {
        match self {
            HostValues::U8(_) => DType::U8,
            HostValues::F16(_) => DType::F16,
            HostValues::Bf16(_) => DType::Bf16,
            HostValues::F32(_) => DType::F32,
        }
    }

    fn bytes(&self) -> usize {
        match self {
            HostValues::U8(v) => v.len(),
            HostValues::F16(v) => v.len() * 2,
            HostValues::Bf16(v) => v.len() * 2,
            HostValues::F32(v) => v.len() * 4,
        }
    }
}

/// A buffer's share of its loader's `host_bytes`, given back when the buffer is freed.
#[derive(Debug)]
struct Counted {
    metrics: Arc<Metrics>,
    bytes: u64,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.metrics.sub_host_bytes(self.bytes);
    }
}

/// Images of a batch in host memory (the CPU path's output).
///
/// Shape is [`crate::Output::shape`]: `[n, h, w, 3]` for the interleaved outputs (`…Nhwc`)
/// and `[n, 3, h, w]` for the planar ones (`…Nchw`); `n` is the number of images in this batch (the last batch of an epoch may be
/// partial without `drop_last`). Dropping it returns the buffer to the loader's ring, which is
/// why the loader allocates no memory per batch.
#[derive(Debug)]
pub struct HostImages {
    /// Always `Some` until `Drop`.
    buffer: Option<HostBuffer>,
    shape: [usize; 4],
    /// Where the buffer goes back to; `None` for a detached buffer.
    recycle: Option<Sender<HostBuffer>>,
}

impl HostImages {
    pub(crate) fn new(
        buffer: HostBuffer,
        shape: [usize; 4],
        recycle: Option<Sender<HostBuffer>>,
    ) -> Self {
        HostImages {
            buffer: Some(buffer),
            shape,
            recycle,
        }
    }

    fn buffer_mut(&mut self) -> &mut HostBuffer {
        // Invariant: `buffer` is only taken in `Drop`.
        self.buffer
            .as_mut()
            .expect("HostImages buffer present until drop")
    }

    fn buffer(&self) -> &HostBuffer {
        // Invariant: `buffer` is only taken in `Drop`.
        self.buffer
            .as_ref()
            .expect("HostImages buffer present until drop")
    }

    fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// `[n, h, w, 3]` (interleaved, `…Nhwc`) or `[n, 3, h, w]` (planar, `…Nchw`).
    pub fn shape(&self) -> [usize; 4] {
        self.shape
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.buffer().dtype()
    }

    /// The pixels if the output is `u8`.
    pub fn as_u8(&self) -> Option<&[u8]> {
        match &self.buffer().values {
            HostValues::U8(v) => Some(&v[..self.len()]),
            _ => None,
        }
    }

    /// The values if the output is `f16` ([`crate::half::f16`], re-exported so that a caller
    /// names the same `half` version).
    pub fn as_f16(&self) -> Option<&[f16]> {
        match &self.buffer().values {
            HostValues::F16(v) => Some(&v[..self.len()]),
            _ => None,
        }
    }

    /// The values if the output is bfloat16 ([`crate::half::bf16`]).
    pub fn as_bf16(&self) -> Option<&[bf16]> {
        match &self.buffer().values {
            HostValues::Bf16(v) => Some(&v[..self.len()]),
            _ => None,
        }
    }

    /// The values if the output is `f32`.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.buffer().values {
            HostValues::F32(v) => Some(&v[..self.len()]),
            _ => None,
        }
    }
}

impl HostImages {
    /// The images as a DLPack tensor that owns them ([`crate::dlpack`]): the buffer goes
    /// back to the loader's ring when the consumer releases the tensor.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use stoker_loader::{Images, Loader};
    /// let loader = Loader::builder(stoker_formats::Dataset::open("data/train")?).build()?;
    /// let batch = loader.epoch(0).next().expect("a batch")?;
    /// if let Images::Host(images) = batch.images {
    ///     let shape = images.shape();
    ///     let tensor = images.into_dlpack();
    ///     assert_eq!(tensor.shape(), shape.map(|d| d as i64));
    /// }
    /// # Ok(()) }
    /// ```
    pub fn into_dlpack(mut self) -> ManagedTensor {
        // The tensor is the images' one owner: writable, through a pointer taken for
        // writing (`as_mut_ptr`, which the `Arc` below does not invalidate: moving the
        // `Vec` leaves its heap buffer where it is).
        let data = match &mut self.buffer_mut().values {
            HostValues::U8(v) => v.as_mut_ptr().cast::<c_void>(),
            HostValues::F16(v) => v.as_mut_ptr().cast(),
            HostValues::Bf16(v) => v.as_mut_ptr().cast(),
            HostValues::F32(v) => v.as_mut_ptr().cast(),
        };
        Arc::new(self).export(data)
    }

    /// A DLPack tensor of a copy of the images (the protocol's `copy=True`): memory of
    /// the consumer's own, which later writes through other exports do not reach.
    pub fn copy_to_dlpack(&self) -> ManagedTensor {
        let n = self.len();
        let values = match &self.buffer().values {
            HostValues::U8(v) => HostValues::U8(v[..n].to_vec()),
            HostValues::F16(v) => HostValues::F16(v[..n].to_vec()),
            HostValues::Bf16(v) => HostValues::Bf16(v[..n].to_vec()),
            HostValues::F32(v) => HostValues::F32(v[..n].to_vec()),
        };
        let copy = HostBuffer {
            values,
            _counted: None,
        };
        HostImages::new(copy, self.shape, None)
            .into_dlpack()
            .copied()
    }

    /// [`HostImages::into_dlpack`] for images shared behind an [`Arc`] (e.g. exported
    /// more than once): the buffer goes back when every tensor and the `Arc` itself are
    /// released. The memory is shared with the other exports and with Rust readers of
    /// the same images ([`HostImages::as_f32`]...), so a versioned export is marked
    /// read-only (NumPy's arrays then are; PyTorch has no read-only tensors and lets
    /// its writes reach those readers).
    pub fn to_dlpack(self: &Arc<Self>) -> ManagedTensor {
        // Read-only: a pointer from a shared borrow, never written through.
        let data = match &self.buffer().values {
            HostValues::U8(v) => v.as_ptr().cast::<c_void>(),
            HostValues::F16(v) => v.as_ptr().cast(),
            HostValues::Bf16(v) => v.as_ptr().cast(),
            HostValues::F32(v) => v.as_ptr().cast(),
        }
        .cast_mut();
        self.export(data).read_only()
    }

    /// A tensor of the images' buffer at `data` (its start), kept alive by a clone of
    /// the `Arc`.
    fn export(self: &Arc<Self>, data: *mut c_void) -> ManagedTensor {
        let dtype = dlpack::dl_dtype(self.dtype());
        // SAFETY: `data` is the start of the buffer (the callers take it from this very
        // buffer), which holds at least `shape.product()` elements of `dtype` (allocated
        // for a full batch) and is neither moved nor resized while the `HostImages` lives;
        // the clone of the `Arc` in the owner keeps it alive until the consumer releases
        // the tensor. Writes through it come only from `into_dlpack`'s export, whose
        // pointer was taken for writing and which is the buffer's one owner.
        unsafe {
            ManagedTensor::new(
                Box::new(Arc::clone(self)),
                data,
                dlpack::host(),
                dtype,
                &self.shape,
            )
        }
    }
}

impl Drop for HostImages {
    fn drop(&mut self) {
        if let (Some(buffer), Some(recycle)) = (self.buffer.take(), self.recycle.take()) {
            // The ring is bounded; if it is full or gone the buffer is simply freed.
            let _ = recycle.try_send(buffer);
        }
    }
}

/// The images of a batch: in host memory (CPU path) or on a CUDA device (GPU path).
#[derive(Debug)]
#[non_exhaustive]
pub enum Images {
    /// Host memory, from [`crate::Device::Cpu`].
    Host(HostImages),
    /// Device memory, from [`crate::Device::Cuda`].
    Cuda(crate::gpu::CudaImages),
}

impl Images {
    /// The host images, if this batch is in host memory.
    pub fn host(&self) -> Option<&HostImages> {
        match self {
            Images::Host(h) => Some(h),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// Host `u8` pixels, if that is what this batch holds.
    pub fn as_u8(&self) -> Option<&[u8]> {
        self.host().and_then(HostImages::as_u8)
    }

    /// Host `f16` values, if that is what this batch holds ([`crate::half::f16`], re-exported
    /// so that a caller names the same `half` version).
    pub fn as_f16(&self) -> Option<&[f16]> {
        self.host().and_then(HostImages::as_f16)
    }

    /// Host bfloat16 values, if that is what this batch holds ([`crate::half::bf16`]).
    pub fn as_bf16(&self) -> Option<&[bf16]> {
        self.host().and_then(HostImages::as_bf16)
    }

    /// Host `f32` values, if that is what this batch holds.
    pub fn as_f32(&self) -> Option<&[f32]> {
        self.host().and_then(HostImages::as_f32)
    }
}

/// One batch, in the sampler's order.
#[derive(Debug)]
pub struct Batch {
    /// The images.
    pub images: Images,
    /// One label per image (from the record header).
    pub labels: Vec<u32>,
    /// Dataset index of each image (a bad record's replacement shows its own index).
    pub indices: Vec<u64>,
    /// The epoch this batch belongs to.
    pub epoch: u64,
    /// Position of this batch in the epoch (0-based).
    pub index: u64,
}

impl Batch {
    /// Number of images.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// `true` for a batch without images (never yielded by the loader).
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn images(values: Vec<u8>, recycle: Sender<HostBuffer>) -> HostImages {
        let buffer = HostBuffer {
            values: HostValues::U8(values),
            _counted: None,
        };
        HostImages::new(buffer, [1, 2, 2, 3], Some(recycle))
    }

    fn read(t: &ManagedTensor) -> Vec<u8> {
        // SAFETY: every tensor here describes 12 u8 (1×2×2×3) that it keeps alive.
        unsafe { std::slice::from_raw_parts(t.data_ptr().cast::<u8>(), 12) }.to_vec()
    }

    /// What DLPack consumers do with exported batches, written so that Miri can check it
    /// (`scripts/miri.sh`: the claims of `into_dlpack` and `export` about pointers taken
    /// for writing beside an `Arc`): a consumer writes through the one owner's tensor,
    /// others read shared tensors beside Rust readers, and a buffer goes back to the ring
    /// once, with the consumer's writes, after its last release.
    #[test]
    fn exported_buffers_are_written_read_and_recycled_once() {
        let (tx, rx) = crossbeam_channel::unbounded();
        let raw = images((0..12).collect(), tx.clone())
            .into_dlpack()
            .into_raw();
        // SAFETY: `raw` is a live export of 12 u8 whose one owner it is; its deleter is
        // called once, and `raw` not used after.
        unsafe {
            let data = (*raw).dl_tensor.data.cast::<u8>();
            for i in 0..12u8 {
                *data.add(usize::from(i)) = 100 + i;
            }
            ((*raw).deleter.unwrap())(raw);
        }
        match rx.try_recv().unwrap().values {
            HostValues::U8(v) => assert_eq!(v, (100..112).collect::<Vec<u8>>()),
            other => panic!("{:?}", other.dtype()),
        }
        assert!(rx.try_recv().is_err());

        let shared = Arc::new(images(vec![7; 12], tx));
        let (a, b) = (shared.to_dlpack(), shared.to_dlpack());
        assert_eq!(read(&a), shared.as_u8().unwrap());
        drop((shared, a));
        assert!(rx.try_recv().is_err(), "recycled while a tensor holds it");
        assert_eq!(read(&b), [7; 12]);
        drop(b);
        assert!(rx.try_recv().is_ok());
    }
}
