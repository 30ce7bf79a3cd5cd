r"""An interactive tree and credit inspector (notebook 03, "Inspect a tree yourself").

In JupyterLab (ipywidgets, installed by the ``lab`` extra): pick a question, an expansion
(``chain``, ``random``, ``entropy``, ``aepo``; docs/method.md §5, §8) and M, L, K, α, grow the
tree with the profile's warm-start policy, step through its rounds, and pick a node to see

- its text, turn entropy H(n) and node value V_n under every value mode (docs/method.md §6);
- its advantage under every credit rule side by side (:func:`credit_table`): AT2PO's 4 value
  modes × 4 advantage modes, GRPO, Tree-GRPO and a GiGPO-style step grouping;
- its turn-level importance ratio after one *simulated* update and whether ATPO's clip binds
  (:func:`at2po_lib.analysis.policy_change.simulated_turn_ratios`; docs/method.md §7).

It starts on the notebooks' running example (:func:`default_choice`,
:mod:`at2po_lib.analysis.running_example`) with its picked turn and re-sample ringed, lists the
questions of the trees it shows (:func:`questions_table`), offers every tree of a multi-tree
expansion (``random``), rings the chosen node, and says when a tree carries no signal
(:func:`signal_note`). Each view is one PNG (:func:`render_png` of :func:`tree_view`), so the
widget shows exactly the offline drawing of the same view.

Without a widget frontend (papermill, ``nbconvert``, a plain console) :func:`inspect` draws the
same views as static figures and tables for the default choices (:func:`static_inspection`):
the running example's tree and turn (else the tree chosen by
:func:`at2po_lib.reporting.tree_drawings.choose_example_tree` and the node where the credit rules
disagree most, :func:`most_disputed_node`), each round of its growth, and that node's credit.

Baselines, per node. GRPO and GiGPO give one advantage per *row* (root→leaf path) and a node
lies on every row below it; its tokens are trained once per row, so the inspector shows the
mean over those rows (the node's effective advantage, as
:mod:`at2po_lib.analysis.credit_accuracy` scores it):

- ``grpo``: :func:`at2po_lib.method.outcome.grpo_advantages` of the rows' rewards, one group per
  prompt (all trees of the prompt);
- ``tree_grpo``: :func:`at2po_lib.method.outcome.tree_grpo_advantages` (prompt-level + tree-level
  GRPO). Tree-GRPO grows ``rollout.tree_grpo_trees`` trees per prompt (``random`` expansion);
  on a single tree both terms are GRPO over the same leaves, so it is twice GRPO;
- ``gigpo``: :func:`at2po_lib.analysis.credit_accuracy.gigpo_row_advantages` (episode GRPO +
  step returns γ^k r normalised within an *anchor state*: the passages the path retrieved
  before the turn). Trees grown here carry their passages (``retrieved`` records); trees
  without them (e.g. read from notebook 02's file) use the set of queries searched before the
  turn, which names the same passages because BM25 top-k is deterministic (two different
  queries that return the same passages then count as two states). NaN, with a note, when
  that module is not installed.

The ratio is simulated, not trained: ``log π_new = log π_old + d_n + ε_t`` with one drift
``d_n ~ N(0, σ_turn²)`` per turn and jitter ``ε_t ~ N(0, σ_tok²)`` per token
(:func:`at2po_lib.analysis.policy_change.simulate_policy_change`, notebook 03 §4); the turn
ratio is the geometric mean of its token ratios, ``exp(mean_t (log π_new − log π_old))``, and
the clip binds when ``A > 0`` and the ratio exceeds ``1 + ε_high`` or ``A < 0`` and it is below
``1 − ε_low``.
"""

from __future__ import annotations

import html
import os
import textwrap
from contextlib import contextmanager
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from ..analysis.credit_accuracy import gigpo_row_advantages
from ..analysis.policy_change import simulated_turn_ratios
from ..analysis.running_example import choose_running_example
from ..analysis.study_trees import with_plans, with_retrievals
from ..config import load_profile
from ..method.credit import (ADVANTAGE_MODES, VALUE_MODES, forest_node_advantages,
                             forest_node_values)
from ..method.expansion import EXPANSIONS
from ..method.loss import EPS_HIGH, EPS_LOW
from ..method.outcome import grpo_advantages, tree_grpo_advantages
from ..method.tree import Forest, TreeArrays, leaf_paths, node_depths
from ..policy.model import load_policy
from ..policy.warmstart_cache import cached_warmstart
from ..prompts import get_template
from ..retrieval.indexes import build_retriever
from ..rollout.export import tree_arrays
from ..rollout.trees import rollout
from ..tinyworld.build import ensure_world, read_rows
from .tree_drawings import (CHOSEN_ROLE, choose_example_tree, close_figure, draw_rollout_tree,
                            grown_by_round, new_figure, node_text_table)

if TYPE_CHECKING:
    import pandas as pd

BASELINES = ("grpo", "tree_grpo", "gigpo")
DEFAULT_MODE = ("entropy_softmax", "node_value")
"""AT2PO's default credit (the authors' code): the advantage the clip check uses."""


# --------------------------------------------------------------------------------------------
# Credit of every node under every rule
# --------------------------------------------------------------------------------------------
def _rows(forest: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Root→leaf rows of a forest: (leaf (R,), pair_row (P,), pair_node (P,)) over every
    (row, non-root node on the row) pair, vectorised."""
    leaves, paths = leaf_paths(forest.parent)
    nodes = paths[:, 1:].numpy()
    row, col = np.nonzero(nodes >= 0)
    return leaves.numpy(), row, nodes[row, col]


def _mean_over_rows(pair_row: np.ndarray, pair_node: np.ndarray, per_row: np.ndarray,
                    num_nodes: int) -> np.ndarray:
    total = np.bincount(pair_node, weights=per_row[pair_row], minlength=num_nodes)
    count = np.bincount(pair_node, minlength=num_nodes)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def anchor_states(trees: Sequence[TreeArrays]) -> np.ndarray:
    """(N,) anchor-state id of every node of the trees (Forest order): the set of passages the
    path retrieved before the node (``retrieved`` records), else the set of queries searched
    before it (module docstring). Trees are one prompt's, so the prompt is not part of it."""
    keys: list[frozenset] = []
    for t in trees:
        seen: list[frozenset] = [frozenset()] * t.num_nodes
        depth_order = np.argsort(node_depths(t.parent).numpy(), kind="stable")
        for n in depth_order[1:]:  # parents come first: one pass in depth order
            p = int(t.parent[n])
            record = t.records[p] if len(t.records) else {}
            found = record.get("retrieved") or ([record["query"]] if record.get("action") == "search"
                                                and record.get("query") else [])
            seen[n] = seen[p] | frozenset(str(v) for v in found) if p > 0 else frozenset()
        keys += seen
    index: dict[frozenset, int] = {}
    return np.array([index.setdefault(k, len(index)) for k in keys], dtype=np.int64)


def credit_table(trees: Sequence[TreeArrays] | TreeArrays, index: int = 0) -> "pd.DataFrame":
    """One row per node of ``trees[index]`` (``trees``: every tree of one prompt): ``entropy``,
    ``V:<value mode>`` for the 4 value modes, ``<value mode>/<advantage mode>`` for the 16 AT2PO
    advantages, and ``grpo``, ``tree_grpo``, ``gigpo`` (module docstring). ``attrs["notes"]``
    says why a baseline column is NaN, if one is."""
    import pandas as pd
    import torch

    trees = [trees] if isinstance(trees, TreeArrays) else list(trees)
    tree = trees[index]
    single = Forest.from_trees([tree], dtype=torch.float64)
    columns: dict[str, np.ndarray] = {"entropy": tree.entropy.astype(float)}
    for vm in VALUE_MODES:
        columns[f"V:{vm}"] = forest_node_values(single, vm).numpy()
    for vm in VALUE_MODES:
        values = torch.as_tensor(columns[f"V:{vm}"])
        for am in ADVANTAGE_MODES:
            columns[f"{vm}/{am}"] = forest_node_advantages(single, values, am).numpy()

    forest = Forest.from_trees(trees, dtype=torch.float64)
    start = int(forest.offsets[index])
    own = slice(start, start + tree.num_nodes)
    leaf, pair_row, pair_node = _rows(forest)
    reward = forest.leaf_reward.numpy()[leaf]
    notes: list[str] = []
    if np.isnan(reward).any():
        notes.append("rows ending in an unscored leaf are left out of the baselines")
        keep = ~np.isnan(reward)
        leaf, reward = leaf[keep], reward[keep]
        renumber = np.cumsum(keep) - 1
        pairs = keep[pair_row]
        pair_row, pair_node = renumber[pair_row[pairs]], pair_node[pairs]
    prompt = torch.zeros(len(leaf), dtype=torch.long)
    grpo = grpo_advantages(torch.as_tensor(reward), prompt).numpy()
    columns["grpo"] = _mean_over_rows(pair_row, pair_node, grpo, forest.num_nodes)[own]
    try:
        tree_ids = forest.tree_index.numpy()[leaf]
        tg = tree_grpo_advantages(torch.as_tensor(reward), torch.as_tensor(tree_ids), prompt).numpy()
        columns["tree_grpo"] = _mean_over_rows(pair_row, pair_node, tg, forest.num_nodes)[own]
        if len(trees) == 1:
            notes.append("tree_grpo on one tree: both of its terms are GRPO over the same "
                         "leaves (Tree-GRPO grows several trees per prompt: expansion 'random')")
    except ValueError as err:
        columns["tree_grpo"] = np.full(tree.num_nodes, np.nan)
        notes.append(f"tree_grpo: {err}")
    columns["gigpo"], note = _gigpo(forest, trees, leaf, pair_row, pair_node, own)
    if note:
        notes.append(note)
    frame = pd.DataFrame(columns)
    frame.index.name = "node"
    frame.attrs["notes"] = notes
    return frame


def _gigpo(forest: Any, trees: Sequence[TreeArrays], leaf: np.ndarray, pair_row: np.ndarray,
           pair_node: np.ndarray, own: slice) -> tuple[np.ndarray, str]:
    depth = node_depths(forest.parent).numpy()
    labels = SimpleNamespace(forest=forest, prompt=np.zeros(forest.num_nodes, dtype=np.int64),
                             state=anchor_states(trees))
    rows = SimpleNamespace(leaf=leaf, pair_row=pair_row, pair_node=pair_node,
                           turns_after=depth[leaf][pair_row] - depth[pair_node])
    per_pair = gigpo_row_advantages(labels, rows)
    total = np.bincount(pair_node, weights=per_pair, minlength=forest.num_nodes)
    count = np.bincount(pair_node, minlength=forest.num_nodes)
    effective = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    passages = any(r.get("retrieved") for t in trees for r in t.records)
    note = "" if passages else ("gigpo: anchor states from the queries searched before each "
                                "turn (these trees carry no retrieved passage ids)")
    return effective[own], note


def node_credit_grid(table: "pd.DataFrame", node: int) -> "pd.DataFrame":
    """One node's AT2PO advantages as a grid (rows: value modes, columns: advantage modes),
    with the node value V_n as the first column."""
    import pandas as pd

    row = table.loc[node]
    return pd.DataFrame({"V_n": [row[f"V:{vm}"] for vm in VALUE_MODES],
                         **{am: [row[f"{vm}/{am}"] for vm in VALUE_MODES]
                            for am in ADVANTAGE_MODES}},
                        index=pd.Index(VALUE_MODES, name="value mode"))


def most_disputed_node(table: "pd.DataFrame") -> tuple[int, str]:
    """(node, sentence): the non-root node the credit rules disagree on most: the most rules on
    the minority side of the sign (some push the turn up, others down), then the widest spread
    (max − min) of its advantages; node 1 when every rule agrees on every turn."""
    adv = table[[c for c in table.columns if "/" in c or c in BASELINES]].iloc[1:]
    eps = 1e-9
    minority = np.minimum((adv > eps).sum(axis=1), (adv < -eps).sum(axis=1)).to_numpy()
    spread = (adv.max(axis=1) - adv.min(axis=1)).fillna(0.0).to_numpy()
    if adv.empty or (spread.max() <= eps):
        first = int(table.index[1]) if len(table) > 1 else 0
        return first, f"node {first}: every credit rule gives every turn the same advantage here"
    best = int(np.lexsort((-spread, -minority))[0])
    node = int(adv.index[best])
    if minority[best] > 0:
        return node, (f"node {node}: the turn the credit rules disagree on most ({minority[best]} "
                      f"of {adv.shape[1]} rules on the minority side of the sign; spread "
                      f"{spread[best]:.3f})")
    return node, (f"node {node}: every rule agrees on the sign of every turn; this one's "
                  f"advantages spread most (max − min = {spread[best]:.3f})")


# --------------------------------------------------------------------------------------------
# One node, in words and tables
# --------------------------------------------------------------------------------------------
def describe_node(tree: TreeArrays, table: "pd.DataFrame", ratios: "pd.DataFrame",
                  node: int) -> str:
    """A few lines on one node: its action and full text, entropy, reward, default advantage,
    turn ratio and whether the turn-level clip binds."""
    side = node_text_table(tree).loc[node]
    lo, hi = ratios.attrs["window"]
    lines = [f"node {node} (parent {int(side['parent'])}, depth {int(side['depth'])}, "
             f"round {int(side['round'])}): {side['action']}"]
    if side["query_or_answer"]:
        lines.append(f"  query/answer: {side['query_or_answer']}")
    if side["turn_text"]:
        lines.append(f"  text: {side['turn_text'][:400]}")
    lines.append(f"  entropy H = {tree.entropy[node]:.4f}"
                 + (f", reward r = {tree.leaf_reward[node]:g}" if np.isfinite(tree.leaf_reward[node]) else ""))
    adv = table.loc[node, "/".join(DEFAULT_MODE)]
    if node == 0:
        lines.append("  the root holds only the prompt: no tokens, no ratio")
    else:
        r = ratios.loc[node]
        binds = "binds (no gradient from this turn)" if r["turn_clipped"] else "does not bind"
        lines.append(f"  AT2PO default advantage ({'/'.join(DEFAULT_MODE)}) {adv:+.4f}; "
                     f"turn ratio after one simulated update {r['turn_ratio']:.5f} over "
                     f"{int(r['tokens'])} tokens; clip window [{lo:.4f}, {hi:.4f}]: the turn-level "
                     f"clip {binds}; a token-level clip would bind on "
                     f"{100 * r['token_clip_share']:.0f}% of its tokens")
    return "\n".join(lines)


def baseline_frame(table: "pd.DataFrame", node: int) -> "pd.DataFrame":
    import pandas as pd

    return pd.DataFrame({"advantage": [table.loc[node, b] for b in BASELINES]},
                        index=pd.Index(BASELINES, name="baseline"))


def signal_note(tree: TreeArrays) -> str:
    """A sentence when the tree carries no learning signal (every scored leaf has one reward,
    so every normalised value and every AT2PO advantage is 0), else ''."""
    scored = tree.leaf_reward[np.isfinite(tree.leaf_reward)]
    if scored.size == 0:
        return "no signal here: no leaf of this tree is scored"
    if np.all(scored == scored[0]):
        return (f"no signal here: all {scored.size} leaves have reward {scored[0]:g}, so every "
                "value and every AT2PO advantage of this tree is 0 (GRPO too, if the prompt's "
                "other trees agree)")
    return ""


def questions_table(trees: Sequence[TreeArrays]) -> "pd.DataFrame":
    """One row per prompt of ``trees``: its question, gold answer, how many trees and leaves it
    has, and its leaves' mean reward (the inspector lists what it shows)."""
    import pandas as pd

    rows: dict[int, dict] = {}
    for i, t in enumerate(trees):
        scored = t.leaf_reward[np.isfinite(t.leaf_reward)]
        row = rows.setdefault(t.prompt_id, {
            "prompt": t.prompt_id, "question": t.info.get("question", ""),
            "gold": (list(t.info.get("golden_answers") or [""]) or [""])[0],
            "trees": [], "leaves": 0, "_sum": 0.0})
        row["trees"].append(i)
        row["leaves"] += int(scored.size)
        row["_sum"] += float(scored.sum())
    frame = pd.DataFrame([{**{k: v for k, v in r.items() if k != "_sum"},
                           "mean_reward": r["_sum"] / max(r["leaves"], 1)} for r in rows.values()])
    return frame.set_index("prompt") if len(frame) else frame


def plot_node_credit(table: "pd.DataFrame", node: int, ax: Any = None,
                     note: str = "") -> tuple[Any, Any]:
    """Horizontal bars: the node's advantage under every credit rule (16 AT2PO + baselines);
    ``note`` (e.g. :func:`signal_note`) is written in the plot. Without ``ax`` the figure is
    detached from pyplot (:func:`~at2po_lib.reporting.tree_drawings.new_figure`): the widget's
    callbacks build it on a kernel side thread."""
    names = [c for c in table.columns if "/" in c] + list(BASELINES)
    vals = np.array([table.loc[node, c] for c in names], dtype=float)
    if ax is None:
        fig, ax = new_figure((7.5, 0.24 * len(names) + 1.4), detached=True)
    else:
        fig = ax.figure
    colours = ["C0" if "/" in n else "C3" for n in names]
    ax.barh(range(len(names)), np.nan_to_num(vals), color=colours)
    for i, v in enumerate(vals):
        if not np.isfinite(v):
            ax.text(0, i, " n/a", va="center", fontsize=8, color="0.4")
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    ax.invert_yaxis()
    ax.axvline(0, color="0.3", lw=0.8)
    if not np.nan_to_num(vals).any():
        ax.set_xlim(-1, 1)
    ax.set_xlabel("advantage of the turn (baselines: mean over the rows through it)", fontsize=9)
    ax.set_title(f"Advantage of node {node} under every credit rule\n(blue: AT2PO value/advantage "
                 "mode, red: baselines)", fontsize=10)
    if note:
        ax.text(0.5, 0.5, "\n".join(textwrap.wrap(note, 60)), transform=ax.transAxes,
                ha="center", va="center", fontsize=9,
                bbox=dict(boxstyle="round", facecolor="#fff3cd", edgecolor="#c9a227"))
    fig.tight_layout()
    return fig, ax


def tree_view(tree: TreeArrays, upto_round: int | None = None, node: int | None = None,
              title: str | None = None, highlight: Mapping[int, str] | None = None) -> Any:
    """The inspector's tree figure: the tree after ``upto_round`` with ``node`` ringed as the
    chosen node (or the rings of ``highlight``) and a no-signal line in the title. The widget and
    the offline drawing both call this, so their images can be compared byte for byte. The
    figure is detached from pyplot (safe on a widget callback's side thread)."""
    marks = dict(highlight or {})
    if node is not None and node not in marks:
        marks[int(node)] = CHOSEN_ROLE
    heading = title if title is not None else str(tree.info.get("question", ""))
    gold = (list(tree.info.get("golden_answers") or []) or [None])[0]
    if gold is not None:  # on the question's line, before any round label
        first, _, rest = heading.partition("\n")
        heading = f"{first}  (gold: {gold})" + (f"\n{rest}" if rest else "")
    note = signal_note(tree)
    if note:
        heading = f"{heading}\n{note.split(':')[0]}: all leaves share one reward"
    fig, _ = draw_rollout_tree(tree, upto_round=upto_round, title=heading, highlight=marks,
                               detached=True)
    return fig


def render_png(fig: Any) -> bytes:
    """``fig`` as PNG bytes, then closed: one image per view, nothing left on pyplot's stack
    (a figure left open is what the inline backend redraws over a later view). The inspector's
    own figures are detached (never on the stack): rasterising them touches no global state."""
    import io

    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=fig.dpi, bbox_inches="tight")
    finally:
        close_figure(fig)
    return buffer.getvalue()


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) in pixels of PNG bytes, from the IHDR chunk."""
    if len(png) < 24 or png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not PNG bytes")
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def draw_growth(tree: TreeArrays, title: str | None = None,
                highlight: Mapping[int, str] | None = None) -> list[Any]:
    """One figure per round, 0 (the initial chains) to the last expansion round, later nodes
    faint, the layout of the final tree throughout."""
    rounds = tree.node_arrays.get("expansion_round")
    last = int(np.max(rounds)) if rounds is not None and len(rounds) else 0
    out = []
    for r in range(last + 1):
        grown = int(grown_by_round(tree, r).sum())
        label = f"after round {r}: {grown} of {tree.num_nodes} nodes"
        head = f"{title}\n{label}" if title else label
        out.append(tree_view(tree, upto_round=r, title=head, highlight=highlight))
    return out


# --------------------------------------------------------------------------------------------
# Static fallback
# --------------------------------------------------------------------------------------------
@dataclass
class Inspection:
    """What :func:`static_inspection` showed: the tree, its node, the tables and figures."""

    tree: TreeArrays
    node: int
    why_tree: str
    why_node: str
    credit: "pd.DataFrame"
    ratios: "pd.DataFrame"
    figures: list[Any]
    questions: "pd.DataFrame | None" = None


def default_choice(trees: Sequence[TreeArrays]) -> tuple[int, int | None, str, dict[int, str]]:
    """(tree index, node or None, sentence, highlight): the running example
    (:func:`at2po_lib.analysis.running_example.choose_running_example`) when one qualifies,
    else the tree by :func:`choose_example_tree` and no node."""
    example = choose_running_example(trees)
    if example.found:
        return (example.tree_index, example.node, f"the running example: {example.why}",
                example.highlight())
    index, why = choose_example_tree(trees)
    return index, None, f"{why} (no running example: {example.why})", {}


def static_inspection(trees: Sequence[TreeArrays], node: int | None = None,
                      eps_low: float = EPS_LOW, eps_high: float = EPS_HIGH, seed: int = 0,
                      show: bool = True) -> Inspection:
    """The inspector's views as static figures and tables for the default choices: the running
    example's tree and turn (:func:`default_choice`; else the tree by
    :func:`~at2po_lib.reporting.tree_drawings.choose_example_tree` and
    :func:`most_disputed_node`), each round of its growth, and its node's credit. ``show``:
    display them (in a notebook) as they are made."""
    index, example_node, why_tree, highlight = default_choice(trees)
    tree = trees[index]
    same_prompt = [i for i, t in enumerate(trees) if t.prompt_id == tree.prompt_id]
    table = credit_table([trees[i] for i in same_prompt], same_prompt.index(index))
    if node is not None:
        why_node = f"node {node}: chosen by the caller"
    elif example_node is not None:
        node, why_node = example_node, f"node {example_node}: the running example's picked turn"
    else:
        node, why_node = most_disputed_node(table)
    ratios = simulated_turn_ratios(tree, table["/".join(DEFAULT_MODE)].to_numpy(),
                                   eps_low=eps_low, eps_high=eps_high, seed=seed)
    marks = highlight or {node: "chosen node"}
    figures = draw_growth(tree, title=str(tree.info.get("question", "")), highlight=marks)
    figures.append(plot_node_credit(table, node, note=signal_note(tree))[0])
    inspection = Inspection(tree, node, why_tree, why_node, table, ratios, figures,
                            questions_table(trees))
    if show:
        _show_static(inspection)
    return inspection


def _show_static(ins: Inspection) -> None:
    import matplotlib.pyplot as plt

    display = _display()
    print(f"tree: {ins.why_tree}\nnode: {ins.why_node}")
    if ins.questions is not None and len(ins.questions) > 1:
        print("the questions of these trees (prompt = the trees' prompt id):")
        display(ins.questions)
    note = signal_note(ins.tree)
    if note:
        print(note)
    for fig in ins.figures[:-1]:
        display(fig)
        plt.close(fig)
    print(describe_node(ins.tree, ins.credit, ins.ratios, ins.node))
    display(node_credit_grid(ins.credit, ins.node).round(4))
    display(baseline_frame(ins.credit, ins.node).round(4))
    for n in ins.credit.attrs.get("notes", []):
        print(f"note: {n}")
    display(ins.figures[-1])
    plt.close(ins.figures[-1])


def _display() -> Any:
    try:
        from IPython.display import display
    except ImportError:  # pragma: no cover - IPython ships with the notebooks' environment
        return print
    return display


# --------------------------------------------------------------------------------------------
# Live rollouts and the widget
# --------------------------------------------------------------------------------------------
def widget_frontend() -> bool:
    """Is there a frontend that renders ipywidgets? True in a kernel started by a Jupyter
    server (JupyterLab, Notebook: ``JPY_SESSION_NAME``) or VS Code, with ipywidgets installed;
    False under papermill / nbconvert (their kernels get neither), in a console, or without
    ipywidgets."""
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or not hasattr(shell, "kernel"):
        return False
    return bool(os.environ.get("JPY_SESSION_NAME") or os.environ.get("VSCODE_PID"))


class LiveRollout:
    """The profile's warm-start policy, retriever and training questions, loaded once, to grow
    trees on demand (:meth:`grow`). Raises if the warm start is not built yet."""

    def __init__(self, profile: str, overrides: dict | None = None):
        self.cfg = load_profile(profile, overrides or None)
        policy = cached_warmstart(self.cfg)
        if policy is None:
            raise FileNotFoundError(f"no warm start for profile {profile!r}: run notebook 02 or "
                                    f"`at2po warmstart --profile {profile}` first")
        self.policy = policy
        self.model, self.tokenizer = load_policy(policy)
        self.template = get_template(self.cfg.policy.template)
        self.retriever = build_retriever(self.cfg)
        self.dataset = self.cfg.train.train_datasets[0]
        self.rows = [{**r, "dataset": self.dataset}
                     for r in read_rows(ensure_world(self.cfg), self.dataset, "train")]
        self.questions = [r["question"] for r in self.rows]
        self.golden = [list(r["golden_answers"]) for r in self.rows]

    def grow(self, question: int, expansion: str, m: int, l: int, k: int, alpha: float,
             seed: int = 0) -> list[TreeArrays]:
        """The trees of one question (``random``: ``rollout.tree_grpo_trees`` of them) grown
        with M, L, K, α; ``chain`` and ``aepo`` get M + L·K leaves. Trees carry the question's
        plan (decision labels) and search nodes their passages (``retrieved``)."""
        if expansion not in EXPANSIONS:
            raise ValueError(f"expansion {expansion!r}; choose one of {EXPANSIONS}")
        cfg = replace(self.cfg.rollout, tree_m=int(m), tree_l=int(l), tree_k=int(k),
                      tree_alpha=float(alpha))
        leaves = cfg.leaves_per_prompt("entropy")
        grown = rollout(self.model, self.tokenizer, self.template, self.retriever,
                        [self.questions[question]], [self.golden[question]], cfg,
                        expansion=expansion, num_leaves=leaves if expansion in ("chain", "aepo")
                        else None, seed=seed, prompt_ids=[question])
        trees = with_plans([tree_arrays(t, cfg.entropy_estimate) for t in grown],
                           {question: self.rows[question]})
        return with_retrievals(trees, self.retriever, self.cfg.retrieval.topk)


QUESTION_PLACEHOLDER = "(Grow: the training questions load with the first Grow)"
"""The question list before the first Grow (the trees already shown are listed below it)."""
QUESTIONS_LISTED = 200
"""Training questions offered by the inspector's question list (the first ones of the split)."""


def _natural_layout(w: Any) -> Any:
    """An image layout that keeps a PNG at its natural size: not stretched by the box around it
    (``align_self``), scaled down in proportion only when wider than the column."""
    return w.Layout(max_width="100%", height="auto", align_self="flex-start",
                    object_fit="contain")


def _show_png(image: Any, png: bytes) -> None:
    """Put ``png`` into an ``Image`` widget at its natural pixel width (see
    :func:`_natural_layout`)."""
    width, _ = png_size(png)
    image.layout.width = f"{width}px"
    image.value = png


class TreeInspector:
    """The ipywidgets inspector (module docstring). ``trees``: trees to start from (e.g.
    notebook 02's file; the running example is shown first); ``live``: a :class:`LiveRollout`
    for the Grow button (made on first use from ``profile`` when None).

    Every view is one PNG in an ``Image`` widget, rendered from a fresh figure detached from
    pyplot (:func:`render_png`; callbacks run on a kernel side thread, where pyplot's shared
    state could mix two figures): a redraw replaces the image's bytes, so two layouts can never
    overlay and no figure of an earlier view can reappear. Each image is shown at its natural
    pixel size (scaled down only to fit the column, never up or out of proportion). Updates that
    change several widgets draw once, at the end (``_quiet``); while one runs, ``busy`` says
    so and the controls are disabled, and afterwards ``status`` names what is shown (tree,
    prompt, question, round, node)."""

    def __init__(self, profile: str, trees: Sequence[TreeArrays] = (), live: LiveRollout | None = None,
                 eps_low: float = EPS_LOW, eps_high: float = EPS_HIGH, seed: int = 0):
        import ipywidgets as w

        self.profile, self.live, self.seed = profile, live, seed
        self.eps = (eps_low, eps_high)

        r = load_profile(profile).rollout
        style = {"description_width": "initial"}
        self.question = w.Dropdown(options=[(QUESTION_PLACEHOLDER, 0)],
                                   value=0, description="question", style=style,
                                   layout=w.Layout(width="640px"))
        self.expansion = w.ToggleButtons(options=EXPANSIONS, value="entropy", description="expansion")
        self.m = w.IntSlider(value=r.tree_m, min=1, max=8, description="M")
        self.l = w.IntSlider(value=r.tree_l, min=0, max=4, description="L")
        self.k = w.IntSlider(value=r.tree_k, min=1, max=8, description="K")
        self.alpha = w.FloatLogSlider(value=max(r.tree_alpha, 1e-4), base=10, min=-4, max=0,
                                      description="α", readout_format=".4f")
        self.grow_button = w.Button(description="Grow", button_style="primary")
        self.tree_pick = w.Dropdown(options=[("tree 0", 0)], value=0, description="tree")
        self.round = w.IntSlider(value=0, min=0, max=0, description="round")
        self.node = w.Dropdown(options=[0], description="node")
        self.status = w.HTML()
        self.busy = w.HTML()
        self.listing = w.HTML()
        self.signal = w.HTML()
        self.tree_image = w.Image(format="png", layout=_natural_layout(w))
        self.credit_image = w.Image(format="png", layout=_natural_layout(w))
        self.origin = ""
        """How the shown trees came (the running example's sentence, or the last Grow)."""
        self.node_out = w.Output()
        self.trees: list[TreeArrays] = list(trees)
        self.index = 0
        self.highlight: dict[int, str] = {}
        self.table = self.ratios = None
        self.draws = 0
        """Tree images rendered so far (tests count redraws)."""
        self._quiet = False
        self.grow_button.on_click(lambda _: self._grow())
        self.tree_pick.observe(lambda _: self._on_tree(), names="value")
        self.round.observe(lambda _: self._on_view(), names="value")
        self.node.observe(lambda _: self._on_node(), names="value")
        self.widget = w.VBox([
            self.question, self.expansion, w.HBox([self.m, self.l, self.k]),
            w.HBox([self.alpha, self.grow_button]), self.status, self.busy, self.listing,
            w.HBox([self.tree_pick, self.round, self.node]), self.signal, self.tree_image,
            self.node_out, self.credit_image])
        if self.trees:
            index, node, why, self.highlight = default_choice(self.trees)
            self.origin = why
            self._set_trees(index, node)

    @property
    def controls(self) -> list[Any]:
        return [self.question, self.expansion, self.m, self.l, self.k, self.alpha,
                self.grow_button, self.tree_pick, self.round, self.node]

    @contextmanager
    def _busy(self, what: str):
        """Say ``what`` is being updated and disable the controls until it is done: the images
        and the node panel change together, never one of them stale without a sign."""
        self.busy.value = f"<b style='color:#b35900'>⏳ {html.escape(what)} …</b>"
        enabled = [c for c in self.controls if not c.disabled]
        for c in enabled:
            c.disabled = True
        try:
            yield
        finally:
            for c in enabled:
                c.disabled = False
            self.busy.value = ""

    def status_line(self) -> str:
        """What the views show now: the tree, its prompt and question, the round and the node,
        and how the trees came (running example or Grow)."""
        if not self.trees:
            return self.origin
        tree = self.trees[self.index]
        question = str(tree.info.get("question", ""))
        shown = (f"showing tree {self.index} of {len(self.trees)} (prompt {tree.prompt_id}"
                 + (f": <i>{html.escape(question)}</i>" if question else "") + f"), round "
                 f"{self.round.value}, node {self.node.value}")
        if self.highlight:
            shown += " — the running example"
        return f"{shown}<br><small>{html.escape(self.origin)}</small>" if self.origin else shown

    def _live(self) -> LiveRollout:
        if self.live is None:
            self.busy.value = "<b style='color:#b35900'>⏳ loading the warm-start policy …</b>"
            self.live = LiveRollout(self.profile)
        if len(self.question.options) == 1 and len(self.live.questions) > 1:
            shown = self.live.questions[:QUESTIONS_LISTED]
            self.question.options = [(f"{i}: {q}", i) for i, q in enumerate(shown)]
            self.question.value = 0
        return self.live

    def _grow(self) -> None:
        with self._busy("growing a tree with the warm-start policy"):
            try:
                live = self._live()
                trees = live.grow(self.question.value, self.expansion.value, self.m.value,
                                  self.l.value, self.k.value, self.alpha.value, self.seed)
            except Exception as err:  # shown in the widget: a failed rollout must not pass silently
                self.status.value = (f"<b>failed:</b> {html.escape(type(err).__name__)}: "
                                     f"{html.escape(str(err))}")
                return
            self.trees, self.highlight = trees, {}
            self.origin = (f"grown: {len(trees)} tree(s) of question {self.question.value} "
                           f"({self.expansion.value})")
            self._set_trees(0, None)

    def _set_trees(self, index: int, node: int | None) -> None:
        self._quiet = True
        try:
            self.tree_pick.options = [(f"tree {i} (prompt {t.prompt_id})", i)
                                      for i, t in enumerate(self.trees)]
            self.tree_pick.value = index
            self._load_tree(index, node)
        finally:
            self._quiet = False
        self._list_questions()
        self._redraw()

    def _load_tree(self, index: int, node: int | None) -> None:
        self.index = index
        tree = self.trees[index]
        same = [i for i, t in enumerate(self.trees) if t.prompt_id == tree.prompt_id]
        self.table = credit_table([self.trees[i] for i in same], same.index(index))
        self.ratios = simulated_turn_ratios(tree, self.table["/".join(DEFAULT_MODE)].to_numpy(),
                                            *self.eps, seed=self.seed)
        rounds = tree.node_arrays.get("expansion_round")
        last = int(np.max(rounds)) if rounds is not None and len(rounds) else 0
        self.round.max, self.round.value = last, last
        self.node.options = list(range(tree.num_nodes))
        self.node.value = node if node is not None else most_disputed_node(self.table)[0]

    def _list_questions(self) -> None:

        table = questions_table(self.trees)
        items = "".join(f"<li>prompt {p}: <i>{html.escape(str(r['question']))}</i> (gold: "
                        f"{html.escape(str(r['gold']))}; trees {r['trees']}, mean reward "
                        f"{r['mean_reward']:.2f})</li>" for p, r in table.iterrows())
        self.listing.value = f"<b>questions shown:</b><ul style='margin:0'>{items}</ul>"

    def _on_tree(self) -> None:
        if self._quiet:
            return
        with self._busy(f"drawing tree {self.tree_pick.value}"):
            self._quiet = True
            try:
                if self.highlight:  # the running example's rings and sentence stay with its tree
                    self.highlight, self.origin = {}, ""
                self._load_tree(int(self.tree_pick.value), None)
            finally:
                self._quiet = False
            self._redraw()

    def _on_view(self) -> None:
        if not self._quiet:
            with self._busy(f"drawing round {self.round.value}"):
                self._draw_tree()
                self.status.value = self.status_line()

    def _on_node(self) -> None:
        if not self._quiet:
            with self._busy(f"drawing node {self.node.value}"):
                self._redraw()

    def _redraw(self) -> None:
        self._draw_tree()
        self._show_node()
        self.status.value = self.status_line()

    def view_png(self) -> bytes:
        """The tree view the widget shows now, rendered offline (what the image must hold)."""
        tree = self.trees[self.index]
        return render_png(tree_view(tree, upto_round=self.round.value, node=int(self.node.value),
                                    highlight=self.highlight))

    def chart_png(self) -> bytes:
        """The credit chart the widget shows now, rendered offline (what its image must hold)."""
        return render_png(plot_node_credit(self.table, int(self.node.value),
                                           note=signal_note(self.trees[self.index]))[0])

    def _draw_tree(self) -> None:
        note = signal_note(self.trees[self.index])
        self.signal.value = f"<b style='color:#8a6d00'>{note}</b>" if note else ""
        _show_png(self.tree_image, self.view_png())
        self.draws += 1

    def _show_node(self) -> None:
        if self.table is None:
            return
        node, tree, display = int(self.node.value), self.trees[self.index], _display()
        self.node_out.clear_output(wait=True)
        with self.node_out:
            print(describe_node(tree, self.table, self.ratios, node))
            display(node_credit_grid(self.table, node).round(4))
            display(baseline_frame(self.table, node).round(4))
            for n in self.table.attrs.get("notes", []):
                print(f"note: {n}")
        _show_png(self.credit_image, self.chart_png())


def inspect(profile: str, trees: Sequence[TreeArrays] = (), mode: str = "auto",
            eps_low: float = EPS_LOW, eps_high: float = EPS_HIGH, seed: int = 0) -> Any:
    """Show the inspector: ``mode="widgets"`` (JupyterLab), ``"static"`` (figures and tables
    for the default choices, :func:`static_inspection`), or ``"auto"`` (widgets when
    :func:`widget_frontend`, else static). Returns the :class:`TreeInspector` or the
    :class:`Inspection`. Static mode needs ``trees``; widgets can start empty and grow."""
    if mode not in ("auto", "widgets", "static"):
        raise ValueError(f"inspector mode {mode!r}; choose auto, widgets or static")
    if mode == "widgets" or (mode == "auto" and widget_frontend()):
        inspector = TreeInspector(profile, trees, eps_low=eps_low, eps_high=eps_high, seed=seed)
        _display()(inspector.widget)
        return inspector
    if not trees:
        raise ValueError("the static inspector needs trees (e.g. notebook 02's trees file)")
    return static_inspection(list(trees), eps_low=eps_low, eps_high=eps_high, seed=seed)
