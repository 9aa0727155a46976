//! Export that keeps up, with real processes: ranks (the fixture program `otlp_load`) export
//! to a real collector (rotel, printing one summary line per request, so its counts are exact)
//! over HTTP/protobuf and gRPC.
//!
//! * Sustained load from two processes at once, one bursting as fast as it can and one paced
//!   behind it: no batch is lost, nothing is counted as dropped, the collector receives every
//!   span.
//! * A collector that stalls for a moment (`SIGSTOP`, then `SIGCONT`) or restarts on its ports
//!   (`SIGTERM`, connections refused meanwhile) loses nothing: the requests wait, or are
//!   retried, within the export timeout. (A collector killed mid-request is another matter
//!   over gRPC: tonic reports the reset connection as `UNKNOWN`, which the OTLP specification
//!   does not retry, so that request's spans are counted as dropped.)
//! * A collector stalled past the export timeout: the timeout still bounds every export,
//!   shutdown returns, and the counters stay honest (what was lost is counted; the collector
//!   never receives more than was made).

use std::process::Output;
use std::time::Duration;

use nemo_lens_test_support::child::{Child, Running};
use nemo_lens_test_support::collector::Collector;
use nemo_lens_test_support::wait::wait_until;

const PROTOCOLS: [&str; 2] = ["http/protobuf", "grpc"];

/// A rank making `spans` spans over `seconds` (0: as fast as it can), exporting to `collector`
/// with `extra` variables, queues large enough to hold a whole burst.
fn rank(
    collector: &Collector,
    protocol: &str,
    spans: u64,
    seconds: f64,
    extra: &[(&str, &str)],
) -> Running {
    Child::fixture("otlp_load")
        .envs(collector.otlp_env(protocol))
        .envs([
            ("NEMO_LENS_ENABLED", "1"),
            ("NEMO_LENS_EXPORTER", "otlp"),
            ("NEMO_LENS_SPAN_GROUPS", "all"),
            ("NEMO_LENS_METRICS_ENABLED", "0"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "262144"),
            ("NEMO_LENS_QUEUE_MAX_BYTES", "1073741824"),
        ])
        .env("LOAD_SPANS", spans.to_string())
        .env("LOAD_SECONDS", seconds.to_string())
        .envs(extra.iter().copied())
        .spawn()
}

/// What a rank reported: spans made, spans counted as dropped, shutdown's result.
struct Load {
    produced: u64,
    dropped: u64,
    shutdown: String,
    stderr: String,
}

fn report(out: Output) -> Load {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("LOAD "))
        .unwrap_or_else(|| panic!("no LOAD line:\n{stdout}\n{stderr}"));
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("no {name} in {line}"))
            .to_string()
    };
    Load {
        produced: field("produced").parse().unwrap(),
        dropped: field("dropped").parse().unwrap(),
        shutdown: field("shutdown"),
        stderr,
    }
}

fn assert_complete(load: &Load, protocol: &str) {
    assert_eq!(
        (load.dropped, load.shutdown.as_str()),
        (0, "ok"),
        "{protocol}: a batch was lost\n{}",
        load.stderr
    );
}

#[test]
fn sustained_load_from_two_processes_loses_no_batch() {
    for protocol in PROTOCOLS {
        let collector = Collector::start_counting();
        let burst = rank(&collector, protocol, 50_000, 0.0, &[]);
        let paced = rank(&collector, protocol, 20_000, 2.0, &[]);
        let (burst, paced) = (report(burst.wait()), report(paced.wait()));
        assert_complete(&burst, protocol);
        assert_complete(&paced, protocol);
        let made = burst.produced + paced.produced;
        assert_eq!(
            collector.settled_spans(made, Duration::from_secs(10)),
            made,
            "{protocol}: the collector's count"
        );
    }
}

/// Waits until `collector` has received some spans: the rank is exporting.
fn exporting(collector: &Collector) {
    wait_until(Duration::from_secs(60), "the first spans", || {
        collector.received_spans() > 0
    });
}

fn signal(collector: &Collector, signal: libc::c_int) {
    // SAFETY: kill(2) on the collector process this test started.
    assert_eq!(
        unsafe { libc::kill(collector.pid() as libc::pid_t, signal) },
        0
    );
}

#[test]
fn a_collector_that_stalls_for_a_moment_loses_nothing() {
    for protocol in PROTOCOLS {
        let collector = Collector::start_counting();
        let load = rank(&collector, protocol, 10_000, 4.0, &[]);
        exporting(&collector);
        signal(&collector, libc::SIGSTOP);
        // The stall itself: 2 s, well inside the 10 s export timeout.
        std::thread::sleep(Duration::from_secs(2));
        signal(&collector, libc::SIGCONT);
        let load = report(load.wait());
        assert_complete(&load, protocol);
        assert_eq!(
            collector.settled_spans(load.produced, Duration::from_secs(10)),
            load.produced,
            "{protocol}: the collector's count"
        );
    }
}

#[test]
fn a_collector_that_restarts_is_retried_within_the_export_timeout() {
    for protocol in PROTOCOLS {
        let first = Collector::start_counting();
        let (grpc, http) = (first.grpc_port, first.http_port);
        let load = rank(&first, protocol, 10_000, 4.0, &[]);
        exporting(&first);
        // Down, as an orchestrator restarts it (SIGTERM: rotel finishes what it was answering):
        // connections are refused until the new process listens on the same ports, while the
        // rank goes on exporting.
        signal(&first, libc::SIGTERM);
        wait_until(Duration::from_secs(30), "the collector to exit", || {
            std::net::TcpStream::connect(("127.0.0.1", http)).is_err()
        });
        std::thread::sleep(Duration::from_millis(500));
        let second = Collector::start_counting_on(grpc, http);
        let load = report(load.wait());
        assert_complete(&load, protocol);
        let received = first.received_spans()
            + second.settled_spans(
                load.produced - first.received_spans(),
                Duration::from_secs(10),
            );
        assert_eq!(
            received, load.produced,
            "{protocol}: both collectors' counts"
        );
    }
}

#[test]
fn a_collector_stalled_past_the_timeout_is_bounded_and_counted() {
    for protocol in PROTOCOLS {
        let collector = Collector::start_counting();
        let load = rank(
            &collector,
            protocol,
            2_000,
            1.0,
            &[("OTEL_EXPORTER_OTLP_TIMEOUT", "1000")],
        );
        exporting(&collector);
        signal(&collector, libc::SIGSTOP);
        // Each export gives up after 1 s; shutdown (120 s allowed) ends long before the
        // child's bound of 300 s, with the collector still stopped.
        let load = report(load.wait());
        signal(&collector, libc::SIGCONT);
        assert!(load.dropped > 0, "{protocol}: nothing counted");
        let received = collector.settled_spans(load.produced, Duration::from_secs(5));
        // A request the collector read before it stopped may be both counted and delivered;
        // nothing is delivered twice and nothing is lost uncounted.
        assert!(received <= load.produced, "{protocol}: {received} received");
        assert!(
            received + load.dropped >= load.produced,
            "{protocol}: {received} received + {} dropped < {} made",
            load.dropped,
            load.produced
        );
        assert!(
            load.stderr.contains("failed"),
            "{protocol}: the failure line:\n{}",
            load.stderr
        );
    }
}
