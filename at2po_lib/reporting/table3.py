r"""Table 3: the credit-assignment variants (value mode × advantage mode), and how well each
credit mode's turn advantages separate useful from useless turns.

The paper's Table 3 (docs/method.md §6, §10) compares node-value modes (entropy-weighted
children, child mean, leaf mean) and advantage modes (the node value itself, its difference to
the parent, ...) by multi-hop EM after training; it finds the entropy-weighted value used
directly as the advantage best, but publishes no cells we could put beside ours. Our grid is
the runs ``credit_<value>_<advantage>``, each with its multi-hop average and its difference to
AT2PO's default (``entropy_softmax`` / ``node_value``), whose cell is filled by the ``at2po``
runs when no separate ``credit_entropy_softmax_node_value`` run exists (same configuration).

The *credit-accuracy* table (written by :mod:`at2po_lib.analysis.credit_accuracy`,
``at2po credit-accuracy``) is the toy's noise-free analogue: TinyWorld knows each question's
plan, so every turn of a saved tree is labelled useful or not, and each credit mode is scored
by the AUC of its turn advantages.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from ..evaluation import stats
from ..method.credit import ADVANTAGE_MODES, VALUE_MODES
from ..method.presets import TABLE3_METHODS, credit_method
from ..study.block_records import ABLATION_SET
from ..util.paths import results_dir
from ..util.provenance import read_meta
from .block_pairs import blocked_difference, set_rows
from .labels import (
    ADVANTAGE_MODE_LABELS,
    TABLE3_CELLS,
    VALUE_MODE_LABELS,
    cell,
    groups_of,
    profile_at2po,
    rows_with_outcomes,
    signed_cell,
)

DEFAULT = credit_method("entropy_softmax", "node_value")
GRID_INDEX = "values ↓ / advantage →"
"""The header of Table 3's grid's first column: rows are how a turn's value is taken, columns
the advantage made of it."""
CREDIT_ACCURACY_FILE = "credit_accuracy.csv"
CREDIT_WEIGHTS_FILE = "credit_weights.csv"


@dataclass(frozen=True)
class CellTest:
    """One Table 3 cell against AT2PO's: its permutation test and the family's Holm p."""

    test: stats.PermutationTest
    p_holm: float


def cell_tests(
    outcomes: pd.DataFrame,
    default: str,
    members: Sequence[str],
    *,
    blocked: bool = False,
    allow_revisions: bool = False,
) -> dict[str, CellTest]:
    """Every Table 3 cell with outcomes against ``default`` (AT2PO's cell) on ``members``: the
    permutation test over seed labels (``blocked``: the sign-flip test within the ablation
    blocks), and Holm's correction over the cells tested, one family (the cells are
    read together, so a reading of one needs its corrected p)."""
    tests = {}
    for method in TABLE3_METHODS:
        if (
            method == DEFAULT
            or not rows_with_outcomes(outcomes, method)
            or not rows_with_outcomes(outcomes, default)
        ):
            continue
        if blocked:
            found = blocked_difference(
                outcomes, ABLATION_SET, method, default, members, allow_revisions=allow_revisions
            )
            if found is not None:
                tests[method] = found.test
        else:
            tests[method] = stats.difference_test(outcomes, method, default, members)
    corrected = stats.holm([t.p for t in tests.values()])
    return {m: CellTest(t, float(p)) for (m, t), p in zip(tests.items(), corrected)}


def table3(
    profile: str,
    outcomes: pd.DataFrame,
    group: str = "multihop",
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(tidy, display)``: one tidy row per (value mode, advantage mode) that has outcomes;
    display: value modes × advantage modes, ``avg [CI]``, ``Δ vs default [CI]``, the Δ's
    permutation p and its Holm-corrected p over every cell of the table (:func:`cell_tests`),
    and the cell's seeds (a one-seed cell's interval covers the questions only)."""
    members = groups_of(outcomes["dataset"].unique()).get(group, []) if len(outcomes) else []
    at2po = profile_at2po(profile, TABLE3_CELLS)  # the AT2PO with the cells' expansion settings
    default = (
        DEFAULT
        if rows_with_outcomes(outcomes, DEFAULT)
        else (at2po if rows_with_outcomes(outcomes, at2po) else None)
    )

    def change(method: str) -> dict:
        if default is None:
            return {}
        found = stats.difference_ci(outcomes, method, default, members)
        return {"delta": found.estimate, "delta_low": found.low, "delta_high": found.high}

    family = cell_tests(outcomes, default, members) if default and members else {}
    # the default cell *is* AT2PO: without its own runs the study reuses AT2PO's
    rows = _cells(profile, outcomes, members, at2po, default, change, family)
    return _grid(rows, "seed")


def table3_in_blocks(
    profile: str,
    blocks: pd.DataFrame,
    group: str = "multihop",
    *,
    allow_revisions: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(tidy, display)`` of Table 3 on the authors' configuration, from the ablation blocks
    (``at2po study --block-set ablation``): every cell's multi-hop average over the
    blocks that trained it and its difference to the blocks' own AT2PO (the default cell),
    paired within blocks, with the sign-flip p and Holm's correction over the cells tested
    (:func:`cell_tests` with ``blocked``). A difference needs 2 blocks holding both runs; a
    cell no block has trained yet reads "–", one resting on one block its average without an
    interval. :func:`table3` stays the earlier record (the
    committed 3-seed cells)."""
    rows_of_set, members = set_rows(blocks, ABLATION_SET, group)
    default = "at2po"

    def change(method: str) -> dict:
        found = blocked_difference(
            rows_of_set, ABLATION_SET, method, default, members, allow_revisions=allow_revisions
        )
        return {} if found is None else found.as_change()

    family = (
        cell_tests(rows_of_set, default, members, blocked=True, allow_revisions=allow_revisions)
        if members
        else {}
    )
    rows = _cells(profile, rows_of_set, members, default, default, change, family)
    return _grid(rows, "block", every_value_mode=True)


def _cells(
    profile: str,
    outcomes: pd.DataFrame,
    members: Sequence[str],
    default_runs: str,
    default: str | None,
    change: Callable[[str], dict],
    family: dict[str, CellTest],
) -> list[dict]:
    """One tidy row per cell with outcomes: its own average and, for a cell other than the
    default (whose runs are ``default_runs`` when it has none of its own), ``change(method)``
    against ``default`` with its family's p and Holm p."""
    rows = []
    for value in VALUE_MODES:
        for advantage in ADVANTAGE_MODES:
            method = credit_method(value, advantage)
            is_default = method == DEFAULT
            if is_default and not rows_with_outcomes(outcomes, method):
                method = default_runs
            if not members or not rows_with_outcomes(outcomes, method):
                continue
            own = stats.mean_ci(outcomes, method, members)
            low, high = own.bounds_over_seeds()
            row = {
                "profile": profile,
                "value_mode": value,
                "advantage_mode": advantage,
                "method": method,
                "em": own.estimate,
                "ci_low": low,
                "ci_high": high,
                "n_seeds": own.n_seeds_a,
                "n_questions": own.n_questions,
            }
            found = {} if is_default or method == default else change(method)
            if found:
                row.update(found, delta_against=default)
                if method in family:
                    row.update(
                        p_permutation=family[method].test.p,
                        p_holm=family[method].p_holm,
                        family_size=len(family),
                    )
            rows.append(row)
    return rows


def _grid(
    rows: list[dict], unit: str, every_value_mode: bool = False
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(tidy, display)`` of Table 3's cells: value modes × advantage modes, each ``avg [CI];
    Δ [CI], p, Holm (n seeds)`` (``unit``: what ``n_seeds`` counts, seeds or blocks), rows and
    columns by their reader-facing names (:data:`~.labels.VALUE_MODE_LABELS`,
    :data:`~.labels.ADVANTAGE_MODE_LABELS`; the tidy rows keep the records' names). A value
    mode with no cell is left out, unless ``every_value_mode`` (a grid still to be trained
    shows its empty cells as "–")."""
    tidy = pd.DataFrame(rows)
    if tidy.empty and not every_value_mode:
        return tidy, pd.DataFrame()
    text = {
        (r["value_mode"], r["advantage_mode"]): cell(r["em"], r["ci_low"], r["ci_high"])
        + (
            f"; Δ {signed_cell(r['delta'], r['delta_low'], r['delta_high'])}"
            if "delta" in r
            else ""
        )
        + (f", p {r['p_permutation']:.2f}, Holm {r['p_holm']:.2f}" if "p_holm" in r else "")
        + f" ({r['n_seeds']} {unit}{'s' * (r['n_seeds'] != 1)})"
        for r in rows
    }
    display = pd.DataFrame(
        [
            {
                GRID_INDEX: VALUE_MODE_LABELS[v],
                **{ADVANTAGE_MODE_LABELS[a]: text.get((v, a), "–") for a in ADVANTAGE_MODES},
            }
            for v in VALUE_MODES
            if every_value_mode or any((v, a) in text for a in ADVANTAGE_MODES)
        ]
    ).set_index(GRID_INDEX)
    return tidy, display


def load_credit_accuracy(profile: str) -> pd.DataFrame | None:
    """The credit-accuracy study's table, or None when it has not been run for ``profile``."""
    path = Path(results_dir(profile)) / CREDIT_ACCURACY_FILE
    return pd.read_csv(path) if path.is_file() else None


def load_credit_weights(profile: str) -> pd.DataFrame | None:
    """How far the entropy weights sit from uniform (written beside the credit-accuracy table),
    or None when that study has not been run for ``profile``."""
    path = Path(results_dir(profile)) / CREDIT_WEIGHTS_FILE
    return pd.read_csv(path) if path.is_file() else None


def credit_accuracy_provenance(profile: str) -> dict:
    """Where the credit-accuracy table came from: its file, and the command and git revision
    its own meta records (the study runs apart from the report)."""
    meta = read_meta(Path(results_dir(profile)) / CREDIT_ACCURACY_FILE)
    return {
        "source": CREDIT_ACCURACY_FILE,
        "source_command": meta.get("command"),
        "source_git_revision": meta.get("git_revision"),
    }
