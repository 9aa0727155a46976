//! From the spans of one file to complete steps: which span is a step, a collective or compute,
//! and how long each step of each rank waited in collectives.
//!
//! A file is read by one thread, in its order. Exporters and the flight recorder write a span
//! when it ends, so the children of a step come before the step: collective and compute spans
//! wait in a small per-rank list until a step span that contains them (same rank, so the same
//! clock) ends. The step's wait is the union of its collective spans (overlapping collectives
//! are counted once); its compute is the rest of the step. Times of different ranks are never
//! compared: only durations leave this module.
//!
//! Steps that cannot be compared are counted, not used: a span still open at a dump
//! (`nemo.span.open`), a truncated one (`nemo.span.truncated`), and a step of a dump that started
//! before the dump's oldest closed span (the recorder's ring may have dropped its first
//! children).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use nemo_lens::semconv::{self, NEMO_GROUP, NEMO_SPAN_OPEN};
use serde_json::Value;

use super::table::{MAX_NAME_BYTES, StepRecord, Table};
use crate::input::Span;

/// Span names taken as the training step when the span carries no group (`step` group in a
/// dump).
pub const STEP_SPAN_NAMES: [&str; 2] = ["step", "train_step"];

/// Span names taken as collectives when the span carries no group (`collective` group in a
/// dump): the operations of `torch.distributed` and NCCL.
pub const COLLECTIVE_SPAN_NAMES: [&str; 16] = [
    "all_reduce",
    "allreduce",
    "all_gather",
    "allgather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reducescatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "alltoall",
    "all_to_all_single",
    "broadcast",
    "barrier",
    "reduce",
    "gather",
    "scatter",
];

/// Span attributes holding the step number, in order of preference. `step` is the field name
/// of the trainer example's `#[instrument]`ed `train_step(step: u64, ...)`.
pub const STEP_ATTRIBUTES: [&str; 2] = [semconv::DL_STEP, "step"];

/// Spans of one rank waiting for their step, per file.
const MAX_PENDING: usize = 4096;
/// Compute span names remembered per file without asking the table.
const MAX_CACHED_NAMES: usize = 256;

/// The step number of a span: its `dl.step` or `step` attribute.
pub fn step_number(attributes: &serde_json::Map<String, Value>) -> Option<i64> {
    STEP_ATTRIBUTES
        .iter()
        .find_map(|k| match attributes.get(*k) {
            Some(Value::Number(n)) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
            Some(Value::String(s)) => s.trim().parse().ok(),
            _ => None,
        })
}

/// Which spans are steps and collectives, beyond the built-in names.
#[derive(Debug, Clone, Default)]
pub struct SpanNames {
    /// More names of step spans.
    pub step: Vec<String>,
    /// More names of collective spans.
    pub collective: Vec<String>,
}

/// What a span is to the straggler analysis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Step,
    Collective,
    Other,
}

impl SpanNames {
    fn kind(&self, name: &str, group: Option<&str>) -> Kind {
        match group {
            Some("step") => return Kind::Step,
            Some("collective") => return Kind::Collective,
            _ => {}
        }
        let is = |builtin: &[&str], more: &[String]| {
            builtin.contains(&name) || more.iter().any(|n| n == name)
        };
        if group.is_none() && is(&STEP_SPAN_NAMES, &self.step) {
            Kind::Step
        } else if group.is_none() && is(&COLLECTIVE_SPAN_NAMES, &self.collective) {
            Kind::Collective
        } else if self.step.iter().any(|n| n == name) {
            Kind::Step
        } else if self.collective.iter().any(|n| n == name) {
            Kind::Collective
        } else {
            Kind::Other
        }
    }
}

/// One rank's spans waiting for their step.
#[derive(Debug, Default)]
struct Pending {
    /// End of the oldest closed span of a dump read so far.
    oldest_close_us: Option<i64>,
    collectives: Vec<(i64, i64)>,
    compute: Vec<(u16, i64, i64)>,
}

/// Counts of what a file's spans were.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct Counts {
    /// Spans without a rank (no `dl.rank`, no `rankN` in the file name).
    #[serde(rename = "spans_without_rank")]
    pub without_rank: u64,
    /// Collective spans inside no step span.
    pub collectives_outside_steps: u64,
    /// Spans dropped from a full list of spans waiting for their step.
    #[serde(rename = "spans_over_pending_budget")]
    pub pending_over_budget: u64,
}

impl Counts {
    /// Adds `other`.
    pub fn add(&mut self, other: Counts) {
        self.without_rank += other.without_rank;
        self.collectives_outside_steps += other.collectives_outside_steps;
        self.pending_over_budget += other.pending_over_budget;
    }
}

/// The straggler analysis of one file: feed it every span of the file in order.
pub struct FileCollector<'t> {
    table: &'t Mutex<Table>,
    names: &'t SpanNames,
    /// The file's ranks (mostly one) and their spans waiting for a step.
    ranks: Vec<(i64, Pending)>,
    index: HashMap<i64, usize>,
    /// The last rank seen and its place in `ranks`: a file is mostly one rank.
    last: Option<(i64, usize)>,
    cached: HashMap<Box<str>, Option<u16>>,
    collective_names: HashSet<Box<str>>,
    /// What the file's spans were.
    pub counts: Counts,
}

impl<'t> FileCollector<'t> {
    /// A collector feeding `table`.
    pub fn new(table: &'t Mutex<Table>, names: &'t SpanNames) -> Self {
        FileCollector {
            table,
            names,
            ranks: Vec::new(),
            index: HashMap::new(),
            last: None,
            cached: HashMap::new(),
            collective_names: HashSet::new(),
            counts: Counts::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'t, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn name_id(&mut self, name: &str) -> Option<u16> {
        if let Some(id) = self.cached.get(name) {
            return *id;
        }
        let id = self.lock().intern(name);
        if self.cached.len() < MAX_CACHED_NAMES && name.len() <= MAX_NAME_BYTES {
            self.cached.insert(name.into(), id);
        }
        id
    }

    /// Takes one span of the file.
    pub fn span(&mut self, span: &Span) {
        let Some(rank) = span.rank else {
            self.counts.without_rank += 1;
            return;
        };
        let Some(at) = self.place(rank, span) else {
            return;
        };
        let attributes = &span.attributes;
        let group = attributes.get(NEMO_GROUP).and_then(Value::as_str);
        let kind = self.names.kind(&span.name, group);
        if matches!(attributes.get(NEMO_SPAN_OPEN), Some(Value::Bool(true))) || span.is_truncated()
        {
            if kind == Kind::Step {
                self.lock().partial(rank);
            }
            return;
        }
        let (start, end) = (span.start_us, span.end_us.max(span.start_us));
        match kind {
            Kind::Step => self.step(at, span, group.is_some()),
            Kind::Collective => {
                if !self.collective_names.contains(span.name.as_str())
                    && self.collective_names.len() < MAX_CACHED_NAMES
                {
                    self.collective_names.insert(span.name.as_str().into());
                    self.lock().collective_name(&span.name);
                }
                let p = &mut self.ranks[at].1;
                p.collectives.push((start, end));
                let over = trim(&mut p.collectives);
                self.counts.pending_over_budget += over;
            }
            Kind::Other => {
                if let Some(id) = self.name_id(&span.name) {
                    let p = &mut self.ranks[at].1;
                    p.compute.push((id, start, end));
                    let over = trim(&mut p.compute);
                    self.counts.pending_over_budget += over;
                }
            }
        }
        if group.is_some() {
            let p = &mut self.ranks[at].1;
            p.oldest_close_us = Some(p.oldest_close_us.map_or(end, |t| t.min(end)));
        }
    }

    /// The place of `rank` in `ranks`; `None` when the table has no room for a new rank.
    fn place(&mut self, rank: i64, span: &Span) -> Option<usize> {
        if let Some((r, at)) = self.last
            && r == rank
        {
            return Some(at);
        }
        let at = match self.index.get(&rank) {
            Some(&at) => at,
            None => {
                self.lock()
                    .rank(rank, span.host.as_deref(), span.world_size)?;
                self.ranks.push((rank, Pending::default()));
                self.index.insert(rank, self.ranks.len() - 1);
                self.ranks.len() - 1
            }
        };
        self.last = Some((rank, at));
        Some(at)
    }

    /// A step span ended: its wait and compute from the spans inside it.
    fn step(&mut self, at: usize, span: &Span, from_dump: bool) {
        let (start, end) = (span.start_us, span.end_us.max(span.start_us));
        let (rank, p) = &mut self.ranks[at];
        let rank = *rank;
        let inside = |s: i64, e: i64| s >= start && e <= end;
        let mut waits: Vec<(i64, i64)> = p
            .collectives
            .iter()
            .copied()
            .filter(|&(s, e)| inside(s, e))
            .collect();
        let mut named: Vec<(u16, i64)> = Vec::new();
        for &(id, s, e) in &p.compute {
            if inside(s, e) {
                match named.iter_mut().find(|(n, _)| *n == id) {
                    Some((_, us)) => *us += e - s,
                    None => named.push((id, e - s)),
                }
            }
        }
        let outside = p
            .collectives
            .iter()
            .filter(|&&(s, e)| e <= end && !inside(s, e))
            .count();
        self.counts.collectives_outside_steps += outside as u64;
        p.collectives.retain(|&(_, e)| e > end);
        p.compute.retain(|&(_, _, e)| e > end);
        // A dump's ring may have lost the first children of a step that started before the
        // oldest span it kept had ended.
        let complete = !from_dump || p.oldest_close_us.is_some_and(|t| t <= start);
        let mut table = self.lock();
        if !complete {
            table.partial(rank);
            return;
        }
        let (key, numbered) = match step_number(&span.attributes) {
            Some(n) => (n, true),
            None => (start, false),
        };
        let record = StepRecord {
            key,
            numbered,
            step_us: end - start,
            wait_us: (!waits.is_empty()).then(|| union_us(&mut waits)),
            named,
        };
        table.push(rank, &record);
    }

    /// Collective spans still waiting at the end of the file ended after every step: they are
    /// outside the steps too.
    pub fn finish(mut self) -> Counts {
        for (_, p) in &self.ranks {
            self.counts.collectives_outside_steps += p.collectives.len() as u64;
        }
        self.counts
    }
}

/// Drops the older half of a full pending list; returns how many were dropped.
fn trim<T>(list: &mut Vec<T>) -> u64 {
    if list.len() <= MAX_PENDING {
        return 0;
    }
    let n = list.len() / 2;
    list.drain(..n);
    n as u64
}

/// Length of the union of intervals.
fn union_us(intervals: &mut [(i64, i64)]) -> i64 {
    intervals.sort_unstable();
    let mut total = 0;
    let mut current: Option<(i64, i64)> = None;
    for &(s, e) in intervals.iter() {
        current = match current {
            Some((cs, ce)) if s <= ce => Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    total + current.map_or(0, |(s, e)| e - s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_collectives_count_once() {
        assert_eq!(union_us(&mut []), 0);
        assert_eq!(
            union_us(&mut [(10, 20), (0, 5), (15, 30), (40, 41)]),
            5 + 20 + 1
        );
    }

    #[test]
    fn groups_win_over_names_and_flags_add_names() {
        let names = SpanNames {
            step: vec!["iteration".into()],
            collective: vec!["nccl:all_reduce".into()],
        };
        assert_eq!(names.kind("train_step", None), Kind::Step);
        assert_eq!(names.kind("iteration", None), Kind::Step);
        assert_eq!(names.kind("all_gather", None), Kind::Collective);
        assert_eq!(names.kind("nccl:all_reduce", None), Kind::Collective);
        assert_eq!(names.kind("forward_backward", None), Kind::Other);
        // In a dump every span carries its group.
        assert_eq!(names.kind("sync", Some("collective")), Kind::Collective);
        assert_eq!(
            names.kind("all_reduce", Some("forward_backward")),
            Kind::Other
        );
        assert_eq!(names.kind("iteration", Some("job")), Kind::Step);
    }
}
