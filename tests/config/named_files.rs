//! Files a variable names, made hostile, on the real trainer example: a FIFO (no writer), a
//! directory, endless devices (`/dev/zero`, `/dev/urandom`) and huge sparse files. None may
//! block the thread that reads it or be read whole: each is refused with one line naming the
//! variable, and what else runs on that thread keeps working.
//!
//! * `NEMO_LENS_CONTROL_FILE`, read by the flight recorder's thread on `SIGUSR2`: after the
//!   refusal, `SIGUSR1` still writes a dump and the hang watchdog still fires.
//! * `OTEL_EXPORTER_OTLP_CERTIFICATE` / `_CLIENT_CERTIFICATE` / `_CLIENT_KEY` and a per-signal
//!   form, read by `build()` on the exporting rank: setup fails at once naming the variable;
//!   likewise `SSL_CERT_FILE`, the system roots' bundle rustls-native-certs reads when no CA
//!   file is given.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nemo_lens_test_support::child::Child;

/// A hostile file of `kind` under `dir` (or a device).
fn hostile(kind: &str, dir: &Path) -> PathBuf {
    match kind {
        "fifo" => {
            let fifo = dir.join("named.fifo");
            let path = CString::new(fifo.as_os_str().as_bytes()).unwrap();
            // SAFETY: mkfifo on a NUL-terminated path we own.
            assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
            fifo
        }
        "directory" => {
            let sub = dir.join("named.d");
            std::fs::create_dir(&sub).unwrap();
            sub
        }
        "zero" => PathBuf::from("/dev/zero"),
        "urandom" => PathBuf::from("/dev/urandom"),
        sparse => {
            let gib: u64 = sparse.strip_suffix("GiB").unwrap().parse().unwrap();
            let path = dir.join("huge.pem");
            let file = std::fs::File::create(&path).unwrap();
            file.set_len(gib << 30).unwrap();
            path
        }
    }
}

/// What the refusal of `kind` says.
fn refusal(kind: &str) -> &'static str {
    match kind {
        "fifo" => "a FIFO, not a regular file",
        "directory" => "a directory, not a regular file",
        "zero" | "urandom" => "a character device, not a regular file",
        _ => "larger than",
    }
}

/// Lines of `text` that mention `var`.
fn lines_naming<'a>(text: &'a str, var: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.contains(var)).collect()
}

fn control_file_is_refused_and_the_recorder_keeps_working(kind: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let control = hostile(kind, tmp.path());
    let dumps = tmp.path().join("dumps");
    let mut trainer = Child::example("trainer")
        .envs([
            ("NEMO_LENS_ENABLED", "1"),
            ("NEMO_LENS_EXPORTER", "console"),
            ("NEMO_LENS_METRICS_ENABLED", "0"),
            ("NEMO_LENS_FLIGHT_RECORDER", "64"),
            ("NEMO_LENS_HANG_TIMEOUT", "1"),
            ("RUST_LOG", "trainer=debug"),
        ])
        .env("NEMO_LENS_CONSOLE_PATH", tmp.path().join("spans.jsonl"))
        .env("NEMO_LENS_DUMP_DIR", &dumps)
        .env("NEMO_LENS_CONTROL_FILE", &control)
        // Stuck at step 3 for good: the watchdog fires a second after step 2 closes.
        .args(["--steps", "0", "--step-ms", "5", "--hang-at", "3"])
        .timeout(Duration::from_secs(60))
        .spawn();
    trainer.wait_for_output("a finished step", |_, e| e.contains("step finished"));
    trainer.signal(libc::SIGUSR2);
    trainer.wait_for_output("the control file's refusal", |_, e| {
        e.contains("SIGUSR2: cannot read NEMO_LENS_CONTROL_FILE")
    });
    trainer.signal(libc::SIGUSR1);
    trainer.wait_for_output("the SIGUSR1 dump", |_, e| {
        e.contains("SIGUSR1: flight recorder dump")
    });
    trainer.wait_for_output("the watchdog", |_, e| e.contains("this rank may be hung"));
    trainer.signal(libc::SIGKILL);
    let out = trainer.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let named = lines_naming(&stderr, "NEMO_LENS_CONTROL_FILE");
    assert_eq!(named.len(), 1, "{kind}: one line: {stderr}");
    assert!(named[0].contains(refusal(kind)), "{kind}: {}", named[0]);
    assert!(named[0].contains("span groups unchanged"), "{}", named[0]);
    let written: Vec<String> = std::fs::read_dir(&dumps)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for reason in ["-signal.jsonl", "-watchdog.jsonl"] {
        assert!(
            written.iter().any(|n| n.ends_with(reason)),
            "{kind}: no {reason} dump in {written:?}"
        );
    }
}

#[test]
fn a_fifo_as_control_file_is_refused_and_dumps_and_the_watchdog_go_on() {
    control_file_is_refused_and_the_recorder_keeps_working("fifo");
}

#[test]
fn dev_zero_as_control_file_is_refused_and_dumps_and_the_watchdog_go_on() {
    control_file_is_refused_and_the_recorder_keeps_working("zero");
}

#[test]
fn a_1_gib_sparse_control_file_is_refused_and_dumps_and_the_watchdog_go_on() {
    control_file_is_refused_and_the_recorder_keeps_working("1GiB");
}

#[test]
fn a_directory_as_control_file_is_refused_and_dumps_and_the_watchdog_go_on() {
    control_file_is_refused_and_the_recorder_keeps_working("directory");
}

/// The trainer exporting over OTLP to an `https://` endpoint with `vars` naming `path`: setup
/// reads the certificate files, and must fail at once (exit 2) naming the first variable.
fn certificate_is_refused(kind: &str, vars: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let path = hostile(kind, tmp.path());
    let mut trainer = Child::example("trainer")
        .envs([
            ("NEMO_LENS_ENABLED", "1"),
            ("NEMO_LENS_EXPORTER", "otlp"),
            ("NEMO_LENS_METRICS_ENABLED", "0"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://127.0.0.1:4317"),
        ])
        .args(["--steps", "1", "--step-ms", "1"])
        .timeout(Duration::from_secs(60));
    for var in vars {
        trainer = trainer.env(var, &path);
    }
    let out = trainer.run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{kind} as {vars:?}: {stderr}");
    let named = lines_naming(&stderr, vars[0]);
    assert_eq!(named.len(), 1, "{kind} as {vars:?}: {stderr}");
    assert!(
        named[0].contains(refusal(kind)),
        "{kind} as {vars:?}: {}",
        named[0]
    );
}

/// Every certificate variable, each hostile file.
fn every_certificate_variable_refuses(kind: &str) {
    certificate_is_refused(kind, &["SSL_CERT_FILE"]);
    certificate_is_refused(kind, &["OTEL_EXPORTER_OTLP_CERTIFICATE"]);
    certificate_is_refused(kind, &["OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE"]);
    certificate_is_refused(
        kind,
        &[
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
            "OTEL_EXPORTER_OTLP_CLIENT_KEY",
        ],
    );
}

#[test]
fn a_fifo_as_certificate_fails_setup_instead_of_hanging_it() {
    every_certificate_variable_refuses("fifo");
}

#[test]
fn dev_zero_as_certificate_fails_setup_without_reading_it() {
    every_certificate_variable_refuses("zero");
}

#[test]
fn dev_urandom_as_certificate_fails_setup_without_reading_it() {
    every_certificate_variable_refuses("urandom");
}

#[test]
fn a_2_gib_sparse_certificate_fails_setup_without_reading_it() {
    // `SSL_CERT_FILE` is let through up to 16 MiB, the others up to 1 MiB.
    every_certificate_variable_refuses("2GiB");
}

/// rustls-native-certs reads every regular file of the `SSL_CERT_DIR` directories whole: a
/// directory holding a 2 GiB sparse file fails setup naming the variable, without reading it.
#[test]
fn a_2_gib_file_in_ssl_cert_dir_fails_setup_without_reading_it() {
    let tmp = tempfile::tempdir().unwrap();
    let huge = hostile("2GiB", tmp.path());
    let certs = tmp.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    std::fs::rename(&huge, certs.join("huge.pem")).unwrap();
    let out = Child::example("trainer")
        .envs([
            ("NEMO_LENS_ENABLED", "1"),
            ("NEMO_LENS_EXPORTER", "otlp"),
            ("NEMO_LENS_METRICS_ENABLED", "0"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://127.0.0.1:4317"),
        ])
        .env("SSL_CERT_DIR", format!("/nonexistent:{}", certs.display()))
        .env_remove("SSL_CERT_FILE")
        .args(["--steps", "1", "--step-ms", "1"])
        .timeout(Duration::from_secs(60))
        .run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let named = lines_naming(&stderr, "SSL_CERT_DIR");
    assert_eq!(named.len(), 1, "{stderr}");
    assert!(named[0].contains("more than 16 MiB"), "{}", named[0]);
}

/// A client key the variable names is refused too, after a good certificate.
#[test]
fn a_fifo_as_client_key_fails_setup_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = hostile("fifo", tmp.path());
    let cert = tmp.path().join("client.pem");
    let issued = rcgen::generate_simple_self_signed(vec!["client".to_string()]).unwrap();
    std::fs::write(&cert, issued.cert.pem()).unwrap();
    let out = Child::example("trainer")
        .envs([
            ("NEMO_LENS_ENABLED", "1"),
            ("NEMO_LENS_EXPORTER", "otlp"),
            ("NEMO_LENS_METRICS_ENABLED", "0"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://127.0.0.1:4317"),
        ])
        .env("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &cert)
        .env("OTEL_EXPORTER_OTLP_CLIENT_KEY", &fifo)
        .args(["--steps", "1", "--step-ms", "1"])
        .timeout(Duration::from_secs(60))
        .run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let named = lines_naming(&stderr, "OTEL_EXPORTER_OTLP_CLIENT_KEY");
    assert!(
        named.iter().any(|l| l.contains(refusal("fifo"))),
        "{stderr}"
    );
}
