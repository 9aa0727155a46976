//! `nemo-lens straggler FILES...`: which rank the others wait for, among thousands.
//!
//! The input is any mix of flight-recorder dumps (their default groups `job,step,checkpoint,
//! collective` are enough) and console JSONL of exporting ranks (groups that include the step
//! and the collective spans, e.g. `NEMO_LENS_SPAN_GROUPS=per_step,collective`), plain or gzip,
//! read in parallel ([`input::for_each_file`]). From each rank's spans, [`collect`] measures per
//! step the time waiting in collective spans and the rest (compute); [`table`] keeps each rank's
//! latest steps in fixed memory; [`verdict`] names the ranks the others wait for and what that
//! costs per step, and [`slow_steps`] in which steps; [`render`] prints it in a few lines (`--detail`: every rank), or `--json`.
//! `summary` prints the same verdict after its tables, through [`Analysis`].
//!
//! Exit code 3 when a suspect is named, 0 when none, 2 when no rank has a complete step.

mod collect;
mod render;
mod slow_steps;
mod table;
#[cfg(test)]
mod tests;
mod verdict;

pub use collect::{STEP_SPAN_NAMES, SpanNames, step_number};
pub use render::{verdict as render_verdict, warnings as merge_warnings};
pub use verdict::{Settings, Verdict};

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Mutex;

use anyhow::{Context as _, Result};
use serde_json::Value;

use crate::input::{self, Reading, Record, Span};
use collect::{Counts, FileCollector};
use table::Table;

/// The straggler analysis of a whole input, fed file by file (from several threads).
pub struct Analysis {
    table: Mutex<Table>,
    names: SpanNames,
    counts: Mutex<Counts>,
}

/// The analysis of one file: feed it the file's spans in order, then give it back with
/// [`Analysis::done`].
pub struct FileAnalysis<'a>(FileCollector<'a>);

impl FileAnalysis<'_> {
    /// Takes the next span of the file.
    pub fn span(&mut self, span: &Span) {
        self.0.span(span);
    }
}

impl Analysis {
    /// An empty analysis; `names` adds step and collective span names to the built-in ones.
    pub fn new(names: SpanNames) -> Self {
        Analysis {
            table: Mutex::new(Table::default()),
            names,
            counts: Mutex::new(Counts::default()),
        }
    }

    /// Starts a file.
    pub fn file(&self) -> FileAnalysis<'_> {
        FileAnalysis(FileCollector::new(&self.table, &self.names))
    }

    /// Ends a file.
    pub fn done(&self, file: FileAnalysis<'_>) {
        let counts = file.0.finish();
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .add(counts);
    }

    /// The verdict over everything read; `detail` adds every rank's figures.
    pub fn verdict(&self, settings: Settings, detail: bool) -> Verdict {
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let counts = *self.counts.lock().unwrap_or_else(|e| e.into_inner());
        verdict::judge(&table, counts, settings, detail)
    }
}

/// What `straggler` was asked to do.
#[derive(Debug)]
pub struct Options {
    /// Inputs.
    pub files: Vec<PathBuf>,
    /// Every rank's figures after the verdict.
    pub detail: bool,
    /// JSON instead of text.
    pub json: bool,
    /// Threshold and world size.
    pub settings: Settings,
    /// More step and collective span names.
    pub names: SpanNames,
    /// How input is read.
    pub reading: Reading,
}

/// Reads the files into an analysis (shared by `straggler` and nothing else: `summary` feeds
/// its own read).
fn analyse(opts: &Options) -> Result<(Analysis, input::Stats)> {
    let analysis = Analysis::new(opts.names.clone());
    let stats = opts.reading.for_each_file(&opts.files, |records| {
        let mut file = analysis.file();
        while let Some(record) = records.next_record() {
            if let Record::Span(span) = record {
                file.span(&span);
            }
        }
        analysis.done(file);
        Ok(())
    })?;
    Ok((analysis, stats))
}

/// Runs `nemo-lens straggler`: `Ok(true)` when a suspect is named.
pub fn run(opts: &Options) -> Result<bool> {
    let (analysis, stats) = analyse(opts)?;
    stats.report();
    let verdict = analysis.verdict(opts.settings, opts.detail);
    for line in render::warnings(&verdict) {
        eprintln!("warning: {line}");
    }
    anyhow::ensure!(
        verdict.ranks_compared > 0,
        "no rank has a complete step to compare ({} rank(s) read): a step is a span named {} \
         (or --step-span), or of group `step` in a flight-recorder dump",
        verdict.ranks_read,
        STEP_SPAN_NAMES.map(|n| format!("`{n}`")).join(" or ")
    );
    let text = if opts.json {
        #[derive(serde::Serialize)]
        struct Output<'a> {
            #[serde(flatten)]
            verdict: &'a Verdict,
            input: Value,
        }
        let output = Output {
            verdict: &verdict,
            input: stats.to_json(),
        };
        serde_json::to_string_pretty(&output)? + "\n"
    } else {
        render::verdict(&verdict) + &render::detail(&verdict)
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .context("cannot write the report to stdout")?;
    Ok(!verdict.suspects.is_empty())
}
