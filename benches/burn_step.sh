#!/usr/bin/env bash
# The cost of tracing on a real training step: examples/burn-trainer (burn 0.21, an MLP, one
# flattened all-reduce of the gradients per step through burn-collective), one process per rank
# on this machine, traced five ways:
#   - no subscriber (`--wiring none`);
#   - lens on ranks that do not export (`NEMO_LENS_EXPORT_STRATEGY=sampled`, rate 0);
#   - lens exporting the default groups on every rank;
#   - lens exporting every group (`all`): the job's, `collective` (burn-collective's spans, by
#     the default rule) and `ops` (burn-autodiff's op spans, by the rule `burn_autodiff=ops`);
#   - tracing-opentelemetry without its optional bookkeeping (`--wiring otel-lean`), exporting
#     the same spans as the row above.
# Every exporting wiring hands its spans to an exporter that counts and discards them (feature
# `otel`), so the rows compare what tracing costs the step, not the file or network behind it.
# Per wiring: rank 0's median and mean step over the steps after the first three, the spans
# rank 0 exported per step and those it dropped, and the slowdown of the median step against no
# subscriber. The step time is wall time of a job sharing the machine's cores between its
# ranks: run it on a quiet machine.
#
# Usage: benches/burn_step.sh [steps]     (default 300; BURN_STEP_RANKS ranks, default 2;
# BURN_STEP_PROFILE=dev checks the script against a debug build in a few minutes)
# Prints a Markdown table (benches/run_all.sh puts it on docs/performance.md).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-300}
RANKS=${BURN_STEP_RANKS:-2}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
PROFILE=${BURN_STEP_PROFILE:-release}
cargo build --quiet --profile "$PROFILE" -p burn-trainer --features otel
BIN=$CARGO_TARGET_DIR/$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")/burn-trainer
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# A base port whose 2 × ranks + 1 successors are free (tensor ports and the step barrier).
free_port() {
  python3 - "$RANKS" <<'PY'
import socket, sys
need = 2 * int(sys.argv[1]) + 1
while True:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); base = s.getsockname()[1]; s.close()
    if base + need > 65535:
        continue
    socks = []
    try:
        for i in range(1, need + 1):
            t = socket.socket(); t.bind(("0.0.0.0", base + i)); socks.append(t)
    except OSError:
        continue
    finally:
        for t in socks:
            t.close()
    print(base)
    break
PY
}

# run NAME [ENV=VALUE ...] -- [trainer args]: the job, every rank's stdout in $OUT/NAME-R.out.
run() {
  local name=$1; shift
  local env=()
  while [ "$1" != "--" ]; do env+=("$1"); shift; done
  shift
  local port pids=() r
  port=$(free_port)
  for ((r = 0; r < RANKS; r++)); do
    env -u NEMO_LENS_ENABLED "${env[@]}" NEMO_LENS_METRICS_ENABLED=0 \
      "$BIN" --rank "$r" --world-size "$RANKS" --master-port "$port" --steps "$STEPS" "$@" \
      >"$OUT/$name-$r.out" 2>"$OUT/$name-$r.err" &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do
    wait "${pids[$r]}" || { echo "burn_step: $name rank $r failed:" >&2; cat "$OUT/$name-$r.err" >&2; exit 1; }
  done
}

LENS=(NEMO_LENS_ENABLED=1 NEMO_LENS_EXPORT_STRATEGY=all_ranks)
OPS=(NEMO_LENS_SPAN_GROUPS=all NEMO_LENS_SPAN_GROUP_RULES=default,burn_autodiff=ops)
run none -- --wiring none
run lens_non_exporting NEMO_LENS_ENABLED=1 NEMO_LENS_EXPORT_STRATEGY=sampled NEMO_LENS_EXPORT_SAMPLE_RATE=0 --
run lens_default "${LENS[@]}" NEMO_LENS_SPAN_GROUPS=default -- --discard-spans
run lens_collective_ops "${LENS[@]}" "${OPS[@]}" -- --discard-spans
run otel_lean -- --wiring otel-lean

python3 - "$OUT" <<'PY'
import re, sys
out = sys.argv[1]
rows = [
    ("none", "no subscriber"),
    ("lens_non_exporting", "lens, non-exporting ranks"),
    ("lens_default", "lens, exporting the default groups"),
    ("lens_collective_ops", "lens, exporting every group (`collective`, `ops` included)"),
    ("otel_lean", "tracing-opentelemetry lean, the same spans"),
]
def rank0(name):
    text = open(f"{out}/{name}-0.out").read()
    t = re.search(r"^timing steps (\d+) median_ms ([\d.]+) mean_ms ([\d.]+)", text, re.M)
    if not t:
        sys.exit(f"burn_step: no timing line from {name}")
    s = re.search(r"^spans exported (\d+) dropped (\S+)", text, re.M)
    steps = len(re.findall(r"^step \d+ loss", text, re.M))
    return float(t.group(2)), float(t.group(3)), s, steps
base = rank0("none")[0]
print("| wiring | median step | mean step | spans per step | dropped | slowdown |")
print("|---|---|---|---|---|---|")
for name, label in rows:
    median, mean, spans, steps = rank0(name)
    per_step = f"{int(spans.group(1)) / steps:.1f}" if spans else "0"
    dropped = spans.group(2) if spans else "–"
    slowdown = "–" if name == "none" else f"{(median / base - 1) * 100:+.1f} %"
    print(f"| {label} | {median:.2f} ms | {mean:.2f} ms | {per_step} | {dropped} | {slowdown} |")
PY
