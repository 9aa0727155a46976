//! One stderr line when an OTLP exporter starts failing: which signal, which endpoint
//! (credentials redacted), and why (the TLS or network error underneath, not the exporters'
//! generic "network error").
//!
//! A failing collector fails every batch; the line is written once per *failure streak* (the
//! first failure after setup or after a successful export), so a dead collector costs one line,
//! not one per batch. What the failed exports carried is counted by the batch processors and
//! the metric reader ([`Telemetry::stats`](crate::Telemetry::stats)) and reported at
//! shutdown.
//!
//! ```text
//! nemo-lens: traces export to https://collector:4318/v1/traces failed: TLS: invalid peer certificate: UnknownIssuer (the server's certificate is not signed by a trusted CA; OTEL_EXPORTER_OTLP_CERTIFICATE names the CA file to trust); what it carried is dropped and counted
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use parking_lot::Mutex;

use crate::export::otlp::Signal;
use crate::export::otlp::endpoint::redact_urls_in;
use crate::export::otlp::retry::{Attempts, Bounded};

/// The failure line of one signal's exporter.
#[derive(Debug)]
pub(crate) struct FailureReport {
    signal: Signal,
    /// The endpoint, redacted.
    endpoint: String,
    /// Set while failing: the line of this streak is written.
    failing: AtomicBool,
    /// The transport's own error of the last failed request (HTTP), when known.
    cause: Mutex<Option<String>>,
    /// The exporter's requests and their attempts: how many were retries.
    attempts: Attempts,
}

impl FailureReport {
    pub(crate) fn new(signal: Signal, shown_endpoint: String) -> Arc<Self> {
        Arc::new(FailureReport {
            signal,
            endpoint: shown_endpoint,
            failing: AtomicBool::new(false),
            cause: Mutex::new(None),
            attempts: Attempts::default(),
        })
    }

    /// One request is about to be sent (the transports call this once per attempt).
    pub(crate) fn attempt(&self) {
        self.attempts.attempt();
    }

    /// One request starts (the exporters call this once per request, its attempts once each
    /// through [`FailureReport::attempt`]).
    pub(crate) fn request(&self) {
        self.attempts.request();
    }

    /// Requests sent again after a transient failure, since setup.
    pub(crate) fn retries(&self) -> u64 {
        self.attempts.retries()
    }

    /// Remembers the transport error underneath the next failed export.
    #[cfg(feature = "otlp-http")]
    pub(crate) fn note_cause(&self, cause: String) {
        *self.cause.lock() = Some(cause);
    }

    /// An export succeeded: the next failure starts a new streak.
    fn succeeded(&self) {
        if self.failing.load(Ordering::Relaxed) {
            self.failing.store(false, Ordering::Relaxed);
        }
        self.cause.lock().take();
    }

    /// An export failed with `error`: the first failure of a streak writes the line.
    fn failed(&self, error: &str) {
        let cause = self.cause.lock().take();
        if self.failing.swap(true, Ordering::Relaxed) {
            return;
        }
        let mut cause = cause.unwrap_or_else(|| error.to_string());
        let retries = self.retries();
        if retries > 0 {
            cause.push_str(&format!(
                " ({retries} requests retried since setup; retries stop at the export timeout)"
            ));
        }
        eprintln!("{}", self.line(&cause));
    }

    /// The line for a failure with `cause`.
    pub(crate) fn line(&self, cause: &str) -> String {
        let cause = redact_urls_in(cause.trim());
        let lower = cause.to_ascii_lowercase();
        let tls = [
            "certificate",
            "tls",
            "handshake",
            "unknownissuer",
            "notvalidforname",
        ]
        .iter()
        .any(|w| lower.contains(w));
        let hint = if lower.contains("unknownissuer") || lower.contains("unknown issuer") {
            " (the server's certificate is not signed by a trusted CA; \
             OTEL_EXPORTER_OTLP_CERTIFICATE names the CA file to trust)"
        } else if lower.contains("notvalidforname") || lower.contains("not valid for name") {
            " (the server's certificate does not name the endpoint's host)"
        } else {
            ""
        };
        format!(
            "nemo-lens: {} export to {} failed: {}{cause}{hint}; what it carried is dropped and counted",
            self.signal.as_str(),
            self.endpoint,
            if tls { "TLS: " } else { "" },
        )
    }

    pub(super) fn observe(&self, result: &OTelSdkResult) {
        match result {
            Ok(()) => self.succeeded(),
            Err(e) => self.failed(&e.to_string()),
        }
    }
}

/// An exporter whose failures are reported by a [`FailureReport`], each export bounded by the
/// exporter's timeout and polled inside the private runtime ([`Bounded`]).
#[derive(Debug)]
pub(crate) struct Reported<E> {
    inner: E,
    report: Arc<FailureReport>,
    runtime: tokio::runtime::Handle,
    timeout: Duration,
}

impl<E> Reported<E> {
    pub(crate) fn new(
        inner: E,
        report: Arc<FailureReport>,
        runtime: tokio::runtime::Handle,
        timeout: Duration,
    ) -> Self {
        Reported {
            inner,
            report,
            runtime,
            timeout,
        }
    }

    /// `export` (one request), bounded by the timeout, its attempts counted.
    fn bounded<F: std::future::Future<Output = OTelSdkResult>>(&self, export: F) -> Bounded<F> {
        self.report.request();
        Bounded::new(export, self.runtime.clone(), self.timeout)
    }
}

impl<E: opentelemetry_sdk::trace::SpanExporter> opentelemetry_sdk::trace::SpanExporter
    for Reported<E>
{
    async fn export(&self, batch: Vec<opentelemetry_sdk::trace::SpanData>) -> OTelSdkResult {
        let result = self.bounded(self.inner.export(batch)).await;
        self.report.observe(&result);
        result
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }
    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource)
    }
}

impl<E: opentelemetry_sdk::logs::LogExporter> opentelemetry_sdk::logs::LogExporter for Reported<E> {
    async fn export(&self, batch: opentelemetry_sdk::logs::LogBatch<'_>) -> OTelSdkResult {
        let result = self.bounded(self.inner.export(batch)).await;
        self.report.observe(&result);
        result
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }
    fn event_enabled(
        &self,
        level: opentelemetry::logs::Severity,
        target: &str,
        name: Option<&str>,
    ) -> bool {
        self.inner.event_enabled(level, target, name)
    }
    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource)
    }
}

impl<E: opentelemetry_sdk::metrics::exporter::PushMetricExporter>
    opentelemetry_sdk::metrics::exporter::PushMetricExporter for Reported<E>
{
    async fn export(
        &self,
        metrics: &opentelemetry_sdk::metrics::data::ResourceMetrics,
    ) -> OTelSdkResult {
        let result = self.bounded(self.inner.export(metrics)).await;
        self.report.observe(&result);
        result
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }
    fn temporality(&self) -> opentelemetry_sdk::metrics::Temporality {
        self.inner.temporality()
    }
}

/// The error chain of `e`, outermost first, joined by `: ` (repeated texts skipped).
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_signal_endpoint_and_cause_and_explains_tls() {
        let r = FailureReport::new(Signal::Traces, "https://[REDACTED]@c:4318/v1/traces".into());
        let line = r.line(
            "error sending request for url (https://u:p@c:4318/v1/traces): client error (Connect): invalid peer certificate: UnknownIssuer",
        );
        assert!(
            line.starts_with(
                "nemo-lens: traces export to https://[REDACTED]@c:4318/v1/traces failed: TLS: "
            ),
            "{line}"
        );
        assert!(
            line.contains("UnknownIssuer") && line.contains("OTEL_EXPORTER_OTLP_CERTIFICATE"),
            "{line}"
        );
        assert!(!line.contains("u:p"), "{line}");
        assert!(!line.contains('\n'));
        let plain = r.line("HTTP export failed with status code: 503");
        assert!(!plain.contains("TLS"), "{plain}");
    }
}
