//! The SIGBUS guard of shard maps beside other SIGBUS handlers in the same process:
//! reinstalling in front of other libraries again and again keeps its memory bounded.
//!
//! Each scenario runs in a child process of this test binary: it changes the process's
//! SIGBUS action. The counting allocator measures the child's heap, where only one
//! scenario runs.

use std::ffi::c_void;
use std::time::{Duration, Instant};

use stoker_formats::install_read_fault_handler;

#[global_allocator]
static HEAP: stoker_testdata::heap::Counting = stoker_testdata::heap::Counting;

const SCENARIO: &str = "STOKER_SIGBUS_CHAIN_CHILD";

/// Runs `scenario` of this binary's `child` test in a new process and returns how it
/// ended and what it printed; a child still running after 60 s (a fault handled forever)
/// is killed and fails the test.
fn run_child(scenario: &str) -> (std::process::ExitStatus, String) {
    let out = tempfile::NamedTempFile::new().unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["child", "--exact", "--nocapture", "--test-threads=1"])
        .env(SCENARIO, scenario)
        .stdout(out.reopen().unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status, std::fs::read_to_string(out.path()).unwrap());
        }
        if started.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("{scenario}: the child still ran after 60 s (a fault handled forever?)");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

type InfoHandler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void);

/// Sets `handler` as the SIGBUS action, with `flags` beside SA_SIGINFO and `mask` blocked
/// while it runs, as another library would.
fn set_action(handler: usize, flags: libc::c_int, mask: &[libc::c_int]) {
    // SAFETY: a valid action (all-zero, then filled in) whose handler is async-signal-safe
    // and has the signature its flags say.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler;
        action.sa_flags = flags;
        libc::sigemptyset(&mut action.sa_mask);
        for &sig in mask {
            libc::sigaddset(&mut action.sa_mask, sig);
        }
        assert_eq!(
            libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()),
            0
        );
    }
}

fn set_info_handler(f: InfoHandler, flags: libc::c_int, mask: &[libc::c_int]) {
    set_action(f as *const () as usize, libc::SA_SIGINFO | flags, mask);
}

fn exit_now(code: libc::c_int) -> ! {
    // SAFETY: _exit is async-signal-safe and ends the process at once.
    unsafe { libc::_exit(code) }
}

extern "C" fn other_a(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut c_void) {
    exit_now(61);
}

extern "C" fn other_b(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut c_void) {
    exit_now(62);
}

extern "C" fn other_c(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut c_void) {
    exit_now(63);
}

/// A library's handler replaced ours `rounds` times, ours put back in front each time:
/// prints the heap that stayed allocated.
fn alternate(rounds: usize) {
    let others: [InfoHandler; 3] = [other_a, other_b, other_c];
    install_read_fault_handler();
    let before = stoker_testdata::heap::live();
    for i in 0..rounds {
        set_info_handler(others[i % 3], 0, &[]);
        install_read_fault_handler();
    }
    let grown = stoker_testdata::heap::live().saturating_sub(before);
    println!("grown {grown}");
}

/// The child process's side of the tests below: a no-op when run as a plain test.
#[test]
fn child() {
    let Ok(scenario) = std::env::var(SCENARIO) else {
        return;
    };
    match scenario.as_str() {
        "alternate" => alternate(10_000),
        _ => panic!("no scenario {scenario}"),
    }
}

#[test]
fn reinstalling_in_front_of_other_handlers_keeps_memory_bounded() {
    let (status, printed) = run_child("alternate");
    assert!(status.success(), "{status:?}: {printed}");
    let grown: usize = printed
        .split("grown ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{printed}"));
    // 10,000 reinstalls leaked 152 bytes each (1.5 MB).
    assert!(
        grown < 4096,
        "{grown} bytes still allocated after 10,000 reinstalls"
    );
}
