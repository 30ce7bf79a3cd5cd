#!/usr/bin/env bash
# The test suite: bootstrap, pytest, then every notebook under the 'smoke' profile.
#   ./run_tests.sh            # everything
#   ./run_tests.sh -k reward  # extra arguments go to pytest (notebooks still run)
set -euo pipefail
cd "$(dirname "$0")"
source scripts/bootstrap.sh
python -m pytest "$@"
python -m at2po_lib.pipeline --profile smoke --force
