//! nemo-lens beside its peers, one wiring per process: what one span costs on the training
//! thread (create with one `i64` field + enter + exit + close), as a root span and as a child of
//! a long-lived span, under each way a Rust program can record spans.
//!
//! ```sh
//! cargo bench --bench peers                          # every wiring, prints the Markdown table
//! cargo bench --bench peers -- opentelemetry lens    # wirings whose name contains a word
//! cargo bench --all-features --bench peers -- =lens_exported =lens_opentelemetry_layer  # exact names
//! cargo test --bench peers                           # smoke test: every wiring, 2 ms samples
//! ```
//!
//! Each wiring runs in a process of its own (this binary re-runs itself with `--wiring NAME`),
//! installed as the global default the way its users set it up, so no wiring inherits another's
//! `tracing` state: in particular the no-subscriber process never builds a dispatcher and never
//! rebuilds the interest cache, so `tracing`'s global max level stays `OFF` as in a real
//! process with no subscriber. Per case: 150 ms warm-up, then 9 samples of about 200 ms each
//! (`PEERS_WARM_UP_MS`, `PEERS_SAMPLE_MS`), each timing one `#[inline(never)]` span function
//! called through the same non-inlined loop ([`run_loop`]); the table gives the median and the
//! spread (min – max) of the 9 samples of wall-clock time, and the median of the measuring
//! thread's CPU time over the same samples (it leaves out the time the thread waited for a
//! core). `benches/instructions.sh` runs the same functions under callgrind (`--count N`) for a
//! load-independent count.
//!
//! Whole process: a span's cost does not end on the training thread. For the exporting
//! wirings (and the registry they sit on), each shape then gets one more run of
//! `PEERS_PROCESS_SPANS` spans (500,000): the pipeline is flushed, the process's CPU time
//! (every thread: the training thread, the batch worker, the exporter) is read, the spans are
//! made, the pipeline is flushed again, and the CPU time is read again. Each child process
//! gets queues large enough for the whole run (`OTEL_BSP_MAX_QUEUE_SIZE`, read by nemo-lens
//! and the SDK alike, and `NEMO_LENS_QUEUE_MAX_BYTES`), so nothing is dropped; the table
//! says how many spans the exporter did not receive. The training thread's wall time over the
//! same run is given beside it.
//!
//! Wirings (exporting ones use a batch processor and an exporter that discards the batch):
//!
//! | name | what |
//! |---|---|
//! | `no_subscriber` | no subscriber ever set |
//! | `lens_non_exporting_rank` | registry + lens layer, rank 0 of 8 under `single_rank` |
//! | `lens_disabled_group` | registry + lens layer on an exporting rank, the span's group (`step`) off |
//! | `registry_only` | `tracing_subscriber::registry()` alone |
//! | `fmt_sink` | registry + `fmt::layer()` writing to `io::sink` |
//! | `plain_tracing_opentelemetry` | registry + `tracing_opentelemetry::layer()`, default options, SDK batch processor |
//! | `plain_tracing_opentelemetry_lean` | the same without inactivity tracking, thread, location and target |
//! | `lens_exported` | registry + lens layer exporting every group, its own batch processor |
//! | `lens_exported_no_context_activation` | the same with `context_activation(false)` |
//! | `lens_opentelemetry_layer` | registry + `Telemetry::opentelemetry_layer()` (feature `tracing-opentelemetry`; the row is absent without it), lens tracer, the `lens_exported` settings |
//! | `fastrace` | fastrace, the `i64` as a string property, discarding reporter every 10 ms |
//! | `fastrace_no_property` | the same without a property |
//! | `lens_otlp_http`, `tracing_opentelemetry_lean_otlp_grpc`, `fastrace_otlp_http`, … | real OTLP export (HTTP/protobuf, gRPC) to a rotel collector on loopback, whole-process runs only, the spans counted where they arrive (`export.rs`) |
//!
//! The child case enters one long-lived parent (`job`, group `job`, on by default) around the
//! whole measurement. fastrace has no long-lived parent in its intended shape (a trace is
//! reported when its root ends, and a thread-local queue of 10,240 spans overflows under an
//! endless root), so its child column is the per-span cost of a root with 99 local children
//! (`LocalSpan`s), the shape it is built for; its root column is one `Span::root` with its
//! local-parent guard per span.
//!
//! Why fastrace is here although it is not a `tracing` layer: it is what a span recorder costs
//! without the `tracing` machinery (no dispatcher, no registry slab, no per-layer filter state,
//! no extension maps): thread-local span lines, a TSC clock, IDs from a thread-local counter,
//! and whole traces handed to a collector thread. Every `tracing` layer pays at least the
//! `registry_only` row; fastrace shows how far below that a recorder with a different API can
//! go, so it bounds what any `tracing` layer can reach, not what nemo-lens can. Every process of
//! this bench also runs `fastant`'s TSC calibration at start-up (a static constructor of
//! fastrace's clock); it is outside every measured loop.
//!
//! `benches/instructions.sh` counts the instructions of the same span functions under callgrind;
//! `benches/run_all.sh` runs both with the other benches and writes the figures to
//! `docs/performance.md`.
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tracing::field::Empty;

mod driver;
mod export;
use common::Wiring;
use driver::driver;
use nemo_lens_test_support::bench as common;

/// Samples per case.
const SAMPLES: usize = 9;
/// Warm-up before calibration, and the time of one sample, in ms (`PEERS_WARM_UP_MS`,
/// `PEERS_SAMPLE_MS` override them).
const WARM_UP_MS: u64 = 150;
const SAMPLE_MS: u64 = 200;
/// fastrace's intended shape: one root and this many spans in all (the root + 99 children).
const FASTRACE_TRACE_LEN: u64 = 100;
/// Spans of each whole-process run (`PEERS_PROCESS_SPANS` overrides it).
const PROCESS_SPANS: u64 = 500_000;

/// Every wiring of the table, in its row order.
/// `lens_opentelemetry_layer` only with the `tracing-opentelemetry` feature.
const PEERS: &[Peer] = &[
    Peer::Tracing(Wiring::NoSubscriber),
    Peer::Tracing(Wiring::LensNonExporting),
    Peer::Tracing(Wiring::LensDisabledGroup),
    Peer::Tracing(Wiring::RegistryOnly),
    Peer::Tracing(Wiring::FmtSink),
    Peer::Tracing(Wiring::PlainOtel),
    Peer::Tracing(Wiring::PlainOtelLean),
    Peer::Tracing(Wiring::LensExported),
    Peer::Tracing(Wiring::LensExportedNoActivation),
    #[cfg(feature = "tracing-opentelemetry")]
    Peer::Tracing(Wiring::LensOtelLayer),
    Peer::Fastrace { property: true },
    Peer::Fastrace { property: false },
    Peer::Real(export::REAL[0]),
    Peer::Real(export::REAL[1]),
    Peer::Real(export::REAL[2]),
    Peer::Real(export::REAL[3]),
    Peer::Real(export::REAL[4]),
    Peer::Real(export::REAL[5]),
    Peer::Real(export::REAL[6]),
    Peer::Real(export::REAL[7]),
];

/// One row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Peer {
    /// A `tracing` wiring (see `nemo_lens_test_support::bench`).
    Tracing(Wiring),
    /// fastrace, with or without the `i64` as a string property.
    Fastrace { property: bool },
    /// Real OTLP export to a collector on loopback (`export.rs`): whole-process runs only.
    Real(export::RealExport),
}

impl Peer {
    fn name(self) -> &'static str {
        match self {
            Peer::Tracing(w) => w.name(),
            Peer::Fastrace { property: true } => "fastrace",
            Peer::Fastrace { property: false } => "fastrace_no_property",
            Peer::Real(r) => r.name(),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Peer::Tracing(Wiring::NoSubscriber) => "no subscriber (own process)",
            Peer::Tracing(Wiring::LensNonExporting) => "lens, non-exporting rank",
            Peer::Tracing(Wiring::LensDisabledGroup) => "lens, disabled group",
            Peer::Tracing(Wiring::RegistryOnly) => "`tracing_subscriber::registry()` alone",
            Peer::Tracing(Wiring::FmtSink) => "`fmt` layer to `io::sink`",
            Peer::Tracing(Wiring::PlainOtel) => "tracing-opentelemetry, default options",
            Peer::Tracing(Wiring::PlainOtelLean) => {
                "tracing-opentelemetry, lean (no inactivity/thread/location/target)"
            }
            Peer::Tracing(Wiring::LensExported) => "**lens, exported**",
            Peer::Tracing(Wiring::LensExportedNoActivation) => {
                "lens, exported, context activation off"
            }
            Peer::Tracing(Wiring::LensOtelLayer) => {
                "lens tracer via `opentelemetry_layer()` (tracing-opentelemetry feature), exported"
            }
            Peer::Fastrace { property: true } => "fastrace (outside `tracing`), `i64` property",
            Peer::Fastrace { property: false } => "fastrace (outside `tracing`), no property",
            Peer::Real(r) => r.label(),
        }
    }

    fn exports(self) -> bool {
        matches!(
            self,
            Peer::Tracing(
                Wiring::LensExported
                    | Wiring::LensExportedNoActivation
                    | Wiring::LensOtelLayer
                    | Wiring::PlainOtel
                    | Wiring::PlainOtelLean
            ) | Peer::Fastrace { .. }
        )
    }

    /// Whether the whole-process run (process CPU per span, after a flush) is made: the
    /// exporting `tracing` wirings and the registry they sit on.
    fn whole_process(self) -> bool {
        matches!(
            self,
            Peer::Tracing(
                Wiring::RegistryOnly
                    | Wiring::LensExported
                    | Wiring::LensExportedNoActivation
                    | Wiring::LensOtelLayer
                    | Wiring::PlainOtel
                    | Wiring::PlainOtelLean
            )
        )
    }

    fn by_name(name: &str) -> Option<Peer> {
        PEERS.iter().copied().find(|p| p.name() == name)
    }
}

/// Root span, or child of a long-lived span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Root,
    Child,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Root => "root",
            Shape::Child => "child",
        }
    }
}

// ----- the measured functions -----------------------------------------------------------------

/// The `tracing` span: create with one `i64` field + enter + exit + close. The group field
/// has no value: it only gates the span under `lens_disabled_group` and no wiring records it.
#[inline(never)]
fn tracing_span(i: i64) {
    let span = tracing::info_span!("step", nemo.group.step = Empty, step = i);
    let _e = span.enter();
}

/// A fastrace root span with the `i64` as a property (fastrace properties are strings).
#[inline(never)]
fn fastrace_root(i: i64) {
    use fastrace::prelude::*;
    let root = Span::root("step", SpanContext::random()).with_property(|| ("step", i.to_string()));
    let _g = root.set_local_parent();
}

/// A fastrace root span without a property.
#[inline(never)]
fn fastrace_root_bare(_i: i64) {
    use fastrace::prelude::*;
    let root = Span::root("step", SpanContext::random());
    let _g = root.set_local_parent();
}

/// fastrace's intended shape: one root and 99 local children, the `i64` as a property of each.
#[inline(never)]
fn fastrace_trace(i: i64) {
    use fastrace::prelude::*;
    let root = Span::root("job", SpanContext::random()).with_property(|| ("step", i.to_string()));
    let _g = root.set_local_parent();
    for j in 1..FASTRACE_TRACE_LEN as i64 {
        let _s = LocalSpan::enter_with_local_parent("step")
            .with_property(|| ("step", (i + j).to_string()));
    }
}

/// fastrace's intended shape without properties.
#[inline(never)]
fn fastrace_trace_bare(_i: i64) {
    use fastrace::prelude::*;
    let root = Span::root("job", SpanContext::random());
    let _g = root.set_local_parent();
    for _ in 1..FASTRACE_TRACE_LEN {
        let _s = LocalSpan::enter_with_local_parent("step");
    }
}

/// Calls `f(start)`, `f(start + 1)`, ... `n` times: the loop every figure is taken through,
/// timed (`measure`) or counted by callgrind (`benches/instructions.sh` reads its inclusive
/// instruction count, so it is never inlined).
#[inline(never)]
fn run_loop(f: fn(i64), start: i64, n: u64) {
    for i in 0..n as i64 {
        f(black_box(start + i));
    }
}

// ----- one wiring, in this process --------------------------------------------------------------

/// What a child process measured for one case, in ns per span.
struct Sample {
    /// Median, min and max wall-clock time of the samples.
    median: f64,
    min: f64,
    max: f64,
    /// Median CPU time of the measuring thread over the same samples: leaves out the time the
    /// thread waited for a core, which a loaded machine adds to the wall clock.
    cpu: f64,
}

/// CPU time consumed by the calling thread so far.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID is always supported
    // on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// CPU time consumed by every thread of this process so far.
fn process_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: as in `thread_cpu_time`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// What one shape's whole-process run measured, in ns per span.
struct Process {
    /// Wall-clock time of the loop on the training thread.
    wall: f64,
    /// CPU time of every thread of the process from just before the loop until the pipeline
    /// had exported everything (flushed).
    cpu: f64,
    /// Spans the exporter received during the run, over the spans made.
    exported: u64,
    spans: u64,
}

/// Spans of each whole-process run: `PEERS_PROCESS_SPANS`, else [`PROCESS_SPANS`].
fn process_spans() -> u64 {
    std::env::var("PEERS_PROCESS_SPANS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(PROCESS_SPANS)
}

/// The whole-process run of `f`: `PEERS_PROCESS_SPANS` spans (after the pipeline was flushed),
/// then a flush; process CPU time over both. The child processes get queues large enough
/// that nothing is dropped (see [`run_child`]); `exported` says whether that held.
fn whole_process(f: fn(i64), spans: u64, built: &common::Built, start: i64) -> Process {
    let n = process_spans() / spans;
    built.flush();
    let before = built.exported.load(Ordering::Relaxed);
    let cpu = process_cpu_time();
    let wall = Instant::now();
    run_loop(f, start, n);
    let wall = wall.elapsed();
    built.flush();
    let cpu = process_cpu_time() - cpu;
    let per_span = |d: Duration| d.as_nanos() as f64 / (n * spans) as f64;
    Process {
        wall: per_span(wall),
        cpu: per_span(cpu),
        exported: built.exported.load(Ordering::Relaxed) - before,
        spans: n * spans,
    }
}

/// `SAMPLES` samples of `f` (`spans` spans per call), after a warm-up and a calibration to
/// about `PEERS_SAMPLE_MS` per sample.
fn measure(f: fn(i64), spans: u64, calls: &mut u64) -> Sample {
    let ms = |var: &str, default: u64| {
        Duration::from_millis(
            std::env::var(var)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default),
        )
    };
    let warm_up = ms("PEERS_WARM_UP_MS", WARM_UP_MS);
    let sample_time = ms("PEERS_SAMPLE_MS", SAMPLE_MS);
    let mut next = 0_i64;
    let mut run = |n: u64| {
        let cpu = thread_cpu_time();
        let start = Instant::now();
        run_loop(f, next, n);
        let wall = start.elapsed();
        let cpu = thread_cpu_time() - cpu;
        next += n as i64;
        *calls += n;
        (wall, cpu)
    };
    let warm = Instant::now();
    while warm.elapsed() < warm_up {
        run(64);
    }
    let mut n = 16_u64;
    let mut took = run(n).0;
    while took < sample_time / 10 {
        n *= 2;
        took = run(n).0;
    }
    let n = ((n as f64) * sample_time.as_secs_f64() / took.as_secs_f64()).max(1.0) as u64;
    let per_span = |d: Duration| d.as_nanos() as f64 / (n * spans) as f64;
    let (mut wall, mut cpu): (Vec<f64>, Vec<f64>) = (0..SAMPLES)
        .map(|_| {
            let (w, c) = run(n);
            (per_span(w), per_span(c))
        })
        .unzip();
    wall.sort_by(f64::total_cmp);
    cpu.sort_by(f64::total_cmp);
    Sample {
        median: wall[SAMPLES / 2],
        min: wall[0],
        max: wall[SAMPLES - 1],
        cpu: cpu[SAMPLES / 2],
    }
}

/// The function, and the spans per call, for `peer` in `shape`.
fn measured(peer: Peer, shape: Shape) -> (fn(i64), u64, &'static str) {
    match (peer, shape) {
        (Peer::Tracing(_) | Peer::Real(_), _) => (tracing_span, 1, "tracing_span"),
        (Peer::Fastrace { property: true }, Shape::Root) => (fastrace_root, 1, "fastrace_root"),
        (Peer::Fastrace { property: false }, Shape::Root) => {
            (fastrace_root_bare, 1, "fastrace_root_bare")
        }
        (Peer::Fastrace { property: true }, Shape::Child) => {
            (fastrace_trace, FASTRACE_TRACE_LEN, "fastrace_trace")
        }
        (Peer::Fastrace { property: false }, Shape::Child) => (
            fastrace_trace_bare,
            FASTRACE_TRACE_LEN,
            "fastrace_trace_bare",
        ),
    }
}

/// Counts and drops fastrace's spans.
struct DiscardReporter(Arc<AtomicU64>);

impl fastrace::collector::Reporter for DiscardReporter {
    fn report(&mut self, spans: Vec<fastrace::collector::SpanRecord>) {
        self.0.fetch_add(spans.len() as u64, Ordering::Relaxed);
        black_box(spans);
    }
}

/// Hands fastrace's backlog to its collector; returns the extra (bare root) spans it made.
///
/// fastrace 0.7.17 never drops a span in flight: when its thread's 10,240-entry channel is full
/// it keeps the rest in an unbounded thread-local queue, which moves on only when the thread
/// sends again (and `fastrace::flush` does not reach it). A fast producer leaves a backlog there,
/// so the reported count would look like drops: keep sending one bare root every 10 ms (one
/// collector cycle) until everything produced has been reported, or for at most 10 s.
fn drain_fastrace(exported: &AtomicU64, produced: u64) -> u64 {
    let mut extra = 0;
    for _ in 0..1000 {
        fastrace::flush();
        if exported.load(Ordering::Relaxed) >= produced + extra {
            break;
        }
        fastrace_root_bare(0);
        extra += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    extra
}

/// The wiring's pipeline, installed as the process's global default.
/// Builds `wiring`; `lens_opentelemetry_layer` here, as only this binary knows whether
/// nemo-lens has its `tracing-opentelemetry` feature.
fn build(wiring: Wiring) -> common::Built {
    #[cfg(feature = "tracing-opentelemetry")]
    if wiring == Wiring::LensOtelLayer {
        use tracing_subscriber::prelude::*;
        let exported = Arc::new(AtomicU64::new(0));
        let t = common::lens(common::exporting_config("all"), 0, 1, exported.clone());
        let dispatch =
            tracing::Dispatch::new(tracing_subscriber::registry().with(t.opentelemetry_layer()));
        return common::Built::lens(t, dispatch, exported);
    }
    #[cfg(not(feature = "tracing-opentelemetry"))]
    assert!(
        wiring != Wiring::LensOtelLayer,
        "the lens_opentelemetry_layer wiring needs --features tracing-opentelemetry"
    );
    common::build(wiring)
}

enum Installed {
    Nothing,
    Tracing(common::Built),
    Fastrace,
}

fn install(peer: Peer, exported: &Arc<AtomicU64>) -> Installed {
    match peer {
        // Nothing at all: no dispatcher, no interest rebuild (the max level stays `OFF`).
        Peer::Tracing(Wiring::NoSubscriber) => Installed::Nothing,
        Peer::Tracing(wiring) => {
            let built = build(wiring);
            let dispatch = built.dispatch.clone().expect("a tracing wiring");
            tracing::dispatcher::set_global_default(dispatch).expect("first global subscriber");
            Installed::Tracing(built)
        }
        Peer::Real(_) => unreachable!("export::child runs the real-export wirings"),
        Peer::Fastrace { .. } => {
            fastrace::set_reporter(
                DiscardReporter(exported.clone()),
                fastrace::collector::Config::default().report_interval(Duration::from_millis(10)),
            );
            Installed::Fastrace
        }
    }
}

/// Flushes the pipeline; returns the spans its exporter received.
fn finish(installed: Installed, exported: &Arc<AtomicU64>) -> u64 {
    match installed {
        Installed::Nothing => 0,
        Installed::Tracing(built) => {
            let counted = built.exported.clone();
            built.shutdown();
            counted.load(Ordering::Relaxed)
        }
        Installed::Fastrace => exported.load(Ordering::Relaxed),
    }
}

/// Runs `shape` (or both shapes) of `peer` in this process. With `count`, runs the span
/// function `count` times after a warm-up and prints what `benches/instructions.sh` needs;
/// otherwise prints one `PEERS` line per shape for the driver.
fn child(peer: Peer, shapes: &[Shape], count: Option<u64>) {
    let exported = Arc::new(AtomicU64::new(0));
    let installed = install(peer, &exported);
    let mut produced = 0_u64;
    for &shape in shapes {
        let (f, spans, symbol) = measured(peer, shape);
        // The child case's long-lived parent (fastrace: its own root per trace instead).
        let parent = (shape == Shape::Child && matches!(peer, Peer::Tracing(_)))
            .then(|| tracing::info_span!("job", nemo.group.job = Empty).entered());
        produced += u64::from(parent.is_some());
        let mut calls = 0_u64;
        match count {
            Some(n) => {
                // Warm-up through the same span function but outside `run_loop` (callsite
                // registration, slab growth, thread-locals): `run_loop`'s inclusive count
                // then covers the `n` steady-state calls only.
                for i in 0..2_000 {
                    f(black_box(i));
                }
                run_loop(f, 2_000, n);
                calls += 2_000 + n;
                println!(
                    "COUNT wiring={} shape={} symbol=peers::run_loop calls={n} spans_per_call={spans} measured={symbol}",
                    peer.name(),
                    shape.name()
                );
            }
            None => {
                let s = measure(f, spans, &mut calls);
                println!(
                    "PEERS {} {} {:.3} {:.3} {:.3} {:.3}",
                    peer.name(),
                    shape.name(),
                    s.median,
                    s.min,
                    s.max,
                    s.cpu
                );
                if let Installed::Tracing(built) = &installed
                    && peer.whole_process()
                {
                    let p = whole_process(f, spans, built, calls as i64);
                    calls += p.spans / spans;
                    println!(
                        "PROCESS {} {} {} {:.3} {:.3} {}",
                        peer.name(),
                        shape.name(),
                        p.spans,
                        p.wall,
                        p.cpu,
                        p.exported
                    );
                }
            }
        }
        produced += calls * spans;
        drop(parent);
    }
    // Under callgrind (`--count`) fastrace's collector thread is too slow to drain its backlog
    // in reasonable time; nothing is lost either way, so the drop check is left out there.
    let drained = count.is_none() || !matches!(installed, Installed::Fastrace);
    if count.is_none() && matches!(installed, Installed::Fastrace) {
        produced += drain_fastrace(&exported, produced);
    }
    let exported = finish(installed, &exported);
    if peer.exports() && drained {
        println!("EXPORTED {} {produced} {exported}", peer.name());
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut wiring = None;
    let mut shape = None;
    let mut count = None;
    let mut filters = Vec::new();
    let bench = args.iter().any(|a| a == "--bench");
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--wiring" => wiring = it.next().cloned(),
            "--shape" => shape = it.next().cloned(),
            "--count" => count = it.next().and_then(|n| n.parse::<u64>().ok()),
            // Passed by `cargo bench`; criterion-style options are not used here.
            a if a.starts_with("--") => {}
            a => filters.push(a.to_string()),
        }
    }
    let Some(wiring) = wiring else {
        return driver(&filters, bench);
    };
    let Some(peer) = Peer::by_name(&wiring) else {
        let names: Vec<_> = PEERS.iter().map(|p| p.name()).collect();
        eprintln!("unknown wiring {wiring:?}; one of: {}", names.join(", "));
        std::process::exit(2);
    };
    let shapes: &[Shape] = match shape.as_deref() {
        None => &[Shape::Root, Shape::Child],
        Some("root") => &[Shape::Root],
        Some("child") => &[Shape::Child],
        Some(other) => {
            eprintln!("unknown shape {other:?}; root or child");
            std::process::exit(2);
        }
    };
    match peer {
        Peer::Real(r) => export::child(r, shapes),
        _ => child(peer, shapes, count),
    }
}
