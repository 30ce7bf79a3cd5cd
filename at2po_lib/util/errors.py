"""Errors the plumbing raises and the layers above catch: defined here, at the bottom, so that
``util/`` (run-folder locks) can raise them without importing the profiles
(:mod:`at2po_lib.config.profile`) that sit above it."""

from __future__ import annotations


class ProfileError(ValueError):
    """A profile that does not exist or does not validate."""


class RecordError(ValueError):
    """A run record that cannot be trusted; the message names the file (and line). Raised by
    :mod:`at2po_lib.record.reading`; defined here so that every command can report it
    without importing the reporting stack (the retrieval server's environment has no pandas)."""
