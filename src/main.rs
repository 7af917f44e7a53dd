//! The `stoker` command line: a thin layer that turns flags into one library call
//! (`stoker::cli`).
#![forbid(unsafe_code)]

/// The system allocator, noting failures: memory running out where Rust would abort ends
/// the command with exit status 3 and a message, as its other out-of-memory stops do.
#[global_allocator]
static ALLOCATOR: stoker::alloc_failure::ReportingAllocator =
    stoker::alloc_failure::ReportingAllocator;

fn main() -> std::process::ExitCode {
    stoker::alloc_failure::exit_on_failure();
    stoker::cli::main()
}
