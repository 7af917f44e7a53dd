//! The MPI launchers' per-process variables: Horovod's own launcher, Open MPI's
//! `mpirun`, MVAPICH's `mpirun_rsh`, the Hydra `mpiexec` of MPICH, Intel MPI and
//! MVAPICH, and a bare PMIx rank.

use super::env::{EnvProblem, Launcher};
use super::slurm;
use super::vars::{Found, Get, Local, Reading, Vars};
use crate::error::LoaderError;

/// `horovodrun --gloo`: `HOROVOD_RANK`, `HOROVOD_SIZE`, `HOROVOD_LOCAL_RANK`,
/// `HOROVOD_LOCAL_SIZE` (with MPI, `horovodrun` runs `mpirun`, read by [`open_mpi`]).
///
/// # Errors
///
/// As [`Vars::local_pair`]; problems with the global pair are kept in [`Found::global`].
pub(super) fn horovod(get: Get<'_>) -> Result<Reading<'_>, LoaderError> {
    four(
        Vars::new(Launcher::Horovod, get),
        [
            "HOROVOD_RANK",
            "HOROVOD_SIZE",
            "HOROVOD_LOCAL_RANK",
            "HOROVOD_LOCAL_SIZE",
        ],
    )
}

/// Open MPI's `mpirun`: `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`,
/// `OMPI_COMM_WORLD_LOCAL_RANK`, `OMPI_COMM_WORLD_LOCAL_SIZE`.
///
/// # Errors
///
/// As [`horovod`].
pub(super) fn open_mpi(get: Get<'_>) -> Result<Reading<'_>, LoaderError> {
    four(
        Vars::new(Launcher::OpenMpi, get),
        [
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
        ],
    )
}

/// MVAPICH's `mpirun_rsh`: `MV2_COMM_WORLD_RANK`, `MV2_COMM_WORLD_SIZE`,
/// `MV2_COMM_WORLD_LOCAL_RANK`, `MV2_COMM_WORLD_LOCAL_SIZE` (its Hydra `mpiexec` sets
/// `PMI_RANK` and `PMI_SIZE`, read by [`mpich`]).
///
/// # Errors
///
/// As [`horovod`].
pub(super) fn mvapich(get: Get<'_>) -> Result<Reading<'_>, LoaderError> {
    four(
        Vars::new(Launcher::Mvapich, get),
        [
            "MV2_COMM_WORLD_RANK",
            "MV2_COMM_WORLD_SIZE",
            "MV2_COMM_WORLD_LOCAL_RANK",
            "MV2_COMM_WORLD_LOCAL_SIZE",
        ],
    )
}

/// A launcher that sets a rank, a size, a local rank and a local size; absent when
/// none of the four is set.
fn four<'a>(
    vars: Vars<'a>,
    [rank, size, local_rank, local_size]: [&'static str; 4],
) -> Result<Reading<'a>, LoaderError> {
    if !vars.any_set(&[rank, size, local_rank, local_size]) {
        return Ok(Reading::Absent);
    }
    let local = vars.local_pair(local_rank, local_size)?;
    Ok(Reading::Found(Found {
        vars,
        global: vars.pair(rank, size),
        local,
    }))
}

/// Hydra's `mpiexec` (MPICH, Intel MPI): `PMI_RANK`, `PMI_SIZE`, `MPI_LOCALRANKID`,
/// `MPI_LOCALNRANKS`, or for the local figures `PMI_LOCAL_RANK`, `PMI_LOCAL_SIZE` (Cray
/// PALS and PBS Pro's `mpiexec` set those); absent without `PMI_RANK` and `PMI_SIZE`.
///
/// Slurm's PMI-2 plugin (`srun --mpi=pmi2`) also sets `PMI_RANK` and `PMI_SIZE`, for
/// its own tasks and without Hydra's local variables: when those are missing and a
/// Slurm step agrees on rank and size, this is absent and Slurm, which knows the
/// tasks on each node, is read instead.
///
/// # Errors
///
/// As [`horovod`].
pub(super) fn mpich(get: Get<'_>) -> Result<Reading<'_>, LoaderError> {
    let vars = Vars::new(Launcher::Mpich, get);
    if !vars.any_set(&["PMI_RANK", "PMI_SIZE"]) {
        return Ok(Reading::Absent);
    }
    let local = match vars.local_pair("MPI_LOCALRANKID", "MPI_LOCALNRANKS")? {
        Local::Unset(..) => match vars.local_pair("PMI_LOCAL_RANK", "PMI_LOCAL_SIZE")? {
            Local::Unset(..) => Local::Unset("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
            pals => pals,
        },
        hydra => hydra,
    };
    let global = vars.pair("PMI_RANK", "PMI_SIZE");
    if let (Local::Unset(..), Ok(((_, rank), (_, size)))) = (&local, &global) {
        let slurm = Vars::new(Launcher::Slurm, get);
        let same = |name, value| slurm.int(name).ok().flatten() == Some(value);
        if slurm::in_step(get) && same("SLURM_PROCID", *rank) && same(slurm::world_name(get), *size)
        {
            return Ok(Reading::Absent);
        }
    }
    Ok(Reading::Found(Found {
        vars,
        global,
        local,
    }))
}

/// `PMIX_RANK` with none of the variables above: a PMIx process manager that says this
/// process's rank but not how many there are, so the rank cannot be used.
///
/// # Errors
///
/// None (the missing count is kept in [`Found::global`]).
pub(super) fn pmix(get: Get<'_>) -> Result<Reading<'_>, LoaderError> {
    let vars = Vars::new(Launcher::Pmix, get);
    if !vars.is_set("PMIX_RANK") {
        return Ok(Reading::Absent);
    }
    Ok(Reading::Found(Found {
        vars,
        global: Err(vars.error(EnvProblem::NoProcessCount, &["PMIX_RANK"])),
        local: Local::Unset("", ""),
    }))
}
