//! Which process of which job this is, read once from the launcher's environment
//! (torchrun, then Slurm, then a single process) into a [`Placement`]; the GPU
//! [`Device::Auto`] takes for it ([`choose_device`]); and this process's fair
//! share of the node's cores and memory ([`NodeShare`]).
//!
//! Everything here is a pure function of its inputs (an environment lookup, a
//! device count, core and memory figures), so tests can play any launcher and any
//! machine; [`Placement::from_env`] and [`NodeShare::of_this_machine`] are the thin
//! wrappers over the real process environment and machine.
//!
//! # Why the loader reads the launcher itself
//!
//! On a node with eight GPUs a job runs eight processes (torchrun, or `srun` with
//! one task per GPU). Each loader must load its own slice of every epoch (rank and
//! world), decode on the GPU its training step uses (local rank), and leave the
//! other seven processes their share of the cores and of the page-locked memory
//! (local world size). A loader that behaves as if it were alone loads the whole
//! dataset, decodes on GPU 0, and starts one worker per core in every process.
//!
//! # Examples
//!
//! ```
//! use std::collections::HashMap;
//! use stoker_loader::launcher::{choose_device, Launcher, Placement};
//! use stoker_loader::Device;
//!
//! // What torchrun sets for the fourth process of the second 8-GPU node.
//! let env: HashMap<&str, &str> = [
//!     ("RANK", "11"), ("WORLD_SIZE", "16"), ("LOCAL_RANK", "3"), ("LOCAL_WORLD_SIZE", "8"),
//! ].into();
//! let p = Placement::from_vars(|name| env.get(name).map(|v| v.to_string()))?;
//! assert_eq!((p.launcher, p.rank, p.world, p.local_rank, p.local_world),
//!            (Launcher::Torchrun, 11, 16, 3, 8));
//! // Device::Auto on a node where the driver reports 8 GPUs: the local rank's.
//! assert_eq!(choose_device(Device::Auto, p.local_rank, || 8), Device::Cuda(3));
//! // An explicit device always wins.
//! assert_eq!(choose_device(Device::Cuda(0), p.local_rank, || 8), Device::Cuda(0));
//! # Ok::<(), stoker_loader::LoaderError>(())
//! ```

use std::fmt;

use crate::builder::Device;
use crate::error::LoaderError;

/// What started this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Launcher {
    /// `torchrun` / `torch.distributed.run` (or anything that sets `RANK` and
    /// `WORLD_SIZE` the same way).
    Torchrun,
    /// A Slurm job step (`srun`): `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`, ...
    Slurm,
    /// No launcher variables: a single process.
    Single,
}

impl Launcher {
    /// The name used in messages and stats (`torchrun`, `slurm`, `single`).
    pub fn name(self) -> &'static str {
        match self {
            Launcher::Torchrun => "torchrun",
            Launcher::Slurm => "slurm",
            Launcher::Single => "single",
        }
    }
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What is wrong with a launcher's variables ([`LoaderError::LauncherEnv`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EnvProblem {
    /// A variable is not a non-negative integer.
    NotAnInteger,
    /// Some variables of a group are set and others not (they come together).
    Incomplete,
    /// A process count is 0.
    ZeroCount,
    /// An index (rank, local rank) is not below its count.
    IndexNotBelowCount,
    /// More processes on this node than in the whole job.
    LocalWorldAboveWorld,
    /// A Slurm tasks-per-node list (`4(x2),3`) does not parse or has no entry
    /// for this node (`SLURM_NODEID`).
    BadTasksPerNode,
}

impl fmt::Display for EnvProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EnvProblem::NotAnInteger => "not a non-negative integer",
            EnvProblem::Incomplete => "incomplete: these variables are set together or not at all",
            EnvProblem::ZeroCount => "a process count of 0",
            EnvProblem::IndexNotBelowCount => "the index must be below the count",
            EnvProblem::LocalWorldAboveWorld => "more processes on this node than in the whole job",
            EnvProblem::BadTasksPerNode => {
                "not a Slurm tasks-per-node list (like `4(x2),3`) with an entry for this node"
            }
        })
    }
}

/// One launcher variable as it was found (`None`: unset), for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvVar {
    /// The variable's name.
    pub name: &'static str,
    /// Its value, `None` when unset.
    pub value: Option<String>,
}

impl fmt::Display for EnvVar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{}={v:?}", self.name),
            None => write!(f, "{} unset", self.name),
        }
    }
}

/// `RANK=..., WORLD_SIZE unset` for an error message.
pub(crate) fn list_vars(vars: &[EnvVar]) -> String {
    vars.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

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

/// The device a loader asked for `requested` runs on, for the process with local
/// rank `local_rank`, where `visible_devices` says how many CUDA devices the
/// driver reports (called only for [`Device::Auto`]):
///
/// - [`Device::Cpu`] and [`Device::Cuda`] are kept as they are: an explicit
///   choice always wins;
/// - [`Device::Auto`] takes device `local_rank mod visible_devices`, or the CPU
///   when no device is visible.
///
/// The ordinal counts within the devices this process can see: when
/// `CUDA_VISIBLE_DEVICES` is set the driver itself numbers only the devices it
/// lists, from 0, so `Cuda(1)` with `CUDA_VISIBLE_DEVICES=4,5` is physical
/// device 5. A launcher that gives every process one device through
/// `CUDA_VISIBLE_DEVICES` thus gets `Cuda(0)` everywhere (one visible device),
/// which is that process's own GPU. With more processes than devices on a node
/// they share devices round-robin.
///
/// # Examples
///
/// ```
/// use stoker_loader::launcher::choose_device;
/// use stoker_loader::Device;
/// assert_eq!(choose_device(Device::Auto, 5, || 8), Device::Cuda(5));
/// assert_eq!(choose_device(Device::Auto, 5, || 4), Device::Cuda(1));
/// assert_eq!(choose_device(Device::Auto, 5, || 1), Device::Cuda(0));
/// assert_eq!(choose_device(Device::Auto, 5, || 0), Device::Cpu);
/// assert_eq!(choose_device(Device::Cuda(2), 5, || 8), Device::Cuda(2));
/// assert_eq!(choose_device(Device::Cpu, 5, || 8), Device::Cpu);
/// ```
pub fn choose_device(
    requested: Device,
    local_rank: u64,
    visible_devices: impl FnOnce() -> usize,
) -> Device {
    match requested {
        Device::Auto => match visible_devices() {
            0 => Device::Cpu,
            n => Device::Cuda((local_rank % n as u64) as usize),
        },
        explicit => explicit,
    }
}

/// This process's share of the node: what the loader's defaults are sized from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeShare {
    /// Cores for this process's loader threads (`≥ 1`).
    pub cores: usize,
    /// Page-locked (pinned) host memory this process's staging may take, bytes.
    pub pinned_bytes: u64,
}

impl NodeShare {
    /// The share of one of `local_world` processes on a machine where this process
    /// may run on `available_cores` cores (its affinity and CPU quota) and which has
    /// `memory_bytes` of memory:
    ///
    /// - cores: `available_cores / local_world`, at least 1; except when the
    ///   launcher gave each process CPUs of its own: `cpus_per_task` (Slurm's
    ///   `SLURM_CPUS_PER_TASK`) is set and this process may run on no more than
    ///   that many cores, which are then its share as they are (dividing them again
    ///   would leave most of them idle). Without such a statement the available
    ///   cores are taken to be shared: a container's quota or cpuset looks the same
    ///   from inside as a per-process binding, and dividing a binding by mistake
    ///   costs less than oversubscribing a shared set `local_world` times.
    /// - pinned memory: half the memory divided by `local_world` (the other half is
    ///   the training processes', the page cache's and the system's).
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_loader::launcher::NodeShare;
    /// const GIB: u64 = 1 << 30;
    /// // 8 torchrun processes on a 16-core, 128 GiB node: 2 cores, 8 GiB each.
    /// let s = NodeShare::new(16, 128 * GIB, 8, None);
    /// assert_eq!((s.cores, s.pinned_bytes), (2, 8 * GIB));
    /// // 8 processes on 2 cores: at least one thread each.
    /// assert_eq!(NodeShare::new(2, 8 * GIB, 8, None).cores, 1);
    /// // srun --cpus-per-task=2 bound each of the 8 tasks to 2 cores of its own.
    /// assert_eq!(NodeShare::new(2, 128 * GIB, 8, Some(2)).cores, 2);
    /// // ... without binding, every task sees the 16 cores: they are shared.
    /// assert_eq!(NodeShare::new(16, 128 * GIB, 8, Some(2)).cores, 2);
    /// // Alone: every core.
    /// assert_eq!(NodeShare::new(16, 128 * GIB, 1, None).cores, 16);
    /// ```
    pub fn new(
        available_cores: usize,
        memory_bytes: u64,
        local_world: u64,
        cpus_per_task: Option<u64>,
    ) -> Self {
        let procs = local_world.max(1);
        let available = available_cores.max(1) as u64;
        let own_cpus = cpus_per_task.is_some_and(|c| available <= c);
        let cores = if own_cpus {
            available
        } else {
            (available / procs).max(1)
        };
        NodeShare {
            cores: cores as usize,
            pinned_bytes: memory_bytes / 2 / procs,
        }
    }

    /// The share of the process at `placement` on this machine: available cores
    /// from [`std::thread::available_parallelism`], memory from `/proc/meminfo`
    /// (when it cannot be read the pinned share is unlimited), and, under Slurm,
    /// `SLURM_CPUS_PER_TASK`.
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker_loader::launcher::{NodeShare, Placement};
    /// let share = NodeShare::of_this_machine(&Placement::single());
    /// assert!(share.cores >= 1);
    /// ```
    pub fn of_this_machine(placement: &Placement) -> Self {
        let available = std::thread::available_parallelism().map_or(1, |n| n.get());
        let memory = memory_total().unwrap_or(u64::MAX);
        // Only Slurm's own tasks: a torchrun started inside one task shares its CPUs.
        let cpus_per_task = match placement.launcher {
            Launcher::Slurm => std::env::var("SLURM_CPUS_PER_TASK")
                .ok()
                .and_then(|v| v.trim().parse().ok()),
            _ => None,
        };
        NodeShare::new(available, memory, placement.local_world, cpus_per_task)
    }
}

/// The machine's memory (`MemTotal` in `/proc/meminfo`), bytes; `None` when it
/// cannot be read.
pub(crate) fn memory_total() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    mem_total(&text)
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_ascii_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
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
    fn mem_total_reads_kib() {
        let text = "MemTotal:       131891264 kB\nMemFree:         1024 kB\n";
        assert_eq!(mem_total(text), Some(131_891_264 * 1024));
        assert_eq!(mem_total("MemFree: 3 kB\n"), None);
        assert_eq!(mem_total("MemTotal: lots kB\n"), None);
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

    #[test]
    fn auto_takes_the_local_rank_modulo_the_visible_devices() {
        for local_rank in 0..8u64 {
            assert_eq!(
                choose_device(Device::Auto, local_rank, || 8),
                Device::Cuda(local_rank as usize)
            );
            assert_eq!(
                choose_device(Device::Auto, local_rank, || 3),
                Device::Cuda(local_rank as usize % 3)
            );
            assert_eq!(choose_device(Device::Auto, local_rank, || 0), Device::Cpu);
        }
        // An explicit choice never asks for the device count.
        let never = || -> usize { panic!("the device count was asked for an explicit device") };
        assert_eq!(choose_device(Device::Cuda(7), 2, never), Device::Cuda(7));
        assert_eq!(choose_device(Device::Cpu, 2, never), Device::Cpu);
    }

    #[test]
    fn node_share_divides_cores_and_memory_by_the_local_processes() {
        const GIB: u64 = 1 << 30;
        // The cores of every local process add up to the machine's (min 1 each).
        for cores in [1usize, 2, 3, 8, 16, 96] {
            for procs in [1u64, 2, 3, 4, 8] {
                let share = NodeShare::new(cores, 64 * GIB, procs, None);
                let total = share.cores * procs as usize;
                assert!(share.cores >= 1);
                assert!(
                    total <= cores.max(procs as usize),
                    "{cores} cores, {procs} procs: {total}"
                );
                assert!(
                    total > cores.saturating_sub(procs as usize),
                    "{cores} cores, {procs} procs: only {total} used"
                );
                assert_eq!(share.pinned_bytes, 32 * GIB / procs);
            }
        }
        // A quota or cpuset of 16 cores shared by 8 processes (a container).
        assert_eq!(NodeShare::new(16, 64 * GIB, 8, None).cores, 2);
        // Slurm tasks bound to 4 cores each (--cpus-per-task=4): not divided again.
        assert_eq!(NodeShare::new(4, 64 * GIB, 8, Some(4)).cores, 4);
        // Local world 0 never divides by zero.
        assert_eq!(NodeShare::new(4, 8 * GIB, 0, None).cores, 4);
    }
}
