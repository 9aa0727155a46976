//! The newest setup API, ported from Python's `tests/test_handle.py` (its vectors and its
//! assertions): a job-scoped process without `nv.dl.run.uuid` (`derive_run_uuid(false)`),
//! `resource_attribute_defaults`, `nv.dl.role`, and `publish_resource_attributes`, whose
//! environment is read back by real child processes while the handle lives and after it.
//!
//! A test that publishes changes the process environment: it runs in a child of its own.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use nemo_lens::{LensConfig, Place, Telemetry};
use nemo_lens_test_support::child::run_in_child;
use nemo_lens_test_support::{console, example};
use opentelemetry::{Key, KeyValue, Value};
use opentelemetry_sdk::trace::InMemorySpanExporter;
use serde_json::Value as Json;

const TIMEOUT: Duration = Duration::from_secs(10);
const VAR: &str = "OTEL_RESOURCE_ATTRIBUTES";
const LOCAL_KEYS: [&str; 3] = ["host.name", "host.gpu.count", "process.pid"];

/// Python's `parse_otel_resource_attributes`: split on `,`, skip a segment without `=` or with
/// a blank key, strip the key, strip then percent-decode the value.
fn parse(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for segment in text.split(',') {
        let Some((key, value)) = segment.split_once('=') else {
            continue;
        };
        if key.trim().is_empty() {
            continue;
        }
        out.insert(key.trim().to_owned(), decode(value.trim()));
    }
    out
}

fn decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The published variable, parsed.
fn published() -> BTreeMap<String, String> {
    parse(&std::env::var(VAR).expect("OTEL_RESOURCE_ATTRIBUTES is published"))
}

/// A value as Python's `str()` prints it in the carrier.
fn python_str(value: &Value) -> String {
    match value {
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        other => other.as_str().into_owned(),
    }
}

fn as_map(attributes: &[KeyValue]) -> BTreeMap<String, String> {
    attributes
        .iter()
        .map(|kv| (kv.key.as_str().to_owned(), python_str(&kv.value)))
        .collect()
}

fn get(telemetry: &Telemetry, key: &'static str) -> Option<Value> {
    telemetry
        .resource()
        .expect("an exporting process")
        .get(&Key::from_static_str(key))
}

/// Sets (or unsets) a variable of this child process.
fn set(key: &str, value: Option<&str>) {
    // SAFETY: the test runs alone in a process of its own; no other thread reads the
    // environment meanwhile.
    unsafe {
        match value {
            Some(v) => std::env::set_var(key, v),
            None => std::env::remove_var(key),
        }
    }
}

fn config() -> LensConfig {
    LensConfig::default().with_enabled(true).with(|c| {
        c.metrics_enabled = false;
        c.export.strategy = "all_ranks".into();
    })
}

/// A builder on the process environment, exporting to memory, publishing.
fn publishing(config: LensConfig) -> nemo_lens::TelemetryBuilder {
    let builder = Telemetry::builder(config)
        .span_exporter(InMemorySpanExporter::default())
        .allow_reinit_for_testing(true);
    // SAFETY: the test runs alone in a process of its own (see `set`).
    unsafe { builder.publish_resource_attributes(true) }
}

/// The variables of a test's child: no GPU probe, no Slurm or torchrun of the machine's.
fn quiet_env() {
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("SLURM") || key.starts_with("TORCHELASTIC_") {
            set(&key, None);
        }
    }
    set("CUDA_VISIBLE_DEVICES", Some(""));
}

/// Python's `test_job_scoped_resource_excludes_run_uuid`: for every source of
/// `nv.dl.run.uuid` (derived, inherited, a default, explicit), the resource, the published
/// carrier and the handle's inheritable map carry it exactly when the run UUID is derived;
/// `nv.dl.job.uuid` and the launcher's `app.key` always; `process.pid` is this process's; the
/// variable is back after shutdown.
#[test]
fn a_job_scoped_resource_excludes_the_run_uuid() {
    run_in_child([("CUDA_VISIBLE_DEVICES", "")], || {
        quiet_env();
        set("SLURM_JOB_ID", Some("123"));
        set("SLURM_CLUSTER_NAME", Some("test"));
        let mut derived = None;
        for derive in [true, false] {
            for source in ["derived", "inherited", "default", "explicit"] {
                let case = format!("derive={derive} source={source}");
                let mut previous = String::from("app.key=keep");
                if source == "inherited" {
                    previous.push_str(",nv.dl.run.uuid=old-attempt");
                }
                set(VAR, Some(&previous));
                let mut builder = publishing(config()).derive_run_uuid(derive);
                if source == "default" {
                    builder = builder.resource_attribute_defaults([KeyValue::new(
                        "nv.dl.run.uuid",
                        "default-attempt",
                    )]);
                }
                if source == "explicit" {
                    builder = builder
                        .resource_attributes([KeyValue::new("nv.dl.run.uuid", "explicit-attempt")]);
                }
                let telemetry = builder.build().unwrap();
                let resource: BTreeMap<String, String> = telemetry
                    .resource()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.as_str().to_owned(), python_str(v)))
                    .collect();
                let carrier = published();
                let handle = as_map(telemetry.resource_attributes());
                for (place, attrs) in [
                    ("resource", &resource),
                    ("carrier", &carrier),
                    ("handle", &handle),
                ] {
                    assert_eq!(
                        attrs.contains_key("nv.dl.run.uuid"),
                        derive,
                        "{case}: {place} {attrs:?}"
                    );
                    assert!(
                        !attrs["nv.dl.job.uuid"].is_empty(),
                        "{case}: {place} {attrs:?}"
                    );
                    assert_eq!(attrs["app.key"], "keep", "{case}: {place}");
                }
                assert_eq!(carrier, handle, "{case}");
                assert_eq!(
                    resource["process.pid"],
                    std::process::id().to_string(),
                    "{case}"
                );
                if derive {
                    // Who wins: the launcher's and the application's values over the derived
                    // one, the derived one over a default.
                    let run = resource["nv.dl.run.uuid"].clone();
                    let derived_run = derived.get_or_insert_with(|| run.clone()).clone();
                    let want = match source {
                        "inherited" => "old-attempt",
                        "explicit" => "explicit-attempt",
                        _ => derived_run.as_str(),
                    };
                    assert_eq!(run, want, "{case}");
                }
                telemetry.shutdown(TIMEOUT).unwrap();
                assert_eq!(std::env::var(VAR).unwrap(), previous, "{case}");
            }
        }
    });
}

/// Python's `test_publishes_resolved_resource_map_for_handle_lifetime`: the published map is
/// the handle's map; the launcher's (invalid) rank wins over a default; the application's role
/// over the launcher's; values are percent-decoded; a second shutdown changes nothing.
#[test]
fn the_resolved_resource_is_published_for_the_handle_s_lifetime() {
    run_in_child([("CUDA_VISIBLE_DEVICES", "")], || {
        quiet_env();
        let previous = "launcher.key=with%20space,nv.dl.rank=launcher-rank,nv.dl.role=worker";
        set(VAR, Some(previous));
        let config = config().with(|c| {
            c.traces_enabled = false;
            c.identity.run_id = "run-1".into();
        });
        let telemetry = publishing(config)
            .resource_attribute_defaults([
                KeyValue::new("nv.dl.rank", 3_i64),
                KeyValue::new("nv.dl.world_size", 8_i64),
            ])
            .role("trainer")
            .place(Place::default().local_rank(0))
            .build()
            .unwrap();
        let published = published();
        assert_eq!(published, as_map(telemetry.resource_attributes()));
        assert_eq!(published["nv.dl.rank"], "launcher-rank");
        assert_eq!(published["nv.dl.role"], "trainer");
        assert_eq!(published["launcher.key"], "with space");
        assert_eq!(published["nv.dl.world_size"], "8");
        telemetry.shutdown(TIMEOUT).unwrap();
        telemetry.shutdown(TIMEOUT).unwrap();
        assert_eq!(std::env::var(VAR).unwrap(), previous);
    });
}

/// Python's `test_service_name_carrier_agrees_without_expanding_keys`: the carrier carries
/// `service.name` (the resolved one) only when the launcher's did.
#[test]
fn the_carrier_agrees_with_the_resource_without_gaining_keys() {
    run_in_child([("CUDA_VISIBLE_DEVICES", "")], || {
        quiet_env();
        for inherited in [false, true] {
            let mut previous = String::from("custom.key=with%20space");
            if inherited {
                previous.push_str(",service.name=pretraining");
            }
            set(VAR, Some(&previous));
            let config = config().with(|c| c.identity.service_name = "worker".into());
            let telemetry = publishing(config).build().unwrap();
            assert_eq!(get(&telemetry, "service.name"), Some("worker".into()));
            let carrier = published();
            let handle = as_map(telemetry.resource_attributes());
            if inherited {
                assert_eq!(carrier["service.name"], "worker");
                assert_eq!(handle["service.name"], "worker");
            } else {
                assert!(!carrier.contains_key("service.name"), "{carrier:?}");
                assert!(!handle.contains_key("service.name"), "{handle:?}");
            }
            assert_eq!(carrier["custom.key"], "with space");
            telemetry.shutdown(TIMEOUT).unwrap();
            assert_eq!(std::env::var(VAR).unwrap(), previous);
        }
    });
}

/// Python's `test_does_not_detect_or_publish_resources`: a disabled setup publishes nothing.
#[test]
fn a_disabled_setup_publishes_nothing() {
    run_in_child([("CUDA_VISIBLE_DEVICES", "")], || {
        set(VAR, Some("launcher.key=unchanged"));
        let telemetry = publishing(LensConfig::default())
            .resource_attribute_defaults([KeyValue::new("nv.dl.rank", 3_i64)])
            .build()
            .unwrap();
        assert!(telemetry.resource_attributes().is_empty());
        assert_eq!(std::env::var(VAR).unwrap(), "launcher.key=unchanged");
        drop(telemetry);
        assert_eq!(std::env::var(VAR).unwrap(), "launcher.key=unchanged");
    });
}

/// An enabled rank its export strategy leaves silent publishes too (every enabled Python
/// process does), and dropping the handle restores the variable (it was unset).
#[test]
fn a_silent_rank_publishes_and_dropping_the_handle_restores() {
    run_in_child([("CUDA_VISIBLE_DEVICES", "")], || {
        quiet_env();
        set(VAR, None);
        let config = config().with(|c| c.export.strategy = "single_rank".into());
        let telemetry = publishing(config)
            .place(Place::rank(1).of(4))
            .role("trainer")
            .build()
            .unwrap();
        assert!(!telemetry.is_exporting());
        let published = published();
        assert_eq!(published["nv.dl.rank"], "1");
        assert_eq!(published["nv.dl.world_size"], "4");
        assert_eq!(published["nv.dl.role"], "trainer");
        drop(telemetry);
        assert_eq!(std::env::var_os(VAR), None);
    });
}

/// The trainer example, inheriting this process's environment (the published variable in
/// it), exporting to `dir`; `--spawn` writes what its own child sees to `dir/seen`. Returns
/// the trainer's pid, the resource of its spans and what its child saw.
fn trainer_child(dir: &Path, args: &[&str]) -> (u32, serde_json::Map<String, Json>, String) {
    let seen = dir.join("seen");
    let spawn = format!(
        "printf %s \"$OTEL_RESOURCE_ATTRIBUTES\" > '{}'",
        seen.display()
    );
    let child = Command::new(example("trainer"))
        .env("NEMO_LENS_ENABLED", "1")
        .env("NEMO_LENS_EXPORTER", "console")
        .env("NEMO_LENS_METRICS_ENABLED", "0")
        .env("NEMO_LENS_CONSOLE_PATH", dir.join("lens.jsonl"))
        .args(["--steps", "1", "--step-ms", "0", "--spawn", &spawn])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let spans = console::spans(console::read(&dir.join("lens.jsonl")));
    assert!(!spans.is_empty(), "{stderr}");
    let resource = spans[0]["resource"]["attributes"]
        .as_object()
        .unwrap()
        .clone();
    (pid, resource, std::fs::read_to_string(seen).unwrap())
}

/// What `sh` started now sees in `OTEL_RESOURCE_ATTRIBUTES` (`None`: unset).
fn seen_by_a_child() -> Option<String> {
    let out = Command::new("sh")
        .args(["-c", "printf %s \"${OTEL_RESOURCE_ATTRIBUTES-<unset>}\""])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    (text != "<unset>").then_some(text)
}

/// Python's `test_stale_local_identity_is_replaced_and_not_inherited_by_child`, on real
/// processes: the launcher's stale `process.pid`, `host.name` and `host.gpu.count` are
/// replaced in the resource and never published; a child started while the handle lives sees
/// the published variable, a Rust rank started then takes the job's identity from it and
/// publishes without local keys in its turn; after shutdown a child sees the old value.
#[test]
fn children_inherit_the_published_identity_but_not_the_local_keys() {
    run_in_child([("CUDA_VISIBLE_DEVICES", "")], || {
        quiet_env();
        let previous = "process.pid=999,host.name=ancestor,host.gpu.count=99,nv.dl.rank=0";
        set(VAR, Some(previous));
        set("SLURM_JOB_ID", Some("4242"));
        let config = config().with(|c| c.identity.run_id = "parent".into());
        let telemetry = publishing(config).role("launcher").build().unwrap();
        assert_eq!(
            get(&telemetry, "process.pid"),
            Some(Value::I64(i64::from(std::process::id())))
        );
        let published = published();
        for key in LOCAL_KEYS {
            assert!(!published.contains_key(key), "{key} in {published:?}");
        }
        assert_eq!(
            seen_by_a_child().as_deref(),
            Some(std::env::var(VAR).unwrap().as_str())
        );

        let tmp = tempfile::tempdir().unwrap();
        let (pid, child, seen) = trainer_child(tmp.path(), &["--publish-resource"]);
        assert_eq!(child["process.pid"], Json::from(pid));
        assert_ne!(child["host.name"], Json::from("ancestor"));
        assert_eq!(child["nv.dl.rank"], Json::from(0));
        assert_eq!(child["nv.dl.role"], Json::from("launcher"));
        assert_eq!(
            child["nv.dl.job.uuid"].as_str(),
            published["nv.dl.job.uuid"].as_str().into()
        );
        assert_eq!(
            child["nv.dl.run.uuid"].as_str(),
            published["nv.dl.run.uuid"].as_str().into()
        );
        let grandchild = parse(&seen);
        for key in LOCAL_KEYS {
            assert!(!grandchild.contains_key(key), "{key} in {grandchild:?}");
        }
        assert_eq!(grandchild["nv.dl.job.uuid"], published["nv.dl.job.uuid"]);

        telemetry.shutdown(TIMEOUT).unwrap();
        assert_eq!(std::env::var(VAR).unwrap(), previous);
        assert_eq!(seen_by_a_child().as_deref(), Some(previous));
    });
}

/// NVRx's job-scoped agent: a child of a `--job-scoped` trainer inherits no run UUID, even one
/// the agent inherited, while the job UUID and the role pass.
#[test]
fn a_job_scoped_process_hands_no_run_uuid_to_its_children() {
    run_in_child([("CUDA_VISIBLE_DEVICES", "")], || {
        quiet_env();
        set("SLURM_JOB_ID", Some("123"));
        set("SLURM_CLUSTER_NAME", Some("test"));
        set(VAR, Some("nv.dl.run.uuid=stale"));
        let tmp = tempfile::tempdir().unwrap();
        let args = ["--publish-resource", "--job-scoped", "--role", "agent"];
        let (_, resource, seen) = trainer_child(tmp.path(), &args);
        assert!(resource.get("nv.dl.run.uuid").is_none(), "{resource:?}");
        assert!(
            resource["nv.dl.job.uuid"]
                .as_str()
                .is_some_and(|s| !s.is_empty())
        );
        let seen = parse(&seen);
        assert!(!seen.contains_key("nv.dl.run.uuid"), "{seen:?}");
        assert_eq!(seen["nv.dl.role"], "agent");
        assert_eq!(
            seen["nv.dl.job.uuid"],
            resource["nv.dl.job.uuid"].as_str().unwrap()
        );
    });
}

/// `resource_attribute_defaults` through the lookup (no environment change): Python's
/// `test_inherited_integer_precedence` and `test_invalid_inherited_integer_is_visible`.
#[test]
fn defaults_lose_to_the_launcher_and_to_explicit_attributes() {
    let build = |raw: &str, explicit: Option<i64>| {
        let env = [
            (VAR.to_owned(), format!("nv.dl.rank={raw}")),
            ("CUDA_VISIBLE_DEVICES".to_owned(), String::new()),
        ];
        let mut builder = Telemetry::builder(config())
            .span_exporter(InMemorySpanExporter::default())
            .allow_reinit_for_testing(true)
            .install_globals(false)
            .env_lookup(move |k| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
            .resource_attribute_defaults([KeyValue::new("nv.dl.rank", 3_i64)]);
        if let Some(rank) = explicit {
            builder = builder.resource_attributes([KeyValue::new("nv.dl.rank", rank)]);
        }
        let telemetry = builder.build().unwrap();
        let rank = get(&telemetry, "nv.dl.rank");
        telemetry.shutdown(TIMEOUT).unwrap();
        rank
    };
    for (raw, expected) in [("7", 7), (" +007 ", 7), ("-1", -1), ("0", 0)] {
        for explicit in [None, Some(11)] {
            let want = explicit.unwrap_or(expected);
            assert_eq!(
                build(raw, explicit),
                Some(Value::I64(want)),
                "{raw:?} {explicit:?}"
            );
        }
    }
    for raw in ["3.5", "true", "1e3", "1_000", "--1", "seven"] {
        assert_eq!(build(raw, None), Some(raw.into()), "{raw:?}");
    }

    // The application's job identity wins over the launcher's, which wins over a default.
    let env = [
        (VAR, "nv.dl.run.uuid=launcher-attempt,slurm.job.id=9"),
        ("CUDA_VISIBLE_DEVICES", ""),
    ];
    let telemetry = Telemetry::builder(config())
        .span_exporter(InMemorySpanExporter::default())
        .allow_reinit_for_testing(true)
        .install_globals(false)
        .env_lookup(move |k| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
        .resource_attributes([KeyValue::new("nv.dl.run.uuid", "explicit-attempt")])
        .resource_attribute_defaults([KeyValue::new("slurm.job.id", "default-job")])
        .build()
        .unwrap();
    assert_eq!(
        get(&telemetry, "nv.dl.run.uuid"),
        Some("explicit-attempt".into())
    );
    assert_eq!(get(&telemetry, "slurm.job.id"), Some("9".into()));
    telemetry.shutdown(TIMEOUT).unwrap();
}

/// A default rank and world size stand in for the launcher's: they name the instance and fill
/// the rank keys; without them, the application's place and the launcher win.
#[test]
fn a_default_rank_names_the_instance() {
    let telemetry = Telemetry::builder(config().with(|c| c.identity.run_id = "run1".into()))
        .span_exporter(InMemorySpanExporter::default())
        .allow_reinit_for_testing(true)
        .install_globals(false)
        .env_lookup(|k| (k == "CUDA_VISIBLE_DEVICES").then(String::new))
        .resource_attribute_defaults([
            KeyValue::new("nv.dl.rank", 3_i64),
            KeyValue::new("nv.dl.world_size", 8_i64),
            KeyValue::new("app.team", "infra"),
        ])
        .build()
        .unwrap();
    assert_eq!(get(&telemetry, "nv.dl.rank"), Some(Value::I64(3)));
    assert_eq!(get(&telemetry, "nv.dl.world_size"), Some(Value::I64(8)));
    assert_eq!(
        get(&telemetry, "service.instance.id"),
        Some("run1-rank3".into())
    );
    assert_eq!(get(&telemetry, "app.team"), Some("infra".into()));
    let inheritable = as_map(telemetry.resource_attributes());
    assert_eq!(inheritable["nv.dl.rank"], "3");
    assert_eq!(inheritable["app.team"], "infra");
    assert!(!inheritable.contains_key("service.instance.id"));
    telemetry.shutdown(TIMEOUT).unwrap();

    // A default loses to a detected value (here the host's name).
    let telemetry = Telemetry::builder(config())
        .span_exporter(InMemorySpanExporter::default())
        .allow_reinit_for_testing(true)
        .install_globals(false)
        .env_lookup(|k| (k == "CUDA_VISIBLE_DEVICES").then(String::new))
        .place(Place::rank(1).of(2))
        .resource_attribute_defaults([
            KeyValue::new("host.name", "default-host"),
            KeyValue::new("nv.dl.rank", 5_i64),
        ])
        .build()
        .unwrap();
    assert_ne!(get(&telemetry, "host.name"), Some("default-host".into()));
    assert_eq!(get(&telemetry, "nv.dl.rank"), Some(Value::I64(1)));
    telemetry.shutdown(TIMEOUT).unwrap();
}
