"""An IPython kernel that opens no TCP port.

With the ``ipc`` transport every channel of a kernel is a Unix socket, but ipykernel still binds
one PULL socket on ``tcp://127.0.0.1:<random port>``: its IOPub pipe, through which forked
subprocesses send their output to the kernel (``IOPubThread(pipe=True)``, fixed in
``IPKernelApp.init_iopub``; any local user could connect to it, though messages without the
kernel's random 16-byte key are dropped). Here that pipe is a Unix socket beside the kernel's
others, in the same private folder, keyed as before; forked children still print to the
notebook.

``python -m at2po_lib.util.unix_kernel -f CONNECTION_FILE`` is ipykernel's launcher with that
one change; :class:`UnixKernelManager` starts it in place of ``ipykernel_launcher`` for an
``ipc`` kernel (``at2po run-notebooks``: :func:`at2po_lib.lab.notebook_runner._local_kernel`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import zmq
from ipykernel import kernelapp
from ipykernel.iostream import IOPubThread
from jupyter_client.manager import AsyncKernelManager
from zmq.eventloop.zmqstream import ZMQStream

PIPE_SUFFIX = "-pipe"
"""The pipe's socket is ``<the kernel's ip><PIPE_SUFFIX>``; its channels are ``<ip>-<number>``."""
LAUNCHER = "ipykernel_launcher"
"""The module an ipykernel kernel spec starts (``python -m ipykernel_launcher -f ...``)."""


class UnixPipeIOPubThread(IOPubThread):
    """ipykernel's IOPub thread with its subprocess pipe on the Unix socket :attr:`address`."""

    address = ""
    """``ipc://PATH``, set by :class:`UnixKernelApp` before the thread is built (one kernel per
    process; a forked child inherits it)."""

    def _setup_pipe_in(self) -> None:
        pipe_in = self.socket.context.socket(zmq.PULL)
        pipe_in.linger = 0
        self._pipe_uuid = os.urandom(16)  # the key each child's message must start with
        pipe_in.bind(self.address)  # a failure stops the kernel: no silent TCP fall-back
        self._pipe_in = ZMQStream(pipe_in, self.io_loop)
        self._pipe_in.on_recv(self._handle_pipe_msg)

    def _setup_pipe_out(self) -> tuple[zmq.Context, zmq.Socket]:
        context = zmq.Context()  # a new context after the fork, as ipykernel's own
        pipe_out = context.socket(zmq.PUSH)
        pipe_out.linger = 3000
        pipe_out.connect(self.address)
        return context, pipe_out


class UnixKernelApp(kernelapp.IPKernelApp):
    """``IPKernelApp`` whose IOPub pipe is :class:`UnixPipeIOPubThread`'s when the transport is
    ``ipc`` (a TCP kernel keeps ipykernel's own pipe)."""

    def init_iopub(self, context: zmq.Context) -> None:
        if self.transport != "ipc":
            super().init_iopub(context)
            return
        UnixPipeIOPubThread.address = f"ipc://{self.ip}{PIPE_SUFFIX}"
        kernelapp.IOPubThread = UnixPipeIOPubThread  # the name init_iopub builds its thread from
        try:
            super().init_iopub(context)
        finally:
            kernelapp.IOPubThread = IOPubThread


class UnixKernelManager(AsyncKernelManager):
    """A kernel manager that starts an ``ipc`` kernel of an ipykernel spec with this module."""

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        cmd = super().format_kernel_cmd(extra_arguments)
        # ipykernel's spec: [python, (-Xfrozen_modules=off,) -m, ipykernel_launcher, -f, ...]
        at = next((i for i in range(1, len(cmd) - 1) if cmd[i : i + 2] == ["-m", LAUNCHER]), None)
        if self.transport == "ipc" and at is not None:
            cmd[at + 1] = __name__
        return cmd


def main() -> None:
    """Start the kernel. As ``ipykernel_launcher`` does, the working folder that ``python -m``
    put first on ``sys.path`` is taken off (the kernel adds ``''`` back,
    ``InteractiveShellApp.init_path``): a notebook sees the ``sys.path`` of a usual kernel."""
    if sys.path and (sys.path[0] == "" or Path(sys.path[0]) == Path.cwd()):
        del sys.path[0]
    UnixKernelApp.launch_instance()


if __name__ == "__main__":
    main()
