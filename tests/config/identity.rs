//! Today's NeMo Lens identity on real trainer processes: Slurm array and non-array
//! environments, restarts, and a launcher's `OTEL_RESOURCE_ATTRIBUTES`, read back from their
//! console output attribute by attribute, types included (the expected values are those of
//! Python's tests, see `identity_vectors.rs`).

use serde_json::{Map, Value as Json, json};

use nemo_lens_test_support::child::Child;
use nemo_lens_test_support::{console, python};

/// Python's `uuid.uuid5(uuid.NAMESPACE_URL, name)` for each name.
fn python_uuid5(names: &[&str]) -> Vec<String> {
    let lines: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    python::map_lines(
        "import uuid",
        "uuid.uuid5(uuid.NAMESPACE_URL, line)",
        &lines,
    )
}

/// Runs the trainer example with `env` (nothing else of the test's Slurm or torchrun
/// environment) and `args`, exporting spans to `lens-{rank}.jsonl` in a directory of its own; returns the
/// resource attributes of the span lines of `lens-{file_rank}.jsonl` (all lines agree) and the
/// trainer's stderr.
fn trainer_resource(
    env: &[(&str, &[u8])],
    args: &[&str],
    file_rank: u32,
) -> (Map<String, Json>, String) {
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut child = Child::example("trainer")
        .env_remove_prefix("SLURM")
        .env_remove_prefix("TORCHELASTIC_")
        .env_remove("LENS_SLURM_SLUID")
        .env_remove("NV_LAUNCH_SLUID")
        .env("NEMO_LENS_ENABLED", "1")
        .env("NEMO_LENS_EXPORTER", "console")
        .env("NEMO_LENS_EXPORT_STRATEGY", "all_ranks")
        .env("NEMO_LENS_METRICS_ENABLED", "0")
        .env("CUDA_VISIBLE_DEVICES", "")
        .env("NEMO_LENS_CONSOLE_PATH", dir.join("lens-{rank}.jsonl"))
        .args(["--steps", "1", "--step-ms", "0"])
        .args(args);
    for (k, v) in env {
        child = child.env(k, std::ffi::OsStr::from_bytes(v));
    }
    let out = child.run();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let spans = console::spans(console::read(&dir.join(format!("lens-{file_rank}.jsonl"))));
    assert!(!spans.is_empty(), "no span: {stderr}");
    let resource = spans[0]["resource"]["attributes"]
        .as_object()
        .unwrap()
        .clone();
    for span in &spans {
        assert_eq!(
            span["resource"]["attributes"],
            Json::Object(resource.clone())
        );
    }
    (resource, stderr)
}

/// Asserts each `(key, value)` (JSON: a number is an integer attribute, a string a string),
/// and that each of `absent` is not there.
#[track_caller]
fn assert_attributes(resource: &Map<String, Json>, expected: &[(&str, Json)], absent: &[&str]) {
    for (key, want) in expected {
        assert_eq!(resource.get(*key), Some(want), "{key} in {resource:#?}");
    }
    for key in absent {
        assert!(!resource.contains_key(*key), "{key} in {resource:#?}");
    }
}

/// Keys no rank of today's NeMo Lens emits.
const RETIRED: [&str; 3] = [
    "slurm.cluster",
    "slurm.nodelist",
    "slurm.torchelastic.restart_count",
];

#[test]
fn an_array_task_restarted_by_torchrun_carries_python_s_identity() {
    let env: &[(&str, &[u8])] = &[
        ("SLURM_JOB_ID", b"12350"),
        ("SLURM_ARRAY_JOB_ID", b"12345"),
        ("SLURM_ARRAY_TASK_ID", b"7"),
        ("SLURM_ARRAY_TASK_COUNT", b"64"),
        ("SLURM_CLUSTER_NAME", b"cluster-a"),
        ("SLURM_NNODES", b"4"),
        ("SLURM_NTASKS", b"16"),
        ("SLURM_NODELIST", b"node[1-4]"),
        ("SLURM_JOB_PARTITION", b"batch"),
        ("SLURM_RESTART_COUNT", b"99"),
        ("SLURM_STEP_ID", b"0"),
        ("SLURMD_NODENAME", b"node1"),
        ("TORCHELASTIC_RESTART_COUNT", b"3"),
        ("NEMO_LENS_RUN_ID", b"exp-1"),
    ];
    let (resource, _) = trainer_resource(env, &["--rank", "1", "--world-size", "4"], 1);
    assert_attributes(
        &resource,
        &[
            ("slurm.job.id", json!("12345_7")),
            ("slurm.job.id.raw", json!("12350")),
            ("slurm.array.job_id", json!("12345")),
            ("slurm.array.task_id", json!("7")),
            ("slurm.array.count", json!(64)),
            ("slurm.cluster.name", json!("cluster-a")),
            ("slurm.partition", json!("batch")),
            ("slurm.nnodes", json!(4)),
            ("slurm.ntasks", json!(16)),
            ("slurm.restart_count", json!(99)),
            // Python's tests: uuid5 of nemo.lens.job/cluster-a/12345 and of
            // nemo.lens.run/cluster-a/12345/te3 (an array task has no sr part).
            (
                "nv.dl.job.uuid",
                json!("be34ba0f-41ed-5d53-84c1-e3f3dd25bfd7"),
            ),
            (
                "nv.dl.run.uuid",
                json!("781e5714-3212-55de-ac36-52dc681c2031"),
            ),
            ("nv.dl.rank", json!(1)),
            ("nv.dl.world_size", json!(4)),
            ("dl.rank", json!(1)),
            ("dl.world_size", json!(4)),
            ("nemo.run.id", json!("exp-1")),
            ("service.instance.id", json!("exp-1-rank1")),
        ],
        &[&RETIRED[..], &["slurm.head_node.name", "nv.dl.local_rank"]].concat(),
    );
}

#[test]
fn a_requeued_job_s_batch_step_carries_its_restart_and_head_node() {
    for (restart, run_uuid) in [
        (&b"1"[..], "be42db52-ed95-5653-b035-190f2392e702"),
        (&b""[..], "1a280c0a-71d2-54bd-bd00-fa82efd94290"),
    ] {
        let env: &[(&str, &[u8])] = &[
            ("SLURM_JOB_ID", b"12345"),
            ("SLURM_CLUSTER_NAME", b"cluster-a"),
            ("SLURM_JOB_NUM_NODES", b"2"),
            ("SLURM_NNODES", b"3"),
            ("SLURMD_NODENAME", b"head-01"),
            ("SLURM_RESTART_COUNT", restart),
        ];
        let (resource, _) = trainer_resource(env, &[], 0);
        assert_attributes(
            &resource,
            &[
                ("slurm.job.id", json!("12345")),
                ("slurm.nnodes", json!(2)),
                (
                    "slurm.restart_count",
                    json!(if restart.is_empty() { 0 } else { 1 }),
                ),
                ("slurm.head_node.name", json!("head-01")),
                (
                    "nv.dl.job.uuid",
                    json!("be34ba0f-41ed-5d53-84c1-e3f3dd25bfd7"),
                ),
                ("nv.dl.run.uuid", json!(run_uuid)),
                // No rank given anywhere: rank 0 of 1, run id from SLURM_JOB_ID.
                ("nv.dl.rank", json!(0)),
                ("nv.dl.world_size", json!(1)),
                ("service.instance.id", json!("12345-rank0")),
            ],
            &RETIRED,
        );
    }
}

#[test]
fn a_launcher_s_attributes_give_the_rank_and_win_over_derived_ones() {
    let carrier = "nv.dl.rank=5,nv.dl.world_size=8,nv.dl.local_rank=1,slurm.job.id=from-launch,\
                   slurm.nnodes=8,slurm.ntasks=invalid,slurm.job.name=,slurm.nodelist=n[1-2],\
                   nv.dl.job.uuid=job-from-launch,nv.dl.run.uuid=run-from-launch,\
                   nv.dl.topology.size.tp=%2B2,custom.attr=kept%2C%20really";
    let env: &[(&str, &[u8])] = &[
        ("OTEL_RESOURCE_ATTRIBUTES", carrier.as_bytes()),
        ("SLURM_JOB_ID", b"12345"),
        ("SLURM_JOB_NAME", b"pretrain"),
        ("SLURM_NNODES", b"4"),
        ("SLURM_NTASKS", b"16"),
        ("NEMO_LENS_RUN_ID", b"exp-2"),
    ];
    // No --rank / --world-size: the launcher's values are the rank (the console file is
    // lens-5.jsonl) and the world size.
    let (resource, _) = trainer_resource(env, &[], 5);
    assert_attributes(
        &resource,
        &[
            ("nv.dl.rank", json!(5)),
            ("nv.dl.world_size", json!(8)),
            ("dl.rank", json!(5)),
            ("dl.world_size", json!(8)),
            ("nv.dl.local_rank", json!(1)),
            ("service.instance.id", json!("exp-2-rank5")),
            ("slurm.job.id", json!("from-launch")),
            ("slurm.job.id.raw", json!("12345")),
            ("slurm.nnodes", json!(8)),
            // Invalid or empty inherited values give way to the derived ones.
            ("slurm.ntasks", json!(16)),
            ("slurm.job.name", json!("pretrain")),
            ("nv.dl.job.uuid", json!("job-from-launch")),
            ("nv.dl.run.uuid", json!("run-from-launch")),
            ("nv.dl.topology.size.tp", json!(2)),
            ("custom.attr", json!("kept, really")),
            // Not allowlisted, so not Slurm's: the launcher's string as the SDK reads it.
            ("slurm.nodelist", json!("n[1-2]")),
        ],
        &[],
    );

    // The application's rank wins over the launcher's.
    let (resource, _) = trainer_resource(env, &["--rank", "2", "--world-size", "3"], 2);
    assert_attributes(
        &resource,
        &[
            ("nv.dl.rank", json!(2)),
            ("nv.dl.world_size", json!(3)),
            ("service.instance.id", json!("exp-2-rank2")),
        ],
        &[],
    );
}

#[test]
fn a_launcher_s_instance_id_and_invalid_rank_are_kept_as_given() {
    let env: &[(&str, &[u8])] = &[
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            b"nv.dl.rank=launcher-rank,nv.dl.world_size=-1",
        ),
        ("NEMO_LENS_RUN_ID", b"exp-3"),
    ];
    let (resource, stderr) = trainer_resource(env, &[], 0);
    // Python keeps an invalid integer as the string it was, with a warning; the rank is then
    // unknown: no dl.rank, no rank-derived service.instance.id.
    assert_attributes(
        &resource,
        &[
            ("nv.dl.rank", json!("launcher-rank")),
            ("nv.dl.world_size", json!(-1)),
        ],
        &["dl.rank", "dl.world_size", "service.instance.id"],
    );
    assert!(
        stderr.contains(
            "Resource attribute nv.dl.rank requires a base-10 integer; preserving invalid value \
             \"launcher-rank\""
        ),
        "{stderr}"
    );

    let env: &[(&str, &[u8])] = &[
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            b"nv.dl.rank=4,nv.dl.world_size=8,service.instance.id=worker-a",
        ),
        ("NEMO_LENS_RUN_ID", b"exp-3"),
    ];
    let (resource, _) = trainer_resource(env, &[], 4);
    assert_attributes(
        &resource,
        &[
            ("nv.dl.rank", json!(4)),
            ("service.instance.id", json!("worker-a")),
        ],
        &[],
    );
}

#[test]
fn a_launcher_s_rank_beyond_its_world_size_is_an_error_naming_the_variable() {
    let out = Child::example("trainer")
        .env("NEMO_LENS_ENABLED", "1")
        .env(
            "OTEL_RESOURCE_ATTRIBUTES",
            "nv.dl.rank=8,nv.dl.world_size=8",
        )
        .args(["--steps", "1", "--step-ms", "0"])
        .run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("rank 8, world_size 8; nv.dl.rank from OTEL_RESOURCE_ATTRIBUTES; nv.dl.world_size from OTEL_RESOURCE_ATTRIBUTES"),
        "{stderr}"
    );
}

#[test]
fn outside_slurm_ranks_sharing_a_run_id_share_the_run_uuid() {
    // torchrun: TORCHELASTIC_RUN_ID names the run (no NEMO_LENS_RUN_ID).
    let torchrun: &[(&str, &[u8])] = &[
        ("TORCHELASTIC_RUN_ID", b"abc"),
        ("TORCHELASTIC_RESTART_COUNT", b"2"),
    ];
    let mut seen = Vec::new();
    for rank in ["0", "1"] {
        let (resource, _) = trainer_resource(
            torchrun,
            &["--rank", rank, "--world-size", "2"],
            rank.parse().unwrap(),
        );
        seen.push(resource["nv.dl.run.uuid"].clone());
        // Each process still draws its own run id (nemo.run.id) as in 0.1.0.
        assert!(!resource.contains_key("nv.dl.job.uuid"), "{resource:#?}");
    }
    let name = "nemo.lens.run/local/abc/te2";
    assert_eq!(seen, vec![json!(python_uuid5(&[name])[0]); 2]);

    // The configured run id comes first.
    let configured: &[(&str, &[u8])] = &[
        ("TORCHELASTIC_RUN_ID", b"abc"),
        ("NEMO_LENS_RUN_ID", b"local-1"),
    ];
    let (resource, _) = trainer_resource(configured, &[], 0);
    assert_eq!(
        resource["nv.dl.run.uuid"],
        json!("b7bfb81b-f66c-50d8-a79e-8a703cdad745")
    );
}

#[test]
fn hostile_launcher_attributes_do_not_break_the_identity() {
    // ~100 KiB of segments, control characters, malformed escapes, bytes that are not UTF-8.
    let mut carrier: Vec<u8> = Vec::new();
    for i in 0..4000 {
        carrier.extend_from_slice(format!("pad.{i}=%zz%4%C3{}\x01,", "x".repeat(8)).as_bytes());
    }
    carrier.extend_from_slice(b"bad=\xff\xfe,k\xff=v,,=x, ,novalue,");
    carrier.extend_from_slice(b"nv.dl.rank=3,nv.dl.world_size=4,ctl=a%0Ab%00c");
    let env: &[(&str, &[u8])] = &[
        ("OTEL_RESOURCE_ATTRIBUTES", &carrier),
        ("NEMO_LENS_RUN_ID", b"exp-4"),
    ];
    let (resource, _) = trainer_resource(env, &[], 3);
    assert_attributes(
        &resource,
        &[
            ("nv.dl.rank", json!(3)),
            ("service.instance.id", json!("exp-4-rank3")),
            ("pad.0", json!("%zz%4\u{fffd}xxxxxxxx\u{1}")),
            ("pad.3999", json!("%zz%4\u{fffd}xxxxxxxx\u{1}")),
            ("bad", json!("\u{fffd}\u{fffd}")),
            ("k\u{fffd}", json!("v")),
            ("ctl", json!("a\nb\u{0}c")),
        ],
        &["novalue", ""],
    );
}
