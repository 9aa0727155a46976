//! Reading many files at once: `--jobs N` scoped threads take whole files from a shared queue.
//!
//! The unit of work is a file: one reader, one gzip decoder, one framer, so the records of a
//! file are seen in order by one thread and a consumer keeps its per-file state without locks.
//! The queue is an atomic index into the files sorted largest first (a large file started last
//! would leave the other threads idle at the end). This needs no pool: the threads live as long
//! as the command's read, `std::thread::scope` joins them and passes their panics on, and the
//! count is `--jobs`, at most the file count and [`THREADS_PER_CORE`] per available core (a
//! work-stealing pool such as rayon would add nothing for a handful of coarse tasks). A thread
//! the system cannot start stops the reading with an error (exit 2), never a panic.
//!
//! Memory stays what one file costs, times the thread count: each thread holds one record
//! (at most `--max-record-bytes`) and its reader's buffers.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use anyhow::Result;
use indicatif::ProgressBar;

use super::{ReadOptions, Records, Stats};

/// `--jobs N`: how many files are read at once.
#[derive(Debug, Clone, clap::Args)]
pub struct Jobs {
    /// Files read at once, one thread each (default: the cores this process may run on; at
    /// most 4 per core and one per file).
    #[arg(short = 'j', long = "jobs", value_name = "N")]
    pub jobs: Option<NonZeroUsize>,
}

/// How `summary` and `straggler` read their files: `--no-progress`, the [`ReadOptions`] and
/// `--jobs`.
#[derive(Debug, Clone, clap::Args)]
pub struct Reading {
    /// Do not draw the progress bar.
    #[arg(long)]
    pub no_progress: bool,
    #[command(flatten)]
    pub read: ReadOptions,
    #[command(flatten)]
    pub jobs: Jobs,
}

impl Reading {
    /// Reads `files` (collector archives split per rank first) as [`for_each_file`] does, on
    /// the `--jobs` threads with a progress bar unless `--no-progress`; the counts returned
    /// include the records skipped while splitting.
    pub fn for_each_file<F>(&self, files: &[PathBuf], f: F) -> Result<Stats>
    where
        F: Fn(&mut Records<'_>) -> Result<()> + Sync,
    {
        let mut split = super::archive::split(files, &self.read)?;
        let bar = super::progress_bar(&split.paths, !self.no_progress);
        let mut stats = for_each_file(&split.paths, &self.read, self.jobs.threads(), &bar, f)?;
        stats.add_skipped(std::mem::take(&mut split.stats));
        Ok(stats)
    }
}

/// Threads per available core `--jobs` may ask for: reading is parsing, and more threads than
/// this only add stacks and allocator arenas.
pub const THREADS_PER_CORE: usize = 4;

impl Jobs {
    /// The thread count: `--jobs`, else the available parallelism (CPU affinity and cgroup
    /// quota included), else 1; at most [`THREADS_PER_CORE`] per available core (the file
    /// count bounds it further in [`for_each_file`]).
    pub fn threads(&self) -> usize {
        let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        self.jobs
            .map_or(cores, NonZeroUsize::get)
            .min(cores.saturating_mul(THREADS_PER_CORE))
    }
}

/// What the threads share.
struct Queue {
    /// File indices, largest file first.
    order: Vec<usize>,
    next: AtomicUsize,
    stop: AtomicBool,
    /// Merged counts, and the failure of the lowest file index.
    out: Mutex<(Stats, Option<(usize, anyhow::Error)>)>,
}

/// Reads the files on `threads` threads and calls `f` once per file, with the file's records.
///
/// Every file is checked first (a missing or unreadable path fails before anything is read).
/// Returns what was read and skipped, merged over the files. An error from `f`, or a file that
/// cannot be opened, stops the reading (files already started finish) and is returned.
pub fn for_each_file<F>(
    paths: &[PathBuf],
    options: &ReadOptions,
    threads: usize,
    progress: &ProgressBar,
    f: F,
) -> Result<Stats>
where
    F: Fn(&mut Records<'_>) -> Result<()> + Sync,
{
    let sizes = super::check_all(paths)?;
    let mut order: Vec<usize> = (0..paths.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(sizes[i]));
    let queue = Queue {
        order,
        next: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
        out: Mutex::new((Stats::default(), None)),
    };
    let work = || worker(&queue, paths, options, progress, &f);
    let threads = threads.clamp(1, paths.len().max(1));
    let mut spawn_failure = None;
    if threads == 1 {
        work();
    } else {
        std::thread::scope(|s| {
            for started in 0..threads {
                let spawned = std::thread::Builder::new()
                    .name("nemo-lens-read".into())
                    .spawn_scoped(s, work);
                if let Err(e) = spawned {
                    // The threads already running stop at their next file.
                    queue.stop.store(true, Ordering::Relaxed);
                    spawn_failure = Some(anyhow::anyhow!(
                        "cannot start reading thread {} of {threads} (--jobs): {e}; \
                         try a smaller --jobs",
                        started + 1
                    ));
                    break;
                }
            }
        });
    }
    progress.finish_and_clear();
    let (stats, failure) = queue.out.into_inner().unwrap_or_else(|e| e.into_inner());
    match (spawn_failure, failure) {
        (Some(e), _) | (None, Some((_, e))) => Err(e),
        (None, None) => Ok(stats),
    }
}

fn worker<F>(queue: &Queue, paths: &[PathBuf], options: &ReadOptions, progress: &ProgressBar, f: &F)
where
    F: Fn(&mut Records<'_>) -> Result<()> + Sync,
{
    while !queue.stop.load(Ordering::Relaxed) {
        let Some(&index) = queue.order.get(queue.next.fetch_add(1, Ordering::Relaxed)) else {
            return;
        };
        let (stats, result) = match Records::open(index, &paths[index], options, progress) {
            Ok(mut records) => {
                let result = f(&mut records);
                (Some(records.into_stats()), result)
            }
            Err(e) => (None, Err(e)),
        };
        let mut out = queue.out.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(stats) = stats {
            out.0.merge(stats);
        }
        if let Err(e) = result {
            queue.stop.store(true, Ordering::Relaxed);
            if out.1.as_ref().is_none_or(|(first, _)| index < *first) {
                out.1 = Some((index, e));
            }
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

    fn span(rank: usize, i: usize) -> String {
        format!(
            r#"{{"name": "s", "context": {{"trace_id": "0x1", "span_id": "0x{i:x}"}}, "start_time": "2026-01-01T00:00:00Z", "end_time": "2026-01-01T00:00:01Z", "resource": {{"attributes": {{"dl.rank": {rank}}}}}}}"#
        )
    }

    #[test]
    fn every_file_is_read_once_and_the_first_files_give_the_examples() {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = (0..9)
            .map(|rank| {
                let path = dir.path().join(format!("rank{rank}.jsonl"));
                let mut f = std::fs::File::create(&path).unwrap();
                // Larger files for higher ranks: they are read first.
                for i in 0..=rank * 10 {
                    writeln!(f, "{}", span(rank, i)).unwrap();
                }
                writeln!(f, "garbage of rank {rank}").unwrap();
                path
            })
            .collect();
        for threads in [1, 2, 4] {
            let seen = Mutex::new(vec![0usize; paths.len()]);
            let stats = for_each_file(
                &paths,
                &options(),
                threads,
                &ProgressBar::hidden(),
                |records| {
                    let mut n = 0;
                    while records.next_record().is_some() {
                        n += 1;
                    }
                    seen.lock().unwrap()[records.source().index] += n;
                    Ok(())
                },
            )
            .unwrap();
            let seen = seen.into_inner().unwrap();
            assert_eq!(seen, (0..9).map(|r| r * 10 + 1).collect::<Vec<_>>());
            assert_eq!(stats.spans, seen.iter().sum::<usize>() as u64);
            assert_eq!(stats.skipped, 9);
            let files: Vec<usize> = stats.examples.iter().map(|(f, _)| *f).collect();
            assert_eq!(files, [0, 1, 2, 3, 4], "{threads} threads");
        }
    }

    #[test]
    fn a_missing_file_fails_before_anything_is_read_and_errors_stop_the_reading() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good.jsonl");
        std::fs::write(&good, span(0, 1) + "\n").unwrap();
        let missing = dir.path().join("missing.jsonl");
        let calls = AtomicUsize::new(0);
        let err = for_each_file(
            &[good.clone(), missing],
            &options(),
            2,
            &ProgressBar::hidden(),
            |_| {
                calls.fetch_add(1, Ordering::Relaxed);
                Ok(())
            },
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("cannot open"), "{err:#}");
        assert_eq!(calls.load(Ordering::Relaxed), 0);

        // One thread reads in order, so the files after the refused one are never started.
        // With two, the error still ends the reading, but how many files the other thread
        // finished meanwhile depends on the scheduler.
        let paths = vec![good; 50];
        for (threads, expected_calls) in [(1, Some(4)), (2, None)] {
            calls.store(0, Ordering::Relaxed);
            let err = for_each_file(
                &paths,
                &options(),
                threads,
                &ProgressBar::hidden(),
                |records| {
                    calls.fetch_add(1, Ordering::Relaxed);
                    anyhow::ensure!(records.source().index != 3, "file 3 is refused");
                    Ok(())
                },
            )
            .unwrap_err();
            assert_eq!(err.to_string(), "file 3 is refused");
            if let Some(expected) = expected_calls {
                assert_eq!(calls.load(Ordering::Relaxed), expected);
            }
        }
    }
}
