//! Resource attributes: who produced the telemetry (service, run, rank, host, cluster).
//!
//! * `mod.rs`: the composition, the run id, the host and Kubernetes detectors;
//! * [`participant`]: the rank and world size (the application's, else the launcher's), the
//!   `nv.dl.*` / `dl.*` rank attributes and the rank-derived `service.instance.id`;
//! * [`slurm`]: the Slurm attributes (derived, and inherited from the launcher);
//! * [`uuids`]: `nv.dl.job.uuid` and `nv.dl.run.uuid`.

pub(crate) mod participant;
pub(crate) mod slurm;
pub(crate) mod uuids;

use std::fmt::Write as _;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::resource::TelemetryResourceDetector;

pub(crate) use self::participant::Participant;
use crate::carrier::{self, OTEL_RESOURCE_ATTRIBUTES};
use crate::config::LensConfig;
use crate::semconv;

/// A directory that exists inside every Kubernetes pod with a service account.
const K8S_SECRETS_DIR: &str = "/var/run/secrets/kubernetes.io";
/// How long `nvidia-smi` may take before it is killed and the GPU count is omitted.
const NVIDIA_SMI_TIMEOUT: Duration = Duration::from_secs(5);
/// At most this much of `nvidia-smi`'s output is read.
const NVIDIA_SMI_MAX_OUTPUT: u64 = 1 << 20;
/// `service.name` used when the composed one is empty (as the Python SDK does).
const UNKNOWN_SERVICE: &str = "unknown_service";

/// A base-10 integer as Python NeMo Lens reads identity integers: `[+-]?[0-9]+` once blanks
/// are stripped (`" +007 "` is 7; `1_0`, `3.5`, `1e3` are not integers), fitting an `i64`.
pub(crate) fn strict_integer(text: &str) -> Option<i64> {
    let t = carrier::py_strip(text);
    let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok()
}

/// Returns the run id shared by all ranks of a job.
///
/// The rules, first match wins:
///
/// 1. `run_id` itself if it is non-empty;
/// 2. `SLURM_JOB_ID` (read through `lookup`) if it is non-empty;
/// 3. 12 lowercase hexadecimal characters (48 bits) from the operating system's random source.
///
/// Case 3 differs on every call and on every rank: a multi-rank job that is not under SLURM
/// should set the run id explicitly (`NEMO_LENS_RUN_ID`) so that all ranks share it.
#[must_use]
pub(crate) fn resolve_run_id(run_id: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    if !run_id.is_empty() {
        return run_id.to_owned();
    }
    if let Some(job_id) = non_empty(lookup("SLURM_JOB_ID")) {
        return job_id;
    }
    random_hex12()
}

/// Builds the [`Resource`] of one rank (the layers and their precedence are documented on
/// `Telemetry::resource`).
///
/// * `config.identity.run_id` must already be resolved (see [`resolve_run_id`]); when it is empty,
///   `nemo.run.id` and `service.instance.id` are omitted.
/// * `who`: the rank and world size setup resolved (an unknown one gets no rank attribute and
///   no rank-derived `service.instance.id`).
/// * `caller` holds extra attributes from the program (model name, parallel sizes …). Detected
///   attributes (host, SLURM, Kubernetes) replace caller attributes with the same key.
/// * `lookup` reads environment variables; pass the process environment in production and a map in
///   tests.
///
/// The resource never contains an error: what cannot be detected is left out. This function
/// does not panic.
#[must_use]
pub(crate) fn build_resource(
    config: &LensConfig,
    who: &Participant,
    caller: &[KeyValue],
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Resource {
    let k8s_secrets = Path::new(K8S_SECRETS_DIR).exists();
    compose(config, who, caller, lookup, k8s_secrets)
}

// ---------------------------------------------------------------------------------------------
// Composition
// ---------------------------------------------------------------------------------------------

/// [`build_resource`] with the Kubernetes secrets-directory probe passed in.
fn compose(
    config: &LensConfig,
    who: &Participant,
    caller: &[KeyValue],
    lookup: &dyn Fn(&str) -> Option<String>,
    k8s_secrets: bool,
) -> Resource {
    let mut carried = lookup(OTEL_RESOURCE_ATTRIBUTES)
        .map(|raw| carrier::parse(&raw))
        .unwrap_or_default();
    participant::restore_integers(&mut carried);

    let in_caller = |key: &str| caller.iter().any(|kv| kv.key.as_str() == key);
    let mut attrs = lens_attributes(config, who, lookup);
    attrs.extend(participant::instance_id(
        who,
        &config.identity.run_id,
        &carried,
        in_caller(semconv::SERVICE_INSTANCE_ID),
    ));
    attrs.extend_from_slice(caller);
    attrs.extend(detect_local(lookup));
    // The launcher's job identity wins over the derived one, the application's over both.
    let from_launcher = |key: &str| carried.iter().any(|kv| kv.key.as_str() == key);
    attrs.extend(
        job_identity(
            config,
            who,
            &carried,
            lookup,
            in_caller(semconv::NV_DL_RUN_UUID),
        )
        .into_iter()
        .filter(|kv| !(in_caller(kv.key.as_str()) && from_launcher(kv.key.as_str()))),
    );
    attrs.extend(detect_kubernetes(lookup, k8s_secrets));

    // Python's `Resource.create` replaces a missing or empty service.name; ours is always present
    // (layer 1), so only the last value for the key matters.
    let service_name_empty = attrs
        .iter()
        .rev()
        .find(|kv| kv.key.as_str() == semconv::SERVICE_NAME)
        .is_some_and(|kv| matches!(&kv.value, Value::String(s) if s.as_str().is_empty()));
    if service_name_empty {
        attrs.push(KeyValue::new(semconv::SERVICE_NAME, UNKNOWN_SERVICE));
    }

    Resource::builder_empty()
        .with_detector(Box::new(TelemetryResourceDetector))
        .with_attributes(carried)
        .with_attributes(attrs)
        .build()
}

/// Layers 1–4: the attributes Lens derives from its configuration and the process's rank.
fn lens_attributes(
    config: &LensConfig,
    who: &Participant,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Vec<KeyValue> {
    let mut attrs = vec![
        KeyValue::new(semconv::SERVICE_NAME, config.identity.service_name.clone()),
        KeyValue::new(semconv::SERVICE_VERSION, env!("CARGO_PKG_VERSION")),
    ];
    attrs.extend(participant::rank_attributes(who));
    if !config.identity.run_id.is_empty() {
        attrs.push(KeyValue::new(
            semconv::NEMO_RUN_ID,
            config.identity.run_id.clone(),
        ));
    }
    for (key, value) in [
        (semconv::NEMO_USER_ID, &config.identity.user),
        (semconv::WANDB_ENTITY, &config.identity.wandb_entity),
        (semconv::WANDB_PROJECT, &config.identity.wandb_project),
    ] {
        if !value.is_empty() {
            attrs.push(KeyValue::new(key, value.clone()));
        }
    }
    // `DEPLOYMENT_ENV`, when it exists, is used even if empty (and then hides `ENVIRONMENT`).
    let environment = lookup("DEPLOYMENT_ENV").or_else(|| lookup("ENVIRONMENT"));
    if let Some(environment) = non_empty(environment) {
        attrs.push(KeyValue::new(semconv::DEPLOYMENT_ENVIRONMENT, environment));
    }
    attrs
}

/// The job's identity: the Slurm attributes and `nv.dl.job.uuid` ([`slurm::detect`]: the
/// launcher's values win), and `nv.dl.run.uuid` unless the launcher or the application gave
/// it: the Slurm form, else the local form from the configured run id, `TORCHELASTIC_RUN_ID`,
/// or this process's run id.
fn job_identity(
    config: &LensConfig,
    who: &Participant,
    carried: &[KeyValue],
    lookup: &dyn Fn(&str) -> Option<String>,
    run_uuid_in_caller: bool,
) -> Vec<KeyValue> {
    let mut attrs = slurm::detect(lookup, carried);
    let inherited = attrs
        .iter()
        .any(|kv| kv.key.as_str() == semconv::NV_DL_RUN_UUID);
    if !inherited && !run_uuid_in_caller {
        let configured = who
            .run_id_configured
            .then_some(config.identity.run_id.as_str());
        let run_uuid = uuids::run_uuid(lookup, configured)
            .or_else(|| uuids::run_uuid(lookup, Some(&config.identity.run_id)));
        if let Some(uuid) = run_uuid {
            attrs.push(KeyValue::new(semconv::NV_DL_RUN_UUID, uuid));
        }
    }
    attrs
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.is_empty())
}

// ---------------------------------------------------------------------------------------------
// Run id
// ---------------------------------------------------------------------------------------------

/// 12 lowercase hex characters from 6 bytes of OS randomness.
fn random_hex12() -> String {
    let mut bytes = [0u8; 6];
    if getrandom::fill(&mut bytes).is_err() {
        bytes = fallback_random_bytes();
    }
    bytes.iter().fold(String::with_capacity(12), |mut hex, b| {
        let _ = write!(hex, "{b:02x}");
        hex
    })
}

/// Used only if the OS random source fails: std's randomly keyed SipHash over the time, the pid
/// and a counter. Unpredictable enough for a run id, and it cannot panic.
fn fallback_random_bytes() -> [u8; 6] {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);

    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    hasher.write_u128(nanos);
    hasher.write_u32(std::process::id());
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let h = hasher.finish().to_le_bytes();
    [h[0], h[1], h[2], h[3], h[4], h[5]]
}

// ---------------------------------------------------------------------------------------------
// Detectors
// ---------------------------------------------------------------------------------------------

/// `host.name`, `process.pid` and `host.gpu.count` (each omitted if undetectable).
fn detect_local(lookup: &dyn Fn(&str) -> Option<String>) -> Vec<KeyValue> {
    let mut attrs = Vec::with_capacity(3);
    if let Some(host) = hostname() {
        attrs.push(KeyValue::new(semconv::HOST_NAME, host));
    }
    attrs.push(KeyValue::new(
        semconv::PROCESS_PID,
        i64::from(std::process::id()),
    ));
    if let Some(count) = gpu_count(lookup) {
        attrs.push(KeyValue::new(semconv::HOST_GPU_COUNT, count));
    }
    attrs
}

#[cfg(unix)]
fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the pointer and length describe `buf`, which outlives the call; gethostname
    // writes at most `len` bytes into it.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast::<libc::c_char>(), buf.len()) };
    if rc != 0 {
        return None;
    }
    // POSIX does not promise NUL termination on truncation: stop at the first NUL or the end.
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..len]).into_owned())
}

#[cfg(not(unix))]
fn hostname() -> Option<String> {
    None
}

/// `CUDA_VISIBLE_DEVICES` if set (blank → 0, else the number of comma-separated entries, empty
/// ones included, as Python's `len(v.split(","))`), otherwise `nvidia-smi`.
fn gpu_count(lookup: &dyn Fn(&str) -> Option<String>) -> Option<i64> {
    if let Some(visible) = lookup("CUDA_VISIBLE_DEVICES") {
        if visible.trim().is_empty() {
            return Some(0);
        }
        return i64::try_from(visible.split(',').count()).ok();
    }
    nvidia_smi_gpu_count(lookup("PATH"), NVIDIA_SMI_TIMEOUT)
}

/// Runs `nvidia-smi --query-gpu=count --format=csv,noheader` and counts its non-empty output
/// lines (one per GPU). `None` if it is missing, fails, prints nothing or exceeds `timeout`.
fn nvidia_smi_gpu_count(path: Option<String>, timeout: Duration) -> Option<i64> {
    let deadline = Instant::now() + timeout;
    let mut command = Command::new("nvidia-smi");
    command
        .args(["--query-gpu=count", "--format=csv,noheader"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(path) = path {
        command.env("PATH", path);
    }
    let mut child = command.spawn().ok()?;

    // Read stdout on a helper thread so that neither a full pipe nor a grandchild holding the
    // pipe open can stall us past the deadline.
    let (tx, rx) = mpsc::channel();
    let reader = child.stdout.take().and_then(|stdout| {
        std::thread::Builder::new()
            .name("nemo-lens-nvidia-smi".into())
            .spawn(move || {
                let mut out = Vec::new();
                let _ = stdout.take(NVIDIA_SMI_MAX_OUTPUT).read_to_end(&mut out);
                let _ = tx.send(out);
            })
            .ok()
    });
    if reader.is_none() {
        abandon(child);
        return None;
    }

    let status = wait_until(&mut child, deadline);
    let Some(status) = status else {
        abandon(child);
        return None;
    };
    if !status.success() {
        return None;
    }
    let out = rx
        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .ok()?;
    let count = String::from_utf8_lossy(&out)
        .lines()
        .filter(|line| !line.trim().is_empty())
        .count();
    if count == 0 {
        return None;
    }
    i64::try_from(count).ok()
}

/// Polls `child` until it exits or `deadline` passes (`None` then, or on a wait error).
fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(_) => return None,
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Kills `child` and reaps it without blocking the caller: a process stuck in the driver may
/// not die at once, so a detached thread waits for it if a short grace period is not enough.
fn abandon(mut child: Child) {
    let _ = child.kill();
    if wait_until(&mut child, Instant::now() + Duration::from_millis(100)).is_some() {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("nemo-lens-reaper".into())
        .spawn(move || {
            let _ = child.wait();
        });
}

/// Kubernetes detection from downward-API variables; active if `KUBERNETES_SERVICE_HOST` is
/// non-empty or the service-account secrets directory exists.
fn detect_kubernetes(lookup: &dyn Fn(&str) -> Option<String>, k8s_secrets: bool) -> Vec<KeyValue> {
    if non_empty(lookup("KUBERNETES_SERVICE_HOST")).is_none() && !k8s_secrets {
        return Vec::new();
    }
    let mut attrs = Vec::new();
    for (vars, key) in [
        (&["K8S_NAMESPACE"][..], semconv::K8S_NAMESPACE_NAME),
        (&["K8S_POD_NAME", "HOSTNAME"][..], semconv::K8S_POD_NAME),
        (&["K8S_POD_UID"][..], semconv::K8S_POD_UID),
        (&["K8S_NODE_NAME"][..], semconv::K8S_NODE_NAME),
        (&["K8S_CONTAINER_NAME"][..], semconv::K8S_CONTAINER_NAME),
        (&["K8S_JOB_NAME"][..], semconv::K8S_JOB_NAME),
    ] {
        if let Some(value) = vars.iter().find_map(|var| non_empty(lookup(var))) {
            attrs.push(KeyValue::new(key, value));
        }
    }
    attrs
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::Key;

    fn rank(rank: u32, world_size: u32) -> Participant {
        Participant {
            rank: Some(rank),
            world_size: Some(world_size),
            legacy_rank_keys: true,
            run_id_configured: true,
        }
    }

    #[test]
    fn run_id_comes_from_config_then_slurm_then_random() {
        let slurm = |name: &str| (name == "SLURM_JOB_ID").then(|| "777".to_string());
        let none = |_: &str| None;

        assert_eq!(resolve_run_id("exp-1", &slurm), "exp-1");
        assert_eq!(resolve_run_id("", &slurm), "777");
        let random = resolve_run_id("", &none);
        assert_eq!(random.len(), 12);
        assert!(random.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')));
    }

    fn get_str(resource: &Resource, key: &'static str) -> Option<String> {
        resource
            .get(&Key::from_static_str(key))
            .map(|v| v.as_str().into_owned())
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn caller_attributes_lose_to_detected_ones() {
        let env = [("CUDA_VISIBLE_DEVICES", ""), ("DEPLOYMENT_ENV", "staging")];
        let lookup = |name: &str| {
            env.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        };
        let config = LensConfig::default().with(|c| {
            c.identity.service_name = "pretrain".into();
            c.identity.run_id = "exp-7".into();
        });
        let caller = [
            KeyValue::new(semconv::DL_TENSOR_PARALLEL_SIZE, 4_i64),
            KeyValue::new(semconv::HOST_GPU_COUNT, 8_i64), // loses: detected values win
        ];
        let res = build_resource(&config, &rank(0, 2), &caller, &lookup);

        let get = |k: &'static str| res.get(&Key::from_static_str(k));
        assert_eq!(get(semconv::SERVICE_NAME), Some("pretrain".into()));
        assert_eq!(get(semconv::NEMO_RUN_ID), Some("exp-7".into()));
        assert_eq!(
            get(semconv::SERVICE_INSTANCE_ID),
            Some("exp-7-rank0".into())
        );
        assert_eq!(get(semconv::DL_WORLD_SIZE), Some(Value::I64(2)));
        assert_eq!(get(semconv::NV_DL_WORLD_SIZE), Some(Value::I64(2)));
        assert_eq!(get(semconv::DEPLOYMENT_ENVIRONMENT), Some("staging".into()));
        assert_eq!(get(semconv::DL_TENSOR_PARALLEL_SIZE), Some(Value::I64(4)));
        assert_eq!(get(semconv::HOST_GPU_COUNT), Some(Value::I64(0)));
    }

    #[test]
    fn an_empty_run_id_omits_the_run_attributes() {
        let cuda = |k: &str| (k == "CUDA_VISIBLE_DEVICES").then(String::new);
        let res = build_resource(&LensConfig::default(), &rank(5, 8), &[], &cuda);
        assert_eq!(get_str(&res, semconv::SERVICE_INSTANCE_ID), None);
        assert_eq!(get_str(&res, semconv::NEMO_RUN_ID), None);
        assert_eq!(get_str(&res, semconv::NV_DL_RUN_UUID), None);
    }

    #[test]
    fn strict_integers_are_python_s() {
        for (text, want) in [
            (" +007 ", Some(7)),
            ("-1", Some(-1)),
            ("0", Some(0)),
            ("9223372036854775807", Some(i64::MAX)),
            ("9223372036854775808", None),
            ("1_0", None),
            ("3.5", None),
            ("1e3", None),
            ("--1", None),
            ("+", None),
            ("", None),
            ("true", None),
            ("\u{0663}", None),
        ] {
            assert_eq!(strict_integer(text), want, "{text:?}");
        }
    }

    #[test]
    fn secrets_directory_activates_kubernetes() {
        let env = |name: &str| (name == "HOSTNAME").then(|| "pod-7".to_string());
        let res = compose(&LensConfig::default(), &rank(0, 1), &[], &env, true);
        assert_eq!(
            get_str(&res, semconv::K8S_POD_NAME).as_deref(),
            Some("pod-7")
        );
        let res = compose(&LensConfig::default(), &rank(0, 1), &[], &env, false);
        assert_eq!(get_str(&res, semconv::K8S_POD_NAME), None);
    }

    #[test]
    fn empty_service_name_becomes_unknown_service() {
        let config = LensConfig::default().with(|c| c.identity.service_name = String::new());
        let res = compose(&config, &rank(0, 1), &[], &no_env, false);
        assert_eq!(
            get_str(&res, semconv::SERVICE_NAME).as_deref(),
            Some(UNKNOWN_SERVICE)
        );
    }

    #[test]
    fn fallback_random_bytes_differ() {
        assert_ne!(fallback_random_bytes(), fallback_random_bytes());
    }
}
