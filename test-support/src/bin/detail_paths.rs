//! Per-step detail capture on two paths that `tracing` parents alone do not show
//! (`tests/spans/detail.rs` runs it), with the detail groups of `NEMO_LENS_DETAIL_GROUPS`
//! (`forward_backward`, `optimizer`, `collective`):
//!
//! ```sh
//! NEMO_LENS_ENABLED=1 NEMO_LENS_EXPORTER=console NEMO_LENS_DETAIL_GROUPS=forward_backward,optimizer,collective \
//!     cargo run -p nemo-lens-test-support --bin detail_paths -- --drop-subscriber
//! ```
//!
//! * `--drop-subscriber`: the subscriber holding the lens layer is dropped while step 1 is open
//!   with two detail spans held (the step's last child closes on a thread without the
//!   subscriber, so the registry never closes the step). Stderr then says `held after the
//!   drop: N bytes, M open spans`, and the program shuts telemetry down.
//! * `--otel-parent`: three steps (a 50 ms baseline, a fast one, a 600 ms slow one) whose
//!   detail spans run on worker threads, parented to the step through OpenTelemetry contexts
//!   only: `Context::attach` of `step.context()`, `LensSpanExt::set_parent(step.context())`,
//!   the context current in the step (context activation) attached, and a context made from
//!   the step's span context alone.
//!
//! Output goes to stdout, or to `NEMO_LENS_CONSOLE_PATH`.

use std::process::ExitCode;
use std::time::Duration;

use nemo_lens::{LensConfig, LensSpanExt, Telemetry};
use opentelemetry::Context;
use opentelemetry::trace::TraceContextExt;
use tracing::field::Empty;
use tracing_subscriber::prelude::*;

fn main() -> ExitCode {
    let drop_subscriber = std::env::args().any(|a| a == "--drop-subscriber");
    let telemetry = match LensConfig::from_env().and_then(|c| Telemetry::builder(c).build()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("detail_paths: {e}");
            return ExitCode::from(2);
        }
    };
    if drop_subscriber {
        drop_subscriber_mid_step(&telemetry);
    } else {
        otel_parents(&telemetry);
    }
    if let Err(e) = telemetry.shutdown(Duration::from_secs(10)) {
        eprintln!("detail_paths: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// Drops the subscriber while step 1 is open, its `forward_backward` and `optimizer_step` held.
fn drop_subscriber_mid_step(telemetry: &Telemetry) {
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let last_child = tracing::subscriber::with_default(subscriber, || {
        let step = tracing::info_span!("train_step", nemo.group.step = Empty, step = 1_i64);
        let _in_step = step.enter();
        tracing::info_span!("forward_backward", nemo.group.forward_backward = Empty)
            .in_scope(|| {});
        tracing::info_span!("optimizer_step", nemo.group.optimizer = Empty)
    });
    // The step's last child closes (held) on a thread without the subscriber: the registry
    // releases the step through that thread's default subscriber, none, so the step stays open
    // until the subscriber, whose last handle the child was, is dropped.
    std::thread::spawn(move || drop(last_child))
        .join()
        .expect("the closing thread");
    let stats = telemetry.stats();
    eprintln!(
        "held after the drop: {} bytes, {} open spans",
        stats.detail_held_bytes, stats.open_spans
    );
}

/// Three steps whose detail spans run on worker threads, parented through OpenTelemetry
/// contexts only.
fn otel_parents(telemetry: &Telemetry) {
    tracing_subscriber::registry()
        .with(telemetry.layer())
        .init();
    for (n, ms) in [(1_i64, 50), (2, 0), (3, 600)] {
        let step = tracing::info_span!("train_step", nemo.group.step = Empty, step = n);
        let _in_step = step.enter();
        let step_cx = step.context();
        // The context current in the step (context activation).
        let current = Context::current();
        let span_context = step.span_context().expect("the step is recorded");
        std::thread::scope(|s| {
            s.spawn(|| {
                let _attached = step_cx.clone().attach();
                tracing::info_span!("forward_backward", nemo.group.forward_backward = Empty)
                    .in_scope(|| {});
            });
            s.spawn(|| {
                let span = tracing::info_span!("optimizer_step", nemo.group.optimizer = Empty);
                LensSpanExt::set_parent(&span, step_cx.clone()).expect("a span not entered yet");
                span.in_scope(|| {});
            });
            s.spawn(|| {
                let _attached = current.clone().attach();
                tracing::info_span!("grad_sync", nemo.group.collective = Empty).in_scope(|| {});
            });
            s.spawn(|| {
                // What an in-process extract of the step's `traceparent` gives.
                let cx = Context::new().with_remote_span_context(span_context.clone());
                let _attached = cx.attach();
                tracing::info_span!("all_reduce", nemo.group.collective = Empty).in_scope(|| {});
            });
        });
        std::thread::sleep(Duration::from_millis(ms));
    }
}
