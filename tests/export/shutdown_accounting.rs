//! Every span is exported or counted around shutdown, against a collector that hangs (served
//! on loopback by the test): the real trainer example, real signals and panics.
//!
//! * SIGTERM while `main` finishes: `main`'s own shutdown waits for the signal thread's flush,
//!   the drop report is printed, and the process dies by the signal (not status 0);
//! * a panic at step 1 with a hung HTTP collector reports what it lost;
//! * `OTEL_BSP_EXPORT_TIMEOUT` holds over HTTP: the blocking client does not hold the worker
//!   for its own (here 30 s) timeout, so every batch gets its attempt.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use nemo_lens_test_support::child::Child;
use nemo_lens_test_support::hung::HungCollector;
use nemo_lens_test_support::trainer::finished_steps;
use nemo_lens_test_support::wait::wait_until;

/// Generous bound for "did not hang".
const NEVER_HANGS: Duration = Duration::from_secs(90);

fn trainer(collector: &HungCollector, protocol: &str) -> Child {
    Child::example("trainer")
        .env("NEMO_LENS_ENABLED", "1")
        .env("NEMO_LENS_EXPORTER", "otlp")
        .env("NEMO_LENS_METRICS_ENABLED", "0")
        .env("NEMO_LENS_SPAN_GROUPS", "per_step")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint())
        // The client's own timeout is long: only nemo-lens's export timeout can cut it.
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "30000")
        .env("RUST_LOG", "trainer=debug")
        .timeout(NEVER_HANGS)
}

/// The spans the trainer reported as dropped on stderr (`nemo-lens: dropped N spans, …`).
fn reported_dropped_spans(stderr: &str) -> Option<u64> {
    let line = stderr.lines().find(|l| l.contains("nemo-lens: dropped"))?;
    let after = line.split("dropped ").nth(1)?;
    after.split(' ').next()?.parse().ok()
}

fn run_sigterm_while_main_finishes(protocol: &str) {
    let collector = HungCollector::start();
    // 40 steps of 25 ms: `main` finishes about a second after the signal, while the signal
    // thread's flush still waits (up to 5 s) on the hung collector.
    let mut child = trainer(&collector, protocol)
        .args([
            "--steps",
            "40",
            "--step-ms",
            "25",
            "--checkpoint-every",
            "0",
        ])
        .spawn();
    child.wait_for_output("3 finished steps", |_, stderr| finished_steps(stderr) >= 3);
    child.signal(libc::SIGTERM);
    let out = child.wait();
    let (status, stderr) = (out.status, String::from_utf8_lossy(&out.stderr));
    let steps = finished_steps(&stderr);
    assert!(steps > 3, "training went on during the flush: {stderr}");
    // The signal decides the exit status, even though `main` returned meanwhile.
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}\n{stderr}");
    // The flush was not cut short: its drop report was printed.
    let dropped = reported_dropped_spans(&stderr).unwrap_or_else(|| panic!("{stderr}"));
    assert!(dropped > 0, "{stderr}");
}

#[test]
fn sigterm_while_main_finishes_over_http_waits_for_the_flush_and_dies_by_the_signal() {
    run_sigterm_while_main_finishes("http/protobuf");
}

#[test]
fn sigterm_while_main_finishes_over_grpc_waits_for_the_flush_and_dies_by_the_signal() {
    run_sigterm_while_main_finishes("grpc");
}

#[test]
fn a_panic_at_step_one_with_a_hung_http_collector_reports_its_loss() {
    let collector = HungCollector::start();
    let out = trainer(&collector, "http/protobuf")
        .args(["--steps", "5", "--step-ms", "1", "--panic-at", "1"])
        .run();
    let (status, stderr) = (out.status, String::from_utf8_lossy(&out.stderr));
    assert_eq!(status.code(), Some(101), "{stderr}");
    assert!(stderr.contains("simulated failure in step 1"), "{stderr}");
    // forward_backward of step 1, and train_step and train truncated: three spans, all stuck
    // in the hung export, all reported.
    let dropped = reported_dropped_spans(&stderr).unwrap_or_else(|| panic!("{stderr}"));
    assert_eq!(dropped, 3, "{stderr}");
}

#[test]
fn the_export_timeout_holds_over_http_so_each_batch_gets_its_attempt() {
    let collector = HungCollector::start();
    let child = trainer(&collector, "http/protobuf")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env("OTEL_BSP_EXPORT_TIMEOUT", "300")
        .args(["--steps", "0", "--step-ms", "10", "--checkpoint-every", "0"])
        .spawn();
    // With the worker held by the first export for the client's 30 s, the collector would see
    // one attempt in that time; with the 300 ms export timeout enforced, a batch is tried
    // (and counted when it times out) every few hundred milliseconds. (A failure drops, and
    // so kills, the trainer.)
    wait_until(
        Duration::from_secs(20),
        "3 export attempts (fewer: the worker is held by a hung export)",
        || collector.connections() >= 3,
    );
    child.signal(libc::SIGTERM);
    let out = child.wait();
    let (status, stderr) = (out.status, String::from_utf8_lossy(&out.stderr));
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{stderr}");
    let dropped = reported_dropped_spans(&stderr).unwrap_or_else(|| panic!("{stderr}"));
    assert!(dropped > 0, "{stderr}");
}
