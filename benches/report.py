#!/usr/bin/env python3
"""Prints the criterion results of the nemo-lens benches as the Markdown tables pasted in the
bench headers and README (median of the last run of each case, with ratios).

Usage: python3 benches/report.py [CRITERION_DIR]
  default CRITERION_DIR: $CARGO_TARGET_DIR/criterion, else target/criterion.
Run after `cargo bench` (see benches/run_all.sh, which does both).
"""
import json
import os
import sys
from pathlib import Path

# In the order of `Wiring::ALL` (benches/common/mod.rs).
WIRINGS = [
    "no_subscriber",
    "lens_non_exporting_rank",
    "lens_disabled_group",
    "lens_exported",
    "plain_tracing_opentelemetry",
    "plain_tracing_opentelemetry_lean",
    "registry_only",
    "fmt_sink",
]


def fmt_time(ns):
    if ns < 1:
        return f"{ns * 1000:.0f} ps"
    if ns < 1000:
        return f"{ns:.3g} ns"
    if ns < 1e6:
        return f"{ns / 1000:.3g} µs"
    return f"{ns / 1e6:.3g} ms"


def load(root):
    results = {}
    for est in root.glob("*/*/new/estimates.json"):
        bench = json.loads((est.parent / "benchmark.json").read_text())
        group = bench["group_id"]
        case = bench.get("function_id") or bench.get("value_str")
        median = json.loads(est.read_text())["median"]["point_estimate"]
        results.setdefault(group, {})[case] = median
    return results


def ratio(t, base):
    return f"{t / base:.2f}x" if base else ""


def wiring_table(group, cases):
    """One criterion group as a table: the disabled wirings against the no-subscriber floor,
    the recording ones against the registry alone and both tracing-opentelemetry wirings."""
    floor = cases.get("no_subscriber")
    registry = cases.get("registry_only")
    plain = cases.get("plain_tracing_opentelemetry")
    lean = cases.get("plain_tracing_opentelemetry_lean")
    off = {"no_subscriber", "lens_non_exporting_rank", "lens_disabled_group"}
    print(f"\n`{group}`\n")
    print("| case | median | / no subscriber | / registry alone "
          "| / tracing-opentelemetry defaults | / tracing-opentelemetry lean |")
    print("|---|---|---|---|---|---|")
    for w in WIRINGS:
        if w not in cases:
            continue
        t = cases[w]
        if w in off:
            cols = [ratio(t, floor), "", "", ""]
        else:
            cols = ["", ratio(t, registry), ratio(t, plain), ratio(t, lean)]
        print(f"| {w} | {fmt_time(t)} | " + " | ".join(cols) + " |")


def main():
    if len(sys.argv) > 1:
        root = Path(sys.argv[1])
    else:
        root = Path(os.environ.get("CARGO_TARGET_DIR", "target")) / "criterion"
    results = load(root)
    if not results:
        sys.exit(f"no criterion results under {root}; run cargo bench first")
    order = ["span", "span_2threads", "span_reentered", "event_in_span",
             "nested_1", "nested_10", "nested_100"]
    for group in order:
        if group in results:
            wiring_table(group, results[group])
    for group in ("span_id", "trace_id"):
        cases = results.get(group)
        if cases:
            base = cases.get("sdk_random")
            print(f"\n`{group}`\n")
            print("| generator | median | / SDK RandomIdGenerator |")
            print("|---|---|---|")
            for name in ("chacha", "sdk_random"):
                if name in cases:
                    print(f"| {name} | {fmt_time(cases[name])} | {cases[name] / base:.2f}x |")
    cases = results.get("console_export")
    if cases and "batch_512_to_file" in cases:
        t = cases["batch_512_to_file"]
        print("\n`console_export`\n")
        print("| case | median per batch | spans/s (one thread) |")
        print("|---|---|---|")
        print(f"| batch of 512 to a file | {fmt_time(t)} | {512 / t * 1e9:,.0f} |")


main()
