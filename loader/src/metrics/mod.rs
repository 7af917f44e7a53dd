//! Counters that prove (or disprove) that the consumer stays fed.
//!
//! Every stage of a pipeline records busy time, items and bytes into one shared [`Metrics`]
//! (atomics; the GPU path feeds the same counters). The [`crate::Loader`] itself records the
//! consumer side: how long `next()` blocked (**wait**) over how long the consumer iterated
//! (**elapsed**), giving the **fed ratio** `1 − wait / elapsed`, and the number of finished
//! batches waiting at each `next()` (queue occupancy). [`Stats`] is a consistent-enough
//! snapshot: a compact table with a one-line verdict (Display), JSON (serde) and a Prometheus
//! text exposition ([`Stats::to_prometheus`]).

mod counters;
mod cpu_busy;
mod report;
mod stats;

pub(crate) use counters::clock_ns;
pub(crate) use counters::UtilizationSums;
pub use counters::{system_cpu_jiffies, Metrics};
pub use cpu_busy::cpu_busy_reading;
pub use stats::{Stage, StageStats, Stats, Utilization, FED_THRESHOLD};
