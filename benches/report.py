#!/usr/bin/env python3
"""Prints the criterion results of the nemo-lens benches as Markdown tables (median of the last
run of each case, with ratios); benches/run_all.sh puts them in docs/performance.md.

Usage: python3 benches/report.py [CRITERION_DIR]
  default CRITERION_DIR: $CARGO_TARGET_DIR/criterion, else target/criterion.
Run after `cargo bench` (see benches/run_all.sh, which does both).
"""
import json
import os
import sys
from pathlib import Path

# In the order of `Wiring::ALL` (test-support/src/bench.rs), with the wirings some groups add.
WIRINGS = [
    "no_subscriber",
    "lens_non_exporting_rank",
    "lens_disabled_group",
    "lens_exported",
    "lens_exported_no_context_activation",
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
    """Medians by group and case. A case benched with `Criterion::bench_function` (no group,
    one directory level, as in benches/recorder.rs) is filed under the group "" by its id."""
    results = {}
    for est in list(root.glob("*/*/new/estimates.json")) + list(root.glob("*/new/estimates.json")):
        bench = json.loads((est.parent / "benchmark.json").read_text())
        group = bench["group_id"]
        case = bench.get("function_id") or bench.get("value_str")
        if case is None:
            group, case = "", group
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
             "nested_1", "nested_10", "nested_100", "at_depth_1000", "at_depth_30000"]
    for group in order:
        if group in results:
            wiring_table(group, results[group])
            cases = results[group]
            on, off = cases.get("lens_exported"), cases.get("lens_exported_no_context_activation")
            if on and off:
                print(f"\nlens_exported / lens_exported_no_context_activation: {ratio(on, off)}")
    cases = results.get("span_vs_registry")
    if cases:
        print("\n`span_vs_registry`\n")
        print("| span | registry alone | lens exported | lens / registry |")
        print("|---|---|---|---|")
        for shape in ("root", "child"):
            reg, lens = cases.get(f"registry_only/{shape}"), cases.get(f"lens_exported/{shape}")
            if reg and lens:
                print(f"| {shape} | {fmt_time(reg)} | {fmt_time(lens)} | {ratio(lens, reg)} |")
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

    cases = results.get("", {})
    rows = [
        ("non-exporting rank, span of a recorded group (`step`)",
         "non_exporting/recorder_off/step", "non_exporting/recorder_on/step_recorded"),
        ("non-exporting rank, span of another group", None, "non_exporting/recorder_on/other_group"),
        ("non-exporting rank, span without a group", None, "non_exporting/recorder_on/no_group"),
        ("exporting rank, span without a group (exported)",
         "exporting/recorder_off/no_group", "exporting/recorder_on/no_group"),
        ("exporting rank, `step` span (exported, and recorded when on)",
         "exporting/recorder_off/step", "exporting/recorder_on/step_recorded"),
    ]
    if any(on in cases for _, _, on in rows):
        print("\n`recorder`\n")
        print("| case | recorder off | recorder on |")
        print("|---|---|---|")
        for label, off, on in rows:
            cell = lambda k: fmt_time(cases[k]) if k in cases else ""
            print(f"| {label} | {cell(off)} | {cell(on)} |")


main()
