//! `nemo-lens emit-spans` at scale: a 40,000-span parent chain (ordered in one walk per span,
//! bounded by the child's deadline) and 50,000 spans through a span queue of 64 to a real
//! collector (flushed in chunks, none dropped).

// The library's real collector (rotel on loopback), one copy for both crates' tests.
use nemo_lens_test_support::cli as support;
use nemo_lens_test_support::collector;

use std::path::Path;
use std::process::Output;

use nemo_lens_test_support::clear_telemetry_env;
use serde_json::Value;
use support::{LAUNCHER_ENV, bin};

/// The spans the console exporter wrote for rank 0 into `dir`.
fn lines(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("spans-0.jsonl"))
        .map(|text| {
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        })
        .unwrap_or_default()
}

/// Generous bound of a child run: a debug build on two shared cores.
const CHILD_DEADLINE: std::time::Duration = std::time::Duration::from_secs(300);

/// `emit-spans` over the console exporter in `dir` with `spans` as `--span=...` arguments (one
/// argument each, with room for tens of thousands), bounded by [`CHILD_DEADLINE`].
fn emit_many(dir: &Path, extra_env: &[(&str, &str)], spans: &[String]) -> Output {
    let mut cmd = bin();
    clear_telemetry_env(&mut cmd);
    for k in LAUNCHER_ENV {
        cmd.env_remove(k);
    }
    cmd.env("NEMO_LENS_EXPORTER", "console").env(
        "NEMO_LENS_CONSOLE_PATH",
        dir.join("spans-{rank}.jsonl").to_str().unwrap(),
    );
    cmd.envs(extra_env.iter().copied());
    cmd.args(["emit-spans", "--service", "batch"]);
    cmd.args(spans.iter().map(|s| format!("--span={s}")));
    support::room_for_arguments(&mut cmd);
    support::run_bounded(&mut cmd, CHILD_DEADLINE)
}

#[test]
fn a_40000_span_parent_chain_is_ordered_and_emitted() {
    // Listed children first: the order of emission is the reverse of the input.
    let n = 40_000;
    let spans: Vec<String> = (0..n)
        .rev()
        .map(|i| match i {
            0 => "c0,1795989600,1795989601".to_owned(),
            i => format!("c{i},1795989600,1795989601,c{}", i - 1),
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    // Bounded: a quadratic ordering takes minutes here.
    let out = emit_many(dir.path(), &[], &spans);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        &stderr[..stderr.len().min(2000)]
    );
    let summary: Vec<&str> = stderr.lines().filter(|l| l.starts_with("  c")).collect();
    assert_eq!(summary.len(), n);
    assert!(summary[0].starts_with("  c0 "), "{}", summary[0]);
    assert!(summary[n - 1].starts_with(&format!("  c{} ", n - 1)));
    let emitted = lines(dir.path());
    assert_eq!(emitted.len(), n);
    let ids: std::collections::HashMap<&str, &Value> = emitted
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), &s["context"]["span_id"]))
        .collect();
    for s in &emitted {
        let name = s["name"].as_str().unwrap();
        let i: usize = name[1..].parse().unwrap();
        let parent = if i == 0 {
            &Value::Null
        } else {
            ids[format!("c{}", i - 1).as_str()]
        };
        assert_eq!(&s["parent_id"], parent, "{name}");
    }
}

/// 50,000 spans through a span queue of 64 (`OTEL_BSP_MAX_QUEUE_SIZE`): far more than the queue
/// holds, whatever the collector's speed; each reaches the collector once.
#[test]
fn fifty_thousand_spans_all_reach_a_real_collector() {
    let collector = collector::Collector::start();
    let n = 50_000;
    let spans: Vec<String> = (0..n)
        .map(|i| format!("b{i},{},{}", 1_795_989_600 + i, 1_795_989_601 + i))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let endpoint = collector.endpoint("http/protobuf");
    let out = emit_many(
        dir.path(),
        &[
            ("NEMO_LENS_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "64"),
        ],
        &spans,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        &stderr[..stderr.len().min(2000)]
    );
    assert!(
        !stderr.contains("dropped"),
        "{}",
        &stderr[..stderr.len().min(2000)]
    );
    // Each span once: 50,000 distinct names, no retry's duplicate.
    let names = |text: &str| {
        text.lines()
            .filter_map(|l| l.trim().strip_prefix("Name"))
            .filter_map(|rest| rest.trim_start().strip_prefix(':'))
            .map(str::trim)
            .filter(|n| n.starts_with('b') && n[1..].parse::<u32>().is_ok())
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let text = collector.wait_for("50,000 spans", CHILD_DEADLINE, |o| names(o).len() >= n);
    let received = names(&text);
    let distinct: std::collections::HashSet<&String> = received.iter().collect();
    assert_eq!((received.len(), distinct.len()), (n, n));
}
