//! Lost iterations get their own name, as NeMo Lens's json_to_perfetto does:
//! `megatron.train.iteration.redone` or `….uncommitted` (the rule of [`crate::goodput::lost`],
//! per file), so Perfetto colours them apart.
//!
//! An iteration's fate depends on checkpoints and runs read after it, so a file that names
//! `megatron.train.iteration` is read once before it is converted, keeping 1 byte per iteration.
//! A file without that name costs one scan of its bytes. Input that is not a regular file (a
//! pipe) cannot be read twice: its iterations keep their name.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::goodput::lost::{ITERATION, Iterations, Status, iteration_number};
use crate::input::{self, ReadOptions, Record, Records, Span};

/// The fate of each numbered iteration of each file, in file order (`None`: not looked at).
pub struct LostIterations {
    files: Vec<Option<Vec<Status>>>,
    file: usize,
    next: usize,
    /// Iterations renamed.
    pub renamed: u64,
}

/// Whether the decompressed bytes of `path` contain `needle` (`true` when they cannot all be
/// read: the second reading then decides).
fn mentions(path: &Path, needle: &[u8]) -> Result<bool> {
    let mut reader = input::open_decoded(path)?;
    let finder = memchr::memmem::Finder::new(needle);
    let mut tail: Vec<u8> = Vec::new();
    loop {
        // A file cut short: the reading proper skips what is damaged and reports it.
        let Ok(buf) = reader.fill_buf() else {
            return Ok(true);
        };
        if buf.is_empty() {
            return Ok(false);
        }
        // The needle may straddle two buffers: search the previous tail joined with this one.
        tail.extend_from_slice(&buf[..buf.len().min(needle.len())]);
        if finder.find(&tail).is_some() || finder.find(buf).is_some() {
            return Ok(true);
        }
        tail.clear();
        tail.extend_from_slice(&buf[buf.len().saturating_sub(needle.len())..]);
        let n = buf.len();
        reader.consume(n);
    }
}

fn statuses(index: usize, path: &Path, read: &ReadOptions) -> Result<Vec<Status>> {
    let hidden = indicatif::ProgressBar::hidden();
    let mut records = Records::open(index, path, read, &hidden)?;
    let mut iterations = Iterations::default();
    while let Some(record) = records.next_record() {
        if let Record::Span(span) = record {
            // A number that is not one: the span is not an iteration for the rule.
            let _ = iterations.observe(&span.name, span.start_us, span.end_us, &span.attributes);
        }
    }
    Ok(iterations.verdict().status)
}

impl LostIterations {
    /// Reads the files that name iterations.
    pub fn read(paths: &[PathBuf], read: &ReadOptions) -> Result<Self> {
        let mut files = Vec::with_capacity(paths.len());
        for (index, path) in paths.iter().enumerate() {
            let regular = std::fs::metadata(path).is_ok_and(|m| m.is_file());
            files.push(if regular && mentions(path, ITERATION.as_bytes())? {
                Some(statuses(index, path, read)?)
            } else {
                None
            });
        }
        Ok(LostIterations {
            files,
            file: 0,
            next: 0,
            renamed: 0,
        })
    }

    /// Renames `span` (read from file `index`) if it is a lost iteration.
    pub fn rename(&mut self, index: usize, span: &mut Span) {
        if span.name != ITERATION || !matches!(iteration_number(&span.attributes), Ok(Some(_))) {
            return;
        }
        if index != self.file {
            (self.file, self.next) = (index, 0);
        }
        let k = self.next;
        self.next += 1;
        if let Some(st) = self.files.get(index).and_then(|f| f.as_ref()?.get(k))
            && *st != Status::Committed
        {
            span.name.push('.');
            span.name.push_str(st.as_str());
            self.renamed += 1;
        }
    }
}
