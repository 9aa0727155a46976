//! Hangs as they happen: real trainer processes (the library's `examples/trainer.rs`), real
//! signals, real files, and the `nemo-lens hang` command over the dumps.
//!
//! Run `cargo build -p nemo-lens --all-features --examples` first (a `cargo test -p
//! nemo-lens-cli --test hang` alone does not build the library's examples). Every wait polls
//! with a bounded deadline; every child is killed on the way out, even when an assertion fails.

use nemo_lens_test_support::cli::{self as support, files_ending};
use nemo_lens_test_support::{child, wait};

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use child::{Child, Running};
use serde_json::Value;

/// Generous: eight debug-build ranks share two cores with other builds.
const DEADLINE: Duration = Duration::from_secs(120);

/// Polls `f` until it returns `Some`, panicking with `what` after [`DEADLINE`].
fn poll<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    wait::wait_for(DEADLINE, what, f)
}

fn trainer(dir: &Path, rank: u32, env: &[(&str, &str)], args: &[&str]) -> Child {
    Child::example("trainer")
        .current_dir(dir)
        .env("NEMO_LENS_ENABLED", "1")
        .env("NEMO_LENS_EXPORTER", "console")
        .env("NEMO_LENS_CONSOLE_PATH", dir.join("spans-{rank}.jsonl"))
        .env("NEMO_LENS_METRICS_ENABLED", "0")
        .env("OTEL_BSP_SCHEDULE_DELAY", "20")
        .envs(env.iter().copied())
        .args(["--rank", &rank.to_string()])
        .args(args)
        .timeout(DEADLINE)
}

fn nemo_lens(args: &[&str], files: &[PathBuf]) -> Output {
    support::bin().args(args).args(files).output().unwrap()
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        // A line still being written by a running process is skipped.
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn count(path: &Path, name: &str) -> usize {
    lines(path).iter().filter(|l| l["name"] == name).count()
}

#[test]
fn eight_ranks_rank_5_hangs_the_watchdog_fires_everywhere_and_hang_names_rank_5() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let dumps = dir.join("dumps");
    let env = [
        ("NEMO_LENS_FLIGHT_RECORDER", "256"),
        (
            "NEMO_LENS_FLIGHT_RECORDER_GROUPS",
            "job,step,forward_backward,collective",
        ),
        // Long enough that a rank descheduled on a loaded machine (or starting late, while the
        // others wait for it in the first barrier) does not look hung.
        ("NEMO_LENS_HANG_TIMEOUT", "5"),
        ("NEMO_LENS_DUMP_DIR", "dumps"),
        ("NEMO_LENS_RUN_ID", "hang-test"),
    ];
    let barrier = dir.join("barrier");
    let ranks: Vec<Running> = (0..8)
        .map(|r| {
            let mut args = vec![
                "--world-size",
                "8",
                "--steps",
                "0",
                "--step-ms",
                "3",
                "--barrier-dir",
                barrier.to_str().unwrap(),
            ];
            if r == 5 {
                args.extend(["--hang-at", "4"]);
            }
            trainer(dir, r, &env, &args).spawn()
        })
        .collect();
    // The watchdog fires on every rank, the stuck one and the seven waiting for it.
    let watchdog = poll("a watchdog dump from each of the 8 ranks", || {
        let found = files_ending(&dumps, "-watchdog.jsonl");
        (found.len() == 8).then_some(found)
    });
    for (r, rank) in ranks.iter().enumerate() {
        let warning = poll("the watchdog's warning", || {
            let e = rank.stderr();
            e.contains("WARNING: no span of groups").then_some(e)
        });
        assert!(warning.contains("NEMO_LENS_HANG_TIMEOUT"), "{warning}");
        let innermost = if r == 5 {
            "`forward_backward`"
        } else {
            "`all_reduce`"
        };
        assert!(warning.contains(innermost), "rank {r}: {warning}");
        assert!(
            watchdog
                .iter()
                .any(|p| p.to_string_lossy().contains(&format!("rank{r}-")))
        );
    }
    drop(ranks); // killed: SIGKILL writes no truncation dump
    // Only the last rank exports (`single_rank`); the seven others exported nothing but dumped.
    assert!(dir.join("spans-7.jsonl").exists());
    for r in 0..7 {
        assert!(
            !dir.join(format!("spans-{r}.jsonl")).exists(),
            "rank {r} exports nothing"
        );
    }

    let out = nemo_lens(&["hang"], &watchdog);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("8 rank(s) dumped (world size 8)"), "{text}");
    assert!(
        text.contains("7 ranks in `all_reduce` at step 4") && text.contains("(ranks 0-4,6-7)"),
        "{text}"
    );
    assert!(
        text.contains("rank 5 in `forward_backward` at step 4"),
        "{text}"
    );
    assert!(text.contains("suspect rank(s): 5"), "{text}");

    let out = nemo_lens(&["hang", "--json"], &watchdog);
    assert_eq!(out.status.code(), Some(3));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["suspects"], serde_json::json!([5]));
    assert_eq!(
        report["groups"][0]["ranks"],
        serde_json::json!([0, 1, 2, 3, 4, 6, 7])
    );
    assert_eq!(report["outliers"][0]["rank"], 5);
    assert_eq!(report["outliers"][0]["why"], "different span");
    assert_eq!(report["outliers"][0]["state"]["span"], "forward_backward");
    assert!(report["outliers"][0]["state"]["open_s"].as_f64().unwrap() >= 4.5);

    // A rank that wrote no dump is named too (the world size comes from the dumps).
    let without_3: Vec<PathBuf> = watchdog
        .iter()
        .filter(|p| !p.to_string_lossy().contains("rank3-"))
        .cloned()
        .collect();
    let out = nemo_lens(&["hang", "--json"], &without_3);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["suspects"], serde_json::json!([3, 5]));
    assert_eq!(report["outliers"][0]["why"], "no dump");

    // Ranks that agree: no suspect, exit 0.
    let agreeing: Vec<PathBuf> = watchdog
        .iter()
        .filter(|p| {
            ["rank0-", "rank1-"]
                .iter()
                .any(|r| p.to_string_lossy().contains(r))
        })
        .cloned()
        .collect();
    let out = nemo_lens(&["hang", "--world-size", "2"], &agreeing);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("2 ranks in `all_reduce` at step 4") && text.contains("no suspect"),
        "{text}"
    );

    // Dumps are console JSONL: the other tools read them.
    let out = nemo_lens(&["summary", "--no-progress"], &watchdog);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("all_reduce"));
    let trace = dir.join("trace.json");
    let out = nemo_lens(
        &["perfetto", "--no-progress", "-o", trace.to_str().unwrap()],
        &watchdog,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::fs::read_to_string(&trace)
            .unwrap()
            .contains("forward_backward")
    );
}

#[test]
fn sigusr1_writes_a_dump_and_training_goes_on_and_sigterm_dumps_the_open_spans() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let spans = dir.join("spans-0.jsonl");
    let env = [
        ("NEMO_LENS_FLIGHT_RECORDER", "64"),
        ("NEMO_LENS_DUMP_DIR", "dumps"),
        ("NEMO_LENS_SPAN_GROUPS", "per_step"),
    ];
    let trainer = trainer(dir, 0, &env, &["--steps", "0", "--step-ms", "5"]).spawn();
    poll("the first steps", || {
        (count(&spans, "train_step") >= 2).then_some(())
    });
    trainer.signal(libc::SIGUSR1);
    let dump = poll("the SIGUSR1 dump", || {
        files_ending(&dir.join("dumps"), "-signal.jsonl").pop()
    });
    let at_dump = count(&spans, "train_step");
    poll("more steps after the dump", || {
        (count(&spans, "train_step") >= at_dump + 5).then_some(())
    });
    let d = lines(&dump);
    let open: Vec<&Value> = d
        .iter()
        .filter(|l| l["attributes"]["nemo.span.open"] == true)
        .collect();
    assert!(
        open.iter().any(|l| l["name"] == "train"),
        "the job span is open: {d:?}"
    );
    assert!(
        d.iter()
            .any(|l| l["name"] == "train_step" && l["attributes"].get("nemo.span.open").is_none())
    );
    assert!(trainer.stderr().contains("SIGUSR1: flight recorder dump"));

    // Still training after the dump: it dies of the SIGTERM below, not before.
    trainer.signal(libc::SIGTERM);
    let status = trainer.wait().status;
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGTERM));
    let dump = files_ending(&dir.join("dumps"), "-sigterm.jsonl");
    assert_eq!(dump.len(), 1, "a truncation dump");
    assert!(
        lines(&dump[0])
            .iter()
            .any(|l| l["name"] == "train" && l["attributes"]["nemo.span.open"] == true)
    );
}

/// Waits until every span that ended before now is in the trainer's file. A step that started
/// before now ended before the next checkpoint started (one thread), and spans are written in
/// the order they end: once a checkpoint that started after now is in the file, so is every
/// span that ended before it.
fn settle(spans: &Path) {
    let now = std::time::SystemTime::now();
    poll("a checkpoint started after now", || {
        lines(spans)
            .iter()
            .filter(|l| l["name"] == "save_checkpoint")
            .filter_map(|l| humantime::parse_rfc3339(l["start_time"].as_str()?).ok())
            .any(|t| t > now)
            .then_some(())
    });
}

#[test]
fn a_control_file_switch_turns_per_step_spans_on_and_back_off_in_a_running_trainer() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let spans = dir.join("spans-0.jsonl");
    let ctl = dir.join("control");
    std::fs::write(&ctl, "per_step 3\n").unwrap();
    let env = [
        ("NEMO_LENS_SPAN_GROUPS", "default"),
        ("NEMO_LENS_CONTROL_FILE", ctl.to_str().unwrap()),
    ];
    let child = trainer(
        dir,
        0,
        &env,
        &["--steps", "0", "--step-ms", "6", "--checkpoint-every", "1"],
    )
    .spawn();
    let checkpoints = || count(&spans, "save_checkpoint");
    poll("checkpoints (the default groups)", || {
        (checkpoints() >= 3).then_some(())
    });
    assert_eq!(count(&spans, "train_step"), 0, "per-step spans are off");

    // `per_step 3`: three steps in detail, then back to `default` by itself.
    child.signal(libc::SIGUSR2);
    poll("three per-step spans", || {
        (count(&spans, "train_step") >= 3).then_some(())
    });
    poll("the switch back", || {
        child
            .stderr()
            .contains("back to the configured")
            .then_some(())
    });
    settle(&spans);
    let captured = count(&spans, "train_step");
    // The three counted steps, plus those that started before the recorder's thread had switched
    // back (one at most on a quiet machine; more when that thread waits for a core).
    assert!(captured >= 3, "{captured} train_step spans");
    let after = checkpoints();
    poll("ten more checkpoints", || {
        (checkpoints() >= after + 10).then_some(())
    });
    assert_eq!(
        count(&spans, "train_step"),
        captured,
        "per-step spans are off again"
    );
    // Each captured step's pass (a step in flight at a switch may have only one of the two).
    let passes = count(&spans, "forward_backward");
    assert!(
        passes.abs_diff(captured) <= 1,
        "{passes} passes, {captured} steps"
    );

    // A switch without a count holds until the file is emptied.
    std::fs::write(&ctl, "default, step\n").unwrap();
    child.signal(libc::SIGUSR2);
    poll("steps under `default,step`", || {
        (count(&spans, "train_step") >= captured + 5).then_some(())
    });
    assert_eq!(
        count(&spans, "forward_backward"),
        passes,
        "only `step` was added"
    );
    std::fs::write(&ctl, "").unwrap();
    child.signal(libc::SIGUSR2);
    poll("the second switch back", || {
        (child.stderr().matches("back to the configured").count() == 2).then_some(())
    });
    settle(&spans);
    let off = count(&spans, "train_step");
    let after = checkpoints();
    poll("ten more checkpoints", || {
        (checkpoints() >= after + 10).then_some(())
    });
    assert!(
        count(&spans, "train_step") == off,
        "per-step spans are off again"
    );

    // A bad spec changes nothing and says why.
    std::fs::write(&ctl, "warp 5\n").unwrap();
    child.signal(libc::SIGUSR2);
    poll("the error", || {
        child
            .stderr()
            .contains("Unknown span group or preset: 'warp'")
            .then_some(())
    });
    assert!(child.stderr().contains("NEMO_LENS_CONTROL_FILE"));
}

#[test]
fn a_fatal_panic_dumps_the_open_spans() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let env = [
        ("NEMO_LENS_FLIGHT_RECORDER", "64"),
        ("NEMO_LENS_DUMP_DIR", "dumps"),
    ];
    let out = trainer(
        dir,
        0,
        &env,
        &["--steps", "5", "--step-ms", "1", "--panic-at", "3"],
    )
    .run();
    assert!(!out.status.success());
    let dumps = files_ending(&dir.join("dumps"), "-panic.jsonl");
    assert_eq!(dumps.len(), 1, "{}", String::from_utf8_lossy(&out.stderr));
    let d = lines(&dumps[0]);
    let open: Vec<(&str, &Value)> = d
        .iter()
        .filter(|l| l["attributes"]["nemo.span.open"] == true)
        .map(|l| (l["name"].as_str().unwrap(), &l["attributes"]))
        .collect();
    assert_eq!(
        open.iter().map(|o| o.0).collect::<Vec<_>>(),
        ["train", "train_step"]
    );
    assert_eq!(open[1].1["step"], 3, "the step that panicked");
    let closed = d.iter().filter(|l| l["name"] == "train_step").count() - 1;
    assert_eq!(closed, 2, "steps 1 and 2 closed before the panic");
}
