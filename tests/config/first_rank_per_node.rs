//! `first_rank_per_node`: exports where `LOCAL_RANK` is 0 or unset (spec §2.3).
//!
//! The test runs in a process of its own (`nemo_lens_test_support::child`) because it mutates `LOCAL_RANK` in
//! the process environment; no other thread of that process reads the environment meanwhile.

use nemo_lens::strategy::{ExportStrategy, get_export_strategy};
use nemo_lens::{LensConfig, LensError};

use nemo_lens_test_support::child;

fn set_local_rank(value: Option<&str>) {
    // SAFETY: this is the only test of its child process, so no other thread reads or writes
    // the environment while it runs.
    unsafe {
        match value {
            Some(v) => std::env::set_var("LOCAL_RANK", v),
            None => std::env::remove_var("LOCAL_RANK"),
        }
    }
}

#[test]
fn first_rank_per_node_follows_local_rank() {
    child::run_alone(follows_local_rank);
}

fn follows_local_rank() {
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
        set_local_rank(local_rank);
        for strategy in [&ExportStrategy::FirstRankPerNode, &by_name] {
            for (rank, world) in [(0, 1), (0, 16), (5, 16), (15, 16)] {
                let decided = strategy
                    .decide(&cfg, rank, world)
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
        set_local_rank(Some(bad));
        let err = ExportStrategy::FirstRankPerNode
            .decide(&cfg, 0, 8)
            .unwrap_err();
        match &err {
            LensError::InvalidLocalRank { value } => assert_eq!(value, bad),
            other => panic!("LOCAL_RANK={bad:?}: expected InvalidLocalRank, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.contains("LOCAL_RANK"), "{msg}");
        assert!(msg.contains(&format!("'{bad}'")), "{msg}");
        assert!(by_name.decide(&cfg, 0, 8).is_err());
    }

    set_local_rank(None);
    assert!(ExportStrategy::FirstRankPerNode.decide(&cfg, 0, 8).unwrap());
}
