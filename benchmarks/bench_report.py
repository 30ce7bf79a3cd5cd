"""The report's statistics: a method's (seeds × questions) score table by scatter-adding into a
dense array (``stats.score_matrix``) against the pandas pivot table it replaced, and Table 1's
differences with each pair's score tables built once per scope (``stats.comparison_table``)
against one ``difference_ci`` and one ``probability_of_improvement`` call per weighting.
Both sides run in this process on the committed tiny records and are checked equal first.

    python benchmarks/bench_report.py            # last line: the two speed-ups
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from at2po_lib.evaluation import stats
from at2po_lib.method.presets import TABLE1_REPORTED
from at2po_lib.reporting.labels import groups_of
from at2po_lib.record.reading import load_outcomes


def pivot_matrix(outcomes: pd.DataFrame, method: str, questions: pd.Index) -> np.ndarray:
    """The score table as a pandas pivot table (the implementation before this one)."""
    rows = outcomes[outcomes["method"] == method]
    table = rows.pivot_table(
        index="seed", columns=["dataset", "question_id"], values="em", aggfunc="mean"
    )
    return table[questions].to_numpy(dtype=float)


def per_call_table(outcomes, baselines, groups, methods) -> pd.DataFrame:
    """Table 1's differences as one call of each statistic per (pair, scope, weighting)."""
    scopes = {name: list(ds) for name, ds in groups.items()}
    for dataset in sorted(outcomes["dataset"].unique()):
        scopes.setdefault(dataset, [dataset])
    rows = []
    for baseline in baselines:
        for method in (m for m in methods if m != baseline):
            for scope, datasets in scopes.items():
                for weighting in ("sample", "dataset") if len(datasets) > 1 else ("sample",):
                    args = (outcomes, method, baseline, datasets, "em", weighting)
                    diff = stats.difference_ci(*args)
                    share = stats.probability_of_improvement(*args)
                    rows.append((diff.estimate, diff.low, diff.high, share))
    return pd.DataFrame(rows, columns=["diff", "ci_low", "ci_high", "p_improve"])


def timed(fn, repeats: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    outcomes = load_outcomes(args.profile)
    methods = [m for m in TABLE1_REPORTED if (outcomes["method"] == m).any()]
    groups = groups_of(outcomes["dataset"].unique())
    questions = stats._question_keys(outcomes, methods, groups["multihop"])

    def scatter():
        return [stats.score_matrix(outcomes, m, questions) for m in methods]

    def pivot():
        return [pivot_matrix(outcomes, m, questions) for m in methods]

    new_s, new = timed(scatter, args.repeats)
    old_s, old = timed(pivot, args.repeats)
    assert all(np.array_equal(a, b) for a, b in zip(new, old)), "score tables differ"
    print(
        f"score tables ({len(methods)} methods x {len(questions)} multi-hop questions): "
        f"pivot {old_s:.2f} s, scatter {new_s:.2f} s"
    )

    baselines = [b for b in ("grpo", "react") if b in methods]
    new_t, table = timed(
        lambda: stats.comparison_table(outcomes, baselines, groups, methods=methods), 1
    )
    old_t, reference = timed(lambda: per_call_table(outcomes, baselines, groups, methods), 1)
    assert np.allclose(
        table[["diff", "ci_low", "ci_high", "p_improve"]].to_numpy(),
        reference.to_numpy(),
        rtol=0,
        atol=1e-12,
    ), "comparison tables differ"
    print(
        f"Table 1 differences ({len(table)} rows): per call {old_t:.1f} s, "
        f"once per scope {new_t:.1f} s"
    )
    print(f"speed-up: score tables x{old_s / new_s:.1f}, Table 1 differences x{old_t / new_t:.1f}")


if __name__ == "__main__":
    main()
