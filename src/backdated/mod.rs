//! Backdated spans: record a completed span from timestamps taken earlier.

mod decimal;

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use self::decimal::{Decimal, Parsed};

use opentelemetry::trace::{Span as _, SpanContext, Tracer};
use opentelemetry::{Context, KeyValue, Value};

use crate::error::{LensError, Result};
use crate::record::attributes::{DEFAULT_REDACT_KEYS, REDACTED};
use crate::semconv::{
    INVERTED_DELTA_SECONDS, INVERTED_END_EPOCH_SECONDS, INVERTED_SKEW, INVERTED_START_EPOCH_SECONDS,
};

const EVIDENCE_KEYS: [&str; 4] = [
    INVERTED_SKEW,
    INVERTED_START_EPOCH_SECONDS,
    INVERTED_END_EPOCH_SECONDS,
    INVERTED_DELTA_SECONDS,
];

/// A point in time as Unix-epoch seconds: a float, a [`SystemTime`], or an exact decimal (read
/// as Python's `decimal.Decimal` reads it).
///
/// ```
/// use nemo_lens::EpochSeconds;
///
/// let exact: EpochSeconds = "1700000000.000000001".parse()?;
/// assert_eq!(exact.to_nanos("start")?, 1_700_000_000_000_000_001);
/// assert_eq!(exact.to_string(), "1700000000.000000001");
/// assert_eq!("1e3".parse::<EpochSeconds>()?.to_string(), "1E+3"); // Python's str(Decimal)
/// assert_eq!(EpochSeconds::from(1.5).to_nanos("start")?, 1_500_000_000);
/// assert_eq!(EpochSeconds::from(2.0).to_string(), "2.0"); // Python's repr(float)
/// assert!(EpochSeconds::from(f64::NAN).to_nanos("start").is_err());
/// assert!("soon".parse::<EpochSeconds>().is_err());
/// # Ok::<(), nemo_lens::LensError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct EpochSeconds(Repr);

#[derive(Clone, Debug, PartialEq)]
enum Repr {
    Float(f64),
    Decimal(Decimal),
}

impl EpochSeconds {
    /// Exactly `nanos` nanoseconds after the epoch (negative: before).
    ///
    /// ```
    /// use nemo_lens::EpochSeconds;
    /// let t = EpochSeconds::from_nanos(1_500_000_001);
    /// assert_eq!(t.to_string(), "1.500000001");
    /// ```
    pub fn from_nanos(nanos: i128) -> Self {
        EpochSeconds(Repr::Decimal(Decimal::from_nanos(nanos)))
    }

    /// The current time.
    ///
    /// ```
    /// use nemo_lens::EpochSeconds;
    /// let before = EpochSeconds::from(std::time::SystemTime::now()).to_nanos("t").unwrap();
    /// assert!(EpochSeconds::now().to_nanos("t").unwrap() >= before);
    /// ```
    pub fn now() -> Self {
        SystemTime::now().into()
    }

    /// The exact value, as Python's `Decimal(str(x))`: a float through its `repr`.
    fn decimal(&self, label: &'static str) -> Result<Decimal> {
        match &self.0 {
            Repr::Decimal(d) => Ok(d.clone()),
            Repr::Float(f) if f.is_finite() => {
                match Decimal::parse(&crate::carrier::python_float(*f)) {
                    Parsed::Finite(d) => Ok(d),
                    _ => Err(non_finite(label, f.to_string())),
                }
            }
            Repr::Float(f) => Err(non_finite(label, f.to_string())),
        }
    }

    /// Nanoseconds since the epoch, truncated toward zero as Python's
    /// `int(Decimal(str(seconds)) * 1_000_000_000)`. `label` names the value in the error for a
    /// non-finite float, or a time too far from the epoch for nanoseconds in an `i128`.
    ///
    /// ```
    /// use nemo_lens::{EpochSeconds, LensError};
    /// assert_eq!(EpochSeconds::from(2.5).to_nanos("start")?, 2_500_000_000);
    /// let err = EpochSeconds::from(f64::INFINITY).to_nanos("start").unwrap_err();
    /// assert!(matches!(err, LensError::NonFiniteTime { label: "start", .. }));
    /// # Ok::<(), LensError>(())
    /// ```
    pub fn to_nanos(&self, label: &'static str) -> Result<i128> {
        let d = self.decimal(label)?;
        d.to_nanos().ok_or_else(|| {
            LensError::InvalidArgument(format!(
                "{label} {d} is out of range (nanoseconds since the epoch must fit 128 bits)"
            ))
        })
    }
}

fn non_finite(label: &'static str, value: String) -> LensError {
    LensError::NonFiniteTime { label, value }
}

impl From<f64> for EpochSeconds {
    fn from(seconds: f64) -> Self {
        EpochSeconds(Repr::Float(seconds))
    }
}

impl From<SystemTime> for EpochSeconds {
    fn from(t: SystemTime) -> Self {
        let nanos = match t.duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_nanos() as i128,
            Err(e) => -(e.duration().as_nanos() as i128),
        };
        EpochSeconds::from_nanos(nanos)
    }
}

impl fmt::Display for EpochSeconds {
    /// As Python's `str()` prints the value: a float as `repr(float)` (`2.0`, `1e-07`), a
    /// decimal as `str(Decimal)` (`1.50`, `1E+3`), a [`SystemTime`] or
    /// [`EpochSeconds::from_nanos`] as its exact decimal without trailing zeros.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Float(v) => f.pad(&crate::carrier::python_float(*v)),
            Repr::Decimal(d) => fmt::Display::fmt(d, f),
        }
    }
}

impl FromStr for EpochSeconds {
    type Err = LensError;

    /// Parses a decimal exactly as Python's `Decimal(text)`: surrounding blanks and underscores
    /// ignored, `[+-]`, digits with an optional point, an optional exponent (`1e3`, `.5`, `5.`).
    /// `nan` / `inf` / `infinity` (any case, signed) give [`LensError::NonFiniteTime`]; other
    /// text, and more than 1000 significant digits, [`LensError::InvalidArgument`]. Only ASCII
    /// digits are read.
    fn from_str(s: &str) -> Result<Self> {
        match Decimal::parse(s) {
            Parsed::Finite(d) => Ok(EpochSeconds(Repr::Decimal(d))),
            Parsed::NonFinite => Err(LensError::NonFiniteTime {
                label: "epoch seconds",
                value: s.to_owned(),
            }),
            Parsed::Invalid => Err(LensError::InvalidArgument(format!(
                "'{}' is not a number of epoch seconds (expected a decimal such as \
                 1700000000.25)",
                crate::config::env::shown(s)
            ))),
        }
    }
}

fn system_time(nanos: i128) -> SystemTime {
    let d = Duration::from_nanos(nanos.unsigned_abs().min(u128::from(u64::MAX)) as u64);
    if nanos >= 0 {
        UNIX_EPOCH + d
    } else {
        UNIX_EPOCH.checked_sub(d).unwrap_or(UNIX_EPOCH)
    }
}

fn redact(kv: KeyValue) -> KeyValue {
    if matches!(kv.value, Value::String(_)) && DEFAULT_REDACT_KEYS.contains(&kv.key.as_str()) {
        KeyValue::new(kv.key, REDACTED)
    } else {
        kv
    }
}

/// A completed span to emit; the rules are below.
///
/// ```
/// use nemo_lens::EmitSpan;
/// use opentelemetry::trace::noop::NoopTracer;
///
/// // A disabled group: nothing happens, not even validation of the (non-finite) times.
/// let out = EmitSpan::new("prefetch", f64::NAN, 0.0).group("data").emit(&NoopTracer::new());
/// assert!(matches!(out, Ok(None)));
/// ```
///
/// # Rules
///
/// Some work is only known after the fact: a launcher measured how long the container pull
/// took, a data loader logged when its prefetch started, a shell script wants one span per
/// phase. [`EmitSpan`] records such an interval as an
/// already-ended span, with the rules of Python NeMo Lens's nightly
/// `nemo.lens.span_utilities.emit_span`:
///
/// * **Group gate first.** With a `group` that is disabled ([`crate::groups::is_span_group_enabled`]),
///   nothing is done at all (no validation, no tracer call) and `Ok(None)` is returned.
/// * **Times are Unix-epoch seconds** ([`EpochSeconds`]): an `f64`, a [`SystemTime`], or a
///   decimal string read exactly (`"1700000000.123456789"`; an `f64` near today's epoch only
///   resolves about 0.25 µs). As in Python, a float counts as the decimal of its `repr`, and
///   nanoseconds are truncated toward zero. A non-finite time is a typed error,
///   [`LensError::NonFiniteTime`], and nothing is emitted.
/// * **Equal times** give a zero-duration span (an instant marker).
/// * **End before start** (clock skew between hosts): the end is clamped to the start and the
///   span carries [`INVERTED_SKEW`]` = true`, [`INVERTED_START_EPOCH_SECONDS`] and
///   [`INVERTED_END_EPOCH_SECONDS`] (the times as given, as strings) and
///   [`INVERTED_DELTA_SECONDS`] (start − end, exact, as Python's `str(Decimal)`: `0.004`,
///   `1E-9`). These keys win over caller attributes of the same name. Each such span logs a
///   warning naming the span, both times and the inversion (a `tracing` event with target
///   `nemo_lens::emit` when a subscriber is installed, else a line on stderr), as Python does.
///   Times are compared exactly: an inversion below a nanosecond is still one.
/// * **Parent**: the given [`Context`], else the context current *at the call* (backdating does
///   not recover an earlier context); pass `Context::new()` for a root span. The emitted span is
///   never made current.
/// * **Attributes** are set after the span starts (samplers do not see them, as in Python);
///   string values under the default redact keys
///   ([`TelemetryBuilder::DEFAULT_REDACT_KEYS`](crate::TelemetryBuilder::DEFAULT_REDACT_KEYS))
///   become `[REDACTED]`.
///
/// ```
/// use nemo_lens::EmitSpan;
/// use opentelemetry::trace::TracerProvider as _;
/// use opentelemetry::{Context, KeyValue};
/// use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
///
/// let exporter = InMemorySpanExporter::default();
/// let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
/// let tracer = provider.tracer("nemo.lens");
///
/// let span = EmitSpan::new("container_pull", 1_700_000_000.0, 1_700_000_012.5)
///     .parent(&Context::new())
///     .attribute(KeyValue::new("image", "nemo:24.09"))
///     .emit(&tracer)?
///     .expect("no group given, so the span is emitted");
/// assert!(span.is_valid());
///
/// let spans = exporter.get_finished_spans().unwrap();
/// let d = spans[0].end_time.duration_since(spans[0].start_time).unwrap();
/// assert_eq!(d.as_secs_f64(), 12.5);
/// # Ok::<(), nemo_lens::LensError>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "an EmitSpan does nothing until `.emit(&tracer)`"]
pub struct EmitSpan<'a> {
    name: Cow<'static, str>,
    start: EpochSeconds,
    end: EpochSeconds,
    parent: Option<&'a Context>,
    attributes: Vec<KeyValue>,
    group: Option<&'a str>,
}

impl<'a> EmitSpan<'a> {
    /// A span `name` from `start` to `end` (epoch seconds: `f64`, [`SystemTime`] or
    /// [`EpochSeconds`]).
    ///
    /// ```
    /// use nemo_lens::{EmitSpan, EpochSeconds};
    /// use std::time::{Duration, SystemTime};
    ///
    /// let end = SystemTime::now();
    /// let _from_floats = EmitSpan::new("load", 1_700_000_000.0, 1_700_000_001.5);
    /// let _from_clock = EmitSpan::new("load", end - Duration::from_secs(2), end);
    /// let _exact = EmitSpan::new("load", "1700000000.000000001".parse::<EpochSeconds>()?, EpochSeconds::now());
    /// # Ok::<(), nemo_lens::LensError>(())
    /// ```
    pub fn new(
        name: impl Into<Cow<'static, str>>,
        start: impl Into<EpochSeconds>,
        end: impl Into<EpochSeconds>,
    ) -> Self {
        EmitSpan {
            name: name.into(),
            start: start.into(),
            end: end.into(),
            parent: None,
            attributes: Vec::new(),
            group: None,
        }
    }

    /// The parent context (default: the current context at [`EmitSpan::emit`]); `&Context::new()`
    /// makes a root span.
    ///
    /// ```
    /// use nemo_lens::EmitSpan;
    /// use opentelemetry::Context;
    /// let root = Context::new();
    /// let _span = EmitSpan::new("job", 1.0, 2.0).parent(&root);
    /// ```
    pub fn parent(mut self, parent: &'a Context) -> Self {
        self.parent = Some(parent);
        self
    }

    /// Adds one attribute (string values under a redact key become `[REDACTED]`).
    ///
    /// ```
    /// use nemo_lens::EmitSpan;
    /// use opentelemetry::KeyValue;
    /// let _span = EmitSpan::new("pull", 1.0, 2.0).attribute(KeyValue::new("image", "nemo:24.09"));
    /// ```
    pub fn attribute(mut self, kv: KeyValue) -> Self {
        self.attributes.push(kv);
        self
    }

    /// Adds attributes.
    ///
    /// ```
    /// use nemo_lens::EmitSpan;
    /// use opentelemetry::KeyValue;
    /// let _span = EmitSpan::new("pull", 1.0, 2.0)
    ///     .attributes([KeyValue::new("bytes", 1_i64 << 30), KeyValue::new("cached", false)]);
    /// ```
    pub fn attributes(mut self, kvs: impl IntoIterator<Item = KeyValue>) -> Self {
        self.attributes.extend(kvs);
        self
    }

    /// Emit only when this span group is enabled ([`crate::groups::is_span_group_enabled`]), checked
    /// first thing in [`EmitSpan::emit`].
    ///
    /// ```
    /// use nemo_lens::EmitSpan;
    /// use opentelemetry::trace::noop::NoopTracer;
    /// // No telemetry is set up in this process, so every group is disabled.
    /// let out = EmitSpan::new("prefetch", 1.0, 2.0).group("data").emit(&NoopTracer::new())?;
    /// assert!(out.is_none());
    /// # Ok::<(), nemo_lens::LensError>(())
    /// ```
    pub fn group(mut self, group: &'a str) -> Self {
        self.group = Some(group);
        self
    }

    /// Records the span with `tracer` (for example [`crate::Telemetry::tracer`]).
    ///
    /// Returns the span's context, `Ok(None)` when its group is disabled, or
    /// [`LensError::NonFiniteTime`] (nothing emitted).
    ///
    /// ```
    /// use nemo_lens::{EmitSpan, LensConfig, Telemetry};
    ///
    /// // Usually the process's telemetry; here a disabled one, whose tracer records nothing.
    /// let telemetry = Telemetry::builder(LensConfig::default()).build()?;
    /// let cx = EmitSpan::new("checkpoint_upload", 10.0, 12.0).emit(&telemetry.tracer())?;
    /// assert!(cx.is_some_and(|cx| !cx.is_sampled()));
    /// # Ok::<(), nemo_lens::LensError>(())
    /// ```
    ///
    /// End before start is clamped and tagged `inverted.*`:
    ///
    /// ```
    /// use nemo_lens::EmitSpan;
    /// use opentelemetry::trace::TracerProvider as _;
    /// use opentelemetry::KeyValue;
    /// use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    ///
    /// let exporter = InMemorySpanExporter::default();
    /// let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    /// let tracer = provider.tracer("nemo.lens");
    ///
    /// EmitSpan::new("skewed", 10.5, 10.25).attribute(KeyValue::new("host", "b")).emit(&tracer)?;
    /// let span = &exporter.get_finished_spans().unwrap()[0];
    /// assert_eq!(span.start_time, span.end_time);
    /// let attr = |k: &str| span.attributes.iter().find(|kv| kv.key.as_str() == k).map(|kv| kv.value.to_string());
    /// assert_eq!(attr("inverted.skew").as_deref(), Some("true"));
    /// assert_eq!(attr("inverted.delta_seconds").as_deref(), Some("0.25"));
    /// # Ok::<(), nemo_lens::LensError>(())
    /// ```
    pub fn emit<T: Tracer>(self, tracer: &T) -> Result<Option<SpanContext>> {
        if let Some(group) = self.group
            && !crate::rank::groups::is_span_group_enabled(group)
        {
            return Ok(None);
        }
        let start_exact = self.start.decimal("start_epoch_seconds")?;
        let end_exact = self.end.decimal("end_epoch_seconds")?;
        let start = self.start.to_nanos("start_epoch_seconds")?;
        let inverted = end_exact < start_exact;
        let end = if inverted {
            start
        } else {
            self.end.to_nanos("end_epoch_seconds")?
        };

        let builder = tracer
            .span_builder(self.name.clone())
            .with_start_time(system_time(start));
        let mut span = match self.parent {
            Some(cx) => tracer.build_with_context(builder, cx),
            None => tracer.build_with_context(builder, &Context::current()),
        };
        // Evidence keys win over caller attributes of the same name (the SDK keeps duplicates,
        // so the caller's are left out rather than overwritten).
        span.set_attributes(
            self.attributes
                .into_iter()
                .filter(|kv| !(inverted && EVIDENCE_KEYS.contains(&kv.key.as_str())))
                .map(redact),
        );
        if inverted {
            let delta = start_exact.sub(&end_exact);
            span.set_attributes([
                KeyValue::new(INVERTED_SKEW, true),
                KeyValue::new(INVERTED_START_EPOCH_SECONDS, self.start.to_string()),
                KeyValue::new(INVERTED_END_EPOCH_SECONDS, self.end.to_string()),
                KeyValue::new(INVERTED_DELTA_SECONDS, delta.to_string()),
            ]);
            warn(&format!(
                "Span {} has inverted timestamps: start_epoch_seconds={start_exact}, \
                 end_epoch_seconds={end_exact}, inversion={delta} seconds; possible clock \
                 skew; clamping end to start (zero duration), inverted.skew=true",
                self.name
            ));
        }
        let context = span.span_context().clone();
        span.end_with_timestamp(system_time(end));
        Ok(Some(context))
    }
}

/// A warning on the `tracing` target `nemo_lens::emit` when a subscriber can take it; otherwise
/// (none installed, as in a command-line tool) one line on stderr.
fn warn(message: &str) {
    let no_subscriber =
        tracing::dispatcher::get_default(|d| d.is::<tracing_core::subscriber::NoSubscriber>());
    if no_subscriber {
        eprintln!("nemo-lens: warning: {message}");
    } else {
        tracing::warn!(target: "nemo_lens::emit", "{message}");
    }
}
