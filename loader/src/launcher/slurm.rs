//! Slurm's variables: a job step's tasks (`srun`), and the batch step, which is one
//! process whatever the job's task count.

use super::env::{EnvProblem, Launcher};
use super::vars::{Found, Get, Local, Reading, Vars};
use crate::error::LoaderError;

/// The lists of tasks per node, the step's first.
const LISTS: [&str; 3] = [
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
];

/// Whether this process is a task of a job step (`srun`), which sets `SLURM_STEP_ID`
/// (and the older `SLURM_STEPID`) for every step; the batch step sets neither.
pub(super) fn in_step(get: Get<'_>) -> bool {
    get("SLURM_STEP_ID").is_some() || get("SLURM_STEPID").is_some()
}

/// The variable that holds the step's task count: `SLURM_STEP_NUM_TASKS`, else the
/// job's `SLURM_NTASKS`.
pub(super) fn world_name(get: Get<'_>) -> &'static str {
    if get("SLURM_STEP_NUM_TASKS").is_some() {
        "SLURM_STEP_NUM_TASKS"
    } else {
        "SLURM_NTASKS"
    }
}

/// Reads Slurm's variables: absent without `SLURM_PROCID`; one process (with a note
/// when the job has more than one task) in the batch step; else the step's figures.
///
/// # Errors
///
/// A local variable that is not an integer, `SLURM_LOCALID` without a tasks-per-node
/// list (or the reverse), or a list without an entry for this node. Problems with
/// `SLURM_PROCID` and the task count are kept in [`Found::global`].
pub(super) fn read(get: Get<'_>) -> Result<Reading<'_>, LoaderError> {
    if get("SLURM_PROCID").is_none() {
        return Ok(Reading::Absent);
    }
    if !in_step(get) {
        // A PMIx launcher started inside the batch script (prterun) describes this
        // process: the PMIx reader after this one takes it. (Hydra's PMI_RANK is read
        // before Slurm.)
        if get("PMIX_RANK").is_some() {
            return Ok(Reading::Absent);
        }
        // A batch script that runs the program directly: one process, although the
        // job's SLURM_NTASKS (inherited, with SLURM_PROCID=0) may count many.
        let tasks = get("SLURM_NTASKS").unwrap_or_default();
        let many = tasks
            .trim()
            .parse::<u64>()
            .map_or(!tasks.is_empty(), |n| n > 1);
        let note = many.then(|| {
            format!(
                "Slurm batch step, no srun: one process (the job's SLURM_NTASKS={tasks:?} \
                 counts tasks that only `srun` starts; start each with `srun` to load one \
                 slice per task)"
            )
        });
        return Ok(Reading::Alone(note));
    }
    let vars = Vars::new(Launcher::Slurm, get);
    let global = vars.pair("SLURM_PROCID", world_name(get));
    let local = local(&vars, get)?;
    Ok(Reading::Found(Found {
        vars,
        global,
        local,
    }))
}

/// Slurm's local rank (`SLURM_LOCALID`) and the tasks on this node: the first of
/// [`LISTS`] that is set, at `SLURM_NODEID` (0 when unset).
fn local(vars: &Vars<'_>, get: Get<'_>) -> Result<Local, LoaderError> {
    let list = LISTS.iter().find_map(|&name| get(name).map(|v| (name, v)));
    let (local_rank, (list_name, list)) = match (vars.int("SLURM_LOCALID")?, list) {
        (None, None) => return Ok(Local::Unset("SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE")),
        (Some(rank), Some(list)) => (rank, list),
        (Some(_), None) => {
            let [a, b, c] = LISTS;
            return Err(vars.error(EnvProblem::Incomplete, &["SLURM_LOCALID", a, b, c]));
        }
        (None, Some((name, _))) => {
            return Err(vars.error(EnvProblem::Incomplete, &["SLURM_LOCALID", name]))
        }
    };
    let node = vars.int("SLURM_NODEID")?.unwrap_or(0);
    let tasks = tasks_on_node(&list, node)
        .ok_or_else(|| vars.error(EnvProblem::BadTasksPerNode, &[list_name, "SLURM_NODEID"]))?;
    Ok(Local::Both(
        ("SLURM_LOCALID", local_rank),
        (list_name, tasks),
    ))
}

/// The entry for node `node` of a Slurm tasks-per-node list: comma-separated
/// counts, each optionally repeated as `count(xN)` (`"4(x2),3"` is 4, 4, 3).
///
/// # Examples
///
/// ```
/// use stoker_loader::launcher::tasks_on_node;
/// assert_eq!(tasks_on_node("8", 0), Some(8));
/// assert_eq!(tasks_on_node("4(x2),3", 1), Some(4));
/// assert_eq!(tasks_on_node("4(x2),3", 2), Some(3));
/// assert_eq!(tasks_on_node("4(x2),3", 3), None);
/// assert_eq!(tasks_on_node("four", 0), None);
/// ```
pub fn tasks_on_node(list: &str, node: u64) -> Option<u64> {
    let mut first = 0u64;
    for entry in list.trim().split(',') {
        let entry = entry.trim();
        let (count, repeat) = match entry.split_once('(') {
            Some((count, rest)) => {
                let n = rest.strip_prefix('x')?.strip_suffix(')')?;
                (count, n.parse::<u64>().ok()?)
            }
            None => (entry, 1),
        };
        let count: u64 = count.parse().ok()?;
        if repeat == 0 {
            return None;
        }
        if node < first.saturating_add(repeat) {
            return Some(count);
        }
        first = first.saturating_add(repeat);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_per_node_lists_parse_with_repeats() {
        assert_eq!(tasks_on_node("2(x3),1", 0), Some(2));
        assert_eq!(tasks_on_node("2(x3),1", 2), Some(2));
        assert_eq!(tasks_on_node("2(x3),1", 3), Some(1));
        assert_eq!(tasks_on_node("2(x3),1", 4), None);
        assert_eq!(tasks_on_node("2(x0)", 0), None);
        assert_eq!(tasks_on_node("2(3)", 0), None);
        assert_eq!(tasks_on_node("2(x3", 0), None);
        assert_eq!(tasks_on_node("", 0), None);
    }
}
