//! Disabled, or enabled on a non-exporting rank: nothing is built, no thread starts, no file or
//! socket opens, and every callsite is disabled for the layer.
//!
//! Each scenario runs in a fresh child process (`nemo_lens_test_support::child`), so the thread and descriptor
//! counts see nothing but the scenario.

use nemo_lens::{LensConfig, Place, Telemetry};
use tracing_subscriber::prelude::*;

use nemo_lens_test_support::child;

fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Builds `config` on `rank` of `world_size`, returning (telemetry, new threads, new descriptors).
fn build(config: LensConfig, rank: u32, world_size: u32) -> (Telemetry, isize, isize) {
    let (t0, f0) = (threads(), descriptors());
    let telemetry = Telemetry::builder(config)
        .place(Place::rank(rank).of(world_size))
        .build()
        .unwrap();
    // No wait: `std::thread::spawn` returns once the thread exists, so a thread a provider
    // starts is counted here (`an_exporting_rank_does_start_its_pipeline` checks that).
    let (t1, f1) = (threads(), descriptors());
    (
        telemetry,
        t1 as isize - t0 as isize,
        f1 as isize - f0 as isize,
    )
}

fn assert_inert(telemetry: &Telemetry) {
    assert!(telemetry.resource().is_none(), "no resource, no providers");
    assert!(telemetry.meter_provider().is_none());
    let layer = telemetry.layer::<tracing_subscriber::Registry>();
    assert!(layer.is_inert());
    assert!(!layer.bridges_logs(), "no log bridge");
    assert!(
        telemetry
            .metrics_layer::<tracing_subscriber::Registry>()
            .is_inert()
    );
    let subscriber = tracing_subscriber::registry().with(layer);
    tracing::subscriber::with_default(subscriber, || {
        assert!(!tracing::span_enabled!(tracing::Level::ERROR));
        assert!(!tracing::event_enabled!(tracing::Level::ERROR));
    });
}

#[test]
fn disabled_builds_nothing() {
    child::run_alone(|| {
        let (t, threads, fds) = build(LensConfig::default(), 0, 1);
        assert!(!t.is_exporting());
        assert_eq!((threads, fds), (0, 0), "new threads, new descriptors");
        assert_inert(&t);
    });
}

#[test]
fn non_exporting_rank_builds_nothing() {
    child::run_alone(|| {
        // single_rank: only rank 7 of 8 exports. OTLP/gRPC would start a runtime if built.
        // Every pipeline switched on (the OTLP exporter by default): still nothing on this rank.
        let config = LensConfig::default().with_enabled(true).with(|c| {
            c.traces_enabled = true;
            c.metrics_enabled = true;
            c.logs_enabled = true;
        });
        let (t, threads, fds) = build(config, 0, 8);
        assert!(!t.is_exporting());
        assert_eq!((threads, fds), (0, 0), "new threads, new descriptors");
        assert_inert(&t);
        assert!(!nemo_lens::groups::is_span_group_enabled("job"));
    });
}

#[test]
fn unsampled_rank_records_nothing() {
    child::run_alone(|| {
        // all_ranks + sampler at 0.1: rank 0 (md5 value 0.785) is not sampled. Metrics are
        // off, so nothing at all is built; traces are built but the layer is inert.
        let config = LensConfig::default().with_enabled(true).with(|c| {
            c.export.strategy = "all_ranks".into();
            c.export.sampler = true;
            c.export.sample_rate = 0.1;
            c.metrics_enabled = false;
            c.export.exporter = nemo_lens::ExporterKind::Console;
        });
        let (t, _, _) = build(config, 0, 8);
        assert!(t.is_exporting());
        assert!(t.layer::<tracing_subscriber::Registry>().is_inert());
    });
}

#[test]
fn an_exporting_rank_does_start_its_pipeline() {
    // The counterpart that shows the counts above can fail.
    child::run_alone(|| {
        let config = LensConfig::default()
            .with_enabled(true)
            .with(|c| c.export.exporter = nemo_lens::ExporterKind::Console);
        let (t, threads, _) = build(config, 0, 1);
        assert!(t.is_exporting());
        assert!(threads >= 1, "the batch processor thread");
        assert!(!t.layer::<tracing_subscriber::Registry>().is_inert());
    });
}
