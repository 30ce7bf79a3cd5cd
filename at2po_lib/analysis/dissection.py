r"""What each part of AT2PO does on the toy, read from the runs' own records.

- **Credit** (:func:`credit_spread`, :func:`fit_spread_rule`). AT2PO's value of a node is
  Σ_c softmax(H)_c V_c over its children. The softmax is shift-invariant (softmax(H + a) =
  softmax(H)), so only the spread of the siblings' entropies can move the weights away from the
  plain child mean 1/n; to first order, for a small range Δ = max H − min H,

      mean_c |w_c − 1/n|  ≈  c · Δ / n,

  with c set by how the entropies sit inside the range (c = 1/2 for two siblings). The fit
  reads c from every sibling set of the trees a run saved (``<run>/trees/step<S>.npz``: its
  first and last rollout step), per entropy estimate, with a bootstrap interval over trees.
- **Loss** (:func:`clip_levels`). Each update of a run logs the
  share of model tokens whose clip binds under a token-level and under a turn-level ratio at
  the method's own clip range (``clip_ratio/token_level``, ``clip_ratio/turn_level``, the same
  update both ways); this reads their means per run.
- **Expansion**: :mod:`.expansion_oracle`.

**At paper scale (an estimate, not a measurement).** There a turn is hundreds of tokens of
reasoning plus one action. Assume (i) the turn's mean NLL is dominated by the reasoning tokens,
each near-certain at a few hundredths of a nat with spread s per token, (ii) the one deciding
token differs between siblings by at most a few nats, (iii) T tokens per turn. Then the
siblings' mean entropies differ by about s/√T + (a few nats)/T: with s ≈ 0.3, T ≈ 300 and a
3-nat decision, Δ ≈ 0.017 + 0.01 ≈ 0.03 nats, and with c ≈ 1/2 and n = 2 siblings
|w − 1/n| ≈ 0.007: the entropy-weighted value is the child mean to within about 1.5% of
weight. :func:`paper_scale_weight_gap` computes it for other assumptions.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from ..method.credit import sibling_spread
from ..method.loss import REFERENCE_CLIP
from ..method.tree import TreeArrays
from ..record.tree_files import load_trees

ESTIMATES = {"nll": "entropy_nll", "exact": "entropy_exact"}
"""The two turn-entropy estimates, by the short names the records use, → node array."""


# --------------------------------------------------------------------------------------------
# Credit
# --------------------------------------------------------------------------------------------
def credit_spread(trees: Sequence[TreeArrays]) -> pd.DataFrame:
    """One row per sibling set (a node with >= 2 children) per estimate: ``tree``,
    ``estimate``, ``dev`` = mean |w − 1/n| under entropy_softmax, ``range`` of the siblings'
    entropies, ``n``."""
    parts = []
    for index, tree in enumerate(trees):
        for short, name in ESTIMATES.items():
            if name not in tree.node_arrays:
                continue
            dev, spread, size = sibling_spread(tree.parent, tree.node_arrays[name])
            parts.append(
                pd.DataFrame(
                    {"tree": index, "estimate": short, "dev": dev, "range": spread, "n": size}
                )
            )
    columns = ["tree", "estimate", "dev", "range", "n"]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)


def spread_slope(frame: pd.DataFrame) -> float:
    """Least squares through the origin of dev on range / n."""
    x = (frame["range"] / frame["n"]).to_numpy()
    y = frame["dev"].to_numpy()
    return float((x * y).sum() / (x * x).sum()) if (x * x).sum() > 0 else float("nan")


def fit_spread_rule(sets: pd.DataFrame, draws: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per estimate: c in mean |w − 1/n| ≈ c · range / n (module docstring) with a 95%
    percentile bootstrap over trees, the sibling sets and trees it rests on, and the mean
    deviation and range."""
    rows = []
    rng = np.random.default_rng(seed)
    for short, group in sets.groupby("estimate", sort=True):
        trees = group["tree"].unique()
        by_tree = {t: g for t, g in group.groupby("tree")}
        boot = [
            spread_slope(pd.concat([by_tree[t] for t in rng.choice(trees, len(trees))]))
            for _ in range(draws)
        ]
        lo, hi = np.nanpercentile(boot, [2.5, 97.5])
        rows.append(
            {
                "estimate": short,
                "c": spread_slope(group),
                "c_lo": float(lo),
                "c_hi": float(hi),
                "sibling_sets": len(group),
                "trees": len(trees),
                "mean_dev": float(group["dev"].mean()),
                "mean_range": float(group["range"].mean()),
            }
        )
    return pd.DataFrame(rows)


def run_tree_files(run_roots: Iterable[Path]) -> list[tuple[Path, int, Path]]:
    """(run folder, rollout step, file) of every saved tree file of the given runs."""
    out = []
    for root in run_roots:
        for path in sorted((Path(root) / "trees").glob("step*.npz")):
            out.append((Path(root), int(path.stem.removeprefix("step").split(".")[0]), path))
    return out


def credit_from_runs(
    run_roots: Iterable[Path], fit: bool = True
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every sibling set of the runs' saved trees (with ``method``, ``seed``, ``step``), and
    the fitted rule per (method, step kind, estimate): ``first`` = the first rollout step (the warm
    start's policy), ``last`` = the last."""
    parts = []
    for root, step, path in run_tree_files(run_roots):
        sets = credit_spread(load_trees(path))
        sets["tree"] = [f"{root.parent.name}/{root.name}/{step}/{t}" for t in sets["tree"]]
        parts.append(sets.assign(method=root.parent.name, seed=root.name, step=step))
    if not parts:
        return pd.DataFrame(), pd.DataFrame()
    sets = pd.concat(parts, ignore_index=True)
    first = sets.groupby(["method", "seed"])["step"].transform("min")
    sets["stage"] = np.where(sets["step"] == first, "first", "last")
    if not fit:  # the sets alone (a figure): the bootstrap of the fits is the slow part
        return sets, pd.DataFrame()
    # per method: a chain method's only sibling sets are its chains' first turns, whose weights
    # say nothing of AT2PO's; the rule itself (c) is the softmax's and should agree across them
    fits = [
        fit_spread_rule(group).assign(method=method, stage=stage)
        for (method, stage), group in sets.groupby(["method", "stage"], sort=True)
    ]
    return sets, pd.concat(fits, ignore_index=True)


def paper_scale_weight_gap(
    token_spread: float = 0.3,
    tokens: int = 300,
    decision_gap: float = 3.0,
    siblings: int = 2,
    c: float = 0.5,
) -> dict[str, float]:
    """The estimate of the module docstring: the siblings' mean-entropy range
    Δ ≈ token_spread / √tokens + decision_gap / tokens and mean |w − 1/n| ≈ c · Δ / n."""
    spread = token_spread / np.sqrt(tokens) + decision_gap / tokens
    return {"range": float(spread), "weight_gap": float(c * spread / siblings)}


# --------------------------------------------------------------------------------------------
# Loss
# --------------------------------------------------------------------------------------------
CLIP_LEVELS = ("clip_ratio/token_level", "clip_ratio/turn_level")
CLIP_LEVELS_AT_REFERENCE = tuple(f"{name}_eps{REFERENCE_CLIP:g}" for name in CLIP_LEVELS)
CLIP_COLUMNS = [
    "method",
    "seed",
    "steps",
    "epsilon",
    "epsilon_high",
    "token_level",
    "turn_level",
    "own",
    "token_level_at_reference",
    "turn_level_at_reference",
]


def clip_levels(run_roots: Iterable[Path]) -> pd.DataFrame:
    """Per run with the both-level records: the mean over its rollout
    steps of the clipped share of model tokens under a token-level and a turn-level ratio at
    its own clip range (``epsilon``, ``epsilon_high``: ``token_level``, ``turn_level``), the
    share its own loss clipped (``own``), and both at :data:`REFERENCE_CLIP` where the run
    logged them (``*_at_reference``; a run whose own range is 0.2 has them in ``token_level``
    and ``turn_level``; NaN for runs recorded before the reference range was logged)."""
    rows = []
    for root in run_roots:
        path = Path(root) / "metrics.jsonl"
        if not path.is_file():
            continue
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if not records or not all(k in records[0] for k in CLIP_LEVELS):
            continue
        frame = pd.DataFrame(records)
        low, high = _clip_range(Path(root))
        at_reference = (low, high) == (REFERENCE_CLIP, REFERENCE_CLIP)
        reference = [
            frame[c].mean() if c in frame else float("nan") for c in CLIP_LEVELS_AT_REFERENCE
        ]
        if at_reference:
            reference = [frame[c].mean() for c in CLIP_LEVELS]
        rows.append(
            {
                "method": Path(root).parent.name,
                "seed": Path(root).name,
                "steps": len(frame),
                "epsilon": low,
                "epsilon_high": high,
                "token_level": float(frame[CLIP_LEVELS[0]].mean()),
                "turn_level": float(frame[CLIP_LEVELS[1]].mean()),
                "own": float(frame["clip_ratio/region_mean"].mean()),
                "token_level_at_reference": float(reference[0]),
                "turn_level_at_reference": float(reference[1]),
            }
        )
    return pd.DataFrame(rows, columns=CLIP_COLUMNS)


def _clip_range(root: Path) -> tuple[float, float]:
    """The run's (epsilon, epsilon_high) from its ``config.yaml``'s effective settings (NaN
    when absent)."""
    path = root / "config.yaml"
    record = (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}
    trainer = record.get("settings", {}).get("trainer", {})
    return (
        float(trainer.get("epsilon", float("nan"))),
        float(trainer.get("epsilon_high", float("nan"))),
    )
