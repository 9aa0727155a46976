//! Lost work in `summary`: per rank, how many `megatron.train.iteration` spans were committed,
//! redone after a requeue, or never checkpointed, by the rule of [`crate::goodput::lost`] applied
//! to each file (as NeMo Lens's tools apply it to each rank's file).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::goodput::lost::Iterations;
use crate::input::Span;

/// One file's iterations and checkpoints, as read.
#[derive(Default)]
pub(super) struct FileIterations {
    iterations: Iterations,
    rank: Option<i64>,
    /// Spans whose `megatron.iteration` is not a number (read as having none).
    bad_numbers: u64,
}

impl FileIterations {
    pub(super) fn span(&mut self, span: &Span) {
        if self
            .iterations
            .observe(&span.name, span.start_us, span.end_us, &span.attributes)
            .is_err()
        {
            self.bad_numbers += 1;
        }
        if self.rank.is_none() && span.name == crate::goodput::lost::ITERATION {
            self.rank = span.rank;
        }
    }

    /// The file's counts, keyed by rank.
    pub(super) fn done(self, into: &mut BTreeMap<i64, LostRow>, unknown_rank: i64) {
        if self.iterations.is_empty() && self.bad_numbers == 0 {
            return;
        }
        let (committed, redone, uncommitted) = self.iterations.verdict().counts();
        let rank = self.rank.unwrap_or(unknown_rank);
        let row = into.entry(rank).or_insert_with(|| LostRow {
            rank: (rank != unknown_rank).then_some(rank),
            ..LostRow::default()
        });
        row.committed += committed;
        row.redone += redone;
        row.uncommitted += uncommitted;
        row.unnumbered += self.bad_numbers;
    }
}

/// One rank's iterations by fate.
#[derive(Debug, Default, Clone, Serialize)]
pub struct LostRow {
    rank: Option<i64>,
    committed: u64,
    redone: u64,
    uncommitted: u64,
    /// Iteration or checkpoint spans whose `megatron.iteration` is not a number.
    unnumbered: u64,
}

impl LostRow {
    /// Adds another file's counts of the same rank.
    pub(super) fn add(&mut self, other: &LostRow) {
        self.committed += other.committed;
        self.redone += other.redone;
        self.uncommitted += other.uncommitted;
        self.unnumbered += other.unnumbered;
    }
}

/// The lost-work table: ranks, then their sum.
#[derive(Debug, Serialize)]
pub struct LostWork {
    ranks: Vec<LostRow>,
    committed: u64,
    redone: u64,
    uncommitted: u64,
}

/// The table of the ranks with iterations (`None` when no file has any).
pub(super) fn table(rows: &BTreeMap<i64, LostRow>) -> Option<LostWork> {
    if rows.is_empty() {
        return None;
    }
    let ranks: Vec<LostRow> = rows.values().cloned().collect();
    Some(LostWork {
        committed: ranks.iter().map(|r| r.committed).sum(),
        redone: ranks.iter().map(|r| r.redone).sum(),
        uncommitted: ranks.iter().map(|r| r.uncommitted).sum(),
        ranks,
    })
}

/// The text section.
pub(super) fn text(lost: &LostWork, out: &mut String) {
    let _ = writeln!(
        out,
        "\nLost work (megatron.train.iteration spans: committed by a checkpoint of their run, \
         redone after a requeue, or never checkpointed)"
    );
    let _ = writeln!(
        out,
        "  {:>6}  {:>10}  {:>8}  {:>11}",
        "rank", "committed", "redone", "uncommitted"
    );
    for r in &lost.ranks {
        let rank = r.rank.map_or_else(|| "?".to_owned(), |v| v.to_string());
        let _ = writeln!(
            out,
            "  {rank:>6}  {:>10}  {:>8}  {:>11}",
            r.committed, r.redone, r.uncommitted
        );
    }
    let _ = writeln!(
        out,
        "  {:>6}  {:>10}  {:>8}  {:>11}",
        "all", lost.committed, lost.redone, lost.uncommitted
    );
}
