#!/usr/bin/env bash
# Regenerates every performance figure of the README and the bench headers, in one go:
#   1. `cargo bench --bench peers`: nemo-lens beside its peers, one process per wiring (the
#      table of README "Performance" and of issue 13);
#   2. the criterion benches (spans, events, nesting, ids, console), tables by benches/report.py;
#   3. the OTLP/HTTP run against a loopback rotel collector;
#   4. the side-by-side comparison with the Python NeMo Lens (benches/compare_python.sh);
#   5. instructions per span on the training thread under callgrind (benches/instructions.sh),
#      the load-independent figure;
#   6. the reentry memory test.
# Prints the date, toolchain, machine and load average first and the load average last: paste
# them with the figures (bench headers carry the current run only). Results of the criterion
# benches also stay under $CARGO_TARGET_DIR/criterion.
#
# Usage: benches/run_all.sh [criterion args]   e.g. --warm-up-time 1 --measurement-time 3
# Takes about 15 minutes. Run it on a quiet machine (check `uptime`): wall-clock figures on a
# shared 2-core machine move by 2x with the load; `peers` also prints the training thread's CPU
# time, and instructions.sh counts instructions, which do not.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(rustc --version), $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load average $(cut -d' ' -f1-3 /proc/loadavg), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo
echo '`peers` (one process per wiring)'
cargo bench --quiet --bench peers
echo
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
echo
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
