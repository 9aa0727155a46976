//! The strategies, the md5 rule against Python, and the registry.
//!
//! The `sampled` rule is compared with the Python rule by running `python3`; a small table
//! computed with Python pins it even where Python is absent.

use std::process::Command;

use nemo_lens_test_support::python::MD5_RANK_FRACTIONS as PYTHON_TABLE;

use super::*;

const RATES: [f64; 7] = [0.0, 0.01, 0.1, 0.25, 0.5, 0.9, 1.0];

const PYTHON_SCRIPT: &str = r#"
import hashlib, sys
rates = [float(r) for r in sys.argv[1].split(",")]
ranks = list(range(4096)) + [65535, 100000, 1000000, 2**31 - 1, 2**32 - 1]
for rank in ranks:
    value = int(hashlib.md5(str(rank).encode()).hexdigest(), 16) % 10000 / 10000.0
    print(rank, repr(value), "".join("1" if value < rate else "0" for rate in rates))
"#;

#[test]
fn sampled_rule_matches_python_bit_for_bit() {
    let rates = RATES.map(|r| format!("{r:?}")).join(",");
    let output = Command::new("python3")
        .arg("-c")
        .arg(PYTHON_SCRIPT)
        .arg(&rates)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run python3 ({e}); this test compares the `sampled` rule with the \
                 Python library and needs python3 on PATH"
            )
        });
    assert!(
        output.status.success(),
        "python3 failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).expect("python3 printed non-UTF-8");
    let mut lines = 0;
    for line in stdout.lines() {
        let mut fields = line.split_whitespace();
        let rank: u32 = fields.next().unwrap().parse().unwrap();
        let value: f64 = fields.next().unwrap().parse().unwrap();
        let decisions = fields.next().unwrap();
        assert_eq!(fields.next(), None, "line {line:?}");
        assert_eq!(
            rank_sample_value(rank).to_bits(),
            value.to_bits(),
            "rank {rank}: Rust {} vs Python {value}",
            rank_sample_value(rank)
        );
        assert_eq!(decisions.len(), RATES.len());
        for (rate, python) in RATES.iter().zip(decisions.chars()) {
            assert_eq!(
                rank_is_sampled(rank, *rate),
                python == '1',
                "rank {rank} at rate {rate}"
            );
        }
        lines += 1;
    }
    assert_eq!(lines, 4096 + 5, "python3 output: {stdout:.200}");
}

#[test]
fn sampled_rule_matches_pinned_python_table() {
    for (rank, value) in PYTHON_TABLE {
        assert_eq!(rank_sample_value(rank), value, "rank {rank}");
        for rate in RATES {
            assert_eq!(
                rank_is_sampled(rank, rate),
                value < rate,
                "rank {rank} rate {rate}"
            );
        }
        // The comparison is strict: a rate equal to the value does not sample.
        assert!(!rank_is_sampled(rank, value));
        assert!(rank_is_sampled(rank, value + 1e-9));
    }
}

#[test]
fn rank_sample_value_lies_in_unit_interval_on_four_decimals() {
    for rank in (0..20_000).chain([u32::MAX - 1, u32::MAX]) {
        let v = rank_sample_value(rank);
        assert!((0.0..1.0).contains(&v), "rank {rank}: {v}");
        let scaled = (v * 10_000.0).round();
        assert_eq!(scaled / 10_000.0, v, "rank {rank}: {v}");
    }
}

/// A config whose export rank is `export_rank` as `NEMO_LENS_EXPORT_RANK` says it (a negative
/// number: the last rank).
fn cfg(export_rank: i64, rate: f64) -> LensConfig {
    let value = export_rank.to_string();
    LensConfig::from_lookup("NEMO_LENS", None, |k| {
        (k == "NEMO_LENS_EXPORT_RANK").then(|| value.clone())
    })
    .unwrap()
    .with(|c| c.export.sample_rate = rate)
}

fn exporting_ranks(strategy: &ExportStrategy, config: &LensConfig, world: u32) -> Vec<u32> {
    (0..world)
        .filter(|&r| strategy.decide(config, r, world).unwrap())
        .collect()
}

#[test]
fn single_rank_exports_the_configured_or_last_rank() {
    let s = ExportStrategy::SingleRank;
    assert_eq!(exporting_ranks(&s, &cfg(-1, 1.0), 8), vec![7]);
    assert_eq!(exporting_ranks(&s, &cfg(-1, 1.0), 1), vec![0]);
    assert_eq!(exporting_ranks(&s, &cfg(0, 1.0), 8), vec![0]);
    assert_eq!(exporting_ranks(&s, &cfg(3, 1.0), 8), vec![3]);
    // Any negative rank means "last", as `export_rank >= 0` decides in Python.
    assert_eq!(cfg(-5, 1.0).export.rank, None);
    assert_eq!(exporting_ranks(&s, &cfg(-5, 1.0), 8), vec![7]);
    // A rank outside the world: nobody exports.
    assert_eq!(exporting_ranks(&s, &cfg(8, 1.0), 8), Vec::<u32>::new());
    // The default config selects `single_rank` with the last rank.
    let default = LensConfig::default();
    assert_eq!(default.export.rank, None);
    let by_name = get_export_strategy(&default.export.strategy, "export.strategy").unwrap();
    assert!(matches!(by_name, ExportStrategy::SingleRank));
    assert_eq!(exporting_ranks(&by_name, &default, 1024), vec![1023]);
}

#[test]
fn all_ranks_always_exports() {
    let s = get_export_strategy("all_ranks", "NEMO_LENS_EXPORT_STRATEGY").unwrap();
    assert!(matches!(s, ExportStrategy::AllRanks));
    assert_eq!(
        exporting_ranks(&s, &cfg(3, 0.0), 64),
        (0..64).collect::<Vec<_>>()
    );
}

#[test]
fn sampled_follows_the_rate() {
    let s = get_export_strategy("sampled", "NEMO_LENS_EXPORT_STRATEGY").unwrap();
    assert!(matches!(s, ExportStrategy::Sampled));
    assert_eq!(exporting_ranks(&s, &cfg(-1, 0.0), 2000), Vec::<u32>::new());
    assert_eq!(
        exporting_ranks(&s, &cfg(-1, 1.0), 2000),
        (0..2000).collect::<Vec<_>>()
    );
    // From the Python table: the ranks below 16 whose value is < 0.5.
    assert_eq!(
        exporting_ranks(&s, &cfg(-1, 0.5), 16),
        vec![3, 4, 5, 6, 8, 10, 11, 13]
    );
    // Independent of world size and export_rank.
    for world in [16, 17, 4096] {
        assert!(s.decide(&cfg(0, 0.1), 3, world).unwrap());
        assert!(!s.decide(&cfg(3, 0.1), 0, world).unwrap());
    }
    // Roughly the requested fraction of a large world.
    let kept = exporting_ranks(&s, &cfg(-1, 0.5), 10_000).len();
    assert!((4_500..5_500).contains(&kept), "kept {kept} of 10000");
}

#[test]
fn custom_strategies_register_override_and_unregister() {
    let name = "lenstest_even_ranks";
    register_export_strategy(name, |_, rank, _| rank % 2 == 0, Overwrite::No).unwrap();
    assert!(registered_strategies().contains(&name.to_string()));
    let s = get_export_strategy(name, "NEMO_LENS_EXPORT_STRATEGY").unwrap();
    assert!(matches!(s, ExportStrategy::Custom(_)));
    assert_eq!(exporting_ranks(&s, &cfg(-1, 1.0), 6), vec![0, 2, 4]);

    // Registering the same name again without override fails and keeps the first function.
    let err = register_export_strategy(name, |_, _, _| true, Overwrite::No).unwrap_err();
    assert!(matches!(&err, LensError::Registry(_)), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains(name), "{msg}");
    assert!(msg.contains("already registered"), "{msg}");
    let s = get_export_strategy(name, "v").unwrap();
    assert_eq!(exporting_ranks(&s, &cfg(-1, 1.0), 6), vec![0, 2, 4]);

    // With override the new function replaces it; it sees the config and the world size.
    register_export_strategy(
        name,
        |cfg, rank, world| cfg.export.rank == Some(rank) || rank + 1 == world,
        Overwrite::Yes,
    )
    .unwrap();
    let s = get_export_strategy(name, "v").unwrap();
    assert_eq!(exporting_ranks(&s, &cfg(2, 1.0), 6), vec![2, 5]);

    unregister_export_strategy(name).unwrap();
    assert!(!registered_strategies().contains(&name.to_string()));
    let err = get_export_strategy(name, "NEMO_LENS_EXPORT_STRATEGY").unwrap_err();
    assert!(matches!(err, LensError::UnknownStrategy { .. }), "{err:?}");
    // Unregistering twice: not registered.
    let err = unregister_export_strategy(name).unwrap_err();
    assert!(matches!(&err, LensError::Registry(_)), "{err:?}");
    assert!(err.to_string().contains("not registered"), "{err}");
}

#[test]
fn built_ins_cannot_be_unregistered_or_replaced_without_override() {
    for builtin in BUILTIN_STRATEGIES {
        let err = unregister_export_strategy(builtin).unwrap_err();
        assert!(matches!(&err, LensError::Registry(_)), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("built-in"), "{msg}");
        assert!(msg.contains(builtin), "{msg}");
        assert!(registered_strategies().contains(&builtin.to_string()));

        let err = register_export_strategy(builtin, |_, _, _| false, Overwrite::No).unwrap_err();
        assert!(matches!(&err, LensError::Registry(_)), "{err:?}");
        assert!(err.to_string().contains(builtin));
    }
    // The built-ins are still the built-in implementations.
    assert!(matches!(
        get_export_strategy("all_ranks", "v").unwrap(),
        ExportStrategy::AllRanks
    ));
    assert!(matches!(
        get_export_strategy("first_rank_per_node", "v").unwrap(),
        ExportStrategy::FirstRankPerNode
    ));
}

#[test]
fn empty_names_are_rejected() {
    for name in ["", " ", "\t\n"] {
        let err = register_export_strategy(name, |_, _, _| true, Overwrite::Yes).unwrap_err();
        assert!(matches!(&err, LensError::Registry(_)), "{name:?}: {err:?}");
        assert!(err.to_string().contains("non-empty"), "{err}");
    }
}

#[test]
fn unregistering_an_unknown_name_fails() {
    let err = unregister_export_strategy("lenstest_never_registered").unwrap_err();
    assert!(matches!(&err, LensError::Registry(_)), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("lenstest_never_registered"), "{msg}");
    assert!(msg.contains("not registered"), "{msg}");
}

#[test]
fn registered_strategies_are_sorted_and_include_the_built_ins() {
    register_export_strategy("lenstest_aaa_first", |_, _, _| true, Overwrite::Yes).unwrap();
    register_export_strategy("lenstest_zzz_last", |_, _, _| true, Overwrite::Yes).unwrap();
    let names = registered_strategies();
    assert!(
        names.windows(2).all(|w| w[0] < w[1]),
        "not sorted: {names:?}"
    );
    for builtin in BUILTIN_STRATEGIES {
        assert!(names.contains(&builtin.to_string()), "{names:?}");
    }
    assert!(names.contains(&"lenstest_aaa_first".to_string()));
    assert!(names.contains(&"lenstest_zzz_last".to_string()));
    unregister_export_strategy("lenstest_aaa_first").unwrap();
    unregister_export_strategy("lenstest_zzz_last").unwrap();
    let mut sorted_builtins = BUILTIN_STRATEGIES.map(String::from).to_vec();
    sorted_builtins.sort();
    assert_eq!(
        BUILTIN_STRATEGIES.map(String::from).to_vec(),
        sorted_builtins
    );
}

#[test]
fn unknown_strategy_error_names_the_variable_and_the_registered_strategies() {
    let err = get_export_strategy("fastest", "MEGATRON_OTEL_EXPORT_STRATEGY").unwrap_err();
    match &err {
        LensError::UnknownStrategy {
            var,
            name,
            registered,
        } => {
            assert_eq!(var, "MEGATRON_OTEL_EXPORT_STRATEGY");
            assert_eq!(name, "fastest");
            assert!(registered.windows(2).all(|w| w[0] < w[1]), "{registered:?}");
            for builtin in BUILTIN_STRATEGIES {
                assert!(registered.contains(&builtin.to_string()), "{registered:?}");
            }
        }
        other => panic!("expected UnknownStrategy, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("MEGATRON_OTEL_EXPORT_STRATEGY"), "{msg}");
    assert!(msg.contains("'fastest'"), "{msg}");
    for builtin in BUILTIN_STRATEGIES {
        assert!(msg.contains(builtin), "{msg}");
    }
    // Names are exact: no case folding or trimming.
    assert!(get_export_strategy("All_Ranks", "v").is_err());
    assert!(get_export_strategy(" all_ranks", "v").is_err());
}

#[test]
fn first_rank_per_node_follows_local_rank() {
    let by_name = get_export_strategy("first_rank_per_node", "NEMO_LENS_EXPORT_STRATEGY").unwrap();
    assert!(matches!(by_name, ExportStrategy::FirstRankPerNode));
    let cfg = LensConfig::default();

    // (LOCAL_RANK, expected decision); the global rank and world size do not matter.
    let cases: [(Option<&str>, bool); 7] = [
        (None, true),
        (Some("0"), true),
        (Some(" 0 "), true),
        (Some("+0"), true),
        (Some("3"), false),
        (Some("1"), false),
        (Some("-1"), false),
    ];
    for (local_rank, expected) in cases {
        let lookup = |k: &str| {
            (k == "LOCAL_RANK")
                .then(|| local_rank.map(str::to_owned))
                .flatten()
        };
        for strategy in [&ExportStrategy::FirstRankPerNode, &by_name] {
            for (rank, world) in [(0, 1), (0, 16), (5, 16), (15, 16)] {
                let decided = strategy
                    .decide_with(&cfg, rank, world, &lookup)
                    .unwrap_or_else(|e| panic!("LOCAL_RANK={local_rank:?}: {e}"));
                assert_eq!(
                    decided, expected,
                    "LOCAL_RANK={local_rank:?}, rank {rank}/{world}"
                );
            }
        }
    }

    // Not an integer: a typed error that names LOCAL_RANK (Python's int() raises too, also for
    // an empty value).
    for bad in ["abc", "0.0", "", "1e0", "zero"] {
        let lookup = |k: &str| (k == "LOCAL_RANK").then(|| bad.to_owned());
        let err = ExportStrategy::FirstRankPerNode
            .decide_with(&cfg, 0, 8, &lookup)
            .unwrap_err();
        match &err {
            LensError::InvalidLocalRank { value } => assert_eq!(value, bad),
            other => panic!("LOCAL_RANK={bad:?}: expected InvalidLocalRank, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.contains("LOCAL_RANK"), "{msg}");
        assert!(msg.contains(&format!("'{bad}'")), "{msg}");
        assert!(by_name.decide_with(&cfg, 0, 8, &lookup).is_err());
    }

    assert!(
        ExportStrategy::FirstRankPerNode
            .decide_with(&cfg, 0, 8, &|_| None)
            .unwrap()
    );
}
