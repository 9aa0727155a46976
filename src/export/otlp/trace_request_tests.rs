//! The same records and SDK spans written by [`TraceEncoder`] and by opentelemetry-otlp's path
//! (`SpanData`, then `opentelemetry-proto`'s conversion and prost): the requests must decode to
//! equal `ExportTraceServiceRequest`s, and be the same bytes.

use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue, StringValue, Value};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLimits, SpanLinks};
use prost::Message;

use super::*;
use crate::record::to_span_data::tests::record;

fn resource() -> Resource {
    Resource::builder_empty()
        .with_attributes([
            KeyValue::new("service.name", "wire"),
            KeyValue::new("nv.rank", 3_i64),
            KeyValue::new("ratio", 0.5),
            KeyValue::new("ok", true),
            KeyValue::new(
                "hosts",
                Value::Array(vec![StringValue::from("a"), StringValue::from("b")].into()),
            ),
        ])
        .with_schema_url(
            Vec::<KeyValue>::new(),
            "https://opentelemetry.io/schemas/1.30.0",
        )
        .build()
}

/// What opentelemetry-otlp sends for `spans`.
fn via_sdk(spans: Vec<SpanData>, resource: &Resource) -> Vec<u8> {
    let resource = ResourceAttributesWithSchema::from(resource);
    ExportTraceServiceRequest {
        resource_spans: group_spans_by_resource_and_scope(spans, &resource),
    }
    .encode_to_vec()
}

fn encoder(resource: &Resource) -> TraceEncoder {
    let mut encoder = TraceEncoder::default();
    encoder.set_resource(resource);
    encoder
}

/// An SDK span of another scope, with every field set.
fn sdk_span(i: u64) -> SpanData {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_nanos(1_700_000_000_000_000_000 + i);
    let cx = SpanContext::new(
        TraceId::from(0x1234_u128 + u128::from(i)),
        SpanId::from(0x99 + i),
        TraceFlags::SAMPLED,
        false,
        TraceState::from_key_value([("k", "v")]).unwrap(),
    );
    let mut events = SpanEvents::default();
    events.events.push(opentelemetry::trace::Event::new(
        "e",
        t0,
        vec![KeyValue::new("n", -5_i64)],
        2,
    ));
    events.dropped_count = 3;
    let mut links = SpanLinks::default();
    links.links.push(opentelemetry::trace::Link::new(
        cx.clone(),
        vec![KeyValue::new("l", "x")],
        1,
    ));
    links.dropped_count = 4;
    SpanData {
        span_context: cx,
        parent_span_id: SpanId::from(7),
        parent_span_is_remote: i.is_multiple_of(2),
        span_kind: SpanKind::Consumer,
        name: format!("sdk-{i}").into(),
        start_time: t0,
        end_time: t0 + Duration::from_millis(3),
        attributes: vec![
            KeyValue::new("flags", Value::Array(vec![true, false].into())),
            KeyValue::new("ints", Value::Array(vec![1_i64, -1].into())),
            KeyValue::new("floats", Value::Array(vec![0.25_f64].into())),
            KeyValue::new("", ""),
        ],
        dropped_attributes_count: 9,
        events,
        links,
        status: Status::Ok,
        instrumentation_scope: InstrumentationScope::builder("other")
            .with_version("1.2")
            .with_schema_url("https://example.com/s")
            .with_attributes([KeyValue::new("scope.attr", 1_i64)])
            .build(),
    }
}

fn limits_sets() -> Vec<SpanLimits> {
    let small = SpanLimits {
        max_events_per_span: 4,
        max_attributes_per_span: 5,
        max_links_per_span: 3,
        max_attributes_per_event: 2,
        max_attributes_per_link: 1,
    };
    vec![
        SpanLimits::default(),
        small,
        SpanLimits {
            max_events_per_span: 40,
            max_links_per_span: 40,
            ..small
        },
    ]
}

fn decode(bytes: &[u8]) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest::decode(bytes).expect("a valid request")
}

#[test]
fn records_written_directly_are_what_opentelemetry_otlp_sends() {
    let resource = resource();
    for limits in limits_sets() {
        let build = DirectBuild::new(limits, crate::SCOPE_NAME);
        // One batch of every record shape, mixed with SDK spans of another scope.
        let mut expected = Vec::new();
        let mut batch = ReadyBatch {
            build: Some(build.clone()),
            spans: Vec::new(),
        };
        for case in 0..18 {
            let mut built = Vec::new();
            record(case).span_data(&build, &mut built);
            expected.extend(built);
            let prepared = record(case).prepare().expect("an ended record");
            batch.spans.push(ReadySpan::Record(prepared));
            if case.is_multiple_of(5) {
                expected.push(sdk_span(case as u64));
                batch.spans.push(ReadySpan::Data(sdk_span(case as u64)));
            }
        }
        let sdk = via_sdk(expected, &resource);
        let requests = encoder(&resource).encode(batch);
        assert_eq!(requests.oversized, 0);
        assert_eq!(requests.bodies.len(), 1);
        let ours = &requests.bodies[0];
        let decoded = decode(ours);
        assert_eq!(decoded, decode(&sdk), "{limits:?}");
        assert_eq!(decoded.resource_spans[0].scope_spans.len(), 2);
        assert_eq!(ours, &sdk, "the same bytes, {limits:?}");
    }
}

#[test]
fn values_of_every_kind_and_statuses_are_written_as_prost_writes_them() {
    let resource = resource();
    let mut spans = Vec::new();
    for (i, status) in [
        Status::Unset,
        Status::Ok,
        Status::error(""),
        Status::error("boom"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut span = sdk_span(i as u64);
        span.status = status;
        span.parent_span_id = if i.is_multiple_of(2) {
            SpanId::INVALID
        } else {
            SpanId::from(3)
        };
        span.attributes
            .push(KeyValue::new("big", "x".repeat(200 + i * 20_000)));
        span.attributes.push(KeyValue::new("neg", i64::MIN));
        span.attributes.push(KeyValue::new(
            "strs",
            Value::Array(vec![StringValue::from(""), StringValue::from("é")].into()),
        ));
        spans.push(span);
    }
    let batch = ReadyBatch {
        build: None,
        spans: spans.iter().cloned().map(ReadySpan::Data).collect(),
    };
    let ours = encoder(&resource).encode(batch);
    let sdk = via_sdk(spans, &resource);
    assert_eq!(decode(&ours.bodies[0]), decode(&sdk));
    assert_eq!(ours.bodies[0], sdk);
    let big = &decode(&ours.bodies[0]).resource_spans[0].scope_spans[0].spans[3];
    assert!(matches!(
        big.attributes[4].value.as_ref().and_then(|v| v.value.as_ref()),
        Some(any_value::Value::StringValue(s)) if s.len() == 60_200
    ));
}

#[test]
fn a_batch_over_the_limit_is_split_and_a_span_too_large_alone_is_left_out() {
    let resource = resource();
    let spans: Vec<SpanData> = (0..30)
        .map(|i| {
            let mut span = sdk_span(i);
            let size = if i == 7 { 50_000 } else { 1_000 };
            span.attributes
                .push(KeyValue::new("blob", "y".repeat(size)));
            span
        })
        .collect();
    let mut encoder = TraceEncoder::with_limit(8_000);
    encoder.set_resource(&resource);
    let requests = encoder.encode(ReadyBatch {
        build: None,
        spans: spans.iter().cloned().map(ReadySpan::Data).collect(),
    });
    assert_eq!(requests.oversized, 1);
    assert!(requests.bodies.len() > 3, "{}", requests.bodies.len());
    let mut names = Vec::new();
    for body in &requests.bodies {
        assert!(body.len() <= 8_000, "{}", body.len());
        let request = decode(body);
        assert_eq!(request.resource_spans.len(), 1);
        let rs = &request.resource_spans[0];
        assert_eq!(rs.resource.as_ref().unwrap().attributes.len(), 5);
        for span in &rs.scope_spans[0].spans {
            names.push(span.name.clone());
        }
    }
    let expected: Vec<String> = (0..30)
        .filter(|&i| i != 7)
        .map(|i| format!("sdk-{i}"))
        .collect();
    assert_eq!(names, expected);
    // The encoder starts afresh: the next batch is one request again.
    let one = encoder.encode(ReadyBatch {
        build: None,
        spans: vec![ReadySpan::Data(sdk_span(1))],
    });
    assert_eq!(one.bodies.len(), 1);
    assert_eq!(one.bodies[0], via_sdk(vec![sdk_span(1)], &resource));
}

#[test]
fn an_empty_batch_is_no_request() {
    let requests = encoder(&resource()).encode(ReadyBatch::default());
    assert!(requests.bodies.is_empty());
}
