"""Every number the notebooks and the README quote is read back from the table it comes from, at
the precision that table shows (issue #49 item 2: a sentence that rounded a stored number a
second time, a claim about every method that one method broke, a parameter count of another
model, a recap that contradicted the generated rows below it)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from at2po_lib.config.profile import load_profile
from at2po_lib.reporting import conclusions
from at2po_lib.reporting.labels import method_label, table_configurations
from at2po_lib.reporting.output import read_markdown_table

ROOT = Path(__file__).resolve().parents[1]
TABLES = ROOT / "results" / "tiny" / "tables"
NOTEBOOKS = ROOT / "notebooks"
INTERVAL = r"[+-]?\d+\.\d \[[+-]?\d+\.\d, [+-]?\d+\.\d\]"


@pytest.fixture()
def tiny_tables(monkeypatch):
    """The committed tiny tables (the conclusions read ``results/``)."""
    if not (TABLES / "table1_differences.md").is_file():
        pytest.skip("no committed tiny tables")
    monkeypatch.delenv("AT2PO_RESULTS", raising=False)
    monkeypatch.setenv("AT2PO_HOME", str(ROOT))
    return TABLES


def shown(name: str):
    return read_markdown_table((TABLES / f"{name}.md").read_text())


def markdown_of(notebook: str) -> str:
    cells = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def test_table1_sentence_quotes_the_differences_table_as_shown(tiny_tables):
    """05 printed AT2PO +1.1 [-0.6, +2.9] above a table showing +2.8: the CSV's 0.028500 was
    rounded again. The sentence now quotes each method's cell as the table shows it."""
    full = conclusions.table1_conclusion("tiny")
    # issue #63: the conclusion opens with the study's block verdicts; the rest is the earlier record
    assert full.startswith("**In the study's blocks** (15 blocks")
    sentence = full.split("(the earlier record). ", 1)[1]
    table = shown("table1_differences")
    quoted = dict(re.findall(rf"(?:; |CI: )([^;]+?) ({INTERVAL}) points", sentence))
    assert len(quoted) >= 8, sentence
    for label, interval in quoted.items():
        assert table.loc[label, "Δ Multi-hop vs GRPO"] == interval, label
    assert quoted[method_label("at2po")] == "+1.1 [-0.6, +2.8]"


def test_the_seed_spread_sentence_reads_both_spreads_as_shown(tiny_tables):
    """05 said the sampled metric's seeds spread less than greedy EM's for every method; GRPO
    at AT2PO's budget spreads more (sampled 2.27, greedy 2.23: 2.3 and 2.2 as shown)."""
    sentence = conclusions.seed_spread_conclusion("tiny")
    table = shown("table1_seeds")
    pairs = re.findall(r"(?:not for |, )(.+?) \(sampled (\d+\.\d), greedy (\d+\.\d)\)", sentence)
    assert pairs, sentence
    for label, sampled, greedy in pairs:
        assert table.loc[label, "sampled: sd over seeds"] == sampled
        assert table.loc[label, "greedy: sd over seeds"] == greedy
        assert float(sampled) >= float(greedy)
    spread = [
        (float(r["greedy: sd over seeds"]), float(r["sampled: sd over seeds"]))
        for _, r in table.iterrows()
        if r["greedy: sd over seeds"] != "–"
    ]
    less = sum(s < g for g, s in spread)
    assert f"for {less} of the {len(spread)} methods" in sentence
    assert label == method_label("grpo_tree_budget")
    assert "for every method" not in markdown_of("05_paper_tables_figures")


def test_the_profile_description_states_the_shipped_policys_size():
    """05's first output is the profile's description: 'a few-million-parameter Qwen3' for a
    policy of 1,301,632 parameters (the shipped warm start's record)."""
    record = json.loads((ROOT / "results" / "tiny" / "warmstart" / "warmstart.json").read_text())
    millions = f"{record['parameters'] / 1e6:.1f}M"
    assert millions == "1.3M"
    assert f"a {millions}-parameter Qwen3" in load_profile("tiny").description


def test_05_recap_makes_no_claim_the_generated_rows_contradict_and_05_ends_with_why():
    """The recap said entropy picks turns 'no better than chance' above generated rows reading
    'better than a uniform pick'; it now points to the last section, which is 05's end."""
    text = markdown_of("05_paper_tables_figures")
    recap = text[text.index("## Recap") : text.index("## Exercises")]
    assert "no better than" not in recap and "the last section" in recap
    cells = json.loads((NOTEBOOKS / "05_paper_tables_figures.ipynb").read_text())["cells"]
    headings = [
        ("".join(c["source"])).splitlines()[0]
        for c in cells
        if c["cell_type"] == "markdown" and "".join(c["source"]).startswith("## ")
    ]
    assert headings[-1] == "## What the toy says, and why"
    assert "why_for(profile" in "".join(cells[-1]["source"])  # the report's call (why.md)


def test_03_says_what_its_figure_and_answer_3b_show():
    """Issue #63: answer 3 (b) said the weights part "grows" where the computed line went from
    0.429 to 0.388; Figure 1's heading promised ``r=`` under each leaf, whose label is its value."""
    text = markdown_of("03_credit_assignment")
    assert "so the weights part grows too" not in text
    assert "`r=` under each leaf" not in text


def test_03_answer_3_says_what_its_computed_parts_show():
    """Answer 3 (c) called the advantage rule 'the whole change' above a computed line with
    unequal subtrees 0.258 at L = 1; section 2b tied unequal subtrees to L >= 2."""
    text = markdown_of("03_credit_assignment")
    assert "the whole change" not in text
    assert "several re-samples under one node, L ≥ 2" not in text
    assert "mostly the root" in text


def test_readme_names_which_at2po_each_table_rests_on_with_the_seeds_shown(tiny_tables):
    seeds = shown("table1_seeds")["seeds"]
    readme = (ROOT / "docs" / "toy_study.md").read_text()  # the findings' page
    authors, variant = seeds[method_label("at2po")], seeds[method_label("at2po_exact")]
    assert f"Table 1's AT2PO row is the authors'\n({authors} seeds)" in readme
    assert f"are the variant ({variant} seeds)" in readme
    sentence = table_configurations("tiny")
    assert (
        f"`at2po` (sampled-token NLL, α = 0.05: the profile's settings; {authors} seeds)"
        in sentence
    )
    assert (
        f"`at2po_exact` (exact entropy, α = 0.001: the settings it fixes over the profile's; "
        f"{variant} seeds)" in sentence
    )


def test_display_names_not_record_names():
    """Issue #49: legends and sentences said ``trained_rerun``, ``grpo_tree_budget``."""
    from at2po_lib.analysis.expansion_oracle import SUMMARY_POLICIES
    from at2po_lib.reporting.dissection_figure import wrapped_label
    from at2po_lib.reporting.dissection_summary import ORACLE_POLICIES

    assert SUMMARY_POLICIES == ORACLE_POLICIES
    assert "_" not in "".join(ORACLE_POLICIES.values())
    assert wrapped_label("grpo_tree_budget").replace("\n", " ") == method_label("grpo_tree_budget")


def test_notebook_02s_oracle_sentence_names_scores_and_policies_in_words(tiny_tables):
    from at2po_lib.analysis.expansion_oracle import (
        ESTIMATE_SCORES,
        flip_ratio_sentence,
        oracle_records,
    )

    _, summaries = oracle_records("tiny")
    for score in ESTIMATE_SCORES.values():
        sentence = flip_ratio_sentence(summaries, score)
        assert not re.search(r"\b[a-z]+_[a-z_]+\b", sentence), sentence


def test_03_names_each_credit_mode_as_table_3_and_the_inspector_do():
    """Issue #63: Table 3 and the inspector name the modes in words; notebook 03 introduces
    each mode by its record name, so its tables give the words beside it, read from the same
    labels (a renamed label must be renamed here too)."""
    from at2po_lib.method.credit import ADVANTAGE_MODES, VALUE_MODES
    from at2po_lib.reporting.labels import credit_words

    rows = {
        line.split("|")[1].strip(" `"): line.rstrip(" |").rsplit("|", 1)[1].strip()
        for line in markdown_of("03_credit_assignment").splitlines()
        if line.startswith("| `")
    }
    for mode in (*VALUE_MODES, *ADVANTAGE_MODES):
        assert rows[mode] == credit_words(mode) != mode


def test_notebooks_show_grown_trees_through_show_figure():
    """Issue #63: a large tree was scaled into the column, its labels unreadable. Every cell of
    02 and 03 that draws a tree of the notebook's own (its profile's, or a trees file's) shows it
    with tree_drawings.show_figure (a wide one scrolls at its natural size), not plt.show."""
    for notebook, cells_with in (
        ("02_tree_rollout", ("example = trees[shown]",)),
        (
            "03_credit_assignment",
            (
                "hand = teaching_tree()",
                "Node values V(n) of the shown",
                "Advantages A(n) of the shown",
            ),
        ),
    ):
        cells = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text())["cells"]
        sources = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
        for opening in cells_with:
            source = next(s for s in sources if opening in s)
            assert "show_figure(fig)" in source and "plt.show()" not in source, opening


def test_02_to_05_print_their_sentences_as_prose():
    """Issue #63: long generated sentences printed as one monospace line, numbers wrapping
    mid-number. Every print of a string in notebooks 02 to 05 goes through
    ``reporting.output.prose`` (wrapped at words, a number never split); a print of another
    value (an array) or of several (a row of 05's table of paths) is left as it is."""
    import ast

    for notebook in (
        "02_tree_rollout",
        "03_credit_assignment",
        "04_at2po_training",
        "05_paper_tables_figures",
    ):
        cells = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text())["cells"]
        for cell in cells:
            if cell["cell_type"] != "code":
                continue
            for node in ast.walk(ast.parse("".join(cell["source"]))):
                if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "print"):
                    continue
                if len(node.args) != 1:  # several values: a table's row (05's paths), not prose
                    continue
                (arg,) = node.args
                stringy = isinstance(arg, (ast.JoinedStr, ast.BinOp)) or (
                    isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                )
                prosed = isinstance(arg, ast.Call) and getattr(arg.func, "id", "") == "prose"
                assert prosed or not stringy, (notebook, ast.unparse(node)[:80])


def test_05_lists_runs_and_blocks_by_their_labels():
    """Issue #63: 05 listed the runs, their revisions and the blocks' methods by record names
    (``credit_child_mean_diff_parent``, ``grpo_tree_budget``); they read as the tables do."""
    from at2po_lib.reporting.block_pairs import blocks_overview

    cells = json.loads((NOTEBOOKS / "05_paper_tables_figures.ipynb").read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    runs = next(s for s in code if 'runs.groupby("method")' in s)
    assert "rename(index=method_label" in runs
    provenance = next(s for s in code if "run_provenance(" in s)
    assert '"method": method_label(m)' in provenance and "blocks_overview(profile)" in provenance
    if (ROOT / "results" / "blocks" / "tiny").is_dir():
        methods = " ".join(blocks_overview("tiny")["methods"])
        assert "Table 3: child mean, difference to the parent" in methods
        assert "credit_" not in methods and "ablation_" not in methods
