//! The action behind ours: where a SIGBUS outside shard maps goes.

use std::sync::atomic::{fence, AtomicI32, AtomicU64, AtomicUsize, Ordering};

use super::action::Action;
use super::turn::Turn;

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
pub(super) fn in_force() -> Action {
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
pub(super) fn keep(action: Action, _turn: &Turn) {
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
