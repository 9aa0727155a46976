//! [`LensSpanExt`]: the OpenTelemetry identity of a `tracing::Span` recorded by the lens layer.

use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, TraceContextExt};

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

    fn context(&self) -> Context {
        match self.span_context() {
            Some(sc) => Context::current().with_remote_span_context(sc),
            None => Context::current(),
        }
    }
}
