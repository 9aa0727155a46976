//! Reading ahead of a consumer that needs the records in order: one thread parses the files, in
//! command-line order, while the calling thread consumes what it parsed.
//!
//! `perfetto` writes one output whose events follow the input (links and lost iterations are
//! resolved in that order), so its files cannot be split over threads as `summary`'s are
//! ([`super::for_each_file`]). What can run beside the writing is the parsing, most of the
//! work: a reader thread sends batches of parsed records over a bounded channel, and the
//! consumer sees exactly the records, in exactly the order, that [`super::for_each_record`]
//! gives, so the output is the same byte for byte.
//!
//! The consumer gets each record by reference and hands the emptied batches back: they are
//! freed on the reader thread, where they were allocated (freeing every string and map node
//! into another thread's allocator arena cost as much as the parsing saved).
//!
//! Memory stays bounded in bytes: batches of at most [`BATCH_BYTES`] of input are sent while the
//! input bytes parsed and not yet written stay within [`READ_AHEAD_BYTES`]. A record larger than
//! that waits until everything before it was written, so at most two records of
//! `--max-record-bytes` are held at once: one being written, the next parsed.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Condvar, Mutex};

use anyhow::{Result, anyhow};
use indicatif::ProgressBar;

use super::{ReadOptions, Record, Records, Source, Stats};

/// Input bytes after which a batch is sent.
pub const BATCH_BYTES: usize = 256 << 10;
/// Input bytes parsed ahead of the writing at most (a single larger record excepted).
pub const READ_AHEAD_BYTES: usize = 4 * BATCH_BYTES;

/// The input bytes parsed and not yet consumed, and whether the consumer has stopped.
#[derive(Default)]
struct InFlight {
    state: Mutex<(usize, bool)>,
    changed: Condvar,
}

impl InFlight {
    /// Waits until `bytes` more fit (or nothing is in flight), then counts them; `false` when
    /// the consumer has stopped.
    fn reserve(&self, bytes: usize) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while !state.1 && state.0 > 0 && state.0 + bytes > READ_AHEAD_BYTES {
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.0 += bytes;
        !state.1
    }

    fn release(&self, bytes: usize) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.0 = state.0.saturating_sub(bytes);
        self.changed.notify_all();
    }

    fn stop(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
        self.changed.notify_all();
    }
}

/// Stops the reader when the consumer ends, by returning or by unwinding.
struct StopOnDrop<'a>(&'a InFlight);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// What the reader thread sends.
enum Message {
    /// Records of one file, in order, and their input bytes.
    Batch(Source, Vec<Record>, usize),
    /// A file read to its end: its counts.
    Done(Stats),
    /// A file that could not be opened: the reading stops.
    Failed(anyhow::Error),
}

/// Calls `f` for every record of `paths`, in order, as [`super::for_each_record`] does; with
/// `threads` of 2 or more the records are parsed on a second thread while `f` runs. An error
/// from `f` stops the reading and is returned; so is a file that cannot be opened (the
/// records before it were given to `f`).
pub fn for_each_record_read_ahead(
    paths: &[PathBuf],
    options: &ReadOptions,
    threads: usize,
    progress: &ProgressBar,
    mut f: impl FnMut(&Source, &mut Record) -> Result<()>,
) -> Result<Stats> {
    if threads < 2 || paths.is_empty() {
        return super::for_each_record(paths, options, progress, |source, mut record| {
            f(source, &mut record)
        });
    }
    super::check_all(paths)?;
    let (sender, receiver) = channel();
    let (trash, emptied) = channel();
    let in_flight = InFlight::default();
    let result = std::thread::scope(|s| {
        let reader = std::thread::Builder::new()
            .name("nemo-lens-read".into())
            .spawn_scoped(s, || {
                read(paths, options, progress, &in_flight, sender, emptied)
            })
            .map_err(|e| anyhow!("cannot start the reading thread (--jobs): {e}; try --jobs 1"))?;
        // An early end (an error or a panic in `f`) releases a reader waiting for room, and
        // its next send fails.
        let stop = StopOnDrop(&in_flight);
        let consumed = consume(&receiver, &trash, &in_flight, &mut f);
        drop(stop);
        drop(receiver);
        reader
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        consumed
    });
    progress.finish_and_clear();
    result
}

/// The consuming side: `f` on every record until the reader is done, or the first error.
fn consume(
    receiver: &Receiver<Message>,
    trash: &Sender<Vec<Record>>,
    in_flight: &InFlight,
    f: &mut impl FnMut(&Source, &mut Record) -> Result<()>,
) -> Result<Stats> {
    let mut stats = Stats::default();
    // Ends when the reader has sent everything and dropped its sender.
    for message in receiver {
        match message {
            Message::Batch(source, mut records, bytes) => {
                for record in &mut records {
                    f(&source, record)?;
                }
                // Freed on the reader thread, where they were allocated.
                let _ = trash.send(records);
                in_flight.release(bytes);
            }
            Message::Done(file) => stats.merge(file),
            Message::Failed(e) => return Err(e),
        }
    }
    Ok(stats)
}

/// The reading side: the files in order, in batches; stops when the consumer has.
fn read(
    paths: &[PathBuf],
    options: &ReadOptions,
    progress: &ProgressBar,
    in_flight: &InFlight,
    sender: Sender<Message>,
    emptied: Receiver<Vec<Record>>,
) {
    let send = |source: &Source, batch: Vec<Record>, bytes: usize| {
        let room = in_flight.reserve(bytes);
        emptied.try_iter().for_each(drop);
        room && sender
            .send(Message::Batch(source.clone(), batch, bytes))
            .is_ok()
    };
    for (index, path) in paths.iter().enumerate() {
        let mut records = match Records::open(index, path, options, progress) {
            Ok(records) => records,
            Err(e) => {
                let _ = sender.send(Message::Failed(e));
                return;
            }
        };
        let mut batch = Vec::new();
        let mut bytes = 0;
        while let Some(record) = records.next_record() {
            let size = records.record_bytes();
            // A large record travels alone, after what was parsed before it.
            if size >= BATCH_BYTES && !batch.is_empty() {
                if !send(records.source(), std::mem::take(&mut batch), bytes) {
                    return;
                }
                bytes = 0;
            }
            batch.push(record);
            bytes += size;
            if bytes >= BATCH_BYTES {
                if !send(records.source(), std::mem::take(&mut batch), bytes) {
                    return;
                }
                bytes = 0;
            }
        }
        if (!batch.is_empty() && !send(records.source(), batch, bytes))
            || sender.send(Message::Done(records.into_stats())).is_err()
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn options() -> ReadOptions {
        ReadOptions {
            max_record_bytes: 1 << 20,
        }
    }

    /// Files of many records each (several batches), with damaged lines among them.
    fn files(dir: &std::path::Path) -> Vec<PathBuf> {
        (0..3)
            .map(|rank| {
                let path = dir.join(format!("rank{rank}.jsonl"));
                let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
                for i in 0..4_000 {
                    writeln!(
                        f,
                        r#"{{"name": "s{i}", "context": {{"trace_id": "0x1", "span_id": "0x{i:x}"}}, "start_time": "2026-01-01T00:00:00Z", "end_time": "2026-01-01T00:00:01Z", "attributes": {{"pad": "{}"}}}}"#,
                        "x".repeat(i % 300)
                    )
                    .unwrap();
                    if i % 997 == 0 {
                        writeln!(f, "garbage {i}").unwrap();
                    }
                }
                path
            })
            .collect()
    }

    fn names(threads: usize, paths: &[PathBuf]) -> (Vec<(usize, String)>, Stats) {
        let mut seen = Vec::new();
        let stats = for_each_record_read_ahead(
            paths,
            &options(),
            threads,
            &ProgressBar::hidden(),
            |source, record| {
                if let Record::Span(span) = record {
                    seen.push((source.index, span.name.clone()));
                }
                Ok(())
            },
        )
        .unwrap();
        (seen, stats)
    }

    #[test]
    fn read_ahead_gives_the_records_and_counts_of_the_plain_reading_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let paths = files(dir.path());
        let (plain, plain_stats) = names(1, &paths);
        let (ahead, ahead_stats) = names(2, &paths);
        assert_eq!(plain.len(), 12_000);
        assert_eq!(ahead, plain);
        assert_eq!(ahead_stats.spans, plain_stats.spans);
        assert_eq!(ahead_stats.skipped, 15);
        assert_eq!(ahead_stats.skipped, plain_stats.skipped);
        assert_eq!(ahead_stats.examples, plain_stats.examples);
    }

    #[test]
    fn a_panicking_consumer_ends_the_reading_with_its_panic() {
        let dir = tempfile::tempdir().unwrap();
        let paths = files(dir.path());
        let panicked = std::panic::catch_unwind(|| {
            for_each_record_read_ahead(&paths, &options(), 2, &ProgressBar::hidden(), |_, _| {
                panic!("the consumer panics")
            })
        });
        let payload = panicked.expect_err("the panic is passed on");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"the consumer panics"));
    }

    #[test]
    fn a_consumer_error_stops_the_reader_and_an_unopenable_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let paths = files(dir.path());
        let mut calls = 0;
        let err =
            for_each_record_read_ahead(&paths, &options(), 2, &ProgressBar::hidden(), |_, _| {
                calls += 1;
                anyhow::ensure!(calls < 10, "enough");
                Ok(())
            })
            .unwrap_err();
        assert_eq!(err.to_string(), "enough");
        assert_eq!(calls, 10);

        // A file that disappears after the check is reported once the records before it
        // were consumed.
        let gone = dir.path().join("gone.jsonl");
        std::fs::write(&gone, "").unwrap();
        let mut with_gone = paths[..1].to_vec();
        with_gone.push(gone.clone());
        let mut consumed = 0;
        let f = |_: &Source, _: &mut Record| {
            consumed += 1;
            if consumed == 1 {
                std::fs::remove_file(&gone).unwrap();
            }
            Ok(())
        };
        match for_each_record_read_ahead(&with_gone, &options(), 2, &ProgressBar::hidden(), f) {
            Err(e) => assert!(format!("{e:#}").contains("gone.jsonl"), "{e:#}"),
            Ok(stats) => panic!("read {} spans of a removed file", stats.spans),
        }
    }
}
