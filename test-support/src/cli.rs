//! Multi-rank console JSONL for the `nemo-lens` command-line tests, written in the exporter's
//! layout (the same keys as `nemo_lens::export::console` and the Python library); flight-recorder
//! dumps of a large job ([`write_rank_dumps`]); the binaries the tests run; peak memory of a
//! command ([`measure`]).
//!
//! The job: ranks 0, 1, 2 and 4 run [`STEPS`] `train_step` spans (attribute `step`), each with a
//! `forward` child. Rank 2 is the straggler: its steps take [`SLOW_STEP_MS`] instead of
//! [`STEP_MS`]. Rank 1's last `train_step` is truncated (`nemo.span.truncated`). Rank 0's file
//! has a corrupt line and a line cut in half; its `forward` spans carry `thread.id` /
//! `thread.name`; its step 1 links to step 0. Rank 1's first span has a bare `NaN` attribute, as
//! Python's `json.dumps` writes it. Rank 4's file is gzip and its resource has no
//! `dl.rank` (the rank comes from the file name `spans-rank4.jsonl.gz`). The Python fixture
//! (rank 3) is copied next to them.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

pub mod measure;

/// Steps per rank.
pub const STEPS: i64 = 12;
/// Normal step duration.
pub const STEP_MS: i64 = 100;
/// Rank 2's step duration.
pub const SLOW_STEP_MS: i64 = 150;
/// Start of the job, µs since the epoch (2026-11-29T22:00:00Z).
pub const T0_US: i64 = 1_795_989_600_000_000;

/// The Python library's output, as committed by the lead.
pub const PYTHON_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/python-lens-rank3.jsonl"
);

/// A file of the library's `tests/fixtures` (see its README for how each was made): the CLI
/// reads the same Python output the library's tests compare with.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name)
}

/// Formats µs since the epoch like the console exporter.
pub fn ts(us: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_micros(us as u64);
    humantime::format_rfc3339_micros(t).to_string()
}

fn resource(rank: Option<i64>) -> Value {
    let mut attrs = json!({
        "service.name": "nemo",
        "host.name": format!("node{}", rank.unwrap_or(9)),
        "telemetry.sdk.language": "rust",
    });
    if let Some(r) = rank {
        attrs["dl.rank"] = json!(r);
        attrs["dl.world_size"] = json!(5);
    }
    json!({ "attributes": attrs, "schema_url": "" })
}

/// One span line.
#[allow(clippy::too_many_arguments)]
pub fn span_line(
    name: &str,
    trace: u128,
    span: u64,
    parent: Option<u64>,
    start_us: i64,
    end_us: i64,
    attributes: Value,
    events: Value,
    links: Value,
    rank: Option<i64>,
) -> String {
    json!({
        "name": name,
        "context": { "trace_id": format!("0x{trace:032x}"), "span_id": format!("0x{span:016x}"), "trace_state": "[]" },
        "kind": "SpanKind.INTERNAL",
        "parent_id": parent.map(|p| format!("0x{p:016x}")),
        "start_time": ts(start_us),
        "end_time": ts(end_us),
        "status": { "status_code": "UNSET" },
        "attributes": attributes,
        "events": events,
        "links": links,
        "resource": resource(rank),
    })
    .to_string()
}

/// Span id of rank `r`'s step `s` (`kind` 0) or its forward child (`kind` 1).
pub fn span_id(rank: i64, step: i64, kind: u64) -> u64 {
    ((rank as u64 + 1) << 32) | ((step as u64) << 4) | kind
}

/// The lines of one rank (in end order, as an exporter writes them).
pub fn rank_lines(rank: i64, resource_rank: Option<i64>) -> Vec<String> {
    let step_ms = if rank == 2 { SLOW_STEP_MS } else { STEP_MS };
    let trace = 0xabc0_u128 + rank as u128;
    let mut lines = Vec::new();
    for step in 0..STEPS {
        let start = T0_US + step * 200_000;
        let end = start + step_ms * 1000;
        let fwd_attrs = if rank == 0 {
            json!({ "thread.id": 4242, "thread.name": "dataloader" })
        } else {
            json!({})
        };
        lines.push(span_line(
            "forward",
            trace,
            span_id(rank, step, 1),
            Some(span_id(rank, step, 0)),
            start + 1000,
            end - 1000,
            fwd_attrs,
            json!([{ "name": "loss.computed", "timestamp": ts(end - 2000), "attributes": { "dl.loss": 0.5 } }]),
            json!([]),
            resource_rank,
        ));
        let truncated = rank == 1 && step == STEPS - 1;
        let mut attrs = json!({ "step": step, "nemo.group.step": true });
        if truncated {
            attrs["nemo.span.truncated"] = json!(true);
        }
        let links = if rank == 0 && step == 1 {
            json!([{ "context": { "trace_id": format!("0x{trace:032x}"), "span_id": format!("0x{:016x}", span_id(0, 0, 0)), "trace_state": "[]" }, "attributes": { "link.reason": "previous step" } }])
        } else {
            json!([])
        };
        lines.push(span_line(
            "train_step",
            trace,
            span_id(rank, step, 0),
            None,
            start,
            // A truncated span ends at shutdown, much later.
            if truncated { end + 5_000_000 } else { end },
            attrs,
            json!([]),
            links,
            resource_rank,
        ));
    }
    lines
}

/// Writes the job into `dir`; returns the files in command-line order.
pub fn write_job(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for rank in [0, 1, 2] {
        let mut lines = rank_lines(rank, Some(rank));
        if rank == 1 {
            // What Python writes for a NaN loss: a bare `NaN` token, not JSON.
            lines[0] = lines[0].replacen(
                "\"attributes\":{}",
                "\"attributes\":{\"dl.loss\":NaN,\"note\":\"NaN, Infinity\"}",
                1,
            );
        }
        if rank == 0 {
            lines.insert(3, "{\"name\": \"broken\", \"context\": ".to_owned());
            lines.insert(5, "this is not json".to_owned());
            let cut = lines.last().unwrap().clone();
            lines.push(cut[..cut.len() / 2].to_owned());
        }
        let path = dir.join(format!("spans-rank{rank}.jsonl"));
        fs::write(&path, lines.join("\n") + "\n").unwrap();
        files.push(path);
    }
    let gz = dir.join("spans-rank4.jsonl.gz");
    let mut enc = flate2::write::GzEncoder::new(
        fs::File::create(&gz).unwrap(),
        flate2::Compression::default(),
    );
    for line in rank_lines(4, None) {
        writeln!(enc, "{line}").unwrap();
    }
    enc.finish().unwrap();
    files.push(gz);
    let py = dir.join("python-lens-rank3.jsonl");
    fs::copy(PYTHON_FIXTURE, &py).expect("the Python fixture is in tests/fixtures");
    files.push(py);
    files
}

/// The files of `dir` whose name ends with `suffix`, sorted (none when `dir` does not exist).
pub fn files_ending(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    v
}

/// The `nemo-lens` binary of this test run, `<target>/<profile>/nemo-lens`: Cargo builds it
/// before it runs the command-line tool's tests and benches (it is their package's binary). A
/// missing binary fails the test.
pub fn bin() -> Command {
    let path = crate::programs::profile_dir().join("nemo-lens");
    assert!(
        path.is_file(),
        "the nemo-lens binary is missing at {}: run the command-line tool's tests \
         (`cargo test -p nemo-lens-cli`), which build it",
        path.display()
    );
    Command::new(path)
}

/// Compute per step of a rank in [`write_rank_dumps`], and of its slow ranks.
pub const DUMP_COMPUTE_MS: i64 = 30;
/// Compute per step of the slow ranks of [`write_rank_dumps`].
pub const DUMP_SLOW_COMPUTE_MS: i64 = 90;

/// Writes the flight-recorder dumps of a synchronous job of `ranks` ranks, one file per rank
/// (`nemo-lens-dump-rank<R>-pid<P>-1-signal.jsonl`, the recorder's layout with its default
/// groups): a `load_checkpoint` span, then `steps` steps, each a `train_step` (group `step`,
/// attribute `step`) holding an `all_reduce` (group `collective`). A rank computes
/// [`DUMP_COMPUTE_MS`] per step, the `slow` ones [`DUMP_SLOW_COMPUTE_MS`], and every rank waits
/// in `all_reduce` until the slowest has arrived. Each rank's clock is offset by up to ±45 s.
/// The ranks in `missing` write nothing. Returns the files, by rank.
pub fn write_rank_dumps(
    dir: &Path,
    ranks: i64,
    steps: i64,
    slow: &[i64],
    missing: &[i64],
) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let slowest = if slow.is_empty() {
        DUMP_COMPUTE_MS
    } else {
        DUMP_SLOW_COMPUTE_MS
    };
    for rank in (0..ranks).filter(|r| !missing.contains(r)) {
        let offset = (rank * 37_123_457) % 90_000_000 - 45_000_000;
        let compute = 1000
            * if slow.contains(&rank) {
                DUMP_SLOW_COMPUTE_MS
            } else {
                DUMP_COMPUTE_MS
            };
        let resource = format!(
            r#"{{"attributes": {{"dl.rank": {rank}, "dl.world_size": {ranks}, "host.name": "node{}", "nemo.run.id": "bench", "service.name": "nemo"}}, "schema_url": ""}}"#,
            rank / 8
        );
        let mut out = String::new();
        let mut line = |id: i64, name: &str, parent: i64, start: i64, end: i64, attrs: &str| {
            let parent = if parent == 0 {
                "null".to_owned()
            } else {
                format!("\"0x{parent:016x}\"")
            };
            out.push_str(&format!(
                r#"{{"name": "{name}", "context": {{"trace_id": "0x{:032x}", "span_id": "0x{id:016x}", "trace_state": "[]"}}, "kind": "SpanKind.INTERNAL", "parent_id": {parent}, "start_time": "{}", "end_time": "{}", "status": {{"status_code": "UNSET"}}, "attributes": {{{attrs}}}, "events": [], "links": [], "resource": {resource}}}"#,
                0xbe4c_u128,
                ts(T0_US + offset + start),
                ts(T0_US + offset + end),
            ));
            out.push('\n');
        };
        let base = (rank + 1) << 32;
        line(
            base + 1,
            "load_checkpoint",
            0,
            0,
            50_000,
            r#""nemo.group": "checkpoint""#,
        );
        let period = 1000 * slowest + 2_000;
        for step in 1..=steps {
            let start = 100_000 + (step - 1) * period;
            let release = start + 1000 * slowest + 1_000;
            let id = base + 16 * step;
            line(
                id + 1,
                "all_reduce",
                id,
                start + compute,
                release,
                &format!(r#""step": {step}, "nemo.group": "collective""#),
            );
            line(
                id,
                "train_step",
                0,
                start,
                release + 500,
                &format!(r#""step": {step}, "nemo.group": "step""#),
            );
        }
        let path = dir.join(format!(
            "nemo-lens-dump-rank{rank}-pid{}-1-signal.jsonl",
            1000 + rank
        ));
        fs::write(&path, out).unwrap();
        files.push(path);
    }
    files
}

/// Runs `cmd` to its end with stdin closed, stdout and stderr captured; kills it and fails
/// the test when it runs longer than `timeout` (a command that hangs ends the test, not CI).
#[track_caller]
pub fn run_bounded(cmd: &mut Command, timeout: std::time::Duration) -> std::process::Output {
    use std::io::Read as _;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", cmd.get_program()));
    let read = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            buf
        })
    };
    let stdout = read(Box::new(child.stdout.take().unwrap()));
    let stderr = read(Box::new(child.stderr.take().unwrap()));
    // The command as the failure shows it: the program and its first arguments.
    let shown: Vec<String> = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .take(8)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let deadline = std::time::Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{} ... did not exit within {timeout:?} (killed); stderr:\n{}",
                shown.join(" "),
                String::from_utf8_lossy(&stderr.join().unwrap())
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    std::process::Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

/// Lets `cmd` take a long command line: a 64 MiB stack limit, so the kernel's room for
/// arguments (a quarter of the stack limit) holds tens of thousands of `--span`s.
pub fn room_for_arguments(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: only `setrlimit`, async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 64 << 20,
                rlim_max: libc::RLIM_INFINITY,
            };
            let mut old = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::getrlimit(libc::RLIMIT_STACK, &mut old);
            let limit = libc::rlimit {
                rlim_max: old.rlim_max,
                rlim_cur: limit.rlim_cur.min(old.rlim_max),
            };
            if libc::setrlimit(libc::RLIMIT_STACK, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    cmd
}

/// Launcher variables that give emit-spans its identity; cleared from every run.
pub const LAUNCHER_ENV: [&str; 10] = [
    "RANK",
    "WORLD_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_JOB_ID",
    "SLURM_ARRAY_JOB_ID",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
];
