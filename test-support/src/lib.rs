//! The shared harness of nemo-lens's own tests and benches (as `tracing-mock` is tracing's):
//! the library's integration tests (`tests/`), the command-line tool's tests (`cli/tests`) and
//! the benches depend on it as a dev-dependency.
//!
//! * [`child`]: child processes (this test binary re-run for one test, a fixture program or an
//!   example), bounded by a timeout;
//! * [`wait`]: wait until a condition holds, never a fixed sleep;
//! * [`console`]: console JSONL files: configurations that write them, their spans, log records
//!   and metric batches;
//! * [`memory`]: an exporting telemetry whose spans land in memory;
//! * [`metrics`]: an exporting telemetry whose metrics land in memory;
//! * [`collector`]: a real OTLP collector (rotel) and what it received;
//! * [`tls`]: a TLS front before the collector, with certificates from a test CA;
//! * [`hung`]: a collector that accepts connections and never answers;
//! * [`python`]: Python 3's standard library as the oracle of a test;
//! * [`programs`]: the programs a test runs (this crate's fixture binaries, the library's
//!   examples) and the environment a child starts with;
//! * [`rank`]: a user's rank set up from the environment alone, as the fixture programs run one;
//! * [`bench`](mod@bench): the subscriber wirings every bench compares, and a discarding exporter;
//! * [`trainer`]: what the trainer example tells its tests;
//! * [`cli`]: the command-line tool's inputs (a multi-rank job's span files, flight-recorder
//!   dumps) and its binary.
//!
//! The fixture programs are this crate's binaries (`src/bin/`): programs the tests run as a
//! user's process would be, never copied by a user (those are the library's `examples/`).
//!
//! ```no_run
//! use std::time::Duration;
//! use nemo_lens_test_support::child::Child;
//! use nemo_lens_test_support::wait::wait_until;
//!
//! let mut running = Child::fixture("panic_exit")
//!     .env("NEMO_LENS_ENABLED", "1")
//!     .spawn();
//! wait_until(Duration::from_secs(30), "the child's first line", || !running.stdout().is_empty());
//! let out = running.wait();
//! ```

#![warn(missing_docs)]

pub mod bench;
pub mod child;
pub mod cli;
pub mod collector;
pub mod console;
pub mod hung;
pub mod memory;
pub mod metrics;
pub mod programs;
pub mod python;
pub mod rank;
pub mod tls;
pub mod trainer;
pub mod wait;

pub use programs::{clear_telemetry_env, example, fixture_program};

/// This process's resident memory (`VmRSS` of `/proc/self/status`), in KiB.
///
/// ```
/// assert!(nemo_lens_test_support::rss_kib() > 0);
/// ```
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
