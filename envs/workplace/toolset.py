"""The 27 workplace tools as one ``Toolbox``, which of them write, and synchronous replay of calls.

The tools are plain functions (one module per data set) whose first parameter, ``db``, is the
episode's ``Workplace``: a hidden parameter the env injects, never shown to the policy. An
argument given as ``null`` counts as not given (the toolbox's ``drop_nulls``), as NeMo Gym's
server drops such arguments before calling the tool.
"""

from __future__ import annotations

from collections.abc import Iterable

from cascade_envs.tools import Tool, Toolbox, ToolCall, ToolResult

from . import analytics, calendar, crm, directory, email, project_management
from .tables import Workplace

FUNCTIONS = (
    *directory.TOOLS,
    *email.TOOLS,
    *calendar.TOOLS,
    *analytics.TOOLS,
    *project_management.TOOLS,
    *crm.TOOLS,
)
WRITE_TOOLS = frozenset(fn.__name__ for fn in FUNCTIONS if getattr(fn, "writes", False))
"""The tools that change the workplace (create, update, delete); all others only read it."""
HIDDEN = ("db",)


def make_toolbox(*, max_result_chars: int = 20_000) -> Toolbox:
    """A toolbox of every workplace tool, announced with the schemas derived from the functions."""
    return Toolbox(
        [Tool.from_function(fn, hidden=HIDDEN) for fn in FUNCTIONS],
        max_result_chars=max_result_chars,
        drop_nulls=True,
    )


def call_now(toolbox: Toolbox, call: ToolCall, db: Workplace) -> ToolResult:
    """Run one call at once, without an event loop (replays at load time and at scoring).

    ``Toolbox.acall`` runs sync tool functions inline and awaits nothing else, so its coroutine
    finishes on its first step; the validation, conversions and error messages are those of a
    live call.
    """
    step = toolbox.acall(call, {"db": db})
    try:
        step.send(None)
    except StopIteration as finished:
        return finished.value
    step.close()
    raise RuntimeError(f"tool {call.name!r} suspended: workplace tools must be synchronous")


def replay(toolbox: Toolbox, db: Workplace, calls: Iterable[ToolCall]) -> list[ToolResult]:
    """Run ``calls`` in order on ``db``; a failing call changes nothing and the next one runs."""
    return [call_now(toolbox, call, db) for call in calls]
