"""The single registry of instruction checkers (IFEval, IF-RLVR / IFEvalG, IFBench families).

A checker is a function ``(response, **kwargs) -> bool`` registered under its instruction id with
``@instruction(id, family)``. Its keyword parameters, with their annotations, are the instruction's
kwargs: ``validate_kwargs`` checks and coerces a task's kwargs against them when tasks load, so a
checker only ever sees well-typed values. Annotations understood: ``int``, ``float``, ``str``,
``bool``, ``list[str]``, ``Literal[...]``, ``X | None`` (optional) and ``Annotated[T, check, ...]``
where each ``check(value)`` returns the value or raises ``ValueError``. A parameter without a
default is required. ``validate=`` takes a function of the whole kwargs dict for rules that span
several kwargs.
"""

from __future__ import annotations

import functools
import inspect
import logging
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cascade_envs.core import TaskError

log = logging.getLogger("cascade_envs.instruction_following")

Checker = Callable[..., bool]
KwargsCheck = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Instruction:
    id: str
    family: str
    check: Checker
    params: dict[str, inspect.Parameter]
    hints: dict[str, Any]
    validate: KwargsCheck | None = None


INSTRUCTIONS: dict[str, Instruction] = {}


def instruction(
    instruction_id: str, family: str, *, validate: KwargsCheck | None = None
) -> Callable[[Checker], Checker]:
    """Register ``fn`` as the checker of ``instruction_id`` (family: "ifeval", "ifevalg", "ifbench")."""

    def decorate(fn: Checker) -> Checker:
        if instruction_id in INSTRUCTIONS:
            raise ValueError(f"instruction {instruction_id!r} registered twice")
        params = dict(list(inspect.signature(fn).parameters.items())[1:])
        hints = typing.get_type_hints(fn, include_extras=True)
        INSTRUCTIONS[instruction_id] = Instruction(instruction_id, family, fn, params, hints, validate)
        return fn

    return decorate


def get_instruction(instruction_id: str) -> Instruction:
    """The registered instruction ``instruction_id`` (the checker families load on first use)."""
    if isinstance(instruction_id, str) and instruction_id not in INSTRUCTIONS:
        load_families()
    try:
        return INSTRUCTIONS[instruction_id]
    except (KeyError, TypeError):
        import difflib

        close = difflib.get_close_matches(str(instruction_id), list(INSTRUCTIONS), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        hint += "".join(f"; the {f} checkers failed to load: {e}" for f, e in _load_errors.items())
        raise TaskError(f"unknown instruction id {instruction_id!r}{hint}", "instruction_id_list") from None


# ----- kwargs validation ---------------------------------------------------------------------

_warned: set[tuple[str, str, str]] = set()


def _warn_once(instruction_id: str, name: str, quirk: str) -> None:
    key = (instruction_id, name, quirk)
    if key not in _warned:
        _warned.add(key)
        log.warning("instruction %s, kwarg %r: %s (normalised)", instruction_id, name, quirk)


class _Bad(ValueError):
    """A kwarg value that cannot be coerced to its annotation."""


def _coerce(value: Any, hint: Any, quirk: Callable[[str], None]) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        value = _coerce(value, args[0], quirk)
        for check in args[1:]:
            value = check(value)
        return value
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        errors = []
        for option in options:
            try:
                return _coerce(value, option, quirk)
            except (_Bad, ValueError) as exc:
                errors.append(str(exc))
        raise _Bad(" or ".join(errors))
    if origin is typing.Literal:
        if value in args:
            return value
        if isinstance(value, str):
            folded = " ".join(value.replace("_", " ").split()).lower()
            for choice in args:
                if isinstance(choice, str) and choice.lower() == folded:
                    quirk(f"{value!r} read as {choice!r}")
                    return choice
        raise _Bad(f"must be one of {', '.join(map(repr, args))}, got {value!r}")
    if origin is list:
        (item,) = args or (Any,)
        if isinstance(value, str) and item is str:
            quirk("a single string given for a list; wrapped in a list")
            value = [value]
        if not isinstance(value, (list, tuple)) or not value:
            raise _Bad(f"must be a non-empty list, got {value!r}")
        return [_coerce(v, item, quirk) for v in value]
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise _Bad(f"must be true or false, got {value!r}")
    if hint is int:
        return _to_int(value)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise _Bad(f"must be a number, got {value!r}")
        try:
            return float(value)
        except ValueError:
            raise _Bad(f"must be a number, got {value!r}") from None
    if hint is str:
        if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
            quirk("a one-element list given for a string; unwrapped")
            value = value[0]
        if not isinstance(value, str) or not value.strip():
            raise _Bad(f"must be a non-empty string, got {value!r}")
        return value
    if hint is Any:
        return value
    raise TypeError(f"unsupported kwarg annotation {hint!r}")


def _to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise _Bad(f"must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise _Bad(f"must be an integer, got {value!r}") from None
        return _to_int(number)
    raise _Bad(f"must be an integer, got {value!r}")


def at_least(minimum: float) -> Callable[[Any], Any]:
    """An ``Annotated`` check: the value is at least ``minimum``."""

    def check(value: Any) -> Any:
        if value < minimum:
            raise ValueError(f"must be at least {minimum}, got {value!r}")
        return value

    return check


def validate_kwargs(instruction_id: str, kwargs: Any) -> dict[str, Any]:
    """Check ``kwargs`` of ``instruction_id`` and return them coerced to the checker's types.

    ``None`` values are dropped (public rows list every possible kwarg, mostly null); numeric
    strings and integral floats become ints; known data quirks (a one-element list for a string,
    a string for a list of strings, ``less_than`` for ``less than``, the kwargs object stored as
    a JSON string) are normalised with a warning. Unknown, missing or ill-typed
    kwargs raise ``TaskError`` naming the instruction and the kwarg.
    """
    spec = get_instruction(instruction_id)
    if isinstance(kwargs, str):  # some exports store each kwargs object as a JSON string
        import json

        try:
            kwargs = json.loads(kwargs) if kwargs.strip() else None
        except ValueError:
            raise TaskError(f"{instruction_id}: kwargs is a string that is not JSON", "kwargs") from None
        _warn_once(instruction_id, "kwargs", "a JSON string given for the kwargs object; parsed")
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict):
        raise TaskError(f"{instruction_id}: kwargs must be an object, got {type(kwargs).__name__}", "kwargs")
    given = {k: v for k, v in kwargs.items() if v is not None}
    unknown = sorted(map(str, set(given) - set(spec.params)))
    if unknown:
        allowed = ", ".join(spec.params) or "none"
        raise TaskError(
            f"{instruction_id}: unknown kwarg(s) {', '.join(unknown)} (allowed: {allowed})", "kwargs"
        )
    clean: dict[str, Any] = {}
    for name, param in spec.params.items():
        if name not in given:
            if param.default is inspect.Parameter.empty:
                raise TaskError(f"{instruction_id}: missing required kwarg {name!r}", "kwargs")
            continue
        try:
            clean[name] = _coerce(
                given[name], spec.hints[name], functools.partial(_warn_once, instruction_id, name)
            )
        except ValueError as exc:
            raise TaskError(f"{instruction_id}: kwarg {name!r} {exc}", "kwargs") from None
    if spec.validate is not None:
        try:
            spec.validate(clean)
        except ValueError as exc:
            raise TaskError(f"{instruction_id}: {exc}", "kwargs") from None
    return clean


# ----- the families -------------------------------------------------------------------------

FAMILY_MODULES = ("ifeval", "ifevalg", "ifbench")
_load_errors: dict[str, str] = {}
_attempted: set[str] = set()


def load_families() -> dict[str, str]:
    """Import every checker family so its ids register; returns ``{family: error}`` for those that failed.

    ``ifbench`` is optional: when its module is absent the IFBench ids are simply unknown; when it
    is present but cannot import (a missing dependency), the error is kept and shown with any
    unknown-id error.
    """
    import importlib

    for family in FAMILY_MODULES:
        name = f"{__package__}.{family}"
        if family in _attempted:
            continue
        _attempted.add(family)
        try:
            importlib.import_module(name)
        except ImportError as exc:
            if isinstance(exc, ModuleNotFoundError) and exc.name == name:
                continue
            _load_errors[family] = f"{type(exc).__name__}: {exc}"
            log.warning("instruction family %s did not load: %s", family, _load_errors[family])
    return dict(_load_errors)
