//! Inputs that never end and thread counts the system cannot give: a FIFO nobody writes,
//! `/dev/zero`, process substitution (which must keep working), `--jobs 100000` under an
//! address-space limit. Every run is a real `nemo-lens` process, bounded by a deadline.

use nemo_lens_test_support::cli as support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use support::{bin, run_bounded, write_job, write_rank_dumps};

/// Far above the two seconds a FIFO gets for its writer; a hang ends the test.
const DEADLINE: Duration = Duration::from_secs(120);

/// The commands that read input files, each with its arguments before the files.
fn commands(out: &Path) -> Vec<Vec<String>> {
    let out = out.to_str().unwrap().to_owned();
    vec![
        vec!["summary".into()],
        vec!["straggler".into()],
        vec!["perfetto".into(), "-o".into(), out],
        vec!["hang".into()],
    ]
}

fn run(args: &[String], files: &[PathBuf]) -> Output {
    run_bounded(bin().args(args).args(files), DEADLINE)
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {path:?}");
}

#[test]
fn a_fifo_without_a_writer_and_dev_zero_are_refused_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let good = write_rank_dumps(dir.path(), 2, 4, &[], &[]);
    let fifo = dir.path().join("nobody-writes.jsonl");
    mkfifo(&fifo);
    for args in commands(&dir.path().join("trace.json")) {
        for (input, why) in [
            (&fifo, "a FIFO without a writer"),
            (&PathBuf::from("/dev/zero"), "a character device"),
        ] {
            let mut files = good.clone();
            files.push(input.clone());
            let out = run(&args, &files);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?} {input:?}: {stderr}");
            let line = format!("refused {}: {why}", input.display());
            assert!(
                stderr
                    .lines()
                    .any(|l| l.starts_with("error: ") && l.contains(&line)),
                "{args:?}: expected {line:?} in {stderr}"
            );
        }
    }
}

#[test]
fn a_fifo_whose_writer_comes_late_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let dumps = write_rank_dumps(dir.path(), 2, 4, &[], &[]);
    let fifo = dir.path().join("rank1.jsonl");
    mkfifo(&fifo);
    let text = std::fs::read(&dumps[1]).unwrap();
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            // Blocks until the reader has the FIFO open.
            std::fs::write(&fifo, text).unwrap();
        })
    };
    let out = run(
        &["straggler".into(), "--json".into()],
        &[dumps[0].clone(), fifo],
    );
    writer.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let verdict: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(verdict["ranks_compared"], 2, "{verdict}");
}

#[test]
fn process_substitution_keeps_working() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_job(dir.path());
    let trace = dir.path().join("trace.json");
    // The same job through files, then through `<(cat file)` pipes (and one empty pipe).
    let direct = run(&["summary".into(), "--json".into()], &files);
    assert_eq!(direct.status.code(), Some(0));
    let substituted: Vec<String> = files
        .iter()
        .map(|f| format!("<(cat '{}')", f.display()))
        .collect();
    for (args, check) in [
        ("summary --json", true),
        ("straggler --json", false),
        (&*format!("perfetto -o '{}'", trace.display()), false),
    ] {
        let script = format!(
            "exec '{}' {args} {} <(true)",
            env!("CARGO_BIN_EXE_nemo-lens"),
            substituted.join(" ")
        );
        let out = run_bounded(Command::new("bash").args(["-c", &script]), DEADLINE);
        let stderr = String::from_utf8_lossy(&out.stderr);
        // straggler names rank 2 (exit 3).
        assert!(
            matches!(out.status.code(), Some(0 | 3)),
            "{args}: {:?} {stderr}",
            out.status
        );
        if check {
            // Rank 4 has its rank only in its file name, which a pipe does not carry.
            let rows = |out: &Output| {
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                let mut rows: Vec<serde_json::Value> = v["spans"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|r| r["rank"].as_i64().is_some_and(|r| r < 4))
                    .cloned()
                    .collect();
                rows.sort_by_key(|r| r.to_string());
                rows
            };
            let (a, b) = (rows(&direct), rows(&out));
            assert!(a.len() >= 8, "{a:?}");
            assert_eq!(a, b, "{args}");
        }
    }
    let trace: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    assert!(trace["traceEvents"].as_array().unwrap().len() > 100);
}

/// `nemo-lens ARGS` under an address-space limit of `kib` KiB (bash's `ulimit -v`), in `dir`.
fn limited(dir: &Path, kib: u64, args: &[String]) -> Output {
    let mut cmd = Command::new("bash");
    cmd.current_dir(dir)
        .arg("-c")
        .arg(format!("ulimit -v {kib} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_nemo-lens"))
        .args(args);
    run_bounded(&mut cmd, DEADLINE)
}

#[test]
fn jobs_beyond_what_helps_are_clamped_under_a_1_gib_address_space() {
    let dir = tempfile::tempdir().unwrap();
    let dumps = dir.path().join("d");
    std::fs::create_dir(&dumps).unwrap();
    let written = write_rank_dumps(&dumps, 10_000, 3, &[], &[]);
    let mut args: Vec<String> = ["straggler", "--json", "--jobs", "100000"]
        .map(String::from)
        .to_vec();
    args.extend(written.iter().map(|p| {
        p.strip_prefix(dir.path())
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }));
    let out = limited(dir.path(), 1 << 20, &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{:?}: {stderr}", out.status);
    let verdict: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(verdict["ranks_compared"], 10_000);
}

#[test]
fn a_thread_the_system_cannot_start_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let written = write_rank_dumps(dir.path(), 2, 3, &[], &[]);
    // Each reading thread asks for a 600 MiB stack: the second does not fit in 1 GiB while
    // the first is still reading (its pipe's writer waits 3 s before writing).
    let inputs: Vec<String> = written
        .iter()
        .map(|p| format!("<(sleep 3; cat '{}')", p.display()))
        .collect();
    let script = format!(
        "ulimit -v {} && exec '{}' summary --jobs 2 {}",
        1 << 20,
        env!("CARGO_BIN_EXE_nemo-lens"),
        inputs.join(" ")
    );
    let out = run_bounded(
        Command::new("bash")
            .env("RUST_MIN_STACK", (600u64 << 20).to_string())
            .args(["-c", &script]),
        DEADLINE,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{:?}: {stderr}", out.status);
    assert!(
        stderr.contains("error: cannot start reading thread 2 of 2 (--jobs)"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
