r"""Table 2: the progressive ablation, step by step, beside the paper's multi-hop averages.

Steps (docs/method.md §10): (1) GRPO with a random tree, (2) + the ATPO turn-level loss,
(3) + entropy-guided expansion, (4) + turn-wise credit (= AT2PO, read from the AT2PO preset
with the expansion settings steps 1-3 take from the profile: ``at2po_exact`` on ``tiny``). Each row gives the
multi-hop average (sample-weighted, 95% CI) and the change from the previous step, paired over
questions and unpaired over seeds (:func:`at2po_lib.evaluation.stats.difference_ci`); the published
average and published change sit beside it (Qwen3-4B; the paper gives no per-dataset cells).
"""

from __future__ import annotations

import pandas as pd

from ..evaluation import stats
from ..method.presets import TABLE2_METHODS
from ..evaluation.paper_reference import published_table2
from .labels import cell, groups_of, profile_at2po, rows_with_outcomes, signed_cell


def table2(
    profile: str,
    outcomes: pd.DataFrame,
    group: str = "multihop",
    n_resamples: int = stats.DEFAULT_RESAMPLES,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(tidy, display)`` of the ablation steps that have per-question outcomes; the
    published column is always there (the table says which steps are missing)."""
    published = published_table2().set_index("method")
    members = groups_of(outcomes["dataset"].unique()).get(group, []) if len(outcomes) else []
    rows, previous = [], None
    for number, step in enumerate(TABLE2_METHODS, start=1):
        # step 4 is AT2PO with the expansion settings step 3 recorded (at2po_exact on tiny
        # until the study re-runs step 3 with the profile's)
        method = profile_at2po(profile) if step == "at2po" else step
        pub = published.loc[step] if step in published.index else None
        row = {
            "profile": profile,
            "step": number,
            "method": method,
            "configuration": pub["configuration"] if pub is not None else method,
            "published_avg": float(pub["multihop_avg"]) / 100 if pub is not None else None,
        }
        if members and rows_with_outcomes(outcomes, method):
            own = stats.mean_ci(outcomes, method, members, n_resamples=n_resamples)
            row.update(
                em=own.estimate,
                ci_low=own.low,
                ci_high=own.high,
                n_seeds=own.n_seeds_a,
                n_questions=own.n_questions,
            )
            if previous is not None:
                step = stats.difference_ci(
                    outcomes, method, previous, members, n_resamples=n_resamples
                )
                row.update(delta=step.estimate, delta_low=step.low, delta_high=step.high)
            previous = method
        else:
            previous = None  # a missing step breaks the chain of differences
        rows.append(row)
    tidy = pd.DataFrame(rows)
    tidy["published_delta"] = tidy["published_avg"].diff()
    display = pd.DataFrame(
        {
            "step": tidy["step"],
            "configuration": tidy["configuration"],
            "toy avg [95% CI]": [
                cell(r.get("em"), r.get("ci_low"), r.get("ci_high")) for r in rows
            ],
            "toy Δ step [95% CI]": [
                signed_cell(r["delta"], r["delta_low"], r["delta_high"]) if "delta" in r else "–"
                for r in rows
            ],
            "seeds": [r.get("n_seeds", "–") for r in rows],
            "published avg": [f"{100 * v:.2f}" for v in tidy["published_avg"]],
            "published Δ": ["–" if v != v else f"{100 * v:+.2f}" for v in tidy["published_delta"]],
        }
    ).set_index("step")
    return tidy, display
