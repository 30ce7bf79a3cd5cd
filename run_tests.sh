#!/usr/bin/env bash
# The test suite: bootstrap, pytest, then every notebook under the 'smoke' profile.
#   ./run_tests.sh            # everything (what CI runs: .ci/run)
#   ./run_tests.sh --fast     # inner loop: tests not marked slow, no notebooks
#   ./run_tests.sh -k reward  # extra arguments go to pytest (notebooks still run)
set -euo pipefail
cd "$(dirname "$0")"
fast=0
args=()
for arg in "$@"; do
    if [ "$arg" = "--fast" ]; then fast=1; else args+=("$arg"); fi
done
set -- ${args[@]+"${args[@]}"}
source scripts/bootstrap.sh
if [ "$fast" = 1 ]; then
    python -m pytest -m "not slow" "$@"
    exit
fi
python -m pytest "$@"
python -m at2po_lib.cli run-notebooks --profile smoke --force
