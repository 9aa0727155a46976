//! [`DeadlineExporter`]: an export that can always be abandoned at its deadline.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use opentelemetry::Context as OtelContext;
use opentelemetry::InstrumentationScope;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::logs::{LogBatch, LogExporter, SdkLogRecord};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use parking_lot::Mutex;

/// How many helper threads may be stuck in abandoned exports at once.
pub(super) const MAX_STUCK_HELPERS: usize = 4;

/// One export, run on a helper thread.
type Job = Box<dyn FnOnce() -> OTelSdkResult + Send>;

/// Where a helper leaves its answer, and who to wake.
#[derive(Default)]
struct Slot {
    state: Mutex<(Option<OTelSdkResult>, Option<Waker>)>,
}

impl Slot {
    fn complete(&self, result: OTelSdkResult) {
        let waker = {
            let mut state = self.state.lock();
            state.0 = Some(result);
            state.1.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The future of one export: ready when the helper has answered. Dropping it abandons the
/// export (the helper finishes it, and its answer is ignored).
pub(super) struct ExportAnswer(Arc<Slot>);

impl fmt::Debug for ExportAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExportAnswer").finish_non_exhaustive()
    }
}

impl Future for ExportAnswer {
    type Output = OTelSdkResult;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<OTelSdkResult> {
        let mut state = self.0.state.lock();
        match state.0.take() {
            Some(result) => Poll::Ready(result),
            None => {
                state.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

fn answered(result: OTelSdkResult) -> ExportAnswer {
    let slot = Slot::default();
    slot.state.lock().0 = Some(result);
    ExportAnswer(Arc::new(slot))
}

/// A helper thread and whether it is inside an export.
struct Helper {
    jobs: mpsc::Sender<(Job, Arc<Slot>)>,
    busy: Arc<AtomicBool>,
}

/// The helper threads of one exporter.
struct Helpers {
    name: &'static str,
    current: Mutex<Option<Helper>>,
    /// Helper threads alive (the current one and those stuck in abandoned exports).
    alive: Arc<AtomicUsize>,
}

impl Helpers {
    fn new(name: &'static str) -> Self {
        Helpers {
            name,
            current: Mutex::new(None),
            alive: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Runs `job` on an idle helper (starting one if needed) and returns its answer.
    fn run(&self, job: Job) -> ExportAnswer {
        let mut current = self.current.lock();
        if current
            .as_ref()
            .is_some_and(|h| h.busy.load(Ordering::Acquire))
        {
            // Stuck in an export the worker gave up on: let it finish alone.
            *current = None;
        }
        if current.is_none() {
            if self.alive.load(Ordering::Acquire) >= MAX_STUCK_HELPERS {
                return answered(Err(OTelSdkError::InternalFailure(format!(
                    "{} export skipped: {MAX_STUCK_HELPERS} earlier exports are still stuck",
                    self.name
                ))));
            }
            match self.spawn() {
                Ok(h) => *current = Some(h),
                Err(e) => {
                    return answered(Err(OTelSdkError::InternalFailure(format!(
                        "cannot start the {} export thread: {e}",
                        self.name
                    ))));
                }
            }
        }
        let helper = current.as_ref().expect("set above");
        let slot = Arc::new(Slot::default());
        helper.busy.store(true, Ordering::Release);
        if let Err(mpsc::SendError((_, slot))) = helper.jobs.send((job, slot.clone())) {
            helper.busy.store(false, Ordering::Release);
            *current = None;
            slot.complete(Err(OTelSdkError::InternalFailure(format!(
                "the {} export thread has stopped",
                self.name
            ))));
        }
        ExportAnswer(slot)
    }

    fn spawn(&self) -> std::io::Result<Helper> {
        let (jobs, rx) = mpsc::channel::<(Job, Arc<Slot>)>();
        let busy = Arc::new(AtomicBool::new(false));
        let alive = self.alive.clone();
        alive.fetch_add(1, Ordering::AcqRel);
        let thread_busy = busy.clone();
        let thread_alive = alive.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("nemo-lens-{}-export", self.name))
            .spawn(move || {
                // What the exporter logs must not feed back into the pipeline.
                let _guard = OtelContext::enter_telemetry_suppressed_scope();
                for (job, slot) in rx {
                    let result = job();
                    // Idle before answering: the next export may come the moment it is read.
                    thread_busy.store(false, Ordering::Release);
                    slot.complete(result);
                }
                thread_alive.fetch_sub(1, Ordering::AcqRel);
            });
        match spawned {
            Ok(_) => Ok(Helper { jobs, busy }),
            Err(e) => {
                alive.fetch_sub(1, Ordering::AcqRel);
                Err(e)
            }
        }
    }
}

/// Wakes the helper thread that polls an export future.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `future` on this (helper) thread until it completes.
fn block_on<F: Future>(future: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

/// A span or log exporter whose exports run on a helper thread, so that the batch worker's
/// export timeout is enforced whatever the transport.
///
/// The batch worker gives every export `OTEL_BSP_EXPORT_TIMEOUT` (`OTEL_BLRP_EXPORT_TIMEOUT`
/// for logs) and abandons it then, counting its batch as dropped. It can only abandon an export
/// whose future *yields*: the OTLP exporters do, but an exporter of the application's may block
/// inside `poll` (a blocking HTTP client, a file write), which holds the worker for as long as
/// it blocks whatever the export timeout says, and a shutdown that waits for it cannot count
/// what it held.
///
/// [`DeadlineExporter`] wraps any span or log exporter and runs each export on a helper thread;
/// the future the worker polls only waits for the helper's answer, so it yields and the worker's
/// deadline holds for every transport:
///
/// ```text
/// batch worker ── export(batch) ──▶ helper thread: block_on(inner.export(batch))
///      │  polls a future that waits for the answer; gives up at the export timeout,
///      ▼  counts the batch as dropped and moves on
/// ```
///
/// A helper still stuck in an export when the next batch comes is left to finish on its own
/// (its result is ignored: that batch was counted already) and a fresh helper takes the batch,
/// so a hung collector sees one attempt per batch, each bounded by the export timeout. At most
/// [`MAX_STUCK_HELPERS`] helpers may be stuck at once; beyond that a batch fails at once
/// (counted) instead of starting another thread.
pub(crate) struct DeadlineExporter<E> {
    inner: Arc<E>,
    helpers: Helpers,
}

impl<E: fmt::Debug> fmt::Debug for DeadlineExporter<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadlineExporter")
            .field("inner", &self.inner)
            .field("threads", &self.helpers.alive.load(Ordering::Relaxed))
            .finish()
    }
}

impl<E: Send + Sync + 'static> DeadlineExporter<E> {
    /// Wraps `inner`; its helper threads are named `nemo-lens-<name>-export` and started on
    /// the first export.
    pub(crate) fn new(name: &'static str, inner: E) -> Self {
        DeadlineExporter {
            inner: Arc::new(inner),
            helpers: Helpers::new(name),
        }
    }

    /// Threads alive: the helper, and those stuck in exports that were abandoned.
    #[cfg(test)]
    pub(crate) fn threads(&self) -> usize {
        self.helpers.alive.load(Ordering::Acquire)
    }
}

impl<E: SpanExporter + 'static> SpanExporter for DeadlineExporter<E> {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        let inner = self.inner.clone();
        self.helpers
            .run(Box::new(move || block_on(inner.export(batch))))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        // On the caller's thread: a helper may be stuck, the exporter's shutdown is not.
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        // Called while the pipeline is built, before any export shares the exporter.
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.set_resource(resource);
        }
    }
}

impl<E: crate::export::otlp::trace_request::ReadyExport + 'static>
    crate::export::otlp::trace_request::ReadyExport for DeadlineExporter<E>
{
    fn export_ready(
        &self,
        batch: crate::export::otlp::trace_request::ReadyBatch,
    ) -> impl Future<Output = OTelSdkResult> + Send {
        let inner = self.inner.clone();
        self.helpers
            .run(Box::new(move || block_on(inner.export_ready(batch))))
    }
}

impl<E: LogExporter + 'static> LogExporter for DeadlineExporter<E> {
    fn export(&self, batch: LogBatch<'_>) -> impl Future<Output = OTelSdkResult> + Send {
        // The batch borrows the caller's records: the helper gets its own copy.
        let owned: Vec<(SdkLogRecord, InstrumentationScope)> =
            batch.iter().map(|(r, s)| (r.clone(), s.clone())).collect();
        let inner = self.inner.clone();
        self.helpers.run(Box::new(move || {
            let refs: Vec<(&SdkLogRecord, &InstrumentationScope)> =
                owned.iter().map(|(r, s)| (r, s)).collect();
            block_on(inner.export(LogBatch::new(&refs)))
        }))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.set_resource(resource);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    /// Hangs every export until `release` is set.
    #[derive(Debug, Default)]
    struct Hang {
        release: Arc<AtomicBool>,
    }

    impl SpanExporter for Hang {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            while !self.release.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(())
        }
    }

    /// Polls like the batch worker: gives up after `timeout`.
    fn poll_for<F: Future>(future: F, timeout: Duration) -> Option<F::Output> {
        crate::queue::batcher::block_on_timeout(future, timeout)
    }

    #[test]
    fn a_blocking_export_can_be_abandoned_and_stuck_threads_are_bounded() {
        let hang = Hang::default();
        let release = hang.release.clone();
        let exporter = DeadlineExporter::new("test", hang);
        for _ in 0..MAX_STUCK_HELPERS {
            assert!(poll_for(exporter.export(Vec::new()), Duration::from_millis(20)).is_none());
        }
        assert_eq!(exporter.threads(), MAX_STUCK_HELPERS);
        // One more: refused at once instead of another thread.
        let refused = poll_for(exporter.export(Vec::new()), Duration::from_secs(60));
        assert!(matches!(refused, Some(Err(_))), "{refused:?}");
        assert_eq!(exporter.threads(), MAX_STUCK_HELPERS);
        release.store(true, Ordering::Release);
        let deadline = Instant::now() + Duration::from_secs(60);
        while exporter.threads() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(exporter.threads(), 0, "the abandoned helpers exit");
        let ok = poll_for(exporter.export(Vec::new()), Duration::from_secs(60));
        assert!(matches!(ok, Some(Ok(()))), "{ok:?}");
    }

    #[test]
    fn spans_pass_through_the_helper_thread() {
        use super::DeadlineExporter;
        use opentelemetry::trace::{Tracer, TracerProvider};
        use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};

        let memory = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(DeadlineExporter::new("spans", memory.clone()))
            .build();
        provider.tracer("demo").in_span("step", |_cx| {});
        assert_eq!(memory.get_finished_spans().unwrap().len(), 1);
    }
}
