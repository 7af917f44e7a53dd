//! A terminal progress bar for [`convert`](super::convert): images, images/s, MB/s and
//! ETA on stderr. Behind the `progress-bar` feature (indicatif), so the library itself
//! does not depend on a terminal crate; the CLI and the Python package share this one.
//!
//! Where stderr is no terminal (`kubectl logs`, a Slurm job's output file) a bar draws
//! nothing, and a conversion of hours said nothing until its end: whether it was working
//! or stuck could not be told. [`TerminalBar::log_lines`] writes a plain line instead, at
//! the start and then at most once per interval.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::report::Progress;
use crate::text::{one_line, Lossless};

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
    /// Progress as lines of text, for a log rather than a terminal.
    lines: Option<Lines>,
}

/// Where and how often [`TerminalBar::log_lines`] writes, and when it last did.
struct Lines {
    every: Duration,
    state: Mutex<(Option<Instant>, Box<dyn Write + Send>)>,
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
            lines: None,
        }
    }

    /// Progress for a log: no bar, but a line into `out` (stderr in the CLI) when the
    /// conversion starts and then at most once per `every` as inputs finish: `progress:
    /// 1200/50000 images (2.4%) in 4 seconds, 310 img/s, 41.2 MB/s, ETA 2 minutes` (the
    /// time since the start, as a Slurm output file has no timestamps).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use stoker_formats::convert::{Progress, TerminalBar};
    ///
    /// let log = TerminalBar::log_lines(Duration::from_secs(60), false, Box::new(std::io::stderr()));
    /// log.start(10); // progress: 0/10 images (0.0%) ...
    /// ```
    pub fn log_lines(every: Duration, show_skipped: bool, out: Box<dyn Write + Send>) -> Self {
        let mut bar = TerminalBar::new(false, show_skipped);
        bar.lines = Some(Lines {
            every,
            state: Mutex::new((None, out)),
        });
        bar
    }

    /// Writes a progress line when lines are asked for and `every` has passed since the
    /// last one (or none was written yet).
    fn log_line(&self) {
        let Some(lines) = &self.lines else { return };
        let mut state = lines.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if state
            .0
            .is_some_and(|last| now.duration_since(last) < lines.every)
        {
            return;
        }
        state.0 = Some(now);
        let (pos, len) = (self.bar.position(), self.bar.length().unwrap_or(0));
        let secs = self.bar.elapsed().as_secs_f64().max(1e-3);
        let bytes = self.bytes.load(Ordering::Relaxed);
        let pct = 100.0 * pos as f64 / len.max(1) as f64;
        let rate = pos as f64 / secs;
        let eta = if pos == 0 {
            "?".to_string()
        } else {
            let left = len.saturating_sub(pos) as f64 / rate.max(1e-9);
            indicatif::HumanDuration(Duration::from_secs_f64(left.min(1e9))).to_string()
        };
        // A log that cannot be written loses a progress line, not the conversion.
        let _ = writeln!(
            state.1,
            "progress: {pos}/{len} images ({pct:.1}%) in {}, {rate:.0} img/s, {:.1} MB/s, ETA {eta}",
            indicatif::HumanDuration(self.bar.elapsed()),
            bytes as f64 / 1e6 / secs
        );
    }
}

impl Progress for TerminalBar {
    fn start(&self, inputs: u64) {
        self.bar.set_length(inputs);
        self.log_line();
    }
    fn advance(&self, inputs: u64, bytes: u64) {
        let total = self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.bar.inc(inputs);
        let secs = self.bar.elapsed().as_secs_f64().max(1e-3);
        self.bar
            .set_message(format!("{:.1} MB/s", total as f64 / 1e6 / secs));
        self.log_line();
    }
    fn skipped(&self, path: &Path, reason: &str) {
        if self.show_skipped {
            self.bar.suspend(|| {
                eprintln!(
                    "{}",
                    one_line(&format!("skipped {}: {reason}", path.lossless()))
                )
            });
        }
    }
    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A log that a test can read back.
    #[derive(Clone, Default)]
    struct Log(Arc<Mutex<Vec<u8>>>);
    impl Write for Log {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn log_lines_say_how_far_at_the_start_and_then_once_per_interval() {
        let log = Log::default();
        let bar = TerminalBar::log_lines(Duration::from_secs(3600), false, Box::new(log.clone()));
        bar.start(200);
        bar.advance(50, 1_000_000);
        bar.advance(50, 1_000_000);
        let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
        // The start, then nothing until an hour has passed.
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.starts_with("progress: 0/200 images (0.0%)"), "{text}");

        let log = Log::default();
        let bar = TerminalBar::log_lines(Duration::ZERO, false, Box::new(log.clone()));
        bar.start(200);
        bar.advance(50, 1_000_000);
        let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
        let last = text.lines().last().unwrap();
        assert!(
            last.starts_with("progress: 50/200 images (25.0%)"),
            "{text}"
        );
        assert!(
            last.contains("img/s") && last.contains("MB/s, ETA "),
            "{text}"
        );
        // A bar never writes lines.
        let quiet = TerminalBar::new(false, false);
        quiet.start(3);
        assert!(quiet.lines.is_none());
    }
}
