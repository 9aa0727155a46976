//! What per-step detail capture keeps per open span and per step: the span's [`DetailRole`]
//! (in its open-span entry) and the [`StepHold`] of a step, where the ended records of its
//! detail spans wait for the step's decision. The decision itself is the layer's
//! (`layer/detail.rs`); this module only holds the records.

use std::sync::Arc;

use opentelemetry::trace::SpanId;
use parking_lot::{Mutex, MutexGuard};

use crate::record::SpanState;

/// Where a span stands in per-step detail capture, found from its parent's role when it starts.
#[derive(Debug, Default)]
pub(crate) enum DetailRole {
    /// In no step (or detail capture is off): exported as usual.
    #[default]
    Outside,
    /// A span of group `step`: always exported, with the decision on its detail.
    Step(Arc<StepHold>),
    /// Inside a step but of no detail group: exported as usual.
    Inside(Arc<StepHold>),
    /// A detail span inside a step (or a span inside one): held until the step decides.
    Held(Arc<StepHold>),
}

impl DetailRole {
    /// The hold of the step the span is in (or is), if any.
    #[inline]
    pub(crate) fn hold(&self) -> Option<&Arc<StepHold>> {
        match self {
            DetailRole::Outside => None,
            DetailRole::Step(h) | DetailRole::Inside(h) | DetailRole::Held(h) => Some(h),
        }
    }
}

/// What the step's decision said, for detail spans that end after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The step is open: detail records are held.
    Open,
    /// Kept: a detail record that ends now is exported at once.
    Kept,
    /// Dropped: a detail record that ends now is dropped (counted).
    Dropped,
}

/// The held detail of one step.
#[derive(Debug)]
pub(crate) struct Held {
    /// The step's own state while it is open (truncation sets its attributes; dumps read it).
    pub(crate) step: Option<Arc<SpanState>>,
    /// Ended detail records and their approximate sizes.
    pub(crate) records: Vec<(Arc<SpanState>, usize)>,
    /// Bytes of `records` (counted in the rank's held total too).
    pub(crate) bytes: usize,
    /// Detail records dropped because the rank's held bytes reached their bound.
    pub(crate) overflow: u64,
    /// A span inside the step ended in `ERROR`.
    pub(crate) error: bool,
    pub(crate) outcome: Outcome,
}

/// The held detail of one step, shared by the entries of the spans inside it.
#[derive(Debug)]
pub(crate) struct StepHold {
    /// The step's span id (which `LensSpanExt::set_parent` keeps): a span whose OpenTelemetry
    /// parent is the step is found in it by this id.
    span_id: SpanId,
    held: Mutex<Held>,
}

impl StepHold {
    pub(crate) fn new(step: Arc<SpanState>) -> Self {
        StepHold {
            span_id: step.span_context().span_id(),
            held: Mutex::new(Held {
                step: Some(step),
                records: Vec::new(),
                bytes: 0,
                overflow: 0,
                error: false,
                outcome: Outcome::Open,
            }),
        }
    }

    /// The step's span id.
    #[inline]
    pub(crate) fn span_id(&self) -> SpanId {
        self.span_id
    }

    /// The held detail, locked (briefly: no user code runs under it).
    #[inline]
    pub(crate) fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock()
    }

    /// The held detail, unless its lock is not free within `patience` (truncation, dumps).
    pub(crate) fn try_lock_for(
        &self,
        patience: std::time::Duration,
    ) -> Option<MutexGuard<'_, Held>> {
        self.held.try_lock_for(patience)
    }
}

/// What a flight-recorder dump shows of a held record (read without taking it out).
#[derive(Debug)]
pub(crate) struct HeldView {
    pub(crate) name: String,
    pub(crate) cx: opentelemetry::trace::SpanContext,
    pub(crate) parent: Option<opentelemetry::trace::SpanId>,
    pub(crate) start: std::time::SystemTime,
    pub(crate) end: Option<std::time::SystemTime>,
    pub(crate) error: bool,
    pub(crate) attributes: Vec<opentelemetry::KeyValue>,
}

impl SpanState {
    /// Whether the span's status is `ERROR` (an `ERROR` event, a panic, `otel.status_code`).
    pub(crate) fn ended_in_error(&self) -> bool {
        self.record
            .try_lock_for(std::time::Duration::from_millis(200))
            .is_some_and(|r| {
                r.as_ref()
                    .is_some_and(|r| matches!(r.status, opentelemetry::trace::Status::Error { .. }))
            })
    }

    /// Empties the ended record for reuse (its attributes, events and links are dropped now,
    /// not when the state is reused), unless another reference to it exists; `true` when it
    /// was emptied.
    pub(crate) fn empty_for_reuse(self: &mut Arc<Self>) -> bool {
        let Some(state) = Arc::get_mut(self) else {
            return false;
        };
        let Some(r) = state.record.get_mut().as_mut() else {
            return false;
        };
        r.attributes.clear();
        r.events.clear();
        r.links.clear();
        r.stacktraces.clear();
        true
    }

    /// A copy of what the record holds, for a dump; `None` when it was exported already (or
    /// its lock is not free within 200 ms).
    pub(crate) fn held_view(&self) -> Option<HeldView> {
        let guard = self
            .record
            .try_lock_for(std::time::Duration::from_millis(200))?;
        let r = guard.as_ref().filter(|r| !r.built)?;
        Some(HeldView {
            name: r.name.to_string(),
            cx: self.cx.clone(),
            parent: r.parent.span_context().map(|p| p.span_id()),
            start: r.start,
            end: r.end,
            error: matches!(r.status, opentelemetry::trace::Status::Error { .. }),
            attributes: r.attributes.iter().cloned().collect(),
        })
    }
}
