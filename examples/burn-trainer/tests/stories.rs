//! The real job: `burn-trainer` ranks as separate processes, all-reducing through
//! burn-collective on loopback, traced by nemo-lens; the `nemo-lens` tool over what they write.
//!
//! The tool's binary is found next to this test's (`target/<profile>/nemo-lens`): `cargo test
//! --workspace` builds it; alone, run `cargo build -p nemo-lens-cli` first. Every wait polls
//! with a bounded deadline; every rank is killed on the way out, even when an assertion fails.

use std::fs;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Generous: debug-build ranks share two cores with other builds and tests.
const DEADLINE: Duration = Duration::from_secs(240);

/// One job at a time: the stories' ranks would otherwise share the cores with another story's,
/// and a straggler's extra compute would drown in that noise.
static ONE_JOB: Mutex<()> = Mutex::new(());

fn one_job_at_a_time() -> MutexGuard<'static, ()> {
    ONE_JOB
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A running rank, killed when dropped.
struct Rank {
    child: Child,
    out: PathBuf,
}

impl Drop for Rank {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn poll<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A master port whose `2 * world_size + 1` successors are free too (two tensor ports per rank
/// and rank 0's step barrier).
fn free_ports(world_size: u16) -> u16 {
    let needed = 2 * world_size + 1;
    loop {
        let base = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if base > u16::MAX - needed - 1 {
            continue;
        }
        if (1..=needed).all(|i| TcpListener::bind(("0.0.0.0", base + i)).is_ok()) {
            return base;
        }
    }
}

struct Job {
    dir: tempfile::TempDir,
    port: u16,
    world_size: u16,
    env: Vec<(String, String)>,
}

impl Job {
    fn new(world_size: u16, env: &[(&str, &str)]) -> Job {
        let dir = tempfile::tempdir().unwrap();
        let spans = dir.path().join("spans-{rank}.jsonl");
        let mut all = vec![
            ("NEMO_LENS_ENABLED".to_string(), "1".to_string()),
            ("NEMO_LENS_EXPORTER".into(), "console".into()),
            ("NEMO_LENS_CONSOLE_PATH".into(), spans.display().to_string()),
            ("NEMO_LENS_METRICS_ENABLED".into(), "0".into()),
            (
                "NEMO_LENS_DUMP_DIR".into(),
                dir.path().join("dumps").display().to_string(),
            ),
            ("OTEL_BSP_SCHEDULE_DELAY".into(), "20".into()),
        ];
        all.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Job {
            dir,
            port: free_ports(world_size),
            world_size,
            env: all,
        }
    }

    fn rank(&self, rank: u16, args: &[&str]) -> Rank {
        let out = self.dir.path().join(format!("rank{rank}.out"));
        let err = self.dir.path().join(format!("rank{rank}.err"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_burn-trainer"));
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy().into_owned();
            if k.starts_with("NEMO_LENS_") || k.starts_with("OTEL_") || k == "TRACEPARENT" {
                cmd.env_remove(k);
            }
        }
        let child = cmd
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .args(["--rank", &rank.to_string()])
            .args(["--world-size", &self.world_size.to_string()])
            .args(["--master-port", &self.port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .stdout(fs::File::create(&out).unwrap())
            .stderr(fs::File::create(err).unwrap())
            .spawn()
            .unwrap();
        Rank { child, out }
    }

    fn ranks(&self, args: impl Fn(u16) -> Vec<String>) -> Vec<Rank> {
        (0..self.world_size)
            .map(|r| {
                let a = args(r);
                self.rank(r, &a.iter().map(String::as_str).collect::<Vec<_>>())
            })
            .collect()
    }

    fn spans_path(&self, rank: u16) -> PathBuf {
        self.dir.path().join(format!("spans-{rank}.jsonl"))
    }

    fn spans(&self, rank: u16) -> Vec<Value> {
        let path = self.spans_path(rank);
        fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn dumps(&self, ending: &str) -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = fs::read_dir(self.dir.path().join("dumps"))
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        found.retain(|p| p.to_string_lossy().ends_with(ending));
        found.sort();
        found
    }
}

/// Waits until every rank has printed step `step` (the ranks' stdout is line-buffered).
fn wait_for_step(ranks: &[Rank], step: usize) {
    poll(&format!("every rank past step {step}"), || {
        ranks
            .iter()
            .all(|r| losses(&fs::read_to_string(&r.out).unwrap_or_default()).len() >= step)
            .then_some(())
    });
}

/// A job of `world_size` ranks run to its end with `args`, every rank exiting with success.
/// burn-collective 0.21 has a lost wake-up window in its sync and tensor services
/// (docs/frameworks.md): a job that stalls in it is reported on stderr, with each rank's
/// stderr, and run once more in a fresh directory; a second stall fails the test.
fn finished_job(world_size: u16, env: &[(&str, &str)], args: &[&str]) -> Job {
    for attempt in 1..=2 {
        let job = Job::new(world_size, env);
        let mut ranks = job.ranks(|_| args.iter().map(|a| a.to_string()).collect());
        let until = Instant::now() + DEADLINE;
        loop {
            let mut running = 0;
            for rank in &mut ranks {
                match rank.child.try_wait().unwrap() {
                    Some(status) => assert!(status.success(), "a rank exited with {status}"),
                    None => running += 1,
                }
            }
            if running == 0 {
                return job;
            }
            if Instant::now() >= until {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        drop(ranks); // kills the ranks still running
        eprintln!("burn job stalled (attempt {attempt} of 2)");
        for rank in 0..world_size {
            let err = fs::read_to_string(job.dir.path().join(format!("rank{rank}.err")));
            eprintln!("rank {rank} stderr:\n{}", err.unwrap_or_default());
        }
    }
    panic!("the burn job stalled twice");
}

/// The `nemo-lens` tool of this workspace.
fn nemo_lens(args: &[&str], files: &[PathBuf]) -> Output {
    let exe = std::env::current_exe().unwrap(); // target/<profile>/deps/<test>-…
    let bin = exe.parent().unwrap().parent().unwrap().join("nemo-lens");
    assert!(
        bin.exists(),
        "nemo-lens missing at {}: run `cargo build -p nemo-lens-cli`",
        bin.display()
    );
    Command::new(bin).args(args).args(files).output().unwrap()
}

fn losses(out: &str) -> Vec<f64> {
    out.lines()
        .filter_map(|l| l.strip_prefix("step "))
        .filter_map(|l| l.split(" loss ").nth(1)?.trim().parse().ok())
        .collect()
}

fn names(spans: &[Value]) -> Vec<&str> {
    spans.iter().filter_map(|s| s["name"].as_str()).collect()
}

#[test]
fn two_ranks_train_the_loss_falls_and_burns_all_reduce_is_in_group_collective() {
    let _one = one_job_at_a_time();
    let job = finished_job(
        2,
        &[
            ("NEMO_LENS_EXPORT_STRATEGY", "all_ranks"),
            ("NEMO_LENS_SPAN_GROUPS", "per_step,collective"),
        ],
        &["--steps", "20"],
    );
    let outs: Vec<String> = (0..2)
        .map(|r| fs::read_to_string(job.dir.path().join(format!("rank{r}.out"))).unwrap())
        .collect();
    for out in &outs {
        let loss = losses(out);
        assert_eq!(loss.len(), 20, "{out}");
        assert!(loss[19] < loss[0] * 0.6, "the loss falls: {loss:?}");
    }
    for rank in 0..2 {
        let spans = job.spans(rank);
        let names = names(&spans);
        let steps: Vec<&Value> = spans.iter().filter(|s| s["name"] == "train_step").collect();
        assert_eq!(steps.len(), 20);
        assert_eq!(steps[0]["attributes"]["step"], 1);
        assert!(steps[0]["attributes"]["loss"].as_f64().unwrap() > 0.0);
        for name in [
            "forward_backward",
            "optimizer_step",
            "register_step",
            "finish_step",
            "step_barrier",
        ] {
            assert_eq!(names.iter().filter(|n| **n == name).count(), 20, "{name}");
        }
        // burn-collective's spans (TRACE and INFO), in `collective` by the default rule: the
        // client's and the operation's `all_reduce`, and the runtime's own.
        assert_eq!(names.iter().filter(|n| **n == "all_reduce").count(), 40);
        assert_eq!(
            names.iter().filter(|n| **n == "global_all_reduce").count(),
            20
        );
        // cubecl's TRACE `block_on`, in no group, is below the span level.
        assert!(!names.contains(&"block_on"), "{names:?}");
    }
}

#[test]
fn the_collective_group_off_keeps_burns_spans_out() {
    let _one = one_job_at_a_time();
    let job = finished_job(
        2,
        &[
            ("NEMO_LENS_EXPORT_STRATEGY", "all_ranks"),
            ("NEMO_LENS_SPAN_GROUPS", "per_step"),
        ],
        &["--steps", "3"],
    );
    for rank in 0..2 {
        let spans = job.spans(rank);
        let names = names(&spans);
        assert_eq!(names.iter().filter(|n| **n == "train_step").count(), 3);
        for burn in [
            "all_reduce",
            "global_all_reduce",
            "execute",
            "register_step",
            "finish_step",
            "step_barrier",
        ] {
            assert!(!names.contains(&burn), "{burn} in {names:?}");
        }
    }
}

/// The step rank 2 stops inside.
const HANG_AT: i64 = 4;

#[test]
fn a_hung_rank_is_named_and_the_others_wait_in_burns_all_reduce() {
    let _one = one_job_at_a_time();
    let (report, status) = hung_rank_report();
    assert_eq!(status, Some(3), "{report:#}");
    assert_eq!(report["suspects"], serde_json::json!([2]), "{report:#}");
    assert_eq!(report["outliers"][0]["state"]["span"], "forward_backward");
    let waiting = &report["groups"][0];
    assert_eq!(waiting["ranks"], serde_json::json!([0, 1]), "{report:#}");
    assert_eq!(waiting["span"], "all_reduce", "{report:#}");
    assert_eq!(waiting["step"], HANG_AT, "{report:#}");
}

/// Three ranks, rank 2 stopping inside step `HANG_AT`; `nemo-lens hang --json` over the
/// watchdog dumps of every rank, and its exit status.
fn hung_rank_report() -> (Value, Option<i32>) {
    let job = Job::new(
        3,
        &[
            ("NEMO_LENS_FLIGHT_RECORDER", "256"),
            (
                "NEMO_LENS_FLIGHT_RECORDER_GROUPS",
                "job,step,forward_backward,collective",
            ),
            ("NEMO_LENS_HANG_TIMEOUT", "5"),
        ],
    );
    let hang_at = HANG_AT.to_string();
    let ranks = job.ranks(|r| {
        let mut args = vec!["--steps".to_string(), "0".to_string()];
        if r == 2 {
            args.extend([
                "--hang-rank".to_string(),
                "2".to_string(),
                "--hang-at".to_string(),
                hang_at.clone(),
            ]);
        }
        args
    });
    let dumps = poll("a watchdog dump from each rank", || {
        let found = job.dumps("-watchdog.jsonl");
        (found.len() == 3).then_some(found)
    });
    drop(ranks);
    let out = nemo_lens(&["hang", "--json"], &dumps);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    (report, out.status.code())
}

/// The slowed rank's forward and backward passes per step: its extra compute has to stand well
/// above the noise of a step's registration and all-reduce on a loaded machine.
const SLOW_FACTOR: &str = "40";

#[test]
fn sigusr1_dumps_name_the_slowed_rank_alone() {
    let _one = one_job_at_a_time();
    // The recorder's default groups (job, step, checkpoint, collective) and the default export
    // strategy: burn's all_reduce is recorded on every rank through the default rule.
    let job = Job::new(3, &[("NEMO_LENS_FLIGHT_RECORDER", "512")]);
    let ranks = job.ranks(|r| {
        let mut args = vec!["--steps".to_string(), "0".to_string()];
        if r == 1 {
            args.extend(["--slow-rank", "1", "--slow-factor", SLOW_FACTOR].map(String::from));
        }
        args
    });
    wait_for_step(&ranks, 12);
    for rank in &ranks {
        // SAFETY: kill(2) on a child this test spawned and has not reaped.
        let sent = unsafe { libc::kill(rank.child.id() as libc::pid_t, libc::SIGUSR1) };
        assert_eq!(sent, 0, "SIGUSR1 to rank");
    }
    let dumps = poll("a SIGUSR1 dump from each rank", || {
        let found = job.dumps("-signal.jsonl");
        (found.len() == 3).then_some(found)
    });
    drop(ranks);
    let out = nemo_lens(&["straggler", "--json", "--no-progress"], &dumps);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    assert_eq!(out.status.code(), Some(3), "{report:#}");
    let suspects: Vec<&Value> = report["suspects"]
        .as_array()
        .expect("suspects")
        .iter()
        .map(|s| &s["rank"])
        .collect();
    assert_eq!(suspects, [&serde_json::json!(1)], "{report:#}");
}

#[test]
fn perfetto_merges_every_ranks_spans_burns_included_into_one_timeline() {
    let _one = one_job_at_a_time();
    let job = finished_job(
        2,
        &[
            ("NEMO_LENS_EXPORT_STRATEGY", "all_ranks"),
            ("NEMO_LENS_SPAN_GROUPS", "per_step,collective"),
            ("NEMO_LENS_THREAD_ATTRIBUTES", "1"),
        ],
        &["--steps", "5"],
    );
    let trace = job.dir.path().join("trace.json");
    let out = nemo_lens(
        &[
            "perfetto",
            "--no-progress",
            "-o",
            &trace.display().to_string(),
        ],
        &[job.spans_path(0), job.spans_path(1)],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trace: Value = serde_json::from_str(&fs::read_to_string(trace).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    for rank in 0..2 {
        let names: Vec<&str> = events
            .iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == rank)
            .filter_map(|e| e["name"].as_str())
            .collect();
        let count = |name: &str| names.iter().filter(|n| **n == name).count();
        assert_eq!(count("train_step"), 5, "rank {rank}: {names:?}");
        assert_eq!(count("forward_backward"), 5, "rank {rank}: {names:?}");
        assert_eq!(count("finish_step"), 5, "rank {rank}: {names:?}");
        assert_eq!(count("step_barrier"), 5, "rank {rank}: {names:?}");
        // burn's own: the client's and the operation's all_reduce, and the runtime's span.
        assert_eq!(count("all_reduce"), 10, "rank {rank}: {names:?}");
        assert_eq!(count("global_all_reduce"), 5, "rank {rank}: {names:?}");
        let process = events
            .iter()
            .find(|e| e["ph"] == "M" && e["name"] == "process_name" && e["pid"] == rank)
            .unwrap_or_else(|| panic!("no process for rank {rank}"));
        assert!(
            process["args"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with(&format!("rank {rank}"))),
            "{process}"
        );
        threads_have_their_own_tracks(events, rank);
    }
}

/// Rank `rank`'s spans are on the tracks of the threads that made them: the training thread's
/// (`main`: the steps, the client's `all_reduce`) and, apart from it, the tokio workers' of
/// burn's runtime (`global_all_reduce`, the operation's `all_reduce`).
fn threads_have_their_own_tracks(events: &[Value], rank: i64) {
    let slices: Vec<&Value> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["pid"] == rank)
        .collect();
    let track_name = |tid: &Value| {
        events
            .iter()
            .find(|e| {
                e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == rank && e["tid"] == *tid
            })
            .and_then(|e| e["args"]["name"].as_str())
            .unwrap_or_else(|| panic!("rank {rank}: no name for track {tid}"))
    };
    let step = slices.iter().find(|e| e["name"] == "train_step").unwrap();
    let training = &step["tid"];
    assert_ne!(*training, 0, "rank {rank}: {step}");
    assert_eq!(track_name(training), "main", "rank {rank}");
    let on_training = |name: &str| {
        slices
            .iter()
            .filter(|e| e["name"] == name && e["tid"] == *training)
            .count()
    };
    for name in ["train_step", "forward_backward", "finish_step"] {
        assert_eq!(on_training(name), 5, "rank {rank}: {name}");
    }
    // The client's all_reduce waits on the training thread; the operation's runs on a worker.
    assert_eq!(on_training("all_reduce"), 5, "rank {rank}");
    let runtime: Vec<&&Value> = slices
        .iter()
        .filter(|e| e["name"] == "global_all_reduce")
        .collect();
    assert_eq!(runtime.len(), 5, "rank {rank}");
    for span in runtime {
        assert_ne!(span["tid"], *training, "rank {rank}: {span}");
        assert_eq!(
            span["args"]["thread.id"], span["tid"],
            "rank {rank}: {span}"
        );
        assert_ne!(track_name(&span["tid"]), "main", "rank {rank}: {span}");
    }
}
