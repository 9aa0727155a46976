//! The HTTP/protobuf transport of nemo-lens's span exporter ([`WireTraceExporter`]): each
//! request sent with nemo-lens's HTTP client ([`LensHttpClient`]).
//!
//! What goes over the wire is what opentelemetry-otlp's HTTP exporter sends: a `POST` of
//! `application/x-protobuf` to the traces endpoint with the configured headers, gzip when
//! `OTEL_EXPORTER_OTLP_TRACES_COMPRESSION` (or `OTEL_EXPORTER_OTLP_COMPRESSION`) says so; a
//! failure that the OTLP specification calls transient (no response, 429, 502, 503, 504) is
//! retried (`Retry-After` honoured).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use opentelemetry_http::{Bytes, HttpClient, Request};
use opentelemetry_sdk::error::OTelSdkError;

use crate::config::env::Env;
use crate::error::Result;
use crate::export::otlp::endpoint::Destination;
use crate::export::otlp::http_client::LensHttpClient;
use crate::export::otlp::report::FailureReport;
use crate::export::otlp::retry;
use crate::export::otlp::transport::Transport;
use crate::export::otlp::wire::{SendRequest, WireTraceExporter, gzip_from_env, rejected_spans};
use crate::export::otlp::{OtlpProtocol, Signal};

/// The HTTP/protobuf span exporter.
pub(crate) type HttpTraceExporter = WireTraceExporter<HttpSender>;

/// Sends requests to the traces endpoint over HTTP (see the module docs).
pub(crate) struct HttpSender {
    client: LensHttpClient,
    endpoint: http::Uri,
    /// The endpoint as messages show it (credentials redacted).
    shown: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    gzip: bool,
    report: Arc<FailureReport>,
}

impl std::fmt::Debug for HttpSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSender")
            .field("endpoint", &self.shown)
            .field("gzip", &self.gzip)
            .finish_non_exhaustive()
    }
}

impl Transport {
    /// The HTTP/protobuf span exporter of nemo-lens; spans too large to send are added to
    /// `dropped`.
    pub(crate) fn http_trace_exporter(
        &mut self,
        env: Env<'_>,
        dropped: Arc<AtomicU64>,
    ) -> Result<HttpTraceExporter> {
        let signal = Signal::Traces;
        let destination = Destination::from_env(signal, OtlpProtocol::HttpProtobuf, env)?;
        let report = FailureReport::new(signal, destination.shown.clone());
        let endpoint = destination.endpoint.parse::<http::Uri>().map_err(|e| {
            crate::error::LensError::Exporter {
                signal: signal.as_str(),
                message: format!(
                    "invalid URI {} (endpoint from {}): {e}",
                    destination.shown, destination.source
                ),
            }
        })?;
        // As opentelemetry-otlp: a header that HTTP cannot carry is left out.
        let headers = destination
            .headers
            .0
            .iter()
            .filter_map(|(k, v)| {
                Some((
                    HeaderName::from_bytes(k.as_bytes()).ok()?,
                    HeaderValue::from_str(v).ok()?,
                ))
            })
            .collect();
        let client = self.http_client(signal, &destination, report.clone())?;
        let sender = HttpSender {
            client,
            endpoint,
            shown: destination.shown.clone(),
            headers,
            gzip: gzip_from_env(env),
            report: report.clone(),
        };
        self.wire_trace_exporter(sender, destination.timeout, report, dropped)
    }
}

/// Why one request failed, and whether it may be retried (and after how long at least, as
/// [`retry::with_retries`] reads it).
struct Failure {
    message: String,
    retry: Option<Duration>,
}

impl SendRequest for HttpSender {
    async fn send(&self, body: Vec<u8>, left: Duration) -> std::result::Result<u64, OTelSdkError> {
        let body = if self.gzip {
            gzip(&body).map_err(|e| OTelSdkError::InternalFailure(format!("gzip: {e}")))?
        } else {
            body
        };
        let body = Bytes::from(body);
        self.report.request();
        retry::with_retries(
            left,
            |failure: &Failure| failure.retry,
            || self.send_once(body.clone()),
        )
        .await
        .map_err(|failure| OTelSdkError::InternalFailure(failure.message))
    }
}

impl HttpSender {
    /// One attempt: the spans the collector rejected, or why it failed.
    async fn send_once(&self, body: Bytes) -> std::result::Result<u64, Failure> {
        let mut request = Request::post(self.endpoint.clone())
            .header(http::header::CONTENT_TYPE, "application/x-protobuf")
            .body(body)
            .map_err(|e| Failure {
                message: format!("failed to build the HTTP request: {e}"),
                retry: None,
            })?;
        if self.gzip {
            request.headers_mut().insert(
                http::header::CONTENT_ENCODING,
                HeaderValue::from_static("gzip"),
            );
        }
        for (k, v) in &self.headers {
            request.headers_mut().insert(k.clone(), v.clone());
        }
        let response = self.client.send_bytes(request).await.map_err(|_| Failure {
            // The cause went to the failure report already.
            message: "HTTP export failed: network error".into(),
            retry: Some(Duration::ZERO),
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(rejected_spans(response.body()));
        }
        let retry = retry::http_retry_after(status, response.headers());
        Err(Failure {
            message: format!(
                "HTTP export failed. Url: {}, Status: {}, Response: {:?}",
                self.shown,
                status.as_u16(),
                String::from_utf8_lossy(&response.body()[..response.body().len().min(1024)])
            ),
            retry,
        })
    }
}

fn gzip(body: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(body)?;
    encoder.finish()
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::sync::atomic::Ordering;

    use opentelemetry_sdk::error::OTelSdkResult;

    use super::*;
    use crate::export::otlp::wire::export_one_span;

    /// A collector on loopback answering its requests with `answers` (status line and headers)
    /// in turn, a connection each; returns the traces endpoint and the count of requests read.
    fn collector(answers: Vec<&'static str>) -> (String, Arc<AtomicU64>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
        let read = Arc::new(AtomicU64::new(0));
        let counted = read.clone();
        std::thread::spawn(move || {
            for answer in answers {
                let (conn, _) = listener.accept().unwrap();
                let mut conn = BufReader::new(conn);
                let mut length = 0;
                let mut line = String::new();
                while conn.read_line(&mut line).unwrap() > 0 && line != "\r\n" {
                    let lower = line.to_ascii_lowercase();
                    if let Some(v) = lower.strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap();
                    }
                    line.clear();
                }
                conn.read_exact(&mut vec![0; length]).unwrap();
                counted.fetch_add(1, Ordering::Relaxed);
                let reply =
                    format!("HTTP/1.1 {answer}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                conn.get_mut().write_all(reply.as_bytes()).unwrap();
            }
        });
        (url, read)
    }

    fn export_one(endpoint: &str) -> (OTelSdkResult, u64) {
        export_one_span(endpoint, |transport, env| {
            transport.http_trace_exporter(env, Arc::default())
        })
    }

    #[test]
    fn transient_statuses_are_retried_with_the_shared_policy() {
        let (endpoint, read) = collector(vec![
            "503 Service Unavailable\r\nretry-after: 0",
            "502 Bad Gateway",
            "429 Too Many Requests\r\nretry-after: 1",
            "200 OK",
        ]);
        let (result, retries) = export_one(&endpoint);
        assert!(result.is_ok(), "{result:?}");
        assert_eq!((read.load(Ordering::Relaxed), retries), (4, 3));
    }

    #[test]
    fn another_failure_status_is_not_retried() {
        let (endpoint, read) = collector(vec!["400 Bad Request", "200 OK"]);
        let (result, retries) = export_one(&endpoint);
        let error = result.unwrap_err().to_string();
        assert!(error.contains("Status: 400"), "{error}");
        assert_eq!((read.load(Ordering::Relaxed), retries), (1, 0));
    }
}
