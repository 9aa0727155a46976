//! The programs a test runs and the environment a child process starts with: this crate's
//! fixture binaries (built on first use, once per test process), the library's examples (built
//! by `cargo test`), and the target directory they live in.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The running executable's profile directory, `<target>/<profile>` (a test or bench runs from
/// `<target>/<profile>/deps`; an example or a fixture program from `<target>/<profile>` or
/// `<target>/<profile>/examples`).
///
/// ```
/// let dir = nemo_lens_test_support::programs::profile_dir();
/// assert!(dir.is_dir());
/// ```
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the running executable");
    let dir = exe.parent().expect("the executable's directory");
    match dir.file_name().and_then(|n| n.to_str()) {
        Some("deps" | "examples") => dir.parent().expect("the profile directory").to_path_buf(),
        _ => dir.to_path_buf(),
    }
}

/// `<target>/tmp`: scratch space shared by every test run of the target directory (what
/// Cargo names `CARGO_TARGET_TMPDIR` for integration tests), created if missing.
pub fn target_tmp_dir() -> PathBuf {
    let target = profile_dir()
        .parent()
        .expect("the target directory")
        .to_path_buf();
    let tmp = target.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap_or_else(|e| panic!("cannot create {tmp:?}: {e}"));
    tmp
}

/// The library's example `name`, at `<target>/<profile>/examples/<name>`. `cargo test` builds
/// the examples alongside the tests; a `cargo test --test <binary>` (or a run of the
/// command-line tool's tests alone) does not: run `cargo build -p nemo-lens --all-features
/// --examples` first. A missing example fails the test.
pub fn example(name: &str) -> PathBuf {
    let path = profile_dir().join("examples").join(name);
    assert!(
        path.exists(),
        "example binary missing at {}: run `cargo build -p nemo-lens --all-features --examples`",
        path.display()
    );
    path
}

/// This crate's fixture program `name` (a `src/bin/` program), at `<target>/<profile>/<name>`.
///
/// The first call in a process builds every fixture program with the Cargo that runs the tests
/// (`cargo build -p nemo-lens-test-support --bins`, same target directory and profile), so a
/// program is never missing or stale, whichever test binaries the command line selected. A
/// failed build or a missing program fails the test.
#[track_caller]
pub fn fixture_program(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = BUILT
        .get_or_init(build_fixture_programs)
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}"));
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "fixture program {name} missing at {} after building this crate's binaries \
         (is it a `src/bin/` program of nemo-lens-test-support?)",
        path.display()
    );
    path
}

/// Builds the fixture programs into this process's profile directory; returns that directory.
fn build_fixture_programs() -> Result<PathBuf, String> {
    let profile_dir = profile_dir();
    let target = profile_dir.parent().ok_or("no target directory")?;
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev",
        Some(name) => name,
        None => return Err(format!("no profile in {}", profile_dir.display())),
    };
    // The Cargo running the tests, else the one that built this crate.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let mut cmd = Command::new(&cargo);
    cmd.args([
        "build",
        "--quiet",
        "--package",
        "nemo-lens-test-support",
        "--bins",
    ])
    .arg("--manifest-path")
    .arg(&manifest)
    .arg("--target-dir")
    .arg(target)
    .args(["--profile", profile]);
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {cmd:?} to build the fixture programs: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(profile_dir)
}

/// Removes every `NEMO_LENS_*`, `OTEL_*` and `TRACEPARENT` variable the test run inherited, so
/// a child process sees only what the test gives it.
///
/// ```
/// let mut cmd = std::process::Command::new("env");
/// nemo_lens_test_support::clear_telemetry_env(&mut cmd);
/// ```
pub fn clear_telemetry_env(cmd: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("NEMO_LENS_") || k.starts_with("OTEL_") || k == "TRACEPARENT" {
            cmd.env_remove(k.as_ref());
        }
    }
    cmd
}
