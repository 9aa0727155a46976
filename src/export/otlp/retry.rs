//! Retries of transient failures within the export timeout, as the OTLP exporter
//! specification asks, and the count of them.
//!
//! The exporters of opentelemetry-otlp retry what the specification calls retryable (gRPC
//! `UNAVAILABLE`, `RESOURCE_EXHAUSTED` with retry information, `CANCELLED`,
//! `DEADLINE_EXCEEDED`, `ABORTED`, `OUT_OF_RANGE`, `DATA_LOSS`; HTTP 429, 502, 503, 504 and a
//! request that got no response), honouring `Retry-After` and gRPC `RetryInfo`, with
//! exponential backoff and jitter; they never start an attempt that the export timeout would
//! cut. nemo-lens gives them [`policy`] (retries until the timeout, not a fixed number) and
//! makes two things hold that they leave to the caller:
//!
//! * the timeout bounds the whole export, attempts and waits together ([`Bounded`]): the
//!   exporter's future is polled inside the private runtime, so a wait between attempts is a
//!   Tokio timer that yields (outside a runtime the exporters sleep the thread), and at the
//!   timeout the future is dropped, which cancels the request in flight;
//! * every attempt is counted ([`Attempts`]: the HTTP client and the gRPC interceptor call
//!   [`Attempts::attempt`] once per request), so the retries are known
//!   ([`Attempts::retries`]) and [`FailureReport`](super::report::FailureReport) names them.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use opentelemetry_otlp::RetryPolicy;

/// The first wait before a retry; each later one doubles it, up to [`MAX_DELAY`].
const INITIAL_DELAY: Duration = Duration::from_millis(100);
/// The longest wait between attempts (a collector's `Retry-After` may ask for more).
const MAX_DELAY: Duration = Duration::from_secs(2);
/// The most random time added to each wait, so that many ranks do not retry in step.
const MAX_JITTER: Duration = Duration::from_millis(100);
/// Attempts after the first: enough that the export timeout, not the count, ends the retries.
const MAX_RETRIES: usize = 1_000;

/// The retry policy of nemo-lens's OTLP exporters: exponential backoff from 100 ms to 2 s with
/// up to 100 ms of jitter, retrying until the export timeout.
pub(crate) fn policy() -> RetryPolicy {
    RetryPolicy::recommended()
        .with_max_retries(MAX_RETRIES)
        .with_initial_delay(INITIAL_DELAY)
        .with_max_delay(MAX_DELAY)
        .with_max_jitter(MAX_JITTER)
}

/// Exports and their attempts (requests sent) of one exporter.
#[derive(Debug, Default)]
pub(crate) struct Attempts {
    exports: AtomicU64,
    attempts: AtomicU64,
}

impl Attempts {
    /// One request is about to be sent.
    pub(crate) fn attempt(&self) {
        self.attempts.fetch_add(1, Ordering::Relaxed);
    }

    /// One export starts.
    fn export(&self) {
        self.exports.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests sent beyond the first of each export.
    pub(crate) fn retries(&self) -> u64 {
        let exports = self.exports.load(Ordering::Relaxed);
        self.attempts
            .load(Ordering::Relaxed)
            .saturating_sub(exports)
    }
}

/// An export bounded by the exporter's timeout and polled inside the private runtime (see the
/// module's documentation).
pub(crate) struct Bounded<F> {
    runtime: tokio::runtime::Handle,
    timeout: Duration,
    /// Created at the first poll, inside the runtime.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    inner: Pin<Box<F>>,
}

impl<F> Bounded<F> {
    /// `inner`, polled inside `runtime`, given up after `timeout` (counted in `attempts`).
    pub(crate) fn new(
        inner: F,
        runtime: tokio::runtime::Handle,
        timeout: Duration,
        attempts: &Attempts,
    ) -> Self {
        attempts.export();
        Bounded {
            runtime,
            timeout,
            deadline: None,
            inner: Box::pin(inner),
        }
    }
}

impl<F, T> Future for Bounded<F>
where
    F: Future<Output = Result<T, opentelemetry_sdk::error::OTelSdkError>>,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let _inside = this.runtime.enter();
        if let Poll::Ready(out) = this.inner.as_mut().poll(cx) {
            return Poll::Ready(out);
        }
        let timeout = this.timeout;
        let deadline = this
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(opentelemetry_sdk::error::OTelSdkError::Timeout(
                timeout,
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    }

    /// Polled on a thread of its own, as the batch worker polls an export.
    fn poll_here<F: Future>(f: F) -> F::Output {
        crate::queue::batcher::block_on_timeout(f, Duration::from_secs(60))
            .expect("the export ends within 60 s")
    }

    #[test]
    fn the_timeout_bounds_the_whole_export_and_waits_inside_it_yield() {
        let rt = runtime();
        let attempts = Attempts::default();
        // Tokio's timer works only inside a runtime: the wait of a retry, as the exporters
        // make it when `Handle::try_current` finds one.
        let waits = async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<(), opentelemetry_sdk::error::OTelSdkError>(())
        };
        let started = std::time::Instant::now();
        let out = poll_here(Bounded::new(
            waits,
            rt.handle().clone(),
            Duration::from_millis(200),
            &attempts,
        ));
        assert!(
            matches!(out, Err(opentelemetry_sdk::error::OTelSdkError::Timeout(_))),
            "{out:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(30));
        let quick = poll_here(Bounded::new(
            async { Ok::<u8, opentelemetry_sdk::error::OTelSdkError>(7) },
            rt.handle().clone(),
            Duration::from_secs(60),
            &attempts,
        ));
        assert_eq!(quick.unwrap(), 7);
    }

    #[test]
    fn retries_are_attempts_beyond_the_first_of_each_export() {
        let rt = runtime();
        let attempts = Attempts::default();
        for tries in [1, 3, 1] {
            let a = &attempts;
            let export = async move {
                for _ in 0..tries {
                    a.attempt();
                }
                Ok::<(), opentelemetry_sdk::error::OTelSdkError>(())
            };
            poll_here(Bounded::new(
                export,
                rt.handle().clone(),
                Duration::from_secs(60),
                a,
            ))
            .unwrap();
        }
        assert_eq!(attempts.retries(), 2);
    }
}
