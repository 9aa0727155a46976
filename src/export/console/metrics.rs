//! Console metric exporter: one JSON line per metric export, in the Python layout.

use std::fmt;
use std::future::Future;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::KeyValue;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::{
    AggregatedMetrics, Exemplar, ExponentialBucket, Metric, MetricData, ResourceMetrics,
};
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use parking_lot::Mutex;

use super::writer::ConsoleWriter;
use crate::pyjson::resource_json;
use crate::pyjson::{write_f64, write_i64, write_json_str, write_value};

/// OpenTelemetry metric exporter writing one Python-NeMo-Lens-compatible JSON line per export.
///
/// The layout and an end-to-end example are below.
///
/// ```
/// use nemo_lens::export::{ConsoleMetricExporter, ConsoleWriter};
/// use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
/// use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
///
/// let exporter = ConsoleMetricExporter::new(ConsoleWriter::stdout());
/// assert_eq!(exporter.temporality(), Temporality::Cumulative);
/// let provider = SdkMeterProvider::builder()
///     .with_reader(PeriodicReader::builder(exporter).build())
///     .build();
/// # provider.shutdown().unwrap();
/// ```
///
/// # Layout
///
/// [`ConsoleMetricExporter`] is an OpenTelemetry [`PushMetricExporter`]. Every time the
/// periodic reader exports (every `OTEL_METRIC_EXPORT_INTERVAL` ms, and once more at shutdown)
/// it writes the whole batch as **one** compact JSON line, exactly as Python NeMo Lens's
/// `console` exporter does (the OTel Python SDK's `MetricsData.to_json(indent=None)`). A batch
/// with no metrics writes nothing, as in Python.
///
/// # What a line looks like
///
/// Wrapped here for reading; on disk it is one line:
///
/// ```text
/// {"resource_metrics": [{"resource": {"attributes": {"dl.rank": 3, "service.name": "nemo"},
///  "schema_url": ""}, "scope_metrics": [{"scope": {"name": "nemo.lens", "version": "",
///  "schema_url": "", "attributes": null}, "metrics": [{"name": "gen_ai.server.request.duration",
///  "description": "GenAI server request duration.", "unit": "s", "data": {"data_points":
///  [{"attributes": {"gen_ai.operation.name": "text_completion"}, "start_time_unix_nano":
///  1795990174299938380, "time_unix_nano": 1795990174300933788, "count": 1, "sum": 0.5,
///  "bucket_counts": [0, 1, 0, ...], "explicit_bounds": [0.0, 5.0, ...], "min": 0.5, "max": 0.5,
///  "exemplars": []}], "aggregation_temporality": 2}}], "schema_url": ""}], "schema_url": ""}]}
/// ```
///
/// The `data` object depends on the instrument, with Python's key order:
///
/// | instrument | `data` |
/// |---|---|
/// | gauge | `{"data_points": [{"attributes", "start_time_unix_nano", "time_unix_nano", "value", "exemplars"}]}` |
/// | counter, up-down counter | `{"data_points": [...same...], "aggregation_temporality": 2, "is_monotonic": true}` |
/// | histogram | `{"data_points": [{"attributes", "start_time_unix_nano", "time_unix_nano", "count", "sum", "bucket_counts", "explicit_bounds", "min", "max", "exemplars"}], "aggregation_temporality": 2}` |
/// | exponential histogram | `{"data_points": [{"attributes", ..., "count", "sum", "scale", "zero_count", "positive": {"offset", "bucket_counts"}, "negative": {...}, "flags", "min", "max", "exemplars"}], "aggregation_temporality": 2}` |
///
/// `aggregation_temporality` is Python's enum value: `1` delta, `2` cumulative (the default
/// here, as in Python). Integer instruments write integers (`"sum": 10`), float instruments
/// write floats like Python's `repr` (`"sum": 0.5`, `"explicit_bounds": [0.0, 5.0, ...]`); a gauge
/// point writes `"start_time_unix_nano": null`, as Python's last-value aggregation does (the Rust
/// SDK gives cumulative gauges a start time; it is left out). Strings, floats and the resource
/// follow the span exporter's rules ([`crate::export::ConsoleSpanExporter`]): `ensure_ascii` escaping,
/// non-finite floats as strings, resource attributes sorted by key. Data-point attributes come
/// sorted by key (the Rust SDK stores them that way; Python keeps the order of the first call).
///
/// # Where the lines go
///
/// Build it on a [`ConsoleWriter`]; give the span exporter a clone of the same writer and span
/// lines and metric lines interleave, each line whole, in one stream. That is what
/// [`Telemetry`](crate::Telemetry) does with `NEMO_LENS_EXPORTER=console`: stdout, or the
/// per-rank file named by `NEMO_LENS_CONSOLE_PATH`.
///
/// ```
/// use nemo_lens::export::ConsoleWriter;
/// use nemo_lens::export::ConsoleMetricExporter;
/// use opentelemetry::metrics::MeterProvider as _;
/// use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
///
/// let dir = tempfile::tempdir()?;
/// let writer = ConsoleWriter::to_path(dir.path().join("m-{rank}.jsonl").to_str().unwrap(), 0)?;
/// let provider = SdkMeterProvider::builder()
///     .with_reader(PeriodicReader::builder(ConsoleMetricExporter::new(writer)).build())
///     .build();
/// provider.meter("nemo.lens").u64_counter("steps").build().add(3, &[]);
/// provider.shutdown()?; // final export
///
/// let text = std::fs::read_to_string(dir.path().join("m-0.jsonl"))?;
/// let line: serde_json::Value = serde_json::from_str(text.trim_end())?;
/// let metric = &line["resource_metrics"][0]["scope_metrics"][0]["metrics"][0];
/// assert_eq!(metric["name"], "steps");
/// assert_eq!(metric["data"]["data_points"][0]["value"], 3);
/// assert_eq!(metric["data"]["is_monotonic"], true);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ConsoleMetricExporter {
    writer: ConsoleWriter,
    buf: Mutex<Vec<u8>>,
    temporality: Temporality,
    is_shutdown: AtomicBool,
}

impl fmt::Debug for ConsoleMetricExporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsoleMetricExporter")
            .field("writer", &self.writer)
            .field("temporality", &self.temporality)
            .field("is_shutdown", &self.is_shutdown.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl ConsoleMetricExporter {
    /// Writes to `writer` (share it with a span exporter to get one interleaved stream), with
    /// cumulative temporality like the Python console exporter.
    ///
    /// ```
    /// use nemo_lens::export::ConsoleWriter;
    /// use nemo_lens::export::ConsoleMetricExporter;
    /// let exporter = ConsoleMetricExporter::new(ConsoleWriter::to_writer(std::io::sink()));
    /// # let _ = exporter;
    /// ```
    pub fn new(writer: ConsoleWriter) -> Self {
        Self {
            writer,
            buf: Mutex::new(Vec::with_capacity(8 * 1024)),
            temporality: Temporality::Cumulative,
            is_shutdown: AtomicBool::new(false),
        }
    }

    /// Asks the reader for `temporality` instead of cumulative.
    ///
    /// ```
    /// use nemo_lens::export::{ConsoleMetricExporter, ConsoleWriter};
    /// use opentelemetry_sdk::metrics::Temporality;
    /// use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
    /// let exporter = ConsoleMetricExporter::new(ConsoleWriter::stdout()).with_temporality(Temporality::Delta);
    /// assert_eq!(exporter.temporality(), Temporality::Delta);
    /// ```
    pub fn with_temporality(mut self, temporality: Temporality) -> Self {
        self.temporality = temporality;
        self
    }

    fn export_sync(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        if self.is_shutdown.load(Ordering::Acquire) {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        if metrics.scope_metrics().next().is_none() {
            return Ok(());
        }
        self.writer.write_rendered(&self.buf, "metric", |buf| {
            write_metrics_json(metrics, buf);
            buf.push(b'\n');
        })
    }
}

impl PushMetricExporter for ConsoleMetricExporter {
    /// Writes the batch as one line and flushes. The work happens during the call; the returned
    /// future is already complete.
    fn export(&self, metrics: &ResourceMetrics) -> impl Future<Output = OTelSdkResult> + Send {
        std::future::ready(self.export_sync(metrics))
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.writer.flush().map_err(|e| {
            OTelSdkError::InternalFailure(format!(
                "console metric exporter ({}): flush failed: {e}",
                self.writer.label()
            ))
        })
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        if self.is_shutdown.swap(true, Ordering::AcqRel) {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        self.force_flush()
    }

    fn temporality(&self) -> Temporality {
        self.temporality
    }
}

/// Appends one export batch as a JSON object (no trailing newline) to `out`: the formatter of
/// [`ConsoleMetricExporter`].
pub(crate) fn write_metrics_json(metrics: &ResourceMetrics, out: &mut Vec<u8>) {
    let resource = metrics.resource();
    out.extend_from_slice(b"{\"resource_metrics\": [{\"resource\": ");
    out.extend_from_slice(resource_json(resource).as_bytes());
    out.extend_from_slice(b", \"scope_metrics\": [");
    for (i, scope_metrics) in metrics.scope_metrics().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        let scope = scope_metrics.scope();
        out.extend_from_slice(b"{\"scope\": {\"name\": ");
        write_json_str(out, scope.name());
        out.extend_from_slice(b", \"version\": ");
        write_json_str(out, scope.version().unwrap_or(""));
        out.extend_from_slice(b", \"schema_url\": ");
        write_json_str(out, scope.schema_url().unwrap_or(""));
        out.extend_from_slice(b", \"attributes\": ");
        let mut attrs = scope.attributes().peekable();
        if attrs.peek().is_none() {
            out.extend_from_slice(b"null");
        } else {
            write_attrs(out, attrs);
        }
        out.extend_from_slice(b"}, \"metrics\": [");
        for (j, metric) in scope_metrics.metrics().enumerate() {
            if j > 0 {
                out.extend_from_slice(b", ");
            }
            write_metric(out, metric);
        }
        out.extend_from_slice(b"], \"schema_url\": ");
        write_json_str(out, scope.schema_url().unwrap_or(""));
        out.push(b'}');
    }
    out.extend_from_slice(b"], \"schema_url\": ");
    write_json_str(out, resource.schema_url().unwrap_or(""));
    out.extend_from_slice(b"}]}");
}

/// A number an instrument records, written as Python writes an `int` or a `float`.
trait Num: Copy {
    fn write(self, out: &mut Vec<u8>);
}

impl Num for f64 {
    fn write(self, out: &mut Vec<u8>) {
        write_f64(out, self);
    }
}

impl Num for i64 {
    fn write(self, out: &mut Vec<u8>) {
        write_i64(out, self);
    }
}

impl Num for u64 {
    fn write(self, out: &mut Vec<u8>) {
        write_u64(out, self);
    }
}

fn write_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

fn write_metric(out: &mut Vec<u8>, metric: &Metric) {
    out.extend_from_slice(b"{\"name\": ");
    write_json_str(out, metric.name());
    out.extend_from_slice(b", \"description\": ");
    write_json_str(out, metric.description());
    out.extend_from_slice(b", \"unit\": ");
    write_json_str(out, metric.unit());
    out.extend_from_slice(b", \"data\": ");
    match metric.data() {
        AggregatedMetrics::F64(data) => write_data(out, data),
        AggregatedMetrics::I64(data) => write_data(out, data),
        AggregatedMetrics::U64(data) => write_data(out, data),
    }
    out.push(b'}');
}

fn write_data<T: Num>(out: &mut Vec<u8>, data: &MetricData<T>) {
    out.extend_from_slice(b"{\"data_points\": [");
    match data {
        MetricData::Gauge(gauge) => {
            for (i, dp) in gauge.data_points().enumerate() {
                sep(out, i);
                // Python's last-value aggregation never has a start time: always `null`.
                write_point_head(out, dp.attributes(), None, gauge.time());
                out.extend_from_slice(b", \"value\": ");
                dp.value().write(out);
                write_exemplars(out, dp.exemplars());
            }
            out.extend_from_slice(b"]}");
        }
        MetricData::Sum(sum) => {
            for (i, dp) in sum.data_points().enumerate() {
                sep(out, i);
                write_point_head(out, dp.attributes(), Some(sum.start_time()), sum.time());
                out.extend_from_slice(b", \"value\": ");
                dp.value().write(out);
                write_exemplars(out, dp.exemplars());
            }
            out.extend_from_slice(b"], \"aggregation_temporality\": ");
            write_temporality(out, sum.temporality());
            out.extend_from_slice(b", \"is_monotonic\": ");
            out.extend_from_slice(if sum.is_monotonic() {
                b"true"
            } else {
                b"false"
            });
            out.push(b'}');
        }
        MetricData::Histogram(hist) => {
            for (i, dp) in hist.data_points().enumerate() {
                sep(out, i);
                write_point_head(out, dp.attributes(), Some(hist.start_time()), hist.time());
                out.extend_from_slice(b", \"count\": ");
                write_u64(out, dp.count());
                out.extend_from_slice(b", \"sum\": ");
                dp.sum().write(out);
                out.extend_from_slice(b", \"bucket_counts\": ");
                write_list(out, dp.bucket_counts(), write_u64);
                out.extend_from_slice(b", \"explicit_bounds\": ");
                write_list(out, dp.bounds(), write_f64);
                write_min_max(out, dp.min(), dp.max());
                write_exemplars(out, dp.exemplars());
            }
            out.extend_from_slice(b"], \"aggregation_temporality\": ");
            write_temporality(out, hist.temporality());
            out.push(b'}');
        }
        MetricData::ExponentialHistogram(hist) => {
            for (i, dp) in hist.data_points().enumerate() {
                sep(out, i);
                write_point_head(out, dp.attributes(), Some(hist.start_time()), hist.time());
                out.extend_from_slice(b", \"count\": ");
                write_u64(out, dp.count() as u64);
                out.extend_from_slice(b", \"sum\": ");
                dp.sum().write(out);
                out.extend_from_slice(b", \"scale\": ");
                write_i64(out, i64::from(dp.scale()));
                out.extend_from_slice(b", \"zero_count\": ");
                write_u64(out, dp.zero_count());
                out.extend_from_slice(b", \"positive\": ");
                write_bucket(out, dp.positive_bucket());
                out.extend_from_slice(b", \"negative\": ");
                write_bucket(out, dp.negative_bucket());
                out.extend_from_slice(b", \"flags\": 0");
                write_min_max(out, dp.min(), dp.max());
                write_exemplars(out, dp.exemplars());
            }
            out.extend_from_slice(b"], \"aggregation_temporality\": ");
            write_temporality(out, hist.temporality());
            out.push(b'}');
        }
    }
}

fn sep(out: &mut Vec<u8>, i: usize) {
    if i > 0 {
        out.extend_from_slice(b", ");
    }
}

/// `{"attributes": {...}, "start_time_unix_nano": n|null, "time_unix_nano": n` (object left
/// open for the point's own fields).
fn write_point_head<'a>(
    out: &mut Vec<u8>,
    attributes: impl Iterator<Item = &'a KeyValue>,
    start: Option<SystemTime>,
    time: SystemTime,
) {
    out.extend_from_slice(b"{\"attributes\": ");
    write_attrs(out, attributes);
    out.extend_from_slice(b", \"start_time_unix_nano\": ");
    match start {
        Some(t) => write_nanos(out, t),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b", \"time_unix_nano\": ");
    write_nanos(out, time);
}

fn write_min_max<T: Num>(out: &mut Vec<u8>, min: Option<T>, max: Option<T>) {
    for (key, v) in [(b", \"min\": ".as_slice(), min), (b", \"max\": ", max)] {
        out.extend_from_slice(key);
        match v {
            Some(v) => v.write(out),
            None => out.extend_from_slice(b"null"),
        }
    }
}

/// `, "exemplars": [...]}`: closes the data point.
fn write_exemplars<'a, T: Num + 'a>(
    out: &mut Vec<u8>,
    exemplars: impl Iterator<Item = &'a Exemplar<T>>,
) {
    out.extend_from_slice(b", \"exemplars\": [");
    for (i, ex) in exemplars.enumerate() {
        sep(out, i);
        out.extend_from_slice(b"{\"filtered_attributes\": ");
        write_attrs(out, ex.filtered_attributes());
        out.extend_from_slice(b", \"value\": ");
        ex.value.write(out);
        out.extend_from_slice(b", \"time_unix_nano\": ");
        write_nanos(out, ex.time());
        // Python's Exemplar holds the ids as ints.
        out.extend_from_slice(b", \"span_id\": ");
        write_u64(out, u64::from_be_bytes(*ex.span_id()));
        out.extend_from_slice(b", \"trace_id\": ");
        let _ = write!(out, "{}", u128::from_be_bytes(*ex.trace_id()));
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
}

fn write_bucket(out: &mut Vec<u8>, bucket: &ExponentialBucket) {
    out.extend_from_slice(b"{\"offset\": ");
    write_i64(out, i64::from(bucket.offset()));
    out.extend_from_slice(b", \"bucket_counts\": ");
    write_list(out, bucket.counts(), write_u64);
    out.push(b'}');
}

fn write_list<T>(out: &mut Vec<u8>, items: impl Iterator<Item = T>, write: fn(&mut Vec<u8>, T)) {
    out.push(b'[');
    for (i, x) in items.enumerate() {
        sep(out, i);
        write(out, x);
    }
    out.push(b']');
}

fn write_attrs<'a>(out: &mut Vec<u8>, attributes: impl Iterator<Item = &'a KeyValue>) {
    out.push(b'{');
    for (i, kv) in attributes.enumerate() {
        sep(out, i);
        write_json_str(out, kv.key.as_str());
        out.extend_from_slice(b": ");
        write_value(out, &kv.value);
    }
    out.push(b'}');
}

/// Python's `AggregationTemporality`: 1 delta, 2 cumulative, 0 unspecified.
fn write_temporality(out: &mut Vec<u8>, temporality: Temporality) {
    out.push(match temporality {
        Temporality::Delta => b'1',
        Temporality::Cumulative => b'2',
        _ => b'0',
    });
}

fn write_nanos(out: &mut Vec<u8>, t: SystemTime) {
    let nanos = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let _ = write!(out, "{nanos}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_batch_has_the_python_layout() {
        let mut out = Vec::new();
        write_metrics_json(&ResourceMetrics::default(), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"resource_metrics": [{"resource": {"attributes": {}, "schema_url": ""}, "scope_metrics": [], "schema_url": ""}]}"#
        );
    }
}
