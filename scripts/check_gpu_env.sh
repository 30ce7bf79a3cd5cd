#!/usr/bin/env bash
# Are the GPU environments installable today? pip's resolver, in dry run, against the package
# registry: every pin of requirements-gpu.txt plus the rest of environment.yml's pip section
# (training), then requirements-retriever-gpu.txt (the GPU retrieval server's own process),
# each resolved for this interpreter (CPython 3.11 on Linux x86_64, as environment.yml creates)
# and checked to hold one CUDA major. No CUDA, no GPU and no download of the large wheels is
# needed: pip reads the wheels' metadata only. Exit 0 = both resolvable, one CUDA major each;
# the resolved versions are printed.
#
#   scripts/check_gpu_env.sh [REPORT.json]     # the retriever's report: REPORT.retriever.json
#
# Environment: PYTHON (default python3), AT2PO_GPU_ENV_KEEP_PIP_CONFIG=1 keeps this machine's
# pip configuration (local wheel folders, constraint files); by default it is ignored so the
# answer is the registry's, not this machine's.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
REPORT="${1:-$(mktemp -t gpu-env-report.XXXXXX.json)}"

"$PYTHON" - <<'PY' || exit 2
import platform, sys
problems = []
if sys.version_info[:2] != (3, 11):
    problems.append(f"CPython 3.11 needed (environment.yml's python=3.11), this is {platform.python_version()}")
if sys.platform != "linux" or platform.machine() != "x86_64":
    problems.append(f"Linux x86_64 needed (the wheels' platform), this is {sys.platform} {platform.machine()}")
if problems:
    sys.exit("check_gpu_env: " + "; ".join(problems) + ". Set PYTHON=/path/to/python3.11.")
PY

REQS="$(mktemp -t gpu-env-reqs.XXXXXX.txt)"
trap 'rm -f "$REQS"' EXIT

if [ "${AT2PO_GPU_ENV_KEEP_PIP_CONFIG:-0}" != 1 ]; then
    # os.devnull as PIP_CONFIG_FILE: pip loads no configuration file (no local find-links or
    # constraints that would answer for the registry); the CA bundle is kept.
    CERT="$("$PYTHON" -m pip config get global.cert 2>/dev/null || true)"
    export PIP_CONFIG_FILE=/dev/null
    unset PIP_FIND_LINKS PIP_CONSTRAINT PIP_EXTRA_INDEX_URL PIP_NO_INDEX PIP_INDEX_URL || true
    if [ -n "$CERT" ] && [ -z "${PIP_CERT:-}" ]; then export PIP_CERT="$CERT"; fi
fi

# Two environments, two processes: training (environment.yml's pip section, -r expanded; CUDA
# 13) and the GPU retrieval server (requirements-retriever-gpu.txt; CUDA 12). Each must resolve
# and hold one CUDA major (`at2po gpu-env summarize` refuses a mix).
for LIST in training retriever; do
    PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m at2po_lib.cli gpu-env requirements \
        --root "$ROOT" --list "$LIST" > "$REQS"
    OUT="$REPORT"
    if [ "$LIST" != training ]; then OUT="${REPORT%.json}.$LIST.json"; fi
    echo "check_gpu_env: $LIST: resolving $(grep -cv '^\s*\(#\|$\)' "$REQS") requirements with pip $("$PYTHON" -m pip --version | cut -d' ' -f2) for CPython $("$PYTHON" -c 'import platform; print(platform.python_version())')"
    start=$(date +%s)
    "$PYTHON" -m pip install --dry-run --ignore-installed --quiet --disable-pip-version-check \
        --report "$OUT" -r "$REQS"
    echo "check_gpu_env: $LIST: resolvable in $(( $(date +%s) - start )) s; report: $OUT"
    PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m at2po_lib.cli gpu-env summarize "$OUT"
done
