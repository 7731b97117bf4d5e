"""Checking tool-call arguments against a JSON schema, with messages a policy can act on.

The subset of JSON Schema that tool schemas use, with no dependency: ``type`` (a name or a list;
``integer`` takes ints and integral floats such as ``3.0``, never booleans; ``number`` takes ints
and floats, never booleans), ``enum``, ``const``, ``anyOf``, ``oneOf``, ``properties``,
``required``, ``additionalProperties`` (``false`` or a schema), ``items`` (a schema, or a list as
in draft 7), ``prefixItems``, ``minItems``/``maxItems``, ``minimum``/``maximum``,
``exclusiveMinimum``/``exclusiveMaximum`` (numbers, or draft-4 booleans), ``minLength``/
``maxLength`` and ``pattern`` (``re.search``; a pattern that does not compile is reported as a
problem of the schema). ``enum``/``const`` compare as JSON does: ``1 == 1.0`` but ``true != 1``.
Other keywords, and keywords whose value has the wrong shape, are ignored: a malformed schema
from a data row never makes the check raise.

Each problem names the argument by its path (``filter.sender``, ``ids[2]``); the list is cut
after ``MAX_PROBLEMS`` with a count of the rest, and each message after ``MAX_MESSAGE_CHARS``.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, TypeGuard

MAX_PROBLEMS = 10
MAX_MESSAGE_CHARS = 300
MAX_VALUE_CHARS = 60


def validate_arguments(parameters: dict, arguments: Any) -> list[str]:
    """Problems of `arguments` against a JSON-schema object; [] when valid. Messages name the argument path."""
    problems: list[str] = []
    _check(parameters, arguments, "", problems)
    problems = [clip(p, MAX_MESSAGE_CHARS) for p in problems]
    if len(problems) > MAX_PROBLEMS:
        problems = [*problems[:MAX_PROBLEMS], f"... and {len(problems) - MAX_PROBLEMS} more problems"]
    return problems


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ending with an ellipsis when cut."""
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def json_type(value: Any) -> str:
    """The JSON type name of a Python value (``integer`` for an int, ``number`` for a float)."""
    if value is None:
        return "null"
    for kind, types in (
        ("boolean", bool),
        ("integer", int),
        ("number", float),
        ("string", str),
        ("array", (list, tuple)),
        ("object", dict),
    ):
        if isinstance(value, types):
            return kind
    return type(value).__name__


def show(value: Any) -> str:
    """A short JSON rendering of ``value`` for a message."""
    return clip(json.dumps(value, ensure_ascii=False, default=repr), MAX_VALUE_CHARS)


def _check(schema: Any, value: Any, path: str, problems: list[str]) -> None:
    where = f"argument {path!r}" if path else "arguments"
    if schema is False:
        problems.append(f"{where}: no value is allowed here")
    if not isinstance(schema, dict):
        return
    if "type" in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_has_type(value, kind) for kind in kinds):
            got = "null" if value is None else f"{json_type(value)} {show(value)}"
            problems.append(f"{where}: expected {' or '.join(map(str, kinds))}, got {got}")
            return
    if isinstance(schema.get("enum"), list) and not any(
        _json_equal(value, option) for option in schema["enum"]
    ):
        options = ", ".join(show(option) for option in schema["enum"])
        problems.append(f"{where}: {show(value)} is not one of {options}")
    if "const" in schema and not _json_equal(value, schema["const"]):
        problems.append(f"{where}: expected {show(schema['const'])}, got {show(value)}")
    for keyword in ("anyOf", "oneOf"):
        if isinstance(schema.get(keyword), list):
            _check_alternatives(keyword, schema[keyword], value, path, problems)
    if isinstance(value, dict):
        _check_object(schema, value, path, problems)
    elif isinstance(value, (list, tuple)):
        _check_array(schema, value, path, problems)
    elif isinstance(value, str):
        _check_string(schema, value, where, problems)
    elif _is_number(value):
        _check_number(schema, value, where, problems)


def _check_alternatives(
    keyword: str, branches: list[Any], value: Any, path: str, problems: list[str]
) -> None:
    where = f"argument {path!r}" if path else "arguments"
    results = []
    for branch in branches:
        found: list[str] = []
        _check(branch, value, path, found)
        results.append(found)
    matches = sum(not found for found in results)
    if matches == 0:
        reasons = " | ".join(found[0].removeprefix(f"{where}: ") for found in results if found)
        problems.append(f"{where}: matches none of the allowed forms ({reasons})")
    elif keyword == "oneOf" and matches > 1:
        problems.append(f"{where}: matches {matches} of the allowed forms, but must match exactly one")


def _check_object(schema: dict, value: dict, path: str, problems: list[str]) -> None:
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = schema.get("required")
    for name in required if isinstance(required, list) else ():
        if isinstance(name, str) and name not in value:
            problems.append(f"missing required argument {_join(path, name)!r}")
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in properties:
            _check(properties[key], item, _join(path, key), problems)
        elif extra is False:
            accepted = f"; accepted: {', '.join(properties)}" if properties else "; it takes none"
            problems.append(f"unknown argument {_join(path, key)!r}{accepted}")
        elif isinstance(extra, dict):
            _check(extra, item, _join(path, key), problems)


def _check_array(schema: dict, value: list | tuple, path: str, problems: list[str]) -> None:
    where = f"argument {path!r}" if path else "arguments"
    if isinstance(schema.get("minItems"), int) and len(value) < schema["minItems"]:
        problems.append(f"{where}: expected at least {schema['minItems']} items, got {len(value)}")
    if isinstance(schema.get("maxItems"), int) and len(value) > schema["maxItems"]:
        problems.append(f"{where}: expected at most {schema['maxItems']} items, got {len(value)}")
    items = schema.get("items")
    prefix = schema.get("prefixItems") if isinstance(schema.get("prefixItems"), list) else []
    prefix = prefix or (items if isinstance(items, list) else [])
    rest = items if isinstance(items, (dict, bool)) else None
    for index, item in enumerate(value):
        if index < len(prefix):
            _check(prefix[index], item, f"{path}[{index}]", problems)
        elif rest is not None:
            _check(rest, item, f"{path}[{index}]", problems)


def _check_string(schema: dict, value: str, where: str, problems: list[str]) -> None:
    if isinstance(schema.get("minLength"), int) and len(value) < schema["minLength"]:
        problems.append(f"{where}: expected at least {schema['minLength']} characters, got {len(value)}")
    if isinstance(schema.get("maxLength"), int) and len(value) > schema["maxLength"]:
        problems.append(f"{where}: expected at most {schema['maxLength']} characters, got {len(value)}")
    if isinstance(schema.get("pattern"), str):
        try:
            matched = _compiled(schema["pattern"]).search(value) is not None
        except re.error as exc:
            problems.append(
                f"{where}: the tool's schema has an invalid pattern {schema['pattern']!r} ({exc})"
            )
        else:
            if not matched:
                problems.append(f"{where}: {show(value)} does not match the pattern {schema['pattern']!r}")


def _check_number(schema: dict, value: float, where: str, problems: list[str]) -> None:
    low, high = schema.get("minimum"), schema.get("maximum")
    low_exclusive, high_exclusive = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if _is_number(low) and (value <= low if low_exclusive is True else value < low):
        problems.append(f"{where}: must be {'>' if low_exclusive is True else '>='} {low}, got {value}")
    if _is_number(high) and (value >= high if high_exclusive is True else value > high):
        problems.append(f"{where}: must be {'<' if high_exclusive is True else '<='} {high}, got {value}")
    if _is_number(low_exclusive) and value <= low_exclusive:
        problems.append(f"{where}: must be > {low_exclusive}, got {value}")
    if _is_number(high_exclusive) and value >= high_exclusive:
        problems.append(f"{where}: must be < {high_exclusive}, got {value}")


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _has_type(value: Any, kind: Any) -> bool:
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if kind == "number":
        return _is_number(value)
    if kind == "null":
        return value is None
    checks: dict[str, type | tuple[type, ...]] = {
        "string": str,
        "boolean": bool,
        "array": (list, tuple),
        "object": dict,
    }
    if not isinstance(kind, str) or kind not in checks:
        return True  # an unknown type name constrains nothing
    return isinstance(value, checks[kind])


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON sees it: ``1 == 1.0``, ``true != 1``, arrays and objects compared deeply."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) or _is_number(b):
        return _is_number(a) and _is_number(b) and a == b
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (
            isinstance(a, (list, tuple))
            and isinstance(b, (list, tuple))
            and len(a) == len(b)
            and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, dict) or isinstance(b, dict):
        return (
            isinstance(a, dict)
            and isinstance(b, dict)
            and a.keys() == b.keys()
            and all(_json_equal(a[k], b[k]) for k in a)
        )
    return bool(a == b)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else str(key)
