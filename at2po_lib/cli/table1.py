"""``at2po table1``: the same as ``at2po study --table 1`` (kept for the commands already in
people's notes and in earlier records' meta files).

    at2po table1 --profile tiny --seeds 0,1,2
"""

from __future__ import annotations

from . import study

PROG = "at2po table1"


def build_parser():
    return study.build_parser(PROG, table="1")


def main(argv: list[str] | None = None) -> int:
    return study.main(argv, prog=PROG, table="1")
