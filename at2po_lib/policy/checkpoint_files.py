"""Checks of a checkpoint folder's files that the model and tokenizer loaders share: JSON
files parse, and the folder holds exactly the files its record lists, each with its sha256
(:mod:`at2po_lib.warmstart.sft`)."""

from __future__ import annotations

import json
from pathlib import Path

from ..util.digests import file_sha256


class CheckpointError(OSError):
    """A checkpoint file that cannot be read (the message names it)."""


def check_json_files(folder: Path) -> None:
    """Parse every ``*.json`` of a checkpoint folder (config, tokenizer): a truncated or
    non-UTF-8 file raises :class:`CheckpointError` naming it (transformers' own error was a bare
    ``JSONDecodeError``). Milliseconds: the tokenizer file is the largest (~150 kB at toy scale)."""
    for path in sorted(folder.glob("*.json")):
        try:
            json.loads(path.read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise CheckpointError(
                f"{path}: not a readable JSON file (truncated or corrupt? "
                f"{str(exc)[:200]}); re-save or re-download the checkpoint"
            ) from None


def file_digests(folder: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """sha256 of every file directly in ``folder`` (names in ``skip`` left out), for a record
    that :func:`check_digests` verifies at load."""
    return {
        path.name: file_sha256(path)
        for path in sorted(p for p in folder.iterdir() if p.is_file() and p.name not in skip)
    }


def check_digests(
    folder: Path,
    recorded: dict[str, str],
    record: Path,
    remedy: str = "restore it (git checkout) or retrain it",
) -> None:
    """``folder`` holds exactly the files of ``recorded``, each with that sha256; else
    :class:`CheckpointError` naming the file, the record and ``remedy``.

    Exactly: transformers loads whatever loadable file sits in a checkpoint folder (an
    ``adapter_config.json`` + ``adapter_model.safetensors`` beside the weights changed the model
    while every listed file kept its sha256), so an entry the record does not list is refused,
    and so is a record listing none (a changed ``model.safetensors`` loaded under an empty or
    partial list). The record itself may sit in the folder (the shipped copy's)."""
    if not recorded:
        raise CheckpointError(f"{record}: lists no files, so {folder} cannot be verified; {remedy}")
    own = (record.name,) if record.parent == folder else ()  # the shipped copy's record
    entries = (
        sorted(p.name for p in folder.iterdir() if p.name not in own) if folder.is_dir() else []
    )
    unlisted = [name for name in entries if name not in recorded]
    if unlisted:
        shown = ", ".join(unlisted[:5]) + (
            f" and {len(unlisted) - 5} more" if len(unlisted) > 5 else ""
        )
        raise CheckpointError(
            f"{folder}: holds {shown}, not listed in {record} (the loader "
            f"would read them); remove them, or {remedy}"
        )
    actual = file_digests(folder, skip=own) if folder.is_dir() else {}
    for name, digest in recorded.items():
        if name not in actual:
            raise CheckpointError(f"{folder / name}: missing (listed in {record}); {remedy}")
        if actual[name] != digest:
            raise CheckpointError(
                f"{folder / name}: sha256 {actual[name][:16]}... differs from "
                f"{digest[:16]}... recorded in {record}: a damaged copy; "
                f"{remedy}"
            )
