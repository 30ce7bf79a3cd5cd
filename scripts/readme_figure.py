"""Draw the README's figure: AT2PO's three parts on the hand-made example tree.

    python scripts/readme_figure.py          # writes figures/readme_method_example.png (+ .meta.json)

Left: entropy-guided expansion, score(n) = H(n) - alpha * b(n) on every node that may be
expanded, the K picks ringed (:func:`at2po_lib.method.expansion.select_entropy`). Right: node
values pushed up from the normalised leaf rewards with softmax-of-entropy weights
(:func:`at2po_lib.method.credit.forest_node_values`, ``entropy_softmax``), which under AT2PO's
``node_value`` rule are the advantages the ATPO loss trains each turn with
(:func:`at2po_lib.method.credit.forest_node_advantages`). The tree is
:func:`at2po_lib.method.tree.example_tree` (9 nodes, 5 leaves), so the figure is the same on every
machine; the PNG carries no timestamp and is rewritten only when its bytes change.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from at2po_lib.method.credit import forest_node_advantages, forest_node_values  # noqa: E402
from at2po_lib.method.expansion import expansion_scores, select_entropy  # noqa: E402
from at2po_lib.method.examples import example_tree  # noqa: E402
from at2po_lib.method.tree import Forest  # noqa: E402
from at2po_lib.reporting.tree_drawings import draw_tree  # noqa: E402
from at2po_lib.util.paths import figures_dir  # noqa: E402
from at2po_lib.util.provenance import run_metadata, write_meta  # noqa: E402
from at2po_lib.util.writing import save_figure  # noqa: E402

ALPHA, K = 0.1, 2
NAME = "readme_method_example.png"


def draw() -> plt.Figure:
    """The three panels (module docstring)."""
    tree = example_tree()
    score = expansion_scores(tree.entropy, tree.parent, ALPHA)
    picks = select_entropy(tree.entropy, tree.parent, tree.is_leaf, K, ALPHA)
    forest = Forest.from_trees([tree])
    values = forest_node_values(forest, "entropy_softmax").numpy()
    advantages = forest_node_advantages(forest, torch.as_tensor(values), "node_value").numpy()
    assert np.allclose(advantages, values, equal_nan=True)  # node_value: A(n) = V(n)
    picked = np.zeros(tree.num_nodes, dtype=int)
    picked[picks] = 1
    candidate = ~tree.is_leaf
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.9))
    draw_tree(
        tree,
        node_color=np.where(candidate, score, np.nan),
        node_labels=[
            f"{s:+.2f}" if c else f"H={h:.1f}" for s, c, h in zip(score, candidate, tree.entropy)
        ],
        ax=axes[0],
        rings=picked,
        colorbar_label="H(n) − α·b(n)",
        legend=False,
        title=f"1. expand: top-{K} of H − {ALPHA}·b (ringed)",
    )
    bound = float(np.nanmax(np.abs(values)))
    draw_tree(
        tree,
        node_color=values,
        node_labels=[f"{v:+.2f}" for v in values],
        ax=axes[1],
        vmin=-bound,
        vmax=bound,
        colorbar_label="V(n) = A(n)",
        legend=True,
        title="2. credit: V(n) = A(n) (entropy_softmax, node_value)",
    )
    fig.tight_layout()
    return fig


def main() -> None:
    path = figures_dir() / NAME
    save_figure(draw(), path, dpi=120, bbox_inches="tight")
    write_meta(
        path,
        run_metadata(
            "none",
            writer="scripts/readme_figure.py:draw",
            command="python scripts/readme_figure.py",
            tree="at2po_lib.method.tree:example_tree",
            alpha=ALPHA,
            k=K,
        ),
    )
    print(path)


if __name__ == "__main__":
    main()
