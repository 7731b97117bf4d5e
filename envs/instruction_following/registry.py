"""The single registry of instruction checkers (IFEval, IF-RLVR / IFEvalG, IFBench families).

A checker is a function ``(response, **kwargs) -> bool`` registered under its instruction id with
``@instruction(id)``. Its keyword parameters, with their annotations, are the instruction's
kwargs: ``validate_kwargs`` checks and coerces a task's kwargs against them when tasks load.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cascade_envs.core import TaskError

Checker = Callable[..., bool]


@dataclass(frozen=True)
class Instruction:
    id: str
    family: str
    check: Checker
    params: dict[str, inspect.Parameter]
    hints: dict[str, Any]


INSTRUCTIONS: dict[str, Instruction] = {}


def instruction(instruction_id: str, family: str) -> Callable[[Checker], Checker]:
    """Register ``fn`` as the checker of ``instruction_id`` (family: "ifeval", "ifevalg", "ifbench")."""

    def decorate(fn: Checker) -> Checker:
        if instruction_id in INSTRUCTIONS:
            raise ValueError(f"instruction {instruction_id!r} registered twice")
        params = dict(list(inspect.signature(fn).parameters.items())[1:])
        INSTRUCTIONS[instruction_id] = Instruction(
            instruction_id, family, fn, params, typing.get_type_hints(fn)
        )
        return fn

    return decorate


def get_instruction(instruction_id: str) -> Instruction:
    try:
        return INSTRUCTIONS[instruction_id]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(instruction_id, list(INSTRUCTIONS), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise TaskError(f"unknown instruction id {instruction_id!r}{hint}", "instruction_id_list") from None
