//! A program whose field formatting panics inside a lens span, to check that such a panic
//! stays the application's own (`tests/lifecycle/panicking_field.rs` runs it).
//!
//! ```sh
//! cargo run -p nemo-lens-test-support --bin panicking_field -- event main hook lens /tmp/spans.jsonl
//! ```
//!
//! Arguments: where the panicking value is recorded (`event`: `tracing::info!(v = %Boom)`;
//! `record`: `span.record("v", display(Boom))`), on which thread (`main`, or `worker`: a
//! spawned thread that is joined, after which the program goes on and shuts telemetry down),
//! whether the nemo-lens panic hook is installed (`hook` / `nohook`), whether a `fmt` layer
//! formats the same fields too (`fmt` / `lens`: `fmt` formats recorded span fields while
//! holding the span's registry lock), and the console output path.
//!
//! Like a program with plain `fmt`, it exits 101 when the main thread panics, and survives a
//! panic on the worker thread (exit 0, its spans exported).

use std::fmt;

use nemo_lens::{ExporterKind, LensConfig, Telemetry};
use tracing::field::{Empty, display};
use tracing_subscriber::prelude::*;

/// A value whose `Display` panics.
struct Boom;

impl fmt::Display for Boom {
    fn fmt(&self, _f: &mut fmt::Formatter<'_>) -> fmt::Result {
        panic!("Display of Boom panicked")
    }
}

fn panic_in_field(record: bool) {
    let span = tracing::info_span!("boom_span", v = Empty);
    let _entered = span.enter();
    tracing::info!("before the panic");
    if record {
        span.record("v", display(Boom));
    } else {
        tracing::info!(v = %Boom, "the panicking event");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [place, thread, hook, layers, path] = args.as_slice() else {
        eprintln!(
            "usage: panicking_field <event|record> <main|worker> <hook|nohook> <fmt|lens> <path>"
        );
        std::process::exit(2);
    };
    let record = place == "record";
    let config = LensConfig::default().with_enabled(true).with(|c| {
        c.export.exporter = ExporterKind::Console;
        c.export.console_path = Some(path.clone());
        c.metrics_enabled = false;
        c.groups.span_groups = "all".into();
    });
    let telemetry = Telemetry::builder(config).build().expect("telemetry");
    let fmt_layer = (layers == "fmt").then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::sink)
            .with_ansi(false)
    });
    tracing_subscriber::registry()
        .with(fmt_layer)
        .with(telemetry.layer())
        .init();
    if hook == "hook" {
        telemetry.install_panic_hook();
    }
    let outer = tracing::info_span!("outer").entered();
    if thread == "main" {
        panic_in_field(record);
        unreachable!("the field's panic unwinds through here");
    }
    let joined = std::thread::Builder::new()
        .name("worker".into())
        .spawn(move || panic_in_field(record))
        .expect("spawn")
        .join();
    assert!(joined.is_err(), "the worker thread panicked");
    tracing::info_span!("after_the_panic").in_scope(|| {});
    drop(outer);
    telemetry
        .shutdown(std::time::Duration::from_secs(5))
        .expect("shutdown");
    println!("survived");
}
