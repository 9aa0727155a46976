//! What NVTX ranges cost a span with no NVTX tool attached (feature `nvtx`,
//! `NEMO_LENS_NVTX=1`, [`nemo_lens::Telemetry::nvtx_layer`]): the state of a rank that is not
//! being profiled, where every NVTX call finds no tool and returns.
//!
//! ```sh
//! cargo bench --features nvtx --bench nvtx      # prints the Markdown table
//! ```
//!
//! Cases, each under a subscriber of its own (registry + lens layer + NVTX layer, as in
//! `examples/trainer.rs`; one subscriber alive at a time):
//!
//! * `span`: one span of an enabled group (create with one `i64` field, enter, exit, close), on
//!   a non-exporting rank (rank 0 of 8 under `single_rank`) and on an exporting rank (batch
//!   processor, an exporter that discards), with ranges off and on. On the non-exporting rank
//!   with ranges off the span is a disabled callsite; with ranges on, the registry records it
//!   for the NVTX layer alone, so the row beside it, `registry_only`, is the floor it starts
//!   from;
//! * `span_reentered`: one span built once and entered and exited on every pass (a range push
//!   and pop, no span creation);
//! * `event_in_span`: an event (a message and one field) inside an entered span (a mark);
//! * `raw_push_pop`: the `nvtx` crate alone, a push and a pop of cached attributes in a domain.
//!
//! Per case: 150 ms warm-up, then 9 samples of about 200 ms; the table gives the median and the
//! spread (min – max) of wall-clock time per iteration, and the median of the thread's CPU time.
//! `NVTX_INJECTION64_PATH` must be unset (a tool would be measured instead).
//!
//! Instructions per iteration, which do not depend on the machine's load: run one case untimed
//! under callgrind twice and divide the difference by the difference of the counts
//! (`benches/run_all.sh` does it for every case):
//!
//! ```sh
//! cargo bench --features nvtx --bench nvtx --no-run
//! NVTX_BENCH_CASE=span/non_exporting/on NVTX_BENCH_N=22000 \
//!   valgrind --tool=callgrind target/release/deps/nvtx-<hash>   # and again with 2000
//! ```

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nemo_lens::{LensConfig, Place, Telemetry};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use tracing::Dispatch;
use tracing::field::Empty;
use tracing_subscriber::prelude::*;

const WARM_UP: Duration = Duration::from_millis(150);
const SAMPLE: Duration = Duration::from_millis(200);
const SAMPLES: usize = 9;

/// Drops every batch: measures the pipeline, not an exporter.
#[derive(Debug, Clone, Default)]
struct Discard(Arc<AtomicU64>);

impl SpanExporter for Discard {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.fetch_add(batch.len() as u64, Ordering::Relaxed);
        black_box(batch);
        Ok(())
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Rank {
    NonExporting,
    Exporting,
}

fn telemetry(rank: Rank, nvtx: bool) -> Telemetry {
    let config = LensConfig::default().with_enabled(true).with(|c| {
        c.metrics_enabled = false;
        c.groups.span_groups = "per_step".into();
        c.nvtx = nvtx;
    });
    Telemetry::builder(config)
        .place(Place::rank(if rank == Rank::Exporting { 7 } else { 0 }).of(8))
        .span_exporter(Discard::default())
        .allow_reinit_for_testing(true)
        .build()
        .unwrap()
}

#[inline(never)]
fn step_span(step: i64) {
    let s = tracing::info_span!("train_step", nemo.group.step = Empty, step);
    let _e = s.enter();
}

#[inline(never)]
fn enter(span: &tracing::Span) {
    let _e = span.enter();
}

#[inline(never)]
fn event(step: i64) {
    tracing::info!(step, "step done");
}

/// Wall-clock and thread CPU time per iteration of `f(n)` (which runs `n` iterations).
struct Sample {
    wall: Vec<f64>,
    cpu: Vec<f64>,
}

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

fn measure(f: &mut dyn FnMut(u64)) -> Sample {
    let warm = Instant::now();
    while warm.elapsed() < WARM_UP {
        f(64);
    }
    let mut n = 16_u64;
    loop {
        let start = Instant::now();
        f(n);
        if start.elapsed() >= SAMPLE / 10 {
            n = (n as f64 * SAMPLE.as_secs_f64() / start.elapsed().as_secs_f64()) as u64;
            break;
        }
        n *= 2;
    }
    let mut sample = Sample {
        wall: Vec::new(),
        cpu: Vec::new(),
    };
    for _ in 0..SAMPLES {
        let cpu = thread_cpu_time();
        let start = Instant::now();
        f(n);
        let wall = start.elapsed();
        let cpu = thread_cpu_time() - cpu;
        sample.wall.push(wall.as_nanos() as f64 / n as f64);
        sample.cpu.push(cpu.as_nanos() as f64 / n as f64);
    }
    sample.wall.sort_by(f64::total_cmp);
    sample.cpu.sort_by(f64::total_cmp);
    sample
}

fn row(name: &str, s: &Sample) {
    let mid = SAMPLES / 2;
    println!(
        "| {name} | {} ({} – {}) | {} |",
        ns3(s.wall[mid]),
        ns3(s.wall[0]),
        ns3(s.wall[SAMPLES - 1]),
        ns3(s.cpu[mid])
    );
}

/// Three significant digits.
fn ns3(t: f64) -> String {
    let digits = if t >= 100.0 {
        0
    } else if t >= 10.0 {
        1
    } else {
        2
    };
    if t >= 1000.0 {
        format!("{:.3} µs", t / 1000.0)
    } else {
        format!("{t:.digits$} ns")
    }
}

/// What a case runs: `n` iterations of its loop.
#[derive(Clone, Copy)]
enum What {
    Span,
    SpanReentered,
    EventInSpan,
}

/// Runs `f(run)` under the case's subscriber, with `run(n)` doing `n` iterations of its loop.
fn with_case(setup: Option<(Rank, bool)>, what: What, f: impl FnOnce(&mut dyn FnMut(u64))) {
    let telemetry = setup.map(|(rank, nvtx)| {
        let t = telemetry(rank, nvtx);
        assert_eq!(
            t.nvtx_layer::<tracing_subscriber::Registry>().is_inert(),
            !nvtx
        );
        t
    });
    let dispatch = match &telemetry {
        Some(t) => Dispatch::new(
            tracing_subscriber::registry()
                .with(t.layer())
                .with(t.nvtx_layer()),
        ),
        None => Dispatch::new(tracing_subscriber::registry()),
    };
    tracing::dispatcher::with_default(&dispatch, || match what {
        What::Span => f(&mut |n| {
            for i in 0..n {
                step_span(black_box(i as i64));
            }
        }),
        What::SpanReentered => {
            let span = tracing::info_span!("forward", nemo.group.forward_backward = Empty);
            f(&mut |n| {
                for _ in 0..n {
                    enter(black_box(&span));
                }
            })
        }
        What::EventInSpan => {
            let span = tracing::info_span!("train_step", nemo.group.step = Empty);
            let _e = span.enter();
            f(&mut |n| {
                for i in 0..n {
                    event(black_box(i as i64));
                }
            })
        }
    });
    drop(dispatch);
    if let Some(t) = telemetry {
        let _ = t.shutdown(Duration::from_secs(5));
    }
}

/// `(name for NVTX_BENCH_CASE, row label, subscriber: None = registry alone, else the rank and
/// whether ranges are on, loop)`.
type Case = (&'static str, &'static str, Option<(Rank, bool)>, What);

const CASES: [Case; 10] = [
    (
        "span/registry_only",
        "`span`, `registry_only` (the floor of any layer)",
        None,
        What::Span,
    ),
    (
        "span/non_exporting/off",
        "`span`, non-exporting rank, ranges off",
        Some((Rank::NonExporting, false)),
        What::Span,
    ),
    (
        "span/non_exporting/on",
        "`span`, non-exporting rank, **ranges on**",
        Some((Rank::NonExporting, true)),
        What::Span,
    ),
    (
        "span/exporting/off",
        "`span`, exporting rank, ranges off",
        Some((Rank::Exporting, false)),
        What::Span,
    ),
    (
        "span/exporting/on",
        "`span`, exporting rank, **ranges on**",
        Some((Rank::Exporting, true)),
        What::Span,
    ),
    (
        "span_reentered/registry_only",
        "`span_reentered`, `registry_only`",
        None,
        What::SpanReentered,
    ),
    (
        "span_reentered/non_exporting/off",
        "`span_reentered`, non-exporting rank, ranges off",
        Some((Rank::NonExporting, false)),
        What::SpanReentered,
    ),
    (
        "span_reentered/non_exporting/on",
        "`span_reentered`, non-exporting rank, **ranges on**",
        Some((Rank::NonExporting, true)),
        What::SpanReentered,
    ),
    (
        "event_in_span/non_exporting/off",
        "`event_in_span`, non-exporting rank, ranges off",
        Some((Rank::NonExporting, false)),
        What::EventInSpan,
    ),
    (
        "event_in_span/non_exporting/on",
        "`event_in_span`, non-exporting rank, **ranges on** (a mark)",
        Some((Rank::NonExporting, true)),
        What::EventInSpan,
    ),
];

fn raw_push_pop() {
    let domain = nvtx::Domain::new(c"nemo-lens bench");
    let attributes = domain
        .event_attributes_builder()
        .message(domain.register_string(c"train_step"))
        .category(domain.register_category(c"step"))
        .color([40, 160, 220])
        .build();
    let sample = measure(&mut |n| {
        for _ in 0..n {
            drop(black_box(domain.local_range(attributes.clone())));
        }
    });
    row(
        "`raw_push_pop` (`nvtx` crate: push + pop, cached attributes)",
        &sample,
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` / `cargo test --benches`
    }
    if std::env::var_os("NVTX_INJECTION64_PATH").is_some() {
        eprintln!("nvtx bench: unset NVTX_INJECTION64_PATH: this bench measures NVTX with no tool");
        std::process::exit(2);
    }
    // One case, untimed, for `valgrind --tool=callgrind` (instruction counts do not depend on
    // the machine's load): `NVTX_BENCH_CASE=<name> NVTX_BENCH_N=<n>`; the difference between
    // two counts divided by the difference of their `n` is the count per iteration.
    if let Ok(name) = std::env::var("NVTX_BENCH_CASE") {
        let n = std::env::var("NVTX_BENCH_N").map_or(100_000, |v| v.parse().unwrap());
        let (_, _, setup, what) = CASES
            .iter()
            .find(|c| c.0 == name)
            .unwrap_or_else(|| panic!("no case {name}"));
        return with_case(*setup, *what, |run| run(n));
    }
    println!("| case | median (min – max) | thread CPU time |");
    println!("|---|---|---|");
    for (_, label, setup, what) in CASES {
        with_case(setup, what, |run| row(label, &measure(run)));
    }
    raw_push_pop();
}
