"""Tree files: one ``.npz`` archive per batch of trees (:func:`save_trees`, :func:`load_trees`).

Numbers are stored as arrays and text/metadata as a JSON document inside the archive, read
with ``np.load(allow_pickle=False)``: a trees file can never run code, and a pickle is refused
unread. Before anything is decompressed, a member too large or compressed too well (a
decompression bomb) is refused; every tree read back is validated
(:func:`at2po_lib.method.tree.validate_tree`). The tree type is :mod:`at2po_lib.method.tree`.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..method.tree import CREDIT_FIELDS, TreeArrays, as_tree_arrays, validate_tree

TREES_FORMAT = "at2po-trees/2"
"""Format tag of :func:`save_trees` archives."""

_JSON_MEMBER = "json"
_NODE_PREFIX = "node."


class UntrustedPickleError(ValueError):
    """A trees file is a pickle (never read: unpickling can run code)."""


def save_trees(
    trees: Sequence[Any], path: str | Path, meta: Mapping[str, Any] | None = None
) -> Path:
    """Write trees to one ``.npz`` archive that :func:`load_trees` reads without pickle.

    Layout (T trees, N nodes in all; each tree's nodes are contiguous, ids stay local)::

        tree_offsets   (T+1,) int64  tree t owns rows tree_offsets[t]:tree_offsets[t+1]
        prompt_id      (T,)   int64
        parent, entropy, leaf_reward        (N,)  the credit arrays
        node.<name>                          (N,)  each of the trees' ``node_arrays``
        json           uint8  UTF-8 JSON: {"format", "meta", "node_arrays": [names],
                                            "trees": [{"info", "records"}]}

    Every tree must carry the same ``node_arrays`` names (numeric or bool arrays only: text
    belongs in ``records``). ``meta`` is JSON-able run information (profile, seed, ...). The
    archive is written to a temporary file and moved into place, so a crash never leaves half
    a file under ``path``.
    """
    path = Path(path)
    if path.suffix != ".npz":
        raise ValueError(f"{path}: trees are saved as a .npz archive; give a path ending in .npz")
    arrays = [as_tree_arrays(t) for t in trees]
    if not arrays:
        raise ValueError(f"{path}: no trees to save")
    names = sorted(arrays[0].node_arrays)
    for i, t in enumerate(arrays):
        validate_tree(t, f"tree {i}")
        if sorted(t.node_arrays) != names:
            raise ValueError(
                f"tree {i} has node arrays {sorted(t.node_arrays)}, tree 0 has "
                f"{names}; every tree of one file must carry the same ones"
            )
        for key, arr in t.node_arrays.items():
            if np.asarray(arr).dtype.kind not in "biuf":
                raise ValueError(
                    f"tree {i}: node array {key!r} has dtype {np.asarray(arr).dtype};"
                    " only numbers and booleans are stored as arrays (text goes in "
                    "records)"
                )
    sizes = np.array([t.num_nodes for t in arrays], dtype=np.int64)
    members: dict[str, np.ndarray] = {
        "tree_offsets": np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        "prompt_id": np.array([int(t.prompt_id) for t in arrays], dtype=np.int64),
    }
    for name in CREDIT_FIELDS:
        members[name] = np.concatenate([getattr(t, name) for t in arrays])
    for name in names:
        members[_NODE_PREFIX + name] = np.concatenate(
            [np.asarray(t.node_arrays[name]) for t in arrays]
        )
    document = {
        "format": TREES_FORMAT,
        "meta": dict(meta or {}),
        "node_arrays": names,
        "trees": [{"info": dict(t.info), "records": [dict(r) for r in t.records]} for t in arrays],
    }
    text = json.dumps(document, allow_nan=False, default=_json_default)
    members[_JSON_MEMBER] = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".npz.tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **members)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _json_default(value: Any) -> Any:
    """JSON for the few non-JSON types run metadata holds (numpy scalars/arrays, paths)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(
        f"{type(value).__name__} value {value!r:.80} is not JSON-serialisable "
        "(tree info, records and meta must be JSON)"
    )


def load_trees(path: str | Path) -> list[TreeArrays]:
    """Trees from a :func:`save_trees` archive (``.npz``, read with ``allow_pickle=False``).

    A pickle (such as an old ``trees.pkl``) is never read: unpickling runs whatever code the
    file names, so it raises :class:`UntrustedPickleError` naming the file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"trees file not found: {path}")
    with path.open("rb") as fh:
        head = fh.read(4)
    if head.startswith(b"PK"):  # a zip archive: .npz
        return _trees_from_archive(path, *_read_archive(path))
    if head.startswith(b"\x80") or path.suffix in (".pkl", ".pickle"):
        raise UntrustedPickleError(
            f"{path} is a pickle; loading a pickle can run arbitrary code, so it is refused. "
            "Trees are read from .npz archives written by save_trees"
        )
    raise ValueError(f"{path}: not a trees file (expected a .npz archive written by save_trees)")


def load_trees_meta(path: str | Path) -> dict[str, Any]:
    """The ``meta`` a :func:`save_trees` archive was written with (profile, seed, ...)."""
    document, _ = _read_archive(Path(path))
    return dict(document["meta"])


MAX_MEMBER_BYTES = 1 << 30
"""A trees archive member larger than this (1 GiB uncompressed) is refused before reading."""
MAX_MEMBER_RATIO = 100
"""...and so is a member above 16 MiB that compresses more than 100-fold (numeric arrays and
JSON text compress 2-10-fold; a 256 MiB member squeezed into 262 kB is a decompression bomb)."""


def _check_member_sizes(path: Path) -> None:
    """Refuse oversized or bomb-like members from the zip directory, before decompressing."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, OSError) as err:
        raise ValueError(f"{path}: cannot read the trees archive ({err})") from err
    for info in infos:
        ratio = info.file_size / max(info.compress_size, 1)
        if info.file_size > MAX_MEMBER_BYTES or (
            info.file_size > 16 << 20 and ratio > MAX_MEMBER_RATIO
        ):
            raise ValueError(
                f"{path}: member {info.filename} holds {info.file_size:,} bytes "
                f"({info.compress_size:,} compressed): refused unread (limits: "
                f"{MAX_MEMBER_BYTES:,} bytes, {MAX_MEMBER_RATIO}-fold compression)"
            )


def _read_archive(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    if not path.is_file():
        raise FileNotFoundError(f"trees file not found: {path}")
    _check_member_sizes(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            members = {name: archive[name] for name in archive.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError) as err:
        raise ValueError(f"{path}: cannot read the trees archive ({err})") from err
    missing = [
        k for k in ("tree_offsets", "prompt_id", *CREDIT_FIELDS, _JSON_MEMBER) if k not in members
    ]
    if missing:
        raise ValueError(f"{path}: not a trees archive (missing {', '.join(missing)})")
    try:
        document = json.loads(members.pop(_JSON_MEMBER).tobytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ValueError(
            f"{path}: the archive's json member is not valid JSON ({str(err)[:200]})"
        ) from None
    if not isinstance(document, dict) or document.get("format") != TREES_FORMAT:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise ValueError(f"{path}: not an {TREES_FORMAT} archive (format {found!r})")
    return document, members


def _check_document(path: Path, document: dict[str, Any]) -> None:
    """The json member's types, checked before use: a damaged or hand-edited archive is one
    error naming the file and the field, not a bare TypeError from deep inside."""

    def fail(field: str, expected: str, value: Any) -> None:
        raise ValueError(
            f"{path}: the archive's json member: {field} should be {expected}, "
            f"not {type(value).__name__}"
        )

    trees, names = document.get("trees", []), document.get("node_arrays", [])
    if not isinstance(trees, list):
        fail("trees", "a list", trees)
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        fail("node_arrays", "a list of names", names)
    for t, entry in enumerate(trees):
        if not isinstance(entry, dict):
            fail(f"trees[{t}]", "an object", entry)
        records, info = entry.get("records", []), entry.get("info", {})
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            fail(f"trees[{t}].records", "a list of objects", records)
        if not isinstance(info, dict):
            fail(f"trees[{t}].info", "an object", info)


def _trees_from_archive(
    path: Path, document: dict[str, Any], members: dict[str, np.ndarray]
) -> list[TreeArrays]:
    _check_document(path, document)
    offsets, entries = members["tree_offsets"], document.get("trees", [])
    total = len(members["parent"])
    if (
        offsets.ndim != 1
        or len(offsets) != len(entries) + 1
        or len(entries) == 0
        or offsets[0] != 0
        or offsets[-1] != total
        or np.any(np.diff(offsets) < 1)
        or len(members["prompt_id"]) != len(entries)
    ):
        raise ValueError(
            f"{path}: tree_offsets {offsets.tolist()[:8]} do not match "
            f"{len(entries)} trees and {total} nodes"
        )
    names = list(document.get("node_arrays", []))
    absent = [n for n in names if _NODE_PREFIX + n not in members]
    if absent:
        raise ValueError(f"{path}: node arrays {absent} listed but not stored")
    columns = {n: members[n] for n in CREDIT_FIELDS}
    columns.update({n: members[_NODE_PREFIX + n] for n in names})
    bad = [n for n, col in columns.items() if col.shape != (total,)]
    if bad:
        raise ValueError(f"{path}: arrays {bad} do not have one value per node ({total})")
    trees = []
    for t, entry in enumerate(entries):
        rows = slice(int(offsets[t]), int(offsets[t + 1]))
        tree = TreeArrays(
            parent=columns["parent"][rows],
            entropy=columns["entropy"][rows],
            leaf_reward=columns["leaf_reward"][rows],
            prompt_id=int(members["prompt_id"][t]),
            node_arrays={n: columns[n][rows] for n in names},
            records=list(entry.get("records", [])),
            info=dict(entry.get("info", {})),
        )
        validate_tree(tree, f"{path}: tree {t}")
        trees.append(tree)
    return trees
