//! Lost work outside `goodput`: `summary` counts the iterations redone and never committed, and
//! `perfetto` names them `megatron.train.iteration.redone` / `.uncommitted` as NeMo Lens's
//! json_to_perfetto does. The jobs are those of tests/goodput.rs (tests/fixtures/goodput); the
//! expected counts are those of Lens's `lens_analysis.iteration_status` on the same files.

use nemo_lens_test_support::cli as support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use support::bin;

fn file(job: &str, name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/goodput")
        .join(job)
        .join(name)
}

fn requeue() -> Vec<PathBuf> {
    ["lens_rank0.jsonl.gz", "lens_rank1.jsonl.gz"]
        .map(|f| file("requeue", f))
        .to_vec()
}

#[test]
fn summary_counts_redone_iterations_per_rank() {
    let out = bin()
        .arg("summary")
        .arg("--json")
        .args(requeue())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    let lost = &j["lost_work"];
    assert_eq!(lost["committed"], 80);
    assert_eq!(lost["redone"], 14);
    assert_eq!(lost["uncommitted"], 0);
    let ranks = lost["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 2);
    for (i, r) in ranks.iter().enumerate() {
        assert_eq!(r["rank"], i);
        assert_eq!((&r["committed"], &r["redone"]), (&40.into(), &7.into()));
    }

    let out = bin().arg("summary").args(requeue()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Lost work"), "{text}");
    assert!(
        text.contains("\n     all          80        14            0\n"),
        "{text}"
    );
}

#[test]
fn summary_of_spans_without_iterations_has_no_lost_work_section() {
    let out = bin()
        .arg("summary")
        .arg("--json")
        .arg(file("requeue", "lens_slurm.jsonl"))
        .output()
        .unwrap();
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(j.get("lost_work").is_none(), "{j}");
}

fn iteration_names(inputs: &[PathBuf]) -> BTreeMap<String, u64> {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.json");
    let out = bin()
        .arg("perfetto")
        .args(inputs)
        .arg("-o")
        .arg(&trace)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t: Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let mut names = BTreeMap::new();
    for e in t["traceEvents"].as_array().unwrap() {
        if let Some(n) = e["name"].as_str()
            && n.starts_with("megatron.train.iteration")
            && e["ph"] == "X"
        {
            *names.entry(n.to_owned()).or_default() += 1;
        }
    }
    names
}

#[test]
fn perfetto_names_lost_iterations_as_lens_does() {
    let mut inputs = requeue();
    inputs.push(file("crash", "lens_rank1.jsonl.gz"));
    let names = iteration_names(&inputs);
    // requeue: 80 committed + 14 redone; crash rank 1 (torn gzip): 24 committed + 1 uncommitted.
    assert_eq!(names["megatron.train.iteration"], 104);
    assert_eq!(names["megatron.train.iteration.redone"], 14);
    assert_eq!(names["megatron.train.iteration.uncommitted"], 1);
    // Not an iteration span: the report keeps its name.
    assert_eq!(names["megatron.train.iteration_report"], 23);
}

#[test]
fn perfetto_of_a_clean_run_renames_nothing() {
    let names = iteration_names(&[file("clean", "lens_rank0.jsonl")]);
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(names["megatron.train.iteration"], 20);
}
