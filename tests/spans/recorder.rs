//! The flight recorder in one process: what it records on a non-exporting rank, the dump's
//! layout, bounded memory, per-callsite interest, truncation dumps and configuration errors.
//! (Signals, the watchdog and the control file run in real processes: `cli/tests/hang.rs`.)

use std::path::Path;
use std::time::Duration;

use nemo_lens::{LensConfig, LensError, Place, Telemetry};
use serde_json::Value;
use tracing::Dispatch;
use tracing::field::Empty;
use tracing_core::Metadata;
use tracing_subscriber::prelude::*;

use nemo_lens_test_support::child;
use nemo_lens_test_support::wait::wait_until;

/// The console exporter's keys, in its order.
const CONSOLE_KEYS: [&str; 11] = [
    "name",
    "context",
    "kind",
    "parent_id",
    "start_time",
    "end_time",
    "status",
    "attributes",
    "events",
    "links",
    "resource",
];

fn config(capacity: usize, dir: &Path) -> LensConfig {
    let mut c = LensConfig::default()
        .with_enabled(true)
        .with(|c| c.metrics_enabled = false);
    c.flight_recorder.capacity = capacity;
    c.flight_recorder.dump_dir = Some(dir.to_path_buf());
    c.flight_recorder.hang_timeout = None;
    c
}

/// Rank 0 of 4: not the exporting rank under `single_rank`.
fn non_exporting(capacity: usize, dir: &Path) -> Telemetry {
    Telemetry::builder(config(capacity, dir))
        .place(Place::rank(0).of(4))
        .allow_reinit_for_testing(true)
        .build()
        .unwrap()
}

fn dispatch(t: &Telemetry) -> Dispatch {
    Dispatch::new(
        tracing_subscriber::registry()
            .with(t.layer())
            .with(t.recorder_layer()),
    )
}

fn read(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn step_span(step: i64) -> tracing::Span {
    tracing::info_span!(
        "train_step",
        nemo.group.step = Empty,
        step,
        token = "s3cret",
        note = Empty
    )
}

#[test]
fn a_non_exporting_rank_records_its_groups_and_dumps_them_in_the_console_layout() {
    let dir = tempfile::tempdir().unwrap();
    let t = non_exporting(16, dir.path());
    assert!(
        !t.is_exporting() && t.resource().is_none(),
        "no provider built"
    );
    let recorder = t.flight_recorder().expect("recorder on").clone();
    let path = tracing::dispatcher::with_default(&dispatch(&t), || {
        let job = tracing::info_span!("train", nemo.group.job = Empty);
        let _job = job.enter();
        for step in 1..=3 {
            let s = step_span(step);
            let _s = s.enter();
            tracing::info_span!("forward_backward", nemo.group.forward_backward = Empty)
                .in_scope(|| {});
            tracing::info_span!("load_batch").in_scope(|| {});
        }
        let s = step_span(4);
        s.record("note", "a value longer than twenty-four bytes");
        let _s = s.enter();
        let ar = tracing::info_span!("all_reduce", nemo.group.collective = Empty, step = 4_i64);
        let _ar = ar.enter();
        assert_eq!(recorder.open_spans(), 3);
        recorder.dump().unwrap()
    });
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("nemo-lens-dump-rank0-") && name.ends_with("-manual.jsonl"),
        "{name}"
    );
    let lines = read(&path);
    let names: Vec<&str> = lines.iter().map(|l| l["name"].as_str().unwrap()).collect();
    // Closed spans first (oldest first), then the open ones by start time.
    assert_eq!(
        names,
        [
            "train_step",
            "train_step",
            "train_step",
            "train",
            "train_step",
            "all_reduce"
        ]
    );
    for l in &lines {
        let keys: Vec<&str> = l.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, CONSOLE_KEYS);
        assert_eq!(l["kind"], "SpanKind.INTERNAL");
        assert_eq!(l["resource"]["attributes"]["dl.rank"], 0);
        assert_eq!(l["resource"]["attributes"]["dl.world_size"], 4);
        let id = l["context"]["span_id"].as_str().unwrap();
        assert!(id.starts_with("0x") && id.len() == 18, "{id}");
    }
    let (closed, open) = lines.split_at(3);
    let job = &open[0];
    for (i, s) in closed.iter().enumerate() {
        assert_eq!(s["attributes"]["step"], i as i64 + 1);
        assert_eq!(s["attributes"]["token"], "[REDACTED]");
        assert_eq!(s["attributes"]["nemo.group"], "step");
        assert!(s["attributes"].get("nemo.span.open").is_none());
        assert_eq!(s["parent_id"], job["context"]["span_id"]);
    }
    assert!(job["parent_id"].is_null());
    for o in open {
        assert_eq!(o["attributes"]["nemo.span.open"], true);
        assert!(o["attributes"]["nemo.span.open_age_s"].as_f64().unwrap() >= 0.0);
    }
    assert_eq!(open[1]["parent_id"], job["context"]["span_id"]);
    assert_eq!(open[2]["parent_id"], open[1]["context"]["span_id"]);
    assert_eq!(open[2]["attributes"]["nemo.group"], "collective");
    // A string recorded later lands in the open span, cut to 24 bytes.
    assert_eq!(open[1]["attributes"]["note"], "a value longer than twen");
    assert_eq!(recorder.dropped(), 0);
}

#[test]
fn the_ring_keeps_the_last_n_closed_spans_whatever_the_rate() {
    let dir = tempfile::tempdir().unwrap();
    let t = non_exporting(8, dir.path());
    let recorder = t.flight_recorder().unwrap().clone();
    let path = tracing::dispatcher::with_default(&dispatch(&t), || {
        for step in 0..1000 {
            step_span(step).in_scope(|| {});
        }
        recorder.dump().unwrap()
    });
    let steps: Vec<i64> = read(&path)
        .iter()
        .map(|l| l["attributes"]["step"].as_i64().unwrap())
        .collect();
    assert_eq!(steps, (992..1000).collect::<Vec<_>>());
    assert_eq!(recorder.open_spans(), 0);
}

#[test]
fn threads_record_concurrently_and_every_dumped_line_is_whole() {
    let dir = tempfile::tempdir().unwrap();
    let t = non_exporting(64, dir.path());
    let recorder = t.flight_recorder().unwrap().clone();
    let d = dispatch(&t);
    std::thread::scope(|scope| {
        for thread in 0..4_i64 {
            let d = d.clone();
            scope.spawn(move || {
                tracing::dispatcher::with_default(&d, || {
                    for i in 0..5_000 {
                        step_span(thread * 100_000 + i).in_scope(|| {});
                    }
                })
            });
        }
        // Dumps taken while the threads record: every line parses and is a whole record.
        for _ in 0..5 {
            for l in read(&recorder.dump().unwrap()) {
                assert_eq!(l["name"], "train_step");
                assert_eq!(l["attributes"]["token"], "[REDACTED]");
                assert!(l["attributes"]["step"].is_i64());
            }
        }
    });
    let lines = read(&recorder.dump().unwrap());
    // 20 000 records through 64 slots: every slot holds one whole record (a slot another
    // thread was writing dropped the record and counted it instead of waiting).
    assert_eq!(lines.len(), 64);
    assert!(recorder.dropped() < 20_000);
}

/// The static metadata of the span `make` creates (taken under a subscriber that records it).
fn metadata_of(make: fn() -> tracing::Span) -> &'static Metadata<'static> {
    let dir = tempfile::tempdir().unwrap();
    let t = Telemetry::builder(LensConfig::default().with_enabled(true).with(|c| {
        c.export.strategy = "all_ranks".into();
        c.groups.span_groups = "all".into();
        c.metrics_enabled = false;
    }))
    .span_exporter(opentelemetry_sdk::trace::InMemorySpanExporter::default())
    .allow_reinit_for_testing(true)
    .build()
    .unwrap();
    let _ = dir;
    let span = tracing::dispatcher::with_default(&dispatch(&t), make);
    span.metadata().expect("recorded span has metadata")
}

fn plain_span() -> tracing::Span {
    tracing::info_span!("load_batch", batch = 3_i64)
}

fn fb_span() -> tracing::Span {
    tracing::info_span!("forward_backward", nemo.group.forward_backward = Empty)
}

fn a_step_span() -> tracing::Span {
    step_span(1)
}

#[test]
fn only_the_recorders_callsites_pay_on_a_non_exporting_rank() {
    let dir = tempfile::tempdir().unwrap();
    let t = non_exporting(16, dir.path());
    let d = dispatch(&t);
    assert!(!d.register_callsite(metadata_of(a_step_span)).is_never());
    assert!(d.register_callsite(metadata_of(plain_span)).is_never());
    assert!(d.register_callsite(metadata_of(fb_span)).is_never());
}

#[test]
fn an_exported_callsite_stays_always_with_the_recorder_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(16, dir.path());
    c.export.strategy = "all_ranks".into();
    c.groups.span_groups = "default".into();
    let t = Telemetry::builder(c)
        .span_exporter(opentelemetry_sdk::trace::InMemorySpanExporter::default())
        .allow_reinit_for_testing(true)
        .build()
        .unwrap();
    assert!(t.is_exporting());
    let d = dispatch(&t);
    // Exported by the lens layer: `always`, not `sometimes` (no per-span `enabled` calls).
    assert!(d.register_callsite(metadata_of(plain_span)).is_always());
    // Recorded and exported (`step` is not exported under `default`, but recorded).
    assert!(!d.register_callsite(metadata_of(a_step_span)).is_never());
    // Neither exported nor recorded.
    assert!(d.register_callsite(metadata_of(fb_span)).is_never());
}

#[test]
fn off_by_default_the_recorder_layer_is_inert() {
    let t = Telemetry::builder(LensConfig::default().with_enabled(true).with(|c| {
        c.export.strategy = "all_ranks".into();
        c.metrics_enabled = false;
    }))
    .span_exporter(opentelemetry_sdk::trace::InMemorySpanExporter::default())
    .allow_reinit_for_testing(true)
    .build()
    .unwrap();
    assert!(t.flight_recorder().is_none());
    assert!(
        t.recorder_layer::<tracing_subscriber::Registry>()
            .is_inert()
    );
    let d = dispatch(&t);
    assert!(d.register_callsite(metadata_of(plain_span)).is_always());
    assert!(d.register_callsite(metadata_of(fb_span)).is_never());
}

#[test]
fn shutdown_with_open_spans_dumps_them_and_without_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let t = non_exporting(16, dir.path());
    let d = dispatch(&t);
    tracing::dispatcher::with_default(&d, || step_span(1).in_scope(|| {}));
    let quiet = non_exporting(16, &dir.path().join("quiet"));
    quiet.shutdown(std::time::Duration::from_secs(1)).unwrap();
    assert!(!dir.path().join("quiet").exists(), "nothing open: no dump");
    tracing::dispatcher::with_default(&d, || {
        let s = step_span(2);
        let _s = s.enter();
        t.shutdown(std::time::Duration::from_secs(1)).unwrap();
    });
    let dumps: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with("-shutdown.jsonl"))
        .collect();
    assert_eq!(dumps.len(), 1, "{dumps:?}");
    let lines = read(&dumps[0]);
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["attributes"]["step"], 2);
    assert_eq!(lines[1]["attributes"]["nemo.span.open"], true);
}

fn from_env(pairs: &[(&str, &str)]) -> nemo_lens::Result<LensConfig> {
    LensConfig::from_lookup("NEMO_LENS", None, |k| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    })
}

#[test]
fn variables_are_read_and_bad_values_are_typed_errors_naming_them() {
    let c = from_env(&[
        ("NEMO_LENS_FLIGHT_RECORDER", " 2_048 "),
        ("NEMO_LENS_FLIGHT_RECORDER_GROUPS", "job,collective"),
        ("NEMO_LENS_DUMP_DIR", "/tmp/d"),
        ("NEMO_LENS_HANG_TIMEOUT", "0"),
        ("NEMO_LENS_CONTROL_FILE", "/tmp/ctl"),
    ])
    .unwrap();
    let r = &c.flight_recorder;
    assert_eq!(r.capacity, 2048);
    assert_eq!(r.groups, "job,collective");
    assert_eq!(r.dump_dir.as_deref(), Some(Path::new("/tmp/d")));
    assert_eq!(r.hang_timeout, None);
    assert_eq!(r.control_file.as_deref(), Some(Path::new("/tmp/ctl")));
    let d = from_env(&[]).unwrap().flight_recorder;
    assert_eq!(
        (d.capacity, d.groups.as_str()),
        (0, "job,step,checkpoint,collective")
    );
    assert_eq!(d.hang_timeout, Some(std::time::Duration::from_secs(600)));

    for (var, value, expected) in [
        ("NEMO_LENS_FLIGHT_RECORDER", "-1", "0 (off) to 100000"),
        ("NEMO_LENS_FLIGHT_RECORDER", "100001", "0 (off) to 100000"),
        ("NEMO_LENS_HANG_TIMEOUT", "soon", "number of seconds"),
        ("NEMO_LENS_HANG_TIMEOUT", "-5", "number of seconds"),
        ("NEMO_LENS_HANG_TIMEOUT", "inf", "number of seconds"),
    ] {
        let err = from_env(&[(var, value)]).unwrap_err();
        assert!(
            matches!(&err, LensError::InvalidValue { var: v, .. } if v == var),
            "{err}"
        );
        assert!(err.to_string().contains(expected), "{err}");
    }
    // An unknown group fails setup on every enabled rank, exporting or not.
    let mut c = from_env(&[
        ("NEMO_LENS_ENABLED", "1"),
        ("NEMO_LENS_FLIGHT_RECORDER", "8"),
        ("NEMO_LENS_FLIGHT_RECORDER_GROUPS", "step,warp"),
    ])
    .unwrap();
    c.metrics_enabled = false;
    let err = Telemetry::builder(c)
        .place(Place::rank(0).of(4))
        .allow_reinit_for_testing(true)
        .build()
        .unwrap_err();
    assert!(
        matches!(&err, LensError::UnknownSpanGroup { var, name, .. }
            if var == "NEMO_LENS_FLIGHT_RECORDER_GROUPS" && name == "warp"),
        "{err}"
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, failure_persistence: None, ..Default::default() })]

    /// Any value of a recorder variable: its default when blank, a value, or an `InvalidValue`
    /// naming the variable. Never a panic.
    #[test]
    fn recorder_variables_yield_a_default_a_value_or_a_named_error(
        var in proptest::sample::select(vec![
            "NEMO_LENS_FLIGHT_RECORDER",
            "NEMO_LENS_FLIGHT_RECORDER_GROUPS",
            "NEMO_LENS_DUMP_DIR",
            "NEMO_LENS_HANG_TIMEOUT",
            "NEMO_LENS_CONTROL_FILE",
        ]),
        value in proptest::prop_oneof![
            proptest::prelude::any::<String>(),
            "[ \\t]{0,2}[-+_.0-9eEinfa]{0,24}[ \\t]{0,2}",
        ],
    ) {
        match from_env(&[(var, value.as_str())]) {
            Ok(c) => {
                if value.trim().is_empty() {
                    proptest::prop_assert_eq!(&c.flight_recorder, &Default::default());
                }
                proptest::prop_assert!(c.flight_recorder.capacity <= 100_000);
            }
            Err(e) => {
                proptest::prop_assert!(
                    matches!(&e, LensError::InvalidValue { var: v, .. } if v == var),
                    "{:?}", e
                );
            }
        }
    }
}

fn proc_threads() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .map(|t| {
            std::fs::read_to_string(t.unwrap().path().join("comm"))
                .unwrap()
                .trim()
                .to_string()
        })
        .collect()
}

fn proc_descriptors() -> Vec<String> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
        .map(|p| p.display().to_string())
        .collect()
}

/// The recorder's own thread and pipe are all a non-exporting rank gains: no provider, no
/// exporter thread, no network socket. Runs in a fresh child process (counts are per process).
#[test]
fn a_non_exporting_rank_with_the_recorder_gains_one_thread_and_a_socket_pair_only() {
    // No `nvidia-smi` probe (its reader thread is not the recorder's).
    child::run_in_child(
        [("CUDA_VISIBLE_DEVICES", "")],
        gains_one_thread_and_a_socket_pair,
    );
}

fn gains_one_thread_and_a_socket_pair() {
    let dir = tempfile::tempdir().unwrap();
    let (threads, fds) = (proc_threads(), proc_descriptors());
    let t = non_exporting(16, dir.path());
    let fds_after = proc_descriptors();
    assert!(t.resource().is_none() && t.meter_provider().is_none());
    // The new thread names itself once it runs: poll (bounded) for the name.
    let new_threads = |now: Vec<String>| {
        let mut new = now;
        for t in &threads {
            if let Some(i) = new.iter().position(|n| n == t) {
                new.remove(i);
            }
        }
        new
    };
    // One thread (comm is cut to 15 bytes).
    wait_until(
        Duration::from_secs(30),
        "one new thread named nemo-lens-recor",
        || new_threads(proc_threads()) == ["nemo-lens-recor"],
    );
    let new_fds: Vec<&String> = fds_after.iter().filter(|f| !fds.contains(f)).collect();
    assert_eq!(new_fds.len(), 2, "{new_fds:?}");
    assert!(
        new_fds.iter().all(|f| f.starts_with("socket:")),
        "{new_fds:?}"
    );
    let unix = std::fs::read_to_string("/proc/self/net/unix").unwrap();
    for f in new_fds {
        let inode = f.trim_start_matches("socket:[").trim_end_matches(']');
        assert!(
            unix.lines()
                .any(|l| l.split_whitespace().nth(6) == Some(inode)),
            "socket {inode} is a Unix socket (the signal pipe), not a network one"
        );
    }
}
