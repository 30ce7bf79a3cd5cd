# Sourced by run_all.sh and run_tests.sh: create or reuse a virtual environment and install the
# project into it. Idempotent and quick when nothing changed.
#
#   AT2PO_VENV         where the environment lives (default: .venv in the repository)
#   AT2PO_PYTHON       the interpreter to create it with (default: python3, >= 3.10)
#   AT2PO_TORCH_INDEX  a pip index for torch (e.g. PyTorch's CPU wheel index on a CPU machine
#                      whose PyPI only serves CUDA builds); unset: plain 'pip install torch==2.13.0'
#   AT2PO_SKIP_INSTALL=1  use the environment as it is
#   AT2PO_LAB=0        skip the 'lab' extra (JupyterLab, ipywidgets; ~20 s on a first install)
#   AT2PO_GIT_FILTER=0 do not install the notebook output filter in the checkout's git config
#
# It also registers the environment as the Jupyter kernel 'at2po' ("AT2PO (<venv>)"), in the
# environment itself (what ./run_all.sh and scripts/lab.sh use) and for the user (so a Jupyter
# installed elsewhere lists it too). Every notebook names that kernel.
set -euo pipefail

AT2PO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${AT2PO_VENV:-$AT2PO_ROOT/.venv}"
PY="${AT2PO_PYTHON:-python3}"
CPU_TORCH="2.13.0"

if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
        || { echo "bootstrap: $PY is older than Python 3.10" >&2; exit 1; }
    echo "bootstrap: creating virtual environment $VENV"
    "$PY" -m venv "$VENV"
fi
# shellcheck disable=SC1091
source "$VENV/bin/activate"
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"

if [ "${AT2PO_SKIP_INSTALL:-0}" != 1 ]; then
    stamp="$VENV/.at2po-install-stamp"
    extras="dev"
    [ "${AT2PO_LAB:-1}" = 0 ] || extras="dev,lab"
    want="$( (cat "$AT2PO_ROOT/pyproject.toml" "$AT2PO_ROOT/scripts/bootstrap.sh"; echo "$extras") | sha256sum | cut -d' ' -f1)"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        python -m pip install -q --upgrade pip
        if ! python -c 'import torch' 2>/dev/null; then
            if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
                echo "bootstrap: GPU found; installing torch (CUDA build). Conda users: environment.yml"
                python -m pip install -q torch
            else
                # Never a multi-GB CUDA build on a CPU-only machine: pin the CPU release.
                echo "bootstrap: no GPU; installing CPU torch==$CPU_TORCH"
                python -m pip install -q "torch==$CPU_TORCH" ${AT2PO_TORCH_INDEX:+--index-url "$AT2PO_TORCH_INDEX"}
            fi
        fi
        python -m pip install -q -e "$AT2PO_ROOT[$extras]"
        echo "$want" > "$stamp"
    fi
fi

# The named kernel: a file test each time, a python call only when a kernel.json is missing or
# names another interpreter (idempotent; ~1 s when it runs).
AT2PO_KERNEL="at2po"
at2po_kernel_ok() {  # $1: a kernels folder
    grep -qF "\"$VENV/bin/python\"" "$1/$AT2PO_KERNEL/kernel.json" 2>/dev/null
}
user_kernels="${JUPYTER_DATA_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/jupyter}/kernels"
kernel_label="AT2PO ($(basename "$(dirname "$VENV")")/$(basename "$VENV"))"
if ! at2po_kernel_ok "$VENV/share/jupyter/kernels"; then
    python -m ipykernel install --sys-prefix --name "$AT2PO_KERNEL" --display-name "$kernel_label" >/dev/null
fi
if ! at2po_kernel_ok "$user_kernels"; then
    python -m ipykernel install --user --name "$AT2PO_KERNEL" --display-name "$kernel_label" >/dev/null \
        || echo "bootstrap: could not register the kernel '$AT2PO_KERNEL' for the user (only in $VENV)" >&2
fi

# Notebooks reach git without outputs: .gitattributes names the filter 'at2po-notebook' for
# notebooks/*.ipynb, defined here in the checkout's git config (saving a notebook in the lab
# otherwise showed all six as modified). Set once; a file test and one git call otherwise.
if [ "${AT2PO_GIT_FILTER:-1}" != 0 ] && git -C "$AT2PO_ROOT" rev-parse --git-dir >/dev/null 2>&1; then
    at2po_filter='python3 scripts/strip_notebook_outputs.py'
    if [ "$(git -C "$AT2PO_ROOT" config --get filter.at2po-notebook.clean)" != "$at2po_filter" ]; then
        git -C "$AT2PO_ROOT" config filter.at2po-notebook.clean "$at2po_filter"
        git -C "$AT2PO_ROOT" config filter.at2po-notebook.smudge cat
        echo "bootstrap: installed the git filter that keeps notebook outputs out of git"
    fi
fi
