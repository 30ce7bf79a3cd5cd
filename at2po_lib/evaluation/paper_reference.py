"""The paper's published numbers, for putting toy-scale or reproduced results beside them.

Table 1's "Avg" columns are **sample-weighted** (a micro-average over all questions of the
group, docs/method.md §4), not the mean of the dataset columns:

    Avg_group = Σ_d n_d · EM_d / Σ_d n_d      (n_d = test split size of dataset d)

Weighting by the split sizes reproduces 34 of the 38 published averages within 0.02; the other
four differ by 0.03 to 0.12 (docs/method.md §11, item 8). :func:`check_published_averages` shows it.
"""

from __future__ import annotations

from importlib import resources

import pandas as pd

MULTIHOP = ("hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
SINGLEHOP = ("nq", "triviaqa", "popqa")


def _read(name: str) -> pd.DataFrame:
    with resources.files("at2po_lib.reference").joinpath(name).open() as handle:
        return pd.read_csv(handle)


def published_table1() -> pd.DataFrame:
    """Tidy Table 1: columns backbone, method, dataset, em (EM ×100)."""
    return _read("paper_table1.csv")


def published_table2() -> pd.DataFrame:
    """Table 2 (Qwen3-4B progressive ablation): step, configuration, method, multihop_avg."""
    return _read("table2_ablation.csv")


def split_sizes() -> pd.DataFrame:
    """Test split sizes: dataset, group, flashrag_name, split, size."""
    return _read("dataset_splits.csv")


def sample_weighted_average(em: pd.Series, sizes: pd.Series) -> float:
    """Σ n_d EM_d / Σ n_d over the datasets present in both series (indexed by dataset)."""
    common = em.index.intersection(sizes.index)
    if common.empty:
        raise ValueError("no dataset in common between the EM values and the split sizes")
    weights = sizes.loc[common].astype(float)
    return float((em.loc[common] * weights).sum() / weights.sum())


def check_published_averages() -> pd.DataFrame:
    """Recompute every published Avg cell from its row; one row per (backbone, method, group)
    with the published value, the recomputed sample-weighted and plain means, and the gap."""
    table = published_table1()
    sizes = split_sizes().set_index("dataset")["size"]
    rows = []
    for (backbone, method), block in table.groupby(["backbone", "method"], sort=False):
        em = block.set_index("dataset")["em"]
        for group, datasets in (("multihop", MULTIHOP), ("singlehop", SINGLEHOP)):
            published = em.get(f"{group}_avg")
            if published is None or not all(d in em.index for d in datasets):
                continue
            cells = em.loc[list(datasets)]
            weighted = sample_weighted_average(cells, sizes)
            rows.append(
                {
                    "backbone": backbone,
                    "method": method,
                    "group": group,
                    "published": float(published),
                    "sample_weighted": round(weighted, 4),
                    "plain_mean": round(float(cells.mean()), 4),
                    "gap": round(abs(weighted - float(published)), 4),
                }
            )
    return pd.DataFrame(rows)
