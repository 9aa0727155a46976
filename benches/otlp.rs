//! OTLP/HTTP protobuf to a loopback rotel collector: the crate's own OTLP set-up (exporter
//! `otlp`, `OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`), nemo-lens's batch processor with its
//! defaults, the producer on the bench thread unthrottled and at 100,000 spans/s for 3 s each.
//! Delivered is the sum of rotel's per-request span counts (`--debug-log traces`, basic
//! verbosity: one line per request); dropped = produced - delivered. rotel is installed from PyPI
//! on first use (`nemo_lens_test_support::collector`).
//!
//! Producer, exporter thread (protobuf encoding, blocking HTTP client) and rotel share the
//! machine's cores, so delivery tops out; a producer above that rate drops at the default queue,
//! by design (the trainer never blocks), and every drop is counted.
//!
//! With `--sdk-exporter`, the same runs give nemo-lens opentelemetry-otlp's own HTTP/protobuf
//! span exporter (reqwest's blocking client) as the application's exporter: the worker builds
//! `SpanData` and opentelemetry-otlp encodes it, where nemo-lens's own exporter writes the
//! requests from the records (compare the two under callgrind, `--separate-threads=yes`).
//!
//! Run: `cargo bench --bench otlp` (one line per run). `benches/run_all.sh` runs it with the other
//! benches and writes the figures to `docs/performance.md`.
use std::fs::File;
use std::io::Read;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nemo_lens::{ExporterKind, LensConfig, Telemetry};
use opentelemetry_otlp::WithExportConfig;
use tracing_subscriber::prelude::*;

use common::{produce, training_span};
use nemo_lens_test_support::bench as common;

use nemo_lens_test_support::collector;

/// A rotel collector that prints one summary line per received batch (`--debug-log traces`,
/// `basic` verbosity) and drops the data (`blackhole`): the bench reads the span counts from
/// the summaries, so the collector's printing costs a line per batch, not per span.
struct Rotel {
    child: Child,
    http_port: u16,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl Rotel {
    fn start() -> Rotel {
        let bin = collector::rotel_binary();
        let (grpc_port, http_port) = (collector::free_port(), collector::free_port());
        let dir = tempfile::tempdir().expect("temp dir");
        let out = dir.path().join("rotel.out");
        let stdout = File::create(&out).expect("rotel output file");
        let child = Command::new(bin)
            .arg("start")
            .args(["--otlp-grpc-endpoint", &format!("127.0.0.1:{grpc_port}")])
            .args(["--otlp-http-endpoint", &format!("127.0.0.1:{http_port}")])
            .args(["--exporter", "blackhole"])
            .args(["--debug-log", "traces", "--debug-log-verbosity", "basic"])
            .arg("--pid-file")
            .arg(dir.path().join("rotel.pid"))
            .arg("--log-file")
            .arg(dir.path().join("rotel.log"))
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(stdout.try_clone().expect("dup"))
            .stderr(stdout)
            .spawn()
            .expect("start rotel");
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", http_port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "rotel did not listen within 30 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Rotel {
            child,
            http_port,
            out,
            _dir: dir,
        }
    }

    fn output(&self) -> String {
        let mut text = String::new();
        File::open(&self.out)
            .and_then(|mut f| f.read_to_string(&mut text))
            .expect("read rotel output");
        text
    }

    /// Spans received so far: the sum of the per-batch `spans` counts.
    fn received(&self) -> u64 {
        collector::received_spans(&self.output())
    }
}

impl Drop for Rotel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One run: OTLP/HTTP protobuf through the crate's own exporter set-up and the SDK's default
/// batch processor (queue 2048, batch 512), producer on this thread for `duration` at most
/// `rate` spans/s. Delivered is what rotel reports once the counts stop growing.
fn run(label: &str, rotel: &Rotel, duration: Duration, rate: Option<f64>, sdk_exporter: bool) {
    let before = rotel.received();
    let mut builder = Telemetry::builder(LensConfig::default().with_enabled(true).with(|c| {
        c.export.strategy = "all_ranks".into();
        c.groups.span_groups = "all".into();
        c.metrics_enabled = false;
        c.export.exporter = ExporterKind::Otlp;
    }))
    .allow_reinit_for_testing(true);
    if sdk_exporter {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(format!("http://127.0.0.1:{}/v1/traces", rotel.http_port))
            .build()
            .expect("opentelemetry-otlp's HTTP exporter");
        builder = builder.span_exporter(exporter);
    }
    let telemetry = builder.build().expect("otlp telemetry");
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let start = Instant::now();
    let (produced, produce_secs) =
        tracing::subscriber::with_default(subscriber, || produce(duration, rate, training_span));
    telemetry
        .shutdown(Duration::from_secs(60))
        .expect("shutdown");
    let total_secs = start.elapsed().as_secs_f64();
    // rotel prints after it has answered; wait until its count is stable.
    let mut delivered = rotel.received() - before;
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = rotel.received() - before;
        if now == delivered {
            break;
        }
        delivered = now;
    }
    println!(
        "{label}: produced {produced} spans in {produce_secs:.2} s ({:.0} spans/s); delivered {delivered} ({:.0} spans/s to shutdown); dropped {}",
        produced as f64 / produce_secs,
        delivered as f64 / total_secs,
        produced.saturating_sub(delivered),
    );
}

fn main() {
    // Criterion-style flags from `cargo bench` are accepted and ignored; `--list`/`--test`
    // (`cargo test --benches`) only checks that the binary starts.
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let sdk = std::env::args().any(|a| a == "--sdk-exporter");
    let rotel = Rotel::start();
    // SAFETY: no other thread exists yet; the exporter builder reads these variables.
    unsafe {
        std::env::set_var(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{}", rotel.http_port),
        );
        std::env::set_var("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf");
    }
    run(
        "otlp_http_warmup (1 s)",
        &rotel,
        Duration::from_secs(1),
        Some(50_000.0),
        sdk,
    );
    run(
        "otlp_http_sustained (producer unthrottled, 3 s)",
        &rotel,
        Duration::from_secs(3),
        None,
        sdk,
    );
    run(
        "otlp_http_100k (producer held to 100,000 spans/s, 3 s)",
        &rotel,
        Duration::from_secs(3),
        Some(100_000.0),
        sdk,
    );
    println!(
        "rotel's last summary lines:\n{}",
        rotel
            .output()
            .lines()
            .rev()
            .take(3)
            .collect::<Vec<_>>()
            .join("\n")
    );
}
