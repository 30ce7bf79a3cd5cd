"""The check of a profile value against its dataclass field's type annotation (``int``,
``float``, ``str``, ``bool``, ``list[...]``, ``X | None``), shared by profile files
(:mod:`at2po_lib.config.profile`) and ``--set`` values (:mod:`at2po_lib.config.overrides`)."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from .checks import shown
from ..util.errors import ProfileError


def check_type(value: Any, annotation: Any, where: str) -> Any:
    """Validate ``value`` against a (simple) type annotation; ints are accepted as floats."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return check_type(value, option, where)
            except ProfileError as exc:
                errors.append(str(exc))
        raise ProfileError(errors[0])
    if origin is list:
        if not isinstance(value, list):
            raise ProfileError(f"{where}: expected a list, got {shown(value)}")
        (item_type,) = typing.get_args(annotation) or (Any,)
        return [check_type(v, item_type, f"{where}[{i}]") for i, v in enumerate(value)]
    if annotation is Any:
        return value
    if annotation is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if annotation is int and isinstance(value, bool):
        raise ProfileError(f"{where}: expected int, got {shown(value)}")
    if isinstance(annotation, type) and not isinstance(value, annotation):
        raise ProfileError(f"{where}: expected {annotation.__name__}, got {shown(value)}")
    return value


def field_types(cls: type) -> dict[str, Any]:
    """Field name → annotation of a dataclass (``Any`` where the annotation cannot be
    resolved, e.g. a forward reference in a third-party class)."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable annotations: check names only
        hints = {}
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)}
