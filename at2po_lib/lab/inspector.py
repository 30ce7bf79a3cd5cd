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

The credit of every node under every rule is :mod:`at2po_lib.reporting.node_credit`; the figures,
tables and sentences about one node are :mod:`at2po_lib.reporting.node_views`.

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
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Sequence

import matplotlib.pyplot as plt
import numpy as np

from ..analysis.policy_change import simulated_turn_ratios
from ..analysis.running_example import choose_running_example
from ..analysis.study_trees import with_plans, with_retrievals
from ..config.profile import load_profile
from ..config.choices import EXPANSIONS
from ..method.loss import EPS_HIGH, EPS_LOW
from ..method.tree import TreeArrays
from ..policy.model import load_policy
from ..warmstart.cache import cached_warmstart
from ..protocol.prompts import get_template
from ..retrieval.indexes import build_retriever
from ..rollout.export import tree_arrays
from ..rollout.agent import Sampler, SearchEnv
from ..rollout.trees import rollout, tree_grpo_shape
from ..tinyworld.build import ensure_world, read_rows
from ..reporting.node_credit import DEFAULT_MODE, credit_table, most_disputed_node, node_credit_grid
from ..reporting.node_views import (
    baseline_frame,
    describe_node,
    draw_growth,
    plot_node_credit,
    png_size,
    questions_table,
    render_png,
    signal_note,
    tree_view,
)
from ..reporting.output import prose
from ..reporting.tree_drawings import choose_example_tree, show_figure

# Imported inside the functions that use them: IPython, ipywidgets; notebook-only packages, there
# only inside Jupyter.

if TYPE_CHECKING:
    import pandas as pd


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
        return (
            example.tree_index,
            example.node,
            f"the running example: {example.why}",
            example.highlight(),
        )
    index, why = choose_example_tree(trees)
    return index, None, f"{why} (no running example: {example.why})", {}


def static_inspection(
    trees: Sequence[TreeArrays],
    node: int | None = None,
    eps_low: float = EPS_LOW,
    eps_high: float = EPS_HIGH,
    seed: int = 0,
    show: bool = True,
) -> Inspection:
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
    ratios = simulated_turn_ratios(
        tree,
        table["/".join(DEFAULT_MODE)].to_numpy(),
        eps_low=eps_low,
        eps_high=eps_high,
        seed=seed,
    )
    marks = highlight or {node: "chosen node"}
    figures = draw_growth(tree, title=str(tree.info.get("question", "")), highlight=marks)
    figures.append(plot_node_credit(table, node, note=signal_note(tree))[0])
    inspection = Inspection(
        tree, node, why_tree, why_node, table, ratios, figures, questions_table(trees)
    )
    if show:
        _show_static(inspection)
    return inspection


def _show_static(ins: Inspection) -> None:
    display = _display()
    print(prose(f"tree: {ins.why_tree}\nnode: {ins.why_node}"))  # wrapped: never one long line
    if ins.questions is not None and len(ins.questions) > 1:
        print("the questions of these trees (prompt = the trees' prompt id):")
        display(ins.questions)
    note = signal_note(ins.tree)
    if note:
        print(prose(note))
    for fig in ins.figures[:-1]:  # the tree round by round: a wide one scrolls at its own size
        show_figure(fig)
    print(prose(describe_node(ins.tree, ins.credit, ins.ratios, ins.node)))
    display(node_credit_grid(ins.credit, ins.node).round(4))
    display(baseline_frame(ins.credit, ins.node).round(4))
    for n in ins.credit.attrs.get("notes", []):
        print(prose(f"note: {n}"))
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


def random_tree_count(rollout_cfg: Any) -> tuple[int | None, str]:
    """Trees per prompt for the ``random`` (Tree-GRPO) expansion at this M, L, K: the profile's
    ``rollout.tree_grpo_trees`` when its trees split M + L·K leaves into whole rounds
    (:func:`at2po_lib.rollout.trees.tree_grpo_shape`), else the count nearest to it that does,
    with a sentence saying so; None and the reason when no count does (the inspector's Grow
    then says why instead of failing)."""
    budget = rollout_cfg.leaves_per_prompt("random")
    wanted = rollout_cfg.tree_grpo_trees

    def splits(m: int) -> bool:
        try:
            tree_grpo_shape(replace(rollout_cfg, tree_grpo_trees=m))
        except ValueError:
            return False
        return True

    if splits(wanted):
        return wanted, ""
    valid = sorted(
        (m for m in range(1, budget + 1) if splits(m)), key=lambda m: (abs(m - wanted), m)
    )
    shape = (
        f"M + L·K = {rollout_cfg.tree_m} + {rollout_cfg.tree_l}·{rollout_cfg.tree_k} = "
        f"{budget} leaves"
    )
    if not valid:
        return None, (
            f"random (Tree-GRPO) cannot grow {shape}: no number of trees splits them "
            f"into trees of 1 + L·n leaves (L = {rollout_cfg.tree_l}); change M, L or K"
        )
    m = valid[0]
    return m, (
        f"random (Tree-GRPO): {m} tree{'s' * (m != 1)} of {budget // m} leaves, since "
        f"{shape} do not split into the profile's {wanted} trees of 1 + L·n leaves at "
        f"L = {rollout_cfg.tree_l}"
    )


class LiveRollout:
    """The profile's warm-start policy, retriever and training questions, loaded once, to grow
    trees on demand (:meth:`grow`). Raises if the warm start is not built yet."""

    def __init__(self, profile: str, overrides: dict | None = None):
        self.cfg = load_profile(profile, overrides or None)
        policy = cached_warmstart(self.cfg)
        if policy is None:
            raise FileNotFoundError(
                f"no warm start for profile {profile!r}: run notebook 02 or "
                f"`at2po warmstart --profile {profile}` first"
            )
        self.policy = policy
        self.note = ""
        """What the last :meth:`grow` chose that the controls did not say (``random``: the
        number of trees)."""
        self.model, self.tokenizer = load_policy(policy)
        self.template = get_template(self.cfg.policy.template)
        self.retriever = build_retriever(self.cfg)
        self.dataset = self.cfg.train.train_datasets[0]
        self.rows = [
            {**r, "dataset": self.dataset}
            for r in read_rows(ensure_world(self.cfg), self.dataset, "train")
        ]
        self.questions = [r["question"] for r in self.rows]
        self.golden = [list(r["golden_answers"]) for r in self.rows]

    def grow(
        self, question: int, expansion: str, m: int, l: int, k: int, alpha: float, seed: int = 0
    ) -> list[TreeArrays]:
        """The trees of one question (``random``: :func:`random_tree_count` of them, ``note``
        says when that is not the profile's ``rollout.tree_grpo_trees``) grown with M, L, K, α;
        ``chain`` and ``aepo`` get M + L·K leaves. Trees carry the question's plan (decision
        labels) and search nodes their passages (``retrieved``)."""
        if expansion not in EXPANSIONS:
            raise ValueError(f"expansion {expansion!r}; choose one of {EXPANSIONS}")
        cfg = replace(
            self.cfg.rollout, tree_m=int(m), tree_l=int(l), tree_k=int(k), tree_alpha=float(alpha)
        )
        self.note = ""
        if expansion == "random":
            trees_per_prompt, self.note = random_tree_count(cfg)
            if trees_per_prompt is None:
                raise ValueError(self.note)
            cfg = replace(cfg, tree_grpo_trees=trees_per_prompt)
        leaves = cfg.leaves_per_prompt("entropy")
        env = SearchEnv(self.tokenizer, self.template, self.retriever, cfg)
        grown = rollout(
            Sampler.from_model(self.model, env, seed),
            [self.questions[question]],
            [self.golden[question]],
            expansion=expansion,
            num_leaves=leaves if expansion in ("chain", "aepo") else None,
            prompt_ids=[question],
        )
        trees = with_plans(
            [tree_arrays(t, cfg.entropy_estimate) for t in grown], {question: self.rows[question]}
        )
        return with_retrievals(trees, self.retriever, self.cfg.retrieval.topk)


BUSY_MARK = "Busy:"
"""How the busy sign starts ("Busy: drawing node 5 …"): words, which every font renders (an
hourglass glyph showed as an empty box without an emoji font)."""


def busy_html(what: str) -> str:
    """The busy sign's HTML: :data:`BUSY_MARK` and what is being updated."""
    return (
        f"<b style='color:#8a4100;background:#fff1e0;padding:2px 6px;border-radius:3px'>"
        f"{BUSY_MARK} {html.escape(what)} …</b>"
    )


QUESTION_PLACEHOLDER = "(Grow: the training questions load with the first Grow)"
"""The question list before the first Grow (the trees already shown are listed below it)."""
QUESTIONS_LISTED = 200
"""Training questions offered by the inspector's question list (the first ones of the split)."""


def _natural_layout(w: Any) -> Any:
    """An image layout that keeps a PNG at its natural size: not stretched by the box around it
    (``align_self``), scaled down in proportion only when wider than the column."""
    return w.Layout(max_width="100%", height="auto", align_self="flex-start", object_fit="contain")


def _scrolling_layout(w: Any) -> Any:
    """An image layout that keeps a PNG at its natural size even when wider than the column, for
    a box that scrolls it (:func:`_scroller`): a grown tree of M = 1, L = 4, K = 8 is 2,914 px
    wide, and scaled to a 993 px column its labels could not be read."""
    return w.Layout(max_width="none", height="auto", align_self="flex-start", object_fit="contain")


def _scroller(w: Any, image: Any) -> Any:
    """``image`` in a box as wide as the column that scrolls sideways when the image is wider."""
    return w.Box([image], layout=w.Layout(width="100%", overflow="auto"))


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

    def __init__(
        self,
        profile: str,
        trees: Sequence[TreeArrays] = (),
        live: LiveRollout | None = None,
        eps_low: float = EPS_LOW,
        eps_high: float = EPS_HIGH,
        seed: int = 0,
    ):
        import ipywidgets as w

        self.profile, self.live, self.seed = profile, live, seed
        self.eps = (eps_low, eps_high)

        r = load_profile(profile).rollout
        style = {"description_width": "initial"}
        self.question = w.Dropdown(
            options=[(QUESTION_PLACEHOLDER, 0)],
            value=0,
            description="question",
            style=style,
            layout=w.Layout(width="640px"),
        )
        self.expansion = w.ToggleButtons(
            options=EXPANSIONS, value="entropy", description="expansion"
        )
        self.m = w.IntSlider(value=r.tree_m, min=1, max=8, description="M")
        self.l = w.IntSlider(value=r.tree_l, min=0, max=4, description="L")
        self.k = w.IntSlider(value=r.tree_k, min=1, max=8, description="K")
        # a slider over fixed values: a log slider's grid put the profile's 0.05 at 0.0501
        self.alpha = w.SelectionSlider(
            options=alpha_choices(r.tree_alpha), value=float(r.tree_alpha), description="α"
        )
        self.grow_button = w.Button(description="Grow", button_style="primary")
        self.tree_pick = w.Dropdown(options=[("tree 0", 0)], value=0, description="tree")
        self.round = w.IntSlider(value=0, min=0, max=0, description="round")
        self.node = w.Dropdown(options=[0], description="node")
        self.status = w.HTML()
        self.busy = w.HTML()
        """The busy sign beside the tree / round / node controls (a pick there redraws)."""
        self.grow_busy = w.HTML()
        """The busy sign beside Grow (loading the policy, growing a tree)."""
        self.listing = w.HTML()
        self.signal = w.HTML()
        self.tree_image = w.Image(format="png", layout=_scrolling_layout(w))
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
        for control in (self.expansion, self.m, self.l, self.k):
            control.observe(lambda _: self._check_growable(), names="value")
        self.tree_pick.observe(lambda _: self._on_tree(), names="value")
        self.round.observe(lambda _: self._on_view(), names="value")
        self.node.observe(lambda _: self._on_node(), names="value")
        self.widget = w.VBox(
            [
                self.question,
                self.expansion,
                w.HBox([self.m, self.l, self.k]),
                w.HBox([self.alpha, self.grow_button, self.grow_busy]),
                self.status,
                self.listing,
                w.HBox([self.tree_pick, self.round, self.node, self.busy]),
                self.signal,
                _scroller(w, self.tree_image),  # a wide tree scrolls at full size
                self.node_out,
                self.credit_image,
            ]
        )
        if self.trees:
            index, node, why, self.highlight = default_choice(self.trees)
            self.origin = why
            self._set_trees(index, node)

    @property
    def controls(self) -> list[Any]:
        return [
            self.question,
            self.expansion,
            self.m,
            self.l,
            self.k,
            self.alpha,
            self.grow_button,
            self.tree_pick,
            self.round,
            self.node,
        ]

    @contextmanager
    def _busy(self, what: str, sign: Any = None):
        """Say ``what`` is being updated, in words beside the control that changed (``sign``:
        :attr:`busy` beside the tree / round / node controls by default, :attr:`grow_busy`
        beside Grow), and disable the controls until it is done: the images and the node panel
        change together, never one of them stale without a sign."""
        sign = sign if sign is not None else self.busy
        sign.value = busy_html(what)
        enabled = [c for c in self.controls if not c.disabled]
        for c in enabled:
            c.disabled = True
        try:
            yield
        finally:
            for c in enabled:
                c.disabled = False
            sign.value = ""

    def _check_growable(self) -> None:
        """Beside Grow, what the ``random`` expansion will grow at this M, L, K when it is not
        the profile's number of trees, and why Grow is off when no number of trees can split
        M + L·K leaves (:func:`random_tree_count`)."""
        if self.expansion.value != "random":
            self.grow_busy.value, self.grow_button.disabled = "", False
            return
        r = replace(
            load_profile(self.profile).rollout,
            tree_m=self.m.value,
            tree_l=self.l.value,
            tree_k=self.k.value,
        )
        count, note = random_tree_count(r)
        self.grow_button.disabled = count is None
        self.grow_busy.value = f"<i>{html.escape(note)}</i>" if note else ""

    def status_line(self) -> str:
        """What the views show now: the tree, its prompt and question, the round and the node,
        and how the trees came (running example or Grow)."""
        if not self.trees:
            return self.origin
        tree = self.trees[self.index]
        question = str(tree.info.get("question", ""))
        shown = (
            f"showing tree {self.index} of {len(self.trees)} (prompt {tree.prompt_id}"
            + (f": <i>{html.escape(question)}</i>" if question else "")
            + f"), round "
            f"{self.round.value}, node {self.node.value}"
        )
        if self.highlight:
            shown += " — the running example"
        return f"{shown}<br><small>{html.escape(self.origin)}</small>" if self.origin else shown

    def _live(self) -> LiveRollout:
        if self.live is None:
            said = self.grow_busy.value  # "growing a tree", said again once the policy is loaded
            self.grow_busy.value = busy_html("loading the warm-start policy")
            self.live = LiveRollout(self.profile)
            self.grow_busy.value = said
        if len(self.question.options) == 1 and len(self.live.questions) > 1:
            shown = self.live.questions[:QUESTIONS_LISTED]
            self.question.options = [(f"{i}: {q}", i) for i, q in enumerate(shown)]
            self.question.value = 0
        return self.live

    def _grow(self) -> None:
        try:
            self._grow_trees()
        finally:  # the busy sign is gone: the line beside Grow says again what Grow will grow
            self._check_growable()

    def _grow_trees(self) -> None:
        with self._busy("growing a tree with the warm-start policy", self.grow_busy):
            try:
                live = self._live()
                trees = live.grow(
                    self.question.value,
                    self.expansion.value,
                    self.m.value,
                    self.l.value,
                    self.k.value,
                    self.alpha.value,
                    self.seed,
                )
            except Exception as err:  # shown in the widget: a failed rollout must not pass silently
                self.status.value = (
                    f"<b>failed:</b> {html.escape(type(err).__name__)}: {html.escape(str(err))}"
                )
                return
            self.trees, self.highlight = trees, {}
            self.origin = (  # α as the kernel read it from the slider (0.05, never 0.0501)
                f"grown: {len(trees)} tree(s) of question {self.question.value} "
                f"({self.expansion.value}, α = {float(self.alpha.value)!r})"
            )
            note = getattr(live, "note", "")  # a stand-in rollout (tests) may have none
            if note:
                self.origin += f"; {note}"
            self._set_trees(0, None)

    def _set_trees(self, index: int, node: int | None) -> None:
        self._quiet = True
        try:
            self.tree_pick.options = [
                (f"tree {i} (prompt {t.prompt_id})", i) for i, t in enumerate(self.trees)
            ]
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
        self.ratios = simulated_turn_ratios(
            tree, self.table["/".join(DEFAULT_MODE)].to_numpy(), *self.eps, seed=self.seed
        )
        rounds = tree.node_arrays.get("expansion_round")
        last = int(np.max(rounds)) if rounds is not None and len(rounds) else 0
        self.round.max, self.round.value = last, last
        self.node.options = list(range(tree.num_nodes))
        self.node.value = node if node is not None else most_disputed_node(self.table)[0]

    def _list_questions(self) -> None:

        table = questions_table(self.trees)
        items = "".join(
            f"<li>prompt {p}: <i>{html.escape(str(r['question']))}</i> (gold: "
            f"{html.escape(str(r['gold']))}; trees {r['trees']}, mean reward "
            f"{r['mean_reward']:.2f})</li>"
            for p, r in table.iterrows()
        )
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
        return render_png(
            tree_view(
                tree,
                upto_round=self.round.value,
                node=int(self.node.value),
                highlight=self.highlight,
            )
        )

    def chart_png(self) -> bytes:
        """The credit chart the widget shows now, rendered offline (what its image must hold)."""
        return render_png(
            plot_node_credit(
                self.table, int(self.node.value), note=signal_note(self.trees[self.index])
            )[0]
        )

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
            print(prose(describe_node(tree, self.table, self.ratios, node)))
            display(node_credit_grid(self.table, node).round(4))
            display(baseline_frame(self.table, node).round(4))
            for n in self.table.attrs.get("notes", []):
                print(prose(f"note: {n}"))
        _show_png(self.credit_image, self.chart_png())


REOPEN_HINT = (
    "The inspector runs in this notebook's kernel: in a notebook reopened since, "
    'JupyterLab shows "Error displaying widget: model not found" below instead; '
    "run the notebook from the top (Run ▸ Run All Cells) to start it again: this cell needs "
    "the variables of the cells before it."
)
"""Shown above the widget, so that a reopened notebook (whose saved output names a widget model
its new kernel never made) says what to do. Running the cell alone after a restart
raised ``NameError: name 'profile' is not defined``: the hint says Run All."""

ALPHA_CHOICES = (0.0, 0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
"""The α values the inspector's slider offers (the exact-entropy variant's 0.001 and the
authors' 0.05 among them)."""


def alpha_choices(profile_alpha: float) -> tuple[float, ...]:
    """:data:`ALPHA_CHOICES` with the profile's α among them, sorted, so the slider starts on
    that exact value."""
    return tuple(sorted({*ALPHA_CHOICES, float(profile_alpha)}))


def reopen_hint() -> Any:
    """:data:`REOPEN_HINT` as a small line of HTML (plain text without IPython)."""
    try:
        from IPython.display import HTML
    except ImportError:  # pragma: no cover - IPython ships with the notebooks' environment
        return REOPEN_HINT
    return HTML(f"<small><i>{html.escape(REOPEN_HINT)}</i></small>")


def inspect(
    profile: str,
    trees: Sequence[TreeArrays] = (),
    mode: str = "auto",
    eps_low: float = EPS_LOW,
    eps_high: float = EPS_HIGH,
    seed: int = 0,
) -> Any:
    """Show the inspector: ``mode="widgets"`` (JupyterLab), ``"static"`` (figures and tables
    for the default choices, :func:`static_inspection`), or ``"auto"`` (widgets when
    :func:`widget_frontend`, else static). Returns the :class:`TreeInspector` or the
    :class:`Inspection`. Static mode needs ``trees``; widgets can start empty and grow."""
    if mode not in ("auto", "widgets", "static"):
        raise ValueError(f"inspector mode {mode!r}; choose auto, widgets or static")
    if mode == "widgets" or (mode == "auto" and widget_frontend()):
        inspector = TreeInspector(profile, trees, eps_low=eps_low, eps_high=eps_high, seed=seed)
        _display()(reopen_hint())
        _display()(inspector.widget)
        return inspector
    if not trees:
        raise ValueError("the static inspector needs trees (e.g. notebook 02's trees file)")
    return static_inspection(list(trees), eps_low=eps_low, eps_high=eps_high, seed=seed)
