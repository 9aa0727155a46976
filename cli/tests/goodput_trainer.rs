//! A Rust job gets a goodput report: two real trainer ranks (`examples/trainer.rs --megatron`,
//! Megatron-LM's span names) write console JSONL as NeMo Lens lays a job out
//! (`lens_rank<N>.jsonl`), and `nemo-lens goodput` reads it: a first run that stops three steps
//! past its checkpoint, then a requeued run that resumes from that checkpoint and appends to the
//! same files.
//!
//! Run `cargo build -p nemo-lens --all-features --examples` first (a `cargo test -p
//! nemo-lens-cli --test goodput_trainer` alone does not build the library's examples). Every
//! wait is bounded.

use nemo_lens_test_support::child::Child;
use nemo_lens_test_support::cli::bin;

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

const RANKS: u32 = 2;
/// Generous: debug-build ranks share two cores with other builds.
const DEADLINE: Duration = Duration::from_secs(120);

/// Runs both ranks of one attempt to their end (each appends to `dir/lens_rank<N>.jsonl`).
fn attempt(dir: &Path, args: &[&str]) {
    let ranks: Vec<_> = (0..RANKS)
        .map(|rank| {
            Child::example("trainer")
                .current_dir(dir)
                .env("NEMO_LENS_ENABLED", "1")
                .env("NEMO_LENS_EXPORTER", "console")
                .env("NEMO_LENS_EXPORT_STRATEGY", "all_ranks")
                .env("NEMO_LENS_SPAN_GROUPS", "goodput")
                .env("NEMO_LENS_CONSOLE_PATH", dir.join("lens_rank{rank}.jsonl"))
                .env("NEMO_LENS_METRICS_ENABLED", "0")
                .env("NEMO_LENS_RUN_ID", "goodput-trainer")
                .args(["--megatron", "--step-ms", "15", "--checkpoint-every", "4"])
                .args(["--rank", &rank.to_string()])
                .args(["--world-size", &RANKS.to_string()])
                .args(args)
                .timeout(DEADLINE)
                .spawn()
        })
        .collect();
    for rank in ranks {
        let out = rank.wait();
        assert!(
            out.status.success(),
            "trainer failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn report(dir: &Path) -> Value {
    let out = bin().args(["goodput", "--json"]).arg(dir).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "goodput failed: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn iterations(v: &Value) -> [u64; 3] {
    ["committed", "redone", "uncommitted"].map(|k| v["iterations"][k].as_u64().unwrap())
}

/// The factors are ratios, their product is the overall goodput, and GOOD is some of the time.
fn assert_sane_factors(v: &Value) {
    let f = [
        "overall_goodput",
        "sched_goodput",
        "runtime_goodput",
        "app_goodput",
    ]
    .map(|k| v[k].as_f64().unwrap_or_else(|| panic!("{k} in {v}")));
    for x in f {
        assert!(x > 0.0 && x <= 1.0, "a factor out of (0, 1]: {f:?}");
    }
    assert!((f[1] * f[2] * f[3] - f[0]).abs() < 1e-9, "{f:?}");
    let (good, total) = (
        v["good_s"].as_f64().unwrap(),
        v["total_s"].as_f64().unwrap(),
    );
    assert!(good > 0.0 && good < total, "good {good} of {total}");
}

fn path_s(v: &Value, path: &str) -> f64 {
    v["paths_s"][path].as_f64().unwrap_or(0.0)
}

#[test]
fn a_rust_job_and_its_requeue_get_lenss_goodput_report() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();

    // The first run saves at step 4 and stops after step 7: 5, 6, 7 are not committed.
    attempt(dir, &["--steps", "7"]);
    let first = report(dir);
    assert_eq!(iterations(&first), [8, 0, 6], "{first:#}");
    assert_eq!(first["gpus"], 2);
    assert_eq!(first["first_checkpoint"], 4);
    assert_sane_factors(&first);
    assert!(path_s(&first, "BAD;runtime;restart;model_init;build") > 0.0);
    assert!(path_s(&first, "BAD;runtime;restart;dataloader") > 0.0);
    assert!(
        path_s(
            &first,
            "BAD;runtime;defense;checkpoint_save;dispatch_staging"
        ) > 0.0
    );
    assert!(path_s(&first, "BAD;runtime;lost_work;uncommitted;compute") > 0.0);

    // The requeue reloads checkpoint 4 and runs to 10, saving at 8: the first run's 5, 6, 7
    // were redone; 9 and 10 are past the last checkpoint. A save up to 1 s after a run's last
    // iteration still commits that run (Lens's rule): a real requeue waits far longer than
    // this pause, which keeps the second run's save out of the first run.
    std::thread::sleep(Duration::from_millis(1500));
    attempt(dir, &["--steps", "10", "--resume-from", "4"]);
    let both = report(dir);
    assert_eq!(iterations(&both), [16, 6, 4], "{both:#}");
    assert_eq!(both["last_checkpoint"], 8);
    assert_sane_factors(&both);
    assert!(path_s(&both, "BAD;runtime;restart;model_init;checkpoint_load") > 0.0);
    assert!(path_s(&both, "BAD;runtime;lost_work;redone;compute") > 0.0);
    for rank in both["ranks"].as_array().unwrap() {
        assert_eq!(iterations(rank), [8, 3, 2], "{rank:#}");
        let runs = rank["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "{rank:#}");
        assert_eq!(runs[0]["last_checkpoint"], 4);
        assert_eq!(runs[1]["first_iteration"], 5);
        assert_eq!(runs[1]["last_checkpoint"], 8);
        assert_sane_factors(rank);
    }
    // The good time is the committed iterations at each rank's peak.
    let good: f64 = both["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| 8.0 * r["peak_iteration_s"].as_f64().unwrap())
        .sum();
    assert!((both["good_s"].as_f64().unwrap() - good).abs() < 1e-6);

    // The text report reads the same job.
    let out = bin().arg("goodput").arg(dir).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("redone"), "{text}");
}
