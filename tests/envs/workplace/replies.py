"""Final replies for scripted episodes of bundled rows: a question task's reply states its answer."""

from __future__ import annotations

from typing import Any


def stated_answer(task: dict[str, Any]) -> str:
    """The row's ``expected_answer`` as a reply would state it (the first alternative of each item); "" if none."""
    value = task.get("expected_answer")
    items = [value] if isinstance(value, str) else value or []
    return "; ".join(item if isinstance(item, str) else item[0] for item in items)


def final_reply(task: dict[str, Any], done: str = "All done.") -> str:
    """``done``, followed by the row's answer when it asks a question."""
    answer = stated_answer(task)
    return f"{done} Here is what I found: {answer}." if answer else done
