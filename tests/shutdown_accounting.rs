//! Every span is exported or counted around shutdown, against a collector that hangs (served
//! on loopback by the test): the real trainer example, real signals and panics.
//!
//! * SIGTERM while `main` finishes: `main`'s own shutdown waits for the signal thread's flush,
//!   the drop report is printed, and the process dies by the signal (not status 0);
//! * a panic at step 1 with a hung HTTP collector reports what it lost;
//! * `OTEL_BSP_EXPORT_TIMEOUT` holds over HTTP: the blocking client does not hold the worker
//!   for its own (here 30 s) timeout, so every batch gets its attempt.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;

use common::hung::HungCollector;

/// Generous bound for "did not hang".
const NEVER_HANGS: Duration = Duration::from_secs(90);

fn trainer(collector: &HungCollector, protocol: &str) -> Command {
    let mut cmd = Command::new(common::example("trainer"));
    common::clear_telemetry_env(&mut cmd);
    cmd.env("NEMO_LENS_ENABLED", "1")
        .env("NEMO_LENS_EXPORTER", "otlp")
        .env("NEMO_LENS_METRICS_ENABLED", "0")
        .env("NEMO_LENS_SPAN_GROUPS", "per_step")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint())
        // The client's own timeout is long: only nemo-lens's export timeout can cut it.
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "30000")
        .env("RUST_LOG", "trainer=debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// Reads the child's stderr lines on a thread (so it never blocks on a full pipe).
fn stderr_lines(child: &mut Child) -> (mpsc::Receiver<String>, std::thread::JoinHandle<()>) {
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    (rx, reader)
}

fn wait_for_steps(child: &mut Child, rx: &mpsc::Receiver<String>, steps: usize) -> Vec<String> {
    let mut seen = 0;
    let mut lines = Vec::new();
    while seen < steps {
        match rx.recv_timeout(NEVER_HANGS) {
            Ok(line) => {
                seen += usize::from(line.contains("step finished"));
                lines.push(line);
            }
            Err(e) => {
                let _ = child.kill();
                panic!("the trainer logged {seen} steps, then {e:?}: {lines:?}");
            }
        }
    }
    lines
}

fn wait_exit(child: &mut Child) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > NEVER_HANGS {
            let _ = child.kill();
            panic!("the trainer did not exit within {NEVER_HANGS:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn signal(child: &Child, signal: libc::c_int) {
    // SAFETY: signals our own child.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
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
        .spawn()
        .unwrap();
    let (rx, reader) = stderr_lines(&mut child);
    let mut lines = wait_for_steps(&mut child, &rx, 3);
    signal(&child, libc::SIGTERM);
    let status = wait_exit(&mut child);
    reader.join().unwrap();
    lines.extend(rx.try_iter());
    let stderr = lines.join("\n");
    let steps = lines.iter().filter(|l| l.contains("step finished")).count();
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
    let mut child = trainer(&collector, "http/protobuf")
        .args(["--steps", "5", "--step-ms", "1", "--panic-at", "1"])
        .spawn()
        .unwrap();
    let (rx, reader) = stderr_lines(&mut child);
    let status = wait_exit(&mut child);
    reader.join().unwrap();
    let stderr = rx.try_iter().collect::<Vec<_>>().join("\n");
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
    let mut child = trainer(&collector, "http/protobuf")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env("OTEL_BSP_EXPORT_TIMEOUT", "300")
        .args(["--steps", "0", "--step-ms", "10", "--checkpoint-every", "0"])
        .spawn()
        .unwrap();
    let (rx, reader) = stderr_lines(&mut child);
    // With the worker held by the first export for the client's 30 s, the collector would see
    // one attempt in that time; with the 300 ms export timeout enforced, a batch is tried
    // (and counted when it times out) every few hundred milliseconds.
    let start = Instant::now();
    while collector.connections() < 3 {
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!(
                "{} export attempts in 20 s: the worker is held by a hung export",
                collector.connections()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(&child, libc::SIGTERM);
    let status = wait_exit(&mut child);
    reader.join().unwrap();
    let stderr = rx.try_iter().collect::<Vec<_>>().join("\n");
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{stderr}");
    let dropped = reported_dropped_spans(&stderr).unwrap_or_else(|| panic!("{stderr}"));
    assert!(dropped > 0, "{stderr}");
}
