//! Placeholder: owned by the issue that implements this subcommand.

use std::process::ExitCode;

/// Flags of this subcommand.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the subcommand.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("this subcommand is not built yet")
}
