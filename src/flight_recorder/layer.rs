//! [`RecorderLayer`]: the flight recorder as a `tracing` layer with its own per-layer filter.

use std::any::TypeId;
use std::fmt::{self, Write as _};
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tracing_core::field::{Field, Visit};
use tracing_core::span::{Attributes, Id, Record as Values};
use tracing_core::{Dispatch, Interest, LevelFilter, Metadata, Subscriber};
use tracing_subscriber::filter::Filtered;
use tracing_subscriber::layer::{Context, Filter, Layer};
use tracing_subscriber::registry::{LookupSpan, SpanRef};

use super::Shared;
use super::ring::{ATTRS, Attr, END_WORD, INLINE, Kind, Record, WORDS};
use crate::ids;
use crate::layer::filter::interest;
use crate::rank::groups::GROUP_FIELD_PREFIX;
use crate::record::attributes::{REDACTED, RedactKeys};

/// The per-layer filter of [`RecorderLayer`] (its docs say which callsites pay).
#[derive(Clone)]
pub(super) struct RecorderFilter {
    shared: Option<Arc<Shared>>,
}

impl fmt::Debug for RecorderFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecorderFilter")
            .field("groups", &self.shared.as_ref().map(|s| &s.groups))
            .finish()
    }
}

impl RecorderFilter {
    /// `true` when the recorder records nothing (off, or telemetry disabled).
    pub(super) fn is_inert(&self) -> bool {
        self.shared.is_none()
    }

    /// Whether the recorder records spans of this callsite.
    pub(super) fn records(&self, meta: &Metadata<'_>) -> bool {
        match &self.shared {
            Some(s) => meta.is_span() && s.lens.group_of(meta).is_some_and(|g| s.wants(g)),
            None => false,
        }
    }

    fn allows(&self, meta: &Metadata<'_>) -> bool {
        match &self.shared {
            Some(s) => self.records(meta) || s.lens.allows(meta),
            None => false,
        }
    }
}

impl<S> Filter<S> for RecorderFilter {
    fn enabled(&self, meta: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        self.allows(meta)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        interest(self.allows(meta))
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        // A recorded group's span may be at any level.
        if self.shared.is_some() {
            None
        } else {
            Some(LevelFilter::OFF)
        }
    }
}

/// The recording part, behind [`RecorderFilter`].
pub(super) struct Recording<S> {
    shared: Option<Arc<Shared>>,
    _subscriber: PhantomData<fn(S)>,
}

/// The flight recorder's layer, with its own per-layer filter: get it from
/// [`Telemetry::recorder_layer`](crate::Telemetry::recorder_layer) and add it next to
/// [`Telemetry::layer`](crate::Telemetry::layer).
///
/// # Which callsites pay
///
/// Its per-layer filter answers once per callsite, in `register_callsite`:
///
/// * a **span of a recorded group** (`nemo.group.<g>` field, `g` in
///   `NEMO_LENS_FLIGHT_RECORDER_GROUPS`, plus `step` when a control file is configured, to count
///   steps): `always`; these spans are recorded, on every enabled rank;
/// * **any other callsite**: the same answer as the lens layer's filter. A callsite nobody records
///   stays `never` (the cost of a disabled callsite), and one the lens layer exports stays
///   `always` instead of turning into `sometimes` (which would make `tracing` ask every filter on
///   every span). The recorder then skips such spans in `on_new_span` by looking at the callsite's
///   field names, and in `on_close` by one probe of its open table: a few nanoseconds on a span
///   that is being exported anyway.
///
/// With the recorder off (`NEMO_LENS_FLIGHT_RECORDER=0` and no control file) the layer is inert:
/// it registers no interest at all and its level hint is `OFF`, so the subscriber behaves as if
/// it were not there.
///
/// ```
/// use tracing_subscriber::prelude::*;
/// let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
/// let _subscriber = tracing_subscriber::registry()
///     .with(telemetry.layer())
///     .with(telemetry.recorder_layer());
/// assert!(telemetry.recorder_layer::<tracing_subscriber::Registry>().is_inert());
/// ```
pub struct RecorderLayer<S> {
    active: bool,
    part: Filtered<Recording<S>, RecorderFilter, S>,
}

impl<S> fmt::Debug for RecorderLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecorderLayer")
            .field("filter", self.part.filter())
            .finish()
    }
}

impl<S> RecorderLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    pub(crate) fn new(shared: Option<Arc<Shared>>) -> Self {
        RecorderLayer {
            active: shared.is_some(),
            part: Recording {
                shared: shared.clone(),
                _subscriber: PhantomData,
            }
            .with_filter(RecorderFilter { shared }),
        }
    }

    /// `true` when the recorder records nothing (off, or telemetry disabled): every callsite it
    /// sees is then left to the other layers, at no cost.
    pub fn is_inert(&self) -> bool {
        self.part.filter().is_inert()
    }
}

// Like `LensLayer`, an inert recorder takes part in the layer set-up only (so that its filter id
// exists) and registers no interest, and `on_enter`/`on_exit` are not forwarded (nothing acts on
// them). `on_close` goes straight to the recording part: it finds its spans in its own table,
// which is cheaper than the `Filtered` wrapper's registry lookup of the span's filter bits.
impl<S> Layer<S> for RecorderLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        self.part.on_register_dispatch(subscriber);
    }
    fn on_layer(&mut self, subscriber: &mut S) {
        self.part.on_layer(subscriber);
        if let Some(s) = &self.part.inner().shared {
            s.registered.store(true, Ordering::Relaxed);
        }
    }
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if self.active {
            self.part.register_callsite(metadata)
        } else {
            Interest::always()
        }
    }
    fn enabled(&self, metadata: &Metadata<'_>, ctx: Context<'_, S>) -> bool {
        !self.active || self.part.enabled(metadata, ctx)
    }
    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.part.max_level_hint()
    }
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if self.active {
            self.part.on_new_span(attrs, id, ctx);
        }
    }
    fn on_record(&self, span: &Id, values: &Values<'_>, ctx: Context<'_, S>) {
        if self.active {
            self.part.inner().on_record(span, values, ctx);
        }
    }
    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if self.active {
            self.part.inner().on_close(id, ctx);
        }
    }
    unsafe fn downcast_raw(&self, id: TypeId) -> Option<*const ()> {
        if id == TypeId::of::<Self>() {
            return Some(self as *const Self as *const ());
        }
        // SAFETY: forwarded to the wrapped layer, which upholds the contract.
        unsafe { self.part.downcast_raw(id) }
    }
}

impl<S> Layer<S> for Recording<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(shared) = &self.shared else { return };
        let meta = attrs.metadata();
        if !shared.lens.group_of(meta).is_some_and(|g| shared.wants(g))
            || shared.generation != ids::fork_generation()
        {
            return;
        }
        let parent_span = if let Some(p) = attrs.parent() {
            ctx.span(p)
        } else if attrs.is_contextual() {
            ctx.lookup_current()
        } else {
            None
        };
        let parent = parent_span.map_or(0, |p| nearest_recorded(shared, p));
        let mut record = Record {
            meta: meta as *const Metadata<'static> as usize,
            id: shared.next_id(),
            parent,
            start_ns: super::unix_ns(),
            ..Record::default()
        };
        attrs.record(&mut AttrVisitor(&mut record, &shared.redact));
        if shared.open.insert(id.into_u64(), &record).is_none() {
            shared.dropped.fetch_add(1, Ordering::Relaxed);
            // Past the open slots (a deep nesting): its children find their recorded
            // ancestor here, without walking the spans dropped above them.
            if let Some(span) = ctx.span(id) {
                span.extensions_mut().replace(Nearest(parent));
            }
        }
    }

    fn on_record(&self, id: &Id, values: &Values<'_>, _ctx: Context<'_, S>) {
        let Some(shared) = &self.shared else { return };
        let Some(slot) = shared.open.find(id.into_u64()) else {
            return;
        };
        if let Some(mut record) = shared.open.read(slot) {
            values.record(&mut AttrVisitor(&mut record, &shared.redact));
            shared.open.write(slot, &record);
        }
    }

    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        let Some(shared) = &self.shared else { return };
        let Some(slot) = shared.open.find(id.into_u64()) else {
            return;
        };
        // Moved as words, open slot to ring slot: no decoding on the training thread.
        let mut words = [0u64; WORDS];
        let used = shared.open.read_words(slot, &mut words);
        shared.open.remove(slot);
        let Some(used) = used else {
            shared.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        words[END_WORD] = super::unix_ns();
        shared.closed(&words[..used]);
    }
}

/// The recorder id of the nearest recorded ancestor of a span that is not in the open table
/// (0: none), kept in the span's extensions once looked up.
struct Nearest(u64);

/// The recorder id of `span` if the recorder has it open, else of its nearest ancestor it has
/// open (0: none).
///
/// A span the recorder did not keep (another group's, or one past the open slots) remembers
/// the answer in its extensions ([`Nearest`]), so each such span is walked through once: at
/// any depth, a new span costs a constant amount of work, amortized.
fn nearest_recorded<S>(shared: &Shared, span: SpanRef<'_, S>) -> u64
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let known = |s: &SpanRef<'_, S>| {
        if let Some(slot) = shared.open.find(s.id().into_u64()) {
            return Some(shared.open.id_at(slot));
        }
        s.extensions().get::<Nearest>().map(|n| n.0)
    };
    if let Some(id) = known(&span) {
        return id;
    }
    // Walk up to the first span with an answer, then write it on the spans without one.
    let mut unknown = 1_usize;
    let mut found = 0;
    for s in span.scope().skip(1) {
        if let Some(id) = known(&s) {
            found = id;
            break;
        }
        unknown += 1;
    }
    for s in span.scope().take(unknown) {
        // `replace`: another thread may have written the same answer meanwhile.
        s.extensions_mut().replace(Nearest(found));
    }
    found
}

/// Writes field values into a record's fixed attribute slots (a later value of a field replaces
/// the earlier one; fields beyond [`ATTRS`] are not kept).
struct AttrVisitor<'a>(&'a mut Record, &'a RedactKeys);

impl AttrVisitor<'_> {
    fn put(&mut self, field: &Field, kind: Kind, fill: impl FnOnce(&mut Attr)) {
        if field.name().starts_with(GROUP_FIELD_PREFIX) {
            return;
        }
        let index = field.index().min(u8::MAX as usize) as u8;
        let r = &mut *self.0;
        let n = r.n_attrs as usize;
        let at = match r.attrs[..n].iter().position(|a| a.field == index) {
            Some(i) => i,
            None if n < ATTRS => {
                r.n_attrs += 1;
                n
            }
            None => return,
        };
        let mut attr = Attr {
            field: index,
            kind,
            ..Attr::default()
        };
        fill(&mut attr);
        r.attrs[at] = attr;
    }

    fn number(&mut self, field: &Field, kind: Kind, bits: u64) {
        self.put(field, kind, |a| {
            a.bytes[..8].copy_from_slice(&bits.to_le_bytes())
        });
    }
}

/// A `fmt::Write` into an attribute's inline bytes that stops at the last whole character
/// that fits.
struct Inline<'a> {
    attr: &'a mut Attr,
}

impl fmt::Write for Inline<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let used = self.attr.len as usize;
        let room = INLINE - used;
        let mut take = s.len().min(room);
        while !s.is_char_boundary(take) {
            take -= 1;
        }
        self.attr.bytes[used..used + take].copy_from_slice(&s.as_bytes()[..take]);
        self.attr.len += take as u8;
        if take < s.len() {
            Err(fmt::Error)
        } else {
            Ok(())
        }
    }
}

impl Visit for AttrVisitor<'_> {
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.number(field, Kind::I64, value as u64);
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.number(field, Kind::U64, value);
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.number(field, Kind::F64, value.to_bits());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.number(field, Kind::Bool, u64::from(value));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        let value = if self.1.contains(field.name()) {
            REDACTED
        } else {
            value
        };
        self.put(field, Kind::Str, |a| {
            let _ = Inline { attr: a }.write_str(value);
        });
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.1.contains(field.name()) {
            return self.record_str(field, REDACTED);
        }
        self.put(field, Kind::Str, |a| {
            let _ = write!(Inline { attr: a }, "{value:?}");
        });
    }
}
