//! `Loader(indices=...)`: the record indices a loader draws from, taken from any iterable
//! of ints (a list, a `range`, a NumPy or torch integer array), each checked by position.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyList, PyRange, PyString, PyTuple};

/// The indices of `value` (`None`: every record). Arrays are turned into a list first
/// (`tolist()`: Python ints at once, not one array scalar per element).
///
/// # Errors
///
/// `TypeError` for a text, something not iterable, or an element that is not an int (a
/// bool, a float), naming its position; `ValueError` for a negative element or one past
/// 2⁶⁴. An index past the dataset is the builder's `StokerError`-free `ValueError`.
pub(crate) fn indices(value: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u64>>> {
    if value.is_none() {
        return Ok(None);
    }
    let kind = value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default();
    let not_a_list = || {
        PyTypeError::new_err(format!(
            "indices= takes a sequence of record indices (ints: a list, a range, an integer array), not {kind}"
        ))
    };
    if value.is_instance_of::<PyString>()
        || value.is_instance_of::<PyBytes>()
        || value.is_instance_of::<PyByteArray>()
    {
        return Err(not_a_list());
    }
    let plain = value.is_instance_of::<PyList>()
        || value.is_instance_of::<PyTuple>()
        || value.is_instance_of::<PyRange>();
    let items = match value.getattr("tolist") {
        Ok(tolist) if !plain && tolist.is_callable() => tolist.call0()?,
        _ => value.clone(),
    };
    let iter = items.try_iter().map_err(|_| not_a_list())?;
    let mut out = Vec::with_capacity(items.len().unwrap_or(0));
    for (at, item) in iter.enumerate() {
        let item = item?;
        if item.is_instance_of::<PyBool>() {
            return Err(PyTypeError::new_err(format!(
                "indices[{at}] is a bool, not a record index (an int)"
            )));
        }
        match item.extract::<u64>() {
            Ok(i) => out.push(i),
            Err(_) => return Err(element_error(&item, at)),
        }
    }
    Ok(Some(out))
}

/// Why element `at` is no record index.
fn element_error(item: &Bound<'_, PyAny>, at: usize) -> PyErr {
    let py = item.py();
    let int = py
        .import("operator")
        .and_then(|op| op.call_method1("index", (item,)));
    match int {
        Ok(int) if int.lt(0).unwrap_or(false) => PyValueError::new_err(format!(
            "indices[{at}] is {int}: record indices count from 0"
        )),
        Ok(int) => PyValueError::new_err(format!(
            "indices[{at}] is {int}, past any dataset (2^64 records)"
        )),
        Err(_) => {
            let kind = item
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default();
            PyTypeError::new_err(format!(
                "indices[{at}] is a {kind}, not a record index (an int)"
            ))
        }
    }
}
