//! Resource composition (`Telemetry::resource`): precedence, run ids and detectors, through a
//! real exporting setup whose pipelines are all switched off.
//!
//! Every test reads the environment from a `HashMap`, never from the process. Tests that are not
//! about GPU detection set `CUDA_VISIBLE_DEVICES` so that no `nvidia-smi` is spawned.

use std::collections::HashMap;

use nemo_lens::semconv;
use nemo_lens::{LensConfig, Place, Telemetry};
use opentelemetry::{Key, KeyValue, Value};
use opentelemetry_sdk::Resource;

/// An environment with `CUDA_VISIBLE_DEVICES=""` plus `pairs` (later pairs win).
fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    let mut map = HashMap::from([("CUDA_VISIBLE_DEVICES".to_string(), String::new())]);
    for (k, v) in pairs {
        map.insert((*k).to_string(), (*v).to_string());
    }
    map
}

fn config(run_id: &str) -> LensConfig {
    LensConfig::default().with(|c| {
        c.identity.service_name = "trainer".into();
        c.identity.run_id = run_id.into();
    })
}

/// An exporting setup (every pipeline off: nothing is exported, the resource is still built)
/// reading the environment from `map`.
fn telemetry(
    cfg: &LensConfig,
    rank: u32,
    world: u32,
    caller: &[KeyValue],
    map: &HashMap<String, String>,
) -> Telemetry {
    let map = map.clone();
    let cfg = cfg.clone().with_enabled(true).with(|c| {
        c.export.strategy = "all_ranks".into();
        c.traces_enabled = false;
        c.metrics_enabled = false;
        c.logs_enabled = false;
    });
    Telemetry::builder(cfg)
        .place(Place::rank(rank).of(world))
        .resource_attributes(caller.to_vec())
        .env_lookup(move |name| map.get(name).cloned())
        .allow_reinit_for_testing(true)
        .build()
        .unwrap()
}

/// The run id setup resolves from `run_id` and `map`.
fn resolve_run_id(run_id: &str, map: &HashMap<String, String>) -> String {
    telemetry(&config(run_id), 0, 1, &[], map)
        .run_id()
        .to_owned()
}

fn build(
    cfg: &LensConfig,
    rank: u32,
    world: u32,
    caller: &[KeyValue],
    map: &HashMap<String, String>,
) -> Resource {
    telemetry(cfg, rank, world, caller, map)
        .resource()
        .expect("an exporting rank has a resource")
        .clone()
}

fn get(res: &Resource, key: &str) -> Option<Value> {
    res.get(&Key::new(key.to_string()))
}

fn get_str(res: &Resource, key: &str) -> Option<String> {
    get(res, key).map(|v| match v {
        Value::String(s) => s.as_str().to_owned(),
        other => panic!("{key} is not a string: {other:?}"),
    })
}

fn s(v: &str) -> Option<String> {
    Some(v.to_string())
}

// ---------------------------------------------------------------------------------------------
// Base attributes and types
// ---------------------------------------------------------------------------------------------

#[test]
fn base_attributes_have_the_right_values_and_types() {
    let map = env(&[]);
    let res = build(&config("run-a"), 3, 8, &[], &map);
    assert_eq!(get_str(&res, semconv::SERVICE_NAME), s("trainer"));
    assert_eq!(
        get_str(&res, semconv::SERVICE_VERSION),
        s(env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(get(&res, semconv::DL_RANK), Some(Value::I64(3)));
    assert_eq!(get(&res, semconv::DL_WORLD_SIZE), Some(Value::I64(8)));
    assert_eq!(
        get(&res, semconv::PROCESS_PID),
        Some(Value::I64(i64::from(std::process::id())))
    );
    let host = get_str(&res, semconv::HOST_NAME).expect("host.name is detected");
    assert!(!host.is_empty());
}

#[test]
fn rank_extremes_are_integers() {
    let map = env(&[]);
    let res = build(&config("r"), u32::MAX - 1, u32::MAX, &[], &map);
    assert_eq!(
        get(&res, semconv::DL_RANK),
        Some(Value::I64(i64::from(u32::MAX - 1)))
    );
    assert_eq!(
        get_str(&res, semconv::SERVICE_INSTANCE_ID),
        s("r-rank4294967294")
    );
}

#[test]
fn telemetry_sdk_defaults_are_rust() {
    let map = env(&[]);
    let res = build(&config("r"), 0, 1, &[], &map);
    assert_eq!(get_str(&res, semconv::TELEMETRY_SDK_LANGUAGE), s("rust"));
    assert_eq!(
        get_str(&res, semconv::TELEMETRY_SDK_NAME),
        s("opentelemetry")
    );
    let version = get_str(&res, semconv::TELEMETRY_SDK_VERSION).unwrap();
    assert!(
        version.starts_with("0.33."),
        "telemetry.sdk.version = {version}"
    );
}

#[test]
fn resource_holds_exactly_the_expected_keys() {
    let map = env(&[]);
    let res = build(&config("r"), 1, 2, &[], &map);
    let mut keys: Vec<&str> = res.iter().map(|(k, _)| k.as_str()).collect();
    keys.sort_unstable();
    let mut expected = vec![
        semconv::SERVICE_NAME,
        semconv::SERVICE_VERSION,
        semconv::DL_RANK,
        semconv::DL_WORLD_SIZE,
        semconv::NV_DL_RANK,
        semconv::NV_DL_WORLD_SIZE,
        // Outside Slurm, from the configured run id.
        semconv::NV_DL_RUN_UUID,
        semconv::NEMO_RUN_ID,
        semconv::SERVICE_INSTANCE_ID,
        semconv::HOST_NAME,
        semconv::PROCESS_PID,
        semconv::HOST_GPU_COUNT,
        semconv::TELEMETRY_SDK_NAME,
        semconv::TELEMETRY_SDK_LANGUAGE,
        semconv::TELEMETRY_SDK_VERSION,
    ];
    expected.sort_unstable();
    // Kubernetes may be detected through the secrets directory on a CI runner inside a pod.
    keys.retain(|k| !k.starts_with("k8s."));
    assert_eq!(keys, expected);
}

// ---------------------------------------------------------------------------------------------
// Precedence
// ---------------------------------------------------------------------------------------------

#[test]
fn lens_keys_beat_otel_resource_attributes() {
    let map = env(&[(
        "OTEL_RESOURCE_ATTRIBUTES",
        "dl.rank=99,service.name=evil,nemo.run.id=other,team=infra",
    )]);
    let res = build(&config("run-a"), 2, 4, &[], &map);
    assert_eq!(get(&res, semconv::DL_RANK), Some(Value::I64(2)));
    assert_eq!(get_str(&res, semconv::SERVICE_NAME), s("trainer"));
    assert_eq!(get_str(&res, semconv::NEMO_RUN_ID), s("run-a"));
    // Keys Lens does not set come through.
    assert_eq!(get_str(&res, "team"), s("infra"));
}

#[test]
fn otel_resource_attributes_beat_sdk_defaults() {
    let map = env(&[("OTEL_RESOURCE_ATTRIBUTES", "telemetry.sdk.language=python")]);
    let res = build(&config("r"), 0, 1, &[], &map);
    assert_eq!(get_str(&res, semconv::TELEMETRY_SDK_LANGUAGE), s("python"));
}

#[test]
fn caller_beats_base_and_environment() {
    let map = env(&[
        ("OTEL_RESOURCE_ATTRIBUTES", "model=from-env"),
        ("DEPLOYMENT_ENV", "prod"),
    ]);
    let caller = [
        KeyValue::new(semconv::SERVICE_NAME, "caller-service"),
        KeyValue::new(semconv::DL_RANK, 7_i64),
        KeyValue::new(semconv::DEPLOYMENT_ENVIRONMENT, "dev"),
        KeyValue::new("model", "from-caller"),
        KeyValue::new(semconv::DL_TENSOR_PARALLEL_SIZE, 4_i64),
    ];
    let res = build(&config("r"), 0, 1, &caller, &map);
    assert_eq!(get_str(&res, semconv::SERVICE_NAME), s("caller-service"));
    assert_eq!(get(&res, semconv::DL_RANK), Some(Value::I64(7)));
    assert_eq!(get_str(&res, semconv::DEPLOYMENT_ENVIRONMENT), s("dev"));
    assert_eq!(get_str(&res, "model"), s("from-caller"));
    assert_eq!(
        get(&res, semconv::DL_TENSOR_PARALLEL_SIZE),
        Some(Value::I64(4))
    );
}

#[test]
fn detected_beat_caller() {
    let map = env(&[
        ("CUDA_VISIBLE_DEVICES", "0,1"),
        ("SLURM_JOB_ID", "555"),
        ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
        ("K8S_NAMESPACE", "ml"),
    ]);
    let caller = [
        KeyValue::new(semconv::HOST_NAME, "fake-host"),
        KeyValue::new(semconv::PROCESS_PID, 1_i64),
        KeyValue::new(semconv::HOST_GPU_COUNT, 64_i64),
        KeyValue::new(semconv::SLURM_JOB_ID, "caller-job"),
        KeyValue::new(semconv::K8S_NAMESPACE_NAME, "caller-ns"),
    ];
    let res = build(&config("r"), 0, 1, &caller, &map);
    assert_ne!(get_str(&res, semconv::HOST_NAME), s("fake-host"));
    assert_eq!(
        get(&res, semconv::PROCESS_PID),
        Some(Value::I64(i64::from(std::process::id())))
    );
    assert_eq!(get(&res, semconv::HOST_GPU_COUNT), Some(Value::I64(2)));
    assert_eq!(get_str(&res, semconv::SLURM_JOB_ID), s("555"));
    assert_eq!(get_str(&res, semconv::K8S_NAMESPACE_NAME), s("ml"));
}

#[test]
fn caller_attributes_not_detected_are_kept() {
    // Nothing detected for slurm.* here, so the caller's value survives.
    let map = env(&[]);
    let caller = [KeyValue::new(semconv::SLURM_JOB_ID, "caller-job")];
    let res = build(&config("r"), 0, 1, &caller, &map);
    assert_eq!(get_str(&res, semconv::SLURM_JOB_ID), s("caller-job"));
}

// ---------------------------------------------------------------------------------------------
// Run id and service.instance.id
// ---------------------------------------------------------------------------------------------

fn is_hex12(id: &str) -> bool {
    id.len() == 12 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[test]
fn explicit_run_id_wins_over_slurm() {
    let map = env(&[("SLURM_JOB_ID", "123")]);
    assert_eq!(resolve_run_id("my-run", &map), "my-run");
}

#[test]
fn slurm_job_id_is_the_fallback_run_id() {
    let map = env(&[("SLURM_JOB_ID", "123")]);
    assert_eq!(resolve_run_id("", &map), "123");
}

#[test]
fn random_run_id_is_12_hex_and_fresh() {
    let map = env(&[("SLURM_JOB_ID", "")]);
    let a = resolve_run_id("", &map);
    let b = resolve_run_id("", &map);
    assert!(is_hex12(&a), "{a}");
    assert!(is_hex12(&b), "{b}");
    assert_ne!(a, b);
    assert!(is_hex12(&resolve_run_id("", &HashMap::new())));
}

#[test]
fn service_instance_id_is_run_id_dash_rank() {
    let map = env(&[]);
    let res = build(&config("exp/2026-01"), 5, 8, &[], &map);
    assert_eq!(
        get_str(&res, semconv::SERVICE_INSTANCE_ID),
        s("exp/2026-01-rank5")
    );
    assert_eq!(get_str(&res, semconv::NEMO_RUN_ID), s("exp/2026-01"));
}

#[test]
fn an_empty_run_id_is_resolved_before_the_resource_is_built() {
    let map = env(&[("SLURM_JOB_ID", "77")]);
    let res = build(&config(""), 5, 8, &[], &map);
    assert_eq!(get_str(&res, semconv::SERVICE_INSTANCE_ID), s("77-rank5"));
    assert_eq!(get_str(&res, semconv::NEMO_RUN_ID), s("77"));
}

#[test]
fn user_and_wandb_only_when_non_empty() {
    let map = env(&[]);
    let mut cfg = config("r");
    cfg.identity.user = "alice".into();
    cfg.identity.wandb_entity = "team".into();
    cfg.identity.wandb_project = String::new();
    let res = build(&cfg, 0, 1, &[], &map);
    assert_eq!(get_str(&res, semconv::NEMO_USER_ID), s("alice"));
    assert_eq!(get_str(&res, semconv::WANDB_ENTITY), s("team"));
    assert_eq!(get(&res, semconv::WANDB_PROJECT), None);
}

// ---------------------------------------------------------------------------------------------
// deployment.environment
// ---------------------------------------------------------------------------------------------

#[test]
fn deployment_env_wins_over_environment() {
    let map = env(&[("DEPLOYMENT_ENV", "prod"), ("ENVIRONMENT", "dev")]);
    let res = build(&config("r"), 0, 1, &[], &map);
    assert_eq!(get_str(&res, semconv::DEPLOYMENT_ENVIRONMENT), s("prod"));
}

#[test]
fn environment_is_used_when_deployment_env_is_unset() {
    let map = env(&[("ENVIRONMENT", "dev")]);
    let res = build(&config("r"), 0, 1, &[], &map);
    assert_eq!(get_str(&res, semconv::DEPLOYMENT_ENVIRONMENT), s("dev"));
}

#[test]
fn empty_deployment_env_hides_environment() {
    let map = env(&[("DEPLOYMENT_ENV", ""), ("ENVIRONMENT", "dev")]);
    let res = build(&config("r"), 0, 1, &[], &map);
    assert_eq!(get(&res, semconv::DEPLOYMENT_ENVIRONMENT), None);
}

#[test]
fn no_environment_variables_no_deployment_environment() {
    let map = env(&[("ENVIRONMENT", "")]);
    let res = build(&config("r"), 0, 1, &[], &map);
    assert_eq!(get(&res, semconv::DEPLOYMENT_ENVIRONMENT), None);
}

// ---------------------------------------------------------------------------------------------
// SLURM
// ---------------------------------------------------------------------------------------------

#[test]
fn slurm_attributes_are_typed_as_python_s() {
    let map = env(&[
        ("SLURM_JOB_ID", "4242"),
        ("SLURM_JOB_NAME", "pretrain"),
        ("SLURM_NODELIST", "node[01-02]"),
        ("SLURM_NNODES", "2"),
        ("SLURM_NTASKS", "16"),
        ("SLURM_PARTITION", "batch"),
        ("SLURM_CLUSTER_NAME", "eos"),
    ]);
    let res = build(&config("r"), 0, 1, &[], &map);
    assert_eq!(get_str(&res, semconv::SLURM_JOB_ID), s("4242"));
    assert_eq!(get_str(&res, semconv::SLURM_JOB_ID_RAW), s("4242"));
    assert_eq!(get_str(&res, semconv::SLURM_JOB_NAME), s("pretrain"));
    assert_eq!(get(&res, semconv::SLURM_NNODES), Some(Value::I64(2)));
    assert_eq!(get(&res, semconv::SLURM_NTASKS), Some(Value::I64(16)));
    assert_eq!(get(&res, semconv::SLURM_ARRAY_COUNT), Some(Value::I64(1)));
    assert_eq!(get(&res, semconv::SLURM_RESTART_COUNT), Some(Value::I64(0)));
    assert_eq!(get_str(&res, semconv::SLURM_PARTITION), s("batch"));
    assert_eq!(get_str(&res, semconv::SLURM_CLUSTER_NAME), s("eos"));
    // Retired in today's NeMo Lens: never emitted.
    assert_eq!(get(&res, "slurm.nodelist"), None); // retired: never emitted
}

#[test]
fn slurm_empty_values_are_skipped() {
    let map = env(&[("SLURM_JOB_ID", "1"), ("SLURM_JOB_NAME", "")]);
    let res = build(&config("r"), 0, 1, &[], &map);
    assert_eq!(get_str(&res, semconv::SLURM_JOB_ID), s("1"));
    assert_eq!(get(&res, semconv::SLURM_JOB_NAME), None);
}

#[test]
fn slurm_needs_a_non_empty_job_id() {
    for job_id in [None, Some("")] {
        let mut map = env(&[("SLURM_JOB_NAME", "pretrain"), ("SLURM_NNODES", "2")]);
        if let Some(id) = job_id {
            map.insert("SLURM_JOB_ID".into(), id.into());
        }
        let res = build(&config("r"), 0, 1, &[], &map);
        assert!(
            res.iter().all(|(k, _)| !k.as_str().starts_with("slurm.")),
            "SLURM_JOB_ID = {job_id:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Kubernetes
// ---------------------------------------------------------------------------------------------

#[test]
fn kubernetes_attributes_are_detected() {
    let map = env(&[
        ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
        ("K8S_NAMESPACE", "training"),
        ("K8S_POD_NAME", "trainer-0"),
        ("K8S_POD_UID", "uid-1"),
        ("K8S_NODE_NAME", "gpu-node-3"),
        ("K8S_CONTAINER_NAME", "main"),
        ("K8S_JOB_NAME", "pretrain-job"),
        ("HOSTNAME", "hostname-not-used"),
    ]);
    let res = build(&config("r"), 0, 1, &[], &map);
    assert_eq!(get_str(&res, semconv::K8S_NAMESPACE_NAME), s("training"));
    assert_eq!(get_str(&res, semconv::K8S_POD_NAME), s("trainer-0"));
    assert_eq!(get_str(&res, semconv::K8S_POD_UID), s("uid-1"));
    assert_eq!(get_str(&res, semconv::K8S_NODE_NAME), s("gpu-node-3"));
    assert_eq!(get_str(&res, semconv::K8S_CONTAINER_NAME), s("main"));
    assert_eq!(get_str(&res, semconv::K8S_JOB_NAME), s("pretrain-job"));
}

#[test]
fn kubernetes_pod_name_falls_back_to_hostname() {
    for pod_name in [None, Some("")] {
        let mut map = env(&[
            ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
            ("HOSTNAME", "trainer-7"),
            ("K8S_NODE_NAME", ""),
        ]);
        if let Some(p) = pod_name {
            map.insert("K8S_POD_NAME".into(), p.into());
        }
        let res = build(&config("r"), 0, 1, &[], &map);
        assert_eq!(get_str(&res, semconv::K8S_POD_NAME), s("trainer-7"));
        assert_eq!(get(&res, semconv::K8S_NODE_NAME), None);
    }
}

#[test]
fn kubernetes_needs_a_service_host_or_the_service_account_directory() {
    // Outside a pod (no service-account directory) an empty or missing KUBERNETES_SERVICE_HOST
    // means no k8s.* attributes; inside one, the directory alone activates detection.
    let in_pod = std::path::Path::new("/var/run/secrets/kubernetes.io").exists();
    for host in [None, Some("")] {
        let mut map = env(&[("K8S_NAMESPACE", "training"), ("HOSTNAME", "trainer-7")]);
        if let Some(h) = host {
            map.insert("KUBERNETES_SERVICE_HOST".into(), h.into());
        }
        let res = build(&config("r"), 0, 1, &[], &map);
        let has_k8s = res.iter().any(|(k, _)| k.as_str().starts_with("k8s."));
        assert_eq!(
            has_k8s, in_pod,
            "KUBERNETES_SERVICE_HOST = {host:?}, in pod: {in_pod}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// host.gpu.count from CUDA_VISIBLE_DEVICES
// ---------------------------------------------------------------------------------------------

#[test]
fn cuda_visible_devices_counts_entries() {
    for (value, expected) in [
        ("", 0),
        ("   ", 0),
        ("0", 1),
        ("0,1,2", 3),
        ("GPU-1a2b,GPU-3c4d", 2),
        // Python's len(v.split(",")): empty entries count too.
        ("0,,1", 3),
        ("-1", 1),
    ] {
        let map = env(&[("CUDA_VISIBLE_DEVICES", value)]);
        let res = build(&config("r"), 0, 1, &[], &map);
        assert_eq!(
            get(&res, semconv::HOST_GPU_COUNT),
            Some(Value::I64(expected)),
            "CUDA_VISIBLE_DEVICES = {value:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// OTEL_RESOURCE_ATTRIBUTES parsing
// ---------------------------------------------------------------------------------------------

#[test]
fn otel_resource_attributes_values_are_percent_decoded() {
    let map = env(&[(
        "OTEL_RESOURCE_ATTRIBUTES",
        "a=hello%20world,b=%2C%3D%25,c=caf%C3%A9,d=x+y,e=50%,f=%zz, g = %20padded%20 ",
    )]);
    let res = build(&config("r"), 0, 1, &[], &map);
    assert_eq!(get_str(&res, "a"), s("hello world"));
    assert_eq!(get_str(&res, "b"), s(",=%"));
    assert_eq!(get_str(&res, "c"), s("café"));
    assert_eq!(get_str(&res, "d"), s("x+y"));
    assert_eq!(get_str(&res, "e"), s("50%"));
    assert_eq!(get_str(&res, "f"), s("%zz"));
    // Trimmed first, then decoded: encoded spaces survive.
    assert_eq!(get_str(&res, "g"), s(" padded "));
}

#[test]
fn malformed_otel_resource_attributes_segments_are_skipped() {
    let map = env(&[(
        "OTEL_RESOURCE_ATTRIBUTES",
        "novalue,=nokey,good=1,,  spaced key  =  v ,x==y,empty=,last=ok,",
    )]);
    let res = build(&config("r"), 0, 1, &[], &map);
    assert_eq!(get_str(&res, "good"), s("1"));
    assert_eq!(get_str(&res, "spaced key"), s("v"));
    assert_eq!(get_str(&res, "x"), s("=y"));
    assert_eq!(get_str(&res, "empty"), s(""));
    assert_eq!(get_str(&res, "last"), s("ok"));
    assert_eq!(get(&res, "novalue"), None);
    assert_eq!(get(&res, ""), None);
    let env_keys: Vec<&str> = res
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| !k.contains('.'))
        .collect();
    assert_eq!(env_keys.len(), 5, "{env_keys:?}");
}

#[test]
fn duplicate_otel_resource_attributes_keys_last_wins() {
    let map = env(&[("OTEL_RESOURCE_ATTRIBUTES", "k=1,k=2")]);
    let res = build(&config("r"), 0, 1, &[], &map);
    assert_eq!(get_str(&res, "k"), s("2"));
}

// ---------------------------------------------------------------------------------------------
// nvidia-smi (fake executables on a private PATH)
// ---------------------------------------------------------------------------------------------

#[cfg(unix)]
mod nvidia_smi {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;
    use std::time::{Duration, Instant};

    fn install(dir: &Path, script: &str) {
        let path = dir.join("nvidia-smi");
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// Environment without `CUDA_VISIBLE_DEVICES` whose `PATH` starts with `dir`.
    fn smi_env(dir: &Path) -> HashMap<String, String> {
        HashMap::from([(
            "PATH".to_string(),
            format!("{}:/usr/bin:/bin", dir.display()),
        )])
    }

    fn gpu_count(map: &HashMap<String, String>) -> Option<Value> {
        let res = build(&config("r"), 0, 1, &[], map);
        get(&res, semconv::HOST_GPU_COUNT)
    }

    // One test, run in a process of its own, so that no other test thread forks while a
    // script is open for writing (which would make exec fail with ETXTBSY).
    #[test]
    fn nvidia_smi_is_used_when_cuda_visible_devices_is_unset() {
        nemo_lens_test_support::child::run_alone(fake_nvidia_smi);
    }

    fn fake_nvidia_smi() {
        // One line per GPU.
        let dir = tempfile::tempdir().unwrap();
        install(dir.path(), "#!/bin/sh\nprintf '4\\n4\\n\\n4\\n4\\n'\n");
        assert_eq!(gpu_count(&smi_env(dir.path())), Some(Value::I64(4)));

        // CUDA_VISIBLE_DEVICES takes precedence over nvidia-smi.
        let mut map = smi_env(dir.path());
        map.insert("CUDA_VISIBLE_DEVICES".into(), "0".into());
        assert_eq!(gpu_count(&map), Some(Value::I64(1)));

        // A failing nvidia-smi (no driver) → omitted.
        let dir = tempfile::tempdir().unwrap();
        install(
            dir.path(),
            "#!/bin/sh\necho 'NVIDIA-SMI has failed'\nexit 9\n",
        );
        assert_eq!(gpu_count(&smi_env(dir.path())), None);

        // No output → omitted.
        let dir = tempfile::tempdir().unwrap();
        install(dir.path(), "#!/bin/sh\nexit 0\n");
        assert_eq!(gpu_count(&smi_env(dir.path())), None);

        // Not installed → omitted.
        let empty = tempfile::tempdir().unwrap();
        let map = HashMap::from([("PATH".to_string(), empty.path().display().to_string())]);
        assert_eq!(gpu_count(&map), None);

        // Hangs → killed after 5 s, omitted.
        let dir = tempfile::tempdir().unwrap();
        install(dir.path(), "#!/bin/sh\nexec sleep 30\n");
        let start = Instant::now();
        assert_eq!(gpu_count(&smi_env(dir.path())), None);
        // Functional bound: it gave up instead of waiting out the 30 s hang.
        let took = start.elapsed();
        assert!(took < Duration::from_secs(25), "blocked for {took:?}");
    }
}
