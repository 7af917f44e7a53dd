//! The launcher vocabulary: which launcher started the process ([`Launcher`]), and what
//! is wrong with its variables when they do not add up ([`EnvProblem`], [`EnvVar`]), for
//! [`crate::LoaderError::LauncherEnv`]. Nothing here reads the environment.

use std::fmt;

/// What started this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Launcher {
    /// `torchrun` / `torch.distributed.run`, or anything that sets `RANK` and
    /// `WORLD_SIZE` the same way (DeepSpeed's launcher, Lightning, scripts that export
    /// them).
    Torchrun,
    /// Horovod's own launcher (`horovodrun --gloo`): `HOROVOD_RANK`, `HOROVOD_SIZE`, ...
    Horovod,
    /// Open MPI's `mpirun` / `mpiexec`: `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`, ...
    OpenMpi,
    /// MVAPICH's `mpirun_rsh`: `MV2_COMM_WORLD_RANK`, `MV2_COMM_WORLD_SIZE`, ...
    Mvapich,
    /// The Hydra process manager of MPICH and Intel MPI (`mpiexec`): `PMI_RANK`,
    /// `PMI_SIZE`, `MPI_LOCALRANKID`, `MPI_LOCALNRANKS`.
    Mpich,
    /// A Slurm job step (`srun`): `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`, ...
    Slurm,
    /// A PMIx process manager that sets `PMIX_RANK` and no process count: an error
    /// that asks for rank and world, unless the caller gives them.
    Pmix,
    /// No launcher variables: a single process.
    Single,
}

impl Launcher {
    /// The name used in messages and stats (`torchrun`, `horovod`, `openmpi`, `mpich`,
    /// `slurm`, `pmix`, `single`).
    pub fn name(self) -> &'static str {
        match self {
            Launcher::Torchrun => "torchrun",
            Launcher::Horovod => "horovod",
            Launcher::OpenMpi => "openmpi",
            Launcher::Mvapich => "mvapich",
            Launcher::Mpich => "mpich",
            Launcher::Slurm => "slurm",
            Launcher::Pmix => "pmix",
            Launcher::Single => "single",
        }
    }
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What is wrong with a launcher's variables ([`crate::LoaderError::LauncherEnv`]).
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
    /// A rank is set but no process count at all (`PMIX_RANK` alone): the job's size
    /// cannot be known, so rank and world must be given.
    NoProcessCount,
    /// `LOCAL_RANK` without `RANK`: PyTorch Lightning's ddp, ddp_spawn and ddp_notebook
    /// strategies start their processes so, and give the global rank to the trainer
    /// only; it cannot be derived without the processes per node.
    NoGlobalRank,
}

impl EnvProblem {
    /// What is wrong, without the display's advice to give rank and world (for a caller
    /// that has no such options, as `stoker bench`).
    pub fn what(&self) -> &'static str {
        match self {
            EnvProblem::NoProcessCount => "a rank without a process count",
            EnvProblem::NoGlobalRank => {
                "LOCAL_RANK without RANK, as PyTorch Lightning's ddp, ddp_spawn and ddp_notebook strategies start their processes"
            }
            other => other.described(),
        }
    }

    fn described(&self) -> &'static str {
        match self {
            EnvProblem::NotAnInteger => "not a non-negative integer",
            EnvProblem::Incomplete => "incomplete: these variables are set together or not at all",
            EnvProblem::ZeroCount => "a process count of 0",
            EnvProblem::IndexNotBelowCount => "the index must be below the count",
            EnvProblem::LocalWorldAboveWorld => "more processes on this node than in the whole job",
            EnvProblem::BadTasksPerNode => {
                "not a Slurm tasks-per-node list (like `4(x2),3`) with an entry for this node"
            }
            EnvProblem::NoProcessCount => {
                "a rank without a process count: give rank and world explicitly"
            }
            EnvProblem::NoGlobalRank => {
                "LOCAL_RANK without RANK, as PyTorch Lightning's ddp, ddp_spawn and ddp_notebook strategies start their processes: give rank and world explicitly (Python: rank=trainer.global_rank, world_size=trainer.world_size)"
            }
        }
    }
}

impl fmt::Display for EnvProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.described())
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
