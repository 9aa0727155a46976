//! OTLP export: protocol selection per signal and the private runtime gRPC needs.
//!
//! The protocol of each signal is `OTEL_EXPORTER_OTLP_<TRACES|METRICS|LOGS>_PROTOCOL`, else
//! `OTEL_EXPORTER_OTLP_PROTOCOL`, else `grpc`, as in the Python library. Endpoint, headers,
//! timeout and compression come from the standard `OTEL_EXPORTER_OTLP_*` variables, which the
//! exporters read themselves. An unknown protocol is an error naming the variable.
//!
//! gRPC (tonic) needs a Tokio runtime while the exporter is built and for as long as it exports.
//! nemo-lens owns a private one-worker runtime for that, whether or not the application runs
//! Tokio, and shuts it down (in the background, never blocking a runtime thread) after the
//! providers.

use std::fmt;
use std::str::FromStr;

use opentelemetry_otlp::{Protocol, WithExportConfig};

use crate::error::{LensError, Result};

/// An OTLP wire protocol.
///
/// ```
/// use nemo_lens::export::otlp::OtlpProtocol;
/// assert_eq!("http/protobuf".parse::<OtlpProtocol>().unwrap(), OtlpProtocol::HttpProtobuf);
/// assert!("thrift".parse::<OtlpProtocol>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// `grpc` (the default).
    Grpc,
    /// `http/protobuf`.
    HttpProtobuf,
    /// `http/json`.
    HttpJson,
}

impl OtlpProtocol {
    /// The accepted spellings, for error messages.
    pub const ACCEPTED: &'static str = "'grpc', 'http/protobuf', 'http/json'";

    fn sdk(self) -> Protocol {
        match self {
            OtlpProtocol::Grpc => Protocol::Grpc,
            OtlpProtocol::HttpProtobuf => Protocol::HttpBinary,
            OtlpProtocol::HttpJson => Protocol::HttpJson,
        }
    }
}

impl fmt::Display for OtlpProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OtlpProtocol::Grpc => "grpc",
            OtlpProtocol::HttpProtobuf => "http/protobuf",
            OtlpProtocol::HttpJson => "http/json",
        })
    }
}

impl FromStr for OtlpProtocol {
    type Err = LensError;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "grpc" => Ok(OtlpProtocol::Grpc),
            "http/protobuf" => Ok(OtlpProtocol::HttpProtobuf),
            "http/json" => Ok(OtlpProtocol::HttpJson),
            _ => Err(LensError::InvalidArgument(format!(
                "unknown OTLP protocol '{s}'. Expected one of: {}",
                Self::ACCEPTED
            ))),
        }
    }
}

/// A telemetry signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// Spans.
    Traces,
    /// Metrics.
    Metrics,
    /// Log records.
    Logs,
}

impl Signal {
    fn upper(self) -> &'static str {
        match self {
            Signal::Traces => "TRACES",
            Signal::Metrics => "METRICS",
            Signal::Logs => "LOGS",
        }
    }
}

/// Resolves the protocol of `signal` from the environment (through `lookup`).
///
/// ```
/// use nemo_lens::export::otlp::{protocol_for, OtlpProtocol, Signal};
/// let env = |k: &str| (k == "OTEL_EXPORTER_OTLP_PROTOCOL").then(|| "http/json".to_string());
/// assert_eq!(protocol_for(Signal::Traces, &env).unwrap(), OtlpProtocol::HttpJson);
/// let bad = |k: &str| (k == "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").then(|| "udp".to_string());
/// let err = protocol_for(Signal::Traces, &bad).unwrap_err().to_string();
/// assert!(err.contains("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") && err.contains("http/protobuf"));
/// assert_eq!(protocol_for(Signal::Logs, &|_| None).unwrap(), OtlpProtocol::Grpc);
/// ```
pub fn protocol_for(
    signal: Signal,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<OtlpProtocol> {
    let specific = format!("OTEL_EXPORTER_OTLP_{}_PROTOCOL", signal.upper());
    for var in [specific.as_str(), "OTEL_EXPORTER_OTLP_PROTOCOL"] {
        if let Some(v) = lookup(var).filter(|v| !v.trim().is_empty()) {
            return v.parse().map_err(|_| {
                LensError::InvalidArgument(format!(
                    "Invalid value for {var}: '{v}'. Expected one of: {}",
                    OtlpProtocol::ACCEPTED
                ))
            });
        }
    }
    Ok(OtlpProtocol::Grpc)
}

/// Builds a Tokio runtime for gRPC exporters: one worker thread, I/O and timers enabled.
pub(crate) fn grpc_runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("nemo-lens-grpc")
        .enable_all()
        .build()
        .map_err(|e| LensError::Exporter {
            signal: "traces",
            message: format!("cannot start the gRPC runtime: {e}"),
        })
}

/// Builds one signal's OTLP exporter: gRPC inside `runtime` (tonic spawns its channel worker
/// there), HTTP with the blocking client (no runtime needed). Endpoint, headers, timeout and
/// compression come from the `OTEL_EXPORTER_OTLP_*` variables, read by the exporter builders.
macro_rules! build_exporter {
    ($builder:path, $signal:literal, $protocol:expr, $runtime:expr) => {{
        let protocol: OtlpProtocol = $protocol;
        let err = |e: opentelemetry_otlp::ExporterBuildError| LensError::Exporter {
            signal: $signal,
            message: e.to_string(),
        };
        match protocol {
            OtlpProtocol::Grpc => {
                let rt = $runtime.ok_or_else(|| LensError::Exporter {
                    signal: $signal,
                    message: "gRPC needs the private runtime".into(),
                })?;
                let _guard = rt.enter();
                <$builder>::builder()
                    .with_tonic()
                    .with_protocol(protocol.sdk())
                    .build()
                    .map_err(err)
            }
            OtlpProtocol::HttpProtobuf | OtlpProtocol::HttpJson => <$builder>::builder()
                .with_http()
                .with_protocol(protocol.sdk())
                .build()
                .map_err(err),
        }
    }};
}

/// Builds the OTLP span exporter for `protocol`; gRPC is built inside `runtime`.
pub(crate) fn span_exporter(
    protocol: OtlpProtocol,
    runtime: Option<&tokio::runtime::Runtime>,
) -> Result<opentelemetry_otlp::SpanExporter> {
    build_exporter!(
        opentelemetry_otlp::SpanExporter,
        "traces",
        protocol,
        runtime
    )
}

/// Builds the OTLP log exporter for `protocol`; gRPC is built inside `runtime`.
pub(crate) fn log_exporter(
    protocol: OtlpProtocol,
    runtime: Option<&tokio::runtime::Runtime>,
) -> Result<opentelemetry_otlp::LogExporter> {
    build_exporter!(opentelemetry_otlp::LogExporter, "logs", protocol, runtime)
}

/// Builds the OTLP metric exporter for `protocol` (cumulative temporality unless
/// `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE` says otherwise); gRPC is built inside
/// `runtime`, whose worker then drives the channel while the periodic reader's own thread
/// blocks on each export, so no application Tokio runtime is needed.
pub(crate) fn metric_exporter(
    protocol: OtlpProtocol,
    runtime: Option<&tokio::runtime::Runtime>,
) -> Result<opentelemetry_otlp::MetricExporter> {
    let err = |e: opentelemetry_otlp::ExporterBuildError| LensError::Exporter {
        signal: "metrics",
        message: e.to_string(),
    };
    match protocol {
        OtlpProtocol::Grpc => {
            let rt = runtime.ok_or_else(|| LensError::Exporter {
                signal: "metrics",
                message: "gRPC needs the private runtime".into(),
            })?;
            let _guard = rt.enter();
            opentelemetry_otlp::MetricExporter::builder()
                .with_tonic()
                .with_protocol(protocol.sdk())
                .build()
                .map_err(err)
        }
        OtlpProtocol::HttpProtobuf | OtlpProtocol::HttpJson => {
            opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_protocol(protocol.sdk())
                .build()
                .map_err(err)
        }
    }
}
