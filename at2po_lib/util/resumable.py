"""A record measured chunk by chunk that survives a kill and resumes only under the same arguments.

A study that rolls out a policy for hours (``at2po dissect expansion``) writes its record one
chunk of prompts at a time, so a rerun continues where the last one stopped. Appending to the
CSV itself was neither kill-safe (a torn last line broke every later read) nor keyed (a rerun
with another ``--chunk`` skipped prompts it never measured). Here::

    record = ResumableRecord(final_csv, key)   # key: the arguments that determine the rows
    record.check_finished()                    # True: the record is done with this key
    record.start()                             # resume this key's chunks, or refuse another's
    for chunk in chunks:
        if chunk not in record.done():
            record.add(chunk, rows)            # one whole file per chunk
    rows = record.rows()                       # every chunk's rows, in chunk order
    ...                                        # write final_csv and its .meta.json (record_key)
    record.close()                             # the chunks go

Layout: the chunks live in ``staging_path(final)`` (``<parent>/.<name>.staging/``, beside the
record) as ``key.json`` and ``chunk_<n>.json``, each written to a temporary file, fsynced and
renamed (:func:`at2po_lib.util.storage.atomic_write`), so after a kill at any instant every
file there is whole or absent and the record itself is the old one or the new one, never a part.

The key is the exact arguments (``{"--seed": 0, "--chunk": 2, ...}``, a policy's weight hash,
the rollout configuration): a staging folder or a finished record (its ``.meta.json``'s
``record_key``) with another key is a :class:`RecordError` naming the arguments it was made with
and this command's, never a silent mix. A finished record written before keys were recorded is
compared on the arguments its meta holds (``legacy_key``).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .digests import file_sha256
from .errors import RecordError
from .provenance import meta_path_of, read_meta
from .staging import staging_path
from .storage import atomic_write

KEY_FILE = "key.json"
_CHUNK = re.compile(r"chunk_(\d{6})\.json")
SHOWN = 3
"""Differing arguments named in a refusal."""


def _canonical(value: Any) -> Any:
    """``value`` as JSON would give it back (tuples as lists, keys as strings)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def differences(
    old: Mapping[str, Any], new: Mapping[str, Any], only_old: bool = False
) -> list[str]:
    """``"--seed 0 (this command: 7)"`` for each argument where two keys differ, sorted;
    ``only_old``: compare only what ``old`` records (a record older than some argument)."""
    a, b = _flat(_canonical(dict(old))), _flat(_canonical(dict(new)))
    out = []
    for name in sorted(set(a) if only_old else set(a) | set(b)):
        if a.get(name, "absent") != b.get(name, "absent"):
            shown = [
                json.dumps(v)[:60] if not isinstance(v, str) else v[:60]
                for v in (a.get(name, "absent"), b.get(name, "absent"))
            ]
            out.append(f"{name} {shown[0]} (this command: {shown[1]})")
    return out


def _said(diffs: list[str]) -> str:
    return "; ".join(diffs[:SHOWN]) + (
        f"; and {len(diffs) - SHOWN} more" if len(diffs) > SHOWN else ""
    )


class ResumableRecord:
    """The chunks of one record being measured (module docstring)."""

    def __init__(
        self,
        final: Path,
        key: Mapping[str, Any],
        legacy_key: Callable[[dict], dict[str, Any]] | None = None,
        remedy: str = "rerun with those arguments, give another --name, or move it away",
    ) -> None:
        self.final = Path(final)
        self.key = _canonical(dict(key))
        self.folder = staging_path(self.final)
        self.legacy_key = legacy_key
        self.remedy = remedy

    # -- a finished record ----------------------------------------------------------------
    def check_finished(self) -> bool:
        """True when the record exists, whole, with this key; False when it does not exist or
        an unfinished measurement waits in the staging folder (which then decides); else a
        :class:`RecordError` naming the arguments it was measured with."""
        if self.folder.is_dir() or not self.final.is_file():
            return False
        meta_path = meta_path_of(self.final)
        try:
            meta = read_meta(self.final)
        except ValueError as exc:
            raise RecordError(str(exc)) from None
        if not meta:
            raise RecordError(
                f"{self.final}: no {meta_path.name}, so the arguments its rows were "
                f"measured with are unknown; {self.remedy}"
            )
        recorded = meta.get("result_sha256")
        if recorded is not None and recorded != file_sha256(self.final):
            raise RecordError(
                f"{self.final}: its rows changed since {meta_path.name} was "
                f"written (sha256 differs); {self.remedy}"
            )
        if isinstance(meta.get("record_key"), dict):
            diffs = differences(meta["record_key"], self.key)
        else:  # written before keys were recorded: what its meta says must agree
            old = self.legacy_key(meta) if self.legacy_key is not None else {}
            diffs = differences(old, self.key, only_old=True)
        if diffs:
            raise RecordError(
                f"{self.final}: measured with other arguments ({_said(diffs)}); {self.remedy}"
            )
        return True

    # -- the chunks of an unfinished one --------------------------------------------------
    def start(self) -> None:
        """Resume this key's staging folder, or create it; another key's is refused."""
        key_file = self.folder / KEY_FILE
        if self.folder.is_dir() and key_file.is_file():
            try:
                old = json.loads(key_file.read_bytes().decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):
                old = None
            if old != self.key:
                diffs = differences(old, self.key) if isinstance(old, dict) else ["unreadable"]
                raise RecordError(
                    f"{self.folder}: an unfinished measurement of {self.final.name} with other "
                    f"arguments ({_said(diffs)}); rerun with those arguments to resume it, or "
                    "remove that folder to start again"
                )
            return
        if self.folder.is_dir():  # killed before its key was written: nothing measured yet
            shutil.rmtree(self.folder)
        self.folder.mkdir(parents=True)
        atomic_write(key_file, json.dumps(self.key, indent=2, sort_keys=True) + "\n")

    def done(self) -> set[int]:
        """The chunks written whole."""
        if not self.folder.is_dir():
            return set()
        return {int(m.group(1)) for p in self.folder.iterdir() if (m := _CHUNK.fullmatch(p.name))}

    def add(self, chunk: int, rows: list[dict[str, Any]]) -> None:
        """Write one chunk's rows (whole or not at all)."""
        atomic_write(
            self.folder / f"chunk_{chunk:06d}.json",
            json.dumps({"chunk": chunk, "rows": rows}) + "\n",
        )

    def rows(self) -> list[dict[str, Any]]:
        """Every chunk's rows, in chunk order."""
        out: list[dict[str, Any]] = []
        for chunk in sorted(self.done()):
            path = self.folder / f"chunk_{chunk:06d}.json"
            try:
                record = json.loads(path.read_bytes().decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as exc:
                record = {"error": str(exc)[:120]}
            if not isinstance(record, dict) or not isinstance(record.get("rows"), list):
                raise RecordError(
                    f"{path}: not a readable chunk ({str(record)[:120]}); remove "
                    "it to measure that chunk again"
                )
            out += record["rows"]
        return out

    def close(self) -> None:
        """Remove the chunks (after the record and its meta are written)."""
        shutil.rmtree(self.folder, ignore_errors=True)
