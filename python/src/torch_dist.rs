//! The check of a loader placed from the launcher's variables against an initialized
//! `torch.distributed`.
//!
//! Processes started without a launcher (`torch.multiprocessing.spawn`, a notebook's
//! `mp.Process`) that call `init_process_group(rank=..., world_size=...)` themselves leave
//! no variable saying so, and a loader built there without `rank`/`world_size` is a single
//! process's: every rank reads the whole dataset in the same order, and DDP trains on
//! copies of the same batches without a word. `torch.distributed` knows better, so a
//! placement that disagrees with it is refused.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use stoker_loader::Placement;

/// `torch.distributed`'s rank and world size when this interpreter has imported and
/// initialized it; `None` otherwise, or when asking it fails (torch is never imported
/// here: a loader must not cost a CPU-only user the seconds that takes).
fn torch_placement(py: Python<'_>) -> Option<(u64, u64)> {
    let modules = py.import("sys").ok()?.getattr("modules").ok()?;
    let dist = modules
        .cast_into::<PyDict>()
        .ok()?
        .get_item("torch.distributed")
        .ok()??;
    let yes = |f: &str| {
        dist.call_method0(f)
            .and_then(|v| v.is_truthy())
            .unwrap_or(false)
    };
    if !yes("is_available") || !yes("is_initialized") {
        return None;
    }
    let rank = dist.call_method0("get_rank").ok()?.extract().ok()?;
    let world = dist.call_method0("get_world_size").ok()?.extract().ok()?;
    Some((rank, world))
}

/// Refuses `placement` (read from the environment: the caller gave no `rank` and
/// `world_size`) when an initialized `torch.distributed` gives this process another rank
/// or world size: at build, and again as an epoch starts (`at_epoch`), for a process
/// that built its loader before `init_process_group`.
pub(crate) fn check(py: Python<'_>, placement: Option<&Placement>, at_epoch: bool) -> PyResult<()> {
    let (Some(p), Some((rank, world))) = (placement, torch_placement(py)) else {
        return Ok(());
    };
    if (p.rank, p.world) == (rank, world) {
        return Ok(());
    }
    let consequence = if p.world == 1 {
        "every process would read the whole dataset in the same order"
    } else {
        "processes would read overlapping or missing shares of the dataset"
    };
    let when = if at_epoch {
        " (the loader was built before init_process_group: this epoch does not start)"
    } else {
        ""
    };
    Err(PyValueError::new_err(format!(
        "torch.distributed is initialized as rank {rank} of {world}, but the launcher's environment places this loader at {}{when}: {consequence}. Pass rank=torch.distributed.get_rank(), world_size=torch.distributed.get_world_size() (with this process's device=\"cuda:N\" and workers), or rank=0, world_size=1 to read everything in each process on purpose",
        p.describe()
    )))
}

/// The placement of a loader just built, when it was read from the launcher's variables
/// (`from_env`: the caller gave no rank and world size), after [`check`]ing it: kept for
/// the check as each epoch starts.
pub(crate) fn checked_at_build(
    py: Python<'_>,
    inner: &stoker_loader::Loader,
    from_env: bool,
) -> PyResult<Option<Arc<Placement>>> {
    let placement = if from_env {
        inner.stats().placement.map(Arc::new)
    } else {
        None
    };
    check(py, placement.as_deref(), false)?;
    Ok(placement)
}
