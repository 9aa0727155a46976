//! How the job is traced: nemo-lens as its README recommends, no subscriber at all, or (feature
//! `otel`, for `benches/burn_step.sh`) tracing-opentelemetry's layer without its optional
//! bookkeeping, exporting the spans lens exports with groups `all` and the rules
//! `default,burn_autodiff=ops`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nemo_lens::{LensConfig, Place, Telemetry};
use tracing_subscriber::prelude::*;

/// The `--wiring` choices.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wiring {
    /// nemo-lens configured from `NEMO_LENS_*` (layer, metrics layer, flight recorder, panic
    /// hook, signal handlers).
    Lens,
    /// No subscriber: `tracing`'s callsites stay disabled (the cost floor).
    None,
    /// tracing-opentelemetry (no inactivity tracking, threads, location or target) on an SDK
    /// batch processor whose exporter counts and discards; needs feature `otel`.
    OtelLean,
}

/// Spans an exporter received, shared with the exporter that counts them.
#[derive(Clone, Debug, Default)]
pub struct Counter(Arc<AtomicU64>);

impl Counter {
    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// What was installed; [`Traced::finish`] ends it.
pub enum Traced {
    Lens(Telemetry, Option<Counter>),
    Nothing,
    #[cfg(feature = "otel")]
    Otel(opentelemetry_sdk::trace::SdkTracerProvider, Counter),
}

/// Installs `wiring` for rank `rank` of `world_size`. `discard`: lens's spans go to an exporter
/// that counts and discards them instead of the configured one (feature `otel`).
pub fn install(
    wiring: Wiring,
    rank: u32,
    world_size: u32,
    discard: bool,
) -> Result<Traced, String> {
    match wiring {
        Wiring::None => Ok(Traced::Nothing),
        Wiring::Lens => {
            let config = LensConfig::from_env().map_err(|e| e.to_string())?;
            let builder = Telemetry::builder(config).place(Place::rank(rank).of(world_size));
            let (builder, counter) = if discard {
                discarding(builder)?
            } else {
                (builder, None)
            };
            let telemetry = builder.build().map_err(|e| e.to_string())?;
            tracing_subscriber::registry()
                .with(telemetry.layer())
                .with(telemetry.metrics_layer())
                .with(telemetry.recorder_layer())
                .with(
                    tracing_subscriber::fmt::layer()
                        .with_writer(std::io::stderr)
                        .with_filter(tracing_subscriber::filter::LevelFilter::WARN),
                )
                .init();
            telemetry.install_panic_hook();
            if let Err(e) = telemetry.install_signal_handlers() {
                eprintln!("burn-trainer: {e}");
            }
            Ok(Traced::Lens(telemetry, counter))
        }
        Wiring::OtelLean => otel_lean(),
    }
}

#[cfg(feature = "otel")]
fn discarding(
    builder: nemo_lens::TelemetryBuilder,
) -> Result<(nemo_lens::TelemetryBuilder, Option<Counter>), String> {
    let counter = Counter::default();
    Ok((
        builder.span_exporter(otel::Discard(counter.clone())),
        Some(counter),
    ))
}

#[cfg(not(feature = "otel"))]
fn discarding(
    _: nemo_lens::TelemetryBuilder,
) -> Result<(nemo_lens::TelemetryBuilder, Option<Counter>), String> {
    Err("--discard-spans needs burn-trainer's feature `otel`".into())
}

#[cfg(feature = "otel")]
fn otel_lean() -> Result<Traced, String> {
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::filter::{LevelFilter, Targets};

    let counter = Counter::default();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(otel::Discard(counter.clone()))
        .build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("burn-trainer"))
        .with_tracked_inactivity(false)
        .with_threads(false)
        .with_location(false)
        .with_target(false);
    // The spans lens exports with groups `all` and rules `default,burn_autodiff=ops`: the
    // job's own, burn-collective's and burn-autodiff's at every level, anything else from INFO.
    let filter = Targets::new()
        .with_default(LevelFilter::INFO)
        .with_target("burn_trainer", LevelFilter::TRACE)
        .with_target("burn_collective", LevelFilter::TRACE)
        .with_target("burn_autodiff", LevelFilter::TRACE);
    tracing_subscriber::registry()
        .with(layer.with_filter(filter))
        .init();
    Ok(Traced::Otel(provider, counter))
}

#[cfg(not(feature = "otel"))]
fn otel_lean() -> Result<Traced, String> {
    Err("--wiring otel-lean needs burn-trainer's feature `otel`".into())
}

impl Traced {
    /// Flushes and shuts down within `timeout`; prints the exported and dropped spans when an
    /// exporter counted them.
    pub fn finish(self, timeout: Duration) {
        match self {
            Traced::Nothing => {}
            Traced::Lens(telemetry, counter) => {
                if let Err(e) = telemetry.shutdown(timeout) {
                    eprintln!("burn-trainer: {e}");
                }
                if let Some(counter) = counter {
                    let dropped = telemetry.stats().dropped_spans;
                    println!("spans exported {} dropped {dropped}", counter.get());
                }
            }
            #[cfg(feature = "otel")]
            Traced::Otel(provider, counter) => {
                if let Err(e) = provider.shutdown_with_timeout(timeout) {
                    eprintln!("burn-trainer: {e}");
                }
                println!("spans exported {} dropped unknown", counter.get());
            }
        }
    }
}

#[cfg(feature = "otel")]
mod otel {
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{SpanData, SpanExporter};

    use super::Counter;

    /// Counts the spans it receives and drops them.
    #[derive(Debug)]
    pub struct Discard(pub Counter);

    impl SpanExporter for Discard {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            self.0
                .0
                .fetch_add(batch.len() as u64, std::sync::atomic::Ordering::Relaxed);
            std::hint::black_box(batch);
            Ok(())
        }
    }
}
