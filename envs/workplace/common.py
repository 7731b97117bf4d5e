"""What the workplace tools share: the argument-size guard, text matching, dates and pagination.

Matching follows NeMo Gym's tools with one deliberate difference: where NeMo Gym passes the
model's text to pandas' ``str.contains`` (a regular expression), these match it literally, so
``a.b`` does not match ``axb`` and no pattern can fail to compile or backtrack for long.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from cascade_envs.tools import ToolError

from .tables import Workplace

MAX_TEXT_CHARS = 10_000
"""Longest string argument a tool accepts (an email body, a search query)."""
MAX_PAGE_SIZE = 50
"""Largest page a search returns; a larger ``page_size`` is lowered to it (and says so)."""
F = TypeVar("F", bound=Callable[..., Any])


def workplace_tool(fn: F | None = None, *, writes: bool = False) -> Any:
    """Mark a workplace tool function (bare or ``writes=True``) and guard its arguments' size.

    A string argument longer than ``MAX_TEXT_CHARS`` is refused with a ``ToolError`` before the
    function runs, so no call stores or scans unbounded text. The function keeps its signature,
    hints and docstring, from which its schema is derived.
    """

    def mark(function: F) -> F:
        @functools.wraps(function)
        def guarded(db: Workplace, **arguments: Any) -> Any:
            for name, value in arguments.items():
                if isinstance(value, str) and len(value) > MAX_TEXT_CHARS:
                    raise ToolError(
                        f"argument '{name}' has {len(value):,} characters; the limit is {MAX_TEXT_CHARS:,}"
                    )
            return function(db, **arguments)

        guarded.__signature__ = inspect.signature(function)  # type: ignore[attr-defined]  # keeps the schema
        guarded.writes = writes  # type: ignore[attr-defined]  # read by toolset.WRITE_TOOLS
        return guarded  # type: ignore[return-value]  # same call signature as `function`

    return mark if fn is None else mark(fn)


def contains(value: Any, needle: str) -> bool:
    """Case-insensitive literal substring test; a missing value contains nothing."""
    return isinstance(value, str) and needle.lower() in value.lower()


def require(*values: Any, message: str) -> None:
    """NeMo Gym's check of required values: an empty one fails with ``message``."""
    if not all(values):
        raise ToolError(message)


def parse_datetime(text: str, message: str) -> datetime:
    """A date (``YYYY-MM-DD``, read as midnight) or date-time (``YYYY-MM-DD HH:MM[:SS]``)."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ToolError(message) from None
    return value.replace(tzinfo=None)


def paginate(items: Sequence[Any], noun: str, page: int, page_size: int) -> dict[str, Any]:
    """NeMo Gym's pages: the page is clamped to [1, last]; ``page_size`` must be >= 1 (capped)."""
    if page_size < 1:
        raise ToolError("page_size must be at least 1")
    page_size = min(int(page_size), MAX_PAGE_SIZE)
    total = len(items)
    pages = -(-total // page_size)
    page = max(1, min(int(page), pages)) if pages else 1
    start = (page - 1) * page_size
    return {
        f"{noun}s": list(items[start : start + page_size]),
        "pagination": {f"total_{noun}s": total, "page": page, "page_size": page_size, "total_pages": pages},
    }


def find_row(db: Workplace, table: str, key: str, missing: str) -> dict[str, Any]:
    """The row with ``key`` as a dict, or a ``ToolError(missing)``."""
    row = db[table].get(key)
    if row is None:
        raise ToolError(missing)
    return dict(row)


def field_of(row: dict[str, Any], field: str, missing: str) -> dict[str, Any]:
    """``{field: value}`` of a row, as the get-by-id tools return it."""
    if field not in row:
        raise ToolError(missing)
    return {field: row[field]}
