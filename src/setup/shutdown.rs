//! The bounded, idempotent shutdown of a [`Telemetry`](crate::Telemetry): open spans end as
//! truncated, the queues drain, the providers shut down within the deadline, and drops are
//! reported once. The panic hook and the signal thread reach it through [`ExitTarget`].

use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::handle::Inner;
use super::once::{FinishOnDrop, Turn};
use super::process_exit::ExitTarget;
use crate::error::{LensError, Result};
use crate::layer::hooks::WithLens;
use crate::record::open_spans::REASON_SHUTDOWN;

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
                pipeline.record_panic(&(with.scope)(dispatch, id), message);
            }
        });
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
        let (tx, rx) = mpsc::channel();
        let worker = std::thread::Builder::new()
            .name("nemo-lens-shutdown".into())
            .spawn(move || {
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
                let _ = tx.send(errors);
            });
        // The processors stop exporting at the deadline and then report; allow them a moment.
        let wait = deadline.saturating_duration_since(Instant::now()) + Duration::from_millis(500);
        let result = match worker {
            Err(e) => Err(LensError::Shutdown(format!(
                "cannot start the shutdown thread: {e}"
            ))),
            Ok(_) => match rx.recv_timeout(wait) {
                Ok(errors) if errors.is_empty() => Ok(()),
                Ok(errors) => Err(LensError::Shutdown(errors.join("; "))),
                Err(_) => Err(LensError::Shutdown(format!(
                    "timed out after {timeout:?}; data still queued was abandoned"
                ))),
            },
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
        let _ = self.shutdown(Duration::from_secs(5));
        self.built.transport.shutdown_background();
    }
}
