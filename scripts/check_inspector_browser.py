#!/usr/bin/env python
"""Notebook 03's tree inspector in a real browser: JupyterLab + Chromium, driven by Playwright.

    pip install -e '.[lab,browser]'
    python scripts/check_inspector_browser.py --chromium /usr/bin/chromium     # Debian's chromium
    python scripts/check_inspector_browser.py                                  # Playwright's own
                                                                               # (`playwright install chromium`)

What it does, and fails on (exit 1, naming the step):
1. starts JupyterLab through ``scripts/lab.sh`` on 127.0.0.1 (a free port, a random token);
2. opens a scratch copy of ``notebooks/03_credit_assignment.ipynb`` under
   ``results/executed/browser/`` (git-ignored, so the notebook in git keeps no outputs) and runs
   every cell with the ``at2po`` kernel and the given profile;
3. checks that the inspector's widgets render (its "Grow" button, no "Error displaying
   widget"), that picking another node in the dropdown redraws the node panel, and that
   **Grow** rolls a new tree out with the warm start ("grown: N tree(s)");
4. checks JupyterLab's log for warnings from the kernel (e.g. ipykernel's "running over TCP
   without encryption": lab.sh starts kernels on Unix sockets);
5. writes a screenshot of each step next to the scratch notebook and stops JupyterLab.

Needs the notebook's inputs (the profile's index, warm start, notebook 02's trees): run
``./run_all.sh --profile PROFILE`` (or ``at2po run-notebooks --profile PROFILE --only 00,01,02``)
first.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = "03_credit_assignment.ipynb"
SCRATCH = Path("results/executed/browser")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_lab(port: int, token: str) -> subprocess.Popen:
    """``scripts/lab.sh`` itself (the front door a user opens), in this Python's environment
    with no install step, on a given port and token."""
    command = ["bash", str(ROOT / "scripts" / "lab.sh"), "--no-browser", f"--port={port}",
               f"--IdentityProvider.token={token}"]
    log = open(ROOT / SCRATCH / "jupyterlab.log", "w")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "AT2PO_VENV": sys.prefix,
           "AT2PO_SKIP_INSTALL": "1"}
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                               start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2)
            return process
        except OSError:
            if process.poll() is not None:
                sys.exit(f"check_inspector_browser: JupyterLab exited; see {SCRATCH}/jupyterlab.log")
            time.sleep(1)
    stop(process)
    sys.exit(f"check_inspector_browser: JupyterLab did not answer in 120 s; see "
             f"{SCRATCH}/jupyterlab.log")


def stop(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(process.pid, signal.SIGKILL)


def set_profile(notebook: Path, profile: str) -> None:
    """The scratch copy's parameters cell names the profile to run."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    cell.source = f"profile = {profile!r}\n" + "\n".join(
        line for line in cell.source.splitlines() if not line.startswith("profile ="))
    nbformat.write(nb, notebook)


class Failed(Exception):
    pass


def drive(page, url: str, shots: Path, timeout_s: float) -> list[str]:
    """The browser steps; returns what was seen, raises :class:`Failed` naming the step."""
    seen = []
    page.goto(url)
    page.wait_for_selector("div.lm-MenuBar-itemLabel:text-is('Run')", timeout=120_000)
    # the kernel is up: the status bar reads "<kernel> | Idle"
    page.wait_for_function("document.body.innerText.includes('| Idle')", timeout=120_000)
    page.click("div.lm-MenuBar-itemLabel:text-is('Run')")
    page.click("text=Run All Cells")
    start = time.time()
    try:
        grow = page.wait_for_selector("button:has-text('Grow')", timeout=timeout_s * 1000)
    except Exception as exc:
        page.screenshot(path=str(shots / "failed_run_all.png"))
        raise Failed(f"the inspector did not appear within {timeout_s:.0f} s of Run All") from exc
    seen.append(f"inspector rendered {time.time() - start:.0f} s after Run All")
    page.wait_for_selector("text=/node \\d+ \\(parent/", timeout=60_000)
    grow.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "1_inspector.png"))
    if "Error displaying widget" in page.inner_text("body"):
        raise Failed("JupyterLab shows 'Error displaying widget' (widget frontend missing?)")

    select = page.locator("div.widget-dropdown select").first
    node_panel = page.locator("text=/node \\d+ \\(parent/").first
    before, current = node_panel.inner_text(), select.input_value()
    other = next(o for o in select.locator("option").all_inner_texts() if o != current)
    select.select_option(other)
    page.wait_for_selector(f"text=/node {other} \\(parent/", timeout=60_000)
    after = page.locator("text=/node \\d+ \\(parent/").first.inner_text()
    if after == before:
        raise Failed(f"picking node {other} did not redraw the node panel")
    seen.append(f"node {current} -> {other}: {after.splitlines()[0]}")
    page.screenshot(path=str(shots / "2_other_node.png"))

    page.click("button:has-text('Grow')")
    status = page.wait_for_selector("text=/grown: \\d+ tree|failed:/", timeout=timeout_s * 1000)
    text = status.inner_text()
    page.locator("button:has-text('Grow')").scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "3_grown.png"))
    if not text.startswith("grown"):
        raise Failed(f"Grow: {text}")
    seen.append(f"Grow: {text}")
    return seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--chromium", default=None,
                        help="a Chromium binary (e.g. /usr/bin/chromium); default: Playwright's")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per waiting step")
    args = parser.parse_args(argv)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("check_inspector_browser: playwright is not installed: pip install -e '.[browser]'",
              file=sys.stderr)
        return 2
    os.chdir(ROOT)
    shots = ROOT / SCRATCH
    shots.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "notebooks" / NOTEBOOK, shots / NOTEBOOK)
    set_profile(shots / NOTEBOOK, args.profile)
    port, token = free_port(), secrets.token_hex(16)
    lab = start_lab(port, token)
    url = f"http://127.0.0.1:{port}/lab/tree/{SCRATCH.as_posix()}/{NOTEBOOK}?token={token}"
    try:
        with sync_playwright() as playwright:
            launch = {"args": ["--no-sandbox"]}
            if args.chromium:
                launch["executable_path"] = args.chromium
            browser = playwright.chromium.launch(**launch)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            try:
                seen = drive(page, url, shots, args.timeout)
            except Failed:
                raise
            except Exception as exc:  # a Playwright time-out: which wait, in its first line
                page.screenshot(path=str(shots / "failed.png"))
                raise Failed(str(exc).splitlines()[0]) from exc
            finally:
                browser.close()
    except Failed as failure:
        print(f"FAILED: {failure}; screenshots and the JupyterLab log in {SCRATCH}/",
              file=sys.stderr)
        return 1
    finally:
        stop(lab)
    log = (ROOT / SCRATCH / "jupyterlab.log").read_text(errors="replace")
    warnings = [line for line in log.splitlines() if "IPKernelApp] WARNING" in line]
    if warnings:
        print("FAILED: the kernel warned:\n" + "\n".join(warnings), file=sys.stderr)
        return 1
    print("\n".join(seen))
    print(f"ok: screenshots in {SCRATCH}/ (1_inspector.png, 2_other_node.png, 3_grown.png)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
