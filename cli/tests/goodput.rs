//! `nemo-lens goodput` on three Megatron-like jobs (tests/fixtures/goodput, written by its
//! make-goodput-fixtures.py in NeMo Lens's console JSONL layout):
//! * `clean`: two ranks and a checkpoint worker, every iteration committed;
//! * `requeue`: the reckoner's file with two `slurm.job` attempts, an ft_launcher file, two gzip
//!   ranks (one member per attempt) whose first attempt dies seven iterations past its checkpoint;
//! * `crash`: two ranks that die past their last checkpoint; rank 0's file has a damaged record
//!   (the rest is not read), rank 1's is a gzip stream without its trailer, torn inside a record.
//!
//! The expected figures, `expected-report*.txt` and `expected.folded` are those of NeMo Lens's
//! tools/goodput_report.py (NVIDIA-NeMo/Lens a9d2153) on these files; the iteration counts are
//! those of its `lens_analysis.iteration_status`, summed over the trainer files.

use nemo_lens_test_support::cli as support;

use std::path::{Path, PathBuf};

use serde_json::Value;
use support::bin;

fn job(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/goodput")
        .join(name)
}

fn goodput(args: &[&str]) -> (String, String) {
    let out = bin().arg("goodput").args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    (String::from_utf8(out.stdout).unwrap(), stderr)
}

fn json_of(dir: &str) -> Value {
    let (stdout, _) = goodput(&["--json", job(dir).to_str().unwrap()]);
    serde_json::from_str(&stdout).unwrap()
}

/// Lens's figures of a job: overall, scheduling, runtime, application goodput; committed,
/// redone, uncommitted iterations.
struct Figures {
    factors: [f64; 4],
    iterations: [u64; 3],
}

fn assert_figures(dir: &str, want: Figures) {
    let j = json_of(dir);
    let got = [
        "overall_goodput",
        "sched_goodput",
        "runtime_goodput",
        "app_goodput",
    ]
    .map(|k| j[k].as_f64().unwrap());
    for (k, (g, w)) in got.iter().zip(want.factors).enumerate() {
        assert!(
            (g - w).abs() < 5e-5,
            "{dir}: factor {k} is {g:.6}, Lens's is {w:.6}"
        );
    }
    assert!((got[1] * got[2] * got[3] - got[0]).abs() < 1e-12);
    let its = &j["iterations"];
    let got = ["committed", "redone", "uncommitted"].map(|k| its[k].as_u64().unwrap());
    assert_eq!(got, want.iterations, "{dir}: iterations");
    let per_rank: u64 = j["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["iterations"]["committed"].as_u64().unwrap())
        .sum();
    assert_eq!(per_rank, want.iterations[0]);
}

#[test]
fn clean_run_figures_are_lenss() {
    assert_figures(
        "clean",
        Figures {
            factors: [0.340051, 0.966104, 0.408759, 0.861098],
            iterations: [40, 0, 0],
        },
    );
}

#[test]
fn requeue_figures_are_lenss_with_the_tail_of_the_first_attempt_redone() {
    assert_figures(
        "requeue",
        Figures {
            factors: [0.275967, 0.820690, 0.388855, 0.864751],
            iterations: [80, 14, 0],
        },
    );
    let j = json_of("requeue");
    // Per rank: attempt 0 ran iterations 1-17 and saved 10; attempt 1 resumed at 11.
    let runs = j["ranks"][0]["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["first_iteration"], 1);
    assert_eq!(runs[0]["last_iteration"], 17);
    assert_eq!(runs[0]["last_checkpoint"], 10);
    assert_eq!(runs[0]["iterations"]["redone"], 7);
    assert_eq!(runs[1]["first_iteration"], 11);
    assert_eq!(runs[1]["iterations"]["committed"], 30);
    assert!(runs[0]["paths_s"]["BAD;runtime;lost_work;redone;compute"].as_f64() > Some(13.0));
    // The reckoner's envelope (0-290 s) is every rank's total, its gaps scheduling time.
    assert_eq!(j["ranks"][0]["denominator_s"], 290.0);
    assert_eq!(j["paths_s"]["BAD;scheduling;requeue_gap"], 80.0);
}

#[test]
fn crash_figures_are_lenss_and_the_cut_files_are_reported() {
    assert_figures(
        "crash",
        Figures {
            factors: [0.338513, 0.971855, 0.424150, 0.821210],
            iterations: [36, 0, 13],
        },
    );
    let (_, stderr) = goodput(&[job("crash").to_str().unwrap()]);
    assert!(
        stderr.contains("lens_rank0.jsonl: not read past its first damaged record"),
        "{stderr}"
    );
    assert!(stderr.contains("lens_rank0.jsonl:44:"), "{stderr}");
    assert!(
        stderr.contains("lens_rank1.jsonl.gz: not read past its first damaged record"),
        "{stderr}"
    );
}

/// The text report and the folded stacks are Lens's, line for line; only the float error the
/// proof line prints (of the order of 1e-16) depends on the order of the additions.
#[test]
fn text_report_and_folded_stacks_are_lenss() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["clean", "requeue", "crash"] {
        let fold = dir.path().join(format!("{name}.folded"));
        let (stdout, _) = goodput(&[
            job(name).to_str().unwrap(),
            "--fold",
            fold.to_str().unwrap(),
        ]);
        let want = std::fs::read_to_string(job(name).join("expected-report.txt")).unwrap();
        let mask = |s: &str| -> String {
            s.replace(&fold.display().to_string(), "FOLD")
                .lines()
                .map(|l| l.split("[proof:").next().unwrap_or(l).to_owned())
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(mask(&stdout), mask(&want), "{name}: text report");
        let folded = std::fs::read_to_string(&fold).unwrap();
        let want = std::fs::read_to_string(job(name).join("expected.folded")).unwrap();
        assert_eq!(folded, want, "{name}: folded stacks");
    }
}

#[test]
fn files_can_be_named_one_by_one_and_non_trainer_names_are_left_out() {
    let clean = job("clean");
    let (stdout, _) = goodput(&[
        "--json",
        clean.join("lens_rank0.jsonl").to_str().unwrap(),
        clean.join("lens_rank0_ckptworker.jsonl").to_str().unwrap(),
        job("crash").join("expected.folded").to_str().unwrap(),
    ]);
    let j: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(j["gpus"], 1);
    assert_eq!(j["iterations"]["committed"], 20);
    assert_eq!(j["worker_write_s"], 17.0);
}

#[test]
fn no_trainer_file_is_an_error_naming_the_layout() {
    let out = bin()
        .arg("goodput")
        .arg(job("requeue").join("lens_slurm.jsonl"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no trainer span files found"), "{stderr}");
}

/// A job directory named with a Slurm job id takes its allocation from `sacct` (here a stand-in
/// on PATH that answers 400 s), as Lens does: the factors are Lens's with the same `sacct`.
#[cfg(unix)]
#[test]
fn a_job_id_in_the_directory_name_asks_sacct_for_the_allocation() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let bin_dir = tmp.path().join("bin");
    let run = tmp.path().join("run_4471093_gpt");
    std::fs::create_dir_all(&bin_dir).unwrap();
    std::fs::create_dir_all(&run).unwrap();
    for f in ["lens_rank0.jsonl", "lens_rank1.jsonl"] {
        std::fs::copy(job("clean").join(f), run.join(f)).unwrap();
    }
    let args = tmp.path().join("args");
    let sacct = bin_dir.join("sacct");
    std::fs::write(
        &sacct,
        format!(
            "#!/bin/sh\necho \"$*\" > '{}'\nprintf '400\\n400\\n'\n",
            args.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&sacct, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = bin()
        .env("PATH", path)
        .args(["goodput", "--json"])
        .arg(format!("{}/", run.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&args).unwrap().trim(),
        "-j 4471093 --format=ElapsedRaw --noheader -P"
    );
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        j["denominator"],
        "SLURM allocation (sacct job 4471093, ElapsedRaw=400s/rank)"
    );
    assert_eq!(j["ranks"][0]["denominator_s"], 400.0);
    // Lens's figures with the same stand-in sacct.
    let want = [0.100319, 0.990000, 0.117678, 0.861098];
    let got = [
        "overall_goodput",
        "sched_goodput",
        "runtime_goodput",
        "app_goodput",
    ]
    .map(|k| j[k].as_f64().unwrap());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 5e-5, "{got:?} != {want:?}");
    }
}

/// `--sort size` and `--sort alpha` order the flame's children as Lens's `--sort` does.
#[test]
fn sort_orders_are_lenss() {
    for sort in ["size", "alpha"] {
        let dir = job("requeue");
        let (stdout, _) = goodput(&[dir.to_str().unwrap(), "--sort", sort]);
        let want =
            std::fs::read_to_string(dir.join(format!("expected-report-sort-{sort}.txt"))).unwrap();
        let mask = |s: &str| -> Vec<String> {
            s.lines()
                .map(|l| l.split("[proof:").next().unwrap_or(l).to_owned())
                .collect()
        };
        assert_eq!(mask(&stdout), mask(&want), "--sort {sort}");
    }
}

/// `--html`: one self-contained page whose summary line, flame tree and report are those of the
/// job's figures (the tree's leaves are the `--json` paths, to the millisecond, as Lens's page
/// rounds them).
#[test]
fn html_page_holds_the_jobs_flame_and_summary() {
    let tmp = tempfile::tempdir().unwrap();
    let page_path = tmp.path().join("flame.html");
    let dir = job("requeue");
    let (stdout, _) = goodput(&[dir.to_str().unwrap(), "--html", page_path.to_str().unwrap()]);
    assert!(
        stdout.contains(&format!("interactive flame -> {}", page_path.display())),
        "{stdout}"
    );
    let page = std::fs::read_to_string(&page_path).unwrap();
    let j = json_of("requeue");

    // Self-contained: nothing fetched.
    for fetch in ["src=", "href=", "http:", "https:", "@import", "url("] {
        assert!(!page.contains(fetch), "the page fetches something: {fetch}");
    }
    let summary = page
        .split("<p id=\"summary\">")
        .nth(1)
        .and_then(|s| s.split("</p>").next())
        .unwrap()
        .replace("&gt;", ">");
    let pct = |k: &str| format!("{:.1}%", 100.0 * j[k].as_f64().unwrap());
    let want = format!(
        "OVERALL goodput {}  =  sched {} x runtime {} x app {}   |   {:.2} gpu-h over {} GPUs   |   {}",
        pct("overall_goodput"),
        pct("sched_goodput"),
        pct("runtime_goodput"),
        pct("app_goodput"),
        j["total_s"].as_f64().unwrap() / 3600.0,
        j["gpus"],
        j["denominator"].as_str().unwrap(),
    );
    assert_eq!(summary, want);
    // The text report, for a browser without scripts.
    assert!(page.contains(&format!("=== GOODPUT FLAME === {} GPUs", j["gpus"])));

    let data = page
        .split("<script type=\"application/json\" id=\"data\">")
        .nth(1)
        .and_then(|s| s.split("</script>").next())
        .unwrap();
    let data: Value = serde_json::from_str(data).unwrap();
    assert_eq!(data["sort"], "fixed");
    let tree = &data["tree"];
    assert_eq!(tree["name"], "TOTAL");
    let total = j["total_s"].as_f64().unwrap();
    assert!((tree["value"].as_f64().unwrap() - total).abs() <= 5e-4);
    // Fixed order: GOOD before BAD.
    let top: Vec<&str> = tree["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(top, ["GOOD", "BAD"]);
    fn leaves(node: &Value, out: &mut Vec<(String, f64)>) {
        let kids = node["children"].as_array().unwrap();
        if kids.is_empty() {
            out.push((
                node["path"].as_str().unwrap().to_owned(),
                node["value"].as_f64().unwrap(),
            ));
        }
        for k in kids {
            leaves(k, out);
        }
    }
    let mut got = Vec::new();
    leaves(tree, &mut got);
    let paths = j["paths_s"].as_object().unwrap();
    assert_eq!(got.len(), paths.len());
    for (path, value) in got {
        let want = paths[&path].as_f64().unwrap();
        assert!((value - want).abs() <= 5e-4, "{path}: {value} != {want}");
    }
}
