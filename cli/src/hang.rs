//! `nemo-lens hang DUMPS...`: which rank is stuck, and where, from flight-recorder dumps.
//!
//! The input is the dumps the flight recorder (`nemo_lens::flight_recorder`) writes on every enabled
//! rank (on `SIGUSR1`, from the watchdog, at truncation): console JSONL whose open spans carry
//! `nemo.span.open = true` and `nemo.span.open_age_s`. For each rank the latest dump is used
//! (the one taken last, by its latest end time); other JSONL lines without open spans are read
//! too, they only tell that the rank wrote something.
//!
//! # The report
//!
//! * **Where each rank is**: the innermost open span of the rank (the open span no other open
//!   span descends from; if several threads have one, the latest started of those under a
//!   step, else the latest started: a framework's runtime threads have parentless spans of
//!   their own), with its step (the
//!   `dl.step` or `step` attribute of that span or of its nearest open ancestor) and how long it
//!   had been open. Ranks at the same span and step are grouped, largest group first:
//!   `7 ranks in `all_reduce` at step 3, open 2.1 s (ranks 0-4,6-7)`.
//! * **Outliers**: ranks at another span or step than the largest group (ties: the group waiting
//!   in a `collective` span is taken as the majority, since waiting is what the healthy ranks of
//!   a hung collective do), ranks whose dump holds no open span, and ranks with no dump at all
//!   (the world size comes from the dumps' `dl.world_size` or `nv.dl.world_size`, or
//!   `--world-size`).
//! * **Suspects**: the outlier ranks. When there is one, the exit code is 3.
//!
//! `--json` prints the same as one JSON object (`world_size`, `ranks`, `groups`, `outliers`,
//! `suspects`, and the ranks without a dump as inclusive ranges in `no_dump`, counted in
//! `no_dump_count`).
//!
//! # Bounds
//!
//! Dumps are read by the shared reader ([`crate::input`]), with its record bound
//! (`--max-record-bytes`, 16 MiB): a record that is too long, not UTF-8 or not JSON is skipped
//! and counted (on stderr), never the rest of its file. What is kept does not grow with what
//! the dumps claim: per dump at most [`MAX_OPEN_SPANS`] open spans, their names cut to
//! [`MAX_NAME_BYTES`]; the ranks without a dump are ranges between the ranks with one, however
//! large the world size (`dl.world_size`, `nv.dl.world_size` or `--world-size`), and only the first
//! [`MAX_LISTED_NO_DUMP`] of them are listed one by one among the outliers and suspects.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

use anyhow::Result;
use serde::Serialize;
use serde_json::Value;

use crate::input::{self, ReadOptions, Record, Source};
use crate::ranges::{count, format_ranges, gaps, ranges};

/// Attributes holding a span's step, in order of preference.
const STEP_ATTRIBUTES: [&str; 2] = ["dl.step", "step"];

/// Open spans kept per dump (a rank's recorder holds at most 1024); more are counted.
pub const MAX_OPEN_SPANS: usize = 4096;
/// Bytes kept of a span's name and group (cut on a character boundary).
pub const MAX_NAME_BYTES: usize = 256;
/// Ranks without a dump listed one by one among the outliers (all are in `no_dump`).
pub const MAX_LISTED_NO_DUMP: usize = 1000;

/// What one rank's latest dump says.
#[derive(Debug, Clone, Serialize)]
pub struct RankState {
    /// The rank.
    pub rank: i64,
    /// The innermost open span, if any.
    pub span: Option<String>,
    /// Its span group (`nemo.group`), if dumped.
    pub group: Option<String>,
    /// Its step (or its nearest open ancestor's).
    pub step: Option<i64>,
    /// Seconds it had been open at the dump.
    pub open_s: Option<f64>,
    /// The dump file.
    pub file: PathBuf,
}

/// Ranks at one span and step.
#[derive(Debug, Serialize)]
pub struct Group {
    /// Innermost open span (`null`: no open span).
    pub span: Option<String>,
    /// Step.
    pub step: Option<i64>,
    /// Ranks, sorted.
    pub ranks: Vec<i64>,
    /// Longest time open among them, seconds.
    pub open_s: Option<f64>,
}

/// A rank that differs from the majority.
#[derive(Debug, Serialize)]
pub struct Outlier {
    /// The rank.
    pub rank: i64,
    /// `different span`, `different step`, `no open span` or `no dump`.
    pub why: &'static str,
    /// Where it is (absent for `no dump`).
    pub state: Option<RankState>,
}

/// The whole report.
#[derive(Debug, Serialize)]
pub struct Report {
    /// From the dumps' `dl.world_size` or `nv.dl.world_size` (or `--world-size`); `null` when
    /// unknown.
    pub world_size: Option<i64>,
    /// Ranks with a dump.
    pub ranks: usize,
    /// Groups, largest first (the majority first).
    pub groups: Vec<Group>,
    /// Outliers, by rank (of the ranks without a dump, the first [`MAX_LISTED_NO_DUMP`]).
    pub outliers: Vec<Outlier>,
    /// Ranks named as suspects (as listed in `outliers`).
    pub suspects: Vec<i64>,
    /// Ranks below the world size without a dump, as inclusive `[first, last]` ranges.
    pub no_dump: Vec<[i64; 2]>,
    /// How many ranks `no_dump` holds.
    pub no_dump_count: u64,
}

#[derive(Debug)]
struct OpenSpan {
    id: String,
    parent: Option<String>,
    name: String,
    group: Option<String>,
    step: Option<i64>,
    age_s: Option<f64>,
    start_us: i64,
}

#[derive(Debug, Default)]
struct Dump {
    rank: Option<i64>,
    world_size: Option<i64>,
    time_us: Option<i64>,
    open: Vec<OpenSpan>,
    /// Open spans beyond [`MAX_OPEN_SPANS`].
    open_skipped: u64,
    file: PathBuf,
}

fn int(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// `text` cut to [`MAX_NAME_BYTES`] on a character boundary.
fn cut(mut text: String) -> String {
    if text.len() > MAX_NAME_BYTES {
        let mut at = MAX_NAME_BYTES;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
        text.push('…');
    }
    text
}

impl Dump {
    /// Takes one span of the dump.
    fn add(&mut self, span: input::Span) {
        if let Some(r) = span.rank {
            self.rank = Some(r);
        }
        if let Some(w) = span.world_size {
            self.world_size = Some(self.world_size.map_or(w, |old| old.max(w)));
        }
        self.time_us = Some(self.time_us.map_or(span.end_us, |t| t.max(span.end_us)));
        let attrs = &span.attributes;
        if attrs.get("nemo.span.open") != Some(&Value::Bool(true)) {
            return;
        }
        if self.open.len() >= MAX_OPEN_SPANS {
            self.open_skipped += 1;
            return;
        }
        self.open.push(OpenSpan {
            id: cut(span.context.span_id),
            parent: span.parent_id.map(cut),
            group: attrs
                .get("nemo.group")
                .and_then(Value::as_str)
                .map(|g| cut(g.to_string())),
            step: STEP_ATTRIBUTES.iter().find_map(|k| int(attrs.get(*k))),
            age_s: attrs.get("nemo.span.open_age_s").and_then(Value::as_f64),
            start_us: span.start_us,
            name: cut(span.name),
        });
    }
}

/// The latest dump of each rank, reduced to where the rank is.
struct Latest {
    time_us: i64,
    world_size: Option<i64>,
    state: RankState,
}

/// Reads the dumps (each file one dump) and keeps the latest of each rank.
fn read_dumps(files: &[PathBuf], read: &ReadOptions) -> Result<BTreeMap<i64, Latest>> {
    let mut latest: BTreeMap<i64, Latest> = BTreeMap::new();
    let mut current: Option<(usize, Dump)> = None;
    let mut seen = vec![false; files.len()];
    let stats = input::for_each_record(
        files,
        read,
        &input::progress_bar(files, false),
        |source: &Source, record| {
            if current.as_ref().map(|(i, _)| *i) != Some(source.index) {
                if let Some((_, done)) = current.take() {
                    keep_latest(done, &mut latest);
                }
                seen[source.index] = true;
                current = Some((
                    source.index,
                    Dump {
                        file: files[source.index].clone(),
                        ..Dump::default()
                    },
                ));
            }
            if let (Record::Span(span), Some((_, dump))) = (record, current.as_mut()) {
                dump.add(*span);
            }
            Ok(())
        },
    )?;
    if let Some((_, done)) = current.take() {
        keep_latest(done, &mut latest);
    }
    stats.report();
    // A file without a single record never reached the callback.
    for (file, _) in files.iter().zip(&seen).filter(|(_, seen)| !**seen) {
        eprintln!(
            "warning: {}: no span line with a rank; skipped",
            file.display()
        );
    }
    Ok(latest)
}

/// Keeps `dump` if it is the latest of its rank.
fn keep_latest(dump: Dump, latest: &mut BTreeMap<i64, Latest>) {
    if dump.open_skipped > 0 {
        eprintln!(
            "warning: {}: {} open span(s) beyond the first {MAX_OPEN_SPANS} skipped",
            dump.file.display(),
            dump.open_skipped
        );
    }
    let (Some(rank), Some(time_us)) = (dump.rank, dump.time_us) else {
        eprintln!(
            "warning: {}: no span line with a rank; skipped",
            dump.file.display()
        );
        return;
    };
    if latest.get(&rank).is_some_and(|l| l.time_us >= time_us) {
        return;
    }
    let state = state_of(rank, &dump);
    latest.insert(
        rank,
        Latest {
            time_us,
            world_size: dump.world_size,
            state,
        },
    );
}

fn state_of(rank: i64, dump: &Dump) -> RankState {
    let parents: BTreeSet<&str> = dump
        .open
        .iter()
        .filter_map(|s| s.parent.as_deref())
        .collect();
    let by_id: HashMap<&str, &OpenSpan> = dump.open.iter().map(|s| (s.id.as_str(), s)).collect();
    let step_of = |s: &OpenSpan| {
        let mut at = Some(s);
        let mut hops = 0;
        while let Some(span) = at {
            if span.step.is_some() || hops > 64 {
                return span.step;
            }
            at = span.parent.as_deref().and_then(|p| by_id.get(p).copied());
            hops += 1;
        }
        None
    };
    // A framework's runtime threads run spans of their own with no parent on the training
    // thread (burn-collective's all-reduce on its tokio workers): the leaf under a step is
    // where the training thread waits, whichever started last.
    let innermost = dump
        .open
        .iter()
        .filter(|s| !parents.contains(s.id.as_str()))
        .max_by_key(|s| (step_of(s).is_some(), s.start_us));
    let step = innermost.and_then(step_of);
    RankState {
        rank,
        span: innermost.map(|s| s.name.clone()),
        group: innermost.and_then(|s| s.group.clone()),
        step,
        open_s: innermost.and_then(|s| s.age_s),
        file: dump.file.clone(),
    }
}

/// Builds the report from dump files.
pub fn analyse(files: &[PathBuf], world_size: Option<i64>, read: &ReadOptions) -> Result<Report> {
    let latest = read_dumps(files, read)?;
    let world_size = world_size.or_else(|| latest.values().filter_map(|d| d.world_size).max());
    let states: Vec<RankState> = latest.values().map(|l| l.state.clone()).collect();
    let mut by_key: BTreeMap<(Option<String>, Option<i64>), Vec<&RankState>> = BTreeMap::new();
    for s in &states {
        by_key.entry((s.span.clone(), s.step)).or_default().push(s);
    }
    let mut groups: Vec<(bool, Group)> = by_key
        .into_iter()
        .map(|((span, step), members)| {
            let collective = members
                .iter()
                .any(|m| m.group.as_deref() == Some("collective"));
            let group = Group {
                span,
                step,
                ranks: members.iter().map(|m| m.rank).collect(),
                open_s: members.iter().filter_map(|m| m.open_s).reduce(f64::max),
            };
            (collective, group)
        })
        .collect();
    groups.sort_by(|(ca, a), (cb, b)| {
        (b.ranks.len(), b.span.is_some(), *cb)
            .cmp(&(a.ranks.len(), a.span.is_some(), *ca))
            .then(a.ranks.cmp(&b.ranks))
    });
    let groups: Vec<Group> = groups.into_iter().map(|(_, g)| g).collect();
    let mut outliers = Vec::new();
    if let Some(major) = groups.first() {
        for s in &states {
            if major.ranks.contains(&s.rank) {
                continue;
            }
            let why = if s.span.is_none() {
                "no open span"
            } else if s.span != major.span {
                "different span"
            } else {
                "different step"
            };
            outliers.push(Outlier {
                rank: s.rank,
                why,
                state: Some(s.clone()),
            });
        }
    }
    let no_dump = world_size.map_or_else(Vec::new, |ws| gaps(latest.keys().copied(), ws));
    let no_dump_count = count(&no_dump);
    let listed = no_dump
        .iter()
        .flat_map(|&[a, b]| a..=b)
        .take(MAX_LISTED_NO_DUMP);
    outliers.extend(listed.map(|rank| Outlier {
        rank,
        why: "no dump",
        state: None,
    }));
    if no_dump_count > MAX_LISTED_NO_DUMP as u64 {
        eprintln!(
            "warning: {no_dump_count} rank(s) have no dump (world size {}); the outliers list \
             the first {MAX_LISTED_NO_DUMP}, `no_dump` holds them all as ranges",
            world_size.unwrap_or_default()
        );
    }
    outliers.sort_by_key(|o| o.rank);
    let suspects = outliers.iter().map(|o| o.rank).collect();
    Ok(Report {
        world_size,
        ranks: latest.len(),
        groups,
        outliers,
        suspects,
        no_dump,
        no_dump_count,
    })
}

/// Every suspect rank, the ranks without a dump included however many: sorted ranges.
fn suspect_ranges(report: &Report) -> Vec<[i64; 2]> {
    let mut all: Vec<[i64; 2]> = report
        .outliers
        .iter()
        .filter(|o| o.state.is_some())
        .map(|o| [o.rank, o.rank])
        .chain(report.no_dump.iter().copied())
        .collect();
    all.sort_unstable();
    let mut merged: Vec<[i64; 2]> = Vec::with_capacity(all.len());
    for [a, b] in all {
        match merged.last_mut() {
            Some(last) if last[1].checked_add(1).is_some_and(|next| next >= a) => {
                last[1] = last[1].max(b);
            }
            _ => merged.push([a, b]),
        }
    }
    merged
}

fn place(span: &Option<String>, step: Option<i64>, open_s: Option<f64>) -> String {
    let mut s = match span {
        Some(name) => format!("in `{name}`"),
        None => "in no open span".to_string(),
    };
    if let Some(step) = step {
        s.push_str(&format!(" at step {step}"));
    }
    if let Some(open) = open_s {
        s.push_str(&format!(", open {open:.1} s"));
    }
    s
}

/// Renders the report for a person.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let world = report
        .world_size
        .map_or("unknown".to_string(), |w| w.to_string());
    out.push_str(&format!(
        "{} rank(s) dumped (world size {world})\n",
        report.ranks
    ));
    for g in &report.groups {
        let n = g.ranks.len();
        let who = if n == 1 {
            format!("rank {}", g.ranks[0])
        } else {
            format!("{n} ranks")
        };
        let list = if n == 1 {
            String::new()
        } else {
            format!(" (ranks {})", ranks_label(&g.ranks))
        };
        out.push_str(&format!(
            "  {who} {}{list}\n",
            place(&g.span, g.step, g.open_s)
        ));
    }
    if !report.outliers.is_empty() {
        out.push_str("outliers:\n");
        for o in &report.outliers {
            if let Some(s) = &o.state {
                out.push_str(&format!(
                    "  rank {}: {} ({})\n",
                    o.rank,
                    place(&s.span, s.step, s.open_s),
                    o.why
                ));
            }
        }
        match report.no_dump_count {
            0 => {}
            1 => out.push_str(&format!("  rank {}: no dump\n", report.no_dump[0][0])),
            n => out.push_str(&format!(
                "  ranks {}: no dump ({n} ranks)\n",
                format_ranges(&report.no_dump, usize::MAX)
            )),
        }
    }
    if report.suspects.is_empty() {
        out.push_str("no suspect: every rank is at the same span and step\n");
    } else {
        out.push_str(&format!(
            "suspect rank(s): {}\n",
            format_ranges(&suspect_ranges(report), usize::MAX)
        ));
    }
    out
}

fn ranks_label(ranks: &[i64]) -> String {
    ranges(ranks, usize::MAX)
}

/// Runs the subcommand: prints the report; `Ok(true)` when it names a suspect.
pub fn run(
    files: &[PathBuf],
    world_size: Option<i64>,
    json: bool,
    read: &ReadOptions,
) -> Result<bool> {
    let split = input::archive::split(files, read)?;
    split.report();
    let report = analyse(&split.paths, world_size, read)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(!report.suspects.is_empty())
}
