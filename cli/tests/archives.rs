//! OpenTelemetry Collector archives as input: every command reads a node's archive as it reads
//! that node's per-rank console files.
//!
//! No OpenTelemetry Collector can be installed from a package registry here (the test harness's
//! collector, rotel, has no file exporter), so [`archive_lines`] writes what the collector's
//! `file` exporter (`format: json`) writes for a node: one OTLP/JSON `ExportTraceServiceRequest`
//! per line (hex ids, string nanoseconds, typed attribute values, numeric enums), several
//! resources (ranks) per request as the collector's batch processor mixes them, metric and log
//! requests between. Its spans are those of real console files: the goodput fixtures (NeMo
//! Lens's layout) and a real `--slow-rank` trainer job. [`Layout`] writes the lines plain, gzip, or
//! zstd as the exporter does with and without its `exporter.file.nativeCompression` gate; a
//! rotated archive is the same lines cut between a backup (`NAME-<time>.EXT`) and the current
//! file. Every figure is compared with the one the console files give.

use nemo_lens_test_support::child;
use nemo_lens_test_support::cli::{bin, files_ending};

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Map, Value, json};

fn goodput_job(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/goodput")
        .join(name)
}

/// An attribute value in OTLP/JSON (`AnyValue`).
fn any_value(v: &Value) -> Value {
    match v {
        Value::String(s) => json!({ "stringValue": s }),
        Value::Bool(b) => json!({ "boolValue": b }),
        Value::Number(n) if n.is_f64() => json!({ "doubleValue": n }),
        Value::Number(n) => json!({ "intValue": n.to_string() }),
        Value::Array(a) => {
            json!({ "arrayValue": { "values": a.iter().map(any_value).collect::<Vec<_>>() } })
        }
        Value::Object(o) => json!({ "kvlistValue": { "values": key_values(o) } }),
        Value::Null => json!({}),
    }
}

fn key_values(o: &Map<String, Value>) -> Vec<Value> {
    o.iter()
        .map(|(k, v)| json!({ "key": k, "value": any_value(v) }))
        .collect()
}

/// An RFC 3339 UTC time as OTLP/JSON nanoseconds (a string).
fn nanos(ts: &Value) -> String {
    let t = humantime::parse_rfc3339_weak(ts.as_str().unwrap()).unwrap();
    t.duration_since(UNIX_EPOCH).unwrap().as_nanos().to_string()
}

fn hex(id: &Value) -> String {
    id.as_str()
        .unwrap_or("")
        .trim_start_matches("0x")
        .to_owned()
}

/// A console span as an OTLP/JSON span.
fn otlp_span(s: &Value) -> Value {
    let code = match s["status"]["status_code"].as_str() {
        Some("OK") => 1,
        Some("ERROR") => 2,
        _ => 0,
    };
    let empty = Vec::new();
    let events: Vec<Value> = s["events"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|e| {
            json!({
                "timeUnixNano": nanos(&e["timestamp"]),
                "name": e["name"],
                "attributes": key_values(e["attributes"].as_object().unwrap_or(&Map::new())),
            })
        })
        .collect();
    let links: Vec<Value> = s["links"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|l| {
            json!({
                "traceId": hex(&l["context"]["trace_id"]),
                "spanId": hex(&l["context"]["span_id"]),
                "attributes": key_values(l["attributes"].as_object().unwrap_or(&Map::new())),
            })
        })
        .collect();
    json!({
        "traceId": hex(&s["context"]["trace_id"]),
        "spanId": hex(&s["context"]["span_id"]),
        "parentSpanId": hex(&s["parent_id"]),
        "flags": 1,
        "name": s["name"],
        "kind": 1,
        "startTimeUnixNano": nanos(&s["start_time"]),
        "endTimeUnixNano": nanos(&s["end_time"]),
        "attributes": key_values(s["attributes"].as_object().unwrap_or(&Map::new())),
        "events": events,
        "links": links,
        "status": { "code": code, "message": s["status"]["description"].as_str().unwrap_or("") },
    })
}

/// The spans of a console file (plain or gzip), each with its resource attributes and `extra`.
fn console_spans(path: &Path, extra: &Map<String, Value>) -> Vec<(Map<String, Value>, Value)> {
    let bytes = std::fs::read(path).unwrap();
    let text = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut flate2::read::MultiGzDecoder::new(&bytes[..]), &mut s)
            .unwrap();
        s
    } else {
        String::from_utf8(bytes).unwrap()
    };
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("context").is_some())
        .map(|v| {
            let mut attrs = v["resource"]["attributes"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            attrs.extend(extra.clone());
            (attrs, otlp_span(&v))
        })
        .collect()
}

/// A node's archive: the files' spans interleaved (one from each file in turn, as ranks export
/// at once), `per_line` spans per trace request, the consecutive spans of one resource under
/// one `resourceSpans`; a metric request and a log request after every third line.
fn archive_lines(files: &[(PathBuf, Map<String, Value>)], per_line: usize) -> Vec<String> {
    let mut queues: Vec<std::vec::IntoIter<_>> = files
        .iter()
        .map(|(p, extra)| console_spans(p, extra).into_iter())
        .collect();
    let mut mixed = Vec::new();
    loop {
        let before = mixed.len();
        for q in &mut queues {
            mixed.extend(q.next());
        }
        if mixed.len() == before {
            break;
        }
    }
    let mut lines = Vec::new();
    for (i, chunk) in mixed.chunks(per_line).enumerate() {
        let mut resources: Vec<Value> = Vec::new();
        let mut last: Option<&Map<String, Value>> = None;
        for (attrs, span) in chunk {
            if last != Some(attrs) {
                resources.push(json!({
                    "resource": { "attributes": key_values(attrs) },
                    "scopeSpans": [{ "scope": { "name": "nemo_lens" }, "spans": [] }],
                }));
                last = Some(attrs);
            }
            let spans = resources.last_mut().unwrap()["scopeSpans"][0]["spans"]
                .as_array_mut()
                .unwrap();
            spans.push(span.clone());
        }
        lines.push(json!({ "resourceSpans": resources }).to_string());
        if i % 3 == 2 {
            lines.push(r#"{"resourceMetrics":[{"resource":{"attributes":[{"key":"dl.rank","value":{"intValue":"0"}}]},"scopeMetrics":[{"metrics":[{"name":"gpu.util","gauge":{"dataPoints":[{"timeUnixNano":"1795989600000000000","asDouble":0.5}]}}]}]}]}"#.to_owned());
            lines.push(r#"{"resourceLogs":[{"resource":{"attributes":[]},"scopeLogs":[{"logRecords":[{"timeUnixNano":"1795989600000000000","severityNumber":9,"body":{"stringValue":"hi"}}]}]}]}"#.to_owned());
        }
    }
    lines
}

/// How the collector's file exporter writes its lines.
#[derive(Debug, Clone, Copy)]
enum Layout {
    /// `format: json`, no compression.
    Plain,
    /// The same, gzip-compressed afterwards.
    Gzip,
    /// `compression: zstd` with `exporter.file.nativeCompression`: with rotation, one frame per
    /// write (the request, then its newline).
    ZstdNative,
    /// `compression: zstd` without the gate: each request compressed alone after its 4-byte
    /// big-endian length, no newline.
    ZstdLengthPrefixed,
}

fn zstd(data: &[u8]) -> Vec<u8> {
    ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
}

fn encode(lines: &[String], layout: Layout) -> Vec<u8> {
    let mut out = Vec::new();
    match layout {
        Layout::Plain => lines.iter().for_each(|l| {
            out.extend(l.as_bytes());
            out.push(b'\n');
        }),
        Layout::Gzip => {
            let mut gz = flate2::write::GzEncoder::new(&mut out, flate2::Compression::fast());
            for l in lines {
                writeln!(gz, "{l}").unwrap();
            }
            gz.finish().unwrap();
        }
        Layout::ZstdNative => lines.iter().for_each(|l| {
            out.extend(zstd(l.as_bytes()));
            out.extend(zstd(b"\n"));
        }),
        Layout::ZstdLengthPrefixed => lines.iter().for_each(|l| {
            let z = zstd(l.as_bytes());
            out.extend((z.len() as u32).to_be_bytes());
            out.extend(z);
        }),
    }
    out
}

/// `goodput --json` without the file names of the ranks (an archive's ranks are read from the
/// per-rank files it was split into).
fn figures(mut report: Value) -> Value {
    for rank in report["ranks"].as_array_mut().unwrap() {
        rank.as_object_mut().unwrap().remove("file");
    }
    report
}

fn run(args: &[&str], files: &[PathBuf]) -> Output {
    bin().args(args).args(files).output().unwrap()
}

fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: exit {:?}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The console files of a goodput fixture, with the resource attributes a collector archive
/// routes by (NeMo Lens's `otel_archive_to_lens.py`): `service.instance.id` (`…-rank<N>`, and
/// `ckptworker` for a checkpoint worker) and `nvrx.role` for an ft_launcher agent.
fn fixture_files(job: &str) -> Vec<(PathBuf, Map<String, Value>)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(goodput_job(job))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with("lens_rank") || n.starts_with("lens_ftlauncher")
        })
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let mut extra = Map::new();
            if name.starts_with("lens_ftlauncher") {
                extra.insert("nvrx.role".into(), json!("ft_launcher_agent"));
            } else {
                let rank: String = name["lens_rank".len()..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                let worker = if name.contains("_ckptworker") {
                    "-ckptworker"
                } else {
                    ""
                };
                extra.insert(
                    "service.instance.id".into(),
                    json!(format!("megatron{worker}-rank{rank}")),
                );
            }
            (p, extra)
        })
        .collect()
}

/// Every layout, whole or rotated, as a file or a directory: `goodput` and `summary` give the
/// console files' figures, and each rank of the node gets its own spans.
#[test]
fn a_node_archive_in_every_layout_gives_the_console_figures() {
    let tmp = tempfile::tempdir().unwrap();
    let console = goodput_job("clean");
    let want_goodput = figures(stdout_json(&run(
        &["goodput", "--json"],
        std::slice::from_ref(&console),
    )));
    let console_files: Vec<PathBuf> = fixture_files("clean").into_iter().map(|(p, _)| p).collect();
    let want_summary = stdout_json(&run(
        &["summary", "--json", "--group-by", "rank"],
        &console_files,
    ));
    let lines = archive_lines(&fixture_files("clean"), 7);
    assert!(lines.len() > 10);

    for (i, layout) in [
        Layout::Plain,
        Layout::Gzip,
        Layout::ZstdNative,
        Layout::ZstdLengthPrefixed,
    ]
    .into_iter()
    .enumerate()
    {
        // Names that say nothing: the content decides.
        let whole = tmp.path().join(format!("node0-{i}.archive"));
        std::fs::write(&whole, encode(&lines, layout)).unwrap();
        // Rotated: a backup with the first lines, the current file with the rest.
        let dir = tmp.path().join(format!("rotated-{i}"));
        std::fs::create_dir(&dir).unwrap();
        let cut = lines.len() / 2;
        std::fs::write(
            dir.join("node-0.jsonl-2026-11-30T10-00-00.000.zst"),
            encode(&lines[..cut], layout),
        )
        .unwrap();
        std::fs::write(dir.join("node-0.jsonl.zst"), encode(&lines[cut..], layout)).unwrap();
        let backup_and_current = vec![
            dir.join("node-0.jsonl-2026-11-30T10-00-00.000.zst"),
            dir.join("node-0.jsonl.zst"),
        ];

        for input in [vec![whole.clone()], vec![dir.clone()], backup_and_current] {
            let out = run(&["goodput", "--json"], &input);
            assert!(
                out.stderr.is_empty(),
                "{layout:?} {input:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(
                figures(stdout_json(&out)),
                want_goodput,
                "{layout:?} {input:?}"
            );
            let got = stdout_json(&run(&["summary", "--json", "--group-by", "rank"], &input));
            assert_eq!(got["spans"], want_summary["spans"], "{layout:?} {input:?}");
            assert_eq!(
                got["input"]["spans"], want_summary["input"]["spans"],
                "{layout:?} {input:?}"
            );
        }
    }
    // The split: rank 0's and rank 1's spans each under their rank, the worker's apart.
    let ranks: Vec<Value> = want_summary["spans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rank"].clone())
        .collect();
    assert!(
        ranks.contains(&json!(0)) && ranks.contains(&json!(1)),
        "{ranks:?}"
    );
}

/// The requeue job: its ranks (gzip, two attempts each) and its ft_launcher agent in an archive,
/// the Slurm reckoner's console file beside it in the same directory.
#[test]
fn goodput_of_an_archive_and_a_console_file_together_matches_the_console_job() {
    let tmp = tempfile::tempdir().unwrap();
    let want = figures(stdout_json(&run(
        &["goodput", "--json"],
        &[goodput_job("requeue")],
    )));
    let lines = archive_lines(&fixture_files("requeue"), 5);
    let dir = tmp.path().join("job");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(
        dir.join("node-0.jsonl.zst"),
        encode(&lines, Layout::ZstdNative),
    )
    .unwrap();
    std::fs::copy(
        goodput_job("requeue").join("lens_slurm.jsonl"),
        dir.join("lens_slurm.jsonl"),
    )
    .unwrap();
    let out = run(&["goodput", "--json"], &[dir]);
    assert_eq!(figures(stdout_json(&out)), want);
}

/// A torn line, a line that is not JSON and a line over `--max-record-bytes` are skipped and
/// counted; the other lines give the same figures.
#[test]
fn damaged_and_huge_lines_are_skipped_and_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let mut lines = archive_lines(&fixture_files("clean"), 7);
    let want = figures(stdout_json(&run(
        &["goodput", "--json"],
        &[goodput_job("clean")],
    )));
    let torn = lines[3][..lines[3].len() / 2].to_owned();
    lines.insert(5, torn);
    lines.insert(6, "garbage from a crash".to_owned());
    // 3 MiB of one request (its spans are never read).
    let huge = format!(
        r#"{{"resourceSpans":[{{"resource":{{"attributes":[{{"key":"dl.rank","value":{{"intValue":"0"}}}}]}},"scopeSpans":[{{"spans":[{{"name":"{}","startTimeUnixNano":"1","endTimeUnixNano":"2"}}]}}]}}]}}"#,
        "x".repeat(3 << 20)
    );
    lines.insert(8, huge);
    let path = tmp.path().join("node0.jsonl.zst");
    std::fs::write(&path, encode(&lines, Layout::ZstdNative)).unwrap();

    let out = bin()
        .args(["goodput", "--json", "--max-record-bytes", "1M"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .contains("warning: skipped 2 malformed record(s) and 1 record(s) over the size limit"),
        "{stderr}"
    );
    assert!(
        stderr.contains("node0.jsonl.zst:9: request line of"),
        "{stderr}"
    );
    assert_eq!(figures(stdout_json(&out)), want);
    // The counts of the input in `--json`.
    let out = bin()
        .args(["summary", "--json", "--max-record-bytes", "1M"])
        .arg(&path)
        .output()
        .unwrap();
    let input = &stdout_json(&out)["input"];
    assert_eq!(input["skipped_records"], 2, "{input}");
    assert_eq!(input["too_long_records"], 1, "{input}");
    assert_eq!(input["spans"], 84, "{input}");

    // A zstd archive cut inside a frame: what comes before the cut is read, the cut reported.
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
    let out = run(&["summary", "--json"], &[path]);
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("1 file(s) ended early"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `perfetto` and `hang` take archives too: the same ranks and spans as the console files.
#[test]
fn perfetto_and_hang_read_archives() {
    let tmp = tempfile::tempdir().unwrap();
    let files = fixture_files("clean");
    let path = tmp.path().join("node0.jsonl");
    std::fs::write(&path, encode(&archive_lines(&files, 4), Layout::Plain)).unwrap();
    let console: Vec<PathBuf> = files.into_iter().map(|(p, _)| p).collect();

    let trace = |inputs: &[PathBuf], name: &str| -> Value {
        let out_path = tmp.path().join(name);
        let out = bin()
            .args(["perfetto", "--no-progress", "-o"])
            .arg(&out_path)
            .args(inputs)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&std::fs::read(out_path).unwrap()).unwrap()
    };
    let count = |t: &Value| {
        t["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .count()
    };
    let (want, got) = (
        trace(&console, "console.json"),
        trace(std::slice::from_ref(&path), "archive.json"),
    );
    assert!(count(&want) > 80);
    assert_eq!(count(&got), count(&want));

    let hang = |inputs: &[PathBuf]| stdout_json(&run(&["hang", "--json"], inputs));
    let (want, got) = (hang(&console), hang(&[path]));
    assert_eq!(
        got["ranks"], 2,
        "ranks 0 and 1 (the worker is rank 0): {got:#}"
    );
    assert_eq!(got["ranks"], want["ranks"]);
    assert_eq!(got["suspects"], want["suspects"]);
}

// ---- A real trainer job, exported through the collector's archive ----

const RANKS: u32 = 4;
/// Generous: debug-build ranks share two cores with other builds.
const DEADLINE: Duration = Duration::from_secs(120);

/// `straggler` names the slow rank of a real `--slow-rank` trainer job from the node's archive,
/// as it does from the ranks' console files. Run `cargo build -p nemo-lens --all-features
/// --examples` first (a `cargo test -p nemo-lens-cli` alone does not build the trainer).
#[test]
fn straggler_names_the_slow_rank_of_a_trainer_job_from_its_archive() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ranks: Vec<child::Running> = (0..RANKS)
        .map(|r| {
            let rank = r.to_string();
            let mut args = vec!["--rank", &rank, "--world-size", "4", "--steps", "12"];
            args.extend(["--step-ms", "60", "--barrier-dir", "barrier"]);
            if r == 2 {
                args.extend(["--slow-rank", "2", "--slow-factor", "4"]);
            }
            child::Child::example("trainer")
                .current_dir(dir)
                .env("NEMO_LENS_ENABLED", "1")
                .env("NEMO_LENS_EXPORTER", "console")
                .env("NEMO_LENS_CONSOLE_PATH", dir.join("spans-{rank}.jsonl"))
                .env("NEMO_LENS_METRICS_ENABLED", "0")
                .env("NEMO_LENS_EXPORT_STRATEGY", "all_ranks")
                .env("NEMO_LENS_SPAN_GROUPS", "per_step,collective")
                .env("OTEL_BSP_SCHEDULE_DELAY", "20")
                .args(args)
                .timeout(DEADLINE)
                .spawn()
        })
        .collect();
    for r in ranks {
        let out = r.wait();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let console = files_ending(dir, ".jsonl");
    assert_eq!(console.len(), RANKS as usize);
    let with_ids: Vec<(PathBuf, Map<String, Value>)> =
        console.iter().map(|p| (p.clone(), Map::new())).collect();
    let archive = dir.join("node-a.jsonl.zst");
    std::fs::write(
        &archive,
        encode(&archive_lines(&with_ids, 16), Layout::ZstdLengthPrefixed),
    )
    .unwrap();

    for input in [console, vec![archive]] {
        let out = run(&["straggler", "--json", "--no-progress"], &input);
        let v = stdout_json(&out);
        assert_eq!(out.status.code(), Some(3), "{input:?}: {v:#}");
        assert_eq!(v["suspects"].as_array().unwrap().len(), 1, "{v:#}");
        assert_eq!(v["suspects"][0]["rank"], 2, "{input:?}: {v:#}");
        assert_eq!(v["ranks_compared"], 4, "{input:?}: {v:#}");
    }
}
