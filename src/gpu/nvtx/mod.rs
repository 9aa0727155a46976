//! [`NvtxLayer`]: spans as NVTX ranges, for Nsight Systems (`nsys profile`). Its docs say what
//! becomes what; `domain` is the NVTX domain and the group colours, `callsites` decides which
//! callsites push ranges, `ranges` makes the NVTX calls, `stack` keeps what a thread has
//! pushed.

#[cfg(feature = "nvtx")]
mod callsites;
#[cfg(feature = "nvtx")]
mod domain;
#[cfg(feature = "nvtx")]
mod ranges;
#[cfg(feature = "nvtx")]
mod stack;

use std::any::TypeId;
use std::fmt;
#[cfg(not(feature = "nvtx"))]
use std::marker::PhantomData;
use std::sync::Arc;

use tracing_core::span::Id;
use tracing_core::{Dispatch, Event, Interest, LevelFilter, Metadata, Subscriber};
use tracing_subscriber::filter::Filtered;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::config::LensConfig;
#[cfg(not(feature = "nvtx"))]
use crate::layer::filter::LensFilter;
use crate::rank::groups::GroupGate;
use crate::rank::rules::CallsiteRules;

/// The groups of NVTX ranges on this rank: the enabled span groups when telemetry is enabled
/// and `nvtx` asks for ranges (then the NVTX domain is created here, at setup), `None`
/// otherwise. Without the `nvtx` feature, asking for ranges prints one warning.
pub(crate) fn start(
    config: &LensConfig,
    groups: impl IntoIterator<Item = String>,
    rules: CallsiteRules,
) -> Option<Arc<GroupGate>> {
    if !(config.enabled && config.nvtx) {
        return None;
    }
    #[cfg(feature = "nvtx")]
    {
        domain::domain();
        Some(Arc::new(GroupGate::new(groups).with_rules(rules)))
    }
    #[cfg(not(feature = "nvtx"))]
    {
        drop((groups, rules));
        eprintln!(
            "nemo-lens: warning: NVTX ranges are asked for (NEMO_LENS_NVTX) but nemo-lens was \
             built without its `nvtx` feature: no ranges"
        );
        None
    }
}

/// Spans as NVTX ranges for Nsight Systems (`nsys profile`), events in them as NVTX marks: get
/// it from [`Telemetry::nvtx_layer`](crate::Telemetry::nvtx_layer) and add it next to
/// [`Telemetry::layer`](crate::Telemetry::layer).
///
/// With the `nvtx` feature and `NEMO_LENS_NVTX=1` on an enabled rank, every span the span groups
/// let through (a span of an enabled group, or a span without a group) is also an NVTX range:
///
/// * in **one domain**, `NeMo Lens`, which Nsight shows apart from the ranges of PyTorch, NCCL
///   or CUDA libraries;
/// * **a range per enter**: pushed when the span is entered, popped when it exits, on the thread
///   that entered it, so Nsight nests the ranges per thread next to that thread's CUDA calls. A
///   span entered several times (an `async` span polled on many threads) shows one range per
///   enter; a span never entered shows none. A span that exits while a span entered after it
///   is still entered keeps its range until that one ends (NVTX ranges nest). At most 1024
///   ranges are open on one thread;
/// * **named after the span** (its callsite name, registered with NVTX once; `otel.name` is not
///   used);
/// * with **the span group as the NVTX category**, named after the group, and a colour per group,
///   the same in every process and run; spans without a group have neither;
/// * `tracing` **events** in such a span are **marks**: the event's message (else its callsite
///   name), cut to 1 KiB, with the category and colour of the span.
///
/// The span groups decide (`NEMO_LENS_SPAN_GROUPS`,
/// [`groups::set_enabled_span_groups`](crate::groups::set_enabled_span_groups)), the export decision does
/// not: a profiler records one process, and the rank under `nsys` is usually not the exporting
/// one, so every enabled rank with `NEMO_LENS_NVTX` set pushes ranges. There, the spans of
/// enabled groups become callsites a layer records (otherwise they would cost a disabled
/// callsite).
///
/// With no NVTX tool attached, each NVTX call returns at once. NVTX loads a tool at the first
/// NVTX call (setup) from the library that `NVTX_INJECTION64_PATH` names: that is how `nsys`
/// attaches, and it runs whatever that variable points at, as in every NVTX program.
///
/// Off (feature `nvtx` not built, `NEMO_LENS_NVTX` unset, or telemetry disabled) the layer is
/// inert: it registers no interest, its level hint is `OFF`, and no NVTX call is ever made.
///
/// ```
/// use tracing_subscriber::prelude::*;
/// let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
/// let layer = telemetry.nvtx_layer::<tracing_subscriber::Registry>();
/// assert!(layer.is_inert()); // disabled telemetry: no NVTX call, ever
/// let _subscriber = tracing_subscriber::registry().with(layer);
/// ```
pub struct NvtxLayer<S> {
    active: bool,
    part: Filtered<Part<S>, PartFilter, S>,
}

impl<S> fmt::Debug for NvtxLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NvtxLayer")
            .field("active", &self.active)
            .finish()
    }
}

#[cfg(feature = "nvtx")]
type Part<S> = ranges::Ranges<S>;
#[cfg(feature = "nvtx")]
type PartFilter = callsites::NvtxFilter;

/// Without the feature there is nothing behind the filter, which is inert.
#[cfg(not(feature = "nvtx"))]
struct Part<S>(PhantomData<fn(S)>);
#[cfg(not(feature = "nvtx"))]
type PartFilter = LensFilter;

#[cfg(not(feature = "nvtx"))]
impl<S: Subscriber> Layer<S> for Part<S> {}

impl<S> NvtxLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    /// A layer for the groups `start` returned (`None`: inert).
    pub(crate) fn new(groups: Option<Arc<GroupGate>>) -> Self {
        let active = groups.is_some();
        #[cfg(feature = "nvtx")]
        let part = {
            let filter = callsites::NvtxFilter::new(groups);
            ranges::Ranges::new(filter.clone()).with_filter(filter)
        };
        #[cfg(not(feature = "nvtx"))]
        let part = Part(PhantomData).with_filter(LensFilter::new(true, groups.unwrap_or_default()));
        NvtxLayer { active, part }
    }

    /// `true` when the layer makes no NVTX call at all (feature `nvtx` not built,
    /// `NEMO_LENS_NVTX` unset, or telemetry disabled).
    pub fn is_inert(&self) -> bool {
        !self.active
    }
}

// As the flight recorder's layer: an inert layer takes part in the layer set-up only (its
// filter id exists) and registers no interest, so it changes no callsite's interest. Enter and
// exit go straight to the NVTX part, past the `Filtered` wrapper (which would look the span up
// only to check its filter bit): the part pushes only for callsites its filter enabled, and an
// exit only pops a range this thread pushed for that span. Nothing is done at a span's creation
// or close.
impl<S> Layer<S> for NvtxLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        self.part.on_register_dispatch(subscriber);
    }
    fn on_layer(&mut self, subscriber: &mut S) {
        self.part.on_layer(subscriber);
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
    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if self.active {
            self.part.inner().on_enter(id, ctx);
        }
    }
    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        if self.active {
            self.part.inner().on_exit(id, ctx);
        }
    }
    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if self.active {
            self.part.on_event(event, ctx);
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
