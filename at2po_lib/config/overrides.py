"""The ``--set SECTION.KEY=VALUE`` parser (:func:`parse_overrides`): every key and value is
checked against the profile's dataclasses (:mod:`at2po_lib.config.profile`) before anything runs, and
values read as YAML 1.2 (:mod:`at2po_lib.config.yaml12`; ``1e-4`` is a float, ``010`` is 10)."""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any

import yaml

from .profile import MOVED_KEYS, ProfileConfig
from .checks import MAX_SHOWN_CHARS, shown
from .field_types import check_type, field_types
from ..util.errors import ProfileError
from .yaml12 import load_yaml_text


def _admits_text(annotation: Any) -> bool:
    """True for ``str`` and ``str | None``: such a value is taken verbatim from the command line
    (``--set retrieval.query_prefix=query: `` would be a YAML mapping otherwise)."""
    options = (
        typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType)
        else (annotation,)
    )
    return str in options and all(o in (str, type(None)) for o in options)


def parse_value(raw: str, annotation: Any = Any, where: str = "value") -> Any:
    """One command-line value, parsed for a field of type ``annotation`` and checked against it.

    Strings (``str`` fields) are taken verbatim (``null``/``~`` give None where allowed);
    everything else is YAML with YAML 1.2 numbers: ``3``, ``1e-4``, ``0.5``, ``true``,
    ``null``, ``[a, b]``, ``[1, 2]``. A value of the wrong type is a :class:`ProfileError`
    naming ``where`` (the key)."""
    if _admits_text(annotation):
        if raw.strip() in ("null", "~") and type(None) in typing.get_args(annotation):
            return None
        return raw
    try:
        value = load_yaml_text(raw, where)
    except yaml.YAMLError as exc:
        raise ProfileError(f"{where}: {shown(raw)} is not a valid value ({exc})") from exc
    return check_type(value, annotation, where)


def _schema_field(schema: type, dotted: str, where: str) -> Any:
    """The annotation of ``section.key`` in the dataclass ``schema``; an unknown key is an
    error naming it and the closest known keys."""
    node: Any = schema
    parts = dotted.split(".")
    for depth, part in enumerate(parts):
        fields = field_types(node)
        prefix = ".".join(parts[:depth])
        if part not in fields and dotted in MOVED_KEYS:
            raise ProfileError(
                f"{where}: {dotted!r} moved to {MOVED_KEYS[dotted]}; set that instead"
            )
        if part not in fields:
            known = [f"{prefix}.{k}" if prefix else k for k in fields]
            close = difflib.get_close_matches(dotted, known, n=3) if len(dotted) < 200 else []
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ProfileError(
                f"{where}: unknown key {shown(dotted)}{hint}; known keys"
                f"{' of ' + prefix if prefix else ''}: {', '.join(sorted(fields))}"
            )
        annotation = fields[part]
        is_section = isinstance(annotation, type) and dataclasses.is_dataclass(annotation)
        last = depth == len(parts) - 1
        if last and is_section:
            raise ProfileError(
                f"{where}: {shown(dotted)} is a section; set one of its keys, e.g. "
                f"{dotted}.{next(iter(field_types(annotation)))}=..."
            )
        if not last and not is_section:
            raise ProfileError(
                f"{where}: {shown('.'.join(parts[: depth + 1]))} is a value, not a section"
            )
        node = annotation
    return annotation


def parse_override(
    text: str, extra_sections: typing.Mapping[str, type] | None = None
) -> dict[str, Any]:
    """``train.max_steps=3`` → ``{"train": {"max_steps": 3}}``, checked against the config
    dataclasses before anything runs: the key must exist and the value have its type
    (:func:`parse_value`). ``extra_sections`` adds sections beyond the profile's, e.g.
    ``{"trainer": AT2POConfig}`` for ``at2po train`` (their keys are checked the same way)."""
    if "=" not in text:
        raise ProfileError(f"--set {shown(text)} is not of the form section.key=value")
    dotted, raw = text.split("=", 1)
    dotted = dotted.strip()
    where = f"--set {dotted if len(dotted) <= MAX_SHOWN_CHARS else shown(dotted)}"
    section = dotted.split(".", 1)[0]
    if extra_sections and section in extra_sections:
        if "." not in dotted:
            raise ProfileError(f"{where}: give a key of the section, e.g. {section}.beta=0")
        annotation = _schema_field(extra_sections[section], dotted.split(".", 1)[1], where)
    else:
        annotation = _schema_field(ProfileConfig, dotted, where)
    value = parse_value(raw, annotation, where)
    out: dict[str, Any] = {}
    node = out
    keys = dotted.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return out


def parse_overrides(
    texts: typing.Iterable[str], extra_sections: typing.Mapping[str, type] | None = None
) -> dict[str, Any] | None:
    """Several ``--set`` values merged into one nested dict (None when there are none; a
    later value of the same key wins):
    ``["train.max_steps=3", "train.eval_every=1"]`` → ``{"train": {"max_steps": 3, "eval_every": 1}}``.
    Every key and value is checked first (:func:`parse_override`)."""
    merged: dict[str, Any] = {}
    for text in texts:
        _deep_merge(merged, parse_override(text, extra_sections))
    return merged or None


def _deep_merge(into: dict[str, Any], extra: typing.Mapping[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, typing.Mapping) and isinstance(into.get(key), dict):
            _deep_merge(into[key], value)
        else:
            into[key] = value
