//! gRPC export from applications that run their own Tokio runtime: setup, spans and shutdown
//! called from inside the application's runtime (current-thread and multi-thread) neither panic
//! ("no reactor running", "cannot drop a runtime") nor deadlock, and the spans arrive.
//!
//! Runs in a process of its own (`nemo_lens_test_support::child`): the OTLP endpoint is given through the
//! process environment, as a user would.

use std::time::Duration;

use nemo_lens::{LensConfig, Telemetry};
use tracing_subscriber::prelude::*;

use nemo_lens_test_support::child;
use nemo_lens_test_support::collector::{self, Collector};

fn traced_work(name: &'static str) {
    let telemetry = Telemetry::builder(LensConfig::from_env().unwrap())
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    let _guard = tracing_subscriber::registry()
        .with(telemetry.layer())
        .set_default();
    tracing::info_span!("async_step", runtime = name).in_scope(|| {});
    // Shutdown on a runtime thread; then the handle (and its private runtime) is dropped there.
    telemetry.shutdown(Duration::from_secs(10)).unwrap();
    drop(telemetry);
}

#[test]
fn grpc_inside_the_applications_runtime() {
    child::run_alone(inside_the_runtime);
}

fn inside_the_runtime() {
    let collector = Collector::start();
    // SAFETY: the only test of this child process; set before any thread reads the environment.
    unsafe {
        std::env::set_var("NEMO_LENS_ENABLED", "1");
        std::env::set_var("NEMO_LENS_EXPORTER", "otlp");
        std::env::set_var("NEMO_LENS_METRICS_ENABLED", "0");
        std::env::set_var("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint("grpc"));
    }
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async { traced_work("current_thread") });
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                tokio::spawn(async { traced_work("multi_thread") })
                    .await
                    .unwrap()
            });
        done_tx.send(()).unwrap();
    });
    done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("setup/shutdown inside a Tokio runtime deadlocked");
    let out = collector.wait_for("both spans", Duration::from_secs(30), |o| {
        collector::spans(o).len() >= 2
    });
    let runtimes: Vec<String> = collector::spans(&out)
        .iter()
        .filter_map(|s| s.attr("runtime"))
        .collect();
    assert!(
        runtimes.contains(&"Str(current_thread)".to_string()),
        "{runtimes:?}"
    );
    assert!(
        runtimes.contains(&"Str(multi_thread)".to_string()),
        "{runtimes:?}"
    );
}
