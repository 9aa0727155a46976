//! The `RankAwareSampler`: which sampled ranks keep their spans (spec §2.4).

use nemo_lens::RankAwareSampler;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};

use nemo_lens_test_support::python::MD5_RANK_FRACTIONS as PYTHON_TABLE;

fn decision(sampler: &RankAwareSampler, parent: Option<&Context>) -> SamplingDecision {
    let result = sampler.should_sample(
        parent,
        TraceId::from(0x1234_u128),
        "step",
        &SpanKind::Internal,
        &[KeyValue::new("k", 1)],
        &[],
    );
    assert!(result.attributes.is_empty());
    result.decision
}

#[test]
fn sampler_rate_at_or_above_one_keeps_every_rank() {
    for rate in [1.0, 1.5, f64::INFINITY] {
        for rank in 0..256 {
            let s = RankAwareSampler::new(rank, 256, rate);
            assert!(s.is_sampled(), "rank {rank} rate {rate}");
            assert_eq!(decision(&s, None), SamplingDecision::RecordAndSample);
        }
    }
}

#[test]
fn sampler_rate_at_or_below_zero_drops_every_rank() {
    for rate in [0.0, -0.0, -0.5, f64::NEG_INFINITY, f64::NAN] {
        for rank in 0..256 {
            let s = RankAwareSampler::new(rank, 256, rate);
            assert!(!s.is_sampled(), "rank {rank} rate {rate}");
            assert_eq!(decision(&s, None), SamplingDecision::Drop);
        }
    }
}

#[test]
fn sampler_between_zero_and_one_uses_the_md5_rule() {
    for (rank, value) in PYTHON_TABLE {
        for rate in [0.01, 0.1, 0.25, 0.5, 0.9, value, value + 1e-4] {
            let s = RankAwareSampler::new(rank, 16, rate);
            let expected = value < rate;
            assert_eq!(s.is_sampled(), expected, "rank {rank} rate {rate}");
            assert_eq!(
                decision(&s, None),
                if expected {
                    SamplingDecision::RecordAndSample
                } else {
                    SamplingDecision::Drop
                }
            );
        }
    }
    // The decision depends on rank and rate only, not on the world size.
    for world in [1, 8, 100_000] {
        assert!(RankAwareSampler::new(3, world, 0.1).is_sampled());
        assert!(!RankAwareSampler::new(0, world, 0.1).is_sampled());
    }
    let s = RankAwareSampler::new(5, 32, 0.5);
    assert_eq!(s.rank(), 5);
    assert_eq!(s.world_size(), 32);
}

#[test]
fn sampler_is_per_rank_not_parent_based() {
    let parent_state = TraceState::from_key_value([("vendor", "abc")]).unwrap();
    let sampled_parent = Context::new().with_remote_span_context(SpanContext::new(
        TraceId::from(7_u128),
        SpanId::from(9_u64),
        TraceFlags::SAMPLED,
        true,
        parent_state.clone(),
    ));
    let unsampled_parent = Context::new().with_remote_span_context(SpanContext::new(
        TraceId::from(7_u128),
        SpanId::from(9_u64),
        TraceFlags::default(),
        true,
        parent_state.clone(),
    ));
    let keep = RankAwareSampler::new(3, 8, 0.1);
    let drop = RankAwareSampler::new(0, 8, 0.1);
    for parent in [&sampled_parent, &unsampled_parent] {
        assert_eq!(
            decision(&keep, Some(parent)),
            SamplingDecision::RecordAndSample
        );
        assert_eq!(decision(&drop, Some(parent)), SamplingDecision::Drop);
        // The parent's trace state is carried over.
        let result = keep.should_sample(
            Some(parent),
            TraceId::from(7_u128),
            "child",
            &SpanKind::Internal,
            &[],
            &[],
        );
        assert_eq!(result.trace_state, parent_state);
    }
    // A parent context without a span: empty trace state.
    let result = keep.should_sample(
        Some(&Context::new()),
        TraceId::from(7_u128),
        "root",
        &SpanKind::Server,
        &[],
        &[],
    );
    assert_eq!(result.decision, SamplingDecision::RecordAndSample);
    assert_eq!(result.trace_state, TraceState::default());
}

#[test]
fn sampler_description_matches_python() {
    assert_eq!(
        RankAwareSampler::new(3, 8, 0.1).description(),
        "RankAwareSampler(rank=3, rate=0.1)"
    );
    assert_eq!(
        RankAwareSampler::new(0, 1, 1.0).description(),
        "RankAwareSampler(rank=0, rate=1.0)"
    );
    assert_eq!(
        RankAwareSampler::new(1023, 1024, 0.0).description(),
        "RankAwareSampler(rank=1023, rate=0.0)"
    );
    assert_eq!(
        RankAwareSampler::new(42, 64, 0.25).description(),
        "RankAwareSampler(rank=42, rate=0.25)"
    );
}
