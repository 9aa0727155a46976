//! The compact record becomes the exporter's `SpanData` directly, on the batch worker, when no
//! span processor of the application needs to see the span: no tracer, span builder, sampler
//! call or processor callback, only what the exporter reads.
//!
//! The result is the `SpanData` the SDK would have handed the exporter (see
//! [`to_sdk`](super::to_sdk)) field for field: the same span context (the parent's trace
//! flags with `sampled`, the parent's trace state, the `random` flag on root spans), the same
//! parent fields, the SDK's span limits applied the way the SDK applies them (attribute, event
//! and link counts, attributes per event and per link, and the events and links the record
//! counted past its own limit added as the SDK adds late ones), the status, and the lens
//! tracer's instrumentation scope. The resource is the exporter's, set at setup either way.
//! The test at the bottom builds the same records both ways and compares the `SpanData` and
//! the console lines.
//!
//! Which pipelines take this path is decided at setup (see
//! [`Built::traces`](crate::setup::pipelines)): not with a span processor of the application
//! ([`TelemetryBuilder::span_processor`](crate::TelemetryBuilder::span_processor)), its own
//! tracer provider, or synchronous export. A record whose parent context the SDK would not
//! take as it is (an active span that is not valid, or telemetry suppressed) goes through the
//! SDK, so that the decision stays the SDK's.

use std::borrow::Cow;
use std::time::SystemTime;

use opentelemetry::trace::{
    Event, Link, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags,
};
use opentelemetry::{Context, InstrumentationScope};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLimits, SpanLinks};

use super::Ended;
use super::attributes::SpanAttributes;
use super::{Parent, SpanState};

/// What the worker needs to build `SpanData` itself: the span limits the SDK's provider read
/// and the lens tracer's scope.
#[derive(Clone, Debug)]
pub(crate) struct DirectBuild {
    limits: SpanLimits,
    scope: InstrumentationScope,
}

/// What [`SpanState::span_data`] did with a record.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Direct {
    /// Its `SpanData` is in the batch.
    Built,
    /// Nothing to export (still open, or taken already).
    Nothing,
    /// Left for the SDK to build (see the module docs).
    ViaSdk,
}

impl DirectBuild {
    /// The limits the SDK's default provider configuration reads (`OTEL_SPAN_*_COUNT_LIMIT`,
    /// parsed as the SDK parses them), and the scope of the tracer named `scope_name`.
    pub(crate) fn from_env(scope_name: &'static str) -> Self {
        let mut limits = SpanLimits::default();
        let read = super::sdk_count_limit;
        if let Some(n) = read("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT") {
            limits.max_attributes_per_span = n;
        }
        if let Some(n) = read("OTEL_SPAN_EVENT_COUNT_LIMIT") {
            limits.max_events_per_span = n;
        }
        if let Some(n) = read("OTEL_SPAN_LINK_COUNT_LIMIT") {
            limits.max_links_per_span = n;
        }
        Self::new(limits, scope_name)
    }

    pub(crate) fn new(limits: SpanLimits, scope_name: &'static str) -> Self {
        DirectBuild {
            limits,
            scope: InstrumentationScope::builder(scope_name).build(),
        }
    }

    /// The span limits applied to every record.
    #[cfg_attr(not(feature = "otlp-http"), allow(dead_code))]
    pub(crate) fn limits(&self) -> &SpanLimits {
        &self.limits
    }

    /// The lens tracer's instrumentation scope.
    #[cfg_attr(not(feature = "otlp-http"), allow(dead_code))]
    pub(crate) fn scope(&self) -> &InstrumentationScope {
        &self.scope
    }
}

/// Whether the SDK would take `cx` as the parent context it is (else the record goes through
/// the SDK).
fn plain_parent(cx: &Context) -> bool {
    !cx.is_telemetry_suppressed() && (!cx.has_active_span() || cx.span().span_context().is_valid())
}

/// An ended record taken for export, with the span context, parent and flags the SDK would
/// give it (the span limits not applied yet): what both [`SpanState::span_data`] and the OTLP
/// encoder of the export worker start from.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// Trace id, span id, flags (with `sampled`, and `random` on a span without a valid
    /// parent) and the parent's trace state.
    pub(crate) span_context: SpanContext,
    pub(crate) parent_span_id: SpanId,
    pub(crate) parent_span_is_remote: bool,
    pub(crate) kind: SpanKind,
    pub(crate) name: Cow<'static, str>,
    pub(crate) start: SystemTime,
    pub(crate) end: SystemTime,
    pub(crate) attributes: SpanAttributes,
    pub(crate) events: Vec<Event>,
    /// Events the record counted past its own limit: added as the SDK adds late ones (an
    /// empty event at the start time while there is room, else counted).
    pub(crate) late_events: u32,
    pub(crate) links: Vec<Link>,
    /// Links the record counted past its own limit, added as late ones (a link to the span's
    /// own context while there is room, else counted).
    pub(crate) late_links: u32,
    pub(crate) status: Status,
    /// The record's own span context (the target of late links).
    pub(crate) own_context: SpanContext,
}

impl SpanState {
    /// Takes this ended record for export (see [`Prepared`]), leaving it in place, emptied
    /// and marked built, for reuse; `Err` says why not (still open or taken: nothing to
    /// export; a parent the SDK must judge: through the SDK).
    pub(crate) fn prepare(&self) -> Result<Prepared, Direct> {
        {
            let guard = self.record.lock();
            let Some(r) = guard.as_ref().filter(|r| !r.built && !r.is_open()) else {
                return Err(Direct::Nothing);
            };
            if matches!(&r.parent, Parent::Context(cx) if !plain_parent(cx)) {
                return Err(Direct::ViaSdk);
            }
        }
        // Taken as for the SDK path (backtraces resolved, outside the lock).
        let Some(Ended {
            name,
            kind,
            status,
            start,
            end,
            parent,
            attributes,
            events,
            dropped_events,
            links,
            dropped_links,
        }) = self.take_ended()
        else {
            return Err(Direct::Nothing);
        };
        // The sampler keeps the trace state of the parent context's span; the span takes the
        // parent's trace id and flags (with `sampled`) when the parent is valid, else it
        // starts a trace (the id drawn at start) and gets the `random` flag at export.
        let from_cx;
        let parent = match &parent {
            Parent::Root => &SpanContext::NONE,
            Parent::Span(sc) => sc,
            Parent::Context(cx) => {
                from_cx = cx.span();
                from_cx.span_context()
            }
        };
        let trace_state = parent.trace_state().clone();
        let (parent, trace_id) = if parent.is_valid() {
            (parent, parent.trace_id())
        } else {
            (&SpanContext::NONE, self.cx.trace_id())
        };
        let mut flags = parent.trace_flags().with_sampled(true);
        if parent.span_id() == SpanId::INVALID {
            flags = TraceFlags::new(flags.to_u8() | crate::ids::RANDOM_FLAG);
        }
        Ok(Prepared {
            span_context: SpanContext::new(trace_id, self.cx.span_id(), flags, false, trace_state),
            parent_span_id: parent.span_id(),
            parent_span_is_remote: parent.is_valid() && parent.is_remote(),
            kind: kind.unwrap_or(SpanKind::Internal),
            name,
            start,
            end,
            attributes,
            events,
            late_events: dropped_events,
            links,
            late_links: dropped_links,
            status,
            own_context: self.cx.clone(),
        })
    }

    /// Appends the exporter's `SpanData` of this ended record to `batch`, built as described
    /// in the [module docs](self): the SDK's `build_recording_span`, `set_status`, late
    /// events and links, `end` and `build_export_data`, with the ids drawn on the training
    /// thread. The record is left in place, emptied and marked built, for reuse.
    pub(crate) fn span_data(&self, build: &DirectBuild, batch: &mut Vec<SpanData>) -> Direct {
        match self.prepare() {
            Ok(prepared) => {
                batch.push(prepared.into_span_data(build));
                Direct::Built
            }
            Err(how) => how,
        }
    }
}

impl Prepared {
    /// The `SpanData` the SDK would have built, its span limits applied.
    pub(crate) fn into_span_data(self, build: &DirectBuild) -> SpanData {
        let limits = &build.limits;
        let mut attributes = self.attributes.into_vec();
        let max_attributes = limits.max_attributes_per_span as usize;
        let dropped_attributes_count = attributes.len().saturating_sub(max_attributes) as u32;
        attributes.truncate(max_attributes);
        let mut events = bounded_events(self.events, limits);
        for _ in 0..self.late_events {
            // As the SDK's `add_event` after start: kept while there is room, else counted.
            if events.events.len() < limits.max_events_per_span as usize {
                events
                    .events
                    .push(Event::new("", self.start, Vec::new(), 0));
            } else {
                events.dropped_count += 1;
            }
        }
        let mut links = bounded_links(self.links, limits);
        for _ in 0..self.late_links {
            if links.links.len() < limits.max_links_per_span as usize {
                links
                    .links
                    .push(Link::new(self.own_context.clone(), Vec::new(), 0));
            } else {
                links.dropped_count += 1;
            }
        }
        SpanData {
            span_context: self.span_context,
            parent_span_id: self.parent_span_id,
            parent_span_is_remote: self.parent_span_is_remote,
            span_kind: self.kind,
            name: self.name,
            start_time: self.start,
            end_time: self.end,
            attributes,
            dropped_attributes_count,
            events,
            links,
            status: self.status,
            instrumentation_scope: build.scope.clone(),
        }
    }
}

/// The events given at start, bounded as the SDK bounds them.
#[inline]
fn bounded_events(mut events: Vec<Event>, limits: &SpanLimits) -> SpanEvents {
    let mut bounded = SpanEvents::default();
    if events.is_empty() {
        return bounded;
    }
    bounded.dropped_count = events
        .len()
        .saturating_sub(limits.max_events_per_span as usize) as u32;
    events.truncate(limits.max_events_per_span as usize);
    let max = limits.max_attributes_per_event as usize;
    for event in &mut events {
        event.dropped_attributes_count = event.attributes.len().saturating_sub(max) as u32;
        event.attributes.truncate(max);
    }
    bounded.events = events;
    bounded
}

/// The links given at start, bounded as the SDK bounds them.
#[inline]
fn bounded_links(mut links: Vec<Link>, limits: &SpanLimits) -> SpanLinks {
    let mut bounded = SpanLinks::default();
    if links.is_empty() {
        return bounded;
    }
    bounded.dropped_count = links
        .len()
        .saturating_sub(limits.max_links_per_span as usize) as u32;
    links.truncate(limits.max_links_per_span as usize);
    let max = limits.max_attributes_per_link as usize;
    for link in &mut links {
        link.dropped_attributes_count = link.attributes.len().saturating_sub(max) as u32;
        link.attributes.truncate(max);
    }
    bounded.links = links;
    bounded
}

#[cfg(test)]
pub(crate) mod tests {
    //! The same records built both ways: through the SDK (a provider configured as lens
    //! configures its own, whose single processor keeps what lens's batch processor keeps)
    //! and directly. The `SpanData` and the console lines must be identical.

    use std::borrow::Cow;
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    use opentelemetry::baggage::BaggageExt;
    use opentelemetry::trace::{SpanId, Status, TraceFlags, TraceId, TraceState, TracerProvider};
    use opentelemetry::{KeyValue, Value};
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{SdkTracerProvider, Span, SpanProcessor};
    use parking_lot::Mutex;

    use super::*;
    use crate::ids::ChaChaIdGenerator;
    use crate::rank::sampler::RankAwareSampler;
    use crate::record::SpanRecord;

    /// Keeps what `LensBatchProcessor::on_end` keeps, as it keeps it.
    #[derive(Debug, Default, Clone)]
    struct Collect(Arc<Mutex<Vec<SpanData>>>);

    impl SpanProcessor for Collect {
        fn on_start(&self, _: &mut Span, _: &Context) {}
        fn on_end(&self, mut span: SpanData) {
            if span.span_context.is_sampled() {
                crate::ids::mark_random_root(&mut span);
                self.0.lock().push(span);
            }
        }
        fn force_flush(&self) -> OTelSdkResult {
            Ok(())
        }
        fn shutdown_with_timeout(&self, _: Duration) -> OTelSdkResult {
            Ok(())
        }
    }

    fn kv(i: usize) -> KeyValue {
        KeyValue::new(format!("k{i}"), i as i64)
    }

    fn sc(trace: u128, span: u64, flags: u8, remote: bool, state: &[(&str, &str)]) -> SpanContext {
        SpanContext::new(
            TraceId::from(trace),
            SpanId::from(span),
            TraceFlags::new(flags),
            remote,
            TraceState::from_key_value(state.iter().copied()).unwrap(),
        )
    }

    /// One ended record; `case` selects its shape. Called twice per case: both states are
    /// identical, times included.
    pub(crate) fn record(case: usize) -> SpanState {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
        let (parent, flags) = match case % 6 {
            0 => (Parent::Root, 0x03),
            1 => (Parent::Span(sc(7, 9, 0x03, false, &[("v", "1")])), 0x03),
            2 => (
                Parent::Context(Context::new().with_remote_span_context(sc(
                    8,
                    10,
                    0x01,
                    true,
                    &[("a", "b")],
                ))),
                0x01,
            ),
            3 => (
                Parent::Context(
                    Context::new()
                        .with_remote_span_context(sc(8, 11, 0x83, true, &[]))
                        .with_baggage([KeyValue::new("user", "x")]),
                ),
                0x03,
            ),
            4 => (
                Parent::Context(Context::new().with_baggage([KeyValue::new("user", "y")])),
                0x03,
            ),
            // An unsampled local parent (only the rank sampler records its children).
            _ => (Parent::Span(sc(7, 12, 0x02, false, &[])), 0x03),
        };
        let trace = match &parent {
            Parent::Span(p) => p.trace_id(),
            Parent::Context(cx) if cx.has_active_span() => cx.span().span_context().trace_id(),
            _ => TraceId::from(0xabc_u128),
        };
        let cx = SpanContext::new(
            trace,
            SpanId::from(100 + case as u64),
            TraceFlags::new(flags),
            false,
            TraceState::default(),
        );
        let mut r = SpanRecord::start("step", parent);
        r.start = t0;
        r.end = Some(t0 + Duration::from_micros(1500 + case as u64));
        if case >= 6 {
            // Past the SDK's limits (set small below), and counted past the record's own.
            r.name = Cow::Owned(format!("renamed-{case}"));
            r.kind = Some(SpanKind::Server);
            r.status = Status::error("boom");
            r.attributes.extend((0..7).map(kv));
            r.attributes.push(KeyValue::new("s", Value::from("text")));
            for i in 0..(case - 3) {
                r.events
                    .push(Event::new(format!("e{i}"), t0, (0..i).map(kv).collect(), 0));
            }
            r.dropped_events = (case % 4) as u32;
            for i in 0..(case - 4) {
                r.links.push(Link::new(
                    sc(5, 50 + i as u64, 1, true, &[]),
                    (0..i).map(kv).collect(),
                    0,
                ));
            }
            r.dropped_links = (case % 3) as u32;
        } else {
            r.attributes.push(KeyValue::new("step", case as i64));
            r.events.push(Event::new("done", t0, vec![kv(1)], 0));
        }
        SpanState::new(cx, Some(r))
    }

    fn both_ways(limits: SpanLimits, rank_sampler: bool, cases: std::ops::Range<usize>) {
        let collect = Collect::default();
        let mut builder = SdkTracerProvider::builder()
            .with_id_generator(ChaChaIdGenerator::new())
            .with_span_limits(limits)
            .with_span_processor(collect.clone());
        if rank_sampler {
            builder = builder.with_sampler(RankAwareSampler::new(0, 1, 1.0));
        }
        let provider = builder.build();
        let tracer = provider.tracer(crate::SCOPE_NAME);
        let direct = DirectBuild::new(limits, crate::SCOPE_NAME);
        for case in cases {
            if !rank_sampler && case % 6 == 5 {
                continue; // an unsampled parent: the default sampler records no child
            }
            assert!(record(case).build_sdk_span(&tracer), "case {case}");
            let via_sdk = collect.0.lock().pop().expect("the SDK exported the span");
            let mut built = Vec::new();
            assert_eq!(record(case).span_data(&direct, &mut built), Direct::Built);
            let direct = built.pop().expect("built directly");
            assert_eq!(via_sdk, direct, "case {case}");
        }
    }

    #[test]
    fn direct_span_data_is_what_the_sdk_hands_the_exporter() {
        both_ways(SpanLimits::default(), false, 0..12);
        both_ways(SpanLimits::default(), true, 0..12);
    }

    #[test]
    fn the_sdk_limits_apply_the_same_way() {
        let limits = SpanLimits {
            max_events_per_span: 4,
            max_attributes_per_span: 5,
            max_links_per_span: 3,
            max_attributes_per_event: 2,
            max_attributes_per_link: 1,
        };
        both_ways(limits, false, 6..18);
        both_ways(limits, true, 6..18);
        // Room left by the SDK's limit for events the record counted past its own.
        let roomy = SpanLimits {
            max_events_per_span: 40,
            max_links_per_span: 40,
            ..limits
        };
        both_ways(roomy, true, 6..18);
    }

    #[test]
    fn a_parent_the_sdk_would_judge_goes_through_the_sdk() {
        let invalid = Context::new().with_remote_span_context(SpanContext::NONE);
        let state = SpanState::new(
            sc(1, 2, 3, false, &[]),
            Some(SpanRecord::start("s", Parent::Context(invalid))),
        );
        state.end();
        let direct = DirectBuild::new(SpanLimits::default(), crate::SCOPE_NAME);
        let mut batch = Vec::new();
        assert_eq!(state.span_data(&direct, &mut batch), Direct::ViaSdk);
        let open = SpanState::new(
            sc(1, 3, 3, false, &[]),
            Some(SpanRecord::start("s", Parent::Root)),
        );
        assert_eq!(open.span_data(&direct, &mut batch), Direct::Nothing);
        assert!(batch.is_empty());
    }

    /// A backtrace captured for an event becomes its `exception.stacktrace` on both paths.
    #[test]
    fn captured_backtraces_are_resolved_on_both_paths() {
        use crate::record::Limits;
        use crate::record::stacktrace::{Stacktrace, UserFrames};
        use crate::semconv;
        let with_trace = || {
            let mut r = SpanRecord::start("step", Parent::Root);
            let event = Event::new(
                "exception",
                r.start,
                vec![
                    KeyValue::new(semconv::EXCEPTION_TYPE, "Error"),
                    KeyValue::new(semconv::EXCEPTION_MESSAGE, "boom"),
                ],
                0,
            );
            let trace = Stacktrace::capture(true, UserFrames::All, None);
            assert!(trace.is_some(), "a forced capture is captured");
            r.add_event_with_stacktrace(event, trace, Limits::from_env());
            r.end = Some(r.start + Duration::from_micros(5));
            SpanState::new(sc(1, 2, 3, false, &[]), Some(r))
        };
        let keys = |span: &SpanData| -> Vec<String> {
            span.events.events[0]
                .attributes
                .iter()
                .map(|kv| kv.key.to_string())
                .collect()
        };
        let expected = [
            semconv::EXCEPTION_TYPE,
            semconv::EXCEPTION_MESSAGE,
            semconv::EXCEPTION_STACKTRACE,
        ];

        let direct = DirectBuild::new(SpanLimits::default(), crate::SCOPE_NAME);
        let mut built = Vec::new();
        assert_eq!(with_trace().span_data(&direct, &mut built), Direct::Built);
        assert_eq!(keys(&built[0]), expected, "direct");

        let collect = Collect::default();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(collect.clone())
            .build();
        assert!(with_trace().build_sdk_span(&provider.tracer(crate::SCOPE_NAME)));
        let via_sdk = collect.0.lock().pop().expect("the SDK exported the span");
        assert_eq!(keys(&via_sdk), expected, "through the SDK");
    }
}
