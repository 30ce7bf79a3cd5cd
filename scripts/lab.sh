#!/usr/bin/env bash
# Open JupyterLab on the notebooks, in the project's environment, with the 'at2po' kernel.
#
#   scripts/lab.sh                 # http://127.0.0.1:8888/lab?token=... (next free port if taken)
#   scripts/lab.sh --port 8890     # further arguments go to `jupyter lab`
#   scripts/lab.sh --no-browser    # on a remote machine: tunnel the port (ssh -L 8888:127.0.0.1:8888)
#
# Loopback only (127.0.0.1) and a random token, printed in the URL below: the kernel runs code
# as you, so the server is never reachable from other machines; the kernels themselves listen
# on Unix sockets only.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${AT2PO_LAB:-1}" = 0 ]; then
    echo "lab.sh: AT2PO_LAB=0 skips JupyterLab; unset it to install the 'lab' extra" >&2
    exit 2
fi
# shellcheck disable=SC1091
source scripts/bootstrap.sh
if ! command -v jupyter-lab >/dev/null 2>&1; then
    echo "lab.sh: jupyter-lab is not in $VENV (AT2PO_SKIP_INSTALL=1?): pip install -e '.[lab]'" >&2
    exit 1
fi
extra=()
# Containers and CI machines often run as root, which jupyter refuses without this flag.
[ "$(id -u)" != 0 ] || extra+=(--allow-root)
# Kernels talk to the server over Unix sockets in a private folder, not TCP ports: nothing else
# on the machine can connect to them, and ipykernel >= 7 has no unencrypted TCP to warn about.
# One folder per user (mode 700; jupyter_client numbers the socket files so kernels never share
# one), so no temporary folder is left behind per session.
sockets="${XDG_RUNTIME_DIR:-${TMPDIR:-/tmp}}/at2po-lab-kernels-$(id -u)"
mkdir -p -m 700 "$sockets"
exec jupyter lab --ip=127.0.0.1 --ServerApp.root_dir="$PWD" \
    --KernelManager.transport=ipc --KernelManager.ip="$sockets/kernel" \
    --LabApp.default_url=/lab/tree/notebooks/00_tinyworld.ipynb "${extra[@]}" "$@"
