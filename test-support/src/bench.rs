//! What every bench binary shares: the wirings compared side by side, and a discarding exporter.
//!
//! Each bench binary runs its cases under every [`Wiring`] in the order of [`Wiring::ALL`], one
//! subscriber alive at a time, so that every ratio between wirings comes from one run on one
//! machine state.
//!
//! The floor, [`Wiring::NoSubscriber`], must see `tracing`'s global max level at `OFF`, as a
//! process that never had a subscriber does: a disabled `info_span!` then stops at one relaxed
//! load and compare. Earlier wirings of the same process leave the level raised, and plain
//! `rebuild_interest_cache()` does not lower it (with one dispatcher ever registered,
//! `tracing-core` asks the *current default* for its hint, and with none set that is
//! `NoSubscriber`, whose hint is "everything", `TRACE`). [`build`] therefore resets it (see
//! [`reset_max_level_to_off`]) and asserts the result. `benches/peers/` measures the same floor
//! in a process of its own, with no subscriber ever built, and `benches/instructions.sh` counts
//! its instructions: the three agree or the in-process figure is wrong.
//!
//! ```no_run
//! use nemo_lens_test_support::bench::{Wiring, build};
//!
//! for wiring in Wiring::ALL {
//!     let built = build(wiring);
//!     built.run(|| tracing::info_span!("train_step").in_scope(|| {}));
//! }
//! ```

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nemo_lens::{LensConfig, Place, Telemetry};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing::Dispatch;
use tracing::level_filters::LevelFilter;
use tracing_core::subscriber::NoSubscriber;
use tracing_subscriber::prelude::*;

/// Drops every batch (counting its spans): measures the pipeline, not an exporter.
#[derive(Debug, Clone, Default)]
pub struct Discard(pub Arc<AtomicU64>);

impl SpanExporter for Discard {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.fetch_add(batch.len() as u64, Ordering::Relaxed);
        black_box(batch);
        Ok(())
    }
}

/// The subscriber set-ups compared in every bench.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wiring {
    /// No subscriber at all: the floor.
    NoSubscriber,
    /// Registry + LensLayer on a rank that does not export (`single_rank`, rank 0 of 8).
    LensNonExporting,
    /// Registry + LensLayer on an exporting rank whose span groups (`default`) leave the
    /// bench's `nemo.group.step` spans disabled.
    LensDisabledGroup,
    /// Registry + LensLayer exporting every group: batch processor, [`Discard`] exporter.
    LensExported,
    /// [`Wiring::LensExported`] with context activation turned off
    /// (`TelemetryBuilder::context_activation(false)`): the cost of activation is the
    /// difference.
    LensExportedNoActivation,
    /// Registry + `tracing_opentelemetry::layer()` with default options, an `SdkTracerProvider`
    /// with the SDK defaults, batch processor, [`Discard`] exporter.
    PlainOtel,
    /// [`Wiring::PlainOtel`] with the bookkeeping a lean user turns off: no inactivity tracking
    /// (busy/idle times), no thread, location or target attributes.
    PlainOtelLean,
    /// Registry + `Telemetry::opentelemetry_layer()` (feature `tracing-opentelemetry`):
    /// tracing-opentelemetry's own layer on the lens tracer, exporting every group with the
    /// settings of [`Wiring::LensExported`] (lens's batch processor, [`Discard`] exporter, the
    /// SDK-span closer in front of it). Not in [`Wiring::ALL`]: only `benches/peers/` runs it.
    LensOtelLayer,
    /// `tracing_subscriber::registry()` with no layer: the floor of any `tracing` layer.
    RegistryOnly,
    /// Registry + `tracing_subscriber::fmt::layer()` writing to `io::sink`.
    FmtSink,
}

impl Wiring {
    /// Every wiring, in the order benches run them.
    pub const ALL: [Wiring; 8] = [
        Wiring::NoSubscriber,
        Wiring::LensNonExporting,
        Wiring::LensDisabledGroup,
        Wiring::LensExported,
        Wiring::PlainOtel,
        Wiring::PlainOtelLean,
        Wiring::RegistryOnly,
        Wiring::FmtSink,
    ];

    /// The case name in criterion's output.
    pub fn name(self) -> &'static str {
        match self {
            Wiring::NoSubscriber => "no_subscriber",
            Wiring::LensNonExporting => "lens_non_exporting_rank",
            Wiring::LensDisabledGroup => "lens_disabled_group",
            Wiring::LensExported => "lens_exported",
            Wiring::LensExportedNoActivation => "lens_exported_no_context_activation",
            Wiring::PlainOtel => "plain_tracing_opentelemetry",
            Wiring::PlainOtelLean => "plain_tracing_opentelemetry_lean",
            Wiring::LensOtelLayer => "lens_opentelemetry_layer",
            Wiring::RegistryOnly => "registry_only",
            Wiring::FmtSink => "fmt_sink",
        }
    }
}

/// A built wiring: the dispatcher to run under (none for [`Wiring::NoSubscriber`]) and what
/// to shut down afterwards.
pub struct Built {
    /// The subscriber to run under; `None` for [`Wiring::NoSubscriber`].
    pub dispatch: Option<Dispatch>,
    /// Spans the wiring's exporter received.
    pub exported: Arc<AtomicU64>,
    telemetry: Option<Telemetry>,
    provider: Option<SdkTracerProvider>,
}

impl Built {
    /// A wiring of `telemetry`'s: `dispatch` holds its layer, `exported` counts what its
    /// exporter received (shut down with the wiring).
    pub fn lens(telemetry: Telemetry, dispatch: Dispatch, exported: Arc<AtomicU64>) -> Built {
        Built {
            dispatch: Some(dispatch),
            exported,
            telemetry: Some(telemetry),
            provider: None,
        }
    }

    /// Runs `f` with this wiring as the thread's default subscriber.
    pub fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.dispatch {
            Some(d) => tracing::dispatcher::with_default(d, f),
            None => f(),
        }
    }

    /// Exports everything queued now and waits for it (the batch processor's flush).
    pub fn flush(&self) {
        if let Some(t) = &self.telemetry {
            let _ = t.force_flush();
        }
        if let Some(p) = &self.provider {
            let _ = p.force_flush();
        }
    }

    /// Shuts the pipeline down (flushes the batch processor).
    pub fn shutdown(self) {
        if let Some(t) = self.telemetry {
            let _ = t.shutdown(Duration::from_secs(5));
        }
        if let Some(p) = self.provider {
            let _ = p.shutdown();
        }
    }
}

/// An enabled config exporting on every rank, with `groups` enabled and no metrics.
pub fn exporting_config(groups: &str) -> LensConfig {
    LensConfig::default().with_enabled(true).with(|c| {
        c.export.strategy = "all_ranks".into();
        c.groups.span_groups = groups.into();
        c.metrics_enabled = false;
    })
}

/// A lens telemetry with a [`Discard`] exporter behind the default batch processor.
pub fn lens(config: LensConfig, rank: u32, world_size: u32, exported: Arc<AtomicU64>) -> Telemetry {
    Telemetry::builder(config)
        .place(Place::rank(rank).of(world_size))
        .span_exporter(Discard(exported))
        .allow_reinit_for_testing(true)
        .build()
        .expect("valid bench config")
}

/// Builds `wiring`.
pub fn build(wiring: Wiring) -> Built {
    let exported = Arc::new(AtomicU64::new(0));
    let mut built = Built {
        dispatch: None,
        exported: exported.clone(),
        telemetry: None,
        provider: None,
    };
    match wiring {
        Wiring::NoSubscriber => reset_max_level_to_off(),
        Wiring::LensNonExporting
        | Wiring::LensDisabledGroup
        | Wiring::LensExported
        | Wiring::LensExportedNoActivation => {
            let t = match wiring {
                Wiring::LensNonExporting => {
                    let t = lens(
                        LensConfig::default()
                            .with_enabled(true)
                            .with(|c| c.metrics_enabled = false),
                        0,
                        8,
                        exported,
                    );
                    assert!(!t.is_exporting());
                    t
                }
                Wiring::LensDisabledGroup => lens(exporting_config("default"), 0, 1, exported),
                Wiring::LensExportedNoActivation => Telemetry::builder(exporting_config("all"))
                    .span_exporter(Discard(exported))
                    .context_activation(false)
                    .allow_reinit_for_testing(true)
                    .build()
                    .expect("valid bench config"),
                _ => lens(exporting_config("all"), 0, 1, exported),
            };
            built.dispatch = Some(Dispatch::new(
                tracing_subscriber::registry().with(t.layer()),
            ));
            built.telemetry = Some(t);
        }
        Wiring::PlainOtel | Wiring::PlainOtelLean => {
            let provider = SdkTracerProvider::builder()
                .with_batch_exporter(Discard(exported))
                .build();
            built.dispatch = Some(otel_dispatch(&provider, wiring == Wiring::PlainOtelLean));
            built.provider = Some(provider);
        }
        // It needs nemo-lens's `tracing-opentelemetry` feature, which the bench binary knows.
        Wiring::LensOtelLayer => {
            panic!("benches/peers builds the lens_opentelemetry_layer wiring (Built::lens)")
        }
        Wiring::RegistryOnly => {
            built.dispatch = Some(Dispatch::new(tracing_subscriber::registry()));
        }
        Wiring::FmtSink => {
            built.dispatch = Some(Dispatch::new(
                tracing_subscriber::registry()
                    .with(tracing_subscriber::fmt::layer().with_writer(std::io::sink)),
            ));
        }
    }
    built
}

/// Registry + `tracing_opentelemetry::layer()` on `provider`'s tracer `bench`: with its
/// default options, or `lean` (no inactivity tracking, no thread, location or target
/// attributes), as [`Wiring::PlainOtel`] and [`Wiring::PlainOtelLean`] set it up.
pub fn otel_dispatch(provider: &SdkTracerProvider, lean: bool) -> Dispatch {
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("bench"));
    if lean {
        Dispatch::new(
            tracing_subscriber::registry().with(
                layer
                    .with_tracked_inactivity(false)
                    .with_threads(false)
                    .with_location(false)
                    .with_target(false),
            ),
        )
    } else {
        Dispatch::new(tracing_subscriber::registry().with(layer))
    }
}

/// Puts `tracing`'s global max level back to `OFF` once every earlier wiring is dropped, as in
/// a process that never had a subscriber, and checks that it is.
///
/// `tracing-core` recomputes the level from the live dispatchers when it knows of more than one
/// registered dispatcher, and from the current default (`NoSubscriber`, hint `TRACE`) when it
/// knows of at most one. Registering two short-lived `NoSubscriber` dispatchers at once puts it
/// in the first mode; once they are dropped, no dispatcher is alive and the rebuild lowers the
/// level to `OFF`.
///
/// # Panics
///
/// If the level is not `OFF` afterwards (a wiring's dispatcher is still alive, or `tracing-core`
/// changed how it recomputes the level): the floor would then be measured wrong.
pub fn reset_max_level_to_off() {
    {
        let _one = Dispatch::new(NoSubscriber::default());
        let _two = Dispatch::new(NoSubscriber::default());
    }
    tracing_core::callsite::rebuild_interest_cache();
    assert_eq!(
        LevelFilter::current(),
        LevelFilter::OFF,
        "the no-subscriber floor needs tracing's global max level at OFF"
    );
}

/// Runs `op` `iters` times on each of `threads` threads at once under `built`; returns the wall
/// time (so the result is the per-operation latency seen by each thread while all run).
pub fn concurrent(built: &Built, threads: usize, iters: u64, op: fn()) -> Duration {
    let barrier = std::sync::Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let barrier = &barrier;
                s.spawn(move || {
                    built.run(|| {
                        barrier.wait();
                        for _ in 0..iters {
                            op();
                        }
                    })
                })
            })
            .collect();
        barrier.wait();
        let start = std::time::Instant::now();
        for h in handles {
            h.join().expect("bench thread");
        }
        start.elapsed()
    })
}

/// Calls `span(i)` for `i = 0, 1, ...` on this thread for `duration`, at most `rate` calls per
/// second (`None`: as fast as it can; the pacing is a spin on the clock, so the producer keeps
/// its core). Returns the number of calls and the seconds they took.
pub fn produce(duration: Duration, rate: Option<f64>, span: fn(i64)) -> (u64, f64) {
    let interval = rate.map(|r| 1.0 / r);
    let start = std::time::Instant::now();
    let mut produced = 0_u64;
    while start.elapsed() < duration {
        for _ in 0..64 {
            if let Some(interval) = interval {
                let due = start + Duration::from_secs_f64(interval * produced as f64);
                while std::time::Instant::now() < due {
                    std::hint::spin_loop();
                }
            }
            span(produced as i64);
            produced += 1;
        }
    }
    (produced, start.elapsed().as_secs_f64())
}

/// The span the throughput benches produce: a training-loop span with three attributes.
#[inline]
pub fn training_span(step: i64) {
    let span = tracing::info_span!(
        "forward_backward",
        nemo.group.forward_backward = tracing::field::Empty,
        step = step,
        micro_batch = 3_i64,
        loss_scale = 65536.0_f64
    );
    let _e = span.enter();
}
