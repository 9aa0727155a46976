//! `LensConfig` parsing: the variable names, defaults and rules of the Python `NemoLensConfig`
//! (spec §2.1), read through `LensConfig::from_lookup` with in-memory maps, plus one test of
//! `from_env_with_fallback` against the process environment (non-UTF-8 values), in a process of
//! its own.

use std::collections::HashMap;

use nemo_lens::{ExporterKind, LensConfig, LensError, Place, Telemetry};
use proptest::prelude::*;

use nemo_lens_test_support::child;

const BOOL_KEYS: [&str; 8] = [
    "ENABLED",
    "SAMPLER_ENABLED",
    "TRACES_ENABLED",
    "METRICS_ENABLED",
    "LOGS_ENABLED",
    "DETECT_GPU",
    "NVTX",
    "THREAD_ATTRIBUTES",
];

const TRUE_WORDS: [&str; 4] = ["1", "true", "yes", "on"];
const FALSE_WORDS: [&str; 4] = ["0", "false", "no", "off"];

/// `NEMO_LENS_<key>=text`, read as the crate reads it; `field` picks the value. A blank `text`
/// is unset, so the field keeps its default.
fn read<T>(key: &str, text: &str, field: impl Fn(&LensConfig) -> T) -> nemo_lens::Result<T> {
    let var = format!("NEMO_LENS_{key}");
    LensConfig::from_lookup("NEMO_LENS", None, |k| (k == var).then(|| text.to_string()))
        .map(|cfg| field(&cfg))
}

/// A boolean variable (`NEMO_LENS_ENABLED`).
fn parse_bool(text: &str) -> nemo_lens::Result<bool> {
    read("ENABLED", text, |c| c.enabled)
}

/// An integer variable (`NEMO_LENS_EXPORT_RANK`): the rank, or `-1` for the last rank (any
/// negative number).
fn parse_int(text: &str) -> nemo_lens::Result<i64> {
    read("EXPORT_RANK", text, |c| c.export.rank.map_or(-1, i64::from))
}

/// What `NEMO_LENS_EXPORT_RANK` makes of an integer `n`: `-1` (the last rank) for a negative
/// one, `n` for a rank, `None` (an error naming the variable) above the largest rank.
fn as_rank(n: i64) -> Option<i64> {
    match n {
        ..0 => Some(-1),
        n if n <= i64::from(u32::MAX) => Some(n),
        _ => None,
    }
}

/// A float variable (`NEMO_LENS_EXPORT_SAMPLE_RATE`, which must also lie in `[0, 1]`).
fn parse_float(text: &str) -> nemo_lens::Result<f64> {
    read("EXPORT_SAMPLE_RATE", text, |c| c.export.sample_rate)
}

/// How an error message shows a value: stripped, at most 64 characters, `…` when cut.
fn shown(text: &str) -> String {
    let t = text.trim();
    let mut out: String = t.chars().take(64).collect();
    if t.chars().count() > 64 {
        out.push('…');
    }
    out
}

/// Reads the configuration from `vars` only.
fn load(
    prefix: &str,
    fallback: Option<&str>,
    vars: &[(&str, &str)],
) -> nemo_lens::Result<LensConfig> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    LensConfig::from_lookup(prefix, fallback, |k| map.get(k).cloned())
}

fn load_ok(prefix: &str, fallback: Option<&str>, vars: &[(&str, &str)]) -> LensConfig {
    load(prefix, fallback, vars).unwrap_or_else(|e| panic!("unexpected error for {vars:?}: {e}"))
}

fn load_err(prefix: &str, fallback: Option<&str>, vars: &[(&str, &str)]) -> LensError {
    match load(prefix, fallback, vars) {
        Ok(cfg) => panic!("expected an error for {vars:?}, got {cfg:?}"),
        Err(e) => e,
    }
}

fn bool_field(cfg: &LensConfig, key: &str) -> bool {
    match key {
        "ENABLED" => cfg.enabled,
        "SAMPLER_ENABLED" => cfg.export.sampler,
        "TRACES_ENABLED" => cfg.traces_enabled,
        "METRICS_ENABLED" => cfg.metrics_enabled,
        "LOGS_ENABLED" => cfg.logs_enabled,
        "DETECT_GPU" => cfg.detect_gpu,
        "NVTX" => cfg.nvtx,
        "THREAD_ATTRIBUTES" => cfg.groups.thread_attributes,
        other => panic!("not a boolean key: {other}"),
    }
}

/// Flips the ASCII case of the characters at odd positions ("true" -> "tRuE").
fn mixed_case(s: &str) -> String {
    s.chars()
        .enumerate()
        .map(|(i, c)| {
            if i % 2 == 1 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect()
}

#[test]
fn defaults_when_nothing_is_set() {
    let cfg = load_ok("NEMO_LENS", None, &[]);
    assert_eq!(cfg, LensConfig::default());
    assert!(!cfg.enabled);
    assert_eq!(cfg.identity.service_name, "nemo");
    assert_eq!(cfg.export.strategy, "single_rank");
    assert_eq!(cfg.export.rank, None);
    assert_eq!(cfg.export.sample_rate, 1.0);
    assert!(!cfg.export.sampler);
    assert!(cfg.traces_enabled);
    assert!(cfg.metrics_enabled);
    assert!(!cfg.logs_enabled);
    assert_eq!(cfg.groups.span_groups, "default");
    assert_eq!(cfg.export.exporter, ExporterKind::Otlp);
    assert_eq!(cfg.identity.run_id, "");
    assert_eq!(cfg.identity.user, "");
    assert_eq!(cfg.identity.wandb_entity, "");
    assert_eq!(cfg.identity.wandb_project, "");
    assert_eq!(cfg.export.console_path, None);
    // Same with a fallback prefix and nothing set under either.
    assert_eq!(
        load_ok("MEGATRON_OTEL", Some("NEMO_LENS"), &[]),
        LensConfig::default()
    );
}

#[test]
fn every_field_from_the_environment() {
    let cfg = load_ok(
        "NEMO_LENS",
        None,
        &[
            ("NEMO_LENS_ENABLED", "true"),
            ("NEMO_LENS_SAMPLER_ENABLED", "yes"),
            ("NEMO_LENS_TRACES_ENABLED", "off"),
            ("NEMO_LENS_METRICS_ENABLED", "0"),
            ("NEMO_LENS_LOGS_ENABLED", "on"),
            ("NEMO_LENS_LOGS_LEVEL", " Warning "),
            ("NEMO_LENS_EXPORT_STRATEGY", " sampled "),
            ("NEMO_LENS_EXPORT_RANK", " 5 "),
            ("NEMO_LENS_EXPORT_SAMPLE_RATE", "0.25"),
            ("NEMO_LENS_SPAN_GROUPS", " per_step,Checkpoint "),
            ("NEMO_LENS_EXPORTER", "console"),
            ("NEMO_LENS_RUN_ID", " run-42 "),
            ("NEMO_LENS_USER_ID", " alice "),
            ("NEMO_LENS_CONSOLE_PATH", " /tmp/lens-{rank}.jsonl "),
            ("OTEL_SERVICE_NAME", " trainer "),
            ("WANDB_ENTITY", "team"),
            ("WANDB_PROJECT", "llm"),
        ],
    );
    let expected = LensConfig::default().with_enabled(true).with(|c| {
        c.identity.service_name = "trainer".into();
        c.export.strategy = "sampled".into();
        c.export.rank = Some(5);
        c.export.sample_rate = 0.25;
        c.export.sampler = true;
        c.traces_enabled = false;
        c.metrics_enabled = false;
        c.logs_enabled = true;
        c.logs_level = tracing_core::LevelFilter::WARN;
        c.groups.span_groups = "per_step,Checkpoint".into();
        c.export.exporter = ExporterKind::Console;
        c.identity.run_id = "run-42".into();
        c.identity.user = "alice".into();
        c.identity.wandb_entity = "team".into();
        c.identity.wandb_project = "llm".into();
        c.export.console_path = Some("/tmp/lens-{rank}.jsonl".into());
    });
    assert_eq!(cfg, expected);
}

#[test]
fn custom_prefix_without_fallback_ignores_other_prefixes() {
    let vars = [
        ("NEMO_LENS_ENABLED", "1"),
        ("NEMO_LENS_EXPORT_RANK", "3"),
        ("NEMO_LENS_SPAN_GROUPS", "per_step"),
        ("MEGATRON_OTEL_EXPORT_STRATEGY", "all_ranks"),
    ];
    let cfg = load_ok("MEGATRON_OTEL", None, &vars);
    assert!(!cfg.enabled);
    assert_eq!(cfg.export.rank, None);
    assert_eq!(cfg.groups.span_groups, "default");
    assert_eq!(cfg.export.strategy, "all_ranks");
}

#[test]
fn empty_or_whitespace_value_means_unset() {
    let keys = [
        "ENABLED",
        "SAMPLER_ENABLED",
        "TRACES_ENABLED",
        "METRICS_ENABLED",
        "LOGS_ENABLED",
        "EXPORT_STRATEGY",
        "EXPORT_RANK",
        "EXPORT_SAMPLE_RATE",
        "SPAN_GROUPS",
        "EXPORTER",
        "RUN_ID",
        "USER_ID",
        "CONSOLE_PATH",
    ];
    for blank in ["", " ", "\t", " \t\n\r "] {
        let names: Vec<String> = keys.iter().map(|k| format!("NEMO_LENS_{k}")).collect();
        let mut vars: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), blank)).collect();
        vars.push(("OTEL_SERVICE_NAME", blank));
        let cfg = load_ok("NEMO_LENS", None, &vars);
        // Every field keeps its default, including `service_name` (blank -> "nemo").
        assert_eq!(cfg, LensConfig::default(), "blank value {blank:?}");
    }
}

#[test]
fn fallback_prefix_is_used_only_when_primary_is_empty() {
    // Primary set: the primary wins, the fallback is ignored.
    let cfg = load_ok(
        "MEGATRON_OTEL",
        Some("NEMO_LENS"),
        &[
            ("MEGATRON_OTEL_ENABLED", "false"),
            ("NEMO_LENS_ENABLED", "true"),
            ("MEGATRON_OTEL_EXPORT_STRATEGY", "all_ranks"),
            ("NEMO_LENS_EXPORT_STRATEGY", "sampled"),
            ("MEGATRON_OTEL_SPAN_GROUPS", "per_step"),
            ("NEMO_LENS_SPAN_GROUPS", "verbose"),
            ("MEGATRON_OTEL_EXPORT_RANK", "2"),
            ("NEMO_LENS_EXPORT_RANK", "9"),
            ("MEGATRON_OTEL_USER_ID", "primary-user"),
            ("NEMO_LENS_USER_ID", "fallback-user"),
        ],
    );
    assert!(!cfg.enabled);
    assert_eq!(cfg.export.strategy, "all_ranks");
    assert_eq!(cfg.groups.span_groups, "per_step");
    assert_eq!(cfg.export.rank, Some(2));
    assert_eq!(cfg.identity.user, "primary-user");

    // Primary unset, empty or blank: the fallback is read.
    for primary in [None, Some(""), Some("   ")] {
        let mut vars = vec![
            ("NEMO_LENS_ENABLED", "true"),
            ("NEMO_LENS_EXPORT_STRATEGY", "sampled"),
            ("NEMO_LENS_SPAN_GROUPS", "verbose"),
            ("NEMO_LENS_EXPORT_RANK", "9"),
            ("NEMO_LENS_EXPORT_SAMPLE_RATE", "0.5"),
            ("NEMO_LENS_EXPORTER", "console"),
            ("NEMO_LENS_RUN_ID", "fb-run"),
            ("NEMO_LENS_USER_ID", "fallback-user"),
            ("NEMO_LENS_CONSOLE_PATH", "/tmp/fb.jsonl"),
        ];
        if let Some(p) = primary {
            for key in [
                "MEGATRON_OTEL_ENABLED",
                "MEGATRON_OTEL_EXPORT_STRATEGY",
                "MEGATRON_OTEL_SPAN_GROUPS",
                "MEGATRON_OTEL_EXPORT_RANK",
                "MEGATRON_OTEL_EXPORT_SAMPLE_RATE",
                "MEGATRON_OTEL_EXPORTER",
                "MEGATRON_OTEL_RUN_ID",
                "MEGATRON_OTEL_USER_ID",
                "MEGATRON_OTEL_CONSOLE_PATH",
            ] {
                vars.push((key, p));
            }
        }
        let cfg = load_ok("MEGATRON_OTEL", Some("NEMO_LENS"), &vars);
        assert!(cfg.enabled, "primary {primary:?}");
        assert_eq!(cfg.export.strategy, "sampled");
        assert_eq!(cfg.groups.span_groups, "verbose");
        assert_eq!(cfg.export.rank, Some(9));
        assert_eq!(cfg.export.sample_rate, 0.5);
        assert_eq!(cfg.export.exporter, ExporterKind::Console);
        assert_eq!(cfg.identity.run_id, "fb-run");
        assert_eq!(cfg.identity.user, "fallback-user");
        assert_eq!(cfg.export.console_path.as_deref(), Some("/tmp/fb.jsonl"));
    }

    // A blank fallback is unset too.
    let cfg = load_ok(
        "MEGATRON_OTEL",
        Some("NEMO_LENS"),
        &[
            ("NEMO_LENS_EXPORT_STRATEGY", "  "),
            ("NEMO_LENS_ENABLED", ""),
        ],
    );
    assert_eq!(cfg, LensConfig::default());
}

#[test]
fn bad_boolean_names_the_primary_variable_even_from_the_fallback() {
    for key in BOOL_KEYS {
        let primary = format!("MEGATRON_OTEL_{key}");
        let fallback = format!("NEMO_LENS_{key}");
        for var_set in [&primary, &fallback] {
            let err = load_err(
                "MEGATRON_OTEL",
                Some("NEMO_LENS"),
                &[(var_set.as_str(), " maybe ")],
            );
            match &err {
                LensError::InvalidBool { var, value } => {
                    assert_eq!(var, &primary, "set {var_set}");
                    assert_eq!(value.trim(), "maybe");
                }
                other => panic!("expected InvalidBool for {var_set}, got {other:?}"),
            }
            let msg = err.to_string();
            assert!(msg.contains(&primary), "{msg}");
            assert!(msg.contains("maybe"), "{msg}");
            assert!(
                msg.contains("'1'/'0', 'true'/'false', 'yes'/'no', 'on'/'off'"),
                "{msg}"
            );
        }
    }
}

#[test]
fn bad_int_and_float_name_the_primary_variable_even_from_the_fallback() {
    for set in ["MEGATRON_OTEL_EXPORT_RANK", "NEMO_LENS_EXPORT_RANK"] {
        let err = load_err("MEGATRON_OTEL", Some("NEMO_LENS"), &[(set, "1.5")]);
        match &err {
            LensError::InvalidInt { var, value } => {
                assert_eq!(var, "MEGATRON_OTEL_EXPORT_RANK", "set {set}");
                assert_eq!(value, "1.5");
            }
            other => panic!("expected InvalidInt, got {other:?}"),
        }
        assert!(err.to_string().contains("MEGATRON_OTEL_EXPORT_RANK"));
    }
    for set in ["MEGATRON_OTEL_LOGS_LEVEL", "NEMO_LENS_LOGS_LEVEL"] {
        let err = load_err("MEGATRON_OTEL", Some("NEMO_LENS"), &[(set, "chatty")]);
        match &err {
            LensError::InvalidLevel { var, value } => {
                assert_eq!(var, "MEGATRON_OTEL_LOGS_LEVEL", "set {set}");
                assert_eq!(value, "chatty");
            }
            other => panic!("expected InvalidLevel, got {other:?}"),
        }
        let text = err.to_string();
        assert!(
            text.contains("MEGATRON_OTEL_LOGS_LEVEL") && text.contains("'warn'"),
            "{text}"
        );
    }
    for set in [
        "MEGATRON_OTEL_EXPORT_SAMPLE_RATE",
        "NEMO_LENS_EXPORT_SAMPLE_RATE",
    ] {
        let err = load_err("MEGATRON_OTEL", Some("NEMO_LENS"), &[(set, "half")]);
        match &err {
            LensError::InvalidFloat { var, value } => {
                assert_eq!(var, "MEGATRON_OTEL_EXPORT_SAMPLE_RATE", "set {set}");
                assert_eq!(value, "half");
            }
            other => panic!("expected InvalidFloat, got {other:?}"),
        }
        assert!(err.to_string().contains("MEGATRON_OTEL_EXPORT_SAMPLE_RATE"));

        let err = load_err("MEGATRON_OTEL", Some("NEMO_LENS"), &[(set, "2")]);
        match &err {
            LensError::SampleRateOutOfRange { var, value } => {
                assert_eq!(var, "MEGATRON_OTEL_EXPORT_SAMPLE_RATE", "set {set}");
                assert_eq!(*value, 2.0);
            }
            other => panic!("expected SampleRateOutOfRange, got {other:?}"),
        }
    }
}

#[test]
fn full_boolean_vocabulary_in_mixed_case() {
    for key in BOOL_KEYS {
        let var = format!("NEMO_LENS_{key}");
        for (words, expected) in [(TRUE_WORDS, true), (FALSE_WORDS, false)] {
            for word in words {
                for spelled in [
                    word.to_string(),
                    word.to_ascii_uppercase(),
                    mixed_case(word),
                    format!("  {}\t", mixed_case(&word.to_ascii_uppercase())),
                ] {
                    let cfg = load_ok("NEMO_LENS", None, &[(var.as_str(), spelled.as_str())]);
                    assert_eq!(bool_field(&cfg, key), expected, "{var}={spelled:?}");
                    assert_eq!(parse_bool(&spelled).unwrap(), expected);
                }
            }
        }
        // Outside the vocabulary.
        for bad in [
            "2", "-1", "y", "n", "t", "f", "enable", "truee", "o n", "null", "１",
        ] {
            let err = load_err("NEMO_LENS", None, &[(var.as_str(), bad)]);
            assert!(
                matches!(&err, LensError::InvalidBool { var: v, .. } if *v == var),
                "{var}={bad:?}: {err:?}"
            );
        }
    }
}

#[test]
fn service_name_is_bare_stripped_and_empty_means_nemo() {
    assert_eq!(
        load_ok("NEMO_LENS", None, &[("OTEL_SERVICE_NAME", "  my-svc \n")])
            .identity
            .service_name,
        "my-svc"
    );
    assert_eq!(
        load_ok("NEMO_LENS", None, &[("OTEL_SERVICE_NAME", "")])
            .identity
            .service_name,
        "nemo"
    );
    assert_eq!(
        load_ok("NEMO_LENS", None, &[("OTEL_SERVICE_NAME", " \t ")])
            .identity
            .service_name,
        "nemo"
    );
    // Never read under a prefix.
    let cfg = load_ok(
        "MEGATRON_OTEL",
        Some("NEMO_LENS"),
        &[
            ("MEGATRON_OTEL_OTEL_SERVICE_NAME", "a"),
            ("MEGATRON_OTEL_SERVICE_NAME", "b"),
            ("NEMO_LENS_SERVICE_NAME", "c"),
        ],
    );
    assert_eq!(cfg.identity.service_name, "nemo");
}

#[test]
fn wandb_values_are_bare_and_not_stripped() {
    let cfg = load_ok(
        "MEGATRON_OTEL",
        Some("NEMO_LENS"),
        &[
            ("WANDB_ENTITY", "  my team "),
            ("WANDB_PROJECT", "\tproj\n"),
        ],
    );
    assert_eq!(cfg.identity.wandb_entity, "  my team ");
    assert_eq!(cfg.identity.wandb_project, "\tproj\n");
    // Prefixed spellings are not read.
    let cfg = load_ok(
        "MEGATRON_OTEL",
        Some("NEMO_LENS"),
        &[
            ("MEGATRON_OTEL_WANDB_ENTITY", "x"),
            ("NEMO_LENS_WANDB_PROJECT", "y"),
        ],
    );
    assert_eq!(cfg.identity.wandb_entity, "");
    assert_eq!(cfg.identity.wandb_project, "");
}

#[test]
fn user_comes_from_user_id_not_user() {
    let cfg = load_ok("NEMO_LENS", None, &[("NEMO_LENS_USER", "bob")]);
    assert_eq!(cfg.identity.user, "");
    let cfg = load_ok(
        "NEMO_LENS",
        None,
        &[("NEMO_LENS_USER", "bob"), ("NEMO_LENS_USER_ID", " alice ")],
    );
    assert_eq!(cfg.identity.user, "alice");
    // `USER` from the login environment is not read either.
    let cfg = load_ok("NEMO_LENS", None, &[("USER", "root")]);
    assert_eq!(cfg.identity.user, "");
}

#[test]
fn sample_rate_must_lie_in_unit_interval() {
    let var = "NEMO_LENS_EXPORT_SAMPLE_RATE";
    for (text, value) in [
        ("0", 0.0),
        ("0.0", 0.0),
        ("1", 1.0),
        ("1.0", 1.0),
        (" 0.1 ", 0.1),
        ("1e-3", 0.001),
        (".5", 0.5),
    ] {
        let cfg = load_ok("NEMO_LENS", None, &[(var, text)]);
        assert_eq!(cfg.export.sample_rate, value, "{text:?}");
    }
    for (text, value) in [
        ("1.5", 1.5),
        ("-0.1", -0.1),
        ("1.0000001", 1.0000001),
        ("100", 100.0),
        ("-1e300", -1e300),
    ] {
        let err = load_err("NEMO_LENS", None, &[(var, text)]);
        match &err {
            LensError::SampleRateOutOfRange { var: v, value: got } => {
                assert_eq!(v, var);
                assert_eq!(*got, value);
            }
            other => panic!("{text:?}: expected SampleRateOutOfRange, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.contains(var), "{msg}");
        assert!(msg.contains("[0.0, 1.0]"), "{msg}");
    }
    // Not numbers, or not finite: a float error, not a range error.
    for text in [
        "nan", "NaN", "inf", "-inf", "infinity", "1e999", "abc", "0.5.1",
    ] {
        let err = load_err("NEMO_LENS", None, &[(var, text)]);
        assert!(
            matches!(&err, LensError::InvalidFloat { var: v, value } if v == var && value == text),
            "{text:?}: {err:?}"
        );
    }
}

#[test]
fn unknown_exporter_names_the_variable_and_the_accepted_values() {
    for (text, kind) in [
        ("otlp", ExporterKind::Otlp),
        ("console", ExporterKind::Console),
        (" console ", ExporterKind::Console),
    ] {
        let cfg = load_ok("NEMO_LENS", None, &[("NEMO_LENS_EXPORTER", text)]);
        assert_eq!(cfg.export.exporter, kind, "{text:?}");
    }
    // Only the exporting rank builds an exporter: reading the environment accepts any name
    // (the default stays), and the exporting rank's setup names the variable and the value.
    let build = |cfg: LensConfig, rank: u32| {
        Telemetry::builder(
            cfg.with_enabled(true)
                .with(|c| c.export.strategy = "single_rank".into()),
        )
        .place(Place::rank(rank).of(2))
        .allow_reinit_for_testing(true)
        .build()
    };
    for bad in ["zipkin", "jaeger", "otlp-http", "stdout", "con sole"] {
        let cfg = load_ok("NEMO_LENS", None, &[("NEMO_LENS_EXPORTER", bad)]);
        assert_eq!(cfg.export.exporter, ExporterKind::Otlp);
        let quiet = build(cfg.clone(), 0).expect("a non-exporting rank ignores the exporter");
        assert!(!quiet.is_exporting());
        let err = build(cfg, 1).unwrap_err();
        match &err {
            LensError::UnknownExporter { var, value } => {
                assert_eq!(var, "NEMO_LENS_EXPORTER");
                assert_eq!(value, bad);
            }
            other => panic!("{bad:?}: expected UnknownExporter, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.contains("NEMO_LENS_EXPORTER"), "{msg}");
        assert!(msg.contains(bad), "{msg}");
        assert!(msg.contains("'otlp'"), "{msg}");
        assert!(msg.contains("'console'"), "{msg}");
    }
    // From the fallback: the error names the variable the value was read from.
    let cfg = load_ok(
        "MEGATRON_OTEL",
        Some("NEMO_LENS"),
        &[("NEMO_LENS_EXPORTER", "zipkin")],
    );
    let err = build(cfg, 1).unwrap_err();
    assert!(
        matches!(&err, LensError::UnknownExporter { var, value } if var == "NEMO_LENS_EXPORTER" && value == "zipkin"),
        "{err:?}"
    );
    // Set in code afterwards: the setter wins.
    let cfg = load_ok("NEMO_LENS", None, &[("NEMO_LENS_EXPORTER", "zipkin")]).with(|c| {
        c.export.exporter = ExporterKind::Console;
        c.export.console_path = Some("/dev/null".into());
    });
    assert!(build(cfg, 1).is_ok());
}

/// The setup error for a bad strategy read through `vars` (prefix `MEGATRON_OTEL`, fallback
/// `NEMO_LENS`), and whether the setup with the groups of `vars` (and a good strategy) builds.
fn setup_errors(vars: &[(&str, &str)]) -> (String, bool) {
    let cfg = load_ok("MEGATRON_OTEL", Some("NEMO_LENS"), vars);
    let build = |cfg: LensConfig| {
        Telemetry::builder(cfg.with_enabled(true))
            .allow_reinit_for_testing(true)
            .build()
    };
    let mut good_strategy = cfg.clone();
    good_strategy.export.strategy = "all_ranks".into();
    let mut good_groups = cfg;
    good_groups.groups.span_groups = "default".into();
    (
        build(good_groups).unwrap_err().to_string(),
        build(good_strategy).is_ok(),
    )
}

#[test]
fn setup_errors_name_the_variable_strategy_and_span_groups_came_from() {
    // An unknown span group is another process's group: a warning, not an error (see
    // tests/spans/groups.rs); the strategy error names its variable.
    let (strategy, groups_ok) = setup_errors(&[
        ("MEGATRON_OTEL_EXPORT_STRATEGY", "no_such_strategy"),
        ("NEMO_LENS_SPAN_GROUPS", "no_such_group"),
    ]);
    assert!(
        strategy.contains("(from MEGATRON_OTEL_EXPORT_STRATEGY)"),
        "{strategy}"
    );
    assert!(groups_ok);
    let (strategy, groups_ok) = setup_errors(&[
        ("NEMO_LENS_EXPORT_STRATEGY", "no_such_strategy"),
        ("MEGATRON_OTEL_SPAN_GROUPS", "no_such_group"),
    ]);
    assert!(
        strategy.contains("(from NEMO_LENS_EXPORT_STRATEGY)"),
        "{strategy}"
    );
    assert!(groups_ok);
    // Set in code: the error names the field.
    let err = Telemetry::builder(
        LensConfig::default()
            .with_enabled(true)
            .with(|c| c.export.strategy = "no_such_strategy".into()),
    )
    .allow_reinit_for_testing(true)
    .build()
    .unwrap_err()
    .to_string();
    assert!(err.contains("(from export.strategy)"), "{err}");
    // Read from a variable, then changed in code: the error names the setting, not the variable.
    let read = load_ok(
        "NEMO_LENS",
        None,
        &[("NEMO_LENS_EXPORT_STRATEGY", "no_such_strategy")],
    );
    let err = Telemetry::builder(
        read.with_enabled(true)
            .with(|c| c.export.strategy = "another_unknown_strategy".into()),
    )
    .allow_reinit_for_testing(true)
    .build()
    .unwrap_err()
    .to_string();
    assert!(err.contains("(from export.strategy)"), "{err}");
}

#[test]
fn parse_int_follows_python_int_for_decimal_text() {
    let var = "NEMO_LENS_EXPORT_RANK";
    for (text, value) in [
        ("0", 0),
        ("-1", -1),
        ("+3", 3),
        (" 7 ", 7),
        ("\t-12\n", -12),
        ("007", 7),
        ("1_000", 1000),
        ("-1_2_3", -123),
        ("9223372036854775807", i64::MAX),
        ("-9223372036854775808", i64::MIN),
    ] {
        match as_rank(value) {
            Some(rank) => assert_eq!(parse_int(text).unwrap(), rank, "{text:?}"),
            None => assert!(
                matches!(parse_int(text), Err(LensError::InvalidValue { var: v, .. }) if v == var),
                "{text:?}"
            ),
        }
    }
    for text in [
        "1.5",
        "1e3",
        "0x10",
        "abc",
        "--1",
        "+-1",
        "- 1",
        "1 2",
        "_1",
        "1_",
        "1__0",
        "+",
        "-",
        "9223372036854775808",
    ] {
        let err = parse_int(text).unwrap_err();
        assert!(
            matches!(&err, LensError::InvalidInt { var: v, value } if v == var && *value == shown(text)),
            "{text:?}: {err:?}"
        );
        assert!(err.to_string().contains(var));
    }
}

/// Runs in a process of its own (`nemo_lens_test_support::child`), the only one that sets these variables (the
/// `LENSTEST_NONUTF8` prefix, which nothing else reads).
#[test]
fn from_env_with_fallback_reads_the_process_environment_and_rejects_non_utf8() {
    child::run_alone(reads_the_process_environment);
}

fn reads_the_process_environment() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    // SAFETY: the only test of this child process: no other thread reads the environment.
    unsafe {
        std::env::set_var("LENSTEST_NONUTF8_OK_ENABLED", " On ");
        std::env::set_var("LENSTEST_NONUTF8_FBOK_EXPORT_RANK", "4");
        std::env::set_var("LENSTEST_NONUTF8_A_RUN_ID", OsStr::from_bytes(b"\xff"));
        std::env::set_var(
            "LENSTEST_NONUTF8_B_FB_ENABLED",
            OsStr::from_bytes(b"ab\xfe"),
        );
    }

    // A valid value is read from the process environment, with the fallback.
    let cfg =
        LensConfig::from_env_with_fallback("LENSTEST_NONUTF8_OK", Some("LENSTEST_NONUTF8_FBOK"))
            .unwrap();
    assert!(cfg.enabled);
    assert_eq!(cfg.export.rank, Some(4));

    // A non-UTF-8 value is an error naming the variable.
    let err = LensConfig::from_env_with_fallback("LENSTEST_NONUTF8_A", None).unwrap_err();
    match &err {
        LensError::NotUnicode { var, .. } => assert_eq!(var, "LENSTEST_NONUTF8_A_RUN_ID"),
        other => panic!("expected NotUnicode, got {other:?}"),
    }
    assert!(err.to_string().contains("LENSTEST_NONUTF8_A_RUN_ID"));

    // Also when the bad value sits under the fallback prefix: the error names that variable.
    let err = LensConfig::from_env_with_fallback(
        "LENSTEST_NONUTF8_B_PRIMARY",
        Some("LENSTEST_NONUTF8_B_FB"),
    )
    .unwrap_err();
    match &err {
        LensError::NotUnicode { var, value } => {
            assert_eq!(var, "LENSTEST_NONUTF8_B_FB_ENABLED");
            assert!(value.starts_with("ab"), "{value:?}");
        }
        other => panic!("expected NotUnicode, got {other:?}"),
    }

    // SAFETY: as above.
    unsafe {
        std::env::remove_var("LENSTEST_NONUTF8_OK_ENABLED");
        std::env::remove_var("LENSTEST_NONUTF8_FBOK_EXPORT_RANK");
        std::env::remove_var("LENSTEST_NONUTF8_A_RUN_ID");
        std::env::remove_var("LENSTEST_NONUTF8_B_FB_ENABLED");
    }
}

// ---------------------------------------------------------------------------------------------
// Property tests.

const ALL_KEYS: [&str; 16] = [
    "ENABLED",
    "SAMPLER_ENABLED",
    "TRACES_ENABLED",
    "METRICS_ENABLED",
    "LOGS_ENABLED",
    "DETECT_GPU",
    "NVTX",
    "THREAD_ATTRIBUTES",
    "EXPORT_STRATEGY",
    "EXPORT_RANK",
    "EXPORT_SAMPLE_RATE",
    "SPAN_GROUPS",
    "EXPORTER",
    "RUN_ID",
    "USER_ID",
    "CONSOLE_PATH",
];

fn proptest_config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        // Do not write regression files into the source tree.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Arbitrary text: any Unicode (control characters included), text close to the accepted
/// forms, and huge strings.
fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[ \\t\\n\\r\\x00-\\x1f]{0,3}[-+_.0-9eEnaNifyYsStTrRuUoOlL]{0,12}[ \\t\\n\\r\\x00-\\x1f]{0,3}",
        prop::sample::select(vec![
            "1", "0", "true", "FALSE", " yes ", "off", "-1", "0.5", "1e-3", "nan", "inf", "otlp",
            "console", "", " ",
        ])
        .prop_map(str::to_string),
        ("[-+0-9a-z_.\\x00\\u{7f}\\u{feff}]{1,4}", 1usize..40_000).prop_map(|(s, n)| s.repeat(n)),
    ]
}

/// Whether `err` is one of the typed parse errors, and its message names `var`.
fn assert_typed_error_naming(err: &LensError, var: &str) {
    let named = match err {
        LensError::InvalidBool { var: v, .. }
        | LensError::InvalidInt { var: v, .. }
        | LensError::InvalidFloat { var: v, .. }
        | LensError::SampleRateOutOfRange { var: v, .. }
        | LensError::UnknownExporter { var: v, .. } => v,
        other => panic!("unexpected error kind: {other:?}"),
    };
    assert_eq!(named, var);
    assert!(err.to_string().contains(var));
}

/// Values each key accepts (a few spellings).
fn valid_values(key: &str) -> &'static [&'static str] {
    match key {
        k if BOOL_KEYS.contains(&k) => &["1", "0", "TRUE", " false ", "Yes", "no", "ON", "off"],
        "EXPORT_RANK" => &["-1", "0", " 7 ", "+3", "1_000"],
        "EXPORT_SAMPLE_RATE" => &["0", "1", "0.5", " 0.1 ", "1e-2"],
        "EXPORTER" => &["otlp", "console", " OTLP "],
        _ => &["all_ranks", "per_step,verbose", " x ", "/tmp/{rank}.jsonl"],
    }
}

fn is_bool_word(s: &str) -> Option<bool> {
    let t = s.trim();
    if TRUE_WORDS.iter().any(|w| t.eq_ignore_ascii_case(w)) {
        Some(true)
    } else if FALSE_WORDS.iter().any(|w| t.eq_ignore_ascii_case(w)) {
        Some(false)
    } else {
        None
    }
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn parsers_never_panic_and_errors_name_the_variable(s in any_text()) {
        // A blank value is unset: the default stays.
        let blank = s.trim().is_empty();
        match parse_bool(&s) {
            Ok(b) if blank => prop_assert!(!b),
            Ok(b) => prop_assert_eq!(Some(b), is_bool_word(&s)),
            Err(e) => {
                prop_assert!(matches!(&e, LensError::InvalidBool { value, .. } if *value == shown(&s)), "{:?}", e);
                assert_typed_error_naming(&e, "NEMO_LENS_ENABLED");
            }
        }
        match parse_int(&s) {
            Ok(i) if blank => prop_assert_eq!(i, -1),
            Ok(i) => prop_assert_eq!(Some(i), s.trim().replace('_', "").parse::<i64>().ok().and_then(as_rank)),
            Err(e) => {
                let beyond_ranks = s.trim().replace('_', "").parse::<i64>().is_ok_and(|n| as_rank(n).is_none());
                prop_assert!(
                    matches!(&e, LensError::InvalidInt { value, .. } if *value == shown(&s))
                        || matches!(&e, LensError::InvalidValue { value, .. } if *value == shown(&s) && beyond_ranks),
                    "{:?}", e
                );
                assert_typed_error_naming(&e, "NEMO_LENS_EXPORT_RANK");
            }
        }
        match parse_float(&s) {
            Ok(f) if blank => prop_assert_eq!(f, 1.0),
            Ok(f) => {
                prop_assert!((0.0..=1.0).contains(&f));
                prop_assert_eq!(Some(f), s.trim().parse::<f64>().ok());
            }
            Err(e) => {
                prop_assert!(
                    matches!(&e, LensError::InvalidFloat { value, .. } if *value == shown(&s))
                        || matches!(&e, LensError::SampleRateOutOfRange { .. }),
                    "{:?}", e
                );
                assert_typed_error_naming(&e, "NEMO_LENS_EXPORT_SAMPLE_RATE");
            }
        }
    }

    #[test]
    fn from_lookup_never_panics_and_agrees_with_the_field_parsers(
        raw in prop::collection::vec(
            (0u8..4, any_text(), any::<prop::sample::Index>(), any::<bool>()),
            ALL_KEYS.len(),
        ),
        service in prop::option::of(any_text()),
    ) {
        // Per key: unset, arbitrary text, or (half of the time) a value valid for the key; set
        // under the primary or the fallback prefix.
        let values: Vec<Option<String>> = ALL_KEYS
            .iter()
            .zip(&raw)
            .map(|(key, (choice, text, index, _))| match choice {
                0 => None,
                1 => Some(text.clone()),
                _ => Some(index.get(valid_values(key)).to_string()),
            })
            .collect();
        let mut map = HashMap::new();
        for ((key, value), (_, _, _, use_fallback)) in ALL_KEYS.iter().zip(&values).zip(&raw) {
            if let Some(v) = value {
                let prefix = if *use_fallback { "NEMO_LENS" } else { "MEGATRON_OTEL" };
                map.insert(format!("{prefix}_{key}"), v.clone());
            }
        }
        if let Some(s) = &service {
            map.insert("OTEL_SERVICE_NAME".to_string(), s.clone());
        }
        let result = LensConfig::from_lookup("MEGATRON_OTEL", Some("NEMO_LENS"), |k| map.get(k).cloned());
        let set = |key: &str| -> Option<String> {
            let i = ALL_KEYS.iter().position(|k| *k == key).unwrap();
            values[i].as_ref().map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
        };
        match result {
            Ok(cfg) => {
                let defaults = LensConfig::default();
                for key in BOOL_KEYS {
                    let expected = match set(key) {
                        Some(v) => is_bool_word(&v).expect("accepted a non-boolean"),
                        None => bool_field(&defaults, key),
                    };
                    prop_assert_eq!(bool_field(&cfg, key), expected, "{}", key);
                }
                prop_assert_eq!(
                    cfg.export.rank.map_or(-1, i64::from),
                    set("EXPORT_RANK").map_or(-1, |v| parse_int(&v).unwrap())
                );
                prop_assert!((0.0..=1.0).contains(&cfg.export.sample_rate));
                prop_assert_eq!(
                    cfg.export.sample_rate,
                    set("EXPORT_SAMPLE_RATE").map_or(1.0, |v| parse_float(&v).unwrap())
                );
                prop_assert_eq!(&cfg.export.strategy, &set("EXPORT_STRATEGY").unwrap_or("single_rank".into()));
                prop_assert_eq!(&cfg.groups.span_groups, &set("SPAN_GROUPS").unwrap_or("default".into()));
                prop_assert_eq!(&cfg.identity.run_id, &set("RUN_ID").unwrap_or_default());
                prop_assert_eq!(&cfg.identity.user, &set("USER_ID").unwrap_or_default());
                prop_assert_eq!(&cfg.export.console_path, &set("CONSOLE_PATH"));
                // An unknown exporter is left to the exporting rank's setup: the default stays.
                let expected_exporter = set("EXPORTER")
                    .and_then(|v| v.parse::<ExporterKind>().ok())
                    .unwrap_or(ExporterKind::Otlp);
                prop_assert_eq!(cfg.export.exporter, expected_exporter);
                let expected_service = service
                    .as_ref()
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .unwrap_or("nemo".into());
                prop_assert_eq!(&cfg.identity.service_name, &expected_service);
            }
            Err(e) => {
                // The error is typed and names the variable of a key whose value is invalid.
                let (key, var) = match &e {
                    LensError::InvalidBool { var, .. }
                    | LensError::InvalidInt { var, .. }
                    | LensError::InvalidFloat { var, .. }
                    | LensError::SampleRateOutOfRange { var, .. } => {
                        let key = var
                            .strip_prefix("MEGATRON_OTEL_")
                            .or_else(|| var.strip_prefix("NEMO_LENS_"))
                            .unwrap_or_else(|| panic!("error names an unknown variable: {e:?}"));
                        (key.to_string(), var.clone())
                    }
                    other => panic!("unexpected error kind: {other:?}"),
                };
                prop_assert!(e.to_string().contains(&var));
                let value = set(&key).expect("error for a key that is not set");
                let invalid = match key.as_str() {
                    k if BOOL_KEYS.contains(&k) => {
                        prop_assert_eq!(&var, &format!("MEGATRON_OTEL_{k}"));
                        is_bool_word(&value).is_none()
                    }
                    "EXPORT_RANK" => {
                        prop_assert_eq!(var.as_str(), "MEGATRON_OTEL_EXPORT_RANK");
                        parse_int(&value).is_err()
                    }
                    "EXPORT_SAMPLE_RATE" => {
                        prop_assert_eq!(var.as_str(), "MEGATRON_OTEL_EXPORT_SAMPLE_RATE");
                        parse_float(&value).is_ok_and(|f| !(0.0..=1.0).contains(&f))
                            || parse_float(&value).is_err()
                    }
                    other => panic!("error for a key that is never validated: {other}"),
                };
                prop_assert!(invalid, "error {:?} for a valid value {:?}", e, value);
            }
        }
    }

    #[test]
    fn parse_int_agrees_with_i64_parse_on_decimal_text(
        s in "[+-]?[0-9]{1,25}",
        left in "[ \\t\\n]{0,2}",
        right in "[ \\t\\n]{0,2}",
    ) {
        let expected = s.parse::<i64>().ok().and_then(as_rank);
        prop_assert_eq!(parse_int(&s).ok(), expected);
        prop_assert_eq!(parse_int(&format!("{left}{s}{right}")).ok(), expected);
    }

    #[test]
    fn parse_int_accepts_single_underscores_between_digits(
        groups in prop::collection::vec("[0-9]{1,4}", 1..5),
        negative in any::<bool>(),
    ) {
        let sign = if negative { "-" } else { "" };
        let plain = format!("{sign}{}", groups.concat());
        let underscored = format!("{sign}{}", groups.join("_"));
        prop_assert_eq!(
            parse_int(&underscored).ok(),
            plain.parse::<i64>().ok().and_then(as_rank)
        );
    }

    #[test]
    fn parse_bool_accepts_exactly_the_eight_words(
        word_index in 0usize..8,
        upper in prop::collection::vec(any::<bool>(), 5),
        left in "[ \\t\\n\\r]{0,3}",
        right in "[ \\t\\n\\r]{0,3}",
        other in prop_oneof![
            any::<String>(),
            "[ \\t]{0,2}[a-zA-Z01]{1,5}[ \\t]{0,2}",
            prop::sample::select(vec![
                "y", "n", "t", "f", "ye", "tru", "of", "onn", "yes1", "2", "-1", "none", "true!",
                "o n", "+1", "01", "truE\u{0}", "\u{a0}on\u{a0}", "\u{212a}",
            ])
            .prop_map(str::to_string),
        ],
    ) {
        let (word, expected) = if word_index < 4 {
            (TRUE_WORDS[word_index], true)
        } else {
            (FALSE_WORDS[word_index - 4], false)
        };
        let spelled: String = word
            .chars()
            .zip(&upper)
            .map(|(c, u)| if *u { c.to_ascii_uppercase() } else { c })
            .collect();
        let text = format!("{left}{spelled}{right}");
        prop_assert_eq!(parse_bool(&text).ok(), Some(expected), "{:?}", text);
        // Anything that is not one of the words (ignoring case and surrounding white space)
        // is rejected.
        if !other.trim().is_empty() {
            prop_assert_eq!(parse_bool(&other).ok(), is_bool_word(&other));
        }
    }
}
