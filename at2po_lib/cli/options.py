"""What every subcommand shares: ``--profile`` / ``--set``, error reporting, list options.

``--set SECTION.KEY=VALUE`` (repeatable) is the one channel for overriding a profile value on
the command line. :func:`at2po_lib.config.overrides.parse_overrides` checks each key and value against
the config dataclasses before anything runs (an unknown key or a wrong type is an error
naming the key) and reads numbers as YAML 1.2 does (``1e-4`` is a float).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import re
import shlex
import sys
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from ..config.profile import load_profile
from ..config.overrides import parse_overrides
from ..retrieval.base import RetrievalError
from ..util.errors import ProfileError, RecordError
from ..util.storage import describe

SET_METAVAR = "SECTION.KEY=VALUE"
_RECORD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def record_name(text: str) -> str:
    """A ``--name`` that becomes part of a record's file name: letters, digits, ``_`` and ``-``
    (at most 64, not starting with ``-``/``_``), so it can neither leave the results folder nor
    collide with another record's separator."""
    if not _RECORD_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a record name (letters, digits, '_' and '-', at most 64, "
            "starting with a letter or digit)"
        )
    return text


def add_profile_options(
    parser: argparse.ArgumentParser,
    *,
    default: str | None = "tiny",
    example: str = "train.max_steps=3",
    profile_help: str | None = None,
) -> None:
    """``--profile`` and the repeatable ``--set`` override."""
    parser.add_argument(
        "--profile",
        default=default,
        help=profile_help
        or (
            "a profile name (configs/<name>.yaml) or a YAML file"
            + (f" (default: {default})" if default else "")
        ),
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar=SET_METAVAR,
        dest="overrides",
        help=f"override a profile value, e.g. {example} (repeatable; checked "
        "against the config before anything runs)",
    )


def parse_set(texts: list[str], extra_sections: Mapping[str, type] | None = None) -> dict[str, Any]:
    """The ``--set`` values as one nested dict ({} when there are none)."""
    return parse_overrides(texts, extra_sections) or {}


MAX_PROMPTS = 1_000_000
"""``--prompts`` of a study (the profile's split bounds it further, naming its size)."""


def add_warm_start_sample_options(parser: argparse.ArgumentParser, seed_help: str) -> None:
    """``--prompts``, ``--seed``, ``--datasets``, ``--policy``: the analyses that grow trees
    with the warm start on a sample of training prompts (expansion-stats, credit-accuracy)."""
    parser.add_argument(
        "--prompts", type=bounded_int(1, MAX_PROMPTS), default=300, help="prompts (default 300)"
    )
    parser.add_argument("--seed", type=SEED, default=0, help=seed_help)
    parser.add_argument(
        "--datasets",
        default=None,
        help="training splits to draw from (default train.train_datasets)",
    )
    parser.add_argument("--policy", default=None, help="policy folder (default: the warm start)")


def invocation(prog: str, argv: list[str] | None) -> str:
    """The command line as typed (recorded in the ``.meta.json`` of what it writes)."""
    return f"{prog} " + shlex.join(sys.argv[2:] if argv is None else argv)


def load_profile_args(args: argparse.Namespace):
    """The profile named by ``--profile`` with the ``--set`` overrides applied."""
    return load_profile(args.profile, parse_set(args.overrides) or None)


def comma_list(text: str | None, option: str) -> list[str] | None:
    """``"a,b"`` → ``["a", "b"]``; None stays None; a list with no item (``",,"``) is an error
    naming the option."""
    if text is None:
        return None
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise UsageError(f"{option} {text!r} names nothing (give e.g. {option} a,b)")
    return items


MAX_LIST = 100
"""Integers a list option (``--seeds``, ``--blocks``) may name: a study of more seeds than this
is a typo (``0-99999``), refused before the list is built or any run is looked at."""
_INTEGER = re.compile(r"[0-9]{1,20}")
"""An integer as typed: ASCII digits only (``int`` also reads ``'٣'`` as 3)."""


def int_list(
    text: str, option: str, low: int = 0, high: int = 2**32 - 1, most: int = MAX_LIST
) -> list[int]:
    """``"0,2,5-7"`` → ``[0, 2, 5, 6, 7]``: integers and inclusive ranges ``a-b`` (a <= b),
    separated by commas, in the order given, each in [low, high] (default: a seed's range),
    at most ``most`` of them (counted before the list is built)."""
    spans: list[tuple[int, int]] = []
    for item in comma_list(text, option) or []:
        first, dash, last = item.partition("-")
        if not _INTEGER.fullmatch(first) or not _INTEGER.fullmatch(last if dash else first):
            raise UsageError(
                f"{option} {text[:40]!r}: expected integers (digits 0-9) or ranges a-b "
                "separated by commas"
            )
        start, end = int(first), int(last) if dash else int(first)
        if end < start:
            raise UsageError(f"{option} {text[:40]!r}: the range {item} runs backwards")
        if not low <= start <= end <= high:
            raise UsageError(f"{option} {text[:40]!r}: expected integers in [{low:,}, {high:,}]")
        spans.append((start, end))
    named = sum(end - start + 1 for start, end in spans)  # repeats counted: an upper bound
    if named > most:
        raise UsageError(f"{option} {text[:40]!r} names {named:,} values; at most {most:,}")
    return list(dict.fromkeys(n for start, end in spans for n in range(start, end + 1)))


ENGINES_SETUP = (
    "`./run_tests.sh --engines` runs the engines' tests in an environment that has them "
    "(scripts/bootstrap_engines.sh makes it; docs/paper_scale.md)"
)
"""Where a missing engine is installed, named by :func:`check_engine`."""


def engine_installed() -> bool:
    """Whether vLLM can be imported here (looked up, not imported: that takes seconds). A module
    already imported counts as it is: an engine, or a stand-in a caller put in its place, whose
    ``__spec__`` may be None (``find_spec`` raises on that)."""
    if "vllm" in sys.modules:
        return sys.modules["vllm"] is not None
    return importlib.util.find_spec("vllm") is not None


def check_engine(cfg: Any, trainer_overrides: Mapping[str, Any] | None = None) -> None:
    """A profile whose rollouts or training run on vLLM (``rollout.backend=vllm``,
    ``train.use_vllm``) needs vLLM: checked before anything is trained or written, so a
    missing engine is one line naming where it comes from, not a traceback after a warm start
    was trained or a run folder made."""
    wants = {
        "rollout.backend=vllm": cfg.rollout.backend == "vllm",
        "train.use_vllm=true": bool(cfg.train.use_vllm),
        "trainer.use_vllm=true": bool((trainer_overrides or {}).get("use_vllm")),
    }
    asked = [name for name, on in wants.items() if on]
    if asked and not engine_installed():
        raise UsageError(
            f"profile {cfg.name} runs on vLLM ({', '.join(asked)}), which this environment "
            f"does not have: {ENGINES_SETUP}"
        )


class UsageError(ValueError):
    """Bad command-line input (reported like a bad profile value, exit status 2)."""


class CommandParser(argparse.ArgumentParser):
    """Every command's parser: a bad argument is one line, ``prog: error: argument --x: ...``
    (exit 2), without argparse's usage block (``--help`` shows it)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer in [low, high], else one line naming the value (a 0 or
    a typo such as 1000000000 stops here, not in a traceback or after hours of work)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"{text[:40]!r}: expected an integer in [{low:,}, {high:,}]"
            )
        return value

    return parse


def bounded_float(low: float, high: float, *, open_low: bool = False) -> Callable[[str], float]:
    """An argparse ``type``: a finite number in [low, high] (``(low, high]`` with
    ``open_low``); ``nan``, ``inf`` and ``1e308`` are refused naming the value."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (
            math.isfinite(value) and (value > low if open_low else value >= low) and value <= high
        ):
            interval = f"{'(' if open_low else '['}{low:g}, {high:g}]"
            raise argparse.ArgumentTypeError(
                f"{text[:40]!r}: expected a finite number in {interval}"
            )
        return value

    return parse


SEED = bounded_int(0, 2**32 - 1)
"""``--seed`` (numpy's legacy generator and CUDA take seeds below 2^32)."""


def quiet_openmp() -> None:
    """Idle OpenMP threads spin by default; on a shared 2-core machine that made every torch op
    several times slower (measured). Only effective before torch is first imported."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def run_guarded(prog: str, body: Callable[[], int]) -> int:
    """Run a subcommand; bad input (a profile, key, value, method, list, a damaged run record,
    a corpus or index the retrieval stage refuses) is one line on stderr naming it, and exit
    status 2."""
    try:
        return int(body() or 0)
    except (ProfileError, UsageError, RecordError, RetrievalError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full disk, a missing or damaged file: errno and path, one line
        print(f"{prog}: error: {describe(exc)}", file=sys.stderr)
        return 1


def check_methods(names: list[str]) -> None:
    """Unknown method names are a :class:`UsageError` with the closest known ones."""
    # lazy: pulls torch; every `at2po <command> --help` stays instant
    from ..method.presets import get_method

    for name in names:
        try:
            get_method(name)
        except KeyError as exc:
            raise UsageError(exc.args[0]) from None
