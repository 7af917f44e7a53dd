//! The `stoker` command line: a thin layer that turns flags into one library call
//! (`stoker::cli`).
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    stoker::cli::main()
}
