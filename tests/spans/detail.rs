//! Per-step detail capture (`NEMO_LENS_DETAIL_GROUPS`): the detail spans of a step are held on
//! the rank and exported only when the step deserved them (slow against the rank's own recent
//! steps, an error, a request through the control file, the first step as a baseline, or
//! truncation). Real trainer processes (the `trainer` example), console JSONL files and the
//! rotel collector; a hung rank's held detail goes into its flight-recorder dump. The fixture
//! program `detail_paths` drops its subscriber mid-step, and parents detail spans to their step
//! through OpenTelemetry contexts on other threads.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use nemo_lens_test_support::child::{Child, Running};
use nemo_lens_test_support::collector::{self, Collector};
use nemo_lens_test_support::console::{self, all_named, truncated, truncation_reason};
use nemo_lens_test_support::wait::try_wait_for;

/// Detail groups of every test: the trainer's forward/backward and optimizer spans.
const DETAIL: &str = "forward_backward,optimizer";

/// An exporting trainer rank writing console JSONL to `dir/rank{rank}.jsonl`, with detail
/// capture of [`DETAIL`] and the default span groups (so the detail spans are recorded only
/// because detail capture asks for them).
fn trainer(dir: &Path) -> Child {
    Child::example("trainer")
        .env("NEMO_LENS_ENABLED", "1")
        .env("NEMO_LENS_EXPORTER", "console")
        .env("NEMO_LENS_EXPORT_STRATEGY", "all_ranks")
        .env("NEMO_LENS_METRICS_ENABLED", "0")
        .env("NEMO_LENS_SPAN_GROUPS", "default")
        .env("NEMO_LENS_DETAIL_GROUPS", DETAIL)
        .env("NEMO_LENS_CONSOLE_PATH", dir.join("rank{rank}.jsonl"))
        .env("RUST_LOG", "trainer=debug")
        .args(["--checkpoint-every", "0"])
}

/// The step spans by their `step` attribute.
fn steps_by_number(spans: &[Value]) -> BTreeMap<i64, &Value> {
    all_named(spans, "train_step")
        .into_iter()
        .map(|s| (s["attributes"]["step"].as_i64().expect("a step number"), s))
        .collect()
}

/// The step numbers of the steps whose detail was kept, and why.
fn kept(steps: &BTreeMap<i64, &Value>) -> BTreeMap<i64, String> {
    steps
        .iter()
        .filter(|(_, s)| s["attributes"]["nemo.detail.kept"] == true)
        .map(|(n, s)| {
            let reason = s["attributes"]["nemo.detail.reason"]
                .as_str()
                .unwrap_or_else(|| panic!("a kept step says why: {s}"));
            (*n, reason.to_string())
        })
        .collect()
}

/// The step numbers of the exported spans named `name`, through their parent step.
fn detail_steps(spans: &[Value], steps: &BTreeMap<i64, &Value>, name: &str) -> Vec<i64> {
    let mut found: Vec<i64> = all_named(spans, name)
        .iter()
        .map(|d| {
            *steps
                .iter()
                .find(|(_, s)| s["context"]["span_id"] == d["parent_id"])
                .unwrap_or_else(|| panic!("{name} without its step: {d}"))
                .0
        })
        .collect();
    found.sort();
    found
}

use nemo_lens_test_support::trainer::finished_steps;

/// The story of the feature: 24 steps, two of them slow. Every step span arrives with what was
/// decided; the detail of the two slow steps arrives, and of the first step (the baseline), and
/// of no other step.
#[test]
fn a_24_step_run_with_two_slow_steps_exports_the_detail_of_those_steps_only() {
    let dir = tempfile::tempdir().unwrap();
    let out = trainer(dir.path())
        // 3x the median is the bound; the slow steps take 4x: a loaded machine's sleeps would
        // have to overshoot by a whole step to blur them.
        .env("NEMO_LENS_DETAIL_SLOW_FACTOR", "3")
        .args(["--steps", "24", "--step-ms", "60", "--slow-steps", "9,17"])
        .run();
    assert!(out.status.success(), "{out:?}");
    let spans = console::read(&dir.path().join("rank0.jsonl"));
    let steps = steps_by_number(&spans);
    assert_eq!(steps.len(), 24, "every step span is exported");
    for (n, s) in &steps {
        assert_eq!(
            s["attributes"]["nemo.detail.held"], 2,
            "step {n} held its forward_backward and optimizer spans: {s}"
        );
        assert!(s["attributes"]["nemo.detail.kept"].is_boolean(), "{s}");
        assert!(s["attributes"].get("nemo.detail.overflow").is_none(), "{s}");
    }
    assert_eq!(
        kept(&steps),
        BTreeMap::from([
            (1, "first".to_string()),
            (9, "slow".to_string()),
            (17, "slow".to_string()),
        ])
    );
    for name in ["forward_backward", "optimizer_step"] {
        assert_eq!(detail_steps(&spans, &steps, name), [1, 9, 17], "{name}");
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("dropped"), "nothing is dropped: {stderr}");
}

/// The same decision over OTLP, with a trace per step: the step spans reach the collector with
/// the attributes, and only the kept steps' detail spans do, in their step's trace.
#[test]
fn over_otlp_with_a_trace_per_step_only_kept_detail_reaches_the_collector() {
    let collector = Collector::start();
    let dir = tempfile::tempdir().unwrap();
    let out = trainer(dir.path())
        .env("NEMO_LENS_EXPORTER", "otlp")
        .env("NEMO_LENS_TRACE_PER", "step")
        .env("NEMO_LENS_DETAIL_SLOW_FACTOR", "3")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .envs(collector.otlp_env("grpc"))
        .args(["--steps", "8", "--step-ms", "60", "--slow-steps", "6"])
        .run();
    assert!(out.status.success(), "{out:?}");
    let output = collector.wait_for("8 train_step spans", Duration::from_secs(30), |text| {
        collector::count_named(&collector::spans(text), "train_step") == 8
    });
    let spans = collector::spans(&output);
    let named = |name: &str| -> Vec<&collector::Item> {
        spans
            .iter()
            .filter(|s| s.field("Name").as_deref() == Some(name))
            .collect()
    };
    let steps = named("train_step");
    let mut kept_steps = Vec::new();
    for s in &steps {
        assert_eq!(s.attr("nemo.detail.held").as_deref(), Some("Int(2)"));
        if s.attr("nemo.detail.kept").as_deref() == Some("Bool(true)") {
            kept_steps.push((
                s.attr("step").unwrap(),
                s.attr("nemo.detail.reason").unwrap(),
            ));
        } else {
            assert_eq!(s.attr("nemo.detail.kept").as_deref(), Some("Bool(false)"));
        }
    }
    kept_steps.sort();
    assert_eq!(
        kept_steps,
        [
            ("Int(1)".to_string(), "Str(first)".to_string()),
            ("Int(6)".to_string(), "Str(slow)".to_string()),
        ]
    );
    let fb = named("forward_backward");
    assert_eq!(fb.len(), 2, "the detail of steps 1 and 6 only");
    for d in fb {
        let step = steps
            .iter()
            .find(|s| s.field("ID") == d.field("Parent ID"))
            .expect("a detail span's parent is a step");
        assert_eq!(step.field("Trace ID"), d.field("Trace ID"));
        assert_eq!(step.attr("nemo.detail.kept").as_deref(), Some("Bool(true)"));
    }
}

/// Held detail is bounded in bytes per rank: with room for no record at all, every step holds
/// none, says how many did not fit, and the rank counts them as dropped spans.
#[test]
fn detail_past_the_byte_bound_is_counted_as_overflow_and_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let out = trainer(dir.path())
        .env("NEMO_LENS_DETAIL_MAX_BYTES", "1")
        .args(["--steps", "4", "--step-ms", "3"])
        .run();
    assert!(out.status.success(), "{out:?}");
    let spans = console::read(&dir.path().join("rank0.jsonl"));
    let steps = steps_by_number(&spans);
    assert_eq!(steps.len(), 4);
    for s in steps.values() {
        assert_eq!(s["attributes"]["nemo.detail.held"], 0, "{s}");
        assert_eq!(s["attributes"]["nemo.detail.overflow"], 2, "{s}");
    }
    assert_eq!(steps[&1]["attributes"]["nemo.detail.reason"], "first");
    assert!(all_named(&spans, "forward_backward").is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("dropped 8 spans"),
        "the 8 spans are reported dropped: {stderr}"
    );
}

/// A bad value of a detail variable is a typed error naming the variable: the trainer exits 2.
#[test]
fn a_bad_detail_variable_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    for (var, value) in [
        ("NEMO_LENS_DETAIL_SLOW_FACTOR", "0.5"),
        ("NEMO_LENS_DETAIL_WINDOW", "0"),
        ("NEMO_LENS_DETAIL_MAX_BYTES", "lots"),
    ] {
        let out = trainer(dir.path()).env(var, value).run();
        assert_eq!(out.status.code(), Some(2), "{var}={value}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(var) && stderr.contains(value), "{stderr}");
    }
}

/// A step that ends in `ERROR` (its panic caught by the trainer) keeps its detail.
#[test]
fn a_step_that_ends_in_error_keeps_its_detail() {
    let dir = tempfile::tempdir().unwrap();
    let out = trainer(dir.path())
        .args(["--steps", "6", "--step-ms", "3", "--panic-at", "4"])
        .arg("--catch-panics")
        .run();
    assert!(out.status.success(), "{out:?}");
    let spans = console::read(&dir.path().join("rank0.jsonl"));
    let steps = steps_by_number(&spans);
    assert_eq!(steps[&4]["status"]["status_code"], "ERROR");
    let kept = kept(&steps);
    assert_eq!(kept.get(&4).map(String::as_str), Some("error"), "{kept:?}");
    assert_eq!(kept.get(&1).map(String::as_str), Some("first"));
    assert!(detail_steps(&spans, &steps, "forward_backward").contains(&4));
}

/// `detail 3` in the control file and `SIGUSR2` keep the detail of the next three steps.
#[test]
fn a_request_through_the_control_file_keeps_the_next_steps() {
    let dir = tempfile::tempdir().unwrap();
    let control = dir.path().join("control");
    std::fs::write(&control, "").unwrap();
    let mut child = trainer(dir.path())
        .env("NEMO_LENS_CONTROL_FILE", &control)
        // Steps of equal length: only the first and the requested ones keep their detail.
        .env("NEMO_LENS_DETAIL_SLOW_FACTOR", "1000")
        .args(["--steps", "0", "--step-ms", "5"])
        .timeout(Duration::from_secs(120))
        .spawn();
    child.wait_for_output("3 finished steps", |_, stderr| finished_steps(stderr) >= 3);
    std::fs::write(&control, "detail 3\n").unwrap();
    child.signal(libc::SIGUSR2);
    child.wait_for_output("the request taken", |_, stderr| {
        stderr.contains("keeping the detail of the next 3 steps")
    });
    let asked_at = finished_steps(&child.stderr());
    child.wait_for_output("4 more finished steps", |_, stderr| {
        finished_steps(stderr) >= asked_at + 4
    });
    child.signal(libc::SIGTERM);
    let out = child.wait();
    let spans = console::read(&dir.path().join("rank0.jsonl"));
    let steps = steps_by_number(&spans);
    let requested: Vec<i64> = kept(&steps)
        .into_iter()
        .filter(|(_, reason)| reason == "requested")
        .map(|(n, _)| n)
        .collect();
    assert_eq!(requested.len(), 3, "{requested:?}; {out:?}");
    assert_eq!(requested[2] - requested[0], 2, "consecutive: {requested:?}");
    let kept_detail = detail_steps(&spans, &steps, "forward_backward");
    for n in &requested {
        assert!(kept_detail.contains(n), "{kept_detail:?}");
    }
}

/// Two ranks joined by the trainer's file barrier; rank 1 hangs in step 3, so rank 0 waits in
/// that step's `all_reduce` with the step's `forward_backward` ended and held. Returns the
/// running ranks once rank 0 waits.
fn hung_pair(dir: &Path, env: &[(&str, &str)]) -> (Running, Running) {
    let barrier = dir.join("barrier");
    let rank = |r: u32| {
        let mut c = trainer(dir)
            .envs(env.iter().copied())
            .args(["--steps", "10", "--step-ms", "3", "--world-size", "2"])
            .arg("--rank")
            .arg(r.to_string())
            .arg("--barrier-dir")
            .arg(&barrier)
            .timeout(Duration::from_secs(120));
        if r == 1 {
            c = c.args(["--hang-at", "3"]);
        }
        c.spawn()
    };
    let mut rank0 = rank(0);
    let rank1 = rank(1);
    rank0.wait_for_output("2 finished steps", |_, stderr| finished_steps(stderr) >= 2);
    // Rank 0 is in step 3's all_reduce once rank 1's arrival file for step 3 is missing and
    // its own is there.
    let arrived = barrier.join("step3-rank0");
    assert!(
        try_wait_for(Duration::from_secs(60), || arrived.exists().then_some(())).is_some(),
        "rank 0 never reached step 3's barrier"
    );
    (rank0, rank1)
}

/// SIGTERM on a rank whose step is open: the step arrives truncated, its held detail kept with
/// reason `truncated`.
#[test]
fn sigterm_exports_the_held_detail_of_the_open_step_as_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let (rank0, rank1) = hung_pair(dir.path(), &[]);
    rank0.signal(libc::SIGTERM);
    let out = rank0.wait();
    drop(rank1);
    let spans = console::read(&dir.path().join("rank0.jsonl"));
    let steps = steps_by_number(&spans);
    let open = steps[&3];
    assert!(truncated(open), "{open}");
    assert_eq!(
        open["attributes"]["nemo.detail.kept"], true,
        "{open}; {out:?}"
    );
    assert_eq!(open["attributes"]["nemo.detail.reason"], "truncated");
    assert_eq!(open["attributes"]["nemo.detail.held"], 1);
    let kept_detail = detail_steps(&spans, &steps, "forward_backward");
    assert!(kept_detail.contains(&3), "{kept_detail:?}");
}

/// A hang: the flight recorder's watchdog dump of the waiting rank holds the held detail of
/// its open step, with its own span ids, marked with the dump's reason.
#[test]
fn a_hung_step_releases_its_held_detail_into_the_flight_recorder_dump() {
    let dir = tempfile::tempdir().unwrap();
    let dumps = dir.path().join("dumps");
    let dumps_env = dumps.to_str().unwrap().to_string();
    let (rank0, rank1) = hung_pair(
        dir.path(),
        &[
            ("NEMO_LENS_FLIGHT_RECORDER", "256"),
            ("NEMO_LENS_HANG_TIMEOUT", "1"),
            ("NEMO_LENS_DUMP_DIR", &dumps_env),
        ],
    );
    let dump = try_wait_for(Duration::from_secs(60), || {
        std::fs::read_dir(&dumps)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                name.starts_with("nemo-lens-dump-rank0-") && name.ends_with("-watchdog.jsonl")
            })
    })
    .expect("rank 0's watchdog dump");
    drop(rank0);
    drop(rank1);
    let lines = console::read(&dump);
    let held: Vec<&Value> = lines
        .iter()
        .filter(|l| l["attributes"]["nemo.detail.reason"] == "watchdog")
        .collect();
    assert_eq!(held.len(), 1, "{lines:#?}");
    assert_eq!(held[0]["name"], "forward_backward");
    assert!(held[0]["parent_id"].is_string());
    // The recorder's own lines are there too: the open step and its all_reduce.
    assert!(
        lines
            .iter()
            .any(|l| l["name"] == "all_reduce" && l["attributes"]["nemo.span.open"] == true)
    );
}

/// The fixture program `detail_paths` in `mode`, with detail capture of `forward_backward`,
/// `optimizer` and `collective`: its stderr (it succeeded) and its spans.
fn detail_paths(dir: &Path, mode: &str, env: &[(&str, &str)]) -> (String, Vec<Value>) {
    let path = dir.join("spans.jsonl");
    let out = Child::fixture("detail_paths")
        .env("NEMO_LENS_ENABLED", "1")
        .env("NEMO_LENS_EXPORTER", "console")
        .env("NEMO_LENS_METRICS_ENABLED", "0")
        .env("NEMO_LENS_SPAN_GROUPS", "default")
        .env(
            "NEMO_LENS_DETAIL_GROUPS",
            "forward_backward,optimizer,collective",
        )
        .env("NEMO_LENS_CONSOLE_PATH", &path)
        .envs(env.iter().copied())
        .arg(mode)
        .run();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{out:?}");
    (stderr, console::read(&path))
}

/// A subscriber dropped while a step is open (no shutdown yet) ends the step as truncated and
/// keeps its held detail there and then, as a shutdown does: nothing stays held.
#[test]
fn a_subscriber_dropped_mid_step_exports_the_held_detail_as_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let (stderr, spans) = detail_paths(dir.path(), "--drop-subscriber", &[]);
    assert!(
        stderr.contains("held after the drop: 0 bytes, 0 open spans"),
        "{stderr}"
    );
    let steps = steps_by_number(&spans);
    let step = steps[&1];
    assert!(truncated(step), "{step}");
    assert_eq!(
        truncation_reason(step),
        Some("dropped by the subscriber without being closed")
    );
    assert_eq!(step["attributes"]["nemo.detail.kept"], true, "{step}");
    assert_eq!(step["attributes"]["nemo.detail.reason"], "truncated");
    assert_eq!(step["attributes"]["nemo.detail.held"], 2);
    for name in ["forward_backward", "optimizer_step"] {
        assert_eq!(detail_steps(&spans, &steps, name), [1], "{name}");
        assert!(!truncated(all_named(&spans, name)[0]), "{name} had ended");
    }
    assert!(!stderr.contains("nemo-lens: dropped"), "{stderr}");
}

/// Detail spans on worker threads whose parent is their step through an OpenTelemetry context
/// only (attached, `set_parent`, the step's activated context, its bare span context) are held
/// with the step: dropped with the fast step 2, exported under the baseline step 1 and the
/// slow step 3, in the step's trace.
#[test]
fn detail_parented_to_its_step_through_an_opentelemetry_context_is_held_with_it() {
    let dir = tempfile::tempdir().unwrap();
    // Step 3 (600 ms) is past 5x the median of steps 1 (50 ms) and 2 (a few threads' time);
    // step 2 is within 5x step 1.
    let env = [("NEMO_LENS_DETAIL_SLOW_FACTOR", "5")];
    let (stderr, spans) = detail_paths(dir.path(), "--otel-parent", &env);
    let steps = steps_by_number(&spans);
    assert_eq!(steps.len(), 3, "{stderr}");
    for (n, s) in &steps {
        assert_eq!(s["attributes"]["nemo.detail.held"], 4, "step {n}: {s}");
    }
    assert_eq!(
        kept(&steps),
        BTreeMap::from([(1, "first".to_string()), (3, "slow".to_string())])
    );
    for name in [
        "forward_backward",
        "optimizer_step",
        "grad_sync",
        "all_reduce",
    ] {
        assert_eq!(detail_steps(&spans, &steps, name), [1, 3], "{name}");
        for d in all_named(&spans, name) {
            let step = steps
                .values()
                .find(|s| s["context"]["span_id"] == d["parent_id"])
                .unwrap();
            assert_eq!(step["context"]["trace_id"], d["context"]["trace_id"], "{d}");
        }
    }
    assert_eq!(
        console::spans(spans.clone()).len(),
        3 + 2 * 4,
        "nothing else is exported: {spans:#?}"
    );
}
