//! The guard's own tests; those beside other SIGBUS handlers are in tests/sigbus_chain.rs.

use std::ffi::c_void;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::action::query;
use super::behind::GENERATIONS;
use super::front::generation_of;
use super::handler::ENTRIES;
use super::mark;
use super::registry::handled;
use super::turn::Turn;
use super::{install, GuardedMap};

fn file_of(len: usize) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mapped");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&vec![0xA5; len]).unwrap();
    (dir, path)
}

fn map(path: &std::path::Path) -> memmap2::Mmap {
    let f = std::fs::File::open(path).unwrap();
    // SAFETY: a test file; its truncation is what the tests are about.
    unsafe { memmap2::Mmap::map(&f) }.unwrap()
}

fn truncate(path: &std::path::Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

#[test]
fn a_read_past_a_cut_reads_zeros_and_marks_the_map() {
    let (_dir, path) = file_of(64 << 10);
    let guarded = GuardedMap::new(map(&path));
    assert_eq!(guarded.bytes()[40_000], 0xA5);
    assert!(!guarded.faulted());
    truncate(&path, 4096);
    let before = handled();
    let bytes = guarded.bytes();
    // Pages past the cut, read by a CRC as a reader would.
    let crc = crc32c::crc32c(&bytes[8192..]);
    assert_eq!(crc, crc32c::crc32c(&vec![0; bytes.len() - 8192]));
    assert!(guarded.faulted());
    assert!(handled() > before);
    // The page before the cut is still the file's.
    assert_eq!(bytes[100], 0xA5);
}

#[test]
fn maps_come_and_go_on_many_threads_while_one_faults() {
    let (_dir, path) = file_of(1 << 20);
    let (_dir2, other) = file_of(16 << 10);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let g = GuardedMap::new(map(&other));
                    assert_eq!(g.bytes()[5000], 0xA5);
                    assert!(!g.faulted());
                }
            });
        }
        let guarded = GuardedMap::new(map(&path));
        truncate(&path, 0);
        let sum: u64 = guarded.bytes().iter().map(|&b| u64::from(b)).sum();
        // Before the asserts: a failing one must not leave the other threads running.
        stop.store(true, Ordering::Relaxed);
        assert_eq!(sum, 0);
        assert!(guarded.faulted());
    });
}

/// Runs `scenario` of this module's `child` test in a new process of this test
/// binary and returns how it ended and what it printed; a child still running after
/// 60 s (a fault that repeats forever, a hang) is killed and fails the test.
fn run_child(scenario: &str) -> (std::process::ExitStatus, String) {
    stoker_testdata::child::run_test(
        "map_guard::tests::child",
        ("STOKER_MAP_GUARD_CHILD", scenario),
        Duration::from_secs(60),
    )
}

extern "C" fn exit_42(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut c_void) {
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(42) }
}

/// Set by the "race" child: another library's `sigaction` lands, once, between
/// `install`'s look at the action in place and its own.
static RACE: AtomicBool = AtomicBool::new(false);

pub(super) fn between_query_and_install() {
    if RACE.swap(false, Ordering::Relaxed) {
        set_handler(exit_42);
    }
}

fn set_handler(f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void)) {
    // SAFETY: a valid SA_SIGINFO action whose handler is async-signal-safe.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = f as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO;
        assert_eq!(
            libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()),
            0
        );
    }
}

/// The child process's side of the tests below: a no-op when run as a plain test.
#[test]
fn child() {
    let Ok(scenario) = std::env::var("STOKER_MAP_GUARD_CHILD") else {
        return;
    };
    match scenario.as_str() {
        "race" => RACE.store(true, Ordering::Relaxed),
        "fork" => {
            let forks = std::env::var("STOKER_MAP_GUARD_FORKS");
            return fork_while_mapping(forks.map_or(200, |n| n.parse().unwrap()));
        }
        "pid namespace" => return fork_into_a_new_pid_namespace(),
        "generations" => return generations_reused(),
        _ => panic!("no scenario {scenario}"),
    }
    // Ours is installed, and handles its own map's fault...
    let (_dir, path) = file_of(64 << 10);
    let guarded = GuardedMap::new(map(&path));
    truncate(&path, 0);
    assert_eq!(guarded.bytes()[30_000], 0);
    assert!(guarded.faulted());
    println!("own fault handled");
    // ...but not a fault in a map it does not know.
    let (_dir2, other) = file_of(64 << 10);
    let foreign = map(&other);
    truncate(&other, 0);
    let byte = std::hint::black_box(&foreign[..])[30_000];
    // Not reached: the fault ends the process.
    std::process::exit(i32::from(byte) + 1);
}

#[test]
fn a_handler_installed_while_ours_is_installed_is_the_one_behind_ours() {
    let (status, printed) = run_child("race");
    assert!(printed.contains("own fault handled"), "{printed}");
    assert_eq!(status.code(), Some(42), "{status:?}");
}

/// Forks `forks` times while three threads register maps, each after putting another
/// handler in place of ours, so that each registration installs ours and takes the
/// turn; each child registers a map and exits. Prints how many children still ran
/// 10 s after their fork (killed then): one that inherits the turn, held by a thread it
/// does not have, must take it over instead of waiting for it.
fn fork_while_mapping(forks: usize) {
    let (_dir, path) = file_of(16 << 10);
    let (stop, mut hung) = (AtomicBool::new(false), 0);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    set_handler(exit_42);
                    drop(GuardedMap::new(map(&path)));
                }
            });
        }
        for _ in 0..forks {
            // SAFETY: the child registers a map and leaves with _exit; what it inherits
            // mid-install from the parent's threads is what is tested.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                drop(GuardedMap::new(map(&path)));
                // SAFETY: _exit ends the child without running the parent's exit code.
                unsafe { libc::_exit(0) };
            }
            if stoker_testdata::child::wait_forked(pid, Duration::from_secs(10)).is_none() {
                hung += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    println!("forks {forks} hung {hung}");
}

#[test]
fn children_forked_while_threads_install_ours_never_hang() {
    let (status, printed) = run_child("fork");
    assert!(status.success(), "{status:?}: {printed}");
    assert!(printed.contains("hung 0\n"), "{printed}");
}

/// A siginfo as the kernel delivers it: zeros past the fields.
fn fresh_siginfo() -> Box<libc::siginfo_t> {
    // SAFETY: all-zero is a valid siginfo_t.
    Box::new(unsafe { std::mem::zeroed() })
}

#[test]
fn a_mark_is_seen_below_the_frame_that_made_it_and_put_back_after() {
    let mut info = fresh_siginfo();
    let info: *mut libc::siginfo_t = &mut *info;
    assert_eq!(mark::passing(info, 5000), 0);
    let outer = mark::enter(info, 3, 5000);
    // Called back, deeper on the stack: generation 3 is passing it on.
    assert_eq!(mark::passing(info, 4000), 1 << 3);
    let inner = mark::enter(info, 7, 4000);
    assert_eq!(mark::passing(info, 3000), 1 << 3 | 1 << 7);
    assert!(!mark::leave(info, inner, 4000));
    assert_eq!(mark::passing(info, 3000), 1 << 3);
    assert!(!mark::leave(info, outer, 5000));
    // SAFETY: a siginfo_t is 128 bytes.
    let bytes = unsafe { std::slice::from_raw_parts(info.cast::<u8>(), 128) };
    assert!(bytes.iter().all(|&b| b == 0), "{bytes:?}");
}

#[test]
fn a_mark_left_by_a_handler_that_jumped_out_is_dead_to_the_next_signal_in_its_place() {
    let mut info = fresh_siginfo();
    let info: *mut libc::siginfo_t = &mut *info;
    // Never left: the handler it was passed to jumped out, and (before Linux 4.20) the
    // next signal's siginfo, at the same place, keeps the mark.
    let _ = mark::enter(info, 3, 5000);
    assert_eq!(mark::passing(info, 5000), 0);
    let again = mark::enter(info, 3, 5000);
    assert_eq!(mark::passing(info, 4000), 1 << 3);
    assert!(!mark::leave(info, again, 5000));
}

#[test]
fn giving_up_is_seen_by_every_generation_passing_the_signal_on() {
    let mut info = fresh_siginfo();
    let info: *mut libc::siginfo_t = &mut *info;
    let outer = mark::enter(info, 3, 5000);
    let inner = mark::enter(info, 7, 4000);
    // Generation 3 called back below both.
    assert_ne!(mark::passing(info, 3000) & 1 << 3, 0);
    mark::give_up(info);
    assert!(mark::leave(info, inner, 4000));
    assert!(mark::leave(info, outer, 5000));
}

/// Each generation is told apart by its entry's address, so no two may share one (as
/// identical functions folded into one by the compiler or linker would).
#[test]
fn every_generation_has_an_entry_of_its_own() {
    let mut addresses: Vec<usize> = ENTRIES.iter().map(|&entry| entry as usize).collect();
    addresses.sort_unstable();
    addresses.dedup();
    assert_eq!(addresses.len(), ENTRIES.len());
}

/// Puts ours in front of an action of its own (exit_42, blocking real-time signal
/// `34 + i`): the generation ours is installed as.
fn in_front_of(i: usize) -> usize {
    // SAFETY: a valid SA_SIGINFO action whose handler is async-signal-safe.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = exit_42 as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO;
        libc::sigaddset(&mut action.sa_mask, 34 + i as libc::c_int);
        assert_eq!(
            libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()),
            0
        );
    }
    install();
    generation_of(query().unwrap().handler, &ENTRIES).unwrap()
}

/// Ours in front of one more action than there are generations, and of one of them again.
fn generations_reused() {
    let first: Vec<usize> = (0..GENERATIONS).map(in_front_of).collect();
    let mut distinct = first.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), GENERATIONS, "{first:?}");
    // In front of an action it stood in front of already: the same generation.
    assert_eq!(in_front_of(3), first[3]);
    // One action more: the least recently used generation, not the one in place (3).
    assert_eq!(in_front_of(GENERATIONS), first[0]);
    println!("generations reused");
}

#[test]
fn ours_in_front_of_an_action_again_is_the_same_generation_and_the_oldest_is_reused() {
    let (status, printed) = run_child("generations");
    assert!(status.success(), "{status:?}: {printed}");
    assert!(printed.contains("generations reused"), "{printed}");
}

/// Exit codes of the processes of [`fork_into_a_new_pid_namespace`].
const NO_NAMESPACES: i32 = 3;
const HUNG: i32 = 4;

/// Waits up to `limit` for child `pid`: its exit code, or [`HUNG`] (it is killed then).
fn wait_for(pid: libc::pid_t, limit: Duration) -> i32 {
    match stoker_testdata::child::wait_forked(pid, limit) {
        None => HUNG,
        Some(status) if libc::WIFEXITED(status) => libc::WEXITSTATUS(status),
        Some(status) => 128 + libc::WTERMSIG(status),
    }
}

/// Ends a forked process.
fn exit_child(code: i32) -> ! {
    // SAFETY: _exit ends the child without running the parent's exit code.
    unsafe { libc::_exit(code) }
}

/// The first process of a pid namespace (pid 1, as a container's is) forks a child into
/// a new pid namespace while the install turn is held (as by a thread of it in the middle
/// of installing ours): the child is pid 1 too, so the turn it inherits names its own pid,
/// as if one of its own threads held it. The child replaces ours and installs it again.
/// Prints how the child ended: 0, or [`HUNG`] when it waited for a turn no thread of it
/// holds.
fn fork_into_a_new_pid_namespace() {
    // SAFETY: each child below makes system calls, touches atomics and leaves with _exit;
    // the one that installs ours takes no lock another thread could have held at the fork.
    let outer = unsafe { libc::fork() };
    if outer == 0 {
        // A user namespace needs a process of one thread: this fork of the test's.
        // SAFETY: unshare changes only namespaces, which this process's children enter.
        if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID) } != 0 {
            exit_child(NO_NAMESPACES);
        }
        // SAFETY: as above.
        let first = unsafe { libc::fork() };
        if first == 0 {
            // Pid 1. Held for good, as by a thread in the middle of installing ours.
            std::mem::forget(Turn::take());
            // SAFETY: as above.
            if unsafe { libc::unshare(libc::CLONE_NEWPID) } != 0 {
                exit_child(NO_NAMESPACES);
            }
            // SAFETY: as above.
            let child = unsafe { libc::fork() };
            if child == 0 {
                // Pid 1 again.
                set_handler(exit_42);
                install();
                exit_child(0);
            }
            exit_child(wait_for(child, Duration::from_secs(5)));
        }
        exit_child(wait_for(first, Duration::from_secs(20)));
    }
    match wait_for(outer, Duration::from_secs(30)) {
        NO_NAMESPACES => println!("no pid namespaces here"),
        code => println!("child {code}"),
    }
}

/// A child inherits the turn as its parent's thread held it; it used to take it over only
/// when the turn named another process than itself, and waited for ever when it named its
/// own pid (1, from the parent's pid namespace).
#[test]
fn a_child_forked_while_the_turn_names_its_own_pid_still_installs() {
    let (status, printed) = run_child("pid namespace");
    assert!(status.success(), "{status:?}: {printed}");
    if printed.contains("no pid namespaces") {
        eprintln!("skipped: this system does not let a test make pid namespaces");
        return;
    }
    assert!(printed.contains("child 0\n"), "{printed}");
}
