//! `nemo-lens set-slurm-resource-attrs`: the real binary on Slurm environments, its line
//! compared with Python's vectors (host name and quoting from Python's `socket` and `shlex`),
//! `eval`-ed by `sh`, and a trainer started from the evaluated environment carrying the
//! identity.

use nemo_lens_test_support::python;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Output};

use nemo_lens_test_support::cli::bin;
use nemo_lens_test_support::{clear_telemetry_env, example};
use serde_json::Value;

/// A command with no Slurm, torchrun or telemetry variable of the test's own environment.
fn clean(mut cmd: Command) -> Command {
    clear_telemetry_env(&mut cmd);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("SLURM") || k.starts_with("TORCHELASTIC_") {
            cmd.env_remove(k.as_ref());
        }
    }
    cmd
}

fn run(env: &[(&str, &[u8])], args: &[&str]) -> Output {
    let mut cmd = clean(bin());
    for (k, v) in env {
        cmd.env(k, OsStr::from_bytes(v));
    }
    cmd.arg("set-slurm-resource-attrs").args(args);
    cmd.output().unwrap()
}

/// This machine's name as Python's `socket.gethostname()` gives it.
fn python_hostname() -> String {
    python::run("import socket; print(socket.gethostname())", "")
        .trim_end()
        .to_owned()
}

/// The line Python prints for `value`: `export OTEL_RESOURCE_ATTRIBUTES=` and `shlex.quote`.
fn python_line(value: &str) -> String {
    let quoted = python::map_lines(
        "import json, shlex",
        "shlex.quote(json.loads(line))",
        &[serde_json::json!(value).to_string()],
    );
    format!("export OTEL_RESOURCE_ATTRIBUTES={}\n", quoted[0])
}

#[track_caller]
fn assert_line(out: &Output, value: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr, "");
    assert_eq!(String::from_utf8_lossy(&out.stdout), python_line(value));
}

const UUID_CLUSTER_A_12345: &str = "be34ba0f-41ed-5d53-84c1-e3f3dd25bfd7";

#[test]
fn task_stage_appends_the_job_s_attributes_after_the_launcher_s() {
    let host = python_hostname();
    let out = run(
        &[
            ("SLURM_JOB_ID", b"12345"),
            ("SLURM_JOB_NAME", b"train,comma"),
            ("SLURM_JOB_NUM_NODES", b"4"),
            ("SLURM_NTASKS", b"16"),
            ("SLURM_CLUSTER_NAME", b"cluster-a"),
            ("SLURM_JOB_PARTITION", b"batch"),
            ("SLURM_STEP_ID", b"0"),
            ("SLURMD_NODENAME", b"compute-01"),
            ("SLURM_TOPOLOGY_ADDR", b"rack.switch.node"),
            ("SLURM_TOPOLOGY_ADDR_PATTERN", b"rack.switch.node"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                b"slurm.head_node.name=head-01,slurm.job.id=from-launch,custom.attr=kept",
            ),
        ],
        &["--stage", "task", "--container-image", "image=name,tag"],
    );
    assert_line(
        &out,
        &format!(
            "slurm.head_node.name=head-01,slurm.job.id=from-launch,custom.attr=kept,\
             slurm.job.id.raw=12345,slurm.array.job_id=12345,slurm.array.task_id=0,\
             slurm.array.count=1,slurm.job.name=train%2Ccomma,slurm.cluster.name=cluster-a,\
             slurm.partition=batch,slurm.nnodes=4,slurm.ntasks=16,slurm.restart_count=0,\
             slurm.topology.addr=rack.switch.node,slurm.topology.addr_pattern=rack.switch.node,\
             nv.dl.job.uuid={UUID_CLUSTER_A_12345},host.name={host},\
             nv.dl.launch.container.image=image%3Dname%2Ctag"
        ),
    );
}

#[test]
fn sbatch_stage_adds_the_head_node_and_leaves_out_the_topology() {
    let out = run(
        &[
            ("SLURM_JOB_ID", b"12345"),
            ("SLURM_CLUSTER_NAME", b"cluster-a"),
            ("SLURMD_NODENAME", b"head-01"),
            ("SLURM_TOPOLOGY_ADDR", b"rack.switch.node"),
            ("SLURM_TOPOLOGY_ADDR_PATTERN", b"rack.switch.node"),
        ],
        &["--stage", "sbatch"],
    );
    assert_line(
        &out,
        &format!(
            "slurm.job.id=12345,slurm.job.id.raw=12345,slurm.array.job_id=12345,\
             slurm.array.task_id=0,slurm.array.count=1,slurm.cluster.name=cluster-a,\
             slurm.restart_count=0,slurm.head_node.name=head-01,\
             nv.dl.job.uuid={UUID_CLUSTER_A_12345}"
        ),
    );

    // Existing keys win, even empty ones; their bytes are kept.
    let out = run(
        &[
            ("SLURM_JOB_ID", b"7"),
            ("OTEL_RESOURCE_ATTRIBUTES", b"a=x%20y,slurm.job.name="),
            ("SLURM_JOB_NAME", b"pretrain"),
        ],
        &["--stage", "sbatch"],
    );
    assert_line(
        &out,
        "a=x%20y,slurm.job.name=,slurm.job.id=7,slurm.job.id.raw=7,slurm.array.job_id=7,\
         slurm.array.task_id=0,slurm.array.count=1,slurm.restart_count=0,\
         nv.dl.job.uuid=f9f08413-8d27-50e7-bbee-41ce6d4a3c5a",
    );
}

#[test]
fn outside_slurm_only_the_host_is_added() {
    assert_line(&run(&[], &["--stage", "sbatch"]), "");
    assert_line(
        &run(&[], &["--stage", "task"]),
        &format!("host.name={}", python_hostname()),
    );
}

#[test]
fn a_container_image_outside_the_task_stage_exits_2() {
    let out = run(
        &[("SLURM_JOB_ID", b"1")],
        &["--stage", "sbatch", "--container-image", "image=name,tag"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(out.stdout, b"");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: --container-image requires --stage task\n"
    );
    // A bad stage is a usage error too.
    let out = run(&[], &["--stage", "prolog"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(out.stdout, b"");
}

/// `sh -c script` with `env`, the binary and the trainer reachable as `$LENS` / `$TRAINER`.
fn sh(env: &[(&str, &[u8])], script: &str) -> Output {
    let mut cmd = clean(Command::new("sh"));
    cmd.env("LENS", env!("CARGO_BIN_EXE_nemo-lens"))
        .env("TRAINER", example("trainer"))
        .args(["-c", script]);
    for (k, v) in env {
        cmd.env(k, OsStr::from_bytes(v));
    }
    cmd.output().unwrap()
}

/// The evaluated line restores a hostile inherited value byte for byte (single quotes, blanks,
/// a `~`, bytes that are not UTF-8) with the job's attributes appended.
#[test]
fn eval_in_sh_sets_exactly_the_printed_value() {
    let inherited: &[u8] = b"weird=it's a \"test\" ~ $HOME `x`,raw=\xff\xfe,";
    let out = sh(
        &[
            ("OTEL_RESOURCE_ATTRIBUTES", inherited),
            ("SLURM_JOB_ID", b"7"),
        ],
        r#"eval "$("$LENS" set-slurm-resource-attrs --stage sbatch)" && printf %s "$OTEL_RESOURCE_ATTRIBUTES""#,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut expected = b"weird=it's a \"test\" ~ $HOME `x`,raw=\xff\xfe,slurm.job.id=7".to_vec();
    expected.extend_from_slice(
        b",slurm.job.id.raw=7,slurm.array.job_id=7,slurm.array.task_id=0,slurm.array.count=1,\
          slurm.restart_count=0,nv.dl.job.uuid=f9f08413-8d27-50e7-bbee-41ce6d4a3c5a",
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&expected)
    );
    assert_eq!(out.stdout, expected);
}

/// A batch script as a user writes it: the sbatch stage, then in each task the task stage and
/// the trainer. The trainer's resource carries the job's identity, the launcher's head node
/// (the trainer runs in a step, where it would derive none) and the image.
#[test]
fn a_trainer_started_from_the_evaluated_line_carries_the_identity() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
        eval "$("$LENS" set-slurm-resource-attrs --stage sbatch)" || exit 9
        export SLURM_STEP_ID=0 SLURMD_NODENAME=compute-07 SLURM_TOPOLOGY_ADDR=r1.s2.compute-07
        eval "$("$LENS" set-slurm-resource-attrs --stage task --container-image "nvcr.io/nemo:25.01 it's")" || exit 9
        exec "$TRAINER" --rank 1 --world-size 2 --steps 1 --step-ms 0
    "#;
    let console = dir.path().join("lens-{rank}.jsonl");
    let out = sh(
        &[
            ("SLURM_JOB_ID", b"12350"),
            ("SLURM_ARRAY_JOB_ID", b"12345"),
            ("SLURM_ARRAY_TASK_ID", b"7"),
            ("SLURM_CLUSTER_NAME", b"cluster-a"),
            ("SLURM_NNODES", b"4"),
            ("SLURMD_NODENAME", b"head-01"),
            ("SLURM_RESTART_COUNT", b"2"),
            ("NEMO_LENS_ENABLED", b"1"),
            ("NEMO_LENS_EXPORTER", b"console"),
            ("NEMO_LENS_METRICS_ENABLED", b"0"),
            ("CUDA_VISIBLE_DEVICES", b""),
            ("NEMO_LENS_CONSOLE_PATH", console.as_os_str().as_bytes()),
        ],
        script,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(dir.path().join("lens-1.jsonl")).unwrap();
    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let resource = &first["resource"]["attributes"];
    let expect = [
        ("slurm.job.id", serde_json::json!("12345_7")),
        ("slurm.job.id.raw", serde_json::json!("12350")),
        ("slurm.array.task_id", serde_json::json!("7")),
        ("slurm.nnodes", serde_json::json!(4)),
        ("slurm.restart_count", serde_json::json!(2)),
        ("slurm.head_node.name", serde_json::json!("head-01")),
        ("slurm.topology.addr", serde_json::json!("r1.s2.compute-07")),
        ("nv.dl.job.uuid", serde_json::json!(UUID_CLUSTER_A_12345)),
        // An array task: no restart part (Python's vector for nemo.lens.run/cluster-a/12345).
        (
            "nv.dl.run.uuid",
            serde_json::json!("36f67cd8-29dd-57c0-873e-7b4db6f2437e"),
        ),
        (
            "nv.dl.launch.container.image",
            serde_json::json!("nvcr.io/nemo:25.01 it's"),
        ),
        ("nv.dl.rank", serde_json::json!(1)),
        ("dl.rank", serde_json::json!(1)),
    ];
    for (key, want) in expect {
        assert_eq!(resource[key], want, "{key}: {resource}");
    }
}

#[test]
fn a_closed_stdout_exits_2_and_dev_null_is_an_ordinary_output() {
    let shell = |redirect: &str| {
        let mut cmd = clean(Command::new("bash"));
        cmd.env("SLURM_JOB_ID", "7")
            .arg("-c")
            .arg(format!(
                "exec \"$0\" set-slurm-resource-attrs --stage task {redirect}"
            ))
            .arg(env!("CARGO_BIN_EXE_nemo-lens"));
        cmd.output().unwrap()
    };
    let closed = shell(">&-");
    let stderr = String::from_utf8_lossy(&closed.stderr);
    assert_eq!(closed.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("error: cannot write to stdout: it is closed"),
        "{stderr}"
    );
    let null = shell(">/dev/null");
    assert_eq!(
        null.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&null.stderr)
    );
}
