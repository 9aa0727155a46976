//! `nemo-lens perfetto` on a generated five-rank job (see `support`): the real binary, the
//! real files, and the Chrome Trace Event JSON checked event by event.

use nemo_lens_test_support::child::Child;
use nemo_lens_test_support::cli as support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use support::{STEPS, T0_US, bin, fixture, span_id, write_job};

fn run_perfetto(files: &[std::path::PathBuf], out: &std::path::Path) -> (Value, String) {
    run_perfetto_with(&[], files, out)
}

/// `perfetto` with the options `args` before the files.
fn run_perfetto_with(
    args: &[&str],
    files: &[std::path::PathBuf],
    out: &std::path::Path,
) -> (Value, String) {
    let output = bin()
        .arg("perfetto")
        .args(args)
        .args(files)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "exit {:?}: {stderr}",
        output.status
    );
    let trace: Value = serde_json::from_slice(&fs::read(out).unwrap()).expect("valid JSON");
    (trace, stderr)
}

fn events(trace: &Value) -> &Vec<Value> {
    trace["traceEvents"].as_array().expect("traceEvents array")
}

#[test]
fn merges_ranks_into_valid_trace_event_json() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_job(dir.path());
    let out = dir.path().join("trace.json");
    let (trace, stderr) = run_perfetto(&files, &out);
    let events = events(&trace);

    // Required fields of the Trace Event format, per phase.
    for e in events {
        let ph = e["ph"].as_str().expect("ph");
        assert!(e["name"].is_string(), "{e}");
        assert!(e["pid"].is_i64() && e["tid"].is_i64(), "{e}");
        if ph != "M" {
            assert!(e["ts"].is_i64(), "ts missing: {e}");
        }
        match ph {
            "X" => assert!(e["dur"].as_i64().is_some_and(|d| d >= 0), "{e}"),
            "s" | "f" => assert!(e["id"].is_u64(), "{e}"),
            "i" => assert_eq!(e["s"], "t", "{e}"),
            "C" => assert!(e["args"].as_object().is_some_and(|a| !a.is_empty()), "{e}"),
            "M" => assert!(e["args"]["name"].is_string() || e["args"]["sort_index"].is_i64()),
            other => panic!("unexpected phase {other}: {e}"),
        }
    }

    // One process per rank, named with the host; rank 4 comes from the file name.
    let processes: BTreeMap<i64, &str> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "process_name")
        .map(|e| {
            (
                e["pid"].as_i64().unwrap(),
                e["args"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        processes,
        BTreeMap::from([
            (0, "rank 0 (node0)"),
            (1, "rank 1 (node1)"),
            (2, "rank 2 (node2)"),
            (3, "rank 3 (vm)"),
            (4, "rank 4 (node9)"),
        ])
    );

    // Spans: 2 per step on the four generated ranks, 3 from the Python fixture; the corrupt and
    // cut lines of rank 0 are skipped, not fatal.
    let spans: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(spans.len() as i64, 4 * 2 * STEPS + 3);
    let per_rank = |pid: i64| spans.iter().filter(|e| e["pid"] == pid).count() as i64;
    assert_eq!(
        [
            per_rank(0),
            per_rank(1),
            per_rank(2),
            per_rank(3),
            per_rank(4)
        ],
        [2 * STEPS, 2 * STEPS, 2 * STEPS, 3, 2 * STEPS]
    );
    let slow_step = spans
        .iter()
        .find(|e| e["pid"] == 2 && e["name"] == "train_step" && e["args"]["step"] == 3)
        .unwrap();
    assert_eq!(slow_step["ts"], T0_US + 3 * 200_000);
    assert_eq!(slow_step["dur"], 150_000);
    assert_eq!(
        slow_step["args"]["span_id"],
        format!("0x{:016x}", span_id(2, 3, 0))
    );
    assert_eq!(slow_step["args"]["status.code"], "UNSET");
    let failed = spans.iter().find(|e| e["name"] == "bad_step").unwrap();
    assert_eq!(failed["args"]["status.code"], "ERROR");
    assert_eq!(failed["args"]["status.description"], "nan loss");
    assert_eq!(failed["args"]["iteration"], 2);

    // Python's bare NaN is read as the string the Rust exporter writes; strings are untouched.
    let nan = spans
        .iter()
        .find(|e| e["pid"] == 1 && e["name"] == "forward" && e["ts"] == T0_US + 1000)
        .unwrap();
    assert_eq!(nan["args"]["dl.loss"], "NaN");
    assert_eq!(nan["args"]["note"], "NaN, Infinity");

    // The truncated span is marked.
    let truncated: Vec<&&Value> = spans
        .iter()
        .filter(|e| e["cat"].as_str().unwrap().contains("truncated"))
        .collect();
    assert_eq!(truncated.len(), 1);
    assert_eq!(truncated[0]["pid"], 1);
    assert_eq!(truncated[0]["args"]["nemo.span.truncated"], true);
    assert_eq!(truncated[0]["args"]["step"], STEPS - 1);

    // Tracks: rank 0's forward spans run on their thread.id track, named by thread.name.
    let thread_names: BTreeSet<(i64, i64, &str)> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| {
            (
                e["pid"].as_i64().unwrap(),
                e["tid"].as_i64().unwrap(),
                e["args"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(
        thread_names.contains(&(0, 4242, "dataloader")),
        "{thread_names:?}"
    );
    assert!(thread_names.contains(&(0, 0, "spans")));
    assert!(
        spans
            .iter()
            .filter(|e| e["pid"] == 0 && e["name"] == "forward")
            .all(|e| e["tid"] == 4242)
    );

    // Span events are instants on the span's track.
    let instants: Vec<&Value> = events.iter().filter(|e| e["ph"] == "i").collect();
    assert_eq!(instants.len() as i64, 4 * STEPS + 2);
    let exception = instants.iter().find(|e| e["name"] == "exception").unwrap();
    assert_eq!(exception["pid"], 3);
    assert_eq!(exception["args"]["exception.type"], "ValueError");

    // The link of rank 0's step 1 to step 0 is a flow between the two slices.
    let flow: Vec<&Value> = events
        .iter()
        .filter(|e| e["ph"] == "s" || e["ph"] == "f")
        .collect();
    assert_eq!(flow.len(), 2, "{flow:?}");
    let (start, finish) = (flow[0], flow[1]);
    assert_eq!(
        (start["ph"].as_str(), finish["ph"].as_str()),
        (Some("s"), Some("f"))
    );
    assert_eq!(start["id"], finish["id"]);
    assert_eq!(start["ts"], T0_US);
    assert_eq!(finish["ts"], T0_US + 200_000);
    assert_eq!(finish["bp"], "e");
    assert_eq!(finish["args"]["link.reason"], "previous step");

    // Metric points of the Python rank are counter tracks.
    let counters: Vec<&Value> = events.iter().filter(|e| e["ph"] == "C").collect();
    assert!(!counters.is_empty());
    assert!(counters.iter().all(|e| e["pid"] == 3));
    let duration = counters
        .iter()
        .find(|e| {
            e["name"]
                .as_str()
                .unwrap()
                .starts_with("gen_ai.server.request.duration")
        })
        .expect("histogram counter");
    assert_eq!(duration["args"]["sum"], 0.5);
    assert_eq!(duration["args"]["count"], 1.0);

    // Skipped lines are counted and reported.
    assert_eq!(trace["otherData"]["skipped_records"], 3);
    assert_eq!(trace["otherData"]["spans"], 4 * 2 * STEPS + 3);
    assert!(stderr.contains("skipped 3 malformed record(s)"), "{stderr}");
    assert!(stderr.contains("spans-rank0.jsonl:4:"), "{stderr}");
}

#[test]
fn cut_gzip_file_keeps_what_was_readable() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_job(dir.path());
    let gz = files
        .iter()
        .find(|p| p.extension().unwrap() == "gz")
        .unwrap();
    let bytes = fs::read(gz).unwrap();
    let cut = dir.path().join("cut-rank4.jsonl.gz");
    fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let out = dir.path().join("cut.json");

    let (trace, stderr) = run_perfetto(&[cut], &out);
    let spans = events(&trace).iter().filter(|e| e["ph"] == "X").count() as i64;
    assert!(spans > 0 && spans < 2 * STEPS, "{spans} spans");
    assert_eq!(trace["otherData"]["truncated_files"], 1);
    assert!(stderr.contains("1 file(s) ended early"), "{stderr}");
}

#[test]
fn missing_input_exits_2_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope-rank0.jsonl");
    let output = bin()
        .arg("perfetto")
        .arg(&missing)
        .arg("-o")
        .arg(dir.path().join("t.json"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot open") && stderr.contains("nope-rank0.jsonl"),
        "{stderr}"
    );
}

#[test]
fn help_documents_exit_codes_and_version_is_printed() {
    let help = bin().args(["perfetto", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("Exit codes:") && text.contains("--output"),
        "{text}"
    );
    let version = bin().arg("--version").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("nemo-lens {}", env!("CARGO_PKG_VERSION"))
    );
}

/// Runs perfetto on `files` into a fresh file; returns the trace.
fn trace_of(files: &[PathBuf]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    run_perfetto(files, &dir.path().join("trace.json")).0
}

#[test]
fn pretty_printed_python_records_read_exactly_like_compact_ones() {
    // The same five records, one per line and as json.dumps(indent=4) writes them.
    let compact = trace_of(&[fixture("python-lens-rank3.jsonl")]);
    let pretty = trace_of(&[fixture("python-lens-rank3-indent4.json")]);
    assert_eq!(compact["otherData"]["skipped_records"], 0);
    assert_eq!(pretty["otherData"]["skipped_records"], 0);
    assert_eq!(pretty["otherData"]["spans"], 3);
    assert_eq!(pretty["otherData"]["metric_batches"], 2);
    assert_eq!(events(&pretty), events(&compact));
}

#[test]
fn python_0_1_0_console_output_with_log_records_becomes_instants() {
    // Real stdout of Python Lens 0.1.0: pretty-printed spans, metric batches and log records.
    let trace = trace_of(&[fixture("python-lens-0.1.0-stdout-rank5.txt")]);
    let other = &trace["otherData"];
    assert_eq!(
        (
            &other["spans"],
            &other["metric_batches"],
            &other["log_records"]
        ),
        (&json!(2), &json!(2), &json!(2)),
        "{other}"
    );
    assert_eq!(other["skipped_records"], 0, "{other}");
    let events = events(&trace);
    let logs: Vec<&Value> = events.iter().filter(|e| e["cat"] == "log").collect();
    assert_eq!(logs.len(), 2);
    let step = events
        .iter()
        .find(|e| e["ph"] == "X" && e["name"] == "train_step")
        .unwrap();
    let info = logs.iter().find(|e| e["name"] == "step 1 done").unwrap();
    assert_eq!(
        (info["ph"].as_str(), info["s"].as_str()),
        (Some("i"), Some("t"))
    );
    assert_eq!(info["pid"], 5);
    assert_eq!(info["args"]["severity"], "INFO");
    assert_eq!(info["args"]["severity_number"], 9);
    assert_eq!(info["args"]["code.line.number"], 18);
    // Written inside train_step: its ids, and a time within the span.
    assert_eq!(info["args"]["span_id"], step["args"]["span_id"]);
    assert_eq!(info["args"]["trace_id"], step["args"]["trace_id"]);
    let (ts, start, dur) = (
        info["ts"].as_i64().unwrap(),
        step["ts"].as_i64().unwrap(),
        step["dur"].as_i64().unwrap(),
    );
    assert!(
        start <= ts && ts <= start + dur,
        "{ts} not in [{start}, +{dur}]"
    );
    let warn = logs.iter().find(|e| e["name"] == "loss spike").unwrap();
    assert_eq!(warn["args"]["severity"], "WARN");
    assert_eq!(warn["args"]["dl.loss"], 7.5);

    // The same records one per line (Lens after 0.1.0) give the same trace.
    let compact = trace_of(&[fixture("python-lens-logs-rank5.jsonl")]);
    assert_eq!(compact["traceEvents"], trace["traceEvents"]);
}

#[test]
fn a_cut_pretty_record_is_skipped_and_the_next_one_read() {
    let dir = tempfile::tempdir().unwrap();
    let text = fs::read_to_string(fixture("python-lens-rank3-indent4.json")).unwrap();
    // The first record cut after 10 of its lines (a killed writer), then the whole file.
    let head: Vec<&str> = text.lines().take(10).collect();
    let path = dir.path().join("cut-rank3.json");
    fs::write(&path, head.join("\n") + "\n" + &text).unwrap();
    let (trace, stderr) = run_perfetto(&[path], &dir.path().join("t.json"));
    assert_eq!(trace["otherData"]["skipped_records"], 1);
    assert_eq!(trace["otherData"]["spans"], 3);
    assert!(
        stderr.contains("cut-rank3.json:1: record cut short"),
        "{stderr}"
    );
}

#[test]
fn timestamps_with_offsets_and_before_1970_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let line = |name: &str, start: &str, end: &str| {
        json!({
            "name": name,
            "context": { "trace_id": "0x1", "span_id": "0x2" },
            "start_time": start,
            "end_time": end,
            "resource": { "attributes": { "dl.rank": 0 } },
        })
        .to_string()
    };
    let path = dir.path().join("times-rank0.jsonl");
    let lines = [
        line(
            "offset",
            "2026-11-30T03:00:00.5+05:00",
            "2026-11-29T14:00:01-08:00",
        ),
        line("old", "1969-07-20T20:17:40Z", "1969-07-20T20:17:41.25Z"),
    ];
    fs::write(&path, lines.join("\n")).unwrap();
    let (trace, _) = run_perfetto(&[path], &dir.path().join("t.json"));
    assert_eq!(trace["otherData"]["skipped_records"], 0);
    let span = |n: &str| {
        events(&trace)
            .iter()
            .find(|e| e["name"] == n)
            .unwrap()
            .clone()
    };
    // 2026-11-29T22:00:00.5Z
    assert_eq!(span("offset")["ts"], 1_795_989_600_500_000_i64);
    assert_eq!(span("offset")["dur"], 500_000);
    assert_eq!(span("old")["ts"], -14_182_940_000_000_i64);
    assert_eq!(span("old")["dur"], 1_250_000);
}

fn perfetto_status(inputs: &[&Path], output: &Path) -> (Option<i32>, String) {
    let out = bin()
        .arg("perfetto")
        .args(inputs)
        .arg("-o")
        .arg(output)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_output_that_is_one_of_the_inputs_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_job(dir.path());
    let input = &files[1];
    let before = fs::read(input).unwrap();
    let symlink = dir.path().join("alias.json");
    std::os::unix::fs::symlink(input, &symlink).unwrap();
    let hard = dir.path().join("hard.json");
    fs::hard_link(input, &hard).unwrap();
    for output in [input.clone(), symlink, hard] {
        let (code, stderr) = perfetto_status(&[&files[0], input], &output);
        assert_eq!(code, Some(2), "{}: {stderr}", output.display());
        assert!(
            stderr.contains("it is input file 2") && stderr.contains("nothing was written"),
            "{stderr}"
        );
        assert_eq!(
            fs::read(input).unwrap(),
            before,
            "{} changed",
            input.display()
        );
    }
}

#[test]
fn a_failed_write_exits_2() {
    let (code, stderr) = perfetto_status(
        &[&fixture("python-lens-rank3.jsonl")],
        Path::new("/dev/full"),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
}

/// The console JSONL of a real rank whose `step` (thread `trainer`) and `reduce` (thread
/// `runtime`) overlap without nesting (see the `threaded_rank` fixture program), with `env`.
fn threaded_rank(dir: &Path, env: &[(&str, &str)]) -> PathBuf {
    let path = dir.join("threads-rank0.jsonl");
    Child::fixture("threaded_rank")
        .env("NEMO_LENS_ENABLED", "1")
        .env("NEMO_LENS_EXPORTER", "console")
        .env("NEMO_LENS_METRICS_ENABLED", "0")
        .env("NEMO_LENS_CONSOLE_PATH", &path)
        .envs(env.iter().copied())
        .run_passing();
    path
}

/// The slices (`ph: "X"`) of the trace by name: (tid, start, end).
fn slices(trace: &Value) -> BTreeMap<String, (i64, i64, i64)> {
    events(trace)
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| {
            let ts = e["ts"].as_i64().unwrap();
            let end = ts + e["dur"].as_i64().unwrap();
            let name = e["name"].as_str().unwrap().to_owned();
            (name, (e["tid"].as_i64().unwrap(), ts, end))
        })
        .collect()
}

/// The thread tracks named in the trace: (tid, name).
fn thread_tracks(trace: &Value) -> BTreeSet<(i64, String)> {
    events(trace)
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| {
            (
                e["tid"].as_i64().unwrap(),
                e["args"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Whether two slices interleave: one starts inside the other and ends after it.
fn interleave((_, a0, a1): (i64, i64, i64), (_, b0, b1): (i64, i64, i64)) -> bool {
    (a0 < b0 && b0 < a1 && a1 < b1) || (b0 < a0 && a0 < b1 && b1 < a1)
}

#[test]
fn spans_of_two_threads_go_on_two_thread_tracks_where_they_do_not_interleave() {
    let dir = tempfile::tempdir().unwrap();
    let input = threaded_rank(dir.path(), &[("NEMO_LENS_THREAD_ATTRIBUTES", "1")]);
    let records: Vec<Value> = fs::read_to_string(&input)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let tid_of = |span: &str| {
        let record = records.iter().find(|r| r["name"] == span).unwrap();
        record["attributes"]["thread.id"]
            .as_i64()
            .unwrap_or_else(|| panic!("no thread.id: {record}"))
    };
    let (trainer, runtime) = (tid_of("step"), tid_of("reduce"));
    assert_ne!(trainer, runtime);

    let trace = trace_of(&[input]);
    let tracks = thread_tracks(&trace);
    assert!(tracks.contains(&(trainer, "trainer".into())), "{tracks:?}");
    assert!(tracks.contains(&(runtime, "runtime".into())), "{tracks:?}");
    assert!(
        tracks.contains(&(tid_of("setup"), "main".into())),
        "{tracks:?}"
    );
    assert_eq!(tracks.len(), 3, "{tracks:?}");

    let slices = slices(&trace);
    assert_eq!(slices.len(), 5, "{slices:?}");
    for (name, tid) in [
        ("step", trainer),
        ("forward", trainer),
        ("reduce", runtime),
        ("send", runtime),
    ] {
        assert_eq!(slices[name].0, tid, "{name}: {slices:?}");
    }
    // The two threads' spans do interleave in time: on one track they would not nest.
    assert!(interleave(slices["step"], slices["reduce"]), "{slices:?}");
    // On each track, every two slices nest or follow each other.
    for (a, sa) in &slices {
        for (b, sb) in &slices {
            if sa.0 == sb.0 {
                assert!(!interleave(*sa, *sb), "{a} and {b} interleave: {slices:?}");
            }
        }
    }
}

#[test]
fn spans_without_thread_attributes_stay_on_the_ranks_one_track() {
    let dir = tempfile::tempdir().unwrap();
    // The attributes are off by default: the rank writes what the Python library writes.
    let input = threaded_rank(dir.path(), &[]);
    let text = fs::read_to_string(&input).unwrap();
    assert!(!text.contains("thread."), "{text}");

    let trace = trace_of(&[input]);
    assert_eq!(
        thread_tracks(&trace),
        BTreeSet::from([(0, "spans".to_owned())])
    );
    let slices = slices(&trace);
    assert_eq!(slices.len(), 5, "{slices:?}");
    assert!(slices.values().all(|s| s.0 == 0), "{slices:?}");
}

/// Parsing on a second thread (`--jobs 2`) writes the same file, byte for byte, as one thread:
/// on the five-rank job (a gzip file, links across files, metrics, damaged lines) and on
/// Python's 0.1.0 output with its log records.
#[test]
fn reading_ahead_on_a_second_thread_writes_the_same_trace() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = write_job(dir.path());
    files.push(fixture("python-lens-0.1.0-stdout-rank5.txt"));
    let mut traces = Vec::new();
    for jobs in ["1", "2"] {
        let out = dir.path().join(format!("trace-jobs{jobs}.json"));
        let (trace, stderr) = run_perfetto_with(&["--jobs", jobs], &files, &out);
        assert!(!events(&trace).is_empty());
        let report = stderr.replace(&format!("-jobs{jobs}"), "");
        traces.push((fs::read(&out).unwrap(), report));
    }
    assert!(traces[0].0 == traces[1].0, "the traces differ");
    assert!(
        traces[0].1.contains("skipped 3 malformed"),
        "{}",
        traces[0].1
    );
    assert_eq!(traces[0].1, traces[1].1);
}
