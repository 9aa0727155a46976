//! What the pipelines dropped: [`DropCounts`] (in the handle's stats), and the live counters behind it,
//! published as the `nemo.lens.dropped` metric.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Telemetry dropped so far by this process's pipelines (in
/// [`Telemetry::stats`](crate::Telemetry::stats)): items a full queue refused, items of failed or
/// timed-out exports, and items still queued when shutdown's deadline passed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DropCounts {
    /// Spans.
    pub(crate) spans: u64,
    /// Log records.
    pub(crate) logs: u64,
    /// Metric exports that failed.
    pub(crate) metric_exports: u64,
}

impl DropCounts {
    /// Everything dropped, all signals together.
    pub(crate) fn total(&self) -> u64 {
        self.spans + self.logs + self.metric_exports
    }
}

impl fmt::Display for DropCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} spans, {} log records, {} metric exports",
            self.spans, self.logs, self.metric_exports
        )
    }
}

/// The live counters behind [`DropCounts`], shared with the pipelines.
#[derive(Debug, Default)]
pub(crate) struct DropCounters {
    pub(crate) spans: Arc<AtomicU64>,
    pub(crate) logs: Arc<AtomicU64>,
    pub(crate) metric_exports: Arc<AtomicU64>,
}

impl DropCounters {
    /// Publishes the counts as lens's own metric: the observable counter
    /// [`nemo.lens.dropped`](crate::semconv::NEMO_LENS_DROPPED), one series per `signal`
    /// (`spans`, `logs`, `metric_exports`), read at each metric export; a signal appears once
    /// it has dropped something.
    pub(crate) fn observe(&self, meter: &opentelemetry::metrics::Meter) {
        let counters = [
            ("spans", self.spans.clone()),
            ("logs", self.logs.clone()),
            ("metric_exports", self.metric_exports.clone()),
        ];
        // The instrument lives as long as the meter provider keeps its callback.
        let _ = meter
            .u64_observable_counter(crate::semconv::NEMO_LENS_DROPPED)
            .with_unit("{item}")
            .with_description(
                "Telemetry nemo-lens dropped: spans and log records refused by a full queue or \
                 lost in a failed export, and failed metric exports.",
            )
            .with_callback(move |observer| {
                for (signal, counter) in &counters {
                    // Nothing dropped, no series: a healthy run's metric batches stay exactly
                    // what the application recorded (as in Python, which has no such metric).
                    let count = counter.load(Ordering::Relaxed);
                    if count == 0 {
                        continue;
                    }
                    observer.observe(
                        count,
                        &[opentelemetry::KeyValue::new(
                            crate::semconv::NEMO_LENS_DROPPED_SIGNAL,
                            *signal,
                        )],
                    );
                }
            })
            .build();
    }

    pub(crate) fn snapshot(&self) -> DropCounts {
        DropCounts {
            spans: self.spans.load(Ordering::Relaxed),
            logs: self.logs.load(Ordering::Relaxed),
            metric_exports: self.metric_exports.load(Ordering::Relaxed),
        }
    }
}
