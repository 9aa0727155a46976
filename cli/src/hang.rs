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
//!   span descends from; the latest started if several threads have one), with its step (the
//!   `dl.step` or `step` attribute of that span or of its nearest open ancestor) and how long it
//!   had been open. Ranks at the same span and step are grouped, largest group first:
//!   `7 ranks in `all_reduce` at step 3, open 2.1 s (ranks 0-4,6-7)`.
//! * **Outliers**: ranks at another span or step than the largest group (ties: the group waiting
//!   in a `collective` span is taken as the majority, since waiting is what the healthy ranks of
//!   a hung collective do), ranks whose dump holds no open span, and ranks with no dump at all
//!   (the world size comes from the dumps' `dl.world_size`, or `--world-size`).
//! * **Suspects**: the outlier ranks. When there is one, the exit code is 3.
//!
//! `--json` prints the same as one JSON object (`world_size`, `ranks`, `groups`, `outliers`,
//! `suspects`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use serde::Serialize;
use serde_json::Value;

use crate::input::{parse_time_us, rank_from_file_name};

/// Attributes holding a span's step, in order of preference.
const STEP_ATTRIBUTES: [&str; 2] = ["dl.step", "step"];

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
    /// From the dumps' `dl.world_size` (or `--world-size`); `null` when unknown.
    pub world_size: Option<i64>,
    /// Ranks with a dump.
    pub ranks: usize,
    /// Groups, largest first (the majority first).
    pub groups: Vec<Group>,
    /// Outliers, by rank.
    pub outliers: Vec<Outlier>,
    /// Ranks named as suspects.
    pub suspects: Vec<i64>,
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

#[derive(Debug)]
struct Dump {
    rank: i64,
    world_size: Option<i64>,
    time_us: i64,
    open: Vec<OpenSpan>,
    file: PathBuf,
}

fn int(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn read_dump(path: &Path) -> Result<Option<Dump>> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut dump = Dump {
        rank: -1,
        world_size: None,
        time_us: i64::MIN,
        open: Vec::new(),
        file: path.to_path_buf(),
    };
    let mut any = false;
    for line in BufReader::new(file).lines() {
        let Ok(line) = line else { break };
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let Some(name) = v["name"].as_str() else {
            continue;
        };
        any = true;
        let resource = &v["resource"]["attributes"];
        if let Some(r) = int(resource.get("dl.rank")) {
            dump.rank = r;
        }
        if let Some(w) = int(resource.get("dl.world_size")) {
            dump.world_size = Some(w);
        }
        if let Some(end) = v["end_time"].as_str().and_then(parse_time_us) {
            dump.time_us = dump.time_us.max(end);
        }
        let attrs = &v["attributes"];
        if attrs["nemo.span.open"] != Value::Bool(true) {
            continue;
        }
        dump.open.push(OpenSpan {
            id: v["context"]["span_id"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            parent: v["parent_id"].as_str().map(str::to_string),
            name: name.to_string(),
            group: attrs["nemo.group"].as_str().map(str::to_string),
            step: STEP_ATTRIBUTES.iter().find_map(|k| int(attrs.get(*k))),
            age_s: attrs["nemo.span.open_age_s"].as_f64(),
            start_us: v["start_time"]
                .as_str()
                .and_then(parse_time_us)
                .unwrap_or(0),
        });
    }
    if dump.rank < 0 {
        dump.rank = rank_from_file_name(path).unwrap_or(-1);
    }
    Ok((any && dump.rank >= 0).then_some(dump))
}

fn state_of(dump: &Dump) -> RankState {
    let parents: BTreeSet<&str> = dump
        .open
        .iter()
        .filter_map(|s| s.parent.as_deref())
        .collect();
    let innermost = dump
        .open
        .iter()
        .filter(|s| !parents.contains(s.id.as_str()))
        .max_by_key(|s| s.start_us);
    let by_id: HashMap<&str, &OpenSpan> = dump.open.iter().map(|s| (s.id.as_str(), s)).collect();
    let step = innermost.and_then(|s| {
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
    });
    RankState {
        rank: dump.rank,
        span: innermost.map(|s| s.name.clone()),
        group: innermost.and_then(|s| s.group.clone()),
        step,
        open_s: innermost.and_then(|s| s.age_s),
        file: dump.file.clone(),
    }
}

/// Builds the report from dump files.
pub fn analyse(files: &[PathBuf], world_size: Option<i64>) -> Result<Report> {
    let mut latest: BTreeMap<i64, Dump> = BTreeMap::new();
    for path in files {
        let Some(dump) = read_dump(path)? else {
            eprintln!(
                "warning: {}: no span line with a rank; skipped",
                path.display()
            );
            continue;
        };
        match latest.get(&dump.rank) {
            Some(d) if d.time_us >= dump.time_us => {}
            _ => {
                latest.insert(dump.rank, dump);
            }
        }
    }
    let world_size = world_size.or_else(|| latest.values().filter_map(|d| d.world_size).max());
    let states: Vec<RankState> = latest.values().map(state_of).collect();
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
    if let Some(ws) = world_size {
        for rank in 0..ws {
            if !latest.contains_key(&rank) {
                outliers.push(Outlier {
                    rank,
                    why: "no dump",
                    state: None,
                });
            }
        }
    }
    outliers.sort_by_key(|o| o.rank);
    let suspects = outliers.iter().map(|o| o.rank).collect();
    Ok(Report {
        world_size,
        ranks: latest.len(),
        groups,
        outliers,
        suspects,
    })
}

/// `0-4,6-7`.
fn ranges(ranks: &[i64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            ranks[i].to_string()
        } else {
            format!("{}-{}", ranks[i], ranks[j])
        });
        i = j + 1;
    }
    out.join(",")
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
            match &o.state {
                Some(s) => out.push_str(&format!(
                    "  rank {}: {} ({})\n",
                    o.rank,
                    place(&s.span, s.step, s.open_s),
                    o.why
                )),
                None => out.push_str(&format!("  rank {}: no dump\n", o.rank)),
            }
        }
    }
    if report.suspects.is_empty() {
        out.push_str("no suspect: every rank is at the same span and step\n");
    } else {
        out.push_str(&format!("suspect rank(s): {}\n", ranges(&report.suspects)));
    }
    out
}

fn ranks_label(ranks: &[i64]) -> String {
    ranges(ranks)
}

/// Runs the subcommand: prints the report; `Ok(true)` when it names a suspect.
pub fn run(files: &[PathBuf], world_size: Option<i64>, json: bool) -> Result<bool> {
    let report = analyse(files, world_size)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(!report.suspects.is_empty())
}

#[cfg(test)]
mod tests {
    use super::ranges;

    #[test]
    fn rank_ranges() {
        assert_eq!(ranges(&[0, 1, 2, 3, 4, 6, 7]), "0-4,6-7");
        assert_eq!(ranges(&[5]), "5");
        assert_eq!(ranges(&[]), "");
    }
}
