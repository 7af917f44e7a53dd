//! A DLPack tensor in a Python capsule, as `__dlpack__` returns it: named `"dltensor"`
//! (the legacy struct) or `"dltensor_versioned"` (DLPack ≥ 1.0, for a consumer whose
//! `max_version` allows it); a consumer that takes the tensor renames the capsule
//! `"used_…"` and calls the deleter itself when it frees its array; a capsule nobody took
//! runs the deleter when it is collected.

use std::ffi::CStr;
use std::ptr::NonNull;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use stoker_loader::dlpack::sys::{DLManagedTensor, DLManagedTensorVersioned};
use stoker_loader::dlpack::ManagedTensor;

/// The capsule name of an unconsumed legacy DLPack tensor (DLPack's Python spec).
const DLTENSOR: &CStr = c"dltensor";
/// The capsule name of an unconsumed versioned DLPack tensor.
const DLTENSOR_VERSIONED: &CStr = c"dltensor_versioned";

/// Which struct a consumer is given: the versioned one when its `max_version` (the
/// `__dlpack__` argument, `(major, minor)`) has a major version of 1 or more, the legacy
/// one otherwise. Read leniently: anything else (a list, a bare major, a float) gets the
/// legacy struct, as every `max_version` did before versioned export, rather than an
/// error a consumer would not retry from.
pub(crate) fn wants_versioned(max_version: Option<&Bound<'_, PyAny>>) -> bool {
    max_version
        .and_then(|v| v.get_item(0).ok())
        .and_then(|major| major.extract::<i64>().ok())
        .is_some_and(|major| major >= 1)
}

/// Wraps `tensor` in a `"dltensor_versioned"` capsule when `versioned`, else in a
/// `"dltensor"` capsule.
///
/// # Errors
///
/// The capsule cannot be created (out of memory); the tensor is then released.
pub(crate) fn into_capsule(
    py: Python<'_>,
    tensor: ManagedTensor,
    versioned: bool,
) -> PyResult<Bound<'_, PyCapsule>> {
    if versioned {
        let raw = tensor.into_raw_versioned();
        // SAFETY: `raw` is a live versioned tensor whose deleter has not run; the
        // destructor calls it only while the capsule keeps the unconsumed name.
        let capsule = unsafe { wrap(py, raw.cast(), DLTENSOR_VERSIONED, destroy_versioned) };
        if capsule.is_err() {
            // SAFETY: no capsule holds `raw`: this is its one deleter call.
            unsafe { release_versioned(raw) };
        }
        capsule
    } else {
        let raw = tensor.into_raw();
        // SAFETY: as above, for the legacy struct.
        let capsule = unsafe { wrap(py, raw.cast(), DLTENSOR, destroy_legacy) };
        if capsule.is_err() {
            // SAFETY: no capsule holds `raw`: this is its one deleter call.
            unsafe { release_legacy(raw) };
        }
        capsule
    }
}

/// A capsule named `name` holding `raw`, with `destructor`.
///
/// # Safety
///
/// `raw` is a live DLPack struct of the kind `destructor` releases, not yet released.
unsafe fn wrap<'py>(
    py: Python<'py>,
    raw: *mut std::ffi::c_void,
    name: &'static CStr,
    destructor: unsafe extern "C" fn(*mut ffi::PyObject),
) -> PyResult<Bound<'py, PyCapsule>> {
    let ptr = NonNull::new(raw).expect("ManagedTensor's raw exports are never null");
    // SAFETY: per the contract; the name is static, as the capsule keeps a pointer to it.
    unsafe { PyCapsule::new_with_pointer_and_destructor(py, ptr, name, Some(destructor)) }
}

/// Runs a legacy tensor's deleter if no consumer took the capsule.
///
/// # Safety
///
/// Called by Python, with the interpreter attached, on a capsule made by `into_capsule`.
unsafe extern "C" fn destroy_legacy(capsule: *mut ffi::PyObject) {
    // SAFETY: `capsule` is a live capsule (Python calls this while freeing it); see
    // `unconsumed`. Its pointer is the `DLManagedTensor` of `into_capsule`.
    unsafe {
        if let Some(raw) = unconsumed(capsule, DLTENSOR) {
            release_legacy(raw.cast());
        }
    }
}

/// Runs a versioned tensor's deleter if no consumer took the capsule.
///
/// # Safety
///
/// As [`destroy_legacy`].
unsafe extern "C" fn destroy_versioned(capsule: *mut ffi::PyObject) {
    // SAFETY: as in `destroy_legacy`, for the `DLManagedTensorVersioned` of `into_capsule`.
    unsafe {
        if let Some(raw) = unconsumed(capsule, DLTENSOR_VERSIONED) {
            release_versioned(raw.cast());
        }
    }
}

/// The pointer of `capsule` if it still has the unconsumed `name`: a consumed capsule
/// has been renamed and is left alone (its consumer calls the deleter).
///
/// # Safety
///
/// `capsule` is a live capsule object, with the interpreter attached.
unsafe fn unconsumed(capsule: *mut ffi::PyObject, name: &CStr) -> Option<*mut std::ffi::c_void> {
    // SAFETY: per the contract; `PyCapsule_IsValid` sets no error, and `GetPointer` is
    // called only with the name the capsule has.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, name.as_ptr()) != 1 {
            return None;
        }
        let raw = ffi::PyCapsule_GetPointer(capsule, name.as_ptr());
        (!raw.is_null()).then_some(raw)
    }
}

/// Calls a legacy tensor's deleter.
///
/// # Safety
///
/// `raw` is live and this is its one deleter call.
unsafe fn release_legacy(raw: *mut DLManagedTensor) {
    // SAFETY: per the contract.
    unsafe {
        if let Some(deleter) = (*raw).deleter {
            deleter(raw);
        }
    }
}

/// Calls a versioned tensor's deleter.
///
/// # Safety
///
/// `raw` is live and this is its one deleter call.
unsafe fn release_versioned(raw: *mut DLManagedTensorVersioned) {
    // SAFETY: per the contract.
    unsafe {
        if let Some(deleter) = (*raw).deleter {
            deleter(raw);
        }
    }
}
