//! The verdict: which ranks the others wait for, by how much, where and in which steps.
//!
//! In a synchronous job every rank's step lasts as long as the slowest rank's, because every
//! rank waits in the collective for it: the slow rank is the one that waits least. Per rank,
//! over its latest steps (the [window](super::table::WINDOW)), the medians of the step, of its
//! wait (time in collective spans) and of its compute (the rest of the step); then, across the
//! ranks, the medians of those medians (the *median rank*). With `limit` the larger of
//! `--threshold` percent of the median step and four robust standard deviations of the ranks'
//! figures (1.4826 × their median absolute deviation, so a large job's natural spread is not a
//! straggler, while up to half of the ranks being slow does not widen it). Stragglers are a
//! minority: when half the ranks or more are slow, the median rank is one of them:
//!
//! * **with collective spans**: a rank whose wait is below the median rank's by more than the
//!   limit is a suspect; its cost to the job is that difference, per step (the time every other
//!   rank waits for it). When its compute is not above the others' by at least half of it, the
//!   extra time is outside the step spans;
//! * **without collective spans** (ranks that record none): a rank whose compute, or one of its
//!   compute spans (`forward_backward`, ...), exceeds the median rank's by more than the limit is
//!   a suspect, and the cost is an estimate: that excess.
//!
//! A suspect's excess is attributed to the compute span whose median exceeds the median rank's
//! by the most, when that covers at least half of it. Its slow steps are those where it waits
//! less (or computes more) than that step's median rank by more than the limit; steps are
//! matched across ranks by their number, else by their order from the latest.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::collect::Counts;
// The tests reach it here.
#[cfg(test)]
pub(super) use super::slow_steps::median_without;
use super::slow_steps::{Measure, StepFigures};
use super::table::{Entry, Merges, RankState, Table, WINDOW};
use crate::ranges::{count, gaps};

/// Ranks with fewer complete steps are listed, not compared.
pub const MIN_STEPS: usize = 3;
/// Robust standard deviations of the ranks' figures a suspect must stand out by.
const NOISE_SIGMAS: f64 = 4.0;
/// Median absolute deviation to standard deviation, for normal data.
const MAD_TO_SIGMA: f64 = 1.4826;

/// What the verdict is asked.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// `--threshold`: percent of the median step.
    pub threshold_percent: f64,
    /// `--world-size`, else the input's `dl.world_size`.
    pub world_size: Option<i64>,
}

/// One rank's figures (medians over its window), as `--detail` shows them.
#[derive(Debug, Clone, Serialize)]
pub struct RankFigures {
    /// The rank.
    pub rank: i64,
    /// Its `host.name`.
    pub host: Option<String>,
    /// Complete steps in its window.
    pub steps: usize,
    /// Median step.
    pub step_ms: f64,
    /// Median compute (the step less its collective wait).
    pub compute_ms: f64,
    /// Median wait in collective spans; `null` when it recorded none.
    pub wait_ms: Option<f64>,
    /// Compute above the median rank's.
    pub compute_excess_ms: f64,
    /// Wait below the median rank's.
    pub wait_deficit_ms: Option<f64>,
    /// Median per step of each compute span name.
    pub spans: BTreeMap<String, f64>,
    /// Steps older than its window.
    pub older_steps: u64,
    /// Step spans not compared (open, truncated, cut by a dump).
    pub partial_steps: u64,
    /// Named as a suspect.
    pub suspect: bool,
}

/// What gave a suspect away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// It waits less in collective spans than the median rank.
    Wait,
    /// Its compute (with no collective span to compare) is longer than the median rank's.
    Compute,
    /// One of its compute spans is longer than the median rank's.
    Span,
}

/// A rank the others wait for.
#[derive(Debug, Clone, Serialize)]
pub struct Suspect {
    /// The rank.
    pub rank: i64,
    /// Its `host.name`.
    pub host: Option<String>,
    /// What gave it away.
    pub cause: Cause,
    /// What it costs the job per step: measured as the others' extra wait (`wait`), else
    /// estimated as its excess.
    pub cost_ms: f64,
    /// Its median compute per step.
    pub compute_ms: f64,
    /// Above the median rank's.
    pub compute_excess_ms: f64,
    /// Its median wait in collectives.
    pub wait_ms: Option<f64>,
    /// The median rank's wait.
    pub median_wait_ms: Option<f64>,
    /// The compute span holding the excess.
    pub span: Option<String>,
    /// That span's median per step here.
    pub span_ms: Option<f64>,
    /// That span's excess over the median rank's.
    pub span_excess_ms: Option<f64>,
    /// The extra time is outside the step spans (it waits less, computes no more).
    pub outside_steps: bool,
    /// Steps where it was slower than that step's median rank.
    pub slow_steps: usize,
    /// Steps compared with other ranks.
    pub steps_compared: usize,
    /// The slow steps' numbers (`null` when steps carry no number).
    pub slow_step_numbers: Option<Vec<i64>>,
}

/// The straggler verdict.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// Suspects, costliest first.
    pub suspects: Vec<Suspect>,
    /// What the job loses per step: the costliest suspect's cost.
    pub cost_ms_per_step: Option<f64>,
    /// Percent of the median step.
    pub threshold_percent: f64,
    /// The limit a suspect exceeds (threshold or noise, whichever is larger).
    pub limit_ms: f64,
    /// The median rank's step.
    pub step_ms: Option<f64>,
    /// The median rank's compute.
    pub compute_ms: Option<f64>,
    /// The median rank's wait in collectives (`null`: no collective span recorded).
    pub wait_ms: Option<f64>,
    /// From `--world-size` or the input's `dl.world_size`.
    pub world_size: Option<i64>,
    /// Ranks with data.
    pub ranks_read: usize,
    /// Ranks with at least [`MIN_STEPS`] complete steps.
    pub ranks_compared: usize,
    /// Ranks below the world size without any data, as inclusive ranges `[first, last]`.
    pub missing_ranks: Vec<[i64; 2]>,
    /// How many ranks that is.
    pub missing_count: i64,
    /// Ranks with data but fewer than [`MIN_STEPS`] complete steps.
    pub few_steps_ranks: Vec<i64>,
    /// Compared ranks without collective spans while others have them.
    pub no_collective_ranks: Vec<i64>,
    /// First and last step compared (numbers, or `null` when steps carry none).
    pub first_step: Option<i64>,
    /// Last step compared.
    pub last_step: Option<i64>,
    /// Median number of steps compared per rank.
    pub steps_per_rank: usize,
    /// Steps kept per rank.
    pub window: usize,
    /// Collective span names seen.
    pub collective_spans: Vec<String>,
    /// Compute span names seen inside steps.
    pub compute_spans: Vec<String>,
    /// Ranks skipped because the rank table was full.
    pub ranks_over_budget: u64,
    /// What the spans were.
    #[serde(flatten)]
    pub counts: Counts,
    /// Steps seen twice with different figures, figures clamped.
    #[serde(flatten)]
    pub merges: Merges,
    /// Every rank's figures (`--detail`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_rank: Option<Vec<RankFigures>>,
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// `NOISE_SIGMAS` robust standard deviations of `v` around `center` (the median absolute
/// deviation: slow ranks, up to half of them, do not widen it).
fn noise(v: &[f64], center: f64) -> f64 {
    let mad = median(v.iter().map(|x| (x - center).abs()).collect()).unwrap_or(0.0);
    NOISE_SIGMAS * MAD_TO_SIGMA * mad
}

/// µs → ms, to the µs.
fn ms(us: f64) -> f64 {
    (us).round() / 1000.0
}

/// A rank's medians, in µs.
struct Medians {
    rank: i64,
    steps: usize,
    step: f64,
    compute: f64,
    /// `None`: most of its steps had no collective span.
    wait: Option<f64>,
    /// Median per step of each followed compute span (by interned name).
    named: Vec<(u16, f64)>,
}

fn medians(rank: i64, state: &RankState) -> Medians {
    let w = state.window();
    let col = |f: &dyn Fn(&Entry) -> f64| median(w.iter().map(f).collect()).unwrap_or(0.0);
    let with_wait = w.iter().filter(|e| e.wait_us().is_some()).count();
    Medians {
        rank,
        steps: w.len(),
        step: col(&|e| f64::from(e.step_us)),
        compute: col(&|e| f64::from(e.compute_us())),
        wait: (2 * with_wait > w.len()).then(|| col(&|e| f64::from(e.wait_us().unwrap_or(0)))),
        named: state
            .names()
            .map(|(slot, name)| (name, col(&|e| f64::from(e.named[slot]))))
            .collect(),
    }
}

/// The median rank: the ranks compared (enough steps), the ones the medians are taken over,
/// and their medians, µs.
struct MedianRank<'a> {
    /// Every rank read.
    all: &'a [Medians],
    /// Ranks with at least [`MIN_STEPS`] steps.
    compared: Vec<&'a Medians>,
    /// The ranks the medians are taken over: those with collective spans when two or more
    /// have them ([`MedianRank::use_wait`]), else every compared rank.
    base: Vec<&'a Medians>,
    /// Ranks are judged by their wait in collectives.
    use_wait: bool,
    step: Option<f64>,
    compute: Option<f64>,
    wait: Option<f64>,
}

impl<'a> MedianRank<'a> {
    fn of(all: &'a [Medians]) -> Self {
        let compared: Vec<&Medians> = all.iter().filter(|m| m.steps >= MIN_STEPS).collect();
        let waiting: Vec<&Medians> = compared
            .iter()
            .copied()
            .filter(|m| m.wait.is_some())
            .collect();
        let use_wait = waiting.len() >= 2;
        let base = if use_wait { waiting } else { compared.clone() };
        let mut median_rank = MedianRank {
            all,
            compared,
            base,
            use_wait,
            step: None,
            compute: None,
            wait: None,
        };
        median_rank.step = median(median_rank.column(|m| m.step));
        median_rank.compute = median(median_rank.column(|m| m.compute));
        if use_wait {
            median_rank.wait = median(median_rank.column(|m| m.wait.unwrap_or(0.0)));
        }
        median_rank
    }

    /// One figure of every rank of the base.
    fn column(&self, f: impl Fn(&Medians) -> f64) -> Vec<f64> {
        self.base.iter().map(|m| f(m)).collect()
    }
}

/// How far from the median rank a rank may be, µs: the threshold, or the ranks' spread when
/// larger.
struct Limits {
    compute: f64,
    /// The compute limit when ranks are not judged by their wait.
    wait: f64,
    /// Per compute span name (interned) on two or more compared ranks: its median over them,
    /// and its limit.
    spans: BTreeMap<u16, (f64, f64)>,
}

impl Limits {
    fn of(median_rank: &MedianRank<'_>, threshold_percent: f64) -> Self {
        let threshold = threshold_percent / 100.0 * median_rank.step.unwrap_or(0.0);
        let compute = threshold.max(noise(
            &median_rank.column(|m| m.compute),
            median_rank.compute.unwrap_or(0.0),
        ));
        let wait = match median_rank.wait {
            Some(w) => threshold.max(noise(&median_rank.column(|m| m.wait.unwrap_or(0.0)), w)),
            None => compute,
        };
        let mut by_name: BTreeMap<u16, Vec<f64>> = BTreeMap::new();
        for m in &median_rank.compared {
            for &(name, v) in &m.named {
                by_name.entry(name).or_default().push(v);
            }
        }
        let spans = by_name
            .into_iter()
            .filter(|(_, v)| v.len() >= 2)
            .filter_map(|(n, v)| {
                let m = median(v.clone())?;
                Some((n, (m, threshold.max(noise(&v, m)))))
            })
            .collect();
        Limits {
            compute,
            wait,
            spans,
        }
    }

    /// The limit of what a suspect is measured by.
    fn of_measure(&self, median_rank: &MedianRank<'_>) -> f64 {
        if median_rank.use_wait {
            self.wait
        } else {
            self.compute
        }
    }
}

/// A compute span of a rank against the median rank, µs.
#[derive(Debug, Clone, Copy)]
struct SpanExcess {
    name: u16,
    /// Its median on this rank.
    value: f64,
    /// Over the median rank's.
    excess: f64,
    limit: f64,
}

/// One compared rank against the median rank, µs.
struct Judgement {
    /// Compute over the median rank's.
    excess: f64,
    /// Wait under the median rank's, when both wait.
    deficit: Option<f64>,
    /// Its compute span with the largest excess.
    span: Option<SpanExcess>,
    /// Why it is a suspect, and what it costs the job per step.
    suspect: Option<(Cause, f64)>,
}

fn judge_rank(m: &Medians, median_rank: &MedianRank<'_>, limits: &Limits) -> Judgement {
    let excess = m.compute - median_rank.compute.unwrap_or(m.compute);
    let deficit = match (m.wait, median_rank.wait) {
        (Some(w), Some(median_wait)) => Some(median_wait - w),
        _ => None,
    };
    let span = m
        .named
        .iter()
        .filter_map(|&(name, value)| {
            let (median, limit) = limits.spans.get(&name)?;
            Some(SpanExcess {
                name,
                value,
                excess: value - median,
                limit: *limit,
            })
        })
        .max_by(|a, b| a.excess.total_cmp(&b.excess));
    let suspect = match deficit {
        Some(d) => (d > limits.wait).then_some((Cause::Wait, d)),
        // Without a wait to compare: its compute, or one of its spans, stands out (a rank
        // without collective spans among ranks with them has only its spans to compare).
        None => {
            let by_span = span
                .filter(|s| s.excess > s.limit)
                .map(|s| (Cause::Span, s.excess));
            let by_compute = (!median_rank.use_wait && excess > limits.compute)
                .then_some((Cause::Compute, excess));
            match (by_compute, by_span) {
                (Some(c), Some(s)) if s.1 > c.1 => Some(s),
                (c, s) => c.or(s),
            }
        }
    };
    Judgement {
        excess,
        deficit,
        span,
        suspect,
    }
}

fn rank_figures(table: &Table, m: &Medians, j: &Judgement) -> RankFigures {
    let state = &table.ranks()[&m.rank];
    RankFigures {
        rank: m.rank,
        host: state.host.as_deref().map(str::to_owned),
        steps: m.steps,
        step_ms: ms(m.step),
        compute_ms: ms(m.compute),
        wait_ms: m.wait.map(ms),
        compute_excess_ms: ms(j.excess),
        wait_deficit_ms: j.deficit.map(ms),
        spans: m
            .named
            .iter()
            .map(|&(name, v)| (table.name(name).to_owned(), ms(v)))
            .collect(),
        older_steps: state.older,
        partial_steps: state.partial,
        suspect: j.suspect.is_some(),
    }
}

/// The suspect a judgement names, with its slow steps.
fn suspect(
    table: &Table,
    m: &Medians,
    j: &Judgement,
    median_rank: &MedianRank<'_>,
    limits: &Limits,
    steps: &mut StepFigures<'_>,
) -> Option<Suspect> {
    let (cause, cost) = j.suspect?;
    // The span holding the excess: the cause itself, or most of the excess.
    let span = j
        .span
        .filter(|s| cause == Cause::Span || s.excess >= cost / 2.0);
    let (measure, limit) = match (cause, span) {
        (Cause::Wait, _) => (Measure::Wait, limits.wait),
        (Cause::Span, Some(s)) => (Measure::Span(s.name), s.limit),
        _ => (Measure::Compute, limits.compute),
    };
    let (slow, compared_steps, slow_keys) = steps.slow_steps(m.rank, measure, limit);
    Some(Suspect {
        rank: m.rank,
        host: table.ranks()[&m.rank].host.as_deref().map(str::to_owned),
        cause,
        cost_ms: ms(cost),
        compute_ms: ms(m.compute),
        compute_excess_ms: ms(j.excess),
        wait_ms: m.wait.map(ms),
        median_wait_ms: median_rank.wait.map(ms),
        span: span.map(|s| table.name(s.name).to_owned()),
        span_ms: span.map(|s| ms(s.value)),
        span_excess_ms: span.map(|s| ms(s.excess)),
        outside_steps: cause == Cause::Wait && j.excess < cost / 2.0,
        slow_steps: slow,
        steps_compared: compared_steps,
        slow_step_numbers: slow_keys,
    })
}

/// What the per-rank judgement found.
struct Found {
    /// By cost, largest first.
    suspects: Vec<Suspect>,
    /// Every compared rank's figures.
    figures: Vec<RankFigures>,
    /// Every compared rank has numbered steps.
    numbered: bool,
}

/// Builds the verdict from the table: the medians, the limits, each rank judged, then the
/// verdict assembled.
pub fn judge(table: &Table, counts: Counts, settings: Settings, detail: bool) -> Verdict {
    let states = table.ranks();
    let all: Vec<Medians> = states.iter().map(|(r, s)| medians(*r, s)).collect();
    let median_rank = MedianRank::of(&all);
    let limits = Limits::of(&median_rank, settings.threshold_percent);
    let numbered = median_rank
        .compared
        .iter()
        .all(|m| states[&m.rank].numbered);
    let base = median_rank.base.iter().map(|m| m.rank).collect();
    let mut steps = StepFigures::new(states, base, numbered);
    let mut found = Found {
        suspects: Vec::new(),
        figures: Vec::new(),
        numbered,
    };
    for m in &median_rank.compared {
        let judgement = judge_rank(m, &median_rank, &limits);
        found.figures.push(rank_figures(table, m, &judgement));
        found.suspects.extend(suspect(
            table,
            m,
            &judgement,
            &median_rank,
            &limits,
            &mut steps,
        ));
    }
    found
        .suspects
        .sort_by(|a, b| b.cost_ms.total_cmp(&a.cost_ms).then(a.rank.cmp(&b.rank)));
    assemble(
        table,
        &median_rank,
        &limits,
        found,
        counts,
        settings,
        detail,
    )
}

/// The verdict around the suspects: the median rank, the ranks not compared or missing, the
/// steps and spans seen.
fn assemble(
    table: &Table,
    median_rank: &MedianRank<'_>,
    limits: &Limits,
    found: Found,
    counts: Counts,
    settings: Settings,
    detail: bool,
) -> Verdict {
    let states = table.ranks();
    let world_size = settings.world_size.or(table.world_size);
    // The gaps between the ranks read, below the world size.
    let missing_ranks = world_size.map_or_else(Vec::new, |w| gaps(states.keys().copied(), w));
    let keys = |f: fn(&RankState) -> Option<i64>| {
        median_rank
            .base
            .iter()
            .filter_map(move |m| f(&states[&m.rank]))
    };
    let compute_names: BTreeSet<u16> = median_rank
        .compared
        .iter()
        .flat_map(|m| m.named.iter().map(|(n, _)| *n))
        .collect();
    Verdict {
        cost_ms_per_step: found.suspects.first().map(|s| s.cost_ms),
        suspects: found.suspects,
        threshold_percent: settings.threshold_percent,
        limit_ms: ms(limits.of_measure(median_rank)),
        step_ms: median_rank.step.map(ms),
        compute_ms: median_rank.compute.map(ms),
        wait_ms: median_rank.wait.map(ms),
        world_size,
        ranks_read: states.len(),
        ranks_compared: median_rank.compared.len(),
        missing_count: count(&missing_ranks) as i64,
        missing_ranks,
        few_steps_ranks: median_rank
            .all
            .iter()
            .filter(|m| m.steps < MIN_STEPS)
            .map(|m| m.rank)
            .collect(),
        no_collective_ranks: if median_rank.use_wait {
            median_rank
                .compared
                .iter()
                .filter(|m| m.wait.is_none())
                .map(|m| m.rank)
                .collect()
        } else {
            Vec::new()
        },
        first_step: keys(|s| s.window().front().map(|e| e.key))
            .min()
            .filter(|_| found.numbered),
        last_step: keys(|s| s.window().back().map(|e| e.key))
            .max()
            .filter(|_| found.numbered),
        steps_per_rank: median(median_rank.column(|m| m.steps as f64)).unwrap_or(0.0) as usize,
        window: WINDOW,
        collective_spans: table.collective_names.iter().cloned().collect(),
        compute_spans: compute_names
            .into_iter()
            .map(|n| table.name(n).to_owned())
            .collect(),
        ranks_over_budget: table.ranks_over_budget,
        counts,
        merges: table.merges,
        per_rank: detail.then_some(found.figures),
    }
}
