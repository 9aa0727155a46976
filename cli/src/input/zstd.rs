//! Zstandard input, in the two layouts the OpenTelemetry Collector's `file` exporter writes.
//!
//! * With `--feature-gates=exporter.file.nativeCompression` the file is a standard zstd stream
//!   (what `zstd -dc` reads): one or more frames back to back (a rotated file gets one frame per
//!   write), skippable frames allowed. [`Frames`] decodes them one after the other.
//! * Without it (`compression: zstd`, `format: json`), each request is compressed alone and
//!   written after its length (4 bytes, big-endian), with no newline. [`LengthPrefixed`] decodes
//!   each message and ends it with a newline, so the framer sees one request per line.
//!
//! Both decode block by block (never a whole frame at once); a frame's window is capped at
//! [`ruzstd::decoding::DEFAULT_MAX_WINDOW_SIZE`] (128 MiB), larger ones are an error that ends
//! the file like a cut stream.

use std::io::{self, BufRead, Read};

use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};

/// The magic number that starts a zstd frame (little-endian `0xFD2FB528`).
pub const MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Bytes decoded per step.
const STEP_BYTES: usize = 64 * 1024;

/// Whether `head` starts a zstd stream: a frame or a skippable frame (`0x184D2A5?`).
pub fn is_stream(head: &[u8]) -> bool {
    head.starts_with(&MAGIC)
        || (head.len() >= 4 && head[0] & 0xf0 == 0x50 && head[1..4] == [0x2a, 0x4d, 0x18])
}

/// Whether `head` starts a length-prefixed message whose payload is a zstd frame.
pub fn is_length_prefixed(head: &[u8]) -> bool {
    head.len() >= 8 && head[4..8] == MAGIC && head[..4] != [0, 0, 0, 0]
}

/// Decoding of one frame after another from a source.
struct Decoder {
    frame: FrameDecoder,
    in_frame: bool,
}

impl Decoder {
    fn new() -> Self {
        Decoder {
            frame: FrameDecoder::new(),
            in_frame: false,
        }
    }

    /// Decodes from `source` into `buf`; `Ok(0)` when `source` is exhausted between frames.
    fn read(&mut self, source: &mut impl BufRead, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.in_frame {
                if self.frame.can_collect() > 0 {
                    return self.frame.read(buf);
                }
                if !self.frame.is_finished() {
                    self.frame
                        .decode_blocks(&mut *source, BlockDecodingStrategy::UptoBytes(STEP_BYTES))
                        .map_err(io::Error::other)?;
                    continue;
                }
                self.in_frame = false;
            }
            if source.fill_buf()?.is_empty() {
                return Ok(0);
            }
            match self.frame.reset(&mut *source) {
                Ok(()) => self.in_frame = true,
                Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame {
                    length,
                    ..
                })) => {
                    let skipped = io::copy(&mut source.take(u64::from(length)), &mut io::sink())?;
                    if skipped < u64::from(length) {
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                }
                Err(e) => return Err(io::Error::other(e)),
            }
        }
    }
}

/// A zstd stream of any number of frames.
pub struct Frames<R> {
    source: R,
    decoder: Decoder,
}

impl<R: BufRead> Frames<R> {
    /// Decodes `source`.
    pub fn new(source: R) -> Self {
        Frames {
            source,
            decoder: Decoder::new(),
        }
    }
}

impl<R: BufRead> Read for Frames<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.decoder.read(&mut self.source, buf)
    }
}

/// Length-prefixed zstd messages, each decoded and ended with a newline.
pub struct LengthPrefixed<R> {
    source: R,
    decoder: Decoder,
    /// Compressed bytes left in the current message; `None` between messages.
    left: Option<u64>,
}

impl<R: BufRead> LengthPrefixed<R> {
    /// Decodes `source`.
    pub fn new(source: R) -> Self {
        LengthPrefixed {
            source,
            decoder: Decoder::new(),
            left: None,
        }
    }
}

impl<R: BufRead> Read for LengthPrefixed<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            let Some(left) = self.left else {
                if self.source.fill_buf()?.is_empty() {
                    return Ok(0);
                }
                let mut len = [0u8; 4];
                self.source.read_exact(&mut len)?;
                self.left = Some(u64::from(u32::from_be_bytes(len)));
                continue;
            };
            // The message's bytes only: a frame cut short does not read into the next length.
            let mut message = (&mut self.source).take(left);
            let n = self.decoder.read(&mut message, buf)?;
            let rest = message.limit();
            if n > 0 {
                self.left = Some(rest);
                return Ok(n);
            }
            if rest > 0 {
                // Decoding stopped inside the message: its length was wrong or the file ends.
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "zstd message shorter than its length prefix",
                ));
            }
            self.left = None;
            buf[0] = b'\n';
            return Ok(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ruzstd::encoding::{CompressionLevel, compress_to_vec};

    fn zstd(data: &[u8]) -> Vec<u8> {
        compress_to_vec(data, CompressionLevel::Fastest)
    }

    #[test]
    fn frames_back_to_back_and_skippable_frames_decode_as_one_stream() {
        let mut stream = zstd(b"{\"a\": 1}");
        stream.extend([0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 9, 9, 9]);
        stream.extend(zstd(b"\n{\"b\": 2}\n"));
        assert!(is_stream(&stream));
        let mut out = String::new();
        Frames::new(&stream[..]).read_to_string(&mut out).unwrap();
        assert_eq!(out, "{\"a\": 1}\n{\"b\": 2}\n");
    }

    #[test]
    fn length_prefixed_messages_become_lines_and_a_cut_one_is_an_error() {
        let mut file = Vec::new();
        for m in [&b"{\"a\": 1}"[..], b"{\"b\": 2}"] {
            let z = zstd(m);
            file.extend((z.len() as u32).to_be_bytes());
            file.extend(z);
        }
        assert!(is_length_prefixed(&file));
        let mut out = String::new();
        LengthPrefixed::new(&file[..])
            .read_to_string(&mut out)
            .unwrap();
        assert_eq!(out, "{\"a\": 1}\n{\"b\": 2}\n");
        let cut = &file[..file.len() - 3];
        let mut out = Vec::new();
        assert!(LengthPrefixed::new(cut).read_to_end(&mut out).is_err());
        assert!(out.starts_with(b"{\"a\": 1}\n"));
    }
}
