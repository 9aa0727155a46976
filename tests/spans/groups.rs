//! Span groups: specs, presets, library registration and per-callsite gating.

use nemo_lens::testing::SpanCapture;
use nemo_lens::{LensConfig, groups};

fn capture(spec: &str) -> SpanCapture {
    SpanCapture::with_config(LensConfig::default().with(|c| c.groups.span_groups = spec.into()))
        .unwrap()
}

#[tracing::instrument(fields(nemo.group.step))]
fn step() {
    forward_backward();
    optimizer();
}

#[tracing::instrument(fields(nemo.group.forward_backward))]
fn forward_backward() {}

#[tracing::instrument(fields(nemo.group.optimizer))]
fn optimizer() {}

#[tracing::instrument]
fn ungrouped() {}

fn names(c: &SpanCapture) -> Vec<String> {
    let mut v: Vec<_> = c.spans().iter().map(|s| s.name.to_string()).collect();
    v.sort();
    v
}

#[test]
fn only_enabled_groups_are_exported_and_ungrouped_spans_always_are() {
    let c = capture("step,optimizer");
    c.in_scope(|| {
        step();
        ungrouped();
    });
    assert_eq!(names(&c), ["optimizer", "step", "ungrouped"]);
    // The group marker field is not an attribute.
    let s = c.span("step").unwrap();
    assert!(
        s.attributes
            .iter()
            .all(|kv| !kv.key.as_str().starts_with("nemo.group"))
    );
    // The optimizer's parent is step even though forward_backward (a sibling) was gated.
    assert_eq!(
        c.span("optimizer").unwrap().parent_span_id,
        s.span_context.span_id()
    );
}

#[test]
fn a_child_of_a_gated_span_attaches_to_the_nearest_recorded_ancestor() {
    let c = capture("job,optimizer");
    c.in_scope(|| {
        tracing::info_span!("job", nemo.group.job = tracing::field::Empty).in_scope(step);
    });
    assert_eq!(names(&c), ["job", "optimizer"]);
    assert_eq!(
        c.span("optimizer").unwrap().parent_span_id,
        c.span("job").unwrap().span_context.span_id()
    );
}

#[test]
fn libraries_register_groups_and_presets_union() {
    groups::register_span_groups(
        &["Microbatch", "communication"],
        &[("per_step", &["microbatch"]), ("comms", &["communication"])],
    )
    .unwrap();
    let per_step = capture("per_step");
    assert!(
        per_step.telemetry().is_span_group_enabled("microbatch")
            && per_step.telemetry().is_span_group_enabled("step"),
        "presets union"
    );
    drop(per_step);
    assert!(groups::register_span_groups(&[""], &[]).is_err());

    let c = capture("comms");
    c.in_scope(|| {
        tracing::info_span!(
            "allreduce",
            nemo.group.communication = tracing::field::Empty
        )
        .in_scope(|| {});
        tracing::info_span!("mb", nemo.group.microbatch = tracing::field::Empty).in_scope(|| {});
    });
    assert_eq!(names(&c), ["allreduce"]);
}

#[test]
fn is_span_group_enabled_reflects_the_last_setup() {
    let c = capture("default");
    assert!(c.telemetry().is_span_group_enabled("job"));
    assert!(!c.telemetry().is_span_group_enabled("step"));
}

#[test]
fn changing_the_groups_at_run_time_re_evaluates_callsites() {
    // The groups are the process's (the telemetry set up last): alone in a process, no other
    // test's telemetry can take their place.
    nemo_lens_test_support::child::run_alone(|| {
        let c = capture("job");
        let emit = || {
            tracing::info_span!("late_step", nemo.group.step = tracing::field::Empty)
                .in_scope(|| {})
        };
        c.in_scope(emit);
        assert!(c.span("late_step").is_none());
        groups::set_enabled_span_groups("job,step").unwrap();
        c.in_scope(emit);
        assert!(c.span("late_step").is_some());
        assert!(groups::set_enabled_span_groups("bogus").is_err());
        assert!(
            c.telemetry().is_span_group_enabled("step"),
            "a bad spec changes nothing"
        );
    });
}

/// A span of a group carries `lens.group`, and with a category `lens.span_category` and the
/// `purpose` list Lens's collector configurations route on; Megatron's and NVRx's vocabularies
/// register as Python registers them.
#[test]
fn spans_carry_their_group_category_and_purpose() {
    // Registration is process-wide: alone in a process, it changes no other test's presets.
    nemo_lens_test_support::child::run_alone(spans_carry_their_group_category_and_purpose_alone);
}

fn register_megatron_and_nvrx() {
    use nemo_lens::GroupsConfig;
    groups::register_span_groups(
        &GroupsConfig::MEGATRON_SPAN_GROUPS,
        &GroupsConfig::MEGATRON_SPAN_PRESETS,
    )
    .unwrap();
    groups::register_span_groups(
        &GroupsConfig::NVRX_SPAN_GROUPS,
        &GroupsConfig::NVRX_SPAN_PRESETS,
    )
    .unwrap();
}

/// Megatron's and NVRx's presets after registration, as `MegatronSpanGroup` and NVRx's shim
/// define them (unioned with the built-in presets of the same names).
#[test]
fn megatron_and_nvrx_presets_resolve_as_in_python() {
    nemo_lens_test_support::child::run_alone(|| {
        register_megatron_and_nvrx();
        // Twice is harmless (a library imported again).
        register_megatron_and_nvrx();
        let enabled =
            |spec: &str, group: &str| capture(spec).telemetry().is_span_group_enabled(group);
        for g in [
            "job",
            "checkpoint",
            "evaluate",
            "first_iteration",
            "inference",
            "nvrx.job",
            "nvrx.ft",
            "nvrx.ckpt",
        ] {
            assert!(enabled("default", g), "default: {g}");
        }
        for g in ["nvrx.ckpt.phases", "microbatch", "step"] {
            assert!(!enabled("default", g), "default: {g}");
        }
        for g in [
            "communication",
            "data_loading",
            "first_iteration",
            "inference",
            "optimizer",
            "nvrx.ckpt.phases",
        ] {
            assert!(enabled("per_step", g), "per_step: {g}");
        }
        for g in ["trace_region", "layer", "microbatch", "activation_offload"] {
            assert!(!enabled("per_step", g), "per_step: {g}");
            assert!(
                enabled("profiling", g) && enabled("all", g),
                "profiling: {g}"
            );
        }
        for g in ["data_loading", "first_iteration", "step", "load_checkpoint"] {
            assert!(enabled("goodput", g), "goodput: {g}");
        }
        assert!(!enabled("goodput", "communication") && !enabled("goodput", "nvrx.ft"));
        // `profiling` and `all` are reserved.
        assert!(groups::register_span_groups(&["profiling"], &[]).is_err());
    });
}

fn spans_carry_their_group_category_and_purpose_alone() {
    use opentelemetry::{Array, Value};
    register_megatron_and_nvrx();
    let c = capture("goodput,microbatch,nvrx.ft,collective");
    c.in_scope(|| {
        step();
        tracing::info_span!(
            "megatron.train.first_iteration",
            nemo.group.first_iteration = tracing::field::Empty
        )
        .in_scope(|| {});
        tracing::info_span!("mb", nemo.group.microbatch = tracing::field::Empty).in_scope(|| {});
        tracing::info_span!("rdzv", nemo.group.nvrx.ft = tracing::field::Empty).in_scope(|| {});
        // Its own purpose wins.
        tracing::info_span!(
            "mine",
            nemo.group.step = tracing::field::Empty,
            purpose = "archive"
        )
        .in_scope(|| {});
        // In `collective` by the default span-group rule on its target.
        tracing::info_span!(target: "burn_collective::local", "all_reduce").in_scope(|| {});
        ungrouped();
    });
    let attr = |span: &str, key: &str| SpanCapture::attribute(&c.span(span).unwrap(), key);
    let list = |s: &'static str| Some(Value::Array(Array::String(vec![s.into()])));
    let text = |s: &'static str| Some(Value::from(s));
    // `goodput` (Lens's GOODPUT_GROUPS) holds step, not forward_backward or optimizer.
    assert_eq!(names(&c).len(), 7, "{:?}", names(&c));
    assert_eq!(attr("step", "lens.group"), text("step"));
    assert_eq!(attr("step", "lens.span_category"), text("goodput"));
    assert_eq!(attr("step", "purpose"), list("goodput"));
    let first = "megatron.train.first_iteration";
    assert_eq!(attr(first, "lens.group"), text("first_iteration"));
    assert_eq!(attr(first, "purpose"), list("goodput"));
    assert_eq!(attr("mb", "lens.span_category"), text("profiling"));
    assert_eq!(attr("mb", "purpose"), list("profiling"));
    assert_eq!(attr("rdzv", "lens.group"), text("nvrx.ft"));
    assert_eq!(attr("rdzv", "lens.span_category"), None);
    assert_eq!(attr("rdzv", "purpose"), None);
    assert_eq!(attr("mine", "purpose"), text("archive"));
    assert_eq!(attr("mine", "lens.span_category"), text("goodput"));
    assert_eq!(attr("all_reduce", "lens.group"), text("collective"));
    assert_eq!(attr("all_reduce", "purpose"), list("profiling"));
    let plain = c.span("ungrouped").unwrap();
    assert!(
        plain
            .attributes
            .iter()
            .all(|kv| !kv.key.as_str().starts_with("lens.") && kv.key.as_str() != "purpose")
    );
}
