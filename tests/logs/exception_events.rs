//! `exception` span events as Python's `record_exception` writes them: `exception.type`,
//! `exception.message`, `exception.stacktrace` (only where a backtrace is captured) and
//! `exception.escaped`, in that order, all strings, compared with the exception event of the
//! Python fixture (`tests/fixtures/python-lens-rank3.jsonl`).
//!
//! Every scenario is a real process, `examples/failing_step` (an `ERROR` event, an
//! `#[instrument(err)]` and an `#[instrument(err(Debug))]` function returning `Err`, and with
//! `--panic` a panic), writing console JSONL to a file: which exceptions carry a backtrace
//! depends on `RUST_BACKTRACE` (read once per process: panics) and on `--error-backtraces`
//! (`TelemetryBuilder::error_backtraces(true)`: every exception). Build the examples first when
//! running this file alone (`cargo build --examples --all-features`).

use std::process::ExitStatus;

use serde_json::Value;

use nemo_lens_test_support::child::Child;
use nemo_lens_test_support::console::{self, keys, named as span};

/// The exception event of Python's `bad_step` span, and that span.
fn python_exception() -> (Value, Value) {
    let text = include_str!("../fixtures/python-lens-rank3.jsonl");
    let span: Value = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|l| l["name"] == "bad_step")
        .expect("bad_step in the fixture");
    let event = span["events"][0].clone();
    assert_eq!(event["name"], "exception");
    (event, span)
}

/// How the child process captures backtraces.
enum Backtrace {
    /// Neither `RUST_BACKTRACE` nor `RUST_LIB_BACKTRACE` set.
    Unset,
    /// `RUST_BACKTRACE=<value>`.
    Set(&'static str),
}

/// Every `exception` event the run wrote, in the order of its spans.
fn all_exceptions(spans: &[Value]) -> Vec<&Value> {
    spans.iter().flat_map(exceptions).collect()
}

/// Checks that `attributes` hold a stack trace that starts at the user's code in
/// `examples/failing_step.rs` and goes down to `main`, with no frame of nemo-lens's own.
fn assert_user_stacktrace(what: &str, attributes: &Value) {
    let trace = attributes["exception.stacktrace"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no stacktrace in {attributes}"));
    let first_frame: String = trace.lines().take(2).collect::<Vec<_>>().join("\n");
    assert!(
        first_frame.contains("examples/failing_step.rs:"),
        "{what}: the first frame is the user's code, not nemo-lens's: {first_frame}"
    );
    assert!(
        !trace.contains("nemo_lens::"),
        "{what}: no frame of nemo-lens's own: {trace}"
    );
    assert!(trace.contains("main"), "{what}: down to main: {trace}");
}

/// Runs `failing_step` (with `args`) and returns its exit status and its spans by name.
fn run(backtrace: Backtrace, args: &[&str]) -> (ExitStatus, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Child::example("failing_step")
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE");
    if let Backtrace::Set(value) = backtrace {
        child = child.env("RUST_BACKTRACE", value);
    }
    let out = child
        .envs([
            ("NEMO_LENS_ENABLED", "1"),
            ("NEMO_LENS_EXPORTER", "console"),
            ("NEMO_LENS_METRICS_ENABLED", "0"),
        ])
        .env(
            "NEMO_LENS_CONSOLE_PATH",
            dir.path().join("rank{rank}.jsonl"),
        )
        .args(args)
        .run();
    (out.status, console::spans(console::lines(dir.path(), 0)))
}

/// The `exception` events of `span`.
fn exceptions(span: &Value) -> Vec<&Value> {
    span["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "exception")
        .collect()
}

/// The only `exception` event of `span`, its attributes.
fn exception<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    let found = exceptions(span(spans, name));
    assert_eq!(found.len(), 1, "{name}: {found:#?}");
    &found[0]["attributes"]
}

#[test]
fn an_error_event_writes_pythons_exception_attributes_in_pythons_order() {
    let (py, py_span) = python_exception();
    let (status, spans) = run(Backtrace::Unset, &[]);
    assert!(status.success(), "{status}");
    let step = span(&spans, "train_step");
    let event = exceptions(step)[0];
    assert_eq!(keys(event), keys(&py), "the event's own keys");
    let attributes = &event["attributes"];
    // No backtrace captured: no stacktrace (never a fake one), the other keys as Python's.
    let expected: Vec<&str> = keys(&py["attributes"])
        .into_iter()
        .filter(|k| *k != "exception.stacktrace")
        .collect();
    assert_eq!(
        keys(attributes),
        expected,
        "explicit exception.type is not repeated as an attribute, the message is not an attribute"
    );
    for key in &expected {
        assert!(
            attributes[key].is_string() && py["attributes"][key].is_string(),
            "{key}: a string in both"
        );
    }
    assert_eq!(attributes["exception.type"], "ValueError");
    assert_eq!(
        attributes["exception.message"],
        py["attributes"]["exception.message"]
    );
    assert_eq!(
        attributes["exception.escaped"],
        py["attributes"]["exception.escaped"]
    );
    assert_eq!(attributes["exception.escaped"], "False");
    assert_eq!(step["status"], py_span["status"], "ERROR with the message");
}

#[test]
fn instrument_err_records_the_display_text_with_type_error() {
    let (status, spans) = run(Backtrace::Unset, &[]);
    assert!(status.success(), "{status}");
    let attributes = exception(&spans, "load_shard");
    assert_eq!(
        keys(attributes),
        ["exception.type", "exception.message", "exception.escaped"],
        "the error is the exception: no separate `error` attribute"
    );
    assert_eq!(attributes["exception.type"], "Error");
    assert_eq!(attributes["exception.message"], "shard 7 is corrupt");
    assert_eq!(attributes["exception.escaped"], "False");
    let load = span(&spans, "load_shard");
    assert_eq!(load["status"]["status_code"], "ERROR");
    assert_eq!(load["status"]["description"], "shard 7 is corrupt");
}

#[test]
fn instrument_err_debug_names_the_type_from_the_debug_text() {
    let (status, spans) = run(Backtrace::Unset, &[]);
    assert!(status.success(), "{status}");
    let attributes = exception(&spans, "read_checkpoint");
    assert_eq!(
        keys(attributes),
        ["exception.type", "exception.message", "exception.escaped"]
    );
    // `std::io::Error` from the OS: `Os { code: 2, kind: NotFound, message: ".." }`.
    assert_eq!(attributes["exception.type"], "Os");
    let message = attributes["exception.message"].as_str().unwrap();
    assert!(
        message.starts_with("Os {") && message.contains("NotFound"),
        "{message}"
    );
}

#[test]
fn a_panic_is_an_escaped_exception_of_type_panic() {
    let (status, spans) = run(Backtrace::Unset, &["--panic"]);
    assert_eq!(status.code(), Some(101), "the panic still ends the process");
    let step = span(&spans, "train_step");
    let found = exceptions(step);
    assert_eq!(found.len(), 2, "the ERROR event's, then the panic's");
    let panic = &found[1]["attributes"];
    assert_eq!(
        keys(panic),
        ["exception.type", "exception.message", "exception.escaped"]
    );
    assert_eq!(panic["exception.type"], "panic");
    assert!(
        panic["exception.message"]
            .as_str()
            .unwrap()
            .starts_with("simulated failure (at examples/failing_step.rs:"),
        "{panic}"
    );
    assert_eq!(
        panic["exception.escaped"], "True",
        "it unwinds out of the span"
    );
    assert_eq!(found[0]["attributes"]["exception.escaped"], "False");
}

#[test]
fn rust_backtrace_gives_panics_a_stacktrace_and_error_events_none() {
    // `RUST_BACKTRACE` set but empty enables backtraces as `1` does.
    for value in ["1", ""] {
        let (status, spans) = run(Backtrace::Set(value), &["--panic"]);
        assert_eq!(status.code(), Some(101), "RUST_BACKTRACE={value:?}");
        let step = span(&spans, "train_step");
        let found = exceptions(step);
        assert_eq!(found.len(), 2, "the ERROR event's, then the panic's");
        assert_eq!(
            keys(&found[1]["attributes"]),
            [
                "exception.type",
                "exception.message",
                "exception.stacktrace",
                "exception.escaped"
            ],
            "the panic, RUST_BACKTRACE={value:?}"
        );
        assert_user_stacktrace("panic", &found[1]["attributes"]);
        // Error events are not panics: no backtrace unless the application asks for them.
        let errors: Vec<&Value> = all_exceptions(&spans)
            .into_iter()
            .filter(|e| e["attributes"]["exception.escaped"] == "False")
            .collect();
        assert_eq!(errors.len(), 3, "ERROR event, err, err(Debug)");
        for event in errors {
            assert!(
                event["attributes"].get("exception.stacktrace").is_none(),
                "RUST_BACKTRACE={value:?}: {event}"
            );
        }
    }
}

#[test]
fn error_backtraces_give_every_exception_a_stacktrace_from_the_users_frame() {
    let (py, _) = python_exception();
    for backtrace in [Backtrace::Unset, Backtrace::Set("1"), Backtrace::Set("0")] {
        let (status, spans) = run(backtrace, &["--panic", "--error-backtraces"]);
        assert_eq!(status.code(), Some(101));
        let step = span(&spans, "train_step");
        let found = exceptions(step);
        assert_eq!(found.len(), 2);
        let error = &found[0]["attributes"];
        assert_eq!(
            keys(error),
            keys(&py["attributes"]),
            "exactly Python's keys, in Python's order"
        );
        assert_user_stacktrace("error event", error);
        assert_user_stacktrace("panic", &found[1]["attributes"]);
        // The functions of `#[instrument(err)]`: their own frame first.
        for name in ["load_shard", "read_checkpoint"] {
            let attributes = exception(&spans, name);
            assert_eq!(
                keys(attributes),
                [
                    "exception.type",
                    "exception.message",
                    "exception.stacktrace",
                    "exception.escaped"
                ]
            );
            let trace = attributes["exception.stacktrace"].as_str().unwrap();
            assert!(trace.lines().next().unwrap().contains(name), "{trace}");
        }
    }
}

#[test]
fn without_a_captured_backtrace_there_is_no_stacktrace() {
    for backtrace in [Backtrace::Unset, Backtrace::Set("0")] {
        let (status, spans) = run(backtrace, &["--panic"]);
        assert_eq!(status.code(), Some(101));
        let all = all_exceptions(&spans);
        assert_eq!(
            all.len(),
            4,
            "ERROR event, err, err(Debug), panic: {spans:#?}"
        );
        for event in all {
            assert!(
                event["attributes"].get("exception.stacktrace").is_none(),
                "{event}"
            );
        }
    }
}
