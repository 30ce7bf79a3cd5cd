#!/usr/bin/env bash
# Open JupyterLab on the notebooks, in the project's environment, with the 'at2po' kernel.
#
#   scripts/lab.sh                 # http://127.0.0.1:8888/lab?token=... (next free port if taken)
#   scripts/lab.sh --port 8890     # further arguments go to `jupyter lab`
#   scripts/lab.sh --no-browser    # on a remote machine: tunnel the port (ssh -L 8888:127.0.0.1:8888)
#
# Loopback only (127.0.0.1) and a random token, printed in the URL below: the kernel runs code
# as you, so the server is never reachable from other machines; the kernels themselves talk to
# it over Unix sockets only (see below for their one loopback pipe).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${AT2PO_LAB:-1}" = 0 ]; then
    echo "lab.sh: AT2PO_LAB=0 skips JupyterLab; unset it to install the 'lab' extra" >&2
    exit 2
fi
# shellcheck disable=SC1091
source scripts/bootstrap.sh
dry_run="${AT2PO_LAB_DRY_RUN:-0}"  # 1: print the jupyter command instead of running it (tests)
if ! command -v jupyter-lab >/dev/null 2>&1 && [ "$dry_run" != 1 ]; then
    echo "lab.sh: jupyter-lab is not in $VENV (AT2PO_SKIP_INSTALL=1?): pip install -e '.[lab]'" >&2
    exit 1
fi
extra=()
# Containers and CI machines often run as root, which jupyter refuses without this flag.
[ "$(id -u)" != 0 ] || extra+=(--allow-root)
# Kernels talk to the server over Unix sockets in a private folder, not TCP ports: nothing else
# on the machine can connect to them, and ipykernel >= 7 has no unencrypted TCP to warn about.
# One folder per user, mode 700 enforced: `mkdir -m` sets the mode of a new folder only, and an
# existing 777 one stayed 777. Jupyter's runtime folder is that folder, so each kernel's sockets
# are named after its own connection file (kernel-<id>-ipc-N): kernels started together (a
# restored workspace) never share a socket number. A shared prefix made 6 of 7 hang.
# The one TCP listener a kernel has is ipykernel's IOPub pipe for forked subprocesses, on
# 127.0.0.1 only, and it drops every message without the kernel's random 16-byte key
# (tests/lab/test_reliability_kernels.py).
sockets="${XDG_RUNTIME_DIR:-${TMPDIR:-/tmp}}/at2po-lab-kernels-$(id -u)"
# A socket path has at most 107 bytes and each kernel adds 52 (kernel-<uuid>-ipc-N); a long
# TMPDIR (macOS: /var/folders/...) would leave too few, so fall back to /tmp there.
[ "${#sockets}" -le 54 ] || sockets="/tmp/at2po-lab-kernels-$(id -u)"
mkdir -p -m 700 "$sockets"
if [ -L "$sockets" ] || [ ! -O "$sockets" ]; then
    echo "lab.sh: $sockets is a link or belongs to another user; remove it and start again" >&2
    exit 1
fi
chmod 700 "$sockets"
export JUPYTER_RUNTIME_DIR="$sockets"
# After each save of a tracked notebook whose cells did not change, git's index is refreshed
# (at2po_lib/util/lab_git.py): the output filter alone leaves `git status` listing it.
cmd=(jupyter lab --ip=127.0.0.1 --ServerApp.root_dir="$PWD" --KernelManager.transport=ipc
     --ContentsManager.post_save_hook=at2po_lib.util.lab_git.refresh_saved_notebook
     --LabApp.default_url=/lab/tree/notebooks/00_tinyworld.ipynb "${extra[@]}" "$@")
if [ "$dry_run" = 1 ]; then
    echo "JUPYTER_RUNTIME_DIR=$JUPYTER_RUNTIME_DIR"
    printf '%s\n' "${cmd[@]}"
    exit 0
fi
exec "${cmd[@]}"
