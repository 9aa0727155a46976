//! Retries of transient failures within the export timeout, as the OTLP exporter
//! specification asks, and the count of them: one policy for every OTLP path.
//!
//! The policy: exponential backoff from [`INITIAL_DELAY`] to [`MAX_DELAY`] with up to
//! [`MAX_JITTER`] of jitter, a collector's `Retry-After` (or gRPC `RetryInfo`) honoured up to
//! [`MAX_THROTTLE`], retries until the export timeout (not a fixed number), and no wait started
//! that the timeout would cut. The exporters of opentelemetry-otlp run it as [`policy`]; they
//! retry what the specification calls retryable (gRPC `UNAVAILABLE`, `RESOURCE_EXHAUSTED` with
//! retry information, `CANCELLED`, `DEADLINE_EXCEEDED`, `ABORTED`, `OUT_OF_RANGE`, `DATA_LOSS`;
//! HTTP 429, 502, 503, 504 and a request that got no response). nemo-lens's own gRPC and
//! HTTP/protobuf span exporter runs the same loop here ([`with_retries`]; HTTP statuses read by
//! [`http_retry_after`], gRPC ones by `wire_grpc.rs`). nemo-lens makes two things hold that opentelemetry-otlp leaves to the
//! caller:
//!
//! * the timeout bounds the whole export, attempts and waits together ([`Bounded`]): the
//!   exporter's future is polled inside the private runtime, so a wait between attempts is a
//!   Tokio timer that yields (outside a runtime the exporters sleep the thread), and at the
//!   timeout the future is dropped, which cancels the request in flight;
//! * every attempt is counted ([`Attempts`]: the HTTP client, the gRPC interceptor and the
//!   gRPC span sender call [`Attempts::attempt`] once per request sent, the exporters [`Attempts::request`] once per
//!   request made), so the retries are known ([`Attempts::retries`]) and
//!   [`FailureReport`](super::report::FailureReport) names them.

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
/// The longest wait a collector may ask for (opentelemetry-otlp's bound too): a longer ask is
/// cut to it.
const MAX_THROTTLE: Duration = Duration::from_secs(30);

/// The retry policy of nemo-lens's OTLP exporters: exponential backoff from 100 ms to 2 s with
/// up to 100 ms of jitter, retrying until the export timeout.
pub(crate) fn policy() -> RetryPolicy {
    RetryPolicy::recommended()
        .with_max_retries(MAX_RETRIES)
        .with_initial_delay(INITIAL_DELAY)
        .with_max_delay(MAX_DELAY)
        .with_max_jitter(MAX_JITTER)
}

/// The waits between the attempts of one export under the policy.
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
#[derive(Debug)]
struct Backoff {
    retries: usize,
    delay: Duration,
    /// [`MAX_DELAY`], raised to [`MAX_THROTTLE`] once a collector asks for more: retrying
    /// sooner than it asked would defeat its backpressure.
    cap: Duration,
}

#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
impl Backoff {
    fn new() -> Self {
        Backoff {
            retries: 0,
            delay: INITIAL_DELAY,
            cap: MAX_DELAY,
        }
    }

    /// The wait before the next attempt, after a failure whose collector asked for
    /// `at_least` (zero: it did not ask); `None` once the retries are spent.
    fn next(&mut self, at_least: Duration) -> Option<Duration> {
        if self.retries >= MAX_RETRIES {
            return None;
        }
        self.retries += 1;
        let at_least = at_least.min(MAX_THROTTLE);
        if at_least > self.cap {
            self.cap = MAX_THROTTLE;
        }
        self.delay = self.delay.max(at_least);
        let wait = self.delay.saturating_add(jitter()).min(self.cap);
        self.delay = self.delay.saturating_mul(2).min(self.cap);
        Some(wait)
    }
}

/// Up to [`MAX_JITTER`], from the clock (as opentelemetry-otlp's jitter).
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
fn jitter() -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let most = MAX_JITTER.as_millis() as u64;
    Duration::from_millis(u64::from(nanos.wrapping_mul(2_654_435_761)) % (most + 1))
}

/// Runs `attempt` until it succeeds, fails for good (`retry_after` of its error is `None`;
/// `Some` is the least wait the collector asked for, zero for none), its retries are spent or
/// the next wait would outlast `timeout` (counted from the first attempt): the policy of
/// [`policy`]. Its waits are Tokio timers: it is polled inside the private runtime
/// ([`Bounded`]), which also cuts an attempt at the timeout.
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
pub(crate) async fn with_retries<T, E, Fut>(
    timeout: Duration,
    retry_after: impl Fn(&E) -> Option<Duration>,
    mut attempt: impl FnMut() -> Fut,
) -> Result<T, E>
where
    Fut: Future<Output = Result<T, E>>,
{
    let start = std::time::Instant::now();
    let mut backoff = Backoff::new();
    loop {
        let error = match attempt().await {
            Ok(out) => return Ok(out),
            Err(error) => error,
        };
        let Some(wait) = retry_after(&error).and_then(|at_least| backoff.next(at_least)) else {
            return Err(error);
        };
        if wait >= timeout.saturating_sub(start.elapsed()) {
            return Err(error);
        }
        tokio::time::sleep(wait).await;
    }
}

/// Whether a failed OTLP/HTTP response may be retried, as the OTLP specification says, and
/// after how long at least: 429 and 503 after the collector's `Retry-After` (seconds or an
/// HTTP date; without one, or unreadable, backoff alone), 502 and 504 with backoff alone,
/// any other status never.
#[cfg(feature = "otlp-http")]
pub(crate) fn http_retry_after(
    status: http::StatusCode,
    headers: &http::HeaderMap,
) -> Option<Duration> {
    match status.as_u16() {
        429 | 503 => Some(
            headers
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_retry_after)
                .unwrap_or(Duration::ZERO),
        ),
        502 | 504 => Some(Duration::ZERO),
        _ => None,
    }
}

/// A `Retry-After` value: delay-seconds, or an HTTP date (a past one is no wait).
#[cfg(feature = "otlp-http")]
fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// Requests and their attempts (sends) of one exporter.
#[derive(Debug, Default)]
pub(crate) struct Attempts {
    requests: AtomicU64,
    attempts: AtomicU64,
}

impl Attempts {
    /// One request is about to be sent.
    pub(crate) fn attempt(&self) {
        self.attempts.fetch_add(1, Ordering::Relaxed);
    }

    /// One request starts: its first attempt is not a retry (an export of opentelemetry-otlp is
    /// one request; nemo-lens's HTTP/protobuf exporter may split a batch into several).
    pub(crate) fn request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Attempts beyond the first of each request.
    pub(crate) fn retries(&self) -> u64 {
        let requests = self.requests.load(Ordering::Relaxed);
        self.attempts
            .load(Ordering::Relaxed)
            .saturating_sub(requests)
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
    /// `inner`, polled inside `runtime`, given up after `timeout`.
    pub(crate) fn new(inner: F, runtime: tokio::runtime::Handle, timeout: Duration) -> Self {
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
    use crate::export::otlp::test_runtime as runtime;

    /// Polled on a thread of its own, as the batch worker polls an export.
    fn poll_here<F: Future>(f: F) -> F::Output {
        crate::queue::batcher::block_on_timeout(f, Duration::from_secs(60))
            .expect("the export ends within 60 s")
    }

    #[test]
    fn the_timeout_bounds_the_whole_export_and_waits_inside_it_yield() {
        let rt = runtime();
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
        ));
        assert_eq!(quick.unwrap(), 7);
    }

    #[test]
    fn retries_are_attempts_beyond_the_first_of_each_request() {
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
            a.request();
            poll_here(Bounded::new(
                export,
                rt.handle().clone(),
                Duration::from_secs(60),
            ))
            .unwrap();
        }
        assert_eq!(attempts.retries(), 2);
    }

    #[cfg(feature = "otlp-http")]
    #[test]
    fn waits_double_to_the_cap_and_a_collectors_ask_raises_it_up_to_the_bound() {
        let ms = Duration::from_millis;
        let mut backoff = Backoff::new();
        let waits: Vec<Duration> = (0..6)
            .map(|_| backoff.next(Duration::ZERO).unwrap())
            .collect();
        for (wait, delay) in waits.iter().zip([100, 200, 400, 800, 1600]) {
            assert!(
                *wait >= ms(delay) && *wait <= ms(delay) + MAX_JITTER,
                "{waits:?}"
            );
        }
        assert_eq!(waits[5], MAX_DELAY, "{waits:?}");
        // A collector asking for 5 s: waited, and the backoff goes on from there.
        let asked = backoff.next(Duration::from_secs(5)).unwrap();
        assert!(asked >= Duration::from_secs(5) && asked <= ms(5_000) + MAX_JITTER);
        let next = backoff.next(Duration::ZERO).unwrap();
        assert!(
            next >= ms(10_000) && next <= ms(10_000) + MAX_JITTER,
            "{next:?}"
        );
        // An ask past the bound is cut to it.
        assert_eq!(
            backoff.next(Duration::from_secs(3600)).unwrap(),
            MAX_THROTTLE
        );
        let mut spent = Backoff::new();
        for _ in 0..MAX_RETRIES {
            assert!(spent.next(Duration::ZERO).is_some());
        }
        assert_eq!(spent.next(Duration::ZERO), None);
    }

    #[cfg(feature = "otlp-http")]
    #[test]
    fn transient_failures_are_retried_and_others_end_the_export() {
        let rt = runtime();
        // Fails `failures` times with `retry_after`, then succeeds; returns the attempts made.
        let run = |failures: u32, retry_after: Option<Duration>, timeout: Duration| {
            let made = std::cell::Cell::new(0_u32);
            let result = poll_here(Bounded::new(
                async {
                    with_retries(
                        timeout,
                        |e: &Option<Duration>| *e,
                        || {
                            made.set(made.get() + 1);
                            let failed = made.get() <= failures;
                            async move { if failed { Err(retry_after) } else { Ok(()) } }
                        },
                    )
                    .await
                    .map_err(|_| {
                        opentelemetry_sdk::error::OTelSdkError::InternalFailure("failed".into())
                    })
                },
                rt.handle().clone(),
                Duration::from_secs(60),
            ));
            (result.is_ok(), made.get())
        };
        let long = Duration::from_secs(50);
        assert_eq!(run(2, Some(Duration::ZERO), long), (true, 3));
        assert_eq!(run(1, None, long), (false, 1), "not retryable");
        // A collector asking for 40 s within a 10 s timeout: no wait is started.
        assert_eq!(
            run(1, Some(Duration::from_secs(40)), Duration::from_secs(10)),
            (false, 1)
        );
    }

    #[cfg(feature = "otlp-http")]
    #[test]
    fn http_statuses_are_retried_as_the_otlp_specification_says() {
        use http::{HeaderMap, HeaderValue, StatusCode};
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                http::header::RETRY_AFTER,
                HeaderValue::from_str(value).unwrap(),
            );
            headers
        };
        let none = HeaderMap::new();
        let status = |code: u16| StatusCode::from_u16(code).unwrap();
        for code in [429, 503] {
            assert_eq!(
                http_retry_after(status(code), &with(" 7 ")),
                Some(Duration::from_secs(7))
            );
            assert_eq!(http_retry_after(status(code), &none), Some(Duration::ZERO));
            assert_eq!(
                http_retry_after(status(code), &with("soon")),
                Some(Duration::ZERO)
            );
            let later = std::time::SystemTime::now() + Duration::from_secs(120);
            let asked =
                http_retry_after(status(code), &with(&httpdate::fmt_http_date(later))).unwrap();
            assert!(
                asked > Duration::from_secs(100) && asked <= Duration::from_secs(120),
                "{asked:?}"
            );
            let past = httpdate::fmt_http_date(std::time::UNIX_EPOCH);
            assert_eq!(
                http_retry_after(status(code), &with(&past)),
                Some(Duration::ZERO)
            );
        }
        for code in [502, 504] {
            assert_eq!(
                http_retry_after(status(code), &with("7")),
                Some(Duration::ZERO)
            );
        }
        for code in [400, 401, 403, 404, 413, 500, 501] {
            assert_eq!(http_retry_after(status(code), &with("7")), None, "{code}");
        }
    }
}
