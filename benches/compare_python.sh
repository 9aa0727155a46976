#!/usr/bin/env bash
# Side by side on this machine: the Python NeMo Lens 0.1.0 and this crate, same shape (two
# nested group-gated spans per iteration; an exporting rank with a batch processor and an
# in-memory / discarding exporter, and a non-exporting rank), and the ratios.
#
# Usage: benches/compare_python.sh [N_EXPORT] [N_NOEXPORT]
#   N_EXPORT    iterations on the exporting rank (2 spans each; default 20000, kept small because
#               the Python library's exported spans are slow)
#   N_NOEXPORT  iterations on the non-exporting rank (default 200000)
# Installs the Python library into $CARGO_TARGET_DIR/pylens-venv (default target/) on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
N_EXPORT=${1:-20000}
N_NOEXPORT=${2:-200000}
TARGET=${CARGO_TARGET_DIR:-target}
VENV=$TARGET/pylens-venv
[ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import nemo.lens' 2>/dev/null \
  || bash benches/python/setup-pylens.sh "$VENV" >&2
cargo build --release --quiet -p nemo-lens-test-support --bin bench_pair
RUST=$TARGET/release/bench_pair
PY="$VENV/bin/python benches/python/pylens_bench.py"

ns() { sed -E 's/^[a-z]+: ([0-9.]+) ns\/span.*/\1/'; }

echo "machine: $(nproc) cores, $(uname -m), rustc $(rustc --version | cut -d' ' -f2), $(date -u +%Y-%m-%d)"
py_export=$($PY "$N_EXPORT" export);        echo "python $py_export"
rs_export=$($RUST "$N_EXPORT" export);      echo "rust   $rs_export"
py_noexport=$($PY "$N_NOEXPORT" noexport);  echo "python $py_noexport"
rs_noexport=$($RUST "$N_NOEXPORT" noexport); echo "rust   $rs_noexport"

pe=$(echo "$py_export" | ns); re=$(echo "$rs_export" | ns)
pn=$(echo "$py_noexport" | ns); rn=$(echo "$rs_noexport" | ns)
echo
echo "| rank | Python ns/span | Rust ns/span | Python / Rust |"
echo "|---|---|---|---|"
awk -v p="$pe" -v r="$re" 'BEGIN { printf "| exporting | %.0f | %.1f | %.0fx |\n", p, r, p / r }'
awk -v p="$pn" -v r="$rn" 'BEGIN { printf "| non-exporting | %.0f | %.2f | %.0fx |\n", p, r, p / r }'
