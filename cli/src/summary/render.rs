//! The human-readable report of `summary`: the statistics table, the stragglers per span name,
//! the straggler verdict and the log record counts.

use std::fmt::Write as _;

use super::Report;
use crate::straggler;

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.3}"))
}

/// The human-readable tables.
pub(super) fn text(report: &Report) -> String {
    let mut out = String::new();
    let header = [
        "name",
        "rank",
        "count",
        "truncated",
        "total_ms",
        "p50_ms",
        "p90_ms",
        "p99_ms",
        "max_ms",
    ];
    let cells: Vec<[String; 9]> = report
        .spans
        .iter()
        .map(|r| {
            [
                r.name.clone(),
                r.rank.map_or_else(|| "?".into(), |v| v.to_string()),
                r.count.to_string(),
                r.truncated.to_string(),
                format!("{:.3}", r.total_ms),
                fmt_opt(r.p50_ms),
                fmt_opt(r.p90_ms),
                fmt_opt(r.p99_ms),
                fmt_opt(r.max_ms),
            ]
        })
        .collect();
    let mut width = header.map(str::len);
    for row in &cells {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let _ = writeln!(
        out,
        "Span durations per rank (ms; truncated spans are counted apart and excluded from the \
         other columns)"
    );
    let line = |out: &mut String, row: &[&str]| {
        for (i, (c, w)) in row.iter().zip(width).enumerate() {
            if i == 0 {
                let _ = write!(out, "{c:<w$}");
            } else {
                let _ = write!(out, "  {c:>w$}");
            }
        }
        out.push('\n');
    };
    line(&mut out, &header);
    for row in &cells {
        line(&mut out, &row.each_ref().map(String::as_str));
    }
    let _ = writeln!(
        out,
        "\nStragglers (rank median more than {}% above the cross-rank median{})",
        report.threshold_percent,
        match &report.step_span {
            Some(s) => format!("; step span: {s}"),
            None => String::new(),
        }
    );
    if report.stragglers.is_empty() {
        let _ = writeln!(out, "  (no span name seen on two or more ranks)");
    }
    for name in &report.stragglers {
        let _ = writeln!(
            out,
            "{}{}: cross-rank median {:.3} ms over {} ranks",
            name.name,
            if name.is_step { " [step]" } else { "" },
            name.cross_rank_median_ms,
            name.ranks
        );
        if name.stragglers.is_empty() {
            let _ = writeln!(out, "  none");
        }
        for s in &name.stragglers {
            let _ = writeln!(
                out,
                "  rank {:>4}  median {:>10.3} ms  +{:.1}%",
                s.rank.map_or_else(|| "?".into(), |v| v.to_string()),
                s.median_ms,
                s.excess_percent
            );
        }
    }
    let _ = writeln!(
        out,
        "\nStraggler verdict (time waiting in collective spans and computing, per rank and step)"
    );
    if report.straggler.ranks_compared == 0 {
        let _ = writeln!(out, "  (no rank has a complete step span)");
    } else {
        out.push_str(&straggler::render_verdict(&report.straggler));
    }
    if let Some(lost) = &report.lost_work {
        super::lost::text(lost, &mut out);
    }
    if !report.logs.is_empty() {
        let total: u64 = report.logs.values().sum();
        let parts: Vec<String> = report
            .logs
            .iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect();
        let _ = writeln!(out, "\nLog records: {total} ({})", parts.join(", "));
    }
    out
}
