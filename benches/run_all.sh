#!/usr/bin/env bash
# Regenerates every performance figure of the README and the bench headers, in one go:
# the criterion benches (spans, events, nesting, ids, console), the OTLP/HTTP run against a
# loopback rotel collector, the side-by-side comparison with the Python NeMo Lens, and the
# reentry memory test. Prints the tables; results also stay under $CARGO_TARGET_DIR/criterion.
#
# Usage: benches/run_all.sh [criterion args]   e.g. --warm-up-time 1 --measurement-time 3
# Takes about 10 minutes with criterion's defaults (the benches set 1 s warm-up, 3 s measure).
# Run it on a quiet machine: every ratio is measured within one bench run, but the exported
# cases share the cores with the batch processor's thread.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(rustc --version), $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
for b in spans events nesting ids console; do
  cargo bench --quiet --bench "$b" -- "$@" | grep -E '^(console_|Benchmarking .*: Analyzing)' | grep -v Analyzing || true
done
python3 benches/report.py
echo
echo '`otlp` (OTLP/HTTP protobuf to a loopback rotel collector)'
cargo bench --quiet --bench otlp
echo
echo '`compare_python.sh`'
benches/compare_python.sh
echo
echo '`instructions.sh` (callgrind, load-independent)'
benches/instructions.sh
echo
echo '`tests/reentry_memory.rs`'
cargo test --release --quiet --all-features --test reentry_memory -- --nocapture 2>&1 | grep -o 'REENTRY.*' | head -1
