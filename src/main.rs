//! The `stoker` command line: a thin layer that turns flags into one library call.
#![forbid(unsafe_code)]

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}
