//! Splitting a byte stream into JSON records, with a byte cap per record.
//!
//! Console output comes in two shapes, and one file may hold both:
//!
//! * **compact**: one JSON object per line (Rust ranks, Python Lens after 0.1.0, which formats
//!   with `to_json(indent=None)`);
//! * **pretty-printed**: one object over many lines (Python Lens 0.1.0 keeps the OTel SDK's
//!   default `to_json(indent=4)`): the opening `{` alone on its line, the closing `}` at
//!   column 0, everything in between indented.
//!
//! [`Framer`] finds where each top-level value ends by following the JSON structure (brackets
//! outside strings, string escapes) without building anything, then hands the record's bytes
//! to the parser. That is what keeps memory bounded: at most `max_record_bytes` of one record are
//! ever held, and a longer record (a 1 GB line, 2 GB of zeros with no newline) is scanned to its
//! end without being stored and reported as [`Frame::TooLong`]. A generic streaming JSON
//! deserializer would have to buffer such a value whole before it could fail.
//!
//! Recovery from damaged input follows the two shapes:
//!
//! * a record whose first line holds more than its opening bracket is compact: the record is that
//!   line, found with `memchr` (a line cut by a killed process then fails to parse, and the next
//!   line starts afresh);
//! * a record whose opening bracket is alone on its line is pretty-printed: it ends where its
//!   brackets balance (outside strings), but a `{` at column 0 before that is the start of the
//!   next record (json.dumps indents every nested value), so the unfinished one is
//!   [`Frame::Cut`], and so is one with a raw newline inside a string (never valid JSON);
//! * a line that starts with anything but `{` or `[` outside a record is [`Frame::NotJson`]
//!   (it is consumed to its end, never stored).
//!
//! Reading never fails on content: only an I/O or decompression error ends a stream early.

use std::io::{self, BufRead};

/// What [`Framer::next_frame`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// A compact line or a pretty-printed value whose brackets balance; its bytes are
    /// [`Framer::record`] (still to be parsed).
    Record,
    /// A value longer than the cap, skipped unread; `bytes` is how long it was.
    TooLong {
        /// Length of the record in bytes (up to where it ended or was cut).
        bytes: u64,
    },
    /// A pretty-printed record that ends before it closes (the next record starts, a raw
    /// newline in a string, end of input).
    Cut,
    /// A line outside any record that does not start a JSON object or array.
    NotJson,
}

/// How a record is laid out, decided by what follows its opening bracket.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// The opening bracket is not read yet.
    #[default]
    Start,
    /// After the bracket: only blanks so far on its line.
    Undecided,
    /// More than the bracket on its first line: the record is that line.
    Compact,
    /// The bracket alone on its line: the record ends where its brackets balance.
    Pretty,
}

/// Where a record stands while it is being scanned.
#[derive(Debug, Default)]
struct Scan {
    layout: Layout,
    depth: u64,
    in_string: bool,
    escaped: bool,
    /// The last byte scanned was a newline (a `{` now starts the next record).
    at_line_start: bool,
    len: u64,
    too_long: bool,
}

/// How a scan of one buffer ended.
enum End {
    /// The record is complete (a compact line, or balanced brackets); its last byte is consumed.
    Complete,
    /// The record is cut; the byte that revealed it is consumed (newline) or not (`{` of the
    /// next record).
    Cut,
}

/// Bytes that matter outside strings in a pretty-printed record.
const STRUCTURAL: [bool; 256] = {
    let mut t = [false; 256];
    t[b'"' as usize] = true;
    t[b'{' as usize] = true;
    t[b'}' as usize] = true;
    t[b'[' as usize] = true;
    t[b']' as usize] = true;
    t[b'\n' as usize] = true;
    t
};

impl Scan {
    /// Scans `chunk`; returns how many bytes belong to the record and whether it ended.
    fn scan(&mut self, chunk: &[u8], line: &mut u64) -> (usize, Option<End>) {
        let mut i = 0;
        while i < chunk.len() {
            match self.layout {
                Layout::Start => {
                    // The opening bracket.
                    self.depth = 1;
                    self.layout = Layout::Undecided;
                    i += 1;
                }
                Layout::Undecided => match chunk[i] {
                    b' ' | b'\t' | b'\r' => i += 1,
                    b'\n' => {
                        *line += 1;
                        self.layout = Layout::Pretty;
                        self.at_line_start = true;
                        i += 1;
                    }
                    _ => self.layout = Layout::Compact,
                },
                Layout::Compact => {
                    return match memchr::memchr(b'\n', &chunk[i..]) {
                        Some(p) => {
                            *line += 1;
                            (i + p + 1, Some(End::Complete))
                        }
                        None => (chunk.len(), None),
                    };
                }
                Layout::Pretty => return self.scan_pretty(chunk, i, line),
            }
        }
        (i, None)
    }

    /// [`Scan::scan`] for a pretty-printed record, from `chunk[i..]`.
    fn scan_pretty(&mut self, chunk: &[u8], mut i: usize, line: &mut u64) -> (usize, Option<End>) {
        while i < chunk.len() {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                    if chunk[i] == b'\n' {
                        *line += 1;
                        return (i + 1, Some(End::Cut));
                    }
                    i += 1;
                    continue;
                }
                let Some(p) = memchr::memchr3(b'"', b'\\', b'\n', &chunk[i..]) else {
                    return (chunk.len(), None);
                };
                i += p;
                match chunk[i] {
                    b'"' => self.in_string = false,
                    b'\\' => self.escaped = true,
                    _ => {
                        // A raw newline is never inside a JSON string: the record was cut.
                        *line += 1;
                        return (i + 1, Some(End::Cut));
                    }
                }
                i += 1;
                continue;
            }
            if self.at_line_start {
                self.at_line_start = false;
                if chunk[i] == b'{' {
                    return (i, Some(End::Cut));
                }
            }
            let Some(p) = chunk[i..].iter().position(|&b| STRUCTURAL[usize::from(b)]) else {
                return (chunk.len(), None);
            };
            i += p;
            match chunk[i] {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        return (i + 1, Some(End::Complete));
                    }
                }
                _ => {
                    *line += 1;
                    self.at_line_start = true;
                }
            }
            i += 1;
        }
        (i, None)
    }
}

/// Splits a stream into JSON records; see the [module documentation](self).
pub struct Framer<R> {
    reader: R,
    max_record_bytes: usize,
    record: Vec<u8>,
    /// 1-based number of the line being read.
    line: u64,
    /// Line on which the last frame started.
    start_line: u64,
}

/// The record buffer is given back to the allocator after a record longer than this.
const KEEP_CAPACITY: usize = 1 << 20;

impl<R: BufRead> Framer<R> {
    /// A framer over `reader` that skips records longer than `max_record_bytes`.
    pub fn new(reader: R, max_record_bytes: usize) -> Self {
        Framer {
            reader,
            max_record_bytes,
            record: Vec::new(),
            line: 1,
            start_line: 1,
        }
    }

    /// The bytes of the last [`Frame::Record`].
    pub fn record(&self) -> &[u8] {
        &self.record
    }

    /// The line on which the last frame started (1-based).
    pub fn start_line(&self) -> u64 {
        self.start_line
    }

    /// The line being read (1-based).
    pub fn line(&self) -> u64 {
        self.line
    }

    /// The next frame, `None` at the end of the stream. An error is an I/O or decompression
    /// error of the underlying reader.
    pub fn next_frame(&mut self) -> io::Result<Option<Frame>> {
        if self.record.capacity() > KEEP_CAPACITY {
            self.record = Vec::new();
        }
        self.record.clear();
        // Blank space between records.
        let first = loop {
            let chunk = self.reader.fill_buf()?;
            if chunk.is_empty() {
                return Ok(None);
            }
            let blank = chunk
                .iter()
                .position(|b| !b.is_ascii_whitespace())
                .unwrap_or(chunk.len());
            self.line += chunk[..blank].iter().filter(|&&b| b == b'\n').count() as u64;
            let first = chunk.get(blank).copied();
            self.reader.consume(blank);
            if let Some(b) = first {
                break b;
            }
        };
        self.start_line = self.line;
        if first == b'{' || first == b'[' {
            self.read_record().map(Some)
        } else {
            self.skip_line().map(|()| Some(Frame::NotJson))
        }
    }

    /// Consumes the rest of the line, storing nothing.
    fn skip_line(&mut self) -> io::Result<()> {
        loop {
            let chunk = self.reader.fill_buf()?;
            if chunk.is_empty() {
                return Ok(());
            }
            match memchr::memchr(b'\n', chunk) {
                Some(p) => {
                    self.reader.consume(p + 1);
                    self.line += 1;
                    return Ok(());
                }
                None => {
                    let n = chunk.len();
                    self.reader.consume(n);
                }
            }
        }
    }

    fn read_record(&mut self) -> io::Result<Frame> {
        let mut scan = Scan::default();
        loop {
            let chunk = self.reader.fill_buf()?;
            if chunk.is_empty() {
                // The last line of a file may lack its newline; anything else is cut.
                let frame = match scan.layout {
                    Layout::Compact => Frame::Record,
                    _ => Frame::Cut,
                };
                return Ok(self.finish(&scan, frame));
            }
            let (used, end) = scan.scan(chunk, &mut self.line);
            scan.len += used as u64;
            if !scan.too_long {
                if self.record.len() + used <= self.max_record_bytes {
                    self.record.extend_from_slice(&chunk[..used]);
                } else {
                    scan.too_long = true;
                    self.record = Vec::new();
                }
            }
            self.reader.consume(used);
            match end {
                None => {}
                Some(End::Complete) => {
                    if scan.layout == Layout::Compact {
                        // The line's newline is not part of the record.
                        scan.len -= 1;
                        if self.record.last() == Some(&b'\n') {
                            self.record.pop();
                        }
                    }
                    return Ok(self.finish(&scan, Frame::Record));
                }
                Some(End::Cut) => return Ok(self.finish(&scan, Frame::Cut)),
            }
        }
    }

    fn finish(&mut self, scan: &Scan, frame: Frame) -> Frame {
        if scan.too_long {
            Frame::TooLong { bytes: scan.len }
        } else {
            frame
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(input: &str, max: usize) -> Vec<(u64, Frame, String)> {
        let mut f = Framer::new(input.as_bytes(), max);
        let mut out = Vec::new();
        while let Some(frame) = f.next_frame().unwrap() {
            let text = String::from_utf8(f.record().to_vec()).unwrap();
            out.push((f.start_line(), frame, text));
        }
        out
    }

    #[test]
    fn compact_lines_and_pretty_records_mix() {
        let input = "{\"a\": 1}\n{\n    \"b\": {\n        \"c\": \"}{\\\"\"\n    },\n    \"d\": [\n        {}\n    ]\n}\n\n{\"e\": [1, 2]}";
        let got = frames(input, 1 << 20);
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[0], (1, Frame::Record, "{\"a\": 1}".into()));
        assert_eq!(got[1].0, 2);
        assert_eq!(got[1].1, Frame::Record);
        let v: serde_json::Value = serde_json::from_str(&got[1].2).unwrap();
        assert_eq!(v["b"]["c"], "}{\"");
        assert_eq!(got[2], (11, Frame::Record, "{\"e\": [1, 2]}".into()));
    }

    #[test]
    fn cut_lines_resynchronise_on_the_next_record() {
        // A compact line cut in half (a record, for the parser to refuse), a garbage line, a
        // pretty record cut by the next record's `{` at column 0, a pretty string cut by a
        // newline, and a pretty record cut by the end of input.
        let input = "{\"a\": [1, \nnot json at all {\n{\n    \"x\": 1,\n{\"ok\": 1}\n{\n \"s\": \"abc\n{\"ok\": 2}\n{\n \"end\": ";
        let got: Vec<(u64, Frame)> = frames(input, 1 << 20)
            .into_iter()
            .map(|(l, f, _)| (l, f))
            .collect();
        assert_eq!(
            got,
            [
                (1, Frame::Record),
                (2, Frame::NotJson),
                (3, Frame::Cut),
                (5, Frame::Record),
                (6, Frame::Cut),
                (8, Frame::Record),
                (9, Frame::Cut),
            ]
        );
    }

    #[test]
    fn records_over_the_cap_are_measured_not_stored() {
        let long = format!("{{\"a\": \"{}\"}}", "x".repeat(100));
        let input = format!("{long}\n{{\"b\": 2}}\n");
        let got = frames(&input, 50);
        assert_eq!(
            got[0].1,
            Frame::TooLong {
                bytes: long.len() as u64
            }
        );
        assert_eq!(got[0].2, "");
        assert_eq!(got[1], (2, Frame::Record, "{\"b\": 2}".into()));
    }

    #[test]
    fn an_endless_value_is_consumed_in_bounded_memory() {
        // 64 MiB of zeros with no newline, read through a small buffer.
        struct Zeros(u64);
        impl io::Read for Zeros {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = (buf.len() as u64).min(self.0) as usize;
                buf[..n].fill(b'0');
                self.0 -= n as u64;
                Ok(n)
            }
        }
        let mut f = Framer::new(io::BufReader::new(Zeros(64 << 20)), 1024);
        assert_eq!(f.next_frame().unwrap(), Some(Frame::NotJson));
        assert_eq!(f.next_frame().unwrap(), None);
        assert!(f.record.capacity() <= 1024);
    }
}
