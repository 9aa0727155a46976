//! A test binary re-executed as a child process in a *role*: the child is a user's program with
//! only the environment the test gives it (every inherited `NEMO_LENS_*` / `OTEL_*` variable
//! removed), so configuration is read from variables exactly as in a real job.
//!
//! The role is an `#[ignore]`d test named `child_role` that checks `role_var` and runs the
//! child's code; the parent starts it with `--ignored` and asserts it passed.

use std::process::{Command, Output};

/// Runs this test binary's `child_role` test in a new process with `role_var=child` and `envs`;
/// panics with the child's output unless it passed. Returns its output.
pub fn run_role<K, V>(role_var: &str, envs: impl IntoIterator<Item = (K, V)>) -> Output
where
    K: AsRef<std::ffi::OsStr>,
    V: AsRef<std::ffi::OsStr>,
{
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "child_role",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    super::clear_telemetry_env(&mut cmd);
    cmd.env(role_var, "child").envs(envs);
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// In the child: the telemetry the environment configures (it must export), and a default
/// subscriber with its layer.
pub fn telemetry_from_env() -> (nemo_lens::Telemetry, tracing::subscriber::DefaultGuard) {
    use tracing_subscriber::prelude::*;
    let config = nemo_lens::LensConfig::from_env().expect("config");
    let telemetry = nemo_lens::Telemetry::builder(config)
        .build()
        .expect("setup");
    assert!(telemetry.is_exporting());
    let guard = tracing_subscriber::registry()
        .with(telemetry.layer())
        .set_default();
    (telemetry, guard)
}
