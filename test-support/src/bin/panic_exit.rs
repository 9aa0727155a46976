//! A program whose main thread panics while its telemetry lives in a static (as services often
//! keep it) and a worker thread has a span open: how nemo-lens ends the telemetry when the
//! process ends, and leaves it running when the program catches the panic
//! (`tests/lifecycle/exit.rs` runs it).
//!
//! ```sh
//! NEMO_LENS_ENABLED=1 NEMO_LENS_EXPORTER=console cargo run -p nemo-lens-test-support --bin panic_exit
//! NEMO_LENS_ENABLED=1 NEMO_LENS_EXPORTER=console cargo run -p nemo-lens-test-support --bin panic_exit -- --catch
//! ```
//!
//! Uncaught, the panic ends the process (status 101): the `step` span it unwinds through ends
//! with the `exception` event and status `ERROR`; at exit, the worker's `prefetch` span, still
//! open, is ended as truncated (reason `process panicked`) and everything is flushed. With
//! `--catch`, the program goes on (an `after` span) and shuts telemetry down itself.
//!
//! Output goes to stdout, or to `NEMO_LENS_CONSOLE_PATH`.

use std::process::ExitCode;
use std::sync::OnceLock;
use std::time::Duration;

use nemo_lens::{LensConfig, Telemetry};
use tracing_subscriber::prelude::*;

/// The process's telemetry: never dropped, so only an `exit` handler can end it.
static TELEMETRY: OnceLock<Telemetry> = OnceLock::new();

fn main() -> ExitCode {
    let catch = std::env::args().any(|a| a == "--catch");
    let built = LensConfig::from_env().and_then(|c| Telemetry::builder(c).build());
    let telemetry = match built {
        Ok(t) => TELEMETRY.get_or_init(|| t),
        Err(e) => {
            eprintln!("panic_exit: {e}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::registry()
        .with(telemetry.layer())
        .init();
    telemetry.install_panic_hook();

    // A worker whose span stays open for as long as the process runs.
    let (opened, open) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("loader".into())
        .spawn(move || {
            let _prefetch = tracing::info_span!("prefetch").entered();
            let _ = opened.send(());
            loop {
                std::thread::park();
            }
        })
        .expect("spawn the loader");
    let _ = open.recv();

    tracing::info_span!("before").in_scope(|| {});
    let step = || tracing::info_span!("step").in_scope(|| panic!("the step failed"));
    if !catch {
        step();
    }
    let _ = std::panic::catch_unwind(step);
    tracing::info_span!("after").in_scope(|| {});
    if let Err(e) = telemetry.shutdown(Duration::from_secs(10)) {
        eprintln!("panic_exit: {e}");
    }
    ExitCode::SUCCESS
}
