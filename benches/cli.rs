//! Throughput of the `nemo-lens` command-line tool on a large generated job.
//!
//! Run: `cargo bench --features cli --bench cli`
//!
//! The bench runs the real release binary (`CARGO_BIN_EXE_nemo-lens`, process start included)
//! on a generated job of 8 ranks × 12,000 span lines (≈47 MiB of JSONL; the gzip variant reads
//! the same lines compressed). Throughput is counted in uncompressed JSONL bytes.
//!
//! Results (2-core AMD EPYC VM shared with three concurrent builds, rustc 1.95.0,
//! 2026-11-30; criterion 10 samples, median [95 % interval]):
//!
//! | command | time | throughput |
//! |---|---|---|
//! | `perfetto` (plain JSONL) | 402 ms [371, 437] | 117 MiB/s [107, 127] |
//! | `perfetto` (gzip) | 355 ms [346, 361] | 132 MiB/s [130, 136] |
//! | `summary --json` (plain JSONL) | 214 ms [212, 217] | 219 MiB/s [216, 222] |
//!
//! The gzip input came out faster than the plain one. The cause is not pinned
//! down (the plain files move about 5× more bytes through reads on a VM shared with other
//! builds); decompression is clearly not the bottleneck, JSON parsing and writing are. Memory
//! stays flat: events are written as lines are read (README, Performance, has the resident-set
//! figures).

#[path = "../tests/cli_support/mod.rs"]
mod cli_support;

use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;

/// Ranks × steps × 2 spans per step.
const RANKS: i64 = 8;
const STEPS: i64 = 6_000;

/// Writes one plain and one gzip file per rank; returns (plain files, gz files, plain bytes).
fn generate(dir: &Path) -> (Vec<PathBuf>, Vec<PathBuf>, u64) {
    let mut plain = Vec::new();
    let mut gz = Vec::new();
    let mut bytes = 0;
    for rank in 0..RANKS {
        let path = dir.join(format!("spans-rank{rank}.jsonl"));
        let mut out = BufWriter::new(fs::File::create(&path).unwrap());
        for step in 0..STEPS {
            let start = cli_support::T0_US + step * 200_000;
            let dur = if rank == 5 { 150_000 } else { 100_000 };
            for (name, kind, s, e) in [
                ("forward", 1, start + 1000, start + dur - 1000),
                ("train_step", 0, start, start + dur),
            ] {
                let line = cli_support::span_line(
                    name,
                    0xabc0 + rank as u128,
                    cli_support::span_id(rank, step, kind),
                    (kind == 1).then(|| cli_support::span_id(rank, step, 0)),
                    s,
                    e,
                    json!({ "step": step, "dl.loss": 0.25 }),
                    json!([]),
                    json!([]),
                    Some(rank),
                );
                writeln!(out, "{line}").unwrap();
            }
        }
        out.flush().unwrap();
        drop(out);
        bytes += fs::metadata(&path).unwrap().len();
        let gz_path = dir.join(format!("spans-rank{rank}.jsonl.gz"));
        let mut enc = flate2::write::GzEncoder::new(
            fs::File::create(&gz_path).unwrap(),
            flate2::Compression::fast(),
        );
        std::io::copy(&mut fs::File::open(&path).unwrap(), &mut enc).unwrap();
        enc.finish().unwrap();
        plain.push(path);
        gz.push(gz_path);
    }
    (plain, gz, bytes)
}

fn run(args: &[&str], files: &[PathBuf]) {
    let status = Command::new(env!("CARGO_BIN_EXE_nemo-lens"))
        .args(args)
        .args(files)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let (plain, gz, bytes) = generate(dir.path());
    let out = dir.path().join("trace.json");
    let out = out.to_str().unwrap();

    let mut group = c.benchmark_group("cli");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    // Throughput is always counted in uncompressed JSONL bytes.
    group.throughput(Throughput::Bytes(bytes));
    group.bench_function("perfetto_plain", |b| {
        b.iter(|| run(&["perfetto", "--no-progress", "-o", out], &plain))
    });
    group.bench_function("perfetto_gzip", |b| {
        b.iter(|| run(&["perfetto", "--no-progress", "-o", out], &gz))
    });
    group.bench_function("summary_plain", |b| {
        b.iter(|| run(&["summary", "--no-progress", "--json"], &plain))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
