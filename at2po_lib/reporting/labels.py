r"""Shared pieces of the tables: method labels, dataset groups, cell formatting.

Numbers are EM × 100 as in the paper. A cell reads ``mean [low, high]``: the mean over seeds
and questions with its 95% bootstrap CI (:mod:`at2po_lib.stats`); a cell without a CI (runs
recorded before per-question outcomes existed) shows the mean alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ..config import load_profile
from ..data import GROUPS, dataset_group, paper_dataset
from ..method.presets import METHODS, matching_at2po

if TYPE_CHECKING:
    import pandas as pd

METHOD_LABELS = {"react": "ReAct", "grpo": "GRPO", "dapo": "DAPO", "gspo": "GSPO",
                 "tree_grpo": "Tree-GRPO", "aepo": "AEPO", "at2po": "AT2PO",
                 "at2po_exact": "AT2PO (exact entropy, α = 0.001)",
                 "grpo_tree_budget": "GRPO (AT2PO's budget: M + L·K chains)"}
"""Project method names → the paper's row labels."""

DATASET_LABELS = {"hotpotqa": "HotpotQA", "2wikimultihopqa": "2Wiki", "musique": "MuSiQue",
                  "bamboogle": "Bamboogle", "nq": "NQ", "triviaqa": "TriviaQA",
                  "popqa": "PopQA"}
"""Paper dataset names → column labels."""

PAPER_DATASET_ORDER = (*GROUPS["multihop"], *GROUPS["singlehop"])

_BACKBONES = (("qwen3-4b", "Qwen3-4B"), ("qwen3-8b", "Qwen3-8B"), ("qwen2.5-7b", "Qwen2.5-7B"),
              ("qwen25-7b", "Qwen2.5-7B"))


def published_backbone(profile: str, model: str | None = None) -> str:
    """The published backbone a profile mirrors: its policy model's or profile's name
    (``Qwen/Qwen3-8B`` → Qwen3-8B); the toy profiles mirror the paper's main setting, Qwen3-4B."""
    for text in (model or "", profile):
        lowered = text.lower()
        for key, label in _BACKBONES:
            if key in lowered:
                return label
    return "Qwen3-4B"


def ordered_datasets(names: Sequence[str]) -> list[str]:
    """Datasets in the paper's column order (multi-hop first), unknown names last."""
    rank = {d: i for i, d in enumerate(PAPER_DATASET_ORDER)}
    return sorted(dict.fromkeys(names), key=lambda n: (rank.get(paper_dataset(n), 99), n))


def groups_of(datasets: Sequence[str]) -> dict[str, list[str]]:
    """{'multihop': [...], 'singlehop': [...]} over the given (toy or paper) dataset names."""
    out: dict[str, list[str]] = {}
    for name in ordered_datasets(datasets):
        out.setdefault(dataset_group(name), []).append(name)
    return out


def column_label(dataset: str) -> str:
    return DATASET_LABELS.get(paper_dataset(dataset), dataset)


def cell(mean: float, low: float | None = None, high: float | None = None) -> str:
    """``48.8 [46.1, 51.2]`` (×100), or ``48.8`` without an interval, ``–`` when missing."""
    if mean is None or mean != mean:
        return "–"
    if low is None or high is None or low != low or high != high:
        return f"{100 * mean:.1f}"
    return f"{100 * mean:.1f} [{100 * low:.1f}, {100 * high:.1f}]"


def signed_cell(diff: float, low: float, high: float) -> str:
    """``+1.3 [-0.4, +3.0]`` (×100 points)."""
    return f"{100 * diff:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"


def method_label(method: str) -> str:
    """The paper's row label; a Table 2 step reads as its place (``Table 2 step 1``), since the
    paper names those rows by what each step adds, and a Table 3 cell as its value and advantage
    modes (``Table 3 child_mean / node_value``); any other name is shown as it is."""
    if method in METHOD_LABELS:
        return METHOD_LABELS[method]

    preset = METHODS.get(method)
    if preset is None:
        return method
    if preset.table.startswith("Table 2"):
        return preset.table
    if preset.table == "Table 3":  # a credit cell: its value mode / advantage mode
        return (f"Table 3 {preset.overrides['credit_value']} / "
                f"{preset.overrides['credit_advantage']}")
    return method


def profile_at2po(profile: str) -> str:
    """The runs that stand for AT2PO in Table 2 (step 4) and Table 3 (the default cell) of
    ``profile``: the AT2PO preset with the expansion settings those tables' presets take from
    the profile (:func:`at2po_lib.method.presets.matching_at2po`)."""
    return matching_at2po(load_profile(profile).rollout)


def rows_with_outcomes(outcomes: pd.DataFrame, method: str) -> bool:
    return bool(len(outcomes)) and bool((outcomes["method"] == method).any())
