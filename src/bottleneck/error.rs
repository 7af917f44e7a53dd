//! What stops a bench run: the crate's one error type for the stage benchmark.

use std::path::{Path, PathBuf};

use stoker_formats::FormatError;

/// Everything that stops a bench run. Stages that merely cannot run are not
/// errors: they are reported with a reason.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// The dataset could not be opened or read.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A GPU was asked for explicitly and cannot be used.
    #[error("no usable GPU: {reason}")]
    NoGpu {
        /// Why (no driver, no such device, init failure).
        reason: String,
    },
    /// A CUDA call failed.
    #[error("CUDA {what} failed: {reason}")]
    Cuda {
        /// The operation.
        what: &'static str,
        /// The driver's error.
        reason: String,
    },
    /// The launcher's variables (torchrun's, MPI's, Horovod's, Slurm's) are inconsistent.
    #[error("{}", launcher_message(.0))]
    Launcher(stoker_loader::LoaderError),
    /// An option is out of range.
    #[error("invalid bench option `{option}`: {reason}")]
    InvalidOption {
        /// The option.
        option: &'static str,
        /// What is wrong.
        reason: String,
    },
}

impl BenchError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        BenchError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// What `stoker bench` says of launcher variables it cannot place this process with: the
/// loader's error advises giving rank and world, which bench has no options for.
fn launcher_message(e: &stoker_loader::LoaderError) -> String {
    let stoker_loader::LoaderError::LauncherEnv {
        launcher,
        problem,
        variables,
    } = e
    else {
        return e.to_string();
    };
    let listed: Vec<String> = variables.iter().map(ToString::to_string).collect();
    let unset: String = variables
        .iter()
        .filter(|v| v.value.is_some())
        .map(|v| format!("-u {} ", v.name))
        .collect();
    format!(
        "{launcher} environment: {} ({}); stoker bench measures this process's share of the \
         node as the launcher's variables give it and has no rank or world options: fix \
         them, or run it without them (env {unset}stoker bench ...)",
        problem.what(),
        listed.join(", ")
    )
}
