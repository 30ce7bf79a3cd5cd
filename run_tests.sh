#!/usr/bin/env bash
# The test suite: bootstrap, then pytest. The notebooks run once, inside it: tests/test_notebooks.py
# executes every notebook under the 'smoke' profile and checks their outputs.
#   ./run_tests.sh                # every test but the marked network, browser and stress checks
#   ./run_tests.sh --fast         # inner loop: tests not marked slow (so no notebooks)
#   ./run_tests.sh -m registry    # the GPU pins against the package registry (network, ~90 s)
#   ./run_tests.sh -m browser     # the inspector in Chromium (pip install -e '.[browser]')
#   ./run_tests.sh -m stress      # long repeats of checks the plain run makes a few times
#   ./run_tests.sh -k reward      # extra arguments go to pytest (a later -m replaces ours)
# CI (.ci/run) runs the plain suite, then the marked checks.
set -euo pipefail
cd "$(dirname "$0")"
fast=0
args=()
for arg in "$@"; do
    if [ "$arg" = "--fast" ]; then fast=1; else args+=("$arg"); fi
done
set -- ${args[@]+"${args[@]}"}
source scripts/bootstrap.sh
# Checks that need the network or a browser, and long repeats of checks the plain run already
# makes, run by their own command, not in every run.
marked="not registry and not browser and not stress"
if [ "$fast" = 1 ]; then
    exec python -m pytest -m "not slow and $marked" "$@"
fi
exec python -m pytest -m "$marked" "$@"
