//! The library's example programs and the environment a child process starts with. Shared with
//! the command-line tool's tests (`cli/tests/support/mod.rs` includes this file with `#[path]`).

use std::path::PathBuf;
use std::process::Command;

/// The library's example `name`, at `target/<profile>/examples/<name>` of the workspace's shared
/// target directory. `cargo test` builds the examples alongside the tests; a `cargo test --test
/// <file>` (or a run of the command-line tool's tests alone) does not: run `cargo build -p
/// nemo-lens --all-features --examples` first.
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap(); // target/<profile>/deps/<test>-…
    let path = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "example binary missing at {}: run `cargo build -p nemo-lens --all-features --examples`",
        path.display()
    );
    path
}

/// Removes every `NEMO_LENS_*`, `OTEL_*` and `TRACEPARENT` variable the test run inherited, so
/// a child process sees only what the test gives it.
pub fn clear_telemetry_env(cmd: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("NEMO_LENS_") || k.starts_with("OTEL_") || k == "TRACEPARENT" {
            cmd.env_remove(k.as_ref());
        }
    }
    cmd
}
