//! `nemo-lens hang` on damaged and hostile dumps, written here in the flight recorder's layout:
//! a bad record is skipped and counted, never the rest of its file, and a world size that no
//! dump set can fill is reported in ranges, not rank by rank. (Its memory on a huge record and a
//! huge world size: `memory_bounds.rs`.)

use nemo_lens_test_support::cli as support;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};
use support::{T0_US, bin, ts};

/// One dumped span of `rank`: open (with its age) or closed.
fn dump_line(
    rank: i64,
    world_size: i64,
    name: &str,
    id: u64,
    parent: Option<u64>,
    open: bool,
) -> String {
    let mut attributes = json!({ "nemo.group": "step", "step": 7 });
    if open {
        attributes["nemo.span.open"] = json!(true);
        attributes["nemo.span.open_age_s"] = json!(12.5);
    }
    json!({
        "name": name,
        "context": { "trace_id": format!("0x{:032x}", 0xabc), "span_id": format!("0x{id:016x}"), "trace_state": "[]" },
        "kind": "SpanKind.INTERNAL",
        "parent_id": parent.map(|p| format!("0x{p:016x}")),
        "start_time": ts(T0_US + id as i64),
        "end_time": ts(T0_US + 1_000_000),
        "status": { "status_code": "UNSET" },
        "attributes": attributes,
        "events": [],
        "links": [],
        "resource": { "attributes": { "dl.rank": rank, "dl.world_size": world_size }, "schema_url": "" },
    })
    .to_string()
}

/// A dump of `rank`: a closed step, then the open `train` and `all_reduce`.
fn dump(dir: &Path, rank: i64, world_size: i64) -> PathBuf {
    let path = dir.join(format!("nemo-lens-dump-rank{rank}-pid1-1-signal.jsonl"));
    let lines = [
        dump_line(rank, world_size, "train_step", 1, Some(2), false),
        dump_line(rank, world_size, "train", 2, None, true),
        dump_line(rank, world_size, "all_reduce", 3, Some(2), true),
    ];
    fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

fn hang(args: &[&str], files: &[PathBuf]) -> Output {
    bin().arg("hang").args(args).args(files).output().unwrap()
}

fn json_report(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// An invalid UTF-8 line early in a dump is one bad record: the open spans after it are still
/// read, so the rank is placed where it is (not named for having no dump or no open span).
#[test]
fn an_invalid_utf8_line_is_skipped_and_the_rest_of_the_dump_read() {
    let dir = tempfile::tempdir().unwrap();
    let good = dump(dir.path(), 0, 2);
    let damaged = dir.path().join("nemo-lens-dump-rank1-pid2-1-signal.jsonl");
    let mut f = fs::File::create(&damaged).unwrap();
    writeln!(f, "{}", dump_line(1, 2, "train_step", 1, Some(2), false)).unwrap();
    f.write_all(b"{\"name\": \"\xff\xfe broken\"}\n").unwrap();
    writeln!(f, "{}", dump_line(1, 2, "train", 2, None, true)).unwrap();
    writeln!(f, "{}", dump_line(1, 2, "all_reduce", 3, Some(2), true)).unwrap();
    drop(f);

    let out = hang(&["--json"], &[good, damaged]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report = json_report(&out);
    assert_eq!(out.status.code(), Some(0), "no suspect: {report} {stderr}");
    assert_eq!(report["groups"][0]["span"], "all_reduce", "{report}");
    assert_eq!(report["groups"][0]["ranks"], json!([0, 1]), "{report}");
    assert!(
        stderr.contains("skipped 1 malformed record(s)")
            && stderr.contains("rank1-pid2-1-signal.jsonl:2"),
        "{stderr}"
    );
}

/// A record over `--max-record-bytes` is skipped unread and counted; the dump's other records
/// still place the rank.
#[test]
fn an_oversize_record_is_skipped_and_the_rest_of_the_dump_read() {
    let dir = tempfile::tempdir().unwrap();
    let good = dump(dir.path(), 0, 2);
    let path = dir.path().join("nemo-lens-dump-rank1-pid2-1-signal.jsonl");
    let mut f = fs::File::create(&path).unwrap();
    writeln!(f, "{}", dump_line(1, 2, "train", 2, None, true)).unwrap();
    writeln!(f, "{{\"name\": \"{}\"}}", "x".repeat(200_000)).unwrap();
    writeln!(f, "{}", dump_line(1, 2, "all_reduce", 3, Some(2), true)).unwrap();
    drop(f);

    let out = hang(&["--json", "--max-record-bytes", "64K"], &[good, path]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report = json_report(&out);
    assert_eq!(report["groups"][0]["ranks"], json!([0, 1]), "{report}");
    assert!(stderr.contains("over --max-record-bytes 65536"), "{stderr}");
}

/// A world size far beyond the dumps (a corrupt `dl.world_size`, or `--world-size`) names the
/// missing ranks as ranges: the report lists the first thousand one by one and all of them
/// as ranges, and says so.
#[test]
fn a_huge_world_size_is_reported_in_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let files = vec![
        dump(dir.path(), 0, 1_000_000_000_000),
        dump(dir.path(), 5, 8),
    ];

    let out = hang(&["--json"], &files);
    assert_eq!(out.status.code(), Some(3));
    let report = json_report(&out);
    assert_eq!(report["world_size"], 1_000_000_000_000_i64);
    assert_eq!(
        report["no_dump"],
        json!([[1, 4], [6, 999_999_999_999_i64]]),
        "{report}"
    );
    assert_eq!(report["no_dump_count"], 999_999_999_998_i64);
    let listed = report["outliers"].as_array().unwrap();
    assert_eq!(listed.len(), 1000, "the first thousand, one by one");
    assert_eq!(listed[0]["rank"], 1);
    assert_eq!(listed[999]["rank"], 1001);
    assert_eq!(report["suspects"].as_array().unwrap().len(), 1000);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("999999999998 rank(s) have no dump") && stderr.contains("first 1000"),
        "{stderr}"
    );

    let out = hang(&["--world-size", "1000000000000"], &files);
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ranks 1-4,6-999999999999: no dump (999999999998 ranks)"),
        "{text}"
    );
    assert!(
        text.contains("suspect rank(s): 1-4,6-999999999999"),
        "{text}"
    );
    assert!(text.len() < 4096, "{} bytes of report", text.len());
}

/// A framework's runtime threads hold open spans of their own, parentless (burn-collective runs
/// its all-reduce on tokio workers): the rank is placed where its training thread waits, under
/// the step, even though a worker's span started later.
#[test]
fn a_runtime_threads_parentless_spans_do_not_hide_where_the_training_thread_waits() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp
        .path()
        .join("nemo-lens-dump-rank0-pid1-1-watchdog.jsonl");
    let span = |name: &str, id: u64, parent: Option<u64>, step: bool| {
        let mut line: Value =
            serde_json::from_str(&dump_line(0, 1, name, id, parent, true)).unwrap();
        if !step {
            line["attributes"].as_object_mut().unwrap().remove("step");
        }
        line.to_string()
    };
    let lines = [
        span("train", 2, None, false),
        span("train_step", 3, Some(2), true),
        span("all_reduce", 4, Some(3), false),
        span("execute", 5, None, false),
        span("global_all_reduce", 6, Some(5), false),
    ];
    fs::write(&path, lines.join("\n") + "\n").unwrap();
    let report = json_report(&hang(&["--json"], &[path]));
    assert_eq!(report["groups"][0]["span"], "all_reduce", "{report}");
    assert_eq!(report["groups"][0]["step"], 7, "{report}");
}
