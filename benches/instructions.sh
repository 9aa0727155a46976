#!/usr/bin/env bash
# Instructions per span on the training thread, counted by callgrind: a noise-free figure that
# does not depend on machine load (use it to compare two builds). Runs examples/bench_pair
# (two nested group-gated spans per iteration) under `valgrind --tool=callgrind` and divides
# the inclusive count of its `work` function by the number of spans. The batch queue is made
# large enough that no span is dropped (a drop costs less than an export).
#
# Usage: benches/instructions.sh [N]   (iterations, default 20000; 2 spans each)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
TARGET=${CARGO_TARGET_DIR:-target}
command -v valgrind >/dev/null || { echo "valgrind is required" >&2; exit 1; }
cargo build --release --quiet --example bench_pair
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for mode in export noexport; do
  OTEL_BSP_MAX_QUEUE_SIZE=$((4 * N + 8192)) valgrind --tool=callgrind \
    --callgrind-out-file="$OUT/cg.$mode" "$TARGET/release/examples/bench_pair" "$N" "$mode" >/dev/null 2>&1
  ir=$(callgrind_annotate --inclusive=yes "$OUT/cg.$mode" 2>/dev/null \
    | grep -E 'bench_pair::work ' | head -1 | awk '{gsub(",", "", $1); print $1}')
  # `work` runs 2000 warm-up iterations plus N, two spans each.
  awk -v ir="$ir" -v n="$N" -v m="$mode" \
    'BEGIN { printf "%s: %.0f instructions per span (callgrind, training thread)\n", m, ir / (2 * (n + 2000)) }'
done
