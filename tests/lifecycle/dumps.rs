//! Flight-recorder dumps under pressure, on the real trainer with real signals: a `SIGUSR1`
//! storm, the memory one dump takes at a large ring, and a dump that cannot be written (a file
//! size limit, as a full disk).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nemo_lens_test_support::child::{Child, Running};
use nemo_lens_test_support::trainer::finished_steps;
use nemo_lens_test_support::wait;

/// The trainer with a flight recorder of `capacity` spans over every step's spans (three per
/// step), dumping into `dumps`, stepping as fast as it can; it logs each finished step.
fn trainer(tmp: &Path, capacity: usize) -> Child {
    Child::example("trainer")
        .envs([
            ("NEMO_LENS_ENABLED", "1"),
            ("NEMO_LENS_EXPORTER", "console"),
            ("NEMO_LENS_METRICS_ENABLED", "0"),
            ("NEMO_LENS_SPAN_GROUPS", "default"),
            (
                "NEMO_LENS_FLIGHT_RECORDER_GROUPS",
                "step,forward_backward,optimizer",
            ),
            ("NEMO_LENS_HANG_TIMEOUT", "0"),
            ("RUST_LOG", "trainer=debug"),
        ])
        .env("NEMO_LENS_FLIGHT_RECORDER", capacity.to_string())
        .env("NEMO_LENS_DUMP_DIR", tmp.join("dumps"))
        .args(["--steps", "0", "--step-ms", "0", "--checkpoint-every", "0"])
        .timeout(Duration::from_secs(240))
}

/// Waits until the trainer has logged `steps` finished steps.
fn wait_for_steps(trainer: &mut Running, steps: usize) {
    trainer.wait_for_output(&format!("{steps} finished steps"), |_, e| {
        finished_steps(e) >= steps
    });
}

/// The finished dumps and the temporary files in `dir`.
fn dump_files(dir: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut done = Vec::new();
    let mut tmp = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with(".tmp") {
            tmp.push(path);
        } else {
            done.push(path);
        }
    }
    (done, tmp)
}

/// `VmHWM` (peak resident set) of process `pid`, in KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .expect("VmHWM in /proc/<pid>/status")
        .trim()
        .trim_end_matches(" kB")
        .parse()
        .unwrap()
}

/// Whether a `SIGUSR1` sent to `pid` is still waiting for delivery, to the process or to
/// one of its threads (`ShdPnd` / `SigPnd` in `/proc`).
fn sigusr1_pending(pid: libc::pid_t) -> bool {
    let bit = 1u64 << (libc::SIGUSR1 - 1);
    let pending = |status: &str, field: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            .is_some_and(|mask| mask & bit != 0)
    };
    let process = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let mut threads = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok());
    pending(&process, "ShdPnd:") || threads.any(|s| pending(&s, "SigPnd:"))
}

/// Ten thousand `SIGUSR1` at once write at most one dump in flight plus one queued: whatever
/// dumps had finished once every signal was delivered, at most two follow, and a third when a
/// signal's handler was still running then (delivered, not yet noted).
#[test]
fn a_sigusr1_storm_writes_one_dump_in_flight_plus_one_queued() {
    let tmp = tempfile::tempdir().unwrap();
    let dumps = tmp.path().join("dumps");
    let mut trainer = trainer(tmp.path(), 20_000).spawn();
    // The ring full: each dump writes 20,000 lines.
    wait_for_steps(&mut trainer, 7_000);
    let pid = trainer.id() as libc::pid_t;
    for _ in 0..10_000 {
        // SAFETY: kill(2) on our own running child.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGUSR1) }, 0);
        // Paced, so that most signals are delivered one by one rather than merged while
        // pending.
        std::thread::yield_now();
    }
    // A signal sent is not yet delivered: the storm ends when the kernel holds none.
    wait::wait_until(
        Duration::from_secs(30),
        "the signals to be delivered",
        || !sigusr1_pending(pid),
    );
    let finished_during_storm = dump_files(&dumps).0.len();
    // Quiet: no dump being written, and as many dump lines on stderr as files, for a second.
    let mut quiet_since: Option<(usize, Instant)> = None;
    let settled = wait::try_wait_for(Duration::from_secs(120), || {
        let (done, partial) = dump_files(&dumps);
        let reported = trainer
            .stderr()
            .matches("SIGUSR1: flight recorder dump")
            .count();
        if !partial.is_empty() || reported != done.len() {
            quiet_since = None;
            return None;
        }
        match quiet_since {
            Some((n, since)) if n == done.len() => {
                (since.elapsed() >= Duration::from_secs(1)).then_some(n)
            }
            _ => {
                quiet_since = Some((done.len(), Instant::now()));
                None
            }
        }
    });
    let written = settled.expect("the dumps to settle");
    trainer.signal(libc::SIGKILL);
    let out = trainer.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        written >= 1,
        "{}",
        &stderr[stderr.len().saturating_sub(2000)..]
    );
    assert!(
        written <= finished_during_storm + 3,
        "{written} dumps for 10,000 signals, {finished_during_storm} of them written during \
         the storm"
    );
}

/// A dump of a full ring of 100,000 spans streams to its file: the trainer's peak resident set
/// grows by less than 4 MiB (the ring itself was allocated at setup).
#[test]
fn a_dump_of_100000_spans_adds_less_than_4_mib() {
    let tmp = tempfile::tempdir().unwrap();
    let dumps = tmp.path().join("dumps");
    let mut trainer = trainer(tmp.path(), 100_000).spawn();
    // 3 recorded spans per step: the ring is full, its pages touched.
    wait_for_steps(&mut trainer, 35_000);
    let before = peak_kib(trainer.id());
    trainer.signal(libc::SIGUSR1);
    trainer.wait_for_output("the dump", |_, e| {
        e.contains("SIGUSR1: flight recorder dump")
    });
    let after = peak_kib(trainer.id());
    trainer.signal(libc::SIGKILL);
    let _ = trainer.wait();
    let (done, _) = dump_files(&dumps);
    assert_eq!(done.len(), 1);
    let lines = std::fs::read_to_string(&done[0]).unwrap().lines().count();
    assert!(lines >= 100_000, "{lines} lines: the ring was full");
    let growth = after.saturating_sub(before);
    assert!(
        growth < 4 * 1024,
        "the dump raised the peak resident set by {growth} KiB ({before} → {after})"
    );
}

/// A dump that cannot be written whole (the file size limit, as a full disk) says so and
/// leaves no temporary file behind; the next dump tries again and cleans up too.
#[test]
fn a_failed_dump_removes_its_temporary_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dumps = tmp.path().join("dumps");
    let mut trainer = trainer(tmp.path(), 4_096)
        .limit_file_size(64 * 1024)
        .spawn();
    // More than 64 KiB of dump: a few thousand spans.
    wait_for_steps(&mut trainer, 1_500);
    for attempt in 1..=2 {
        trainer.signal(libc::SIGUSR1);
        trainer.wait_for_output("the failed dump", |_, e| {
            e.matches("SIGUSR1: cannot write the flight recorder dump")
                .count()
                >= attempt
        });
        let (done, partial) = dump_files(&dumps);
        assert!(done.is_empty(), "{done:?}");
        assert!(partial.is_empty(), "temporary files left: {partial:?}");
    }
    trainer.signal(libc::SIGKILL);
    let out = trainer.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("File too large"),
        "{}",
        &stderr[..stderr.len().min(3000)]
    );
}

/// A trainer killed (`SIGKILL`) in the middle of a dump leaves its temporary file; the next
/// trainer's dump into the same directory removes it once it is stale (untouched for a minute:
/// its modification time is set back here rather than waited for), keeps a temporary file
/// still being written, and dumps.
#[test]
fn a_temporary_file_left_by_a_process_killed_mid_dump_is_removed_by_the_next_dump() {
    let tmp = tempfile::tempdir().unwrap();
    let dumps = tmp.path().join("dumps");
    let mut left = Vec::new();
    for _attempt in 0..5 {
        let mut trainer = trainer(tmp.path(), 100_000).spawn();
        // A full ring: a dump of 100,000 lines takes a while to write.
        wait_for_steps(&mut trainer, 35_000);
        trainer.signal(libc::SIGUSR1);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (done, partial) = dump_files(&dumps);
            // Killed once the dump has written something: a half-written file, not an empty one.
            let written = |f: &std::path::PathBuf| std::fs::metadata(f).is_ok_and(|m| m.len() > 0);
            if partial.iter().any(written) {
                trainer.signal(libc::SIGKILL);
                break;
            }
            if !done.is_empty() || Instant::now() > deadline {
                // The dump was done before it was seen: again, with a new trainer.
                trainer.signal(libc::SIGKILL);
                for f in done {
                    std::fs::remove_file(f).unwrap();
                }
                break;
            }
            std::thread::yield_now();
        }
        let _ = trainer.wait();
        let (done, partial) = dump_files(&dumps);
        for f in done {
            std::fs::remove_file(f).unwrap();
        }
        if !partial.is_empty() {
            left = partial;
            break;
        }
    }
    assert_eq!(
        left.len(),
        1,
        "no trainer was killed mid-dump in 5 attempts"
    );
    let stale = &left[0];
    assert!(std::fs::metadata(stale).unwrap().len() > 0);
    let a_minute_ago = std::time::SystemTime::now() - Duration::from_secs(120);
    std::fs::File::options()
        .write(true)
        .open(stale)
        .unwrap()
        .set_modified(a_minute_ago)
        .unwrap();
    // Another process's dump in progress (just written to): kept.
    let fresh = dumps.join(".nemo-lens-dump-rank0-pid1-1-sigusr1.jsonl.tmp");
    std::fs::write(&fresh, "{}\n").unwrap();

    let mut next = trainer(tmp.path(), 4_096).spawn();
    wait_for_steps(&mut next, 100);
    next.signal(libc::SIGUSR1);
    next.wait_for_output("the dump", |_, e| {
        e.contains("SIGUSR1: flight recorder dump")
    });
    next.signal(libc::SIGKILL);
    let _ = next.wait();
    let (done, partial) = dump_files(&dumps);
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(
        partial,
        [fresh],
        "the stale temporary file is gone, the fresh one kept"
    );
}
