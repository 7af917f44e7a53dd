//! [`Placement`]: this process's place in its job, read from torchrun's or Slurm's
//! variables (or a single process when there are none).

use super::env::{EnvProblem, EnvVar, Launcher};
use crate::error::LoaderError;

/// This process's place in the job: global rank and world size (which slice of
/// every epoch it loads), and its local rank among the processes on this node
/// (which GPU it uses, how much of the node it takes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Placement {
    /// Where the figures came from.
    pub launcher: Launcher,
    /// This process's rank in the job, `< world`.
    pub rank: u64,
    /// Processes in the job, `≥ 1`.
    pub world: u64,
    /// This process's rank among the processes on this node, `< local_world`.
    pub local_rank: u64,
    /// Processes on this node, `1 ..= world`.
    pub local_world: u64,
}

impl Placement {
    /// One process alone: rank 0 of 1, local rank 0 of 1.
    ///
    /// # Examples
    ///
    /// ```
    /// let p = stoker_loader::launcher::Placement::single();
    /// assert_eq!((p.rank, p.world, p.local_rank, p.local_world), (0, 1, 0, 1));
    /// ```
    pub fn single() -> Self {
        Placement {
            launcher: Launcher::Single,
            rank: 0,
            world: 1,
            local_rank: 0,
            local_world: 1,
        }
    }

    /// Reads the placement from this process's environment ([`Placement::from_vars`]
    /// over `std::env::var`).
    ///
    /// # Errors
    ///
    /// As [`Placement::from_vars`].
    ///
    /// # Examples
    ///
    /// ```
    /// let p = stoker_loader::launcher::Placement::from_env()?;
    /// assert!(p.rank < p.world && p.local_rank < p.local_world);
    /// # Ok::<(), stoker_loader::LoaderError>(())
    /// ```
    pub fn from_env() -> Result<Self, LoaderError> {
        Placement::from_vars(|name| std::env::var(name).ok())
    }

    /// Reads the placement from the variables `get` returns (`None`: unset):
    ///
    /// 1. **torchrun**, when any of `RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
    ///    `LOCAL_WORLD_SIZE` is set: `RANK` and `WORLD_SIZE` are required; `LOCAL_RANK`
    ///    and `LOCAL_WORLD_SIZE` come together, and when both are absent (a launcher
    ///    that sets only the global pair) the job is taken to run on one node.
    /// 2. **Slurm**, when `SLURM_PROCID` is set (srun sets it for every task): the
    ///    world is `SLURM_STEP_NUM_TASKS` (this step's tasks), else `SLURM_NTASKS`;
    ///    the local rank is `SLURM_LOCALID`; the tasks on this node are
    ///    `SLURM_STEP_TASKS_PER_NODE`, else `SLURM_NTASKS_PER_NODE`, else
    ///    `SLURM_TASKS_PER_NODE` (lists like `4(x2),3`, one entry per node, taken at
    ///    `SLURM_NODEID`, 0 when unset). Without `SLURM_LOCALID` and any of these
    ///    lists the job is taken to run on one node.
    /// 3. Otherwise a **single** process.
    ///
    /// A batch script that runs the program directly (no `srun`) with more than one
    /// task sees its job's `SLURM_NTASKS` and `SLURM_PROCID=0` and is taken as rank 0
    /// of the job: start each task with `srun`.
    ///
    /// # Errors
    ///
    /// [`LoaderError::LauncherEnv`] naming the variables when a value is not a
    /// non-negative integer, a group is incomplete, a count is 0, a rank is not
    /// below its count, the node has more processes than the job, or a Slurm
    /// tasks-per-node list does not parse.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Self, LoaderError> {
        const TORCHRUN: [&str; 4] = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"];
        if TORCHRUN.iter().any(|name| get(name).is_some()) {
            let env = Env {
                launcher: Launcher::Torchrun,
                get: &get,
            };
            let global = env.pair("RANK", "WORLD_SIZE")?;
            let local = env.optional_pair("LOCAL_RANK", "LOCAL_WORLD_SIZE")?;
            return env.placement(global, local);
        }
        if get("SLURM_PROCID").is_some() {
            let env = Env {
                launcher: Launcher::Slurm,
                get: &get,
            };
            let world_name = if get("SLURM_STEP_NUM_TASKS").is_some() {
                "SLURM_STEP_NUM_TASKS"
            } else {
                "SLURM_NTASKS"
            };
            let global = env.pair("SLURM_PROCID", world_name)?;
            let local = env.slurm_local()?;
            return env.placement(global, local);
        }
        Ok(Placement::single())
    }

    /// `rank 3 of 8, local rank 3 of 8 (torchrun)`.
    pub fn describe(&self) -> String {
        format!(
            "rank {} of {}, local rank {} of {} ({})",
            self.rank, self.world, self.local_rank, self.local_world, self.launcher
        )
    }
}

impl Default for Placement {
    fn default() -> Self {
        Placement::single()
    }
}

/// A launcher's variables, read through `get`.
struct Env<'a, F: Fn(&str) -> Option<String>> {
    launcher: Launcher,
    get: &'a F,
}

/// An index and its count, each with the variable it came from.
type Counted = ((&'static str, u64), (&'static str, u64));

impl<F: Fn(&str) -> Option<String>> Env<'_, F> {
    fn var(&self, name: &'static str) -> EnvVar {
        EnvVar {
            name,
            value: (self.get)(name),
        }
    }

    fn error(&self, problem: EnvProblem, names: &[&'static str]) -> LoaderError {
        LoaderError::LauncherEnv {
            launcher: self.launcher,
            problem,
            variables: names.iter().map(|n| self.var(n)).collect(),
        }
    }

    /// `name`'s value as an integer, `None` when unset.
    fn int(&self, name: &'static str) -> Result<Option<u64>, LoaderError> {
        match (self.get)(name) {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| self.error(EnvProblem::NotAnInteger, &[name])),
        }
    }

    /// Two variables that must both be set.
    fn pair(&self, index: &'static str, count: &'static str) -> Result<Counted, LoaderError> {
        match self.optional_pair(index, count)? {
            Some(pair) => Ok(pair),
            None => Err(self.error(EnvProblem::Incomplete, &[index, count])),
        }
    }

    /// Two variables that are both set or both unset.
    fn optional_pair(
        &self,
        index: &'static str,
        count: &'static str,
    ) -> Result<Option<Counted>, LoaderError> {
        match (self.int(index)?, self.int(count)?) {
            (Some(i), Some(n)) => Ok(Some(((index, i), (count, n)))),
            (None, None) => Ok(None),
            _ => Err(self.error(EnvProblem::Incomplete, &[index, count])),
        }
    }

    /// Slurm's local rank and the tasks on this node.
    fn slurm_local(&self) -> Result<Option<Counted>, LoaderError> {
        const LISTS: [&str; 3] = [
            "SLURM_STEP_TASKS_PER_NODE",
            "SLURM_NTASKS_PER_NODE",
            "SLURM_TASKS_PER_NODE",
        ];
        let list = LISTS
            .iter()
            .find_map(|&name| (self.get)(name).map(|v| (name, v)));
        let local_rank = self.int("SLURM_LOCALID")?;
        let (list_name, list) = match (local_rank, list) {
            (None, None) => return Ok(None),
            (Some(_), Some(list)) => list,
            (Some(_), None) => {
                return Err(self.error(
                    EnvProblem::Incomplete,
                    &[
                        "SLURM_LOCALID",
                        "SLURM_STEP_TASKS_PER_NODE",
                        "SLURM_TASKS_PER_NODE",
                    ],
                ))
            }
            (None, Some((name, _))) => {
                return Err(self.error(EnvProblem::Incomplete, &["SLURM_LOCALID", name]))
            }
        };
        let node = self.int("SLURM_NODEID")?.unwrap_or(0);
        let tasks = tasks_on_node(&list, node)
            .ok_or_else(|| self.error(EnvProblem::BadTasksPerNode, &[list_name, "SLURM_NODEID"]))?;
        Ok(Some((
            ("SLURM_LOCALID", local_rank.unwrap_or(0)),
            (list_name, tasks),
        )))
    }

    /// Checks the figures against each other.
    fn placement(
        &self,
        ((rank_name, rank), (world_name, world)): Counted,
        local: Option<Counted>,
    ) -> Result<Placement, LoaderError> {
        let ((local_rank_name, local_rank), (local_world_name, local_world)) =
            local.unwrap_or((("", rank), ("", world)));
        let check = |problem, names: &[&'static str]| {
            let names: Vec<&'static str> =
                names.iter().copied().filter(|n| !n.is_empty()).collect();
            Err(self.error(problem, &names))
        };
        if world == 0 {
            return check(EnvProblem::ZeroCount, &[world_name]);
        }
        if local_world == 0 {
            return check(EnvProblem::ZeroCount, &[local_world_name]);
        }
        if rank >= world {
            return check(EnvProblem::IndexNotBelowCount, &[rank_name, world_name]);
        }
        if local_rank >= local_world {
            return check(
                EnvProblem::IndexNotBelowCount,
                &[local_rank_name, local_world_name],
            );
        }
        if local_world > world {
            return check(
                EnvProblem::LocalWorldAboveWorld,
                &[local_world_name, world_name],
            );
        }
        Ok(Placement {
            launcher: self.launcher,
            rank,
            world,
            local_rank,
            local_world,
        })
    }
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
    use std::collections::HashMap;

    use super::*;

    fn placement(vars: &[(&str, &str)]) -> Result<Placement, LoaderError> {
        let env: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Placement::from_vars(|name| env.get(name).cloned())
    }

    /// The error's launcher, problem and variable names.
    fn problem(vars: &[(&str, &str)]) -> (Launcher, EnvProblem, Vec<&'static str>) {
        match placement(vars) {
            Err(LoaderError::LauncherEnv {
                launcher,
                problem,
                variables,
            }) => (
                launcher,
                problem,
                variables.iter().map(|v| v.name).collect(),
            ),
            other => panic!("{vars:?}: expected LauncherEnv, got {other:?}"),
        }
    }

    #[test]
    fn no_launcher_variables_is_a_single_process() {
        assert_eq!(placement(&[]).unwrap(), Placement::single());
        assert_eq!(
            placement(&[("SLURM_JOB_ID", "7"), ("PATH", "/bin")]).unwrap(),
            Placement::single()
        );
    }

    #[test]
    fn torchrun_gives_rank_world_and_local_figures() {
        let p = placement(&[
            ("RANK", "13"),
            ("WORLD_SIZE", "16"),
            ("LOCAL_RANK", "5"),
            ("LOCAL_WORLD_SIZE", "8"),
        ])
        .unwrap();
        assert_eq!(
            p,
            Placement {
                launcher: Launcher::Torchrun,
                rank: 13,
                world: 16,
                local_rank: 5,
                local_world: 8
            }
        );
        // Only the global pair: one node.
        let p = placement(&[("RANK", "1"), ("WORLD_SIZE", "3")]).unwrap();
        assert_eq!((p.local_rank, p.local_world), (1, 3));
        // Surrounding whitespace is tolerated.
        assert_eq!(
            placement(&[("RANK", " 2 "), ("WORLD_SIZE", "4\n")])
                .unwrap()
                .rank,
            2
        );
    }

    #[test]
    fn torchrun_wins_over_slurm_when_both_are_set() {
        // torchrun started inside an srun step: torchrun's processes are the ranks.
        let p = placement(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "3"),
            ("LOCAL_WORLD_SIZE", "8"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
        ])
        .unwrap();
        assert_eq!((p.launcher, p.rank, p.world), (Launcher::Torchrun, 3, 8));
    }

    #[test]
    fn slurm_reads_the_step_and_the_tasks_on_this_node() {
        let p = placement(&[
            ("SLURM_PROCID", "9"),
            ("SLURM_NTASKS", "16"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NODEID", "1"),
            ("SLURM_TASKS_PER_NODE", "8(x2)"),
        ])
        .unwrap();
        assert_eq!(
            p,
            Placement {
                launcher: Launcher::Slurm,
                rank: 9,
                world: 16,
                local_rank: 1,
                local_world: 8
            }
        );
        // The step's own figures take precedence over the job's.
        let p = placement(&[
            ("SLURM_PROCID", "6"),
            ("SLURM_NTASKS", "32"),
            ("SLURM_STEP_NUM_TASKS", "11"),
            ("SLURM_LOCALID", "2"),
            ("SLURM_NODEID", "2"),
            ("SLURM_TASKS_PER_NODE", "16(x2)"),
            ("SLURM_STEP_TASKS_PER_NODE", "4(x2),3"),
        ])
        .unwrap();
        assert_eq!(
            (p.rank, p.world, p.local_rank, p.local_world),
            (6, 11, 2, 3)
        );
        // --ntasks-per-node, a single number.
        let p = placement(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NTASKS_PER_NODE", "8"),
        ])
        .unwrap();
        assert_eq!(p.local_world, 8);
        // No local figures at all: one node.
        let p = placement(&[("SLURM_PROCID", "2"), ("SLURM_NTASKS", "4")]).unwrap();
        assert_eq!((p.local_rank, p.local_world), (2, 4));
    }

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

    #[test]
    fn inconsistent_variables_are_errors_that_name_them() {
        use EnvProblem::*;
        let t = Launcher::Torchrun;
        let s = Launcher::Slurm;
        type Vars = Vec<(&'static str, &'static str)>;
        type Found = (Launcher, EnvProblem, Vec<&'static str>);
        let cases: Vec<(Vars, Found)> = vec![
            (
                vec![("RANK", "8"), ("WORLD_SIZE", "8")],
                (t, IndexNotBelowCount, vec!["RANK", "WORLD_SIZE"]),
            ),
            (
                vec![("RANK", "1")],
                (t, Incomplete, vec!["RANK", "WORLD_SIZE"]),
            ),
            (
                vec![("LOCAL_RANK", "1")],
                (t, Incomplete, vec!["RANK", "WORLD_SIZE"]),
            ),
            (
                vec![("RANK", "one"), ("WORLD_SIZE", "3")],
                (t, NotAnInteger, vec!["RANK"]),
            ),
            (
                vec![("RANK", "-1"), ("WORLD_SIZE", "3")],
                (t, NotAnInteger, vec!["RANK"]),
            ),
            (
                vec![("RANK", "0"), ("WORLD_SIZE", "0")],
                (t, ZeroCount, vec!["WORLD_SIZE"]),
            ),
            (
                vec![("RANK", "0"), ("WORLD_SIZE", "8"), ("LOCAL_RANK", "0")],
                (t, Incomplete, vec!["LOCAL_RANK", "LOCAL_WORLD_SIZE"]),
            ),
            (
                vec![
                    ("RANK", "4"),
                    ("WORLD_SIZE", "8"),
                    ("LOCAL_RANK", "4"),
                    ("LOCAL_WORLD_SIZE", "4"),
                ],
                (
                    t,
                    IndexNotBelowCount,
                    vec!["LOCAL_RANK", "LOCAL_WORLD_SIZE"],
                ),
            ),
            (
                vec![
                    ("RANK", "0"),
                    ("WORLD_SIZE", "4"),
                    ("LOCAL_RANK", "0"),
                    ("LOCAL_WORLD_SIZE", "8"),
                ],
                (
                    t,
                    LocalWorldAboveWorld,
                    vec!["LOCAL_WORLD_SIZE", "WORLD_SIZE"],
                ),
            ),
            (
                vec![
                    ("RANK", "0"),
                    ("WORLD_SIZE", "4"),
                    ("LOCAL_RANK", "0"),
                    ("LOCAL_WORLD_SIZE", "0"),
                ],
                (t, ZeroCount, vec!["LOCAL_WORLD_SIZE"]),
            ),
            (
                vec![("SLURM_PROCID", "0")],
                (s, Incomplete, vec!["SLURM_PROCID", "SLURM_NTASKS"]),
            ),
            (
                vec![("SLURM_PROCID", "4"), ("SLURM_NTASKS", "4")],
                (s, IndexNotBelowCount, vec!["SLURM_PROCID", "SLURM_NTASKS"]),
            ),
            (
                vec![
                    ("SLURM_PROCID", "0"),
                    ("SLURM_NTASKS", "8"),
                    ("SLURM_LOCALID", "0"),
                ],
                (
                    s,
                    Incomplete,
                    vec![
                        "SLURM_LOCALID",
                        "SLURM_STEP_TASKS_PER_NODE",
                        "SLURM_TASKS_PER_NODE",
                    ],
                ),
            ),
            (
                vec![
                    ("SLURM_PROCID", "0"),
                    ("SLURM_NTASKS", "8"),
                    ("SLURM_LOCALID", "0"),
                    ("SLURM_NODEID", "2"),
                    ("SLURM_TASKS_PER_NODE", "4(x2)"),
                ],
                (
                    s,
                    BadTasksPerNode,
                    vec!["SLURM_TASKS_PER_NODE", "SLURM_NODEID"],
                ),
            ),
            (
                vec![
                    ("SLURM_PROCID", "0"),
                    ("SLURM_NTASKS", "8"),
                    ("SLURM_LOCALID", "4"),
                    ("SLURM_STEP_TASKS_PER_NODE", "4(x2)"),
                ],
                (
                    s,
                    IndexNotBelowCount,
                    vec!["SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE"],
                ),
            ),
            (
                vec![("SLURM_PROCID", "x"), ("SLURM_NTASKS", "8")],
                (s, NotAnInteger, vec!["SLURM_PROCID"]),
            ),
        ];
        for (vars, want) in cases {
            assert_eq!(problem(&vars), want, "{vars:?}");
        }
        // The message names the variables and their values.
        let err = placement(&[("RANK", "8"), ("WORLD_SIZE", "8")]).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("torchrun")
                && text.contains("RANK=\"8\"")
                && text.contains("WORLD_SIZE=\"8\""),
            "{text}"
        );
        let err = placement(&[("RANK", "1")]).unwrap_err().to_string();
        assert!(err.contains("WORLD_SIZE unset"), "{err}");
    }
}
