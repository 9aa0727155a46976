//! The figures of the job and their three forms: the text report and flame tree (the layout of
//! NeMo Lens's goodput_report.py), folded stacks, and JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use super::rank::{Accounting, Paths};

/// Seconds per GPU-hour.
const H: f64 = 3600.0;

/// Order of a node's children.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Sort {
    /// Lens's fixed order (good, then bad; scheduling, runtime, app, unobserved; …), then size.
    Fixed,
    /// Largest first.
    Size,
    /// By name.
    Alpha,
}

/// The three factors and their product, from seconds per path.
#[derive(Debug, Clone, Copy, Default)]
pub struct Factors {
    /// Sum of every path.
    pub total_s: f64,
    /// `GOOD`.
    pub good_s: f64,
    /// `BAD;scheduling…`.
    pub sched_s: f64,
    /// `BAD;runtime…` and `BAD;unobserved…`.
    pub runtime_s: f64,
    /// `BAD;app…`.
    pub app_s: f64,
    /// 1 - sched / total.
    pub sched: f64,
    /// 1 - runtime / (total - sched).
    pub runtime: f64,
    /// good / (good + app).
    pub app: f64,
    /// good / total (= sched × runtime × app).
    pub overall: f64,
}

impl Factors {
    /// The factors of `paths` (each is 0 when its denominator is).
    pub fn of(paths: &Paths) -> Self {
        let sum = |p: &[&str]| -> f64 {
            paths
                .iter()
                .filter(|(k, _)| p.iter().any(|x| k.starts_with(x)))
                .fold(0.0, |acc, (_, v)| acc + v)
        };
        // `fold` from +0.0: an empty `sum` of floats is -0.0, which prints as `-0.000`.
        let total_s = paths.values().fold(0.0, |acc, v| acc + v);
        let good_s = paths.get("GOOD").copied().unwrap_or(0.0);
        let sched_s = sum(&["BAD;scheduling"]);
        let runtime_s = sum(&["BAD;runtime", "BAD;unobserved"]);
        let app_s = sum(&["BAD;app"]);
        let ratio = |a: f64, b: f64| if b != 0.0 { a / b } else { 0.0 };
        let rem = total_s - sched_s;
        Factors {
            total_s,
            good_s,
            sched_s,
            runtime_s,
            app_s,
            sched: ratio(rem, total_s),
            runtime: ratio(rem - runtime_s, rem),
            app: ratio(good_s, good_s + app_s),
            overall: ratio(good_s, total_s),
        }
    }

    fn to_json(self) -> Value {
        json!({
            "overall_goodput": self.overall,
            "sched_goodput": self.sched,
            "runtime_goodput": self.runtime,
            "app_goodput": self.app,
            "total_s": self.total_s,
            "good_s": self.good_s,
            "sched_s": self.sched_s,
            "runtime_s": self.runtime_s,
            "app_s": self.app_s,
        })
    }
}

/// A flame node: its seconds and children by name.
#[derive(Debug, Default)]
pub(super) struct Node {
    pub(super) s: f64,
    children: BTreeMap<String, Node>,
}

pub(super) fn tree(paths: &Paths) -> Node {
    let mut root = Node::default();
    for (path, &s) in paths {
        root.s += s;
        let mut node = &mut root;
        for part in path.split(';') {
            node = node.children.entry(part.to_owned()).or_default();
            node.s += s;
        }
    }
    root
}

pub(super) fn sorted(node: &Node, sort: Sort) -> Vec<(&String, &Node)> {
    let mut kids: Vec<_> = node.children.iter().collect();
    kids.sort_by(|(a, x), (b, y)| {
        let rank = |n: &str| match sort {
            Sort::Fixed => super::classify::order(n),
            Sort::Size | Sort::Alpha => 0,
        };
        let size = |v: f64| if sort == Sort::Alpha { 0.0 } else { -v };
        rank(a)
            .cmp(&rank(b))
            .then(size(x.s).total_cmp(&size(y.s)))
            .then(a.cmp(b))
    });
    kids
}

fn print_tree(
    out: &mut String,
    node: &Node,
    name: &str,
    label_prefix: Option<(&str, bool)>,
    parent_s: f64,
    total: f64,
    sort: Sort,
) {
    let ot = if total != 0.0 {
        100.0 * node.s / total
    } else {
        0.0
    };
    let op = if parent_s != 0.0 {
        100.0 * node.s / parent_s
    } else {
        100.0
    };
    let label = match label_prefix {
        None => name.to_owned(),
        Some((prefix, last)) => format!("{prefix}{}{name}", if last { "└── " } else { "├── " }),
    };
    let tag = if name == "GOOD" {
        "  <= peak-rate committed compute"
    } else {
        ""
    };
    let pad = 44usize.saturating_sub(label.chars().count());
    let _ = writeln!(
        out,
        "  {label}{:pad$}{:8.3} gpu-h {ot:6.1}% tot {op:6.1}% par{tag}",
        "",
        node.s / H
    );
    let child_prefix = match label_prefix {
        None => String::new(),
        Some((prefix, last)) => format!("{prefix}{}", if last { "    " } else { "│   " }),
    };
    let kids = sorted(node, sort);
    let n = kids.len();
    for (i, (k, v)) in kids.into_iter().enumerate() {
        print_tree(
            out,
            v,
            k,
            Some((&child_prefix, i + 1 == n)),
            node.s,
            total,
            sort,
        );
    }
}

/// Python's `{:.2e}` (`1.23e-05`).
fn sci(v: f64) -> String {
    let s = format!("{v:.2e}");
    match s.split_once('e') {
        Some((m, e)) => {
            let (sign, digits) = e.strip_prefix('-').map_or(("+", e), |d| ("-", d));
            format!("{m}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

/// The job's figures.
#[derive(Debug)]
pub struct JobReport {
    /// Trainer files (GPUs), with their accounting.
    pub ranks: Vec<(String, Accounting)>,
    /// Seconds per path over the ranks.
    pub paths: Paths,
    /// First and last checkpoint iteration (-1 without).
    pub checkpoints: (i64, i64),
    /// What the denominator is.
    pub denominator: String,
    /// Seconds of checkpoint-worker writes.
    pub worker_write_s: f64,
}

impl JobReport {
    /// Sums the ranks' paths.
    pub fn new(
        ranks: Vec<(String, Accounting)>,
        checkpoints: (i64, i64),
        denominator: String,
        worker_write_s: f64,
    ) -> Self {
        let mut paths = Paths::new();
        for (_, a) in &ranks {
            for (p, s) in &a.paths {
                *paths.entry(p.clone()).or_default() += s;
            }
        }
        JobReport {
            ranks,
            paths,
            checkpoints,
            denominator,
            worker_write_s,
        }
    }

    /// The text report, as Lens prints it.
    pub fn text(&self, sort: Sort) -> String {
        let f = Factors::of(&self.paths);
        let tot = f.total_s;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\n=== GOODPUT FLAME === {} GPUs | first ckpt iter {}, last {}",
            self.ranks.len(),
            self.checkpoints.0,
            self.checkpoints.1
        );
        let peaks: Vec<f64> = self
            .ranks
            .iter()
            .map(|(_, a)| a.peak_s)
            .filter(|p| *p != 0.0)
            .collect();
        if let (Some(lo), Some(hi)) = (
            peaks.iter().copied().reduce(f64::min),
            peaks.iter().copied().reduce(f64::max),
        ) {
            let _ = writeln!(
                out,
                "    peak iter (fastest post-first-ckpt): {lo:.2}-{hi:.2}s across ranks \
                 (spread {:.0}ms -> barrier-gated)",
                1000.0 * (hi - lo)
            );
        }
        let _ = writeln!(
            out,
            "    denominator = {}; only EXPOSED trainer time; worker excluded\n",
            self.denominator
        );
        print_tree(&mut out, &tree(&self.paths), "TOTAL", None, tot, tot, sort);
        let w = self.worker_write_s;
        let share = if tot != 0.0 { 100.0 * w / tot } else { 0.0 };
        let _ = writeln!(out, "  {}", "-".repeat(62));
        let _ = writeln!(
            out,
            "  {:<26}{:8.3} gpu-h  {share:5.1}% tot  (hidden/overlapped, not charged)",
            "worker background write",
            w / H
        );
        let _ = writeln!(out, "  {}", "=".repeat(62));
        let (sg, rg, ag) = (f.sched, f.runtime, f.app);
        let _ = writeln!(
            out,
            "\n  SCHEDULING goodput = 1 - sched/TOTAL          = {:6.2}%   (slurm-side = {:.3} gpu-h)",
            100.0 * sg,
            f.sched_s / H
        );
        let _ = writeln!(
            out,
            "  RUNTIME    goodput = 1 - runtime/(TOTAL-sched) = {:6.2}%   \
             (restart+defense+lost+unobserved = {:.3} gpu-h)",
            100.0 * rg,
            f.runtime_s / H
        );
        let _ = writeln!(
            out,
            "  APP        goodput = GOOD/(GOOD+app)           = {:6.2}%   \
             (slowdown+warmup+reporting+eval = {:.3} gpu-h)",
            100.0 * ag,
            f.app_s / H
        );
        let _ = writeln!(out, "  {}", "-".repeat(60));
        let _ = writeln!(
            out,
            "  OVERALL = sched x runtime x app = {:.2}% x {:.2}% x {:.2}% = {:6.2}%",
            100.0 * sg,
            100.0 * rg,
            100.0 * ag,
            100.0 * sg * rg * ag
        );
        let _ = writeln!(
            out,
            "  OVERALL = GOOD / TOTAL = {:.3}/{:.3}                = {:6.2}%   \
             [proof: |product - GOOD/TOTAL| = {}]\n",
            f.good_s / H,
            tot / H,
            100.0 * f.overall,
            sci((sg * rg * ag - f.overall).abs())
        );
        out
    }

    /// Folded stacks: `path milliseconds`, one line per path, sorted by path.
    pub fn folded(&self) -> String {
        let mut out = String::new();
        for (p, s) in &self.paths {
            let _ = writeln!(out, "{p} {}", (s * 1000.0).round_ties_even() as i64);
        }
        out
    }

    /// The figures as JSON: the job's, then each rank's and each of its runs'.
    pub fn json(&self) -> Value {
        let counts = |a: &Accounting| {
            let (c, r, u) = a.verdict.counts();
            (c, r, u)
        };
        let (mut c, mut r, mut u) = (0, 0, 0);
        let ranks: Vec<Value> = self
            .ranks
            .iter()
            .map(|(file, a)| {
                let (rc, rr, ru) = counts(a);
                (c, r, u) = (c + rc, r + rr, u + ru);
                let runs: Vec<Value> = a
                    .verdict
                    .runs
                    .iter()
                    .zip(&a.run_paths)
                    .map(|(run, paths)| {
                        json!({
                            "first_iteration": run.first_iteration,
                            "last_iteration": run.last_iteration,
                            "start_us": run.start_us,
                            "end_us": run.end_us,
                            "last_checkpoint": run.last_checkpoint,
                            "iterations": {"committed": run.committed, "redone": run.redone,
                                           "uncommitted": run.uncommitted},
                            "good_s": paths.get("GOOD").copied().unwrap_or(0.0),
                            "paths_s": paths,
                        })
                    })
                    .collect();
                let mut v = Factors::of(&a.paths).to_json();
                v["file"] = json!(file);
                v["denominator_s"] = json!(a.total_s);
                v["peak_iteration_s"] = json!(a.peak_s);
                v["iterations"] = json!({"committed": rc, "redone": rr, "uncommitted": ru});
                v["paths_s"] = json!(a.paths);
                v["runs"] = json!(runs);
                v
            })
            .collect();
        let mut v = Factors::of(&self.paths).to_json();
        v["gpus"] = json!(self.ranks.len());
        v["first_checkpoint"] = json!(self.checkpoints.0);
        v["last_checkpoint"] = json!(self.checkpoints.1);
        v["denominator"] = json!(self.denominator);
        v["worker_write_s"] = json!(self.worker_write_s);
        v["iterations"] = json!({"committed": c, "redone": r, "uncommitted": u});
        v["paths_s"] = json!(self.paths);
        v["ranks"] = json!(ranks);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scientific_notation_is_pythons() {
        assert_eq!(sci(0.0), "0.00e+00");
        assert_eq!(sci(1.234e-16), "1.23e-16");
        assert_eq!(sci(12345.0), "1.23e+04");
    }

    #[test]
    fn an_empty_category_prints_as_zero_not_minus_zero() {
        let rank = Accounting {
            paths: [("GOOD".to_owned(), 30.0), ("BAD;app;eval".to_owned(), 6.0)]
                .into_iter()
                .collect(),
            ..Accounting::default()
        };
        let report = JobReport::new(vec![("r0".into(), rank)], (-1, -1), "d".into(), 0.0);
        let text = report.text(Sort::Fixed);
        assert!(text.contains("(slurm-side = 0.000 gpu-h)"), "{text}");
        assert!(text.contains("(restart+defense+lost+unobserved = 0.000 gpu-h)"));
    }

    #[test]
    fn factors_multiply_to_overall() {
        let paths: Paths = [
            ("GOOD", 50.0),
            ("BAD;scheduling;job_setup", 10.0),
            ("BAD;runtime;restart;python_init", 20.0),
            ("BAD;unobserved;untracked", 5.0),
            ("BAD;app;eval", 15.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let f = Factors::of(&paths);
        assert!((f.sched * f.runtime * f.app - f.overall).abs() < 1e-12);
        assert!((f.overall - 0.5).abs() < 1e-12);
    }
}
