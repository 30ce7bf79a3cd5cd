"""The ``at2po`` command: one subcommand per pipeline stage, one module per subcommand.

    at2po world | index | serve-retriever | warmstart | evaluate | train | study | report
          | run-notebooks | expansion-stats | credit-accuracy | dissect | regime-pilot | plan
          | rehearsal | gpu-env            (at2po <command> --help for each one's options)

Each subcommand is a module of this package with ``build_parser()`` and ``main(argv) -> int``;
the stage it runs lives in the library (``tinyworld``, ``retrieval``, ``warmstart``,
``evaluation``, ``study``, ``plan``, ``analysis``, ``reporting``, ``lab``) and has no command line
of its own.
Every command that reads a profile takes the same two options from :mod:`.options`:
``--profile NAME`` and ``--set SECTION.KEY=VALUE`` (repeatable), the one way to override a
profile value; each key and value is checked against the config dataclasses before anything
runs.

Subcommand modules are imported only when called, so ``at2po --help`` is instant and a stage's
heavy imports (torch, trl, faiss) stay with that stage. ``python -m at2po_lib.cli <command>``
is the same as ``at2po <command>`` (``accelerate launch -m at2po_lib.cli train ...``).
"""

from __future__ import annotations

import importlib
import os
import shlex
import sys

from ..util.process_group import process_group_left_at_end
from ..util.provenance import COMMAND_ENV

COMMANDS: dict[str, tuple[str, str]] = {
    "world": ("world", "generate the TinyWorld corpus and datasets"),
    "index": ("index", "build a dense (faiss) or BM25 index"),
    "serve-retriever": ("serve_retriever", "serve /retrieve (Search-R1 contract)"),
    "warmstart": ("warmstart", "train the tiny policy's SFT warm start"),
    "evaluate": ("evaluate", "greedy evaluation on the test sets"),
    "train": ("train", "RL training of one method (AT2PO or a baseline)"),
    "study": ("study", "train (or reuse) the runs of Table 1, 2 or 3 for several seeds"),
    "report": ("report", "Tables 1-3 and Figures 3-4 from stored records (no training)"),
    "run-notebooks": ("run_notebooks", "execute the numbered notebooks (papermill)"),
    "expansion-stats": ("expansion_stats", "where entropy-guided expansion branches, per alpha"),
    "credit-accuracy": ("credit_accuracy", "AUC of each credit mode against useful-turn labels"),
    "dissect": (
        "dissect",
        "what each part of AT2PO does: credit spread, clip levels, expansion oracle",
    ),
    "regime-pilot": ("regime_pilot", "does RL learn on a profile; do its turns decide the outcome"),
    "plan": ("plan", "memory per GPU and rollout/retrieval load of a step, before a GPU hour"),
    "rehearsal": (
        "rehearsal",
        "write the rehearsal profile's stand-in files (policy, corpus, data)",
    ),
    "gpu-env": ("gpu_env", "the GPU environment's pip input / a pip report's key versions"),
}
"""Subcommand → (module of this package, one-line help)."""


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: at2po <command> [options]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run 'at2po <command> --help' for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help"}:
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"at2po: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"{__name__}.{COMMANDS[name][0]}")
    # Every .meta.json written below names this command (at2po_lib.util.provenance).
    previous = os.environ.get(COMMAND_ENV)
    os.environ[COMMAND_ENV] = shlex.join(["at2po", *argv])
    try:
        # Under `accelerate launch` / torchrun: leave the process group before Python exits
        # (at2po_lib.util.process_group: gloo's workers otherwise abort a process at exit).
        with process_group_left_at_end():
            return int(module.main(rest) or 0)
    finally:
        if previous is None:
            os.environ.pop(COMMAND_ENV, None)
        else:
            os.environ[COMMAND_ENV] = previous
