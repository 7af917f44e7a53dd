//! Signals around Rust work: how long it may hold a Python caller before it looks for
//! Ctrl-C, and the SIGBUS handler that turns a lost shard page into an error.

use std::time::Duration;

/// How long Rust work may hold a Python caller before it gets the GIL back to look for
/// Ctrl-C (`check_signals`): a wait for a batch, a conversion. Short enough to feel
/// immediate, long enough to cost nothing.
pub(crate) const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// Puts stoker's SIGBUS handler for shard maps back in front, where Python code has
/// replaced it since the shards were opened: `faulthandler.enable()` (a fault in a map
/// then ended the process with "Fatal Python error: Bus error"), `signal.signal(SIGBUS,
/// ...)` (whose C handler returns to the faulting read, which faults again forever: a
/// hang), a DataLoader worker's handler. Python code runs only between stoker calls, so
/// each call that reads shards, or waits for threads that do, calls this first; when the
/// handler is in place it is one `sigaction` query.
pub(crate) fn guard_shard_reads() {
    stoker_formats::install_read_fault_handler();
}
