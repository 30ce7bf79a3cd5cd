#!/usr/bin/env python
"""Notebook 04's "try this" in a real browser: JupyterLab + Chromium, driven by Playwright,
retraining AT2PO and GRPO side by side as a learner does it, timed.

    pip install -e '.[lab,browser]'
    python scripts/check_lab_retrain.py --chromium /usr/bin/chromium          # the default pair
    python scripts/check_lab_retrain.py --knob rollout.tree_alpha=0 --chromium /usr/bin/chromium
    python scripts/check_lab_retrain.py --knob train.max_steps=8 --chromium /usr/bin/chromium
    python scripts/check_lab_retrain.py --profile smoke --chromium /usr/bin/chromium  # ~2 min

What it does, and fails on (exit 1, naming the step):

1. copies notebook 04 to ``results/executed/browser/04_try.ipynb`` (git-ignored) with what a
   learner changes in its parameters cell appended to it: ``retrain_try = True`` and
   ``try_knobs`` from ``--knob`` (none: the profile's own recipe), and ``--profile`` where it
   is not ``tiny``; everything else is the notebook in git, the short live run of section 2
   included;
2. starts JupyterLab through ``scripts/lab.sh`` on 127.0.0.1 (a free port, a random token),
   opens the copy with the ``at2po`` kernel and runs every cell (Run > Run All Cells);
3. while it runs: section 9's two progress bars show (their text, ``at2po (seed, 1 core)`` and
   ``grpo (seed, 1 core)``, on the page);
4. when it is done: no error output, the try cell printed "retrained ... side by side in X min"
   and drew its figure (an image in its output), and JupyterLab's log has no kernel error.

Printed at the end: the wall time of the whole notebook and of the retraining (the try cell's
own minutes, as it printed them), the knobs, the load average before and after, and a
screenshot of the figure under ``results/executed/browser/``. The notebook's other sections
read committed records and take seconds; the retraining is two whole runs (validation and
the final evaluation included), one process and one core each.

Needs the notebooks' inputs (the profile's index, warm start): ``./run_all.sh`` first.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import secrets
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_inspector_browser import (  # noqa: E402
    ROOT,
    SCRATCH,
    Failed,
    free_port,
    log_problems,
    open_browser,
    progress,
    run_all,
    start_lab,
    stop,
    wait_current,
    wait_done,
    wait_idle,
)

NOTEBOOK = "04_at2po_training.ipynb"
COPY = "04_try.ipynb"
LOG = "jupyterlab_try.log"
BARS = ("at2po (seed, 1 core)", "grpo (seed, 1 core)")
"""Section 9's progress bars, by their descriptions (``side_by_side._progress_bars``)."""
RETRAINED = re.compile(r"retrained \[.*?\] side by side in ([0-9.]+) min")


def parse_knob(text: str) -> tuple[str, object]:
    """``section.key=value`` → (``section.key``, value as a Python literal, else the text)."""
    key, sep, value = text.partition("=")
    if not sep or "." not in key:
        raise argparse.ArgumentTypeError(f"--knob {text!r}: expected section.key=value")
    try:
        return key.strip(), ast.literal_eval(value.strip())
    except (ValueError, SyntaxError):
        return key.strip(), value.strip()


def write_copy(knobs: dict[str, object], profile: str) -> Path:
    """Notebook 04 with the learner's two changes appended to its parameters cell (and the
    profile, when it is not the notebook's own)."""
    import nbformat

    nb = nbformat.read(ROOT / "notebooks" / NOTEBOOK, as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    cell.source += (
        "\n# what a learner changes (scripts/check_lab_retrain.py)\n"
        f"retrain_try = True\ntry_knobs = {knobs!r}\n"
    )
    if profile != "tiny":
        cell.source += f"profile = {profile!r}\n"
    path = ROOT / SCRATCH / COPY
    nbformat.write(nb, path)
    return path


def try_output(page) -> dict:
    """The try cell's printed text and whether its output holds an image."""
    return page.evaluate(
        """() => { const cells = [...document.querySelectorAll('.jp-CodeCell')];
            const cell = cells.find(c => (c.querySelector('.jp-InputArea-editor') || {textContent: ''})
                .textContent.includes('retrain_side_by_side('));
            if (!cell) return {text: '', image: false};
            const out = cell.querySelector('.jp-OutputArea');
            return {text: out ? out.textContent : '', image: !!(out && out.querySelector('img'))}; }"""
    )


def check(args, sync_playwright) -> list[str]:
    seen: list[str] = []
    port, token = free_port(), secrets.token_hex(16)
    lab = start_lab(port, token, LOG)
    base = f"http://127.0.0.1:{port}"
    progress(f"JupyterLab answers on port {port} (log: {SCRATCH / LOG})")
    try:
        with sync_playwright() as playwright:
            browser, page = open_browser(playwright, args.chromium)
            try:
                page.goto(f"{base}/lab/tree/{SCRATCH.as_posix()}/{COPY}?token={token}")
                page.wait_for_selector("div.lm-MenuBar-itemLabel:text-is('Run')", timeout=120_000)
                wait_current(page, COPY)
                wait_idle(page)
                start = time.time()
                run_all(page)
                page.wait_for_function(
                    # textContent, not innerText: JupyterLab lays out only the cells in view;
                    # tqdm's widget writes its spaces as figure spaces (U+2007)
                    """bars => { const text = document.body.textContent.replace(/\u2007/g, ' ');
                                return bars.every(b => text.includes(b)); }""",
                    arg=list(BARS),
                    timeout=args.timeout * 1000,
                )
                seen.append(progress(f"both progress bars show ({', '.join(BARS)})"))
                page.screenshot(path=str(ROOT / SCRATCH / "try_progress.png"))
                ran = wait_done(page, COPY, args.timeout)
                whole = time.time() - start
                seen.append(progress(f"{COPY} ran without errors: {ran}"))
                out = try_output(page)
                found = RETRAINED.search(out["text"])
                if not found:
                    raise Failed(f"the try cell printed no retraining line: {out['text'][:300]!r}")
                if not out["image"]:
                    raise Failed("the try cell drew no figure")
                figure = page.locator(".jp-CodeCell:has-text('retrain_side_by_side(') img").first
                figure.scroll_into_view_if_needed()
                page.wait_for_timeout(1000)  # the cells scrolled into view are laid out
                figure.screenshot(path=str(ROOT / SCRATCH / "try_figure.png"))
                seen.append(
                    progress(
                        f"retraining (the try cell's own time): {found.group(1)} min; the whole "
                        f"notebook {whole / 60:.1f} min wall"
                    )
                )
            except Failed:
                page.screenshot(path=str(ROOT / SCRATCH / "try_failed.png"))
                raise
            except Exception as exc:  # a Playwright time-out: which wait, in its first line
                page.screenshot(path=str(ROOT / SCRATCH / "try_failed.png"))
                raise Failed(str(exc).splitlines()[0]) from exc
            except KeyboardInterrupt:
                page.screenshot(path=str(ROOT / SCRATCH / "try_interrupted.png"))
                raise
            finally:
                browser.close()
    finally:
        stop(lab)
    problems = log_problems(LOG)
    if problems:
        raise Failed("JupyterLab's log shows:\n" + "\n".join(problems[:10]))
    return seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--knob",
        type=parse_knob,
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="a try_knobs entry (repeatable), e.g. rollout.tree_alpha=0",
    )
    parser.add_argument("--profile", default="tiny", help="the notebook's profile (default tiny)")
    parser.add_argument("--chromium", default=None, help="a Chromium binary; default: Playwright's")
    parser.add_argument(
        "--timeout", type=float, default=1800, help="seconds per waiting step (a cell's run)"
    )
    args = parser.parse_args(argv)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print(
            "check_lab_retrain: playwright is not installed: pip install -e '.[browser]'",
            file=sys.stderr,
        )
        return 2
    os.chdir(ROOT)
    (ROOT / SCRATCH).mkdir(parents=True, exist_ok=True)
    shutil.rmtree(ROOT / SCRATCH / "workspaces", ignore_errors=True)
    knobs = dict(args.knob)
    write_copy(knobs, args.profile)
    before = os.getloadavg()
    try:
        seen = check(args, sync_playwright)
    except Failed as failure:
        print(f"FAILED: {failure}; screenshots and the log in {SCRATCH}/", file=sys.stderr)
        return 1
    after = os.getloadavg()
    print("\n".join(seen))
    print(
        f"ok: profile {args.profile}, knobs {knobs or 'none'}; load average {before[0]:.1f} at "
        f"the start, {after[0]:.1f} at the end, on {os.cpu_count()} CPUs; screenshots in "
        f"{SCRATCH}/"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
