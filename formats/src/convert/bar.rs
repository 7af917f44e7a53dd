//! A terminal progress bar for [`convert`](super::convert): images, images/s, MB/s and
//! ETA on stderr. Behind the `progress-bar` feature (indicatif), so the library itself
//! does not depend on a terminal crate; the CLI and the Python package share this one.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::report::Progress;

/// A [`Progress`] drawn as a bar on stderr. Needs the crate's `progress-bar` feature (off
/// by default; the `stoker` CLI turns it on).
///
/// # Examples
///
/// ```
/// use stoker_formats::convert::{Progress, TerminalBar};
///
/// let bar = TerminalBar::new(false, false); // hidden: draws nothing
/// bar.start(10);
/// bar.advance(10, 1 << 20);
/// bar.finish();
/// ```
pub struct TerminalBar {
    bar: ProgressBar,
    /// Source bytes of the inputs finished so far, for the MB/s figure.
    bytes: AtomicU64,
    /// Print each skipped input above the bar.
    show_skipped: bool,
}

impl TerminalBar {
    /// A bar on stderr when `show`, hidden otherwise; with `show_skipped`, each skipped
    /// input is printed above it with its reason.
    pub fn new(show: bool, show_skipped: bool) -> Self {
        let target = if show {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(0), target);
        bar.set_style(
            ProgressStyle::with_template(
                "{bar:30} {pos}/{len} images  {per_sec}  {msg}  ETA {eta}",
            )
            .expect("valid template"),
        );
        TerminalBar {
            bar,
            bytes: AtomicU64::new(0),
            show_skipped,
        }
    }
}

impl Progress for TerminalBar {
    fn start(&self, inputs: u64) {
        self.bar.set_length(inputs);
    }
    fn advance(&self, inputs: u64, bytes: u64) {
        let total = self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.bar.inc(inputs);
        let secs = self.bar.elapsed().as_secs_f64().max(1e-3);
        self.bar
            .set_message(format!("{:.1} MB/s", total as f64 / 1e6 / secs));
    }
    fn skipped(&self, path: &Path, reason: &str) {
        if self.show_skipped {
            self.bar
                .suspend(|| eprintln!("skipped {}: {reason}", path.display()));
        }
    }
    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
