r"""The study's blocks read for the report, and methods paired within them.

``at2po study --block-set`` (:mod:`at2po_lib.study.blocks`) trains one seed of every method of
a set per block, on one machine, at one revision. Here the finished blocks' runs are read with
their block's record (:func:`load_block_outcomes`), and a difference A − B is paired within
blocks: the interval over block differences crossed with the question term
(:func:`at2po_lib.evaluation.stats.blocked_difference_interval`) and a sign-flip permutation test over the
blocks (:func:`at2po_lib.evaluation.stats.sign_flip_test`).

**Not across revisions unless asked.** Blocks trained at different revisions (or with other
``--set`` overrides) are not paired silently: :func:`blocked_difference` refuses them, naming
each block and its revision, unless ``allow_revisions`` (``at2po report
--pair-across-revisions``).

The committed runs under ``results/runs/`` are the earlier record; :func:`run_provenance`
names the revision, machine build and torch threads each of them ran with, so every row can
say what it rests on (:func:`rests_on`).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import pandas as pd

from ..evaluation import stats
from ..study.block_records import (
    ABLATION_SET,
    BLOCK_RECORD,
    HEADLINE_SET,
    block_problems,
    blocks_dir,
    folder_block,
    read_block,
)
from ..util.errors import RecordError
from ..util.provenance import TIME_FORMAT, machine_build
from .labels import cell, groups_of, method_label
from ..record.reading import read_outcomes, run_fingerprints

BLOCK_COLUMNS = ("block_set", "block", "commit", "clean", "build", "torch_threads", "overrides")
"""What each block row carries from its ``BLOCK.json``."""

CLOSED_AT = {HEADLINE_SET: 15, ABLATION_SET: 9}
"""The looks rule now in force (docs/toy_study.md, "The looks the study took"): the toy study's
headline set is closed at 15 blocks and its ablation set at 9. Once a set's finished blocks
reach that count its verdicts are final: no block is added for its claims, and the report
projects no further blocks for it. A set not listed here is open."""


def finished_count(blocks: pd.DataFrame, block_set: str) -> int:
    """How many blocks of ``block_set`` the rows of :func:`load_block_outcomes` hold."""
    if blocks.empty:
        return 0
    return int(blocks.loc[blocks["block_set"] == block_set, "block"].nunique())


def closed_sets(blocks: pd.DataFrame) -> dict[str, int]:
    """{set: the count it is closed at} for every set whose finished blocks reached it."""
    return {name: n for name in CLOSED_AT if (n := closed_at(blocks, name)) is not None}


def closed_at(blocks: pd.DataFrame, block_set: str) -> int | None:
    """The count ``block_set`` is closed at (:data:`CLOSED_AT`) once its finished blocks have
    reached it, else None (an open set, or one still short of its count)."""
    count = CLOSED_AT.get(block_set)
    if count is None or finished_count(blocks, block_set) < count:
        return None
    return count


def _finished_records(profile: str) -> Iterator[tuple[Path, int, dict]]:
    """(set folder, block, record) of every finished block of ``profile``, sets by name, each
    checked against its folder and its set first (:func:`_checked_set`)."""
    root = blocks_dir(profile)
    for set_folder in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        for block, record in _checked_set(set_folder).items():
            yield set_folder, block, record


def block_run_paths(profile: str, method: str) -> list[Path]:
    """The run folders of ``method`` in every finished block of ``profile`` (every set)."""
    return [
        set_folder / f"block{block:02d}" / method / f"seed{record['seed']}"
        for set_folder, block, record in _finished_records(profile)
        if method in record.get("runs", {})
    ]


def _checked_set(set_folder: Path) -> dict[int, dict]:
    """Block number → record of the finished blocks in ``set_folder``, refused (naming the
    file and the block) unless every entry named ``block…`` is a real ``block<BB>`` folder and
    every finished record agrees with its folder and its set: block number, set, seed, run
    names that are the set's methods, every method's run folder
    (:func:`at2po_lib.study.block_records.block_problems`). A block never drops out, nor
    counts twice, without a word."""
    found = {}
    for folder in sorted(set_folder.iterdir()):
        if not folder.name.startswith("block"):  # unfinished/, staging folders, locks
            continue
        block = folder_block(folder)
        if block is None or folder.is_symlink() or not folder.is_dir():
            raise RecordError(
                f"{folder}: not a block folder of block set {set_folder.name} (block<BB>, a "
                "real folder): a copy or a link would be read as a block; move it away"
            )
        record = read_block(folder)
        if not record or record.get("status") != "finished":
            continue
        if problems := block_problems(folder, record, set_folder.name, whole=True):
            raise RecordError(
                f"{folder / BLOCK_RECORD}: block {block} of {set_folder.name}: "
                f"{'; '.join(problems)}"
            )
        found[block] = record
    return found


def load_block_outcomes(profile: str) -> pd.DataFrame:
    """Per-question outcomes of every finished block's runs (all block sets of ``profile``),
    with the block's record (:data:`BLOCK_COLUMNS`); empty when there is no finished block.
    Refused, naming the file and the block: a run whose own records (``DONE.json``,
    ``meta.json``) name another config hash, seed, method, block or revision than its block
    records, and two runs with the same outcomes or training metrics (a copied run,
    :func:`at2po_lib.record.reading.run_fingerprints`)."""
    frames = []
    seen: dict[tuple[str, str], Path] = {}
    for set_folder, block, record in _finished_records(profile):
        folder = set_folder / f"block{block:02d}"
        for method, run in record.get("runs", {}).items():
            frames.append(_run_outcomes(folder, method, record, run))
            _check_not_a_copy(folder / method / f"seed{record['seed']}", seen)
    if not frames:
        return pd.DataFrame(
            columns=["method", "seed", *BLOCK_COLUMNS, "dataset", "question_id", "em"]
        )
    return pd.concat(frames, ignore_index=True)


def _run_outcomes(folder: Path, method: str, record: dict, run: dict) -> pd.DataFrame:
    path = folder / method / f"seed{record['seed']}"
    done = json.loads((path / "DONE.json").read_text())
    if done.get("config_hash") != run.get("config_hash"):
        raise RecordError(
            f"{path / 'DONE.json'}: config hash {done.get('config_hash')} is not "
            f"the one {folder / BLOCK_RECORD} records ({run.get('config_hash')})"
        )
    meta = json.loads((path / "meta.json").read_text())
    _check_run_meta(path / "meta.json", meta, folder, method, record)
    if str(meta.get("git_revision", "")).removesuffix("-dirty") != record["commit"]:
        raise RecordError(
            f"{path / 'meta.json'}: revision {meta.get('git_revision')} is not its "
            f"block's ({record['commit']}, {folder / BLOCK_RECORD}): a run of "
            "another process in this block"
        )
    frame = read_outcomes(path / "outcomes.csv")
    frame.insert(0, "seed", record["seed"])
    frame.insert(0, "method", method)
    for column in BLOCK_COLUMNS:
        value = record.get(column)
        frame[column] = json.dumps(value, sort_keys=True) if column == "overrides" else value
    return frame


def _check_run_meta(path: Path, meta: dict, folder: Path, method: str, record: dict) -> None:
    """The run's own record names the seed, the method and the block its block records."""
    own = meta.get("block") if isinstance(meta.get("block"), dict) else {}
    said = {
        "seed": meta.get("seed"),
        "method": meta.get("method"),
        "block": own.get("block"),
        "block set": own.get("block_set"),
    }
    wanted = {
        "seed": record["seed"],
        "method": method,
        "block": record["block"],
        "block set": record["block_set"],
    }
    if differ := [k for k in wanted if said[k] != wanted[k]]:
        named = ", ".join(f"{k} {said[k]!r} (the block: {wanted[k]!r})" for k in differ)
        raise RecordError(
            f"{path}: {named}: not the run {folder / BLOCK_RECORD} records (block "
            f"{record['block']} of {record['block_set']})"
        )


def _check_not_a_copy(path: Path, seen: dict[tuple[str, str], Path]) -> None:
    """No two runs of the profile's blocks with the same outcomes or training metrics."""
    for name, digest in run_fingerprints(path).items():
        first = seen.setdefault((name, digest), path)
        if first != path:
            raise RecordError(
                f"{path / name}: the same {name} as {first / name}: a copied run, which would "
                "count as another block or seed and narrow every interval; remove the copy"
            )


def set_rows(
    blocks: pd.DataFrame, block_set: str, group: str = "multihop"
) -> tuple[pd.DataFrame, list[str]]:
    """The rows of one block set (of :func:`load_block_outcomes`) and the datasets of its
    ``group`` that they answer (none when the set has no finished block)."""
    rows = blocks[blocks["block_set"] == block_set] if len(blocks) else blocks
    return rows, groups_of(rows["dataset"].unique()).get(group, []) if len(rows) else []


def block_scores(
    profile: str,
    blocks: pd.DataFrame,
    block_set: str,
    group: str = "multihop",
    half_width: float = stats.PLANNING_HALF_WIDTH,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The blocks of ``block_set`` one by one: each method's ``group`` average (greedy EM over
    the group's questions, each question once), and AT2PO minus each other method block by
    block, the differences the paired interval and the sign-flip test read
    (:func:`blocked_difference`); under them their mean and standard deviation over blocks,
    and, while the set is open (:func:`closed_at`), the blocks a difference would need for a
    ±``half_width`` interval if its block differences kept that standard deviation
    (:func:`stats.blocks_for_half_width`, a rough guide from the blocks so far). A closed set
    shows no such row: its count is final, and a projection would invite more blocks.

    ``(tidy, display)``; tidy: one row per (block, method), with the block's seed, revision
    and machine build. Both empty when the set has no finished block."""
    tidy = _block_averages(blocks, block_set, group)
    if tidy.empty:
        return pd.DataFrame(), pd.DataFrame()
    keys = ["block", "seed", "commit", "build"]
    tidy.insert(0, "block_set", block_set)
    tidy.insert(0, "profile", profile)
    wide = tidy.pivot(index=keys, columns="method", values=group).sort_index()
    methods = list(dict.fromkeys(tidy["method"]))  # the order the blocks trained them
    reference = "at2po" if "at2po" in methods else methods[0]
    table = wide[methods].rename(columns=method_label)
    differences = []
    for method in methods:
        if method != reference:
            column = f"{method_label(reference)} − {method_label(method)}"
            table[column] = wide[reference] - wide[method]
            differences.append(column)
    sd = table.std(ddof=1)
    display = table.map(cell).astype(object)
    display[differences] = table[differences].map(_signed)
    rows = [
        {c: _signed(v) if c in differences else cell(v) for c, v in table.mean().items()},
        {c: cell(v) for c, v in sd.items()},
    ]
    labels = [("mean", "", "", ""), (f"sd over {len(table)} blocks", "", "", "")]
    if closed_at(blocks, block_set) is None:  # open: how far its blocks would have to go
        rows.append(
            {
                c: _count(
                    stats.blocks_for_half_width(sd[c], half_width) if c in differences else None
                )
                for c in table.columns
            }
        )
        labels.append((f"blocks for ±{100 * half_width:.0f} at this sd", "", "", ""))
    summary = pd.DataFrame(rows, index=pd.MultiIndex.from_tuples(labels))
    display = pd.concat([display, summary])
    display.index.names = keys
    display = display.reset_index(["seed", "commit", "build"])  # indexed by block
    display["commit"] = display["commit"].str[:7]
    return tidy, display.rename(columns={"commit": "revision"})


def _block_averages(blocks: pd.DataFrame, block_set: str, group: str) -> pd.DataFrame:
    """One row per (block, method) of ``block_set``: the block's seed, revision and build and
    the run's ``group`` average (each question once); empty without a finished block."""
    rows, members = set_rows(blocks, block_set, group)
    if not members:
        return pd.DataFrame()
    keys = ["block", "seed", "commit", "build", "method"]
    scores = rows[rows["dataset"].isin(members)].groupby(keys, sort=False)["em"]
    return scores.mean().rename(group).reset_index()


def blocks_needed(
    blocks: pd.DataFrame,
    block_set: str,
    method_a: str,
    method_b: str,
    group: str = "multihop",
    half_width: float = stats.PLANNING_HALF_WIDTH,
) -> int | None:
    """The blocks A − B would need for a ±``half_width`` interval if its block differences
    kept the spread they have so far (:func:`stats.blocks_for_half_width`); None before two
    blocks hold both methods, and None once the set is closed (:func:`closed_at`): a closed
    set's count is final, so no projection is offered for it."""
    if closed_at(blocks, block_set) is not None:
        return None
    averages = _block_averages(blocks, block_set, group)
    if averages.empty:
        return None
    wide = averages.pivot(index="block", columns="method", values=group)
    if not {method_a, method_b} <= set(wide.columns):
        return None
    differences = (wide[method_a] - wide[method_b]).dropna()
    if len(differences) < 2:
        return None
    return stats.blocks_for_half_width(float(differences.std(ddof=1)), half_width)


def _signed(difference: float) -> str:
    """``+3.7`` (×100 points), ``–`` when missing."""
    return "–" if difference != difference else f"{100 * difference:+.1f}"


def _count(blocks: int | None) -> str:
    return "–" if blocks is None else str(blocks)


def blocks_overview(profile: str) -> pd.DataFrame:
    """One row per finished block of ``profile`` (every set): set, block, seed, revision and
    whether the checkout was clean, machine build, torch threads, the methods it trained, the
    runs an earlier process of it trained (``at2po study --keep-finished-runs``) and when it
    finished; read from the ``BLOCK.json`` records alone (no outcomes). Methods by their
    labels (:func:`~.labels.method_label`), separated by semicolons (a label holds commas)."""
    rows = []
    for set_folder, block, record in _finished_records(profile):
        rows.append(
            {
                "block set": set_folder.name,
                "block": block,
                "seed": record["seed"],
                "revision": record["commit"][:7],
                "clean": record["clean"],
                "build": record["build"],
                "threads": record["torch_threads"],
                "methods": "; ".join(map(method_label, record.get("runs", {}))),
                "kept across restarts": "; ".join(
                    method_label(m)
                    for restart in record.get("resumed", [])
                    for m in restart["kept"]
                )
                or "–",
                "finished": record.get("finished", ""),
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "block set",
            "block",
            "seed",
            "revision",
            "clean",
            "build",
            "threads",
            "methods",
            "kept across restarts",
            "finished",
        ],
    )


def block_times(profile: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """What each finished block of ``profile`` (every set) cost, from its ``BLOCK.json``
    alone: its machine build, its runs' wall times (fewest, median and most seconds, and
    AT2PO's), the time from its start to its swap, and the processes that joined it (a shared
    block, ``at2po study --share-blocks``; a process restarted joins again) or kept runs of an
    earlier start (``--keep-finished-runs``).

    The span from start to swap includes any time with no process (a machine's hold ending)
    and whatever else ran beside the runs: the records do not hold either, so the docs say it
    where it matters. ``(tidy, display)``; tidy: one row per block, seconds; both empty
    without a finished block."""
    rows = []
    for set_folder, block, record in _finished_records(profile):
        walls = {m: float(run["wall_time"]) for m, run in record.get("runs", {}).items()}
        rows.append(
            {
                "profile": profile,
                "block_set": set_folder.name,
                "block": block,
                "seed": record["seed"],
                "build": record["build"],
                "runs": len(walls),
                "run_min_s": min(walls.values(), default=np.nan),
                "run_median_s": statistics.median(walls.values()) if walls else np.nan,
                "run_max_s": max(walls.values(), default=np.nan),
                "at2po_s": walls.get("at2po", np.nan),
                "start_to_swap_s": _span_s(record),
                "joins": len(record.get("joined", [])),
                "restarts": len(record.get("resumed", [])),
            }
        )
    tidy = pd.DataFrame(rows)
    if tidy.empty:
        return tidy, pd.DataFrame()
    display = pd.DataFrame(
        {
            "block set": tidy["block_set"],
            "block": tidy["block"],
            "seed": tidy["seed"],
            "build": tidy["build"],
            "runs": tidy["runs"],
            "a run, min: fewest / median / most": [
                " / ".join(_minutes(r[c]) for c in ("run_min_s", "run_median_s", "run_max_s"))
                for _, r in tidy.iterrows()
            ],
            "AT2PO, min": tidy["at2po_s"].map(_minutes),
            "start to swap": tidy["start_to_swap_s"].map(_hours_minutes),
            "processes joined": tidy["joins"].map(lambda n: str(n) if n else "1 (not shared)"),
            "restarts keeping runs": tidy["restarts"],
        }
    ).set_index(["block set", "block"])
    return tidy, display


def _span_s(record: dict) -> float:
    """Seconds from a block's ``started`` to its ``finished`` (NaN where a record lacks one)."""
    if not (record.get("started") and record.get("finished")):
        return np.nan
    started, finished = (
        datetime.strptime(record[key], TIME_FORMAT) for key in ("started", "finished")
    )
    return (finished - started).total_seconds()


def _minutes(seconds: float) -> str:
    return "–" if seconds != seconds else f"{seconds / 60:.0f}"


def _hours_minutes(seconds: float) -> str:
    if seconds != seconds:
        return "–"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min"


def block_sources(profile: str) -> list[str]:
    """``<set>/block<BB>@<revision>`` of every finished block: what a report read (its meta)."""
    overview = blocks_overview(profile)
    return [
        f"{r['block set']}/block{r['block']:02d}@{r['revision']}" for _, r in overview.iterrows()
    ]


@dataclass(frozen=True)
class BlockedDifference:
    """A − B paired within blocks: the interval, the permutation test, what it rests on."""

    interval: stats.Interval
    test: stats.PermutationTest
    blocks: tuple[int, ...]
    commits: tuple[str, ...]
    builds: dict[str, int]
    threads: tuple[int, ...]
    differences: tuple[float, ...] = ()
    """A − B in each block (fractions, block order): what the interval and the test read."""

    def against(self, value: float) -> stats.PermutationTest:
        """The sign-flip test of the block differences against ``value`` instead of 0 (a
        fraction, e.g. a published gain): is their mean away from it?"""
        return stats.sign_flip_test(np.asarray(self.differences) - value)

    def as_change(self) -> dict:
        """The tidy fields of a table row's change: ``delta`` [``delta_low``, ``delta_high``],
        its sign-flip p, the blocks it pairs and what it rests on."""
        return {
            "delta": self.interval.estimate,
            "delta_low": self.interval.low,
            "delta_high": self.interval.high,
            "p_permutation": self.test.p,
            "delta_blocks": len(self.blocks),
            "rests_on": self.rests_on(),
        }

    def rests_on(self) -> str:
        """``12 blocks at <revision> (build fc-v669 ×12; 1 thread)``."""
        builds = ", ".join(f"{b} ×{n}" for b, n in sorted(self.builds.items()))
        threads = "/".join(str(t) for t in self.threads)
        return (
            f"{len(self.blocks)} blocks at {', '.join(c[:7] for c in self.commits)} "
            f"(build {builds}; {threads} thread{'s' * (threads != '1')})"
        )


def blocked_difference(
    blocks: pd.DataFrame,
    block_set: str,
    method_a: str,
    method_b: str,
    datasets: Sequence[str] | None,
    metric: str = "em",
    *,
    allow_revisions: bool = False,
) -> BlockedDifference | None:
    """A − B over the blocks of ``block_set`` in which both finished (None with fewer than 2):
    paired within blocks (module docstring). Blocks at different revisions or with different
    overrides are refused, naming them, unless ``allow_revisions``."""
    rows = blocks[(blocks["block_set"] == block_set) & blocks["method"].isin([method_a, method_b])]
    if metric != "em":
        rows = rows[rows[metric].notna()] if metric in rows else rows.iloc[:0]
    both = sorted(
        set(rows.loc[rows["method"] == method_a, "block"])
        & set(rows.loc[rows["method"] == method_b, "block"])
    )
    if len(both) < 2:
        return None
    rows = rows[rows["block"].isin(both)]
    per_block = rows.drop_duplicates("block").set_index("block")
    versions = per_block.groupby(["commit", "overrides"]).groups
    if len(versions) > 1 and not allow_revisions:
        named = "; ".join(
            f"block {b}: {per_block.loc[b, 'commit'][:7]}, overrides "
            f"{per_block.loc[b, 'overrides']}"
            for b in both
        )
        raise RecordError(
            f"{method_a} − {method_b} in block set {block_set!r} would pair runs "
            f"across revisions ({named}); pair them anyway with "
            "--pair-across-revisions, or run the set from one revision"
        )
    interval, test, differences = stats.blocked_difference_ci(
        rows, method_a, method_b, datasets, metric
    )
    return BlockedDifference(
        interval,
        test,
        tuple(both),
        tuple(sorted(set(per_block["commit"]))),
        dict(Counter(per_block["build"])),
        tuple(sorted(set(per_block["torch_threads"]))),
        tuple(differences.tolist()),
    )


# -------------------------------------------------------------------- the earlier record
def run_provenance(paths: Iterable[Path]) -> pd.DataFrame:
    """method, seed, commit, build, torch threads of each run folder (its ``meta.json``)."""
    rows = []
    for path in paths:
        meta_path = Path(path) / "meta.json"
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        rows.append(
            {
                "method": Path(path).parent.name,
                "seed": int(Path(path).name[4:]),
                "commit": str(meta.get("git_revision", "?")).removesuffix("-dirty"),
                "build": machine_build(str(meta.get("platform", "?"))),
                "torch_threads": (meta.get("hardware") or {}).get("torch_threads"),
            }
        )
    return pd.DataFrame(rows, columns=["method", "seed", "commit", "build", "torch_threads"])


def side_of(provenance: pd.DataFrame, method: str) -> str:
    """``<revision> (fc-v1045)`` or ``<revision> (fc-v973 ×15, fc-v669 ×6)``: the revisions and
    machine builds of a method's runs."""
    runs = provenance[provenance["method"] == method]
    if runs.empty:
        return "–"
    parts = []
    for commit, group in runs.groupby("commit", sort=True):
        builds = Counter(group["build"])
        inner = ", ".join(
            b if len(builds) == 1 else f"{b} ×{n}"
            for b, n in sorted(builds.items(), key=lambda kv: (-kv[1], kv[0]))
        )
        parts.append(f"{commit[:7]} ({inner})")
    return "; ".join(parts)


def provenance_table(provenance: pd.DataFrame, blocks: pd.DataFrame) -> pd.DataFrame:
    """One row per method: its committed runs (the earlier record) with their revisions and
    machine builds, and its runs in each block set's finished blocks with theirs."""
    methods = list(dict.fromkeys([*provenance["method"], *blocks.get("method", [])]))
    rows = []
    for method in methods:
        row = {
            "method": method,
            "earlier record: runs": int((provenance["method"] == method).sum()),
            "earlier record: revisions (machine builds)": side_of(provenance, method),
        }
        for name, rows_of_set in blocks.groupby("block_set", sort=True) if len(blocks) else ():
            mine = rows_of_set[rows_of_set["method"] == method].drop_duplicates("block")
            builds = ", ".join(f"{b} ×{n}" for b, n in mine["build"].value_counts().items())
            row[f"blocks: {name}"] = (
                f"{len(mine)} at {', '.join(sorted(c[:7] for c in mine['commit'].unique()))} ({builds})"
                if len(mine)
                else "–"
            )
        rows.append(row)
    return pd.DataFrame(rows)


def rests_on(provenance: pd.DataFrame | None, methods: Sequence[str]) -> str:
    """What an earlier-record row rests on: each side's revisions and builds, ``A vs B``."""
    if provenance is None or provenance.empty:
        return ""
    return " vs ".join(side_of(provenance, m) for m in methods)


def crosses_revisions(provenance: pd.DataFrame | None, methods: Sequence[str]) -> bool:
    """Do the runs of ``methods`` come from more than one revision?"""
    if provenance is None or provenance.empty:
        return False
    return provenance.loc[provenance["method"].isin(list(methods)), "commit"].nunique() > 1
