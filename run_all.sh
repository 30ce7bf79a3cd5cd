#!/usr/bin/env bash
# Run the whole companion: every numbered notebook, in order, under one profile.
#
#   ./run_all.sh                      # profile 'tiny' (CPU, minutes)
#   ./run_all.sh --profile smoke      # seconds, numbers meaningless
#   ./run_all.sh --only 00,01         # only these stages
#   ./run_all.sh --force              # re-run stages that are up to date
#
# Executed notebooks go to results/executed/<profile>/. A failing notebook stops the run with
# a non-zero exit status naming the notebook and the failing cell.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/bootstrap.sh
exec python -m at2po_lib.cli run-notebooks "$@"
