//! Stragglers as they happen: eight real trainer ranks (`examples/trainer.rs`) synchronised by
//! the file barrier of their `all_reduce`, one of them made slow with `--slow-rank`, real
//! signals and files, and `nemo-lens straggler` (and `summary`) on what they wrote.
//!
//! Run `cargo build -p nemo-lens --all-features --examples` first (a `cargo test -p
//! nemo-lens-cli --test straggler` alone does not build the library's examples). The slow
//! rank's compute is four times the others' (about 120 ms more per step, the limit being about
//! 6 ms), so the verdicts do not depend on the machine's load. Every wait is bounded; every
//! rank is killed on the way out, even when an assertion fails.

use nemo_lens_test_support::cli::{self as support, files_ending};
use nemo_lens_test_support::{child, wait};

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use child::{Child, Running};
use serde_json::Value;
use wait::{wait_for, wait_until};

const RANKS: u32 = 8;
/// Generous: eight debug-build ranks share two cores with other builds.
const DEADLINE: Duration = Duration::from_secs(120);
/// A step's compute: 40 ms of `forward_backward`, 20 ms of `optimizer_step`.
const STEP_MS: &str = "60";

/// Starts rank `rank` of the eight in `dir`, with the shared environment and `args`.
fn trainer(dir: &Path, rank: u32, env: &[(&str, &str)], args: &[&str]) -> Running {
    Child::example("trainer")
        .current_dir(dir)
        .env("NEMO_LENS_ENABLED", "1")
        .env("NEMO_LENS_EXPORTER", "console")
        .env("NEMO_LENS_CONSOLE_PATH", dir.join("spans-{rank}.jsonl"))
        .env("NEMO_LENS_METRICS_ENABLED", "0")
        .env("NEMO_LENS_RUN_ID", "straggler-test")
        .env("OTEL_BSP_SCHEDULE_DELAY", "20")
        .envs(env.iter().copied())
        .args([
            "--rank",
            &rank.to_string(),
            "--world-size",
            &RANKS.to_string(),
        ])
        .args(["--step-ms", STEP_MS, "--barrier-dir", "barrier"])
        .args(args)
        .timeout(DEADLINE)
        .spawn()
}

/// The eight ranks; `slow` gets four times the compute.
fn job(dir: &Path, env: &[(&str, &str)], args: &[&str], slow: Option<u32>) -> Vec<Running> {
    (0..RANKS)
        .map(|r| {
            let mut a = args.to_vec();
            let rank = r.to_string();
            if slow == Some(r) {
                a.extend(["--slow-rank", &rank, "--slow-factor", "4"]);
            }
            trainer(dir, r, env, &a)
        })
        .collect()
}

/// Waits until every rank has passed step `step` (its arrival file in the barrier directory,
/// which keeps the latest two steps of each rank).
fn wait_for_step(dir: &Path, step: u64) {
    wait_until(DEADLINE, &format!("every rank at step {step}"), || {
        let mut latest = vec![0u64; RANKS as usize];
        for entry in std::fs::read_dir(dir.join("barrier")).into_iter().flatten() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            let parse = || -> Option<(u64, usize)> {
                let (s, r) = name.strip_prefix("step")?.split_once("-rank")?;
                Some((s.parse().ok()?, r.parse().ok()?))
            };
            if let Some((s, r)) = parse().filter(|(_, r)| *r < latest.len()) {
                latest[r] = latest[r].max(s);
            }
        }
        latest.iter().all(|&s| s >= step)
    });
}

/// `SIGUSR1` to every rank; returns the eight dumps once they are written.
fn dump_all(dir: &Path, ranks: &[Running]) -> Vec<PathBuf> {
    for r in ranks {
        r.signal(libc::SIGUSR1);
    }
    wait_for(DEADLINE, "a SIGUSR1 dump from each of the 8 ranks", || {
        let found = files_ending(&dir.join("dumps"), "-signal.jsonl");
        (found.len() == RANKS as usize).then_some(found)
    })
}

fn nemo_lens(args: &[&str], files: &[PathBuf]) -> Output {
    support::bin()
        .args(args)
        .arg("--no-progress")
        .args(files)
        .output()
        .unwrap()
}

/// `straggler --json`: the exit code and the report.
fn verdict(files: &[PathBuf]) -> (Option<i32>, Value) {
    let out = nemo_lens(&["straggler", "--json"], files);
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), report)
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn dumps_of_eight_ranks_name_the_slow_one_and_what_it_costs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Recorder defaults (groups job, step, checkpoint, collective); the default export strategy:
    // one rank exports, the seven others only record.
    let env = [
        ("NEMO_LENS_FLIGHT_RECORDER", "512"),
        ("NEMO_LENS_DUMP_DIR", "dumps"),
    ];
    let ranks = job(dir, &env, &["--steps", "0"], Some(3));
    wait_for_step(dir, 12);
    let dumps = dump_all(dir, &ranks);
    drop(ranks); // killed
    assert_eq!(
        files_ending(dir, ".jsonl").len(),
        1,
        "one rank exports, the seven others only dumped"
    );

    let out = nemo_lens(&["straggler"], &dumps);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(3), "{report}");
    let lines: Vec<&str> = report.lines().collect();
    assert!(
        lines[0].starts_with("straggler: rank 3 ") && lines[0].contains("costs the job"),
        "{report}"
    );
    assert!(lines[1].starts_with("  rank 3 "), "{report}");
    assert!(lines[2].starts_with("compared 8 of 8 ranks"), "{report}");

    let (code, v) = verdict(&dumps);
    assert_eq!(code, Some(3));
    assert_eq!(v["suspects"].as_array().unwrap().len(), 1, "{v:#}");
    let s = &v["suspects"][0];
    assert_eq!(s["rank"], 3);
    assert_eq!(s["cause"], "wait");
    // The others wait about 120 ms per step for it (its 160 ms of compute against 40 ms).
    let cost = s["cost_ms"].as_f64().unwrap();
    assert!((60.0..250.0).contains(&cost), "{v:#}");
    let (slow, compared) = (
        s["slow_steps"].as_u64().unwrap(),
        s["steps_compared"].as_u64().unwrap(),
    );
    assert!(compared >= 10 && slow * 10 >= compared * 9, "{v:#}");
    assert_eq!(v["world_size"], 8);
    assert_eq!(v["collective_spans"], serde_json::json!(["all_reduce"]));

    // Any mix: one dump gzip-compressed, read alongside the plain ones.
    let gz = dir.join("rank0-dump.jsonl.gz");
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::default(),
    );
    enc.write_all(&std::fs::read(&dumps[0]).unwrap()).unwrap();
    enc.finish().unwrap();
    let mut mixed = dumps[1..].to_vec();
    mixed.push(gz);
    let (code, v) = verdict(&mixed);
    assert_eq!(code, Some(3));
    assert_eq!(v["suspects"][0]["rank"], 3);
    assert_eq!(v["ranks_compared"], 8);

    // A rank without a dump is listed.
    let without_5: Vec<PathBuf> = dumps
        .iter()
        .filter(|p| !p.to_string_lossy().contains("rank5-"))
        .cloned()
        .collect();
    let out = nemo_lens(&["straggler"], &without_5);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out).contains("no data from 1 of 8 ranks: 5"),
        "{}",
        text(&out)
    );
    let (_, v) = verdict(&without_5);
    assert_eq!(v["missing_ranks"], serde_json::json!([[5, 5]]));
    assert_eq!(v["missing_count"], 1);
    assert_eq!(v["suspects"][0]["rank"], 3);

    // `--detail`: every rank, the suspect marked.
    let out = nemo_lens(&["straggler", "--detail"], &dumps);
    let detail = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = detail
        .lines()
        .skip_while(|l| !l.starts_with("rank "))
        .skip(1)
        .collect();
    assert_eq!(rows.len(), 8, "{detail}");
    assert!(
        rows[3].starts_with("3 ") && rows[3].ends_with('*'),
        "{detail}"
    );
    assert!(
        rows.iter().filter(|r| r.ends_with('*')).count() == 1,
        "{detail}"
    );

    // `summary` keeps its tables and gives the same verdict.
    let out = nemo_lens(&["summary"], &dumps);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let summary = text(&out);
    let at = summary
        .find("Straggler verdict")
        .expect("a verdict section");
    assert!(summary[at..].contains("straggler: rank 3 "), "{summary}");
    let out = nemo_lens(&["summary", "--json"], &dumps);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["straggler"]["suspects"][0]["rank"], 3);
    assert!(report["spans"].as_array().unwrap().len() >= 8 * 2);
}

#[test]
fn eight_equal_ranks_name_nobody_from_dumps_or_console_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Every rank exports its step and collective spans, and records.
    let env = [
        ("NEMO_LENS_FLIGHT_RECORDER", "512"),
        ("NEMO_LENS_DUMP_DIR", "dumps"),
        ("NEMO_LENS_EXPORT_STRATEGY", "all_ranks"),
        ("NEMO_LENS_SPAN_GROUPS", "per_step,collective"),
    ];
    let ranks = job(dir, &env, &["--steps", "40"], None);
    wait_for_step(dir, 12);
    let dumps = dump_all(dir, &ranks);
    for r in ranks {
        let out = r.wait();
        assert!(out.status.success(), "{}", text(&out));
    }
    let spans = files_ending(dir, ".jsonl");
    assert_eq!(spans.len(), RANKS as usize);

    for (what, files) in [("dumps", &dumps), ("console files", &spans)] {
        let out = nemo_lens(&["straggler"], files);
        let report = text(&out);
        assert_eq!(out.status.code(), Some(0), "{what}: {report}");
        assert!(
            report.starts_with("no straggler: no rank waits less in collectives"),
            "{what}: {report}"
        );
        let (code, v) = verdict(files);
        assert_eq!(code, Some(0));
        assert_eq!(v["suspects"], serde_json::json!([]), "{what}: {v:#}");
        assert_eq!(v["ranks_compared"], 8, "{what}: {v:#}");
    }
}

#[test]
fn console_files_of_exporting_ranks_name_the_slow_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let env = [
        ("NEMO_LENS_EXPORT_STRATEGY", "all_ranks"),
        ("NEMO_LENS_SPAN_GROUPS", "per_step,collective"),
    ];
    for r in job(dir, &env, &["--steps", "16"], Some(6)) {
        let out = r.wait();
        assert!(out.status.success(), "{}", text(&out));
    }
    let spans = files_ending(dir, ".jsonl");
    assert_eq!(spans.len(), RANKS as usize);
    let (code, v) = verdict(&spans);
    assert_eq!(code, Some(3), "{v:#}");
    assert_eq!(v["suspects"].as_array().unwrap().len(), 1, "{v:#}");
    let s = &v["suspects"][0];
    assert_eq!(s["rank"], 6, "{v:#}");
    assert_eq!(s["cause"], "wait", "{v:#}");
    assert_eq!(
        s["span"], "forward_backward",
        "the excess is in its compute span"
    );
    assert_eq!(
        s["slow_step_numbers"].as_array().unwrap().len(),
        16,
        "{v:#}"
    );

    // `per_step` alone exports no `all_reduce`: the same files without it. The slow rank's
    // `forward_backward` still gives it away, with an estimated cost.
    let per_step: Vec<PathBuf> = spans
        .iter()
        .map(|p| {
            let kept: String = std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .filter(|l| !l.contains(r#""name": "all_reduce""#))
                .map(|l| format!("{l}\n"))
                .collect();
            let out = p.with_extension("per_step.jsonl");
            std::fs::write(&out, kept).unwrap();
            out
        })
        .collect();
    let out = nemo_lens(&["straggler"], &per_step);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(3), "{report}");
    assert!(
        report.starts_with("straggler: rank 6 ") && report.contains("costs the job about"),
        "{report}"
    );
    assert!(report.contains("`forward_backward` takes"), "{report}");
}

#[test]
fn unusable_input_exits_2() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("nothing.jsonl");
    std::fs::write(&empty, "{\"not\": \"a span\"}\n").unwrap();
    let out = nemo_lens(&["straggler"], std::slice::from_ref(&empty));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).contains("no rank has a complete step to compare"),
        "{}",
        text(&out)
    );
    let out = nemo_lens(&["straggler"], &[tmp.path().join("missing.jsonl")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("cannot open"), "{}", text(&out));
}
