//! Rank-aware sampling: every span on a rank is kept, or every span dropped.

use opentelemetry::trace::{Link, SpanKind, TraceContextExt, TraceId};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult, ShouldSample};

/// An OpenTelemetry sampler that keeps all spans of a sampled rank and drops all spans of the
/// others (not parent-based: the decision is per rank).
///
/// ```
/// use nemo_lens::RankAwareSampler;
/// let s = RankAwareSampler::new(3, 8, 0.1); // md5("3") % 10000 / 10000 = 0.0883 < 0.1
/// assert!(s.is_sampled());
/// assert_eq!(s.description(), "RankAwareSampler(rank=3, rate=0.1)");
/// assert!(!RankAwareSampler::new(0, 8, 0.1).is_sampled());
/// ```
///
/// # Rules
///
/// With `sampler_enabled`, a rank whose md5 value (see [`strategy`](crate::strategy)) is not
/// below `export.sample_rate` records nothing. The lens layer applies the decision as a per-layer
/// filter, once, when the telemetry is built: on an unsampled rank every callsite gets
/// `Interest::never` and a span costs what a disabled callsite costs. For code that creates spans
/// through the OpenTelemetry API directly, the same decision is offered as an SDK sampler,
/// [`RankAwareSampler`], installed on the tracer provider.
///
/// The documented combination is `all_ranks` + `sampler_enabled=1` at rate 0.1: uniform random
/// rank sampling. Combining `sampled` with the sampler at the same rate is redundant (same hash).
#[derive(Clone, Debug, PartialEq)]
pub struct RankAwareSampler {
    rank: u32,
    world_size: u32,
    rate: f64,
    decision: bool,
}

impl RankAwareSampler {
    /// Computes the decision for `rank` at `rate` (`>= 1` keeps, `<= 0` drops, otherwise the
    /// md5 rule).
    pub fn new(rank: u32, world_size: u32, rate: f64) -> Self {
        let decision = if rate >= 1.0 {
            true
        } else if rate <= 0.0 || rate.is_nan() {
            false
        } else {
            crate::rank::strategy::rank_is_sampled(rank, rate)
        };
        RankAwareSampler {
            rank,
            world_size,
            rate,
            decision,
        }
    }

    /// Whether this rank's spans are kept.
    pub fn is_sampled(&self) -> bool {
        self.decision
    }

    /// The rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The world size (kept for parity with Python; it does not affect the decision).
    pub fn world_size(&self) -> u32 {
        self.world_size
    }

    /// `RankAwareSampler(rank=<r>, rate=<rate>)`, as Python's `get_description()`.
    pub fn description(&self) -> String {
        format!("RankAwareSampler(rank={}, rate={:?})", self.rank, self.rate)
    }
}

impl ShouldSample for RankAwareSampler {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        _trace_id: TraceId,
        _name: &str,
        _span_kind: &SpanKind,
        _attributes: &[KeyValue],
        _links: &[Link],
    ) -> SamplingResult {
        SamplingResult {
            decision: if self.decision {
                SamplingDecision::RecordAndSample
            } else {
                SamplingDecision::Drop
            },
            attributes: Vec::new(),
            // Keep the parent's vendor state, as the SDK's own samplers do.
            trace_state: parent_context
                .filter(|cx| cx.has_active_span())
                .map(|cx| cx.span().span_context().trace_state().clone())
                .unwrap_or_default(),
        }
    }
}
