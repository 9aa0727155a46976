//! One environment for the whole job: every rank of a job (real trainer processes) gets the
//! same variables, as a launcher sets them for a mixed Python/Rust job.
//!
//! * span groups only some processes register warn once, on the exporting rank, and are
//!   ignored; every rank runs;
//! * what only the exporting rank uses (exporter kind, OTLP protocol, endpoint, timeout,
//!   certificates, batch and metric-interval variables, attribute limits) fails that rank
//!   alone, naming the variable; the other ranks run;
//! * a disabled job takes any rank and world size;
//! * `OTEL_SDK_DISABLED=true` makes every rank inert;
//! * a blank `OTEL_*` value is unset: the generic variable or the default applies.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use nemo_lens_test_support::child::Child;
use nemo_lens_test_support::collector::{self, Collector, count_named, items};
use nemo_lens_test_support::console;

const WORLD: u32 = 4;

/// Runs every rank of a `WORLD`-rank job with `env` (and nothing else of the test's own
/// environment) and returns each rank's output, rank order.
fn job(env: &[(&str, &str)], dir: &Path) -> Vec<Output> {
    let children: Vec<_> = (0..WORLD)
        .map(|rank| {
            Child::example("trainer")
                .envs(env.iter().copied())
                .current_dir(dir)
                .args([
                    "--rank",
                    &rank.to_string(),
                    "--world-size",
                    &WORLD.to_string(),
                ])
                .args(["--steps", "2", "--step-ms", "0"])
                .spawn()
        })
        .collect();
    children.into_iter().map(|c| c.wait()).collect()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The JSON lines of rank `rank`'s console file (none when the rank wrote none).
fn console_lines(dir: &Path, rank: u32) -> Vec<serde_json::Value> {
    console::read_if_any(&dir.join(format!("lens-{rank}.jsonl")))
}

/// A job-wide `NEMO_LENS_SPAN_GROUPS` naming Python's Megatron groups: every rank runs, the
/// exporting rank (the last, under `single_rank`) warns once naming the unknown entries and the
/// known groups, and exports the known groups' spans. The other ranks say nothing.
#[test]
fn unknown_span_groups_warn_once_on_the_exporting_rank_and_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let outs = job(
        &[
            ("NEMO_LENS_ENABLED", "1"),
            ("NEMO_LENS_EXPORTER", "console"),
            ("NEMO_LENS_CONSOLE_PATH", "lens-{rank}.jsonl"),
            (
                "NEMO_LENS_SPAN_GROUPS",
                "per_step, megatron_pp ,Microbatch,megatron_pp",
            ),
        ],
        dir.path(),
    );
    for (rank, out) in outs.iter().enumerate() {
        assert!(out.status.success(), "rank {rank}: {}", stderr(out));
        let warnings: Vec<String> = stderr(out)
            .lines()
            .filter(|l| l.contains("warning") && l.contains("NEMO_LENS_SPAN_GROUPS"))
            .map(str::to_string)
            .collect();
        if rank as u32 == WORLD - 1 {
            assert_eq!(warnings.len(), 1, "one warning: {}", stderr(out));
            let w = &warnings[0];
            assert!(w.contains("'megatron_pp', 'microbatch'"), "{w}");
            assert!(w.contains("(ignored)"), "{w}");
            assert!(
                w.contains("Known: ") && w.contains("step") && w.contains("per_step"),
                "{w}"
            );
        } else {
            assert!(warnings.is_empty(), "rank {rank}: {warnings:?}");
            assert!(console_lines(dir.path(), rank as u32).is_empty());
        }
    }
    let lines = console_lines(dir.path(), WORLD - 1);
    let spans = console::names(&lines);
    assert_eq!(
        spans.iter().filter(|n| **n == "train_step").count(),
        2,
        "{spans:?}"
    );
}

/// Exporting-rank-only settings that are wrong fail the exporting rank alone, with an error
/// naming the variable; the other ranks build no exporter and run.
#[test]
fn exporting_rank_settings_fail_only_the_exporting_rank() {
    let dir = tempfile::tempdir().unwrap();
    let base = [
        ("NEMO_LENS_ENABLED", "1"),
        ("NEMO_LENS_METRICS_ENABLED", "0"),
    ];
    let cases: [(&[(&str, &str)], &str); 7] = [
        // Python's int() takes `1_000`; nemo-lens does not, on the exporting rank only.
        (
            &[
                ("NEMO_LENS_METRICS_ENABLED", "1"),
                ("OTEL_METRIC_EXPORT_INTERVAL", "1_000"),
            ],
            "OTEL_METRIC_EXPORT_INTERVAL",
        ),
        (
            &[("OTEL_BSP_MAX_QUEUE_SIZE", "lots")],
            "OTEL_BSP_MAX_QUEUE_SIZE",
        ),
        (
            &[("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "ten")],
            "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
        ),
        (&[("NEMO_LENS_EXPORTER", "zipkin")], "NEMO_LENS_EXPORTER"),
        (
            &[("OTEL_EXPORTER_OTLP_PROTOCOL", "thrift")],
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
        (
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://127.0.0.1:9"),
                ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem"),
            ],
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
        ),
        (
            &[
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
                ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "soon"),
            ],
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        ),
    ];
    for (extra, var) in cases {
        let env: Vec<(&str, &str)> = base.iter().chain(extra.iter()).copied().collect();
        let outs = job(&env, dir.path());
        for (rank, out) in outs.iter().enumerate() {
            if rank as u32 == WORLD - 1 {
                assert_eq!(out.status.code(), Some(2), "{var}: {}", stderr(out));
                assert!(stderr(out).contains(var), "{var}: {}", stderr(out));
            } else {
                assert!(out.status.success(), "{var}, rank {rank}: {}", stderr(out));
                assert!(
                    !stderr(out).contains(var),
                    "{var}, rank {rank}: {}",
                    stderr(out)
                );
            }
        }
    }
}

/// Telemetry off: any rank and world size a launcher hands out is accepted.
#[test]
fn a_disabled_job_accepts_any_rank_and_world_size() {
    for (rank, world) in [("8", "8"), ("3", "0"), ("4294967295", "1")] {
        let out = Child::example("trainer")
            .env("NEMO_LENS_ENABLED", "0")
            .args([
                "--rank",
                rank,
                "--world-size",
                world,
                "--steps",
                "1",
                "--step-ms",
                "0",
            ])
            .run();
        assert!(
            out.status.success(),
            "rank {rank} of {world}: {}",
            stderr(&out)
        );
    }
    // Enabled, the same numbers are an error naming them.
    let out = Child::example("trainer")
        .env("NEMO_LENS_ENABLED", "1")
        .args(["--rank", "8", "--world-size", "8", "--steps", "1"])
        .run();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("rank 8, world_size 8"),
        "{}",
        stderr(&out)
    );
}

/// `OTEL_SDK_DISABLED=true` (any case, surrounding blanks) turns every rank inert: no output
/// at all, even with telemetry enabled on every rank. Any other value leaves it on.
#[test]
fn otel_sdk_disabled_makes_every_rank_inert() {
    for (value, inert) in [
        ("true", true),
        (" TRUE ", true),
        ("false", false),
        ("1", false),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let outs = job(
            &[
                ("NEMO_LENS_ENABLED", "1"),
                ("NEMO_LENS_EXPORT_STRATEGY", "all_ranks"),
                ("NEMO_LENS_EXPORTER", "console"),
                ("NEMO_LENS_CONSOLE_PATH", "lens-{rank}.jsonl"),
                ("NEMO_LENS_SPAN_GROUPS", "per_step"),
                ("OTEL_SDK_DISABLED", value),
            ],
            dir.path(),
        );
        for (rank, out) in outs.iter().enumerate() {
            assert!(
                out.status.success(),
                "{value:?} rank {rank}: {}",
                stderr(out)
            );
            let lines = console_lines(dir.path(), rank as u32);
            assert_eq!(lines.is_empty(), inert, "{value:?} rank {rank}: {lines:?}");
        }
    }
}

/// Blank `OTEL_*` values are unset, as blank `NEMO_LENS_*` values are: a blank per-signal
/// protocol, endpoint, headers or timeout gives way to the generic variable, a blank generic
/// one to the default, and a blank metric interval to 10 s. Spans and metrics reach a real
/// collector.
#[test]
fn blank_otel_values_are_unset() {
    let collector = Collector::start();
    let dir = tempfile::tempdir().unwrap();
    let endpoint = collector.endpoint("http/protobuf");
    let outs = job(
        &[
            ("NEMO_LENS_ENABLED", "1"),
            ("NEMO_LENS_EXPORTER", "otlp"),
            ("NEMO_LENS_SPAN_GROUPS", "per_step"),
            ("OTEL_SERVICE_NAME", "blank-job"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "  "),
            ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", ""),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", " "),
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", ""),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-team=ml"),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", " "),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", ""),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "\t"),
            ("OTEL_EXPORTER_OTLP_INSECURE", " "),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", ""),
            ("OTEL_METRIC_EXPORT_INTERVAL", " "),
        ],
        dir.path(),
    );
    for (rank, out) in outs.iter().enumerate() {
        assert!(out.status.success(), "rank {rank}: {}", stderr(out));
        assert!(
            !stderr(out).contains("nemo-lens: "),
            "rank {rank}: {}",
            stderr(out)
        );
    }
    let text = collector.wait_for(
        "the exporting rank's spans and metrics",
        Duration::from_secs(30),
        |o| {
            count_named(&collector::spans(o), "train_step") == 2
                && items(o, "Metric #")
                    .iter()
                    .any(|m| m.attr("Name").as_deref() == Some("dl.loss"))
        },
    );
    let spans = collector::spans(&text);
    assert!(
        spans
            .iter()
            .all(|s| s.resource_attr("dl.rank") == Some(format!("Int({})", WORLD - 1)))
    );
}
