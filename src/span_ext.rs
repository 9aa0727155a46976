//! [`LensSpanExt`]: the OpenTelemetry identity of a `tracing::Span` recorded by the lens layer.

use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry::{Context, KeyValue};

use crate::layer::WithLens;

/// OpenTelemetry views of a `tracing::Span`.
///
/// ```
/// use nemo_lens::LensSpanExt;
/// let span = tracing::info_span!("step");
/// // No lens layer records this span here:
/// assert!(span.span_context().is_none());
/// ```
pub trait LensSpanExt {
    /// The span's OpenTelemetry span context (trace and span id), if the lens layer records it.
    fn span_context(&self) -> Option<SpanContext>;
    /// A context whose active span is this span (for `inject`), or the current OpenTelemetry
    /// context when the lens layer does not record it.
    fn context(&self) -> Context;
    /// Links this span to `remote` (a link, not a parent: e.g. the step span of rank 0 received
    /// through a carrier, for pipeline stages that run concurrently). Returns `false` when the
    /// lens layer does not record this span or `remote` is invalid.
    ///
    /// ```
    /// use nemo_lens::LensSpanExt;
    /// use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    /// let remote = SpanContext::new(
    ///     TraceId::from(7), SpanId::from(9), TraceFlags::SAMPLED, true, TraceState::default());
    /// let span = tracing::info_span!("pp.recv_forward.linked");
    /// // Not recorded here (no lens layer), so nothing is linked:
    /// assert!(!span.add_link(remote, vec![]));
    /// ```
    fn add_link(&self, remote: SpanContext, attributes: Vec<KeyValue>) -> bool;
}

impl LensSpanExt for tracing::Span {
    fn span_context(&self) -> Option<SpanContext> {
        let mut out = None;
        self.with_subscriber(|(id, dispatch)| {
            if let Some(with) = dispatch.downcast_ref::<WithLens>() {
                (with.with_span)(dispatch, id, &mut |data| {
                    out = Some(data.span_context().clone())
                });
            }
        });
        out
    }

    fn add_link(&self, remote: SpanContext, attributes: Vec<KeyValue>) -> bool {
        if !remote.is_valid() {
            return false;
        }
        let mut linked = false;
        let mut link = Some((remote, attributes));
        self.with_subscriber(|(id, dispatch)| {
            if let Some(with) = dispatch.downcast_ref::<WithLens>() {
                let Some(limits) = with.limits else { return };
                (with.with_span)(dispatch, id, &mut |data| {
                    if let Some((cx, attrs)) = link.take() {
                        linked = data.is_live() && data.state().add_link(cx, attrs, limits);
                    }
                });
            }
        });
        linked
    }

    fn context(&self) -> Context {
        match self.span_context() {
            Some(sc) => Context::current().with_remote_span_context(sc),
            None => Context::current(),
        }
    }
}
