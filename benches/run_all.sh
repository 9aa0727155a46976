#!/usr/bin/env bash
# Runs every bench once and writes docs/performance.md from that one run: a header with the
# date, toolchain, machine and load average before and after, then each bench's tables; the
# goals against that run go to benches/README.md.
#   1. `cargo bench --bench peers`: nemo-lens beside its peers, one process per wiring, with a
#      discarding exporter and really exporting OTLP to a loopback rotel collector;
#   2. benches/instructions.sh: instructions per span on the training thread under callgrind,
#      the load-independent figure, and benches/profile.sh, where an exported span's instructions go;
#   3. the criterion benches (spans, events, nesting, ids, console, recorder), tables by
#      benches/report.py, and benches/detail.rs (per-step detail capture);
#   4. the OTLP/HTTP run against a loopback rotel collector (benches/otlp.rs);
#   5. the side-by-side comparison with the Python NeMo Lens (benches/compare_python.sh);
#   6. resident memory over millions of re-entries of one span (tests/lifecycle/reentry_memory.rs);
#   7. NVTX ranges with no tool attached (benches/nvtx.rs, feature `nvtx`), timed and under
#      callgrind;
#   8. the command-line tool: its throughput (cli/benches/throughput.rs), 4,096 rank dumps
#      (cli/benches/ranks.rs) and where its instructions go (cli/benches/profile.sh);
#   9. the step time of a real burn training job under each wiring (benches/burn_step.sh).
# The page is replaced only when every step succeeded, then README's cost table is copied from
# it (benches/readme_cost.py). The explanations on the page are the text of this script (edit
# them here, not in the page).
#
# Usage: benches/run_all.sh [criterion args]   e.g. --warm-up-time 1 --measurement-time 3
# Needs valgrind, python3 with venv/pip (rotel and the Python library are installed under the
# target directory on first use) and network access for that first install, and libclang for
# the `nvtx` feature (.ci/test-deps, run first, installs it or says what to install). Takes about 20
# minutes (plus the first release build of burn, about 5). Run it on a quiet machine (check `uptime`): wall-clock figures move with the load;
# `peers` also prints the training thread's CPU time, and instructions.sh counts instructions,
# which do not.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
PAGE=docs/performance.md
OUT=$(mktemp -d)
# A failed run keeps its outputs for a look at what went wrong.
trap 'status=$?; if [ "$status" -eq 0 ]; then rm -rf "$OUT"; else echo "run_all: failed, outputs kept in $OUT" >&2; fi' EXIT
# This run's criterion results only, whatever earlier runs left under the target directory.
export CRITERION_HOME=$OUT/criterion

bash .ci/test-deps
load() { cut -d' ' -f1-3 /proc/loadavg; }
START_DATE=$(date -u '+%Y-%m-%d %H:%M')
START_LOAD=$(load)
echo "run_all: started $START_DATE UTC, load average $START_LOAD" >&2

echo "run_all: peers" >&2
cargo bench --quiet --features tracing-opentelemetry --bench peers >"$OUT/peers.txt"
echo "run_all: instructions.sh" >&2
benches/instructions.sh >"$OUT/instructions.txt"
echo "run_all: profile.sh" >&2
benches/profile.sh root >"$OUT/profile.txt"
for b in spans events nesting ids console recorder; do
  echo "run_all: $b" >&2
  cargo bench --quiet --bench "$b" -- "$@" >"$OUT/$b.txt"
done
python3 benches/report.py "$CRITERION_HOME" >"$OUT/criterion.txt"
echo "run_all: detail" >&2
cargo bench --quiet --bench detail -- "$@" >"$OUT/detail.txt"
{
  echo '| case | time per detail span |'
  echo '|---|---|'
  # Criterion prints the name, then `time: [low median high]`.
  awk '/^detail_span/ { name = $1 } /time:/ && name { print "| `" name "` | " $(NF-3) " " $(NF-2) " |"; name = "" }' "$OUT/detail.txt"
} >"$OUT/detail_table.txt"
echo "run_all: otlp" >&2
cargo bench --quiet --bench otlp >"$OUT/otlp.txt"
echo "run_all: compare_python.sh" >&2
benches/compare_python.sh >"$OUT/python.txt"
echo "run_all: reentry_memory" >&2
cargo test --release --quiet --all-features --test lifecycle -- reentry_memory:: --nocapture >"$OUT/reentry.txt" 2>&1
echo "run_all: nvtx" >&2
env -u NVTX_INJECTION64_PATH cargo bench --quiet --features nvtx --bench nvtx >"$OUT/nvtx.txt"
NVTX_BENCH=$(cargo bench --features nvtx --bench nvtx --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "nvtx" and m.get("executable"):
        print(m["executable"])')
nvtx_instructions() { # case n: the instructions of the whole run
  NVTX_BENCH_CASE=$1 NVTX_BENCH_N=$2 OTEL_BSP_MAX_QUEUE_SIZE=200000 env -u NVTX_INJECTION64_PATH \
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$NVTX_BENCH" 2>&1 \
    | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
{
  echo '| case | instructions per iteration |'
  echo '|---|---|'
  for c in span/registry_only span/non_exporting/off span/non_exporting/on \
      span_reentered/registry_only span_reentered/non_exporting/on \
      event_in_span/non_exporting/off event_in_span/non_exporting/on; do
    a=$(nvtx_instructions "$c" 2000)
    b=$(nvtx_instructions "$c" 22000)
    echo "| \`$c\` | $(((b - a) / 20000)) |"
  done
} >"$OUT/nvtx_instructions.txt"
echo "run_all: nemo-lens throughput, ranks" >&2
cargo bench --quiet -p nemo-lens-cli --bench throughput -- "$@" >"$OUT/cli.txt"
cargo bench --quiet -p nemo-lens-cli --bench ranks >"$OUT/ranks.txt"
echo "run_all: cli/benches/profile.sh" >&2
cli/benches/profile.sh >"$OUT/cli_profile.txt"
{
  echo '| bench | time | throughput |'
  echo '|---|---|---|'
  # Criterion prints the name, then `time: [low median high]` and `thrpt: [...]` lines.
  awk '/^cli/ { name = $1 } /time:/ { t = $(NF-3) " " $(NF-2) } /thrpt:/ { print "| `" name "` | " t " | " $(NF-3) " " $(NF-2) " |" }' "$OUT/cli.txt"
} >"$OUT/cli_table.txt"
echo "run_all: burn_step.sh" >&2
benches/burn_step.sh >"$OUT/burn_step.txt"

# The goals against this run's figures (fails when a figure is missing).
python3 benches/goals.py "$OUT/peers.txt" "$OUT/instructions.txt" "$OUT/criterion.txt" \
  "$OUT/cli_table.txt" >"$OUT/goals.txt"
END_DATE=$(date -u '+%H:%M')
END_LOAD=$(load)
CPU=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
VIRT=$(grep -qw hypervisor /proc/cpuinfo && echo ', virtual machine' || true)

# Lines of a bench's output from its first table row on (drops the bench's own preamble).
tables() { sed -n '/^|/,$p' "$1"; }
# Lines starting with $2, as a text block.
lines() {
  echo '```text'
  grep -E "^$2" "$1" || { echo "run_all: no '$2' lines in $1" >&2; exit 1; }
  echo '```'
}

{
cat <<'EOF'
# Performance

<!-- Written by benches/run_all.sh from one run. Edit the text in the script, not here. -->

What a span costs the training thread, beside what it costs with no subscriber, with the
`tracing` registry alone and with tracing-opentelemetry, and what the export pipeline delivers.
Every figure on this page comes from the one run described below. Wall-clock figures on a shared
machine move between runs; the instruction counts do not depend on the load: read them first.
`benches/run_all.sh` runs everything again and rewrites this page.

EOF
cat <<EOF
## The run

| | |
|---|---|
| date | $START_DATE – $END_DATE UTC |
| toolchain | $(rustc --version) |
| machine | $(nproc) cores, $CPU$VIRT, $(uname -sr) |
| load average (1, 5, 15 min) | $START_LOAD at start, $END_LOAD at end |

EOF
cat <<'EOF'
## Beside its peers

`cargo bench --features tracing-opentelemetry --bench peers` (`benches/peers/`): one span
(create with one `i64` field, enter, exit, close) as a root span and as the child of a long-lived
span, one process per wiring, each set up the way its users set it up (global default; exporting
wirings: a batch processor and an exporter that discards), median (min – max) of 9 samples of
about 200 ms, and the measuring thread's CPU time. The "spans dropped" column is what each
exporting wiring's exporter did not receive over the sampled runs: a wiring whose training
thread outruns its batch worker for seconds fills even a large queue and drops, and a dropped
span costs the training thread less than an exported one, so such a row's timings are a floor.
The whole-process table below is the comparison with nothing dropped.

The second table is the whole process: for the exporting wirings and the registry they sit on,
one run of 500,000 spans per shape between two flushes, with the training thread's wall time
per span and the CPU time of every thread of the process per span (training thread, batch
worker, exporter), and the spans of that run the exporter did not receive. A span's cost does
not end on the training thread: the batch worker's share is CPU the trainer's cores pay for too.

The third table is what a job pays when the spans really leave the process: each wiring
encodes and sends OTLP (HTTP/protobuf, then gRPC) to one rotel collector on loopback (started by
the bench, one summary line per request, exporter `blackhole`), one process per wiring, back to
back. lens writes the requests straight from its span records and sends them itself (gRPC:
a tonic channel on its one-worker runtime; HTTP: its own hyper client); tracing-opentelemetry (lean and default options) the
SDK's batch processor and `opentelemetry_otlp::SpanExporter` (HTTP: its default blocking
reqwest client; gRPC: tonic on a one-worker Tokio runtime); fastrace a reporter that turns its
span records into `SpanData` for the same exporter, as `fastrace-opentelemetry` does. Per shape,
one run of 500,000 spans after a warm-up: the CPU time of every thread of the process per span
(spans made, then flushed), the training thread's wall time, and the wall time of the final
flush alone (how fast the pipeline drains into the collector). Spans are counted where they
arrive: the last column is what the collector did not receive (for lens, in parentheses, what
lens counted as dropped); it must be 0 for a figure to stand.

EOF
tables "$OUT/peers.txt"
cat <<'EOF'

What the rows mean:

- **no subscriber** runs in a process that never builds a dispatcher, so `tracing`'s global max
  level stays `OFF` and a disabled span is one load and compare.
- **lens, non-exporting rank** takes exactly the no-subscriber path (the layer's level hint is
  `OFF`). **lens, disabled group**: the rank exports other groups, so the level check passes and
  the callsite's cached `Interest::never` stops the span. Both are a disabled `tracing`
  callsite; their timings are within a timing loop's noise, the instruction counts below
  settle them.
- **registry alone** is the floor of any `tracing` layer (slab slot, current-span stack, close).
- **lens, exported** keeps a compact record per span on the training thread and the batch
  worker turns it into the exporter's span; **context activation off** is the same without
  making the span OpenTelemetry's current context on each enter.
- **`opentelemetry_layer()`** is tracing-opentelemetry's layer with its default options on the
  lens tracer (feature `tracing-opentelemetry`): it builds the SDK span on the training thread,
  and the SDK-span closer copies each span's start data so that it can truncate it at shutdown.
- **fastrace** is not a `tracing` layer: no dispatcher, no registry, no per-layer filters; spans
  go to a thread-local stack, the clock is the TSC, IDs come from a thread-local counter, and a
  finished trace is handed to a collector thread whole. Its child column is a root with 99
  local children, the shape it is built for; its properties are strings, so carrying the `i64`
  formats and allocates one per span. It shows what a recorder outside `tracing` can reach.

## Instructions per span

`bash benches/instructions.sh` (callgrind): instructions per span on the training thread, for
the same span functions, 20,000 counted calls after 2,000 warm-up calls, queues large enough
that nothing is dropped. Each figure includes 6 instructions of the calling loop. For
`opentelemetry_layer()` the SDK-span closer's share (`on_start` + `on_end`) is given beside it.

EOF
tables "$OUT/instructions.txt"
cat <<'EOF'

## Where an exported span's instructions go

`bash benches/profile.sh root` (callgrind, one output per thread): the `lens_exported` root span
of the table above, function by function, inclusive (a row counts what it calls, so rows
overlap; indented rows are part of the row above). The registry's share of each callback is the
callback's row minus the lens layer's. The other threads' totals are the export pipeline's cost
per span, which the process pays beside the training thread's.

EOF
cat "$OUT/profile.txt"
cat <<'EOF'

## Criterion benches

`cargo bench --bench <name>`, then `python3 benches/report.py`: every case under the same
wirings in one process (no subscriber with the max level reset to `OFF`; the lens layer on a
non-exporting rank, with the span's group disabled, and exporting; tracing-opentelemetry with
default options and lean; the registry alone; `fmt` to `io::sink`), criterion medians.
`span`: one span; `span_2threads`: the same span from two threads at once, per thread;
`span_reentered`: one span built once and entered on every pass; `event_in_span`: an event (a
message and one field) in a `step` span; `nested_N`: N nested spans; `span_vs_registry`: the
exported span against the registry alone, root and child; `span_id` / `trace_id`: the ChaCha
generator against the SDK's `RandomIdGenerator`; `console_export`: the console exporter writing
batches of 512 spans to a file; `recorder`: the flight recorder on and off.
EOF
cat "$OUT/criterion.txt"
cat <<'EOF'

## Console pipeline

`cargo bench --bench console`: the whole console pipeline (lens layer, batch processor with its
defaults, exporter writing to a file) with the producer unthrottled and held to 500,000 spans/s,
3 s each; dropped = produced − written.

EOF
lines "$OUT/console.txt" 'console_'
cat <<'EOF'

## OTLP to a loopback collector

`cargo bench --bench otlp`: OTLP/HTTP protobuf to a rotel collector on loopback, the producer
unthrottled and held to 100,000 spans/s, 3 s each; delivered is what rotel counted, dropped =
produced − delivered.

EOF
lines "$OUT/otlp.txt" 'otlp_http_'
cat <<'EOF'

## Beside the Python library

`benches/compare_python.sh`: the Python NeMo Lens 0.1.0 and this crate, the same shape (two
nested group-gated spans per iteration) on an exporting rank (batch processor, an in-memory or
discarding exporter) and on a non-exporting rank.

EOF
lines "$OUT/python.txt" '(python|rust) '
echo
tables "$OUT/python.txt"
cat <<'EOF'

## Per-step detail capture

`cargo bench --bench detail` (`benches/detail.rs`): what one detail span costs the training
thread inside a step of 50, `exported` (span groups `per_step`, a discarding exporter) against
`held_dropped` (the same span under `NEMO_LENS_DETAIL_GROUPS`, every step's detail dropped;
the step's decision and drop are spread over its 50 spans); then a simulated job of 500 steps
of 50 detail spans and about 5 ms each, one step in 50 four times longer, exporting console
JSONL to a file: the process's CPU time per step (every thread), exported bytes per step, the
steps whose detail was exported and the most detail held at once.

EOF
cat "$OUT/detail_table.txt"
echo
tables "$OUT/detail.txt"
cat <<'EOF'

## Resident memory over re-entries

`cargo test --release --all-features --test lifecycle -- reentry_memory:: --nocapture`: resident memory
before and after three million re-entries of one exported span, in a child process.

EOF
echo '```text'
grep -oE 'rss_before_kib=.*' "$OUT/reentry.txt" | head -1
echo '```'
cat <<'EOF'

## NVTX ranges with no tool attached

`cargo bench --features nvtx --bench nvtx` (`benches/nvtx.rs`): what `NEMO_LENS_NVTX=1` costs a
rank that no profiler watches (every NVTX call finds no tool and returns), under registry + lens
layer + NVTX layer. `span`: one span of an enabled group (create with one field, enter, exit,
close); on a non-exporting rank with ranges on, the registry records the span for the NVTX layer
alone, so `registry_only` is its floor. `span_reentered`: one span built once, entered and exited
on every pass (a push and a pop). `event_in_span`: an event in an entered span (a mark). Median
(min – max) of 9 samples of about 200 ms, and the thread's CPU time; then the instructions per
iteration under callgrind.

EOF
tables "$OUT/nvtx.txt"
echo
cat "$OUT/nvtx_instructions.txt"
cat <<'EOF'

## Command-line tool

`cargo bench -p nemo-lens-cli --bench throughput`: the release `nemo-lens` (process start
included), criterion medians, throughput in uncompressed input bytes. Group `cli`: 8 ranks ×
12,000 span lines, one thread (`--jobs 1`: the figure per core); group `cli_64_files`: the
flight-recorder dumps of 64 ranks × 2,000 steps, one thread against two.

EOF
cat "$OUT/cli_table.txt"
cat <<'EOF'

`bash cli/benches/profile.sh` (callgrind): where `straggler` and `summary` spend their
instructions on group `cli`'s input, one thread, per input byte, inclusive (rows overlap).

EOF
cat "$OUT/cli_profile.txt"
cat <<'EOF'

`cargo bench -p nemo-lens-cli --bench ranks`: `straggler` and `summary` on the dumps of 4,096
ranks (64 steps each), with every core and with one, median wall time of 5 runs and the largest
peak resident memory (from `wait4`).

EOF
lines "$OUT/ranks.txt" '(4096|straggler|summary) '
cat <<'EOF'

## A real training step

`bash benches/burn_step.sh` (`examples/burn-trainer`, feature `otel`): a data-parallel burn 0.21
job, two ranks as two processes on this machine, each step a forward and backward pass of a
small MLP on the CPU and one all-reduce of the flattened gradients through burn-collective,
300 steps. Rank 0's median and mean step after the first three, under: no subscriber; lens on
ranks that do not export; lens exporting the default groups; lens exporting every group (`all`:
the job's, `collective` with burn-collective's own spans through the default span-group rule,
and `ops` with burn-autodiff's op spans, rule `burn_autodiff=ops`); and tracing-opentelemetry's layer without
inactivity tracking, threads, location or target, exporting the same spans. Every exporting
wiring hands its spans to an exporter that counts and discards them; spans per step are rank
0's exported spans over its steps; the slowdown is the median step's against no subscriber.

EOF
tables "$OUT/burn_step.txt"
} >"$OUT/page.md"

mv "$OUT/page.md" "$PAGE"
# The goals against this run, on the contributors' bench page (between its markers).
python3 - "$OUT/goals.txt" "$START_DATE" <<'PY'
import sys
goals, date = open(sys.argv[1]).read().strip(), sys.argv[2]
path = "benches/README.md"
page = open(path).read()
start, end = "<!-- goals: start -->", "<!-- goals: end -->"
head, rest = page.split(start, 1)
_, tail = rest.split(end, 1)
body = f"{start}\nThe run of {date} UTC (the figures on docs/performance.md):\n\n{goals}\n{end}"
open(path, "w").write(head + body + tail)
PY
# README's headline cost table, from this page's whole-process table.
python3 benches/readme_cost.py "$PAGE" README.md
echo "run_all: wrote $PAGE (load average $END_LOAD at end)" >&2
