//! Reading a file that a variable names (the control file, certificate files) without trusting
//! it: a FIFO, a device or a directory must neither block the reading thread nor feed it without
//! end, and a huge file must not be read whole.
//!
//! The file is opened with `O_NONBLOCK` (opening a FIFO never waits for a writer) and `O_NOCTTY`
//! (a terminal never becomes the controlling one), close-on-exec as every descriptor Rust opens;
//! then `fstat` on the open descriptor decides: only a regular file is read, and at most `limit`
//! bytes of it (a larger one is refused, not cut). Every refusal is an [`io::Error`] whose text
//! says why, for the caller to put in its one line naming the variable.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Reads the regular file at `path`, at most `limit` bytes, without ever blocking on a FIFO or
/// a device.
pub(crate) fn read(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    regular(&file.metadata()?)?;
    bounded(file, limit)
}

/// Checks, without opening it, that `path` is a regular file of at most `limit` bytes: for a
/// file another crate reads whole and without a bound (`SSL_CERT_FILE`, read by
/// rustls-native-certs).
pub(crate) fn check(path: &Path, limit: u64) -> io::Result<()> {
    let metadata = std::fs::metadata(path)?;
    regular(&metadata)?;
    if metadata.len() > limit {
        return Err(too_large(limit));
    }
    Ok(())
}

/// An error unless `metadata` is a regular file's, saying what the file is instead.
fn regular(metadata: &std::fs::Metadata) -> io::Result<()> {
    let kind = metadata.file_type();
    if kind.is_file() {
        return Ok(());
    }
    let what = if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a file"
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{what}, not a regular file"),
    ))
}

fn too_large(limit: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("larger than the {limit}-byte limit"),
    )
}

/// The bytes of `file`, refused beyond `limit` (read as they come: `/proc` files say 0 bytes).
fn bounded(file: File, limit: u64) -> io::Result<Vec<u8>> {
    if file.metadata()?.len() > limit {
        return Err(too_large(limit));
    }
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_large(limit));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_within_the_limit_is_read_and_a_larger_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"0123456789").unwrap();
        assert_eq!(read(&path, 10).unwrap(), b"0123456789");
        let e = read(&path, 9).unwrap_err();
        assert!(
            e.to_string().contains("larger than the 9-byte limit"),
            "{e}"
        );
    }

    #[test]
    fn a_directory_and_a_device_are_refused_by_kind() {
        let dir = tempfile::tempdir().unwrap();
        let e = read(dir.path(), 100).unwrap_err();
        assert_eq!(e.to_string(), "a directory, not a regular file");
        let e = read(Path::new("/dev/zero"), 100).unwrap_err();
        assert_eq!(e.to_string(), "a character device, not a regular file");
    }
}
