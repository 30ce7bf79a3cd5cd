#!/usr/bin/env bash
# The GPU check of the lendable machine in one command (benchmarks/gpu_check_h200.py): one H200,
# Python 3.12 and torch preinstalled, no network; stopped after $AT2PO_CHECK_TIMEOUT seconds
# (default 470), its results written after every sub-check so a stopped run keeps them.
#   bash benchmarks/gpu_check_h200.sh [--size 1.7b] [--steps N] [--only loss,train] [--out DIR]
# Carried: benchmarks/wheels/ (benchmarks/gpu_check_wheels.sh fills it): only what the machine
# lacks. They are installed with `pip --target` into $AT2PO_CHECK_SITE/site-packages and put
# first on PYTHONPATH, beside the machine's own packages (its torch, transformers, pyarrow):
# - not a `venv --system-site-packages`: the machine's python is itself a virtual environment,
#   and a venv made from it sees the base interpreter's packages, not that environment's torch;
# - a folder named site-packages: dill (datasets' fingerprint hashing) pickles by value any
#   module outside sys.prefix whose path lacks "site-packages"; for pyarrow's C types that
#   fails (PicklingError on MonthDayNano, seen with pyarrow loaded from such a folder).
# Results: $OUT (the device machine's output folder) or benchmarks/gpu_check_out/: table.txt
# and checks.json. AT2PO_CHECK_SITE=none runs with $PYTHON as it is (nothing installed; tests).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
SITE="${AT2PO_CHECK_SITE:-/tmp/at2po-gpu-check}"
WHEELS="${AT2PO_CHECK_WHEELS:-$ROOT/benchmarks/wheels}"
RESULTS="${OUT:-$ROOT/benchmarks/gpu_check_out}"
start=$(date +%s)
extra_path=""
if [ "$SITE" != none ]; then
    if compgen -G "$WHEELS/*.whl" > /dev/null; then
        "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-index --no-deps \
            --no-compile --no-cache-dir --upgrade --target "$SITE/site-packages" "$WHEELS"/*.whl \
        || echo "gpu_check: the carried wheels did not install; the env step names what is missing"
        extra_path="$SITE/site-packages"
    else
        echo "gpu_check: no carried wheels in $WHEELS (run benchmarks/gpu_check_wheels.sh first)"
    fi
fi
echo "gpu_check: environment ready in $(( $(date +%s) - start )) s"
PYTHONPATH="${extra_path:+$extra_path:}$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 \
    timeout "${AT2PO_CHECK_TIMEOUT:-470}" "$PYTHON" "$ROOT/benchmarks/gpu_check_h200.py" \
    --out "$RESULTS" "$@"
status=$?
echo "gpu_check: exit $status after $(( $(date +%s) - start )) s"
exit $status
