//! [`Stats`]: what one telemetry has open, dropped and could not track, read at once.

use std::time::Duration;

/// The counters of one [`Telemetry`](crate::Telemetry), read by
/// [`Telemetry::stats`](crate::Telemetry::stats).
///
/// Dropped telemetry is counted, never silent: spans a full queue (or the byte budget,
/// `NEMO_LENS_QUEUE_MAX_BYTES`) refused, spans of failed or timed-out exports, spans still
/// queued when shutdown's deadline passed, spans that ended during or after shutdown, and spans
/// too large for an OTLP request. Exported + dropped = produced. Shutdown reports what was
/// dropped on stderr when it is not zero.
///
/// ```
/// let t = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
/// let stats = t.stats();
/// assert_eq!(stats.dropped(), 0);
/// assert_eq!(stats.open_spans, 0);
/// assert_eq!(stats.metric_export_interval, None); // disabled: no metric reader
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Spans the lens layer has started and not yet ended (0 in a forked child: the parent's
    /// spans are not the child's).
    pub open_spans: usize,
    /// Spans dropped (see above).
    pub dropped_spans: u64,
    /// Log records dropped: refused by a full queue or lost in a failed export.
    pub dropped_logs: u64,
    /// Metric exports that failed.
    pub failed_metric_exports: u64,
    /// SDK spans ([`Telemetry::tracer`](crate::Telemetry::tracer),
    /// [`Telemetry::opentelemetry_layer`](crate::Telemetry::opentelemetry_layer)) the closer had
    /// no room to track (more than 4096 open at once, or 8 MiB of their start data): one of
    /// them still open at shutdown is not exported as truncated. Reported on stderr at shutdown
    /// when not zero.
    pub untracked_sdk_spans: u64,
    /// Records the [flight recorder](crate::flight_recorder) dropped (its open table's probe
    /// window was full, or a ring slot was being written by another thread); 0 without a
    /// recorder.
    pub recorder_dropped: u64,
    /// Detail spans (per-step detail capture, `NEMO_LENS_DETAIL_GROUPS`) held during a step
    /// whose decision was not to keep them: left out on purpose, as sampling leaves spans out,
    /// so not in [`dropped_spans`](Stats::dropped_spans) (detail past
    /// `NEMO_LENS_DETAIL_MAX_BYTES` is). 0 without detail capture.
    pub detail_not_kept: u64,
    /// Bytes of detail held now by the open steps (at most `NEMO_LENS_DETAIL_MAX_BYTES`).
    pub detail_held_bytes: usize,
    /// The handle was set up in a parent process and inherited through `fork` without exec.
    /// Such a handle is inert: its layer records nothing, and flush and shutdown return at once
    /// without touching the parent's providers. Set up telemetry anew in the child to record
    /// there.
    pub inherited_from_parent: bool,
    /// How often metrics are exported: `OTEL_METRIC_EXPORT_INTERVAL` or 10 s, when this rank
    /// exports metrics through lens's periodic reader (`None` otherwise, and with an injected
    /// [`TelemetryBuilder::metric_reader`](crate::TelemetryBuilder::metric_reader)).
    pub metric_export_interval: Option<Duration>,
}

impl Stats {
    /// Everything the pipelines dropped: spans, log records and failed metric exports.
    pub fn dropped(&self) -> u64 {
        self.dropped_spans + self.dropped_logs + self.failed_metric_exports
    }
}
