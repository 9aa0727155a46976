//! Streaming reader for per-rank console output (plain, gzip or zstd).
//!
//! A console file is a stream of JSON records: finished spans (the layout of
//! `nemo_lens::export::console`, shared with Python NeMo Lens), metric batches
//! (`{"resource_metrics": [...]}`) and log records (the Python SDK's `LogRecord.to_json` layout,
//! also written by `nemo_lens::export::ConsoleLogExporter`). Records are one per line (compact JSONL)
//! or pretty-printed over many lines (Python Lens 0.1.0 writes `to_json(indent=4)`), mixed freely;
//! [`framing`] splits the stream. [`for_each_record`] parses each record into a [`Record`] and
//! hands it to a callback, so memory does not grow with the input: at most
//! [`ReadOptions::max_record_bytes`] of one record are held, and a longer record is skipped
//! unread and counted.
//!
//! Bad input is never fatal: a record that is not valid JSON, not UTF-8, cut short, too long, or
//! neither a span, a metric batch nor a log record is skipped and counted in [`Stats`] (with the
//! first few locations kept for the report); a gzip stream cut short ends its file early and is
//! reported the same way. Only a file that cannot be opened at all is an error, and so is an
//! input that would never end (a device, a FIFO without a writer: [`open`]).
//!
//! Python ranks write non-finite floats as bare `NaN` / `Infinity` tokens (not JSON); a record
//! that fails to parse is rescanned and those tokens are read as the strings `"NaN"`,
//! `"Infinity"`, `"-Infinity"`, as this crate's console exporter writes them, so a span with a
//! NaN loss is kept. Timestamps are RFC 3339 with any offset ([`timestamp`]).
//!
//! Gzip is recognised by its magic bytes (`1f 8b`), whatever the file name; concatenated gzip
//! members (what `cat a.gz b.gz` gives) are read as one stream. So is zstd, in both layouts of
//! the OpenTelemetry Collector's file exporter ([`zstd`]). Collector archives (OTLP/JSON, one
//! request per line, every rank of a node in one file) are split into per-rank console files
//! before a command reads them ([`archive`]).

pub mod archive;
mod framing;
mod open;
mod otlp;
mod parallel;
mod read_ahead;
mod record;
mod timestamp;
mod zstd;

pub use parallel::{Jobs, Reading, for_each_file};
pub use read_ahead::for_each_record_read_ahead;
pub use record::{LogRecord, Record, ResourceMetrics, Span, parse_record};
pub use timestamp::parse_time_us;

use std::io::{self, BufRead, BufReader, IsTerminal, Read};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use flate2::read::MultiGzDecoder;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;

/// How many skipped-line locations the report quotes.
const MAX_EXAMPLES: usize = 5;

/// The rank in a file name: the digits after the last `rank` (`spans-rank3.jsonl`,
/// `rank_12.jsonl.gz`, `job.rank-7.jsonl`), case-insensitive.
pub fn rank_from_file_name(path: &Path) -> Option<i64> {
    let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
    name.rmatch_indices("rank").find_map(|(i, _)| {
        let rest = name[i + 4..].trim_start_matches(['-', '_', '.', '=']);
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    })
}

/// Counts of what was read and skipped.
#[derive(Debug, Default)]
pub struct Stats {
    /// Records read (every frame: parsed, malformed, cut or too long).
    pub records: u64,
    /// Span records.
    pub spans: u64,
    /// Metric batches.
    pub metric_batches: u64,
    /// Log records.
    pub log_records: u64,
    /// Records skipped as malformed (not JSON, cut short, not UTF-8, unknown shape).
    pub skipped: u64,
    /// Records skipped unread because they exceed [`ReadOptions::max_record_bytes`].
    pub too_long: u64,
    /// Bytes of the records skipped for their length.
    pub too_long_bytes: u64,
    /// Files cut short by a read or decompression error.
    pub truncated_files: u64,
    /// `file:line: reason` of the first skipped records and cut files, with the position of
    /// their file on the command line (files read in parallel still report the first ones).
    examples: Vec<(usize, String)>,
}

impl Stats {
    fn note(&mut self, file: usize, what: String) {
        if self.examples.len() < MAX_EXAMPLES {
            self.examples.push((file, what));
        }
    }

    /// Adds the counts of `other` (another file's); keeps the examples of the first files.
    pub fn merge(&mut self, other: Stats) {
        self.records += other.records;
        self.spans += other.spans;
        self.metric_batches += other.metric_batches;
        self.log_records += other.log_records;
        self.skipped += other.skipped;
        self.too_long += other.too_long;
        self.too_long_bytes += other.too_long_bytes;
        self.truncated_files += other.truncated_files;
        self.examples.extend(other.examples);
        // Stable: the examples of one file keep their order.
        self.examples.sort_by_key(|(file, _)| *file);
        self.examples.truncate(MAX_EXAMPLES);
    }

    /// Adds what was skipped in collector archives ([`archive::Split::stats`]): their lines and
    /// spans are counted when their per-rank files are read, their damage only here.
    pub fn add_skipped(&mut self, archives: Stats) {
        self.skipped += archives.skipped;
        self.too_long += archives.too_long;
        self.too_long_bytes += archives.too_long_bytes;
        self.truncated_files += archives.truncated_files;
        self.examples.extend(archives.examples);
        self.examples.sort_by_key(|(file, _)| *file);
        self.examples.truncate(MAX_EXAMPLES);
    }

    /// Prints the skipped-record report to stderr (nothing when nothing was skipped).
    pub fn report(&self) {
        if self.skipped == 0 && self.too_long == 0 && self.truncated_files == 0 {
            return;
        }
        eprintln!(
            "warning: skipped {} malformed record(s) and {} record(s) over the size limit \
             ({} bytes) of {} read; {} file(s) ended early",
            self.skipped, self.too_long, self.too_long_bytes, self.records, self.truncated_files
        );
        for (_, e) in &self.examples {
            eprintln!("  {e}");
        }
    }

    /// The counts as JSON (for `otherData` and `summary --json`).
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "records": self.records,
            "spans": self.spans,
            "metric_batches": self.metric_batches,
            "log_records": self.log_records,
            "skipped_records": self.skipped,
            "too_long_records": self.too_long,
            "too_long_bytes": self.too_long_bytes,
            "truncated_files": self.truncated_files,
        })
    }
}

/// How input is read (shared by `perfetto` and `summary`).
#[derive(Debug, Clone, clap::Args)]
pub struct ReadOptions {
    /// Longest record read, in bytes (suffix K, M or G for KiB, MiB, GiB). Longer records (a
    /// line with no end, a span with huge attributes) are skipped unread and counted.
    #[arg(long, value_name = "BYTES", default_value = "16M", value_parser = parse_bytes)]
    pub max_record_bytes: usize,
}

/// Parses `--max-record-bytes` (`65536`, `64K`, `16M`, `1G`; at least 1 KiB).
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (digits, unit) = match t.as_bytes().last() {
        Some(b'k' | b'K') => (&t[..t.len() - 1], 1 << 10),
        Some(b'm' | b'M') => (&t[..t.len() - 1], 1 << 20),
        Some(b'g' | b'G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: usize = digits
        .parse()
        .map_err(|_| format!("expected a byte count such as 65536, 64K or 16M, got {s:?}"))?;
    match n.checked_mul(unit) {
        Some(v) if v >= 1024 => Ok(v),
        _ => Err(format!(
            "expected a byte count from 1K to the address space, got {s:?}"
        )),
    }
}

/// A file being read, as the callback sees it.
#[derive(Debug, Clone)]
pub struct Source {
    /// Position on the command line.
    pub index: usize,
    /// Rank from the file name, if any.
    pub file_rank: Option<i64>,
}

/// Counts the bytes read from the file (before decompression) into the progress bar.
struct Counting<R> {
    inner: R,
    progress: ProgressBar,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.progress.inc(n as u64);
        Ok(n)
    }
}

/// Read buffer of a file (and of its decompressed stream).
const BUFFER_BYTES: usize = 256 * 1024;

fn open(path: &Path, progress: &ProgressBar) -> Result<Box<dyn BufRead>> {
    let (file, head) = open::open(path)?;
    // A small file gets a small buffer: thousands of small dumps would spend more time
    // zeroing 256 KiB buffers than parsing.
    let len = file
        .metadata()
        .ok()
        .filter(|m| m.is_file())
        .map_or(u64::MAX, |m| m.len());
    let capacity = usize::try_from(len.saturating_add(1))
        .unwrap_or(BUFFER_BYTES)
        .clamp(4096, BUFFER_BYTES);
    let mut raw = BufReader::with_capacity(
        capacity,
        Counting {
            inner: io::Cursor::new(head).chain(file),
            progress: progress.clone(),
        },
    );
    let head = raw
        .fill_buf()
        .with_context(|| format!("cannot read {}", path.display()))?;
    if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Box::new(BufReader::with_capacity(
            BUFFER_BYTES,
            MultiGzDecoder::new(raw),
        )))
    } else if zstd::is_stream(head) {
        Ok(Box::new(BufReader::with_capacity(
            BUFFER_BYTES,
            zstd::Frames::new(raw),
        )))
    } else if zstd::is_length_prefixed(head) {
        Ok(Box::new(BufReader::with_capacity(
            BUFFER_BYTES,
            zstd::LengthPrefixed::new(raw),
        )))
    } else {
        Ok(Box::new(raw))
    }
}

/// Opens a file for reading, decompressed when it is gzip or zstd (no progress bar).
pub fn open_decoded(path: &Path) -> Result<Box<dyn BufRead>> {
    open(path, &ProgressBar::hidden())
}

/// A progress bar over the input bytes on stderr, drawn only when stderr is a terminal.
pub fn progress_bar(paths: &[PathBuf], enabled: bool) -> ProgressBar {
    if !enabled || !io::stderr().is_terminal() {
        return ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
    }
    let total = paths
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
    ) {
        bar.set_style(style);
    }
    bar
}

/// The records of one file, read one at a time (see [`Records::next_record`]).
pub struct Records<'p> {
    path: &'p Path,
    source: Source,
    framer: framing::Framer<Box<dyn BufRead>>,
    max_record_bytes: usize,
    stats: Stats,
    done: bool,
    /// Bytes of the record last returned, as read.
    record_bytes: usize,
}

impl<'p> Records<'p> {
    /// Opens the file at position `index` of the command line.
    pub fn open(
        index: usize,
        path: &'p Path,
        options: &ReadOptions,
        progress: &ProgressBar,
    ) -> Result<Self> {
        Ok(Records {
            path,
            source: Source {
                index,
                file_rank: rank_from_file_name(path),
            },
            framer: framing::Framer::new(open(path, progress)?, options.max_record_bytes),
            max_record_bytes: options.max_record_bytes,
            stats: Stats::default(),
            done: false,
            record_bytes: 0,
        })
    }

    /// The file being read.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The next record that parses; `None` at the end of the file (or where a read error cut
    /// it). What is skipped on the way is counted in the file's [`Stats`].
    pub fn next_record(&mut self) -> Option<Record> {
        let index = self.source.index;
        while !self.done {
            let frame = match self.framer.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(e) => {
                    self.stats.truncated_files += 1;
                    let what = format!(
                        "{}: stopped at line {}: {e}",
                        self.path.display(),
                        self.framer.line()
                    );
                    self.stats.note(index, what);
                    break;
                }
            };
            self.stats.records += 1;
            let line = self.framer.start_line();
            let at = || format!("{}:{line}", self.path.display());
            let reason = match frame {
                framing::Frame::Record => {
                    self.record_bytes = self.framer.record().len();
                    match parse_record(self.framer.record(), self.source.file_rank) {
                        Ok(record) => {
                            match &record {
                                Record::Span(_) => self.stats.spans += 1,
                                Record::Metrics { .. } => self.stats.metric_batches += 1,
                                Record::Log(_) => self.stats.log_records += 1,
                            }
                            return Some(record);
                        }
                        Err(reason) => reason,
                    }
                }
                framing::Frame::TooLong { bytes } => {
                    self.stats.too_long += 1;
                    self.stats.too_long_bytes += bytes;
                    let what = format!(
                        "{}: record of {bytes} bytes skipped (over --max-record-bytes {})",
                        at(),
                        self.max_record_bytes
                    );
                    self.stats.note(index, what);
                    continue;
                }
                framing::Frame::Cut => "record cut short".to_owned(),
                framing::Frame::NotJson => "not a JSON object".to_owned(),
            };
            self.stats.skipped += 1;
            let what = format!("{}: {reason}", at());
            self.stats.note(index, what);
        }
        self.done = true;
        None
    }

    /// Bytes of the record [`Records::next_record`] last returned, as read (uncompressed).
    pub fn record_bytes(&self) -> usize {
        self.record_bytes
    }

    /// What was read and skipped so far in this file.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// What was read and skipped in this file.
    pub fn into_stats(self) -> Stats {
        self.stats
    }
}

/// Checks every path before anything is read: it exists, and is a regular file or a pipe
/// (a device, a socket or a directory is refused: see [`open`]). Returns the file sizes (0 for
/// a pipe).
pub fn check_all(paths: &[PathBuf]) -> Result<Vec<u64>> {
    paths
        .iter()
        .map(|path| {
            let meta = std::fs::metadata(path)
                .with_context(|| format!("cannot open {}", path.display()))?;
            open::check(path, &meta)?;
            Ok(if meta.is_file() { meta.len() } else { 0 })
        })
        .collect()
}

/// Reads every file in order and calls `f` for each record.
///
/// Every path is checked first ([`check_all`]). Returns what was read and skipped. An error
/// from `f`, or a file that cannot be opened, stops the reading and is returned.
pub fn for_each_record(
    paths: &[PathBuf],
    options: &ReadOptions,
    progress: &ProgressBar,
    mut f: impl FnMut(&Source, Record) -> Result<()>,
) -> Result<Stats> {
    check_all(paths)?;
    let mut stats = Stats::default();
    for (index, path) in paths.iter().enumerate() {
        let mut records = Records::open(index, path, options, progress)?;
        while let Some(record) = records.next_record() {
            f(records.source(), record)?;
        }
        stats.merge(records.into_stats());
    }
    progress.finish_and_clear();
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_from_file_names() {
        let r = |s: &str| rank_from_file_name(Path::new(s));
        assert_eq!(r("spans-rank3.jsonl"), Some(3));
        assert_eq!(r("/x/rank7/job.RANK_12.jsonl.gz"), Some(12));
        assert_eq!(r("job.rank-7.jsonl"), Some(7));
        assert_eq!(r("ranking.jsonl"), None);
        assert_eq!(r("spans.jsonl"), None);
    }

    #[test]
    fn byte_counts_take_binary_suffixes() {
        assert_eq!(parse_bytes("16M"), Ok(16 << 20));
        assert_eq!(parse_bytes(" 64k "), Ok(64 << 10));
        assert_eq!(parse_bytes("2048"), Ok(2048));
        assert!(parse_bytes("12").is_err());
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("99999999999999999G").is_err());
    }
}
