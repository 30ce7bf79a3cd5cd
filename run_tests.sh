#!/usr/bin/env bash
# The test suite: bootstrap, then pytest. The notebooks run once, inside it: tests/test_notebooks.py
# executes every notebook under the 'smoke' profile and checks their outputs.
#   ./run_tests.sh                # every test but the marked network, browser and stress checks
#   ./run_tests.sh --fast         # inner loop: tests not marked slow (so no notebooks)
#   ./run_tests.sh -m registry    # the GPU pins against the package registry (network, ~90 s)
#   ./run_tests.sh -m browser     # the inspector in Chromium (pip install -e '.[browser]')
#   ./run_tests.sh -m stress      # long repeats of checks the plain run makes a few times
#   ./run_tests.sh -k reward      # extra arguments go to pytest (a later -m replaces ours)
#   ./run_tests.sh --lint         # ruff: the lint rules and the format check (pyproject.toml), no tests
#   AT2PO_TEST_WORKERS=0 ./run_tests.sh   # one process (default: a pytest worker per core, at most 4)
#   ./run_tests.sh --engines      # the paper path on vLLM's CPU build and DeepSpeed's CPU accelerator,
#                                 # in a second environment (scripts/bootstrap_engines.sh, ~5 min once)
# CI (.ci/run) runs the plain suite, then the marked checks.
set -euo pipefail
cd "$(dirname "$0")"
fast=0
engines=0
lint=0
args=()
for arg in "$@"; do
    case "$arg" in
        --fast) fast=1 ;;
        --engines) engines=1 ;;
        --lint) lint=1 ;;
        *) args+=("$arg") ;;
    esac
done
set -- ${args[@]+"${args[@]}"}
if [ "$engines" = 1 ]; then
    source scripts/bootstrap_engines.sh
    # one thread per process (2 vLLM/DeepSpeed processes on 2 cores were 3-5x slower without);
    # a bounded KV cache (GiB of host memory); DeepSpeed on its CPU accelerator (gloo)
    export OMP_NUM_THREADS=1 VLLM_CPU_KVCACHE_SPACE=1 DS_ACCELERATOR=cpu AT2PO_ENGINES=1
    exec python -m pytest -m engines tests/test_engines_vllm.py tests/test_engines_deepspeed.py "$@"
fi
source scripts/bootstrap.sh
if [ "$lint" = 1 ]; then
    ruff check .
    exec ruff format --check .
fi
# Checks that need the network or a browser, and long repeats of checks the plain run already
# makes, run by their own command, not in every run.
marked="not registry and not browser and not stress and not engines"
# One pytest worker per core, at most 4 (pytest-xdist), each test file on one worker
# (--dist loadfile: a module's fixtures are built once). AT2PO_TEST_WORKERS=0: one process.
cores="$(python -c 'import os; print(len(os.sched_getaffinity(0)))')"
workers="${AT2PO_TEST_WORKERS:-$(( cores < 4 ? cores : 4 ))}"
parallel=(-n "$workers" --dist loadfile)
if [ "$workers" = 0 ] || [ "$workers" = 1 ]; then
    parallel=(-p no:xdist)
fi
if [ "$fast" = 1 ]; then
    exec python -m pytest "${parallel[@]}" -m "not slow and $marked" "$@"
fi
exec python -m pytest "${parallel[@]}" -m "$marked" "$@"
