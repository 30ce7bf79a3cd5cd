r"""``at2po report --profile P``: every table and figure of the paper from stored records.

Reads the run folders of ``results/runs/<profile>/`` (no training) and writes, each with a
``.meta.json`` (runs, seeds, git revision):

- ``results/<profile>/tables/table1.{csv,md,tex}`` and ``table1_summary`` (group averages),
  ``table1_differences`` (every method minus GRPO and minus ReAct, CIs), ``table2``, ``table3``,
  ``claims`` (the paper's claims one by one, :mod:`.claims`) and ``credit_accuracy_summary``
  when those runs and studies exist; ``fig3_entropy_change`` (Figure 3's claim in numbers:
  entropy and reward over the first vs the last steps, the change, and each method's change
  minus GRPO's); ``dissection_summary`` (what each part of AT2PO does) and ``why.md`` (the
  toy's result and its reasons in generated sentences,
  :func:`.dissection_summary.why_sentences`, docs/toy_study.md's block ``tiny/why``);
- ``figures/fig3_training_<profile>.{png,pdf}``, ``figures/fig4_turns_<profile>.{png,pdf}`` and,
  once two headline blocks of the study have finished, ``figures/headline_blocks_<profile>``
  (:mod:`.blocks_figure`).

With ``readme=True`` the generated blocks of this profile in the README and the docs pages are
refreshed (:mod:`.readme`).

:func:`current_report` is what notebook 05 calls: the committed tables and figures, read back
(:func:`read_report`, seconds), when their metas say they were computed from exactly the
finished runs and blocks there are now; otherwise :func:`write_report` recomputes them. So the
notebook never shows a table older than the records.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import pandas as pd

from ..analysis.dissection import clip_levels
from ..config.profile import load_profile
from ..method.presets import TABLE1_REPORTED, TABLE2_METHODS
from ..study.block_records import ABLATION_SET, HEADLINE_SET
from ..util.locks import folder_lock
from ..util.paths import figures_dir, recorded_path, results_dir
from ..util.provenance import write_meta
from ..util.writing import all_or_none, write_if_changed
from . import claims, figure3, figure4, table1, table2, table3
from .block_pairs import (
    block_run_paths,
    block_scores,
    blocks_needed,
    block_sources,
    block_times,
    closed_sets,
    load_block_outcomes,
    provenance_table,
    run_provenance,
)
from .budget import budget_display, budget_table
from .conclusions import credit_accuracy_summary
from .curves import format_start_end, start_end_table
from .blocks_figure import headline_blocks_figure
from .dissection_figure import dissection_figure
from .dissection_summary import dissection_summary, why_sentences
from .labels import TABLE3_CELLS, method_label
from .output import read_markdown_table, source_meta, tables_dir, write_figure, write_table
from .readme import update_readme
from ..record.reading import (
    check_seeds,
    discover_runs,
    load_final_evals,
    load_outcomes,
    load_training_records,
)

if TYPE_CHECKING:
    from ..config.profile import ProfileConfig


@dataclass
class Report:
    """What a report call wrote, and the frames behind it (for a notebook to display)."""

    profile: str
    paths: dict[str, dict[str, Path]] = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def summary_display(display: pd.DataFrame) -> pd.DataFrame:
    """Table 1's group-average columns only (the toy study page's compact table)."""
    keep = [c for c in display.columns if "avg" in c or c == "seeds"]
    return display[keep]


def write_report(
    profile: str,
    readme: bool = False,
    figures: bool = True,
    allow_revisions: bool = False,
) -> Report:
    """Write every table and figure that the records of ``profile`` allow (see module doc).

    All or none: every record is read and checked first (:mod:`at2po_lib.record.reading`,
    :func:`~at2po_lib.record.reading.check_seeds`), so a damaged or duplicated record is refused, naming its file, before
    anything is written; a failure while writing puts back every file already rewritten
    (:func:`at2po_lib.util.writing.all_or_none`). The study's blocks
    (``results/blocks/<profile>/``) are read beside the committed runs; ``allow_revisions``
    pairs blocks of several revisions (refused otherwise, naming them)."""
    cfg = load_profile(profile)
    runs = discover_runs(profile)
    outcomes = load_outcomes(profile)
    finals = load_final_evals(profile)
    metrics, evals = load_training_records(profile)
    check_seeds(profile)
    blocks = load_block_outcomes(profile)
    journal = write_journal(profile)
    # one report of a profile at a time (a second one waits): its journal is that report's own;
    # a killed report's is put back by the next one
    with folder_lock(journal, "report", wait=True), all_or_none(journal):
        return _write(
            profile,
            cfg,
            runs,
            outcomes,
            finals,
            metrics,
            evals,
            blocks,
            readme=readme,
            figures=figures,
            allow_revisions=allow_revisions,
        )


def write_journal(profile: str) -> Path:
    """Where a report keeps the earlier bytes of what it rewrites until it is done
    (:func:`at2po_lib.util.writing.all_or_none`): ``results/<profile>/.report-journal``."""
    return results_dir(profile) / ".report-journal"


def _write(
    profile: str,
    cfg: ProfileConfig,
    runs: pd.DataFrame,
    outcomes: pd.DataFrame,
    finals: pd.DataFrame,
    metrics: pd.DataFrame,
    evals: pd.DataFrame,
    blocks: pd.DataFrame,
    *,
    readme: bool,
    figures: bool,
    allow_revisions: bool = False,
) -> Report:
    """:func:`write_report`'s writing, from records already read and checked: Table 1 and its
    companions, Tables 2-3, what each row spends and Figure 3's claim in numbers, the claims,
    then the figures, in that order."""
    report = Report(profile)
    finished = runs.loc[runs["finished"].astype(bool)]
    if finished.empty:
        report.notes.append(
            f"no finished runs under results/runs/{profile}/: only the published numbers are shown"
        )
    meta_for = partial(_meta_for, profile, finished)
    per_seed = _write_table1(report, meta_for, cfg, outcomes, finals)
    _write_tables23(report, meta_for, outcomes)
    _write_tables23_in_blocks(report, meta_for, blocks, allow_revisions)
    _write_headline_blocks(report, meta_for, blocks, figures, allow_revisions)
    _write_block_times(report, meta_for)
    rl = [m for m in TABLE1_REPORTED if m != "react"]
    metrics = metrics[metrics["method"].isin(rl)] if len(metrics) else metrics
    evals = evals[evals["method"].isin(rl)] if len(evals) else evals
    change = _write_spending_and_entropy(report, meta_for, cfg, metrics, finished, rl)
    if len(outcomes) or len(blocks):
        _write_claims(
            report,
            meta_for,
            runs,
            outcomes,
            finished,
            change,
            per_seed,
            blocks,
            figures=figures,
            allow_revisions=allow_revisions,
        )
    if figures:
        _write_figures(report, meta_for, cfg, outcomes, metrics, evals, rl)
    if readme:
        update_readme(profiles={profile})
    return report


def _meta_for(profile: str, finished: pd.DataFrame, methods, writer) -> dict:
    """The meta of a result computed by ``writer`` from the finished runs of ``methods``."""
    return source_meta(
        profile,
        finished.loc[finished["method"].isin(list(methods))],
        writer=writer,
        confidence=0.95,
    )


def _write_table1(
    report: Report,
    meta_for: Callable,
    cfg: ProfileConfig,
    outcomes: pd.DataFrame,
    finals: pd.DataFrame,
) -> pd.DataFrame:
    """Table 1, its group averages, its differences (greedy and sampled EM) and its runs one
    by one; returns the per-seed rows (the claims' summary reads them)."""
    profile = report.profile
    tidy, display = table1.table1(profile, outcomes, finals, cfg.policy.model)
    if len(display):
        meta = meta_for(TABLE1_REPORTED, table1.table1)
        report.paths["table1"] = write_table(
            tidy,
            display,
            "table1",
            profile,
            meta,
            "Table 1: EM x 100 [95% CI] per dataset and group",
        )
        short = summary_display(display)
        report.paths["table1_summary"] = write_table(
            tidy[tidy["column"].str.contains("avg")],
            short,
            "table1_summary",
            profile,
            meta,
            "Table 1, group averages: EM x 100 [95% CI]",
        )
        report.tables.update(table1=display, table1_summary=short)
    for metric, name, what in (
        ("em", "table1_differences", "greedy EM"),
        (
            "sampled_em",
            "table1_differences_sampled",
            "sampled EM (mean of k samples at the training temperature)",
        ),
    ):
        tidy, display = table1.table1_differences(profile, outcomes, metric=metric)
        if len(display):
            report.paths[name] = write_table(
                tidy,
                display,
                name,
                profile,
                meta_for(TABLE1_REPORTED, table1.table1_differences),
                f"Differences in {what} x 100 [95% CI] and probability of improvement",
            )
            report.tables[name] = display
    tidy, display = table1.table1_seeds(profile, outcomes)
    per_seed = tidy
    if len(display):
        report.paths["table1_seeds"] = write_table(
            tidy,
            display,
            "table1_seeds",
            profile,
            meta_for(TABLE1_REPORTED, table1.table1_seeds),
            "Table 1's runs one by one: multi-hop EM x 100 per seed, its spread, and the seeds "
            "a difference to GRPO would need for a seed-level half-width of 2 points",
        )
        report.tables["table1_seeds"] = display
    return per_seed


def _write_tables23_in_blocks(
    report: Report, meta_for: Callable, blocks: pd.DataFrame, allow_revisions: bool
) -> None:
    """Tables 2 and 3 on the authors' configuration, from the study's ablation blocks, written
    whether or not a block has finished (their empty cells say what is still to train)."""
    profile = report.profile
    meta = {"blocks": block_sources(profile), "sources": []}
    for name, build, caption in (
        (
            "table2_blocks",
            table2.table2_in_blocks,
            "Table 2 on the authors' configuration, paired within the ablation blocks: "
            "multi-hop EM x 100",
        ),
        (
            "table3_blocks",
            table3.table3_in_blocks,
            "Table 3 on the authors' configuration, paired within the ablation blocks: "
            "multi-hop EM x 100",
        ),
    ):
        tidy, display = build(profile, blocks, allow_revisions=allow_revisions)
        report.paths[name] = write_table(
            tidy, display, name, profile, {**meta_for((), build), **meta}, caption
        )
        report.tables[name] = display


def why_for(
    profile: str, claims: pd.DataFrame, parts: pd.DataFrame, blocks: pd.DataFrame | None = None
) -> list[str]:
    """The sentences of ``why.md`` (docs/toy_study.md's block ``tiny/why``) as the report writes
    them, from ``claims`` (``claims.csv``), ``parts`` (the dissection summary's tidy rows) and
    the study's finished ``blocks`` (read when not given): the headline's projection while its
    set is open, the ablation's counts, and the sets the looks rule closed. Notebook 05 prints
    the same."""
    if blocks is None:
        blocks = load_block_outcomes(profile)
    return why_sentences(
        claims,
        parts,
        results_dir(profile, "dissection"),
        blocks_needed(blocks, HEADLINE_SET, "at2po", "grpo"),
        ablation_blocks(blocks),
        closed_sets(blocks),
    )


def ablation_blocks(blocks: pd.DataFrame) -> tuple[int, int] | None:
    """(finished ablation blocks, Table 3 cells they train: the Holm family of their tests),
    or None before the first finished ablation block."""
    if blocks.empty:
        return None
    rows = blocks[blocks["block_set"] == ABLATION_SET]
    cells = rows.loc[rows["method"].isin(TABLE3_CELLS), "method"].nunique()
    return (int(rows["block"].nunique()), int(cells)) if cells else None


def _write_block_times(report: Report, meta_for: Callable) -> None:
    """What each finished block of the study cost (:func:`block_times`, from the blocks'
    records alone), once one has finished."""
    tidy, display = block_times(report.profile)
    if display.empty:
        return
    report.paths["block_times"] = write_table(
        tidy,
        display,
        "block_times",
        report.profile,
        {**meta_for((), block_times), "blocks": block_sources(report.profile), "sources": []},
        "What each finished block of the study cost: its runs' wall times and the time from "
        "its start to its swap",
    )
    report.tables["block_times"] = display


def _write_headline_blocks(
    report: Report,
    meta_for: Callable,
    blocks: pd.DataFrame,
    figures: bool = True,
    allow_revisions: bool = False,
) -> None:
    """The headline blocks one by one (once one has finished): what the paired interval and
    the sign-flip test of the headline claims read, block by block; with ``figures`` their
    picture (:mod:`.blocks_figure`, from two blocks on)."""
    tidy, display = block_scores(report.profile, blocks, HEADLINE_SET)
    if display.empty:
        return
    report.paths["headline_blocks"] = write_table(
        tidy,
        display,
        "headline_blocks",
        report.profile,
        {**meta_for((), block_scores), "blocks": block_sources(report.profile), "sources": []},
        "The headline blocks one by one: each method's multi-hop EM x 100, and AT2PO minus "
        "each other method within the block",
    )
    report.tables["headline_blocks"] = display
    fig = (
        headline_blocks_figure(report.profile, blocks, allow_revisions=allow_revisions)
        if figures
        else None
    )
    if fig is not None:
        report.paths["headline_blocks_figure"] = write_figure(
            fig,
            "headline_blocks",
            report.profile,
            {
                **meta_for((), headline_blocks_figure),
                "blocks": block_sources(report.profile),
                "sources": [],
            },
        )
        plt.close(fig)


def _write_tables23(report: Report, meta_for: Callable, outcomes: pd.DataFrame) -> None:
    """Table 2 (the progressive ablation), Table 3 (credit variants) and the credit-accuracy
    summary when its study exists."""
    profile = report.profile
    tidy, display = table2.table2(profile, outcomes)
    report.paths["table2"] = write_table(
        tidy,
        display,
        "table2",
        profile,
        meta_for(TABLE2_METHODS, table2.table2),
        "Table 2: progressive ablation, multi-hop EM x 100",
    )
    report.tables["table2"] = display
    tidy, display = table3.table3(profile, outcomes)
    if len(display):
        report.paths["table3"] = write_table(
            tidy,
            display,
            "table3",
            profile,
            meta_for(tidy["method"], table3.table3),
            "Table 3: credit variants, multi-hop EM x 100",
        )
        report.tables["table3"] = display
    accuracy = table3.load_credit_accuracy(profile)
    if accuracy is not None:
        report.tables["credit_accuracy"] = accuracy
        summary = credit_accuracy_summary(accuracy)
        if len(summary):
            report.paths["credit_accuracy_summary"] = write_table(
                accuracy,
                summary,
                "credit_accuracy_summary",
                profile,
                {
                    **source_meta(profile, writer=credit_accuracy_summary),
                    **table3.credit_accuracy_provenance(profile),
                },
                "Credit against the truth: AUC of each credit mode's turn advantages for "
                "useful vs useless turns [95% CI over prompts], and the difference to GRPO's",
            )
            report.tables["credit_accuracy_summary"] = summary


def _write_spending_and_entropy(
    report: Report,
    meta_for: Callable,
    cfg: ProfileConfig,
    metrics: pd.DataFrame,
    finished: pd.DataFrame,
    rl: list[str],
) -> pd.DataFrame:
    """What each Table 1 row spends per step, and Figure 3's claim in numbers (entropy and
    reward over the first vs the last steps); returns that change table."""
    profile = report.profile
    if len(metrics):
        spent = budget_table(metrics, finished, cfg.train.prompts_per_step, rl)
        if len(spent):
            shown = budget_display(spent)
            report.paths["table1_budget"] = write_table(
                spent,
                shown,
                "table1_budget",
                profile,
                meta_for(spent["method"], budget_table),
                "What each Table 1 row spends per step: trajectories, generated and trained "
                "policy tokens (means over steps, then seeds)",
            )
            report.tables["table1_budget"] = shown
    # Figure 3's claim in numbers: entropy (and reward) over the first vs the last steps
    change = start_end_table(
        metrics,
        ["entropy", "reward"],
        baseline="grpo" if "method" in metrics and (metrics["method"] == "grpo").any() else None,
    )
    if len(change):
        order = {m: i for i, m in enumerate(rl)}
        change = change.sort_values(
            "method", key=lambda c: c.map(order), kind="stable", ignore_index=True
        )
        change.insert(0, "profile", profile)
        shown = format_start_end(change, flat=True)
        shown.index = [method_label(m) for m in shown.index]
        shown.index.name = "method"
        report.paths["fig3_entropy_change"] = write_table(
            change,
            shown,
            "fig3_entropy_change",
            profile,
            meta_for(change["method"], start_end_table),
            "Policy entropy and reward over the first and last steps (at most 8 each), their "
            "change, and the change minus GRPO's: mean over seeds [95% t / Welch interval]",
        )
        report.tables["fig3_entropy_change"] = shown
    return change


def _shown_path(path: Path) -> str:
    """``path`` as a document at the repository's root links it: as records hold it, the same
    wherever ``AT2PO_RESULTS`` puts the results (:func:`recorded_path`)."""
    return recorded_path(path)


def _write_claims(
    report: Report,
    meta_for: Callable,
    runs: pd.DataFrame,
    outcomes: pd.DataFrame,
    finished: pd.DataFrame,
    change: pd.DataFrame,
    per_seed: pd.DataFrame,
    blocks: pd.DataFrame,
    *,
    figures: bool,
    allow_revisions: bool = False,
) -> None:
    """The paper's claims one by one (paired within the study's blocks where they hold the
    pair), their summary page, the dissection's summary and (with ``figures``) its figure."""
    profile = report.profile
    clips = clip_levels(Path(p) for p in finished["path"])
    provenance = run_provenance(Path(p) for p in finished["path"])
    tidy, display = claims.claims_table(
        profile,
        outcomes,
        change,
        clips=clips,
        provenance=provenance,
        blocks=blocks,
        allow_revisions=allow_revisions,
        block_clips=clip_levels(block_run_paths(profile, "at2po")),
    )
    report.paths["claims"] = write_table(
        tidy,
        display,
        "claims",
        profile,
        {
            **meta_for(outcomes["method"].unique(), claims.claims_table),
            "blocks": block_sources(profile),
        },
        "The paper's claims at toy scale: each as one number with its 95% CI",
    )
    report.tables["claims"] = display
    current_path = tables_dir(profile) / "claims_current.md"
    write_if_changed(
        current_path,
        claims.current_claims(tidy, display, _shown_path(report.paths["claims"]["md"])),
    )
    write_meta(
        current_path,
        {
            **meta_for(outcomes["method"].unique(), claims.current_claims),
            "blocks": block_sources(profile),
            "table": "claims_current",
            "files": [current_path.name],
        },
    )
    report.paths["claims_current"] = {"md": current_path}
    rests = provenance_table(provenance, blocks)
    if len(rests):
        shown = rests.assign(method=rests["method"].map(method_label)).set_index("method")
        report.paths["provenance"] = write_table(
            rests,
            shown,
            "provenance",
            profile,
            {
                **meta_for(outcomes["method"].unique(), provenance_table),
                "blocks": block_sources(profile),
            },
            "What every method's rows rest on: the committed runs (the earlier record) with "
            "their revisions and machine builds, and the study's finished blocks",
        )
        report.tables["provenance"] = shown
    summary_path = tables_dir(profile) / "claims_summary.md"
    write_if_changed(summary_path, claims.claims_summary(tidy, runs, per_seed, provenance, blocks))
    write_meta(
        summary_path,
        {
            **meta_for(outcomes["method"].unique(), claims.claims_summary),
            "table": "claims_summary",
            "files": [summary_path.name],
        },
    )
    report.paths["claims_summary"] = {"md": summary_path}
    shows_path = tables_dir(profile) / "toy_shows.md"
    write_if_changed(shows_path, claims.toy_shows(tidy))
    write_meta(
        shows_path,
        {
            **meta_for(outcomes["method"].unique(), claims.toy_shows),
            "table": "toy_shows",
            "files": [shows_path.name],
        },
    )
    report.paths["toy_shows"] = {"md": shows_path}
    parts, shown = dissection_summary(profile, tidy)
    if len(parts):
        report.paths["dissection_summary"] = write_table(
            parts,
            shown,
            "dissection_summary",
            profile,
            {
                **meta_for(outcomes["method"].unique(), dissection_summary),
                "dissection_records": sorted(
                    f.name for f in results_dir(profile, "dissection").glob("*.csv")
                ),
            },
            "What each part of AT2PO does on the toy: the dissection's records and the "
            "claims that put the parts together",
        )
        report.tables["dissection_summary"] = shown
        why_path = tables_dir(profile) / "why.md"
        write_if_changed(
            why_path,
            "\n\n".join(why_for(profile, tidy, parts, blocks)) + "\n",
        )
        write_meta(
            why_path,
            {
                **meta_for(outcomes["method"].unique(), why_sentences),
                "table": "why",
                "files": [why_path.name],
            },
        )
        report.paths["why"] = {"md": why_path}
    if figures:
        at2po_runs = [Path(p) for p in finished.loc[finished["method"] == "at2po", "path"]]
        fig, _ = dissection_figure(at2po_runs, results_dir(profile, "dissection"))
        report.paths["dissection"] = write_figure(
            fig,
            "dissection",
            profile,
            {
                **meta_for(["at2po"], dissection_figure),
                "dissection_records": sorted(
                    f.name for f in results_dir(profile, "dissection").glob("*_summary.csv")
                ),
            },
        )
        plt.close(fig)


def _write_figures(
    report: Report,
    meta_for: Callable,
    cfg: ProfileConfig,
    outcomes: pd.DataFrame,
    metrics: pd.DataFrame,
    evals: pd.DataFrame,
    rl: list[str],
) -> None:
    """Figure 3 (training curves) and Figure 4 (turns per question) with its turn summary."""
    profile = report.profile
    dataset = (cfg.train.val_datasets or ["tiny_hotpotqa"])[0]
    fig, _ = figure3.figure3(metrics, evals, dataset, rl)
    report.paths["fig3"] = write_figure(
        fig, "fig3_training", profile, meta_for(rl, figure3.figure3)
    )
    plt.close(fig)
    method = next((m for m in ("at2po", "react") if table1.rows_with_outcomes(outcomes, m)), None)
    if method:
        fig, _ = figure4.figure4(outcomes, method)
        report.paths["fig4"] = write_figure(
            fig, "fig4_turns", profile, meta_for([method], figure4.figure4)
        )
        plt.close(fig)
        report.tables["turns"] = figure4.turn_summary(outcomes, method)


STORED_TABLES = (
    "table1",
    "table1_summary",
    "table1_differences",
    "table1_differences_sampled",
    "table1_seeds",
    "table2",
    "table3",
    "table2_blocks",
    "table3_blocks",
    "headline_blocks",
    "credit_accuracy_summary",
    "table1_budget",
    "fig3_entropy_change",
    "claims",
    "dissection_summary",
    "provenance",
)
"""Tables :func:`_write` stores as ``<name>.{csv,md,tex}``, in its order."""
STORED_FIGURES = {
    "dissection": "dissection",
    "fig3": "fig3_training",
    "fig4": "fig4_turns",
    "headline_blocks_figure": "headline_blocks",
}
"""Report key -> figure file stem (``figures/<stem>_<profile>.{png,pdf}``)."""


def _stored_metas(profile: str) -> dict[str, dict]:
    """The metas of every stored table and figure of ``profile`` (key -> meta)."""
    metas = {}
    for name in STORED_TABLES:
        path = tables_dir(profile) / f"{name}.csv.meta.json"
        if path.is_file():
            metas[name] = json.loads(path.read_text())
    for key, stem in STORED_FIGURES.items():
        path = figures_dir() / f"{stem}_{profile}.png.meta.json"
        if path.is_file():
            metas[key] = json.loads(path.read_text())
    return metas


def stale_reason(profile: str) -> str | None:
    """Why the stored tables of ``profile`` cannot stand for a new report (None: they can).

    They can when they were computed from exactly the finished runs there are now (the union of
    their metas' ``sources`` is that set of method, seed) and the claims from exactly the
    finished blocks."""
    metas = _stored_metas(profile)
    if "table1" not in metas or "claims" not in metas:
        return "no stored Table 1 or claims table"
    runs = discover_runs(profile)
    finished = {(str(r.method), int(r.seed)) for r in runs.itertuples() if bool(r.finished)}
    used = {
        (str(s["method"]), int(s["seed"])) for m in metas.values() for s in m.get("sources", [])
    }
    if used != finished:
        missing, gone = sorted(finished - used), sorted(used - finished)
        return f"the stored tables miss {len(missing)} finished run(s) {missing[:4]}" + (
            f" and use {len(gone)} that are gone {gone[:4]}" if gone else ""
        )
    if metas["claims"].get("blocks", []) != block_sources(profile):
        return "the stored claims were read from other finished blocks of the study"
    return None


def read_report(profile: str) -> Report:
    """The stored tables and figures of ``profile`` as a :class:`Report` (display frames read
    from the ``.md`` files), with Figure 4's turn summary and the credit-accuracy records
    recomputed (seconds). Whether they are current is :func:`stale_reason`'s question."""

    report = Report(profile)
    for name in STORED_TABLES:
        folder = tables_dir(profile)
        paths = {ext: folder / f"{name}.{ext}" for ext in ("csv", "md", "tex")}
        if all(p.is_file() for p in paths.values()):
            report.paths[name] = paths
            report.tables[name] = read_markdown_table(paths["md"].read_text())
    for name in ("claims_summary", "claims_current", "toy_shows", "why"):
        text = tables_dir(profile) / f"{name}.md"
        if text.is_file():
            report.paths[name] = {"md": text}
    for key, stem in STORED_FIGURES.items():
        paths = {ext: figures_dir() / f"{stem}_{profile}.{ext}" for ext in ("png", "pdf")}
        if all(p.is_file() for p in paths.values()):
            report.paths[key] = paths
    accuracy = table3.load_credit_accuracy(profile)
    if accuracy is not None:
        report.tables["credit_accuracy"] = accuracy
    outcomes = load_outcomes(profile)
    method = next((m for m in ("at2po", "react") if table1.rows_with_outcomes(outcomes, m)), None)
    if method and "fig4" in report.paths:
        report.tables["turns"] = figure4.turn_summary(outcomes, method)
    return report


def current_report(profile: str) -> Report:
    """The stored report when it is current (:func:`stale_reason`), else a new one
    (:func:`write_report`); a note says which."""
    reason = stale_reason(profile)
    if reason is None:
        report = read_report(profile)
        report.notes.append(
            f"the committed tables and figures, read back: computed from the "
            f"{profile} runs and blocks there are now (`at2po report --profile {profile}` "
            "recomputes them)"
        )
        return report
    report = write_report(profile)
    report.notes.append(f"recomputed from the records: {reason}")
    return report
