r"""Shared pieces of the tables: method labels, dataset groups, cell formatting.

Numbers are EM × 100 as in the paper. A cell reads ``mean [low, high]``: the mean over seeds
and questions with its 95% crossed t interval (:mod:`at2po_lib.evaluation.stats`); a cell without a CI (runs
recorded before per-question outcomes existed) shows the mean alone.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Sequence

from ..config.profile import load_profile
from ..protocol.qa_data import GROUPS, dataset_group, paper_dataset
from ..method.presets import METHODS, TABLE3_METHODS, credit_method, matching_at2po
from ..study.block_records import ABLATION_SET, blocks_root, finished_blocks
from ..record.reading import discover_runs, recorded_rollout

if TYPE_CHECKING:
    import pandas as pd

METHOD_LABELS = {
    "react": "ReAct",
    "grpo": "GRPO",
    "dapo": "DAPO",
    "gspo": "GSPO",
    "tree_grpo": "Tree-GRPO",
    "aepo": "AEPO",
    "at2po": "AT2PO",
    "at2po_exact": "AT2PO (exact entropy, α = 0.001)",
    "grpo_tree_budget": "GRPO (AT2PO's budget: M + L·K chains)",
}
"""Project method names → the paper's row labels."""

VALUE_MODE_LABELS = {
    "entropy_softmax": "entropy-weighted children",
    "entropy_linear": "linear entropy weights",
    "child_mean": "child mean",
    "leaf_mean": "leaf mean",
}
"""Table 3's value modes (docs/method.md §6) as the reader reads them: how a turn's value V_n
is taken from its children (``entropy_softmax``: softmax(H) weights, the authors' code and
AT2PO; ``entropy_linear``: weights H_c / Σ H, the paper's formula) or its leaves."""

ADVANTAGE_MODE_LABELS = {
    "node_value": "node value",
    "diff_parent": "difference to the parent",
    "diff_global": "difference to the root",
    "diff_localglobal": "differences to the root and the parent",
}
"""Table 3's advantage modes (docs/method.md §6) as the reader reads them: A_n = V_n,
V_n − V_parent, V_n − V_root, (V_n − V_root) + (V_n − V_parent)."""

CREDIT_WORDS = {**VALUE_MODE_LABELS, **ADVANTAGE_MODE_LABELS}
"""Every value and advantage mode by its reader-facing name (the records' names are internal)."""


def credit_words(mode: str) -> str:
    """A value or advantage mode as the reader reads it (:data:`CREDIT_WORDS`); an unknown
    name as it is."""
    return CREDIT_WORDS.get(mode, mode)


def credit_cell_label(value_mode: str, advantage_mode: str) -> str:
    """One Table 3 cell: ``child mean, difference to the parent`` (its values, then its
    advantage), the order of Table 3's grid (rows, then columns)."""
    return f"{credit_words(value_mode)}, {credit_words(advantage_mode)}"


DATASET_LABELS = {
    "hotpotqa": "HotpotQA",
    "2wikimultihopqa": "2Wiki",
    "musique": "MuSiQue",
    "bamboogle": "Bamboogle",
    "nq": "NQ",
    "triviaqa": "TriviaQA",
    "popqa": "PopQA",
}
"""Paper dataset names → column labels."""

PAPER_DATASET_ORDER = (*GROUPS["multihop"], *GROUPS["singlehop"])

_BACKBONES = (
    ("qwen3-4b", "Qwen3-4B"),
    ("qwen3-8b", "Qwen3-8B"),
    ("qwen2.5-7b", "Qwen2.5-7B"),
    ("qwen25-7b", "Qwen2.5-7B"),
)


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
    paper names those rows by what each step adds, and a Table 3 cell as its values and its
    advantage in words (``Table 3: child mean, node value``, :func:`credit_cell_label`); any
    other name is shown as it is."""
    if method in METHOD_LABELS:
        return METHOD_LABELS[method]

    preset = METHODS.get(method)
    if preset is None:
        return method
    if preset.table.startswith("Table 2"):
        return preset.table
    if preset.table == "Table 3":  # a credit cell: its values, then its advantage
        value, advantage = preset.overrides["credit_value"], preset.overrides["credit_advantage"]
        return f"Table 3: {credit_cell_label(value, advantage)}"
    return method


STEP3 = ("ablation_entropy_tree",)
"""The runs Table 2's step 4 (AT2PO) differs from in credit only: step 3."""
TABLE3_CELLS = tuple(
    m for m in TABLE3_METHODS if m != credit_method("entropy_softmax", "node_value")
)
"""The runs Table 3's default cell (AT2PO) differs from in credit only: the other cells."""


def profile_at2po(profile: str, beside: Sequence[str] = STEP3) -> str:
    """The runs that stand for AT2PO beside ``beside`` (Table 2's step 3: :data:`STEP3`;
    Table 3's other cells: :data:`TABLE3_CELLS`): the AT2PO preset that grows its trees with
    the expansion settings those runs recorded (:func:`~.records.recorded_rollout`), so that
    the two differ in credit only; without their records, the profile's settings (``at2po``).
    On ``tiny`` the committed steps and cells ran the exact-entropy variant's settings, so
    the committed runs' Table 2 step 4 and Table 3 default cell are ``at2po_exact``; the
    study's ablation blocks train the authors' ``at2po`` beside every step and cell
    (:func:`~at2po_lib.method.presets.matching_at2po`)."""
    recorded = recorded_rollout(profile, beside)
    if recorded is None:
        recorded = dataclasses.asdict(load_profile(profile).rollout)
    return matching_at2po(recorded)


def rows_with_outcomes(outcomes: pd.DataFrame, method: str) -> bool:
    return bool(len(outcomes)) and bool((outcomes["method"] == method).any())


ESTIMATE_WORDS = {"exact": "exact entropy", "sampled_nll": "sampled-token NLL"}
"""``rollout.entropy_estimate`` in words."""


def expansion_words(rollout: "dict | object") -> str:
    """An expansion's two settings in words: ``sampled-token NLL, α = 0.05``."""
    get = rollout.get if isinstance(rollout, dict) else lambda k: getattr(rollout, k, None)
    estimate = get("entropy_estimate")
    return f"{ESTIMATE_WORDS.get(estimate, estimate)}, α = {get('tree_alpha'):g}"


def table_configurations(profile: str) -> str:
    """One sentence: which AT2PO configuration every table row of ``profile`` rests on, read
    from the runs' records (:func:`profile_at2po`): Table 1's AT2PO row is ``at2po``, Table 2's
    step 4 and Table 3's default cell the preset with their neighbours' recorded settings."""
    profile_rollout = dataclasses.asdict(load_profile(profile).rollout)

    def described(method: str) -> str:
        runs = discover_runs(profile, [method])
        seeds = int(runs["finished"].sum()) if len(runs) else 0
        fixed = METHODS[method].rollout
        settings = recorded_rollout(profile, [method]) or {**profile_rollout, **fixed}
        where = (
            "the profile's settings" if not fixed else "the settings it fixes over the profile's"
        )
        count = f"{seeds} seed{'s' if seeds != 1 else ''}" if seeds else "no finished runs yet"
        return f"`{method}` ({expansion_words(settings)}: {where}; {count})"

    slots = {
        "Table 1's AT2PO row": "at2po",
        "Table 2's step 4 (= AT2PO)": profile_at2po(profile, STEP3),
        "Table 3's default cell": profile_at2po(profile, TABLE3_CELLS),
    }
    by_method: dict[str, list[str]] = {}
    for slot, method in slots.items():
        by_method.setdefault(method, []).append(slot)
    parts = []
    for method, names in by_method.items():
        joined = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        verb = "is" if len(names) == 1 else "are"
        parts.append(f"{joined} {verb} {described(method)}")
    sentence = f"On `{profile}`, " + ", while ".join(parts)
    ablation = len(finished_blocks(blocks_root(profile, ABLATION_SET)))
    if len(by_method) > 1 and ablation:
        sentence += (
            ", in the committed runs (the earlier record): the settings Table 2's step 3 and "
            "Table 3's other cells were recorded with, so that each differs from its "
            f"neighbours in credit only. The study's {ablation} ablation blocks re-ran every "
            "step and cell beside the authors' `at2po`, and the claims and the block tables "
            "read those"
        )
    elif len(by_method) > 1:
        sentence += (
            ": the settings Table 2's step 3 and Table 3's other cells were recorded "
            "with, so that each differs from its neighbours in credit only, until the "
            "study re-runs them with the profile's"
        )
    return sentence + "."
