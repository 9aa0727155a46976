//! The analysis end to end on generated records (the layout of dumps and console files): each
//! rank's clock is offset by seconds, steps are matched by number or by order.

use serde_json::{Value, json};

use super::verdict::Cause;
use super::*;
use crate::input::parse_record;

/// 2026-11-29T22:00:00Z in µs.
const T0: i64 = 1_795_989_600_000_000;

/// Formats µs since the epoch as the console exporter does.
fn ts(us: i64) -> String {
    let secs = us.div_euclid(1_000_000);
    let micros = us.rem_euclid(1_000_000);
    // Days since the epoch to a civil date (Howard Hinnant's algorithm).
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// One rank's job: what its spans are, per step.
#[derive(Clone)]
struct Rank {
    rank: i64,
    /// Clock offset of this rank.
    offset_us: i64,
    /// `forward_backward` per step.
    compute_us: i64,
    /// Time outside the step spans between steps.
    gap_us: i64,
    /// Whether spans carry the recorder's `nemo.group` (a dump) and the step number.
    dump: bool,
    numbered: bool,
    collectives: bool,
}

/// Spans of `ranks` over `steps` synchronous steps: each step, every rank computes, then
/// waits in `all_reduce` until the slowest rank has arrived (its arrival: the end of its
/// compute, plus its gap before the step).
fn job(ranks: &[Rank], steps: i64) -> Vec<Vec<String>> {
    let mut lines = vec![Vec::new(); ranks.len()];
    let mut t = 0; // the job's time, without offsets
    for step in 1..=steps {
        let arrive: Vec<i64> = ranks.iter().map(|r| r.gap_us + r.compute_us).collect();
        let release = t + arrive.iter().max().unwrap() + 500;
        for (i, r) in ranks.iter().enumerate() {
            let start = t + r.gap_us;
            let fb_end = start + r.compute_us;
            let end = release + 200;
            let at = |us: i64| T0 + r.offset_us + us;
            let group = |g: &str| if r.dump { json!(g) } else { Value::Null };
            let mut span = |name: &str, s: i64, e: i64, group: Value, step_attr: bool| {
                let mut attributes = json!({});
                if !group.is_null() {
                    attributes["nemo.group"] = group;
                }
                if step_attr && r.numbered {
                    attributes["step"] = json!(step);
                }
                let id = lines[i].len() + 1;
                lines[i].push(
                    json!({
                        "name": name,
                        "context": { "trace_id": "0x1", "span_id": format!("0x{id:x}") },
                        "start_time": ts(at(s)),
                        "end_time": ts(at(e)),
                        "attributes": attributes,
                        "resource": { "attributes": {
                            "dl.rank": r.rank, "dl.world_size": ranks.len(), "host.name": format!("node{}", r.rank / 8)
                        } },
                    })
                    .to_string(),
                );
            };
            if step == 1 {
                // A span that closes before the first step: the dump holds all of step 1.
                span(
                    "load_checkpoint",
                    -5_000,
                    -1_000,
                    group("checkpoint"),
                    false,
                );
            }
            span(
                "forward_backward",
                start,
                fb_end,
                group("forward_backward"),
                false,
            );
            if r.collectives {
                span("all_reduce", fb_end, release, group("collective"), true);
            }
            span("train_step", start, end, group("step"), true);
        }
        t = release + 200;
    }
    lines
}

fn analyse(files: &[Vec<String>], threshold: f64) -> Verdict {
    let analysis = Analysis::new(SpanNames::default());
    for file in files {
        let mut f = analysis.file();
        for line in file {
            let Ok(Record::Span(span)) = parse_record(line.as_bytes(), None) else {
                panic!("not a span: {line}");
            };
            f.span(&span);
        }
        analysis.done(f);
    }
    analysis.verdict(
        Settings {
            threshold_percent: threshold,
            world_size: None,
        },
        true,
    )
}

fn ranks(n: i64) -> Vec<Rank> {
    (0..n)
        .map(|rank| Rank {
            rank,
            offset_us: (rank * 37_123_457) % 90_000_000 - 45_000_000,
            compute_us: 30_000 + (rank * 7919) % 500,
            gap_us: 1_000,
            dump: true,
            numbered: true,
            collectives: true,
        })
        .collect()
}

fn suspects(v: &Verdict) -> Vec<i64> {
    v.suspects.iter().map(|s| s.rank).collect()
}

#[test]
fn the_rank_that_waits_least_is_named_with_its_cost_whatever_the_clocks() {
    let mut job_ranks = ranks(16);
    job_ranks[11].compute_us = 90_000;
    let v = analyse(&job(&job_ranks, 40), 10.0);
    assert_eq!(suspects(&v), [11], "{v:#?}");
    let s = &v.suspects[0];
    assert_eq!(s.cause, Cause::Wait);
    // The others wait about 60 ms more: what the job loses per step.
    assert!((59.0..61.0).contains(&s.cost_ms), "{s:?}");
    assert_eq!((s.slow_steps, s.steps_compared), (40, 40));
    assert_eq!(
        s.slow_step_numbers.as_deref(),
        Some(&(1..=40).collect::<Vec<_>>()[..])
    );
    assert!(!s.outside_steps);
    assert_eq!(v.cost_ms_per_step, Some(s.cost_ms));
    assert_eq!(s.host.as_deref(), Some("node1"));
    assert_eq!((v.first_step, v.last_step), (Some(1), Some(40)));
    assert_eq!(v.world_size, Some(16));
    assert!(v.missing_ranks.is_empty());
    assert_eq!(v.collective_spans, ["all_reduce"]);

    let text = render::verdict(&v);
    assert!(
        text.starts_with("straggler: rank 11 (node1) costs the job"),
        "{text}"
    );
    assert!(text.lines().count() <= 4, "{text}");
}

#[test]
fn equal_ranks_name_nobody() {
    let v = analyse(&job(&ranks(16), 40), 10.0);
    assert!(v.suspects.is_empty(), "{v:#?}");
    assert_eq!(v.ranks_compared, 16);
    assert!(render::verdict(&v).starts_with("no straggler: no rank waits less"));
}

#[test]
fn extra_time_outside_the_steps_is_found_by_the_wait_alone() {
    let mut job_ranks = ranks(8);
    job_ranks[2].gap_us = 25_000;
    let v = analyse(&job(&job_ranks, 20), 10.0);
    assert_eq!(suspects(&v), [2], "{v:#?}");
    assert!(v.suspects[0].outside_steps);
    assert!(render::verdict(&v).contains("outside the step spans"));
}

#[test]
fn steps_without_numbers_are_matched_from_the_latest_and_dumps_of_different_lengths_agree() {
    let mut job_ranks = ranks(8);
    for r in &mut job_ranks {
        r.numbered = false;
    }
    job_ranks[5].compute_us = 70_000;
    let mut files = job(&job_ranks, 30);
    // Each ring kept a different number of the latest spans, cutting into a step.
    for (i, file) in files.iter_mut().enumerate() {
        file.drain(..i * 3 + 1);
    }
    let v = analyse(&files, 10.0);
    assert_eq!(suspects(&v), [5], "{v:#?}");
    assert_eq!(v.first_step, None);
    // The step whose first children the ring lost is counted, not compared.
    let figures = v.per_rank.as_ref().unwrap();
    assert!(figures.iter().all(|f| f.partial_steps == 1), "{figures:?}");
    // Matched by order from the latest step: every step of the suspect is compared.
    let s = &v.suspects[0];
    assert_eq!(s.slow_steps, s.steps_compared);
    assert!(s.steps_compared >= 20, "{s:?}");
}

#[test]
fn without_collective_spans_a_longer_compute_span_is_named() {
    let mut job_ranks = ranks(8);
    for r in &mut job_ranks {
        r.collectives = false;
        r.dump = false; // console JSONL: no groups, no all_reduce exported
    }
    job_ranks[6].compute_us = 60_000;
    let v = analyse(&job(&job_ranks, 20), 10.0);
    assert_eq!(suspects(&v), [6], "{v:#?}");
    let s = &v.suspects[0];
    assert_eq!(s.cause, Cause::Span);
    assert_eq!(s.span.as_deref(), Some("forward_backward"));
    assert!((29.0..31.0).contains(&s.span_excess_ms.unwrap()), "{s:?}");
    let text = render::verdict(&v);
    assert!(text.contains("costs the job about"), "{text}");
    assert!(text.contains("`forward_backward` takes"), "{text}");
}

#[test]
fn the_natural_spread_of_many_ranks_is_not_a_straggler() {
    // 1,024 ranks whose compute is spread normally, σ = 3 ms (the extremes 10 ms away), while
    // 10% of the step is about 6 ms.
    let mut job_ranks = ranks(1024);
    let mut x: u64 = 42;
    let mut uniform = || {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    for r in &mut job_ranks {
        let normal: f64 = (0..12).map(|_| uniform()).sum::<f64>() - 6.0;
        r.compute_us = 30_000 + (normal * 3_000.0) as i64;
    }
    job_ranks[700].compute_us = 60_000;
    let v = analyse(&job(&job_ranks, 5), 10.0);
    assert_eq!(suspects(&v), [700], "{:?}", &v.suspects);
    assert!(v.limit_ms > 10.0, "{}", v.limit_ms);
}

#[test]
fn the_verdict_fits_a_screen_with_many_suspects_and_missing_ranks() {
    let mut job_ranks = ranks(64);
    for r in (10..30).step_by(2) {
        job_ranks[r].compute_us = 50_000 + r as i64 * 100;
    }
    let mut files = job(&job_ranks, 10);
    files.truncate(60); // ranks 60-63 wrote nothing
    files[3].truncate(2); // rank 3: one step
    let v = analyse(&files, 10.0);
    assert_eq!(v.suspects.len(), 10);
    assert_eq!(v.missing_ranks, [[60, 63]]);
    assert_eq!(v.missing_count, 4);
    assert_eq!(v.few_steps_ranks, [3]);
    let text = render::verdict(&v);
    assert!(text.lines().count() <= 12, "{text}");
    assert!(
        text.starts_with("stragglers: 10 ranks (10,12,14,16,18,20,22,24,… (+2 more))"),
        "{text}"
    );
    assert!(text.contains("and 5 more: ranks 10,12,14,16,18"), "{text}");
    assert!(text.contains("no data from 4 of 64 ranks: 60-63"), "{text}");
    assert!(
        text.contains("fewer than 3 complete steps, not compared: 3"),
        "{text}"
    );
}

#[test]
fn a_quarter_of_the_ranks_slow_are_all_named_and_the_verdict_stays_short() {
    // One node kind in four is slower: 512 of 2,048 ranks compute 20 ms longer. Their number
    // does not widen the limit (the spread is measured on the healthy side).
    let mut job_ranks = ranks(2048);
    for r in job_ranks.iter_mut().filter(|r| r.rank % 4 == 1) {
        r.compute_us += 20_000;
    }
    let v = analyse(&job(&job_ranks, 8), 10.0);
    assert_eq!(v.suspects.len(), 512, "{}", render::verdict(&v));
    assert!(v.suspects.iter().all(|s| s.rank % 4 == 1));
    assert!(v.suspects.iter().all(|s| s.slow_steps == 8));
    assert!(render::verdict(&v).lines().count() <= 10);
}

#[test]
fn the_median_of_the_other_ranks_leaves_one_out() {
    use super::verdict::median_without;
    assert_eq!(median_without(&[1.0, 2.0, 10.0], 10.0), Some(1.5));
    assert_eq!(median_without(&[1.0, 2.0, 10.0], 1.0), Some(6.0));
    assert_eq!(
        median_without(&[1.0, 2.0, 10.0], 5.0),
        Some(2.0),
        "not there"
    );
    assert_eq!(median_without(&[3.0], 3.0), None);
}

#[test]
fn a_made_up_world_size_is_a_range_not_a_list() {
    let analysis = Analysis::new(SpanNames::default());
    for file in job(&ranks(4), 5) {
        let mut f = analysis.file();
        for line in &file {
            let Ok(Record::Span(span)) = parse_record(line.as_bytes(), None) else {
                panic!("not a span")
            };
            f.span(&span);
        }
        analysis.done(f);
    }
    let v = analysis.verdict(
        Settings {
            threshold_percent: 10.0,
            world_size: Some(i64::MAX),
        },
        false,
    );
    assert_eq!(v.missing_ranks, [[4, i64::MAX - 1]]);
    assert_eq!(v.missing_count, i64::MAX - 4);
    assert!(
        render::verdict(&v).contains(&format!(
            "no data from {} of {} ranks: 4-{}",
            i64::MAX - 4,
            i64::MAX,
            i64::MAX - 1
        )),
        "{}",
        render::verdict(&v)
    );
}
