//! [`ConsoleWriter`]: the line sink the console exporters of one process share.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use parking_lot::Mutex;

/// A batch buffer that grew past this is shrunk back after the write, so one huge batch does not
/// pin its memory for the rest of the run.
pub(crate) const MAX_RETAINED_BUFFER: usize = 4 << 20;

/// Where the lines go; kept for `Debug` and [`ConsoleWriter::path`].
#[derive(Debug, Clone)]
enum Target {
    Stdout,
    Writer,
    File(PathBuf),
}

/// A line sink shared by the console exporters of one process.
///
/// Spans ([`ConsoleSpanExporter`](crate::export::ConsoleSpanExporter)) and metric batches
/// ([`ConsoleMetricExporter`](crate::export::ConsoleMetricExporter)) built on
/// clones of one `ConsoleWriter` write into the same stream through one lock: every export
/// writes its whole buffer (complete lines only) with one `write_all` and flushes while holding
/// it, so lines from the two exporters interleave whole, never mid-line. Cloning is cheap.
///
/// ```
/// use nemo_lens::export::ConsoleWriter;
///
/// let dir = tempfile::tempdir()?;
/// let template = dir.path().join("lens-{rank}.jsonl");
/// let writer = ConsoleWriter::to_path(template.to_str().unwrap(), 2)?;
/// assert_eq!(writer.path(), Some(dir.path().join("lens-2.jsonl").as_path()));
/// assert_eq!(writer.clone().path(), writer.path()); // clones share the open file
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct ConsoleWriter {
    out: Arc<Mutex<Box<dyn Write + Send>>>,
    target: Target,
}

impl fmt::Debug for ConsoleWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsoleWriter")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl ConsoleWriter {
    fn new(out: Box<dyn Write + Send>, target: Target) -> Self {
        Self {
            out: Arc::new(Mutex::new(out)),
            target,
        }
    }

    /// The process's stdout (what Python NeMo Lens's `console` exporter writes to).
    ///
    /// ```
    /// assert!(nemo_lens::export::ConsoleWriter::stdout().path().is_none());
    /// ```
    pub fn stdout() -> Self {
        Self::new(Box::new(io::stdout()), Target::Stdout)
    }

    /// Any [`Write`] implementation (a pipe, a socket, an in-memory buffer).
    ///
    /// Each export call writes its whole batch with one `write_all` and then calls `flush`, so a
    /// [`std::io::BufWriter`] in front of the writer is unnecessary.
    ///
    /// ```
    /// let writer = nemo_lens::export::ConsoleWriter::to_writer(std::io::sink());
    /// assert!(writer.path().is_none());
    /// ```
    pub fn to_writer(w: impl Write + Send + 'static) -> Self {
        Self::new(Box::new(w), Target::Writer)
    }

    /// Appends to the file named by `template` with every `{rank}` replaced by `rank`, creating
    /// the file and its parent directories as needed. The file is opened once; clones of the
    /// writer share it. Giving every rank its own file keeps lines of different processes from
    /// interleaving; a template without `{rank}` is used as is.
    ///
    /// ```
    /// use nemo_lens::export::ConsoleWriter;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let writer = ConsoleWriter::to_path(dir.path().join("a/b-{rank}.jsonl").to_str().unwrap(), 1)?;
    /// assert!(dir.path().join("a/b-1.jsonl").exists());
    /// # let _ = writer;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Any I/O error from creating the directories or opening the file. Opening never blocks:
    /// a FIFO with no reader is an error (`ENXIO`, "a FIFO with no reader") instead of a
    /// `build()` that hangs until some process opens the other end.
    pub fn to_path(template: &str, rank: u32) -> io::Result<Self> {
        let path = resolve_path(template, rank);
        if let Some(parent) = path.parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent)?;
        }
        let file = open_append(&path)?;
        Ok(Self::new(Box::new(file), Target::File(path)))
    }

    /// The file this writer appends to, or `None` for stdout and custom writers.
    ///
    /// ```
    /// assert_eq!(nemo_lens::export::ConsoleWriter::stdout().path(), None);
    /// ```
    pub fn path(&self) -> Option<&Path> {
        match &self.target {
            Target::File(p) => Some(p),
            Target::Stdout | Target::Writer => None,
        }
    }

    /// Writes `lines` (whole lines only) with one `write_all` and flushes, under the shared lock.
    pub(crate) fn write_lines(&self, lines: &[u8]) -> io::Result<()> {
        let mut out = self.out.lock();
        out.write_all(lines).and_then(|()| out.flush())
    }

    pub(crate) fn flush(&self) -> io::Result<()> {
        self.out.lock().flush()
    }

    /// Renders lines into `buf` (reused between calls) with `render`, then writes them whole and
    /// flushes; nothing is written when `render` adds nothing. `kind` (`span`, `metric`, `log`)
    /// names the exporter in the error.
    pub(crate) fn write_rendered(
        &self,
        buf: &Mutex<Vec<u8>>,
        kind: &str,
        render: impl FnOnce(&mut Vec<u8>),
    ) -> OTelSdkResult {
        let mut buf = buf.lock();
        buf.clear();
        render(&mut buf);
        if buf.is_empty() {
            return Ok(());
        }
        let result = self.write_lines(&buf);
        if buf.capacity() > MAX_RETAINED_BUFFER {
            buf.clear();
            buf.shrink_to(64 * 1024);
        }
        result.map_err(|e| {
            OTelSdkError::InternalFailure(format!(
                "console {kind} exporter ({}): write failed: {e}",
                self.label()
            ))
        })
    }

    /// `stdout`, `writer` or the file's path, for error messages.
    pub(crate) fn label(&self) -> String {
        match &self.target {
            Target::Stdout => "stdout".to_owned(),
            Target::Writer => "writer".to_owned(),
            Target::File(p) => p.display().to_string(),
        }
    }
}

/// Opens `path` for appending without blocking: `O_NONBLOCK` makes opening a FIFO that has no
/// reader fail at once (`ENXIO`) instead of waiting for one; the flag is cleared once open, so
/// writes stay ordinary blocking writes.
fn open_append(path: &Path) -> io::Result<File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENXIO) => io::Error::new(
                e.kind(),
                "a FIFO with no reader (start the reader first, or name a regular file)",
            ),
            _ => e,
        })?;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor this function owns.
    let cleared = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) == 0
    };
    if !cleared {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

/// Replaces every `{rank}` in `template` with `rank`.
pub(crate) fn resolve_path(template: &str, rank: u32) -> PathBuf {
    PathBuf::from(template.replace("{rank}", &rank.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_path_example() {
        use std::path::PathBuf;

        assert_eq!(
            resolve_path("out/spans-{rank}.jsonl", 3),
            PathBuf::from("out/spans-3.jsonl")
        );
        assert_eq!(resolve_path("spans.jsonl", 3), PathBuf::from("spans.jsonl"));
    }
}
