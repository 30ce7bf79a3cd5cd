"""The end of a multi-process launch: every process leaves its process group before Python exits.

Why: a gloo collective returns to Python before ``ProcessGroupGloo``'s worker thread
(``pt_gloo_runloop``) has dropped its references to the collective's tensors. When that worker
runs late -- a process that exits right after its last collective, as rank 1 does at the end of
a run while rank 0 still writes the run's files, on a loaded machine -- the tensor's Python
object is released after the interpreter began to finalize. Releasing it needs the GIL, Python
3.11 ends a thread that asks for the GIL then with ``pthread_exit``, and that forced unwind
through gloo's ``noexcept`` run loop calls ``std::terminate``: "terminate called without an
active exception", exit -6 (native backtrace: ``ProcessGroupGloo::runLoop`` ->
``TensorImpl::decref_pyobject`` -> ``PyEval_AcquireThread`` -> ``pthread_exit``). Destroying the
process group while Python is fully alive joins those workers first; the barrier before it keeps
a process from closing its connections while a peer is still inside a collective with it.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

# Imported inside the functions that use them: torch; only once torch is loaded (a
# process that never imported torch has no process group, and `at2po --help` stays instant).


@contextmanager
def process_group_left_at_end() -> Iterator[None]:
    """Run the body, then leave the default process group (if any) on every process: after a
    barrier when the body returned, without one when it raised (a peer may never reach it)."""
    try:
        yield
    except BaseException:
        leave_process_group(barrier=False)
        raise
    leave_process_group(barrier=True)


def leave_process_group(barrier: bool) -> bool:
    """Destroy the default process group and its workers; False when there is none."""
    if "torch" not in sys.modules:
        return False
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return False
    if barrier:
        dist.barrier()
    dist.destroy_process_group()
    return True
