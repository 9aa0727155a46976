//! Per-step detail capture (`NEMO_LENS_DETAIL_GROUPS`): the spans of the detail groups that run
//! inside a step are recorded as usual, but their ended records are held on the rank instead of
//! queued; when the step ends, the rank decides whether the step deserved its detail (slow
//! against its own recent steps, an error inside it, a capture requested through the control
//! file, or the first step, as a baseline) and queues the held records or drops them, counted.
//! The step span itself is always exported and says what was decided
//! ([`semconv::NEMO_DETAIL_KEPT`] and the attributes beside it).
//!
//! "Inside a step" follows the parent the span is exported with: a span's place is taken from
//! its parent's entry when it starts ([`DetailRole`]), so a span of another thread is inside
//! the step when its (explicit or contextual) parent is. A span whose parent is an
//! OpenTelemetry context (attached, or given by `LensSpanExt::set_parent`, which decides the
//! place again) takes the place the context carries ([`ContextPlace`]: the contexts lens hands
//! out for a step, and for any span through `LensSpanExt::context`), else that of the open
//! step whose span is the context's. A span with neither (a thread that entered nothing) is
//! outside every step and exported as usual. A span under a held span is held with it, so that
//! a kept step never exports a child without its parent, and a dropped one leaves no orphan.
//!
//! Held records are bounded in bytes for the whole rank ([`DetailSettings::max_bytes`]): a
//! record past the bound is dropped at once, counted in the step's `nemo.detail.overflow` and
//! in the rank's span drop counter. Truncation (shutdown, SIGTERM, the end of a panicked
//! process, a subscriber dropped with its steps open) exports the held detail of the open
//! steps as kept (reason `truncated`); a dump of the flight recorder (a hang) writes the held
//! detail of the open steps into the dump.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{SpanId, TraceContextExt};
use opentelemetry::{Context, KeyValue};
use parking_lot::Mutex;
use tracing_core::Metadata;

use crate::rank::groups::{GroupGate, STEP};
use crate::record::SpanState;
use crate::record::held::{DetailRole, HeldView, Outcome, StepHold};
use crate::semconv;

/// Where the records of a decided step go: the layer's pipeline. A trait, so that this module
/// does not depend on the pipeline that owns it.
pub(crate) trait Outlet {
    /// Hands an ended record (of `size` bytes) on to be exported.
    fn finish(&self, state: Arc<SpanState>, size: usize);
    /// Drops an ended record that will not be exported.
    fn discard(&self, state: Arc<SpanState>);
}

/// Why a step's detail was kept (`nemo.detail.reason`).
pub(crate) const REASON_SLOW: &str = "slow";
pub(crate) const REASON_ERROR: &str = "error";
pub(crate) const REASON_REQUESTED: &str = "requested";
pub(crate) const REASON_FIRST: &str = "first";
pub(crate) const REASON_TRUNCATED: &str = "truncated";

/// How long truncation and dumps wait for a step's held detail.
const LOCK_PATIENCE: Duration = Duration::from_millis(200);

/// What the job asked of detail capture (resolved from [`GroupsConfig`](crate::GroupsConfig)).
#[derive(Clone, Debug)]
pub(crate) struct DetailSettings {
    /// The detail groups, lower-case (never empty: no groups, no capture).
    pub(crate) groups: Vec<String>,
    /// A step is slow past this many times the median of the window.
    pub(crate) slow_factor: f64,
    /// How many previous steps the median is taken over.
    pub(crate) window: usize,
    /// The most bytes of held records on the rank.
    pub(crate) max_bytes: usize,
}

/// The parent's part in a new span's place (see [`DetailCapture::role`]).
#[derive(Debug, Default)]
pub(crate) struct ParentPlace {
    hold: Option<Arc<StepHold>>,
    held: bool,
}

impl ParentPlace {
    /// What a child of the span with `role` inherits.
    #[inline]
    pub(crate) fn of(role: &DetailRole) -> Self {
        ParentPlace {
            hold: role.hold().cloned(),
            held: matches!(role, DetailRole::Held(_)),
        }
    }
}

/// A span's place in detail capture, carried as a value by the OpenTelemetry contexts lens
/// builds for it (a step's activated context, `LensSpanExt::context`), so that a span whose
/// parent is such a context, on any thread, finds its step without a lookup. It describes the
/// context's span only: a context derived from it for another span (activation inherits the
/// values of the current context) carries another span id, and its place is not taken.
#[derive(Clone, Debug)]
pub(crate) struct ContextPlace {
    span_id: SpanId,
    hold: Arc<StepHold>,
    held: bool,
}

impl ContextPlace {
    /// The place of span `span_id` with `role`, when it is in a step (or is one).
    pub(crate) fn of(role: &DetailRole, span_id: SpanId) -> Option<Self> {
        Some(ContextPlace {
            span_id,
            hold: role.hold()?.clone(),
            held: matches!(role, DetailRole::Held(_)),
        })
    }

    /// The place of span `span_id` when it is a step: what a step's activated context carries
    /// (one per step; the spans inside it build their contexts without it).
    #[inline]
    pub(crate) fn of_step(role: &DetailRole, span_id: SpanId) -> Option<Self> {
        match role {
            DetailRole::Step(_) => ContextPlace::of(role, span_id),
            _ => None,
        }
    }
}

/// The rank's detail capture, shared by the layer's callbacks (every thread), truncation and
/// the flight recorder.
#[derive(Debug)]
pub(crate) struct DetailCapture {
    settings: DetailSettings,
    /// The group of a callsite (declared, or by a span-group rule).
    gate: Arc<GroupGate>,
    /// Bytes of held records on the rank, every step together.
    held_bytes: AtomicUsize,
    /// Durations of the previous steps (at most `window`), oldest first.
    history: Mutex<VecDeque<Duration>>,
    /// The baseline step was kept.
    baseline_taken: AtomicBool,
    /// Steps still to keep, asked through the control file.
    requested: AtomicU64,
    /// The rank's span drop counter (overflow counts there).
    dropped_spans: Arc<AtomicU64>,
    /// Held records dropped by a step's decision.
    decided_away: AtomicU64,
    /// The steps open now (truncation and dumps reach their held detail).
    open: Mutex<Vec<Arc<StepHold>>>,
}

impl DetailCapture {
    pub(crate) fn new(
        settings: DetailSettings,
        gate: Arc<GroupGate>,
        dropped_spans: Arc<AtomicU64>,
    ) -> Self {
        DetailCapture {
            settings,
            gate,
            held_bytes: AtomicUsize::new(0),
            history: Mutex::new(VecDeque::new()),
            baseline_taken: AtomicBool::new(false),
            requested: AtomicU64::new(0),
            dropped_spans,
            decided_away: AtomicU64::new(0),
            open: Mutex::new(Vec::new()),
        }
    }

    /// Keep the detail of the next `steps` steps to end (the control file's `detail N`);
    /// replaces a request still running.
    pub(crate) fn request(&self, steps: u64) {
        self.requested.store(steps, Ordering::Relaxed);
    }

    /// Held records a step's decision dropped so far.
    pub(crate) fn dropped_by_decision(&self) -> u64 {
        self.decided_away.load(Ordering::Relaxed)
    }

    /// Bytes of records held now.
    pub(crate) fn held_bytes(&self) -> usize {
        self.held_bytes.load(Ordering::Relaxed)
    }

    /// The place of a new (recorded) span of `meta` whose parent is in `parent`.
    pub(crate) fn role(
        &self,
        meta: &Metadata<'_>,
        parent: ParentPlace,
        state: &Arc<SpanState>,
    ) -> DetailRole {
        let group = self.gate.group_of(meta);
        if group == Some(STEP) {
            let hold = Arc::new(StepHold::new(state.clone()));
            self.open.lock().push(hold.clone());
            return DetailRole::Step(hold);
        }
        let Some(hold) = parent.hold else {
            return DetailRole::Outside;
        };
        let detail = group.is_some_and(|g| self.settings.groups.iter().any(|d| d == g));
        if parent.held || detail {
            DetailRole::Held(hold)
        } else {
            DetailRole::Inside(hold)
        }
    }

    /// The place of a span whose parent is the span of `cx` (an OpenTelemetry context, not a
    /// lens parent): the place `cx` carries for its span, else the open step whose span it is,
    /// else none.
    pub(crate) fn place_of_context(&self, cx: &Context) -> ParentPlace {
        let span_id = cx.span().span_context().span_id();
        if let Some(place) = cx.get::<ContextPlace>().filter(|p| p.span_id == span_id) {
            return ParentPlace {
                hold: Some(place.hold.clone()),
                held: place.held,
            };
        }
        // A context made from the step's span context alone (`LensSpanExt::span_context`, an
        // in-process extract): the open steps are few.
        let hold = self
            .open
            .lock()
            .iter()
            .find(|h| h.span_id() == span_id)
            .cloned();
        ParentPlace { hold, held: false }
    }

    /// A span not used yet got a new parent (`LensSpanExt::set_parent`), whose place is `place`,
    /// and a new `state`: its role is decided again by that parent; a step stays a step, with
    /// its new state.
    pub(crate) fn reparented(
        &self,
        meta: &Metadata<'_>,
        role: &mut DetailRole,
        place: ParentPlace,
        state: &Arc<SpanState>,
    ) {
        match role {
            DetailRole::Step(hold) => {
                let mut held = hold.lock();
                if held.step.is_some() {
                    held.step = Some(state.clone());
                }
            }
            _ => *role = self.role(meta, place, state),
        }
    }

    /// A span closed: its record is exported, held, or dropped, by its role.
    pub(crate) fn closed(&self, pipeline: &impl Outlet, role: DetailRole, state: Arc<SpanState>) {
        match role {
            DetailRole::Outside => {
                if let Some(size) = state.end() {
                    pipeline.finish(state, size);
                }
            }
            DetailRole::Inside(hold) => {
                let Some(size) = state.end() else { return };
                if state.ended_in_error() {
                    hold.lock().error = true;
                }
                pipeline.finish(state, size);
            }
            DetailRole::Held(hold) => self.hold(pipeline, &hold, state),
            DetailRole::Step(hold) => self.step_ended(pipeline, &hold, state),
        }
    }

    fn hold(&self, pipeline: &impl Outlet, hold: &StepHold, state: Arc<SpanState>) {
        let Some(size) = state.end() else { return };
        let error = state.ended_in_error();
        let mut held = hold.lock();
        match held.outcome {
            Outcome::Open => {
                held.error |= error;
                let bytes = self.held_bytes.fetch_add(size, Ordering::Relaxed) + size;
                if bytes > self.settings.max_bytes {
                    self.held_bytes.fetch_sub(size, Ordering::Relaxed);
                    held.overflow += 1;
                    drop(held);
                    self.dropped_spans.fetch_add(1, Ordering::Relaxed);
                    pipeline.discard(state);
                } else {
                    held.bytes += size;
                    held.records.push((state, size));
                }
            }
            Outcome::Kept => {
                drop(held);
                pipeline.finish(state, size);
            }
            Outcome::Dropped => {
                drop(held);
                self.decided_away.fetch_add(1, Ordering::Relaxed);
                pipeline.discard(state);
            }
        }
    }

    /// The step ends: decide, say so on the step's record, end it, and export the held detail
    /// (before the step: children first, as usual) or drop it.
    fn step_ended(&self, pipeline: &impl Outlet, hold: &Arc<StepHold>, state: Arc<SpanState>) {
        let now = SystemTime::now();
        let duration = state
            .start_time()
            .and_then(|start| now.duration_since(start).ok())
            .unwrap_or_default();
        let step_error = state.ended_in_error();
        self.open.lock().retain(|h| !Arc::ptr_eq(h, hold));
        let decided = {
            let mut held = hold.lock();
            held.step = None;
            (held.outcome == Outcome::Open).then(|| {
                let reason = self.decide(duration, held.error || step_error);
                held.outcome = if reason.is_some() {
                    Outcome::Kept
                } else {
                    Outcome::Dropped
                };
                self.held_bytes.fetch_sub(held.bytes, Ordering::Relaxed);
                held.bytes = 0;
                (reason, std::mem::take(&mut held.records), held.overflow)
            })
        };
        // Decided already (truncation got there first): the step only ends.
        if let Some((reason, records, overflow)) = decided {
            mark(&state, reason, records.len(), overflow);
            match reason {
                Some(_) => {
                    for (record, size) in records {
                        pipeline.finish(record, size);
                    }
                }
                None => {
                    self.decided_away
                        .fetch_add(records.len() as u64, Ordering::Relaxed);
                    records.into_iter().for_each(|(r, _)| pipeline.discard(r));
                }
            }
        }
        if let Some(size) = state.end() {
            pipeline.finish(state, size);
        }
    }

    /// The decision for a step that lasted `duration`: why its detail is kept, or `None`.
    /// Every step's duration joins the window, whatever was decided.
    fn decide(&self, duration: Duration, error: bool) -> Option<&'static str> {
        let requested = self
            .requested
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok();
        let mut history = self.history.lock();
        let reason = if error {
            Some(REASON_ERROR)
        } else if requested {
            Some(REASON_REQUESTED)
        } else if !self.baseline_taken.swap(true, Ordering::Relaxed) {
            Some(REASON_FIRST)
        } else if median(&history)
            .is_some_and(|m| duration.as_secs_f64() > self.settings.slow_factor * m.as_secs_f64())
        {
            Some(REASON_SLOW)
        } else {
            None
        };
        // The first step always joins the window, even when an error kept it.
        self.baseline_taken.store(true, Ordering::Relaxed);
        if history.len() == self.settings.window {
            history.pop_front();
        }
        history.push_back(duration);
        reason
    }

    /// Truncation: every open step keeps its held detail (reason `truncated`), exported now
    /// through `pipeline`; the step spans themselves are truncated by the caller. Returns how
    /// many records were released.
    pub(crate) fn release_open(&self, pipeline: &impl Outlet) -> usize {
        let open = match self.open.try_lock_for(LOCK_PATIENCE) {
            Some(mut open) => std::mem::take(&mut *open),
            None => return 0,
        };
        self.release(pipeline, open)
    }

    /// Truncation of some open steps (`steps`: those of a dropped subscriber's layer), as
    /// [`DetailCapture::release_open`] does for all.
    pub(crate) fn release_steps(&self, pipeline: &impl Outlet, steps: Vec<Arc<StepHold>>) -> usize {
        if steps.is_empty() {
            return 0;
        }
        if let Some(mut open) = self.open.try_lock_for(LOCK_PATIENCE) {
            open.retain(|h| !steps.iter().any(|s| Arc::ptr_eq(h, s)));
        }
        self.release(pipeline, steps)
    }

    fn release(&self, pipeline: &impl Outlet, steps: Vec<Arc<StepHold>>) -> usize {
        let mut released = 0;
        for hold in steps {
            let Some(mut held) = hold.try_lock_for(LOCK_PATIENCE) else {
                continue;
            };
            if held.outcome != Outcome::Open {
                continue;
            }
            held.outcome = Outcome::Kept;
            self.held_bytes.fetch_sub(held.bytes, Ordering::Relaxed);
            held.bytes = 0;
            let records = std::mem::take(&mut held.records);
            let (step, overflow) = (held.step.take(), held.overflow);
            drop(held);
            if let Some(step) = step {
                mark(&step, Some(REASON_TRUNCATED), records.len(), overflow);
            }
            released += records.len();
            for (record, size) in records {
                pipeline.finish(record, size);
            }
        }
        released
    }

    /// Copies of the records held by the open steps, for a flight-recorder dump.
    pub(crate) fn held_views(&self) -> Vec<HeldView> {
        let open: Vec<Arc<StepHold>> = match self.open.try_lock_for(LOCK_PATIENCE) {
            Some(open) => open.clone(),
            None => return Vec::new(),
        };
        let mut views = Vec::new();
        for hold in open {
            let records: Vec<Arc<SpanState>> = match hold.try_lock_for(LOCK_PATIENCE) {
                Some(held) => held.records.iter().map(|(s, _)| s.clone()).collect(),
                None => continue,
            };
            views.extend(records.iter().filter_map(|s| s.held_view()));
        }
        views
    }
}

/// The decision's attributes on the step's (open) record.
fn mark(step: &SpanState, reason: Option<&'static str>, held: usize, overflow: u64) {
    step.set_attribute(KeyValue::new(semconv::NEMO_DETAIL_KEPT, reason.is_some()));
    step.set_attribute(KeyValue::new(semconv::NEMO_DETAIL_HELD, held as i64));
    if let Some(reason) = reason {
        step.set_attribute(KeyValue::new(semconv::NEMO_DETAIL_REASON, reason));
    }
    if overflow > 0 {
        step.set_attribute(KeyValue::new(
            semconv::NEMO_DETAIL_OVERFLOW,
            i64::try_from(overflow).unwrap_or(i64::MAX),
        ));
    }
}

/// The median of `window` (the lower middle of an even count), `None` when it is empty.
fn median(window: &VecDeque<Duration>) -> Option<Duration> {
    if window.is_empty() {
        return None;
    }
    let mut sorted: Vec<Duration> = window.iter().copied().collect();
    let middle = (sorted.len() - 1) / 2;
    Some(*sorted.select_nth_unstable(middle).1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capture(window: usize) -> DetailCapture {
        DetailCapture::new(
            DetailSettings {
                groups: vec!["forward_backward".into()],
                slow_factor: 2.0,
                window,
                max_bytes: 1 << 20,
            },
            Arc::new(GroupGate::new(Vec::new())),
            Arc::default(),
        )
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_first_step_is_the_baseline_then_only_slow_steps_are_kept() {
        let c = capture(4);
        assert_eq!(c.decide(10 * MS, false), Some(REASON_FIRST));
        assert_eq!(c.decide(10 * MS, false), None);
        assert_eq!(c.decide(20 * MS, false), None, "2x is not more than 2x");
        assert_eq!(c.decide(21 * MS, false), Some(REASON_SLOW));
        assert_eq!(c.decide(5 * MS, true), Some(REASON_ERROR));
    }

    #[test]
    fn the_window_forgets_old_steps() {
        let c = capture(2);
        c.decide(100 * MS, false);
        c.decide(10 * MS, false);
        c.decide(10 * MS, false);
        // The window is [10, 10]: the 100 ms step is forgotten.
        assert_eq!(c.decide(30 * MS, false), Some(REASON_SLOW));
    }

    #[test]
    fn a_request_keeps_the_next_steps_then_runs_out() {
        let c = capture(8);
        c.decide(10 * MS, false);
        c.request(2);
        assert_eq!(c.decide(10 * MS, false), Some(REASON_REQUESTED));
        assert_eq!(c.decide(10 * MS, false), Some(REASON_REQUESTED));
        assert_eq!(c.decide(10 * MS, false), None);
    }

    fn span_cx(span: u64) -> opentelemetry::trace::SpanContext {
        opentelemetry::trace::SpanContext::new(
            opentelemetry::trace::TraceId::from(1),
            SpanId::from(span),
            opentelemetry::trace::TraceFlags::SAMPLED,
            false,
            opentelemetry::trace::TraceState::default(),
        )
    }

    #[test]
    fn a_context_gives_the_place_of_its_own_span_or_of_the_open_step_it_names() {
        use crate::record::{Parent, SpanRecord};
        let c = capture(4);
        let step = SpanState::new(span_cx(1), Some(SpanRecord::start("step", Parent::Root)));
        let hold = Arc::new(StepHold::new(Arc::new(step)));
        // Span 2 is held in step 1; its context carries that.
        let place = ContextPlace::of(&DetailRole::Held(hold.clone()), SpanId::from(2)).unwrap();
        let under = |span: u64| {
            let cx = Context::new().with_remote_span_context(span_cx(span));
            c.place_of_context(&cx.with_value(place.clone()))
        };
        let own = under(2);
        assert!(own.held && own.hold.is_some_and(|h| Arc::ptr_eq(&h, &hold)));
        // A context derived from it for span 3 (activation inherits the values) says nothing
        // of span 3, and span 3 is no open step.
        assert!(under(3).hold.is_none());
        assert!(ContextPlace::of(&DetailRole::Outside, SpanId::from(3)).is_none());
        // A bare span context of an open step finds it.
        let bare = Context::new().with_remote_span_context(span_cx(1));
        assert!(c.place_of_context(&bare).hold.is_none(), "not open yet");
        c.open.lock().push(hold.clone());
        let found = c.place_of_context(&bare);
        assert!(!found.held && found.hold.is_some_and(|h| Arc::ptr_eq(&h, &hold)));
    }

    #[test]
    fn median_of_odd_and_even_windows() {
        let w = |v: &[u32]| v.iter().map(|&m| m * MS).collect::<VecDeque<_>>();
        assert_eq!(median(&w(&[])), None);
        assert_eq!(median(&w(&[3, 1, 2])), Some(2 * MS));
        assert_eq!(median(&w(&[4, 1, 3, 2])), Some(2 * MS));
    }
}
