//! OTLP export to a real collector (rotel) over loopback, for each protocol, configured through
//! environment variables only, as a user would.
//!
//! Each test starts a collector, then runs a rank as a child process (the fixture program
//! `otlp_rank`) with `NEMO_LENS_*` / `OTEL_*` variables and nothing else. The
//! child records a step with an event and a log line, training metrics, leaves spans open, and
//! shuts down. The test then reads what the collector printed: spans (with the truncated ones),
//! metrics and log records, each with the rank's resource.

use std::time::Duration;

use nemo_lens_test_support::child::Child;
use nemo_lens_test_support::collector::{self, Collector, items, named as span};

fn run_child(envs: &[(&str, String)]) {
    Child::fixture("otlp_rank")
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .run_passing();
}

fn base_env(service: &str) -> Vec<(&'static str, String)> {
    vec![
        ("NEMO_LENS_ENABLED", "1".into()),
        ("NEMO_LENS_EXPORTER", "otlp".into()),
        ("NEMO_LENS_LOGS_ENABLED", "1".into()),
        ("NEMO_LENS_RUN_ID", format!("run-{service}")),
        ("OTEL_SERVICE_NAME", service.into()),
    ]
}

/// Checks what one child sent: spans with resource, attributes, parents and the truncated span;
/// log records with severity, body, attributes and the step's trace/span ids.
/// `histogram_points`: whether to check the histogram's data points. rotel 0.0.1a15 does not
/// decode histogram points sent as OTLP/JSON (it prints `DataType: Empty` for them, while gauges
/// decode), so over `http/json` only the histogram's descriptor is checked.
fn check_delivery(collector: &Collector, service: &str, histogram_points: bool) {
    let out = collector.wait_for(
        "3 spans, 2 log records and 2 metrics",
        Duration::from_secs(30),
        |o| {
            collector::spans(o).len() >= 3
                && items(o, "LogRecord #").len() >= 2
                && items(o, "Metric #").len() >= 2
        },
    );
    let spans = collector::spans(&out);
    assert_eq!(spans.len(), 3, "{spans:#?}");
    let train = span(&spans, "train");
    let step = span(&spans, "train_step");
    let prefetch = span(&spans, "prefetch");
    for s in [train, step, prefetch] {
        assert_eq!(
            s.resource_attr("service.name"),
            Some(format!("Str({service})"))
        );
        assert_eq!(s.resource_attr("dl.rank"), Some("Int(0)".into()));
        assert_eq!(
            s.resource_attr("nemo.run.id"),
            Some(format!("Str(run-{service})"))
        );
        assert_eq!(s.field("Trace ID"), train.field("Trace ID"));
    }
    assert_eq!(step.field("Parent ID"), train.field("ID"));
    assert_eq!(prefetch.field("Parent ID"), train.field("ID"));
    assert_eq!(step.attr("dl.step"), Some("Int(7)".into()));
    assert_eq!(step.attr("loss"), Some("Double(0.5)".into()));
    assert_eq!(train.attr("dl.model"), Some("Str(gpt-test)".into()));
    assert_eq!(
        prefetch.attr("nemo.span.truncated"),
        Some("Bool(true)".into())
    );
    assert_eq!(step.attr("nemo.span.truncated"), None);
    let prefetch_text = prefetch.lines.join("\n");
    assert!(
        prefetch_text.contains("nemo.span.truncated.reason"),
        "truncation event missing: {prefetch_text}"
    );

    let metrics = items(&out, "Metric #");
    let metric = |name: &str| {
        metrics
            .iter()
            .find(|m| m.attr("Name").as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no metric {name} among {metrics:#?}"))
    };
    let duration = metric("dl.step.duration");
    assert_eq!(duration.attr("Unit").as_deref(), Some("s"));
    if histogram_points {
        assert_eq!(
            duration.field("Count").as_deref(),
            Some("1"),
            "{duration:#?}"
        );
        assert_eq!(duration.field("Sum").as_deref(), Some("0.25"));
        assert_eq!(duration.attr("phase").as_deref(), Some("Str(train)"));
    }
    let loss = metric("dl.loss");
    assert_eq!(loss.field("Value").as_deref(), Some("0.5"));
    assert_eq!(loss.attr("phase").as_deref(), Some("Str(train)"));
    assert_eq!(
        loss.resource_attr("service.name"),
        Some(format!("Str({service})"))
    );
    assert_eq!(loss.resource_attr("dl.rank"), Some("Int(0)".into()));
    assert_eq!(
        loss.resource_attr("nemo.run.id"),
        Some(format!("Str(run-{service})"))
    );

    let logs = items(&out, "LogRecord #");
    let warn = logs
        .iter()
        .find(|l| l.field("Body").is_some_and(|b| b.contains("loss spiked")))
        .unwrap_or_else(|| panic!("no warn record among {logs:#?}"));
    assert!(
        warn.field("SeverityNumber").unwrap().contains("13"),
        "{warn:#?}"
    );
    assert_eq!(warn.attr("grad_norm"), Some("Double(12.5)".into()));
    assert_eq!(
        warn.resource_attr("service.name"),
        Some(format!("Str({service})"))
    );
    assert_eq!(warn.resource_attr("dl.rank"), Some("Int(0)".into()));
    let step_trace = step.field("Trace ID").unwrap();
    let step_id = step.field("ID").unwrap();
    assert_eq!(warn.field("Trace ID"), Some(step_trace));
    assert_eq!(warn.field("Span ID"), Some(step_id));
}

fn run_protocol(protocol: &str) {
    let collector = Collector::start();
    let service = format!("otlp-{}", protocol.replace('/', "-"));
    let mut env = base_env(&service);
    env.extend(collector.otlp_env(protocol));
    run_child(&env);
    check_delivery(&collector, &service, protocol != "http/json");
}

#[test]
fn grpc_delivers_spans_metrics_and_logs() {
    run_protocol("grpc");
}

#[test]
fn http_protobuf_delivers_spans_metrics_and_logs() {
    run_protocol("http/protobuf");
}

#[test]
fn http_json_delivers_spans_metrics_and_logs() {
    run_protocol("http/json");
}

#[test]
fn per_signal_protocol_endpoint_and_compression_variables_win() {
    let collector = Collector::start();
    let service = "otlp-per-signal";
    let mut env = base_env(service);
    // Generic settings that must lose: nothing listens there.
    env.push(("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json".into()));
    env.push(("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9".into()));
    // Traces: HTTP/protobuf, gzip, to a per-signal endpoint used verbatim (with its path).
    env.push(("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf".into()));
    env.push((
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        format!("{}/v1/traces", collector.endpoint("http/protobuf")),
    ));
    env.push(("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip".into()));
    // Metrics: HTTP/JSON to a per-signal endpoint.
    env.push(("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/json".into()));
    env.push((
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        format!("{}/v1/metrics", collector.endpoint("http/json")),
    ));
    // Logs: gRPC to the gRPC port.
    env.push(("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "grpc".into()));
    env.push((
        "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
        collector.endpoint("grpc"),
    ));
    run_child(&env);
    check_delivery(&collector, service, false);
}

#[test]
fn an_unknown_protocol_fails_setup_naming_the_variable() {
    use nemo_lens::{LensConfig, Telemetry};
    for var in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        let err = Telemetry::builder(LensConfig::default().with_enabled(true))
            .env_lookup(move |k| (k == var).then(|| "thrift".to_string()))
            .allow_reinit_for_testing(true)
            .build()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(var) && err.contains("'http/protobuf'") && err.contains("thrift"),
            "{err}"
        );
    }
}

/// A span as the collector printed it, without what differs between two runs of one program
/// (ids and times: whether they are set is kept).
fn comparable(item: &collector::Item) -> Vec<String> {
    const VARYING: [&str; 6] = [
        "Trace ID",
        "Parent ID",
        "ID",
        "Start time",
        "End time",
        "-> Timestamp",
    ];
    item.lines
        .iter()
        .map(|line| {
            let t = line.trim();
            match t.split_once(':') {
                Some((label, value)) if VARYING.contains(&label.trim()) => {
                    let set = !value.trim().is_empty();
                    format!("{} : {}", label.trim(), if set { "set" } else { "empty" })
                }
                _ => t.to_string(),
            }
        })
        .collect()
}

/// The spans HTTP/protobuf sends (written by nemo-lens straight from its records) are the
/// spans gRPC sends (opentelemetry-otlp's encoding of the SDK's `SpanData`), as a real collector
/// decodes them: names, kinds, statuses, attributes, events (the truncation event included).
#[test]
fn http_protobuf_and_grpc_deliver_the_same_spans() {
    let mut printed = Vec::new();
    for protocol in ["http/protobuf", "grpc"] {
        let collector = Collector::start();
        let mut env = base_env("otlp-same-spans");
        env.extend(collector.otlp_env(protocol));
        run_child(&env);
        let out = collector.wait_for("3 spans", Duration::from_secs(30), |o| {
            collector::spans(o).len() >= 3
        });
        let mut spans: Vec<Vec<String>> = collector::spans(&out).iter().map(comparable).collect();
        spans.sort();
        assert_eq!(spans.len(), 3, "{protocol}: {spans:#?}");
        printed.push(spans);
    }
    assert!(
        printed[0]
            .iter()
            .flatten()
            .any(|l| l.contains("nemo.span.truncated.reason")),
        "{printed:#?}"
    );
    assert_eq!(printed[0], printed[1]);
}
