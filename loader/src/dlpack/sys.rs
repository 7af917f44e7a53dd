//! The C structs of DLPack's `dlpack.h`: the legacy, unversioned `DLManagedTensor` that
//! every consumer accepts (`numpy.from_dlpack`, `torch.from_dlpack`, CuPy, JAX, libtorch),
//! and DLPack 1.0's `DLManagedTensorVersioned`, which adds a version and flags (read-only,
//! copied) for consumers that ask for it. Laid out exactly as in the header so a pointer
//! to them can cross the FFI boundary. Only what the export needs is declared.

use std::ffi::c_void;

/// `DLDeviceType::kDLCPU`: host memory.
pub const K_DL_CPU: i32 = 1;
/// `DLDeviceType::kDLCUDA`: CUDA device memory.
pub const K_DL_CUDA: i32 = 2;

/// `DLDataTypeCode::kDLInt`.
pub const K_DL_INT: u8 = 0;
/// `DLDataTypeCode::kDLUInt`.
pub const K_DL_UINT: u8 = 1;
/// `DLDataTypeCode::kDLFloat`.
pub const K_DL_FLOAT: u8 = 2;
/// `DLDataTypeCode::kDLBfloat`: bfloat16 (`torch.bfloat16`; NumPy has no such type).
pub const K_DL_BFLOAT: u8 = 4;

/// `DLDevice`: where the data lives.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLDevice {
    /// A `DLDeviceType` (`K_DL_CPU`, `K_DL_CUDA`, ...).
    pub device_type: i32,
    /// The device ordinal (0 for the CPU).
    pub device_id: i32,
}

/// `DLDataType`: element type code, bits per lane, lanes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLDataType {
    /// `K_DL_INT`, `K_DL_UINT`, `K_DL_FLOAT` or `K_DL_BFLOAT`.
    pub code: u8,
    /// Bits per element.
    pub bits: u8,
    /// 1 (no vector types are exported).
    pub lanes: u16,
}

/// `DLTensor`: a strided view of memory.
#[repr(C)]
#[derive(Debug)]
pub struct DLTensor {
    /// Start of the data (device pointer on CUDA).
    pub data: *mut c_void,
    /// Where `data` lives.
    pub device: DLDevice,
    /// Number of dimensions.
    pub ndim: i32,
    /// Element type.
    pub dtype: DLDataType,
    /// `ndim` extents.
    pub shape: *mut i64,
    /// `ndim` strides in elements (never null here: compact row-major, written out).
    pub strides: *mut i64,
    /// Bytes from `data` to the first element.
    pub byte_offset: u64,
}

/// `DLManagedTensor`: a `DLTensor` plus who owns it and how to release it.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensor {
    /// The view.
    pub dl_tensor: DLTensor,
    /// The producer's owner of the memory (opaque to the consumer).
    pub manager_ctx: *mut c_void,
    /// Called once by the consumer when it no longer needs the memory.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// The DLPack version stoker's versioned tensors declare: 1.0, the first with
/// `DLManagedTensorVersioned`. Every type stoker exports exists in 1.0, and a consumer
/// checks only that the major version is one it knows.
pub const DLPACK_VERSION: DLPackVersion = DLPackVersion { major: 1, minor: 0 };

/// `DLPACK_FLAG_BITMASK_READ_ONLY`: the consumer must not write through the tensor.
pub const DLPACK_FLAG_BITMASK_READ_ONLY: u64 = 1 << 0;
/// `DLPACK_FLAG_BITMASK_IS_COPIED`: the memory is a copy the consumer alone uses.
pub const DLPACK_FLAG_BITMASK_IS_COPIED: u64 = 1 << 1;

/// `DLPackVersion`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLPackVersion {
    /// Changes when the ABI does.
    pub major: u32,
    /// Changes when the ABI is extended compatibly.
    pub minor: u32,
}

/// `DLManagedTensorVersioned` (DLPack ≥ 1.0): a `DLTensor` plus its version, flags, owner
/// and release function. The field order differs from [`DLManagedTensor`]'s.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensorVersioned {
    /// The DLPack version this struct follows.
    pub version: DLPackVersion,
    /// The producer's owner of the memory (opaque to the consumer).
    pub manager_ctx: *mut c_void,
    /// Called once by the consumer when it no longer needs the memory.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    /// `DLPACK_FLAG_BITMASK_*` bits.
    pub flags: u64,
    /// The view.
    pub dl_tensor: DLTensor,
}
