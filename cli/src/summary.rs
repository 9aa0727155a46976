//! `nemo-lens summary`: per-rank span statistics, stragglers and a step heatmap.
//!
//! # Statistics
//!
//! For every (span name, rank): `count` (complete spans), `truncated` (spans the closer ended at
//! shutdown, `nemo.span.truncated = true`; excluded from every other column), `total`, `p50`,
//! `p90`, `p99` and `max` duration in milliseconds. Percentiles use the nearest-rank method (the
//! value at position ⌈p·n⌉ of the sorted durations), so every figure is an observed duration.
//!
//! # Stragglers
//!
//! For each span name seen on at least two ranks: the cross-rank median is the median of the
//! ranks' p50s (the mean of the two middle ones for an even count); a rank is a straggler when
//! its p50 exceeds the cross-rank median by more than the threshold (default 10 %). Stragglers
//! are sorted by excess, largest first. The step span (named [`STEP_SPAN_NAMES`]: `step`, or
//! `train_step` as in `examples/trainer.rs`) is reported first, then the other names in
//! alphabetical order.
//!
//! # Straggler verdict
//!
//! After the tables, the verdict of `nemo-lens straggler` on the same records (one read feeds
//! both, through [`straggler::Analysis`]): the rank the others wait for in collective spans,
//! and what it costs the job per step. Its threshold is `--threshold` percent of the median
//! step.
//!
//! # Heatmap
//!
//! `--plot FILE.svg` draws step-span durations with ranks as rows and steps as columns
//! ([`heatmap`]). The step of a span is its `dl.step` attribute, else `step`, else its position
//! among that rank's step spans ordered by start time.
//!
//! # Lost work
//!
//! When the input has `megatron.train.iteration` spans with a `megatron.iteration` attribute,
//! the iterations per rank committed by a checkpoint, redone after a requeue, or never
//! checkpointed ([`lost`], NeMo Lens's rule; `goodput` gives what they cost).
//!
//! # Log records
//!
//! Log records (Python `LogRecord.to_json` layout) are counted by severity and listed after the
//! tables.
//!
//! # Memory
//!
//! Records are streamed (see [`input`]), `--jobs` files at a time, each file into its own
//! tables merged into the total when the file ends. The table of (span name, rank) groups is
//! bounded in bytes by [`NAME_TABLE_BYTES`], shared by the files being read: once it is full,
//! spans of a name and rank not seen before are skipped and counted (`spans_over_budget`,
//! reported on stderr and in `--json`; which ones depends on which file was read first). Within the
//! table, the durations of complete spans are kept (8 bytes each, plus 24 per step span with
//! `--plot`) to compute exact percentiles. Totals are summed in 128 bits, so spans from year 0
//! to 9999 cannot overflow them.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context as _, Result};
use serde::Serialize;
use serde_json::Value;

mod heatmap;
mod lost;
mod render;

use crate::GroupBy;
use crate::input::{self, Reading, Record};
use crate::straggler::{self, STEP_SPAN_NAMES, step_number};

/// Bytes of the (span name, rank) table: each group is charged its name plus [`ENTRY_BYTES`].
pub const NAME_TABLE_BYTES: usize = 16 << 20;
/// What one group is charged besides its name (map node, key, vector header).
const ENTRY_BYTES: usize = 96;
/// Distinct log severities counted by name; others are counted as `OTHER`.
const MAX_SEVERITIES: usize = 32;
/// Longest severity label kept (the rest is cut).
const MAX_SEVERITY_CHARS: usize = 32;

/// Rank of spans whose rank is unknown (no `dl.rank`, no `rankN` in the file name).
const UNKNOWN_RANK: i64 = -1;

/// What `summary` was asked to do.
#[derive(Debug)]
pub struct Options {
    /// Inputs.
    pub files: Vec<PathBuf>,
    /// Table order.
    pub group_by: GroupBy,
    /// JSON instead of tables.
    pub json: bool,
    /// Straggler threshold, percent.
    pub threshold_percent: f64,
    /// Heatmap output.
    pub plot: Option<PathBuf>,
    /// How input is read.
    pub reading: Reading,
}

/// Parses `--threshold` (`10` or `10%`; finite, not negative).
pub fn parse_threshold(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("expected a percentage such as 10 or 12.5, got {s:?}"))?;
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(format!("expected a finite percentage >= 0, got {s:?}"))
    }
}

#[derive(Default)]
struct Group {
    durations_us: Vec<i64>,
    truncated: u64,
}

struct StepSpan {
    step: Option<i64>,
    start_us: i64,
    duration_us: i64,
}

/// One row of the statistics table.
#[derive(Debug, Serialize)]
pub struct Row {
    name: String,
    rank: Option<i64>,
    count: u64,
    truncated: u64,
    total_ms: f64,
    p50_ms: Option<f64>,
    p90_ms: Option<f64>,
    p99_ms: Option<f64>,
    max_ms: Option<f64>,
}

/// A slow rank for one span name.
#[derive(Debug, Serialize)]
pub struct Straggler {
    rank: Option<i64>,
    median_ms: f64,
    excess_percent: f64,
}

/// The straggler verdict for one span name.
#[derive(Debug, Serialize)]
pub struct NameReport {
    name: String,
    is_step: bool,
    ranks: usize,
    cross_rank_median_ms: f64,
    stragglers: Vec<Straggler>,
}

/// Everything `summary` prints.
#[derive(Debug, Serialize)]
pub struct Report {
    threshold_percent: f64,
    step_span: Option<String>,
    spans: Vec<Row>,
    stragglers: Vec<NameReport>,
    /// Log records by severity.
    logs: BTreeMap<String, u64>,
    /// What was read and skipped ([`input::Stats::to_json`]).
    input: Value,
    /// Spans skipped because the table of span names was full.
    spans_over_budget: u64,
    /// The verdict of `nemo-lens straggler` on the same input.
    straggler: straggler::Verdict,
    /// Iterations committed, redone, uncommitted, per rank (absent without iterations).
    #[serde(skip_serializing_if = "Option::is_none")]
    lost_work: Option<lost::LostWork>,
}

/// µs → ms, rounded to the µs.
fn ms(us: f64) -> f64 {
    us.round() / 1000.0
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[i64], p: f64) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

fn median_f64(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn is_step(name: &str) -> bool {
    STEP_SPAN_NAMES.contains(&name)
}

/// Name order: step span first, then alphabetical.
fn name_key(name: &str) -> (bool, &str) {
    (!is_step(name), name)
}

fn rank_opt(rank: i64) -> Option<i64> {
    (rank != UNKNOWN_RANK).then_some(rank)
}

fn rank_label(rank: i64) -> String {
    rank_opt(rank).map_or_else(|| "?".to_owned(), |r| r.to_string())
}

/// What the spans and log records of some files add up to.
#[derive(Default)]
struct Tables {
    groups: BTreeMap<(String, i64), Group>,
    steps: BTreeMap<i64, Vec<StepSpan>>,
    logs: BTreeMap<String, u64>,
    spans_over_budget: u64,
    lost: BTreeMap<i64, lost::LostRow>,
}

/// The severity label counted: cut to [`MAX_SEVERITY_CHARS`], `OTHER` beyond
/// [`MAX_SEVERITIES`] labels.
fn severity_key(logs: &BTreeMap<String, u64>, mut severity: String) -> String {
    if let Some((cut, _)) = severity.char_indices().nth(MAX_SEVERITY_CHARS) {
        severity.truncate(cut);
    }
    if logs.len() < MAX_SEVERITIES || logs.contains_key(&severity) {
        severity
    } else {
        "OTHER".to_owned()
    }
}

impl Tables {
    /// Adds one record. `table_bytes` is the (span name, rank) budget shared by every file
    /// being read: a group is charged when a file first sees it.
    fn record(&mut self, record: Record, plot: bool, table_bytes: &AtomicUsize) {
        if let Record::Log(log) = &record {
            let key = severity_key(&self.logs, log.severity());
            *self.logs.entry(key).or_default() += 1;
        }
        let Record::Span(span) = record else { return };
        let rank = span.rank.unwrap_or(UNKNOWN_RANK);
        let truncated = span.is_truncated();
        let duration_us = span.duration_us();
        let step = (plot && is_step(&span.name) && !truncated).then(|| StepSpan {
            step: step_number(&span.attributes),
            start_us: span.start_us,
            duration_us,
        });
        let key = (span.name, rank);
        let group = match self.groups.entry(key) {
            Entry::Occupied(group) => group.into_mut(),
            Entry::Vacant(slot) => {
                let cost = slot.key().0.len() + ENTRY_BYTES;
                let charged = table_bytes.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                    (b + cost <= NAME_TABLE_BYTES).then_some(b + cost)
                });
                if charged.is_err() {
                    self.spans_over_budget += 1;
                    return;
                }
                slot.insert(Group::default())
            }
        };
        if let Some(step) = step {
            self.steps.entry(rank).or_default().push(step);
        }
        if truncated {
            group.truncated += 1;
        } else {
            group.durations_us.push(duration_us);
        }
    }

    /// Adds another file's tables; a group both have is refunded to the budget.
    fn merge(&mut self, other: Tables, table_bytes: &AtomicUsize) {
        for (key, group) in other.groups {
            match self.groups.entry(key) {
                Entry::Occupied(mut mine) => {
                    table_bytes.fetch_sub(mine.key().0.len() + ENTRY_BYTES, Ordering::Relaxed);
                    let mine = mine.get_mut();
                    mine.durations_us.extend(group.durations_us);
                    mine.truncated += group.truncated;
                }
                Entry::Vacant(slot) => {
                    slot.insert(group);
                }
            }
        }
        for (rank, steps) in other.steps {
            self.steps.entry(rank).or_default().extend(steps);
        }
        for (severity, n) in other.logs {
            let key = severity_key(&self.logs, severity);
            *self.logs.entry(key).or_default() += n;
        }
        self.spans_over_budget += other.spans_over_budget;
        for (rank, row) in other.lost {
            match self.lost.entry(rank) {
                Entry::Occupied(mut mine) => mine.get_mut().add(&row),
                Entry::Vacant(slot) => {
                    slot.insert(row);
                }
            }
        }
    }
}

struct Collected {
    groups: BTreeMap<(String, i64), Group>,
    steps: BTreeMap<i64, Vec<StepSpan>>,
    logs: BTreeMap<String, u64>,
    stats: input::Stats,
    spans_over_budget: u64,
    straggler: straggler::Analysis,
    lost: BTreeMap<i64, lost::LostRow>,
}

/// Reads the files (in parallel, one file per thread at a time) into per-file tables merged at
/// the end of each file, and into the straggler analysis.
fn collect(opts: &Options) -> Result<Collected> {
    let merged = Mutex::new(Tables::default());
    let table_bytes = AtomicUsize::new(0);
    let analysis = straggler::Analysis::new(straggler::SpanNames::default());
    let stats = opts.reading.for_each_file(&opts.files, |records| {
        let mut tables = Tables::default();
        let mut file = analysis.file();
        let mut iterations = lost::FileIterations::default();
        while let Some(record) = records.next_record() {
            if let Record::Span(span) = &record {
                file.span(span);
                iterations.span(span);
            }
            tables.record(record, opts.plot.is_some(), &table_bytes);
        }
        analysis.done(file);
        iterations.done(&mut tables.lost, UNKNOWN_RANK);
        merged
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .merge(tables, &table_bytes);
        Ok(())
    })?;
    let tables = merged.into_inner().unwrap_or_else(|e| e.into_inner());
    Ok(Collected {
        groups: tables.groups,
        steps: tables.steps,
        logs: tables.logs,
        stats,
        spans_over_budget: tables.spans_over_budget,
        straggler: analysis,
        lost: tables.lost,
    })
}

fn build_report(collected: &mut Collected, opts: &Options) -> Report {
    let mut rows = Vec::new();
    // name → [(rank, p50 µs)]
    let mut medians: BTreeMap<&str, Vec<(i64, i64)>> = BTreeMap::new();
    for ((name, rank), group) in &mut collected.groups {
        group.durations_us.sort_unstable();
        let d = &group.durations_us;
        let p = |q| percentile(d, q).map(|v| ms(v as f64));
        if let Some(p50) = percentile(d, 50.0) {
            medians.entry(name).or_default().push((*rank, p50));
        }
        rows.push(Row {
            name: name.clone(),
            rank: rank_opt(*rank),
            count: d.len() as u64,
            truncated: group.truncated,
            total_ms: ms(d.iter().map(|&v| i128::from(v)).sum::<i128>() as f64),
            p50_ms: p(50.0),
            p90_ms: p(90.0),
            p99_ms: p(99.0),
            max_ms: d.last().map(|v| ms(*v as f64)),
        });
    }
    let rank_key = |r: Option<i64>| r.unwrap_or(UNKNOWN_RANK);
    match opts.group_by {
        GroupBy::Name => rows.sort_by(|a, b| {
            (name_key(&a.name), rank_key(a.rank)).cmp(&(name_key(&b.name), rank_key(b.rank)))
        }),
        GroupBy::Rank => rows.sort_by(|a, b| {
            (rank_key(a.rank), name_key(&a.name)).cmp(&(rank_key(b.rank), name_key(&b.name)))
        }),
    }

    let mut stragglers: Vec<NameReport> = medians
        .into_iter()
        .filter(|(_, per_rank)| per_rank.len() >= 2)
        .map(|(name, per_rank)| {
            let cross = median_f64(per_rank.iter().map(|(_, m)| *m as f64).collect());
            let mut slow: Vec<Straggler> = per_rank
                .iter()
                .filter(|_| cross > 0.0)
                .map(|(rank, m)| Straggler {
                    rank: rank_opt(*rank),
                    median_ms: ms(*m as f64),
                    excess_percent: (*m as f64 - cross) / cross * 100.0,
                })
                .filter(|s| s.excess_percent > opts.threshold_percent)
                .collect();
            slow.sort_by(|a, b| b.excess_percent.total_cmp(&a.excess_percent));
            for s in &mut slow {
                s.excess_percent = (s.excess_percent * 10.0).round() / 10.0;
            }
            NameReport {
                name: name.to_owned(),
                is_step: is_step(name),
                ranks: per_rank.len(),
                cross_rank_median_ms: ms(cross),
                stragglers: slow,
            }
        })
        .collect();
    stragglers.sort_by(|a, b| name_key(&a.name).cmp(&name_key(&b.name)));

    let step_span = collected
        .groups
        .keys()
        .map(|(n, _)| n.as_str())
        .filter(|n| is_step(n))
        .min_by_key(|n| STEP_SPAN_NAMES.iter().position(|s| s == n))
        .map(str::to_owned);
    Report {
        threshold_percent: opts.threshold_percent,
        step_span,
        spans: rows,
        stragglers,
        logs: collected.logs.clone(),
        input: collected.stats.to_json(),
        spans_over_budget: collected.spans_over_budget,
        straggler: collected.straggler.verdict(
            straggler::Settings {
                threshold_percent: opts.threshold_percent,
                world_size: None,
            },
            false,
        ),
        lost_work: lost::table(&collected.lost),
    }
}

/// Runs `nemo-lens summary`. A failed write (stdout or the heatmap) is an error.
pub fn run(opts: &Options) -> Result<()> {
    let mut collected = collect(opts)?;
    collected.stats.report();
    if collected.spans_over_budget > 0 {
        eprintln!(
            "warning: skipped {} span(s) of names first seen after the {NAME_TABLE_BYTES}-byte \
             table of span names was full",
            collected.spans_over_budget
        );
    }
    let report = build_report(&mut collected, opts);
    for line in straggler::merge_warnings(&report.straggler) {
        eprintln!("warning: {line}");
    }
    let text = if opts.json {
        serde_json::to_string_pretty(&report)? + "\n"
    } else {
        render::text(&report)
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .context("cannot write the report to stdout")?;
    if let Some(path) = &opts.plot {
        let (ranks, steps) = heatmap::plot(&mut collected.steps, path)
            .with_context(|| format!("cannot draw the heatmap {}", path.display()))?;
        eprintln!("wrote {} ({ranks} ranks x {steps} steps)", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles_are_observed_values() {
        let v: Vec<i64> = (1..=10).collect();
        assert_eq!(percentile(&v, 50.0), Some(5));
        assert_eq!(percentile(&v, 90.0), Some(9));
        assert_eq!(percentile(&v, 99.0), Some(10));
        assert_eq!(percentile(&[7], 1.0), Some(7));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn cross_rank_median_averages_the_middle_pair() {
        assert_eq!(median_f64(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median_f64(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn threshold_accepts_percent_sign_and_rejects_negatives() {
        assert_eq!(parse_threshold("12.5%"), Ok(12.5));
        assert!(parse_threshold("-1").is_err());
        assert!(parse_threshold("NaN").is_err());
    }
}
