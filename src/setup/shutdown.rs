//! The bounded, idempotent shutdown of a [`Telemetry`](crate::Telemetry): open spans end as
//! truncated, the queues drain, the providers shut down within the deadline, and drops are
//! reported once; and the opt-in panic hook and signal handlers that run it when the process
//! ends abruptly (through [`ExitTarget`]).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::handle::{Inner, Telemetry};
use super::once::{FinishOnDrop, Turn};
use super::process_exit::{self, ExitTarget};
use crate::bounded::{Unanswered, run_bounded};
use crate::error::{LensError, Result};
use crate::layer::hooks::WithLens;
use crate::record::open_spans::REASON_SHUTDOWN;

impl Telemetry {
    /// Opts in to recording panics: a panic adds an `exception` event to the innermost open span
    /// of its thread; a panic that ends the process then ends the telemetry (spans still open
    /// truncated, everything flushed within 5 s),
    /// and a panic the program catches leaves it running. The previous panic hook still runs,
    /// after it. See [`Telemetry::install_signal_handlers`] for the details. Call it once, after
    /// setup.
    ///
    /// ```
    /// let t = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
    /// t.install_panic_hook();
    /// ```
    pub fn install_panic_hook(&self) {
        if !self.inner.panic_hook.swap(true, Ordering::SeqCst) {
            let target: Weak<dyn ExitTarget> = Arc::downgrade(&self.inner) as _;
            process_exit::install_panic_hook(target);
        }
    }

    /// Installs SIGTERM and SIGINT handlers: on the signal, a dedicated thread ends every open
    /// span as truncated, flushes within 5 s,
    /// then lets the signal end the process as it would have (status 128 + signo). The handler
    /// itself only writes to a pipe. See below; without it, open and queued spans are
    /// lost on those signals.
    ///
    /// ```no_run
    /// let t = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
    /// t.install_signal_handlers().unwrap();
    /// ```
    ///
    /// # Why a thread, and what is not covered
    ///
    /// Spans are exported when they end and batches when the worker gets to them, so a process that
    /// dies abruptly loses its open spans (the `train` span of a run, the step that crashed) and
    /// whatever is still queued. Two calls on the handle recover them:
    ///
    /// ```no_run
    /// # let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
    /// telemetry.install_panic_hook();
    /// telemetry.install_signal_handlers().expect("signal handlers");
    /// ```
    ///
    /// # Panic ([`Telemetry::install_panic_hook`](crate::Telemetry::install_panic_hook))
    ///
    /// The hook runs on the panicking thread, before unwinding, then calls the hook that was
    /// installed before it (by default the one that prints the message):
    ///
    /// * the innermost span the lens layer records on that thread gets an `exception` event
    ///   (`exception.type = "panic"`, `exception.message` = the panic message and location,
    ///   `exception.stacktrace` from the panicking frame down when a backtrace is captured
    ///   (`RUST_BACKTRACE`, or [`error_backtraces`](crate::TelemetryBuilder::error_backtraces);
    ///   resolved on the export worker), `exception.escaped = "True"`) and the status `ERROR`;
    /// * the spans the panic unwinds through end as it leaves them, with the status `ERROR` and
    ///   the panic's message as its description unless their status was set (as Python's
    ///   `start_as_current_span` marks every span an exception propagates through), whether
    ///   the panic is caught further up or ends the process; a span a destructor runs during
    ///   the unwinding, and a span above the `catch_unwind` that stops it, end as they would
    ///   otherwise (without the hook, the spans unwound through end `ERROR` described `panic`);
    /// * a panic on the thread named `main` may end the process, so the [flight
    ///   recorder](crate::flight_recorder) dumps the spans open at that moment (the first such
    ///   panic only).
    ///
    /// The hook cannot know whether the panic will be caught (it runs before unwinding), so it
    /// ends nothing. The telemetry ends where the process does, as a panic's (spans still open,
    /// such as those of other threads, truncated with reason `"process panicked"`, everything
    /// queued flushed within 5 s):
    ///
    /// * when the `Telemetry` is dropped while `main` unwinds (a handle in `main`'s frame);
    /// * at `exit` after a main-thread panic (an `atexit` handler: a handle in a static, which
    ///   nothing drops; also after a caught main-thread panic when the program then exits
    ///   without shutting telemetry down);
    /// * under `panic = "abort"`, in the hook itself, for a panic on any thread: nothing runs
    ///   after it.
    ///
    /// A panic the program catches (`catch_unwind`, a job runner, a server, a joined thread)
    /// leaves telemetry running. A panic on another thread that ends the process some other way
    /// (the main thread re-panics on the `join`) follows the main-thread rule.
    ///
    /// # SIGTERM and SIGINT ([`Telemetry::install_signal_handlers`](crate::Telemetry::install_signal_handlers))
    ///
    /// A preempted SLURM job gets SIGTERM (and SIGKILL some seconds later); Ctrl-C is SIGINT. The
    /// handler itself only writes the signal number to a pipe (async-signal-safe); a dedicated thread
    /// (`nemo-lens-signals`) reads it, ends every open span as truncated (reason `"process received
    /// SIGTERM"` / `"… SIGINT"`), shuts the telemetry down within 5 s, then
    /// restores the default disposition and re-raises the signal, so the process dies *by the
    /// signal* as it would have without the handler (a shell reports status 128 + signo). A second
    /// signal while the flush runs kills the process at once. In a process forked after the
    /// handlers were installed, the signals have their default effect.
    ///
    /// The signal decides the exit status even when `main` finishes during the flush: `main`'s
    /// [`Telemetry::shutdown`] waits for the signal thread's, and if `main` then returns, an
    /// `atexit` handler waits for the flush to end and ends the process by the signal.
    ///
    /// Without the handlers, SIGTERM and SIGINT end the process at once: spans still open and spans
    /// queued in the batch processor (up to `OTEL_BSP_MAX_QUEUE_SIZE`, by default up to 5 s worth)
    /// are lost. SIGKILL can never be handled.
    pub fn install_signal_handlers(&self) -> Result<()> {
        let target: Weak<dyn ExitTarget> = Arc::downgrade(&self.inner) as _;
        process_exit::install_signal_handlers(target)
    }

    /// Ends open spans as truncated, flushes and shuts the providers down, returning within
    /// `timeout` (plus scheduling slack) even when an exporter hangs.
    ///
    /// Runs once: a call while another shutdown is running (the signal thread's on SIGTERM, the
    /// panic hook's, another thread's) waits for that one to finish, at most `timeout`, so
    /// `main` never returns (and the process never exits) in the middle of the flush; a call
    /// after it returns at once.
    ///
    /// # Accounting
    ///
    /// Spans that end while the shutdown runs (training goes on during a SIGTERM flush) and
    /// after it are refused by the span processor and counted in [`Telemetry::stats`]: every
    /// sampled span is exported or counted. The counts are printed once on stderr at the end of
    /// the shutdown when not zero.
    ///
    /// # Truncation
    ///
    /// Batch processors export a span when it ends, so a run-scoped span (`train`, `job`) that is
    /// still open when the process shuts down would vanish. The lens layer keeps every span it
    /// starts in its table of open spans until the span closes (one short lock per span start
    /// and end). [`Telemetry::shutdown`] first ends every span still in it, **innermost first**
    /// (reverse start order), each with
    ///
    /// * the attribute `nemo.span.truncated = true`,
    /// * an event `nemo.span.truncated` with `nemo.span.truncated.reason`,
    /// * the attributes and events recorded on it up to then, and its status left as it was
    ///   (truncation is not an error),
    ///
    /// and only then shuts the providers down, so the batch processor flushes the truncated spans
    /// with everything else. `force_flush` never closes live spans.
    ///
    /// Spans started through the SDK directly ([`Telemetry::tracer`],
    /// [`Telemetry::opentelemetry_layer`]) are covered too, by a span processor in front of
    /// lens's processors: the SDK lets no processor end a span it does not own, so that
    /// processor keeps a copy of each SDK span as it starts and, at shutdown, exports the
    /// copies of those still open with the same marks (end time = shutdown time), innermost
    /// first, and ignores their real end if it comes later. The copy holds what the span had
    /// when it started (ids, parent, name, kind, start time, attributes and links given at
    /// start), not what was set on it afterwards. At most 4096 spans (8 MiB of copies) are
    /// tracked at once; see [`Stats::untracked_sdk_spans`](crate::Stats::untracked_sdk_spans). With the application's own
    /// provider ([`TelemetryBuilder::tracer_provider`](super::TelemetryBuilder::tracer_provider))
    /// the copies go to lens's processors only (an exporter given to lens), never to the
    /// application's own processors.
    ///
    /// **Fork**: a process forked without exec inherits the table with its parent's open spans
    /// (and possibly a lock another parent thread held). The child never reads, locks or ends them: they
    /// belong to the parent, which ends and exports them; the child forgets them (see
    /// [`Stats::inherited_from_parent`](crate::Stats::inherited_from_parent)).
    pub fn shutdown(&self, timeout: Duration) -> Result<()> {
        self.inner.shutdown(timeout)
    }
}

impl Inner {
    /// Shuts down as [`Telemetry::shutdown`](crate::Telemetry::shutdown) describes.
    pub(super) fn shutdown(&self, timeout: Duration) -> Result<()> {
        self.shutdown_because(timeout, REASON_SHUTDOWN)
    }
}

impl ExitTarget for Inner {
    fn record_panic(&self, message: &str) {
        if self.inherited() {
            return;
        }
        let Some(pipeline) = &self.built.pipeline else {
            return;
        };
        // Never the span extensions (another layer may hold their lock on this thread): the
        // registry's scope walk, then the open-span table, with bounded waits.
        tracing::Span::current().with_subscriber(|(id, dispatch)| {
            if let Some(with) = dispatch.downcast_ref::<WithLens>() {
                pipeline.record_panic(Some(&with.table), &(with.scope)(dispatch, id), message);
            }
        });
    }

    fn dump_for_panic(&self) {
        if self.inherited() {
            return;
        }
        if let Some(r) = &self.flight_recorder {
            r.on_panic();
        }
    }

    fn shutdown_because(&self, timeout: Duration, reason: &'static str) -> Result<()> {
        if self.inherited() {
            // A forked child: the parent's providers have no worker threads here, and shutting
            // them down would wait out `timeout` per processor.
            return Ok(());
        }
        if self.shutdown.begin() == Turn::Wait {
            // Another path (signal thread, panic hook, another thread) is shutting down: wait
            // for it, so that this caller does not go on (and exit) mid-flush.
            return if self.shutdown.wait(timeout) {
                Ok(())
            } else {
                Err(LensError::Shutdown(format!(
                    "another shutdown (a signal, the panic hook or another thread) was still \
                     running after {timeout:?}"
                )))
            };
        }
        let _finish = FinishOnDrop(&self.shutdown);
        // Declared after `_finish`, so dropped before it: a waiting shutdown returns to the
        // environment as it was before setup, on every path out of here.
        let _restore = RestoreOnDrop(&self.built.handed_down.publication);
        if let Some(r) = &self.flight_recorder {
            r.on_truncation(reason);
        }
        let deadline = Instant::now() + timeout;
        if let Some(p) = &self.built.pipeline {
            p.close_all(reason);
        }
        // SDK spans (`Telemetry::tracer`, tracing-opentelemetry's layer) still open: their
        // truncated copies go to the processors before these shut down.
        self.built.span_processors.close_open(reason);
        // The span processors are shut down directly, not through the tracer provider: a shut
        // provider skips ending spans silently, while a shut processor refuses and counts them.
        let tracer = self
            .built
            .tracer_provider
            .is_some()
            .then(|| self.built.span_processors.clone());
        // The application's own processors (`TelemetryBuilder::tracer_provider`) are reached
        // through the provider, after lens's own.
        let own_provider = self
            .built
            .tracer_provider
            .clone()
            .filter(|_| self.built.own_provider);
        let pipeline = self.built.pipeline.clone();
        let meter = self.built.meter_provider.clone();
        let logger = self.built.logger_provider.as_ref().map(|p| p.sdk().clone());
        if tracer.is_none() && meter.is_none() && logger.is_none() {
            return Ok(());
        }
        // The processors stop exporting at the deadline and then report; allow them a moment.
        let wait = deadline.saturating_duration_since(Instant::now()) + Duration::from_millis(500);
        let answer = run_bounded("shutdown", wait, move || {
            let mut errors = Vec::new();
            let remaining = || deadline.saturating_duration_since(Instant::now());
            if let Some(p) = pipeline {
                // Queued span records become SDK spans on the worker; let it finish them
                // before the processors shut down, in half the time: the processors'
                // shutdown needs the rest to export or count what is left.
                p.drain(Instant::now() + remaining() / 2);
            }
            if let Some(t) = tracer
                && let Err(e) = t.shutdown(remaining())
            {
                errors.push(format!("traces: {e}"));
            }
            if let Some(p) = own_provider
                && let Err(e) = p.shutdown_with_timeout(remaining())
            {
                errors.push(format!("traces (application's processors): {e}"));
            }
            // Logs before metrics, so the last metric export carries the final
            // `nemo.lens.dropped` counts of spans and logs.
            if let Some(l) = logger
                && let Err(e) = l.shutdown_with_timeout(remaining())
            {
                errors.push(format!("logs: {e}"));
            }
            if let Some(m) = meter
                && let Err(e) = m.shutdown_with_timeout(remaining())
            {
                errors.push(format!("metrics: {e}"));
            }
            errors
        });
        let result = match answer {
            Ok(errors) if errors.is_empty() => Ok(()),
            Ok(errors) => Err(LensError::Shutdown(errors.join("; "))),
            Err(Unanswered::NotStarted(e)) => Err(LensError::Shutdown(format!(
                "cannot start the shutdown thread: {e}"
            ))),
            Err(Unanswered::TimedOut) => Err(LensError::Shutdown(format!(
                "timed out after {timeout:?}; data still queued was abandoned"
            ))),
        };
        let untracked = self.built.span_processors.untracked();
        if untracked > 0 {
            eprintln!(
                "nemo-lens: {untracked} SDK spans were not tracked by the closer (its table was \
                 full), so any of them still open at shutdown was not exported as truncated"
            );
        }
        let dropped = self.dropped.snapshot();
        if dropped.total() > 0 {
            // Reported once: shutdown runs once.
            eprintln!(
                "nemo-lens: dropped {dropped} (queue full, export failed or timed out, still \
                 queued at shutdown, or ended while shutting down; see OTEL_BSP_MAX_QUEUE_SIZE, \
                 OTEL_BLRP_MAX_QUEUE_SIZE and NEMO_LENS_QUEUE_MAX_BYTES)"
            );
        }
        result
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.inherited() {
            // A forked child: dropping the parent's providers would shut them down (waiting for
            // worker threads that did not survive the fork) and a Tokio runtime would try to
            // stop threads that do not exist. Leak them instead; the child's memory is its own.
            std::mem::forget(self.built.tracer_provider.take());
            std::mem::forget(self.built.meter_provider.take());
            std::mem::forget(self.built.logger_provider.take());
            self.built.transport.forget();
            return;
        }
        // Dropped while `main` unwinds a panic: the panic is what ends the telemetry.
        let reason = if std::thread::panicking() && process_exit::on_main_thread() {
            process_exit::REASON_PANIC
        } else {
            REASON_SHUTDOWN
        };
        let _ = self.shutdown_because(process_exit::EXIT_FLUSH_TIMEOUT, reason);
        self.built.transport.shutdown_background();
    }
}

/// Restores `OTEL_RESOURCE_ATTRIBUTES` when shutdown ends, after the exporters have stopped.
struct RestoreOnDrop<'a>(&'a super::resource::Publication);

impl Drop for RestoreOnDrop<'_> {
    fn drop(&mut self) {
        self.0.restore();
    }
}
