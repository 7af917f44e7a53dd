//! What each generation of ours passes a SIGBUS outside shard maps to.
//!
//! Ours is installed as one of [`GENERATIONS`] entry functions, and each passes signals on
//! to an action of its own: the one it was put in front of. One function passing signals
//! to whichever action ours last replaced would go round in a loop. A library that
//! installs its handler over ours keeps ours as the handler it passes other signals to
//! (the JVM, Go and wasmtime call it; faulthandler puts it back and raises the signal
//! again); put ours back in front of that library, and the one function would pass the
//! library's own signal back to it, and so on until the stack overflows. With a
//! generation each, the library holds the entry that stood in front of the action before
//! it, and a signal goes down the chain as it would have had ours not been put back:
//! ours (in front of the library), the library, ours as the library kept it, the action
//! before.
//!
//! Installing ours in front of an action that a generation already stands in front of
//! reuses that generation, so a process that puts ours back in front of the same few
//! handlers again and again uses as many generations as it has handlers. Past
//! [`GENERATIONS`] different actions, the least recently used generation is given a new
//! one; a library still holding its entry then passes signals to that new action.

use std::sync::atomic::{fence, AtomicI32, AtomicU64, AtomicUsize, Ordering};

use super::action::Action;
use super::turn::Turn;

/// How many actions ours can stand in front of before one generation is reused: far more
/// SIGBUS handlers than a process has (a runtime's, faulthandler's, a DataLoader
/// worker's), and few enough for a bit each in a mark ([`super::mark`]).
pub(super) const GENERATIONS: usize = 16;

static BEHIND: [Saved; GENERATIONS] = [const { Saved::new() }; GENERATIONS];
/// The generation ours was last installed as, or [`NONE`]: never given another action,
/// since the library that replaced it (if one did) most likely kept its entry.
static LAST: AtomicUsize = AtomicUsize::new(NONE);
const NONE: usize = usize::MAX;
/// Counts uses of generations, to find the least recently used one. Turn holders only.
static CLOCK: AtomicU64 = AtomicU64::new(0);

/// The action behind one generation. `seq` is 0 until it is first written, odd while it
/// is written, and grows by 2 each time: a reader that sees the same even `seq` before and
/// after reading the fields read one action whole. `used` is the [`CLOCK`] of its last use.
struct Saved {
    seq: AtomicU64,
    handler: AtomicUsize,
    flags: AtomicI32,
    mask: AtomicU64,
    used: AtomicU64,
}

impl Saved {
    const fn new() -> Self {
        Self {
            seq: AtomicU64::new(0),
            handler: AtomicUsize::new(0),
            flags: AtomicI32::new(0),
            mask: AtomicU64::new(0),
            used: AtomicU64::new(0),
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

/// The action generation `g` passes signals on to; `None` when it has none, or is being
/// given another one right now (reused past [`GENERATIONS`] actions; possibly by the
/// thread this signal interrupted, so waiting for the write could wait for ever). Called
/// in the signal handler: no lock, no retry.
pub(super) fn behind(g: usize) -> Option<Action> {
    let slot = &BEHIND[g];
    let before = slot.seq.load(Ordering::Acquire);
    let action = slot.fields();
    fence(Ordering::Acquire);
    let whole = before != 0 && before.is_multiple_of(2);
    (whole && slot.seq.load(Ordering::Relaxed) == before).then_some(action)
}

/// The generation to install ours as in front of `action`: the one in front of it
/// already, else one not used yet, else the least recently used one but the last
/// installed, given `action`. Async-signal-safe.
pub(super) fn generation_for(action: Action, _turn: &Turn) -> usize {
    let now = CLOCK.fetch_add(1, Ordering::Relaxed) + 1;
    let last = LAST.load(Ordering::Relaxed);
    let mut oldest = (NONE, u64::MAX);
    for (g, slot) in BEHIND.iter().enumerate() {
        let seq = slot.seq.load(Ordering::Relaxed);
        if seq != 0 && seq.is_multiple_of(2) && slot.fields() == action {
            slot.used.store(now, Ordering::Relaxed);
            return g;
        }
        let used = if seq == 0 {
            0
        } else {
            slot.used.load(Ordering::Relaxed)
        };
        if g != last && used < oldest.1 {
            oldest = (g, used);
        }
    }
    let g = oldest.0;
    let slot = &BEHIND[g];
    // Odd while written. A slot left odd by a parent's thread that a fork cut off stays
    // odd here and ends even, past every value it had.
    let writing = slot.seq.load(Ordering::Relaxed) | 1;
    slot.seq.store(writing, Ordering::Relaxed);
    fence(Ordering::Release);
    slot.handler.store(action.handler, Ordering::Relaxed);
    slot.flags.store(action.flags, Ordering::Relaxed);
    slot.mask.store(action.mask, Ordering::Relaxed);
    slot.seq.store(writing + 1, Ordering::Release);
    slot.used.store(now, Ordering::Relaxed);
    g
}

/// Records that ours was installed as generation `g`.
pub(super) fn installed(g: usize, _turn: &Turn) {
    LAST.store(g, Ordering::Relaxed);
}
