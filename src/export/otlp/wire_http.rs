//! The OTLP HTTP/protobuf span exporter of nemo-lens: requests written by [`TraceEncoder`]
//! straight from the export worker's batch, sent with nemo-lens's HTTP client
//! ([`LensHttpClient`]).
//!
//! What goes over the wire is what opentelemetry-otlp's HTTP exporter sends: a `POST` of
//! `application/x-protobuf` to the traces endpoint with the configured headers, gzip when
//! `OTEL_EXPORTER_OTLP_TRACES_COMPRESSION` (or `OTEL_EXPORTER_OTLP_COMPRESSION`) says so; a
//! failure that the OTLP specification calls transient (no response, 429, 502, 503, 504) is
//! retried with opentelemetry-otlp's default policy (3 retries, 100 ms doubling to 1.6 s,
//! `Retry-After` honoured) within the export timeout. A batch over the collector's message
//! limit is split; a span too large alone is left out and counted as dropped; a failed request
//! fails the batch (counted as dropped as a whole). Failures are reported as the other OTLP
//! exporters' are ([`FailureReport`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http::{HeaderName, HeaderValue};
use opentelemetry_http::{Bytes, HttpClient, Request};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use parking_lot::Mutex;

use crate::config::env::Env;
use crate::error::Result;
use crate::export::otlp::endpoint::Destination;
use crate::export::otlp::http_client::LensHttpClient;
use crate::export::otlp::report::FailureReport;
use crate::export::otlp::trace_request::{ReadyBatch, ReadyExport, ReadySpan, TraceEncoder};
use crate::export::otlp::transport::Transport;
use crate::export::otlp::{OtlpProtocol, Signal};

/// Retries of a transient failure, as opentelemetry-otlp's recommended policy.
const MAX_RETRIES: u32 = 3;
const FIRST_DELAY: Duration = Duration::from_millis(100);
const MAX_DELAY: Duration = Duration::from_millis(1600);
/// The longest `Retry-After` honoured.
const MAX_THROTTLE: Duration = Duration::from_secs(30);

/// The HTTP/protobuf span exporter (see the module docs).
pub(crate) struct HttpTraceExporter {
    client: LensHttpClient,
    endpoint: http::Uri,
    /// The endpoint as messages show it (credentials redacted).
    shown: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    gzip: bool,
    timeout: Duration,
    encoder: Mutex<TraceEncoder>,
    /// Spans too large for any request.
    dropped: Arc<AtomicU64>,
    report: Arc<FailureReport>,
}

impl std::fmt::Debug for HttpTraceExporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTraceExporter")
            .field("endpoint", &self.shown)
            .field("gzip", &self.gzip)
            .finish_non_exhaustive()
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
        self.longest_timeout = self.longest_timeout.max(destination.timeout);
        Ok(HttpTraceExporter {
            client,
            endpoint,
            shown: destination.shown.clone(),
            headers,
            gzip: gzip_from_env(env),
            timeout: destination.timeout,
            encoder: Mutex::new(TraceEncoder::default()),
            dropped,
            report,
        })
    }
}

/// Why one request failed, and whether it may be retried (and after how long at least).
struct Failure {
    message: String,
    retry: Option<Duration>,
}

impl HttpTraceExporter {
    /// Writes `batch` as requests and sends them, one after the other.
    pub(crate) async fn export_batch(&self, batch: ReadyBatch) -> OTelSdkResult {
        let requests = self.encoder.lock().encode(batch);
        let mut result = Ok(());
        for body in requests.bodies {
            if let Err(e) = self.send(body).await {
                // A failed request fails the batch: the worker counts all of it.
                result = Err(e);
                break;
            }
        }
        self.report.observe(&result);
        if result.is_ok() {
            self.dropped
                .fetch_add(requests.oversized, Ordering::Relaxed);
        }
        result
    }

    /// Sends one request body, retrying a transient failure within the export timeout.
    async fn send(&self, body: Vec<u8>) -> OTelSdkResult {
        let body = if self.gzip {
            gzip(&body).map_err(|e| OTelSdkError::InternalFailure(format!("gzip: {e}")))?
        } else {
            body
        };
        let body = Bytes::from(body);
        let start = Instant::now();
        let mut delay = FIRST_DELAY;
        let mut cap = MAX_DELAY;
        let mut attempt = 0;
        loop {
            let failure = match self.send_once(body.clone()).await {
                Ok(()) => return Ok(()),
                Err(failure) => failure,
            };
            let error = || OTelSdkError::InternalFailure(failure.message.clone());
            let Some(server_delay) = failure.retry else {
                return Err(error());
            };
            if attempt >= MAX_RETRIES {
                return Err(error());
            }
            attempt += 1;
            let server_delay = server_delay.min(MAX_THROTTLE);
            if server_delay > cap {
                cap = MAX_THROTTLE;
            }
            delay = delay.max(server_delay);
            let sleep = (delay + jitter()).min(cap);
            if sleep >= self.timeout.saturating_sub(start.elapsed()) {
                return Err(error());
            }
            // On the export helper thread, which waits for this export alone (the worker's
            // deadline holds whatever it does).
            std::thread::sleep(sleep);
            delay = (delay * 2).min(cap);
        }
    }

    async fn send_once(&self, body: Bytes) -> std::result::Result<(), Failure> {
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
            return Ok(());
        }
        let retry = match status.as_u16() {
            429 | 503 => Some(
                response
                    .headers()
                    .get(http::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map_or(Duration::ZERO, Duration::from_secs),
            ),
            502 | 504 => Some(Duration::ZERO),
            _ => None,
        };
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

/// Up to 100 ms, from the clock (as opentelemetry-otlp's jitter).
fn jitter() -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    Duration::from_millis(u64::from(nanos.wrapping_mul(2_654_435_761) % 101))
}

fn gzip(body: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(body)?;
    encoder.finish()
}

impl ReadyExport for HttpTraceExporter {
    fn export_ready(
        &self,
        batch: ReadyBatch,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        self.export_batch(batch)
    }
}

impl SpanExporter for HttpTraceExporter {
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
