//! `NEMO_LENS_TRACE_PER`: a span of a chosen group starts a trace of its own, linked to the span
//! that would have been its parent, so a multi-day job is one small trace per step per rank
//! instead of one trace per rank that trace stores refuse. Real trainer processes write console
//! JSONL files; the test reads them as a backend would.

use std::collections::HashMap;
use std::path::Path;
use std::process::Output;

use serde_json::Value;

use nemo_lens_test_support::{child::Child, console};

/// Runs one exporting trainer rank (3 steps, per-step groups) with `env`; returns its output
/// and its span lines by name.
fn trainer(dir: &Path, env: &[(&str, &str)]) -> (Output, HashMap<String, Vec<Value>>) {
    let out = Child::example("trainer")
        .env("NEMO_LENS_ENABLED", "1")
        .env("NEMO_LENS_EXPORTER", "console")
        .env("NEMO_LENS_EXPORT_STRATEGY", "all_ranks")
        .env("NEMO_LENS_METRICS_ENABLED", "0")
        .env("NEMO_LENS_SPAN_GROUPS", "per_step")
        .env("NEMO_LENS_CONSOLE_PATH", dir.join("rank{rank}.jsonl"))
        .envs(env.iter().copied())
        .args(["--steps", "3", "--step-ms", "0", "--checkpoint-every", "0"])
        .run();
    assert!(out.status.success(), "{out:?}");
    let mut spans: HashMap<String, Vec<Value>> = HashMap::new();
    for v in console::read(&dir.join("rank0.jsonl")) {
        if let Some(name) = v["name"].as_str() {
            spans.entry(name.to_string()).or_default().push(v);
        }
    }
    (out, spans)
}

fn trace_id(span: &Value) -> &str {
    span["context"]["trace_id"].as_str().unwrap()
}

fn span_id(span: &Value) -> &str {
    span["context"]["span_id"].as_str().unwrap()
}

#[test]
fn each_step_is_a_trace_of_its_own_linked_to_the_job_span() {
    let dir = tempfile::tempdir().unwrap();
    let (_, spans) = trainer(dir.path(), &[("NEMO_LENS_TRACE_PER", "Step")]);
    let job = &spans["train"][0];
    let steps = &spans["train_step"];
    assert_eq!(steps.len(), 3);
    let mut traces: Vec<&str> = steps.iter().map(trace_id).collect();
    traces.sort();
    traces.dedup();
    assert_eq!(traces.len(), 3, "one trace per step");
    for step in steps {
        assert_ne!(trace_id(step), trace_id(job));
        assert!(
            step["parent_id"].is_null(),
            "a step is its trace's root: {step}"
        );
        let links = step["links"].as_array().unwrap();
        assert_eq!(links.len(), 1, "{step}");
        assert_eq!(links[0]["context"]["trace_id"], job["context"]["trace_id"]);
        assert_eq!(links[0]["context"]["span_id"], job["context"]["span_id"]);
    }
    // A step's own spans stay in its trace, under it.
    for child in spans["forward_backward"]
        .iter()
        .chain(&spans["optimizer_step"])
    {
        let parent = steps
            .iter()
            .find(|s| Some(span_id(s)) == child["parent_id"].as_str())
            .unwrap_or_else(|| panic!("{child} has no step parent"));
        assert_eq!(trace_id(child), trace_id(parent));
    }
    // The job span itself is unchanged: a root with no links.
    assert!(job["parent_id"].is_null());
    assert_eq!(job["links"], serde_json::json!([]));
}

#[test]
fn off_by_default_one_trace_per_rank_as_in_python() {
    let dir = tempfile::tempdir().unwrap();
    let (_, spans) = trainer(dir.path(), &[]);
    let job = &spans["train"][0];
    for step in &spans["train_step"] {
        assert_eq!(trace_id(step), trace_id(job));
        assert_eq!(step["parent_id"], job["context"]["span_id"]);
        assert_eq!(step["links"], serde_json::json!([]));
    }
}

#[test]
fn unknown_groups_warn_once_and_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let (out, spans) = trainer(dir.path(), &[("NEMO_LENS_TRACE_PER", "megatron_pp,step")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("NEMO_LENS_TRACE_PER"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains("'megatron_pp'") && warnings[0].contains("step"));
    // `step` still applies.
    assert!(spans["train_step"].iter().all(|s| s["parent_id"].is_null()));
}
