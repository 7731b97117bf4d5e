"""A typed YAML reader: mappings into dataclasses, checked against the field types.

``build(cls, data)`` builds the dataclass ``cls`` from a mapping: an unknown key is an error with a
"did you mean", and every value must fit its field's annotation (``int``, ``float`` (an int is
read as a float), ``str``, ``bool``, ``None``, ``Any``, ``list[T]``, ``dict[str, T]``, ``Literal[...]``,
unions of these and nested dataclasses). ``read_yaml`` reads a file's top-level mapping, and
``parse_override``/``set_path`` apply ``key.sub=value`` overrides. Every error is a ``ConfigError``
naming the key.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar

from .config import ConfigError

T = TypeVar("T")


def build(cls: type[T], data: Any, where: str = "") -> T:
    """The dataclass ``cls`` of ``data`` (a mapping), every value checked against its field's type."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]  # cls is a dataclass
    values: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(names)})"
            raise ConfigError(f"unknown config key {path!r}{hint}")
        values[key] = check_value(value, hints[key], path)
    required = [
        f.name
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]  # cls is a dataclass
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    missing = [name for name in required if name not in values]
    if missing:
        raise ConfigError(f"{where or 'config'}: missing key(s) {', '.join(missing)}")
    return cls(**values)


def check_value(value: Any, tp: Any, where: str) -> Any:
    """``value`` checked (and lightly coerced: int -> float) against the annotation ``tp``."""
    origin = typing.get_origin(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return build(tp, value, where)
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(tp):
            try:
                return check_value(value, option, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where} must be {_one_of(_alternatives(tp))}, got {value!r}")
    if origin is Literal:
        if not any(value == option and type(value) is type(option) for option in typing.get_args(tp)):
            raise ConfigError(f"{where} must be {_one_of(_alternatives(tp))}, got {value!r}")
        return value
    if tp is Any:
        return value
    if tp is type(None):
        if value is not None:
            raise ConfigError(f"{where}: expected null, got {value!r}")
        return None
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp in (str, bool):
        if not isinstance(value, tp):
            raise ConfigError(f"{where}: expected {tp.__name__}, got {value!r}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        (item,) = typing.get_args(tp) or (Any,)
        return [check_value(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        _, item = typing.get_args(tp) or (Any, Any)
        return {k: check_value(v, item, f"{where}.{k}") for k, v in value.items()}
    raise ConfigError(f"{where}: unsupported field type {tp}")  # pragma: no cover - a bug in a config type


def _alternatives(tp: Any) -> list[str]:
    """What a value of ``tp`` may be, in words: ``["auto", "true", "false"]`` for ``Literal["auto"] | bool``."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [word for option in typing.get_args(tp) for word in _alternatives(option)]
    if typing.get_origin(tp) is Literal:
        return [str(option) for option in typing.get_args(tp)]
    words = {
        bool: ["true", "false"],
        type(None): ["null"],
        int: ["an integer"],
        float: ["a number"],
        str: ["a string"],
    }
    return words.get(tp, [getattr(tp, "__name__", str(tp))])


def _one_of(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``data["a"]["b"] = value`` for ``dotted = "a.b"`` (sections are created as needed)."""
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {dotted!r}: {key!r} is not a section")
        node = child
    node[keys[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """``"optim.lr=1e-5"`` -> ``("optim.lr", 1e-05)``; the value is read as YAML."""
    import yaml

    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {text!r} must look like key.sub=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {text!r}: value is not valid YAML: {exc}") from None
    if isinstance(value, str) and _looks_numeric(value):
        value = float(value)  # YAML 1.1 reads "1e-5" as a string
    return key.strip(), value


def read_yaml(path: str | Path) -> dict[str, Any]:
    """The top-level mapping of a YAML file (``{}`` for an empty one)."""
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    fixed: dict[str, Any] = _fix_yaml_floats(data)
    return fixed


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return text.strip().lower() not in {"nan", "inf", "-inf", "+inf", "infinity", "-infinity"}


def _fix_yaml_floats(node: Any) -> Any:
    """YAML 1.1 (PyYAML) reads ``3e-6`` as a string; read such scalars as numbers."""
    if isinstance(node, dict):
        return {k: _fix_yaml_floats(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_fix_yaml_floats(v) for v in node]
    if isinstance(node, str) and _looks_numeric(node) and any(c in node.lower() for c in "e."):
        return float(node)
    return node
