//! What a bench run is asked to do: the device, batch, output size, time per
//! stage, simulated step and threads; and the progress callback it reports to.

use std::time::Duration;

use stoker_decode::WaitMode;
use stoker_loader::transform::MAX_OUTPUT_SIZE;

use super::error::BenchError;

/// Most threads `--threads` may ask for.
const MAX_THREADS: usize = 1024;

/// Longest time per stage a run accepts, in seconds: one day. A longer one is a typo, not
/// a measurement, and past about 1.8e19 s it would not fit in a [`Duration`] at all.
pub const MAX_SECONDS: f64 = 86_400.0;

/// Shortest stage a run accepts, in seconds. `--seconds 1e-9` timed one batch that the
/// pipeline had made before the clock started: 49,155 img/s end to end on 2 cores, 480%
/// of the bound its own verdict named.
pub const MIN_SECONDS: f64 = 0.1;

/// Longest simulated step a run accepts, in milliseconds: one day, as for [`MAX_SECONDS`].
pub const MAX_CONSUMER_MS: f64 = 86_400_000.0;

/// Fewest simulated steps the time per stage must hold. The end-to-end stage runs whole
/// steps (one to warm up, then steps until the time is spent), and its fed ratio is the
/// steps' busy time over the window's wall time: with one or two steps that ratio says
/// where the window's edges fell rather than how well the loader keeps up, and a step
/// longer than the stage overran `--seconds` by two steps. Refused up front
/// ([`check_step_fits`]) rather than cut short, as a step cut short has no busy time.
pub const MIN_STEPS_PER_STAGE: f64 = 4.0;

/// Where the pipeline runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceChoice {
    /// The local rank's GPU (GPU 0 for a single process; the loader's
    /// [`stoker_loader::launcher::choose_device`]) when one is usable, else the CPU.
    #[default]
    Auto,
    /// CPU only; GPU stages are reported as not measured.
    Cpu,
    /// This GPU; an error when it cannot be used.
    Cuda(usize),
}

impl std::str::FromStr for DeviceChoice {
    type Err = String;

    /// Parses `auto`, `cpu`, `cuda`, `cuda:N`.
    ///
    /// # Examples
    ///
    /// ```
    /// use stoker::bottleneck::DeviceChoice;
    /// assert_eq!("cuda:1".parse::<DeviceChoice>(), Ok(DeviceChoice::Cuda(1)));
    /// assert!("gpu".parse::<DeviceChoice>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s.parse::<stoker_loader::Device>()? {
            stoker_loader::Device::Cpu => DeviceChoice::Cpu,
            stoker_loader::Device::Cuda(n) => DeviceChoice::Cuda(n),
            stoker_loader::Device::Auto => DeviceChoice::Auto,
            other => return Err(format!("`{s}`: {other:?} is no device a bench runs on")),
        })
    }
}

/// Settings of a bench run.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchOptions {
    /// Where the pipeline runs.
    pub device: DeviceChoice,
    /// Images per batch (loader, H2D copy size, GPU decode batch).
    pub batch: usize,
    /// Output side of the transforms.
    pub size: u32,
    /// Seconds per stage.
    pub seconds: f64,
    /// Simulated training step per batch, milliseconds (0 = no step).
    pub consumer_ms: f64,
    /// Threads for CPU stages; 0 = this process's share of the node (every core
    /// for a single process, [`stoker_loader::launcher::NodeShare`]).
    pub threads: usize,
    /// How the GPU stages' host threads wait for the GPU (the decoder's and
    /// the loader's setting, [`stoker_loader::LoaderBuilder::gpu_waits`]):
    /// compare `spin` and `block` by the `cpu_s` of the `gpu_decode` and
    /// `end_to_end` rows.
    pub waits: WaitMode,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            device: DeviceChoice::Auto,
            batch: 256,
            size: 224,
            seconds: 2.0,
            consumer_ms: 0.0,
            threads: 0,
            waits: WaitMode::Auto,
        }
    }
}

/// `Ok` for a stage length the bench can run: a finite number of seconds from
/// [`MIN_SECONDS`] to [`MAX_SECONDS`]. The CLI's parser and [`BenchOptions`]' check share it.
///
/// # Errors
///
/// What is wrong with `seconds`, in words.
pub fn check_seconds(seconds: f64) -> Result<(), String> {
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(format!(
            "{} is not a positive number of seconds",
            shown(seconds)
        ));
    }
    if seconds < MIN_SECONDS {
        return Err(format!(
            "{} is less than {MIN_SECONDS} seconds per stage, too short to measure one (it \
             would time the few batches made before its clock started)",
            shown(seconds)
        ));
    }
    if seconds > MAX_SECONDS {
        return Err(format!(
            "{} is more than {MAX_SECONDS} seconds (one day) per stage",
            shown(seconds)
        ));
    }
    Ok(())
}

/// `Ok` for a batch size the bench can run: at least 1 (a batch larger than the dataset
/// is one partial batch per epoch).
///
/// # Errors
///
/// What is wrong with `batch`, in words.
pub fn check_batch(batch: usize) -> Result<(), String> {
    if batch == 0 {
        return Err("must be at least 1".into());
    }
    Ok(())
}

/// `Ok` for an output side the loader's transforms accept: 1 to its `MAX_OUTPUT_SIZE`.
///
/// # Errors
///
/// What is wrong with `size`, in words.
pub fn check_size(size: u32) -> Result<(), String> {
    if size == 0 {
        return Err("must be at least 1".into());
    }
    // The loader's limit, said before any stage runs rather than after all of them.
    if size > MAX_OUTPUT_SIZE {
        return Err(format!("{size} is more than {MAX_OUTPUT_SIZE}"));
    }
    Ok(())
}

/// `Ok` for a thread count: 0 (every core) up to 1,024, since every decode thread holds
/// a buffer of the largest image.
///
/// # Errors
///
/// What is wrong with `threads`, in words.
pub fn check_threads(threads: usize) -> Result<(), String> {
    if threads > MAX_THREADS {
        return Err(format!("{threads} is more than {MAX_THREADS}"));
    }
    Ok(())
}

/// A number as the user might have typed it: `1e308` printed in full is 309 digits.
fn shown(x: f64) -> String {
    if x.is_finite() && x.abs() >= 1e9 {
        format!("{x:e}")
    } else {
        x.to_string()
    }
}

/// `Ok` for a simulated training step: a finite number of milliseconds, 0 (none) up to
/// [`MAX_CONSUMER_MS`].
///
/// # Errors
///
/// What is wrong with `ms`, in words.
pub fn check_consumer_ms(ms: f64) -> Result<(), String> {
    if !(ms.is_finite() && ms >= 0.0) {
        return Err(format!(
            "{} is not a non-negative number of milliseconds",
            shown(ms)
        ));
    }
    if ms > MAX_CONSUMER_MS {
        return Err(format!(
            "{} is more than {MAX_CONSUMER_MS} milliseconds (one day) per batch",
            shown(ms)
        ));
    }
    Ok(())
}

/// `Ok` when `seconds` per stage holds [`MIN_STEPS_PER_STAGE`] simulated steps of
/// `consumer_ms` (always, with no step). Both are in range already ([`check_seconds`],
/// [`check_consumer_ms`]).
///
/// # Errors
///
/// What to change, in words naming both options.
///
/// # Examples
///
/// ```
/// use stoker::bottleneck::check_step_fits;
/// assert!(check_step_fits(2.0, 500.0).is_ok());
/// assert!(check_step_fits(2.0, 0.0).is_ok());
/// let err = check_step_fits(2.0, 5000.0).unwrap_err();
/// assert!(err.contains("--seconds") && err.contains("--consumer-ms"));
/// ```
pub fn check_step_fits(seconds: f64, consumer_ms: f64) -> Result<(), String> {
    let steps = MIN_STEPS_PER_STAGE;
    let fits = |seconds: f64, consumer_ms: f64| consumer_ms * steps / 1000.0 <= seconds;
    if fits(seconds, consumer_ms) {
        return Ok(());
    }
    if !(seconds.is_finite() && consumer_ms.is_finite()) {
        // The options' parsers refuse these first; no suggestion is computed from them.
        return Err(format!(
            "--seconds {seconds} and --consumer-ms {consumer_ms} must be finite numbers"
        ));
    }
    // The values suggested are rounded to a thousandth, the way they are typed, and
    // moved a thousandth further while the rounding would make them refused again.
    // At most a few steps for the values the parsers allow (past about 1e12, where a
    // thousandth is below a float's spacing, the loops stop at once on their bound).
    let mut more_seconds = (consumer_ms * steps).ceil() / 1000.0;
    for _ in 0..4 {
        if fits(more_seconds, consumer_ms) {
            break;
        }
        more_seconds += 0.001;
    }
    let mut fewer_ms = (seconds * 1000.0 / steps * 1000.0).floor() / 1000.0;
    for _ in 0..4 {
        if fewer_ms <= 0.0 || fits(seconds, fewer_ms) {
            break;
        }
        fewer_ms -= 0.001;
    }
    Err(format!(
        "--consumer-ms {} does not fit {steps} times in --seconds {}: the fed ratio needs several \
         steps per stage; raise --seconds to at least {} or lower --consumer-ms to at most {}",
        shown(consumer_ms),
        shown(seconds),
        shown(more_seconds),
        shown(fewer_ms.max(0.0)),
    ))
}

impl BenchOptions {
    /// Refuses options no stage can run with.
    pub(crate) fn check(&self) -> Result<(), BenchError> {
        let invalid = |option, reason| BenchError::InvalidOption { option, reason };
        check_batch(self.batch).map_err(|r| invalid("batch", r))?;
        check_seconds(self.seconds).map_err(|r| invalid("seconds", r))?;
        check_consumer_ms(self.consumer_ms).map_err(|r| invalid("consumer-ms", r))?;
        check_step_fits(self.seconds, self.consumer_ms).map_err(|r| invalid("consumer-ms", r))?;
        check_size(self.size).map_err(|r| invalid("size", r))?;
        check_threads(self.threads).map_err(|r| invalid("threads", r))?;
        Ok(())
    }

    /// The time per stage as a [`Duration`].
    ///
    /// # Errors
    ///
    /// [`BenchError::InvalidOption`] when `seconds` is not a duration (negative, NaN, too
    /// large); [`check`](Self::check) has refused those already.
    pub(crate) fn budget(&self) -> Result<Duration, BenchError> {
        Duration::try_from_secs_f64(self.seconds).map_err(|e| BenchError::InvalidOption {
            option: "seconds",
            reason: format!("{}: {e}", self.seconds),
        })
    }
}

/// Told what is running, for a progress indicator.
pub trait Progress: Sync {
    /// A stage starts (`read`, `cpu_decode`, …).
    fn stage(&self, name: &str);
    /// Fraction of the current stage done, `0..=1`.
    fn advance(&self, fraction: f64);
}

/// A [`Progress`] that shows nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn stage(&self, _name: &str) {}
    fn advance(&self, _fraction: f64) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `seconds: 1e300` reached `Duration::from_secs_f64` and panicked.
    #[test]
    fn times_that_are_no_duration_or_past_a_day_are_refused() {
        for seconds in [1e300, MAX_SECONDS * 1.01, -1.0, f64::NAN, f64::INFINITY] {
            let opts = BenchOptions {
                seconds,
                ..BenchOptions::default()
            };
            assert!(opts.check().is_err(), "seconds {seconds}");
        }
        for consumer_ms in [1e300, MAX_CONSUMER_MS * 1.01, -1.0, f64::NAN] {
            let opts = BenchOptions {
                consumer_ms,
                ..BenchOptions::default()
            };
            assert!(opts.check().is_err(), "consumer_ms {consumer_ms}");
        }
        let day = BenchOptions {
            seconds: MAX_SECONDS,
            consumer_ms: MAX_CONSUMER_MS / MIN_STEPS_PER_STAGE,
            ..BenchOptions::default()
        };
        day.check().unwrap();
        let huge = BenchOptions {
            seconds: 1e300,
            ..BenchOptions::default()
        };
        assert!(huge.budget().is_err());
        assert_eq!(day.budget().unwrap(), Duration::from_secs(86_400));
        // Said as typed, not in 301 digits.
        assert_eq!(
            check_seconds(1e300).unwrap_err(),
            "1e300 is more than 86400 seconds (one day) per stage"
        );
        assert_eq!(
            check_seconds(-1.5).unwrap_err(),
            "-1.5 is not a positive number of seconds"
        );
        assert!(check_seconds(1e-9).unwrap_err().contains("too short"));
        assert!(check_seconds(MIN_SECONDS).is_ok());
    }

    /// A step of a day with two seconds per stage ran the end-to-end stage for two days.
    #[test]
    fn a_step_that_does_not_fit_four_times_in_the_stage_is_refused() {
        let opts = |seconds, consumer_ms| BenchOptions {
            seconds,
            consumer_ms,
            ..BenchOptions::default()
        };
        opts(2.0, 500.0).check().unwrap();
        opts(2.0, 0.0).check().unwrap();
        for (s, ms) in [
            (2.0, 501.0),
            (0.1, MAX_CONSUMER_MS),
            (MAX_SECONDS, MAX_CONSUMER_MS),
        ] {
            let err = opts(s, ms).check().unwrap_err().to_string();
            assert!(
                err.contains("--seconds") && err.contains("--consumer-ms"),
                "{err}"
            );
        }
        assert_eq!(
            check_step_fits(1.0, 300.0).unwrap_err(),
            "--consumer-ms 300 does not fit 4 times in --seconds 1: the fed ratio needs several \
             steps per stage; raise --seconds to at least 1.2 or lower --consumer-ms to at most 250"
        );
    }

    /// The values the refusal suggests are taken: `--consumer-ms 1001` suggested
    /// `--seconds 4.004`, which the rounding of 4.004 × 1000 refused again.
    #[test]
    fn the_values_a_refusal_suggests_are_taken() {
        for ms in [1001.0, 500.1, 1003.0, 333.3, 0.7, 86_400_000.0] {
            for s in [0.001, 0.3, 1.0, 2.0, 4.0] {
                let Err(err) = check_step_fits(s, ms) else {
                    continue;
                };
                let number = |after: &str| -> f64 {
                    let rest = &err[err.find(after).unwrap() + after.len()..];
                    rest.split_whitespace().next().unwrap().parse().unwrap()
                };
                let (more_s, fewer_ms) = (number("at least "), number("at most "));
                assert!(check_step_fits(more_s, ms).is_ok(), "{err}");
                assert!(check_step_fits(s, fewer_ms).is_ok(), "{err}");
                assert!(more_s < s.max(ms * 4.0 / 1000.0) + 0.002, "{err}");
            }
        }
        // Not finite (the parsers refuse these first): an error, not a search for ever.
        assert!(check_step_fits(2.0, f64::NAN).is_err());
        assert!(check_step_fits(f64::NAN, 1.0).is_err());
    }

    /// An output side past the loader's limit was refused only after every stage had run.
    #[test]
    fn an_output_size_past_the_loaders_limit_is_refused_before_any_stage() {
        let opts = |size| BenchOptions {
            size,
            ..BenchOptions::default()
        };
        opts(MAX_OUTPUT_SIZE).check().unwrap();
        let err = opts(MAX_OUTPUT_SIZE + 1).check().unwrap_err().to_string();
        assert!(err.contains("size") && err.contains("16384"), "{err}");
    }
}
