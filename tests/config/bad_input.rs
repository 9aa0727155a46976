//! Bad input: every environment variable nemo-lens reads, fed garbage (wrong type, out of
//! range, empty, blank, non-UTF-8, huge), yields its documented default or a typed error that
//! names the variable: never a panic, never a half-initialised process.
//!
//! The `NEMO_LENS_*` parsers have their own property tests in `config.rs`; here: the
//! batch and OTLP-protocol parsers, the whole setup over an arbitrary environment, a failed
//! setup leaving nothing global behind, and the trainer started with each bad variable for real.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use nemo_lens::testing::CollectingExporter;
use nemo_lens::{LensConfig, LensError, Telemetry};
use opentelemetry::trace::{Span as _, Tracer as _, TracerProvider as _};
use proptest::prelude::*;

use nemo_lens_test_support::child::{self, Child};

fn proptest_config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Arbitrary text: any Unicode, near-misses of accepted forms, blanks, and huge strings.
fn garbage() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[ \\t]{0,2}[-+_.0-9eExa-f/:]{0,24}[ \\t]{0,2}",
        prop::sample::select(vec![
            "",
            " ",
            "\t\n",
            "0",
            "-1",
            "1.5",
            "1e3",
            "nan",
            "18446744073709551616",
            "99999999999999999999999999",
            "grpc",
            "http/json",
            "HTTP/PROTOBUF ",
            "udp",
            "true",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-zz-zz-01",
            "a=b,c",
        ])
        .prop_map(str::to_string),
        ("[-+0-9a-z_.=,\\u{7f}\\u{feff}]{1,4}", 1usize..20_000).prop_map(|(s, n)| s.repeat(n)),
    ]
}

/// Every variable the setup path reads through its lookup (`NEMO_LENS_*` via the config).
const SETUP_VARS: [&str; 40] = [
    "NEMO_LENS_ENABLED",
    "NEMO_LENS_EXPORT_STRATEGY",
    "NEMO_LENS_EXPORT_RANK",
    "NEMO_LENS_EXPORT_SAMPLE_RATE",
    "NEMO_LENS_SAMPLER_ENABLED",
    "NEMO_LENS_TRACES_ENABLED",
    "NEMO_LENS_METRICS_ENABLED",
    "NEMO_LENS_LOGS_ENABLED",
    "NEMO_LENS_DETECT_GPU",
    "NEMO_LENS_NVTX",
    "NEMO_LENS_THREAD_ATTRIBUTES",
    "NEMO_LENS_LOGS_LEVEL",
    "NEMO_LENS_SPAN_GROUPS",
    "NEMO_LENS_RUN_ID",
    "NEMO_LENS_USER_ID",
    "OTEL_SERVICE_NAME",
    "WANDB_ENTITY",
    "WANDB_PROJECT",
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_BSP_EXPORT_TIMEOUT",
    "OTEL_BLRP_MAX_QUEUE_SIZE",
    "OTEL_BLRP_SCHEDULE_DELAY",
    "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_BLRP_EXPORT_TIMEOUT",
    "OTEL_METRIC_EXPORT_INTERVAL",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
    "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT",
    "TRACEPARENT",
    "TRACESTATE",
    "SLURM_JOB_ID",
    "SLURM_PROCID",
    "SLURM_NNODES",
    "DEPLOYMENT_ENV",
    "KUBERNETES_SERVICE_HOST",
    "CUDA_VISIBLE_DEVICES",
];

/// The variable a setup error names, if it is one of the typed, variable-naming errors.
fn named_variable(err: &LensError) -> Option<String> {
    match err {
        LensError::InvalidBool { var, .. }
        | LensError::InvalidInt { var, .. }
        | LensError::InvalidFloat { var, .. }
        | LensError::NotUnicode { var, .. }
        | LensError::InvalidValue { var, .. }
        | LensError::InvalidLevel { var, .. }
        | LensError::InvalidMillis { var, .. }
        | LensError::SampleRateOutOfRange { var, .. }
        | LensError::UnknownExporter { var, .. }
        | LensError::UnknownStrategy { var, .. }
        | LensError::UnknownSpanGroup { var, .. } => Some(var.clone()),
        _ => None,
    }
}

proptest! {
    #![proptest_config(proptest_config(40))]

    /// The whole setup over an arbitrary environment (every variable it reads, each unset, valid
    /// or garbage): `Ok`, or a typed error naming one of the variables. Never a panic.
    #[test]
    fn setup_over_an_arbitrary_environment_is_ok_or_a_named_error(
        values in prop::collection::vec(prop::option::of(garbage()), SETUP_VARS.len()),
    ) {
        let mut env: HashMap<String, String> = SETUP_VARS
            .iter()
            .zip(values)
            .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
            .collect();
        // Keep `nvidia-smi` out of it (it is looked up on PATH when this is unset).
        env.entry("CUDA_VISIBLE_DEVICES".into()).or_default();
        let lookup = move |k: &str| env.get(k).cloned();
        let config = match LensConfig::from_lookup("NEMO_LENS", None, &lookup) {
            Ok(c) => c,
            Err(e) => {
                let var = named_variable(&e);
                prop_assert!(var.is_some_and(|v| SETUP_VARS.contains(&v.as_str())), "{:?}", e);
                return Ok(());
            }
        };
        // Metric and log pipelines would export over OTLP to nothing; their variables are still
        // read (on the exporting rank; here every rank exports unless the strategy says otherwise).
        let built = Telemetry::builder(config.with(|c| { c.metrics_enabled = false; c.logs_enabled = false; }))
            .span_exporter(CollectingExporter::default())
            .env_lookup(lookup)
            .allow_reinit_for_testing(true)
            .build();
        match built {
            Ok(t) => t.shutdown(Duration::from_secs(10)).unwrap(),
            Err(e) => {
                let var = named_variable(&e);
                prop_assert!(var.is_some_and(|v| SETUP_VARS.contains(&v.as_str())), "{:?}", e);
            }
        }
    }
}

/// Whether the global tracer provider records (it is the no-op one until a setup succeeds).
fn global_tracer_records() -> bool {
    let mut span = opentelemetry::global::tracer_provider()
        .tracer("probe")
        .start("probe");
    let recording = span.is_recording();
    span.end();
    recording
}

/// A setup that fails (bad batch variable, unopenable console file, bad OTLP protocol, unknown
/// strategy) leaves
/// nothing global behind: no tracer provider, no span groups, no armed double-init guard; a
/// later good setup then works. Runs in a fresh process (the state is process-wide).
#[test]
fn a_failed_setup_leaves_no_global_state_and_a_later_good_one_works() {
    if !child::is_child() {
        Child::this_test().run_passing();
        return;
    }
    // Traces only: the point is the global tracer provider and span groups (a default metric
    // pipeline would export over OTLP to a collector that is not there).
    let enabled = || {
        LensConfig::default().with_enabled(true).with(|c| {
            c.export.strategy = "all_ranks".into();
            c.groups.span_groups = "per_step".into();
            c.metrics_enabled = false;
        })
    };
    let no_env = |_: &str| None::<String>;
    // A path below a regular file can be neither created nor opened.
    let file = tempfile::NamedTempFile::new().unwrap();
    let unopenable = format!("{}/sub/{{rank}}.jsonl", file.path().display());
    let failures = [
        Telemetry::builder(enabled())
            .span_exporter(CollectingExporter::default())
            .env_lookup(|k| (k == "OTEL_BSP_MAX_QUEUE_SIZE").then(|| "many".into()))
            .build()
            .unwrap_err(),
        Telemetry::builder(enabled().with(|c| {
            c.export.exporter = nemo_lens::ExporterKind::Console;
            c.export.console_path = Some(unopenable);
        }))
        .env_lookup(no_env)
        .build()
        .unwrap_err(),
        Telemetry::builder(enabled())
            .env_lookup(|k| (k == "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").then(|| "thrift".into()))
            .build()
            .unwrap_err(),
        Telemetry::builder(enabled().with(|c| c.export.strategy = "every_other_rank".into()))
            .span_exporter(CollectingExporter::default())
            .env_lookup(no_env)
            .build()
            .unwrap_err(),
    ];
    for (err, var) in failures.iter().zip([
        "OTEL_BSP_MAX_QUEUE_SIZE",
        "NEMO_LENS_CONSOLE_PATH",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "export.strategy",
    ]) {
        assert!(err.to_string().contains(var), "{err}");
        assert!(
            !global_tracer_records(),
            "a tracer provider was installed by: {err}"
        );
        assert!(
            !nemo_lens::groups::is_span_group_enabled("step"),
            "span groups installed by: {err}"
        );
    }
    // No guard was armed: a good setup works without the test-only escape hatch.
    let exporter = CollectingExporter::default();
    let telemetry = Telemetry::builder(enabled())
        .span_exporter(exporter.clone())
        .env_lookup(no_env)
        .build()
        .expect("a good setup after failed ones");
    assert!(global_tracer_records());
    assert!(nemo_lens::groups::is_span_group_enabled("step"));
    telemetry.shutdown(Duration::from_secs(10)).unwrap();
}

/// The trainer, started with one bad variable at a time in its real environment, either runs
/// (the variable fell back to its documented default; exit 0) or stops with the error naming
/// the variable (exit 2). It never panics or dies by a signal. Values: wrong type, out of
/// range, empty, blank, non-UTF-8, huge (100 KiB).
#[test]
fn the_trainer_survives_each_bad_variable_in_its_environment() {
    // Everything the setup reads, plus what only a real process exercises (the console file,
    // the OTLP exporters' own variables).
    let vars: Vec<&str> = SETUP_VARS
        .iter()
        .copied()
        .chain([
            "NEMO_LENS_EXPORTER",
            "NEMO_LENS_CONSOLE_PATH",
            "LOCAL_RANK",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
            "OTEL_EXPORTER_OTLP_HEADERS",
        ])
        .collect();
    let values: Vec<OsString> = vec![
        "".into(),
        "  \t ".into(),
        "definitely not a value".into(),
        "-99999999999999999999".into(),
        OsString::from_vec(vec![b'1', 0xff, 0xfe, b'x']),
        "z".repeat(100 * 1024).into(),
    ];
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("spans.jsonl");
    let mut runs = 0;
    for &var in &vars {
        for value in &values {
            let otlp = var.starts_with("OTEL_EXPORTER_OTLP");
            // Each pipeline on when the variable is one of its own, so it is read for real.
            let metrics = var.contains("METRIC");
            let logs = var.contains("LOGS") || var.starts_with("OTEL_BLRP");
            let out = Child::example("trainer")
                .env_remove_prefix("SLURM_")
                .env("NEMO_LENS_ENABLED", "1")
                .env("NEMO_LENS_EXPORT_STRATEGY", "all_ranks")
                .env("NEMO_LENS_METRICS_ENABLED", if metrics { "1" } else { "0" })
                .env("NEMO_LENS_LOGS_ENABLED", if logs { "1" } else { "0" })
                .env("NEMO_LENS_EXPORTER", if otlp { "otlp" } else { "console" })
                .env("NEMO_LENS_CONSOLE_PATH", &out_file)
                // Nothing listens there: exports fail at once.
                .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
                .env("CUDA_VISIBLE_DEVICES", "0")
                .env(var, value)
                .args(["--steps", "1", "--step-ms", "0"])
                // A garbage NEMO_LENS_CONSOLE_PATH is a relative file name: keep it out of the
                // source tree.
                .current_dir(dir.path())
                .run();
            runs += 1;
            let stderr = String::from_utf8_lossy(&out.stderr);
            let shown = value.to_string_lossy().chars().take(40).collect::<String>();
            assert_eq!(
                out.status.signal(),
                None,
                "{var}={shown:?}: killed\n{stderr}"
            );
            assert!(
                !stderr.contains("panicked"),
                "{var}={shown:?}: panicked\n{stderr}"
            );
            match out.status.code() {
                Some(0) => {}
                Some(2) => assert!(
                    stderr.contains(var),
                    "{var}={shown:?}: the error does not name the variable\n{stderr}"
                ),
                other => panic!("{var}={shown:?}: exit {other:?}\n{stderr}"),
            }
        }
    }
    assert_eq!(runs, vars.len() * values.len());
}
