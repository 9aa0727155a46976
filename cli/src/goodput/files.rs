//! The files of a job and what the report keeps of them.
//!
//! A directory argument contributes its `*.jsonl` and `*.jsonl.gz` files (not hidden ones),
//! sorted by name; a file argument is taken as is. The file name gives the role, first match
//! wins: `lens_slurm*` is the reckoner's job envelope, `lens_ftlauncher*` an NVRx ft_launcher
//! agent (one per node), a name containing `_ckptworker` an async checkpoint worker, `lens_rank*`
//! a trainer (one GPU); other files are left out, as NeMo Lens's goodput report does.
//!
//! Each file is read by [`crate::input`] up to its first damaged record (a record that does not
//! parse, is too long, or a compressed stream cut short): Lens's tool stops there, so the rest of
//! the file is not counted and the cut is reported on stderr. Of each span only the name (when
//! the accounting reads it), the times, `megatron.iteration` and the host are kept, so a rank
//! costs a few tens of bytes per iteration or overhead span.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context as _, Result};

use super::classify::{self, WORKER_WRITE};
use super::lost;
use crate::input::{self, Jobs, ReadOptions, Record, Span, Stats};

/// What a file is, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A training rank (`lens_rank<N>…`): one GPU.
    Trainer,
    /// The Slurm reckoner's spans (`lens_slurm…`).
    Slurm,
    /// An NVRx ft_launcher agent (`lens_ftlauncher…`).
    FtLauncher,
    /// An async checkpoint worker (`…_ckptworker…`).
    CheckpointWorker,
    /// Not read by the report.
    Other,
}

/// The role of a file name (Lens's `role_of`).
pub fn role_of(path: &Path) -> Role {
    let base = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    if base.starts_with("lens_slurm") {
        Role::Slurm
    } else if base.starts_with("lens_ftlauncher") {
        Role::FtLauncher
    } else if base.contains("_ckptworker") {
        Role::CheckpointWorker
    } else if base.starts_with("lens_rank") {
        Role::Trainer
    } else {
        Role::Other
    }
}

/// The files of the arguments, in argument order (a directory's sorted by name).
pub fn discover(args: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for arg in args {
        if arg.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(arg)
                .with_context(|| format!("cannot list {}", arg.display()))?
                .filter_map(|e| e.ok())
                .filter(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    !name.starts_with('.')
                        && (name.ends_with(".jsonl") || name.ends_with(".jsonl.gz"))
                        && e.path().is_file()
                })
                .map(|e| e.path())
                .collect();
            found.sort();
            files.extend(found);
        } else {
            std::fs::metadata(arg).with_context(|| format!("cannot open {}", arg.display()))?;
            files.push(arg.clone());
        }
    }
    Ok(files)
}

/// A span the accounting reads.
#[derive(Debug, Clone, Copy)]
pub struct Kept {
    /// Its name (one of [`classify::interned`]).
    pub name: &'static str,
    /// Start, µs since the epoch.
    pub start_us: i64,
    /// End, µs since the epoch.
    pub end_us: i64,
    /// `megatron.iteration`, when it has one.
    pub iteration: Option<i64>,
}

impl Kept {
    /// Duration in seconds (negative when the span ends before it starts, as Lens computes it).
    pub fn seconds(&self) -> f64 {
        (self.end_us - self.start_us) as f64 / 1e6
    }
}

/// What the report keeps of one file.
#[derive(Debug, Default)]
pub struct FileSpans {
    /// The spans it reads, in file order.
    pub kept: Vec<Kept>,
    /// Earliest start and latest end of the other spans (they only widen a rank's window when
    /// it has no denominator span).
    pub others: Option<(i64, i64)>,
    /// `host.name` (up to its first dot) of the first span that has one.
    pub first_host: Option<String>,
    /// The same, among the spans the reckoner does not replace.
    pub first_host_kept: Option<String>,
    /// ft_launcher spans fanned onto ranks, by node.
    pub fanned: BTreeMap<String, Vec<Kept>>,
    /// Seconds of checkpoint-worker writes.
    pub worker_write_s: f64,
    /// Spans whose `megatron.iteration` is not a number (treated as having none).
    pub bad_iteration_numbers: u64,
    /// Spans read.
    pub spans: u64,
    /// Whether reading stopped at a damaged record.
    pub cut: bool,
}

impl FileSpans {
    fn add(&mut self, role: Role, span: &Span) {
        self.spans += 1;
        // Lens reads the number of iterations and checkpoints only.
        let numbered = span.name == lost::ITERATION || lost::CHECKPOINTS.contains(&&*span.name);
        let iteration = if numbered {
            lost::iteration_number(&span.attributes).unwrap_or_else(|()| {
                self.bad_iteration_numbers += 1;
                None
            })
        } else {
            None
        };
        let host = span
            .host
            .as_deref()
            .filter(|h| !h.is_empty())
            .map(|h| h.split('.').next().unwrap_or(h).to_owned());
        match role {
            Role::CheckpointWorker => {
                if span.name == WORKER_WRITE {
                    self.worker_write_s += (span.end_us - span.start_us) as f64 / 1e6;
                }
                return;
            }
            Role::FtLauncher => {
                if let (Some(name), Some(node)) = (classify::interned(&span.name), host)
                    && classify::is_fanned(name)
                {
                    self.fanned.entry(node).or_default().push(Kept {
                        name,
                        start_us: span.start_us,
                        end_us: span.end_us,
                        iteration,
                    });
                }
                return;
            }
            Role::Trainer | Role::Slurm | Role::Other => {}
        }
        let interned = classify::interned(&span.name);
        if let Some(h) = host {
            if self.first_host.is_none() {
                self.first_host = Some(h.clone());
            }
            let dropped = interned.is_some_and(|n| classify::REPLACED_BY_RECKONER.contains(&n));
            if self.first_host_kept.is_none() && !dropped {
                self.first_host_kept = Some(h);
            }
        }
        match interned {
            Some(name) => self.kept.push(Kept {
                name,
                start_us: span.start_us,
                end_us: span.end_us,
                iteration,
            }),
            None => {
                let (a, b) = self.others.unwrap_or((span.start_us, span.end_us));
                self.others = Some((a.min(span.start_us), b.max(span.end_us)));
            }
        }
    }

    /// The node of a rank: the host of its first span left after the reckoner's drop.
    pub fn node(&self, reckoner: bool) -> Option<&str> {
        if reckoner {
            self.first_host_kept.as_deref()
        } else {
            self.first_host.as_deref()
        }
    }
}

/// Reads the files (`--jobs` at once); one [`FileSpans`] per file, in order.
pub fn read(
    files: &[PathBuf],
    roles: &[Role],
    read: &ReadOptions,
    jobs: &Jobs,
) -> Result<(Vec<FileSpans>, Stats)> {
    let out: Mutex<Vec<Option<FileSpans>>> = Mutex::new((0..files.len()).map(|_| None).collect());
    let hidden = input::progress_bar(files, false);
    let stats = input::for_each_file(files, read, jobs.threads(), &hidden, |records| {
        let index = records.source().index;
        let role = roles[index];
        let mut spans = FileSpans::default();
        if role != Role::Other {
            loop {
                let damaged = |s: &Stats| s.skipped + s.too_long + s.truncated_files;
                let before = damaged(records.stats());
                let record = records.next_record();
                if damaged(records.stats()) > before {
                    // The record returned (if any) follows the damaged one: Lens never reads it.
                    spans.cut = true;
                    break;
                }
                match record {
                    Some(Record::Span(span)) => spans.add(role, &span),
                    Some(_) => {}
                    None => break,
                }
            }
        }
        out.lock()
            .map_err(|_| anyhow::anyhow!("a reader thread failed"))?[index] = Some(spans);
        Ok(())
    })?;
    let out = out
        .into_inner()
        .map_err(|_| anyhow::anyhow!("a reader thread failed"))?;
    Ok((
        out.into_iter().map(Option::unwrap_or_default).collect(),
        stats,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(name: &str, iteration: &str) -> Span {
        let line = format!(
            r#"{{"name": "{name}", "context": {{"trace_id": "0x1", "span_id": "0x2"}},
               "start_time": "2026-01-01T00:00:00Z", "end_time": "2026-01-01T00:00:01Z",
               "attributes": {{"megatron.iteration": {iteration}}}}}"#
        );
        match input::parse_record(line.as_bytes(), Some(0)) {
            Ok(Record::Span(s)) => *s,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_iterations_and_checkpoints_have_their_number_read() {
        let mut f = FileSpans::default();
        f.add(Role::Trainer, &span("megatron.train.iteration", "\"7\""));
        f.add(Role::Trainer, &span("megatron.train.iteration", "[7]"));
        f.add(Role::Trainer, &span("megatron.evaluate", "[7]"));
        f.add(Role::Trainer, &span("custom", "{}"));
        assert_eq!(f.bad_iteration_numbers, 1);
        assert_eq!(f.kept[0].iteration, Some(7));
        assert_eq!(f.kept[1].iteration, None);
        assert_eq!(f.kept.len(), 3);
        assert_eq!(
            f.others,
            Some((1_767_225_600_000_000, 1_767_225_601_000_000))
        );
    }

    #[test]
    fn roles_come_from_the_file_name_first_match_wins() {
        let r = |s: &str| role_of(Path::new(s));
        assert_eq!(r("/j/lens_rank3.jsonl.gz"), Role::Trainer);
        assert_eq!(r("lens_rank3_ckptworker.jsonl"), Role::CheckpointWorker);
        assert_eq!(r("lens_slurm_ckptworker.jsonl"), Role::Slurm);
        assert_eq!(r("lens_ftlauncher_n0.jsonl"), Role::FtLauncher);
        assert_eq!(r("spans-rank3.jsonl"), Role::Other);
    }
}
