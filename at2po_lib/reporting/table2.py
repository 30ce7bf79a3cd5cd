r"""Table 2: the progressive ablation, step by step, beside the paper's multi-hop averages.

Steps (docs/method.md §10): (1) GRPO with a random tree, (2) + the ATPO turn-level loss,
(3) + entropy-guided expansion, (4) + turn-wise credit (= AT2PO, read from the AT2PO preset
with the expansion settings steps 1-3 take from the profile: ``at2po_exact`` on ``tiny``). Each row gives the
multi-hop average (sample-weighted, 95% CI) and the change from the previous step, paired over
questions and unpaired over seeds (:func:`at2po_lib.evaluation.stats.difference_ci`), with the
permutation test over seed labels a reading of it needs (:func:`~at2po_lib.evaluation.stats.difference_test`); the published
average and published change sit beside it (Qwen3-4B; the paper gives no per-dataset cells).

:func:`table2_in_blocks` is the same table on the authors' configuration, read from the study's
ablation blocks (``at2po study --block-set ablation``): every step and AT2PO itself
trained once per block, each step's change paired within the blocks (the interval over block
differences crossed with the question term, and the sign-flip test over blocks:
:func:`at2po_lib.reporting.block_pairs.blocked_difference`). :func:`table2` stays the earlier
record: the committed 3-seed steps, whose step 4 is the exact-entropy variant on ``tiny``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd

from ..evaluation import stats
from ..method.presets import TABLE2_METHODS
from ..evaluation.paper_reference import published_table2
from ..study.block_records import ABLATION_SET
from .block_pairs import blocked_difference, set_rows
from .labels import cell, groups_of, profile_at2po, rows_with_outcomes, signed_cell


def table2(
    profile: str,
    outcomes: pd.DataFrame,
    group: str = "multihop",
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(tidy, display)`` of the ablation steps that have per-question outcomes; the
    published column is always there (the table says which steps are missing)."""
    members = groups_of(outcomes["dataset"].unique()).get(group, []) if len(outcomes) else []

    def change(method: str, previous: str) -> dict:
        found = stats.difference_ci(outcomes, method, previous, members)
        test = stats.difference_test(outcomes, method, previous, members)
        return {
            "delta": found.estimate,
            "delta_low": found.low,
            "delta_high": found.high,
            "p_permutation": test.p,
        }

    # step 4 is AT2PO with the expansion settings step 3 recorded (at2po_exact on tiny until
    # the study re-runs step 3 with the profile's)
    at2po = profile_at2po(profile)
    rows = _steps(
        profile,
        outcomes,
        members,
        lambda step: at2po if step == "at2po" else step,
        change,
    )
    return _tables(rows, "toy Δ step [95% CI]", "seeds", "n_seeds")


def table2_in_blocks(
    profile: str,
    blocks: pd.DataFrame,
    group: str = "multihop",
    *,
    allow_revisions: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(tidy, display)`` of Table 2 from the ablation blocks (module doc): each step's
        multi-hop average over the blocks that trained it, its change from the step before paired
        within the blocks that trained both (with the sign-flip p), and the blocks each rests on.
        Step 4 is ``at2po``, the authors' configuration the set trains. A step with no finished
        block reads "–", one resting on one block has no interval (it would lack the seed term:
    :meth:`~at2po_lib.evaluation.stats.Interval.bounds_over_seeds`); a change needs 2 blocks
    holding both steps (the earlier record,
        :func:`table2`, is the table until then)."""
    rows_of_set, members = set_rows(blocks, ABLATION_SET, group)

    def change(method: str, previous: str) -> dict:
        found = blocked_difference(
            rows_of_set, ABLATION_SET, method, previous, members, allow_revisions=allow_revisions
        )
        return {} if found is None else found.as_change()

    rows = _steps(profile, rows_of_set, members, lambda step: step, change)
    rows = [{**r, "n_blocks": r.pop("n_seeds", None)} for r in rows]  # a block is one seed each
    return _tables(rows, "toy Δ step, paired in blocks [95% CI]", "blocks", "n_blocks")


def _steps(
    profile: str,
    outcomes: pd.DataFrame,
    members: Sequence[str],
    method_of: Callable[[str], str],
    change: Callable[[str, str], dict],
) -> list[dict]:
    """One tidy row per step (its runs: ``method_of(step)``): the published average, the toy's
    own average where the step has outcomes, and ``change(method, previous)`` where the step
    before has them too (a missing step breaks the chain of changes)."""
    published = published_table2().set_index("method")
    rows, previous = [], None
    for number, step in enumerate(TABLE2_METHODS, start=1):
        method = method_of(step)
        pub = published.loc[step] if step in published.index else None
        row = {
            "profile": profile,
            "step": number,
            "method": method,
            "configuration": pub["configuration"] if pub is not None else method,
            "published_avg": float(pub["multihop_avg"]) / 100 if pub is not None else None,
        }
        if members and rows_with_outcomes(outcomes, method):
            own = stats.mean_ci(outcomes, method, members)
            low, high = own.bounds_over_seeds()
            row.update(
                em=own.estimate,
                ci_low=low,
                ci_high=high,
                n_seeds=own.n_seeds_a,
                n_questions=own.n_questions,
            )
            if previous is not None:
                row.update(change(method, previous))
            previous = method
        else:
            previous = None
        rows.append(row)
    return rows


def _tables(
    rows: list[dict], delta_header: str, runs_header: str, runs_key: str
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(tidy, display)`` of :func:`_steps`' rows, each change with its permutation p; what
    each step's own average rests on is the rows' ``runs_key`` (``n_seeds``, or ``n_blocks``)."""
    tidy = pd.DataFrame(rows)
    tidy["published_delta"] = tidy["published_avg"].diff()
    columns = {
        "step": tidy["step"],
        "configuration": tidy["configuration"],
        "toy avg [95% CI]": [cell(r.get("em"), r.get("ci_low"), r.get("ci_high")) for r in rows],
        delta_header: [
            signed_cell(r["delta"], r["delta_low"], r["delta_high"]) if "delta" in r else "–"
            for r in rows
        ],
        "permutation test": [
            f"{r['p_permutation']:.3f}" if "p_permutation" in r else "–" for r in rows
        ],
        runs_header: [r.get(runs_key) or "–" for r in rows],
        "published avg": [f"{100 * v:.2f}" for v in tidy["published_avg"]],
        "published Δ": ["–" if v != v else f"{100 * v:+.2f}" for v in tidy["published_delta"]],
    }
    return tidy, pd.DataFrame(columns).set_index("step")
