//! `nemo-lens perfetto`: per-rank JSONL → one Chrome Trace Event JSON file.
//!
//! The output is the JSON object form of the [Trace Event format]
//! (`{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}`), which
//! ui.perfetto.dev and chrome://tracing both open. The mapping:
//!
//! | input | trace event |
//! |---|---|
//! | rank (`dl.rank`, else the file name's `rankN`) | a process (`pid` = rank) named `rank N (host)` |
//! | `thread.id` / `thread.name` span attribute | a thread track; without them one track per rank |
//! | span | complete event `ph: "X"` (`ts`, `dur` in µs), attributes plus ids and status in `args` |
//! | lost `megatron.train.iteration` | named `megatron.train.iteration.redone` or `….uncommitted` ([`lost`]) |
//! | truncated span (`nemo.span.truncated`) | `cat: "span,truncated"`, `cname: "terrible"` (red) |
//! | span event | instant event `ph: "i"`, `s: "t"`, on the span's track |
//! | span link | flow `ph: "s"` at the linked span → `ph: "f"` (`bp: "e"`) at the linking span |
//! | metric data point | counter event `ph: "C"` on the rank's process (`value`, or `sum` and `count` for histograms) |
//! | log record | instant event `ph: "i"`, `cat: "log"`, named by its body, on the rank's track, severity and attributes in `args` |
//!
//! Events are written as they are read: memory holds the track names, a bounded index of recent
//! span positions (to draw links) and the links still waiting for their target, never the spans.
//! Every table is bounded in bytes:
//!
//! * the index of recent spans holds [`RECENT_SPANS`] fixed-size entries (about 20 MB: 2^19
//!   hash buckets of 33 bytes and the eviction queue); a link whose span is not in it (older,
//!   or never seen) is counted and not drawn;
//! * links read before their span wait with their attributes (serialized) within
//!   [`PENDING_LINK_BYTES`]; a link beyond it is counted (`links_over_budget`) and not drawn;
//! * process and track names live within [`TRACK_TABLE_BYTES`]; beyond it a rank's process or a
//!   thread track is used without its name, and a track known only by `thread.name` falls back
//!   to the rank's main track (each event placed so is counted in `unnamed_tracks`).
//!
//! With `--jobs` 2 or more (the default on more than one core) the input is parsed on a second
//! thread, ahead of the writing, in bounded batches ([`input::for_each_record_read_ahead`]); the
//! events and their order are the same as with `--jobs 1`.
//!
//! The output may not be one of the inputs (same file, by device and inode): that is refused
//! before anything is written.
//!
//! [Trace Event format]: https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::input::{self, LogRecord, ReadOptions, Record, Span, Stats};

mod links;
mod lost;
mod tracks;

use links::Links;
use tracks::Tracks;

/// How many recent spans' positions are kept to draw links (the index takes about 20 MB).
pub const RECENT_SPANS: usize = 1 << 18;
/// Bytes of links that may wait for a span not read yet (attributes as JSON, plus
/// [`ENTRY_BYTES`] each).
pub const PENDING_LINK_BYTES: usize = 16 << 20;
/// Bytes of process and track names (names plus [`ENTRY_BYTES`] per entry).
pub const TRACK_TABLE_BYTES: usize = 8 << 20;
/// What one table entry is counted for besides its strings (key, value, hashing overhead).
const ENTRY_BYTES: usize = 64;
/// Longest log body used as an event name (the whole body is in `args`).
const LOG_NAME_CHARS: usize = 80;
/// `pid` base for files whose rank is unknown (`pid` = base + position on the command line).
const UNKNOWN_RANK_PID_BASE: i64 = 1_000_000;

/// What the conversion wrote.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Input statistics.
    pub stats: Stats,
    /// Trace events written (metadata included).
    pub events: u64,
    /// Links drawn as flows.
    pub flows: u64,
    /// Links whose span was not found (those over the budget included).
    pub unresolved_links: u64,
    /// Links not drawn because the links waiting for their span filled [`PENDING_LINK_BYTES`].
    pub links_over_budget: u64,
    /// Events placed on a process or track left unnamed (or, for a track known only by its
    /// `thread.name`, on the rank's main track) because [`TRACK_TABLE_BYTES`] was full.
    pub unnamed_tracks: u64,
}

impl Outcome {
    /// Prints what was written and skipped to stderr.
    pub fn report(&self, output: &Path) {
        self.stats.report();
        eprintln!(
            "wrote {} ({} spans, {} metric batches, {} log records, {} trace events, {} links)",
            output.display(),
            self.stats.spans,
            self.stats.metric_batches,
            self.stats.log_records,
            self.events,
            self.flows
        );
        if self.unresolved_links > 0 {
            eprintln!(
                "warning: {} link(s) point to spans not found in the input; not drawn ({} of \
                 them over the {PENDING_LINK_BYTES}-byte budget of links waiting for their span)",
                self.unresolved_links, self.links_over_budget
            );
        }
        if self.unnamed_tracks > 0 {
            eprintln!(
                "warning: {} event(s) placed on an unnamed process or track (or a rank's main \
                 track): the {TRACK_TABLE_BYTES}-byte table of track names was full",
                self.unnamed_tracks
            );
        }
    }
}

#[derive(Serialize)]
struct Event<'a, A: Serialize> {
    name: &'a str,
    ph: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<i64>,
    pid: i64,
    tid: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bp: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cname: Option<&'static str>,
    args: A,
}

impl<'a, A: Serialize> Event<'a, A> {
    fn new(name: &'a str, ph: &'static str, pid: i64, tid: i64, args: A) -> Self {
        Event {
            name,
            ph,
            cat: None,
            ts: None,
            dur: None,
            pid,
            tid,
            s: None,
            id: None,
            bp: None,
            cname: None,
            args,
        }
    }
}

#[derive(Serialize)]
struct SpanArgs<'a> {
    #[serde(flatten)]
    attributes: &'a Map<String, Value>,
    trace_id: &'a str,
    span_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent_id: Option<&'a str>,
    #[serde(rename = "status.code")]
    status_code: &'a str,
    #[serde(rename = "status.description", skip_serializing_if = "Option::is_none")]
    status_description: Option<&'a str>,
}

#[derive(Clone, Copy)]
struct Loc {
    pid: i64,
    tid: i64,
    ts: i64,
}

/// Streams events into the output file.
struct Writer<W: Write> {
    out: W,
    first: bool,
    events: u64,
    tracks: Tracks,
    links: Links,
    next_flow_id: u64,
    flows: u64,
}

impl<W: Write> Writer<W> {
    fn new(mut out: W) -> Result<Self> {
        out.write_all(b"{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n")?;
        Ok(Writer {
            out,
            first: true,
            events: 0,
            tracks: Tracks::default(),
            links: Links::new(),
            next_flow_id: 1,
            flows: 0,
        })
    }

    fn emit<A: Serialize>(&mut self, event: &Event<'_, A>) -> Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        serde_json::to_writer(&mut self.out, event)?;
        self.events += 1;
        Ok(())
    }

    /// Names process `pid` the first time it is seen.
    fn process(&mut self, pid: i64, label: &str, host: Option<&str>) -> Result<()> {
        if !self.tracks.new_process(pid) {
            return Ok(());
        }
        let name = match host {
            Some(h) => format!("{label} ({h})"),
            None => label.to_owned(),
        };
        self.emit(&Event::new(
            "process_name",
            "M",
            pid,
            0,
            serde_json::json!({ "name": name }),
        ))?;
        self.emit(&Event::new(
            "process_sort_index",
            "M",
            pid,
            0,
            serde_json::json!({ "sort_index": pid }),
        ))
    }

    /// The track of an event with `attributes` (see [`Tracks::thread`]), named the first time.
    fn thread(&mut self, pid: i64, attributes: &Map<String, Value>) -> Result<i64> {
        let (tid, label) = self.tracks.thread(pid, attributes);
        if let Some(label) = label {
            self.emit(&Event::new(
                "thread_name",
                "M",
                pid,
                tid,
                serde_json::json!({ "name": label }),
            ))?;
        }
        Ok(tid)
    }

    /// A flow arrow from the linked span to the linking span; the link's attributes are the
    /// arrow head's args.
    fn flow<A: Serialize>(&mut self, from: Loc, to: Loc, attributes: A) -> Result<()> {
        let id = self.next_flow_id;
        self.next_flow_id += 1;
        let mut start = Event::new("link", "s", from.pid, from.tid, Map::new());
        start.cat = Some("link");
        start.ts = Some(from.ts);
        start.id = Some(id);
        self.emit(&start)?;
        let mut end = Event::new("link", "f", to.pid, to.tid, attributes);
        end.cat = Some("link");
        end.ts = Some(to.ts);
        end.id = Some(id);
        end.bp = Some("e");
        self.emit(&end)?;
        self.flows += 1;
        Ok(())
    }

    fn span(&mut self, span: &Span, pid: i64) -> Result<()> {
        let tid = self.thread(pid, &span.attributes)?;
        let truncated = span.is_truncated();
        let mut event = Event::new(
            &span.name,
            "X",
            pid,
            tid,
            SpanArgs {
                attributes: &span.attributes,
                trace_id: &span.context.trace_id,
                span_id: &span.context.span_id,
                parent_id: span.parent_id.as_deref(),
                status_code: &span.status.status_code,
                status_description: span.status.description.as_deref(),
            },
        );
        event.cat = Some(if truncated { "span,truncated" } else { "span" });
        event.cname = truncated.then_some("terrible");
        event.ts = Some(span.start_us);
        event.dur = Some(span.duration_us());
        self.emit(&event)?;

        for ev in &span.events {
            let ts = input::parse_time_us(&ev.timestamp).unwrap_or(span.start_us);
            let mut instant = Event::new(&ev.name, "i", pid, tid, &ev.attributes);
            instant.cat = Some("event");
            instant.ts = Some(ts);
            instant.s = Some("t");
            self.emit(&instant)?;
        }

        let here = Loc {
            pid,
            tid,
            ts: span.start_us,
        };
        for link in &span.links {
            if let Some(from) = self
                .links
                .link(&link.context.span_id, &link.attributes, here)?
            {
                self.flow(from, here, &link.attributes)?;
            }
        }
        for (to, attributes) in self.links.arrived(&span.context.span_id, here) {
            let attributes: Map<String, Value> = serde_json::from_str(&attributes)?;
            self.flow(here, to, &attributes)?;
        }
        Ok(())
    }

    /// A log record: an instant on the rank's track (or its `thread.*` track).
    fn log(&mut self, log: &LogRecord, pid: i64) -> Result<()> {
        let tid = self.thread(pid, &log.attributes)?;
        let name = match &log.body {
            Value::String(s) => clip(s, LOG_NAME_CHARS),
            Value::Null => format!("log {}", log.severity()),
            other => clip(&other.to_string(), LOG_NAME_CHARS),
        };
        let mut args = log.attributes.clone();
        args.insert("severity".into(), log.severity().into());
        if let Some(n) = log.severity_number {
            args.insert("severity_number".into(), n.into());
        }
        args.insert("body".into(), log.body.clone());
        if let Some(t) = &log.trace_id {
            args.insert("trace_id".into(), t.clone().into());
        }
        if let Some(s) = &log.span_id {
            args.insert("span_id".into(), s.clone().into());
        }
        let mut instant = Event::new(&name, "i", pid, tid, args);
        instant.cat = Some("log");
        instant.ts = Some(log.time_us);
        instant.s = Some("t");
        self.emit(&instant)
    }

    /// The data points of one resource's metrics: counter events on the rank's process.
    fn metrics(&mut self, rm: &input::ResourceMetrics, pid: i64) -> Result<()> {
        let points = rm
            .scope_metrics
            .iter()
            .flat_map(|sm| &sm.metrics)
            .flat_map(|metric| metric.data.data_points.iter().map(move |p| (metric, p)));
        for (metric, point) in points {
            let Some(ts) = point.time_unix_nano.map(|ns| (ns / 1000.0) as i64) else {
                continue;
            };
            let mut args = Map::new();
            if let Some(v) = point.value {
                args.insert("value".into(), v.into());
            } else {
                if let Some(s) = point.sum {
                    args.insert("sum".into(), s.into());
                }
                if let Some(c) = point.count {
                    args.insert("count".into(), c.into());
                }
            }
            if args.is_empty() {
                continue;
            }
            let name = counter_name(&metric.name, &point.attributes);
            let mut event = Event::new(&name, "C", pid, 0, args);
            event.ts = Some(ts);
            self.emit(&event)?;
        }
        Ok(())
    }

    fn finish(mut self, outcome: &Outcome) -> Result<()> {
        let mut other = outcome.stats.to_json();
        other["generator"] = concat!("nemo-lens ", env!("CARGO_PKG_VERSION")).into();
        other["unresolved_links"] = outcome.unresolved_links.into();
        other["links_over_budget"] = outcome.links_over_budget.into();
        other["unnamed_tracks"] = outcome.unnamed_tracks.into();
        self.out.write_all(b"\n], \"otherData\": ")?;
        serde_json::to_writer(&mut self.out, &other)?;
        self.out.write_all(b"}\n")?;
        self.out.flush()?;
        Ok(())
    }
}

/// `s` cut to `max` characters (with `…`).
fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_owned(),
    }
}

/// `name{k=v,k=v}` so that points with different attributes get different counter tracks.
fn counter_name(metric: &str, attributes: &Map<String, Value>) -> String {
    if attributes.is_empty() {
        return metric.to_owned();
    }
    let parts: Vec<String> = attributes
        .iter()
        .map(|(k, v)| match v {
            Value::String(s) => format!("{k}={s}"),
            other => format!("{k}={other}"),
        })
        .collect();
    format!("{metric}{{{}}}", parts.join(","))
}

/// The process of a record: its rank, else a per-file id.
fn pid_of(rank: Option<i64>, index: usize) -> (i64, String) {
    match rank {
        Some(r) => (r, format!("rank {r}")),
        None => (
            UNKNOWN_RANK_PID_BASE + index as i64,
            format!("file {index} (rank unknown)"),
        ),
    }
}

/// Refuses an output that is one of the inputs (the same file by device and inode, so a
/// symbolic or hard link to an input is caught too): creating it would truncate the input.
fn refuse_input_as_output(inputs: &[PathBuf], output: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(out) = fs::metadata(output) else {
        return Ok(()); // does not exist yet: it cannot be an input
    };
    for (i, input) in inputs.iter().enumerate() {
        if let Ok(m) = fs::metadata(input)
            && (m.dev(), m.ino()) == (out.dev(), out.ino())
        {
            anyhow::bail!(
                "refusing to write {}: it is input file {} ({}); nothing was written",
                output.display(),
                i + 1,
                input.display()
            );
        }
    }
    Ok(())
}

/// Converts `inputs` into `output`, parsing on a second thread when `threads` is 2 or more
/// (the output is the same).
pub fn run(
    inputs: &[PathBuf],
    output: &Path,
    read: &ReadOptions,
    threads: usize,
    progress: bool,
) -> Result<Outcome> {
    refuse_input_as_output(inputs, output)?;
    let mut split = input::archive::split(inputs, read)?;
    let archives = std::mem::take(&mut split.stats);
    let inputs = &split.paths[..];
    // A missing input or a device is refused before the output is created.
    input::check_all(inputs)?;
    let file = File::create(output)
        .with_context(|| format!("cannot create output file {}", output.display()))?;
    let mut writer = Writer::new(BufWriter::with_capacity(1 << 20, file))
        .with_context(|| format!("cannot write {}", output.display()))?;
    let mut lost = lost::LostIterations::read(inputs, read)?;
    let bar = input::progress_bar(inputs, progress);
    let mut stats =
        input::for_each_record_read_ahead(inputs, read, threads, &bar, |source, record| {
            match record {
                Record::Span(span) => {
                    lost.rename(source.index, span);
                    let (pid, label) = pid_of(span.rank, source.index);
                    writer.process(pid, &label, span.host.as_deref())?;
                    writer.span(span, pid)?;
                }
                Record::Metrics { batch, file_rank } => {
                    for rm in batch.iter() {
                        let attrs = &rm.resource.attributes;
                        let (pid, label) = pid_of(attrs.rank().or(*file_rank), source.index);
                        writer.process(pid, &label, attrs.host_name.as_deref())?;
                        writer.metrics(rm, pid)?;
                    }
                }
                Record::Log(log) => {
                    let (pid, label) = pid_of(log.rank, source.index);
                    writer.process(pid, &label, log.host.as_deref())?;
                    writer.log(log, pid)?;
                }
            }
            Ok(())
        })
        .with_context(|| format!("while writing {}", output.display()))?;
    stats.add_skipped(archives);
    let outcome = Outcome {
        stats,
        events: writer.events,
        flows: writer.flows,
        unresolved_links: writer.links.unresolved(),
        links_over_budget: writer.links.over_budget,
        unnamed_tracks: writer.tracks.unnamed,
    };
    writer
        .finish(&outcome)
        .with_context(|| format!("cannot write {}", output.display()))?;
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::parse_record;

    fn span(name: &str, id: u64, start_s: u32, link_to: Option<u64>) -> Box<Span> {
        let links = match link_to {
            Some(l) => format!(
                r#"[{{"context": {{"trace_id": "0x1", "span_id": "0x{l:016x}"}}, "attributes": {{"why": "retry"}}}}]"#
            ),
            None => "[]".into(),
        };
        let line = format!(
            r#"{{"name": "{name}", "context": {{"trace_id": "0x1", "span_id": "0x{id:016x}"}},
               "start_time": "2026-01-01T00:00:{start_s:02}.000000Z",
               "end_time": "2026-01-01T00:00:{:02}.000000Z", "links": {links}}}"#,
            start_s + 1
        );
        match parse_record(line.as_bytes(), Some(0)).unwrap() {
            Record::Span(s) => s,
            other => panic!("{other:?}"),
        }
    }

    fn trace_of(spans: &[Box<Span>]) -> Value {
        let mut buf = Vec::new();
        {
            let mut w = Writer::new(&mut buf).unwrap();
            for s in spans {
                w.span(s, 0).unwrap();
            }
            let outcome = Outcome {
                unresolved_links: w.links.unresolved(),
                ..Outcome::default()
            };
            w.finish(&outcome).unwrap();
        }
        serde_json::from_slice(&buf).unwrap()
    }

    fn flows(trace: &Value) -> Vec<(String, i64)> {
        trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "s" || e["ph"] == "f")
            .map(|e| {
                (
                    e["ph"].as_str().unwrap().to_owned(),
                    e["ts"].as_i64().unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn link_read_before_its_target_is_drawn_when_the_target_arrives() {
        // "retry" (starts at :05) links to "first" (starts at :01), which is written later.
        let trace = trace_of(&[span("retry", 2, 5, Some(1)), span("first", 1, 1, None)]);
        let base = 1_767_225_600_000_000; // 2026-01-01T00:00:00Z in µs
        assert_eq!(
            flows(&trace),
            [
                ("s".to_owned(), base + 1_000_000),
                ("f".to_owned(), base + 5_000_000)
            ]
        );
        assert_eq!(trace["otherData"]["unresolved_links"], 0);
    }

    #[test]
    fn link_to_a_span_never_seen_is_counted_not_drawn() {
        let trace = trace_of(&[span("orphan", 2, 5, Some(99))]);
        assert!(flows(&trace).is_empty());
        assert_eq!(trace["otherData"]["unresolved_links"], 1);
    }
}
