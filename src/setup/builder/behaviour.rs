//! How the built telemetry behaves in its process: whether it installs process-wide state,
//! whether OpenTelemetry's current context follows lens spans, what it redacts, and whether
//! error events carry backtraces.

use super::TelemetryBuilder;
use crate::record::attributes::RedactKeys;

impl TelemetryBuilder {
    /// The keys whose string values are redacted unless
    /// [`redact_keys`](TelemetryBuilder::redact_keys) replaces them (exact, case-sensitive
    /// match), as the Python `DEFAULT_REDACT_KEYS`.
    ///
    /// ```
    /// use nemo_lens::TelemetryBuilder;
    /// assert!(TelemetryBuilder::DEFAULT_REDACT_KEYS.contains(&"password"));
    /// ```
    pub const DEFAULT_REDACT_KEYS: [&'static str; 8] =
        crate::record::attributes::DEFAULT_REDACT_KEYS;

    /// Whether setup installs anything process-wide (default `true`): the global tracer and
    /// meter providers, the global W3C propagator, the process-wide span-group state read by
    /// [`crate::groups::is_span_group_enabled`], and the one-enabled-setup-per-process guard.
    ///
    /// With `false`, the [`Telemetry`](crate::Telemetry) is self-contained: its layer,
    /// [`Telemetry::tracer`](crate::Telemetry::tracer),
    /// [`Telemetry::meter`](crate::Telemetry::meter) and
    /// [`Telemetry::is_span_group_enabled`](crate::Telemetry::is_span_group_enabled) work as
    /// usual, and nothing else in the process sees it. For applications that own the globals themselves, and for
    /// tests that set up several telemetries in parallel. Several telemetries' layers may share
    /// one subscriber: each records its own spans ([`LensSpanExt`](crate::LensSpanExt)
    /// addresses the first lens layer of a subscriber).
    ///
    /// ```
    /// use nemo_lens::{LensConfig, Telemetry};
    /// use opentelemetry_sdk::trace::InMemorySpanExporter;
    ///
    /// let config = LensConfig::default().with_enabled(true).with(|c| c.export.strategy = "all_ranks".into());
    /// let (a, b) = (InMemorySpanExporter::default(), InMemorySpanExporter::default());
    /// // Two telemetries in one process: no double-init error, no global touched.
    /// let first = Telemetry::builder(config.clone()).install_globals(false).span_exporter(a).build()?;
    /// let second = Telemetry::builder(config).install_globals(false).span_exporter(b).build()?;
    /// assert!(first.is_exporting() && second.is_exporting());
    /// # Ok::<(), nemo_lens::LensError>(())
    /// ```
    pub fn install_globals(mut self, install: bool) -> Self {
        self.install_globals = install;
        self
    }

    /// Whether `opentelemetry::Context::current()` carries the entered lens span (default
    /// `true`), so OpenTelemetry-API code inside lens spans (a global propagator injecting
    /// `traceparent` into HTTP headers, tonic interceptors, spans of an OpenTelemetry tracer)
    /// sees it as the current span. A span's context is built at its first enter (one
    /// allocation) and attached by clone at every enter, which costs about what the registry's
    /// own enter and exit cost (figures in `docs/performance.md`); turn it off
    /// when no such code runs inside lens spans.
    ///
    /// ```
    /// use nemo_lens::{LensConfig, Telemetry};
    /// use opentelemetry::trace::TraceContextExt;
    /// use tracing_subscriber::prelude::*;
    ///
    /// let config = LensConfig::default()
    ///     .with_enabled(true)
    ///     .with(|c| {
    ///         c.export.strategy = "all_ranks".into();
    ///         c.metrics_enabled = false;
    ///     });
    /// let telemetry = Telemetry::builder(config)
    ///     .install_globals(false)
    ///     .span_exporter(opentelemetry_sdk::trace::InMemorySpanExporter::default())
    ///     .build()?;
    /// let _guard = tracing_subscriber::registry().with(telemetry.layer()).set_default();
    /// tracing::info_span!("job", nemo.group.job = tracing::field::Empty).in_scope(|| {
    ///     // An HTTP client's OpenTelemetry middleware would inject this span's context:
    ///     assert!(opentelemetry::Context::current().span().span_context().is_valid());
    /// });
    /// assert!(!opentelemetry::Context::current().span().span_context().is_valid());
    /// # telemetry.shutdown(std::time::Duration::from_secs(5))?;
    /// # Ok::<(), nemo_lens::LensError>(())
    /// ```
    pub fn context_activation(mut self, activate: bool) -> Self {
        self.context_activation = activate;
        self
    }

    /// The keys whose string values are written as `[REDACTED]`, replacing the default set
    /// ([`TelemetryBuilder::DEFAULT_REDACT_KEYS`], as Python's `redact_keys=` argument replaces it): span
    /// attributes, span events and bridged log records alike (exact, case-sensitive match).
    /// Pass an empty list to redact nothing. To extend the default set instead, chain it:
    ///
    /// ```
    /// use nemo_lens::{LensConfig, Telemetry, TelemetryBuilder};
    /// use opentelemetry_sdk::trace::InMemorySpanExporter;
    /// use tracing_subscriber::prelude::*;
    ///
    /// let spans = InMemorySpanExporter::default();
    /// let config = LensConfig::default().with_enabled(true).with(|c| c.export.strategy = "all_ranks".into());
    /// let telemetry = Telemetry::builder(config)
    ///     .install_globals(false)
    ///     .span_exporter(spans.clone())
    ///     .redact_keys(TelemetryBuilder::DEFAULT_REDACT_KEYS.iter().copied().chain(["api_key"]))
    ///     .build()?;
    /// tracing::subscriber::with_default(tracing_subscriber::registry().with(telemetry.layer()), || {
    ///     tracing::info_span!("call", api_key = "sk-123", token = "t", model = "m").in_scope(|| {});
    /// });
    /// telemetry.force_flush()?;
    /// let span = &spans.get_finished_spans().unwrap()[0];
    /// let value = |k: &str| span.attributes.iter().find(|kv| kv.key.as_str() == k).unwrap().value.to_string();
    /// assert_eq!(value("api_key"), "[REDACTED]");
    /// assert_eq!(value("token"), "[REDACTED]"); // still in the (extended) default set
    /// assert_eq!(value("model"), "m");
    /// # Ok::<(), nemo_lens::LensError>(())
    /// ```
    pub fn redact_keys<I, K>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = K>,
        K: Into<String>,
    {
        self.redact = RedactKeys::custom(keys);
        self
    }

    /// Gives every `ERROR` event and `#[instrument(err)]` an `exception.stacktrace`, and every
    /// recorded panic too, whatever `RUST_BACKTRACE` says (default: off).
    ///
    /// Off, an `ERROR` event carries no backtrace, and a panic (with
    /// [`Telemetry::install_panic_hook`](crate::Telemetry::install_panic_hook)) carries one
    /// when `RUST_BACKTRACE` / `RUST_LIB_BACKTRACE` enable backtraces, as `std`'s panic message
    /// does. On, the stack is captured on the thread of the event (its frames' addresses:
    /// microseconds) and resolved into text on the export worker when the span is exported,
    /// never on the training thread.
    /// Resolving costs the worker up to hundreds of microseconds per backtrace (a steady stream
    /// of errors can make it fall behind, and the queue then drops and counts spans), and the
    /// first resolution maps and parses the binary's debug information, which raises the
    /// process's resident memory once (tens of megabytes for a binary with line tables). The
    /// text starts at the event's own frame (a panic's: the panicking frame) and is cut to the
    /// attribute value length limit. With
    /// [`ExportMode::Synchronous`](crate::ExportMode::Synchronous) the thread that ends the span
    /// resolves it.
    ///
    /// ```
    /// use nemo_lens::{LensConfig, Telemetry};
    /// use opentelemetry_sdk::trace::InMemorySpanExporter;
    /// use tracing_subscriber::prelude::*;
    ///
    /// let spans = InMemorySpanExporter::default();
    /// let config = LensConfig::default().with_enabled(true).with(|c| c.export.strategy = "all_ranks".into());
    /// let telemetry = Telemetry::builder(config)
    ///     .install_globals(false)
    ///     .span_exporter(spans.clone())
    ///     .error_backtraces(true)
    ///     .build()?;
    /// tracing::subscriber::with_default(tracing_subscriber::registry().with(telemetry.layer()), || {
    ///     tracing::info_span!("step").in_scope(|| tracing::error!("nan loss"));
    /// });
    /// telemetry.force_flush()?;
    /// let event = &spans.get_finished_spans().unwrap()[0].events.events[0];
    /// let keys: Vec<&str> = event.attributes.iter().map(|kv| kv.key.as_str()).collect();
    /// assert_eq!(
    ///     keys,
    ///     ["exception.type", "exception.message", "exception.stacktrace", "exception.escaped"]
    /// );
    /// # Ok::<(), nemo_lens::LensError>(())
    /// ```
    pub fn error_backtraces(mut self, on: bool) -> Self {
        self.error_backtraces = on;
        self
    }
}
