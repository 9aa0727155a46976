//! Fork without exec (data-loader workers): the child inherits the parent's telemetry, which
//! must be inert there (no export of the parent's spans, no wait for worker threads that did not
//! survive the fork), and the child may set up telemetry of its own.
//!
//! Each scenario runs in a fresh, single-threaded copy of this test binary (`nemo_lens_test_support::child`),
//! which then calls `libc::fork()` for real. The child reports through a file and leaves with
//! `_exit`, so the test harness never runs twice.

use std::path::Path;
use std::time::Duration;

use nemo_lens::{LensError, Telemetry};
use tracing_subscriber::prelude::*;

use nemo_lens_test_support::child;
use nemo_lens_test_support::console::{config_to as console_to, names, read_if_any as spans_in};

/// Forks: `None` in the child, the child's pid in the parent.
fn fork() -> Option<libc::pid_t> {
    // SAFETY: this process is single-threaded (the scenario runs alone in a fresh process,
    // `--test-threads=1`), or the scenario tests what the child does with the threads it lost.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    (pid > 0).then_some(pid)
}

/// Ends the child: exit status 0 on `Ok`, else the error goes to `report` and the status is 1.
/// `_exit` skips the parent's atexit handlers and the test harness.
fn finish_child(report: &Path, child: impl FnOnce() -> Result<(), String>) -> ! {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child))
        .unwrap_or_else(|_| Err("the child panicked".into()));
    let code = match outcome {
        Ok(()) => 0,
        Err(message) => {
            let _ = std::fs::write(report, message);
            1
        }
    };
    // SAFETY: ends this (child) process at once.
    unsafe { libc::_exit(code) }
}

/// The wait status of the forked child `pid`, once it has ended (at most a minute: a hang kills
/// it and fails the test, `what` naming what it should have done).
fn wait_status(pid: libc::pid_t, what: &str) -> libc::c_int {
    let ended = child::try_wait_pid(pid, Duration::from_secs(60));
    ended.unwrap_or_else(|| {
        // SAFETY: kills our own child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        panic!("the forked child hung instead of {what}");
    })
}

/// Waits for the child (at most a minute: a hang fails the test) and asserts it succeeded.
fn wait_child(pid: libc::pid_t, report: &Path) {
    let status = wait_status(pid, "exiting");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child failed (status {status:#x}): {}",
        std::fs::read_to_string(report).unwrap_or_default()
    );
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok { Ok(()) } else { Err(what()) }
}

/// The parent's telemetry in a child: spans the child starts or ends are not exported through
/// it, its open spans are not truncated there, and flush/shutdown/drop return at once (`Ok`,
/// where the inherited batch processor would time out waiting for its dead worker thread).
fn inherited_telemetry_is_inert_in_the_child(synchronous: bool, dir: &Path) {
    let out = dir.join("parent.jsonl");
    let report = dir.join("child-report.txt");
    let telemetry = Telemetry::builder(console_to(&out))
        .export_mode(if synchronous {
            nemo_lens::ExportMode::Synchronous
        } else {
            nemo_lens::ExportMode::Batched
        })
        .build()
        .unwrap();
    let _sub = tracing_subscriber::registry()
        .with(telemetry.layer())
        .set_default();
    let entered = tracing::info_span!("parent_outer").entered();
    tracing::info_span!("parent_before_fork").in_scope(|| {});
    assert_eq!(telemetry.stats().open_spans, 1);

    let Some(pid) = fork() else {
        finish_child(&report, || {
            check(telemetry.stats().inherited_from_parent, || {
                "the child does not see its telemetry as inherited".into()
            })?;
            check(telemetry.stats().open_spans == 0, || {
                "the parent's open spans are visible in the child".into()
            })?;
            tracing::info_span!("child_span").in_scope(|| tracing::info!("child event"));
            telemetry
                .force_flush()
                .map_err(|e| format!("force_flush in the child: {e}"))?;
            // Ends the parent's span in the child (it must not be exported from here).
            drop(entered);
            telemetry
                .shutdown(Duration::from_secs(10))
                .map_err(|e| format!("shutdown in the child: {e}"))?;
            drop(telemetry);
            Ok(())
        })
    };
    wait_child(pid, &report);

    assert!(!telemetry.stats().inherited_from_parent);
    assert_eq!(
        telemetry.stats().open_spans,
        1,
        "the parent's span is still open"
    );
    drop(entered);
    telemetry.shutdown(Duration::from_secs(10)).unwrap();
    let spans = spans_in(&out);
    assert_eq!(
        names(&spans),
        ["parent_before_fork", "parent_outer"],
        "each parent span exactly once, nothing from the child"
    );
    assert!(
        spans[1]["attributes"]["nemo.span.truncated"].is_null(),
        "ended normally"
    );
}

#[test]
fn inherited_synchronous_telemetry_exports_nothing_from_the_child() {
    child::run_in_child_dir(|dir| inherited_telemetry_is_inert_in_the_child(true, dir));
}

#[test]
fn inherited_batch_telemetry_shuts_down_at_once_in_the_child() {
    child::run_in_child_dir(|dir| inherited_telemetry_is_inert_in_the_child(false, dir));
}

/// A child sets up telemetry of its own (the double-init guard allows it after fork, and only
/// there), and it records with fresh IDs into its own output.
#[test]
fn a_forked_child_sets_up_its_own_telemetry() {
    child::run_in_child_dir(own_telemetry_in_a_forked_child);
}

fn own_telemetry_in_a_forked_child(dir: &Path) {
    let parent_out = dir.join("parent.jsonl");
    let child_out = dir.join("child.jsonl");
    let report = dir.join("child-report.txt");
    let telemetry = Telemetry::builder(console_to(&parent_out))
        .export_mode(nemo_lens::ExportMode::Synchronous)
        .build()
        .unwrap();
    let _sub = tracing_subscriber::registry()
        .with(telemetry.layer())
        .set_default();
    let entered = tracing::info_span!("parent_outer").entered();

    let Some(pid) = fork() else {
        finish_child(&report, || {
            let own = Telemetry::builder(console_to(&child_out))
                .build()
                .map_err(|e| format!("setup in the child: {e}"))?;
            check(!own.stats().inherited_from_parent, || {
                "fresh telemetry seen as inherited".into()
            })?;
            let again = Telemetry::builder(console_to(&child_out)).build();
            check(matches!(again, Err(LensError::AlreadyInitialized)), || {
                "the guard does not hold within the child".into()
            })?;
            let subscriber = tracing_subscriber::registry().with(own.layer());
            tracing::subscriber::with_default(subscriber, || {
                tracing::info_span!("child_work").in_scope(|| {
                    tracing::info_span!("child_inner").in_scope(|| tracing::info!("loaded"));
                });
                // Open at shutdown: truncated by the child's own closer.
                let open = tracing::info_span!("child_open");
                let _e = open.enter();
                own.shutdown(Duration::from_secs(10))
                    .map_err(|e| format!("child shutdown: {e}"))
            })?;
            drop(entered);
            drop(telemetry);
            Ok(())
        })
    };
    wait_child(pid, &report);

    // The guard still holds in the parent.
    assert!(matches!(
        Telemetry::builder(console_to(&parent_out)).build(),
        Err(LensError::AlreadyInitialized)
    ));
    drop(entered);
    telemetry.shutdown(Duration::from_secs(10)).unwrap();

    let parent = spans_in(&parent_out);
    let child = spans_in(&child_out);
    assert_eq!(names(&parent), ["parent_outer"]);
    assert_eq!(names(&child), ["child_inner", "child_work", "child_open"]);
    assert_eq!(child[2]["attributes"]["nemo.span.truncated"], true);
    assert_eq!(
        child[0]["context"]["trace_id"],
        child[1]["context"]["trace_id"]
    );
    assert_eq!(child[0]["parent_id"], child[1]["context"]["span_id"]);
    assert_ne!(
        child[1]["context"]["trace_id"],
        parent[0]["context"]["trace_id"]
    );
    assert!(
        child[1]["parent_id"].is_null(),
        "no parent from the old subscriber"
    );
}

/// The parent installed the SIGTERM handler (its signal thread did not survive the fork): in
/// the child SIGTERM has its default effect, so a data-loader worker is still killed by it
/// instead of the signal vanishing into a pipe nobody reads. The parent's handler still works.
#[test]
fn sigterm_still_kills_a_forked_child_of_a_process_with_the_handlers() {
    child::run_in_child_dir(sigterm_in_a_forked_child);
}

fn sigterm_in_a_forked_child(dir: &Path) {
    let telemetry = Telemetry::builder(console_to(&dir.join("parent.jsonl")))
        .build()
        .unwrap();
    telemetry.install_signal_handlers().unwrap();
    let Some(pid) = fork() else {
        // SAFETY: sends SIGTERM to this (child) process.
        unsafe { libc::raise(libc::SIGTERM) };
        // Only reached if the signal was swallowed.
        unsafe { libc::_exit(3) }
    };
    let status = wait_status(pid, "dying by SIGTERM");
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGTERM,
        "status {status:#x}"
    );
    telemetry.shutdown(Duration::from_secs(10)).unwrap();
}
