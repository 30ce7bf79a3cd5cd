#!/usr/bin/env bash
# The GPU check of the lendable machine in one command (benchmarks/gpu_check_h200.py): one H200,
# Python 3.12 and torch preinstalled, no network; <= 8 minutes (the check is stopped at 470 s).
#   bash benchmarks/gpu_check_h200.sh [--size 1.7b] [--steps N]
# Carried: benchmarks/wheels/ (benchmarks/gpu_check_wheels.sh fills it, <= 60 MiB). They go
# into a virtual environment that also sees the machine's packages (its torch), resolved with no
# index; if they cannot be resolved together there, each is installed without its dependencies
# and the check's env step names whatever is still missing. Results: $OUT (the device
# machine's output folder) or benchmarks/gpu_check_out/: table.txt and checks.json.
# AT2PO_CHECK_VENV=none runs with $PYTHON as it is (no environment made, nothing installed).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
VENV="${AT2PO_CHECK_VENV:-/tmp/at2po-gpu-check-venv}"
WHEELS="$ROOT/benchmarks/wheels"
RESULTS="${OUT:-$ROOT/benchmarks/gpu_check_out}"
start=$(date +%s)
if [ "$VENV" = none ]; then  # use $PYTHON as it is (a prepared environment; the tests)
    PY="$PYTHON"
else
    "$PYTHON" -m venv --system-site-packages "$VENV" || { echo "gpu_check: cannot make $VENV" >&2; exit 2; }
    PY="$VENV/bin/python"
    if compgen -G "$WHEELS/*.whl" > /dev/null; then
        "$PY" -m pip install --quiet --disable-pip-version-check --no-index \
            --find-links "$WHEELS" -r "$ROOT/benchmarks/gpu_check_wheels.txt" \
        || "$PY" -m pip install --quiet --disable-pip-version-check --no-index \
            --no-deps "$WHEELS"/*.whl \
        || echo "gpu_check: the carried wheels did not install; the env step names what is missing"
    else
        echo "gpu_check: no carried wheels in $WHEELS (run benchmarks/gpu_check_wheels.sh first)"
    fi
fi
echo "gpu_check: environment ready in $(( $(date +%s) - start )) s"
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" timeout 470 "$PY" \
    "$ROOT/benchmarks/gpu_check_h200.py" --out "$RESULTS" "$@"
status=$?
echo "gpu_check: exit $status after $(( $(date +%s) - start )) s"
exit $status
