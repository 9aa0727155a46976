//! Opening an input path without ever hanging on it.
//!
//! A regular file is read as it is. A pipe is read to its end: process substitution
//! (`<(zcat a.gz)`, a `/dev/fd/N` pipe whose writer is running) and `cat x | nemo-lens ...
//! /dev/stdin` keep working. A named FIFO is opened without blocking (a blocking open waits for
//! a writer forever) and gets [`WRITER_WAIT`] for a writer to come; without one it is refused.
//! Devices (`/dev/zero`, a terminal), sockets and directories are refused: a device never
//! ends. Every refusal names the path and what it is, and exits 2 like any input that cannot
//! be opened.

use std::fs::{File, FileType, Metadata, OpenOptions};
use std::io::{self, Read as _};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

/// How long a named FIFO may go without a writer before it is refused.
pub const WRITER_WAIT: Duration = Duration::from_secs(2);

/// Refuses what is not a regular file or a pipe (checked on every path before anything is
/// read).
pub fn check(path: &Path, meta: &Metadata) -> Result<()> {
    match kind_refused(&meta.file_type()) {
        Some(what) => bail!(
            "refused {}: {what}, not a file or a pipe (it would never end)",
            path.display()
        ),
        None => Ok(()),
    }
}

fn kind_refused(t: &FileType) -> Option<&'static str> {
    if t.is_file() || t.is_fifo() {
        None
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_socket() {
        Some("a socket")
    } else if t.is_dir() {
        Some("a directory")
    } else {
        Some("not a regular file")
    }
}

/// Opens an input: the file, blocking reads, and the bytes already read from a pipe while
/// checking for its writer (to be read first).
pub fn open(path: &Path) -> Result<(File, Vec<u8>)> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let meta = file
        .metadata()
        .with_context(|| format!("cannot open {}", path.display()))?;
    check(path, &meta)?;
    let head = if meta.file_type().is_fifo() {
        wait_for_writer(&file, path)?
    } else {
        Vec::new()
    };
    set_blocking(&file).with_context(|| format!("cannot read {}", path.display()))?;
    Ok((file, head))
}

/// Reads a pipe without blocking until it shows a writer: data (returned), or no data yet
/// with a writer holding it. End of file means no writer: the end of an anonymous pipe
/// (its writer is done), or a named FIFO nobody opened yet, which gets [`WRITER_WAIT`].
fn wait_for_writer(mut file: &File, path: &Path) -> Result<Vec<u8>> {
    let anonymous = is_anonymous_pipe(file);
    let deadline = Instant::now() + WRITER_WAIT;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match file.read(&mut buf) {
            Ok(0) if anonymous => return Ok(Vec::new()),
            Ok(0) => {}
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Vec::new()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
        if Instant::now() >= deadline {
            bail!(
                "refused {}: a FIFO without a writer (none came within {} s)",
                path.display(),
                WRITER_WAIT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A pipe with no name (`pipe:[N]`), as process substitution and `|` make: its writer was
/// there when it was made, so its end of file is the end of the input.
fn is_anonymous_pipe(file: &File) -> bool {
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .is_ok_and(|target| target.to_string_lossy().starts_with("pipe:"))
}

fn set_blocking(file: &File) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor `file` owns, for the duration of the call.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
