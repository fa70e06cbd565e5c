"""Typed config nodes <-> plain mappings: build a frozen dataclass from YAML values (rejecting
unknown keys with a "did you mean" and every valid key), dump one back, and read each field's
one-line doc from the comment beside it (for `config_reference` and `--agentcore-rl-show-config`).
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import io
import textwrap
import tokenize
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import ConfigError


def unknown_key_message(unknown: Iterable[str], valid: Iterable[str], where: str) -> str:
    """`unknown` keys under node `where`: the closest valid key for each, and every valid key."""
    unknown, valid = sorted(unknown), sorted(set(valid))
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
        if close:
            hints.append(f"did you mean `{close[0]}` (not `{key}`)?")
    named = ", ".join(f"`{key}`" for key in unknown)
    return (f"unknown config key(s) {named} under {where or '<root>'}; {' '.join(hints)}"
            f"{' ' if hints else ''}valid keys of {where or '<root>'}: {', '.join(valid)}")


def build(cls: type, data: Any, path: str, *, extra_valid: Iterable[str] = (), note: str = "",
          moved: Mapping[str, str] | None = None) -> Any:
    """Build frozen dataclass `cls` from a plain mapping, rejecting unknown keys and bad types.
    `extra_valid`: keys another node of the same mapping takes (named in the valid-key list);
    `note`: said after the node's name in an unknown-key message (`(runtime=local)`);
    `moved`: old key -> its new place under this node (an old key is refused, naming it)."""
    if not isinstance(data, dict):
        raise ConfigError(f"config node {path or '<root>'} must be a mapping, got {data!r}")
    for old, new in (moved or {}).items():
        if old in data and not (new.startswith(f"{old}.") and isinstance(data[old], dict)):
            value = "null" if data[old] is None else data[old]
            raise ConfigError(f"config key {path}.{old} is {path}.{new} now: set {path}.{new}={value} "
                              f"(in a YAML file, nest it under `{new.split('.')[0]}:`)")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(data) - set(known) - set(extra_valid)
    if unknown:
        raise ConfigError(unknown_key_message(unknown, [*known, *extra_valid], f"{path}{note}"))
    values = {}
    for name, f in known.items():
        key = f"{path}.{name}" if path else name
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"config key {key} is required")
            continue
        values[name] = _coerce(hints[name], data[name], key)
    return cls(**values)


def _coerce(hint: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return build(hint, value, key)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        errors = []
        for option in inner:
            try:
                return _coerce(option, value, key)
            except ConfigError as exc:
                errors.append(exc)
        raise errors[0]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"config key {key} must be a mapping, got {value!r}")
        key_type, value_type = typing.get_args(hint) or (Any, Any)
        return {k: _coerce(value_type, v, f"{key}.{k}") if value_type is not Any else v
                for k, v in value.items()}
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config key {key} must be a list, got {value!r}")
        return tuple(value)
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float, str, bool) and not isinstance(value, hint) or (
        hint in (int, float) and isinstance(value, bool)
    ):
        raise ConfigError(
            f"config key {key} must be {hint.__name__}, got {value!r}; fix it with "
            f"--agentcore-rl-set {key}=<{hint.__name__}>"
        )
    return value


def plain(node: Any) -> Any:
    """A typed node as the plain mapping it was built from (tuples as lists)."""
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return {f.name: plain(getattr(node, f.name)) for f in dataclasses.fields(node)}
    if isinstance(node, dict):
        return {k: plain(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [plain(v) for v in node]
    return node


def default_of(f: dataclasses.Field[Any]) -> Any:
    """A field's default as a plain value (dataclasses.MISSING when it has none)."""
    if f.default is not dataclasses.MISSING:
        return plain(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return plain(f.default_factory())
    return dataclasses.MISSING


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Each field's doc: the string just below it (an attribute docstring), else the comment at
    the end of its line, else the comment lines just above it. A subclass inherits its bases'."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(_own_field_docs(klass))
    return docs


def _own_field_docs(cls: type) -> dict[str, str]:
    """The docs of the fields `cls`'s own source declares."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    comments: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
    lines = source.splitlines()
    body = ast.parse(source).body[0].body  # type: ignore[attr-defined]
    docs = {}
    for index, node in enumerate(body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        after = body[index + 1] if index + 1 < len(body) else None
        if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
            docs[node.target.id] = " ".join(after.value.value.split("\n\n")[0].split())
        elif node.end_lineno in comments:
            docs[node.target.id] = comments[node.end_lineno]
        else:
            above, row = [], node.lineno - 1
            while row in comments and lines[row - 1].strip().startswith("#"):
                above.insert(0, comments[row])
                row -= 1
            if above:
                docs[node.target.id] = " ".join(above)
    return docs


def type_name(hint: Any) -> str:
    """A readable type: `int | None`, `list[str]`, `dict[str, int]`."""
    if hint is type(None):
        return "null"
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(hint))
    if origin is tuple:
        return f"list[{type_name(typing.get_args(hint)[0])}]"
    if origin is dict:
        return f"dict[{', '.join(type_name(a) for a in typing.get_args(hint))}]"
    if dataclasses.is_dataclass(hint):
        return "mapping"
    return getattr(hint, "__name__", str(hint))
