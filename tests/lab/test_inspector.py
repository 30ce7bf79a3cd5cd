"""The tree and credit inspector (at2po_lib.lab.inspector): credit under every rule by
hand, the simulated turn ratio and its clip, and the static fallback without a widget frontend."""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from at2po_lib.analysis.policy_change import simulated_turn_ratios  # noqa: E402
from at2po_lib.method.examples import example_tree
from at2po_lib.method.tree import TreeArrays  # noqa: E402
from at2po_lib.lab import inspector as insp  # noqa: E402
from at2po_lib.reporting import node_credit, node_views  # noqa: E402

nan = np.nan


def searched_tree() -> TreeArrays:
    """0 ─┬─ 1 S:"a" ─┬─ 3 A r=1
          │           └─ 4 A r=0      (round 1)
          └─ 2 S:"a" ── 5 A r=0

    Nodes 3, 4 and 5 all follow one search for "a": one anchor state."""
    parent = np.array([-1, 0, 0, 1, 1, 2])
    records = [
        {"action": "root"},
        {"action": "search", "query": "a"},
        {"action": "search", "query": "a"},
        {"action": "answer", "answer": "x"},
        {"action": "answer", "answer": "y"},
        {"action": "answer", "answer": "y"},
    ]
    return TreeArrays(
        parent,
        np.array([0, 0.5, 0.7, 0.2, 0.9, 0.3]),
        np.array([nan, nan, nan, 1, 0, 0]),
        records=records,
        node_arrays={
            "expansion_round": np.array([0, 0, 0, 0, 1, 0]),
            "num_tokens": np.array([0, 5, 5, 3, 3, 3]),
        },
    )


def test_credit_table_by_hand():
    table = node_credit.credit_table([example_tree()])
    assert len(table.columns) == 1 + 4 + 16 + 3
    # GRPO over leaves 4, 5, 6, 7, 8 with rewards 0, 1, 1, 0, 1: mean 0.6, unbiased std sqrt(0.3)
    std = np.sqrt(0.3)
    assert table.loc[8, "grpo"] == pytest.approx(0.4 / (std + 1e-6))
    # node 1 lies on the rows of leaves 6 (r=1) and 4 (r=0): the mean of their advantages
    assert table.loc[1, "grpo"] == pytest.approx(((0.4 - 0.6) / 2) / (std + 1e-6))
    # one tree: Tree-GRPO's two terms are the same GRPO, and the table says so
    np.testing.assert_allclose(table["tree_grpo"].iloc[1:], 2 * table["grpo"].iloc[1:])
    assert any("one tree" in note for note in table.attrs["notes"])
    # AT2PO: node_value advantages are the values; a leaf's value is its normalised reward
    np.testing.assert_allclose(table["entropy_softmax/node_value"], table["V:entropy_softmax"])
    assert table.loc[7, "V:child_mean"] == pytest.approx(-0.6 / (np.sqrt(0.24) + 1e-6))


def test_anchor_states_group_turns_after_the_same_search():
    state = node_credit.anchor_states([searched_tree()])
    assert state[3] == state[4] == state[5]  # all after one search for "a"
    assert state[1] == state[2] != state[3]  # first turns: nothing searched yet


def test_gigpo_column_when_the_study_module_is_there():
    table = node_credit.credit_table([searched_tree()])
    try:
        import at2po_lib.analysis.credit_accuracy  # noqa: F401
    except ImportError:
        assert table["gigpo"].isna().all() and any("gigpo" in n for n in table.attrs["notes"])
        return
    # one anchor state for 3, 4, 5: step returns 1, 0, 0 normalised within it; the right
    # answer gets a larger GiGPO advantage than the wrong ones
    assert np.isfinite(table["gigpo"].iloc[1:]).all()
    assert table.loc[3, "gigpo"] > table.loc[4, "gigpo"] == pytest.approx(table.loc[5, "gigpo"])


def test_simulated_ratio_is_one_without_an_update_and_clips_in_the_advantage_direction():
    tree = searched_tree()
    adv = np.array([0, 1.0, -1.0, 1.0, -1.0, 1.0])
    still = simulated_turn_ratios(tree, adv, turn_drift_std=0.0, token_noise_std=0.0)
    np.testing.assert_allclose(still["turn_ratio"].iloc[1:], 1.0)
    assert not still["turn_clipped"].any()
    moved = simulated_turn_ratios(tree, adv, turn_drift_std=0.5, token_noise_std=0.0, seed=1)
    r, clipped = moved["turn_ratio"].to_numpy(), moved["turn_clipped"].to_numpy()
    expected = ((adv > 0) & (r > 1.004)) | ((adv < 0) & (r < 0.997))
    np.testing.assert_array_equal(clipped[1:], expected[1:])
    assert moved.attrs["window"] == pytest.approx((0.997, 1.004))
    assert moved["tokens"].tolist() == [0, 5, 5, 3, 3, 3]


def test_static_fallback_without_a_widget_frontend(monkeypatch):
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.delenv("VSCODE_PID", raising=False)
    assert insp.widget_frontend() is False
    shown = insp.inspect("smoke", [searched_tree()], mode="auto")
    assert isinstance(shown, insp.Inspection)
    assert shown.tree is not None and "mixed rewards" in shown.why_tree
    # round 0 and round 1 of the growth, then the node's credit bars
    assert len(shown.figures) == 3 and all(f.axes for f in shown.figures)
    assert 1 <= shown.node < shown.tree.num_nodes
    text = node_views.describe_node(shown.tree, shown.credit, shown.ratios, shown.node)
    assert f"node {shown.node}" in text and "clip window" in text
    plt.close("all")


def test_most_disputed_node_prefers_sign_disagreement():
    import pandas as pd

    # node 1: wide spread, one sign; node 2: narrow spread, the rules split on the sign
    table = pd.DataFrame(
        {
            "entropy": [0, 1, 1],
            "V:child_mean": [0, 0, 0],
            "child_mean/node_value": [0, 3.0, 0.1],
            "grpo": [nan, 0.5, -0.1],
            "gigpo": [nan, 1.0, -0.2],
        }
    )
    node, why = node_credit.most_disputed_node(table)
    assert node == 2 and "disagree" in why
    node, why = node_credit.most_disputed_node(
        table.assign(grpo=[nan, 0.5, 0.2], gigpo=[nan, 1, 0.2])
    )
    assert node == 1 and "spread most" in why
    same = table.assign(**{"child_mean/node_value": 0.0, "grpo": 0.0, "gigpo": 0.0})
    assert node_credit.most_disputed_node(same)[0] == 1


def test_inspect_rejects_an_unknown_mode_and_static_without_trees():
    with pytest.raises(ValueError, match="inspector mode"):
        insp.inspect("smoke", [example_tree()], mode="gui")
    with pytest.raises(ValueError, match="needs trees"):
        insp.inspect("smoke", [], mode="static")


def _chromium() -> str | None:
    import shutil

    return os.environ.get("AT2PO_CHROMIUM") or shutil.which("chromium")


@pytest.mark.slow  # JupyterLab + a browser: ~50 s
@pytest.mark.integration
@pytest.mark.browser
def test_inspector_in_a_real_browser():
    """scripts/check_inspector_browser.py on the smoke profile: the widgets render in
    JupyterLab, a node pick redraws, Grow rolls a tree out; the reopen hint says Run All above
    the dead widget of the restored notebook and above the live one, the α slider reads and
    steps to exact values and the kernel grows with the profile's α, and a tree of M = 1,
    L = 4, K = 8 scrolls at its natural size (issue #63). Needs Playwright and Chromium
    (`pip install -e '.[browser]'`, Debian's `chromium` or AT2PO_CHROMIUM)."""
    import subprocess
    import sys
    from pathlib import Path

    from at2po_lib.config.profile import load_profile

    pytest.importorskip("playwright")
    chromium = _chromium()
    if chromium is None:
        pytest.skip("no Chromium (set AT2PO_CHROMIUM or install Debian's chromium)")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [
            sys.executable,
            "scripts/check_inspector_browser.py",
            "--profile",
            "smoke",
            "--chromium",
            chromium,
            "--timeout",
            "300",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Grow: grown:" in done.stdout
    assert "tree image and chart redrawn" in done.stdout
    # node pick, Grow and Grow at random + L = 2 (smoke: the profile's 2 trees), both phases
    assert done.stdout.count("busy sign shown") == 6
    assert done.stdout.count("random, L = 2: grown: 2 tree(s)") == 2
    assert done.stdout.count("M = 2, L = 3, K = 1: Grow is off") == 2
    assert done.stdout.count("not on the page under its closed fold, shown when opened") == 3 + 1
    assert done.stdout.count("git status --porcelain -- notebooks/ is empty") == 2
    # issue #63: the reopen hint above the restored notebook's dead widget, then above the live
    # one in both phases; the α slider in both phases; the wide tree in both phases
    assert done.stdout.count("restored: reopen hint above 'Error displaying widget'") == 1
    assert done.stdout.count("reopen hint above the live inspector; it says Run All") == 2
    alpha = load_profile("smoke").rollout.tree_alpha
    assert done.stdout.count(f"α slider starts on {alpha!r}; steps read") == 2
    assert done.stdout.count(f"the kernel grew it with α = {alpha!r}") == 2
    assert done.stdout.count("at its natural size in a box that scrolls sideways") == 2


class FakeLive:
    """Stands in for LiveRollout: every Grow returns fresh random trees (with text), sometimes
    two per prompt (Tree-GRPO's ``random``), sometimes with all-equal rewards (no signal)."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.questions = [f"question {i}?" for i in range(5)]
        self.golden = [["gold"] for _ in range(5)]
        self.calls = 0

    def grow(self, question, expansion, m, l, k, alpha, seed=0):
        from dataclasses import replace

        from at2po_lib.method.examples import random_tree
        from tests.reporting.test_notebook_figures import with_text

        self.calls += 1
        count = 2 if expansion == "random" else 1
        trees = []
        for _ in range(count):
            t = with_text(
                random_tree(self.rng, num_chains=int(m), num_expansions=int(l * k), max_turns=3),
                self.rng,
            )
            rounds = np.where(
                np.arange(t.num_nodes) > 0, self.rng.integers(0, l + 1, t.num_nodes), 0
            )
            reward = t.leaf_reward
            if self.rng.random() < 0.2:  # an all-equal tree
                reward = np.where(np.isfinite(reward), 1.0, np.nan)
            trees.append(
                replace(
                    t,
                    leaf_reward=reward,
                    prompt_id=question,
                    node_arrays={"expansion_round": rounds},
                    info={"question": self.questions[question], "golden_answers": ["gold"]},
                )
            )
        return trees


def _click_through(grows: int, seed: int = 0) -> None:
    """``grows`` random Grows, headless: after each (and after a random tree / round / node
    pick) the widget's tree image *and credit chart* are byte for byte the offline drawings of
    the same view; one render per view, no figure left open, no busy sign left, the status
    line naming the shown tree, every tree of the expansion listed, images at natural width."""
    pytest.importorskip("ipywidgets")
    live = FakeLive(seed)
    inspector = insp.TreeInspector("smoke", live=live)
    inspector._live()  # the question list, as the first Grow loads it
    assert len(inspector.question.options) == 5
    rng = np.random.default_rng(seed + 1)
    for grow in range(grows):
        inspector.question.value = int(rng.integers(0, 5))
        inspector.expansion.value = str(rng.choice(["chain", "random", "entropy"]))
        inspector.m.value, inspector.l.value, inspector.k.value = (
            int(rng.integers(2, 5)),
            int(rng.integers(0, 3)),
            2,
        )
        draws = inspector.draws
        inspector._grow()
        assert "grown:" in inspector.status.value, inspector.status.value
        assert inspector.draws == draws + 1  # one render per Grow, not one per widget change
        tree = inspector.trees[0]
        same = [t for t in inspector.trees if t.prompt_id == tree.prompt_id]
        node, _ = node_credit.most_disputed_node(node_credit.credit_table(same, 0))
        last = int(tree.node_arrays["expansion_round"].max())
        offline = node_views.render_png(node_views.tree_view(tree, upto_round=last, node=node))
        assert inspector.tree_image.value == offline, f"Grow {grow}"
        chart = node_views.render_png(
            node_views.plot_node_credit(
                node_credit.credit_table(same, 0), node, note=node_views.signal_note(tree)
            )[0]
        )
        assert inspector.credit_image.value == chart, f"Grow {grow}: credit chart"
        assert inspector.busy.value == "" and not inspector.node.disabled
        assert f"tree 0 of {len(inspector.trees)}" in inspector.status.value
        for image in (inspector.tree_image, inspector.credit_image):
            assert image.layout.width == f"{node_views.png_size(image.value)[0]}px"
        assert len(inspector.tree_pick.options) == len(inspector.trees)
        assert f"prompt {tree.prompt_id}:" in inspector.listing.value
        assert ("no signal" in inspector.signal.value) == bool(node_views.signal_note(tree))
        # another tree, round and node of the same expansion
        inspector.tree_pick.value = int(rng.integers(0, len(inspector.trees)))
        shown = inspector.trees[inspector.tree_pick.value]
        inspector.round.value = int(rng.integers(0, inspector.round.max + 1))
        inspector.node.value = int(rng.integers(0, shown.num_nodes))
        offline = node_views.render_png(
            node_views.tree_view(shown, upto_round=inspector.round.value, node=inspector.node.value)
        )
        assert inspector.tree_image.value == offline, f"Grow {grow}, after picks"
        assert inspector.credit_image.value == inspector.chart_png(), f"Grow {grow}, after picks"
        assert (
            f"tree {inspector.tree_pick.value} of" in inspector.status.value
            and f"node {inspector.node.value}" in inspector.status.value
        )
        assert inspector.busy.value == ""
        assert plt.get_fignums() == []
    assert live.calls == grows


@pytest.mark.slow  # ~800 renders: ~260 s of CPU
@pytest.mark.stress  # ./run_tests.sh runs the 4-Grow version below; CI (.ci/run) runs this one too
def test_inspector_redraws_exactly_what_the_offline_drawing_shows():
    _click_through(100)


@pytest.mark.slow  # ~30 renders: ~7 s of CPU
def test_inspector_redraws_a_few_views_exactly():
    _click_through(4, seed=3)


@pytest.mark.slow  # 50 renders: ~14 s of CPU
def test_charts_rendered_on_side_threads_match_and_leave_pyplot_alone():
    """The widget's callbacks run on a kernel side thread: its figures are detached from
    pyplot, so charts rendered on 4 threads while the main thread uses pyplot are byte for byte
    the serial ones, and pyplot's figure list holds only the main thread's figure."""
    from concurrent.futures import ThreadPoolExecutor

    from at2po_lib.analysis.running_example import teaching_tree

    table = node_credit.credit_table([teaching_tree()])
    nodes = list(range(1, 11))
    serial = [node_views.render_png(node_views.plot_node_credit(table, n)[0]) for n in nodes]
    main = plt.figure()
    with ThreadPoolExecutor(4) as pool:
        charts = pool.map(
            lambda n: node_views.render_png(node_views.plot_node_credit(table, n)[0]), nodes * 2
        )
        trees = pool.map(
            lambda n: node_views.render_png(node_views.tree_view(teaching_tree(), node=n)), nodes
        )
        for _ in range(20):
            plt.figure(main.number)
            plt.plot([0, 1], [1, 0])
        charts, trees = list(charts), list(trees)
    assert charts == serial * 2
    assert trees == [
        node_views.render_png(node_views.tree_view(teaching_tree(), node=n)) for n in nodes
    ]
    assert plt.get_fignums() == [main.number]
    plt.close("all")


def test_one_meaning_per_ring_colour():
    """The running example's two rings and the chosen node's ring differ in colour, and none is
    a dashed expansion-round ring's colour."""
    from matplotlib.colors import to_hex

    from at2po_lib.analysis.running_example import teaching_tree
    from at2po_lib.reporting.tree_drawings import CHOSEN_COLOUR

    fig = node_views.tree_view(
        teaching_tree(), node=5, highlight={2: "picked turn n", 10: "its re-sample x"}
    )
    legend = fig.axes[0].get_legend()
    colours = {
        t.get_text(): to_hex(h.get_markeredgecolor())
        for t, h in zip(legend.get_texts(), legend.legend_handles)
    }
    rings = {k: v for k, v in colours.items() if k.startswith("node ")}
    assert len(rings) == 3 and len(set(rings.values())) == 3
    assert rings["node 5: chosen node"] == CHOSEN_COLOUR
    dashed = {v for k, v in colours.items() if k.startswith("dashed ring")}
    assert dashed and not dashed & set(rings.values())


def test_inspector_starts_on_the_running_example_and_lists_its_questions():
    pytest.importorskip("ipywidgets")
    from dataclasses import replace

    from at2po_lib.analysis.running_example import teaching_tree

    other = replace(
        teaching_tree(),
        prompt_id=1,
        info={"question": "Who?", "golden_answers": ["x"]},
        node_arrays={},
    )
    inspector = insp.TreeInspector("smoke", [other, teaching_tree()])
    assert inspector.index == 1 and inspector.node.value == 2
    assert inspector.highlight == {2: "picked turn n", 10: "its re-sample x"}
    assert "Who?" in inspector.listing.value and "Neko Labs" in inspector.listing.value
    assert "running example" in inspector.status.value and "tree 1 of 2" in inspector.status.value
    assert "Neko Labs" in inspector.status.value
    # another tree: the status line follows it and no longer claims the running example
    inspector.tree_pick.value = 0
    assert "tree 0 of 2" in inspector.status.value and "Who?" in inspector.status.value
    assert "running example" not in inspector.status.value
    assert inspector.busy.value == "" and not any(c.disabled for c in inspector.controls)


def test_no_signal_is_said():
    from dataclasses import replace

    flat = replace(
        example_tree(), leaf_reward=np.where(np.isfinite(example_tree().leaf_reward), 0.0, np.nan)
    )
    assert (
        "no signal" in node_views.signal_note(flat) and node_views.signal_note(example_tree()) == ""
    )


def test_random_trees_at_l2_grow_the_count_that_splits_or_the_control_says_why():
    """Issue #49: ``random`` + L = 2 + Grow raised ValueError (M + L·K = 12 leaves do not split
    into the profile's 2 Tree-GRPO trees of 1 + L·n leaves) and the widget could not change the
    tree count. The nearest count that splits is grown, said beside Grow; where none does,
    Grow is off and the sentence says why."""
    pytest.importorskip("ipywidgets")
    from dataclasses import replace

    from at2po_lib.config.profile import load_profile
    from at2po_lib.rollout.trees import tree_grpo_shape

    tiny = load_profile("tiny").rollout
    assert insp.random_tree_count(tiny) == (tiny.tree_grpo_trees, "")
    at_l2 = replace(tiny, tree_l=2)
    count, note = insp.random_tree_count(at_l2)
    assert count == 4 and "4 trees of 3 leaves" in note and "profile's 2" in note
    tree_grpo_shape(replace(at_l2, tree_grpo_trees=count))  # it splits
    none, why = insp.random_tree_count(replace(tiny, tree_m=2, tree_l=3, tree_k=1))
    assert none is None and "change M, L or K" in why

    inspector = insp.TreeInspector("tiny")
    inspector.expansion.value = "random"
    assert inspector.grow_busy.value == "" and not inspector.grow_button.disabled
    inspector.l.value = 2
    assert "4 trees of 3 leaves" in inspector.grow_busy.value
    assert not inspector.grow_button.disabled
    # a Grow at L = 2: the busy sign replaced the line beside Grow, and the line comes back
    # after it (it was left empty, found by scripts/check_inspector_browser.py)
    inspector.live = FakeLive()
    inspector._grow()
    assert "grown:" in inspector.status.value and "4 trees of 3 leaves" in inspector.grow_busy.value
    assert insp.BUSY_MARK not in inspector.grow_busy.value and not inspector.grow_button.disabled
    inspector.m.value, inspector.l.value, inspector.k.value = 2, 3, 1
    assert inspector.grow_button.disabled and "change M, L or K" in inspector.grow_busy.value
    inspector.expansion.value = "entropy"
    assert inspector.grow_busy.value == "" and not inspector.grow_button.disabled
    inspector._grow()  # another expansion: nothing beside Grow after it
    assert "grown:" in inspector.status.value and inspector.grow_busy.value == ""


def test_the_busy_sign_is_words_beside_the_control_that_changed():
    """Issue #49: the busy line sat above the question list, off screen while one picks nodes,
    and its hourglass glyph rendered as an empty box without an emoji font."""
    pytest.importorskip("ipywidgets")
    from at2po_lib.analysis.running_example import teaching_tree

    inspector = insp.TreeInspector("smoke", [teaching_tree()])
    node_row = next(
        box
        for box in inspector.widget.children
        if hasattr(box, "children") and inspector.node in box.children
    )
    assert inspector.busy in node_row.children
    grow_row = next(
        box
        for box in inspector.widget.children
        if hasattr(box, "children") and inspector.grow_button in box.children
    )
    assert inspector.grow_busy in grow_row.children
    shown = []
    original = inspector._redraw
    inspector._redraw = lambda: (shown.append(inspector.busy.value), original())
    inspector.node.value = 3
    assert shown and shown[0].count(insp.BUSY_MARK) == 1 and "drawing node 3" in shown[0]
    assert all(ord(ch) < 0x2300 for ch in shown[0])  # no symbol a plain font lacks
    assert inspector.busy.value == ""


def test_the_first_grow_says_loading_then_growing(monkeypatch):
    """The first Grow loads the policy, then grows: the sign beside Grow says each in turn (it
    said "loading the warm-start policy" through the whole rollout), and nothing once done."""
    pytest.importorskip("ipywidgets")
    from at2po_lib.analysis.running_example import teaching_tree

    said = []

    class Loading(FakeLive):
        def __init__(self, profile):
            said.append(inspector.grow_busy.value)
            super().__init__()

        def grow(self, *args, **kwargs):
            said.append(inspector.grow_busy.value)
            return super().grow(*args, **kwargs)

    monkeypatch.setattr(insp, "LiveRollout", Loading)
    inspector = insp.TreeInspector("smoke", [teaching_tree()])
    inspector._grow()
    assert "grown:" in inspector.status.value
    assert [s.count(insp.BUSY_MARK) for s in said] == [1, 1]
    assert "loading the warm-start policy" in said[0] and "growing a tree" in said[1]
    assert inspector.grow_busy.value == ""


def test_a_reopened_notebook_says_to_run_the_cell(monkeypatch):
    """Issue #49: a reopened 03 showed "Error displaying widget: model not found" and nothing
    else. A line above the widget says to run the cell."""
    pytest.importorskip("ipywidgets")
    from at2po_lib.analysis.running_example import teaching_tree

    shown = []
    monkeypatch.setattr(insp, "_display", lambda: shown.append)
    inspector = insp.inspect("smoke", [teaching_tree()], mode="widgets")
    assert shown[-1] is inspector.widget
    hint = getattr(shown[-2], "data", shown[-2])  # right above the widget
    # issue #63: running the cell above alone after a restart raised NameError ('profile')
    assert "Run All" in hint and "run the cell above" not in hint


def test_the_alpha_slider_starts_on_the_profiles_alpha_exactly():
    """Issue #63: the log slider landed on 0.0501 for the profile's α = 0.05."""
    pytest.importorskip("ipywidgets")
    from at2po_lib.analysis.running_example import teaching_tree
    from at2po_lib.config.profile import load_profile

    inspector = insp.inspect("tiny", [teaching_tree()], mode="widgets")
    assert inspector.alpha.value == load_profile("tiny").rollout.tree_alpha == 0.05
    assert 0.001 in inspector.alpha.options  # the exact-entropy variant's α
    assert insp.alpha_choices(0.07) == tuple(sorted((*insp.ALPHA_CHOICES, 0.07)))


def test_grow_says_the_alpha_it_grew_with_as_the_kernel_read_it():
    """Issue #63: the α slider landed on 0.0501. Grow's status line says the α the kernel
    received, so the browser check can tell 0.05 from 0.0501 after moving the slider."""
    pytest.importorskip("ipywidgets")
    grown_with = []

    class Recording(FakeLive):
        def grow(self, question, expansion, m, l, k, alpha, seed=0):
            grown_with.append(alpha)
            return super().grow(question, expansion, m, l, k, alpha, seed)

    inspector = insp.TreeInspector("tiny")
    inspector.live = Recording()
    options = list(inspector.alpha.options)
    inspector.alpha.value = options[options.index(0.05) + 1]  # one step right: 0.1
    inspector.alpha.value = options[options.index(0.1) - 1]  # and back
    inspector._grow()
    assert grown_with == [0.05]
    assert "(entropy, α = 0.05)" in inspector.status.value
    inspector.alpha.value = 0.001
    inspector._grow()
    assert grown_with[-1] == 0.001 and "(entropy, α = 0.001)" in inspector.status.value


def test_a_wide_tree_scrolls_at_its_natural_size():
    """Issue #63: a grown tree of M = 1, L = 4, K = 8 (2,914 px) was scaled to a 993 px column,
    its labels unreadable. The tree image keeps its natural width in a box that scrolls."""
    pytest.importorskip("ipywidgets")
    from at2po_lib.analysis.running_example import teaching_tree

    inspector = insp.inspect("smoke", [teaching_tree()], mode="widgets")
    assert inspector.tree_image.layout.max_width == "none"
    boxes = [
        c for c in inspector.widget.children if inspector.tree_image in getattr(c, "children", ())
    ]
    assert len(boxes) == 1 and boxes[0].layout.overflow == "auto"
    assert inspector.credit_image.layout.max_width == "100%"  # the chart still fits the column


def test_the_credit_views_name_each_rule_in_words():
    """Issue #63: the credit chart and grids named the rules by the records' names
    (``entropy_softmax/node_value``, ``tree_grpo``); they read as Table 3 does now."""
    from at2po_lib.analysis.running_example import teaching_tree
    from at2po_lib.reporting.node_credit import node_credit_grid, rule_label
    from at2po_lib.reporting.node_views import baseline_frame, plot_node_credit

    table = node_credit.credit_table(teaching_tree())
    assert rule_label("entropy_softmax/node_value") == "entropy-weighted children, node value"
    assert rule_label("leaf_mean/diff_global") == "leaf mean, difference to the root"
    assert rule_label("tree_grpo") == "Tree-GRPO"
    fig, ax = plot_node_credit(table, 2)
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    assert len(ticks) == 16 + 3 and ticks[0] == "entropy-weighted children, node value"
    assert ticks[-3:] == ["GRPO", "Tree-GRPO", "GiGPO-style step groups"]
    assert not any("_" in t or "/" in t for t in ticks)
    grid = node_credit_grid(table, 2)
    assert list(grid.index) == [
        "entropy-weighted children",
        "linear entropy weights",
        "child mean",
        "leaf mean",
    ]
    assert (
        grid.loc["child mean", "difference to the parent"] == table.loc[2, "child_mean/diff_parent"]
    )
    assert list(baseline_frame(table, 2).index) == ["GRPO", "Tree-GRPO", "GiGPO-style step groups"]
    assert not any("tree_grpo" in n or "gigpo:" in n for n in table.attrs["notes"])
