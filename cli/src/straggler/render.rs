//! The verdict for a person: a few lines whatever the rank count, then (`--detail`) a table
//! of every rank.

use std::fmt::Write as _;

use super::verdict::{Cause, MIN_STEPS, Suspect, Verdict};
use crate::ranges::{format_ranges, ranges};

/// Suspects described one per line; the others are listed as ranges.
const MAX_LISTED: usize = 5;
/// Ranges quoted in a list of ranks.
const MAX_RANGES: usize = 8;
/// Ranges of slow steps quoted.
const MAX_STEP_RANGES: usize = 6;

fn host(h: &Option<String>) -> String {
    h.as_ref().map_or_else(String::new, |h| format!(" ({h})"))
}

fn percent(part: f64, whole: Option<f64>) -> String {
    match whole {
        Some(w) if w > 0.0 => format!(" ({:.0}% of the {w:.1} ms step)", part / w * 100.0),
        _ => String::new(),
    }
}

fn sorted(mut ranks: Vec<i64>) -> Vec<i64> {
    ranks.sort_unstable();
    ranks
}

fn suspect_line(s: &Suspect) -> String {
    let mut line = format!("  rank {}{}: ", s.rank, host(&s.host));
    match (s.cause, s.wait_ms, s.median_wait_ms) {
        (Cause::Wait, Some(w), Some(median)) => {
            let _ = write!(
                line,
                "waits {w:.1} ms per step in collectives, the median rank {median:.1} ms; \
                 computes {:.1} ms ({:+.1} ms)",
                s.compute_ms, s.compute_excess_ms
            );
            if let (Some(span), Some(e)) = (&s.span, s.span_excess_ms) {
                let _ = write!(line, ", in `{span}` ({e:+.1} ms)");
            } else if s.outside_steps {
                line.push_str(": the extra time is outside the step spans");
            }
        }
        (Cause::Span, _, _) => {
            let _ = write!(
                line,
                "`{}` takes {:.1} ms per step ({:+.1} ms over the median rank)",
                s.span.as_deref().unwrap_or("?"),
                s.span_ms.unwrap_or(0.0),
                s.span_excess_ms.unwrap_or(0.0)
            );
        }
        _ => {
            let _ = write!(
                line,
                "computes {:.1} ms per step ({:+.1} ms over the median rank)",
                s.compute_ms, s.compute_excess_ms
            );
            if let (Some(span), Some(e)) = (&s.span, s.span_excess_ms) {
                let _ = write!(line, ", in `{span}` ({e:+.1} ms)");
            }
        }
    }
    let _ = write!(
        line,
        "; slower in {} of {} steps",
        s.slow_steps, s.steps_compared
    );
    if let Some(steps) = s.slow_step_numbers.as_ref().filter(|s| !s.is_empty()) {
        let _ = write!(line, " ({})", ranges(steps, MAX_STEP_RANGES));
    }
    line
}

/// The verdict: suspects (at most [`MAX_LISTED`] described), the cost, what was compared.
pub fn verdict(v: &Verdict) -> String {
    let mut out = String::new();
    if v.ranks_compared < 2 {
        let _ = writeln!(
            out,
            "no verdict: {} rank(s) with {MIN_STEPS} or more complete steps; two are needed",
            v.ranks_compared
        );
    } else if let Some(first) = v.suspects.first() {
        let cost = v.cost_ms_per_step.unwrap_or(first.cost_ms);
        let estimated = first.cause != Cause::Wait;
        let about = if estimated { "about " } else { "" };
        let who = if v.suspects.len() == 1 {
            format!("straggler: rank {}{}", first.rank, host(&first.host))
        } else {
            let ranks = sorted(v.suspects.iter().map(|s| s.rank).collect());
            format!(
                "stragglers: {} ranks ({}); the costliest, rank {}{},",
                v.suspects.len(),
                ranges(&ranks, MAX_RANGES),
                first.rank,
                host(&first.host)
            )
        };
        let _ = writeln!(
            out,
            "{who} costs the job {about}{cost:.1} ms per step{}",
            percent(cost, v.step_ms)
        );
        if estimated {
            let _ = writeln!(
                out,
                "  (estimated from compute: no collective span shows how long the others wait)"
            );
        }
        for s in v.suspects.iter().take(MAX_LISTED) {
            let _ = writeln!(out, "{}", suspect_line(s));
        }
        if v.suspects.len() > MAX_LISTED {
            let rest = sorted(v.suspects[MAX_LISTED..].iter().map(|s| s.rank).collect());
            let _ = writeln!(
                out,
                "  and {} more: ranks {} (--detail lists every rank)",
                rest.len(),
                ranges(&rest, MAX_RANGES)
            );
        }
    } else {
        match (v.wait_ms, v.step_ms) {
            (Some(w), _) => {
                let _ = writeln!(
                    out,
                    "no straggler: no rank waits less in collectives than the median rank \
                     ({w:.1} ms per step) by more than {:.1} ms",
                    v.limit_ms
                );
            }
            (None, step) => {
                let _ = writeln!(
                    out,
                    "no straggler: no rank computes more than the median rank ({:.1} ms per \
                     step) by more than {:.1} ms",
                    v.compute_ms.or(step).unwrap_or(0.0),
                    v.limit_ms
                );
                let _ = writeln!(
                    out,
                    "  no collective span was recorded: a rank the others wait for shows only \
                     when its own spans are longer (record group `collective`)"
                );
            }
        }
    }
    if v.ranks_compared >= 2 {
        let steps = match (v.first_step, v.last_step) {
            (Some(a), Some(b)) => format!(" (steps {a}-{b})"),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "compared {} of {} ranks over their latest {} steps{steps}; step {:.1} ms, limit \
             {:.1} ms ({}% of the step, or the ranks' spread if larger)",
            v.ranks_compared,
            v.world_size
                .map_or(v.ranks_read as i64, |w| w.max(v.ranks_read as i64)),
            v.steps_per_rank,
            v.step_ms.unwrap_or(0.0),
            v.limit_ms,
            v.threshold_percent
        );
    }
    let list = |out: &mut String, what: &str, ranks: &[i64]| {
        if !ranks.is_empty() {
            let _ = writeln!(out, "{what}: {}", ranges(ranks, MAX_RANGES));
        }
    };
    if let (Some(w), false) = (v.world_size, v.missing_ranks.is_empty()) {
        let _ = writeln!(
            out,
            "no data from {} of {w} ranks: {}",
            v.missing_count,
            format_ranges(&v.missing_ranks, MAX_RANGES)
        );
    }
    list(
        &mut out,
        &format!("fewer than {MIN_STEPS} complete steps, not compared"),
        &v.few_steps_ranks,
    );
    list(
        &mut out,
        "no collective span, compared by compute spans only",
        &v.no_collective_ranks,
    );
    if v.ranks_over_budget > 0 {
        let _ = writeln!(
            out,
            "warning: {} span(s) of ranks first seen after the rank table was full were skipped",
            v.ranks_over_budget
        );
    }
    out
}

/// The stderr lines (without `warning: `) for what merging the input's steps changed: one
/// line each, whatever the count.
pub fn warnings(v: &Verdict) -> Vec<String> {
    let m = &v.merges;
    let mut lines = Vec::new();
    if let Some((rank, key)) = m.first_conflict {
        lines.push(format!(
            "{} step(s) of {} rank(s) seen twice with different figures (first: rank {rank}, \
             step {key}): two inputs claim the same rank; the larger figures are kept",
            m.conflicting_steps, m.conflicting_ranks
        ));
    }
    if let Some((rank, key)) = m.first_clamped {
        lines.push(format!(
            "{} figure(s) over 71 minutes clamped to 71 min 35 s (first: rank {rank}, step \
             {key})",
            m.clamped_figures
        ));
    }
    lines
}

/// Every compared rank, one line each.
pub fn detail(v: &Verdict) -> String {
    let Some(ranks) = &v.per_rank else {
        return String::new();
    };
    let names: Vec<&String> = v.compute_spans.iter().take(4).collect();
    let mut header: Vec<String> = [
        "rank",
        "host",
        "steps",
        "step_ms",
        "compute_ms",
        "wait_ms",
        "compute+",
        "wait-",
    ]
    .map(str::to_owned)
    .to_vec();
    header.extend(names.iter().map(|n| format!("{n}_ms")));
    header.push("suspect".into());
    let f = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.3}"));
    let rows: Vec<Vec<String>> = ranks
        .iter()
        .map(|r| {
            let mut row = vec![
                r.rank.to_string(),
                r.host.clone().unwrap_or_else(|| "-".into()),
                r.steps.to_string(),
                f(Some(r.step_ms)),
                f(Some(r.compute_ms)),
                f(r.wait_ms),
                f(Some(r.compute_excess_ms)),
                f(r.wait_deficit_ms),
            ];
            row.extend(names.iter().map(|n| f(r.spans.get(*n).copied())));
            row.push(if r.suspect { "*" } else { "" }.into());
            row
        })
        .collect();
    let mut width: Vec<usize> = header.iter().map(String::len).collect();
    for row in &rows {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::from(
        "\nPer rank (medians over each rank's latest steps; compute+ is above the median rank, \
         wait- below it)\n",
    );
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, (c, w)) in row.iter().zip(&width).enumerate() {
            if i < 2 {
                let _ = write!(line, "{c:<w$}  ");
            } else {
                let _ = write!(line, "{c:>w$}  ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
