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
//! * [`python`]: Python 3's standard library as the oracle of a test;
//! * [`example`], [`clear_telemetry_env`]: the example programs a test runs, and the
//!   environment a child starts with.

#![allow(dead_code)]

pub mod child;
pub mod collector;
pub mod console;
pub mod hung;
pub mod memory;
pub mod metrics;
mod programs;
pub mod python;
/// Declared in `collector.rs` (which `benches/otlp.rs` compiles on its own).
pub use collector::wait;
pub use programs::{clear_telemetry_env, example};
// `tls.rs` (the TLS front before the collector) is included only by the tests that use it
// (`#[path = "common/tls.rs"] mod tls;`), so the other test binaries do not compile it.

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
