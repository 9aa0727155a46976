//! The examples as a user runs them: real processes, configured by environment only.

use std::process::Output;

use nemo_lens_test_support::child::Child;
use nemo_lens_test_support::console;

fn run(env: &[(&str, &str)], args: &[&str]) -> Output {
    Child::example("trainer")
        .envs(env.iter().copied())
        .args(args)
        .run()
}

fn lines(out: &[u8]) -> Vec<serde_json::Value> {
    console::parse(&String::from_utf8_lossy(out))
}

#[test]
fn console_exporter_prints_one_json_span_per_line() {
    let out = run(
        &[
            ("NEMO_LENS_ENABLED", "1"),
            ("NEMO_LENS_EXPORTER", "console"),
            ("NEMO_LENS_SPAN_GROUPS", "per_step"),
            ("NEMO_LENS_RUN_ID", "ci-run"),
        ],
        &[
            "--rank",
            "0",
            "--world-size",
            "1",
            "--steps",
            "3",
            "--step-ms",
            "1",
            "--checkpoint-every",
            "3",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spans = lines(&out.stdout);
    let count = |n: &str| spans.iter().filter(|s| s["name"] == n).count();
    assert_eq!(count("train_step"), 3);
    assert_eq!(count("forward_backward"), 3);
    assert_eq!(count("optimizer_step"), 3);
    assert_eq!(count("save_checkpoint"), 1);
    assert_eq!(count("train"), 1);
    let train = spans.iter().find(|s| s["name"] == "train").unwrap();
    assert!(train["parent_id"].is_null());
    assert_eq!(train["resource"]["attributes"]["nemo.run.id"], "ci-run");
    assert_eq!(
        train["resource"]["attributes"]["service.instance.id"],
        "ci-run-rank0"
    );
    let step = spans.iter().find(|s| s["name"] == "train_step").unwrap();
    assert_eq!(step["parent_id"], train["context"]["span_id"]);
    assert!(step["attributes"]["dl.loss"].is_f64());
    assert!(step["attributes"]["step"].is_i64());

    // The metric batch written at shutdown: three steps of `TrainingMetrics`.
    let batch = spans
        .iter()
        .rev()
        .find(|l| l.get("resource_metrics").is_some())
        .expect("a resource_metrics line");
    let metrics = batch["resource_metrics"][0]["scope_metrics"][0]["metrics"]
        .as_array()
        .unwrap();
    let metric = |n: &str| metrics.iter().find(|m| m["name"] == n).unwrap();
    let step_duration = &metric("dl.step.duration")["data"]["data_points"][0];
    assert_eq!(step_duration["count"], 3);
    assert!(metric("dl.loss")["data"]["data_points"][0]["value"].is_f64());
}

#[test]
fn default_groups_export_job_and_checkpoint_only() {
    let out = run(
        &[
            ("NEMO_LENS_ENABLED", "true"),
            ("NEMO_LENS_EXPORTER", "console"),
        ],
        &["--steps", "2", "--step-ms", "1", "--checkpoint-every", "1"],
    );
    assert!(out.status.success());
    let mut names: Vec<String> = lines(&out.stdout)
        .iter()
        .filter_map(|s| s["name"].as_str().map(str::to_string))
        .collect();
    names.sort();
    assert_eq!(names, ["save_checkpoint", "save_checkpoint", "train"]);
}

#[test]
fn a_rank_the_strategy_excludes_prints_nothing_and_exits_0() {
    let out = run(
        &[
            ("NEMO_LENS_ENABLED", "1"),
            ("NEMO_LENS_EXPORTER", "console"),
            ("NEMO_LENS_SPAN_GROUPS", "all"),
        ],
        &[
            "--rank",
            "0",
            "--world-size",
            "4",
            "--steps",
            "2",
            "--step-ms",
            "1",
        ],
    );
    assert!(out.status.success());
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn per_rank_files_do_not_interleave() {
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("lens_rank{rank}.jsonl");
    for rank in 0..2 {
        let out = run(
            &[
                ("NEMO_LENS_ENABLED", "1"),
                ("NEMO_LENS_EXPORTER", "console"),
                ("NEMO_LENS_EXPORT_STRATEGY", "all_ranks"),
                ("NEMO_LENS_CONSOLE_PATH", template.to_str().unwrap()),
            ],
            &[
                "--rank",
                &rank.to_string(),
                "--world-size",
                "2",
                "--steps",
                "1",
                "--step-ms",
                "1",
            ],
        );
        assert!(out.status.success());
        assert!(out.stdout.is_empty(), "spans went to the file, not stdout");
    }
    for rank in 0..2_i64 {
        let lines = console::read(&dir.path().join(format!("lens_rank{rank}.jsonl")));
        assert!(!lines.is_empty());
        // Span lines and metric lines (`resource_metrics`) share the rank's file.
        assert!(lines.iter().all(|l| {
            let resource = match l.get("resource_metrics") {
                Some(batch) => &batch[0]["resource"],
                None => &l["resource"],
            };
            resource["attributes"]["dl.rank"] == rank
        }));
        assert!(lines.iter().any(|l| l.get("resource_metrics").is_some()));
    }
}

#[test]
fn a_bad_variable_is_reported_and_exits_non_zero() {
    let out = run(&[("NEMO_LENS_ENABLED", "maybe")], &["--steps", "1"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("NEMO_LENS_ENABLED") && stderr.contains("'maybe'"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());

    let out = run(
        &[("NEMO_LENS_ENABLED", "1"), ("NEMO_LENS_EXPORTER", "zipkin")],
        &["--steps", "1"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("NEMO_LENS_EXPORTER"));
}

#[test]
fn custom_exporter_example_receives_every_span() {
    let out = Child::example("custom_exporter").run();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("my-backend-demo | train_step | "))
            .count(),
        3
    );
    assert!(lines[3].starts_with("my-backend-demo | job | "), "{text}");
    assert!(lines[0].contains("| step=0,"), "{text}");
}

#[test]
fn launcher_traceparent_joins_every_rank_into_one_trace() {
    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const PARENT: &str = "00f067aa0ba902b7";
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let world = 3;
    let children: Vec<_> = (0..world)
        .map(|rank| {
            Child::example("trainer")
                .envs([
                    ("NEMO_LENS_ENABLED", "1"),
                    ("NEMO_LENS_EXPORTER", "console"),
                    ("NEMO_LENS_EXPORT_STRATEGY", "all_ranks"),
                    ("NEMO_LENS_SPAN_GROUPS", "per_step"),
                    ("NEMO_LENS_RUN_ID", "joined"),
                    ("TRACEPARENT", traceparent.as_str()),
                ])
                .args([
                    "--rank",
                    &rank.to_string(),
                    "--world-size",
                    &world.to_string(),
                ])
                .args(["--steps", "2", "--step-ms", "1"])
                .spawn()
        })
        .collect();
    let mut span_ids = std::collections::HashSet::new();
    for (rank, child) in children.into_iter().enumerate() {
        let out = child.wait();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let spans: Vec<_> = lines(&out.stdout)
            .into_iter()
            .filter(|l| l.get("context").is_some())
            .collect();
        assert!(spans.len() >= 3, "rank {rank}: {spans:?}");
        for s in &spans {
            assert_eq!(
                s["context"]["trace_id"],
                format!("0x{TRACE}"),
                "rank {rank}"
            );
            assert_eq!(s["resource"]["attributes"]["dl.rank"], rank as i64);
            assert!(span_ids.insert(s["context"]["span_id"].as_str().unwrap().to_string()));
        }
        let train = spans.iter().find(|s| s["name"] == "train").unwrap();
        assert_eq!(train["parent_id"], format!("0x{PARENT}"), "rank {rank}");
    }
}
