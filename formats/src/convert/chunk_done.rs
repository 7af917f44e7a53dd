//! [`ChunkDone`]: whether a [`super::SampleWriter`]'s chunk on the thread pool has its
//! results, to wait on without holding the writer.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Whether a chunk of samples that a [`super::SampleWriter`] handed to its thread pool has
/// been transcoded ([`super::SampleWriter::waits_for`]). Clones share the state.
#[derive(Debug, Clone, Default)]
pub struct ChunkDone(Arc<(Mutex<bool>, Condvar)>);

/// Marks its chunk done when dropped: when the results are sent, or when the job ends
/// without them (a panic), so that nobody waits for a chunk that will never come.
pub(super) struct SetOnDrop(pub(super) ChunkDone);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.set();
    }
}

impl ChunkDone {
    /// Marks the chunk done and wakes whoever waits.
    fn set(&self) {
        let (done, woken) = &*self.0;
        *done.lock().unwrap_or_else(|p| p.into_inner()) = true;
        woken.notify_all();
    }

    /// Whether the chunk is done.
    pub fn is_done(&self) -> bool {
        *self.0 .0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits at most `timeout` for the chunk; returns whether it is done.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let (done, woken) = &*self.0;
        let guard = done.lock().unwrap_or_else(|p| p.into_inner());
        let (guard, _) = woken
            .wait_timeout_while(guard, timeout, |d| !*d)
            .unwrap_or_else(|p| p.into_inner());
        *guard
    }
}
