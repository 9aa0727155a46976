//! A rank of the crypto-provider tests (`tests/export/crypto_provider.rs`): a program that
//! installs a process-wide default rustls crypto provider, as an application may, before or
//! after nemo-lens's setup, then records three `train_step` spans and shuts down.
//!
//! * `LENSTEST_PROVIDER`: `before` (ring, before setup), `unusable` (before setup, a provider
//!   without cipher suites: any client that used it would fail) or `after` (ring, after setup:
//!   it panics if setup installed a default);
//! * `LENSTEST_RANK`: `rank,world_size` for the builder (unset: rank 0 of 1);
//! * the telemetry's configuration: `NEMO_LENS_*`, `OTEL_*`.
//!
//! Prints `EXPORTING <bool> DROPPED <spans>`, and checks the application's default is still
//! installed at the end.

use std::time::Duration;

use tokio_rustls::rustls::crypto::{CryptoProvider, ring};
use tracing_subscriber::prelude::*;

fn main() {
    let when = std::env::var("LENSTEST_PROVIDER").expect("LENSTEST_PROVIDER");
    match when.as_str() {
        "before" => ring::default_provider().install_default().unwrap(),
        "unusable" => CryptoProvider {
            cipher_suites: Vec::new(),
            ..ring::default_provider()
        }
        .install_default()
        .unwrap(),
        "after" => {}
        other => panic!("LENSTEST_PROVIDER={other:?}: expected before, unusable or after"),
    }
    let (rank, world_size) = std::env::var("LENSTEST_RANK")
        .ok()
        .and_then(|v| {
            let (r, w) = v.split_once(',')?;
            Some((r.parse().ok()?, w.parse().ok()?))
        })
        .unwrap_or((0, 1));
    let config = nemo_lens::LensConfig::from_env().unwrap();
    let telemetry = nemo_lens::Telemetry::builder(config)
        .place(nemo_lens::Place::rank(rank).of(world_size))
        .build()
        .unwrap();
    if when == "after" {
        ring::default_provider()
            .install_default()
            .expect("no default provider installed by nemo-lens");
    }
    let _guard = tracing_subscriber::registry()
        .with(telemetry.layer())
        .set_default();
    for step in 0..3_i64 {
        tracing::info_span!("train_step", dl.step = step).in_scope(|| {});
    }
    telemetry.shutdown(Duration::from_secs(20)).unwrap();
    let d = telemetry.stats();
    println!(
        "EXPORTING {} DROPPED {}",
        telemetry.is_exporting(),
        d.dropped_spans
    );
    // The application's default is still there.
    assert!(CryptoProvider::get_default().is_some());
}
