//! A field whose `Display` panics, recorded on an event or with `span.record` inside a lens
//! span, is the application's own panic (issue 15): as with plain `fmt`, the process exits 101
//! when the main thread panics (never hangs, never aborts with 134), with or without the
//! nemo-lens panic hook, with or without a `fmt` layer formatting the same fields; a panic on a
//! joined worker thread is survived and the spans are exported. Each case runs the real
//! `panicking_field` example in its own process, killed (and failed) if it hangs.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;

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
    let mut cmd = Command::new(common::example("panicking_field"));
    common::clear_telemetry_env(&mut cmd);
    let mut child = cmd
        .args([place, thread, hook, layers])
        .arg(&out)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > HANG_BOUND {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{place}/{thread}/{hook}/{layers}: hung for {HANG_BOUND:?} (killed)");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = child.wait_with_output().unwrap();
    Run {
        status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        spans: spans_in(&out),
    }
}

fn spans_in(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn names(spans: &[Value]) -> Vec<&str> {
    spans.iter().filter_map(|s| s["name"].as_str()).collect()
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
