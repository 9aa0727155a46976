//! `nemo-lens emit-spans`: the real binary exporting through the console exporter into a file,
//! all-or-nothing input checking (exit 1) and setup/export failures (exit 2).

// The library's real collector (rotel on loopback), one copy for both crates' tests.
use nemo_lens_test_support::collector;

use std::path::Path;
use std::process::Output;

use nemo_lens_test_support::clear_telemetry_env;
use nemo_lens_test_support::cli::{LAUNCHER_ENV, bin};
use serde_json::Value;

/// Runs emit-spans with the console exporter writing to `dir/spans-{rank}.jsonl`, with a clean
/// NEMO_LENS/OTEL/launcher environment.
fn emit(dir: &Path, extra_env: &[(&str, &str)], spans: &[&str]) -> Output {
    emit_with(dir, extra_env, &[], spans)
}

fn emit_with(dir: &Path, extra_env: &[(&str, &str)], flags: &[&str], spans: &[&str]) -> Output {
    let mut cmd = bin();
    clear_telemetry_env(&mut cmd);
    for k in LAUNCHER_ENV {
        cmd.env_remove(k);
    }
    cmd.env("NEMO_LENS_EXPORTER", "console")
        .env(
            "NEMO_LENS_CONSOLE_PATH",
            dir.join("spans-{rank}.jsonl").to_str().unwrap(),
        )
        .env("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-env,site=lab");
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    cmd.args(["emit-spans", "--service", "launcher"])
        .args(flags);
    for s in spans {
        cmd.args(["--span", s]);
    }
    cmd.output().unwrap()
}

fn lines(dir: &Path) -> Vec<Value> {
    lines_of(dir, 0)
}

fn lines_of(dir: &Path, rank: u32) -> Vec<Value> {
    match std::fs::read_to_string(dir.join(format!("spans-{rank}.jsonl"))) {
        Ok(text) => text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[test]
fn emits_parent_and_children_with_exact_times() {
    let dir = tempfile::tempdir().unwrap();
    // Children before their parent; "pull" does not nest inside "job"; "skew" ends before it
    // starts.
    let out = emit(
        dir.path(),
        &[],
        &[
            "pull,1795989600.5,1795989612.25,job",
            "skew,1795989700.000002,1795989699.5,job",
            "job,1795989601,1795989900",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // Python's summary: one line per span, parents first, then the clamping warning's line.
    let summary: Vec<&str> = stderr.lines().filter(|l| l.starts_with("  ")).collect();
    assert_eq!(
        summary,
        [
            format!("  {:<34} {:>8}s", "job", "299.000"),
            format!("  {:<34} {:>8}s  -> job", "pull", "11.750"),
            format!("  {:<34} {:>8}s  -> job", "skew", "0.000"),
        ],
        "{stderr}"
    );

    let spans = lines(dir.path());
    assert_eq!(spans.len(), 3, "{spans:?}");
    let by = |n: &str| spans.iter().find(|s| s["name"] == n).unwrap();
    let (job, pull, skew) = (by("job"), by("pull"), by("skew"));
    assert_eq!(job["parent_id"], Value::Null);
    assert_eq!(pull["parent_id"], job["context"]["span_id"]);
    assert_eq!(skew["parent_id"], job["context"]["span_id"]);
    assert_eq!(pull["context"]["trace_id"], job["context"]["trace_id"]);
    assert_eq!(pull["start_time"], "2026-11-29T22:00:00.500000Z");
    assert_eq!(pull["end_time"], "2026-11-29T22:00:12.250000Z");
    assert_eq!(job["start_time"], "2026-11-29T22:00:01.000000Z");
    // Clamped and tagged.
    assert_eq!(skew["start_time"], skew["end_time"]);
    assert_eq!(skew["attributes"]["inverted.skew"], true);
    assert_eq!(
        skew["attributes"]["inverted.start_epoch_seconds"],
        "1795989700.000002"
    );
    assert_eq!(
        skew["attributes"]["inverted.end_epoch_seconds"],
        "1795989699.5"
    );
    assert_eq!(skew["attributes"]["inverted.delta_seconds"], "0.500002");
    // --service wins over OTEL_RESOURCE_ATTRIBUTES; other env attributes are inherited.
    let resource = &job["resource"]["attributes"];
    assert_eq!(resource["service.name"], "launcher");
    assert_eq!(resource["site"], "lab");
}

#[test]
fn invalid_input_emits_nothing_and_exits_1() {
    let cases: &[(&[&str], &str)] = &[
        (&["a,1,two"], "error: skipping 'a': unparseable timestamp"),
        (&["a,0x10,2"], "error: skipping 'a': unparseable timestamp"),
        (
            &["a,1"],
            "error: skipping 'a,1': expected NAME,START,END[,PARENT]",
        ),
        (&[",1,2"], "error: skipping ',1,2': missing span name"),
        (&["m,,2"], "error: skipping 'm': missing timestamp"),
        (
            &["a,nan,2"],
            "error: skipping 'a': timestamp must be finite",
        ),
        (
            &["a,1,-Infinity"],
            "error: skipping 'a': timestamp must be finite",
        ),
        (&["a,1e40,2"], "error: skipping 'a': timestamp out of range"),
        (
            &["a,1,2", "a,3,4"],
            "error: invalid span 'a': duplicate span name",
        ),
        (
            &["a,1,2,ghost"],
            "error: invalid span 'a': missing parent 'ghost'",
        ),
        (
            &["a,1,2,b", "b,1,2,a"],
            "error: invalid span graph: parent cycle prevents emitting 'a'",
        ),
        (
            &["ok,1,2", "a,1,2,a"],
            "error: invalid span graph: parent cycle prevents emitting 'a'",
        ),
        (
            &["dup,1,2", "dup,1,2", "kid,1,2,dup"],
            "error: invalid span 'kid': parent 'dup' is duplicated",
        ),
    ];
    for (spans, why) in cases {
        let dir = tempfile::tempdir().unwrap();
        // Each with a valid span: all or nothing.
        let mut spans = spans.to_vec();
        spans.push("fine,1795989600,1795989601");
        let out = emit(dir.path(), &[], &spans);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{spans:?}: {stderr}");
        assert_eq!(
            stderr.lines().last(),
            Some("nothing emitted: invalid span input"),
            "{spans:?}: {stderr}"
        );
        assert!(
            stderr.lines().any(|l| l == *why),
            "{spans:?}: expected {why:?} in {stderr}"
        );
        assert!(lines(dir.path()).is_empty(), "{spans:?} emitted something");
    }
}

/// Python's clock-inversion case: each inverted span is clamped to its start, tagged with exactly
/// the four `inverted.*` attributes, warned about once, and summarised as 0.000 s; the others
/// carry no evidence.
#[test]
fn inverted_spans_are_clamped_tagged_and_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let out = emit(
        dir.path(),
        &[],
        &[
            "leaf,1795989612,1795989611,child",
            "child,1795989610,1795989609,root",
            "root,1795989608,1795989607",
            "sibling,1795989609,1795989615,root",
            "marker,1795989611,1795989611,root",
            "other-root,1795989620,1795989621",
            "launch,1790038547.061741440,1790038547.061741439",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr.matches("clamping end to start").count(),
        4,
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "Span leaf has inverted timestamps: start_epoch_seconds=1795989612, \
             end_epoch_seconds=1795989611, inversion=1 seconds"
        ),
        "{stderr}"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l == format!("  {:<34} {:>8}s  -> child", "leaf", "0.000")),
        "{stderr}"
    );
    let spans = lines(dir.path());
    assert_eq!(spans.len(), 7);
    for span in &spans {
        let name = span["name"].as_str().unwrap();
        let attrs = span["attributes"].as_object().unwrap();
        let evidence = match name {
            "leaf" => Some(("1795989612", "1795989611", "1")),
            "child" => Some(("1795989610", "1795989609", "1")),
            "root" => Some(("1795989608", "1795989607", "1")),
            "launch" => Some(("1790038547.061741440", "1790038547.061741439", "1E-9")),
            _ => None,
        };
        match evidence {
            Some((start, end, delta)) => {
                assert_eq!(span["start_time"], span["end_time"], "{name}");
                assert_eq!(
                    serde_json::Value::Object(attrs.clone()),
                    serde_json::json!({
                        "inverted.skew": true,
                        "inverted.start_epoch_seconds": start,
                        "inverted.end_epoch_seconds": end,
                        "inverted.delta_seconds": delta,
                    }),
                    "{name}"
                );
            }
            None => assert!(attrs.is_empty(), "{name}: {attrs:?}"),
        }
    }
    // Parentage survives the clamping.
    let by = |n: &str| spans.iter().find(|s| s["name"] == n).unwrap();
    assert_eq!(by("leaf")["parent_id"], by("child")["context"]["span_id"]);
    assert_eq!(by("child")["parent_id"], by("root")["context"]["span_id"]);
}

/// Python's resource case: `--service` wins over the carrier's `service.name`, the launcher's
/// Slurm counts are integers, its other keys strings.
#[test]
fn the_launcher_s_attributes_are_typed_as_python_s() {
    let dir = tempfile::tempdir().unwrap();
    let out = emit(
        dir.path(),
        &[(
            "OTEL_RESOURCE_ATTRIBUTES",
            "service.name=from-env,slurm.job.id=123,slurm.array.count=1,slurm.nnodes=2,\
             slurm.ntasks=2,slurm.restart_count=0,cluster.name=atlas",
        )],
        &[
            "child,1700000001.5,1700000002.25,parent",
            "parent,1700000000,1700000003",
        ],
    );
    let resource = resource_of_all(dir.path(), 0, &out);
    assert_eq!(resource["service.name"], "launcher");
    assert_eq!(resource["slurm.job.id"], "123");
    for key in [
        "slurm.array.count",
        "slurm.nnodes",
        "slurm.ntasks",
        "slurm.restart_count",
    ] {
        assert!(resource[key].is_i64(), "{key}: {resource:?}");
    }
    assert_eq!(resource["slurm.nnodes"], 2);
    assert_eq!(resource["cluster.name"], "atlas");
    let spans = lines(dir.path());
    let by = |n: &str| spans.iter().find(|s| s["name"] == n).unwrap();
    assert_eq!(by("child")["start_time"], "2023-11-14T22:13:21.500000Z");
    assert_eq!(by("child")["end_time"], "2023-11-14T22:13:22.250000Z");
    assert_eq!(by("child")["parent_id"], by("parent")["context"]["span_id"]);
}

#[test]
fn setup_failure_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = emit(
        dir.path(),
        &[("NEMO_LENS_EXPORTER", "carrier-pigeon")],
        &["a,1,2"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("NEMO_LENS_EXPORTER") && stderr.contains("carrier-pigeon"),
        "{stderr}"
    );
}

#[test]
fn export_failure_exits_2() {
    // An OTLP/HTTP endpoint on a loopback port nobody listens on: the export is refused.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let endpoint = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let out = emit(
        dir.path(),
        &[
            ("NEMO_LENS_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
        ],
        &["a,1795989600,1795989601"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("error: failed to export spans")),
        "{stderr}"
    );
}

#[test]
fn help_documents_the_exit_codes() {
    let out = bin().args(["emit-spans", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("NAME,START,END[,PARENT]"), "{text}");
    assert!(
        text.contains("nothing emitted: invalid span input"),
        "{text}"
    );
    assert!(text.contains("Exit codes:"), "{text}");
}

#[test]
fn emits_over_otlp_to_a_real_collector() {
    let collector = collector::Collector::start();
    let mut cmd = bin();
    clear_telemetry_env(&mut cmd);
    let out = cmd
        .env("NEMO_LENS_EXPORTER", "otlp")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            collector.endpoint("http/protobuf"),
        )
        .args(["emit-spans", "--service", "launcher-otlp"])
        .args(["--span", "stage_in,1795989601,1795989650,job"])
        .args(["--span", "job,1795989600,1795989900"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = collector.wait_for("2 spans", std::time::Duration::from_secs(30), |o| {
        collector::items(o, "Span #").len() >= 2
    });
    let spans = collector::items(&text, "Span #");
    let job = spans
        .iter()
        .find(|s| s.field("Name").as_deref() == Some("job"))
        .expect("job span");
    let stage = spans
        .iter()
        .find(|s| s.field("Name").as_deref() == Some("stage_in"))
        .expect("stage_in span");
    assert_eq!(stage.field("Parent ID"), job.field("ID"));
    assert_eq!(stage.field("Trace ID"), job.field("Trace ID"));
    assert_eq!(
        job.resource_attr("service.name").as_deref(),
        Some("Str(launcher-otlp)")
    );
    assert_eq!(
        job.field("Start time").as_deref(),
        Some("1795989600000000000")
    );
    assert_eq!(
        stage.field("End time").as_deref(),
        Some("1795989650000000000")
    );
}

/// The resource attributes of the one span emitted into `dir/spans-{rank}.jsonl`.
fn resource_of(dir: &Path, rank: u32, out: &Output) -> serde_json::Map<String, Value> {
    let spans = lines_of(dir, rank);
    assert_eq!(spans.len(), 1, "{}", String::from_utf8_lossy(&out.stderr));
    resource_of_all(dir, rank, out)
}

/// The resource attributes of the spans emitted into `dir/spans-{rank}.jsonl`.
fn resource_of_all(dir: &Path, rank: u32, out: &Output) -> serde_json::Map<String, Value> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let spans = lines_of(dir, rank);
    assert!(!spans.is_empty(), "{stderr}");
    spans[0]["resource"]["attributes"]
        .as_object()
        .unwrap()
        .clone()
}

#[test]
fn an_identity_it_does_not_know_is_never_stamped() {
    let dir = tempfile::tempdir().unwrap();
    let out = emit(dir.path(), &[], &["a,1795989600,1795989601"]);
    let resource = resource_of(dir.path(), 0, &out);
    for key in [
        "dl.rank",
        "nv.dl.rank",
        "dl.world_size",
        "nv.dl.world_size",
        "service.instance.id",
        "nemo.run.id",
        "nv.dl.run.uuid",
    ] {
        assert!(!resource.contains_key(key), "{key} stamped: {resource:?}");
    }
    assert_eq!(resource["service.name"], "launcher");

    // What the job's environment says about itself is inherited, never replaced.
    let dir = tempfile::tempdir().unwrap();
    let out = emit(
        dir.path(),
        &[(
            "OTEL_RESOURCE_ATTRIBUTES",
            "dl.rank=7,service.instance.id=node-a,site=lab",
        )],
        &["a,1795989600,1795989601"],
    );
    let resource = resource_of(dir.path(), 0, &out);
    assert_eq!(resource["dl.rank"], "7");
    assert_eq!(resource["service.instance.id"], "node-a");
    assert!(!resource.contains_key("nemo.run.id"), "{resource:?}");

    // A launcher's `nv.dl.rank` is the rank (as the library reads it): both names, the console
    // file of rank 7.
    let dir = tempfile::tempdir().unwrap();
    let out = emit(
        dir.path(),
        &[(
            "OTEL_RESOURCE_ATTRIBUTES",
            "nv.dl.rank=7,nv.dl.world_size=8",
        )],
        &["a,1795989600,1795989601"],
    );
    let resource = resource_of(dir.path(), 7, &out);
    assert_eq!(resource["nv.dl.rank"], 7);
    assert_eq!(resource["dl.rank"], 7);
    assert_eq!(resource["nv.dl.world_size"], 8);
}

#[test]
fn identity_comes_from_the_launcher_environment_like_a_trainer_s() {
    // srun: SLURM_PROCID / SLURM_NTASKS, run id from SLURM_JOB_ID as the library derives it.
    let dir = tempfile::tempdir().unwrap();
    let out = emit(
        dir.path(),
        &[
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_JOB_ID", "4242"),
        ],
        &["a,1795989600,1795989601"],
    );
    let resource = resource_of(dir.path(), 3, &out);
    assert_eq!(resource["dl.rank"], 3);
    assert_eq!(resource["dl.world_size"], 8);
    assert_eq!(resource["nemo.run.id"], "4242");
    assert_eq!(resource["service.instance.id"], "4242-rank3");
    assert_eq!(resource["slurm.job.id"], "4242");

    // torchrun: RANK / WORLD_SIZE win over SLURM's; NEMO_LENS_RUN_ID over SLURM_JOB_ID.
    let dir = tempfile::tempdir().unwrap();
    let out = emit(
        dir.path(),
        &[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("SLURM_PROCID", "5"),
            ("SLURM_JOB_ID", "4242"),
            ("NEMO_LENS_RUN_ID", "exp-9"),
        ],
        &["a,1795989600,1795989601"],
    );
    let resource = resource_of(dir.path(), 1, &out);
    assert_eq!(resource["dl.rank"], 1);
    assert_eq!(resource["dl.world_size"], 2);
    assert_eq!(resource["service.instance.id"], "exp-9-rank1");
    assert_eq!(resource["nv.dl.rank"], 1);
}

#[test]
fn flags_override_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let out = emit_with(
        dir.path(),
        &[("RANK", "1"), ("WORLD_SIZE", "2"), ("SLURM_JOB_ID", "4242")],
        &["--rank", "6", "--world-size", "16", "--run-id", "launch-1"],
        &["a,1795989600,1795989601"],
    );
    let resource = resource_of(dir.path(), 6, &out);
    assert_eq!(resource["dl.rank"], 6);
    assert_eq!(resource["dl.world_size"], 16);
    assert_eq!(resource["nemo.run.id"], "launch-1");
    assert_eq!(resource["service.instance.id"], "launch-1-rank6");

    // A rank alone: no world size is made up, the instance id still derives from the rank.
    let dir = tempfile::tempdir().unwrap();
    let out = emit_with(
        dir.path(),
        &[("NEMO_LENS_RUN_ID", "exp")],
        &["--rank", "2"],
        &["a,1795989600,1795989601"],
    );
    let resource = resource_of(dir.path(), 2, &out);
    assert_eq!(resource["dl.rank"], 2);
    assert!(!resource.contains_key("dl.world_size"), "{resource:?}");
    assert_eq!(resource["service.instance.id"], "exp-rank2");
}

#[test]
fn a_bad_identity_exits_2_naming_the_variable_and_emits_nothing() {
    /// (environment, flags, expected in stderr)
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str], &'a str);
    let cases: &[Case] = &[
        (&[("SLURM_PROCID", "three")], &[], "SLURM_PROCID=\"three\""),
        (&[("RANK", "-1")], &[], "RANK=\"-1\""),
        (
            &[("RANK", "4"), ("WORLD_SIZE", "4")],
            &[],
            "rank 4 (RANK) must be below the world size 4 (WORLD_SIZE)",
        ),
        (&[], &["--rank", "2", "--world-size", "2"], "must be below"),
        (&[], &["--run-id", " "], "--run-id must not be empty"),
    ];
    for (env, flags, why) in cases {
        let dir = tempfile::tempdir().unwrap();
        let out = emit_with(dir.path(), env, flags, &["a,1795989600,1795989601"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{env:?} {flags:?}: {stderr}");
        assert!(stderr.contains(why), "{env:?} {flags:?}: {stderr}");
        assert!(
            std::fs::read_dir(dir.path()).unwrap().next().is_none(),
            "{env:?} {flags:?} wrote a file"
        );
    }
}

#[test]
fn times_otlp_cannot_carry_are_refused_naming_the_span() {
    for (span, why) in [
        // Epoch milliseconds given as seconds: 2554-07-21 at the latest.
        (
            "ms,1795989600000,1795989601000",
            "error: span 'ms': START 1795989600000 is after 2554-07-21T23:34:33Z",
        ),
        (
            "old,-5,1",
            "error: span 'old': START -5 is before 1970-01-01T00:00:00Z",
        ),
        (
            "late,1,18446744073.709551616",
            "error: span 'late': END 18446744073.709551616 is after 2554-07-21T23:34:33Z",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = emit(dir.path(), &[], &["fine,1795989600,1795989601", span]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{span}: {stderr}");
        assert!(
            stderr.lines().any(|l| l.starts_with(why)),
            "{span}: expected {why:?} in {stderr}"
        );
        assert!(lines(dir.path()).is_empty(), "{span} emitted something");
    }
    // The last nanosecond OTLP carries is accepted.
    let dir = tempfile::tempdir().unwrap();
    let out = emit(dir.path(), &[], &["edge,0,18446744073.709551615"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spans = lines(dir.path());
    assert_eq!(spans[0]["end_time"], "2554-07-21T23:34:33.709552Z");
}
