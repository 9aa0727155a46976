//! `nemo-lens summary` on a generated five-rank job with a straggler (rank 2), a truncated
//! span (rank 1), corrupt lines (rank 0), a gzip file (rank 4) and the Python fixture (rank 3).

use nemo_lens_test_support::cli as support;

use std::fs;
use std::path::PathBuf;
use std::process::Output;

use serde_json::{Value, json};
use support::{SLOW_STEP_MS, STEP_MS, STEPS, bin, fixture, write_job};

fn summary(args: &[&str], files: &[std::path::PathBuf]) -> (String, String) {
    let output = bin()
        .arg("summary")
        .args(files)
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "exit {:?}: {stderr}",
        output.status
    );
    (stdout, stderr)
}

fn row<'a>(report: &'a Value, name: &str, rank: i64) -> &'a Value {
    report["spans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name && r["rank"] == rank)
        .unwrap_or_else(|| panic!("no row for {name} on rank {rank}"))
}

#[test]
fn json_statistics_and_stragglers() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_job(dir.path());
    let (stdout, stderr) = summary(&["--json"], &files);
    let report: Value = serde_json::from_str(&stdout).expect("--json prints JSON");

    let step = row(&report, "train_step", 0);
    assert_eq!(step["count"], STEPS);
    assert_eq!(step["truncated"], 0);
    assert_eq!(step["total_ms"], (STEPS * STEP_MS) as f64);
    for p in ["p50_ms", "p90_ms", "p99_ms", "max_ms"] {
        assert_eq!(step[p], STEP_MS as f64, "{p}");
    }
    // The truncated step (5 s long) is counted apart and kept out of the percentiles.
    let truncated = row(&report, "train_step", 1);
    assert_eq!(truncated["count"], STEPS - 1);
    assert_eq!(truncated["truncated"], 1);
    assert_eq!(truncated["max_ms"], STEP_MS as f64);
    // Rank 4 (gzip, rank from the file name) and rank 3 (Python fixture) are there.
    assert_eq!(row(&report, "train_step", 4)["count"], STEPS);
    assert_eq!(row(&report, "bad_step", 3)["p50_ms"], 0.81);
    assert_eq!(report["step_span"], "train_step");
    assert_eq!(report["input"]["skipped_records"], 3);

    // Stragglers: the step span first, rank 2 flagged with its excess.
    let stragglers = report["stragglers"].as_array().unwrap();
    assert_eq!(stragglers[0]["name"], "train_step");
    assert_eq!(stragglers[0]["is_step"], true);
    assert_eq!(stragglers[0]["cross_rank_median_ms"], STEP_MS as f64);
    let slow = stragglers[0]["stragglers"].as_array().unwrap();
    assert_eq!(slow.len(), 1, "{slow:?}");
    assert_eq!(slow[0]["rank"], 2);
    assert_eq!(slow[0]["median_ms"], SLOW_STEP_MS as f64);
    assert_eq!(slow[0]["excess_percent"], 50.0);
    let forward = stragglers.iter().find(|s| s["name"] == "forward").unwrap();
    assert_eq!(forward["stragglers"][0]["rank"], 2);
    // Names seen on one rank only have no cross-rank comparison.
    assert!(stragglers.iter().all(|s| s["name"] != "bad_step"));
    assert!(stderr.contains("skipped 3 malformed record(s)"), "{stderr}");
}

#[test]
fn threshold_above_the_excess_flags_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_job(dir.path());
    let (stdout, _) = summary(&["--json", "--threshold", "60%"], &files);
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["threshold_percent"], 60.0);
    for name in report["stragglers"].as_array().unwrap() {
        assert_eq!(name["stragglers"].as_array().unwrap().len(), 0, "{name}");
    }
    let bad = bin()
        .args(["summary", "--threshold", "lots"])
        .args(&files)
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("expected a percentage"));
}

#[test]
fn human_table_lists_the_step_span_first() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_job(dir.path());
    let (stdout, _) = summary(&[], &files);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[1].starts_with("name") && lines[1].contains("p99_ms"),
        "{stdout}"
    );
    assert!(lines[2].starts_with("train_step"), "{stdout}");
    let straggler_header = lines
        .iter()
        .position(|l| l.starts_with("Stragglers"))
        .unwrap();
    assert!(
        lines[straggler_header + 1].starts_with("train_step [step]: cross-rank median 100.000 ms"),
        "{stdout}"
    );
    assert!(
        lines[straggler_header + 2].contains("rank    2")
            && lines[straggler_header + 2].contains("+50.0%"),
        "{stdout}"
    );

    let (by_rank, _) = summary(&["--group-by", "rank"], &files);
    let names: Vec<&str> = by_rank
        .lines()
        .skip(2)
        .take(3)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    // Rank 0 first: its step span, then its other span names.
    assert_eq!(names, ["train_step", "forward", "train_step"], "{by_rank}");
}

#[test]
fn heatmap_svg_has_one_cell_per_rank_and_step() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_job(dir.path());
    let svg = dir.path().join("steps.svg");
    let (_, stderr) = summary(&["--plot", svg.to_str().unwrap()], &files);
    assert!(stderr.contains("(5 ranks x 12 steps)"), "{stderr}");
    let text = fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg"), "{}", &text[..80]);
    assert!(text.contains("Step duration by rank"));
    // Cells are filled rectangles in Viridis colours; the slowest cells (rank 2's 12 steps) get
    // the top of the scale, the fastest (the Python rank's single 37 µs step) the bottom.
    let fills: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("<rect") && !l.contains("#FFFFFF"))
        .map(|l| {
            l.split("fill=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap()
        })
        .collect();
    let complete_steps = 4 * STEPS - 1 + 1;
    assert_eq!(fills.len() as i64, complete_steps, "{fills:?}");
    let count = |c: &str| fills.iter().filter(|f| **f == c).count() as i64;
    assert_eq!(count("#FEE825"), STEPS, "brightest = rank 2");
    assert_eq!(count("#440154"), 1, "darkest = the Python rank's step");
}

fn json_report(files: &[PathBuf]) -> Value {
    let (stdout, _) = summary(&["--json"], files);
    serde_json::from_str(&stdout).expect("--json prints JSON")
}

/// A file of span lines on rank 0 with the given (name, start, end).
fn spans_file(dir: &std::path::Path, spans: &[(&str, &str, &str)]) -> PathBuf {
    let lines: Vec<String> = spans
        .iter()
        .enumerate()
        .map(|(i, (name, start, end))| {
            json!({
                "name": name,
                "context": { "trace_id": "0x1", "span_id": format!("0x{:016x}", i + 1) },
                "start_time": start,
                "end_time": end,
                "resource": { "attributes": { "dl.rank": 0 } },
            })
            .to_string()
        })
        .collect();
    let path = dir.join("spans-rank0.jsonl");
    fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

#[test]
fn spans_from_1970_to_9999_do_not_overflow_the_total() {
    let dir = tempfile::tempdir().unwrap();
    // 50 spans of 8,000 years each: their sum in µs is beyond i64.
    let spans = vec![("epoch", "1970-01-01T00:00:00Z", "9999-12-31T23:59:59Z"); 50];
    let report = json_report(&[spans_file(dir.path(), &spans)]);
    let row = &report["spans"][0];
    let one_ms = 253_402_300_799_000.0_f64;
    assert_eq!(row["count"], 50);
    assert_eq!(row["p50_ms"], one_ms);
    assert_eq!(row["max_ms"], one_ms);
    assert_eq!(row["total_ms"].as_f64().unwrap(), 50.0 * one_ms);
}

#[test]
fn timestamps_with_offsets_and_before_1970_are_valid() {
    let dir = tempfile::tempdir().unwrap();
    let spans = [
        // 0.25 s, written with two different offsets.
        (
            "offset",
            "2026-11-30T03:00:00+05:00",
            "2026-11-29T14:00:00.25-08:00",
        ),
        ("old", "1969-12-31T23:59:59.5Z", "1970-01-01T00:00:00.5Z"),
        ("old", "1900-01-01T00:00:00Z", "1900-01-01T00:00:02Z"),
    ];
    let report = json_report(&[spans_file(dir.path(), &spans)]);
    assert_eq!(report["input"]["skipped_records"], 0, "{report}");
    let row = |name: &str| {
        report["spans"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(row("offset")["p50_ms"], 250.0);
    assert_eq!(row("old")["count"], 2);
    assert_eq!(row("old")["total_ms"], 3000.0);
}

#[test]
fn pretty_printed_and_log_records_of_python_0_1_0_are_read() {
    // The rank-3 records pretty-printed give the same rows as one per line.
    let compact = json_report(&[fixture("python-lens-rank3.jsonl")]);
    let pretty = json_report(&[fixture("python-lens-rank3-indent4.json")]);
    assert_eq!(pretty["spans"], compact["spans"]);
    assert_eq!(pretty["input"]["skipped_records"], 0);

    // Real Python 0.1.0 stdout: spans, metric batches and log records, all pretty-printed.
    let files = [fixture("python-lens-0.1.0-stdout-rank5.txt")];
    let report = json_report(&files);
    assert_eq!(report["logs"], json!({ "INFO": 1, "WARN": 1 }));
    assert_eq!(report["input"]["log_records"], 2);
    assert_eq!(report["input"]["spans"], 2);
    assert_eq!(report["input"]["metric_batches"], 2);
    assert_eq!(report["input"]["skipped_records"], 0);
    let (text, stderr) = summary(&[], &files);
    assert!(text.contains("Log records: 2 (INFO 1, WARN 1)"), "{text}");
    assert!(!stderr.contains("skipped"), "{stderr}");
}

fn summary_to(stdout: fs::File, args: &[&str]) -> Output {
    bin()
        .arg("summary")
        .arg(fixture("python-lens-rank3.jsonl"))
        .args(args)
        .stdout(stdout)
        .output()
        .unwrap()
}

#[test]
fn every_failed_write_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let sink = || fs::File::create(dir.path().join("stdout.txt")).unwrap();
    let full = || {
        fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    // The heatmap.
    let out = summary_to(sink(), &["--plot", "/dev/full"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot draw the heatmap /dev/full"),
        "{stderr}"
    );
    // The report on stdout, as a table and as JSON.
    for args in [&[][..], &["--json"][..]] {
        let out = summary_to(full(), args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("cannot write the report to stdout"),
            "{stderr}"
        );
    }
}
