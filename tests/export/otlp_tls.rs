//! OTLP over TLS to a real collector: rotel behind a TLS front (tokio-rustls, certificates from
//! an rcgen CA made by the test), configured through environment variables only.
//!
//! Each test runs a rank as a child process (the fixture program `tls_rank`) with
//! `NEMO_LENS_*` / `OTEL_*` variables and nothing else: over `grpc`, `http/protobuf` and
//! `http/json`, spans, metrics and log records arrive when `OTEL_EXPORTER_OTLP_CERTIFICATE`
//! names the CA, and with mutual TLS when the client certificate variables are set. A server
//! the certificates do not accept (another CA, another host name) gives one stderr line per
//! signal naming the endpoint (credentials redacted) and the cause, and the drops are counted.

use std::process::Output;
use std::time::Duration;

use nemo_lens_test_support::child::{self, Child};
use nemo_lens_test_support::collector::{Collector, items};
use nemo_lens_test_support::tls::{TestCa, TlsFront};

fn run_child(envs: &[(&str, String)]) -> Output {
    // The system roots must not matter: only the variables do.
    let base = [
        ("NEMO_LENS_ENABLED", "1"),
        ("NEMO_LENS_EXPORTER", "otlp"),
        ("NEMO_LENS_LOGS_ENABLED", "1"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "5000"),
    ];
    let given = envs.iter().map(|(k, v)| (*k, v.as_str()));
    Child::fixture("tls_rank")
        .envs(base.into_iter().chain(given))
        .run_passing()
}

/// `(spans, logs, metric_exports)` the child counted as dropped.
fn dropped(out: &Output) -> (u64, u64, u64) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("DROPPED ").map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("no drop line in {stdout}"));
    let get = |key: &str| -> u64 {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
            .unwrap()
            .parse()
            .unwrap()
    };
    (get("spans"), get("logs"), get("metric_exports"))
}

/// A collector with a TLS front on each of its ports (certificates for `hosts` from `ca`).
struct Secured {
    collector: Collector,
    grpc: TlsFront,
    http: TlsFront,
}

impl Secured {
    fn start(ca: &TestCa, hosts: &[&str], client_ca: Option<&TestCa>) -> Secured {
        let collector = Collector::start();
        let grpc = TlsFront::start(collector.grpc_port, ca, hosts, client_ca);
        let http = TlsFront::start(collector.http_port, ca, hosts, client_ca);
        Secured {
            collector,
            grpc,
            http,
        }
    }

    fn endpoint(&self, protocol: &str, userinfo: &str) -> String {
        let port = if protocol == "grpc" {
            self.grpc.port
        } else {
            self.http.port
        };
        format!("https://{userinfo}127.0.0.1:{port}")
    }

    fn front(&self, protocol: &str) -> &TlsFront {
        if protocol == "grpc" {
            &self.grpc
        } else {
            &self.http
        }
    }
}

fn delivers_over_tls(protocol: &str) {
    let ca = TestCa::new("nemo-lens test CA");
    let secured = Secured::start(&ca, &["127.0.0.1"], None);
    let service = format!("tls-{}", protocol.replace('/', "-"));
    let out = run_child(&[
        ("OTEL_SERVICE_NAME", service.clone()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol.into()),
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            secured.endpoint(protocol, ""),
        ),
        (
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
            ca.path.display().to_string(),
        ),
    ]);
    let text = secured.collector.wait_for(
        "3 spans, 3 log records and a metric over TLS",
        Duration::from_secs(30),
        |o| {
            items(o, "Span #").len() >= 3
                && items(o, "LogRecord #").len() >= 3
                && !items(o, "Metric #").is_empty()
        },
    );
    let spans = items(&text, "Span #");
    assert_eq!(spans.len(), 3);
    assert!(
        spans
            .iter()
            .all(|s| s.field("Name").as_deref() == Some("train_step")
                && s.resource_attr("service.name") == Some(format!("Str({service})")))
    );
    assert!(
        items(&text, "Metric #")
            .iter()
            .any(|m| m.attr("Name").as_deref() == Some("dl.loss"))
    );
    assert_eq!(dropped(&out), (0, 0, 0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("nemo-lens: "), "{stderr}");
    assert!(secured.front(protocol).handshake_errors().is_empty());
}

#[test]
fn grpc_over_tls_delivers_spans_metrics_and_logs() {
    delivers_over_tls("grpc");
}

#[test]
fn http_protobuf_over_tls_delivers_spans_metrics_and_logs() {
    delivers_over_tls("http/protobuf");
}

#[test]
fn http_json_over_tls_delivers_spans_metrics_and_logs() {
    delivers_over_tls("http/json");
}

/// Mutual TLS: the front requires a client certificate from the client CA; the per-signal
/// variables carry it for traces, the generic ones for logs and metrics.
#[test]
fn mutual_tls_with_client_certificate_variables() {
    let ca = TestCa::new("nemo-lens server CA");
    let client_ca = TestCa::new("nemo-lens client CA");
    let dir = tempfile::tempdir().unwrap();
    let client = client_ca.client(dir.path());
    let secured = Secured::start(&ca, &["127.0.0.1"], Some(&client_ca));
    let path = |p: &std::path::Path| p.display().to_string();
    let out = run_child(&[
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".into()),
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            secured.endpoint("http/protobuf", ""),
        ),
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", path(&ca.path)),
        (
            "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
            path(&client.cert_path),
        ),
        (
            "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY",
            path(&client.key_path),
        ),
        (
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
            path(&client.cert_path),
        ),
        ("OTEL_EXPORTER_OTLP_CLIENT_KEY", path(&client.key_path)),
        // Logs over gRPC, to check tonic's identity too.
        ("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "grpc".into()),
        (
            "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
            secured.endpoint("grpc", ""),
        ),
    ]);
    secured.collector.wait_for(
        "spans and logs over mutual TLS",
        Duration::from_secs(30),
        |o| items(o, "Span #").len() >= 3 && items(o, "LogRecord #").len() >= 3,
    );
    assert_eq!(dropped(&out), (0, 0, 0));
    // Without the client certificate the front refuses, and the refusal is a counted drop.
    let out = run_child(&[
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".into()),
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            secured.endpoint("http/protobuf", ""),
        ),
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", path(&ca.path)),
        ("NEMO_LENS_LOGS_ENABLED", "0".into()),
        ("NEMO_LENS_METRICS_ENABLED", "0".into()),
    ]);
    assert_eq!(
        dropped(&out).0,
        3,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The lines nemo-lens wrote about failed exports.
fn failure_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("nemo-lens: ") && l.contains(" export to "))
        .map(str::to_string)
        .collect()
}

/// Another CA's certificate, over each protocol: one line per signal naming the endpoint with
/// its credentials redacted and the TLS cause; every span, log record and metric export is
/// counted as dropped; the front saw the handshake fail.
#[test]
fn an_unknown_ca_gives_one_line_per_signal_and_counted_drops() {
    let ca = TestCa::new("the collector's CA");
    let other = TestCa::new("some other CA");
    let secured = Secured::start(&ca, &["127.0.0.1"], None);
    for protocol in ["grpc", "http/protobuf", "http/json"] {
        // Userinfo in an HTTP endpoint is legal and must never be printed (gRPC URIs carry none).
        let userinfo = if protocol == "grpc" {
            ""
        } else {
            "user:hunter2@"
        };
        let endpoint = secured.endpoint(protocol, userinfo);
        let out = run_child(&[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol.into()),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.clone()),
            (
                "OTEL_EXPORTER_OTLP_CERTIFICATE",
                other.path.display().to_string(),
            ),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            !stderr.contains("hunter2"),
            "{protocol}: a secret printed:\n{stderr}"
        );
        let lines = failure_lines(&out);
        let shown = endpoint.replace("user:hunter2@", "[REDACTED]@");
        for signal in ["traces", "metrics", "logs"] {
            let of_signal: Vec<&String> = lines
                .iter()
                .filter(|l| l.starts_with(&format!("nemo-lens: {signal} export to {shown}")))
                .collect();
            assert_eq!(
                of_signal.len(),
                1,
                "{protocol} {signal}: one line each:\n{stderr}"
            );
            let line = of_signal[0];
            assert!(
                line.contains("TLS: ") && line.contains("UnknownIssuer"),
                "{protocol}: the cause is named: {line}"
            );
            assert!(line.contains("OTEL_EXPORTER_OTLP_CERTIFICATE"), "{line}");
        }
        let (spans, logs, metric_exports) = dropped(&out);
        assert_eq!(
            (spans, logs),
            (3, 3),
            "{protocol}: every item counted:\n{stderr}"
        );
        assert!(metric_exports >= 1, "{protocol}:\n{stderr}");
        assert!(
            items(&secured.collector.output(), "Span #").is_empty(),
            "nothing got through"
        );
    }
    let refused = [
        secured.grpc.handshake_errors(),
        secured.http.handshake_errors(),
    ]
    .concat();
    assert!(!refused.is_empty());
}

/// A certificate for another host name: refused by name, one line per signal, drops counted.
#[test]
fn a_certificate_for_another_host_is_refused_by_name() {
    let ca = TestCa::new("nemo-lens test CA");
    let secured = Secured::start(&ca, &["collector.example"], None);
    for protocol in ["grpc", "http/protobuf"] {
        let out = run_child(&[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol.into()),
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                secured.endpoint(protocol, ""),
            ),
            (
                "OTEL_EXPORTER_OTLP_CERTIFICATE",
                ca.path.display().to_string(),
            ),
            ("NEMO_LENS_METRICS_ENABLED", "0".into()),
        ]);
        let lines = failure_lines(&out);
        assert_eq!(lines.len(), 2, "{protocol}: traces and logs: {lines:#?}");
        assert!(
            lines.iter().all(|l| l.contains("not valid for name")
                && l.contains("does not name the endpoint's host")),
            "{protocol}: {lines:#?}"
        );
        assert_eq!(dropped(&out), (3, 3, 0), "{protocol}");
    }
}

/// A certificate variable naming a missing file, or a file without PEM certificates, fails
/// setup on the exporting rank with an error naming the variable; a non-exporting rank and a
/// plain-`http://` endpoint never read it.
/// Runs in a process of its own: it checks that no global tracer provider was installed, which
/// the other tests of this binary do install.
#[test]
fn a_missing_or_malformed_certificate_fails_setup_naming_the_variable() {
    child::run_alone(a_bad_certificate_fails_setup);
}

fn a_bad_certificate_fails_setup() {
    use nemo_lens::{LensConfig, LensError, Telemetry};
    use opentelemetry::trace::{Span as _, Tracer as _, TracerProvider as _};
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(
        &garbage,
        "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let garbage = garbage.display().to_string();
    for (var, value) in [
        (
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
            "/nonexistent/ca.pem".to_string(),
        ),
        ("OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", garbage.clone()),
        ("OTEL_EXPORTER_OTLP_LOGS_CLIENT_KEY", garbage.clone()),
    ] {
        for protocol in ["grpc", "http/json"] {
            let env = [
                (var, value.clone()),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol.to_string()),
                (
                    "OTEL_EXPORTER_OTLP_ENDPOINT",
                    "https://127.0.0.1:9".to_string(),
                ),
            ];
            let lookup = move |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
            let config = LensConfig::default().with_enabled(true).with(|c| {
                c.logs_enabled = true;
                c.export.strategy = "single_rank".into();
            });
            let err = Telemetry::builder(config.clone())
                .env_lookup(lookup.clone())
                .allow_reinit_for_testing(true)
                .build()
                .unwrap_err();
            assert!(
                matches!(&err, LensError::Certificate { var: v, .. } if v == var),
                "{var} over {protocol}: {err}"
            );
            assert!(
                err.to_string().starts_with(&format!("Invalid {var}: ")),
                "{err}"
            );
            // Checked before anything was built: no tracer provider was installed.
            let mut probe = opentelemetry::global::tracer_provider()
                .tracer("probe")
                .start("probe");
            assert!(!probe.is_recording(), "{var}: a provider was installed");
            probe.end();
            // Rank 0 of 2 does not export under single_rank: it reads no certificate.
            let quiet = Telemetry::builder(config)
                .place(nemo_lens::Place::rank(0).of(2))
                .env_lookup(lookup)
                .allow_reinit_for_testing(true)
                .build()
                .unwrap();
            assert!(!quiet.is_exporting());
        }
    }
}
