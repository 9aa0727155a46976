//! Where one signal's OTLP exporter sends, and how: endpoint, timeout, headers and TLS, read
//! from the `OTEL_EXPORTER_OTLP_*` variables through [`Env`] (so a blank value is unset and an
//! [`env_lookup`](crate::TelemetryBuilder::env_lookup) is honoured), then handed to the
//! exporter builders explicitly.
//!
//! | What | Per signal, then generic | Default |
//! |---|---|---|
//! | endpoint | `OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT` (as given), `OTEL_EXPORTER_OTLP_ENDPOINT` (HTTP appends `/v1/<signal>`) | `http://localhost:4317` (gRPC), `http://localhost:4318/v1/<signal>` (HTTP) |
//! | insecure (gRPC, endpoint without a scheme) | `OTEL_EXPORTER_OTLP_<SIGNAL>_INSECURE`, `OTEL_EXPORTER_OTLP_INSECURE` | `false`: a scheme-less endpoint is `https://` |
//! | timeout (ms) | `OTEL_EXPORTER_OTLP_<SIGNAL>_TIMEOUT`, `OTEL_EXPORTER_OTLP_TIMEOUT` | 10 000 |
//! | headers (`k=v,k2=v2`, values URL-decoded) | `OTEL_EXPORTER_OTLP_<SIGNAL>_HEADERS`, `OTEL_EXPORTER_OTLP_HEADERS` | none |
//! | certificates | see [`crate::export::otlp::tls`] | system roots |
//!
//! Every URL nemo-lens prints goes through [`redact_url`] / [`redact_urls_in`]: credentials in
//! an endpoint (`https://user:secret@collector:4318`) are shown as `[REDACTED]@`.

use std::time::Duration;

use crate::config::env::{Env, parse_bool};
use crate::error::Result;
use crate::export::otlp::tls::TlsFiles;
use crate::export::otlp::{OtlpProtocol, Signal};

/// The exporters' timeout when no variable sets one (the OTLP default).
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_millis(10_000);

/// Everything one signal's OTLP exporter is built from.
#[derive(Debug)]
pub(crate) struct Destination {
    /// The URL the exporter sends to (with the scheme the insecure rule chose).
    pub(crate) endpoint: String,
    /// The same, with credentials redacted: what messages show.
    pub(crate) shown: String,
    /// The variable the endpoint came from (or `the default`), for messages.
    pub(crate) source: String,
    /// The per-export timeout.
    pub(crate) timeout: Duration,
    /// Request headers / gRPC metadata. Never printed.
    pub(crate) headers: Headers,
    /// The certificates, for an `https://` endpoint.
    pub(crate) tls: Option<TlsFiles>,
}

/// Header pairs, whose values (API keys) are never shown.
#[derive(Default)]
pub(crate) struct Headers(pub(crate) Vec<(String, String)>);

impl std::fmt::Debug for Headers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(k, _)| k))
            .finish()
    }
}

/// The first of the per-signal and generic forms of `key` that is set (not blank).
fn first(env: Env<'_>, signal: Signal, key: &str) -> Option<(String, String)> {
    [
        format!("OTEL_EXPORTER_OTLP_{}_{key}", signal.upper()),
        format!("OTEL_EXPORTER_OTLP_{key}"),
    ]
    .into_iter()
    .find_map(|var| env.get(&var).map(|v| (var, v)))
}

impl Destination {
    /// Reads where `signal` goes over `protocol`.
    pub(crate) fn from_env(signal: Signal, protocol: OtlpProtocol, env: Env<'_>) -> Result<Self> {
        let specific = format!("OTEL_EXPORTER_OTLP_{}_ENDPOINT", signal.upper());
        let source = [specific.as_str(), "OTEL_EXPORTER_OTLP_ENDPOINT"]
            .into_iter()
            .find(|var| env.get(var).is_some())
            .unwrap_or("the default")
            .to_string();
        let endpoint = match protocol {
            OtlpProtocol::Grpc => {
                let endpoint = env
                    .get(&specific)
                    .or_else(|| env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))
                    .unwrap_or_else(|| "http://localhost:4317".to_string());
                if scheme(&endpoint).is_some() {
                    endpoint
                } else {
                    let insecure = match first(env, signal, "INSECURE") {
                        Some((var, v)) => parse_bool(&var, &v)?,
                        None => false,
                    };
                    let scheme = if insecure { "http" } else { "https" };
                    format!("{scheme}://{endpoint}")
                }
            }
            OtlpProtocol::HttpProtobuf | OtlpProtocol::HttpJson => {
                let path = format!("/v1/{}", signal.as_str());
                match env.get(&specific) {
                    Some(endpoint) => endpoint,
                    None => {
                        let base = env
                            .get("OTEL_EXPORTER_OTLP_ENDPOINT")
                            .unwrap_or_else(|| "http://localhost:4318".to_string());
                        format!("{}{path}", base.trim_end_matches('/'))
                    }
                }
            }
        };
        let mut timeout = None;
        for var in [
            format!("OTEL_EXPORTER_OTLP_{}_TIMEOUT", signal.upper()),
            "OTEL_EXPORTER_OTLP_TIMEOUT".to_string(),
        ] {
            if let Some(t) = env.positive_millis(&var)? {
                timeout = Some(t);
                break;
            }
        }
        let headers = first(env, signal, "HEADERS")
            .map(|(_, v)| parse_headers(&v))
            .unwrap_or_default();
        let tls = if scheme(&endpoint).is_some_and(|s| s.eq_ignore_ascii_case("https")) {
            Some(TlsFiles::from_env(signal, env)?)
        } else {
            None
        };
        Ok(Destination {
            shown: redact_url(&endpoint),
            source,
            endpoint,
            timeout: timeout.unwrap_or(DEFAULT_TIMEOUT),
            headers,
            tls,
        })
    }
}

/// The scheme of `url` (`http`, `https`, …) when it has one: text before `://` with no `/`,
/// `?` or `#` in it.
fn scheme(url: &str) -> Option<&str> {
    url.split_once("://")
        .map(|(s, _)| s)
        .filter(|s| !s.is_empty() && !s.contains(['/', '?', '#']))
}

/// `k=v,k2=v2` with URL-decoded values, as the OTLP exporters read `OTEL_EXPORTER_OTLP_HEADERS`;
/// malformed pairs are skipped.
fn parse_headers(value: &str) -> Headers {
    Headers(
        value
            .split(',')
            .filter_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                let k = k.trim();
                let v = url_decode(v.trim())?;
                (!k.is_empty()).then(|| (k.to_string(), v))
            })
            .collect(),
    )
}

/// Percent-decodes `value`; `None` for a broken escape or non-UTF-8 result.
fn url_decode(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = value.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `url` with its userinfo (`user:secret@`) replaced by `[REDACTED]@`.
///
/// ```text
/// https://user:secret@collector:4318/v1/traces → https://[REDACTED]@collector:4318/v1/traces
/// ```
pub(crate) fn redact_url(url: &str) -> String {
    redact_urls_in(url)
}

/// `text` with the userinfo of every URL in it (`scheme://user:secret@host`) replaced by
/// `[REDACTED]@`: for error text that quotes URLs (the exporters', the HTTP client's).
pub(crate) fn redact_urls_in(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        // The authority ends at the first `/`, `?`, `#`, white space or closing delimiter.
        let end = tail
            .find(|c: char| {
                matches!(c, '/' | '?' | '#' | ')' | '\'' | '"' | '>') || c.is_whitespace()
            })
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(userinfo_end) => {
                out.push_str("[REDACTED]");
                out.push_str(&authority[userinfo_end..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn userinfo_is_redacted_wherever_a_url_appears() {
        assert_eq!(
            redact_url("https://user:secret@collector:4318/v1/traces"),
            "https://[REDACTED]@collector:4318/v1/traces"
        );
        assert_eq!(redact_url("http://collector:4317"), "http://collector:4317");
        assert_eq!(
            redact_urls_in(
                "error sending request for url (http://a:b@h:1/v1/logs): refused; see https://x@y"
            ),
            "error sending request for url (http://[REDACTED]@h:1/v1/logs): refused; see https://[REDACTED]@y"
        );
        assert_eq!(redact_urls_in("no url here"), "no url here");
        // An `@` in the path is not userinfo.
        assert_eq!(redact_url("http://h:1/a@b"), "http://h:1/a@b");
    }

    #[test]
    fn blank_values_are_unset_and_the_generic_variables_fill_in() {
        let lookup = env_of(&[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "  "),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/"),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", ""),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", " "),
            ("OTEL_EXPORTER_OTLP_HEADERS", "a=b%20c, bad ,d=e"),
        ]);
        let d = Destination::from_env(
            Signal::Traces,
            OtlpProtocol::HttpProtobuf,
            Env::new(&lookup),
        )
        .unwrap();
        assert_eq!(d.endpoint, "http://c:4318/v1/traces");
        assert_eq!(d.timeout, Duration::from_millis(2500));
        assert_eq!(
            d.headers.0,
            vec![("a".into(), "b c".into()), ("d".into(), "e".into())]
        );
        assert!(d.tls.is_none());
        assert!(
            !format!("{d:?}").contains("b c"),
            "header values are never shown"
        );
    }

    #[test]
    fn grpc_endpoints_without_a_scheme_follow_insecure() {
        let secure = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")]);
        let d = Destination::from_env(Signal::Logs, OtlpProtocol::Grpc, Env::new(&secure)).unwrap();
        assert_eq!(d.endpoint, "https://collector:4317");
        assert!(d.tls.is_some());
        let insecure = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"),
            ("OTEL_EXPORTER_OTLP_LOGS_INSECURE", "true"),
        ]);
        let d =
            Destination::from_env(Signal::Logs, OtlpProtocol::Grpc, Env::new(&insecure)).unwrap();
        assert_eq!(d.endpoint, "http://collector:4317");
        let bad = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"),
            ("OTEL_EXPORTER_OTLP_INSECURE", "maybe"),
        ]);
        let err =
            Destination::from_env(Signal::Logs, OtlpProtocol::Grpc, Env::new(&bad)).unwrap_err();
        assert!(
            err.to_string().contains("OTEL_EXPORTER_OTLP_INSECURE"),
            "{err}"
        );
        // A scheme wins over insecure; the default is plain http on localhost.
        let none = env_of(&[("OTEL_EXPORTER_OTLP_INSECURE", "false")]);
        let d =
            Destination::from_env(Signal::Metrics, OtlpProtocol::Grpc, Env::new(&none)).unwrap();
        assert_eq!(d.endpoint, "http://localhost:4317");
    }

    #[test]
    fn missing_or_malformed_certificates_name_their_variable() {
        let dir = tempfile::tempdir().unwrap();
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not pem at all").unwrap();
        let garbage = garbage.to_str().unwrap().to_string();
        let cases: Vec<(Vec<(&str, String)>, &str)> = vec![
            (
                vec![(
                    "OTEL_EXPORTER_OTLP_CERTIFICATE",
                    "/nonexistent/ca.pem".into(),
                )],
                "OTEL_EXPORTER_OTLP_CERTIFICATE",
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", garbage.clone())],
                "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", garbage.clone())],
                "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
            ),
            (
                vec![
                    (
                        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
                        "/nonexistent/c.pem".into(),
                    ),
                    ("OTEL_EXPORTER_OTLP_CLIENT_KEY", garbage.clone()),
                ],
                "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
            ),
        ];
        for (vars, named) in cases {
            let mut vars = vars;
            vars.push(("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318".into()));
            let lookup = move |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
            let err =
                Destination::from_env(Signal::Traces, OtlpProtocol::HttpJson, Env::new(&lookup))
                    .unwrap_err();
            let msg = err.to_string();
            assert!(msg.starts_with(&format!("Invalid {named}:")), "{msg}");
        }
        // Not read for a plain-http endpoint.
        let lookup = |k: &str| {
            (k == "OTEL_EXPORTER_OTLP_CERTIFICATE").then(|| "/nonexistent/ca.pem".to_string())
        };
        assert!(
            Destination::from_env(Signal::Traces, OtlpProtocol::HttpJson, Env::new(&lookup))
                .is_ok()
        );
    }
}
