//! A rank whose spans overlap across two named threads, as a framework's runtime threads overlap
//! the training thread: `cli/tests/perfetto.rs` draws its console JSONL with
//! `nemo-lens perfetto`.
//!
//! ```sh
//! NEMO_LENS_ENABLED=1 NEMO_LENS_EXPORTER=console NEMO_LENS_THREAD_ATTRIBUTES=1 \
//!   cargo run -p nemo-lens-test-support --bin threaded_rank
//! ```
//!
//! Thread `trainer` runs `step`, with a child `forward`; thread `runtime` runs `reduce`, with a
//! child `send`. Barriers order them so that `reduce` starts inside `step` and ends after it
//! (start(step) < start(reduce) < end(step) < end(reduce)), each side at least a millisecond
//! apart so the microsecond timestamps differ: drawn on one track, the two would interleave.
//! The main thread runs `setup` first. Output goes to stdout, or to `NEMO_LENS_CONSOLE_PATH`.

use std::process::ExitCode;
use std::sync::Barrier;
use std::time::Duration;

use nemo_lens::{LensConfig, Place, Telemetry};
use tracing_subscriber::prelude::*;

/// Between two barrier crossings: the next timestamp is at least this much later.
const GAP: Duration = Duration::from_millis(2);

fn main() -> ExitCode {
    let built = LensConfig::from_env()
        .and_then(|c| Telemetry::builder(c).place(Place::rank(0).of(1)).build());
    let telemetry = match built {
        Ok(t) => t,
        Err(e) => {
            eprintln!("threaded_rank: {e}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::registry()
        .with(telemetry.layer())
        .init();

    tracing::info_span!("setup").in_scope(|| std::thread::sleep(GAP));
    let barrier = Barrier::new(2);
    let crossing = || {
        std::thread::sleep(GAP);
        barrier.wait();
        std::thread::sleep(GAP);
    };
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("trainer".into())
            .spawn_scoped(s, || {
                tracing::info_span!("step").in_scope(|| {
                    tracing::info_span!("forward").in_scope(|| std::thread::sleep(GAP));
                    crossing(); // 1: `reduce` may start
                    crossing(); // 2: `reduce` started
                });
                crossing(); // 3: `step` ended
            })
            .expect("spawn the trainer thread");
        std::thread::Builder::new()
            .name("runtime".into())
            .spawn_scoped(s, || {
                crossing(); // 1
                tracing::info_span!("reduce").in_scope(|| {
                    crossing(); // 2
                    crossing(); // 3
                    tracing::info_span!("send").in_scope(|| std::thread::sleep(GAP));
                });
            })
            .expect("spawn the runtime thread");
    });

    if let Err(e) = telemetry.shutdown(Duration::from_secs(10)) {
        eprintln!("threaded_rank: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
