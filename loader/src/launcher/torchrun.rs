//! torchrun's variables (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`), as
//! other launchers set them too: DeepSpeed's (`LOCAL_SIZE` for the local count),
//! Lightning's (no `RANK`), scripts that export `RANK`, `LOCAL_RANK` and `WORLD_SIZE`.

use super::env::{EnvProblem, Launcher};
use super::vars::{Found, Get, Local, Reading, Vars};
use crate::error::LoaderError;

/// The variables whose presence means torchrun's convention is in use.
const NAMES: [&str; 4] = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"];

/// Reads torchrun's variables: absent when none of [`NAMES`] is set; the local count is
/// `LOCAL_WORLD_SIZE`, else DeepSpeed's `LOCAL_SIZE`, else unknown (a local rank alone).
///
/// # Errors
///
/// A local variable that is not an integer, or `LOCAL_WORLD_SIZE` without `LOCAL_RANK`.
/// Problems with `RANK` / `WORLD_SIZE` are kept in [`Found::global`].
pub(super) fn read(get: Get<'_>) -> Result<Reading<'_>, LoaderError> {
    let vars = Vars::new(Launcher::Torchrun, get);
    if !vars.any_set(&NAMES) {
        return Ok(Reading::Absent);
    }
    let global = match vars.pair("RANK", "WORLD_SIZE") {
        Err(LoaderError::LauncherEnv {
            problem: EnvProblem::Incomplete,
            ..
        }) if !vars.is_set("RANK") && vars.is_set("LOCAL_RANK") => Err(vars.error(
            EnvProblem::NoGlobalRank,
            &["RANK", "WORLD_SIZE", "LOCAL_RANK"],
        )),
        other => other,
    };
    let local = match vars.int("LOCAL_RANK")? {
        Some(rank) => {
            let rank = ("LOCAL_RANK", rank);
            match vars.int("LOCAL_WORLD_SIZE")? {
                Some(n) => Local::Both(rank, ("LOCAL_WORLD_SIZE", n)),
                None => match vars.int("LOCAL_SIZE")? {
                    Some(n) => Local::Both(rank, ("LOCAL_SIZE", n)),
                    None => Local::RankOnly(
                        rank,
                        "LOCAL_WORLD_SIZE or LOCAL_SIZE",
                        vars.int("WORLD_SIZE").ok().flatten(),
                    ),
                },
            }
        }
        None if vars.is_set("LOCAL_WORLD_SIZE") => {
            return Err(vars.error(EnvProblem::Incomplete, &["LOCAL_RANK", "LOCAL_WORLD_SIZE"]))
        }
        None => Local::Unset("LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    };
    Ok(Reading::Found(Found {
        vars,
        global,
        local,
    }))
}
