//! How long Rust work may hold a Python caller before it looks for Ctrl-C.

use std::time::Duration;

/// How long Rust work may hold a Python caller before it gets the GIL back to look for
/// Ctrl-C (`check_signals`): a wait for a batch, a conversion. Short enough to feel
/// immediate, long enough to cost nothing.
pub(crate) const SIGNAL_CHECK: Duration = Duration::from_millis(50);
