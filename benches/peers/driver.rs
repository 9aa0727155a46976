//! The driver of the peers bench: runs every wiring in a process of its own and prints the
//! tables (samples, whole-process runs) and the ratios the targets are stated in.

use std::process::Command;

use super::export::Who;
use super::{PEERS, Peer, Process, SAMPLES, Sample, Shape, process_spans};
use nemo_lens_test_support::bench::Wiring;
use nemo_lens_test_support::collector::Collector;

fn fmt_ns(ns: f64) -> String {
    if ns >= 1000.0 {
        format!("{:.2} µs", ns / 1000.0)
    } else if ns >= 100.0 {
        format!("{ns:.0} ns")
    } else if ns >= 10.0 {
        format!("{ns:.1} ns")
    } else {
        format!("{ns:.2} ns")
    }
}

fn cell(s: Option<&Sample>) -> String {
    match s {
        Some(s) => format!(
            "{} ({} – {})",
            fmt_ns(s.median),
            fmt_ns(s.min),
            fmt_ns(s.max)
        ),
        None => "failed".into(),
    }
}

/// One row: the root and child samples and, for exporting wirings, the share of spans dropped.
/// A real-export wiring has only its whole-process runs (with `real`).
struct Row {
    peer: Peer,
    root: Option<Sample>,
    child: Option<Sample>,
    dropped: Option<f64>,
    /// The whole-process runs, root and child.
    process_root: Option<Process>,
    process_child: Option<Process>,
    /// Real export, root and child: the final flush's wall time per span, and the spans lens
    /// counted as dropped.
    real_root: Option<(f64, u64)>,
    real_child: Option<(f64, u64)>,
}

/// Runs `peer` in a process of its own (`quick`: 2 ms warm-up and samples, a smoke test); a
/// real-export wiring exports to `collector`.
fn run_child(peer: Peer, quick: bool, collector: Option<&Collector>) -> Row {
    let exe = std::env::current_exe().expect("own executable");
    let mut cmd = Command::new(exe);
    cmd.args(["--wiring", peer.name()]);
    // Queues large enough that the whole-process run drops nothing (lens and the SDK's batch
    // processor both read the first; the second is lens's byte budget).
    let process = if quick { 2_000 } else { process_spans() };
    cmd.env("PEERS_PROCESS_SPANS", process.to_string())
        .env("OTEL_BSP_MAX_QUEUE_SIZE", (process + 8_192).to_string())
        .env("NEMO_LENS_QUEUE_MAX_BYTES", (2_u64 << 30).to_string());
    if quick {
        cmd.env("PEERS_WARM_UP_MS", "2").env("PEERS_SAMPLE_MS", "2");
    }
    if let (Peer::Real(r), Some(c)) = (peer, collector) {
        cmd.env("OTEL_EXPORTER_OTLP_PROTOCOL", r.wire.protocol())
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", c.endpoint(r.wire.protocol()))
            .env("PEERS_COLLECTOR_OUT", c.output_path());
    }
    let out = cmd.output().expect("run a wiring's process");
    let mut row = Row {
        peer,
        root: None,
        child: None,
        dropped: None,
        process_root: None,
        process_child: None,
        real_root: None,
        real_child: None,
    };
    if !out.status.success() {
        eprintln!(
            "{}: {}\n{}",
            peer.name(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["PEERS", _, shape, median, min, max, cpu] => {
                let s = Sample {
                    median: median.parse().unwrap_or(f64::NAN),
                    min: min.parse().unwrap_or(f64::NAN),
                    max: max.parse().unwrap_or(f64::NAN),
                    cpu: cpu.parse().unwrap_or(f64::NAN),
                };
                if *shape == "root" {
                    row.root = Some(s);
                } else {
                    row.child = Some(s);
                }
            }
            ["PROCESS", _, shape, spans, wall, cpu, exported] => {
                let p = Process {
                    wall: wall.parse().unwrap_or(f64::NAN),
                    cpu: cpu.parse().unwrap_or(f64::NAN),
                    exported: exported.parse().unwrap_or(0),
                    spans: spans.parse().unwrap_or(0),
                };
                if *shape == "root" {
                    row.process_root = Some(p);
                } else {
                    row.process_child = Some(p);
                }
            }
            ["REAL", _, shape, spans, wall, cpu, drain, received, dropped] => {
                let p = Process {
                    wall: wall.parse().unwrap_or(f64::NAN),
                    cpu: cpu.parse().unwrap_or(f64::NAN),
                    exported: received.parse().unwrap_or(0),
                    spans: spans.parse().unwrap_or(0),
                };
                let real = (
                    drain.parse().unwrap_or(f64::NAN),
                    dropped.parse().unwrap_or(0),
                );
                if *shape == "root" {
                    (row.process_root, row.real_root) = (Some(p), Some(real));
                } else {
                    (row.process_child, row.real_child) = (Some(p), Some(real));
                }
            }
            ["EXPORTED", _, produced, exported] => {
                let p: f64 = produced.parse().unwrap_or(f64::NAN);
                let e: f64 = exported.parse().unwrap_or(f64::NAN);
                row.dropped = Some(1.0 - e / p);
            }
            _ => {}
        }
    }
    row
}

/// The 1, 5 and 15 minute load averages.
fn load_average() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs every selected wiring and prints the table. Without `--bench` (`cargo test
/// --benches`), a smoke test: every wiring with 2 ms samples, failing if one fails.
pub(super) fn driver(filters: &[String], bench: bool) {
    let date = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%MZ"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    if !bench {
        println!("peers: smoke test (no --bench: 2 ms samples, maybe a debug build); not figures");
    }
    println!(
        "peers {date}: {} cores ({cpu}), load average {} at start; one process per wiring, \
         ns per span, median (min – max) of {SAMPLES} samples of wall-clock time",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );
    // A word selects the wirings whose name contains it; `=name` selects that wiring only.
    let selected = |p: &Peer| {
        filters.iter().any(|f| match f.strip_prefix('=') {
            Some(exact) => p.name() == exact,
            None => p.name().contains(f.as_str()),
        })
    };
    let peers: Vec<Peer> = PEERS
        .iter()
        .copied()
        .filter(|p| filters.is_empty() || selected(p))
        .collect();
    // One collector for every real-export wiring, started only when one runs.
    let collector = peers
        .iter()
        .any(|p| matches!(p, Peer::Real(_)))
        .then(Collector::start_counting);
    let rows: Vec<Row> = peers
        .into_iter()
        .map(|p| {
            eprintln!("peers: {} ...", p.name());
            run_child(p, !bench, collector.as_ref())
        })
        .collect();
    drop(collector);
    println!("load average {} at end", load_average());
    let sampled = rows.iter().any(|r| !matches!(r.peer, Peer::Real(_)));
    if sampled {
        println!();
        println!(
            "| wiring | root span | child of a long-lived span | root / child, thread CPU time | spans dropped |"
        );
        println!("|---|---|---|---|---|");
    }
    let cpu = |s: Option<&Sample>| s.map_or("failed".into(), |s| fmt_ns(s.cpu));
    for r in rows.iter().filter(|r| !matches!(r.peer, Peer::Real(_))) {
        let dropped = match r.dropped {
            Some(d) => format!("{:.1}%", (d * 100.0).max(0.0)),
            None => String::new(),
        };
        println!(
            "| {} | {} | {} | {} / {} | {dropped} |",
            r.peer.label(),
            cell(r.root.as_ref()),
            cell(r.child.as_ref()),
            cpu(r.root.as_ref()),
            cpu(r.child.as_ref()),
        );
    }
    print_ratios(&rows);
    print_process(&rows);
    print_real(&rows);
    let failed: Vec<_> = rows
        .iter()
        .filter(|r| match r.peer {
            Peer::Real(_) => r.process_root.is_none() || r.process_child.is_none(),
            _ => r.root.is_none() || r.child.is_none(),
        })
        .map(|r| r.peer.name())
        .collect();
    if !failed.is_empty() {
        eprintln!("peers: failed wirings: {}", failed.join(", "));
        std::process::exit(1);
    }
}

/// The exported lens span beside the registry it sits on and beside tracing-opentelemetry, its
/// child / root ratio, and the off wirings beside no subscriber, from the wall-clock medians
/// (thread CPU time in parentheses); a ratio whose two rows did not both run is left out.
fn print_ratios(rows: &[Row]) {
    let get = |w: Wiring, shape: Shape| {
        rows.iter()
            .find(|r| r.peer == Peer::Tracing(w))
            .and_then(|r| match shape {
                Shape::Root => r.root.as_ref(),
                Shape::Child => r.child.as_ref(),
            })
            .map(|s| (s.median, s.cpu))
    };
    let ratio = |a: Option<(f64, f64)>, b: Option<(f64, f64)>| {
        a.zip(b)
            .map(|(a, b)| format!("{:.2}x ({:.2}x)", a.0 / b.0, a.1 / b.1))
    };
    let mut lines = Vec::new();
    for shape in [Shape::Root, Shape::Child] {
        let lens = get(Wiring::LensExported, shape);
        for (other, what) in [
            (Wiring::RegistryOnly, "registry alone"),
            (Wiring::PlainOtelLean, "tracing-opentelemetry lean"),
            (Wiring::PlainOtel, "tracing-opentelemetry defaults"),
        ] {
            if let Some(r) = ratio(lens, get(other, shape)) {
                lines.push(format!("- {}: lens exported / {what}: {r}", shape.name()));
            }
        }
    }
    if let Some(r) = ratio(
        get(Wiring::LensExported, Shape::Child),
        get(Wiring::LensExported, Shape::Root),
    ) {
        lines.push(format!("- lens exported, child / root: {r}"));
    }
    for shape in [Shape::Root, Shape::Child] {
        if let Some(r) = ratio(
            get(Wiring::LensOtelLayer, shape),
            get(Wiring::LensExported, shape),
        ) {
            lines.push(format!(
                "- {}: opentelemetry_layer() / lens layer, both exported: {r}",
                shape.name()
            ));
        }
    }
    for off in [Wiring::LensNonExporting, Wiring::LensDisabledGroup] {
        if let Some(r) = ratio(
            get(off, Shape::Root),
            get(Wiring::NoSubscriber, Shape::Root),
        ) {
            lines.push(format!(
                "- {} / no subscriber, root: {r} (a few ns: timing noise; benches/instructions.sh settles it)",
                off.name()
            ));
        }
    }
    if !lines.is_empty() {
        println!();
        println!("Ratios of the medians, wall clock (thread CPU time):");
        for l in lines {
            println!("{l}");
        }
    }
}

/// The whole-process table: for each wiring that exports (and the registry they sit on), the
/// training thread's wall time and the process's CPU time per span over one run of
/// `PEERS_PROCESS_SPANS` spans, flushed, with the spans that run lost; then the ratios the
/// targets are stated in.
fn print_process(rows: &[Row]) {
    let rows: Vec<&Row> = rows
        .iter()
        .filter(|r| !matches!(r.peer, Peer::Real(_)))
        .filter(|r| r.process_root.is_some() || r.process_child.is_some())
        .collect();
    if rows.is_empty() {
        return;
    }
    let spans = rows
        .iter()
        .find_map(|r| r.process_root.as_ref().map(|p| p.spans))
        .unwrap_or(0);
    println!();
    println!(
        "Whole process, {spans} spans per run after a flush, then flushed: the training thread's \
         wall time and the CPU time of every thread of the process, per span"
    );
    println!();
    println!(
        "| wiring | root: training thread / process CPU | child: training thread / process CPU | spans lost |"
    );
    println!("|---|---|---|---|");
    let cell = |p: Option<&Process>| {
        p.map_or("failed".into(), |p| {
            format!("{} / {}", fmt_ns(p.wall), fmt_ns(p.cpu))
        })
    };
    for r in &rows {
        let lost = if r.peer == Peer::Tracing(Wiring::RegistryOnly) {
            String::new()
        } else {
            let lost: u64 = [&r.process_root, &r.process_child]
                .iter()
                .filter_map(|p| p.as_ref())
                .map(|p| p.spans.saturating_sub(p.exported))
                .sum();
            lost.to_string()
        };
        println!(
            "| {} | {} | {} | {lost} |",
            r.peer.label(),
            cell(r.process_root.as_ref()),
            cell(r.process_child.as_ref()),
        );
    }
    let get = |w: Wiring, shape: Shape| {
        rows.iter()
            .find(|r| r.peer == Peer::Tracing(w))
            .and_then(|r| match shape {
                Shape::Root => r.process_root.as_ref(),
                Shape::Child => r.process_child.as_ref(),
            })
    };
    let mut lines = Vec::new();
    for shape in [Shape::Root, Shape::Child] {
        let Some(lens) = get(Wiring::LensExported, shape) else {
            continue;
        };
        for (other, what) in [
            (Wiring::PlainOtelLean, "tracing-opentelemetry lean"),
            (Wiring::PlainOtel, "tracing-opentelemetry defaults"),
        ] {
            if let Some(o) = get(other, shape) {
                lines.push(format!(
                    "- {}: lens exported / {what}, process CPU: {:.2}x",
                    shape.name(),
                    lens.cpu / o.cpu
                ));
            }
        }
        if let Some(reg) = get(Wiring::RegistryOnly, shape) {
            lines.push(format!(
                "- {}: lens exported / registry alone, training thread: {:.2}x",
                shape.name(),
                lens.wall / reg.wall
            ));
        }
    }
    if !lines.is_empty() {
        println!();
        println!("Ratios (whole-process runs):");
        for l in lines {
            println!("{l}");
        }
    }
}

/// The real-export table: for each wiring that encodes and sends OTLP to the collector, the
/// process's CPU time per span over one run (spans, then a flush), the training thread's wall
/// time, the final flush's wall time, and the spans that did not arrive (counted at the
/// collector) with those lens counted as dropped; then lens's ratios to the others.
fn print_real(rows: &[Row]) {
    let rows: Vec<&Row> = rows
        .iter()
        .filter(|r| matches!(r.peer, Peer::Real(_)))
        .collect();
    if rows.is_empty() {
        return;
    }
    let spans = rows
        .iter()
        .find_map(|r| r.process_root.as_ref().map(|p| p.spans))
        .unwrap_or(0);
    println!();
    println!(
        "Real OTLP export to a rotel collector on loopback, {spans} spans per run: the CPU time \
         of every thread of the process per span (spans made, then flushed), the training \
         thread's wall time, and the wall time of the final flush, per span"
    );
    println!();
    println!(
        "| wiring | root: process CPU / training thread / flush | child: process CPU / training thread / flush | spans not received (lens: counted dropped) |"
    );
    println!("|---|---|---|---|");
    let cell = |p: Option<&Process>, real: Option<&(f64, u64)>| match (p, real) {
        (Some(p), Some((drain, _))) => format!(
            "{} / {} / {}",
            fmt_ns(p.cpu),
            fmt_ns(p.wall),
            fmt_ns(*drain)
        ),
        _ => "failed".into(),
    };
    for r in &rows {
        let runs = [
            (&r.process_root, &r.real_root),
            (&r.process_child, &r.real_child),
        ];
        let lost: u64 = runs
            .iter()
            .filter_map(|(p, _)| p.as_ref())
            .map(|p| p.spans.saturating_sub(p.exported))
            .sum();
        let counted: u64 = runs
            .iter()
            .filter_map(|(_, real)| real.as_ref())
            .map(|r| r.1)
            .sum();
        let lens = matches!(r.peer, Peer::Real(w) if w.who == Who::Lens);
        let lost = if lens {
            format!("{lost} ({counted})")
        } else {
            lost.to_string()
        };
        println!(
            "| {} | {} | {} | {lost} |",
            r.peer.label(),
            cell(r.process_root.as_ref(), r.real_root.as_ref()),
            cell(r.process_child.as_ref(), r.real_child.as_ref()),
        );
    }
    let get = |who: Who, wire, shape: Shape| {
        rows.iter()
            .find(|r| matches!(r.peer, Peer::Real(w) if w.who == who && w.wire == wire))
            .and_then(|r| match shape {
                Shape::Root => r.process_root.as_ref(),
                Shape::Child => r.process_child.as_ref(),
            })
    };
    let mut lines = Vec::new();
    for wire in [super::export::Wire::Http, super::export::Wire::Grpc] {
        for shape in [Shape::Root, Shape::Child] {
            let Some(lens) = get(Who::Lens, wire, shape) else {
                continue;
            };
            for (other, what) in [
                (Who::OtelLean, "tracing-opentelemetry lean"),
                (Who::Otel, "tracing-opentelemetry defaults"),
                (Who::Fastrace, "fastrace"),
            ] {
                if let Some(o) = get(other, wire, shape) {
                    lines.push(format!(
                        "- {} {}: lens / {what}, process CPU: {:.2}x",
                        wire.protocol(),
                        shape.name(),
                        lens.cpu / o.cpu
                    ));
                }
            }
        }
    }
    if !lines.is_empty() {
        println!();
        println!("Ratios (real export):");
        for l in lines {
            println!("{l}");
        }
    }
}
