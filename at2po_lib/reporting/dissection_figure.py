r"""The dissection in two pictures: why AT2PO's credit is the child mean here, and how much an
expansion score could find.

- **Left, credit.** Every sibling set of AT2PO's saved trees (first and last rollout step of
  each run, sampled-token NLL as the authors' code scores a turn): the distance of its softmax
  weights from the child mean, mean |w − 1/n|, against Δ/n (Δ: the siblings' entropy range).
  A softmax ignores a common shift, so the points lie under the line c·Δ/n with c ≤ ½; the
  fitted c is drawn. Small Δ, small distance: the weights stay near 1/n.
- **Right, expansion.** Per policy and tree shape, the flips per re-sample of the turns each
  score would pick, as a multiple of uniform picks (1 = no better than chance), with the
  oracle's 95% interval over prompts; the perfect picker (held-out halves) is a lower bound
  on the ceiling on that shape.

Notebook 03 draws the credit and loss parts closer up: the credit panel for both entropy
estimates (:func:`credit_spread_figure`), the credit AUC against TinyWorld's truth as the
softmax sharpens (:func:`credit_temperature_figure` over :func:`credit_temperature_rows`), and
the clipped shares per run at both ratio levels (:func:`clip_levels_figure`).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Iterable

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..analysis.dissection import credit_from_runs, spread_slope
from .dissection_summary import (
    ORACLE_POLICIES,
    ORACLE_SHAPES,
    credit_record_label,
    credit_records,
    default_credit_cells,
)
from .labels import method_label


def wrapped_label(method: str, width: int = 24) -> str:
    """A method's display name (:func:`.labels.method_label`), broken into lines of about
    ``width`` characters for a tick label."""
    return "\n".join(textwrap.wrap(method_label(method), width))


SCORES_SHOWN = {
    "authors_score": "authors' score\n(NLL − α·b)",
    "entropy_exact": "mean exact\nentropy",
    "entropy_nll_first": "first-token\nNLL",
    "depth": "depth",
    "oracle": "perfect picker\n(lower bound)",
}
"""The oracle's scores drawn, left to right (every score is in its summary CSV)."""


ESTIMATE_LABELS = {
    "nll": "mean sampled-token NLL (the authors' score)",
    "exact": "mean exact entropy",
}


def _credit_panel(ax, sets: pd.DataFrame, estimate: str = "nll") -> None:
    for stage, colour in (("first", "tab:blue"), ("last", "tab:orange")):
        part = sets[(sets["estimate"] == estimate) & (sets["stage"] == stage)]
        if not len(part):
            continue
        ax.scatter(
            part["range"] / part["n"],
            part["dev"],
            s=9,
            alpha=0.5,
            color=colour,
            label=f"{stage} rollout step ({len(part)} sets)",
        )
    part = sets[sets["estimate"] == estimate]
    x_all = part["range"] / part["n"]
    if len(part) > 20:  # a few wide sets would squeeze the rest into a corner: say how many
        edge = float(np.quantile(x_all, 0.99)) * 1.1
        ax.set_xlim(-0.02 * edge, edge)
        shown = part.loc[x_all <= edge, "dev"]
        ax.set_ylim(-0.02 * shown.max(), 1.1 * shown.max())
        beyond = int((x_all > edge).sum())
        if beyond:
            ax.text(
                0.98,
                0.02,
                f"{beyond} set(s) beyond the right edge",
                ha="right",
                va="bottom",
                fontsize=7,
                transform=ax.transAxes,
            )
    if len(part):
        c = spread_slope(part)
        x = np.linspace(0, float(x_all.max()), 50)
        ax.plot(x, c * x, color="black", lw=1.2, label=f"fit: |w − 1/n| = {c:.2f}·Δ/n")
    ax.set_xlabel("Δ / n  (siblings' entropy range over their count, nats)")
    ax.set_ylabel("mean |w − 1/n|")
    ax.set_title("Credit: AT2PO's weights stay near the child mean", fontsize=10)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, frameon=False)
    ax.grid(alpha=0.3)


def _expansion_panel(ax, folder: Path) -> None:
    drawn = 0
    width = 0.8 / max(1, len(ORACLE_POLICIES) * len(ORACLE_SHAPES))
    for policy, policy_label in ORACLE_POLICIES.items():
        for shape, shape_label in ORACLE_SHAPES.items():
            path = folder / f"expansion_oracle_{policy}_{shape}_summary.csv"
            if not path.is_file():
                continue
            summary = pd.read_csv(path).set_index("score")
            scores = [s for s in SCORES_SHOWN if s in summary.index]
            x = np.arange(len(scores)) + drawn * width
            y = summary.loc[scores, "flips_vs_uniform"].to_numpy()
            err = np.vstack(
                [
                    y - summary.loc[scores, "flips_vs_uniform_lo"].to_numpy(),
                    summary.loc[scores, "flips_vs_uniform_hi"].to_numpy() - y,
                ]
            )
            ax.bar(
                x,
                y - 1,
                width,
                bottom=1,
                yerr=err,
                capsize=2,
                label=f"{policy_label}, {shape_label} ({int(summary['prompts'].iloc[0])} prompts)",
            )
            drawn += 1
    if drawn:
        ax.set_xticks(np.arange(len(SCORES_SHOWN)) + (drawn - 1) * width / 2)
        ax.set_xticklabels(list(SCORES_SHOWN.values()), fontsize=8)
    ax.axhline(1, color="black", lw=0.8)
    ax.set_ylabel("flips per re-sample vs uniform picks (×)")
    ax.set_title("Expansion: what a score finds, and a floor under the ceiling", fontsize=10)
    if drawn:  # below the axes: off the bars and their error bars
        ax.legend(fontsize=7, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1)
    else:
        ax.text(
            0.5,
            0.5,
            "no expansion-oracle records\n(at2po dissect expansion)",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
    ax.grid(alpha=0.3, axis="y")


def dissection_figure(run_roots: Iterable[Path], folder: Path):
    """``(fig, axes)`` of the module docstring from AT2PO's run folders (their saved trees) and
    the oracle's summaries in ``folder`` (``results/<profile>/dissection``)."""
    sets, _ = credit_from_runs(run_roots, fit=False)
    # one panel per row, 6.4 in wide: 960 px at the report's 150 dpi, its natural size in a
    # notebook column (side by side, 11 in, it showed at 60%)
    fig, axes = plt.subplots(2, 1, figsize=(6.4, 9.6), gridspec_kw={"height_ratios": (1, 1)})
    if len(sets):
        _credit_panel(axes[0], sets)
    else:
        axes[0].text(
            0.5, 0.5, "no saved trees", ha="center", va="center", transform=axes[0].transAxes
        )
    _expansion_panel(axes[1], Path(folder))
    fig.suptitle(
        "What each part of AT2PO does on the toy (TinyWorld, a 1.3M-parameter policy)", fontsize=10
    )
    fig.tight_layout()
    return fig, axes


def credit_spread_figure(run_roots: Iterable[Path]):
    """``(fig, axes)``: the credit panel of :func:`dissection_figure` once per entropy estimate
    (sampled-token NLL, exact), from the same sibling sets of the runs' saved trees."""
    sets, _ = credit_from_runs(run_roots, fit=False)
    fig, axes = plt.subplots(len(ESTIMATE_LABELS), 1, figsize=(6.4, 7.6))  # one per row
    for ax, (estimate, label) in zip(axes, ESTIMATE_LABELS.items()):
        if len(sets):
            _credit_panel(ax, sets, estimate)
        else:
            ax.text(0.5, 0.5, "no saved trees", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(f"turn entropy = {label}", fontsize=10)
    fig.tight_layout()
    return fig, axes


def credit_temperature_rows(profile: str) -> pd.DataFrame:
    """AT2PO's default credit against GRPO's on the same turns, per softmax temperature τ and
    credit-accuracy record of ``profile`` (:func:`.dissection_summary.credit_records`:
    ``default`` is ``credit_accuracy.csv``, else the record's ``--name``)."""
    columns = [
        "record",
        "softmax_temperature",
        "auc",
        "delta_vs_grpo",
        "delta_low",
        "delta_high",
        "n_prompts",
        "n_turns",
        "trees",
    ]
    parts = [
        default_credit_cells(pd.read_csv(path)).assign(
            record=name, trees=credit_record_label(name, path)
        )[columns]
        for name, path in credit_records(profile).items()
    ]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)


def credit_temperature_table(rows: pd.DataFrame) -> pd.DataFrame:
    """:func:`credit_temperature_rows` as a reader reads them: one row per record (``trees``)
    and τ, AT2PO's credit AUC, its difference to GRPO's with the paired 95% interval over
    prompts (``+0.002 [+0.000, +0.004]``), prompts and turns; no record columns."""
    return pd.DataFrame(
        {
            "trees": rows["trees"],
            "softmax temperature τ": rows["softmax_temperature"],
            "credit AUC, AT2PO": rows["auc"].map(lambda v: f"{v:.3f}"),
            "AT2PO − GRPO [95% CI]": [
                f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]"
                for d, lo, hi in zip(rows["delta_vs_grpo"], rows["delta_low"], rows["delta_high"])
            ],
            "prompts": rows["n_prompts"].astype(int),
            "turns": rows["n_turns"].astype(int),
        }
    ).set_index(["trees", "softmax temperature τ"])


def credit_temperature_figure(rows: pd.DataFrame):
    """``(fig, ax)``: AT2PO's credit AUC minus GRPO's against τ (log axis; τ = 1 is AT2PO as
    defined), one line per record with its paired 95% interval over prompts."""
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for record, part in rows.groupby("record", sort=False):
        shown = part["trees"].iat[0] if "trees" in part else record
        x = part["softmax_temperature"].to_numpy()
        y = part["delta_vs_grpo"].to_numpy()
        err = np.vstack([y - part["delta_low"].to_numpy(), part["delta_high"].to_numpy() - y])
        ax.errorbar(
            x,
            y,
            yerr=err,
            marker="o",
            capsize=3,
            label=f"{shown} ({int(part['n_prompts'].iloc[0])} prompts)",
        )
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("softmax temperature τ of the entropy weights (1 = AT2PO as defined)")
    ax.set_ylabel("credit AUC, AT2PO − GRPO")
    ax.set_title("Does sharper entropy weighting find the useful turns better?", fontsize=10)
    if len(rows):  # below the axes: off the lines and their error bars
        ax.legend(fontsize=7, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.22))
    else:
        ax.text(
            0.5,
            0.5,
            "no credit-accuracy records\n(at2po credit-accuracy)",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig, ax


def clip_levels_figure(clips: pd.DataFrame):
    """``(fig, ax)``: per run (a dot) and method, the share of model tokens a token-level and a
    turn-level ratio clip on the same updates at the method's own clip range."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    methods = list(dict.fromkeys(clips["method"]))
    for i, method in enumerate(methods):
        part = clips[clips["method"] == method]
        for j, (level, colour) in enumerate(
            (("token_level", "tab:blue"), ("turn_level", "tab:red"))
        ):
            x = np.full(len(part), i + (j - 0.5) * 0.3)
            ax.scatter(
                x,
                100 * part[level],
                s=14,
                color=colour,
                alpha=0.7,
                label=f"{level.replace('_', '-')} ratio" if i == 0 else None,
            )
            ax.hlines(100 * part[level].mean(), x[0] - 0.12, x[0] + 0.12, color=colour, lw=2)
    ax.set_xticks(range(len(methods)))
    ax.set_xticklabels(
        [f"{wrapped_label(m)}\n({(clips['method'] == m).sum()} runs)" for m in methods], fontsize=8
    )
    ax.set_ylabel("model tokens clipped (%)")
    ax.set_title("The same updates, clipped at the token and at the turn level", fontsize=10)
    if methods:
        ax.legend(fontsize=8, frameon=False)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return fig, ax
