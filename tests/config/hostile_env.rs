//! No hang and no flood on a hostile path or environment, on the real trainer example: a FIFO
//! with no reader as the console path, 100 KiB values in `NEMO_LENS_*` variables, non-UTF-8
//! values in the bare variables of other tools (`OTEL_SERVICE_NAME`, `WANDB_*`).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use nemo_lens_test_support::child::Child;

/// The trainer, killed (and the test failed) if it has not exited within a generous bound. Its
/// output is read meanwhile, so a flood cannot block it on a full pipe.
fn trainer() -> Child {
    Child::example("trainer")
        .env("NEMO_LENS_ENABLED", "1")
        .env("NEMO_LENS_EXPORTER", "console")
        .env("NEMO_LENS_METRICS_ENABLED", "0")
        .args(["--steps", "1", "--step-ms", "1"])
        .timeout(Duration::from_secs(60))
}

#[test]
fn a_fifo_without_reader_as_console_path_fails_setup_instead_of_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("spans.fifo");
    let path = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo on a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    let output = trainer().env("NEMO_LENS_CONSOLE_PATH", &fifo).run();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("NEMO_LENS_CONSOLE_PATH") && stderr.contains("FIFO with no reader"),
        "{stderr}"
    );
}

#[test]
fn a_huge_bad_value_is_reported_in_a_readable_length() {
    let huge = "x".repeat(100 * 1024);
    let nowhere = format!("/proc/nemo-lens-nowhere/{huge}/spans.jsonl");
    // Ten thousand group names no library registered.
    let many = (0..10_000)
        .map(|i| format!("g{i}"))
        .collect::<Vec<_>>()
        .join(",");
    // Exit 2 for an error; an unknown span group is a warning (and ignored): exit 0.
    for (var, value, code) in [
        ("NEMO_LENS_EXPORTER", huge.as_str(), 2),
        ("NEMO_LENS_EXPORT_STRATEGY", huge.as_str(), 2),
        ("NEMO_LENS_SPAN_GROUPS", huge.as_str(), 0),
        ("NEMO_LENS_SPAN_GROUPS", many.as_str(), 0),
        ("NEMO_LENS_TRACE_PER", huge.as_str(), 0),
        ("NEMO_LENS_TRACE_PER", many.as_str(), 0),
        ("NEMO_LENS_ENABLED", huge.as_str(), 2),
        ("NEMO_LENS_CONSOLE_PATH", nowhere.as_str(), 2),
        ("NEMO_LENS_QUEUE_MAX_BYTES", huge.as_str(), 2),
    ] {
        let output = trainer().env(var, value).run();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(code),
            "{var}: {}",
            &stderr[..stderr.len().min(500)]
        );
        assert!(
            stderr.contains(var),
            "{var}: {}",
            &stderr[..stderr.len().min(500)]
        );
        assert!(
            stderr.len() < 1024,
            "{var}: {} bytes on stderr: {}…",
            stderr.len(),
            &stderr[..500]
        );
    }
}

#[test]
fn non_utf8_bare_variables_mean_unset_with_a_warning_as_readme_says() {
    for var in ["OTEL_SERVICE_NAME", "WANDB_ENTITY", "WANDB_PROJECT"] {
        let output = trainer().env(var, OsStr::from_bytes(b"run-\xff\xfe")).run();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{var}: {stderr}");
        assert!(
            stderr.contains(var) && stderr.contains("Treated as unset"),
            "{var}: {stderr}"
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.contains("\"train\""), "{var}: spans still exported");
        if var == "OTEL_SERVICE_NAME" {
            assert!(stdout.contains("\"service.name\": \"nemo\""), "{stdout}");
        }
    }
    // A non-UTF-8 NEMO_LENS_* value stays an error naming it.
    let output = trainer()
        .env("NEMO_LENS_RUN_ID", OsStr::from_bytes(b"\xff"))
        .run();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("NEMO_LENS_RUN_ID"), "{stderr}");
}
