#!/usr/bin/env bash
# Runs the official W3C Trace Context validation suite (`test/` of github.com/w3c/trace-context)
# against nemo-lens's propagator, through the suite's test service
# (test-support/src/bin/w3c_service.rs), at STRICT_LEVEL=2 and SPEC_LEVEL=2 (Level 2: the
# `random` flag test runs too). The suite is not part of this repository and CI does not run it;
# docs/propagation.md records its result.
#
#   tests/w3c/run-official-suite.sh SUITE
#
# SUITE is a clone of w3c/trace-context (a work tree or a bare repository: its HEAD's `test/` is
# used) or the suite's `test/` directory itself. Builds the service, installs aiohttp (the
# harness's one dependency) into a venv under the target directory with pip, starts the service
# on a free port, runs `python test.py` from the suite's directory, prints the unittest summary
# and exits non-zero unless every test passed. The service is ended on exit; its spans
# (console JSONL) and stderr are kept in <target>/w3c/. The harness listens on 127.0.0.1:7777
# unless HARNESS_PORT says otherwise.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 SUITE (a clone of w3c/trace-context, or its test/ directory)" >&2
  exit 2
fi
suite_arg=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
work=$target/w3c
mkdir -p "$work"

# The suite's directory, and the commit it comes from when there is one.
commit=""
if [[ -f $suite_arg/test.py ]]; then
  suite=$(cd "$suite_arg" && pwd)
  commit=$(git -C "$suite" log -1 --format=%h 2>/dev/null || true)
elif [[ -f $suite_arg/test/test.py ]]; then
  suite=$(cd "$suite_arg/test" && pwd)
  commit=$(git -C "$suite_arg" log -1 --format=%h 2>/dev/null || true)
elif git -C "$suite_arg" rev-parse --verify -q HEAD:test/test.py >/dev/null; then
  # A bare repository: its HEAD's test/ extracted into the target directory.
  rm -rf "$work/suite"
  mkdir -p "$work/suite"
  git -C "$suite_arg" archive HEAD test | tar -x -C "$work/suite"
  suite=$work/suite/test
  commit=$(git -C "$suite_arg" log -1 --format=%h)
else
  echo "$0: $suite_arg holds no test.py, test/test.py or a repository with test/test.py" >&2
  exit 2
fi
echo "W3C Trace Context suite: ${commit:-unknown commit} ($suite)"

cargo build --quiet --manifest-path "$root/Cargo.toml" -p nemo-lens-test-support --bin w3c_service
service_bin=$target/debug/w3c_service

venv=$target/w3c-venv
if [[ ! -x $venv/bin/python ]]; then
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import aiohttp' 2>/dev/null; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check aiohttp
fi

service_pid=""
stop_service() {
  if [[ -n $service_pid ]] && kill -0 "$service_pid" 2>/dev/null; then
    # SIGTERM: the service flushes its spans, then ends by the signal.
    kill -TERM "$service_pid" 2>/dev/null || true
    wait "$service_pid" 2>/dev/null || true
  fi
}
trap stop_service EXIT

"$service_bin" 0 >"$work/service-spans.jsonl" 2>"$work/service.stderr" &
service_pid=$!
address=""
for _ in $(seq 1 300); do
  address=$(sed -n 's/^listening on \([0-9.]*:[0-9]*\)$/\1/p' "$work/service.stderr" | head -n 1)
  [[ -n $address ]] && break
  if ! kill -0 "$service_pid" 2>/dev/null; then
    echo "$0: the service exited before listening:" >&2
    cat "$work/service.stderr" >&2
    exit 1
  fi
  sleep 0.1
done
if [[ -z $address ]]; then
  echo "$0: the service printed no address within 30 s" >&2
  exit 1
fi
echo "service: http://$address/test (pid $service_pid)"

status=0
(cd "$suite" && STRICT_LEVEL=2 SPEC_LEVEL=2 SERVICE_ENDPOINT="http://$address/test" \
  "$venv/bin/python" test.py) >"$work/suite.log" 2>&1 || status=$?
cat "$work/suite.log"

# The unittest summary: `Ran N tests in T` and the verdict line after it.
summary=$(grep -A2 -E '^Ran [0-9]+ tests? in ' "$work/suite.log" | grep -v '^$' | tr '\n' ' ' || true)
echo
echo "summary (suite ${commit:-unknown commit}): ${summary:-none: the suite did not finish}"
if [[ $status -ne 0 ]] || ! grep -qE '^OK( |$)' "$work/suite.log"; then
  echo "$0: the W3C suite failed (status $status)" >&2
  exit 1
fi
