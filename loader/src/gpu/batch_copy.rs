//! Many host-to-device copies in one driver call (`cuMemcpyBatchAsync`, CUDA 13
//! drivers): the raw route's records, copied one by one from the page-locked
//! dataset map, reach the pinned-copy ceiling this way, where one
//! `cuMemcpyHtoDAsync` per record pays a fixed cost per call that more streams
//! do not hide (`examples/h2d_probe`; figures in docs/BENCHMARKS.md).
//!
//! FFI layers: `cudarc::driver::sys` (raw; the symbol exists from driver 13.0 on,
//! and cudarc panics on a missing symbol, so [`supported`] checks the version
//! first) → [`memcpy_batch_htod_async`] (`CUresult` to `Result`).

use cudarc::driver::sys;
use cudarc::driver::DriverError;

/// Whether the driver has `cuMemcpyBatchAsync_v2` (CUDA 13.0 and later); `false`
/// also where the driver library is missing or incomplete
/// ([`stoker_decode::driver_library_problem`]).
///
/// # Examples
///
/// ```
/// println!("batched copies: {}", stoker_loader::gpu::batch_copies_supported());
/// ```
pub fn supported() -> bool {
    // cudarc panics on a call into a missing library.
    if stoker_decode::driver_library_problem().is_some() {
        return false;
    }
    let mut version = 0;
    // SAFETY: writes one integer; the driver library is present and complete (above).
    let ok = unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .is_ok();
    ok && version >= 13_000
}

/// Enqueues `dsts.len()` copies of `sizes[i]` bytes from host address `srcs[i]`
/// to device address `dsts[i]` on `stream`, in stream order.
///
/// # Safety
/// [`supported`] returned `true`; the three slices have one length; every source
/// is page-locked host memory that stays readable, and every destination device
/// memory that nothing else uses, until the copies complete on `stream`.
///
/// # Examples
///
/// ```no_run
/// use stoker_loader::gpu::{batch_copies_supported, memcpy_batch_htod_async};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let ctx = stoker_decode::cuda_context(0)?;
/// let stream = ctx.default_stream();
/// let host = unsafe { ctx.alloc_pinned_with_flags::<u8>(1 << 20, 0) }?;
/// let dev = stream.alloc_zeros::<u8>(1 << 20)?;
/// let (dptr, _guard) = stoker_loader::gpu::cudarc::driver::DevicePtr::device_ptr(&dev, &stream);
/// let src = host.as_slice()?.as_ptr() as u64;
/// // Two halves of the buffer, swapped, in one call.
/// let (mut dsts, mut srcs, mut sizes) = ([dptr, dptr + (1 << 19)], [src + (1 << 19), src], [1 << 19; 2]);
/// if batch_copies_supported() {
///     // SAFETY: supported; pinned sources and device destinations that outlive the
///     // copies (synchronized below); one length.
///     unsafe { memcpy_batch_htod_async(&mut dsts, &mut srcs, &mut sizes, stream.cu_stream()) }?;
///     stream.synchronize()?;
/// }
/// # Ok(()) }
/// ```
pub unsafe fn memcpy_batch_htod_async(
    dsts: &mut [u64],
    srcs: &mut [u64],
    sizes: &mut [usize],
    stream: sys::CUstream,
) -> Result<(), DriverError> {
    // Checked in release builds too: the driver reads `dsts.len()` entries of each array.
    assert!(
        dsts.len() == srcs.len() && srcs.len() == sizes.len(),
        "memcpy_batch_htod_async: {} destinations, {} sources, {} sizes",
        dsts.len(),
        srcs.len(),
        sizes.len()
    );
    // SAFETY: a C struct of enums and integers, each valid as zero (INVALID / 0);
    // the fields the driver reads are set below.
    let mut attr: sys::CUmemcpyAttributes = unsafe { std::mem::zeroed() };
    // Sources are read in stream order (they stay valid until the copies complete).
    attr.srcAccessOrder = sys::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    attr.srcLocHint.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST;
    attr.dstLocHint.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    // One attribute set, for the copies from index 0 on.
    let mut first = [0usize];
    // SAFETY: per this function's contract; the driver reads the arrays during the call.
    unsafe {
        sys::cuMemcpyBatchAsync_v2(
            dsts.as_mut_ptr(),
            srcs.as_mut_ptr(),
            sizes.as_mut_ptr(),
            dsts.len(),
            &mut attr,
            first.as_mut_ptr(),
            1,
            stream,
        )
    }
    .result()
}
