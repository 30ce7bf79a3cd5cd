#!/usr/bin/env bash
# Does a fresh clone's ./run_all.sh leave `git status` clean? Clones this repository's HEAD
# (committed state only) into a temporary folder, runs ./run_all.sh there and fails, listing
# the files, if anything tracked changed or anything untracked appeared.
#
#   scripts/check_clean_run.sh                          # profile 'tiny', a new .venv in the clone
#   AT2PO_VENV=$PWD/.venv scripts/check_clean_run.sh    # reuse an environment (no install)
#   AT2PO_ARTIFACTS=$PWD/artifacts scripts/check_clean_run.sh   # reuse the built world and indexes
#   scripts/check_clean_run.sh --profile smoke          # arguments go to ./run_all.sh
#   AT2PO_KEEP_CLONE=1 scripts/check_clean_run.sh       # keep the clone to inspect it
#
# The tiny warm start and the toy study's runs are committed, so the run trains nothing.
set -euo pipefail
source_repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/at2po-clean-run.XXXXXX")"
cleanup() {
    if [ "${AT2PO_KEEP_CLONE:-0}" = 1 ]; then echo "clone kept: $work/repo"; else rm -rf "$work"; fi
}
trap cleanup EXIT
git clone --quiet "$source_repo" "$work/repo"
cd "$work/repo"
echo "check_clean_run: $(git rev-parse --short HEAD) cloned into $work/repo"
# Results and figures must land in the clone (that is what is checked). A reused environment's
# editable install points at another checkout: PYTHONPATH makes the clone's own library win,
# in this shell and in the notebook kernels it starts.
unset AT2PO_RESULTS AT2PO_FIGURES AT2PO_HOME
export PYTHONPATH="$work/repo${PYTHONPATH:+:$PYTHONPATH}"
# Never `pip install -e` the clone into a reused environment: it would point that environment
# at a folder deleted below.
[ -z "${AT2PO_VENV:-}" ] || export AT2PO_SKIP_INSTALL="${AT2PO_SKIP_INSTALL:-1}"
./run_all.sh "$@"
# shellcheck disable=SC1091
source scripts/bootstrap.sh >/dev/null
used="$(python -c 'import at2po_lib, pathlib; print(pathlib.Path(at2po_lib.__file__).resolve().parent.parent)')"
if [ "$used" != "$(pwd -P)" ]; then
    echo "check_clean_run: the run imported at2po_lib from $used, not from the clone" >&2
    exit 1
fi
status="$(git status --porcelain --untracked-files=all)"
if [ -n "$status" ]; then
    echo "check_clean_run: NOT clean after ./run_all.sh $*:" >&2
    echo "$status" >&2
    git --no-pager diff --stat >&2
    exit 1
fi
echo "check_clean_run: clean (git status --porcelain is empty after ./run_all.sh $*)"
