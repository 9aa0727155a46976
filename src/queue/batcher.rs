//! [`Batcher`]: a bounded lock-free queue and the worker thread that exports it in batches,
//! for any item type.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use parking_lot::Mutex;

use super::budget::ByteBudget;
use super::config::{MAX_QUEUE_SIZE_LIMIT, QueueConfig};
use crate::error::{LensError, Result};
use crate::size::ApproxSize;

/// Which queue a [`Batcher`] is: its worker thread's name (`nemo-lens-<thread>`) and the
/// signal its errors name.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Role {
    thread: &'static str,
    signal: &'static str,
}

impl Role {
    /// The span queue: thread `nemo-lens-spans`, signal `traces`.
    pub(crate) const SPANS: Role = Role {
        thread: "spans",
        signal: "traces",
    };
    /// The log queue: thread `nemo-lens-logs`, signal `logs`.
    pub(crate) const LOGS: Role = Role {
        thread: "logs",
        signal: "logs",
    };

    /// Starts `worker` on `thread` (named for this role); a thread that cannot start is an
    /// exporter error of this role's signal.
    fn spawn<F: FnOnce() + Send + 'static>(
        self,
        thread: std::thread::Builder,
        worker: F,
    ) -> Result<JoinHandle<()>> {
        thread
            .name(format!("nemo-lens-{}", self.thread))
            .spawn(worker)
            .map_err(|e| LensError::Exporter {
                signal: self.signal,
                message: format!("cannot start the batch worker thread: {e}"),
            })
    }
}

/// What a [`Batcher`]'s worker does with a batch.
pub(crate) trait BatchExport<T>: Send + 'static {
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
    /// Items with their size (taken from the budget when queued, given back once exported).
    queue: ArrayQueue<(T, usize)>,
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
/// [`LensBatchProcessor`](crate::queue::span_processor::LensBatchProcessor)).
pub(crate) struct Batcher<T: Send + 'static> {
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
    /// As [`Batcher::push`], for an item whose size the caller knows (see [`ApproxSize`]).
    #[inline]
    pub(crate) fn push_sized(&self, item: T, size: usize) {
        push_within_budget(&self.shared, &self.control, item, size);
    }

    /// Items waiting now.
    pub(crate) fn queued(&self) -> usize {
        self.shared.queue.len()
    }

    /// The queue's identity: the same for every handle of one [`Batcher`].
    pub(crate) fn identity(&self) -> usize {
        Arc::as_ptr(&self.shared) as usize
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
    /// Allocates the queue and starts the worker thread (named for `role`). Items dropped
    /// (queue full, failed export, left at shutdown) are added to `dropped`.
    pub(crate) fn new(
        role: Role,
        config: QueueConfig,
        dropped: Arc<AtomicU64>,
        exporter: impl BatchExport<T>,
    ) -> Result<Self>
    where
        T: ApproxSize,
    {
        Self::new_with(role, config, dropped, exporter, |_, _| {})
    }

    /// As [`Batcher::new`], letting `prepare` see the queue before the worker takes the
    /// exporter.
    pub(crate) fn new_with<E: BatchExport<T>>(
        role: Role,
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
            role.spawn(std::thread::Builder::new(), move || {
                Worker::new(shared, exporter, config).run(rx)
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
    pub(crate) fn push(&self, item: T)
    where
        T: ApproxSize,
    {
        let size = item.approx_size();
        push_within_budget(&self.shared, &self.control, item, size);
    }

    /// A producer handle on this batcher's queue.
    pub(crate) fn handle(&self) -> BatchHandle<T> {
        BatchHandle {
            shared: self.shared.clone(),
            control: self.control.clone(),
        }
    }

    /// Exports everything queued now, waiting at most `timeout`.
    pub(crate) fn force_flush(&self, timeout: Duration) -> std::result::Result<(), String> {
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
    pub(crate) fn shutdown(&self, timeout: Duration) -> std::result::Result<(), String> {
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
            while let Some((_, size)) = self.shared.queue.pop() {
                self.shared.budget.release(size);
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
        let mut bytes = 0;
        while batch.len() < size {
            match self.shared.queue.pop() {
                Some((item, size)) => {
                    batch.push(item);
                    bytes += size;
                }
                None => break,
            }
        }
        let n = batch.len();
        if n == 0 {
            return 0;
        }
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
fn push_within_budget<T: Send + 'static>(
    shared: &Shared<T>,
    control: &mpsc::Sender<Control>,
    item: T,
    size: usize,
) {
    if shared.shut.load(Ordering::Relaxed) || !shared.budget.try_reserve(size) {
        shared.dropped.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if shared.queue.push((item, size)).is_err() {
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

#[cfg(test)]
mod tests {
    /// A push that finds the queue full is dropped and counted, never blocks: the worker is
    /// held in an export (of `a`) while `b` and `c` fill the two slots, so `d` has none.
    #[test]
    fn a_full_queue_drops_and_counts() {
        use super::{BatchExport, Batcher, Role};
        use crate::queue::config::QueueConfig;
        use std::sync::atomic::{AtomicU64, Ordering};
        use std::sync::{Arc, mpsc};
        use std::time::Duration;

        struct Held {
            exporting: mpsc::SyncSender<()>,
            release: mpsc::Receiver<()>,
            exported: Arc<parking_lot::Mutex<Vec<String>>>,
        }
        impl BatchExport<String> for Held {
            fn export(&mut self, batch: Vec<String>, _timeout: Duration) -> Result<(), String> {
                let _ = self.exporting.try_send(());
                let _ = self.release.recv_timeout(Duration::from_secs(60));
                self.exported.lock().extend(batch);
                Ok(())
            }
        }

        let (exporting, in_export) = mpsc::sync_channel(1);
        let (release, released) = mpsc::channel();
        let exported = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let dropped = Arc::new(AtomicU64::new(0));
        let config = QueueConfig {
            max_queue_size: 2,
            ..QueueConfig::default()
        };
        let held = Held {
            exporting,
            release: released,
            exported: exported.clone(),
        };
        let batcher = Batcher::new(Role::SPANS, config, dropped.clone(), held).unwrap();
        batcher.push("a".to_string()); // wakes the worker, which takes it and is held
        in_export.recv_timeout(Duration::from_secs(60)).unwrap();
        for word in ["b", "c", "d"] {
            batcher.push(word.to_string());
        }
        assert_eq!(dropped.load(Ordering::Relaxed), 1, "`d` found no slot");
        for _ in 0..3 {
            release.send(()).unwrap();
        }
        batcher.shutdown(Duration::from_secs(60)).unwrap();
        assert_eq!(*exported.lock(), ["a", "b", "c"]);
        assert_eq!(dropped.load(Ordering::Relaxed), 1);
    }

    /// The queue and worker are generic: here they batch log lines (the shape a log-record
    /// processor with `OTEL_BLRP_*` takes).
    #[test]
    fn the_batcher_batches_any_item_type() {
        use super::{BatchExport, Batcher, Role};
        use crate::queue::config::QueueConfig;
        use std::sync::Arc;
        use std::sync::atomic::{AtomicU64, Ordering};
        use std::time::Duration;
        struct Lines(Arc<parking_lot::Mutex<Vec<Vec<String>>>>);
        impl BatchExport<String> for Lines {
            fn export(&mut self, batch: Vec<String>, _timeout: Duration) -> Result<(), String> {
                self.0.lock().push(batch);
                Ok(())
            }
        }
        let batches = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let lookup = |k: &str| (k == "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE").then(|| "4".to_string());
        let config = QueueConfig::from_env("OTEL_BLRP", &lookup).unwrap();
        let dropped = Arc::new(AtomicU64::new(0));
        let batcher =
            Batcher::new(Role::LOGS, config, dropped.clone(), Lines(batches.clone())).unwrap();
        for i in 0..10 {
            batcher.push(format!("line {i}"));
        }
        batcher.force_flush(Duration::from_secs(10)).unwrap();
        batcher.shutdown(Duration::from_secs(10)).unwrap();
        let batches = batches.lock();
        assert!(batches.iter().all(|b| b.len() <= 4));
        let all: Vec<&String> = batches.iter().flatten().collect();
        assert_eq!(all.len(), 10);
        assert_eq!(all[9], "line 9");
        assert_eq!(dropped.load(Ordering::Relaxed), 0);
    }

    /// A worker thread that cannot start is an error of the queue's own signal: a log queue's
    /// says `logs`. A stack larger than the address space makes the start fail for real.
    #[test]
    fn a_worker_that_cannot_start_names_its_signal() {
        use super::Role;
        use crate::error::LensError;

        for (role, signal) in [(Role::LOGS, "logs"), (Role::SPANS, "traces")] {
            let huge = std::thread::Builder::new().stack_size(1 << 50);
            match role.spawn(huge, || {}) {
                Err(LensError::Exporter { signal: s, message }) => {
                    assert_eq!(s, signal);
                    assert!(message.contains("batch worker thread"), "{message}");
                }
                other => panic!("{role:?}: expected an exporter error, got {other:?}"),
            }
        }
    }
}
