//! A DLPack tensor in a Python capsule, as `__dlpack__` returns it: named `"dltensor"`;
//! a consumer that takes the tensor renames it `"used_dltensor"` and calls the deleter
//! itself when it frees its array; a capsule nobody took runs the deleter when it is
//! collected.

use std::ffi::CStr;
use std::ptr::NonNull;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use stoker_loader::dlpack::sys::DLManagedTensor;
use stoker_loader::dlpack::ManagedTensor;

/// The capsule name of an unconsumed legacy DLPack tensor (DLPack's Python spec).
const DLTENSOR: &CStr = c"dltensor";

/// Wraps `tensor` in a `"dltensor"` capsule.
///
/// # Errors
///
/// The capsule cannot be created (out of memory); the tensor is then released.
pub(crate) fn into_capsule(
    py: Python<'_>,
    tensor: ManagedTensor,
) -> PyResult<Bound<'_, PyCapsule>> {
    let raw = tensor.into_raw();
    let ptr = NonNull::new(raw.cast()).expect("ManagedTensor::into_raw is never null");
    // SAFETY: `ptr` is a live `DLManagedTensor` whose deleter has not run; the capsule
    // destructor below calls that deleter only while the capsule still has the
    // unconsumed name, i.e. when no consumer took over the duty to call it.
    let capsule =
        unsafe { PyCapsule::new_with_pointer_and_destructor(py, ptr, DLTENSOR, Some(destructor)) };
    if capsule.is_err() {
        // SAFETY: no capsule holds `raw`: this is its one deleter call.
        unsafe {
            if let Some(deleter) = (*raw).deleter {
                deleter(raw);
            }
        }
    }
    capsule
}

/// Runs the tensor's deleter if no consumer took the capsule.
///
/// # Safety
///
/// Called by Python, with the interpreter attached, on a capsule made by `into_capsule`.
unsafe extern "C" fn destructor(capsule: *mut ffi::PyObject) {
    // SAFETY: `capsule` is a live capsule object (Python calls this while freeing it).
    // `PyCapsule_IsValid` sets no error; a consumed capsule has another name and is left
    // alone (its consumer calls the deleter). The pointer is the `DLManagedTensor` of
    // `into_capsule`, not yet deleted because the capsule was not consumed.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, DLTENSOR.as_ptr()) != 1 {
            return;
        }
        let raw = ffi::PyCapsule_GetPointer(capsule, DLTENSOR.as_ptr()).cast::<DLManagedTensor>();
        if raw.is_null() {
            return;
        }
        if let Some(deleter) = (*raw).deleter {
            deleter(raw);
        }
    }
}
