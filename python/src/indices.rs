//! `Loader(indices=...)`: the record indices a loader draws from, taken from any iterable
//! of ints (a list, a `range`, a NumPy or torch integer array), each checked by position
//! against the dataset as it is read.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyList, PyRange, PyString, PyTuple};

use crate::args::type_name;

/// The most indices a list may hold: 64 for every record (an index may repeat, to draw
/// it more often), or 2²⁴, whichever is more. Past it the list is a mistake (an endless
/// iterator, a `range` over another dataset) that would take all the memory.
fn most(records: u64) -> u64 {
    records.saturating_mul(64).max(1 << 24)
}

/// Signals are looked at every this many indices: a long list stops at Ctrl-C.
const SIGNALS_EVERY: usize = 1 << 16;

/// The indices of `value` into a dataset of `records` (`None`: every record). Arrays are
/// turned into a list first (`tolist()`: Python ints at once, not one array scalar per
/// element).
///
/// # Errors
///
/// `TypeError` for a text, something not iterable, or an element that is not an int (a
/// bool, a float), naming its position; `ValueError` for an element that is negative or
/// not below `records`, at the first such one, or for more than [`most`] of them.
pub(crate) fn indices(
    value: Option<&Bound<'_, PyAny>>,
    records: u64,
) -> PyResult<Option<Vec<u64>>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    let kind = type_name(value);
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
    let most = most(records);
    // What the length says, within reason: it is checked below, one element at a time.
    let hint = items.len().unwrap_or(0).min(1 << 20);
    let mut out = Vec::with_capacity(hint);
    for (at, item) in iter.enumerate() {
        if at % SIGNALS_EVERY == SIGNALS_EVERY - 1 {
            value.py().check_signals()?;
        }
        if at as u64 >= most {
            return Err(PyValueError::new_err(format!(
                "indices= holds more than {most} indices (the larger of 64 for each of the dataset's {records} records and 2^24): an endless iterator?"
            )));
        }
        out.push(index(&item?, at, records)?);
    }
    Ok(Some(out))
}

/// Element `at` as a record index below `records`.
fn index(item: &Bound<'_, PyAny>, at: usize, records: u64) -> PyResult<u64> {
    if item.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "indices[{at}] is a bool, not a record index (an int; for a mask, give np.flatnonzero(mask))"
        )));
    }
    if let Ok(i) = item.extract::<u64>() {
        if i < records {
            return Ok(i);
        }
        return Err(past(at, &i.to_string(), records));
    }
    let int = item
        .py()
        .import("operator")
        .and_then(|op| op.call_method1("index", (item,)));
    Err(match int {
        Ok(int) if int.lt(0).unwrap_or(false) => PyValueError::new_err(format!(
            "indices[{at}] is {int}: record indices count from 0"
        )),
        Ok(int) => past(at, &int.to_string(), records),
        Err(_) => PyTypeError::new_err(format!(
            "indices[{at}] is a {}, not a record index (an int)",
            type_name(item)
        )),
    })
}

fn past(at: usize, index: &str, records: u64) -> PyErr {
    PyValueError::new_err(format!(
        "indices[{at}] is {index}, past the dataset's last record (it holds {records} records, 0..={})",
        records.saturating_sub(1)
    ))
}
