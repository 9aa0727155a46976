//! Resident memory stays flat when one span is re-entered millions of times: the candle
//! pattern, where a model builds its `forward` span once and enters it on every forward pass.
//!
//! The measurement runs in a child process (the fixture program `reentry_memory`), so that
//! nothing else in the test run moves its resident set.
//! The child reads `VmRSS` from `/proc/self/status` after a warm-up and again after three
//! million re-entries (with a child span and an event every 100th pass), and prints both;
//! the parent checks the growth against a generous bound. No timing is asserted.

use nemo_lens_test_support::child::Child;

const WARM_UP: u64 = 300_000;
const PASSES: u64 = 3_000_000;
/// Growth allowed between the two readings. A leak of even 4 bytes per pass is 12 MB.
const MAX_GROWTH_KIB: u64 = 8 * 1024;

#[test]
fn resident_memory_is_flat_over_millions_of_reentries() {
    let out = Child::fixture("reentry_memory")
        .args([WARM_UP.to_string(), PASSES.to_string()])
        .run_passing();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("REENTRY "))
        .unwrap_or_else(|| panic!("no REENTRY line from the child:\n{stdout}"));
    let field = |name: &str| -> u64 {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line}"))
    };
    println!("{line}");
    let (before, after, exported) = (
        field("rss_before_kib"),
        field("rss_after_kib"),
        field("exported"),
    );
    // The forward span, plus one `attention` span every 100th pass.
    let expected = 1 + (WARM_UP + PASSES) / 100;
    assert!(
        exported > expected / 2,
        "the child exported only {exported} of {expected} spans: {line}"
    );
    assert!(
        after <= before + MAX_GROWTH_KIB,
        "resident memory grew by {} KiB over {PASSES} re-entries (bound {MAX_GROWTH_KIB} KiB): {line}",
        after.saturating_sub(before)
    );
}
