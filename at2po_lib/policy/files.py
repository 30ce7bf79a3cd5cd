"""Checks of a checkpoint folder's files that the model and tokenizer loaders share: JSON
files parse, and every file has the sha256 its record lists (:mod:`.warmstart`)."""

from __future__ import annotations

from pathlib import Path


class CheckpointError(OSError):
    """A checkpoint file that cannot be read (the message names it)."""


def check_json_files(folder: Path) -> None:
    """Parse every ``*.json`` of a checkpoint folder (config, tokenizer): a truncated or
    non-UTF-8 file raises :class:`CheckpointError` naming it (transformers' own error was a bare
    ``JSONDecodeError``). Milliseconds: the tokenizer file is the largest (~150 kB at toy scale)."""
    import json

    for path in sorted(folder.glob("*.json")):
        try:
            json.loads(path.read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise CheckpointError(f"{path}: not a readable JSON file (truncated or corrupt? "
                                  f"{str(exc)[:200]}); re-save or re-download the checkpoint"
                                  ) from None


def file_digests(folder: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """sha256 of every file directly in ``folder`` (names in ``skip`` left out), for a record
    that :func:`check_digests` verifies at load."""
    import hashlib

    digests = {}
    for path in sorted(p for p in folder.iterdir() if p.is_file() and p.name not in skip):
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digests[path.name] = digest.hexdigest()
    return digests


def check_digests(folder: Path, recorded: dict[str, str], record: Path) -> None:
    """Every file of ``recorded`` present in ``folder`` with that sha256; else
    :class:`CheckpointError` naming the file and the record (a same-size corrupt
    ``model.safetensors`` loaded silently before)."""
    actual = file_digests(folder)
    for name, digest in recorded.items():
        if name not in actual:
            raise CheckpointError(f"{folder / name}: missing (listed in {record})")
        if actual[name] != digest:
            raise CheckpointError(f"{folder / name}: sha256 {actual[name][:16]}... differs from "
                                  f"{digest[:16]}... recorded in {record}: a damaged copy; "
                                  "restore it (git checkout) or retrain it")
