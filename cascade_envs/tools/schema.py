"""JSON schemas of tool parameters, derived from a Python function's signature, hints and docstring.

Type mapping: ``str``/``int``/``float``/``bool`` -> string/integer/number/boolean; ``list[T]``,
``Sequence[T]``, ``tuple[T, ...]`` -> array of T (``tuple[A, B]``: fixed ``prefixItems``);
``dict``/``Mapping[str, V]`` -> object (of V); a ``TypedDict`` -> object with its keys;
``Literal[...]`` and ``Enum`` subclasses -> ``enum`` of the values, typed; ``X | None`` ->
nullable as a type list (``{"type": ["string", "null"]}``; an enum also lists ``null``); other
unions -> a type list or ``anyOf``; ``Any``, ``object`` or no hint -> no constraint.
``Annotated[T, "text"]`` describes a parameter (the docstring wins) and ``Annotated[T, {...}]``
adds schema keywords (``{"minimum": 1}``). A parameter without a default is required; JSON-able
defaults are shown. Other types raise ``ValueError``: describe such a tool with ``parameters=``.

Arguments are checked by ``validate_arguments`` (``validation.py``), re-exported here.
"""

from __future__ import annotations

import collections.abc
import functools
import inspect
import json
import types
import typing
from collections.abc import Callable, Collection
from enum import Enum
from typing import Any

from .docstrings import parse_docstring
from .validation import validate_arguments

__all__ = [
    "argument_converters",
    "function_description",
    "function_name",
    "parameters_from_function",
    "schema_from_function",
    "tool_parameters",
    "type_schema",
    "validate_arguments",
]

_JSON_TYPES: dict[type, str] = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}
_ARRAY_TYPES = (list, tuple, collections.abc.Sequence, collections.abc.MutableSequence)
_OBJECT_TYPES = (dict, collections.abc.Mapping, collections.abc.MutableMapping)
_UNION_TYPES = (typing.Union, types.UnionType)


def schema_from_function(fn: Callable[..., Any], *, hidden: Collection[str] = ()) -> tuple[str, dict]:
    """(description, parameters JSON schema) derived from fn's signature, type hints and docstring."""
    return function_description(fn), parameters_from_function(fn, hidden=hidden)


def function_description(fn: Callable[..., Any]) -> str:
    """The first paragraph of ``fn``'s docstring, on one line (``""`` without a docstring)."""
    return parse_docstring(inspect.getdoc(_hint_target(fn))).summary


def function_name(fn: Callable[..., Any]) -> str:
    """``fn.__name__`` (that of the wrapped function for a ``functools.partial``)."""
    target = _hint_target(fn)
    return str(getattr(target, "__name__", type(fn).__name__))


def tool_parameters(fn: Callable[..., Any], hidden: Collection[str] = ()) -> list[inspect.Parameter]:
    """The parameters of ``fn`` that the policy passes, after checking that ``fn`` can be a tool.

    Tools are called with named arguments, so ``*args``, ``**kwargs`` and positional-only
    parameters are refused; every ``hidden`` name must be a parameter. ``ValueError`` otherwise.
    """
    name = function_name(fn)
    parameters = inspect.signature(fn).parameters
    for p in parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ValueError(f"tool function {name!r} takes {p}: a tool takes named parameters only")
        if p.kind is p.POSITIONAL_ONLY:
            raise ValueError(
                f"tool function {name!r}: parameter {p.name!r} is positional-only, "
                "but tools are called with named arguments"
            )
    unknown = [h for h in hidden if h not in parameters]
    if unknown:
        raise ValueError(f"hidden parameter(s) {unknown} are not parameters of tool function {name!r}")
    return [p for p in parameters.values() if p.name not in hidden]


def parameters_from_function(fn: Callable[..., Any], *, hidden: Collection[str] = ()) -> dict[str, Any]:
    """The JSON schema (type object) of ``fn``'s parameters, ``hidden`` ones left out."""
    name = function_name(fn)
    hints = _type_hints(fn)
    described = parse_docstring(inspect.getdoc(_hint_target(fn))).params
    properties: dict[str, Any] = {}
    required: list[str] = []
    for p in tool_parameters(fn, hidden):
        hint = hints.get(p.name, Any)
        if isinstance(hint, _Unresolved):
            raise ValueError(
                f"tool function {name!r}: cannot resolve the type of parameter {p.name!r} "
                f"({hint.error}); pass parameters= to describe it"
            )
        try:
            schema = type_schema(hint)
        except TypeError as exc:
            raise ValueError(
                f"tool function {name!r}: parameter {p.name!r}: {exc}; pass parameters= to describe it"
            ) from None
        if p.name in described:
            schema["description"] = described[p.name]
        if p.default is p.empty:
            required.append(p.name)
        elif (default := _json_default(p.default)) is not _NO_DEFAULT:
            schema["default"] = default
        properties[p.name] = schema
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def type_schema(tp: Any) -> dict[str, Any]:
    """The JSON schema of the values of Python type ``tp``; ``TypeError`` when it has none."""
    return _schema(tp, ())


def argument_converters(
    fn: Callable[..., Any], hidden: Collection[str] = ()
) -> dict[str, Callable[[Any], Any]]:
    """How to turn the JSON value of a (top-level) parameter into its declared Python type.

    ``Enum`` parameters get the member (``Color("red")``), ``int`` ones an int for an integral float
    (JSON ``3.0``). Converters raise ``ValueError`` for values they cannot convert; ``None`` is
    passed through (it is only valid where the schema allows null).
    """
    hints = _type_hints(fn)
    converters: dict[str, Callable[[Any], Any]] = {}
    for p in tool_parameters(fn, hidden):
        base = _without_optional(hints.get(p.name, Any))
        if isinstance(base, type) and issubclass(base, Enum):
            converters[p.name] = base
        elif base is int:
            converters[p.name] = _integral
    return converters


# ----- type hints -------------------------------------------------------------------------------


class _Unresolved:
    """A type hint that could not be evaluated (e.g. a name imported only under TYPE_CHECKING)."""

    def __init__(self, error: Exception):
        self.error = f"{type(error).__name__}: {error}"


def _hint_target(fn: Callable[..., Any]) -> Any:
    """The object that carries ``fn``'s annotations and docstring."""
    if isinstance(fn, functools.partial):
        return _hint_target(fn.func)
    if inspect.isroutine(fn) or inspect.isclass(fn):
        return fn
    return type(fn).__call__  # a callable instance


def _type_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """``fn``'s resolved type hints; one that cannot be resolved becomes ``_Unresolved``.

    Hints are resolved one by one when resolving them together fails, so a hidden parameter typed
    with a name imported only for type checking does not stop the tool.
    """
    target = _hint_target(fn)
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception:  # any failure: resolve the hints one by one
        pass
    namespace = getattr(inspect.unwrap(target), "__globals__", {})
    hints: dict[str, Any] = {}
    for name, annotation in getattr(target, "__annotations__", {}).items():
        holder = types.SimpleNamespace(__annotations__={name: annotation})
        try:
            hints[name] = typing.get_type_hints(holder, namespace, None, include_extras=True)[name]
        except Exception as exc:  # reported only if the policy sees this parameter
            hints[name] = _Unresolved(exc)
    return hints


def _without_optional(tp: Any) -> Any:
    """``tp`` without ``Annotated`` and without ``None`` in a two-member union."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return _without_optional(args[0])
    if origin in _UNION_TYPES:
        members = [a for a in args if a is not type(None)]
        if len(members) == 1:
            return _without_optional(members[0])
    return tp


def _integral(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


# ----- type -> schema ---------------------------------------------------------------------------


def _schema(tp: Any, seen: tuple[type, ...]) -> dict[str, Any]:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any or tp is object or tp is inspect.Parameter.empty:
        return {}
    if origin is typing.Annotated:
        schema = _schema(args[0], seen)
        for extra in tp.__metadata__:
            if isinstance(extra, str):
                schema["description"] = extra
            elif isinstance(extra, collections.abc.Mapping):
                schema.update(extra)
        return schema
    if origin in (typing.Required, typing.NotRequired):
        return _schema(args[0], seen)
    if isinstance(tp, typing.NewType):
        return _schema(tp.__supertype__, seen)
    if tp is None or (isinstance(tp, type) and tp in _JSON_TYPES):
        return {"type": _JSON_TYPES[type(None) if tp is None else tp]}
    if origin is typing.Literal:
        return _enum_schema(args)
    if isinstance(tp, type) and issubclass(tp, Enum):
        return _enum_schema([member.value for member in tp])
    if origin in _UNION_TYPES:
        return _union_schema(args, seen)
    if (origin or tp) in _ARRAY_TYPES:
        return _array_schema(origin or tp, args, seen)
    if (origin or tp) in _OBJECT_TYPES:
        values = _schema(args[1], seen) if len(args) == 2 else {}
        return {"type": "object", **({"additionalProperties": values} if values else {})}
    if typing.is_typeddict(tp):
        return _typeddict_schema(tp, seen)
    raise TypeError(f"type {tp!r} has no JSON schema")


def _enum_schema(values: Collection[Any]) -> dict[str, Any]:
    values = [v.value if isinstance(v, Enum) else v for v in values]
    kinds: list[str] = []
    for value in values:
        kind = _JSON_TYPES.get(type(value))
        if kind is None:
            raise TypeError(f"enum value {value!r} is not a JSON scalar")
        if kind not in kinds:
            kinds.append(kind)
    return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": values}


def _union_schema(args: tuple[Any, ...], seen: tuple[type, ...]) -> dict[str, Any]:
    members = [_schema(a, seen) for a in args if a is not type(None)]
    nullable = len(members) < len(args)
    if len(members) == 1:
        schema = members[0]
    elif all(list(m) == ["type"] and isinstance(m["type"], str) for m in members):
        schema = {"type": list(dict.fromkeys(m["type"] for m in members))}
    else:
        schema = {"anyOf": members}
    if not nullable or not schema:
        return schema  # an unconstrained schema admits null already
    if "anyOf" in schema:
        return {**schema, "anyOf": [*schema["anyOf"], {"type": "null"}]}
    if "type" in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        schema = {**schema, "type": [*kinds, "null"]}
        if "enum" in schema:
            schema["enum"] = [*schema["enum"], None]
        return schema
    return {"anyOf": [schema, {"type": "null"}]}


def _array_schema(origin: Any, args: tuple[Any, ...], seen: tuple[type, ...]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "array"}
    if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        prefix = [_schema(a, seen) for a in args]
        return {**schema, "prefixItems": prefix, "minItems": len(prefix), "maxItems": len(prefix)}
    items = _schema(args[0], seen) if args else {}
    return {**schema, "items": items} if items else schema


def _typeddict_schema(tp: Any, seen: tuple[type, ...]) -> dict[str, Any]:
    if tp in seen:
        raise TypeError(f"{tp.__name__} refers to itself")
    hints = typing.get_type_hints(tp, include_extras=True)
    properties = {key: _schema(hint, (*seen, tp)) for key, hint in hints.items()}
    required = [key for key, hint in hints.items() if _is_required_key(hint, key in tp.__required_keys__)]
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _is_required_key(hint: Any, declared: bool) -> bool:
    """Whether a TypedDict key is required; a ``Required``/``NotRequired`` hint decides (Python 3.11
    gets ``__required_keys__`` wrong for them when annotations are strings)."""
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return _is_required_key(typing.get_args(hint)[0], declared)
    return {typing.Required: True, typing.NotRequired: False}.get(origin, declared)


_NO_DEFAULT = object()


def _json_default(value: Any) -> Any:
    """``value`` as JSON reads it (an Enum by its value, a tuple as a list), or ``_NO_DEFAULT``."""
    if isinstance(value, Enum):
        value = value.value
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        return _NO_DEFAULT
