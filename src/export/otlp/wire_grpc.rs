//! The gRPC transport of nemo-lens's span exporter ([`WireTraceExporter`]): each request a
//! unary call of `opentelemetry.proto.collector.trace.v1.TraceService/Export` on a tonic
//! channel, its message the encoded request as it is ([`EncodedRequest`]).
//!
//! What goes over the wire is what opentelemetry-otlp's gRPC exporter sends: the same message,
//! the configured headers as metadata, gzip when `OTEL_EXPORTER_OTLP_TRACES_COMPRESSION` (or
//! `OTEL_EXPORTER_OTLP_COMPRESSION`) says so, TLS by nemo-lens's own connector for an
//! `https://` endpoint (`grpc_tls.rs`). A status the OTLP specification calls transient is
//! retried ([`retry_after`]): `UNAVAILABLE`, `CANCELLED`, `DEADLINE_EXCEEDED`, `ABORTED`,
//! `OUT_OF_RANGE`, `DATA_LOSS`, and `RESOURCE_EXHAUSTED` when the collector sends `RetryInfo`,
//! whose delay is honoured. Spans the collector rejects in a partial success are counted as
//! dropped.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use http::uri::PathAndQuery;
use opentelemetry_sdk::error::OTelSdkError;
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::metadata::MetadataMap;
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_types::StatusExt;

use crate::config::env::Env;
use crate::error::LensError;
use crate::export::otlp::endpoint::Destination;
use crate::export::otlp::report::{FailureReport, chain};
use crate::export::otlp::retry;
use crate::export::otlp::transport::{Transport, metadata};
use crate::export::otlp::wire::{SendRequest, WireTraceExporter, gzip_from_env, rejected_spans};
use crate::export::otlp::{OtlpProtocol, Signal};

/// The method every trace request calls.
const EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// The most of a collector's status message a failure line shows.
const MAX_SHOWN_MESSAGE: usize = 1024;

/// The gRPC span exporter.
pub(crate) type GrpcTraceExporter = WireTraceExporter<GrpcSender>;

/// Sends requests to the traces endpoint over gRPC (see the module docs).
pub(crate) struct GrpcSender {
    channel: Channel,
    metadata: MetadataMap,
    gzip: bool,
    report: Arc<FailureReport>,
}

impl std::fmt::Debug for GrpcSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcSender")
            .field("gzip", &self.gzip)
            .finish_non_exhaustive()
    }
}

impl Transport {
    /// The gRPC span exporter of nemo-lens; spans too large to send, or rejected by the
    /// collector, are added to `dropped`.
    pub(crate) fn grpc_trace_exporter(
        &mut self,
        env: Env<'_>,
        dropped: Arc<AtomicU64>,
    ) -> crate::error::Result<GrpcTraceExporter> {
        let signal = Signal::Traces;
        let destination = Destination::from_env(signal, OtlpProtocol::Grpc, env)?;
        let report = FailureReport::new(signal, destination.shown.clone());
        let metadata = metadata(signal, &destination)?;
        let invalid = |message: String| LensError::Exporter {
            signal: signal.as_str(),
            message: format!(
                "{message} (endpoint {} from {})",
                destination.shown, destination.source
            ),
        };
        // tonic spawns the channel's worker on the runtime it is built in.
        let _inside = self.runtime(signal)?.enter();
        let channel = match &destination.tls {
            Some(tls) => crate::export::otlp::grpc_tls::channel(
                &destination.endpoint,
                destination.timeout,
                tls.rustls_config()?,
            )
            .map_err(invalid)?,
            None => tonic::transport::Endpoint::from_shared(destination.endpoint.clone())
                .map_err(|e| invalid(format!("invalid endpoint: {e}")))?
                .timeout(destination.timeout)
                .connect_lazy(),
        };
        let sender = GrpcSender {
            channel,
            metadata,
            gzip: gzip_from_env(env),
            report: report.clone(),
        };
        self.wire_trace_exporter(sender, destination.timeout, report, dropped)
    }
}

impl SendRequest for GrpcSender {
    async fn send(&self, body: Vec<u8>, left: Duration) -> Result<u64, OTelSdkError> {
        let body = Bytes::from(body);
        self.report.request();
        retry::with_retries(left, retry_after, || self.send_once(body.clone()))
            .await
            .map_err(|status| OTelSdkError::InternalFailure(describe(&status)))
    }
}

impl GrpcSender {
    /// One attempt: the spans the collector rejected, or the call's status.
    async fn send_once(&self, body: Bytes) -> std::result::Result<u64, Status> {
        self.report.attempt();
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        if self.gzip {
            grpc = grpc
                .send_compressed(CompressionEncoding::Gzip)
                .accept_compressed(CompressionEncoding::Gzip);
        }
        grpc.ready()
            .await
            .map_err(|e| Status::unavailable(format!("the channel is not ready: {e}")))?;
        let request =
            tonic::Request::from_parts(self.metadata.clone(), tonic::Extensions::new(), body);
        let response = grpc
            .unary(request, PathAndQuery::from_static(EXPORT), EncodedRequest)
            .await?;
        Ok(response.into_inner())
    }
}

/// Whether a failed call may be retried, as the OTLP specification says, and after how long at
/// least (the delay of the collector's `RetryInfo`; zero: backoff alone).
fn retry_after(status: &Status) -> Option<Duration> {
    let asked = status
        .get_details_retry_info()
        .and_then(|info| info.retry_delay);
    match status.code() {
        // Retryable only when the collector says when it can take more.
        Code::ResourceExhausted => asked,
        Code::Unavailable
        | Code::Cancelled
        | Code::DeadlineExceeded
        | Code::Aborted
        | Code::OutOfRange
        | Code::DataLoss => Some(asked.unwrap_or(Duration::ZERO)),
        _ => None,
    }
}

/// A failed call as the failure line shows it: the code, the collector's message (cut) and the
/// transport error underneath.
fn describe(status: &Status) -> String {
    let mut text = format!("gRPC export failed with code {:?}", status.code());
    let message = status.message();
    if !message.is_empty() {
        text.push_str(": ");
        let mut cut = message.len().min(MAX_SHOWN_MESSAGE);
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        text.push_str(&message[..cut]);
    }
    if let Some(source) = std::error::Error::source(status) {
        let cause = chain(source);
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

/// The codec of the export call: the request goes out as it was encoded; the response is read
/// for the spans the collector rejected.
#[derive(Debug, Clone, Copy)]
struct EncodedRequest;

impl Codec for EncodedRequest {
    type Encode = Bytes;
    type Decode = u64;
    type Encoder = EncodedRequest;
    type Decoder = EncodedRequest;

    fn encoder(&mut self) -> Self::Encoder {
        EncodedRequest
    }

    fn decoder(&mut self) -> Self::Decoder {
        EncodedRequest
    }
}

impl Encoder for EncodedRequest {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> std::result::Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for EncodedRequest {
    type Item = u64;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> std::result::Result<Option<u64>, Status> {
        let response = src.copy_to_bytes(src.remaining());
        Ok(Some(rejected_spans(&response)))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::atomic::Ordering;

    use opentelemetry_proto::tonic::collector::trace::v1::{
        ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
    };
    use opentelemetry_sdk::error::OTelSdkResult;
    use parking_lot::Mutex;
    use prost::Message;
    use tonic_types::{ErrorDetails, StatusExt};

    use super::*;
    use crate::export::otlp::wire::export_one_span;

    /// How the stand-in collector answers one call.
    enum Answer {
        Failed(Status),
        /// Success, with this many spans rejected.
        Accepted(i64),
    }

    /// A gRPC collector on loopback (HTTP/2 by h2) answering its calls with `answers` in turn:
    /// its endpoint, the calls whose request decoded to one span, and the runtime serving it.
    fn collector(answers: Vec<Answer>) -> (String, Arc<AtomicU64>, tokio::runtime::Runtime) {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let read = Arc::new(AtomicU64::new(0));
        let answers = Arc::new(Mutex::new(VecDeque::from(answers)));
        let counted = read.clone();
        runtime.spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let (answers, counted) = (answers.clone(), counted.clone());
                tokio::spawn(async move {
                    let mut connection = h2::server::handshake(socket).await.unwrap();
                    while let Some(Ok((request, respond))) = connection.accept().await {
                        let (answers, counted) = (answers.clone(), counted.clone());
                        tokio::spawn(async move {
                            answer(request, respond, &answers, &counted).await;
                        });
                    }
                });
            }
        });
        (endpoint, read, runtime)
    }

    async fn answer(
        request: http::Request<h2::RecvStream>,
        mut respond: h2::server::SendResponse<Bytes>,
        answers: &Mutex<VecDeque<Answer>>,
        read: &AtomicU64,
    ) {
        let path = request.uri().path().to_string();
        let mut body = request.into_body();
        let mut message = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            let _ = body.flow_control().release_capacity(chunk.len());
            message.extend_from_slice(&chunk);
        }
        // One uncompressed message: its flag, its length, the request.
        let spans = ExportTraceServiceRequest::decode(&message[5..])
            .map_or(0, |r| r.resource_spans[0].scope_spans[0].spans.len());
        if path == EXPORT && message[0] == 0 && spans == 1 {
            read.fetch_add(1, Ordering::Relaxed);
        }
        let answer = answers
            .lock()
            .pop_front()
            .expect("no call beyond the answers");
        match answer {
            Answer::Failed(status) => {
                // A trailers-only response.
                respond.send_response(status.into_http(), true).unwrap();
            }
            Answer::Accepted(rejected) => {
                let head = http::Response::builder()
                    .header("content-type", "application/grpc")
                    .body(())
                    .unwrap();
                let mut stream = respond.send_response(head, false).unwrap();
                let response = ExportTraceServiceResponse {
                    partial_success: Some(ExportTracePartialSuccess {
                        rejected_spans: rejected,
                        error_message: String::new(),
                    }),
                }
                .encode_to_vec();
                let mut framed = vec![0];
                framed.extend((response.len() as u32).to_be_bytes());
                framed.extend(response);
                stream.send_data(Bytes::from(framed), false).unwrap();
                let mut trailers = http::HeaderMap::new();
                trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                stream.send_trailers(trailers).unwrap();
            }
        }
    }

    /// Exports one span to `endpoint`: the result, the retries and the spans counted as dropped.
    fn export_one(endpoint: &str) -> (OTelSdkResult, u64, u64) {
        let dropped = Arc::new(AtomicU64::new(0));
        let counted = dropped.clone();
        let (result, retries) = export_one_span(endpoint, |transport, env| {
            transport.grpc_trace_exporter(env, counted)
        });
        (result, retries, dropped.load(Ordering::Relaxed))
    }

    fn retry_info(code: Code, delay: Duration) -> Status {
        Status::with_error_details(code, "busy", ErrorDetails::with_retry_info(Some(delay)))
    }

    #[test]
    fn transient_statuses_are_retried_with_the_shared_policy() {
        let (endpoint, read, _serving) = collector(vec![
            Answer::Failed(Status::unavailable("restarting")),
            Answer::Failed(Status::aborted("conflict")),
            Answer::Failed(retry_info(Code::ResourceExhausted, Duration::from_secs(1))),
            Answer::Accepted(0),
        ]);
        let (result, retries, dropped) = export_one(&endpoint);
        assert!(result.is_ok(), "{result:?}");
        assert_eq!((read.load(Ordering::Relaxed), retries, dropped), (4, 3, 0));
    }

    #[test]
    fn other_failure_statuses_are_not_retried() {
        // RESOURCE_EXHAUSTED is retried only with RetryInfo.
        for (status, shown) in [
            (
                Status::resource_exhausted("full"),
                "ResourceExhausted: full",
            ),
            (
                Status::invalid_argument("bad span"),
                "InvalidArgument: bad span",
            ),
        ] {
            let (endpoint, read, _serving) =
                collector(vec![Answer::Failed(status), Answer::Accepted(0)]);
            let (result, retries, _) = export_one(&endpoint);
            let error = result.unwrap_err().to_string();
            assert!(error.contains(shown), "{error}");
            assert_eq!((read.load(Ordering::Relaxed), retries), (1, 0), "{shown}");
        }
    }

    #[test]
    fn spans_the_collector_rejects_are_counted_as_dropped() {
        let (endpoint, read, _serving) = collector(vec![Answer::Accepted(1)]);
        let (result, retries, dropped) = export_one(&endpoint);
        assert!(result.is_ok(), "{result:?}");
        assert_eq!((read.load(Ordering::Relaxed), retries, dropped), (1, 0, 1));
    }

    #[test]
    fn the_retry_delay_a_collector_asks_for_is_honoured() {
        let asked = Duration::from_secs(3);
        assert_eq!(
            retry_after(&retry_info(Code::Unavailable, asked)),
            Some(asked)
        );
        assert_eq!(
            retry_after(&retry_info(Code::ResourceExhausted, asked)),
            Some(asked)
        );
        assert_eq!(retry_after(&retry_info(Code::Internal, asked)), None);
    }

    #[test]
    fn a_long_status_message_is_cut_on_a_character_boundary() {
        let message = "é".repeat(MAX_SHOWN_MESSAGE);
        let shown = describe(&Status::internal(message));
        assert!(shown.len() < MAX_SHOWN_MESSAGE + 64, "{}", shown.len());
        assert!(shown.ends_with('é'));
    }
}
