//! [`Placement`]: this process's place in its job, read from its launcher's variables
//! (torchrun's, Horovod's, MPI's, Slurm's), or a single process when there are none.

use super::env::{EnvProblem, Launcher};
use super::vars::{Fig, Found, Get, Local, Reading};
use super::{mpi, slurm, torchrun};
use crate::error::LoaderError;

/// This process's place in the job: global rank and world size (which slice of
/// every epoch it loads), and its local rank among the processes on this node
/// (which GPU it uses, how much of the node it takes).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// What the reading had to assume or could not use, in words for the user (a
    /// local count estimated, a Slurm batch step taken as one process, the caller's
    /// rank and world standing in for missing ones); `None` when the variables said
    /// everything. In the stats JSON it is `placement.note` (`null` when `None`).
    #[serde(default)]
    pub note: Option<String>,
}

/// A launcher's reader ([`Reading::Absent`] when its variables are not set).
type Reader = for<'a> fn(Get<'a>) -> Result<Reading<'a>, LoaderError>;

/// The launchers in the order they are asked: the innermost launcher first, since a
/// process inherits the variables of the launchers around it (`mpirun` inside an
/// sbatch script sees the batch step's `SLURM_PROCID=0`, torchrun inside `srun`
/// sees the task's), and its own describe this process.
const READERS: [Reader; 7] = [
    torchrun::read,
    mpi::horovod,
    mpi::open_mpi,
    mpi::mvapich,
    mpi::mpich,
    slurm::read,
    mpi::pmix,
];

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
            note: None,
        }
    }

    /// Reads the placement from this process's environment ([`Placement::from_vars`]
    /// over `std::env::var_os`; a value that is not UTF-8 is read with its bad bytes
    /// replaced, so it is reported as not an integer rather than taken as unset).
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
        Placement::from_vars(env_var)
    }

    /// [`Placement::with_ranks_from_vars`] over this process's environment, as
    /// [`Placement::from_env`] reads it.
    ///
    /// # Errors
    ///
    /// As [`Placement::with_ranks_from_vars`].
    pub fn with_ranks_from_env(rank: u64, world: u64) -> Result<Self, LoaderError> {
        Placement::with_ranks_from_vars(rank, world, env_var)
    }

    /// Reads the placement from the variables `get` returns (`None`: unset), asking
    /// the launchers in this order and taking the first whose variables are set:
    ///
    /// 1. **torchrun** (and DeepSpeed, Lightning, scripts that export the same names),
    ///    when any of `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE` is set:
    ///    `RANK` and `WORLD_SIZE` are required; the local rank is `LOCAL_RANK` and the
    ///    processes on this node `LOCAL_WORLD_SIZE`, else `LOCAL_SIZE` (DeepSpeed).
    /// 2. **Horovod** (`horovodrun --gloo`), when any of `HOROVOD_RANK`,
    ///    `HOROVOD_SIZE`, `HOROVOD_LOCAL_RANK`, `HOROVOD_LOCAL_SIZE` is set: the first
    ///    two required, the last two together or not at all.
    /// 3. **Open MPI** (`mpirun`), the same with `OMPI_COMM_WORLD_RANK`,
    ///    `OMPI_COMM_WORLD_SIZE`, `OMPI_COMM_WORLD_LOCAL_RANK`,
    ///    `OMPI_COMM_WORLD_LOCAL_SIZE`.
    /// 4. **MVAPICH** (`mpirun_rsh`), the same with `MV2_COMM_WORLD_RANK`,
    ///    `MV2_COMM_WORLD_SIZE`, `MV2_COMM_WORLD_LOCAL_RANK`,
    ///    `MV2_COMM_WORLD_LOCAL_SIZE`.
    /// 5. **MPICH / Intel MPI / MVAPICH** (Hydra's `mpiexec`), when `PMI_RANK` or `PMI_SIZE`
    ///    is set: both required; local figures `MPI_LOCALRANKID` and
    ///    `MPI_LOCALNRANKS`, together or not at all. Without them, inside a Slurm step
    ///    with the same rank and size (`srun --mpi=pmi2` sets `PMI_RANK` too), Slurm
    ///    is read instead.
    /// 6. **Slurm**, when `SLURM_PROCID` is set. In a job step (`srun` sets
    ///    `SLURM_STEP_ID`, or the older `SLURM_STEPID`): the world is
    ///    `SLURM_STEP_NUM_TASKS` (this step's tasks), else `SLURM_NTASKS`; the local
    ///    rank is `SLURM_LOCALID`; the tasks on this node are
    ///    `SLURM_STEP_TASKS_PER_NODE`, else `SLURM_NTASKS_PER_NODE`, else
    ///    `SLURM_TASKS_PER_NODE` (lists like `4(x2),3`, one entry per node, taken at
    ///    `SLURM_NODEID`, 0 when unset). Without a step id this is the batch script
    ///    itself, one process however many tasks the job has: a single process, with
    ///    a note when `SLURM_NTASKS` is more than 1 (start each task with `srun`).
    /// 7. **PMIx**: `PMIX_RANK` alone says a rank but not the job's size: an error.
    /// 8. Otherwise a **single** process.
    ///
    /// The innermost launcher comes first because a process inherits the variables
    /// of every launcher around it: `mpirun` in an sbatch script passes the batch
    /// step's `SLURM_PROCID=0` and `SLURM_NTASKS` to every rank.
    ///
    /// When a launcher gives a local rank but no count of the processes on this node
    /// (`LOCAL_RANK` without `LOCAL_WORLD_SIZE` or `LOCAL_SIZE`), all the job's
    /// processes are taken to share this node: the count only divides the node's
    /// cores and pinned memory ([`super::NodeShare`]), and a count too large leaves
    /// each process less than its share while one too small would let the node's
    /// processes together pin more memory than it has. When it gives no local rank
    /// at all, the job is taken to run on this node alone (local figures = global
    /// ones). Either guess is said in [`Placement::note`].
    ///
    /// # Errors
    ///
    /// [`LoaderError::LauncherEnv`] naming the variables when a value is not a
    /// non-negative integer, a required variable is missing or a pair is half set,
    /// a count is 0, a rank is not below its count, the node has more processes
    /// than the job, a Slurm tasks-per-node list does not parse, or a rank comes
    /// without any count (`PMIX_RANK`).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use stoker_loader::launcher::{Launcher, Placement};
    /// // DeepSpeed's launcher: LOCAL_SIZE rather than LOCAL_WORLD_SIZE.
    /// let env: HashMap<&str, &str> =
    ///     [("RANK", "9"), ("WORLD_SIZE", "16"), ("LOCAL_RANK", "1"), ("LOCAL_SIZE", "8")].into();
    /// let p = Placement::from_vars(|name| env.get(name).map(|v| v.to_string()))?;
    /// assert_eq!((p.launcher, p.rank, p.world, p.local_rank, p.local_world),
    ///            (Launcher::Torchrun, 9, 16, 1, 8));
    /// assert_eq!(p.note, None);
    /// # Ok::<(), stoker_loader::LoaderError>(())
    /// ```
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Self, LoaderError> {
        read(&get, None)
    }

    /// Like [`Placement::from_vars`], for a caller that gives this process's rank and
    /// world itself (the loader's [`crate::LoaderBuilder::distributed`], or its
    /// default, rank 0 of 1): the launcher's local figures are still read, since the
    /// GPU and the node share follow them, but its rank and world are not needed.
    /// When they are missing or unusable (Lightning sets `LOCAL_RANK` and
    /// `WORLD_SIZE` but no `RANK`) the placement takes `rank` and `world` instead,
    /// its world raised to the local count if below it, and [`Placement::note`] says
    /// why.
    ///
    /// # Errors
    ///
    /// As [`Placement::from_vars`], except for problems with the launcher's rank and
    /// world alone: local figures that do not parse or contradict each other (or the
    /// launcher's own world, where its rank and world are usable) still fail, since the
    /// device would follow them. Where the launcher's rank is missing, its world is not
    /// held against the local figures: a local count above it only makes this process's
    /// share of the node smaller.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use stoker_loader::launcher::{Launcher, Placement};
    /// // Lightning's DDP launcher: no RANK.
    /// let env: HashMap<&str, &str> =
    ///     [("LOCAL_RANK", "1"), ("NODE_RANK", "0"), ("WORLD_SIZE", "4")].into();
    /// let get = |name: &str| env.get(name).map(|v| v.to_string());
    /// assert!(Placement::from_vars(get).is_err());
    /// let p = Placement::with_ranks_from_vars(1, 4, get)?;
    /// assert_eq!((p.launcher, p.rank, p.world, p.local_rank), (Launcher::Torchrun, 1, 4, 1));
    /// assert!(p.note.unwrap().contains("LOCAL_RANK without RANK"));
    /// # Ok::<(), stoker_loader::LoaderError>(())
    /// ```
    pub fn with_ranks_from_vars(
        rank: u64,
        world: u64,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, LoaderError> {
        read(&get, Some((rank, world)))
    }

    /// `rank 3 of 8, local rank 3 of 8 (torchrun)`, the note after the launcher when
    /// there is one: `rank 0 of 1, local rank 0 of 1 (single: Slurm batch step, ...)`.
    pub fn describe(&self) -> String {
        let note = self
            .note
            .as_deref()
            .map_or(String::new(), |n| format!(": {n}"));
        format!(
            "rank {} of {}, local rank {} of {} ({}{note})",
            self.rank, self.world, self.local_rank, self.local_world, self.launcher
        )
    }
}

impl Default for Placement {
    fn default() -> Self {
        Placement::single()
    }
}

/// A variable of this process's environment, lossily decoded when not UTF-8.
fn env_var(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

/// Asks the launchers in [`READERS`] order; `given`: the caller's rank and world.
fn read(get: Get<'_>, given: Option<(u64, u64)>) -> Result<Placement, LoaderError> {
    for reader in READERS {
        match reader(get)? {
            Reading::Absent => continue,
            Reading::Found(found) => return resolve(found, given),
            Reading::Alone(note) => {
                return Ok(match given {
                    // A caller that gave its rank and world chose them: nothing to say.
                    Some(given) => shared_by_caller(given),
                    None => Placement {
                        note,
                        ..Placement::single()
                    },
                });
            }
        }
    }
    Ok(given.map_or_else(Placement::single, shared_by_caller))
}

/// The caller's `(rank, world)` where no launcher says which processes share this node
/// (`torch.multiprocessing.spawn`, a Lightning script's first process before its launcher
/// sets anything): the `world` processes are taken to share it, local rank = rank, so each
/// takes `1/world` of its cores and pinned memory and `Device::Auto` its GPU `rank`. Each
/// took the whole node before: 8 processes ran 8 times the cores' threads, and would have
/// pinned 8 times half the memory, all on GPU 0.
fn shared_by_caller((rank, world): (u64, u64)) -> Placement {
    let world = world.max(1);
    // Out-of-range figures fail at the sampler, which names them.
    let rank = rank.min(world - 1);
    Placement {
        launcher: Launcher::Single,
        rank,
        world,
        local_rank: rank,
        local_world: world,
        note: None,
    }
}

/// Checks a launcher's figures against each other (the caller's rank and world,
/// `given`, standing in for the launcher's when those are unusable) and notes what
/// had to be assumed.
fn resolve(found: Found<'_>, given: Option<(u64, u64)>) -> Result<Placement, LoaderError> {
    let Found {
        vars,
        global,
        local,
    } = found;
    let mut notes = Vec::new();
    let global = global.and_then(|((rank_name, rank), (world_name, world))| {
        if world == 0 {
            Err(vars.error(EnvProblem::ZeroCount, &[world_name]))
        } else if rank >= world {
            Err(vars.error(EnvProblem::IndexNotBelowCount, &[rank_name, world_name]))
        } else {
            Ok(((rank_name, rank), (world_name, world)))
        }
    });
    let (from_caller, (rank, world)) = match (global, given) {
        (Ok(global), _) => (false, global),
        (Err(e), None) => return Err(e),
        (Err(e), Some((rank, world))) => {
            let why = match e {
                // The expected case with rank and world given: not a fault to fix.
                LoaderError::LauncherEnv {
                    problem: EnvProblem::NoGlobalRank,
                    launcher,
                    ..
                } => format!(
                    "{launcher} environment: LOCAL_RANK without RANK (as PyTorch Lightning's own launchers start processes)"
                ),
                e => e.to_string(),
            };
            notes.push(format!(
                "{why}; rank and world are the caller's ({rank} of {world})"
            ));
            // Out-of-range figures fail at the sampler, which names them.
            let world = world.max(1);
            (true, (("", rank.min(world - 1)), ("", world)))
        }
    };
    let (local_rank, local_world) = local_figures(local, rank, world, from_caller, &mut notes);
    let check = |problem, names: &[&'static str]| Err(vars.error(problem, names));
    if local_world.1 == 0 {
        return check(EnvProblem::ZeroCount, &[local_world.0]);
    }
    if local_rank.1 >= local_world.1 {
        return check(
            EnvProblem::IndexNotBelowCount,
            &[local_rank.0, local_world.0],
        );
    }
    if local_world.1 > world.1 && !from_caller {
        return check(EnvProblem::LocalWorldAboveWorld, &[local_world.0, world.0]);
    }
    Ok(Placement {
        launcher: vars.launcher,
        rank: rank.1,
        // The caller's world may be a data-parallel group smaller than the node.
        world: world.1.max(local_world.1),
        local_rank: local_rank.1,
        local_world: local_world.1,
        note: (!notes.is_empty()).then(|| notes.join("; ")),
    })
}

/// The local rank and count, estimated (and noted) where the launcher did not give them.
fn local_figures(
    local: Local,
    rank: Fig,
    world: Fig,
    from_caller: bool,
    notes: &mut Vec<String>,
) -> (Fig, Fig) {
    match local {
        Local::Both(local_rank, local_world) => (local_rank, local_world),
        Local::RankOnly(local_rank, counts, launcher_world) => {
            // The caller's world (a data-parallel group, say) says nothing of this
            // launcher's local ranks: its own job size where it gives one, so that every
            // process of the node takes the same share; at least as many processes as
            // this one's local rank implies.
            let n = if from_caller {
                launcher_world
                    .unwrap_or(world.1)
                    .max(local_rank.1.saturating_add(1))
            } else {
                world.1
            };
            // One process in all is alone on its node: nothing was guessed.
            if n > 1 {
                notes.push(format!(
                    "{} is set without {counts}: the job's {n} processes are taken to share \
                 this node, so this one takes 1/{n} of its cores and pinned memory (less \
                 than its share if the job spans nodes: set {counts}, or the workers and \
                 pinned memory)",
                    local_rank.0
                ));
            }
            (local_rank, (world.0, n))
        }
        Local::Unset(looked_for, count) => {
            let n = world.1;
            if n > 1 {
                let (unset, set) = if looked_for.is_empty() {
                    (String::new(), "the workers and pinned memory".to_string())
                } else {
                    (
                        format!(" ({looked_for} unset)"),
                        format!("set {looked_for} and {count}, or the workers and pinned memory"),
                    )
                };
                notes.push(format!(
                    "no local rank{unset}: the job's {n} processes are taken to run on this \
                     node alone, local rank = rank, so this one takes 1/{n} of its cores and \
                     pinned memory (less than its share if the job spans nodes, or runs one \
                     process per container: {set})"
                ));
            }
            (rank, world)
        }
    }
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
                local_world: 8,
                note: None,
            }
        );
        // A local rank alone in a job of one: nothing to estimate, nothing to say.
        let p = placement(&[("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")]).unwrap();
        assert_eq!((p.local_rank, p.local_world, p.note), (0, 1, None));
        // Only the global pair: one node, and a note that says so.
        let p = placement(&[("RANK", "1"), ("WORLD_SIZE", "3")]).unwrap();
        assert_eq!((p.local_rank, p.local_world), (1, 3));
        assert!(p.note.unwrap().contains("LOCAL_RANK unset"));
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
            ("SLURM_STEP_ID", "0"),
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
                local_world: 8,
                note: None,
            }
        );
        // The step's own figures take precedence over the job's.
        let p = placement(&[
            ("SLURM_STEPID", "3"),
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
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NTASKS_PER_NODE", "8"),
        ])
        .unwrap();
        assert_eq!(p.local_world, 8);
        // No local figures at all: one node.
        let p = placement(&[
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "2"),
            ("SLURM_NTASKS", "4"),
        ])
        .unwrap();
        assert_eq!((p.local_rank, p.local_world), (2, 4));
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
                (t, NoGlobalRank, vec!["RANK", "WORLD_SIZE", "LOCAL_RANK"]),
            ),
            // PyTorch Lightning's ddp strategy: no RANK.
            (
                vec![("LOCAL_RANK", "1"), ("WORLD_SIZE", "2"), ("NODE_RANK", "0")],
                (t, NoGlobalRank, vec!["RANK", "WORLD_SIZE", "LOCAL_RANK"]),
            ),
            (
                vec![("RANK", "1"), ("LOCAL_RANK", "1")],
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
                vec![
                    ("RANK", "0"),
                    ("WORLD_SIZE", "8"),
                    ("LOCAL_WORLD_SIZE", "8"),
                ],
                (t, Incomplete, vec!["LOCAL_RANK", "LOCAL_WORLD_SIZE"]),
            ),
            (
                vec![("RANK", "0"), ("WORLD_SIZE", "8"), ("LOCAL_RANK", "8")],
                (t, IndexNotBelowCount, vec!["LOCAL_RANK", "WORLD_SIZE"]),
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
                        "SLURM_NTASKS_PER_NODE",
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
        for (mut vars, want) in cases {
            // Slurm's variables are read in a job step only.
            if vars.iter().any(|(name, _)| *name == "SLURM_PROCID") {
                vars.push(("SLURM_STEP_ID", "0"));
            }
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
