//! Today's NeMo Lens identity, value by value: the Slurm attributes and the job and run UUIDs
//! Python's own tests expect, every UUID recomputed by Python's `uuid` module here.

use nemo_lens::identity;
use opentelemetry::{KeyValue, Value};

use nemo_lens_test_support::python;

type Env = &'static [(&'static str, &'static str)];

fn lookup(env: Env) -> impl Fn(&str) -> Option<String> {
    move |k| {
        env.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| (*v).to_owned())
    }
}

/// The value of `key` among the attributes `identity::job_attributes` derives.
fn derived(env: Env, run_id: Option<&str>, key: &str) -> Option<String> {
    identity::job_attributes(lookup(env), run_id)
        .into_iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

/// The Slurm attributes (and `nv.dl.job.uuid`) `identity::job_attributes` derives, without the
/// run's UUID.
fn slurm_attributes(env: Env) -> Vec<KeyValue> {
    let mut attributes = identity::job_attributes(lookup(env), None);
    attributes.retain(|kv| kv.key.as_str() != "nv.dl.run.uuid");
    attributes
}

/// Python's `uuid.uuid5(uuid.NAMESPACE_URL, name)` for each name.
fn python_uuid5(names: &[&str]) -> Vec<String> {
    let lines: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    python::map_lines(
        "import uuid",
        "uuid.uuid5(uuid.NAMESPACE_URL, line)",
        &lines,
    )
}

// ---------------------------------------------------------------------------------------------
// Job and run UUIDs: (environment, the name Python hashes, the UUID Python's tests expect)
// ---------------------------------------------------------------------------------------------

const ARRAY_7: Env = &[
    ("SLURM_CLUSTER_NAME", "cluster-a"),
    ("SLURM_JOB_ID", "12350"),
    ("SLURM_ARRAY_JOB_ID", "12345"),
    ("SLURM_ARRAY_TASK_ID", "7"),
];

const JOB_VECTORS: &[(Env, &str, &str)] = &[
    (
        ARRAY_7,
        "nemo.lens.job/cluster-a/12345",
        "be34ba0f-41ed-5d53-84c1-e3f3dd25bfd7",
    ),
    (
        &[
            ("SLURM_CLUSTER_NAME", "cluster-a"),
            ("SLURM_JOB_ID", "12345"),
        ],
        "nemo.lens.job/cluster-a/12345",
        "be34ba0f-41ed-5d53-84c1-e3f3dd25bfd7",
    ),
    (
        &[("SLURM_CLUSTER_NAME", ""), ("SLURM_JOB_ID", "12345")],
        "nemo.lens.job/nocluster/12345",
        "21d2db3c-d674-59f6-9b45-3683786d926b",
    ),
    (
        &[
            ("SLURM_CLUSTER_NAME", "cluster-a"),
            ("SLURM_JOB_ID", "12350"),
            ("SLURM_ARRAY_JOB_ID", ""),
            ("SLURM_ARRAY_TASK_ID", "7"),
        ],
        "nemo.lens.job/cluster-a/nojob",
        "a1502c67-af69-525f-82d7-df6b71bc5161",
    ),
    (
        &[
            ("SLURM_CLUSTER_NAME", "test-cluster"),
            ("SLURM_JOB_ID", "123"),
            ("SLURM_ARRAY_JOB_ID", "120"),
            ("SLURM_ARRAY_TASK_ID", "3"),
        ],
        "nemo.lens.job/test-cluster/120",
        "029fb372-124d-5f8f-af25-ef2ba723d6fe",
    ),
    (
        &[("SLURM_JOB_ID", "7")],
        "nemo.lens.job/nocluster/7",
        "f9f08413-8d27-50e7-bbee-41ce6d4a3c5a",
    ),
    (
        &[],
        "nemo.lens.job/nocluster/nojob",
        "d2badfc7-0e4c-537b-b4ea-8785f79f8679",
    ),
];

/// (environment, run id passed, name, UUID); `None` name: no run UUID.
const RUN_VECTORS: &[(Env, Option<&str>, Option<&str>, &str)] = &[
    (
        &[
            ("SLURM_CLUSTER_NAME", "cluster-a"),
            ("SLURM_JOB_ID", "12345"),
        ],
        None,
        Some("nemo.lens.run/cluster-a/12345/sr0"),
        "1a280c0a-71d2-54bd-bd00-fa82efd94290",
    ),
    (
        &[
            ("SLURM_CLUSTER_NAME", "cluster-a"),
            ("SLURM_JOB_ID", "12345"),
            ("SLURM_RESTART_COUNT", ""),
        ],
        None,
        Some("nemo.lens.run/cluster-a/12345/sr0"),
        "1a280c0a-71d2-54bd-bd00-fa82efd94290",
    ),
    (
        &[
            ("SLURM_CLUSTER_NAME", "cluster-a"),
            ("SLURM_JOB_ID", "12345"),
            ("SLURM_RESTART_COUNT", "1"),
        ],
        None,
        Some("nemo.lens.run/cluster-a/12345/sr1"),
        "be42db52-ed95-5653-b035-190f2392e702",
    ),
    (
        &[
            ("SLURM_CLUSTER_NAME", "cluster-a"),
            ("SLURM_JOB_ID", "12345"),
            ("SLURM_RESTART_COUNT", "01"),
        ],
        None,
        Some("nemo.lens.run/cluster-a/12345/sr01"),
        "3ce2f219-e58e-51d0-ae88-661736c433a6",
    ),
    (
        &[
            ("SLURM_CLUSTER_NAME", "cluster-a"),
            ("SLURM_JOB_ID", "12345"),
            ("SLURM_RESTART_COUNT", "2"),
            ("TORCHELASTIC_RESTART_COUNT", "1"),
        ],
        // Under Slurm the run id does not matter.
        Some("ignored"),
        Some("nemo.lens.run/cluster-a/12345/sr2/te1"),
        "10f031c5-ee69-584a-9772-9ba8d3f489fc",
    ),
    (
        &[
            ("SLURM_CLUSTER_NAME", "cluster-a"),
            ("SLURM_JOB_ID", "12345"),
            ("TORCHELASTIC_RESTART_COUNT", ""),
        ],
        None,
        Some("nemo.lens.run/cluster-a/12345/sr0/te"),
        "7b288cb8-17e7-5c83-97fb-8f70762b6d97",
    ),
    (
        &[
            ("SLURM_CLUSTER_NAME", "cluster-a"),
            ("SLURM_JOB_ID", "12350"),
            ("SLURM_ARRAY_JOB_ID", "12345"),
            ("SLURM_ARRAY_TASK_ID", "7"),
            ("SLURM_RESTART_COUNT", "99"),
            ("TORCHELASTIC_RESTART_COUNT", "3"),
        ],
        None,
        Some("nemo.lens.run/cluster-a/12345/te3"),
        "781e5714-3212-55de-ac36-52dc681c2031",
    ),
    (
        ARRAY_7,
        None,
        Some("nemo.lens.run/cluster-a/12345"),
        "36f67cd8-29dd-57c0-873e-7b4db6f2437e",
    ),
    (
        &[("SLURM_ARRAY_JOB_ID", "12345")],
        None,
        Some("nemo.lens.run/nocluster/nojob/sr0"),
        "b19cd435-659e-5816-b7eb-724bc636e47b",
    ),
    (
        &[],
        Some("local-1"),
        Some("nemo.lens.run/local/local-1/te0"),
        "b7bfb81b-f66c-50d8-a79e-8a703cdad745",
    ),
    (
        &[("TORCHELASTIC_RESTART_COUNT", "1")],
        Some("local-1"),
        Some("nemo.lens.run/local/local-1/te1"),
        "83a45dd3-4453-52f6-82a3-b85f1bccf845",
    ),
    (
        &[
            ("TORCHELASTIC_RUN_ID", "abc"),
            ("TORCHELASTIC_RESTART_COUNT", ""),
        ],
        None,
        Some("nemo.lens.run/local/abc/te0"),
        "1f7fbf31-9cd2-5d2b-a5f7-705f3076e62c",
    ),
    (
        &[
            ("TORCHELASTIC_RUN_ID", "abc"),
            ("TORCHELASTIC_RESTART_COUNT", "2"),
        ],
        Some("r1"),
        Some("nemo.lens.run/local/r1/te2"),
        "572d739d-a482-575f-ac59-5ede45e4baed",
    ),
    (&[], None, None, ""),
    (&[], Some(""), None, ""),
];

#[test]
fn job_and_run_uuids_are_python_s() {
    let mut names = Vec::new();
    let mut expected = Vec::new();
    for (env, name, uuid) in JOB_VECTORS {
        // The job's UUID is an attribute of a Slurm job only; outside one it is absent (the
        // `nojob` name's UUID is pinned by the unit tests of `config::resource::uuids`).
        let in_slurm = env
            .iter()
            .any(|(k, v)| *k == "SLURM_JOB_ID" && !v.is_empty());
        let expected_here = in_slurm.then(|| (*uuid).to_owned());
        assert_eq!(
            derived(env, None, "nv.dl.job.uuid"),
            expected_here,
            "{env:?}"
        );
        names.push(*name);
        expected.push(*uuid);
    }
    for (env, run_id, name, uuid) in RUN_VECTORS {
        let got = derived(env, *run_id, "nv.dl.run.uuid");
        match name {
            Some(name) => {
                assert_eq!(got.as_deref(), Some(*uuid), "{env:?} {run_id:?}");
                names.push(name);
                expected.push(*uuid);
            }
            None => assert_eq!(got, None, "{env:?} {run_id:?}"),
        }
    }
    // The expected UUIDs are Python's: uuid5 of the name, by Python's own uuid module.
    assert_eq!(python_uuid5(&names), expected);
}

// ---------------------------------------------------------------------------------------------
// Slurm attributes: Python's test vectors, in Python's order and types
// ---------------------------------------------------------------------------------------------

fn kv(key: &'static str, value: impl Into<Value>) -> KeyValue {
    KeyValue::new(key, value)
}

#[test]
fn slurm_attributes_are_python_s_in_order_and_type() {
    let non_array = slurm_attributes(&[
        ("SLURM_JOB_ID", "12345"),
        ("SLURM_JOB_NAME", "train-gpt"),
        ("SLURM_JOB_NUM_NODES", "4"),
        ("SLURM_NTASKS", "16"),
        ("SLURM_CLUSTER_NAME", "test-cluster"),
        ("SLURM_JOB_PARTITION", "batch"),
        ("SLURMD_NODENAME", "head-01"),
        ("SLURM_RESTART_COUNT", "2"),
        ("SLURM_NODELIST", "node[1-4]"),
    ]);
    assert_eq!(
        non_array,
        [
            kv("slurm.job.id", "12345"),
            kv("slurm.job.id.raw", "12345"),
            kv("slurm.array.job_id", "12345"),
            kv("slurm.array.task_id", "0"),
            kv("slurm.array.count", 1_i64),
            kv("slurm.job.name", "train-gpt"),
            kv("slurm.cluster.name", "test-cluster"),
            kv("slurm.partition", "batch"),
            kv("slurm.nnodes", 4_i64),
            kv("slurm.ntasks", 16_i64),
            kv("slurm.restart_count", 2_i64),
            kv("slurm.head_node.name", "head-01"),
            kv("nv.dl.job.uuid", "9d61581a-b1c5-55ff-90da-50a3f091d47a"),
        ]
    );

    let array = slurm_attributes(&[
        ("SLURM_JOB_ID", "12350"),
        ("SLURM_ARRAY_JOB_ID", "12345"),
        ("SLURM_ARRAY_TASK_ID", "7"),
        ("SLURM_ARRAY_TASK_COUNT", "64"),
        ("SLURM_STEPID", "0"),
        ("SLURMD_NODENAME", "compute-01"),
        ("SLURM_JOB_USER", "alice"),
        ("SLURM_JOB_ACCOUNT", "llm"),
        ("SLURM_JOB_QOS", "high"),
        ("SLURM_JOB_RESERVATION", "maint"),
        ("SLURM_SEGMENT", "8"),
        ("SLURM_TOPOLOGY_ADDR", "s1.s2.n3"),
        ("SLURM_TOPOLOGY_ADDR_PATTERN", "switch.switch.node"),
        ("LENS_SLURM_ARRAY_SLUID", "as1"),
    ]);
    assert_eq!(
        array,
        [
            kv("slurm.job.id", "12345_7"),
            kv("slurm.job.id.raw", "12350"),
            kv("slurm.array.job_id", "12345"),
            kv("slurm.array.task_id", "7"),
            kv("slurm.array.count", 64_i64),
            kv("slurm.array.sluid", "as1"),
            kv("slurm.restart_count", 0_i64),
            kv("slurm.job.user", "alice"),
            kv("slurm.job.account", "llm"),
            kv("slurm.job.qos", "high"),
            kv("slurm.job.reservation", "maint"),
            kv("slurm.segment", "8"),
            kv("slurm.topology.addr", "s1.s2.n3"),
            kv("slurm.topology.addr_pattern", "switch.switch.node"),
            // In a step: no head node. No cluster: nemo.lens.job/nocluster/12345.
            kv("nv.dl.job.uuid", "21d2db3c-d674-59f6-9b45-3683786d926b"),
        ]
    );

    // Invalid integers are left out (their defaults too); an empty first variable gives way to
    // the next; a step hides the head node.
    let invalid = slurm_attributes(&[
        ("SLURM_JOB_ID", "99"),
        ("SLURM_NNODES", "x"),
        ("SLURM_NTASKS", ""),
        ("SLURM_ARRAY_TASK_COUNT", "bad"),
        ("SLURM_RESTART_COUNT", "1_0"),
        ("SLURM_STEPID", "0"),
        ("SLURMD_NODENAME", "n1"),
        ("SLURM_JOB_PARTITION", ""),
        ("SLURM_PARTITION", "p"),
        ("LENS_SLURM_SLUID", ""),
        ("NV_LAUNCH_SLUID", "s1"),
    ]);
    let keys: Vec<&str> = invalid.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "slurm.job.id",
            "slurm.job.id.raw",
            "slurm.array.job_id",
            "slurm.array.task_id",
            "slurm.sluid",
            "slurm.partition",
            "nv.dl.job.uuid"
        ]
    );
    assert_eq!(invalid[4], kv("slurm.sluid", "s1"));
    assert_eq!(
        invalid[6],
        kv("nv.dl.job.uuid", "6182dd4c-2425-518e-96d1-34c342b051b7")
    );

    // An integer beyond i64 is skipped like an unparsable one; blanks and a sign are fine.
    let edges = slurm_attributes(&[
        ("SLURM_JOB_ID", "1"),
        ("SLURM_NNODES", "9223372036854775808"),
        ("SLURM_NTASKS", " +007 "),
        ("SLURM_ARRAY_TASK_ID", ""),
        ("SLURM_ARRAY_JOB_ID", "12345"),
    ]);
    let get = |k: &str| {
        edges
            .iter()
            .find(|kv| kv.key.as_str() == k)
            .map(|kv| kv.value.clone())
    };
    assert_eq!(get("slurm.nnodes"), None);
    assert_eq!(get("slurm.ntasks"), Some(Value::I64(7)));
    assert_eq!(get("slurm.job.id"), Some(Value::from("12345_")));
    assert_eq!(get("slurm.array.task_id"), None);

    assert!(slurm_attributes(&[("SLURM_JOB_ID", "")]).is_empty());
}
