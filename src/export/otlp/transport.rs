//! The transports of the OTLP exporters: the private gRPC runtime and the builders of each
//! signal's exporter (gRPC through tonic, HTTP through nemo-lens's own hyper client), each
//! wrapped so that its failures are reported.

#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
use opentelemetry_otlp::WithExportConfig;

use crate::config::env::Env;
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
use crate::error::LensError;
use crate::error::Result;
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
use crate::export::otlp::endpoint::{Destination, redact_urls_in};
#[cfg(feature = "otlp-http")]
use crate::export::otlp::http_client::LensHttpClient;
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
use crate::export::otlp::report::{FailureReport, Reported};
use crate::export::otlp::{OtlpProtocol, Signal, check_compiled};

/// The exporters' transports: the one private runtime of this process's exporters (built by
/// the first signal that exports over OTLP: tonic's channels and the HTTP client's requests run
/// there), and the builders of each signal's OTLP exporter.
#[derive(Default)]
pub(crate) struct Transport {
    #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
    runtime: Option<tokio::runtime::Runtime>,
    /// The longest export timeout of an exporter polled on the runtime: an export a shutdown
    /// gave up on may still run that long (a periodic metric reader's, say), and a runtime
    /// stopped under it would make Tokio's timers panic on that thread.
    #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
    pub(super) longest_timeout: std::time::Duration,
}

/// The OTLP span exporter (an uninhabited stand-in without an OTLP feature).
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
pub(crate) type OtlpSpanExporter = Reported<opentelemetry_otlp::SpanExporter>;
/// The OTLP metric exporter.
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
pub(crate) type OtlpMetricExporter = Reported<opentelemetry_otlp::MetricExporter>;
/// The OTLP log exporter.
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
pub(crate) type OtlpLogExporter = Reported<opentelemetry_otlp::LogExporter>;
#[cfg(not(any(feature = "otlp-grpc", feature = "otlp-http")))]
pub(crate) type OtlpSpanExporter = unavailable::Unavailable;
#[cfg(not(any(feature = "otlp-grpc", feature = "otlp-http")))]
pub(crate) type OtlpMetricExporter = unavailable::Unavailable;
#[cfg(not(any(feature = "otlp-grpc", feature = "otlp-http")))]
pub(crate) type OtlpLogExporter = unavailable::Unavailable;

impl Transport {
    /// The private runtime, built on first use: one worker thread, I/O and timers enabled.
    #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
    pub(super) fn runtime(&mut self, signal: Signal) -> Result<&tokio::runtime::Runtime> {
        if self.runtime.is_none() {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("nemo-lens-otlp")
                .enable_all()
                .build()
                .map_err(|e| LensError::Exporter {
                    signal: signal.as_str(),
                    message: format!("cannot start the exporters' runtime: {e}"),
                })?;
            self.runtime = Some(runtime);
        }
        Ok(self.runtime.as_ref().expect("built above"))
    }

    /// Stops the runtime without waiting for its worker (never blocks the caller nor a runtime
    /// thread): on a thread of its own, once an export still in flight has reached its timeout.
    pub(crate) fn shutdown_background(&mut self) {
        #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
        if let Some(rt) = self.runtime.take() {
            let grace = self.longest_timeout + std::time::Duration::from_millis(500);
            let stop = move || {
                std::thread::sleep(grace);
                rt.shutdown_background();
            };
            // Without a thread (none left to spawn), the closure drops the runtime here.
            if let Err(e) = std::thread::Builder::new()
                .name("nemo-lens-otlp-stop".into())
                .spawn(stop)
            {
                eprintln!("nemo-lens: the exporters' runtime is stopped now ({e})");
            }
        }
    }

    /// Leaks the runtime: in a forked child its worker thread does not exist, and stopping it
    /// would wait for it.
    pub(crate) fn forget(&mut self) {
        #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
        std::mem::forget(self.runtime.take());
    }
}

/// Builds one signal's OTLP exporter, wrapped so its failures are reported and each export is
/// bounded by the timeout ([`Reported`]): gRPC inside the private runtime (tonic spawns its
/// channel worker there), HTTP with nemo-lens's own client, whose requests run on the same
/// runtime; both retry transient failures with nemo-lens's policy and count every attempt
/// (`retry.rs`). Endpoint, timeout, headers and TLS come from [`Destination`]; compression and
/// temporality from the exporters' own variables.
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
macro_rules! build_exporter {
    ($self:ident, $builder:path, $signal:expr, $protocol:expr, $env:expr) => {{
        let protocol: OtlpProtocol = $protocol;
        let signal: Signal = $signal;
        let destination = Destination::from_env(signal, protocol, $env)?;
        let report = FailureReport::new(signal, destination.shown.clone());
        let endpoint = destination.endpoint.clone();
        let err = |e: opentelemetry_otlp::ExporterBuildError| LensError::Exporter {
            signal: signal.as_str(),
            message: format!(
                "{} (endpoint from {})",
                redact_urls_in(&e.to_string().replace(&endpoint, &destination.shown)),
                destination.source
            ),
        };
        let built = match protocol {
            #[cfg(feature = "otlp-grpc")]
            OtlpProtocol::Grpc => {
                use opentelemetry_otlp::WithTonicConfig;
                let _guard = $self.runtime(signal)?.enter();
                let counted = report.clone();
                let mut builder = <$builder>::builder()
                    .with_tonic()
                    .with_protocol(protocol.sdk())
                    .with_endpoint(destination.endpoint.clone())
                    .with_timeout(destination.timeout)
                    .with_retry_policy(crate::export::otlp::retry::policy())
                    .with_interceptor(move |request: tonic::Request<()>| {
                        // Called once per request: the attempts, retries included.
                        counted.attempt();
                        Ok(request)
                    })
                    .with_metadata(metadata(signal, &destination)?);
                if let Some(tls) = &destination.tls {
                    let channel = crate::export::otlp::grpc_tls::channel(
                        &destination.endpoint,
                        destination.timeout,
                        tls.rustls_config()?,
                    )
                    .map_err(|message| LensError::Exporter {
                        signal: signal.as_str(),
                        message: format!(
                            "{} (endpoint {} from {})",
                            message, destination.shown, destination.source
                        ),
                    })?;
                    builder = builder.with_channel(channel);
                }
                builder.build().map_err(err)
            }
            #[cfg(feature = "otlp-http")]
            OtlpProtocol::HttpProtobuf | OtlpProtocol::HttpJson => {
                use opentelemetry_otlp::WithHttpConfig;
                let client = $self.http_client(signal, &destination, report.clone())?;
                <$builder>::builder()
                    .with_http()
                    .with_protocol(protocol.sdk())
                    .with_endpoint(destination.endpoint.clone())
                    .with_timeout(destination.timeout)
                    .with_headers(destination.headers.0.iter().cloned().collect())
                    .with_http_client(client)
                    .with_retry_policy(crate::export::otlp::retry::policy())
                    .build()
                    .map_err(err)
            }
            #[allow(unreachable_patterns)]
            _ => Err(
                check_compiled(protocol, signal, "OTEL_EXPORTER_OTLP_PROTOCOL")
                    .expect_err("a compiled protocol is matched above"),
            ),
        };
        let runtime = $self.runtime(signal)?.handle().clone();
        $self.longest_timeout = $self.longest_timeout.max(destination.timeout);
        built.map(|exporter| Reported::new(exporter, report, runtime, destination.timeout))
    }};
}

/// The gRPC metadata of `destination`'s headers; a header gRPC cannot carry is an error naming
/// the variable (its value is never shown).
#[cfg(feature = "otlp-grpc")]
pub(crate) fn metadata(
    signal: Signal,
    destination: &Destination,
) -> Result<opentelemetry_otlp::tonic_types::metadata::MetadataMap> {
    let mut headers = http::HeaderMap::new();
    for (k, v) in &destination.headers.0 {
        let bad = || LensError::Exporter {
            signal: signal.as_str(),
            message: format!(
                "header '{}' of OTEL_EXPORTER_OTLP_HEADERS (or OTEL_EXPORTER_OTLP_{}_HEADERS) is not a valid gRPC metadata entry",
                crate::config::env::shown(k),
                signal.upper()
            ),
        };
        let name =
            http::HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes()).map_err(|_| bad())?;
        let value = http::HeaderValue::from_str(v).map_err(|_| bad())?;
        headers.append(name, value);
    }
    Ok(opentelemetry_otlp::tonic_types::metadata::MetadataMap::from_headers(headers))
}

#[cfg(feature = "otlp-http")]
impl Transport {
    /// The HTTP transport's client ([`LensHttpClient`]): nemo-lens's rustls configuration (the
    /// certificates of `destination`, or the system roots; the *ring* provider, given
    /// explicitly) for an `https://` endpoint, the exporter's timeout, requests on the private
    /// runtime, the cause of each failed request reported.
    pub(super) fn http_client(
        &mut self,
        signal: Signal,
        destination: &Destination,
        report: std::sync::Arc<FailureReport>,
    ) -> Result<LensHttpClient> {
        let tls = match &destination.tls {
            Some(files) => Some(files.rustls_config()?),
            None => None,
        };
        let runtime = self.runtime(signal)?.handle().clone();
        Ok(LensHttpClient::new(
            runtime,
            destination.timeout,
            tls,
            report,
        ))
    }
}

#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
impl Transport {
    /// The OTLP span exporter for `protocol`.
    pub(crate) fn span_exporter(
        &mut self,
        protocol: OtlpProtocol,
        env: Env<'_>,
    ) -> Result<OtlpSpanExporter> {
        build_exporter!(
            self,
            opentelemetry_otlp::SpanExporter,
            Signal::Traces,
            protocol,
            env
        )
    }

    /// The OTLP log exporter for `protocol`.
    pub(crate) fn log_exporter(
        &mut self,
        protocol: OtlpProtocol,
        env: Env<'_>,
    ) -> Result<OtlpLogExporter> {
        build_exporter!(
            self,
            opentelemetry_otlp::LogExporter,
            Signal::Logs,
            protocol,
            env
        )
    }

    /// The OTLP metric exporter for `protocol` (cumulative temporality unless
    /// `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE` says otherwise). Over gRPC the
    /// runtime's worker drives the channel while the periodic reader's own thread blocks on each
    /// export, so no application Tokio runtime is needed.
    pub(crate) fn metric_exporter(
        &mut self,
        protocol: OtlpProtocol,
        env: Env<'_>,
    ) -> Result<OtlpMetricExporter> {
        build_exporter!(
            self,
            opentelemetry_otlp::MetricExporter,
            Signal::Metrics,
            protocol,
            env
        )
    }
}

#[cfg(not(any(feature = "otlp-grpc", feature = "otlp-http")))]
impl Transport {
    /// Without an OTLP feature no protocol passes [`protocol_for`], so this is never reached.
    pub(crate) fn span_exporter(
        &mut self,
        protocol: OtlpProtocol,
        _env: Env<'_>,
    ) -> Result<OtlpSpanExporter> {
        Err(check_compiled(protocol, Signal::Traces, "OTEL_EXPORTER_OTLP_PROTOCOL").unwrap_err())
    }

    /// See [`Transport::span_exporter`].
    pub(crate) fn log_exporter(
        &mut self,
        protocol: OtlpProtocol,
        _env: Env<'_>,
    ) -> Result<OtlpLogExporter> {
        Err(check_compiled(protocol, Signal::Logs, "OTEL_EXPORTER_OTLP_PROTOCOL").unwrap_err())
    }

    /// See [`Transport::span_exporter`].
    pub(crate) fn metric_exporter(
        &mut self,
        protocol: OtlpProtocol,
        _env: Env<'_>,
    ) -> Result<OtlpMetricExporter> {
        Err(check_compiled(protocol, Signal::Metrics, "OTEL_EXPORTER_OTLP_PROTOCOL").unwrap_err())
    }
}

/// The exporter type of a build without OTLP: uninhabited, so never built nor called.
#[cfg(not(any(feature = "otlp-grpc", feature = "otlp-http")))]
mod unavailable {
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::logs::{LogBatch, LogExporter};
    use opentelemetry_sdk::metrics::Temporality;
    use opentelemetry_sdk::metrics::data::ResourceMetrics;
    use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
    use opentelemetry_sdk::trace::{SpanData, SpanExporter};
    use std::time::Duration;

    /// No value of this type exists.
    #[derive(Debug)]
    pub(crate) enum Unavailable {}

    impl SpanExporter for Unavailable {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            match *self {}
        }
    }

    impl LogExporter for Unavailable {
        async fn export(&self, _batch: LogBatch<'_>) -> OTelSdkResult {
            match *self {}
        }
    }

    impl PushMetricExporter for Unavailable {
        async fn export(&self, _metrics: &ResourceMetrics) -> OTelSdkResult {
            match *self {}
        }
        fn force_flush(&self) -> OTelSdkResult {
            match *self {}
        }
        fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
            match *self {}
        }
        fn temporality(&self) -> Temporality {
            match *self {}
        }
    }
}
