#!/usr/bin/env bash
# Instructions per span on the training thread, counted by callgrind, per wiring: the
# load-independent measure (a timing loop moves with the machine's load; an instruction count
# moves by a few percent with the allocator's state). Use it to compare two
# builds, and to settle the cases below a few nanoseconds, where timing is noise.
#
# What is counted: the `peers` bench binary (benches/peers/) runs one wiring per process with
# `--wiring W --shape S --count N`: 2,000 warm-up calls of the span function (callsite
# registration, slab growth, thread-locals), then N calls through `peers::run_loop`. This
# script reads the inclusive instruction count of `run_loop` (`callgrind_annotate
# --inclusive=yes`) and divides it by the spans it made. Inclusive cost follows calls, so only
# the training thread's work is counted: the batch processor's worker thread, the SDK's export
# thread and fastrace's collector thread are not (their cost shows in the timed `peers` bench).
# `run_loop` itself takes 6 instructions per call (loop, indirect call, black_box), included in
# every row: the no-subscriber row's 16 are those 6 plus 10 in the span function (call frame,
# the macro's level check against tracing's global max level, the disabled span's guard).
#
# The batch queues are made large enough (OTEL_BSP_MAX_QUEUE_SIZE, read by nemo-lens and the
# SDK alike) that no span is dropped under callgrind's slow-down: a dropped span costs the
# training thread less than an exported one. Each exporting run's drops are checked and
# reported; a run that dropped spans is marked.
#
# Also counts bench_pair (test-support/src/bin/bench_pair.rs: two nested group-gated spans per iteration, the shape of the
# Python comparison, benches/compare_python.sh).
#
# Usage: benches/instructions.sh [N] [WIRING...]
#   N        counted calls per case (default 20000; fastrace's child case makes 100 spans a call)
#   WIRING   only these wirings (default: all of benches/peers/)
# Needs valgrind (callgrind_annotate comes with it). Takes about 3 minutes. Exits 1 if any run
# failed or a function's cost was missing (its cell is then blank and the reason is on stderr).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
shift || true
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null \
  || { echo "instructions.sh: valgrind (with callgrind_annotate) is required" >&2; exit 1; }

# The feature adds the lens_opentelemetry_layer wiring (it changes nothing else in the crate).
BIN=$(cargo bench --quiet --no-run --features tracing-opentelemetry --bench peers --message-format=json \
  | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "peers" and m.get("executable"):
        print(m["executable"])')
[ -x "$BIN" ] || { echo "instructions.sh: could not build the peers bench" >&2; exit 1; }
cargo build --release --quiet -p nemo-lens-test-support --bin bench_pair

WIRINGS=("$@")
if [ ${#WIRINGS[@]} -eq 0 ]; then
  WIRINGS=(no_subscriber lens_non_exporting_rank lens_disabled_group registry_only fmt_sink
    plain_tracing_opentelemetry plain_tracing_opentelemetry_lean lens_exported lens_exported_no_context_activation
    lens_opentelemetry_layer fastrace fastrace_no_property)
fi
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
export OTEL_BSP_MAX_QUEUE_SIZE=$((4 * N + 8192))

# Inclusive instructions of function $2 in callgrind output $1 (fails loudly if absent).
inclusive() {
  local ir
  ir=$(callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null \
    | grep -E "[: ]$2( |$)" | head -1 | awk '{gsub(",", "", $1); print $1}')
  [ -n "$ir" ] || { echo "instructions.sh: no cost for $2 in $1" >&2; touch "$OUT/failed"; return 1; }
  echo "$ir"
}

# Instructions per span for wiring $1, shape $2 ("" when the run failed).
count() {
  local w=$1 s=$2 cg="$OUT/cg.$1.$2" log="$OUT/log.$1.$2"
  valgrind --tool=callgrind --callgrind-out-file="$cg" "$BIN" --wiring "$w" --shape "$s" \
    --count "$N" >"$log" 2>"$log.err" \
    || { echo "instructions.sh: $w $s failed:" >&2; grep -v "^==" "$log.err" | tail -5 >&2; touch "$OUT/failed"; return 0; }
  local line calls spans ir note=""
  line=$(grep '^COUNT ' "$log") \
    || { echo "instructions.sh: $w $s printed no COUNT line" >&2; touch "$OUT/failed"; return 0; }
  calls=$(sed -E 's/.* calls=([0-9]+).*/\1/' <<<"$line")
  spans=$(sed -E 's/.* spans_per_call=([0-9]+).*/\1/' <<<"$line")
  ir=$(inclusive "$cg" 'peers::run_loop') || return 0
  # EXPORTED <wiring> <produced> <exported>: flag any drop.
  if read -r _ _ produced exported < <(grep '^EXPORTED ' "$log"); then
    [ "$exported" -ge "$produced" ] || note=" (dropped $((produced - exported)))"
  fi
  # The SDK-span closer's share (its on_start and on_end, never inlined), per span over every
  # call of the run (the warm-up's 2,000 too), for the wirings whose spans go through the SDK.
  if [ "$w" = lens_opentelemetry_layer ]; then
    local on_start on_end
    on_start=$(inclusive "$cg" 'nemo_lens::queue::sdk_span_closer::SdkSpanCloser::on_start') || return 0
    on_end=$(inclusive "$cg" 'nemo_lens::queue::sdk_span_closer::SdkSpanCloser::on_end') || return 0
    note="$note$(awk -v a="$on_start" -v b="$on_end" -v c="$calls" -v s="$spans" \
      'BEGIN { printf " (closer: %d on_start + %d on_end)", a / ((c + 2000) * s) + 0.5, b / ((c + 2000) * s) + 0.5 }')"
  fi
  awk -v ir="$ir" -v c="$calls" -v s="$spans" -v note="$note" \
    'BEGIN { printf "%d%s", ir / (c * s) + 0.5, note }'
}

echo "instructions per span on the training thread (callgrind, valgrind $(valgrind --version | cut -d- -f2), N=$N, $(date -u +%Y-%m-%dT%H:%MZ))"
echo "(each figure includes run_loop's own 6 instructions per call; fastrace's child column is a root"
echo "with 99 local children, per span)"
echo
echo "| wiring | root span | child of a long-lived span |"
echo "|---|---|---|"
for w in "${WIRINGS[@]}"; do
  echo "| $w | $(count "$w" root) | $(count "$w" child) |"
done

echo
echo "bench_pair (two nested group-gated spans per iteration; 2,000 warm-up + N counted):"
for mode in export noexport; do
  valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.pair.$mode" \
    "$CARGO_TARGET_DIR/release/bench_pair" "$N" "$mode" >/dev/null 2>&1 \
    || { echo "instructions.sh: bench_pair $mode failed" >&2; touch "$OUT/failed"; continue; }
  ir=$(inclusive "$OUT/cg.pair.$mode" 'bench_pair::work') || continue
  # `work` runs 2000 warm-up iterations plus N, two spans each.
  awk -v ir="$ir" -v n="$N" -v m="$mode" \
    'BEGIN { printf "- %s: %d instructions per span\n", m, ir / (2 * (n + 2000)) + 0.5 }'
done
# A blank cell above is a failed run (its error is on stderr): fail the script too.
if [ -e "$OUT/failed" ]; then exit 1; fi
