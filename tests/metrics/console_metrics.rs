//! The console metric exporter against real Python NeMo Lens output.
//!
//! A real exporting `Telemetry` (console exporter, per-rank file from `console_path`, which is
//! what `NEMO_LENS_CONSOLE_PATH` sets) records the same inference metrics as the Python fixture
//! script; its metric line is then compared with the fixture's `resource_metrics` line: key
//! order at every level, value types, and every value except timestamps and the resource.
//! Spans and metric batches share the file, line by line.

use std::io::Write;
use std::path::Path;
use std::thread;
use std::time::Duration;

use nemo_lens::export::ConsoleMetricExporter;
use nemo_lens::export::{ConsoleSpanExporter, ConsoleWriter};
use nemo_lens::metrics::InferenceMetrics;
use nemo_lens::{ExporterKind, LensConfig, Place, Telemetry};
use opentelemetry::KeyValue;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::{Tracer, TracerProvider as _};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::trace::SdkTracerProvider;
use serde_json::{Map, Value};
use tracing_subscriber::prelude::*;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/python-lens-rank3.jsonl"
);

fn parse(line: &str) -> Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not one JSON object ({e}): {line}"))
}

fn is_metric_line(v: &Value) -> bool {
    v.get("resource_metrics").is_some()
}

/// Python's `json.dumps` separators (`", "`, `": "`); everything else as serde_json writes it
/// (which matches Python for the integers and floats these lines hold).
struct PythonSeparators;

impl serde_json::ser::Formatter for PythonSeparators {
    fn begin_array_value<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }
    fn begin_object_key<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }
    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}

fn python_dumps(v: &Value) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, PythonSeparators);
    serde::Serialize::serialize(v, &mut ser).unwrap();
    String::from_utf8(out).unwrap()
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn keys(o: &Map<String, Value>) -> Vec<&str> {
    o.keys().map(String::as_str).collect()
}

/// Requires `ours` to have `theirs`'s shape and values, except for timestamps and the resource's
/// attributes (another host, another process). Metrics are matched by name and data points by
/// attributes, since neither SDK promises an order for them.
fn same_as_python(ours: &Value, theirs: &Value, path: &str) {
    assert_eq!(
        kind(ours),
        kind(theirs),
        "type at {path}: {ours} vs {theirs}"
    );
    match (ours, theirs) {
        (Value::Object(a), Value::Object(b)) => {
            assert_eq!(keys(a), keys(b), "key order at {path}");
            for (k, v) in b {
                let sub = format!("{path}.{k}");
                match k.as_str() {
                    "start_time_unix_nano" | "time_unix_nano" => {
                        assert_eq!(kind(&a[k]), kind(v), "type at {sub}")
                    }
                    "attributes" if path.ends_with(".resource") => {}
                    _ => same_as_python(&a[k], v, &sub),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            assert_eq!(a.len(), b.len(), "length at {path}: {ours} vs {theirs}");
            let by = if path.ends_with(".metrics") {
                Some("name")
            } else if path.ends_with(".data_points") {
                Some("attributes")
            } else {
                None
            };
            for (i, t) in b.iter().enumerate() {
                let o = match by {
                    Some(key) => a
                        .iter()
                        .find(|o| o[key] == t[key])
                        .unwrap_or_else(|| panic!("no {key} = {} at {path}", t[key])),
                    None => &a[i],
                };
                same_as_python(o, t, &format!("{path}[{i}]"));
            }
        }
        _ => assert_eq!(ours, theirs, "value at {path}"),
    }
}

#[test]
fn metric_lines_match_the_python_fixture_and_share_the_span_file() {
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("lens-{rank}.jsonl");
    let config = LensConfig::default().with_enabled(true).with(|c| {
        c.export.exporter = ExporterKind::Console;
        c.export.strategy = "all_ranks".into();
        c.groups.span_groups = "all".into();
        c.export.console_path = Some(template.to_str().unwrap().to_owned());
    });
    let t = Telemetry::builder(config)
        .place(Place::rank(3).of(8))
        .export_mode(nemo_lens::ExportMode::Synchronous)
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    tracing::subscriber::with_default(tracing_subscriber::registry().with(t.layer()), || {
        tracing::info_span!("train_step").in_scope(|| {
            // What make-python-lens-fixture.py records.
            InferenceMetrics {
                request_duration_s: Some(0.5),
                model: Some("m"),
                input_tokens: Some(10),
                output_tokens: Some(5),
                ..Default::default()
            }
            .record(t.instruments());
        });
    });
    t.shutdown(Duration::from_secs(10)).unwrap();

    let text = std::fs::read_to_string(dir.path().join("lens-3.jsonl")).unwrap();
    assert!(text.ends_with('\n'));
    let lines: Vec<&str> = text.lines().collect();
    let parsed: Vec<Value> = lines.iter().map(|l| parse(l)).collect();
    assert!(
        parsed.iter().any(|v| v["name"] == "train_step"),
        "the span line is in the same file: {text}"
    );
    let (ours_raw, ours) = lines
        .iter()
        .zip(&parsed)
        .rev()
        .find(|(_, v)| is_metric_line(v))
        .expect("a metric line (the export at shutdown)");

    // Byte level: Python's separators, nothing else between tokens.
    assert_eq!(python_dumps(ours), *ours_raw);

    let fixture = std::fs::read_to_string(Path::new(FIXTURE)).unwrap();
    let theirs = fixture
        .lines()
        .map(parse)
        .rev()
        .find(is_metric_line)
        .expect("the fixture has metric lines");
    same_as_python(ours, &theirs, "$");

    // The resource is the one spans carry.
    let resource = &ours["resource_metrics"][0]["resource"]["attributes"];
    assert_eq!(resource["dl.rank"], 3);
    assert_eq!(resource["service.name"], "nemo");
}

#[test]
fn sums_and_gauges_use_the_python_number_data_point_layout() {
    let dir = tempfile::tempdir().unwrap();
    let writer = ConsoleWriter::to_path(dir.path().join("m.jsonl").to_str().unwrap(), 0).unwrap();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(ConsoleMetricExporter::new(writer)).build())
        .build();
    let meter = provider.meter("shapes");
    meter
        .u64_counter("c")
        .build()
        .add(2, &[KeyValue::new("k", "v")]);
    meter.i64_up_down_counter("ud").build().add(-3, &[]);
    meter
        .f64_gauge("g")
        .with_unit("1")
        .build()
        .record(0.25, &[]);
    provider.shutdown().unwrap();

    let text = std::fs::read_to_string(dir.path().join("m.jsonl")).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    let line = parse(text.trim_end());
    assert_eq!(python_dumps(&line), text.trim_end());
    let scope = &line["resource_metrics"][0]["scope_metrics"][0];
    assert_eq!(
        scope["scope"],
        serde_json::json!({"name": "shapes", "version": "", "schema_url": "", "attributes": null})
    );
    let metric = |name: &str| {
        scope["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("no {name}"))
            .clone()
    };
    let point_keys = [
        "attributes",
        "start_time_unix_nano",
        "time_unix_nano",
        "value",
        "exemplars",
    ];

    let c = metric("c");
    assert_eq!(
        keys(c.as_object().unwrap()),
        ["name", "description", "unit", "data"]
    );
    let data = c["data"].as_object().unwrap();
    assert_eq!(
        keys(data),
        ["data_points", "aggregation_temporality", "is_monotonic"]
    );
    assert_eq!(
        (
            data["aggregation_temporality"].clone(),
            data["is_monotonic"].clone()
        ),
        (2.into(), true.into())
    );
    let point = data["data_points"][0].as_object().unwrap();
    assert_eq!(keys(point), point_keys);
    assert_eq!(point["value"], 2);
    assert_eq!(point["attributes"], serde_json::json!({"k": "v"}));

    let ud = metric("ud");
    assert_eq!(ud["data"]["is_monotonic"], false);
    assert_eq!(ud["data"]["data_points"][0]["value"], -3);

    let g = metric("g");
    assert_eq!(g["unit"], "1");
    let data = g["data"].as_object().unwrap();
    assert_eq!(keys(data), ["data_points"]);
    assert_eq!(
        keys(data["data_points"][0].as_object().unwrap()),
        point_keys
    );
    assert_eq!(data["data_points"][0]["value"], 0.25);
    // As Python writes a gauge point: no start time; sums keep theirs.
    assert_eq!(data["data_points"][0]["start_time_unix_nano"], Value::Null);
    assert!(data["data_points"][0]["time_unix_nano"].is_u64());
    assert!(point["start_time_unix_nano"].is_u64());
}

#[test]
fn an_empty_collection_writes_nothing_and_delta_is_temporality_1() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("delta.jsonl");
    let writer = ConsoleWriter::to_path(path.to_str().unwrap(), 0).unwrap();
    let exporter = ConsoleMetricExporter::new(writer).with_temporality(Temporality::Delta);
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter).build())
        .build();
    provider.force_flush().unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    provider
        .meter("d")
        .f64_histogram("h")
        .build()
        .record(1.5, &[]);
    provider.shutdown().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let line = parse(text.trim_end());
    let data = &line["resource_metrics"][0]["scope_metrics"][0]["metrics"][0]["data"];
    assert_eq!(data["aggregation_temporality"], 1);
    assert_eq!(data["data_points"][0]["sum"], 1.5);
}

#[test]
fn concurrent_span_and_metric_exports_interleave_whole_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("both.jsonl");
    let writer = ConsoleWriter::to_path(path.to_str().unwrap(), 0).unwrap();
    let tracer_provider = SdkTracerProvider::builder()
        .with_simple_exporter(ConsoleSpanExporter::new(writer.clone()))
        .build();
    let meter_provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(ConsoleMetricExporter::new(writer)).build())
        .build();
    let counter = meter_provider.meter("m").u64_counter("n").build();
    let long = "x".repeat(4096);
    thread::scope(|s| {
        let tracer = tracer_provider.tracer("t");
        let long = long.as_str();
        s.spawn(move || {
            for i in 0..500 {
                tracer.in_span(format!("span-{i}-{long}"), |_| {});
            }
        });
        s.spawn(|| {
            for i in 0..100 {
                counter.add(1, &[KeyValue::new("i", i64::from(i % 7))]);
                meter_provider.force_flush().unwrap();
            }
        });
    });
    tracer_provider.shutdown().unwrap();
    meter_provider.shutdown().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let (mut spans, mut batches) = (0, 0);
    for line in text.lines() {
        let v = parse(line);
        if is_metric_line(&v) {
            batches += 1
        } else {
            spans += 1
        }
    }
    assert_eq!(spans, 500);
    assert!(batches >= 100, "{batches}");
}
