//! Wall time and peak memory of `nemo-lens straggler` and `summary` on the flight-recorder dumps
//! of 4,096 ranks.
//!
//! Run: `cargo bench -p nemo-lens-cli --bench ranks` (figures: `docs/performance.md`).
//!
//! The dumps (`support::write_rank_dumps`): 4,096 files, one per rank, of 64 steps each (a
//! `train_step` holding an `all_reduce`), two slow ranks. Each command runs the real release
//! binary five times, with all cores and with `--jobs 1`, through the probe of
//! `support::measure` (peak resident memory from `wait4`); the median wall time and the largest
//! peak are printed.

use nemo_lens_test_support::cli as support;

use std::time::Instant;

use support::measure::run_measured;

const RANKS: i64 = 4096;
const STEPS: i64 = 64;
const RUNS: usize = 5;

fn main() {
    support::measure::serve_as_probe();
    // `cargo bench` passes `--bench`; a filter is not supported.
    let dir = tempfile::tempdir().unwrap();
    let files = support::write_rank_dumps(dir.path(), RANKS, STEPS, &[1234, 3000], &[]);
    let bytes: u64 = files
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    let mib = |b: f64| b / (1 << 20) as f64;
    println!(
        "{} dumps of {STEPS} steps, {:.1} MiB; median of {RUNS} runs",
        files.len(),
        mib(bytes as f64)
    );
    for command in ["straggler", "summary"] {
        for jobs in [None, Some("1")] {
            let mut walls = Vec::new();
            let mut peak = 0;
            for _ in 0..RUNS {
                let mut cmd = support::bin();
                cmd.args([command, "--json", "--no-progress"]);
                if let Some(j) = jobs {
                    cmd.args(["--jobs", j]);
                }
                cmd.args(&files);
                let started = Instant::now();
                let m = run_measured(&cmd);
                walls.push(started.elapsed().as_secs_f64());
                assert!(matches!(m.code, Some(0 | 3)), "{}", m.stderr);
                peak = peak.max(m.peak_rss);
            }
            walls.sort_by(f64::total_cmp);
            let wall = walls[RUNS / 2];
            println!(
                "{command:<9} --jobs {:<5}  wall {wall:.3} s ({:.0} MiB/s)  peak RSS {:.1} MiB",
                jobs.unwrap_or("cores"),
                mib(bytes as f64) / wall,
                mib(peak as f64)
            );
        }
    }
}
