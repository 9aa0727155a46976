//! [`LensFilter`]: the per-layer filter of the lens layer, decided once per callsite.

use std::fmt;
use std::sync::Arc;

use tracing_core::{Interest, LevelFilter, Metadata};
use tracing_subscriber::layer::{Context, Filter};

use crate::rank::groups::GroupGate;

/// Crates whose callsites the lens layer never records (feedback-loop guard): the exporters'
/// own stacks, and `nemo_lens` itself, whose diagnostics (such as the warnings of
/// [`crate::metrics`]) go to your other layers (`fmt`) but never become exported telemetry.
/// Every `opentelemetry_*` / `opentelemetry-*` crate counts too.
const INTERNAL_CRATES: [&str; 9] = [
    "opentelemetry",
    "hyper",
    "hyper_util",
    "hyper-util",
    "tonic",
    "h2",
    "reqwest",
    "tower",
    "nemo_lens",
];

/// `true` for a target of the exporters' own stacks: its crate (the first path segment) is one
/// of [`INTERNAL_CRATES`] or an OpenTelemetry crate. Whole crate names only, so that an
/// application crate such as `hyper_tune` or `nemo_lens_trainer` keeps its spans.
pub(crate) fn is_internal_target(target: &str) -> bool {
    let krate = target.split("::").next().unwrap_or(target);
    INTERNAL_CRATES.contains(&krate)
        || krate
            .strip_prefix("opentelemetry")
            .is_some_and(|rest| rest.starts_with(['_', '-']))
}

/// The cached answer of a per-layer filter that decides on the callsite alone: `always` or
/// `never`, so `tracing` never asks again for that callsite.
pub(crate) fn interest(allowed: bool) -> Interest {
    if allowed {
        Interest::always()
    } else {
        Interest::never()
    }
}

/// The per-layer filter of [`LensLayer`](crate::LensLayer): which callsites it records as
/// spans and span events (rank, span groups, the exporters' own targets), decided once per
/// callsite. It is what makes telemetry cheap when it is off.
///
/// The filter answers once per callsite (`register_callsite`), and `tracing` caches the answer:
///
/// * telemetry disabled, a non-exporting rank, or a rank the rank sampler drops: every callsite
///   is `Interest::never` and the filter's level hint is `OFF`;
/// * a span or event whose callsite is in a disabled [group](crate::groups) (it declares a
///   `nemo.group.<g>` field, or a span-group rule on its target puts it there):
///   `Interest::never`;
/// * a span in no group below the span level (`NEMO_LENS_SPAN_LEVEL`, default `info`):
///   `Interest::never`;
/// * callsites of the exporters' own stacks (`opentelemetry*`, `hyper`, `tonic`, `h2`,
///   `reqwest`, `tower`) and of nemo-lens's own diagnostics (`nemo_lens`): `Interest::never`, so export errors logged through `tracing` never feed
///   back into the pipeline;
/// * everything else (spans of an enabled group at any level, ungrouped spans from the span
///   level on, events): `Interest::always`.
///
/// Because it is a *per-layer* filter, a `never` here disables the callsite for the lens layer
/// only; `fmt` or any other layer in the same subscriber still sees it.
///
/// ```
/// use nemo_lens::{LensConfig, Telemetry};
/// let telemetry = Telemetry::builder(LensConfig::default()).build().unwrap(); // disabled
/// let layer = telemetry.layer::<tracing_subscriber::Registry>();
/// assert!(layer.is_inert()); // records nothing: every callsite is `Interest::never`
/// ```
#[derive(Clone)]
pub(crate) struct LensFilter {
    inert: bool,
    groups: Arc<GroupGate>,
}

impl fmt::Debug for LensFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LensFilter")
            .field("inert", &self.inert)
            .field("groups", &self.groups.snapshot())
            .field("rules", &self.groups.rules())
            .finish()
    }
}

impl LensFilter {
    pub(crate) fn new(inert: bool, groups: Arc<GroupGate>) -> Self {
        LensFilter { inert, groups }
    }

    /// `true` when the layer records nothing at all (disabled, non-exporting or unsampled rank,
    /// or traces turned off).
    pub(crate) fn is_inert(&self) -> bool {
        self.inert
    }

    /// The decision for one callsite.
    pub(crate) fn allows(&self, meta: &Metadata<'_>) -> bool {
        if self.inert {
            return false;
        }
        if is_internal_target(meta.target()) {
            return false;
        }
        self.groups.allows(meta)
    }

    /// The group of a callsite: declared (`nemo.group.<g>`) or given by a
    /// span-group rule ([`GroupsConfig::rules`](crate::GroupsConfig::rules)).
    pub(crate) fn group_of(&self, meta: &Metadata<'_>) -> Option<&str> {
        self.groups.group_of(meta)
    }
}

impl<S> Filter<S> for LensFilter {
    fn enabled(&self, meta: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        self.allows(meta)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        crate::layer::filter::interest(self.allows(meta))
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        if self.inert {
            Some(LevelFilter::OFF)
        } else {
            None
        }
    }
}
