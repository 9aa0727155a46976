//! OpenTelemetry Collector archives as input: every command splits them into per-rank console
//! files before it reads.
//!
//! NeMo Lens runs one collector per node, its `file` exporter (`format: json`) writing every
//! rank's spans, metrics and logs to one archive, rotated, often zstd. An input is an archive when
//! its decoded content (plain, gzip or zstd in either layout: [`super::zstd`]) starts with an
//! OTLP/JSON request ([`otlp::starts_request`]), whatever its name. A directory stands for its
//! archives and its console files (`*.jsonl`, `*.jsonl.gz`), hidden files left out, sorted by name
//! (a collector's rotated backups `NAME-<time>.EXT` sort before the current `NAME.EXT`). A pipe is
//! read as a console file (it cannot be looked at twice).
//!
//! [`split`] reads the archives in the order given, one request line at a time (each bounded by
//! `--max-record-bytes`, a damaged line skipped and counted, as in a console file), and writes each
//! resource's spans, in the console layout, to the file of its producer in a temporary directory
//! (under `TMPDIR`, removed when the command ends), named as NeMo Lens's
//! `tools/otel_archive_to_lens.py` names them:
//!
//! * an NVRx ft_launcher agent (`nvrx.role = ft_launcher_agent`): `lens_ftlauncher_<n>.jsonl`, one
//!   per node (`nvrx.node`, else `host.name`);
//! * a process with a rank (`dl.rank`, else `nv.dl.rank`, else the digits after `-rank` in
//!   `service.instance.id`): `lens_rank<N>.jsonl`, or `lens_rank<N>_ckptworker.jsonl` when its
//!   `service.instance.id` names a `ckptworker`;
//! * the rest: `lens_unranked.jsonl`.
//!
//! The commands then read those files like any rank's, so every analysis sees an archive's ranks
//! as it sees console files. Memory holds one request line and a write buffer per open file;
//! at most [`MAX_OPEN`] files are open at once. Metric and log requests are counted, not read.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use indicatif::ProgressBar;
use serde_json::{Map, Value, json};

use super::framing::{Frame, Framer};
use super::otlp::{self, Request};
use super::record::as_int;
use super::{ReadOptions, Stats};

/// Per-rank files open at once while splitting (more are closed and reopened to append).
pub const MAX_OPEN: usize = 256;

/// Bytes of decoded content looked at to recognise an archive.
const HEAD_BYTES: u64 = 256;

/// The inputs of a command with its archives split per rank.
#[derive(Debug)]
pub struct Split {
    /// The files to read: the console files as given (a directory's in name order), then the
    /// per-rank files of the archives.
    pub paths: Vec<PathBuf>,
    /// What was read and skipped in the archives (records are request lines): the commands add
    /// what was skipped to the counts of their reading ([`Stats::add_skipped`]), `hang` prints
    /// it ([`Split::report`]).
    pub stats: Stats,
    /// Holds the per-rank files; removed on drop.
    _dir: Option<tempfile::TempDir>,
}

impl Split {
    /// Prints what was skipped in the archives to stderr (nothing when nothing was).
    pub fn report(&self) {
        let s = &self.stats;
        if s.skipped == 0 && s.too_long == 0 && s.truncated_files == 0 {
            return;
        }
        eprintln!(
            "warning: collector archives: skipped {} malformed request line(s) or span(s) and {} \
             line(s) over the size limit ({} bytes) of {} line(s) read; {} file(s) ended early",
            s.skipped, s.too_long, s.too_long_bytes, s.records, s.truncated_files
        );
        for (_, e) in &s.examples {
            eprintln!("  {e}");
        }
    }
}

/// Whether a regular file is a collector archive (its decoded content starts with an OTLP/JSON
/// request). A file that cannot be read is not one (the reading proper reports it).
pub fn is_archive(path: &Path) -> bool {
    let Ok(reader) = super::open_decoded(path) else {
        return false;
    };
    let mut head = Vec::new();
    // A stream cut inside its first bytes: what was decoded decides.
    let _ = reader.take(HEAD_BYTES).read_to_end(&mut head);
    otlp::starts_request(&head)
}

fn is_console_name(name: &str) -> bool {
    name.ends_with(".jsonl") || name.ends_with(".jsonl.gz")
}

/// Splits the archives among `inputs` (files or directories) into per-rank console files.
///
/// Paths that are neither a directory nor a regular file are passed on unread (the command's
/// own checks refuse them). A directory with neither archives nor console files is an error.
pub fn split(inputs: &[PathBuf], read: &ReadOptions) -> Result<Split> {
    let mut paths = Vec::new();
    let mut archives = Vec::new();
    for input in inputs {
        match std::fs::metadata(input) {
            Ok(meta) if meta.is_dir() => {
                let mut found: Vec<PathBuf> = std::fs::read_dir(input)
                    .with_context(|| format!("cannot list {}", input.display()))?
                    .filter_map(|e| e.ok())
                    .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                    .map(|e| e.path())
                    .filter(|p| p.is_file())
                    .collect();
                found.sort();
                let before = (paths.len(), archives.len());
                for path in found {
                    if is_archive(&path) {
                        archives.push(path);
                    } else if is_console_name(
                        &path.file_name().unwrap_or_default().to_string_lossy(),
                    ) {
                        paths.push(path);
                    }
                }
                anyhow::ensure!(
                    (paths.len(), archives.len()) != before,
                    "{}: no collector archive and no console file (*.jsonl, *.jsonl.gz) in it",
                    input.display()
                );
            }
            Ok(meta) if meta.is_file() && is_archive(input) => archives.push(input.clone()),
            _ => paths.push(input.clone()),
        }
    }
    let mut split = Split {
        paths,
        stats: Stats::default(),
        _dir: None,
    };
    if archives.is_empty() {
        return Ok(split);
    }
    let dir = tempfile::Builder::new()
        .prefix("nemo-lens-archive-")
        .tempdir()
        .context("cannot create a temporary directory for the archives' per-rank files (TMPDIR)")?;
    let mut spool = Spool {
        dir: dir.path().to_path_buf(),
        open: BTreeMap::new(),
        made: BTreeSet::new(),
        nodes: BTreeMap::new(),
    };
    for (index, path) in archives.iter().enumerate() {
        let stats = spool
            .archive(index, path, read)
            .with_context(|| format!("while splitting {}", path.display()))?;
        split.stats.merge(stats);
    }
    spool.close()?;
    split
        .paths
        .extend(spool.made.iter().map(|key| spool.dir.join(key.file_name())));
    split._dir = Some(dir);
    Ok(split)
}

/// Whose spans a per-rank file holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Rank(i64),
    CheckpointWorker(i64),
    FtLauncher(usize),
    Unranked,
}

impl Key {
    fn file_name(&self) -> String {
        // A negative rank is not written as `-N`: file-name ranks read `rank-7` as 7.
        let rank = |r: &i64| {
            if *r < 0 {
                format!("neg{}", r.unsigned_abs())
            } else {
                r.to_string()
            }
        };
        match self {
            Key::Rank(r) => format!("lens_rank{}.jsonl", rank(r)),
            Key::CheckpointWorker(r) => format!("lens_rank{}_ckptworker.jsonl", rank(r)),
            Key::FtLauncher(n) => format!("lens_ftlauncher_{n}.jsonl"),
            Key::Unranked => "lens_unranked.jsonl".to_owned(),
        }
    }
}

fn as_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// The per-rank files being written.
struct Spool {
    dir: PathBuf,
    open: BTreeMap<Key, BufWriter<File>>,
    made: BTreeSet<Key>,
    /// ft_launcher nodes, numbered in order of appearance.
    nodes: BTreeMap<String, usize>,
}

impl Spool {
    fn key(&mut self, attrs: &Map<String, Value>) -> Key {
        if attrs.get("nvrx.role").and_then(Value::as_str) == Some("ft_launcher_agent") {
            let node = as_text(attrs.get("nvrx.node"))
                .or_else(|| as_text(attrs.get("host.name")))
                .unwrap_or_else(|| "node".to_owned());
            let next = self.nodes.len();
            return Key::FtLauncher(*self.nodes.entry(node).or_insert(next));
        }
        let instance = as_text(attrs.get("service.instance.id")).unwrap_or_default();
        let rank = attrs
            .get("dl.rank")
            .and_then(as_int)
            .or_else(|| attrs.get("nv.dl.rank").and_then(as_int))
            .or_else(|| {
                let (_, tail) = instance.rsplit_once("-rank")?;
                let digits: String = tail.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().ok()
            });
        match rank {
            None => Key::Unranked,
            Some(r) if instance.to_ascii_lowercase().contains("ckptworker") => {
                Key::CheckpointWorker(r)
            }
            Some(r) => Key::Rank(r),
        }
    }

    fn writer(&mut self, key: &Key) -> Result<&mut BufWriter<File>> {
        if !self.open.contains_key(key) {
            if self.open.len() >= MAX_OPEN {
                self.close()?;
            }
            let path = self.dir.join(key.file_name());
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .with_context(|| format!("cannot create {}", path.display()))?;
            self.open
                .insert(key.clone(), BufWriter::with_capacity(64 * 1024, file));
            self.made.insert(key.clone());
        }
        Ok(self.open.get_mut(key).expect("inserted above"))
    }

    /// Flushes and closes every open file.
    fn close(&mut self) -> Result<()> {
        for (key, mut w) in std::mem::take(&mut self.open) {
            w.flush().with_context(|| {
                format!("cannot write {}", self.dir.join(key.file_name()).display())
            })?;
        }
        Ok(())
    }

    /// Splits one archive file; an error is a per-rank file that cannot be written.
    fn archive(&mut self, index: usize, path: &Path, read: &ReadOptions) -> Result<Stats> {
        let mut stats = Stats::default();
        let mut framer = Framer::new(
            super::open(path, &ProgressBar::hidden())?,
            read.max_record_bytes,
        );
        loop {
            let frame = match framer.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(e) => {
                    stats.truncated_files += 1;
                    let what =
                        format!("{}: stopped at line {}: {e}", path.display(), framer.line());
                    stats.note(index, what);
                    break;
                }
            };
            stats.records += 1;
            let at = format!("{}:{}", path.display(), framer.start_line());
            let reason = match frame {
                Frame::Record => match otlp::parse_request(framer.record()) {
                    Ok(Request::Traces(resources)) => {
                        if let Some((reason, n)) = self.spans(resources, &mut stats)? {
                            stats.skipped += n;
                            stats.note(index, format!("{at}: {reason}"));
                        }
                        continue;
                    }
                    Ok(Request::Metrics) => {
                        stats.metric_batches += 1;
                        continue;
                    }
                    Ok(Request::Logs) => {
                        stats.log_records += 1;
                        continue;
                    }
                    Err(reason) => reason,
                },
                Frame::TooLong { bytes } => {
                    stats.too_long += 1;
                    stats.too_long_bytes += bytes;
                    let what = format!(
                        "{at}: request line of {bytes} bytes skipped (over --max-record-bytes {})",
                        read.max_record_bytes
                    );
                    stats.note(index, what);
                    continue;
                }
                Frame::Cut => "request line cut short".to_owned(),
                Frame::NotJson => "not a JSON object".to_owned(),
            };
            stats.skipped += 1;
            stats.note(index, format!("{at}: {reason}"));
        }
        Ok(stats)
    }

    /// Writes the spans of a trace request; returns the first reason a span was skipped, with
    /// how many were.
    fn spans(
        &mut self,
        resources: Vec<otlp::ResourceSpans>,
        stats: &mut Stats,
    ) -> Result<Option<(String, u64)>> {
        let mut skipped: Option<(String, u64)> = None;
        let dir = self.dir.clone();
        for rs in resources {
            let attrs = otlp::attributes(rs.resource.attributes);
            let key = self.key(&attrs);
            let resource = json!({ "attributes": attrs });
            for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
                match otlp::console_span(span, &resource) {
                    Ok(record) => {
                        let w = self.writer(&key)?;
                        serde_json::to_writer(&mut *w, &record)
                            .map_err(std::io::Error::from)
                            .and_then(|()| w.write_all(b"\n"))
                            .with_context(|| {
                                format!("cannot write {}", dir.join(key.file_name()).display())
                            })?;
                        stats.spans += 1;
                    }
                    Err(reason) => match &mut skipped {
                        Some((_, n)) => *n += 1,
                        None => skipped = Some((reason, 1)),
                    },
                }
            }
        }
        Ok(skipped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spool(dir: &Path) -> Spool {
        Spool {
            dir: dir.to_path_buf(),
            open: BTreeMap::new(),
            made: BTreeSet::new(),
            nodes: BTreeMap::new(),
        }
    }

    fn attrs(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn producers_are_routed_as_lens_converter_names_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = spool(dir.path());
        let mut key = |v: Value| s.key(&attrs(v)).file_name();
        assert_eq!(
            key(json!({"dl.rank": 3, "nv.dl.rank": 3})),
            "lens_rank3.jsonl"
        );
        assert_eq!(key(json!({"nv.dl.rank": "5"})), "lens_rank5.jsonl");
        assert_eq!(
            key(json!({"service.instance.id": "job-ckptworker-rank2"})),
            "lens_rank2_ckptworker.jsonl"
        );
        assert_eq!(
            key(json!({"nvrx.role": "ft_launcher_agent", "host.name": "frank7", "dl.rank": 0})),
            "lens_ftlauncher_0.jsonl"
        );
        assert_eq!(
            key(json!({"nvrx.role": "ft_launcher_agent", "nvrx.node": "n2"})),
            "lens_ftlauncher_1.jsonl"
        );
        assert_eq!(
            key(json!({"nvrx.role": "ft_launcher_agent", "host.name": "frank7"})),
            "lens_ftlauncher_0.jsonl"
        );
        assert_eq!(key(json!({"dl.rank": -1})), "lens_rankneg1.jsonl");
        assert_eq!(
            key(json!({"service.name": "reckoner"})),
            "lens_unranked.jsonl"
        );
        // No file name reads as a rank it does not hold.
        for name in [
            "lens_ftlauncher_0.jsonl",
            "lens_rankneg1.jsonl",
            "lens_unranked.jsonl",
        ] {
            assert_eq!(super::super::rank_from_file_name(Path::new(name)), None);
        }
    }

    #[test]
    fn more_ranks_than_open_files_are_closed_and_appended_to() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = spool(dir.path());
        let ranks = MAX_OPEN as i64 + 44;
        for round in 0..2 {
            for r in 0..ranks {
                writeln!(s.writer(&Key::Rank(r)).unwrap(), "{round}").unwrap();
            }
            assert!(s.open.len() <= MAX_OPEN);
        }
        s.close().unwrap();
        assert_eq!(s.made.len(), ranks as usize);
        for r in [0, ranks - 1] {
            let text = std::fs::read_to_string(dir.path().join(Key::Rank(r).file_name())).unwrap();
            assert_eq!(text, "0\n1\n");
        }
    }
}
