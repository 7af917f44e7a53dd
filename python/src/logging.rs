//! stoker's `tracing` events, handed to Python's `logging`: logger `stoker.formats`,
//! `stoker.loader` or `stoker.decode` by the crate that emits them (`stoker` for the
//! rest), ERROR and WARN as `logging.ERROR` and `WARNING`, INFO and DEBUG as theirs, TRACE
//! as level 5.
//!
//! # A queue, emptied on the caller's thread
//!
//! Most events come from threads Python knows nothing about: the conversion thread and
//! its rayon pool, the writer's transcoding threads, the loader's workers and its next
//! epoch's early start. Taking the GIL on the emitting thread would deadlock wherever the
//! binding waits for such a thread while it holds the GIL. The calls release it while
//! they wait (`detach`), but not everything can: an `Epoch`, a `Loader` or an unclosed
//! `Writer` that Python frees joins its threads in `Drop` with the GIL held (a reference
//! count or the garbage collector decides when), and `Loader.stats()` takes, with the
//! GIL, the metrics locks the workers take. That rules out `pyo3-log` (0.13.5 fits our
//! PyO3, but it calls Python on the emitting thread, and its documentation shows this
//! deadlock; it also bridges the `log` crate, which would need `tracing`'s `log` feature
//! in every crate of the workspace build, the CLI's too). So the subscriber installed
//! here never touches Python: it compares the event's level with Python's levels, read
//! earlier into atomics, formats the event, and puts it in a bounded queue ([`CAPACITY`]
//! events; past that they are dropped and counted, and the count is logged as a warning
//! with the next delivery).
//!
//! The queue is emptied into `logging` on the thread of a Python call, holding the GIL
//! and none of stoker's locks (a handler may call stoker again): when each call that may
//! emit returns (also with an exception: `convert`, `merge`, `Dataset(...)`, the
//! writer's and the loader's methods, each `next` of an epoch), every
//! [`SIGNAL_CHECK`](crate::signals::SIGNAL_CHECK) while `stoker.convert` runs (its caller
//! wakes that often for Ctrl-C), and at interpreter exit (`atexit`). A record keeps the
//! time and the Rust file and line of its event, not of its delivery. A
//! `KeyboardInterrupt` raised in a handler (Ctrl-C landing there) ends the delivery and is
//! raised again for the caller ([`interrupted`]).
//!
//! # What it costs
//!
//! Python's levels are read when those calls start (within an epoch, at most once a
//! second), and the most verbose of them is `tracing`'s maximum level
//! ([`Subscriber::max_level_hint`]): an event above it costs its call site one atomic
//! load, nothing is formatted. Python's default (`WARNING`, from the root logger) lets
//! warnings and errors through. A disabled `stoker` logger (`logger.disabled = True`)
//! turns its children off too; `logging.disable(level)` is honoured.
//!
//! # Warnings
//!
//! What the binding hands over as a `UserWarning` itself (the loader's notes, a resumed
//! state's note, the report warnings of `convert` and `Writer`) stays a `UserWarning`, for
//! the caller to act on; the event the library logs for the same note is not logged again
//! ([`holding`]). Every other WARN event is a `logging` WARNING only.
//!
//! # Forks, shutdown, sub-interpreters
//!
//! The queue belongs to the process that made it: in a forked child (a DataLoader worker)
//! the first event or delivery makes a new one, and the parent's, whose lock a thread that
//! does not exist in the child may hold forever, and whose events are the parent's, is
//! left alone. Nothing outside a Python call touches Python, so events after the last
//! delivery (the `atexit` one) or during finalization stay queued and end with the
//! process. A sub-interpreter that imports stoker gets a copy of the module from CPython
//! (PyO3's refusal of sub-interpreters is in the init, which the copy does not run): a
//! call made there delivers what is queued to that interpreter's `logging`, with the
//! levels either interpreter read last; the queue itself holds only Rust data.
//!
//! The subscriber is the global default of this extension module's own copy of
//! `tracing` (the Rust crates are linked into it): the `stoker` CLI, Rust programs and
//! other extension modules keep theirs.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use pyo3::exceptions::PyKeyboardInterrupt;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use stoker_decode::PerProcess;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span;
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};

use crate::locks::lock;

/// The Python logger of each crate's events: `(crate, logger)`; the last takes the rest.
const LOGGERS: [(&str, &str); 4] = [
    ("stoker_formats", "stoker.formats"),
    ("stoker_loader", "stoker.loader"),
    ("stoker_decode", "stoker.decode"),
    ("", "stoker"),
];

/// The `logging` level of each verbosity (index `verbosity - 1`): ERROR, WARNING, INFO,
/// DEBUG, and 5 for TRACE, which `logging` has no name for (as `pyo3-log` maps it).
const PYTHON_LEVELS: [i64; 5] = [40, 30, 20, 10, 5];

/// Events held for delivery at most: the bound on the memory of a flood between two
/// calls (at DEBUG, the CPU decoder's fallback is an event per image; the loader's bad
/// records have a limit of their own).
const CAPACITY: usize = 1024;

/// How verbose each of [`LOGGERS`] is in Python, as a verbosity: 0 nothing, 1 errors, 2
/// warnings too, ... 5 everything. Written only by [`refresh`] (with the GIL), read by
/// every thread's events. Warnings until Python is asked (Python's default).
static LEVELS: [AtomicU8; 4] = [const { AtomicU8::new(2) }; 4];

/// When the levels were last read, in ms of [`elapsed_ms`]: `next` reads them at most
/// once a second.
static LAST_REFRESH_MS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// While [`holding`] runs on this thread: its events, held back from the queue.
    static HELD: RefCell<Option<Vec<Record>>> = const { RefCell::new(None) };
}

/// Installs the subscriber that queues stoker's events for Python and reads Python's
/// levels; at module import.
pub(crate) fn install(py: Python<'_>) {
    // Fails only if set already, which one import per process rules out.
    let _ = tracing::subscriber::set_global_default(Bridge);
    refresh(py);
}

/// A Python call that may emit: Python's levels are read when it is made, and the events
/// queued meanwhile are delivered when it is dropped (also on an exception's way out).
/// Make it first in the call, so that it is dropped after the call's locks: delivery runs
/// Python's handlers, which may call stoker.
pub(crate) struct Call<'py> {
    py: Python<'py>,
    /// Whether the drop delivers ([`Call::keep_for_next`]).
    deliver: bool,
}

impl<'py> Call<'py> {
    pub(crate) fn new(py: Python<'py>) -> Self {
        refresh(py);
        Call { py, deliver: true }
    }

    /// For a call made once per batch or sample: the levels are read again only when a
    /// second has passed since the last reading.
    pub(crate) fn often(py: Python<'py>) -> Self {
        if elapsed_ms().saturating_sub(LAST_REFRESH_MS.load(Ordering::Relaxed)) >= 1000 {
            refresh(py);
        }
        Call { py, deliver: true }
    }

    /// For a call that hands out or takes something it counts (a batch, a sample): the
    /// events queued so far are delivered now, before it does, and a `KeyboardInterrupt`
    /// raised by a handler is this call's error; [`Call::keep_for_next`] once it did.
    /// Delivered on the way out, a Ctrl-C in a handler was raised after the call had
    /// counted a batch the caller never got: a resume skipped it.
    pub(crate) fn deliver_first(py: Python<'py>) -> PyResult<Self> {
        let call = Call::often(py);
        deliver_now(py)?;
        Ok(call)
    }

    /// The call has handed out (or taken) what it counts: what was queued meanwhile waits
    /// for the next delivery, so that no handler runs between the count and the caller.
    pub(crate) fn keep_for_next(&mut self) {
        self.deliver = false;
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        // Unwinding: PyO3 turns the panic into an exception; Python code now could
        // panic again, which aborts.
        if self.deliver && !std::thread::panicking() {
            deliver(self.py);
        }
    }
}

/// `f()`, holding back the events this thread emits meanwhile: the library logs some
/// notes as warnings that the binding hands over as `UserWarning` itself
/// ([`Held::handed_over`]); the others go to the queue when the [`Held`] is dropped.
pub(crate) fn holding<T>(f: impl FnOnce() -> T) -> (T, Held) {
    let mut holding = Holding {
        outer: Some(HELD.with(|h| h.borrow_mut().replace(Vec::new()))),
    };
    let out = f();
    (out, Held(holding.end()))
}

/// This thread holding events back; ended also when [`holding`]'s `f` unwinds, whose
/// events then go to the queue.
struct Holding {
    /// What was held before (`None` at the outermost), until `end`.
    outer: Option<Option<Vec<Record>>>,
}

impl Holding {
    /// Puts back what was held before, and returns the events held since.
    fn end(&mut self) -> Vec<Record> {
        let Some(outer) = self.outer.take() else {
            return Vec::new();
        };
        HELD.try_with(|h| std::mem::replace(&mut *h.borrow_mut(), outer))
            .ok()
            .flatten()
            .unwrap_or_default()
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        drop(Held(self.end()));
    }
}

/// Events held back by [`holding`]; queued when dropped.
pub(crate) struct Held(Vec<Record>);

impl Held {
    /// Forgets the events whose message is `message`: the caller says it as a
    /// `UserWarning`.
    pub(crate) fn handed_over(&mut self, message: &str) {
        self.0.retain(|r| r.message != message);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let q = queue();
        for r in self.0.drain(..) {
            q.push(r);
        }
    }
}

thread_local! {
    /// Whether this thread is delivering: a handler that calls stoker, which logs, would
    /// otherwise deliver again from inside the handler, each level nesting some 40 kB of
    /// stack, until the thread's stack ran out (a SIGSEGV, where Python's own recursion
    /// limit counts only its frames). Its events wait for the next delivery.
    static DELIVERING: Cell<bool> = const { Cell::new(false) };
}

/// Clears [`DELIVERING`] when the delivery ends, also by a panic.
struct Delivering;

impl Drop for Delivering {
    fn drop(&mut self) {
        DELIVERING.with(|d| d.set(false));
    }
}

/// Delivers the events queued so far to Python's `logging`, in the order emitted (not
/// from inside a delivery: [`DELIVERING`]). A `KeyboardInterrupt` raised by a handler
/// (Ctrl-C landing there) is said again for the caller's next bytecode, as it cannot
/// leave a `Drop`.
pub(crate) fn deliver(py: Python<'_>) {
    if let Err(interrupt) = deliver_now(py) {
        let again = py
            .import("_thread")
            .and_then(|t| t.call_method0("interrupt_main"));
        if again.is_err() {
            interrupt.write_unraisable(py, None);
        }
    }
}

/// [`deliver`], returning a handler's `KeyboardInterrupt`, which stops the delivery (the
/// events it cut off are counted as dropped).
pub(crate) fn deliver_now(py: Python<'_>) -> PyResult<()> {
    if DELIVERING.with(|d| d.replace(true)) {
        return Ok(());
    }
    let _delivering = Delivering;
    let (records, dropped) = queue().take();
    if records.is_empty() && dropped == 0 {
        return Ok(());
    }
    // Not importable: the interpreter is shutting down, and nothing could show them.
    let Ok(logging) = py.import("logging") else {
        return Ok(());
    };
    for (n, r) in records.iter().enumerate() {
        if let Err(e) = emit(py, &logging, r) {
            if let Some(interrupt) = interrupted(py, e) {
                let rest = (records.len() - n - 1) as u64;
                queue().dropped.fetch_add(dropped + rest, Ordering::Relaxed);
                return Err(interrupt);
            }
        }
    }
    if dropped > 0 {
        let said = logging.call_method1("getLogger", ("stoker",)).and_then(|l| {
            l.call_method1(
                "warning",
                (
                    "%d log events of stoker's threads were dropped: more than %d waited for delivery to logging, or a KeyboardInterrupt cut a delivery short",
                    dropped,
                    CAPACITY,
                ),
            )
        });
        if let Err(e) = said {
            if let Some(interrupt) = interrupted(py, e) {
                queue().dropped.fetch_add(dropped, Ordering::Relaxed);
                return Err(interrupt);
            }
        }
    }
    Ok(())
}

/// Reports an exception that a delivery got from `logging`; gives back a
/// `KeyboardInterrupt` (Ctrl-C landed while a handler ran), which stops the delivery.
fn interrupted(py: Python<'_>, e: PyErr) -> Option<PyErr> {
    if !e.is_instance_of::<PyKeyboardInterrupt>(py) {
        // A handler's own errors are `logging`'s to report; this is a filter or a
        // handler that raised past it.
        e.write_unraisable(py, None);
        return None;
    }
    Some(e)
}

/// `stoker._deliver_logs()`: what [`deliver`] does, for `atexit`, so that what the
/// loader's threads logged after the last call is not lost.
#[pyfunction]
#[pyo3(name = "_deliver_logs")]
pub(crate) fn deliver_logs(py: Python<'_>) {
    deliver(py);
}

/// Reads Python's levels for [`LOGGERS`]; `tracing`'s maximum level follows when they
/// change.
pub(crate) fn refresh(py: Python<'_>) {
    LAST_REFRESH_MS.store(elapsed_ms(), Ordering::Relaxed);
    let Ok(levels) = python_levels(py) else {
        // `logging` broken or gone (finalization): keep what was read last.
        return;
    };
    let mut changed = false;
    for (slot, v) in LEVELS.iter().zip(levels) {
        changed |= slot.swap(v, Ordering::Relaxed) != v;
    }
    if changed {
        // Recomputes `LevelFilter::current()` from `max_level_hint`: the check each
        // event's call site makes first.
        tracing::callsite::rebuild_interest_cache();
    }
}

/// The verbosity of each of [`LOGGERS`], as `Logger.isEnabledFor` decides.
fn python_levels(py: Python<'_>) -> PyResult<[u8; 4]> {
    let logging = py.import("logging")?;
    let get_logger = logging.getattr("getLogger")?;
    // `logging.disable(level)`: nothing at `level` or below anywhere.
    let disable: i64 = logging
        .getattr("root")?
        .getattr("manager")?
        .getattr("disable")?
        .extract()?;
    let stoker_off: bool = get_logger
        .call1(("stoker",))?
        .getattr("disabled")?
        .extract()?;
    let mut out = [0; 4];
    for (slot, (_, name)) in out.iter_mut().zip(LOGGERS) {
        let logger = get_logger.call1((name,))?;
        if stoker_off || logger.getattr("disabled")?.extract::<bool>()? {
            continue;
        }
        let effective: i64 = logger.call_method0("getEffectiveLevel")?.extract()?;
        let least = effective.max(disable.saturating_add(1));
        *slot = PYTHON_LEVELS.iter().filter(|&&l| l >= least).count() as u8;
    }
    Ok(out)
}

/// Hands one event to its logger, as a record of its time and Rust source line.
fn emit(py: Python<'_>, logging: &Bound<'_, PyModule>, r: &Record) -> PyResult<()> {
    let name = LOGGERS[r.logger].1;
    let level = PYTHON_LEVELS[usize::from(r.verbosity) - 1];
    let logger = logging.call_method1("getLogger", (name,))?;
    // Levels may have changed since the event passed the atomics.
    if !logger.call_method1("isEnabledFor", (level,))?.is_truthy()? {
        return Ok(());
    }
    let text = format!("{}{}", r.message, r.fields);
    let record = logger.call_method1(
        "makeRecord",
        (
            name,
            level,
            r.file.unwrap_or("<rust>"),
            r.line.unwrap_or(0),
            text,
            PyTuple::empty(py),
            py.None(),
            r.module,
        ),
    )?;
    // The event's time, not the delivery's (up to a call's length later).
    let at =
        r.at.duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
    let made: f64 = record.getattr("created")?.extract()?;
    let relative: f64 = record.getattr("relativeCreated")?.extract()?;
    record.setattr("created", at)?;
    record.setattr("msecs", ((at - at.floor()) * 1000.0).floor())?;
    record.setattr("relativeCreated", relative + (at - made) * 1000.0)?;
    logger.call_method1("handle", (record,))?;
    Ok(())
}

/// The `stoker` command's own log output, once it runs in this process ([`to_command`]).
static COMMAND: OnceLock<Box<dyn Subscriber + Send + Sync>> = OnceLock::new();

/// Hands every event from now on to `subscriber` instead of Python's `logging`: the
/// `stoker` command run by the console script ([`crate::command`]) logs as the binary
/// does, on stderr, filtered by `STOKER_LOG`. The bridge stays the global default (set at
/// import, once per process) and forwards to it; the process ends with the command, and
/// nothing would deliver the queue meanwhile.
pub(crate) fn to_command(subscriber: impl Subscriber + Send + Sync + 'static) {
    if COMMAND.set(Box::new(subscriber)).is_ok() {
        // The call sites registered before asked the bridge; ask the command's filter.
        tracing::callsite::rebuild_interest_cache();
    }
}

/// The subscriber: filters by the levels read from Python and queues what passes, or
/// forwards everything to [`COMMAND`] once it is set.
struct Bridge;

impl Subscriber for Bridge {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if let Some(c) = COMMAND.get() {
            return c.register_callsite(metadata);
        }
        // Decided per event by `enabled` (levels change while call sites stay), behind
        // the maximum level, which spares the others even that call.
        Interest::sometimes()
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        if let Some(c) = COMMAND.get() {
            return c.enabled(metadata);
        }
        verbosity(metadata.level()) <= LEVELS[logger_of(metadata.target())].load(Ordering::Relaxed)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        if let Some(c) = COMMAND.get() {
            return c.max_level_hint();
        }
        let most = LEVELS
            .iter()
            .map(|l| l.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0);
        Some(match most {
            0 => LevelFilter::OFF,
            1 => LevelFilter::ERROR,
            2 => LevelFilter::WARN,
            3 => LevelFilter::INFO,
            4 => LevelFilter::DEBUG,
            _ => LevelFilter::TRACE,
        })
    }

    fn event(&self, event: &Event<'_>) {
        if let Some(c) = COMMAND.get() {
            return c.event(event);
        }
        let mut record = Some(Record::of(event));
        // Held back on a thread in `holding`; `try_with` fails only while this thread's
        // locals are destroyed, when nothing holds.
        let _ = HELD.try_with(|h| {
            if let Some(held) = h.borrow_mut().as_mut() {
                held.extend(record.take());
            }
        });
        if let Some(record) = record {
            queue().push(record);
        }
    }

    // stoker makes no spans; one that a dependency makes is not recorded, unless the
    // command's subscriber records it.
    fn new_span(&self, attributes: &span::Attributes<'_>) -> span::Id {
        COMMAND
            .get()
            .map_or(span::Id::from_u64(1), |c| c.new_span(attributes))
    }
    fn record(&self, id: &span::Id, values: &span::Record<'_>) {
        if let Some(c) = COMMAND.get() {
            c.record(id, values);
        }
    }
    fn record_follows_from(&self, id: &span::Id, follows: &span::Id) {
        if let Some(c) = COMMAND.get() {
            c.record_follows_from(id, follows);
        }
    }
    fn enter(&self, id: &span::Id) {
        if let Some(c) = COMMAND.get() {
            c.enter(id);
        }
    }
    fn exit(&self, id: &span::Id) {
        if let Some(c) = COMMAND.get() {
            c.exit(id);
        }
    }
    fn clone_span(&self, id: &span::Id) -> span::Id {
        COMMAND
            .get()
            .map_or_else(|| id.clone(), |c| c.clone_span(id))
    }
    fn try_close(&self, id: span::Id) -> bool {
        COMMAND.get().is_some_and(|c| c.try_close(id))
    }
}

/// 1 for errors ... 5 for trace: an event passes a logger of at least its verbosity.
fn verbosity(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 1,
        Level::WARN => 2,
        Level::INFO => 3,
        Level::DEBUG => 4,
        _ => 5,
    }
}

/// The index in [`LOGGERS`] of an event's target (`stoker_loader::pipeline`).
fn logger_of(target: &str) -> usize {
    let krate = target.split("::").next().unwrap_or(target);
    LOGGERS
        .iter()
        .position(|&(c, _)| c == krate)
        .unwrap_or(LOGGERS.len() - 1)
}

/// An event, formatted on the thread that emitted it.
struct Record {
    /// Index in [`LOGGERS`].
    logger: usize,
    /// 1 (error) to 5 (trace), see [`verbosity`].
    verbosity: u8,
    /// The event's message.
    message: String,
    /// Its other fields, ` name=value` each, as the CLI's log lines show them.
    fields: String,
    file: Option<&'static str>,
    line: Option<u32>,
    module: Option<&'static str>,
    at: SystemTime,
}

impl Record {
    fn of(event: &Event<'_>) -> Record {
        let meta = event.metadata();
        let mut text = Text::default();
        event.record(&mut text);
        Record {
            logger: logger_of(meta.target()),
            verbosity: verbosity(meta.level()),
            message: text.message,
            fields: text.fields,
            file: meta.file(),
            line: meta.line(),
            module: meta.module_path(),
            at: SystemTime::now(),
        }
    }
}

/// The visitor that formats an event's fields.
#[derive(Default)]
struct Text {
    message: String,
    fields: String,
}

impl Visit for Text {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        // Writing to a String cannot fail.
        let _ = if field.name() == "message" {
            write!(self.message, "{value:?}")
        } else {
            write!(self.fields, " {}={value:?}", field.name())
        };
    }
}

/// The events waiting for delivery, of one process.
#[derive(Default)]
struct Queue {
    /// In the order emitted; at most [`CAPACITY`].
    records: Mutex<VecDeque<Record>>,
    /// `records.len()`, read without the lock: a delivery with nothing to deliver (every
    /// batch's) is one load.
    pending: AtomicUsize,
    /// Events dropped with the queue full since the last delivery.
    dropped: AtomicU64,
}

impl Queue {
    fn push(&self, record: Record) {
        let mut records = lock(&self.records);
        if records.len() >= CAPACITY {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        records.push_back(record);
        self.pending.store(records.len(), Ordering::Relaxed);
    }

    /// The events queued and the count dropped, leaving the queue empty.
    fn take(&self) -> (VecDeque<Record>, u64) {
        if self.pending.load(Ordering::Relaxed) == 0 && self.dropped.load(Ordering::Relaxed) == 0 {
            return (VecDeque::new(), 0);
        }
        let records = {
            let mut records = lock(&self.records);
            self.pending.store(0, Ordering::Relaxed);
            std::mem::take(&mut *records)
        };
        (records, self.dropped.swap(0, Ordering::Relaxed))
    }
}

/// This process's queue. A forked child gets a new one: the parent's lock may be held,
/// for good, by a thread that was not forked, and its events are the parent's.
fn queue() -> &'static Queue {
    static QUEUE: PerProcess<Queue> = PerProcess::new();
    QUEUE.get_or_init(Queue::default)
}

/// Milliseconds since the first call: a clock for [`Call::often`].
fn elapsed_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}
