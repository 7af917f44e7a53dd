//! The SIGBUS guard of shard maps beside other SIGBUS handlers in the same process: a fault
//! outside shard maps reaches the handler installed before ours, as the kernel would have
//! delivered it (its flags and mask), or the default action; a handler that replaced ours,
//! or puts itself back when called, is put behind ours again; and reinstalling in front of
//! other libraries again and again keeps its memory bounded. A library that passes faults
//! back to ours (it saved ours when it installed itself) does not make the two go round
//! forever, and a program that recovers from SIGBUS (siglongjmp) keeps recovering.
//!
//! Each scenario runs in a child process of this test binary: it changes the process's
//! SIGBUS action and usually ends in a fault. The counting allocator measures the child's
//! heap, where only one scenario runs.

use std::ffi::c_void;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::time::Duration;

use stoker_formats::{
    install_read_fault_handler, shard_file_name, Dataset, DatasetWriter, Encoding, FormatError,
    Provenance, RecordMeta, WriterOptions,
};

#[global_allocator]
static HEAP: stoker_testdata::heap::Counting = stoker_testdata::heap::Counting;

const SCENARIO: &str = "STOKER_SIGBUS_CHAIN_CHILD";

/// Runs `scenario` of this binary's `child` test in a new process and returns how it
/// ended and what it printed; a child still running after 60 s (a fault handled forever)
/// is killed and fails the test.
fn run_child(scenario: &str) -> (std::process::ExitStatus, String) {
    stoker_testdata::child::run_test("child", (SCENARIO, scenario), Duration::from_secs(60))
}

/// Runs a scenario that ends in a fault outside shard maps, after checking that a shard
/// cut short under its reader failed its records first.
fn run_to_foreign_fault(scenario: &str) -> std::process::ExitStatus {
    let (status, printed) = run_child(scenario);
    assert!(
        printed.contains("own fault handled"),
        "{status:?}: {printed}"
    );
    status
}

type InfoHandler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void);

/// Sets `handler` as the SIGBUS action, with `flags` and `mask` blocked while it runs, as
/// another library would.
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

/// Whether `sig` is blocked in the calling thread.
fn blocked(sig: libc::c_int) -> bool {
    // SAFETY: a query of the thread's mask into a valid, writable set; both calls are
    // async-signal-safe.
    unsafe {
        let mut now: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now);
        libc::sigismember(&now, sig) == 1
    }
}

fn exit_now(code: libc::c_int) -> ! {
    // SAFETY: _exit is async-signal-safe and ends the process at once.
    unsafe { libc::_exit(code) }
}

/// A map this process never registers, of a file then cut short: reading it faults outside
/// every shard map.
fn cut_map() -> (tempfile::TempDir, memmap2::Mmap) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foreign");
    std::fs::write(&path, vec![0xA5; 64 << 10]).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    // SAFETY: a file of this test's own; cutting it under the map is the point.
    let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(0)
        .unwrap();
    (dir, map)
}

/// Reads a byte of a [`cut_map`]: a fault outside every shard map. Returns only if that
/// fault was cured.
fn foreign_fault() -> u8 {
    let (_dir, map) = cut_map();
    std::hint::black_box(&map[..])[30_000]
}

/// A dataset of `n` raw records of 4 KiB each, in one shard.
fn dataset(dir: &Path, n: u32) {
    let mut w = DatasetWriter::create(dir, WriterOptions::default()).unwrap();
    for i in 0..n {
        let meta = RecordMeta {
            encoding: Encoding::Raw,
            height: 64,
            width: 64,
            channels: 1,
            label: 0,
        };
        w.push(meta, &[i as u8; 4096]).unwrap();
    }
    w.finish(vec!["c".into()], Provenance::stoker("t")).unwrap();
}

/// Opens a dataset (which puts ours in front), runs `before_cut`, cuts its shard short and
/// reads every record with the reader opened before: returns how many were refused as
/// unreadable. The process dies instead if a fault in the shard's map is not ours to handle.
fn shard_cut_under_reader(before_cut: impl FnOnce()) -> usize {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path(), 64);
    let ds = Dataset::open(dir.path()).unwrap();
    let reader = ds.reader().unwrap();
    before_cut();
    std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join(shard_file_name(0)))
        .unwrap()
        .set_len(8192)
        .unwrap();
    (0..ds.len())
        .filter(|&i| {
            matches!(
                reader.get(i).and_then(|_| reader.check_read(i)),
                Err(FormatError::ShardUnreadable { .. })
            )
        })
        .count()
}

extern "C" fn exit_42(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut c_void) {
    exit_now(42);
}

/// The SIGBUS action in place, as another library saves it before installing its own.
fn current_action() -> *mut libc::sigaction {
    // SAFETY: a query into a valid, writable `sigaction`.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        assert_eq!(
            libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut current),
            0
        );
        Box::into_raw(Box::new(current))
    }
}

/// The action `reraise` found in place, put back when it fires.
static BEFORE_RERAISE: AtomicPtr<libc::sigaction> = AtomicPtr::new(std::ptr::null_mut());

/// What Python's faulthandler does (with SA_NODEFER, as it installs it): report, put back
/// the handler it replaced, raise the signal again. Between it and ours, the signal would
/// go round forever.
extern "C" fn reraise(sig: libc::c_int, _: *mut libc::siginfo_t, _: *mut c_void) {
    // SAFETY: sigaction and raise are async-signal-safe; the pointer is a leaked box.
    unsafe {
        libc::sigaction(
            sig,
            BEFORE_RERAISE.load(Ordering::Acquire),
            std::ptr::null_mut(),
        );
        libc::raise(sig);
    }
}

/// Installs `reraise` with `flags`, keeping the action it replaces to put back, and gives
/// this thread the alternate signal stack faulthandler gives the thread that enables it
/// (`SIGSTKSZ` + `AT_MINSIGSTKSZ`, or twice `SIGSTKSZ` where the kernel gives no minimum,
/// since CPython 3.11): with SA_NODEFER its raise puts a second kernel signal frame on that
/// stack, and two of them (3.6 KiB each with AVX-512) and the handlers' frames between them
/// overflow the 8 KiB one Rust gives its threads (a SIGSEGV instead of the SIGBUS).
fn install_reraise(flags: libc::c_int) {
    // SAFETY: getauxval reads the auxiliary vector; 0 where the kernel gives no entry.
    let min = unsafe { libc::getauxval(libc::AT_MINSIGSTKSZ) } as usize;
    let size = libc::SIGSTKSZ + if min == 0 { libc::SIGSTKSZ } else { min };
    let stack = Box::leak(vec![0u8; size].into_boxed_slice());
    let alt = libc::stack_t {
        ss_sp: stack.as_mut_ptr().cast(),
        ss_flags: 0,
        ss_size: size,
    };
    // SAFETY: the stack is leaked, so it outlives every signal this thread takes on it.
    assert_eq!(unsafe { libc::sigaltstack(&alt, std::ptr::null_mut()) }, 0);
    BEFORE_RERAISE.store(current_action(), Ordering::Release);
    set_info_handler(reraise, flags, &[]);
}

/// The action `call_back` replaced: the one it passes signals on to.
static BEFORE_CALL_BACK: AtomicPtr<libc::sigaction> = AtomicPtr::new(std::ptr::null_mut());

/// What a library that chains to the handler it replaced does with a SIGBUS it does not
/// handle (the JVM's, Go's, wasmtime's handlers): calls that handler directly, with the
/// arguments it got. Only installed where that handler is an SA_SIGINFO one (ours).
extern "C" fn call_back(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: the saved action is a leaked box, never freed; its handler has the SA_SIGINFO
    // signature, as this test installs it only over ours.
    unsafe {
        let previous = &*BEFORE_CALL_BACK.load(Ordering::Acquire);
        let f: InfoHandler = std::mem::transmute(previous.sa_sigaction);
        f(sig, info, context);
    }
}

/// Installs `call_back`, keeping the action it replaces to pass signals on to.
fn install_call_back() {
    BEFORE_CALL_BACK.store(current_action(), Ordering::Release);
    set_info_handler(call_back, 0, &[]);
}

static CALLS: AtomicUsize = AtomicUsize::new(0);

/// A one-shot handler (SA_RESETHAND), as crash reporters install: it reports and returns,
/// counting on the default action being in place when the fault happens again.
extern "C" fn report_once(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut c_void) {
    if CALLS.fetch_add(1, Ordering::Relaxed) > 0 {
        exit_now(43);
    }
}

/// Says whether SIGUSR1, in its action's mask, is blocked while it runs.
extern "C" fn check_mask(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut c_void) {
    exit_now(if blocked(libc::SIGUSR1) { 44 } else { 45 });
}

/// Says whether SIGBUS is blocked while it runs, as an SA_NODEFER action it must not be.
extern "C" fn check_nodefer(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut c_void) {
    exit_now(if blocked(libc::SIGBUS) { 47 } else { 46 });
}

extern "C" fn plain(_: libc::c_int) {
    exit_now(48);
}

/// Puts itself back as the SIGBUS action whenever it is called (SysV-style handlers do,
/// and so do libraries that want to stay first); a fault reaching it ends the process.
extern "C" fn rearm(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut c_void) {
    // SAFETY: the kernel hands an SA_SIGINFO handler a valid siginfo_t.
    if unsafe { (*info).si_code } > 0 {
        exit_now(50);
    }
    set_info_handler(rearm, 0, &[]);
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
        "chained" => set_info_handler(exit_42, 0, &[]),
        "replaced" => {
            // Ours first, then replaced by a handler that passes nothing on (as
            // faulthandler.enable() called late does): the next open puts ours back, in
            // front of it.
            install_read_fault_handler();
            set_info_handler(exit_42, 0, &[]);
        }
        "loop" => {
            // Ours first, then faulthandler-like on top (it keeps ours to put back), then
            // ours again in front of it at the next open.
            install_read_fault_handler();
            install_reraise(libc::SA_NODEFER);
        }
        "reraise_twice" => {
            // faulthandler-like without SA_NODEFER (its raise waits until it returns),
            // behind ours, then installed again: what it puts back and raises to is ours,
            // in front of it.
            install_reraise(0);
            install_read_fault_handler();
            install_reraise(0);
        }
        "call_back" => {
            // Ours in front of exit_42, then a library that passes signals not its own to
            // the handler it replaced (ours), then ours in front of it at the next open.
            set_info_handler(exit_42, 0, &[]);
            install_read_fault_handler();
            install_call_back();
        }
        "call_back_twice" => {
            // That library behind ours, then installed again: the handler it passes
            // signals on to (ours) passes them to it.
            install_call_back();
            install_read_fault_handler();
            install_call_back();
        }
        "resethand" => set_info_handler(report_once, libc::SA_RESETHAND, &[]),
        "mask" => set_info_handler(check_mask, 0, &[libc::SIGUSR1]),
        "nodefer" => set_info_handler(check_nodefer, libc::SA_NODEFER, &[]),
        "plain" => set_action(plain as *const () as usize, 0, &[]),
        "rearm" => {
            set_info_handler(rearm, 0, &[]);
            let unreadable = shard_cut_under_reader(|| {
                // SAFETY: raise is async-signal-safe. The signal goes to ours, which passes
                // it to `rearm`, which puts itself in place of ours.
                unsafe { libc::raise(libc::SIGBUS) };
            });
            println!("unreadable {unreadable}");
            return;
        }
        "alternate" => return alternate(10_000),
        "restart" => return restarted_read(),
        "recover" => return recovered_again_and_again(),
        "two_sent" => return two_sent_while_the_first_is_handled(),
        _ => {}
    }
    // Ours handles a fault in its own map...
    assert!(shard_cut_under_reader(|| {}) > 0);
    println!("own fault handled");
    // ...but not one in a map it does not know.
    let byte = foreign_fault();
    // Not reached: the fault ends the process.
    std::process::exit(i32::from(byte) + 1);
}

#[test]
fn a_fault_in_an_unregistered_map_still_ends_the_process() {
    let status = run_to_foreign_fault("default");
    assert_eq!(status.signal(), Some(libc::SIGBUS), "{status:?}");
}

#[test]
fn a_fault_in_an_unregistered_map_reaches_the_handler_installed_before() {
    let status = run_to_foreign_fault("chained");
    assert_eq!(status.code(), Some(42), "{status:?}");
}

#[test]
fn a_handler_that_replaced_ours_is_put_behind_it_at_the_next_open() {
    let status = run_to_foreign_fault("replaced");
    assert_eq!(status.code(), Some(42), "{status:?}");
}

#[test]
fn a_fault_a_later_handler_raises_again_ends_the_process_instead_of_going_round() {
    let status = run_to_foreign_fault("loop");
    assert_eq!(status.signal(), Some(libc::SIGBUS), "{status:?}");
}

#[test]
fn a_fault_a_handler_raises_again_to_ours_in_front_of_itself_ends_the_process() {
    let status = run_to_foreign_fault("reraise_twice");
    assert_eq!(status.signal(), Some(libc::SIGBUS), "{status:?}");
}

/// It overflowed the stack (SIGSEGV): ours passed the fault to that library, which passed
/// it to ours, which passed it to that library again.
#[test]
fn a_fault_passed_to_a_library_that_calls_ours_back_reaches_the_handler_before_ours() {
    let status = run_to_foreign_fault("call_back");
    assert_eq!(status.code(), Some(42), "{status:?}");
}

/// It overflowed the stack (SIGSEGV), as above; with no handler before ours left to
/// reach, the fault ends the process as the default action does.
#[test]
fn a_fault_ours_is_called_back_with_while_passing_it_on_ends_the_process() {
    let status = run_to_foreign_fault("call_back_twice");
    assert_eq!(status.signal(), Some(libc::SIGBUS), "{status:?}");
}

#[test]
fn a_one_shot_handler_before_ours_is_called_once_and_the_fault_then_ends_the_process() {
    let status = run_to_foreign_fault("resethand");
    assert_eq!(status.signal(), Some(libc::SIGBUS), "{status:?}");
}

#[test]
fn the_handler_before_ours_runs_with_its_own_mask_blocked() {
    let status = run_to_foreign_fault("mask");
    assert_eq!(status.code(), Some(44), "{status:?}");
}

#[test]
fn an_sa_nodefer_handler_before_ours_runs_with_sigbus_unblocked() {
    let status = run_to_foreign_fault("nodefer");
    assert_eq!(status.code(), Some(46), "{status:?}");
}

#[test]
fn a_plain_handler_before_ours_is_called_with_the_signal_number() {
    let status = run_to_foreign_fault("plain");
    assert_eq!(status.code(), Some(48), "{status:?}");
}

/// A plain handler that returns (a library that notes a sent SIGBUS and goes on).
extern "C" fn note(_: libc::c_int) {}

/// A SIGBUS sent to a thread blocked in `read`, with ours in front of a handler installed
/// with SA_RESTART: the read goes on, as it would without ours, and gets the byte written
/// after the signal. Prints what the read returned.
fn restarted_read() {
    set_action(note as *const () as usize, libc::SA_RESTART, &[]);
    install_read_fault_handler();
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into a valid array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        // SAFETY: pthread_self has no preconditions.
        tx.send(unsafe { libc::pthread_self() }).unwrap();
        let mut byte = 0u8;
        // SAFETY: a read of one byte into a valid byte from our own pipe.
        let n = unsafe { libc::read(fds[0], (&mut byte as *mut u8).cast(), 1) };
        let errno = std::io::Error::last_os_error();
        (n, byte, errno)
    });
    let thread = rx.recv().unwrap();
    // Time for the reader to block in read.
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: the reader thread is alive (it waits for the byte written below).
    assert_eq!(unsafe { libc::pthread_kill(thread, libc::SIGBUS) }, 0);
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: a write of one byte from a valid byte into our own pipe.
    assert_eq!(unsafe { libc::write(fds[1], [7u8].as_ptr().cast(), 1) }, 1);
    let (n, byte, errno) = reader.join().unwrap();
    println!("read {n} {byte} ({errno})");
}

/// glibc's `sigjmp_buf` (200 bytes on x86-64, 312 on aarch64), with room to spare.
#[repr(C, align(16))]
struct JumpBuf(std::cell::UnsafeCell<[u64; 64]>);

// SAFETY: used by one thread: the one that sets it and the handler that jumps to it, which
// runs on that thread (the faults and signals it recovers from are that thread's own).
unsafe impl Sync for JumpBuf {}

static JUMP: JumpBuf = JumpBuf(std::cell::UnsafeCell::new([0; 64]));

extern "C" {
    // glibc's sigsetjmp is a macro for __sigsetjmp.
    #[cfg_attr(target_env = "gnu", link_name = "__sigsetjmp")]
    fn sigsetjmp(env: *mut JumpBuf, save_mask: libc::c_int) -> libc::c_int;
    fn siglongjmp(env: *mut JumpBuf, value: libc::c_int) -> !;
}

/// Recovers from a SIGBUS by jumping back to where [`survives`] began, as programs that
/// probe memory or read files that may shrink do.
extern "C" fn jump_back(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut c_void) {
    // SAFETY: set by `survives`, whose frame is live: the signal came from its `f`.
    unsafe { siglongjmp(JUMP.0.get().cast(), 1) }
}

/// Runs `f`: true when a SIGBUS in it was recovered from by [`jump_back`].
#[inline(never)]
fn survives(f: impl FnOnce()) -> bool {
    // SAFETY: sigsetjmp returns a second time (nonzero) only by `jump_back` while `f` runs;
    // the frames it jumps over (`f`'s, the handlers') hold nothing to drop, and this frame
    // uses none of its locals after that second return.
    if unsafe { sigsetjmp(JUMP.0.get().cast(), 1) } != 0 {
        return true;
    }
    f();
    false
}

/// A program that recovers from SIGBUS (`jump_back`, installed before ours), with ours in
/// front of it: faults outside shard maps, and SIGBUS it raises itself, are each passed to
/// it and recovered from, not just the first. Prints how many of six were.
fn recovered_again_and_again() {
    set_info_handler(jump_back, 0, &[]);
    assert!(shard_cut_under_reader(|| {}) > 0);
    println!("own fault handled");
    let (_dir, map) = cut_map();
    let byte = map.as_ptr().wrapping_add(30_000);
    let mut recovered = 0;
    for round in 0..3 {
        // SAFETY: a byte of a live map; reading it faults, which is the point.
        if survives(|| _ = std::hint::black_box(unsafe { byte.read_volatile() })) {
            println!("fault {round} recovered");
            recovered += 1;
        }
        // SAFETY: raise is always safe to call.
        if survives(|| _ = unsafe { libc::raise(libc::SIGBUS) }) {
            println!("raise {round} recovered");
            recovered += 1;
        }
    }
    println!("recovered {recovered}");
}

/// The first SIGBUS passed to such a handler was the last: a later one it raised itself
/// was taken for that handler giving up, and ended the process.
#[test]
fn a_handler_before_ours_that_recovers_from_sigbus_recovers_every_time() {
    let (status, printed) = run_child("recover");
    assert!(status.success(), "{status:?}: {printed}");
    assert!(printed.contains("own fault handled"), "{printed}");
    assert_eq!(printed_number(&printed, "recovered "), 6, "{printed}");
}

static SLOW_CALLS: AtomicUsize = AtomicUsize::new(0);

/// A handler that takes a while (a crash reporter writing a dump, a runtime doing its
/// own work), counts its calls, and returns.
extern "C" fn slow_count(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut c_void) {
    SLOW_CALLS.fetch_add(1, Ordering::SeqCst);
    // SAFETY: usleep is async-signal-safe.
    unsafe { libc::usleep(200_000) };
}

/// Twenty SIGBUS sent to the main thread 50 ms apart, faster than the handler before ours
/// (200 ms) takes them: each reaches it that would without ours (the kernel merges those
/// sent while one is pending), and the process lives.
fn two_sent_while_the_first_is_handled() {
    set_info_handler(slow_count, 0, &[]);
    install_read_fault_handler();
    // SAFETY: pthread_self has no preconditions.
    let main = unsafe { libc::pthread_self() } as usize;
    let sender = std::thread::spawn(move || {
        for _ in 0..20 {
            // SAFETY: the main thread is alive: it waits for this thread below.
            unsafe { libc::pthread_kill(main as libc::pthread_t, libc::SIGBUS) };
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    sender.join().unwrap();
    std::thread::sleep(Duration::from_millis(800));
    println!("calls {}", SLOW_CALLS.load(Ordering::SeqCst));
}

/// The second was taken for the handler raising the signal back to itself, and given the
/// default action: the process died of SIGBUS.
#[test]
fn a_sigbus_sent_while_the_handler_before_ours_runs_reaches_it_too() {
    let (status, printed) = run_child("two_sent");
    assert!(status.success(), "{status:?}: {printed}");
    // One call per 200 ms while sends keep coming (merged while pending), about five.
    let calls = printed_number(&printed, "calls ");
    assert!((2..=20).contains(&calls), "{printed}");
}

/// Printed `key value` of a child, as a number.
fn printed_number(printed: &str, key: &str) -> usize {
    printed
        .split(key)
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no {key:?} in {printed:?}"))
}

#[test]
fn a_handler_that_puts_itself_back_when_called_leaves_ours_in_front() {
    let (status, printed) = run_child("rearm");
    assert!(status.success(), "{status:?}: {printed}");
    assert!(printed_number(&printed, "unreadable ") > 0, "{printed}");
}

#[test]
fn a_system_call_interrupted_by_a_sent_sigbus_restarts_as_without_ours() {
    let (status, printed) = run_child("restart");
    assert!(status.success(), "{status:?}: {printed}");
    assert!(printed.contains("read 1 7 "), "{printed}");
}

#[test]
fn reinstalling_in_front_of_other_handlers_keeps_memory_bounded() {
    let (status, printed) = run_child("alternate");
    assert!(status.success(), "{status:?}: {printed}");
    let grown = printed_number(&printed, "grown ");
    // 10,000 reinstalls leaked 152 bytes each (1.5 MB).
    assert!(
        grown < 4096,
        "{grown} bytes still allocated after 10,000 reinstalls"
    );
}
