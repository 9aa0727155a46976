//! The real-export wirings of the peers bench: each wiring encodes and sends OTLP to one rotel
//! collector on loopback (HTTP/protobuf or gRPC), and the spans are counted where they arrive.
//!
//! | wiring | what |
//! |---|---|
//! | `lens_otlp_{http,grpc}` | registry + lens layer, exporter `otlp` (lens's own transports) |
//! | `tracing_opentelemetry_otlp_{http,grpc}` | registry + `tracing_opentelemetry::layer()` with default options, SDK batch processor, `opentelemetry_otlp::SpanExporter` (HTTP: its default blocking reqwest client; gRPC: tonic on a one-worker Tokio runtime) |
//! | `tracing_opentelemetry_lean_otlp_{http,grpc}` | the same without inactivity tracking, thread, location and target |
//! | `fastrace_otlp_{http,grpc}` | fastrace, its reporter turning `SpanRecord`s into `SpanData` (as `fastrace-opentelemetry` does) into the same `opentelemetry_otlp::SpanExporter` |
//!
//! The driver starts the collector ([`Collector::start_counting`]: one summary line per
//! request) and gives each child `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL`
//! and `PEERS_COLLECTOR_OUT` (the collector's output file). A child makes only the
//! whole-process runs (root, then child): the spans, a flush, the process's CPU time over both,
//! and the spans the collector received for the run (read from that file once its count
//! settles). Nothing may be lost: a run whose count falls short says so in the table.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use nemo_lens::{ExporterKind, Telemetry};

use super::Shape;
use nemo_lens_test_support::bench as common;
use nemo_lens_test_support::collector::{received_spans, settle};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanEvents, SpanExporter, SpanLinks};
use tracing_subscriber::prelude::*;

/// Who records and exports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Who {
    Lens,
    Otel,
    OtelLean,
    Fastrace,
}

/// The OTLP transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Wire {
    Http,
    Grpc,
}

impl Wire {
    /// `OTEL_EXPORTER_OTLP_PROTOCOL`.
    pub(super) fn protocol(self) -> &'static str {
        match self {
            Wire::Http => "http/protobuf",
            Wire::Grpc => "grpc",
        }
    }
}

/// A real-export wiring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RealExport {
    pub(super) who: Who,
    pub(super) wire: Wire,
}

impl RealExport {
    pub(super) fn name(self) -> &'static str {
        match (self.who, self.wire) {
            (Who::Lens, Wire::Http) => "lens_otlp_http",
            (Who::Lens, Wire::Grpc) => "lens_otlp_grpc",
            (Who::Otel, Wire::Http) => "tracing_opentelemetry_otlp_http",
            (Who::Otel, Wire::Grpc) => "tracing_opentelemetry_otlp_grpc",
            (Who::OtelLean, Wire::Http) => "tracing_opentelemetry_lean_otlp_http",
            (Who::OtelLean, Wire::Grpc) => "tracing_opentelemetry_lean_otlp_grpc",
            (Who::Fastrace, Wire::Http) => "fastrace_otlp_http",
            (Who::Fastrace, Wire::Grpc) => "fastrace_otlp_grpc",
        }
    }

    pub(super) fn label(self) -> &'static str {
        match (self.who, self.wire) {
            (Who::Lens, Wire::Http) => "**lens**, HTTP/protobuf",
            (Who::Lens, Wire::Grpc) => "**lens**, gRPC",
            (Who::Otel, Wire::Http) => "tracing-opentelemetry, default options, HTTP/protobuf",
            (Who::Otel, Wire::Grpc) => "tracing-opentelemetry, default options, gRPC",
            (Who::OtelLean, Wire::Http) => "tracing-opentelemetry, lean, HTTP/protobuf",
            (Who::OtelLean, Wire::Grpc) => "tracing-opentelemetry, lean, gRPC",
            (Who::Fastrace, Wire::Http) => "fastrace, OpenTelemetry reporter, HTTP/protobuf",
            (Who::Fastrace, Wire::Grpc) => "fastrace, OpenTelemetry reporter, gRPC",
        }
    }
}

/// Every real-export wiring, in the table's row order.
pub(super) const REAL: [RealExport; 8] = {
    const fn w(who: Who, wire: Wire) -> RealExport {
        RealExport { who, wire }
    }
    [
        w(Who::Lens, Wire::Http),
        w(Who::OtelLean, Wire::Http),
        w(Who::Otel, Wire::Http),
        w(Who::Fastrace, Wire::Http),
        w(Who::Lens, Wire::Grpc),
        w(Who::OtelLean, Wire::Grpc),
        w(Who::Otel, Wire::Grpc),
        w(Who::Fastrace, Wire::Grpc),
    ]
};

/// A pipeline exporting to the collector, installed as the process's global default.
pub(super) struct Exporting {
    telemetry: Option<Telemetry>,
    provider: Option<SdkTracerProvider>,
    /// fastrace's spans handed to the exporter so far.
    fastrace: Option<Arc<AtomicU64>>,
    /// Keeps tonic's channel worker running (gRPC wirings of the SDK).
    _runtime: Option<tokio::runtime::Runtime>,
}

/// The SDK's OTLP span exporter for `wire`, from the environment (endpoint, protocol).
fn sdk_exporter(
    wire: Wire,
    runtime: &mut Option<tokio::runtime::Runtime>,
) -> opentelemetry_otlp::SpanExporter {
    match wire {
        Wire::Http => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .build()
            .expect("OTLP/HTTP exporter"),
        Wire::Grpc => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("a Tokio runtime for tonic");
            let exporter = {
                let _guard = rt.enter();
                opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .build()
                    .expect("OTLP/gRPC exporter")
            };
            *runtime = Some(rt);
            exporter
        }
    }
}

impl Exporting {
    /// Builds `wiring` and installs it.
    pub(super) fn install(wiring: RealExport) -> Exporting {
        let mut runtime = None;
        let mut out = Exporting {
            telemetry: None,
            provider: None,
            fastrace: None,
            _runtime: None,
        };
        let dispatch = match wiring.who {
            Who::Lens => {
                let config = common::exporting_config("all").with(|c| {
                    c.export.exporter = ExporterKind::Otlp;
                });
                let t = Telemetry::builder(config)
                    .allow_reinit_for_testing(true)
                    .build()
                    .expect("lens exporting over OTLP");
                let dispatch =
                    tracing::Dispatch::new(tracing_subscriber::registry().with(t.layer()));
                out.telemetry = Some(t);
                Some(dispatch)
            }
            Who::Otel | Who::OtelLean => {
                let provider = SdkTracerProvider::builder()
                    .with_batch_exporter(sdk_exporter(wiring.wire, &mut runtime))
                    .build();
                let dispatch = common::otel_dispatch(&provider, wiring.who == Who::OtelLean);
                out.provider = Some(provider);
                Some(dispatch)
            }
            Who::Fastrace => {
                let handed = Arc::new(AtomicU64::new(0));
                fastrace::set_reporter(
                    OtelReporter {
                        exporter: sdk_exporter(wiring.wire, &mut runtime),
                        scope: InstrumentationScope::builder("bench").build(),
                        handed: handed.clone(),
                    },
                    fastrace::collector::Config::default(),
                );
                out.fastrace = Some(handed);
                None
            }
        };
        if let Some(d) = dispatch {
            tracing::dispatcher::set_global_default(d).expect("first global subscriber");
        }
        out._runtime = runtime;
        out
    }

    /// Exports everything made so far and waits for it; returns the extra spans made to drain
    /// fastrace's backlog (see `drain_fastrace`).
    pub(super) fn flush(&self, produced: u64) -> u64 {
        if let Some(t) = &self.telemetry {
            let _ = t.force_flush();
        }
        if let Some(p) = &self.provider {
            let _ = p.force_flush();
        }
        match &self.fastrace {
            Some(handed) => super::drain_fastrace(handed, produced),
            None => 0,
        }
    }

    /// Spans lens counted as dropped (0 for the other wirings).
    pub(super) fn dropped(&self) -> u64 {
        self.telemetry
            .as_ref()
            .map_or(0, |t| t.stats().dropped_spans)
    }

    /// Shuts the pipeline down.
    pub(super) fn shutdown(self) {
        if let Some(t) = self.telemetry {
            let _ = t.shutdown(Duration::from_secs(30));
        }
        if let Some(p) = self.provider {
            let _ = p.shutdown();
        }
        fastrace::flush();
    }
}

/// Spans the collector has received so far (its output file is `PEERS_COLLECTOR_OUT`).
pub(super) fn collector_spans() -> u64 {
    let path = std::env::var_os("PEERS_COLLECTOR_OUT").expect("PEERS_COLLECTOR_OUT");
    received_spans(&std::fs::read_to_string(path).unwrap_or_default())
}

/// Waits until the collector has received `expected` spans beyond `before`, or its count has
/// stood still for 2 s; returns the spans received beyond `before`.
pub(super) fn collector_settled(before: u64, expected: u64) -> u64 {
    settle(before + expected, Duration::from_secs(2), collector_spans) - before
}

/// fastrace's reporter into an OpenTelemetry span exporter: each `SpanRecord` becomes a
/// `SpanData` (ids, times, properties as string attributes, events), as the
/// `fastrace-opentelemetry` reporter does, and each report is one export.
struct OtelReporter {
    exporter: opentelemetry_otlp::SpanExporter,
    scope: InstrumentationScope,
    handed: Arc<AtomicU64>,
}

/// Polls `future` on this thread until it completes.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

fn unix(ns: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_nanos(ns)
}

fn properties(props: Vec<(Cow<'static, str>, Cow<'static, str>)>) -> Vec<KeyValue> {
    props
        .into_iter()
        .map(|(k, v)| KeyValue::new(k, v))
        .collect()
}

impl fastrace::collector::Reporter for OtelReporter {
    fn report(&mut self, spans: Vec<fastrace::collector::SpanRecord>) {
        let n = spans.len() as u64;
        let batch: Vec<SpanData> = spans
            .into_iter()
            .map(|s| {
                let mut events = SpanEvents::default();
                events.events = s
                    .events
                    .into_iter()
                    .map(|e| {
                        opentelemetry::trace::Event::new(
                            e.name,
                            unix(e.timestamp_unix_ns),
                            properties(e.properties),
                            0,
                        )
                    })
                    .collect();
                SpanData {
                    span_context: SpanContext::new(
                        TraceId::from_bytes(s.trace_id.0.to_be_bytes()),
                        SpanId::from_bytes(s.span_id.0.to_be_bytes()),
                        TraceFlags::SAMPLED,
                        false,
                        TraceState::default(),
                    ),
                    parent_span_id: SpanId::from_bytes(s.parent_id.0.to_be_bytes()),
                    parent_span_is_remote: false,
                    span_kind: SpanKind::Internal,
                    name: s.name,
                    start_time: unix(s.begin_time_unix_ns),
                    end_time: unix(s.begin_time_unix_ns + s.duration_ns),
                    attributes: properties(s.properties),
                    dropped_attributes_count: 0,
                    events,
                    links: SpanLinks::default(),
                    status: Status::Unset,
                    instrumentation_scope: self.scope.clone(),
                }
            })
            .collect();
        let _ = block_on(self.exporter.export(batch));
        self.handed.fetch_add(n, Ordering::Relaxed);
    }
}

/// Runs the whole-process runs of `wiring` in this process, one `REAL` line per shape:
/// `REAL <name> <shape> <spans> <thread wall> <process CPU> <drain wall> <received> <dropped>`,
/// times in ns per span (drain: the final flush alone), received: spans the collector got,
/// dropped: spans lens counted as dropped.
pub(super) fn child(wiring: RealExport, shapes: &[Shape]) {
    let exporting = Exporting::install(wiring);
    // fastrace's drain compares everything handed over with everything made.
    let mut made = 0_u64;
    for &shape in shapes {
        let (f, spans): (fn(i64), u64) = match (wiring.who, shape) {
            (Who::Fastrace, Shape::Root) => (super::fastrace_root, 1),
            (Who::Fastrace, Shape::Child) => (super::fastrace_trace, super::FASTRACE_TRACE_LEN),
            _ => (super::tracing_span, 1),
        };
        let parent = (shape == Shape::Child && wiring.who != Who::Fastrace)
            .then(|| tracing::info_span!("job", nemo.group.job = tracing::field::Empty).entered());
        // Warm-up: the connection is open and the collector has settled before the run.
        let before = collector_spans();
        let warm = 2_000 / spans;
        super::run_loop(f, 0, warm);
        made += warm * spans;
        made += exporting.flush(made);
        collector_settled(before, warm * spans);

        let before = collector_spans();
        let dropped_before = exporting.dropped();
        let n = super::process_spans() / spans;
        let cpu = super::process_cpu_time();
        let wall = std::time::Instant::now();
        super::run_loop(f, warm as i64, n);
        let wall = wall.elapsed();
        made += n * spans;
        let drain = std::time::Instant::now();
        let extra = exporting.flush(made);
        let drain = drain.elapsed();
        let cpu = super::process_cpu_time() - cpu;
        made += extra;
        let received = collector_settled(before, n * spans + extra).saturating_sub(extra);
        let per_span = |d: Duration| d.as_nanos() as f64 / (n * spans) as f64;
        println!(
            "REAL {} {} {} {:.3} {:.3} {:.3} {received} {}",
            wiring.name(),
            shape.name(),
            n * spans,
            per_span(wall),
            per_span(cpu),
            per_span(drain),
            exporting.dropped() - dropped_before,
        );
        drop(parent);
    }
    exporting.shutdown();
}
