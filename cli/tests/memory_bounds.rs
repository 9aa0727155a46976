//! `nemo-lens` memory does not grow with the input: hostile inputs generated on the fly into
//! temporary files, the real binary run as a child process, and its peak resident memory read
//! with `wait4(2)` through a probe ([`support::measure`]: this file has its own `main`,
//! `harness = false`, so that the test executable can re-run itself as the probe). The tests run
//! one after the other, each printed with its figure.
//!
//! Each input holds at least 150 MB of what an unbounded reader would keep in memory (an endless
//! line, a huge record, links waiting for spans that never come, distinct track names, distinct span
//! names), so without the bounds the peak is well above [`PEAK_BOUND`]; with them it stays near
//! the fixed budgets (record cap 16 MiB, link budget 16 MiB, track names 8 MiB, span names
//! 16 MiB, link index about 20 MB). Lines are written with `format!` (the inputs are large and
//! the test build is unoptimised).

use nemo_lens_test_support::cli as support;

use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use support::measure::{Measured, run_measured};
use support::{T0_US, bin, span_line};

/// One rank-0 span line, written directly (fast for megabyte strings in a debug build).
/// `attributes` and `links` are JSON text.
fn raw_span(name: &str, span_id: u64, attributes: &str, links: &str) -> String {
    format!(
        r#"{{"name": "{name}", "context": {{"trace_id": "0x{:032x}", "span_id": "0x{span_id:016x}"}}, "parent_id": null, "start_time": "2026-11-29T22:00:00.000000Z", "end_time": "2026-11-29T22:00:00.001000Z", "status": {{"status_code": "UNSET"}}, "attributes": {attributes}, "events": [], "links": {links}, "resource": {{"attributes": {{"dl.rank": 0}}, "schema_url": ""}}}}"#,
        0xabc
    )
}

/// A generous bound on the peak resident memory of one run (debug build; the runs peak at
/// 10–60 MiB).
const PEAK_BOUND: u64 = 96 << 20;

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

fn assert_bounded(m: &Measured, what: &str) {
    assert_eq!(m.code, Some(0), "{what}: {}", m.stderr);
    assert!(
        m.peak_rss < PEAK_BOUND,
        "{what}: peak RSS {:.1} MiB, bound {:.0} MiB",
        mib(m.peak_rss),
        mib(PEAK_BOUND)
    );
    eprintln!("{what}: peak RSS {:.1} MiB", mib(m.peak_rss));
}

/// A few ordinary span lines of rank 0.
fn normal_lines(n: i64) -> Vec<String> {
    (0..n)
        .map(|i| {
            span_line(
                "train_step",
                0xabc,
                0x100 + i as u64,
                None,
                T0_US + i * 1000,
                T0_US + i * 1000 + 500,
                json!({ "step": i }),
                json!([]),
                json!([]),
                Some(0),
            )
        })
        .collect()
}

fn summary_json(files: &[PathBuf]) -> (Measured, Value) {
    let m = run_measured(bin().arg("summary").arg("--json").args(files));
    let report = serde_json::from_str(&m.stdout).unwrap_or(Value::Null);
    (m, report)
}

fn perfetto(files: &[PathBuf], out: &Path) -> (Measured, Value) {
    let m = run_measured(bin().arg("perfetto").args(files).arg("-o").arg(out));
    let trace = fs::read(out)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    (m, trace)
}

/// `perfetto --jobs 2` parses ahead of its writing within a byte budget: a record larger than
/// the budget waits until the one before it was written. 40 records of 3.9 MiB (156 MiB, all
/// under `--max-record-bytes 4M`) would all be held by a reader that does not wait.
fn perfetto_reading_ahead_holds_two_large_records_at_most() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spans-rank0.jsonl");
    let mut f = BufWriter::new(fs::File::create(&path).unwrap());
    let blob = "a".repeat(3_900 << 10);
    for i in 0..40 {
        let attributes = format!(r#"{{"blob": "{blob}"}}"#);
        writeln!(f, "{}", raw_span("large", 0x100 + i, &attributes, "[]")).unwrap();
    }
    f.into_inner().unwrap().sync_all().unwrap();
    let out = dir.path().join("trace.json");
    let m = run_measured(
        bin()
            .args(["perfetto", "--jobs", "2", "--max-record-bytes", "4M", "-o"])
            .arg(&out)
            .arg(&path),
    );
    assert_bounded(&m, "perfetto --jobs 2, 40 records of 3.9 MiB");
    assert!(m.stderr.contains("(40 spans"), "{}", m.stderr);
}

fn gzip_of_an_endless_line_of_zeros_is_skipped_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    // 256 MiB of zeros, no newline: 256 gzip members of 1 MiB each (concatenated members are
    // one stream), so the file is small and quick to write.
    let member = {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        enc.write_all(&vec![b'0'; 1 << 20]).unwrap();
        enc.finish().unwrap()
    };
    let zeros = dir.path().join("zeros-rank1.jsonl.gz");
    let mut f = BufWriter::new(fs::File::create(&zeros).unwrap());
    for _ in 0..256 {
        f.write_all(&member).unwrap();
    }
    f.into_inner().unwrap().sync_all().unwrap();
    let good = dir.path().join("spans-rank0.jsonl");
    fs::write(&good, normal_lines(3).join("\n") + "\n").unwrap();

    let (m, report) = summary_json(&[zeros, good]);
    assert_bounded(&m, "summary, 256 MiB line of zeros in gzip");
    assert_eq!(report["input"]["skipped_records"], 1, "{report}");
    assert_eq!(report["input"]["spans"], 3, "{report}");
    assert!(
        m.stderr
            .contains("zeros-rank1.jsonl.gz:1: not a JSON object"),
        "{}",
        m.stderr
    );
}

fn a_huge_record_is_skipped_counted_and_the_next_one_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spans-rank0.jsonl");
    let lines = normal_lines(2);
    let mut f = BufWriter::new(fs::File::create(&path).unwrap());
    writeln!(f, "{}", lines[0]).unwrap();
    // One 200 MiB record (a span whose attribute is 200 MiB of text), then a normal line.
    let head = br#"{"name": "huge", "attributes": {"blob": ""#;
    let tail = br#""}, "start_time": "2026-11-29T22:00:00Z", "end_time": "2026-11-29T22:00:01Z"}"#;
    f.write_all(head).unwrap();
    let chunk = vec![b'a'; 1 << 20];
    for _ in 0..200 {
        f.write_all(&chunk).unwrap();
    }
    f.write_all(tail).unwrap();
    writeln!(f).unwrap();
    writeln!(f, "{}", lines[1]).unwrap();
    f.into_inner().unwrap().sync_all().unwrap();
    let huge_len = (head.len() + (200 << 20) + tail.len()) as u64;

    let out = dir.path().join("trace.json");
    let (m, trace) = perfetto(std::slice::from_ref(&path), &out);
    assert_bounded(&m, "perfetto, one 200 MiB record");
    let other = &trace["otherData"];
    assert_eq!(other["too_long_records"], 1, "{other}");
    assert_eq!(other["too_long_bytes"], huge_len, "{other}");
    assert_eq!(other["spans"], 2, "{other}");
    assert!(
        m.stderr.contains(&format!(
            "spans-rank0.jsonl:2: record of {huge_len} bytes skipped (over --max-record-bytes 16777216)"
        )),
        "{}",
        m.stderr
    );
}

fn links_to_unseen_spans_stay_within_their_budget() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spans-rank0.jsonl");
    let mut f = BufWriter::new(fs::File::create(&path).unwrap());
    // 1,500 spans, each linking with a 100 KB attribute to a span that never comes: 150 MB the
    // old table of waiting links held whole.
    const SPANS: u64 = 1500;
    let filler = "x".repeat(100_000);
    for i in 0..SPANS {
        let links = format!(
            r#"[{{"context": {{"trace_id": "0xabc", "span_id": "0x{:016x}"}}, "attributes": {{"why": "{filler}"}}}}]"#,
            0xdead_0000 + i
        );
        writeln!(f, "{}", raw_span("consumer", 0x1000 + i, "{}", &links)).unwrap();
    }
    f.into_inner().unwrap().sync_all().unwrap();

    let out = dir.path().join("trace.json");
    let (m, trace) = perfetto(&[path], &out);
    assert_bounded(&m, "perfetto, 1,500 unresolved 100 KB links");
    let other = &trace["otherData"];
    assert_eq!(other["spans"], SPANS, "{other}");
    assert_eq!(other["unresolved_links"], SPANS, "{other}");
    let over = other["links_over_budget"].as_u64().unwrap();
    // 16 MiB hold about 167 of the links; the rest are counted.
    assert!((1200..SPANS).contains(&over), "{other}");
    assert!(
        m.stderr.contains(&format!("{over} of them over the")),
        "{}",
        m.stderr
    );
    let drawn = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .count() as u64;
    assert_eq!(drawn, SPANS, "every span is still drawn");
}

fn distinct_thread_names_stay_within_the_track_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spans-rank0.jsonl");
    let mut f = BufWriter::new(fs::File::create(&path).unwrap());
    // 1,500 spans, each on its own 100 KB `thread.name` (150 MB of track names).
    const SPANS: u64 = 1500;
    let filler = "t".repeat(100_000);
    for i in 0..SPANS {
        let attributes = format!(r#"{{"thread.name": "{i}-{filler}"}}"#);
        writeln!(f, "{}", raw_span("work", 0x1000 + i, &attributes, "[]")).unwrap();
    }
    f.into_inner().unwrap().sync_all().unwrap();

    let out = dir.path().join("trace.json");
    let (m, trace) = perfetto(&[path], &out);
    assert_bounded(&m, "perfetto, 1,500 distinct 100 KB thread names");
    let other = &trace["otherData"];
    let events = trace["traceEvents"].as_array().unwrap();
    let named = events
        .iter()
        .filter(|e| e["name"] == "thread_name" && e["tid"] != 0)
        .count() as u64;
    // 8 MiB name about 80 of the tracks; the other spans go to the rank's main track, counted.
    assert!((40..120).contains(&named), "{named} named tracks");
    assert_eq!(other["unnamed_tracks"], SPANS - named, "{other}");
    assert!(
        m.stderr.contains("table of track names was full"),
        "{}",
        m.stderr
    );
    let main_track = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["tid"] == 0)
        .count() as u64;
    assert_eq!(main_track, SPANS - named);
}

fn distinct_span_names_stay_within_the_name_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spans-rank0.jsonl");
    let mut f = BufWriter::new(fs::File::create(&path).unwrap());
    // 2,000 distinct 100 KB span names (200 MB of names), then one more span of the first name.
    const NAMES: u64 = 2000;
    let filler = "n".repeat(100_000);
    for i in 0..=NAMES {
        let name = format!("{}-{filler}", i % NAMES);
        writeln!(f, "{}", raw_span(&name, 0x1000 + i, "{}", "[]")).unwrap();
    }
    f.into_inner().unwrap().sync_all().unwrap();

    let (m, report) = summary_json(&[path]);
    assert_bounded(&m, "summary, 2,000 distinct 100 KB span names");
    let over = report["spans_over_budget"].as_u64().unwrap();
    let rows = report["spans"].as_array().unwrap();
    // 16 MiB hold about 167 of the names; spans of later names are counted, not kept.
    assert!((100..300).contains(&rows.len()), "{} rows", rows.len());
    assert_eq!(over + rows.len() as u64 + 1, NAMES + 1);
    // The repeated first name still lands in its row.
    assert_eq!(
        rows.iter().map(|r| r["count"].as_u64().unwrap()).max(),
        Some(2)
    );
    assert!(
        m.stderr
            .contains(&format!("skipped {over} span(s) of names first seen after")),
        "{}",
        m.stderr
    );
}

fn the_straggler_verdict_of_4096_ranks_is_a_few_lines_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    // 4,095 dumps of 16 steps (rank 77 wrote none); ranks 1234 and 3000 are slow.
    let files = support::write_rank_dumps(dir.path(), 4096, 16, &[1234, 3000], &[77]);
    let m = run_measured(bin().arg("straggler").args(&files));
    assert!(
        m.peak_rss < PEAK_BOUND,
        "peak RSS {:.1} MiB",
        mib(m.peak_rss)
    );
    eprintln!(
        "straggler, 4,095 rank dumps: peak RSS {:.1} MiB; the verdict:\n{}",
        mib(m.peak_rss),
        m.stdout
    );
    assert_eq!(m.code, Some(3), "{}{}", m.stdout, m.stderr);
    let lines: Vec<&str> = m.stdout.lines().collect();
    assert!(lines.len() <= 6, "{}", m.stdout);
    assert!(
        lines[0].starts_with("stragglers: 2 ranks (1234,3000)"),
        "{}",
        m.stdout
    );
    assert!(
        m.stdout
            .contains("compared 4095 of 4096 ranks over their latest 16 steps"),
        "{}",
        m.stdout
    );
    assert!(
        m.stdout.contains("no data from 1 of 4096 ranks: 77"),
        "{}",
        m.stdout
    );

    // The same input through `summary`: its tables hold 2 names × 4,095 ranks.
    let (m, report) = summary_json(&files);
    assert_bounded(&m, "summary, 4,095 rank dumps");
    let suspects: Vec<&Value> = report["straggler"]["suspects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["rank"])
        .collect();
    assert_eq!(suspects, [1234, 3000]);
}

/// One line of a flight-recorder dump of `rank`: an open `all_reduce` span.
fn dump_line(rank: i64, world_size: i64) -> String {
    format!(
        r#"{{"name": "all_reduce", "context": {{"trace_id": "0x{:032x}", "span_id": "0x{:016x}"}}, "parent_id": null, "start_time": "2026-11-29T22:00:00.000000Z", "end_time": "2026-11-29T22:05:00.000000Z", "status": {{"status_code": "UNSET"}}, "attributes": {{"nemo.span.open": true, "nemo.span.open_age_s": 300.0, "step": 4}}, "events": [], "links": [], "resource": {{"attributes": {{"dl.rank": {rank}, "dl.world_size": {world_size}}}, "schema_url": ""}}}}"#,
        0xabc,
        0x100 + rank
    )
}

fn hang_with_a_huge_world_size_allocates_nothing_per_claimed_rank() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (rank, world_size) in [(0, 1_000_000_000_000_i64), (1, 8)] {
        let path = dir.path().join(format!("dump-rank{rank}.jsonl"));
        fs::write(&path, dump_line(rank, world_size) + "\n").unwrap();
        files.push(path);
    }
    let m = run_measured(bin().arg("hang").arg("--json").args(&files));
    assert_eq!(m.code, Some(3), "{}", m.stderr);
    assert!(
        m.peak_rss < PEAK_BOUND,
        "hang: peak RSS {:.1} MiB",
        mib(m.peak_rss)
    );
    eprintln!(
        "hang, dl.world_size 10^12: peak RSS {:.1} MiB",
        mib(m.peak_rss)
    );
    let report: Value = serde_json::from_str(&m.stdout).unwrap();
    assert_eq!(report["no_dump_count"], 999_999_999_998_i64, "{report}");

    let m = run_measured(
        bin()
            .args(["hang", "--world-size", "9223372036854775807"])
            .args(&files),
    );
    assert_eq!(m.code, Some(3), "{}", m.stderr);
    assert!(
        m.peak_rss < PEAK_BOUND,
        "hang: peak RSS {:.1} MiB",
        mib(m.peak_rss)
    );
    eprintln!(
        "hang, --world-size i64::MAX: peak RSS {:.1} MiB",
        mib(m.peak_rss)
    );
}

fn hang_skips_a_200_mib_line_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dump-rank0.jsonl");
    let mut f = BufWriter::new(fs::File::create(&path).unwrap());
    let chunk = vec![b'a'; 1 << 20];
    f.write_all(br#"{"name": ""#).unwrap();
    for _ in 0..200 {
        f.write_all(&chunk).unwrap();
    }
    f.write_all(b"\"}\n").unwrap();
    writeln!(f, "{}", dump_line(0, 1)).unwrap();
    f.into_inner().unwrap().sync_all().unwrap();
    let m = run_measured(bin().arg("hang").arg("--json").arg(&path));
    assert_bounded(&m, "hang, one 200 MiB line in a dump");
    let report: Value = serde_json::from_str(&m.stdout).unwrap();
    assert_eq!(report["groups"][0]["span"], "all_reduce", "{report}");
    assert!(m.stderr.contains("over --max-record-bytes"), "{}", m.stderr);
}

/// A collector archive (OTLP/JSON requests, gzip) with a 200 MiB request line between two
/// ordinary ones: the line is skipped unread while the archive is split per rank.
fn an_archive_request_line_of_200_mib_is_skipped_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let request = |span_id: u64, name: &str| {
        format!(
            r#"{{"resourceSpans":[{{"resource":{{"attributes":[{{"key":"dl.rank","value":{{"intValue":"0"}}}}]}},"scopeSpans":[{{"spans":[{{"traceId":"{:032x}","spanId":"{span_id:016x}","name":"{name}","startTimeUnixNano":"1795989600000000000","endTimeUnixNano":"1795989600100000000"}}]}}]}}]}}"#,
            0xabc
        )
    };
    let gzip = |data: &[u8]| {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    };
    let path = dir.path().join("node-0.jsonl.gz");
    let mut f = BufWriter::new(fs::File::create(&path).unwrap());
    let (first, last) = (request(1, "train_step"), request(2, "train_step"));
    let huge = request(3, "HUGE");
    let (head, tail) = huge.split_once("HUGE").unwrap();
    f.write_all(&gzip(format!("{first}\n{head}").as_bytes()))
        .unwrap();
    // Concatenated gzip members are one stream: 200 members of 1 MiB of the span's name.
    let member = gzip(&vec![b'a'; 1 << 20]);
    for _ in 0..200 {
        f.write_all(&member).unwrap();
    }
    f.write_all(&gzip(format!("{tail}\n{last}\n").as_bytes()))
        .unwrap();
    f.into_inner().unwrap().sync_all().unwrap();

    let (m, report) = summary_json(std::slice::from_ref(&path));
    assert_bounded(&m, "summary, a 200 MiB request line in a collector archive");
    assert_eq!(report["input"]["spans"], 2, "{report}");
    assert_eq!(report["input"]["too_long_records"], 1, "{report}");
    assert!(
        m.stderr.contains("node-0.jsonl.gz:2: request line of"),
        "{}",
        m.stderr
    );
}

/// The tests, in the order they run.
const TESTS: [(&str, fn()); 11] = [
    (
        "perfetto_reading_ahead_holds_two_large_records_at_most",
        perfetto_reading_ahead_holds_two_large_records_at_most,
    ),
    (
        "an_archive_request_line_of_200_mib_is_skipped_in_bounded_memory",
        an_archive_request_line_of_200_mib_is_skipped_in_bounded_memory,
    ),
    (
        "goodput_keeps_only_the_spans_it_accounts_for",
        goodput_keeps_only_the_spans_it_accounts_for,
    ),
    (
        "hang_with_a_huge_world_size_allocates_nothing_per_claimed_rank",
        hang_with_a_huge_world_size_allocates_nothing_per_claimed_rank,
    ),
    (
        "hang_skips_a_200_mib_line_in_bounded_memory",
        hang_skips_a_200_mib_line_in_bounded_memory,
    ),
    (
        "gzip_of_an_endless_line_of_zeros_is_skipped_in_bounded_memory",
        gzip_of_an_endless_line_of_zeros_is_skipped_in_bounded_memory,
    ),
    (
        "a_huge_record_is_skipped_counted_and_the_next_one_read",
        a_huge_record_is_skipped_counted_and_the_next_one_read,
    ),
    (
        "links_to_unseen_spans_stay_within_their_budget",
        links_to_unseen_spans_stay_within_their_budget,
    ),
    (
        "distinct_thread_names_stay_within_the_track_table",
        distinct_thread_names_stay_within_the_track_table,
    ),
    (
        "distinct_span_names_stay_within_the_name_table",
        distinct_span_names_stay_within_the_name_table,
    ),
    (
        "the_straggler_verdict_of_4096_ranks_is_a_few_lines_in_bounded_memory",
        the_straggler_verdict_of_4096_ranks_is_a_few_lines_in_bounded_memory,
    ),
];

/// Runs the tests whose name contains one of the free arguments (all without any), or acts as
/// the probe.
fn goodput_keeps_only_the_spans_it_accounts_for() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lens_rank0.jsonl");
    let mut f = BufWriter::new(fs::File::create(&path).unwrap());
    // 2,000 distinct 100 KB span names (200 MB), then three iterations and their checkpoint.
    let filler = "n".repeat(100_000);
    for i in 0..2000 {
        let name = format!("{i}-{filler}");
        writeln!(f, "{}", raw_span(&name, 0x1000 + i, "{}", "[]")).unwrap();
    }
    for i in 1..=3 {
        let attrs = format!(r#"{{"megatron.iteration": {i}}}"#);
        writeln!(
            f,
            "{}",
            raw_span("megatron.train.iteration", i, &attrs, "[]")
        )
        .unwrap();
    }
    let attrs = r#"{"megatron.iteration": 3}"#;
    writeln!(
        f,
        "{}",
        raw_span("megatron.checkpoint.save", 9, attrs, "[]")
    )
    .unwrap();
    f.into_inner().unwrap().sync_all().unwrap();

    let m = run_measured(bin().args(["goodput", "--json"]).arg(&path));
    assert_bounded(&m, "goodput, 2,000 distinct 100 KB span names");
    let report: Value = serde_json::from_str(&m.stdout).unwrap_or(Value::Null);
    assert_eq!(report["iterations"]["committed"], 3, "{report}");
}

fn main() {
    support::measure::serve_as_probe();
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let selected: Vec<_> = TESTS
        .iter()
        .filter(|(name, _)| filters.is_empty() || filters.iter().any(|f| name.contains(f)))
        .collect();
    println!("\nrunning {} tests", selected.len());
    let mut failed = Vec::new();
    for (name, test) in selected {
        let started = std::time::Instant::now();
        let ok = std::panic::catch_unwind(test).is_ok();
        println!(
            "test {name} ... {} ({:.1} s)",
            if ok { "ok" } else { "FAILED" },
            started.elapsed().as_secs_f64()
        );
        if !ok {
            failed.push(*name);
        }
    }
    if !failed.is_empty() {
        println!("\nfailures: {failed:?}");
        std::process::exit(101);
    }
    println!("\ntest result: ok");
}
