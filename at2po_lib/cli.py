"""The ``at2po`` command: one subcommand per pipeline stage.

Each subcommand lives in its stage's module as ``main(argv) -> int`` and is imported only when
called, so ``at2po --help`` is instant and a stage's heavy imports stay with that stage.
"""

from __future__ import annotations

import importlib
import sys

# subcommand -> (module:function, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "world": ("at2po_lib.tinyworld:main", "generate the TinyWorld corpus and datasets"),
    "index": ("at2po_lib.retrieval.build:main", "build a dense (faiss) or BM25 index"),
    "serve-retriever": ("at2po_lib.retrieval.server:main", "serve /retrieve (Search-R1 contract)"),
    "warmstart": ("at2po_lib.policy.warmstart:main", "train the tiny policy's SFT warm start"),
    "evaluate": ("at2po_lib.evaluation:main", "greedy evaluation on the test sets"),
    "train": ("at2po_lib.trainer.run:main", "RL training of one method (AT2PO or a baseline)"),
    "run-notebooks": ("at2po_lib.pipeline:main", "execute the numbered notebooks (papermill)"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: at2po <command> [options]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run 'at2po <command> --help' for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help"}:
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"at2po: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    target, _ = COMMANDS[name]
    module_name, func_name = target.split(":")
    module = importlib.import_module(module_name)
    return int(getattr(module, func_name)(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
