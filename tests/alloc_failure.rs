//! An allocation that cannot fail softly, failing, ends the `stoker` binary with status 3
//! and a message, as its other out-of-memory stops do: it was SIGABRT (status 134) under a
//! tight `ulimit -v`, at a point that depends on timing. Here the binary's own allocator
//! and handler (`stoker::alloc_failure`) meet an allocation no machine can serve, in a child
//! process (this test binary run again for one test).
#![cfg(feature = "cli")] // the module serves the CLI only

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output};

#[global_allocator]
static ALLOCATOR: stoker::alloc_failure::ReportingAllocator =
    stoker::alloc_failure::ReportingAllocator;

/// Set in the child: what it does instead of the test.
const CHILD: &str = "STOKER_ALLOC_FAILURE_CHILD";

/// This test binary run again for `test` alone, with `CHILD=what`.
fn child(test: &str, what: &str) -> Output {
    Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads", "1"])
        .env(CHILD, what)
        .output()
        .unwrap()
}

#[test]
fn a_failed_allocation_exits_3_with_a_message_and_other_aborts_stay_aborts() {
    match std::env::var(CHILD).as_deref() {
        Ok("allocate") => {
            stoker::alloc_failure::exit_on_failure();
            // 1 PiB: past any machine's memory and overcommit, so `malloc` says no.
            let v: Vec<u8> = Vec::with_capacity(1 << 50);
            std::hint::black_box(&v);
            unreachable!("1 PiB was allocated");
        }
        Ok("abort") => {
            stoker::alloc_failure::exit_on_failure();
            // An allocation failed softly on another thread and was handled: the abort of
            // this one is not a failed allocation's.
            std::thread::spawn(|| {
                let mut v: Vec<u8> = Vec::new();
                assert!(v.try_reserve(1 << 50).is_err());
            })
            .join()
            .unwrap();
            std::process::abort();
        }
        Ok(other) => panic!("unknown {CHILD} {other:?}"),
        Err(_) => {}
    }
    let name = "a_failed_allocation_exits_3_with_a_message_and_other_aborts_stay_aborts";
    let out = child(name, "allocate");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{:?}: {err}", out.status);
    assert!(
        err.contains("memory allocation of 1125899906842624 bytes failed")
            && err.contains("stoker: error: out of memory")
            && err.contains("--resume"),
        "{err}"
    );

    let out = child(name, "abort");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGABRT),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
