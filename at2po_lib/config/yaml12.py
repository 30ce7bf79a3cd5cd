"""YAML 1.2 numbers on PyYAML, bounded: the one reader of profile files and ``--set`` values.

PyYAML implements YAML 1.1, where ``1e-4`` is a string, ``010`` is octal 8 and ``1:20`` is
sexagesimal 80; :func:`load_yaml_text` reads numbers as YAML 1.2's core schema does, refuses
aliases, duplicate keys and deep nesting, and bounds the text's length, so parsing is bounded in
time and memory whatever the input.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from ..util.errors import ProfileError

MAX_YAML_DEPTH = 32
"""Nesting levels a profile or ``--set`` value may have (the shipped profiles use 3)."""
MAX_INT_CHARS = 64
"""Characters of one integer in a profile (any base): no setting needs more, and a 20,000-digit
hexadecimal number passed every check and crashed after the run folder existed."""
MAX_YAML_CHARS = 1 << 16
"""A profile file or one ``--set`` value longer than this (64 KiB; the shipped profiles are
under 8 KiB) is refused unread: PyYAML parses ~50 kB per second, so this bounds the time."""


class _Yaml12Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's core-schema numbers (PyYAML implements YAML 1.1:
    there ``1e-4`` is a string, ``010`` is octal 8, ``1:20`` is sexagesimal 80 and ``0o17`` is a
    string). Here ``010`` is 10, ``0o17`` is 15, ``0x1f`` is 31, ``1:20`` is a string, ``1e-4``
    a float. Aliases (``*name``) are refused: expanding nested ones ("billion laughs") builds
    values of any size from a few lines, and no profile needs them."""

    _depth = 0

    def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not allowed in profiles", event.start_mark
            )
        if self._depth >= MAX_YAML_DEPTH:  # deeper would end in a RecursionError of 100s of KB
            raise yaml.composer.ComposerError(
                None,
                None,
                f"nested more than {MAX_YAML_DEPTH} levels deep",
                self.peek_event().start_mark,
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):  # noqa: ANN001 - PyYAML's signature
        """A key given twice is an error (PyYAML keeps the last silently)."""
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) or key is None:
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark
                    )
                seen.add(key)
        return super().construct_mapping(node, deep)


_INT_12 = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT_12 = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*|[0-9]+(?:\.[0-9]*)?[eE][-+]?[0-9]+"
    r"|\.[0-9]+[eE][-+]?[0-9]+)|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)
_Yaml12Loader.yaml_implicit_resolvers = {
    key: [
        (tag, regexp)
        for tag, regexp in resolvers
        if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
    ]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver("tag:yaml.org,2002:int", _INT_12, list("-+0123456789"))
_Yaml12Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789."))


def _construct_int_12(loader: yaml.SafeLoader, node: yaml.Node) -> int:
    text = loader.construct_scalar(node)
    if len(text.lstrip("+-")) > MAX_INT_CHARS:
        raise yaml.constructor.ConstructorError(
            None, None, f"integer of more than {MAX_INT_CHARS} characters", node.start_mark
        )
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text, 10)


def _construct_float_12(loader: yaml.SafeLoader, node: yaml.Node) -> float:
    text = loader.construct_scalar(node)
    lowered = text.lower()
    if lowered.endswith(".inf"):
        return float("-inf") if text.startswith("-") else float("inf")
    if lowered == ".nan":
        return float("nan")
    return float(text)


_Yaml12Loader.add_constructor("tag:yaml.org,2002:int", _construct_int_12)
_Yaml12Loader.add_constructor("tag:yaml.org,2002:float", _construct_float_12)


def load_yaml_text(text: str, where: str) -> Any:
    """YAML 1.2 numbers, no aliases, at most :data:`MAX_YAML_CHARS`: parsing is bounded in
    time and memory whatever the input."""
    if len(text) > MAX_YAML_CHARS:
        raise ProfileError(
            f"{where}: {len(text):,} characters, more than the "
            f"{MAX_YAML_CHARS:,} a profile value may have"
        )
    return yaml.load(text, Loader=_Yaml12Loader)  # noqa: S506 - a SafeLoader subclass


def read_yaml_text(path: Path) -> str:
    """The file's text, refused unread past :data:`MAX_YAML_CHARS` bytes and naming the file
    when it is not UTF-8."""
    if path.stat().st_size > MAX_YAML_CHARS:
        raise ProfileError(
            f"{path}: {path.stat().st_size:,} bytes, more than the "
            f"{MAX_YAML_CHARS:,} a profile file may have"
        )
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
