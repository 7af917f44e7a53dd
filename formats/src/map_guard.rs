//! Shard maps whose failed page reads become errors instead of a dead process.
//!
//! A read through a file mapping raises SIGBUS when the page cannot be delivered: the file
//! was cut short under the map (`cp` or `rsync --inplace` over a dataset in use), or the
//! storage returned an I/O error (a network or FUSE file system, a bad sector). By default
//! that kills the process, wherever the read happened: in a CRC, a decoder, a copy.
//!
//! So every shard map is registered here, and registering installs a SIGBUS handler for
//! the process (again, in front, when another library has replaced it since; see
//! [`install`]). A fault inside a registered map gets a page of zeros mapped
//! over the lost page, and the map is marked as faulted; the read then goes on and sees
//! zeros, and whoever read records of that map checks the mark afterwards
//! ([`GuardedMap::faulted`], through `DatasetReader::check_read`) and reports the record as
//! unreadable. The same approach as Sapling's indexedlog, for the same reason: reading every
//! record with `pread` would give up the zero-copy read path, and a `setjmp`-style escape
//! from the faulting instruction is not something Rust code can do soundly.
//!
//! A fault anywhere else is passed on unchanged: to the handler installed before ours (a
//! Rust program's stack-overflow handler, Python's `faulthandler`), called as the kernel
//! would have called it (its signature, its mask, SA_NODEFER, SA_RESETHAND), or to the
//! default action, so the process dies of it as it would have without stoker. That last
//! step is why this is not built on `signal-hook-registry`: it forwards to a previous
//! handler, but has no way to give a fault back to the default action, and returning from
//! such a fault runs the faulting instruction again, forever.
//!
//! When the handler it was passed to returns having put itself (or anything else) in place
//! of ours, ours goes back in front of it. A library that replaces ours at any other time,
//! or whose handler jumps out (`siglongjmp`) instead of returning, leaves shard faults
//! fatal until the next [`install`]: the next open, `Dataset::reader`, or item read from
//! Python. Nothing here can watch the SIGBUS action between those calls.
//!
//! The handler never waits and allocates nothing: it reads fixed tables of atomics (one
//! slot per map, and a few for the action behind ours, each with a sequence number so that
//! a slot being reused is never read half-written), tries the install turn without waiting
//! for it, and makes async-signal-safe system calls: one `mmap` for a fault of ours;
//! `sigaction` and `pthread_sigmask` for one passed on.

use std::ffi::c_void;
use std::sync::atomic::{fence, AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Once;

/// As many slots as the kernel allows mappings per process by default (`vm.max_map_count`
/// is 65,530), so the table does not run out before the address space does. Each slot is
/// 32 bytes of zero-initialized static memory, touched only as slots are used.
const SLOTS: usize = 1 << 16;

/// One registered map. `seq % 4` says its state: 0 free, 1 being filled, 2 in use, 3 being
/// emptied; every use adds 4, so a reader that sees the same `seq` before and after
/// reading `start` and `end` read one consistent registration.
struct Slot {
    seq: AtomicU64,
    start: AtomicUsize,
    end: AtomicUsize,
    faulted: AtomicBool,
}

impl Slot {
    const fn new() -> Self {
        Self {
            seq: AtomicU64::new(0),
            start: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            faulted: AtomicBool::new(false),
        }
    }
}

static TABLE: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];
/// One past the highest slot ever used: the handler looks no further.
static HIGH: AtomicUsize = AtomicUsize::new(0);
/// Where the next registration starts looking for a free slot.
static NEXT: AtomicUsize = AtomicUsize::new(0);
/// The page size, set before the handler is installed.
static PAGE: AtomicUsize = AtomicUsize::new(4096);
/// The slot of [`SAVED`] holding the SIGBUS action in place before ours, where faults
/// outside shard maps go; [`NONE`] until ours is first installed (the default action).
/// Set before ours is installed (again, when another handler had replaced ours).
static IN_FORCE: AtomicUsize = AtomicUsize::new(NONE);
const NONE: usize = usize::MAX;
/// Slots for the actions ours forwards to, written in turn: ours put back in front of other
/// libraries' handlers any number of times needs no more memory than this. The one in
/// force is never written; a handler still reading one that has gone out of force since
/// sees it change and reads the one in force instead (see [`Saved`]).
const SAVED_SLOTS: usize = 4;
static SAVED: [Saved; SAVED_SLOTS] = [const { Saved::new() }; SAVED_SLOTS];
/// The pid of the process one of whose threads is putting ours in front, or 0: one at a
/// time, so that [`SAVED`] has one writer. Not a lock a `fork` can leave held: a child
/// finds its parent's pid here and takes over.
static INSTALLING: AtomicI32 = AtomicI32::new(0);
/// Set once a SIGBUS not ours was passed to the handler before ours. A SIGBUS *sent*
/// (not a fault) after that is that handler giving up: Python's faulthandler and torch's
/// worker handler report the fault, put their predecessor (ours) back and raise it again;
/// passing that on as well would go round between the two forever.
static FORWARDED: AtomicBool = AtomicBool::new(false);
/// Faults handled in registered maps, for tests and diagnostics.
static HANDLED: AtomicU64 = AtomicU64::new(0);

/// A read-only file map registered with the SIGBUS handler.
pub(crate) struct GuardedMap {
    map: memmap2::Mmap,
    /// The map's slot in [`TABLE`]; `None` when the table was full (then a failed read
    /// kills the process, as it would without this module).
    slot: Option<usize>,
}

impl std::fmt::Debug for GuardedMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedMap")
            .field("len", &self.map.len())
            .field("guarded", &self.slot.is_some())
            .field("faulted", &self.faulted())
            .finish()
    }
}

impl GuardedMap {
    /// Registers `map`, with the process's SIGBUS handler in place ([`install`]).
    pub(crate) fn new(map: memmap2::Mmap) -> Self {
        if map.is_empty() {
            return Self { map, slot: None };
        }
        install();
        let range = map.as_ptr_range();
        let slot = claim(range.start as usize, range.end as usize);
        if slot.is_none() {
            static WARNED: Once = Once::new();
            WARNED.call_once(|| {
                tracing::warn!(
                    "more than {SLOTS} shard maps open: a shard cut short while it is read \
                     now ends the process (SIGBUS) instead of failing its records"
                );
            });
        }
        Self { map, slot }
    }

    /// The mapped bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Whether a read of this map has failed since it was made: its lost pages now read as
    /// zeros, so nothing read from it can be trusted.
    pub(crate) fn faulted(&self) -> bool {
        self.slot
            .is_some_and(|i| TABLE[i].faulted.load(Ordering::Acquire))
    }
}

impl Drop for GuardedMap {
    fn drop(&mut self) {
        // Unregistered before `map` is unmapped (fields drop after this), so the handler
        // never takes an address of a later, unrelated mapping for this one.
        if let Some(i) = self.slot {
            release(i);
        }
    }
}

/// Faults handled in registered maps since the process started.
#[cfg(test)]
pub(crate) fn handled() -> u64 {
    HANDLED.load(Ordering::Relaxed)
}

fn claim(start: usize, end: usize) -> Option<usize> {
    let hint = NEXT.load(Ordering::Relaxed);
    for k in 0..SLOTS {
        let i = (hint + k) % SLOTS;
        let slot = &TABLE[i];
        let seq = slot.seq.load(Ordering::Relaxed);
        if !seq.is_multiple_of(4)
            || slot
                .seq
                .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            continue;
        }
        fence(Ordering::Release);
        slot.start.store(start, Ordering::Relaxed);
        slot.end.store(end, Ordering::Relaxed);
        slot.faulted.store(false, Ordering::Relaxed);
        slot.seq.store(seq + 2, Ordering::Release);
        HIGH.fetch_max(i + 1, Ordering::AcqRel);
        NEXT.store((i + 1) % SLOTS, Ordering::Relaxed);
        return Some(i);
    }
    None
}

fn release(i: usize) {
    let slot = &TABLE[i];
    let seq = slot.seq.load(Ordering::Relaxed);
    slot.seq.store(seq + 1, Ordering::Relaxed);
    fence(Ordering::Release);
    slot.start.store(0, Ordering::Relaxed);
    slot.end.store(0, Ordering::Relaxed);
    slot.seq.store(seq + 2, Ordering::Release);
}

/// The registered slot whose map holds `addr`. Called in the signal handler.
fn owner(addr: usize) -> Option<&'static Slot> {
    let high = HIGH.load(Ordering::Acquire).min(SLOTS);
    TABLE[..high].iter().find(|slot| {
        let before = slot.seq.load(Ordering::Acquire);
        if before % 4 != 2 {
            return false;
        }
        let (start, end) = (
            slot.start.load(Ordering::Relaxed),
            slot.end.load(Ordering::Relaxed),
        );
        fence(Ordering::Acquire);
        slot.seq.load(Ordering::Relaxed) == before && start <= addr && addr < end
    })
}

/// A SIGBUS action as ours forwards to it.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Action {
    /// `sa_sigaction`: a handler, `SIG_DFL` or `SIG_IGN`.
    handler: usize,
    flags: libc::c_int,
    /// The signals its `sa_mask` blocks, signal `s` at bit `s - 1`: Linux numbers its
    /// signals 1 to 64 (128 on MIPS, whose signals above 64 are not kept).
    mask: u64,
}

impl Action {
    const DEFAULT: Action = Action {
        handler: libc::SIG_DFL,
        flags: 0,
        mask: 0,
    };

    fn of(action: &libc::sigaction) -> Action {
        let mut mask = 0;
        for sig in 1..=64 {
            // SAFETY: sigismember reads a valid set; a number the system has no signal for
            // is -1, not a member.
            if unsafe { libc::sigismember(&action.sa_mask, sig) } == 1 {
                mask |= 1 << (sig - 1);
            }
        }
        Action {
            handler: action.sa_sigaction,
            flags: action.sa_flags,
            mask,
        }
    }
}

/// A slot for an [`Action`]. `seq` is odd while the slot is written and grows by 2 each
/// time: a reader that sees the same even `seq` before and after reading the fields read
/// one action whole.
struct Saved {
    seq: AtomicU64,
    handler: AtomicUsize,
    flags: AtomicI32,
    mask: AtomicU64,
}

impl Saved {
    const fn new() -> Self {
        Self {
            seq: AtomicU64::new(0),
            handler: AtomicUsize::new(0),
            flags: AtomicI32::new(0),
            mask: AtomicU64::new(0),
        }
    }

    fn fields(&self) -> Action {
        Action {
            handler: self.handler.load(Ordering::Relaxed),
            flags: self.flags.load(Ordering::Relaxed),
            mask: self.mask.load(Ordering::Relaxed),
        }
    }
}

/// The action in force behind ours. Called in the signal handler: no lock, and it ends,
/// since the slot in force is never written; a retry means that slot went out of force
/// and was reused while it was read ([`SAVED_SLOTS`] - 1 more actions kept meanwhile).
fn in_force() -> Action {
    loop {
        let i = IN_FORCE.load(Ordering::Acquire);
        if i == NONE {
            return Action::DEFAULT;
        }
        let slot = &SAVED[i];
        let before = slot.seq.load(Ordering::Acquire);
        let action = slot.fields();
        fence(Ordering::Acquire);
        if before.is_multiple_of(2) && slot.seq.load(Ordering::Relaxed) == before {
            return action;
        }
    }
}

/// Puts `action` in force behind ours: in the slot after the one in force, unless that one
/// holds it already. Only the holder of [`Turn`] calls it.
fn keep(action: Action, _turn: &Turn) {
    let now = IN_FORCE.load(Ordering::Relaxed);
    if now != NONE && SAVED[now].fields() == action {
        return;
    }
    let i = if now == NONE {
        0
    } else {
        (now + 1) % SAVED_SLOTS
    };
    let slot = &SAVED[i];
    // Odd while written. A slot left odd by a parent's thread that a fork cut off stays
    // odd here and ends even, past every value it had.
    let writing = slot.seq.load(Ordering::Relaxed) | 1;
    slot.seq.store(writing, Ordering::Relaxed);
    fence(Ordering::Release);
    slot.handler.store(action.handler, Ordering::Relaxed);
    slot.flags.store(action.flags, Ordering::Relaxed);
    slot.mask.store(action.mask, Ordering::Relaxed);
    slot.seq.store(writing + 1, Ordering::Release);
    IN_FORCE.store(i, Ordering::Release);
}

/// The right to write [`SAVED`] and install ours, held by one thread at a time.
struct Turn;

impl Turn {
    /// The turn, if no other thread of this process holds it.
    fn try_take() -> Option<Turn> {
        // SAFETY: getpid has no preconditions and is async-signal-safe.
        let me = unsafe { libc::getpid() };
        let holder = INSTALLING.load(Ordering::Relaxed);
        if holder == me {
            return None;
        }
        INSTALLING
            .compare_exchange(holder, me, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Turn)
    }

    /// The turn, once the thread that holds it (installing, a few system calls) is done.
    fn take() -> Turn {
        loop {
            if let Some(turn) = Turn::try_take() {
                return turn;
            }
            std::thread::yield_now();
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        INSTALLING.store(0, Ordering::Release);
    }
}

/// Installs stoker's SIGBUS handler for shard maps, unless it is the one in place: also
/// after another library replaced it without passing faults on (Python's
/// `faulthandler.enable()` called late, torch's DataLoader workers), which would turn a
/// shard read fault back into a dead process. The handler found in its place is where
/// faults outside shard maps go from then on. Every shard open calls it; a program that
/// installs a SIGBUS handler of its own afterwards can call it again.
///
/// When ours is in place this is one `sigaction` query. Otherwise one thread at a time
/// puts it in front, without a lock that a `fork` while another thread installs could
/// leave held in the child. What ours replaced comes from the call that installs it, so a
/// handler another library installs at the same moment is passed the faults outside shard
/// maps, not skipped.
pub fn install() {
    // SAFETY: sysconf has no memory-safety preconditions (it reads the auxiliary vector).
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 {
        PAGE.store(page as usize, Ordering::Relaxed);
    }
    if query().is_none_or(|current| is_ours(&current)) {
        return;
    }
    if !put_in_front(&Turn::take()) {
        tracing::warn!("cannot install the SIGBUS handler; shard read faults stay fatal");
    }
}

/// Installs ours in front of the SIGBUS action in place, unless ours is the one in place.
/// False when the kernel refused. Async-signal-safe.
fn put_in_front(turn: &Turn) -> bool {
    // Asked again with the turn held: another thread may have installed ours meanwhile.
    let Some(current) = query() else {
        return false;
    };
    if is_ours(&current) {
        return true;
    }
    // In force before ours is installed: the handler forwards to it from its first call.
    let current = Action::of(&current);
    keep(current, turn);
    #[cfg(test)]
    tests::between_query_and_install();
    // SAFETY: all-zero is a valid `sigaction`, overwritten by the call.
    let mut replaced: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: `ours()` is a valid action whose handler has the SA_SIGINFO signature and is
    // async-signal-safe (atomics, errno, mmap, sigaction, pthread_sigmask); `replaced` is
    // writable.
    if unsafe { libc::sigaction(libc::SIGBUS, &ours(), &mut replaced) } != 0 {
        return false;
    }
    // The action ours replaced, from the same call: another library's, when its sigaction
    // landed after the query. Until it is kept here, a fault outside shard maps goes to
    // the one it had replaced.
    if !is_ours(&replaced) && Action::of(&replaced) != current {
        keep(Action::of(&replaced), turn);
    }
    true
}

/// The SIGBUS action in place, or `None` when it cannot be asked.
fn query() -> Option<libc::sigaction> {
    // SAFETY: an all-zero `sigaction` is a valid value to be overwritten by the query.
    let mut current: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a query (no new action) into a valid, writable `sigaction`.
    (unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut current) } == 0)
        .then_some(current)
}

fn is_ours(action: &libc::sigaction) -> bool {
    action.sa_sigaction == on_sigbus as *const () as usize
}

/// Our action: [`on_sigbus`], with SA_ONSTACK so that a fault on a thread that runs on its
/// alternate signal stack (Rust threads set one up) is handled there too, and SA_RESTART
/// so that a SIGBUS sent (not a fault) during a system call that the handler behind ours
/// handles restarts the call, as it would without ours, instead of failing it with EINTR.
fn ours() -> libc::sigaction {
    // SAFETY: all-zero is a valid `sigaction` (empty mask, no flags), filled in below.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_sigbus as *const () as usize;
    action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
    action
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: errno is this thread's; read here and written back below, so that the code
    // the signal interrupted finds it as it left it.
    let errno = unsafe { *libc::__errno_location() };
    handle(sig, info, context);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

fn handle(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: the kernel hands an SA_SIGINFO handler a valid siginfo_t; `si_addr` is
    // meaningful for kernel-raised SIGBUS (si_code > 0) and only used then.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    if code > 0 {
        if let Some(slot) = owner(addr) {
            let page = PAGE.load(Ordering::Relaxed);
            let start = addr & !(page - 1);
            // SAFETY: the page lies inside a live registered map (its slot is in use, and
            // a map is unregistered before it is unmapped), which this process only reads:
            // replacing it with a private page of zeros changes what later reads of that
            // page see, and nothing else.
            let zeros = unsafe {
                libc::mmap(
                    start as *mut c_void,
                    page,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if zeros != libc::MAP_FAILED {
                slot.faulted.store(true, Ordering::Release);
                HANDLED.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }
    forward(sig, code, info, context);
}

/// Passes a SIGBUS that is not ours to the action in place before ours.
fn forward(sig: libc::c_int, code: libc::c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    let previous = in_force();
    let mut handler = previous.handler;
    if code <= 0 && FORWARDED.load(Ordering::Relaxed) && handler != libc::SIG_IGN {
        // Raised again by the handler it went to (see FORWARDED): end as the default
        // action ends a SIGBUS.
        handler = libc::SIG_DFL;
    }
    FORWARDED.store(true, Ordering::Relaxed);
    if handler == libc::SIG_IGN && code <= 0 {
        // A SIGBUS sent by kill() to a process that ignored it.
        return;
    }
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // With the default action back, a fault recurs when the faulting instruction runs
        // again, and a sent signal is raised again (pending until this handler returns):
        // either way the process ends as it would have without our handler.
        set_default(sig);
        if code <= 0 {
            // SAFETY: raise is async-signal-safe.
            unsafe { libc::raise(sig) };
        }
        return;
    }
    call(previous, sig, info, context);
    // A handler that puts itself (or anything else) in place when called has taken ours
    // out: put ours back in front of what it left, as the next open would. Skipped when
    // another thread of this process, or the one this interrupted, is installing.
    if let Some(turn) = Turn::try_take() {
        put_in_front(&turn);
    }
}

/// Calls `previous`'s handler as the kernel would have delivered the signal to it: with
/// the arguments its SA_SIGINFO flag says, with its `sa_mask` blocked and, unless it asked
/// for SA_NODEFER, the signal itself (faulthandler's NODEFER lets the signal it raises
/// again reach the handler it put back at once). A one-shot (SA_RESETHAND) handler
/// finds the default action in place, as it counts on: a crash reporter that returns
/// expects the fault to recur into the default action, not into itself.
fn call(previous: Action, sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    if previous.flags & libc::SA_RESETHAND != 0 {
        set_default(sig);
    }
    let bit = 1u64 << (sig - 1);
    let mut blocked = previous.mask;
    if previous.flags & libc::SA_NODEFER == 0 {
        blocked |= bit;
    }
    // SAFETY: all-zero is a valid set, overwritten by the call.
    let mut was: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: pthread_sigmask is async-signal-safe; the sets are valid. The signal was not
    // blocked where it was delivered (a fault on a blocked SIGBUS kills; a sent one waits),
    // so unblocking it here gives the handler the mask the kernel would have.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &sigset(blocked), &mut was);
        if blocked & bit == 0 {
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &sigset(bit), std::ptr::null_mut());
        }
    }
    if previous.flags & libc::SA_SIGINFO != 0 {
        // SAFETY: an SA_SIGINFO action's handler has this signature; it gets the
        // arguments the kernel gave us.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
            unsafe { std::mem::transmute(previous.handler) };
        f(sig, info, context);
    } else {
        // SAFETY: without SA_SIGINFO the handler takes the signal number only.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(previous.handler) };
        f(sig);
    }
    // SAFETY: as above; `was` is the mask this handler ran with.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &was, std::ptr::null_mut()) };
}

/// Puts the default action in place for `sig`. Async-signal-safe.
fn set_default(sig: libc::c_int) {
    // SAFETY: all-zero with SIG_DFL is the default action; sigaction is async-signal-safe.
    unsafe {
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, &default, std::ptr::null_mut());
    }
}

/// The set of the signals in `mask` (signal `s` at bit `s - 1`). Async-signal-safe.
fn sigset(mask: u64) -> libc::sigset_t {
    // SAFETY: all-zero is a valid set, emptied and filled by calls that are
    // async-signal-safe and only write the set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in 1..=64 {
            if mask & (1 << (sig - 1)) != 0 {
                libc::sigaddset(&mut set, sig);
            }
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::{Duration, Instant};

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
                let (started, mut status) = (Instant::now(), 0);
                // SAFETY: waitpid and kill on our own child, into a valid int.
                while unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == 0 {
                    if started.elapsed() > Duration::from_secs(10) {
                        hung += 1;
                        // SAFETY: as above.
                        unsafe { libc::kill(pid, libc::SIGKILL) };
                    }
                    std::thread::sleep(Duration::from_micros(100));
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
}
