//! How the process dies: a panic, SIGTERM and SIGINT on the real trainer example, which
//! installs the panic hook and the signal handlers, and on the fixture program `panic_exit` (a telemetry in
//! a static). The spans it finished are exported, and the spans still open when the process
//! ends arrive truncated; a panic the program catches leaves telemetry running.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

use nemo_lens_test_support::child::{self, Child};
use nemo_lens_test_support::console::{self, all_named as by_name, truncated, truncation_reason};
use nemo_lens_test_support::trainer::finished_steps;

fn command(out: &Path) -> Child {
    Child::example("trainer")
        .env("NEMO_LENS_ENABLED", "1")
        .env("NEMO_LENS_EXPORTER", "console")
        .env("NEMO_LENS_SPAN_GROUPS", "per_step")
        .env("NEMO_LENS_CONSOLE_PATH", out)
        .env("RUST_LOG", "trainer=debug")
}

/// An uncaught panic on the main thread ends the process (status 101) and the telemetry with
/// it: the spans the panic unwinds through end there, the innermost with the panic, the outer
/// one (`train`) `ERROR` with the panic's message, and the handle, dropped while `main`
/// unwinds, flushes everything.
#[test]
fn an_uncaught_panic_records_the_panic_and_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("spans.jsonl");
    let output = command(&out)
        .args(["--steps", "10", "--step-ms", "1", "--panic-at", "3"])
        .run();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(101), "{stderr}");
    // The previous hook (the default one, printing the message) still ran.
    assert!(stderr.contains("simulated failure in step 3"), "{stderr}");

    let spans = console::read(&out);
    let steps = by_name(&spans, "train_step");
    assert_eq!(steps.len(), 3, "steps 1 and 2 finished, step 3 unwound");
    let crashed = steps.iter().find(|s| s["attributes"]["step"] == 3).unwrap();
    assert!(!truncated(crashed), "ended by the unwinding: {crashed}");
    assert_eq!(crashed["status"]["status_code"], "ERROR");
    let exception = crashed["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "exception")
        .expect("exception event on the innermost span");
    assert_eq!(exception["attributes"]["exception.type"], "panic");
    let message = exception["attributes"]["exception.message"]
        .as_str()
        .unwrap();
    assert!(
        message.contains("simulated failure in step 3") && message.contains("trainer.rs"),
        "{message}"
    );
    // forward_backward of step 3 had ended before the panic: exported normally.
    assert_eq!(by_name(&spans, "forward_backward").len(), 3);
    assert!(spans.iter().all(|s| !truncated(s)), "nothing was left open");
    let train = by_name(&spans, "train");
    assert_eq!(train.len(), 1, "the run span, unwound, is flushed");
    assert!(
        train[0]["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["name"] != "exception"),
        "the exception is on the innermost span only"
    );
    // The panic unwound through the run span too: ERROR, described by the panic.
    assert_eq!(train[0]["status"]["status_code"], "ERROR", "{}", train[0]);
    let description = train[0]["status"]["description"].as_str().unwrap();
    assert!(
        description.contains("simulated failure in step 3") && description.contains("trainer.rs"),
        "{description}"
    );
    assert_eq!(
        crashed["status"]["description"],
        train[0]["status"]["description"]
    );
    // Spans that had ended before the panic are not touched.
    for s in by_name(&spans, "forward_backward") {
        assert_eq!(s["status"]["status_code"], "UNSET", "{s}");
    }
}

/// The fixture program `panic_exit` (telemetry in a static, a worker thread with an open span) with
/// `args`: its exit code, stderr and spans.
fn panic_exit(args: &[&str]) -> (Option<i32>, String, Vec<serde_json::Value>) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("spans.jsonl");
    let output = Child::fixture("panic_exit")
        .env("NEMO_LENS_ENABLED", "1")
        .env("NEMO_LENS_EXPORTER", "console")
        .env("NEMO_LENS_METRICS_ENABLED", "0")
        .env("NEMO_LENS_CONSOLE_PATH", &out)
        .args(args)
        .run();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code(), stderr, console::read(&out))
}

/// A telemetry nothing drops (a static) is ended at `exit` after an uncaught main-thread
/// panic: the span still open on another thread arrives truncated, the rest flushed.
#[test]
fn an_uncaught_panic_ends_a_static_telemetry_at_exit_truncating_what_is_open() {
    let (code, stderr, spans) = panic_exit(&[]);
    assert_eq!(code, Some(101), "{stderr}");
    assert_eq!(by_name(&spans, "before").len(), 1, "{stderr}");
    let step = by_name(&spans, "step");
    assert_eq!(step.len(), 1, "{stderr}");
    assert_eq!(step[0]["status"]["status_code"], "ERROR");
    assert!(!truncated(step[0]));
    let prefetch = by_name(&spans, "prefetch");
    assert_eq!(prefetch.len(), 1, "the worker's open span: {stderr}");
    assert_eq!(truncation_reason(prefetch[0]), Some("process panicked"));
    assert!(by_name(&spans, "after").is_empty());
}

/// The same program catching the panic goes on exporting, and its own shutdown truncates the
/// worker's span as any shutdown does.
#[test]
fn a_caught_panic_in_a_program_with_a_static_telemetry_leaves_it_running() {
    let (code, stderr, spans) = panic_exit(&["--catch"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(by_name(&spans, "step").len(), 1, "{stderr}");
    assert_eq!(by_name(&spans, "after").len(), 1, "{stderr}");
    let prefetch = by_name(&spans, "prefetch");
    assert_eq!(prefetch.len(), 1, "{stderr}");
    assert_eq!(
        truncation_reason(prefetch[0]),
        Some("still open at telemetry shutdown")
    );
}

/// A panic on the main thread that the program catches (a job runner, a server, a test
/// harness) leaves telemetry running: the panic is recorded on its span, and the hundred steps
/// after it are exported as usual; nothing is truncated.
#[test]
fn a_caught_main_thread_panic_leaves_telemetry_running() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("spans.jsonl");
    let output = command(&out)
        .args([
            "--steps",
            "103",
            "--step-ms",
            "0",
            "--checkpoint-every",
            "0",
        ])
        .args(["--panic-at", "3", "--catch-panics"])
        .run();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("simulated failure in step 3"), "{stderr}");
    assert!(!stderr.contains("dropped"), "{stderr}");

    let spans = console::read(&out);
    let steps = by_name(&spans, "train_step");
    assert_eq!(
        steps.len(),
        103,
        "every step, the hundred after the panic included"
    );
    assert!(spans.iter().all(|s| !truncated(s)), "nothing truncated");
    let crashed = steps.iter().find(|s| s["attributes"]["step"] == 3).unwrap();
    assert_eq!(crashed["status"]["status_code"], "ERROR");
    assert!(
        crashed["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "exception" && e["attributes"]["exception.type"] == "panic"),
        "{crashed}"
    );
    for s in steps.iter().filter(|s| s["attributes"]["step"] != 3) {
        assert_ne!(s["status"]["status_code"], "ERROR", "{s}");
    }
    // The panic was caught inside the run span: it never unwound through it.
    let train = by_name(&spans, "train");
    assert_eq!(train.len(), 1);
    assert_eq!(train[0]["status"]["status_code"], "UNSET", "{}", train[0]);
}

/// Starts a trainer that runs until killed, waits until it has finished `steps` steps (it logs
/// each one on stderr), sends `signal`, and returns its exit status and the number of steps it
/// logged in all (it goes on stepping while it flushes).
fn signal_running_trainer(out: &Path, signal: libc::c_int, steps: usize) -> (ExitStatus, usize) {
    let mut child = command(out)
        .args(["--steps", "0", "--step-ms", "3", "--checkpoint-every", "0"])
        .timeout(std::time::Duration::from_secs(120))
        .spawn();
    child.wait_for_output(&format!("{steps} finished steps"), |_, stderr| {
        finished_steps(stderr) >= steps
    });
    child.signal(signal);
    let output = child.wait();
    (
        output.status,
        finished_steps(&String::from_utf8_lossy(&output.stderr)),
    )
}

fn check_signal_run(signal: libc::c_int, reason: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("spans.jsonl");
    let before_signal = 3;
    let (status, logged) = signal_running_trainer(&out, signal, before_signal);
    // Died by the signal, as without the handler (a shell shows 128 + signo).
    assert_eq!(status.signal(), Some(signal), "{status:?}");
    assert_eq!(status.code(), None);

    let spans = console::read(&out);
    let train = by_name(&spans, "train");
    assert_eq!(train.len(), 1, "the run span arrives");
    assert!(truncated(train[0]));
    assert_eq!(truncation_reason(train[0]), Some(reason));
    // The steps finished before the signal were all still queued (the default schedule delay
    // is 5 s) and all arrive, not truncated; the step in flight (if any) is truncated. The
    // trainer keeps stepping while it flushes: a step may end just before the end (exported,
    // its log line lost) or after the flush (logged, not exported: too late for the queue).
    let steps = by_name(&spans, "train_step");
    let finished = steps.iter().filter(|s| !truncated(s)).count();
    assert!(
        finished >= before_signal,
        "{finished} finished steps exported"
    );
    assert!(
        finished <= logged + 1,
        "{finished} exported, {logged} logged"
    );
    assert!(steps.len() - finished <= 1);
    for s in steps.iter().filter(|s| truncated(s)) {
        assert_eq!(truncation_reason(s), Some(reason));
        assert_eq!(s["parent_id"], train[0]["context"]["span_id"]);
    }
}

#[test]
fn sigterm_truncates_open_spans_flushes_and_dies_by_the_signal() {
    check_signal_run(libc::SIGTERM, "process received SIGTERM");
}

#[test]
fn sigint_truncates_open_spans_flushes_and_dies_by_the_signal() {
    check_signal_run(libc::SIGINT, "process received SIGINT");
}

/// A panic on a thread other than `main` may not end the process (here it is joined and the
/// run goes on): the hook records it on that thread's innermost span, which then ends normally
/// while unwinding, and nothing else is truncated or shut down. In a process of its own: the
/// panic hook is process-wide.
#[test]
fn a_panic_on_a_worker_thread_is_recorded_without_ending_the_run() {
    child::run_alone(worker_thread_panic);
}

fn worker_thread_panic() {
    use nemo_lens::testing::SpanCapture;
    let capture = SpanCapture::with_config(
        nemo_lens::LensConfig::default().with(|c| c.groups.span_groups = "default".into()),
    )
    .unwrap();
    capture.telemetry().install_panic_hook();
    let subscriber = capture.subscriber();
    let dispatch = tracing::Dispatch::new(subscriber);
    let run = tracing::dispatcher::with_default(&dispatch, || tracing::info_span!("run"));
    let worker = {
        let dispatch = dispatch.clone();
        let run = run.clone();
        std::thread::Builder::new()
            .name("loader".into())
            .spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    let _run = run.enter();
                    let _load = tracing::info_span!("load_batch").entered();
                    tracing::info_span!(
                        "unrecorded_by_lens",
                        nemo.group.optimizer = tracing::field::Empty
                    )
                    .in_scope(|| panic!("corrupt shard 7"));
                })
            })
            .unwrap()
    };
    assert!(worker.join().is_err());
    assert_eq!(
        capture.telemetry().stats().open_spans,
        1,
        "the run span is still open"
    );
    tracing::dispatcher::with_default(&dispatch, || {
        run.in_scope(|| tracing::info_span!("after").in_scope(|| {}));
    });
    drop(run);
    let load = capture.span("load_batch").expect("exported when unwound");
    let exception = load
        .events
        .iter()
        .find(|e| e.name == "exception")
        .expect("exception event");
    let message = exception
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == "exception.message")
        .unwrap()
        .value
        .to_string();
    assert!(message.contains("corrupt shard 7"), "{message}");
    assert!(SpanCapture::attribute(&load, "nemo.span.truncated").is_none());
    assert!(matches!(
        load.status,
        opentelemetry::trace::Status::Error { .. }
    ));
    let run = capture.span("run").unwrap();
    assert!(run.events.iter().all(|e| e.name != "exception"));
    assert!(SpanCapture::attribute(&run, "nemo.span.truncated").is_none());
    assert!(capture.span("after").is_some(), "still recording");
}
