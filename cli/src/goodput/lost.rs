//! The lost-work rule: which `megatron.train.iteration` spans of one rank were committed, redone
//! or never committed. NeMo Lens's `iteration_status` (tools/lens_analysis.py) decides it the
//! same way, and `goodput`, `summary` and `perfetto` all use this one rule so they cannot
//! disagree.
//!
//! The iterations with a `megatron.iteration` attribute, in start order, form runs: an iteration
//! whose number is not above the previous one's starts a new run (a requeue reloaded a
//! checkpoint, or training restarted). A run's last checkpoint is the highest iteration number of
//! the `megatron.checkpoint.exposed_save` / `megatron.checkpoint.save` spans that start inside
//! the run, or at most one second after its last iteration ends. An iteration up to that
//! checkpoint is committed; past it (or in a run without one) it is redone when a later run
//! exists, else uncommitted.

use serde_json::{Map, Value};

/// The span of one training iteration.
pub const ITERATION: &str = "megatron.train.iteration";
/// Its attribute holding the iteration number (also on checkpoint spans).
pub const ITERATION_ATTRIBUTE: &str = "megatron.iteration";
/// Checkpoint saves: their iteration number commits a run up to it.
pub const CHECKPOINTS: [&str; 2] = [
    "megatron.checkpoint.exposed_save",
    "megatron.checkpoint.save",
];
/// How late after a run's last iteration a checkpoint may start and still count for the run.
const CHECKPOINT_GRACE_US: i64 = 1_000_000;

/// What became of an iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Up to a checkpoint of its run.
    Committed,
    /// Past its run's last checkpoint, and a later run exists (it recomputed the work).
    Redone,
    /// Past the last run's last checkpoint: the job ended without saving it.
    Uncommitted,
}

impl Status {
    /// `committed`, `redone` or `uncommitted` (the suffix Lens gives lost iterations' names).
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Committed => "committed",
            Status::Redone => "redone",
            Status::Uncommitted => "uncommitted",
        }
    }
}

/// The iteration number of an attribute value as Python's `int(v)` gives it: an integer, a
/// float truncated toward zero, a numeric string, a bool. `Err` for anything else (Lens's tool
/// stops there; the callers count it and treat the span as having no number).
pub fn number_of(v: &Value) -> Result<i64, ()> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.is_finite())
                    .map(|f| f.trunc() as i64)
            })
            .ok_or(()),
        Value::Bool(b) => Ok(i64::from(*b)),
        Value::String(s) => s.trim().replace('_', "").parse().map_err(|_| ()),
        _ => Err(()),
    }
}

/// The `megatron.iteration` attribute: `Ok(None)` when absent or null.
pub fn iteration_number(attributes: &Map<String, Value>) -> Result<Option<i64>, ()> {
    match attributes.get(ITERATION_ATTRIBUTE) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => number_of(v).map(Some),
    }
}

/// One iteration span.
#[derive(Debug, Clone, Copy)]
pub struct Iteration {
    /// Start, µs since the epoch.
    pub start_us: i64,
    /// End, µs since the epoch.
    pub end_us: i64,
    /// `megatron.iteration`.
    pub number: i64,
}

/// One run of a rank: iterations without a backward jump.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Run {
    /// Start of its first iteration (µs).
    pub start_us: i64,
    /// Latest end of its iterations (µs).
    pub end_us: i64,
    /// Number of its first iteration.
    pub first_iteration: i64,
    /// Number of its last iteration.
    pub last_iteration: i64,
    /// Its last checkpoint's iteration, if any.
    pub last_checkpoint: Option<i64>,
    /// Iterations committed.
    pub committed: u64,
    /// Iterations redone by a later run.
    pub redone: u64,
    /// Iterations the job never saved.
    pub uncommitted: u64,
}

/// The iterations and checkpoints of one rank (or file), in the order read.
#[derive(Debug, Default)]
pub struct Iterations {
    iterations: Vec<Iteration>,
    /// `(start µs, iteration)` of each checkpoint save.
    checkpoints: Vec<(i64, i64)>,
}

/// The verdict for every iteration (in the order they were added) and the runs.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Status of each iteration, in the order added.
    pub status: Vec<Status>,
    /// Run index of each iteration, in the order added.
    pub run: Vec<usize>,
    /// The runs, in time order.
    pub runs: Vec<Run>,
}

impl Verdict {
    /// Iterations per status: `(committed, redone, uncommitted)`.
    pub fn counts(&self) -> (u64, u64, u64) {
        self.runs.iter().fold((0, 0, 0), |(c, r, u), run| {
            (c + run.committed, r + run.redone, u + run.uncommitted)
        })
    }
}

impl Iterations {
    /// Adds an iteration span (one with an iteration number).
    pub fn iteration(&mut self, iteration: Iteration) {
        self.iterations.push(iteration);
    }

    /// Adds a checkpoint save started at `start_us` for iteration `number`.
    pub fn checkpoint(&mut self, start_us: i64, number: i64) {
        self.checkpoints.push((start_us, number));
    }

    /// Adds a span if the rule reads it; `Err` when its iteration number is not a number.
    pub fn observe(
        &mut self,
        name: &str,
        start_us: i64,
        end_us: i64,
        attributes: &Map<String, Value>,
    ) -> Result<(), ()> {
        if name == ITERATION {
            if let Some(number) = iteration_number(attributes)? {
                self.iteration(Iteration {
                    start_us,
                    end_us,
                    number,
                });
            }
        } else if CHECKPOINTS.contains(&name)
            && let Some(number) = iteration_number(attributes)?
        {
            self.checkpoint(start_us, number);
        }
        Ok(())
    }

    /// Whether no iteration was added.
    pub fn is_empty(&self) -> bool {
        self.iterations.is_empty()
    }

    /// Applies the rule.
    pub fn verdict(&self) -> Verdict {
        let n = self.iterations.len();
        let mut order: Vec<usize> = (0..n).collect();
        // Stable: iterations starting together keep the order they were read in.
        order.sort_by_key(|&i| self.iterations[i].start_us);
        let mut run_of = vec![0usize; n];
        let mut runs: Vec<Run> = Vec::new();
        let mut prev: Option<i64> = None;
        for &i in &order {
            let it = self.iterations[i];
            if runs.is_empty() || prev.is_some_and(|p| it.number <= p) {
                runs.push(Run {
                    start_us: it.start_us,
                    end_us: it.end_us,
                    first_iteration: it.number,
                    ..Run::default()
                });
            }
            let run = runs.last_mut().expect("a run was just opened");
            run.end_us = run.end_us.max(it.end_us);
            run.last_iteration = it.number;
            run_of[i] = runs.len() - 1;
            prev = Some(it.number);
        }
        for run in &mut runs {
            run.last_checkpoint = self
                .checkpoints
                .iter()
                .filter(|(t, _)| run.start_us <= *t && *t <= run.end_us + CHECKPOINT_GRACE_US)
                .map(|(_, it)| *it)
                .max();
        }
        let last = runs.len().saturating_sub(1);
        let status = (0..n)
            .map(|i| {
                let r = run_of[i];
                let run = &mut runs[r];
                let st = match run.last_checkpoint {
                    Some(lc) if self.iterations[i].number <= lc => Status::Committed,
                    _ if r == last => Status::Uncommitted,
                    _ => Status::Redone,
                };
                match st {
                    Status::Committed => run.committed += 1,
                    Status::Redone => run.redone += 1,
                    Status::Uncommitted => run.uncommitted += 1,
                }
                st
            })
            .collect();
        Verdict {
            status,
            run: run_of,
            runs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn it(start_s: i64, number: i64) -> Iteration {
        Iteration {
            start_us: start_s * 1_000_000,
            end_us: (start_s + 1) * 1_000_000,
            number,
        }
    }

    #[test]
    fn a_backward_jump_starts_a_run_and_the_tail_past_its_checkpoint_is_redone() {
        let mut its = Iterations::default();
        for (t, n) in [(0, 1), (1, 2), (2, 3), (10, 3), (11, 4)] {
            its.iteration(it(t, n));
        }
        its.checkpoint(2_000_000, 2); // inside run 0
        its.checkpoint(12_500_000, 4); // 0.5 s after run 1 ends
        let v = its.verdict();
        use Status::*;
        assert_eq!(
            v.status,
            [Committed, Committed, Redone, Committed, Committed]
        );
        assert_eq!(v.run, [0, 0, 0, 1, 1]);
        assert_eq!(v.counts(), (4, 1, 0));
    }

    #[test]
    fn a_save_more_than_a_second_late_leaves_the_last_run_uncommitted() {
        let mut its = Iterations::default();
        its.iteration(it(0, 1));
        its.iteration(it(1, 2));
        its.checkpoint(3_000_001, 2);
        assert_eq!(its.verdict().counts(), (0, 0, 2));
    }

    #[test]
    fn iteration_numbers_convert_as_python_int_does() {
        assert_eq!(number_of(&json!(9)), Ok(9));
        assert_eq!(number_of(&json!(9.7)), Ok(9));
        assert_eq!(number_of(&json!(-2.5)), Ok(-2));
        assert_eq!(number_of(&json!(" 12 ")), Ok(12));
        assert_eq!(number_of(&json!(true)), Ok(1));
        assert_eq!(number_of(&json!("9.5")), Err(()));
        assert_eq!(number_of(&json!([1])), Err(()));
    }
}
