//! The slow steps of a suspect: each step of the rank against the same step of the other
//! ranks (their median), matched by step number, else by position from the latest step.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::table::{Entry, RankState};

/// What the slow steps of a suspect are measured by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Measure {
    Wait,
    Compute,
    Span(u16),
}

/// The figure of one step of one rank (`None`: the rank does not follow the span).
fn figure(measure: Measure, state: &RankState, e: &Entry) -> Option<f64> {
    Some(match measure {
        Measure::Wait => f64::from(e.wait_us().unwrap_or(0)),
        Measure::Compute => f64::from(e.compute_us()),
        Measure::Span(name) => f64::from(e.named[state.slot_of(name)?]),
    })
}

/// Each step's figures over the compared ranks, sorted, per measure: built once per measure
/// (not per suspect: thousands of suspects among thousands of ranks stay linear).
pub(super) struct StepFigures<'a> {
    states: &'a BTreeMap<i64, RankState>,
    /// The ranks of the median rank's base.
    base: Vec<i64>,
    /// Steps are matched by number (else by position from the latest step: clocks of ranks
    /// are never compared).
    numbered: bool,
    by_measure: HashMap<Measure, HashMap<i64, Vec<f64>>>,
}

impl<'a> StepFigures<'a> {
    pub(super) fn new(
        states: &'a BTreeMap<i64, RankState>,
        base: Vec<i64>,
        numbered: bool,
    ) -> Self {
        StepFigures {
            states,
            base,
            numbered,
            by_measure: HashMap::new(),
        }
    }

    fn key(&self, w: &VecDeque<Entry>, i: usize) -> i64 {
        if self.numbered {
            w[i].key
        } else {
            (w.len() - 1 - i) as i64
        }
    }

    fn of(&mut self, measure: Measure) -> &HashMap<i64, Vec<f64>> {
        if !self.by_measure.contains_key(&measure) {
            let mut per_step: HashMap<i64, Vec<f64>> = HashMap::new();
            for rank in &self.base {
                let state = &self.states[rank];
                let w = state.window();
                for i in 0..w.len() {
                    if let Some(v) = figure(measure, state, &w[i]) {
                        per_step.entry(self.key(w, i)).or_default().push(v);
                    }
                }
            }
            for v in per_step.values_mut() {
                v.sort_by(f64::total_cmp);
            }
            self.by_measure.insert(measure, per_step);
        }
        &self.by_measure[&measure]
    }

    /// The steps where `rank` waited less, or computed (in a span) more, than the step's other
    /// ranks (their median) by more than `limit`: (slow, compared, the slow steps' numbers when
    /// steps are numbered).
    pub(super) fn slow_steps(
        &mut self,
        rank: i64,
        measure: Measure,
        limit: f64,
    ) -> (usize, usize, Option<Vec<i64>>) {
        let me = &self.states[&rank];
        let mine = me.window();
        let keys: Vec<i64> = (0..mine.len()).map(|i| self.key(mine, i)).collect();
        let numbered = self.numbered;
        let per_step = self.of(measure);
        let (mut slow, mut compared, mut slow_keys) = (0, 0, Vec::new());
        for (i, k) in keys.into_iter().enumerate() {
            let Some(here) = figure(measure, me, &mine[i]) else {
                continue;
            };
            let Some(typical) = per_step.get(&k).and_then(|v| median_without(v, here)) else {
                continue;
            };
            compared += 1;
            let gap = match measure {
                Measure::Wait => typical - here,
                _ => here - typical,
            };
            if gap > limit {
                slow += 1;
                slow_keys.push(k);
            }
        }
        slow_keys.sort_unstable();
        (slow, compared, numbered.then_some(slow_keys))
    }
}

/// The median of `sorted` without one occurrence of `x` (the rank's own figure, when it is
/// there); `None` when nothing else is left.
pub(super) fn median_without(sorted: &[f64], x: f64) -> Option<f64> {
    let p = sorted.partition_point(|v| *v < x);
    let (skip, n) = match sorted.get(p) {
        Some(v) if *v == x => (p, sorted.len() - 1),
        _ => (sorted.len(), sorted.len()),
    };
    if n == 0 {
        return None;
    }
    let at = |k: usize| if k < skip { sorted[k] } else { sorted[k + 1] };
    Some(if n % 2 == 1 {
        at(n / 2)
    } else {
        (at(n / 2 - 1) + at(n / 2)) / 2.0
    })
}
