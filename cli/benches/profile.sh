#!/usr/bin/env bash
# Where the `nemo-lens` tool's instructions go: `straggler` and `summary` with one thread
# (`--jobs 1`) under callgrind, on the input of the throughput bench's group `cli` (8 ranks of
# console JSONL, written by the bench binary itself with CLI_BENCH_GENERATE), then a table of
# inclusive instructions per input byte for the functions that matter (rows overlap: a row
# counts what it calls) and their share of the whole run.
#
# Usage: cli/benches/profile.sh        (from anywhere; prints a Markdown table)
# Needs valgrind (callgrind_annotate comes with it).
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null \
  || { echo "profile.sh: valgrind (with callgrind_annotate) is required" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
cargo bench --quiet -p nemo-lens-cli --bench throughput --no-run --message-format=json \
  | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["target"]["name"], m["executable"])' >"$OUT/bins"
BENCH=$(awk '$1 == "throughput" { print $2 }' "$OUT/bins")
TOOL=$(awk '$1 == "nemo-lens" { print $2 }' "$OUT/bins")
[ -x "$BENCH" ] && [ -x "$TOOL" ] || { echo "profile.sh: could not build the throughput bench" >&2; exit 1; }
mkdir "$OUT/input"
CLI_BENCH_GENERATE="$OUT/input" "$BENCH" >/dev/null
for command in straggler summary; do
  valgrind --tool=callgrind --callgrind-out-file="$OUT/$command.cg" \
    "$TOOL" "$command" --no-progress --json --jobs 1 "$OUT"/input/*.jsonl >/dev/null 2>"$OUT/$command.err" \
    || [ $? -eq 3 ] \
    || { echo "profile.sh: $command failed:" >&2; grep -v '^==' "$OUT/$command.err" | tail -5 >&2; exit 1; }
done

python3 - "$OUT" <<'PY'
import glob, os, re, sys

sys.path.insert(0, "benches")
from callgrind import inclusive

out = sys.argv[1]
size = sum(os.path.getsize(p) for p in glob.glob(out + "/input/*.jsonl"))

rows = [
    ("the whole run", r"^nemo_lens::main$"),
    ("reading records (`Records::next_record`)", r"^nemo_lens::input::Records::next_record$"),
    ("- splitting lines (`Framer::next_frame`)", r"Framer<R>::next_frame$"),
    ("- parsing a record (`parse_record`)", r"^nemo_lens::input::record::parse_record$"),
    ("- - serde_json", r"^serde_json::de::from_trait$"),
    ("- - - scanning strings (`parse_str`)", r"StrRead as serde_json::read::Read>::parse_str$"),
    ("- - timestamps (`parse_time_us`)", r"^nemo_lens::input::timestamp::parse_time_us$"),
    ("dropping parsed spans", r"drop_in_place<alloc::boxed::Box<nemo_lens::input::record::Span>>$"),
    ("straggler analysis per span (`FileCollector::span`)", r"FileCollector::span$"),
    ("summary tables per record (`Tables::record`)", r"^nemo_lens::summary::Tables::record$"),
    ("allocator: `malloc` + `free`", None),
]
costs = {c: inclusive(f"{out}/{c}.cg") for c in ("straggler", "summary")}
print(f"{size / 2**20:.1f} MiB of console JSONL; instructions per input byte (share of the run)")
print()
print("| | `straggler --jobs 1` | `summary --jobs 1` |")
print("|---|---|---|")
whole = {c: cost.get("nemo_lens::main", 0) for c, cost in costs.items()}
for label, pattern in rows:
    cells = []
    for c, cost in costs.items():
        if pattern is None:
            v = sum(cost.get(f, 0) for f in ("malloc", "free"))
        else:
            v = next((n for f, n in cost.items() if re.search(pattern, f)), 0)
        cells.append(f"{v / size:.1f} ({100 * v / whole[c]:.0f}%)" if v and whole[c] else "–")
    if cells != ["–", "–"]:
        print(f"| {label} | {cells[0]} | {cells[1]} |")
PY
