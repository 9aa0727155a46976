//! The OTLP span exporter of nemo-lens ([`WireTraceExporter`]): requests written by
//! [`TraceEncoder`] straight from the export worker's batch, sent over gRPC
//! (`wire_grpc.rs`) or HTTP/protobuf (`wire_http.rs`).
//!
//! What goes over the wire is what opentelemetry-otlp's exporters send for the same spans. A
//! batch over the collector's message limit is split; a span too large alone is left out and
//! counted as dropped; a failed request fails the batch (counted as dropped as a whole). Each
//! request's transient failures are retried with the policy of every nemo-lens OTLP exporter
//! (`retry.rs`), and the export timeout bounds the batch's requests, attempts and waits
//! together. Failures and retries are reported as the other OTLP exporters' are
//! ([`FailureReport`]).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use parking_lot::Mutex;

use crate::config::env::Env;
use crate::error::Result;
use crate::export::otlp::Signal;
use crate::export::otlp::report::FailureReport;
use crate::export::otlp::retry::Bounded;
use crate::export::otlp::trace_request::{ReadyBatch, ReadyExport, ReadySpan, TraceEncoder};
use crate::export::otlp::transport::Transport;

/// Sends one encoded `ExportTraceServiceRequest` over a transport.
pub(crate) trait SendRequest: std::fmt::Debug + Send + Sync + 'static {
    /// Sends `body`, retrying a transient failure while `left` allows; counts the request and
    /// each attempt on the exporter's [`FailureReport`].
    /// On success, the spans the collector rejected (a partial success).
    fn send(
        &self,
        body: Vec<u8>,
        left: Duration,
    ) -> impl Future<Output = std::result::Result<u64, OTelSdkError>> + Send;
}

/// The span exporter of nemo-lens over `S` (see the module docs).
#[derive(Debug)]
pub(crate) struct WireTraceExporter<S> {
    sender: S,
    /// The private runtime: each batch's requests, attempts and waits are polled inside it.
    runtime: tokio::runtime::Handle,
    timeout: Duration,
    encoder: Mutex<TraceEncoder>,
    /// Spans too large for any request, and spans the collector rejected.
    dropped: Arc<AtomicU64>,
    pub(super) report: Arc<FailureReport>,
}

impl Transport {
    /// The span exporter over `sender`, its exports polled on the private runtime within
    /// `timeout`; spans too large to send, or rejected by the collector, are added to
    /// `dropped`.
    pub(super) fn wire_trace_exporter<S: SendRequest>(
        &mut self,
        sender: S,
        timeout: Duration,
        report: Arc<FailureReport>,
        dropped: Arc<AtomicU64>,
    ) -> Result<WireTraceExporter<S>> {
        let runtime = self.runtime(Signal::Traces)?.handle().clone();
        self.longest_timeout = self.longest_timeout.max(timeout);
        Ok(WireTraceExporter {
            sender,
            runtime,
            timeout,
            encoder: Mutex::new(TraceEncoder::default()),
            dropped,
            report,
        })
    }
}

impl<S: SendRequest> WireTraceExporter<S> {
    /// Writes `batch` as requests and sends them, one after the other, all within the export
    /// timeout (so an export a shutdown gave up on ends before the runtime stops).
    pub(crate) async fn export_batch(&self, batch: ReadyBatch) -> OTelSdkResult {
        let requests = self.encoder.lock().encode(batch);
        let (bodies, oversized) = (requests.bodies, requests.oversized);
        let start = Instant::now();
        let send_all = async {
            let mut rejected = 0;
            for body in bodies {
                // A failed request fails the batch: the worker counts all of it.
                let left = self.timeout.saturating_sub(start.elapsed());
                rejected += self.sender.send(body, left).await?;
            }
            Ok(rejected)
        };
        let result = Bounded::new(send_all, self.runtime.clone(), self.timeout)
            .await
            .map(|rejected| {
                self.dropped
                    .fetch_add(oversized.saturating_add(rejected), Ordering::Relaxed);
            });
        self.report.observe(&result);
        result
    }
}

/// Whether trace requests are gzipped: the first of the two variables that names `gzip` or
/// `none` decides (another value is skipped, as opentelemetry-otlp skips it).
pub(crate) fn gzip_from_env(env: Env<'_>) -> bool {
    for var in [
        "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
        "OTEL_EXPORTER_OTLP_COMPRESSION",
    ] {
        match env.get(var).map(|v| v.to_ascii_lowercase()).as_deref() {
            Some("gzip") => return true,
            Some("none") => return false,
            _ => {}
        }
    }
    false
}

/// The spans a collector's `ExportTraceServiceResponse` says it rejected (a partial success);
/// a response that is not one counts none.
pub(crate) fn rejected_spans(response: &[u8]) -> u64 {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
    use prost::Message;
    ExportTraceServiceResponse::decode(response)
        .ok()
        .and_then(|r| r.partial_success)
        .map_or(0, |p| u64::try_from(p.rejected_spans).unwrap_or(0))
}

impl<S: SendRequest> ReadyExport for WireTraceExporter<S> {
    fn export_ready(&self, batch: ReadyBatch) -> impl Future<Output = OTelSdkResult> + Send {
        self.export_batch(batch)
    }
}

impl<S: SendRequest> SpanExporter for WireTraceExporter<S> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.export_batch(ReadyBatch {
            build: None,
            spans: batch.into_iter().map(ReadySpan::Data).collect(),
        })
        .await
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.encoder.get_mut().set_resource(resource);
    }
}

/// Exports one SDK span to `endpoint` (30 s timeout) with the exporter `build` makes: the result,
/// and the retries its failure report counted.
#[cfg(test)]
pub(super) fn export_one_span<S: SendRequest>(
    endpoint: &str,
    build: impl FnOnce(&mut Transport, Env<'_>) -> Result<WireTraceExporter<S>>,
) -> (OTelSdkResult, u64) {
    use opentelemetry::trace::{Tracer, TracerProvider};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};

    let lookup = |k: &str| match k {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" => Some(endpoint.to_string()),
        "OTEL_EXPORTER_OTLP_TIMEOUT" => Some("30000".to_string()),
        _ => None,
    };
    // The transport owns the runtime the exports run on: it lives as long as the exporter.
    let mut transport = Transport::default();
    let exporter = build(&mut transport, Env::new(&lookup)).unwrap();
    let memory = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(memory.clone())
        .build();
    provider.tracer("t").in_span("step", |_| {});
    let spans = memory.get_finished_spans().unwrap();
    // Bounded by the exporter's own 30 s timeout.
    let result = transport
        .runtime(Signal::Traces)
        .unwrap()
        .block_on(exporter.export(spans));
    (result, exporter.report.retries())
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::collector::trace::v1::{
        ExportTracePartialSuccess, ExportTraceServiceResponse,
    };
    use prost::Message;

    use super::rejected_spans;

    fn response(rejected: i64) -> Vec<u8> {
        ExportTraceServiceResponse {
            partial_success: Some(ExportTracePartialSuccess {
                rejected_spans: rejected,
                error_message: "over quota".into(),
            }),
        }
        .encode_to_vec()
    }

    #[test]
    fn a_partial_success_counts_its_rejected_spans() {
        assert_eq!(rejected_spans(&response(3)), 3);
        assert_eq!(
            rejected_spans(&ExportTraceServiceResponse::default().encode_to_vec()),
            0
        );
    }

    #[test]
    fn an_answer_that_is_not_a_response_counts_none() {
        assert_eq!(rejected_spans(&response(-5)), 0);
        assert_eq!(rejected_spans(b"<html>busy</html>"), 0);
        let full = response(3);
        assert_eq!(rejected_spans(&full[..full.len() - 2]), 0);
    }
}
