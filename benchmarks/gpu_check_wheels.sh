#!/usr/bin/env bash
# Download the wheels the GPU check carries (benchmarks/gpu_check_wheels.txt) into
# benchmarks/wheels/ for CPython 3.12 on Linux x86_64 (the lendable machine), without their
# dependencies, from the package registry; list them with their sizes; refuse more than 5 MiB
# (the machine takes at most 64 MiB of carried files). Run where the registry is reachable:
#   bash benchmarks/gpu_check_wheels.sh
#   bash benchmarks/gpu_check_wheels.sh --stamp   # only REVISION, before each device check
# Each run stamps benchmarks/wheels/REVISION with this checkout's revision (``-dirty`` with
# uncommitted changes): the check's record names it where .git does not travel.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
DEST="$ROOT/benchmarks/wheels"
LIMIT=$((5 * 1024 * 1024))
mkdir -p "$DEST"
# the revision as every record names it (at2po_lib.util.provenance.git_revision)
revision="$(PYTHONPATH="$ROOT" "$PYTHON" -c \
    'from at2po_lib.util.provenance import git_revision; print(git_revision())')"
echo "$revision" > "$DEST/REVISION"
echo "gpu_check_wheels: REVISION $revision"
if [ "${1:-}" = --stamp ]; then
    exit 0
fi
"$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --abi cp312 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$DEST" -r "$ROOT/benchmarks/gpu_check_wheels.txt"
total=0
for wheel in "$DEST"/*.whl; do
    size=$(stat -c %s "$wheel")
    total=$((total + size))
    printf '%10.2f MiB  %s\n' "$(echo "$size / 1048576" | bc -l)" "$(basename "$wheel")"
done
printf '%10.2f MiB  in all (limit 5 MiB)\n' "$(echo "$total / 1048576" | bc -l)"
if [ "$total" -gt "$LIMIT" ]; then
    echo "gpu_check_wheels: $total bytes is over the 5 MiB the check may carry beside the ~58 MiB working tree" >&2
    exit 1
fi
