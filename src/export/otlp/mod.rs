//! OTLP export: protocol selection per signal and the private runtime gRPC needs.
//!
//! The protocol of each signal is `OTEL_EXPORTER_OTLP_<TRACES|METRICS|LOGS>_PROTOCOL`, else
//! `OTEL_EXPORTER_OTLP_PROTOCOL`, else `grpc`, as in the Python library. An unknown protocol is
//! an error naming the variable. Endpoint, insecure flag, headers, timeout and certificates are
//! read by nemo-lens (`endpoint.rs`, `tls.rs`: a blank value is unset) and handed to the
//! exporter builders; compression and temporality are read by the exporters themselves. Each
//! exporter is wrapped so that a failure streak writes one stderr line naming the endpoint and
//! the cause (`report.rs`). Transient failures are retried within the export timeout, which
//! bounds each export as a whole (`retry.rs`).
//!
//! Spans over gRPC and HTTP/protobuf (batched) take nemo-lens's own exporter (`wire.rs`, over
//! `wire_grpc.rs` or `wire_http.rs`): the requests are written straight from the batch
//! worker's records (`trace_request.rs`, `protobuf.rs`), and it reads the trace compression
//! variables itself.
//!
//! gRPC (tonic) needs a Tokio runtime while the exporter is built and for as long as it exports,
//! and the HTTP client's requests run on one. nemo-lens owns a private one-worker runtime for
//! that ([`Transport`](transport::Transport), built on first use by the first OTLP signal and
//! shared by the others), whether or not the application runs Tokio, and shuts it down (in the
//! background, never blocking a runtime thread) after the providers.
//!
//! Each transport is a cargo feature: `otlp-grpc` (tonic) and `otlp-http` (a hyper client of
//! nemo-lens's own, `http_client.rs`), both on by default. A protocol whose feature is off is a setup error on
//! the exporting rank that names the variable and the feature.

#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
pub(crate) mod endpoint;
#[cfg(feature = "otlp-grpc")]
mod grpc_tls;
#[cfg(feature = "otlp-http")]
mod http_client;
// The encoder is the queue's too (its batch type); only the OTLP exporters write.
#[cfg_attr(
    not(any(feature = "otlp-grpc", feature = "otlp-http")),
    allow(dead_code)
)]
mod protobuf;
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
mod report;
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
mod retry;
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
pub(crate) mod tls;
#[cfg_attr(
    not(any(feature = "otlp-grpc", feature = "otlp-http")),
    allow(dead_code)
)]
pub(crate) mod trace_request;
pub(crate) mod transport;
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
mod wire;
#[cfg(all(fuzzing, any(feature = "otlp-grpc", feature = "otlp-http")))]
pub(crate) use wire::rejected_spans;
#[cfg(feature = "otlp-grpc")]
pub(crate) mod wire_grpc;
#[cfg(feature = "otlp-http")]
pub(crate) mod wire_http;

use std::fmt;
use std::str::FromStr;

#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
use opentelemetry_otlp::Protocol;

use crate::config::env::{Env, invalid};
use crate::error::{LensError, Result};
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
use crate::export::otlp::endpoint::Destination;

/// An OTLP wire protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OtlpProtocol {
    /// `grpc` (the default).
    Grpc,
    /// `http/protobuf`.
    HttpProtobuf,
    /// `http/json`.
    HttpJson,
}

impl OtlpProtocol {
    /// The accepted spellings, for error messages.
    pub(crate) const ACCEPTED: &'static str = "'grpc', 'http/protobuf', 'http/json'";

    #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
    fn sdk(self) -> Protocol {
        match self {
            #[cfg(feature = "otlp-grpc")]
            OtlpProtocol::Grpc => Protocol::Grpc,
            #[cfg(feature = "otlp-http")]
            OtlpProtocol::HttpProtobuf => Protocol::HttpBinary,
            #[cfg(feature = "otlp-http")]
            OtlpProtocol::HttpJson => Protocol::HttpJson,
            #[allow(unreachable_patterns)]
            _ => unreachable!("checked by Transport::check"),
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
            _ => Err(invalid("OTLP protocol", s, Self::ACCEPTED)),
        }
    }
}

/// A telemetry signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum Signal {
    /// Spans.
    Traces,
    /// Metrics.
    Metrics,
    /// Log records.
    Logs,
}

impl Signal {
    /// `traces`, `metrics` or `logs`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Signal::Traces => "traces",
            Signal::Metrics => "metrics",
            Signal::Logs => "logs",
        }
    }

    pub(crate) fn upper(self) -> &'static str {
        match self {
            Signal::Traces => "TRACES",
            Signal::Metrics => "METRICS",
            Signal::Logs => "LOGS",
        }
    }
}

/// The protocol of `signal`: `OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL`, else
/// `OTEL_EXPORTER_OTLP_PROTOCOL`, else `grpc`. Anything else is an error naming the variable.
pub(crate) fn protocol_for(signal: Signal, env: Env<'_>) -> Result<OtlpProtocol> {
    let specific = format!("OTEL_EXPORTER_OTLP_{}_PROTOCOL", signal.upper());
    for var in [specific.as_str(), "OTEL_EXPORTER_OTLP_PROTOCOL"] {
        if let Some(v) = env.parse(var, OtlpProtocol::ACCEPTED, |v| v.parse().ok())? {
            return check_compiled(v, signal, var);
        }
    }
    check_compiled(OtlpProtocol::Grpc, signal, "OTEL_EXPORTER_OTLP_PROTOCOL")
}

/// Reads every OTLP setting of `signals` (protocol, endpoint, insecure, timeout, headers,
/// certificate files), so that a bad value fails setup before any pipeline is built or installed
/// globally. The exporters read them again when they are built.
pub(crate) fn preflight(signals: &[Signal], env: Env<'_>) -> Result<()> {
    for &signal in signals {
        let _protocol = protocol_for(signal, env)?;
        #[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
        Destination::from_env(signal, _protocol, env)?;
    }
    Ok(())
}

/// `protocol` if its feature is compiled in, else an error naming `var` and the feature.
pub(crate) fn check_compiled(
    protocol: OtlpProtocol,
    signal: Signal,
    var: &str,
) -> Result<OtlpProtocol> {
    let (compiled, feature) = match protocol {
        OtlpProtocol::Grpc => (cfg!(feature = "otlp-grpc"), "otlp-grpc"),
        _ => (cfg!(feature = "otlp-http"), "otlp-http"),
    };
    if compiled {
        Ok(protocol)
    } else {
        Err(LensError::Exporter {
            signal: signal.as_str(),
            message: format!(
                "OTLP over {protocol} (from {var}, or its default) needs nemo-lens's \
                 `{feature}` cargo feature, which this build leaves out; enable it, pick \
                 another protocol, or set NEMO_LENS_EXPORTER=console"
            ),
        })
    }
}

/// A runtime as the private one is built (one worker, I/O and timers), for the unit tests.
#[cfg(all(test, any(feature = "otlp-grpc", feature = "otlp-http")))]
fn test_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a test runtime")
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// `OTEL_EXPORTER_OTLP_[<SIGNAL>_]PROTOCOL`: grpc when unset or blank, else one of the
        /// three protocols (any case, stripped), else an error naming the variable and the
        /// accepted values.
        #[test]
        fn protocol_variables_yield_a_default_a_protocol_or_a_named_error(
            specific in any::<bool>(),
            signal in prop::sample::select(vec![Signal::Traces, Signal::Metrics, Signal::Logs]),
            value in prop_oneof![
                any::<String>(),
                "[ \\t]{0,2}(grpc|GRPC|http/protobuf|HTTP/JSON|http|udp|)[ \\t]{0,2}",
            ],
        ) {
            let var = if specific {
                format!("OTEL_EXPORTER_OTLP_{}_PROTOCOL", signal.upper())
            } else {
                "OTEL_EXPORTER_OTLP_PROTOCOL".to_string()
            };
            let lookup = |k: &str| (k == var).then(|| value.clone());
            match protocol_for(signal, Env::new(&lookup)) {
                Ok(p) if value.trim().is_empty() => prop_assert_eq!(p, OtlpProtocol::Grpc),
                Ok(p) => prop_assert_eq!(p.to_string(), value.trim().to_ascii_lowercase()),
                Err(e) => {
                    let msg = e.to_string();
                    prop_assert!(msg.contains(&var) && msg.contains(OtlpProtocol::ACCEPTED), "{}", msg);
                }
            }
        }
    }
}
