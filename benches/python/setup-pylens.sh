#!/usr/bin/env bash
# Copied from the project's shared bench kit, so benches/compare_python.sh runs from a checkout.
# Installs the Python NeMo Lens 0.1.0 (the system this crate re-implements) and the
# OpenTelemetry Python SDK into a virtual environment, for side-by-side measurements.
# Usage: setup-pylens.sh [VENV_DIR]   (default: target/pylens-venv)
# The wheel declares Python >= 3.13 but uses only one 3.12 `type` alias; that line is
# rewritten so that it imports on the machine's Python 3.11.
set -euo pipefail
V=${1:-target/pylens-venv}
[ -x "$V/bin/python" ] || python3 -m venv "$V"
"$V/bin/pip" install -q --ignore-requires-python nemo-lens==0.1.0 opentelemetry-sdk==1.45.2
f=$("$V/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/nemo/lens/strategies.py
sed -i 's/^type ExportStrategy = /ExportStrategy = /' "$f"
"$V/bin/python" -c 'import nemo.lens; print("nemo-lens", nemo.lens.__version__)'
