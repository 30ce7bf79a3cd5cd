#!/usr/bin/env bash
# The GPU check of the lendable machine in one command (benchmarks/gpu_check_h200.py): one H200,
# Python 3.12 and torch preinstalled, no network; stopped after $AT2PO_CHECK_TIMEOUT seconds of
# command time (default 360: twice in the 15 minutes of device time with the machine's start),
# its results written after every sub-check so a stopped run keeps them.
#   bash benchmarks/gpu_check_h200.sh [--size 1.7b] [--steps N] [--only loss,train] [--out DIR]
#   bash benchmarks/gpu_check_h200.sh --both-sizes   # issue #47: $OUT/q06 (all), $OUT/q17 (rollout,train,plan); ~450 s
# Carried: benchmarks/wheels/ (benchmarks/gpu_check_wheels.sh fills it, and stamps REVISION there:
# the record's revision where .git does not travel): only what the machine lacks; without it
# the check is refused before any work. They are installed with `pip --target` into $AT2PO_CHECK_SITE/site-packages and put
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
# what every record says about how it was made (gpu_check_h200.py: provenance)
export AT2PO_CHECK_STARTED="$start" AT2PO_CHECK_COMMAND="bash benchmarks/gpu_check_h200.sh $*"
extra_path=""
if [ "$SITE" != none ] && ! compgen -G "$WHEELS/*.whl" > /dev/null; then
    echo "gpu_check: no carried wheels in $WHEELS: run bash benchmarks/gpu_check_wheels.sh where the registry is reachable, then carry benchmarks/wheels" >&2
    exit 2
fi
if [ -z "${AT2PO_CHECK_REVISION:-}" ] && [ -f "$WHEELS/REVISION" ] \
    && ! git -C "$ROOT" rev-parse HEAD > /dev/null 2>&1; then
    AT2PO_CHECK_REVISION="$(cat "$WHEELS/REVISION")"  # stamped by gpu_check_wheels.sh
    export AT2PO_CHECK_REVISION
fi
if [ "$SITE" != none ]; then
    if compgen -G "$WHEELS/*.whl" > /dev/null; then
        "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-index --no-deps \
            --no-compile --no-cache-dir --upgrade --target "$SITE/site-packages" "$WHEELS"/*.whl \
        || echo "gpu_check: the carried wheels did not install; the env step names what is missing"
        extra_path="$SITE/site-packages"
        AT2PO_CHECK_CARRIED="$(cd "$WHEELS" && ls -- *.whl | paste -sd, -)"
        export AT2PO_CHECK_CARRIED
    fi
fi
echo "gpu_check: environment ready in $(( $(date +%s) - start )) s"
check() {  # check SECONDS ARGS...: one run of gpu_check_h200.py, stopped after SECONDS
    local limit=$1
    shift
    PYTHONPATH="${extra_path:+$extra_path:}$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 \
        timeout "$limit" "$PYTHON" "$ROOT/benchmarks/gpu_check_h200.py" "$@"
}
both=0
args=()
for arg in "$@"; do
    if [ "$arg" = --both-sizes ]; then both=1; else args+=("$arg"); fi
done
set -- ${args[@]+"${args[@]}"}
if [ "$both" = 1 ]; then
    # Issue #47's device check in one command (<= 8 minutes): the Qwen3-0.6B shape with every
    # sub-check, then the 1.7B shape's rollout, train and plan (the loss does not depend on
    # the size), each folder its own record; the second gets what the first left of the limit.
    total="${AT2PO_CHECK_TIMEOUT:-450}"
    check "${AT2PO_CHECK_TIMEOUT_06:-250}" --out "$RESULTS/q06" "$@"
    first=$?
    left=$(( total - ($(date +%s) - start) ))
    if [ "$left" -lt 60 ]; then
        echo "gpu_check: ${left} s left, the 1.7b shape does not run"
        second=1
    else
        check "$left" --size 1.7b --only rollout,train,plan --steps 2 --out "$RESULTS/q17" "$@"
        second=$?
    fi
    status=$(( first != 0 || second != 0 ))
else
    # the command's limit, less what the environment step took
    check "$(( ${AT2PO_CHECK_TIMEOUT:-360} - ($(date +%s) - start) ))" --out "$RESULTS" "$@"
    status=$?
fi
echo "gpu_check: exit $status after $(( $(date +%s) - start )) s"
exit $status
