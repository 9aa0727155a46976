//! Throughput of the `nemo-lens` command-line tool on a large generated job.
//!
//! Run: `cargo bench -p nemo-lens-cli --bench throughput` (figures: `docs/performance.md`).
//!
//! Each iteration runs the real release binary (`CARGO_BIN_EXE_nemo-lens`, process start
//! included). Group `cli`, on a generated job of 8 ranks × 12,000 span lines, one thread
//! (`--jobs 1`, for the figures per core):
//!
//! * `perfetto_plain`, `perfetto_gzip`: `perfetto` on the plain files, then on the same lines
//!   gzip-compressed;
//! * `summary_plain`: `summary --json` on the plain files;
//! * `straggler_plain`: `straggler --json` on the plain files;
//! * `summary_pretty`: `summary --json` on the same records pretty-printed as Python Lens 0.1.0
//!   writes them (`indent=4`).
//!
//! Group `cli_64_files`, on the flight-recorder dumps of 64 ranks × 2,000 steps (a step and a
//! collective span each): `summary_jobs1` / `summary_jobs2` and `straggler_jobs1` /
//! `straggler_jobs2`, one thread against two (`--jobs`).
//!
//! Throughput is counted in uncompressed JSONL bytes (for `summary_pretty`, in the
//! pretty-printed bytes). `benches/ranks.rs` times 4,096 rank dumps and reports peak memory.

use nemo_lens_test_support::cli as support;

use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group};
use serde_json::json;

/// Ranks × steps × 2 spans per step.
const RANKS: i64 = 8;
const STEPS: i64 = 6_000;

/// The plain files re-written pretty-printed, as Python Lens 0.1.0 writes its console output
/// (`json.dumps(indent=4)`); returns the files and their bytes.
fn pretty(dir: &Path, plain: &[PathBuf]) -> (Vec<PathBuf>, u64) {
    let mut files = Vec::new();
    let mut bytes = 0;
    for path in plain {
        let out_path = dir.join(format!(
            "pretty-{}",
            path.file_name().unwrap().to_string_lossy()
        ));
        let mut out = BufWriter::new(fs::File::create(&out_path).unwrap());
        for line in fs::read_to_string(path).unwrap().lines() {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            let mut ser = serde_json::Serializer::with_formatter(
                &mut out,
                serde_json::ser::PrettyFormatter::with_indent(b"    "),
            );
            serde::Serialize::serialize(&value, &mut ser).unwrap();
            writeln!(out).unwrap();
        }
        out.flush().unwrap();
        drop(out);
        bytes += fs::metadata(&out_path).unwrap().len();
        files.push(out_path);
    }
    (files, bytes)
}

/// Writes one plain and one gzip file per rank; returns (plain files, gz files, plain bytes).
fn generate(dir: &Path) -> (Vec<PathBuf>, Vec<PathBuf>, u64) {
    let mut plain = Vec::new();
    let mut gz = Vec::new();
    let mut bytes = 0;
    for rank in 0..RANKS {
        let path = dir.join(format!("spans-rank{rank}.jsonl"));
        let mut out = BufWriter::new(fs::File::create(&path).unwrap());
        for step in 0..STEPS {
            let start = support::T0_US + step * 200_000;
            let dur = if rank == 5 { 150_000 } else { 100_000 };
            for (name, kind, s, e) in [
                ("forward", 1, start + 1000, start + dur - 1000),
                ("train_step", 0, start, start + dur),
            ] {
                let line = support::span_line(
                    name,
                    0xabc0 + rank as u128,
                    support::span_id(rank, step, kind),
                    (kind == 1).then(|| support::span_id(rank, step, 0)),
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

/// Runs the tool; `straggler` exits 3 when it names a suspect.
fn run(args: &[&str], files: &[PathBuf]) {
    let status = Command::new(env!("CARGO_BIN_EXE_nemo-lens"))
        .args(args)
        .args(files)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(matches!(status.code(), Some(0 | 3)), "{args:?}: {status}");
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
        b.iter(|| {
            run(
                &["perfetto", "--no-progress", "--jobs", "1", "-o", out],
                &plain,
            )
        })
    });
    group.bench_function("perfetto_gzip", |b| {
        b.iter(|| {
            run(
                &["perfetto", "--no-progress", "--jobs", "1", "-o", out],
                &gz,
            )
        })
    });
    group.bench_function("summary_plain", |b| {
        b.iter(|| {
            run(
                &["summary", "--no-progress", "--json", "--jobs", "1"],
                &plain,
            )
        })
    });
    group.bench_function("straggler_plain", |b| {
        b.iter(|| {
            run(
                &["straggler", "--no-progress", "--json", "--jobs", "1"],
                &plain,
            )
        })
    });
    // The same records pretty-printed (more bytes; throughput counted in these bytes).
    let (pretty_files, pretty_bytes) = pretty(dir.path(), &plain);
    group.throughput(Throughput::Bytes(pretty_bytes));
    group.bench_function("summary_pretty", |b| {
        b.iter(|| {
            run(
                &["summary", "--no-progress", "--json", "--jobs", "1"],
                &pretty_files,
            )
        })
    });
    group.finish();

    // 64 files: one thread against two.
    let dumps_dir = dir.path().join("dumps");
    fs::create_dir(&dumps_dir).unwrap();
    let dumps = support::write_rank_dumps(&dumps_dir, 64, 2_000, &[17], &[]);
    let bytes: u64 = dumps.iter().map(|p| fs::metadata(p).unwrap().len()).sum();
    let mut group = c.benchmark_group("cli_64_files");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    group.throughput(Throughput::Bytes(bytes));
    for command in ["summary", "straggler"] {
        for jobs in ["1", "2"] {
            group.bench_function(format!("{command}_jobs{jobs}"), |b| {
                b.iter(|| {
                    run(
                        &[command, "--no-progress", "--json", "--jobs", jobs],
                        &dumps,
                    )
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);

/// With `CLI_BENCH_GENERATE=DIR`, writes group `cli`'s plain rank files into DIR and exits
/// without timing anything: `cli/benches/profile.sh` profiles the tool on the same input.
fn main() {
    if let Some(dir) = std::env::var_os("CLI_BENCH_GENERATE") {
        let (plain, _, bytes) = generate(Path::new(&dir));
        println!("generated {} files, {bytes} bytes", plain.len());
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
