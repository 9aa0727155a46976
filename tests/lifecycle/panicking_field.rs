//! A field whose `Display` panics, recorded on an event or with `span.record` inside a lens
//! span, is the application's own panic: as with plain `fmt`, the process exits 101
//! when the main thread panics (never hangs, never aborts with 134), with or without the
//! nemo-lens panic hook, with or without a `fmt` layer formatting the same fields; a panic on a
//! joined worker thread is survived and the spans are exported. Each case runs the real
//! `panicking_field` example in its own process, killed (and failed) if it hangs.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use serde_json::Value;

use nemo_lens_test_support::child::Child;
use nemo_lens_test_support::console::{self, names};

/// Far above the time a run takes (well under a second), far below "forever".
const HANG_BOUND: Duration = Duration::from_secs(60);

struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    spans: Vec<Value>,
}

fn run(place: &str, thread: &str, hook: &str, layers: &str) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("spans.jsonl");
    // A hang kills the process and fails the test, naming the example's arguments.
    let output = Child::fixture("panicking_field")
        .args([place, thread, hook, layers])
        .arg(&out)
        .current_dir(dir.path())
        .timeout(HANG_BOUND)
        .run();
    Run {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        spans: console::read_if_any(&out),
    }
}

fn check_main_thread(place: &str, hook: &str, layers: &str) {
    let r = run(place, "main", hook, layers);
    let case = format!("{place}/main/{hook}/{layers}");
    assert_eq!(
        r.status.signal(),
        None,
        "{case}: killed by a signal (abort?): {}",
        r.stderr
    );
    assert_eq!(r.status.code(), Some(101), "{case}: {}", r.stderr);
    assert!(
        r.stderr.contains("Display of Boom panicked"),
        "{case}: the application's panic message is printed: {}",
        r.stderr
    );
    assert!(!r.stdout.contains("survived"), "{case}");
    if hook == "hook" {
        // The hook flushed the spans open at the panic, as truncated.
        let names = names(&r.spans);
        assert!(
            names.contains(&"boom_span") && names.contains(&"outer"),
            "{case}: the open spans are flushed by the hook: {names:?}"
        );
    }
}

fn check_worker_thread(place: &str, hook: &str, layers: &str) {
    let r = run(place, "worker", hook, layers);
    let case = format!("{place}/worker/{hook}/{layers}");
    assert_eq!(r.status.signal(), None, "{case}: {}", r.stderr);
    assert_eq!(r.status.code(), Some(0), "{case}: {}", r.stderr);
    assert!(r.stdout.contains("survived"), "{case}: {}", r.stderr);
    assert!(r.stderr.contains("Display of Boom panicked"), "{case}");
    let names = names(&r.spans);
    for name in ["boom_span", "after_the_panic", "outer"] {
        assert!(names.contains(&name), "{case}: {name} exported: {names:?}");
    }
    let boom = r.spans.iter().find(|s| s["name"] == "boom_span").unwrap();
    assert!(
        boom["attributes"]["nemo.span.truncated"].is_null(),
        "{case}: the unwound span ended normally: {boom}"
    );
    let events: Vec<&str> = boom["events"]
        .as_array()
        .map(|e| e.iter().filter_map(|e| e["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        events.contains(&"before the panic"),
        "{case}: events before the panic are kept: {events:?}"
    );
}

#[test]
fn a_main_thread_panic_in_an_event_field_exits_101_with_and_without_the_hook() {
    for hook in ["nohook", "hook"] {
        check_main_thread("event", hook, "lens");
    }
}

#[test]
fn a_main_thread_panic_in_a_recorded_field_exits_101_with_and_without_the_hook() {
    for hook in ["nohook", "hook"] {
        check_main_thread("record", hook, "lens");
    }
}

#[test]
fn a_main_thread_panic_beside_fmt_exits_101() {
    // `fmt` formats recorded fields while it holds the span's registry lock: the hook must not
    // wait for that lock, and nothing may touch it once it is poisoned.
    for place in ["event", "record"] {
        for hook in ["nohook", "hook"] {
            check_main_thread(place, hook, "fmt");
        }
    }
}

#[test]
fn a_worker_thread_panic_in_a_field_is_survived_and_spans_are_exported() {
    for place in ["event", "record"] {
        for hook in ["nohook", "hook"] {
            check_worker_thread(place, hook, "lens");
        }
    }
}

#[test]
fn a_worker_thread_panic_beside_fmt_is_survived() {
    for place in ["event", "record"] {
        check_worker_thread(place, "hook", "fmt");
    }
}
