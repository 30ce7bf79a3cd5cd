"""Timing of ``extract_answer`` on adversarial responses (issue 13: the regex it replaced took
47 s on 160 kB of unclosed ``<answer>`` tags). Not a test: prints seconds per call.

    python benchmarks/bench_extract_answer.py
"""

from __future__ import annotations

import re
import time

from at2po_lib.protocol.reward import extract_answer

REGEX = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def seconds(fn, text: str) -> float:
    start = time.perf_counter()
    fn(text)
    return time.perf_counter() - start


def main() -> None:
    for kb in (16, 160, 1000):
        text = "<answer>" * (kb * 1000 // len("<answer>"))
        print(
            f"{kb:5d} kB unclosed tags: extract_answer {seconds(extract_answer, text):.4f} s",
            flush=True,
        )
    text = "<answer>" * (16_000 // len("<answer>"))
    print(
        f"   16 kB unclosed tags: the old regex {seconds(lambda t: list(REGEX.finditer(t)), text):.2f} s"
    )


if __name__ == "__main__":
    main()
