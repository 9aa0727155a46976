//! [`QueueConfig`]: the sizes and timeouts of a batch queue, read from the standard variables.

use std::time::Duration;

use super::budget::DEFAULT_QUEUE_MAX_BYTES;
use crate::error::{LensError, Result};

/// The largest accepted queue size (16 Mi items): a larger value would reserve gigabytes up
/// front.
pub(crate) const MAX_QUEUE_SIZE_LIMIT: usize = 1 << 24;

/// Sizes and timeouts of the batch queues of the span and log-record
/// processors, read at setup from the
/// standard variables ([`QueueConfig::from_env`]):
///
/// | Variable (spans; logs use `OTEL_BLRP_*`) | Default | Meaning |
/// |---|---|---|
/// | `OTEL_BSP_MAX_QUEUE_SIZE` | 2048 | items waiting, at most ([`MAX_QUEUE_SIZE_LIMIT`] at most) |
/// | `OTEL_BSP_SCHEDULE_DELAY` | 5000 (logs: 1000) | ms between two exports of a partial batch |
/// | `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` | 512 | items per export (at most the queue size) |
/// | `OTEL_BSP_EXPORT_TIMEOUT` | 30000 | ms one export may take before its batch counts as dropped |
/// | `NEMO_LENS_QUEUE_MAX_BYTES` | 67108864 (64 MiB) | bytes each queue may hold, waiting and in flight; at least 65536 |
///
/// An empty or blank value means the default; anything else that is not a positive integer (a
/// non-negative one for the delay) is a [`LensError::InvalidValue`] naming the variable. A full
/// queue never blocks the thread that ends a span: the item is dropped and counted
/// ([`Telemetry::stats`](crate::Telemetry::stats)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QueueConfig {
    /// Items that may wait for export; more are dropped (and counted).
    pub(crate) max_queue_size: usize,
    /// Time between two exports when no full batch is waiting.
    pub(crate) scheduled_delay: Duration,
    /// Items per export call (clamped to the queue size).
    pub(crate) max_export_batch_size: usize,
    /// Time one export may take; then its batch counts as dropped.
    pub(crate) export_timeout: Duration,
    /// Bytes the queue may hold, waiting and in flight (`NEMO_LENS_QUEUE_MAX_BYTES`); more are
    /// dropped (and counted).
    pub(crate) max_queue_bytes: usize,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            max_queue_size: 2048,
            scheduled_delay: Duration::from_millis(5000),
            max_export_batch_size: 512,
            export_timeout: Duration::from_millis(30000),
            max_queue_bytes: DEFAULT_QUEUE_MAX_BYTES,
        }
    }
}

/// Parses `<prefix>_<key>` from `lookup`: `None` when unset or blank.
fn read_u64(
    lookup: &dyn Fn(&str) -> Option<String>,
    prefix: &str,
    key: &str,
    min: u64,
    max: u64,
) -> Result<Option<u64>> {
    let var = format!("{prefix}_{key}");
    let Some(raw) = lookup(&var) else {
        return Ok(None);
    };
    let value = raw.trim();
    if value.is_empty() {
        return Ok(None);
    }
    match value.parse::<u64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(Some(v)),
        _ => Err(LensError::InvalidValue {
            var,
            value: raw.chars().take(64).collect(),
            expected: format!("an integer from {min} to {max}"),
        }),
    }
}

impl QueueConfig {
    /// Reads `<prefix>_MAX_QUEUE_SIZE`, `_SCHEDULE_DELAY` (ms), `_MAX_EXPORT_BATCH_SIZE` and
    /// `_EXPORT_TIMEOUT` (ms) through `lookup` (`prefix` is `OTEL_BSP` for spans, `OTEL_BLRP`
    /// for log records), over the defaults.
    pub(crate) fn from_env(prefix: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self> {
        Self::from_env_over(prefix, QueueConfig::default(), lookup)
    }

    /// The defaults of the log-record processor: as spans, but exported every second (the
    /// `OTEL_BLRP_SCHEDULE_DELAY` default of the OpenTelemetry specification).
    pub(crate) fn logs_default() -> Self {
        QueueConfig {
            scheduled_delay: Duration::from_millis(1000),
            ..QueueConfig::default()
        }
    }

    /// [`QueueConfig::from_env`] over other defaults (e.g. [`QueueConfig::logs_default`]).
    pub(crate) fn from_env_over(
        prefix: &str,
        d: QueueConfig,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self> {
        const DAY_MS: u64 = 24 * 3600 * 1000;
        let limit = MAX_QUEUE_SIZE_LIMIT as u64;
        let queue = read_u64(lookup, prefix, "MAX_QUEUE_SIZE", 1, limit)?
            .map_or(d.max_queue_size, |v| v as usize);
        let batch = read_u64(lookup, prefix, "MAX_EXPORT_BATCH_SIZE", 1, limit)?
            .map_or(d.max_export_batch_size, |v| v as usize);
        let delay = read_u64(lookup, prefix, "SCHEDULE_DELAY", 0, DAY_MS)?
            .map_or(d.scheduled_delay, Duration::from_millis);
        let timeout = read_u64(lookup, prefix, "EXPORT_TIMEOUT", 1, DAY_MS)?
            .map_or(d.export_timeout, Duration::from_millis);
        Ok(QueueConfig {
            max_queue_size: queue,
            scheduled_delay: delay,
            max_export_batch_size: batch.min(queue),
            export_timeout: timeout,
            max_queue_bytes: d.max_queue_bytes,
        })
    }
}
