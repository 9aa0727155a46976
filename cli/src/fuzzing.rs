//! Entry points for the fuzz targets in `fuzz/`, compiled only with `--cfg fuzzing`: the tool's
//! readers of outside input on the fuzzer's bytes, as the commands call them.

use std::io::Write;
use std::path::PathBuf;

use indicatif::ProgressBar;

use crate::input::{self, ReadOptions, Records};

/// A file of this process the input is written to: the readers open paths, as the commands do
/// (plain or gzip by content, regular-file checks, buffer sizing).
fn scratch(data: &[u8]) -> PathBuf {
    let path = std::env::temp_dir().join(format!("nemo-lens-fuzz-{}.jsonl", std::process::id()));
    let mut file = std::fs::File::create(&path).expect("scratch file");
    file.write_all(data).expect("scratch file written");
    path
}

/// Reads `data` as a span file (console JSONL or a flight-recorder dump; plain, gzip or zstd)
/// with a 4 KiB record cap, record by record, then as a collector archive, then as `hang` reads
/// dumps. Returns the records read.
/// Counts are checked: every frame is a record, a skip or an over-long record.
pub fn records(data: &[u8]) -> u64 {
    let path = scratch(data);
    let options = ReadOptions {
        max_record_bytes: 4096,
    };
    let hidden = ProgressBar::hidden();
    let mut read = 0;
    if let Ok(mut records) = Records::open(0, &path, &options, &hidden) {
        while records.next_record().is_some() {
            read += 1;
        }
        let stats = records.stats();
        assert_eq!(
            stats.records,
            stats.spans + stats.metric_batches + stats.log_records + stats.skipped + stats.too_long,
            "every frame is parsed, skipped or too long"
        );
    }
    // As an OpenTelemetry Collector archive: split into per-rank files (removed on drop).
    if let Ok(split) = input::archive::split(std::slice::from_ref(&path), &options) {
        drop(split);
    }
    let _ = crate::hang::analyse(std::slice::from_ref(&path), None, &options);
    let _ = std::fs::remove_file(&path);
    read
}

/// `emit-spans --span` arguments, one per line: checked, ordered and range-checked as the
/// command does. A plan never holds a span whose parent is not before it.
pub fn span_specs(args: &[String]) {
    if let Ok(specs) = crate::emit::spans::plan(args) {
        let _ = crate::emit::spans::out_of_range(&specs);
        for (i, spec) in specs.iter().enumerate() {
            if let Some(parent) = &spec.parent {
                assert!(
                    specs[..i].iter().any(|s| &s.name == parent),
                    "{} before its parent {parent}",
                    spec.name
                );
            }
            let _ = crate::emit::spans::duration(spec.start_ns, spec.end_ns);
        }
    }
}

/// `set-slurm-resource-attrs`: the export line for the variables `vars` and the inherited
/// `OTEL_RESOURCE_ATTRIBUTES` bytes, at both stages.
pub fn slurm_export_line(
    vars: &std::collections::HashMap<String, String>,
    inherited: &[u8],
    image: Option<&str>,
) {
    use crate::slurm_attrs::{Stage, export_line};
    let lookup = |k: &str| vars.get(k).cloned();
    for (stage, image) in [(Stage::Sbatch, None), (Stage::Task, image)] {
        let line = export_line(stage, image, &lookup, inherited);
        assert!(line.starts_with(b"export OTEL_RESOURCE_ATTRIBUTES="));
        assert!(line.ends_with(b"\n"));
    }
}

/// The tool's option values: `--max-record-bytes`, `--threshold` and the RFC 3339 times of
/// records.
pub fn option_values(text: &str) {
    if let Ok(n) = input::parse_bytes(text) {
        assert!(n >= 1024);
    }
    if let Ok(v) = crate::summary::parse_threshold(text) {
        assert!(v.is_finite() && v >= 0.0);
    }
    let _ = input::parse_time_us(text);
}
