#!/usr/bin/env bash
# Where an exported span's instructions go: one callgrind run of the `peers` bench binary
# (benches/peers/) for wiring `lens_exported` and one shape, with a callgrind output per thread,
# then a table of instructions per span for the functions that matter, read inclusively (a
# function's own cost and everything it calls), so the rows overlap: a callback's row includes
# the rows of what it calls.
#
# Threads: the training thread runs the `tracing` callbacks; the batch worker builds the
# exporter's spans from the records; the export helper thread runs the exporter (here one that
# discards, so its cost is dropping the batch). Each thread's total is per span too.
#
# Usage: benches/profile.sh [SHAPE] [N]   SHAPE root (default) or child; N counted calls (20000)
# Needs valgrind (callgrind_annotate comes with it).
set -euo pipefail
cd "$(dirname "$0")/.."
SHAPE=${1:-root}
N=${2:-20000}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null \
  || { echo "profile.sh: valgrind (with callgrind_annotate) is required" >&2; exit 1; }
BIN=$(cargo bench --quiet --no-run --features tracing-opentelemetry --bench peers --message-format=json \
  | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "peers" and m.get("executable"):
        print(m["executable"])')
[ -x "$BIN" ] || { echo "profile.sh: could not build the peers bench" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
# Queues large enough that nothing is dropped (a dropped span costs less than an exported one).
OTEL_BSP_MAX_QUEUE_SIZE=$((4 * N + 8192)) valgrind --tool=callgrind --separate-threads=yes \
  --callgrind-out-file="$OUT/cg" "$BIN" --wiring lens_exported --shape "$SHAPE" --count "$N" \
  >"$OUT/log" 2>"$OUT/err" \
  || { echo "profile.sh: the run failed:" >&2; grep -v '^==' "$OUT/err" | tail -5 >&2; exit 1; }
read -r _ _ produced exported < <(grep '^EXPORTED ' "$OUT/log")
[ "$exported" -ge "$produced" ] \
  || { echo "profile.sh: $((produced - exported)) spans dropped; the counts would be low" >&2; exit 1; }

python3 - "$OUT" "$N" "$produced" <<'PY'
import glob, re, sys

sys.path.insert(0, "benches")
from callgrind import inclusive, total

out, n, produced = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


threads = sorted(glob.glob(out + "/cg-*"))
main = inclusive(threads[0])
rows = [
    ("a whole span (`peers::run_loop`)", r"^peers::run_loop$"),
    ("create: `Layered::new_span` (registry and layer)", r"Layered<L,S> as .*Subscriber>::new_span$"),
    ("- the lens layer's `on_new_span`", r"SpanLayer<S> as .*Layer<S>>::on_new_span$"),
    ("- - trace id, flags and sampling (`decide`)", r"^nemo_lens::layer::pipeline::decide$"),
    ("- - reading the fields into the record", r"^tracing_core::span::Attributes::record$"),
    ("- - span and trace ids (ChaCha20 refills)", r"^nemo_lens::ids::Stream::refill$"),
    ("enter: `Layered::enter`", r"Layered<L,S> as .*Subscriber>::enter$"),
    ("- the lens layer's `on_enter` (context activation)", r"SpanLayer<S> as .*Layer<S>>::on_enter$"),
    ("exit: `Layered::exit`", r"Layered<L,S> as .*Subscriber>::exit$"),
    ("- the lens layer's `on_exit`", r"SpanLayer<S> as .*Layer<S>>::on_exit$"),
    ("close: `Layered::try_close`", r"Layered<L,S> as .*Subscriber>::try_close$"),
    ("- the lens layer's `on_close` (size, queue push)", r"SpanLayer<S> as .*Layer<S>>::on_close$"),
    ("allocator: `malloc` + `free`", None),
]
print("| training thread | instructions per span |")
print("|---|---|")
for label, pattern in rows:
    if pattern is None:
        cost = sum(v for k, v in main.items() if re.search(r"(^|/)malloc\.c:(malloc|free)$", k)
                   or k in ("malloc", "free"))
    else:
        cost = next((v for k, v in main.items() if re.search(pattern, k)), None)
    # run_loop covers the N counted calls; every other function also ran in the 2,000 warm-up
    # calls, so its cost is per span produced.
    per = n if label.startswith("a whole span") else produced
    cell = "n/a" if cost is None else f"{cost / per:,.0f}"
    print(f"| {label} | {cell} |")
print()
print("| other threads (all of the run) | instructions per exported span |")
print("|---|---|")
for path in threads[1:]:
    costs = inclusive(path)
    name = ("batch worker (records to the exporter's spans)"
            if any("span_data" in k or "build_sdk_span" in k for k in costs)
            else "export helper (runs the exporter, drops the batch)"
            if any("DeadlineExporter" in k or "ConsoleSpanExporter" in k or "export" in k for k in costs)
            else "other")
    t = total(path)
    if t / produced >= 1:
        print(f"| {name} | {t / produced:,.0f} |")
PY
