"""Notebook kernels (issue #24 item 8, issue #26 item 1, issue #39 item 9): the socket folder's
mode is enforced, kernels started together get their own socket paths, the kernel of
`at2po run-notebooks` listens on no TCP port (ipykernel's IOPub pipe is a Unix socket too), and
a lab kernel's one TCP listener (that pipe) is on loopback and drops messages without its key."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="Unix-socket kernels; /proc is Linux"
    ),
]

ROOT = Path(__file__).resolve().parents[2]


def _lab_dry_run(runtime_parent: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "XDG_RUNTIME_DIR": str(runtime_parent),
        "AT2PO_LAB_DRY_RUN": "1",
        "AT2PO_SKIP_INSTALL": "1",
        "AT2PO_VENV": str(Path(sys.executable).parent.parent),
        "AT2PO_GIT_FILTER": "0",
    }
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "lab.sh")],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def short_tmp():
    """A short folder (a Unix socket path has at most 107 bytes; pytest's tmp_path is long)."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="k", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_lab_enforces_the_socket_folder_mode(short_tmp):
    folder = short_tmp / f"at2po-lab-kernels-{os.getuid()}"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    proc = _lab_dry_run(short_tmp)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert f"JUPYTER_RUNTIME_DIR={folder}" in proc.stdout


def test_lab_refuses_a_socket_folder_that_is_a_link(short_tmp):
    target = short_tmp / "elsewhere"
    target.mkdir()
    (short_tmp / f"at2po-lab-kernels-{os.getuid()}").symlink_to(target)
    proc = _lab_dry_run(short_tmp)
    assert proc.returncode == 1 and "is a link" in proc.stderr


def _lab_kernel_config(proc: subprocess.CompletedProcess):
    """The lab's kernel settings as traitlets config (the ``--KernelManager.*`` arguments)."""
    from traitlets.config import Config

    config = Config()
    for arg in proc.stdout.splitlines():
        if arg.startswith("--KernelManager."):
            key, value = arg[2:].split("=", 1)
            section, name = key.split(".")
            config[section][name] = value
    return config


def test_lab_kernels_started_together_get_their_own_sockets(short_tmp):
    from jupyter_client.multikernelmanager import AsyncMultiKernelManager

    from at2po_lib.lab.notebook_runner import KERNEL_NAME

    proc = _lab_dry_run(short_tmp)
    assert proc.returncode == 0, proc.stderr
    runtime = proc.stdout.splitlines()[0].split("=", 1)[1]
    config = _lab_kernel_config(proc)
    assert config.KernelManager.transport == "ipc"

    async def start_together(n: int) -> list[dict]:
        manager = AsyncMultiKernelManager(config=config)
        manager.connection_dir = runtime  # what jupyter server sets from JUPYTER_RUNTIME_DIR
        ids = await asyncio.gather(
            *(manager.start_kernel(kernel_name=KERNEL_NAME) for _ in range(n))
        )
        try:
            infos = [manager.get_kernel(k).get_connection_info() for k in ids]
            for kernel_id in ids:  # every kernel answers on its own sockets
                client = manager.get_kernel(kernel_id).client()
                client.start_channels()
                await client.wait_for_ready(timeout=120)
                client.stop_channels()
            return infos
        finally:
            await manager.shutdown_all(now=True)

    infos = asyncio.run(start_together(3))
    paths = [
        f"{info['ip']}-{info[port]}"
        for info in infos
        for port in ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
    ]
    assert len(set(paths)) == len(paths), paths
    assert all(p.startswith(runtime) for p in paths)


LISTENERS = """
import os, socket
from pathlib import Path

def tcp_listeners():
    \"\"\"Ports this process listens on over TCP (its socket inodes in /proc/self/net).\"\"\"
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # the listing's own descriptor, closed by now
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return [int(row.split()[1].split(":")[1], 16) for table in ("tcp", "tcp6")
            for row in Path(f"/proc/self/net/{table}").read_text().splitlines()[1:]
            if row.split()[3] == "0A" and row.split()[9] in inodes]  # 0A: LISTEN

probe = socket.socket()
probe.bind(("127.0.0.1", 0))
probe.listen()
assert tcp_listeners() == [probe.getsockname()[1]], tcp_listeners()  # the check sees a listener
probe.close()
assert tcp_listeners() == [], f"the kernel listens on TCP ports {tcp_listeners()}"
"""

FORKED_CHILD = """
import os, stat, time
from ipykernel.kernelapp import IPKernelApp

app = IPKernelApp.instance()
pipe = app.iopub_thread.address
assert pipe == f"ipc://{app.ip}-pipe", pipe
assert stat.S_IMODE(os.stat(os.path.dirname(app.ip)).st_mode) == 0o700
child = os.fork()
if child == 0:
    print("printed by a forked child", flush=True)
    os._exit(0)
os.waitpid(child, 0)
time.sleep(1.0)  # the child's message crosses the pipe to the kernel's IOPub thread
"""


def test_run_notebooks_kernel_listens_on_no_tcp_port(tmp_path):
    """The kernel `at2po run-notebooks` starts has no TCP listener: ipykernel's IOPub pipe for
    forked subprocesses (once a 127.0.0.1 port) is a Unix socket in the kernel's private folder,
    and a forked child's output still reaches the notebook through it."""
    import nbformat

    from at2po_lib.lab.notebook_runner import run_notebooks

    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    notebook = nbformat.v4.new_notebook()
    parameters = nbformat.v4.new_code_cell('profile = "smoke"')
    parameters.metadata["tags"] = ["parameters"]
    notebook.cells = [
        parameters,
        nbformat.v4.new_code_cell(LISTENERS),
        nbformat.v4.new_code_cell(FORKED_CHILD),
    ]
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }  # run_notebooks names its own
    nbformat.write(notebook, nbdir / "00_kernel.ipynb")
    results = run_notebooks("smoke", notebooks_dir=nbdir, out_dir=tmp_path / "out")
    assert [r.status for r in results] == ["ran"], results
    executed = nbformat.read(tmp_path / "out" / "00_kernel.ipynb", as_version=4)
    printed = "".join(output.get("text", "") for output in executed.cells[-1].outputs)
    assert "printed by a forked child" in printed, executed.cells[-1].outputs


def _tcp_listeners(pid: int) -> list[tuple[str, int]]:
    """(address, port) of the TCP sockets process ``pid`` listens on (from /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib_suppress():
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = []
    for table, width in (("tcp", 4), ("tcp6", 16)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                address, port = fields[1].split(":")
                raw = bytes.fromhex(address)
                if width == 4:
                    host = socket.inet_ntop(socket.AF_INET, raw[::-1])
                else:
                    host = socket.inet_ntop(
                        socket.AF_INET6, b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                    )
                found.append((host, int(port, 16)))
    return found


class contextlib_suppress:  # noqa: N801 - a tiny local stand-in for contextlib.suppress(OSError)
    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        return kind is not None and issubclass(kind, OSError)


def test_a_lab_kernel_listens_on_loopback_only_and_drops_unkeyed_messages(capfd):
    """A kernel of the spec started by ipykernel's own launcher over Unix sockets, as the lab's
    server starts it: its one TCP listener, ipykernel's IOPub pipe, is on 127.0.0.1 and drops a
    message without the kernel's key."""
    import zmq
    from jupyter_client import KernelManager

    from at2po_lib.lab.notebook_runner import KERNEL_NAME, _local_kernel

    with _local_kernel() as kernel_args:
        manager = KernelManager(kernel_name=KERNEL_NAME, config=kernel_args["config"])  # not
        # kernel_args' UnixKernelManager: the lab's server knows only the kernel spec
        manager.start_kernel()
        client = manager.client()
        client.start_channels()
        try:
            client.wait_for_ready(timeout=120)
            listeners = _tcp_listeners(manager.provisioner.process.pid)
            assert listeners, "expected ipykernel's IOPub pipe"
            assert all(host == "127.0.0.1" for host, _ in listeners), listeners
            context = zmq.Context()
            for _, port in listeners:  # a forged subprocess message, without the 16-byte key
                push = context.socket(zmq.PUSH)
                push.linger = 1000
                push.connect(f"tcp://127.0.0.1:{port}")
                push.send_multipart(
                    [
                        b"\0" * 16,
                        b"<IDS|MSG>",
                        b"",
                        b"{}",
                        b"{}",
                        b"{}",
                        json.dumps({"name": "stdout", "text": "FORGED"}).encode(),
                    ]
                )
                push.close()
            context.term()
            time.sleep(1.0)
            client.execute("print('after')")
            texts = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                msg = client.get_iopub_msg(timeout=60)
                texts.append(json.dumps(msg["content"]))
                if (
                    msg["msg_type"] == "status"
                    and msg["content"]["execution_state"] == "idle"
                    and any("after" in t for t in texts)
                ):
                    break
            assert not any("FORGED" in t for t in texts)
        finally:
            client.stop_channels()
            manager.shutdown_kernel(now=True)
    assert "Bad pipe message" in capfd.readouterr().err


@pytest.mark.parametrize("through_link", [True, False])
def test_run_notebooks_accepts_a_venv_reached_through_a_symlink(
    tmp_path, monkeypatch, through_link
):
    from at2po_lib.lab.notebook_runner import KERNEL_NAME, check_kernel

    real = tmp_path / "real-venv" / "bin"
    real.mkdir(parents=True)
    (real / "python").symlink_to(sys.executable)
    (tmp_path / "venv-link").symlink_to(tmp_path / "real-venv")
    other = tmp_path / "other-venv" / "bin"
    other.mkdir(parents=True)
    kernel_python = tmp_path / "venv-link" / "bin" / "python" if through_link else other / "python"
    spec_dir = tmp_path / "jupyter" / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [str(kernel_python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "AT2PO",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setattr(sys, "executable", str(real / "python"))
    if through_link:
        check_kernel(KERNEL_NAME)  # the same environment, named through a link
    else:
        with pytest.raises(ValueError, match="not this environment"):
            check_kernel(KERNEL_NAME)
