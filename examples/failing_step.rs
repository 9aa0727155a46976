//! A training step that goes wrong, and what nemo-lens records about it: the same records a
//! Python NeMo Lens rank writes for the same events.
//!
//! ```sh
//! NEMO_LENS_ENABLED=1 NEMO_LENS_EXPORTER=console NEMO_LENS_LOGS_ENABLED=1 \
//!     cargo run --example failing_step            # add `-- --panic` to crash inside the step
//! ```
//!
//! Inside the span `train_step`:
//!
//! * `info!` / `warn!` events become log records (with `NEMO_LENS_LOGS_ENABLED=1`): the fields,
//!   then `code.file.path`, `code.function.name` (the module path) and `code.line.number`, and an
//!   empty `event_name`; `info!(name: "ckpt.saved", ...)` keeps its name;
//! * `error!(exception.type = "ValueError", "nan loss")` becomes an `exception` span event
//!   (`exception.type`, `exception.message`, `exception.escaped = "False"`) and the span's
//!   status `ERROR`; with `--error-backtraces` (`TelemetryBuilder::error_backtraces(true)`)
//!   also `exception.stacktrace`, from this file's frame down;
//! * `#[instrument(err)]` and `#[instrument(err(Debug))]` functions returning `Err` record an
//!   `exception` event on their own span: type `Error` for the `Display` text, the type name the
//!   `Debug` text starts with (`Os` for an `std::io::Error` from the OS) otherwise;
//! * with `--panic`, the panic hook records `exception.type = "panic"`,
//!   `exception.escaped = "True"` (and `exception.stacktrace` with `RUST_BACKTRACE=1` or
//!   `--error-backtraces`) on `train_step` and flushes before the process exits 101.
//!
//! Output goes to stdout, or to `NEMO_LENS_CONSOLE_PATH`.

use std::fmt;
use std::process::ExitCode;
use std::time::Duration;

use nemo_lens::{LensConfig, Telemetry};
use tracing_subscriber::prelude::*;

/// A data-loading error of the trainer.
#[derive(Debug)]
enum DataError {
    /// A shard failed its checksum.
    Corrupt { shard: u32 },
}

impl fmt::Display for DataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataError::Corrupt { shard } => write!(f, "shard {shard} is corrupt"),
        }
    }
}

impl std::error::Error for DataError {}

/// `err`: the error's `Display` text is recorded (`exception.type` is then `Error`).
#[tracing::instrument(err)]
fn load_shard(shard: u32) -> Result<Vec<u8>, DataError> {
    Err(DataError::Corrupt { shard })
}

/// `err(Debug)`: the error's `Debug` text is recorded, and names the type (`Os { .. }`).
#[tracing::instrument(err(Debug))]
fn read_checkpoint(path: &str) -> std::io::Result<Vec<u8>> {
    std::fs::read(path)
}

fn main() -> ExitCode {
    let config = match LensConfig::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("failing_step: {e}");
            return ExitCode::from(2);
        }
    };
    let backtraces = std::env::args().any(|a| a == "--error-backtraces");
    let telemetry = match Telemetry::builder(config)
        .error_backtraces(backtraces)
        .build()
    {
        Ok(t) => t,
        Err(e) => {
            eprintln!("failing_step: {e}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::registry()
        .with(telemetry.layer())
        .init();
    telemetry.install_panic_hook();
    let crash = std::env::args().any(|a| a == "--panic");

    tracing::info_span!("train_step", iteration = 2_i64).in_scope(|| {
        tracing::info!("step 1 done");
        tracing::warn!(dl.loss = 7.5_f64, "loss spike");
        tracing::info!(name: "ckpt.saved", step = 2_i64, "checkpoint saved");
        tracing::error!(exception.type = "ValueError", "nan loss");
        let _ = load_shard(7);
        let _ = read_checkpoint("/nonexistent/nemo-lens/ckpt.bin");
        if crash {
            panic!("simulated failure");
        }
    });

    if let Err(e) = telemetry.shutdown(Duration::from_secs(10)) {
        eprintln!("failing_step: {e}");
    }
    ExitCode::SUCCESS
}
