//! Shared by the integration tests. A test binary includes it with `mod common;` (a file in
//! `tests/`) or `#[path = "../common/mod.rs"] mod common;` (a directory binary's `main.rs`).
//!
//! * [`child`]: child processes (this test binary re-run for one test, or an example), bounded
//!   by a timeout;
//! * [`wait`]: wait until a condition holds, never a fixed sleep;
//! * [`console`]: console JSONL files: configurations that write them, their spans, log records
//!   and metric batches;
//! * [`memory`]: an exporting telemetry whose spans land in memory;
//! * [`metrics`]: an exporting telemetry whose metrics land in memory;
//! * [`collector`]: a real OTLP collector (rotel) and what it received;
//! * [`hung`]: a collector that accepts connections and never answers;
//! * [`python`]: Python 3's standard library as the oracle of a test.

#![allow(dead_code)]

pub mod child;
pub mod collector;
pub mod console;
pub mod hung;
pub mod memory;
pub mod metrics;
pub mod python;
/// Declared in `collector.rs` (which `benches/otlp.rs` compiles on its own).
pub use collector::wait;
// `tls.rs` (the TLS front before the collector) is included only by the tests that use it
// (`#[path = "common/tls.rs"] mod tls;`), so the other test binaries do not compile it.

use std::path::PathBuf;
use std::process::Command;

/// `target/<profile>/examples/<name>`, built by `cargo test` alongside the tests (a
/// `cargo test --test <file>` alone does not build examples: run `cargo build --examples` first).
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
        "example binary missing at {}",
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

/// This process's resident memory (`VmRSS` of `/proc/self/status`), in KiB.
pub fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .expect("VmRSS line in /proc/self/status")
        .trim()
        .trim_end_matches(" kB")
        .parse()
        .expect("VmRSS in kB")
}
