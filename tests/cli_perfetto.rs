//! `nemo-lens perfetto` on a generated five-rank job (see `cli_support`): the real binary, the
//! real files, and the Chrome Trace Event JSON checked event by event.

mod cli_support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;

use cli_support::{STEPS, T0_US, bin, span_id, write_job};
use serde_json::Value;

fn run_perfetto(files: &[std::path::PathBuf], out: &std::path::Path) -> (Value, String) {
    let output = bin()
        .arg("perfetto")
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
    assert_eq!(trace["otherData"]["skipped_lines"], 3);
    assert_eq!(trace["otherData"]["spans"], 4 * 2 * STEPS + 3);
    assert!(stderr.contains("skipped 3 malformed line(s)"), "{stderr}");
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
