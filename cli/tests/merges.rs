//! What `straggler` and `summary` change while merging the input, said on stderr: steps of one
//! rank seen twice with different figures (two inputs claim the rank), and figures over 71
//! minutes clamped. One line each, counted in the JSON verdict; the verdict itself is as before.

use nemo_lens_test_support::cli as support;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde_json::{Value, json};
use support::{T0_US, bin, run_bounded, span_line, write_rank_dumps};

const DEADLINE: Duration = Duration::from_secs(120);

fn run(command: &str, files: &[PathBuf]) -> (Output, Value) {
    let out = run_bounded(bin().args([command, "--json"]).args(files), DEADLINE);
    let json: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{command}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out, json)
}

fn warnings(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("warning: "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn two_inputs_claiming_one_rank_are_reported_once() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let mut files = write_rank_dumps(&a, 4, 5, &[], &[]);
    // Another run's rank 1, slower: its five steps differ from this run's.
    let other = write_rank_dumps(&b, 4, 5, &[1], &[]);
    files.push(other[1].clone());
    let (out, verdict) = run("straggler", &files);
    assert_eq!(
        (
            &verdict["conflicting_steps"],
            &verdict["conflicting_ranks"],
            &verdict["clamped_figures"]
        ),
        (&json!(5), &json!(1), &json!(0))
    );
    assert_eq!(
        warnings(&out),
        [
            "warning: 5 step(s) of 1 rank(s) seen twice with different figures (first: rank 1, \
          step 1): two inputs claim the same rank; the larger figures are kept"
        ]
    );
    // The same dump twice is no conflict.
    let mut twice = write_rank_dumps(&a, 4, 5, &[], &[]);
    twice.push(twice[1].clone());
    let (out, verdict) = run("straggler", &twice);
    assert_eq!(verdict["conflicting_steps"], 0);
    assert!(warnings(&out).is_empty(), "{:?}", warnings(&out));
}

/// Console JSONL of `rank`: three `train_step`s of 100 ms, the first lasting `first_ms`.
fn rank_file(dir: &Path, rank: i64, first_ms: i64) -> PathBuf {
    let lines: Vec<String> = (0..3)
        .map(|step| {
            let start = T0_US + step * 10_000_000_000;
            let ms = if step == 0 { first_ms } else { 100 };
            span_line(
                "train_step",
                0xabc,
                (rank as u64 + 1) << 8 | step as u64,
                None,
                start,
                start + ms * 1000,
                json!({ "step": step }),
                json!([]),
                json!([]),
                Some(rank),
            )
        })
        .collect();
    let path = dir.join(format!("spans-rank{rank}.jsonl"));
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

#[test]
fn a_step_over_71_minutes_is_clamped_and_said() {
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = (0..3)
        .map(|r| rank_file(dir.path(), r, if r == 2 { 80 * 60_000 } else { 100 }))
        .collect();
    for command in ["straggler", "summary"] {
        let (out, json) = run(command, &files);
        let verdict = if command == "summary" {
            &json["straggler"]
        } else {
            &json
        };
        assert_eq!(verdict["clamped_figures"], 1, "{command}");
        assert_eq!(
            warnings(&out),
            [
                "warning: 1 figure(s) over 71 minutes clamped to 71 min 35 s (first: rank 2, \
              step 0)"
            ],
            "{command}"
        );
    }
}
