"""The label-size rule: every text of a notebook figure is at least MIN_DISPLAYED_TEXT_PX tall
as JupyterLab displays it (an image wider than the column is scaled down to it)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from at2po_lib.analysis.running_example import teaching_tree  # noqa: E402
from at2po_lib.method.examples import random_tree  # noqa: E402
from at2po_lib.method.tree import TreeArrays  # noqa: E402
from at2po_lib.reporting import node_credit, node_views  # noqa: E402
from at2po_lib.reporting.tree_drawings import (
    MIN_DISPLAYED_TEXT_PX,
    NOTEBOOK_COLUMN_PX,  # noqa: E402
    displayed_text_px,
    draw_rollout_tree,
    plot_expansion_comparison,
)


def with_text(tree: TreeArrays, rng: np.random.Generator) -> TreeArrays:
    """A random tree with query / answer records of realistic length (tiny's names)."""
    from dataclasses import replace

    words = [
        "founder",
        "of",
        "Neko",
        "Labs",
        "Ada",
        "Brisk",
        "birthplace",
        "Varno",
        "Dadar",
        "Bay",
        "university",
        "studied",
        "release",
        "year",
    ]
    records = [{"action": None, "text": "question"}]
    for n in range(1, tree.num_nodes):
        text = " ".join(rng.choice(words, size=rng.integers(2, 6)))
        if tree.is_leaf[n]:
            records.append({"action": "answer", "answer": text, "text": text})
        else:
            records.append({"action": "search", "query": text, "text": text})
    return replace(tree, records=records)


def test_the_rule_itself_scales_with_the_column():
    fig = plt.figure(figsize=(18, 3), dpi=100)
    fig.text(0.5, 0.5, "label", fontsize=10)
    # 1,800 px into a 900 px column: 10 pt = 13.9 px natively, half of it shown
    assert displayed_text_px(fig) == pytest.approx(10 / 72 * 100 * NOTEBOOK_COLUMN_PX / 1800)
    assert displayed_text_px(fig, column_px=2000) == pytest.approx(10 / 72 * 100)
    plt.close(fig)


@pytest.mark.parametrize("seed", range(6))
def test_tiny_sized_rollout_trees_stay_readable(seed):
    """Trees of the tiny profile's size (M=4 chains, L*K=4 re-samples: 8 leaves), with text."""
    rng = np.random.default_rng(seed)
    tree = with_text(random_tree(rng, num_chains=4, num_expansions=4, max_turns=4), rng)
    fig, _ = draw_rollout_tree(tree, title="a question of realistic length, with its gold")
    assert displayed_text_px(fig) >= MIN_DISPLAYED_TEXT_PX, fig.get_size_inches()
    plt.close(fig)


def test_hand_made_tree_inspector_views_and_comparison_are_readable():
    tree = teaching_tree()
    figures = [
        draw_rollout_tree(tree, highlight={2: "picked turn n", 10: "re-sample"})[0],
        node_views.tree_view(tree, node=2),
        node_views.plot_node_credit(node_credit.credit_table([tree]), 2)[0],
    ]
    per_prompt = pd.DataFrame(
        {
            "method": np.repeat(["chain", "random", "entropy", "aepo"], 8),
            "distinct_queries": np.arange(32) % 5,
            "distinct_answers": np.arange(32) % 3,
            "correct_leaf_share": (np.arange(32) % 4) / 4,
            "generated_tokens_per_leaf": 40 + np.arange(32),
        }
    )
    figures.append(plot_expansion_comparison(per_prompt)[0])
    for fig in figures:
        assert displayed_text_px(fig) >= MIN_DISPLAYED_TEXT_PX, fig.get_size_inches()
        plt.close(fig)


def test_a_four_panel_row_of_trees_fails_the_rule():
    """The issue's Figure 1: four trees side by side in one row are illegible once scaled."""
    rng = np.random.default_rng(0)
    tree = with_text(random_tree(rng, num_chains=4, num_expansions=4, max_turns=4), rng)
    fig, axes = plt.subplots(1, 4, figsize=(4.2 * 4 * 1.8, 3.6))
    for ax in axes:
        draw_rollout_tree(tree, ax=ax)
    assert displayed_text_px(fig) < MIN_DISPLAYED_TEXT_PX
    plt.close(fig)


def _shown(monkeypatch):
    """What show_figure displays, captured instead of shown."""
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    return shown


def test_a_wide_tree_is_shown_at_its_natural_size_in_a_box_that_scrolls(monkeypatch):
    """Issue #63: a tree of M = 1, L = 4, K = 8 (33 leaves) drawn in notebook 03's panels grows
    to ~2,150 px; scaled into a 900 px column its labels were ~3.5 px. show_figure keeps it at
    its natural size in a sideways-scrolling box, its labels at their own size."""
    import base64
    import io
    import re

    from PIL import Image

    from at2po_lib.method.credit import VALUE_MODES, node_values
    from at2po_lib.reporting.tree_drawings import draw_tree, show_figure

    shown = _shown(monkeypatch)
    tree = random_tree(np.random.default_rng(0), num_chains=1, num_expansions=32, max_turns=4)
    fig, axes = plt.subplots(4, 1, figsize=(7, 13))
    for ax, mode in zip(axes, VALUE_MODES):
        values = node_values(tree.parent, tree.entropy, tree.leaf_reward, mode=mode).numpy()
        draw_tree(tree.parent, node_color=values, node_labels=[f"{v:.2f}" for v in values], ax=ax)
    natural = fig.get_size_inches()[0] * fig.dpi
    assert natural > 2 * NOTEBOOK_COLUMN_PX
    assert displayed_text_px(fig) < MIN_DISPLAYED_TEXT_PX  # as the column would scale it
    smallest = show_figure(fig)
    assert smallest == pytest.approx(7.0 / 72 * fig.dpi)  # the 7 pt labels at 100 dpi: 9.7 px
    assert smallest >= MIN_DISPLAYED_TEXT_PX
    (box,) = shown
    html = box.data
    assert "overflow-x: auto" in html and "max-width: none" in html
    width = int(re.search(r'width="(\d+)"', html).group(1))
    png = base64.b64decode(re.search(r"base64,([^\"]+)", html).group(1))
    assert Image.open(io.BytesIO(png)).size[0] == width > NOTEBOOK_COLUMN_PX
    assert not plt.fignum_exists(fig.number)  # closed: the inline backend shows it once


def test_a_tree_that_fits_the_column_is_shown_as_an_image(monkeypatch):
    from at2po_lib.reporting.tree_drawings import show_figure

    shown = _shown(monkeypatch)
    fig, _ = draw_rollout_tree(teaching_tree())
    smallest = show_figure(fig)
    (image,) = shown
    assert type(image).__name__ == "Image" and image.format == "png"
    assert smallest == pytest.approx(displayed_text_px(fig))
