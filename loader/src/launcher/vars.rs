//! Reading one launcher's variables: [`Vars`] (integers, and errors that name the
//! variables with their values) and what a launcher's reader found ([`Reading`],
//! [`Found`]), before [`super::placement`] checks the figures against each other.

use super::env::{EnvProblem, EnvVar, Launcher};
use crate::error::LoaderError;

/// The environment lookup: a variable's value, `None` when unset.
pub(super) type Get<'a> = &'a dyn Fn(&str) -> Option<String>;

/// A figure and the variable it came from (`""` when it came from no variable: the
/// caller's, or an estimate).
pub(super) type Fig = (&'static str, u64);

/// One launcher's variables, read through `get`.
#[derive(Clone, Copy)]
pub(super) struct Vars<'a> {
    pub(super) launcher: Launcher,
    get: Get<'a>,
}

impl<'a> Vars<'a> {
    pub(super) fn new(launcher: Launcher, get: Get<'a>) -> Self {
        Vars { launcher, get }
    }

    pub(super) fn is_set(&self, name: &str) -> bool {
        (self.get)(name).is_some()
    }

    pub(super) fn any_set(&self, names: &[&str]) -> bool {
        names.iter().any(|name| self.is_set(name))
    }

    fn var(&self, name: &'static str) -> EnvVar {
        EnvVar {
            name,
            value: (self.get)(name),
        }
    }

    /// The error for `problem` naming `names` (empty names, figures that came from no
    /// variable, are left out) with their values.
    pub(super) fn error(&self, problem: EnvProblem, names: &[&'static str]) -> LoaderError {
        LoaderError::LauncherEnv {
            launcher: self.launcher,
            problem,
            variables: names
                .iter()
                .filter(|n| !n.is_empty())
                .map(|n| self.var(n))
                .collect(),
        }
    }

    /// `name`'s value as an integer (surrounding whitespace tolerated), `None` when unset.
    pub(super) fn int(&self, name: &'static str) -> Result<Option<u64>, LoaderError> {
        match (self.get)(name) {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| self.error(EnvProblem::NotAnInteger, &[name])),
        }
    }

    /// A rank and its count, both required.
    pub(super) fn pair(
        &self,
        index: &'static str,
        count: &'static str,
    ) -> Result<(Fig, Fig), LoaderError> {
        match (self.int(index)?, self.int(count)?) {
            (Some(i), Some(n)) => Ok(((index, i), (count, n))),
            _ => Err(self.error(EnvProblem::Incomplete, &[index, count])),
        }
    }

    /// A local rank and its count, set together or not at all.
    pub(super) fn local_pair(
        &self,
        index: &'static str,
        count: &'static str,
    ) -> Result<Local, LoaderError> {
        match (self.int(index)?, self.int(count)?) {
            (Some(i), Some(n)) => Ok(Local::Both((index, i), (count, n))),
            (None, None) => Ok(Local::Unset(index, count)),
            _ => Err(self.error(EnvProblem::Incomplete, &[index, count])),
        }
    }
}

/// What one launcher's reader made of its variables.
pub(super) enum Reading<'a> {
    /// None of this launcher's variables is set: ask the next one.
    Absent,
    /// This launcher's figures, to be checked against each other.
    Found(Found<'a>),
    /// The variables say this is one process (a Slurm batch step), with a note for
    /// the user when that may not be what they meant.
    Alone(Option<String>),
}

/// A launcher's figures as read, not yet checked against each other.
pub(super) struct Found<'a> {
    /// The launcher's variables (for the errors of the checks).
    pub(super) vars: Vars<'a>,
    /// Rank and world; `Err` when they are missing or unreadable, kept as a value so
    /// that a caller who gives rank and world can do without them.
    pub(super) global: Result<(Fig, Fig), LoaderError>,
    /// The local figures.
    pub(super) local: Local,
}

/// A launcher's local figures: the rank among the processes on this node and their count.
pub(super) enum Local {
    /// Both set.
    Both(Fig, Fig),
    /// A local rank without a count; the `&str` names the count variables looked for,
    /// and the `Option` holds the launcher's own job size when it parses (Lightning
    /// sets `WORLD_SIZE` but no `RANK`): the same estimate on every process of a node.
    RankOnly(Fig, &'static str, Option<u64>),
    /// No local rank: the variables looked for, the local rank's and the count's (`""`:
    /// none to look for).
    Unset(&'static str, &'static str),
}
