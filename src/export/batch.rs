//! Batching with a bounded queue, counted drops and a bounded shutdown.
//!
//! Spans are exported in batches, on a worker thread, so that the thread that ends a span never
//! waits for the network. [`Batcher`] is that queue and worker, for any item type (spans here;
//! log records next); [`LensBatchProcessor`] puts it behind the OpenTelemetry span-processor
//! interface. nemo-lens uses its own instead of the SDK's because the trainer must never be hurt
//! and nothing may be lost silently:
//!
//! * **bounded memory**: at most [`QueueConfig::max_queue_size`] items wait, plus one batch in
//!   flight; the queue is a fixed-size lock-free ring allocated at setup;
//! * **non-blocking producers**: [`Batcher::push`] is a try-push; a full queue (the exporter
//!   cannot keep up, the collector is down) drops the item and counts it;
//! * **counted failures**: the items of a batch whose export fails or times out
//!   ([`QueueConfig::export_timeout`]) count as dropped too, so *dropped = produced − exported*;
//!   the counts are on the handle ([`Telemetry::dropped`](crate::Telemetry::dropped)) and
//!   reported once, on stderr, at shutdown when not zero;
//! * **bounded shutdown**: [`Batcher::shutdown`] exports what is queued until its deadline, then
//!   counts the rest as dropped and returns.
//!
//! The sizes come from the standard variables ([`QueueConfig::from_env`]):
//!
//! | Variable (spans; logs use `OTEL_BLRP_*`) | Default | Meaning |
//! |---|---|---|
//! | `OTEL_BSP_MAX_QUEUE_SIZE` | 2048 | items waiting, at most ([`MAX_QUEUE_SIZE_LIMIT`] at most) |
//! | `OTEL_BSP_SCHEDULE_DELAY` | 5000 | ms between two exports of a partial batch |
//! | `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` | 512 | items per export (at most the queue size) |
//! | `OTEL_BSP_EXPORT_TIMEOUT` | 30000 | ms one export may take before its batch counts as dropped |
//!
//! An empty or blank value means the default; anything else that is not a positive integer (a
//! non-negative one for the delay) is a [`LensError::InvalidValue`] naming the variable.
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::time::Duration;
//! use nemo_lens::export::{QueueConfig, BatchExport, Batcher};
//!
//! struct Print;
//! impl BatchExport<String> for Print {
//!     fn export(&mut self, batch: Vec<String>, _timeout: Duration) -> Result<(), String> {
//!         println!("{}", batch.join(","));
//!         Ok(())
//!     }
//! }
//!
//! let dropped = Arc::new(AtomicU64::new(0));
//! let config = QueueConfig { max_queue_size: 2, ..QueueConfig::default() };
//! let batcher = Batcher::new("demo", config, dropped.clone(), Print).unwrap();
//! for word in ["a", "b", "c"] {
//!     batcher.push(word.to_string()); // "c" finds the queue full (unless the worker was quick)
//! }
//! batcher.shutdown(Duration::from_secs(5)).unwrap();
//! assert!(dropped.load(Ordering::Relaxed) <= 1);
//! ```

use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex as StdMutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use opentelemetry::Context as OtelContext;
use opentelemetry::InstrumentationScope;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::logs::{LogBatch, LogExporter, LogProcessor, SdkLogRecord};
use opentelemetry_sdk::trace::{SdkTracer, Span, SpanData, SpanExporter, SpanProcessor};
use parking_lot::Mutex;

use super::budget::{ApproxSize, ByteBudget, DEFAULT_QUEUE_MAX_BYTES};
use crate::error::{LensError, Result};
use crate::record::SpanState;

/// The largest accepted queue size (16 Mi items): a larger value would reserve gigabytes up
/// front.
pub const MAX_QUEUE_SIZE_LIMIT: usize = 1 << 24;

/// Sizes and timeouts of a [`Batcher`].
///
/// ```
/// let c = nemo_lens::export::QueueConfig::default();
/// assert_eq!((c.max_queue_size, c.max_export_batch_size), (2048, 512));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    /// Items that may wait for export; more are dropped (and counted).
    pub max_queue_size: usize,
    /// Time between two exports when no full batch is waiting.
    pub scheduled_delay: Duration,
    /// Items per export call (clamped to the queue size).
    pub max_export_batch_size: usize,
    /// Time one export may take; then its batch counts as dropped.
    pub export_timeout: Duration,
    /// Bytes the queue may hold, waiting and in flight ([`crate::export::ByteBudget`];
    /// `NEMO_LENS_QUEUE_MAX_BYTES`); more are dropped (and counted).
    pub max_queue_bytes: usize,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            max_queue_size: 2048,
            scheduled_delay: Duration::from_millis(5000),
            max_export_batch_size: 512,
            export_timeout: Duration::from_millis(30000),
            max_queue_bytes: DEFAULT_QUEUE_MAX_BYTES,
        }
    }
}

/// Parses `<prefix>_<key>` from `lookup`: `None` when unset or blank.
fn read_u64(
    lookup: &dyn Fn(&str) -> Option<String>,
    prefix: &str,
    key: &str,
    min: u64,
    max: u64,
) -> Result<Option<u64>> {
    let var = format!("{prefix}_{key}");
    let Some(raw) = lookup(&var) else {
        return Ok(None);
    };
    let value = raw.trim();
    if value.is_empty() {
        return Ok(None);
    }
    match value.parse::<u64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(Some(v)),
        _ => Err(LensError::InvalidValue {
            var,
            value: raw.chars().take(64).collect(),
            expected: format!("an integer from {min} to {max}"),
        }),
    }
}

impl QueueConfig {
    /// Reads `<prefix>_MAX_QUEUE_SIZE`, `_SCHEDULE_DELAY` (ms), `_MAX_EXPORT_BATCH_SIZE` and
    /// `_EXPORT_TIMEOUT` (ms) through `lookup` (`prefix` is `OTEL_BSP` for spans, `OTEL_BLRP`
    /// for log records), over the defaults.
    ///
    /// ```
    /// use nemo_lens::export::QueueConfig;
    /// let env = |k: &str| (k == "OTEL_BSP_MAX_QUEUE_SIZE").then(|| " 100 ".to_string());
    /// assert_eq!(QueueConfig::from_env("OTEL_BSP", &env).unwrap().max_queue_size, 100);
    /// let bad = |k: &str| (k == "OTEL_BSP_SCHEDULE_DELAY").then(|| "5s".to_string());
    /// let err = QueueConfig::from_env("OTEL_BSP", &bad).unwrap_err().to_string();
    /// assert!(err.contains("OTEL_BSP_SCHEDULE_DELAY") && err.contains("'5s'"));
    /// ```
    pub fn from_env(prefix: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self> {
        Self::from_env_over(prefix, QueueConfig::default(), lookup)
    }

    /// The defaults of the log-record processor: as spans, but exported every second (the
    /// `OTEL_BLRP_SCHEDULE_DELAY` default of the OpenTelemetry specification).
    ///
    /// ```
    /// let d = nemo_lens::export::QueueConfig::logs_default();
    /// assert_eq!(d.scheduled_delay, std::time::Duration::from_millis(1000));
    /// ```
    pub fn logs_default() -> Self {
        QueueConfig {
            scheduled_delay: Duration::from_millis(1000),
            ..QueueConfig::default()
        }
    }

    /// [`QueueConfig::from_env`] over other defaults (e.g. [`QueueConfig::logs_default`]).
    ///
    /// ```
    /// use nemo_lens::export::QueueConfig;
    /// let c = QueueConfig::from_env_over("OTEL_BLRP", QueueConfig::logs_default(), &|_| None).unwrap();
    /// assert_eq!(c, QueueConfig::logs_default());
    /// ```
    pub fn from_env_over(
        prefix: &str,
        d: QueueConfig,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self> {
        const DAY_MS: u64 = 24 * 3600 * 1000;
        let limit = MAX_QUEUE_SIZE_LIMIT as u64;
        let queue = read_u64(lookup, prefix, "MAX_QUEUE_SIZE", 1, limit)?
            .map_or(d.max_queue_size, |v| v as usize);
        let batch = read_u64(lookup, prefix, "MAX_EXPORT_BATCH_SIZE", 1, limit)?
            .map_or(d.max_export_batch_size, |v| v as usize);
        let delay = read_u64(lookup, prefix, "SCHEDULE_DELAY", 0, DAY_MS)?
            .map_or(d.scheduled_delay, Duration::from_millis);
        let timeout = read_u64(lookup, prefix, "EXPORT_TIMEOUT", 1, DAY_MS)?
            .map_or(d.export_timeout, Duration::from_millis);
        Ok(QueueConfig {
            max_queue_size: queue,
            scheduled_delay: delay,
            max_export_batch_size: batch.min(queue),
            export_timeout: timeout,
            max_queue_bytes: d.max_queue_bytes,
        })
    }
}

/// What a [`Batcher`]'s worker does with a batch.
pub trait BatchExport<T>: Send + 'static {
    /// Exports `batch`, taking at most about `timeout`. An `Err` (or a timeout) counts the
    /// batch as dropped.
    fn export(&mut self, batch: Vec<T>, timeout: Duration) -> std::result::Result<(), String>;

    /// Called once, on the worker, after the last export.
    fn shutdown(&mut self, _timeout: Duration) -> std::result::Result<(), String> {
        Ok(())
    }
}

enum Control {
    /// A full batch is waiting.
    Wake,
    Flush(mpsc::SyncSender<std::result::Result<(), String>>),
    /// Export what is queued until the deadline, leaving the rest queued.
    Drain(Instant, mpsc::SyncSender<()>),
    Shutdown(Instant, mpsc::SyncSender<std::result::Result<(), String>>),
}

pub(crate) struct Shared<T> {
    queue: ArrayQueue<T>,
    dropped: Arc<AtomicU64>,
    /// A `Wake` is on its way: producers need not send another.
    notified: AtomicBool,
    shut: AtomicBool,
    /// Bytes of the items waiting and in flight.
    budget: ByteBudget,
    batch_size: usize,
    /// Queue length at which producers wake the worker: a quarter of a batch, so the worker
    /// starts well before the queue is near full (a producer at 500,000 spans/s fills the
    /// default queue in 4 ms; a late start is what drops spans).
    wake_at: usize,
}

/// A bounded queue with a worker thread that exports it in batches (see
/// [`LensBatchProcessor`]).
pub struct Batcher<T: Send + 'static> {
    shared: Arc<Shared<T>>,
    control: mpsc::Sender<Control>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

/// The producer side of a [`Batcher`], for the crate's own producers (the lens layer pushes
/// its span records through it).
pub(crate) struct BatchHandle<T: Send + 'static> {
    shared: Arc<Shared<T>>,
    control: mpsc::Sender<Control>,
}

impl<T: Send + 'static> Clone for BatchHandle<T> {
    fn clone(&self) -> Self {
        BatchHandle {
            shared: self.shared.clone(),
            control: self.control.clone(),
        }
    }
}

impl<T: Send + 'static> BatchHandle<T> {
    /// As [`Batcher::push`].
    #[inline]
    pub(crate) fn push(&self, item: T)
    where
        T: ApproxSize,
    {
        push_within_budget(&self.shared, &self.control, item);
    }

    /// Exports what is queued now, in batches, until `deadline` (what is left stays queued);
    /// returns when done or at the deadline.
    pub(crate) fn drain(&self, deadline: Instant) {
        if self.shared.shut.load(Ordering::Relaxed) {
            return;
        }
        let (tx, rx) = mpsc::sync_channel(1);
        if self.control.send(Control::Drain(deadline, tx)).is_ok() {
            let _ = rx.recv_timeout(deadline.saturating_duration_since(Instant::now()));
        }
    }
}

impl<T: Send + 'static> fmt::Debug for Batcher<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batcher")
            .field("queued", &self.shared.queue.len())
            .field("capacity", &self.shared.queue.capacity())
            .field("dropped", &self.shared.dropped.load(Ordering::Relaxed))
            .finish()
    }
}

/// `now + d`, or a far future when that overflows.
fn deadline_after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

impl<T: Send + 'static> Batcher<T> {
    /// Allocates the queue and starts the worker thread (named `nemo-lens-<name>`). Items
    /// dropped (queue full, failed export, left at shutdown) are added to `dropped`.
    pub fn new(
        name: &str,
        config: QueueConfig,
        dropped: Arc<AtomicU64>,
        exporter: impl BatchExport<T>,
    ) -> Result<Self>
    where
        T: ApproxSize,
    {
        Self::new_with(name, config, dropped, exporter, |_, _| {})
    }

    /// As [`Batcher::new`], letting `prepare` see the queue before the worker takes the
    /// exporter.
    pub(crate) fn new_with<E: BatchExport<T>>(
        name: &str,
        config: QueueConfig,
        dropped: Arc<AtomicU64>,
        mut exporter: E,
        prepare: impl FnOnce(&Arc<Shared<T>>, &mut E),
    ) -> Result<Self>
    where
        T: ApproxSize,
    {
        let queue_size = config.max_queue_size.clamp(1, MAX_QUEUE_SIZE_LIMIT);
        let shared = Arc::new(Shared {
            queue: ArrayQueue::new(queue_size),
            dropped,
            notified: AtomicBool::new(false),
            shut: AtomicBool::new(false),
            budget: ByteBudget::new(config.max_queue_bytes),
            batch_size: config.max_export_batch_size.clamp(1, queue_size),
            wake_at: (config.max_export_batch_size.clamp(1, queue_size) / 4).max(1),
        });
        prepare(&shared, &mut exporter);
        let (control, rx) = mpsc::channel();
        let worker = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("nemo-lens-{name}"))
                .spawn(move || Worker::new(shared, exporter, config).run(rx))
                .map_err(|e| LensError::Exporter {
                    signal: "traces",
                    message: format!("cannot start the batch worker thread: {e}"),
                })?
        };
        Ok(Batcher {
            shared,
            control,
            worker: Mutex::new(Some(worker)),
        })
    }

    /// Queues `item` without blocking; drops and counts it when the queue is full or the
    /// batcher is shut down.
    #[inline]
    pub fn push(&self, item: T)
    where
        T: ApproxSize,
    {
        push_within_budget(&self.shared, &self.control, item);
    }

    /// A producer handle on this batcher's queue.
    pub(crate) fn handle(&self) -> BatchHandle<T> {
        BatchHandle {
            shared: self.shared.clone(),
            control: self.control.clone(),
        }
    }

    /// Items waiting now.
    pub fn queued(&self) -> usize {
        self.shared.queue.len()
    }

    /// Exports everything queued now, waiting at most `timeout`.
    pub fn force_flush(&self, timeout: Duration) -> std::result::Result<(), String> {
        if self.shared.shut.load(Ordering::Relaxed) {
            return Ok(());
        }
        let (tx, rx) = mpsc::sync_channel(1);
        self.control
            .send(Control::Flush(tx))
            .map_err(|_| "the batch worker has stopped".to_string())?;
        rx.recv_timeout(timeout)
            .map_err(|_| format!("flush timed out after {timeout:?}"))?
    }

    /// Exports what is queued until `timeout` has passed, counts what is left as dropped, shuts
    /// the exporter down and stops the worker. Later pushes are dropped and counted; a second
    /// call does nothing.
    pub fn shutdown(&self, timeout: Duration) -> std::result::Result<(), String> {
        if self.shared.shut.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let deadline = deadline_after(timeout);
        let (tx, rx) = mpsc::sync_channel(1);
        if self.control.send(Control::Shutdown(deadline, tx)).is_err() {
            return Err("the batch worker has stopped".into());
        }
        // The worker stops exporting at the deadline; allow it a moment to say so.
        let wait = deadline.saturating_duration_since(Instant::now()) + Duration::from_millis(200);
        let result = match rx.recv_timeout(wait) {
            Ok(result) => result,
            Err(_) => {
                // The worker is stuck in an export: count what is still queued now (it would
                // count it only once the export gives up), so the caller's report is complete
                // but for the batch in flight, which the worker counts when its export ends.
                let mut left = 0;
                while self.shared.queue.pop().is_some() {
                    left += 1;
                }
                self.shared.dropped.fetch_add(left, Ordering::Relaxed);
                return Err(format!(
                    "shutdown timed out after {timeout:?} (an export is stuck; {left} queued \
                     items counted as dropped)"
                ));
            }
        };
        if let Some(worker) = self.worker.lock().take() {
            let _ = worker.join();
        }
        result
    }
}

impl<T: Send + 'static> Drop for Batcher<T> {
    fn drop(&mut self) {
        let _ = self.shutdown(Duration::from_secs(5));
    }
}

struct Worker<T, E> {
    shared: Arc<Shared<T>>,
    exporter: E,
    config: QueueConfig,
    first_error: Option<String>,
}

impl<T: ApproxSize + Send + 'static, E: BatchExport<T>> Worker<T, E> {
    fn new(shared: Arc<Shared<T>>, exporter: E, config: QueueConfig) -> Self {
        Worker {
            shared,
            exporter,
            config,
            first_error: None,
        }
    }

    fn run(mut self, rx: mpsc::Receiver<Control>) {
        let delay = self.config.scheduled_delay.max(Duration::from_millis(1));
        let mut next = deadline_after(delay);
        loop {
            match rx.recv_timeout(next.saturating_duration_since(Instant::now())) {
                Ok(Control::Wake) => {
                    self.shared.notified.store(false, Ordering::Release);
                    // Until the queue is below the wake mark; a shutdown request takes over.
                    while self.shared.queue.len() >= self.shared.wake_at
                        && !self.shared.shut.load(Ordering::Relaxed)
                    {
                        self.export_batch(self.config.export_timeout);
                    }
                }
                Ok(Control::Flush(reply)) => {
                    self.export_queued(None);
                    let _ = reply.send(self.take_error());
                }
                Ok(Control::Drain(deadline, reply)) => {
                    self.export_until(deadline);
                    let _ = reply.send(());
                }
                Ok(Control::Shutdown(deadline, reply)) => {
                    self.export_queued(Some(deadline));
                    let mut result = self.take_error();
                    let left = deadline.saturating_duration_since(Instant::now());
                    if let Err(e) = self.exporter.shutdown(left) {
                        result = Err(e);
                    }
                    let _ = reply.send(result);
                    return;
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.export_queued(None);
                    next = deadline_after(delay);
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.export_queued(Some(deadline_after(Duration::from_secs(5))));
                    let _ = self.exporter.shutdown(Duration::from_secs(5));
                    return;
                }
            }
        }
    }

    fn take_error(&mut self) -> std::result::Result<(), String> {
        match self.first_error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Exports the items queued now (not those pushed meanwhile), in batches; with a deadline,
    /// what is left when it passes is dropped and counted.
    fn export_queued(&mut self, deadline: Option<Instant>) {
        let mut left = self.shared.queue.len();
        while left > 0 {
            let timeout = match deadline {
                // A shutdown request (which brings its deadline) takes over at once.
                None if self.shared.shut.load(Ordering::Relaxed) => break,
                None => self.config.export_timeout,
                Some(d) => {
                    let remaining = d.saturating_duration_since(Instant::now());
                    if remaining.is_zero() {
                        break;
                    }
                    remaining.min(self.config.export_timeout)
                }
            };
            let n = self.export_batch(timeout);
            if n == 0 {
                break;
            }
            left = left.saturating_sub(n);
        }
        if deadline.is_some() {
            let mut abandoned = 0;
            while let Some(item) = self.shared.queue.pop() {
                self.shared.budget.release(item.approx_size());
                abandoned += 1;
            }
            self.shared.dropped.fetch_add(abandoned, Ordering::Relaxed);
        }
    }

    /// Exports the items queued now until `deadline`, leaving what is left queued.
    fn export_until(&mut self, deadline: Instant) {
        let mut left = self.shared.queue.len();
        while left > 0 {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                break;
            }
            let n = self.export_batch(remaining.min(self.config.export_timeout));
            if n == 0 {
                break;
            }
            left = left.saturating_sub(n);
        }
    }

    /// Exports one batch (at most the batch size); returns how many items it held.
    fn export_batch(&mut self, timeout: Duration) -> usize {
        let size = self.shared.batch_size.min(self.shared.queue.len());
        let mut batch = Vec::with_capacity(size);
        while batch.len() < size {
            match self.shared.queue.pop() {
                Some(item) => batch.push(item),
                None => break,
            }
        }
        let n = batch.len();
        if n == 0 {
            return 0;
        }
        let bytes: usize = batch.iter().map(ApproxSize::approx_size).sum();
        if let Err(e) = self.exporter.export(batch, timeout) {
            self.shared.dropped.fetch_add(n as u64, Ordering::Relaxed);
            self.first_error.get_or_insert(e);
        }
        self.shared.budget.release(bytes);
        n
    }
}

/// Queues `item` without blocking when the queue has a slot and the byte budget has room for
/// it; otherwise drops and counts it. Wakes the worker once the queue holds a quarter batch.
#[inline]
fn push_within_budget<T: ApproxSize + Send + 'static>(
    shared: &Shared<T>,
    control: &mpsc::Sender<Control>,
    item: T,
) {
    let size = item.approx_size();
    if shared.shut.load(Ordering::Relaxed) || !shared.budget.try_reserve(size) {
        shared.dropped.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if shared.queue.push(item).is_err() {
        shared.budget.release(size);
        shared.dropped.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if shared.queue.len() >= shared.wake_at && !shared.notified.swap(true, Ordering::AcqRel) {
        let _ = control.send(Control::Wake);
    }
}

/// Wakes the worker thread that polls an export future.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `future` on this thread until it completes or `timeout` passes (then drops it,
/// cancelling the export).
pub(crate) fn block_on_timeout<F: Future>(future: F, timeout: Duration) -> Option<F::Output> {
    let deadline = deadline_after(timeout);
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return Some(out);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        std::thread::park_timeout(deadline - now);
    }
}

/// One item of the span batch queue: a finished lens record (its SDK span is built on the
/// worker) or an SDK span ended elsewhere (spans of [`Telemetry::tracer`](crate::Telemetry::tracer)).
#[derive(Debug)]
pub(crate) enum SpanItem {
    Record(Arc<SpanState>),
    Data(Box<opentelemetry_sdk::trace::SpanData>),
}

impl ApproxSize for SpanItem {
    /// An SDK span's or a record's estimated size (see [`SpanState`]'s).
    fn approx_size(&self) -> usize {
        match self {
            SpanItem::Data(span) => span.approx_size(),
            SpanItem::Record(state) => state.approx_size(),
        }
    }
}

thread_local! {
    /// On a span worker thread while it builds SDK spans from records: the identity of its
    /// queue, and the spans its processor's `on_end` collected for the batch being exported.
    static COLLECTING: RefCell<Option<(usize, Vec<SpanData>)>> = const { RefCell::new(None) };
}

/// The record side of the span queue, shared by the processor, its worker and the lens
/// layer: the layer pushes finished records; the worker builds their SDK spans through the
/// tracer attached here.
#[derive(Clone)]
pub(crate) struct SpanQueue {
    handle: BatchHandle<SpanItem>,
    tracer: Arc<Mutex<Option<SdkTracer>>>,
    /// Emptied span states the worker hands back for reuse: a span then costs the training
    /// thread no allocation (memory a worker thread frees is slow for another thread to get
    /// back from the allocator).
    spare: Arc<ArrayQueue<Arc<SpanState>>>,
}

/// How many emptied span states wait for reuse, at most.
const SPARE_STATES: usize = 512;

impl fmt::Debug for SpanQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpanQueue")
            .field("queued", &self.handle.shared.queue.len())
            .finish_non_exhaustive()
    }
}

impl SpanQueue {
    /// The tracer (of the provider this queue's processor belongs to) that builds the SDK
    /// spans of records on the worker. Released when the worker stops.
    pub(crate) fn attach(&self, tracer: SdkTracer) {
        *self.tracer.lock() = Some(tracer);
    }

    /// Queues a finished record (one pointer) without blocking; drops and counts it when the
    /// queue is full.
    #[inline]
    pub(crate) fn push_record(&self, state: Arc<SpanState>) {
        self.handle.push(SpanItem::Record(state));
    }

    /// Exports what is queued until `deadline` (before the provider shuts down).
    pub(crate) fn drain(&self, deadline: Instant) {
        self.handle.drain(deadline);
    }

    /// An emptied span state to reuse, if the worker has one.
    #[inline]
    pub(crate) fn spare(&self) -> Option<Arc<SpanState>> {
        self.spare.pop()
    }

    fn identity(&self) -> usize {
        Arc::as_ptr(&self.handle.shared) as usize
    }
}

/// Exports spans through a [`SpanExporter`], shared with the processor (which forwards the
/// resource to it at build time).
struct SpanExport<E> {
    exporter: Arc<StdMutex<E>>,
    /// Builds the SDK spans of records.
    tracer: Arc<Mutex<Option<SdkTracer>>>,
    /// This queue's identity (see [`COLLECTING`]).
    identity: usize,
    dropped: Arc<AtomicU64>,
    /// See [`SpanQueue::spare`].
    spare: Arc<ArrayQueue<Arc<SpanState>>>,
}

impl<E> SpanExport<E> {
    /// Turns a batch of queue items into `SpanData`, in queue order: records become SDK spans
    /// (through the provider: its sampler, limits and processors), whose `on_end` in
    /// [`LensBatchProcessor`] hands them back here. Records the SDK does not record (its
    /// provider is shut down) are counted as dropped.
    fn span_data(&self, batch: Vec<SpanItem>) -> Vec<SpanData> {
        let tracer = self.tracer.lock().clone();
        COLLECTING
            .with(|c| *c.borrow_mut() = Some((self.identity, Vec::with_capacity(batch.len()))));
        let mut lost = 0;
        for item in batch {
            match item {
                SpanItem::Data(data) => COLLECTING.with(|c| {
                    if let Some((_, spans)) = c.borrow_mut().as_mut() {
                        spans.push(*data);
                    }
                }),
                SpanItem::Record(mut state) => {
                    let built = tracer.as_ref().is_some_and(|t| state.build_sdk_span(t));
                    if !built {
                        lost += 1;
                    }
                    // Emptied, and referenced nowhere else: back for reuse.
                    if Arc::get_mut(&mut state).is_some() {
                        let _ = self.spare.push(state);
                    }
                }
            }
        }
        if lost > 0 {
            self.dropped.fetch_add(lost, Ordering::Relaxed);
        }
        COLLECTING
            .with(|c| c.borrow_mut().take())
            .map(|(_, spans)| spans)
            .unwrap_or_default()
    }
}

impl<E: SpanExporter + 'static> BatchExport<SpanItem> for SpanExport<E> {
    fn export(
        &mut self,
        batch: Vec<SpanItem>,
        timeout: Duration,
    ) -> std::result::Result<(), String> {
        // The exporter's (and the span processors') own logs must not feed back into the
        // pipeline.
        let _guard = OtelContext::enter_telemetry_suppressed_scope();
        let batch = self.span_data(batch);
        if batch.is_empty() {
            return Ok(());
        }
        let n = batch.len();
        let exporter = self.exporter.lock().map_err(|_| "exporter poisoned")?;
        match block_on_timeout(exporter.export(batch), timeout) {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(format!("span export failed ({n} spans): {e}")),
            None => Err(format!(
                "span export timed out after {timeout:?} ({n} spans)"
            )),
        }
    }

    fn shutdown(&mut self, timeout: Duration) -> std::result::Result<(), String> {
        // The worker stops: release the provider it holds through the tracer.
        self.tracer.lock().take();
        let exporter = self.exporter.lock().map_err(|_| "exporter poisoned")?;
        exporter
            .shutdown_with_timeout(timeout)
            .map_err(|e| format!("span exporter shutdown: {e}"))
    }
}

/// The span processor of nemo-lens: a [`Batcher`] of sampled, ended spans in front of a
/// [`SpanExporter`].
///
/// Spans recorded by the lens layer reach its queue as compact records, and their SDK spans
/// are built on its worker thread (see `src/record/`); spans ended elsewhere (the
/// OpenTelemetry API) reach it through [`SpanProcessor::on_end`] as usual.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::AtomicU64;
/// use nemo_lens::export::{LensBatchProcessor, QueueConfig};
/// let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
/// let dropped = Arc::new(AtomicU64::new(0));
/// let processor = LensBatchProcessor::new(exporter, QueueConfig::default(), dropped).unwrap();
/// let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
///     .with_span_processor(processor)
///     .build();
/// # provider.shutdown().unwrap();
/// ```
pub struct LensBatchProcessor<E> {
    batcher: Batcher<SpanItem>,
    queue: SpanQueue,
    exporter: Arc<StdMutex<E>>,
    flush_timeout: Duration,
}

impl<E> fmt::Debug for LensBatchProcessor<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LensBatchProcessor")
            .field("batcher", &self.batcher)
            .finish_non_exhaustive()
    }
}

impl<E: SpanExporter + 'static> LensBatchProcessor<E> {
    /// Starts the worker thread; spans dropped are added to `dropped`.
    pub fn new(exporter: E, config: QueueConfig, dropped: Arc<AtomicU64>) -> Result<Self> {
        let exporter = Arc::new(StdMutex::new(exporter));
        let tracer = Arc::new(Mutex::new(None));
        let spare = Arc::new(ArrayQueue::new(SPARE_STATES));
        // The worker learns its queue's identity (see `COLLECTING`) before it starts.
        let export = SpanExport {
            exporter: exporter.clone(),
            tracer: tracer.clone(),
            identity: 0,
            dropped: dropped.clone(),
            spare: spare.clone(),
        };
        let batcher = Batcher::new_with("spans", config, dropped, export, |shared, e| {
            e.identity = Arc::as_ptr(shared) as usize;
        })?;
        let queue = SpanQueue {
            handle: batcher.handle(),
            tracer,
            spare,
        };
        Ok(LensBatchProcessor {
            batcher,
            queue,
            exporter,
            flush_timeout: config.export_timeout,
        })
    }

    /// The record queue, for the lens layer.
    pub(crate) fn span_queue(&self) -> SpanQueue {
        self.queue.clone()
    }
}

impl<E: SpanExporter + 'static> SpanProcessor for LensBatchProcessor<E> {
    fn on_start(&self, _span: &mut Span, _cx: &OtelContext) {}

    #[inline]
    fn on_end(&self, mut span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        crate::ids::mark_random_root(&mut span);
        // On this processor's worker, building the spans of records: hand the span back to
        // the batch being exported.
        let identity = self.queue.identity();
        let span = COLLECTING.with(|c| match c.borrow_mut().as_mut() {
            Some((id, spans)) if *id == identity => {
                spans.push(span);
                None
            }
            _ => Some(span),
        });
        if let Some(span) = span {
            self.batcher.push(SpanItem::Data(Box::new(span)));
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.batcher
            .force_flush(self.flush_timeout)
            .map_err(OTelSdkError::InternalFailure)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.batcher
            .shutdown(timeout)
            .map_err(OTelSdkError::InternalFailure)
    }

    fn set_resource(&mut self, resource: &Resource) {
        if let Ok(mut e) = self.exporter.lock() {
            e.set_resource(resource);
        }
    }
}

/// Exports log records through a [`LogExporter`], shared with the processor.
struct LogExport<E> {
    exporter: Arc<StdMutex<E>>,
}

impl<E: LogExporter + 'static> BatchExport<(SdkLogRecord, InstrumentationScope)> for LogExport<E> {
    fn export(
        &mut self,
        batch: Vec<(SdkLogRecord, InstrumentationScope)>,
        timeout: Duration,
    ) -> std::result::Result<(), String> {
        let exporter = self.exporter.lock().map_err(|_| "exporter poisoned")?;
        let _guard = OtelContext::enter_telemetry_suppressed_scope();
        let refs: Vec<(&SdkLogRecord, &InstrumentationScope)> =
            batch.iter().map(|(r, s)| (r, s)).collect();
        match block_on_timeout(exporter.export(LogBatch::new(&refs)), timeout) {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(format!("log export failed: {e}")),
            None => Err(format!("log export timed out after {timeout:?}")),
        }
    }

    fn shutdown(&mut self, timeout: Duration) -> std::result::Result<(), String> {
        let exporter = self.exporter.lock().map_err(|_| "exporter poisoned")?;
        exporter
            .shutdown_with_timeout(timeout)
            .map_err(|e| format!("log exporter shutdown: {e}"))
    }
}

/// The log-record processor of nemo-lens: a [`Batcher`] of records in front of a
/// [`LogExporter`], sized by `OTEL_BLRP_*`, counting what it drops.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::AtomicU64;
/// use nemo_lens::export::{QueueConfig, LensBatchLogProcessor};
/// let exporter = opentelemetry_sdk::logs::InMemoryLogExporter::default();
/// let dropped = Arc::new(AtomicU64::new(0));
/// let processor = LensBatchLogProcessor::new(exporter, QueueConfig::logs_default(), dropped).unwrap();
/// let provider = opentelemetry_sdk::logs::SdkLoggerProvider::builder()
///     .with_log_processor(processor)
///     .build();
/// # provider.shutdown().unwrap();
/// ```
pub struct LensBatchLogProcessor<E> {
    batcher: Batcher<(SdkLogRecord, InstrumentationScope)>,
    exporter: Arc<StdMutex<E>>,
    flush_timeout: Duration,
}

impl<E> fmt::Debug for LensBatchLogProcessor<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LensBatchLogProcessor")
            .field("batcher", &self.batcher)
            .finish_non_exhaustive()
    }
}

impl<E: LogExporter + 'static> LensBatchLogProcessor<E> {
    /// Starts the worker thread; records dropped are added to `dropped`.
    pub fn new(exporter: E, config: QueueConfig, dropped: Arc<AtomicU64>) -> Result<Self> {
        let exporter = Arc::new(StdMutex::new(exporter));
        let batcher = Batcher::new(
            "logs",
            config,
            dropped,
            LogExport {
                exporter: exporter.clone(),
            },
        )?;
        Ok(LensBatchLogProcessor {
            batcher,
            exporter,
            flush_timeout: config.export_timeout,
        })
    }
}

impl<E: LogExporter + 'static> LogProcessor for LensBatchLogProcessor<E> {
    #[inline]
    fn emit(&self, record: &mut SdkLogRecord, scope: &InstrumentationScope) {
        self.batcher.push((record.clone(), scope.clone()));
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.batcher
            .force_flush(self.flush_timeout)
            .map_err(OTelSdkError::InternalFailure)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.batcher
            .shutdown(timeout)
            .map_err(OTelSdkError::InternalFailure)
    }

    fn set_resource(&mut self, resource: &Resource) {
        if let Ok(mut e) = self.exporter.lock() {
            e.set_resource(resource);
        }
    }
}

/// Telemetry dropped so far by this process's pipelines (see
/// [`Telemetry::dropped`](crate::Telemetry::dropped)): items a full queue refused, items of failed or timed-out
/// exports, and items still queued when shutdown's deadline passed.
///
/// ```
/// let counts = nemo_lens::DropCounts::default();
/// assert_eq!(counts.total(), 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropCounts {
    /// Spans.
    pub spans: u64,
    /// Log records.
    pub logs: u64,
    /// Metric exports that failed.
    pub metric_exports: u64,
}

impl DropCounts {
    /// Everything dropped, all signals together.
    pub fn total(&self) -> u64 {
        self.spans + self.logs + self.metric_exports
    }
}

impl fmt::Display for DropCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} spans, {} log records, {} metric exports",
            self.spans, self.logs, self.metric_exports
        )
    }
}

/// The live counters behind [`DropCounts`], shared with the pipelines.
#[derive(Debug, Default)]
pub(crate) struct DropCounters {
    pub(crate) spans: Arc<AtomicU64>,
    pub(crate) logs: Arc<AtomicU64>,
    pub(crate) metric_exports: Arc<AtomicU64>,
}

impl DropCounters {
    /// Publishes the counts as lens's own metric: the observable counter
    /// [`nemo.lens.dropped`](crate::semconv::NEMO_LENS_DROPPED), one series per `signal`
    /// (`spans`, `logs`, `metric_exports`), read at each metric export; a signal appears once
    /// it has dropped something.
    pub(crate) fn observe(&self, meter: &opentelemetry::metrics::Meter) {
        let counters = [
            ("spans", self.spans.clone()),
            ("logs", self.logs.clone()),
            ("metric_exports", self.metric_exports.clone()),
        ];
        // The instrument lives as long as the meter provider keeps its callback.
        let _ = meter
            .u64_observable_counter(crate::semconv::NEMO_LENS_DROPPED)
            .with_unit("{item}")
            .with_description(
                "Telemetry nemo-lens dropped: spans and log records refused by a full queue or \
                 lost in a failed export, and failed metric exports.",
            )
            .with_callback(move |observer| {
                for (signal, counter) in &counters {
                    // Nothing dropped, no series: a healthy run's metric batches stay exactly
                    // what the application recorded (as in Python, which has no such metric).
                    let count = counter.load(Ordering::Relaxed);
                    if count == 0 {
                        continue;
                    }
                    observer.observe(
                        count,
                        &[opentelemetry::KeyValue::new(
                            crate::semconv::NEMO_LENS_DROPPED_SIGNAL,
                            *signal,
                        )],
                    );
                }
            })
            .build();
    }

    pub(crate) fn snapshot(&self) -> DropCounts {
        DropCounts {
            spans: self.spans.load(Ordering::Relaxed),
            logs: self.logs.load(Ordering::Relaxed),
            metric_exports: self.metric_exports.load(Ordering::Relaxed),
        }
    }
}
