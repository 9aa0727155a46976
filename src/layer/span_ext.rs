//! [`LensSpanExt`]: the OpenTelemetry identity of a `tracing::Span` recorded by the lens layer,
//! with the methods of `tracing_opentelemetry::OpenTelemetrySpanExt` (same names, same
//! argument types), so that code written for that trait moves to the lens layer unchanged.
//! Calling a method through the wrong trait when both are imported is covered in the
//! [`LensSpanExt`] docs (*Both traits in scope*).

use opentelemetry::trace::{SpanContext, Status, TraceContextExt};
use opentelemetry::{Context, Key, KeyValue, Value};

use tracing_core::span::Id;

use crate::layer::detail::ContextPlace;
use crate::layer::hooks::{SetParentError, WithLens};

/// OpenTelemetry views and setters of a `tracing::Span` recorded by the lens layer, with the
/// method names and argument types of `tracing_opentelemetry::OpenTelemetrySpanExt` (0.34).
///
/// # Both traits in scope
///
/// `LensSpanExt` and `tracing_opentelemetry::OpenTelemetrySpanExt` are both implemented for
/// `tracing::Span` and share method names (`set_parent`, `context`, `add_link`, ...). With both
/// imported, `span.set_parent(cx)` does not compile (*multiple applicable items in scope*):
/// name the trait, `LensSpanExt::set_parent(&span, cx)` for spans of the lens layer,
/// `OpenTelemetrySpanExt::set_parent(&span, cx)` for spans of tracing-opentelemetry's layer.
/// Each trait only sees the spans of its own layer: `LensSpanExt` on a span the lens layer
/// does not record returns [`SetParentError::NotRecorded`], an empty link result (`false`) or
/// the current context.
///
/// ```
/// use nemo_lens::LensSpanExt;
/// use tracing_opentelemetry::OpenTelemetrySpanExt;
///
/// let span = tracing::info_span!("request");
/// // `span.set_parent(..)` would be ambiguous here; naming the trait is not:
/// let result = LensSpanExt::set_parent(&span, opentelemetry::Context::new());
/// // No lens layer records this span here:
/// assert_eq!(result, Err(nemo_lens::SetParentError::NotRecorded));
/// // ... and tracing-opentelemetry's trait addresses its own layer (none here either).
/// assert!(OpenTelemetrySpanExt::set_parent(&span, opentelemetry::Context::new()).is_err());
/// ```
pub trait LensSpanExt {
    /// The span's OpenTelemetry span context (trace and span id), if the lens layer records it.
    ///
    /// ```
    /// use nemo_lens::LensSpanExt;
    /// let span = tracing::info_span!("step");
    /// // No lens layer records this span here:
    /// assert!(span.span_context().is_none());
    /// ```
    fn span_context(&self) -> Option<SpanContext>;

    /// A context whose active span is this span (for `inject`), or the current OpenTelemetry
    /// context when the lens layer does not record it. The span's trace is fixed from then on
    /// ([`set_parent`](LensSpanExt::set_parent) fails), as with tracing-opentelemetry.
    fn context(&self) -> Context;

    /// Sets the span's parent to the span active in `cx` (typically extracted from a W3C
    /// `traceparent` carrier), after the span was created and before it is first entered.
    /// The span takes the parent's trace id and is recorded with it as parent (the sampling
    /// decision is taken again for the new parent; a span not sampled at creation stays
    /// unrecorded). A `cx` without a valid span makes the span a root of a new trace.
    ///
    /// Changes nothing and returns [`SetParentError::AlreadyStarted`] once the span was
    /// entered, has children or handed out its [`context`](LensSpanExt::context), and
    /// [`SetParentError::NotRecorded`] when the lens layer does not record it.
    ///
    /// ```
    /// use nemo_lens::{LensSpanExt, SetParentError};
    /// let span = tracing::info_span!("handle_request");
    /// let remote = opentelemetry::Context::new(); // e.g. a propagator's `extract`
    /// assert_eq!(span.set_parent(remote), Err(SetParentError::NotRecorded));
    /// ```
    fn set_parent(&self, cx: Context) -> Result<(), SetParentError>;

    /// Links this span to `cx` (a link, not a parent: e.g. the step span of rank 0 received
    /// through a carrier, for pipeline stages that run concurrently). Returns `false` when the
    /// lens layer does not record this span, it has ended, or `cx` is invalid.
    ///
    /// ```
    /// use nemo_lens::LensSpanExt;
    /// use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    /// let remote = SpanContext::new(
    ///     TraceId::from(7), SpanId::from(9), TraceFlags::SAMPLED, true, TraceState::default());
    /// let span = tracing::info_span!("pp.recv_forward.linked");
    /// // Not recorded here (no lens layer), so nothing is linked:
    /// assert!(!span.add_link(remote));
    /// ```
    fn add_link(&self, cx: SpanContext) -> bool;

    /// [`add_link`](LensSpanExt::add_link) with attributes on the link.
    fn add_link_with_attributes(&self, cx: SpanContext, attributes: Vec<KeyValue>) -> bool;

    /// Sets an attribute of the span (a key set again gets the new value). Returns `false`
    /// when the lens layer does not record this span or it has ended.
    ///
    /// ```
    /// use nemo_lens::LensSpanExt;
    /// let span = tracing::info_span!("step");
    /// assert!(!span.set_attribute("http.response.status_code", 200_i64));
    /// ```
    fn set_attribute(&self, key: impl Into<Key>, value: impl Into<Value>) -> bool;

    /// Sets the span's status (ordered as the SDK's: `Ok` over `Error` over `Unset`). Returns
    /// `false` when the lens layer does not record this span or it has ended.
    ///
    /// ```
    /// use nemo_lens::LensSpanExt;
    /// use opentelemetry::trace::Status;
    /// let span = tracing::info_span!("step");
    /// assert!(!span.set_status(Status::error("reward server unreachable")));
    /// ```
    fn set_status(&self, status: Status) -> bool;
}

/// Runs `f` with the lens layer of `span`'s subscriber (its first lens layer) and the span's
/// id, if there is one.
fn with_lens<R>(span: &tracing::Span, f: impl FnOnce(&WithLens, &Id) -> Option<R>) -> Option<R> {
    span.with_subscriber(|(id, dispatch)| f(dispatch.downcast_ref::<WithLens>()?, id))
        .flatten()
}

impl LensSpanExt for tracing::Span {
    fn span_context(&self) -> Option<SpanContext> {
        with_lens(self, |with, id| {
            with.with(id, |e| e.state.span_context().clone())
        })
    }

    fn context(&self) -> Context {
        crate::layer::activation::clear_stale();
        let found = with_lens(self, |with, id| {
            with.with(id, |e| {
                let sc = e.use_context();
                let place = ContextPlace::of(&e.detail, sc.span_id());
                (sc, place)
            })
        });
        match found {
            // The span's place in per-step detail capture goes with its context, for spans
            // started under it on other threads.
            Some((sc, Some(place))) => Context::current()
                .with_remote_span_context(sc)
                .with_value(place),
            Some((sc, None)) => Context::current().with_remote_span_context(sc),
            None => Context::current(),
        }
    }

    fn set_parent(&self, cx: Context) -> Result<(), SetParentError> {
        let meta = self.metadata().ok_or(SetParentError::NotRecorded)?;
        with_lens(self, |with, id| Some(with.set_parent(id, meta, cx)))
            .unwrap_or(Err(SetParentError::NotRecorded))
    }

    fn add_link(&self, cx: SpanContext) -> bool {
        self.add_link_with_attributes(cx, Vec::new())
    }

    fn add_link_with_attributes(&self, cx: SpanContext, attributes: Vec<KeyValue>) -> bool {
        if !cx.is_valid() {
            return false;
        }
        with_lens(self, |with, id| {
            let limits = with.pipeline.as_ref()?.limits;
            Some(with.state(id)?.add_link(cx, attributes, limits))
        })
        .unwrap_or(false)
    }

    fn set_attribute(&self, key: impl Into<Key>, value: impl Into<Value>) -> bool {
        let kv = KeyValue::new(key, value);
        with_lens(self, |with, id| Some(with.state(id)?.set_attribute(kv))).unwrap_or(false)
    }

    fn set_status(&self, status: Status) -> bool {
        with_lens(self, |with, id| Some(with.state(id)?.set_status(status))).unwrap_or(false)
    }
}
