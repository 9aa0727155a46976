//! One rank's accounting: its seconds per flame path (NeMo Lens's `analyze_rank`).
//!
//! * The window is the rank's first `slurm.job` span, else `workload`, else `megatron.pretrain`,
//!   else its earliest start to latest end. The rank's total is the job's allocation when known
//!   (the reckoner's envelope), else the window's length.
//! * Iterations: the peak is the fastest iteration after the job's first checkpoint. A committed
//!   iteration credits GOOD with the peak and its excess to the first-iteration warmup, the first
//!   iteration after a checkpoint, or slowdown; a lost one (see [`super::lost`]) charges the peak
//!   to `lost_work;{redone,uncommitted};compute` and its excess to `…;slowdown`.
//! * Overhead spans, clipped to the window, are partitioned by a sweep line: each instant goes to
//!   the shortest span covering it (the first read, on a tie), so nested spans telescope and
//!   nothing counts twice.
//! * The time no iteration or overhead span covers is unobserved: `shutdown` inside a
//!   `slurm.step`, `untracked` for the rest of the total.

use std::collections::{BTreeMap, BTreeSet};

use super::classify::{self, SLURM_STEP};
use super::files::Kept;
use super::lost::{self, Iteration, Iterations, Status, Verdict};

/// Job-wide figures every rank's accounting uses.
#[derive(Debug, Default)]
pub struct Job {
    /// The lowest checkpoint iteration of the job (-1 without one).
    pub first_checkpoint: i64,
    /// Every checkpoint iteration of the job.
    pub checkpoints: BTreeSet<i64>,
    /// The allocation per rank, in seconds, when known.
    pub allocation_s: Option<f64>,
}

/// Seconds per flame path.
pub type Paths = BTreeMap<String, f64>;

/// What one rank adds up to.
#[derive(Debug, Default)]
pub struct Accounting {
    /// Seconds per path (empty for a rank without spans).
    pub paths: Paths,
    /// Its peak iteration time (0 without iterations).
    pub peak_s: f64,
    /// Its denominator (allocation or window).
    pub total_s: f64,
    /// The lost-work verdict of its iterations.
    pub verdict: Verdict,
    /// Seconds per iteration path, per run.
    pub run_paths: Vec<Paths>,
}

fn add(paths: &mut Paths, path: &str, s: f64) {
    *paths.entry(path.to_owned()).or_default() += s;
}

/// The accounting of a rank whose spans, in list order, are the concatenation of `parts`;
/// `others` is the earliest start and latest end of its spans the accounting does not read.
pub fn account(parts: &[&[Kept]], others: Option<(i64, i64)>, job: &Job) -> Accounting {
    let spans = || parts.iter().flat_map(|p| p.iter());
    let mut out = Accounting::default();
    if spans().next().is_none() && others.is_none() {
        return out;
    }
    let denominator = classify::DENOMINATORS
        .iter()
        .find_map(|d| spans().find(|s| s.name == *d));
    let (j0, j1) = match denominator {
        Some(d) => (d.start_us, d.end_us),
        None => spans()
            .map(|s| (s.start_us, s.end_us))
            .chain(others)
            .fold((i64::MAX, i64::MIN), |(a, b), (s, e)| (a.min(s), b.max(e))),
    };
    out.total_s = job.allocation_s.unwrap_or((j1 - j0) as f64 / 1e6);
    let clip = |s: &Kept| (s.start_us.max(j0), s.end_us.min(j1));
    let mut covered: Vec<(i64, i64)> = Vec::new();

    let iterations: Vec<&Kept> = spans()
        .filter(|s| s.name == lost::ITERATION && s.iteration.is_some())
        .collect();
    if !iterations.is_empty() {
        iteration_paths(&iterations, spans(), job, &mut out);
        for s in &iterations {
            let (a, b) = clip(s);
            if b > a {
                covered.push((a, b));
            }
        }
    }

    // The sweep line: at each endpoint, the active set holds the segments covering the next
    // elementary interval, ordered by clipped length, then list order.
    let segments: Vec<(i64, i64, &'static str)> = spans()
        .filter_map(|s| {
            let path = classify::overhead_path(s.name)?;
            let (a, b) = clip(s);
            (b > a).then_some((a, b, path))
        })
        .collect();
    let mut points: Vec<i64> = segments.iter().flat_map(|&(a, b, _)| [a, b]).collect();
    points.sort_unstable();
    points.dedup();
    let mut by_start: Vec<usize> = (0..segments.len()).collect();
    by_start.sort_by_key(|&i| segments[i].0);
    let mut by_end = by_start.clone();
    by_end.sort_by_key(|&i| segments[i].1);
    let (mut next_start, mut next_end) = (0, 0);
    let mut active: BTreeSet<(i64, usize)> = BTreeSet::new();
    for w in points.windows(2) {
        let (t0, t1) = (w[0], w[1]);
        while next_end < by_end.len() && segments[by_end[next_end]].1 <= t0 {
            let i = by_end[next_end];
            active.remove(&(segments[i].1 - segments[i].0, i));
            next_end += 1;
        }
        while next_start < by_start.len() && segments[by_start[next_start]].0 <= t0 {
            let i = by_start[next_start];
            if segments[i].1 > t0 {
                active.insert((segments[i].1 - segments[i].0, i));
            }
            next_start += 1;
        }
        if let Some(&(_, i)) = active.first() {
            add(&mut out.paths, segments[i].2, (t1 - t0) as f64 / 1e6);
            covered.push((t0, t1));
        }
    }

    covered.sort_unstable();
    let mut merged: Vec<(i64, i64)> = Vec::new();
    for (a, b) in covered {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    // `fold` from +0.0: an empty `sum` of floats is -0.0, which prints as `-0.000`.
    let coverage_s = merged
        .iter()
        .fold(0.0, |acc, (a, b)| acc + (b - a) as f64 / 1e6);
    let mut gaps = Vec::new();
    let mut cur = j0;
    for &(a, b) in &merged {
        if a > cur {
            gaps.push((cur, a));
        }
        cur = cur.max(b);
    }
    if cur < j1 {
        gaps.push((cur, j1));
    }
    let steps: Vec<(i64, i64)> = spans().filter(|s| s.name == SLURM_STEP).map(clip).collect();
    let shutdown_s: f64 = gaps
        .iter()
        .flat_map(|&(g0, g1)| {
            steps
                .iter()
                .map(move |&(s0, s1)| ((g1.min(s1) - g0.max(s0)).max(0)) as f64 / 1e6)
        })
        .fold(0.0, |acc, s| acc + s);
    add(&mut out.paths, "BAD;unobserved;shutdown", shutdown_s);
    add(
        &mut out.paths,
        "BAD;unobserved;untracked",
        (out.total_s - coverage_s - shutdown_s).max(0.0),
    );
    out
}

/// GOOD, the app-side excess and the lost work of the iterations (in list order).
fn iteration_paths<'a>(
    iterations: &[&Kept],
    spans: impl Iterator<Item = &'a Kept>,
    job: &Job,
    out: &mut Accounting,
) {
    let number = |s: &Kept| s.iteration.unwrap_or_default();
    let first_exec = iterations.iter().map(|s| number(s)).min().unwrap_or(0);
    let steady = iterations
        .iter()
        .filter(|s| number(s) > job.first_checkpoint)
        .map(|s| s.seconds())
        .reduce(f64::min);
    let peak = steady
        .or_else(|| iterations.iter().map(|s| s.seconds()).reduce(f64::min))
        .unwrap_or(0.0);
    out.peak_s = peak;

    let mut rule = Iterations::default();
    for s in spans {
        if let Some(it) = s.iteration {
            if s.name == lost::ITERATION {
                rule.iteration(Iteration {
                    start_us: s.start_us,
                    end_us: s.end_us,
                    number: it,
                });
            } else if lost::CHECKPOINTS.contains(&s.name) {
                rule.checkpoint(s.start_us, it);
            }
        }
    }
    out.verdict = rule.verdict();
    out.run_paths = vec![Paths::new(); out.verdict.runs.len()];
    for (k, s) in iterations.iter().enumerate() {
        let it = number(s);
        let d = s.seconds();
        let excess = (d - peak).max(0.0);
        let run = &mut out.run_paths[out.verdict.run[k]];
        let charges: [(String, f64); 2] = match out.verdict.status[k] {
            Status::Committed => {
                let bucket = if it == first_exec {
                    "BAD;app;first_iteration_warmup"
                } else if job.checkpoints.contains(&(it - 1)) {
                    "BAD;app;first_iter_after_ckpt"
                } else {
                    "BAD;app;iteration_slowdown"
                };
                [("GOOD".to_owned(), peak), (bucket.to_owned(), excess)]
            }
            st => [
                (
                    format!("BAD;runtime;lost_work;{};compute", st.as_str()),
                    peak,
                ),
                (
                    format!("BAD;runtime;lost_work;{};slowdown", st.as_str()),
                    excess,
                ),
            ],
        };
        for (path, s) in charges {
            add(&mut out.paths, &path, s);
            add(run, &path, s);
        }
    }
}
