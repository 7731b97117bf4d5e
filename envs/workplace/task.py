"""A workplace task row, read and checked: its ground-truth calls, its clock and the tools it announces.

Rows use NeMo Gym's ``workplace_assistant`` layout, read unchanged:

- ``responses_create_params.input``: the prompt; a message must state today's date as
  ``YYYY-MM-DD``: the first one found is the episode's clock, at the ``HH:MM[:SS]`` that follows
  it within ``CLOCK_WINDOW`` characters, else at midnight (sent emails are stamped with it, and
  tasks speak of "last week" and "tomorrow");
- ``responses_create_params.tools`` (or ``tools``; optional): the row's own tool specs
  (Responses-API or Chat-Completions form), which are then what the policy sees and what its
  calls are checked against; a row without them is announced every tool, described in our words;
- ``ground_truth``: the calls that solve the task, a list of ``{"name", "arguments"}`` with the
  arguments as a JSON object or a JSON string of one (NeMo Gym's form); it may be empty (a task
  answered by reading only), or be the JSON text of such a list;
- ``category`` (optional): a label such as ``workplace_assistant_email``;
- ``expected_answer``, ``distractors`` (optional, ours): what the final reply of a question task
  must state and must not (``answer.py``). NeMo Gym's rows have neither and are scored on the
  state alone, as NeMo Gym scores them.

A row is read once, when its env loads it (``read_task``); the tools section of a prompt is
rendered once per tool list and system prompt (``AnnouncedTools.announce``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date, datetime, time
from typing import Any

from cascade_envs.core import Message, Row, TaskError
from cascade_envs.data import Prompt, decode_json_field, prompt_messages
from cascade_envs.tools import Toolbox, ToolCall, with_tools

from .answer import ExpectedAnswer
from .toolset import WRITE_TOOLS

MAX_GROUND_TRUTH_CALLS = 100
CLOCK_WINDOW = 80
"""How far after the date the prompt's time of day may come (characters)."""
_DATE = re.compile(r"(?<!\d)(\d{4}-\d{2}-\d{2})(?!\d)")
_TIME = re.compile(r"(?<!\d)(\d{2}:\d{2}(?::\d{2})?)(?!\d)")


@dataclass(frozen=True)
class WorkplaceTask:
    """The env's task: the row's messages (its tools are announced apart, ``AnnouncedTools``) and what
    scoring needs."""

    prompt: Prompt
    calls: tuple[ToolCall, ...]
    """The ground truth."""
    now: datetime
    toolbox: Toolbox
    """The tools as the row announces them (ours, or ours under the row's own specs)."""
    specs: list[dict] | None
    """The row's own tool specs, which its prompt announces; ``None``: it announces ours."""
    answer: ExpectedAnswer | None = None
    """What the final reply must state, for a question task (``answer.py``)."""

    @property
    def writes(self) -> int:
        """How many ground-truth calls change the workplace (0: a task answered by reading)."""
        return sum(call.name in WRITE_TOOLS for call in self.calls)


class AnnouncedTools:
    """Every tool, the toolboxes that rows' own specs make of them, and the prompts that announce them.

    ``Toolbox.with_specs`` costs ~2 ms for the 27 specs of a public row and rendering them into a
    prompt ~0.4 ms; so toolboxes are kept per distinct spec list (by content, and for a list seen
    before, by identity: rows are never changed in place), and the system message that announces
    a toolbox per system prompt; a bounded number of each.
    """

    def __init__(self, toolbox: Toolbox, limit: int = 256):
        self.toolbox = toolbox
        self.limit = limit
        self._by_content: dict[str, Toolbox] = {}
        self._by_identity: dict[int, tuple[list[dict], Toolbox]] = {}
        self._heads: dict[tuple[int, str | None], tuple[Toolbox, Message]] = {}

    def announced(self, specs: list[dict]) -> Toolbox:
        """The toolbox under ``specs``; ``ValueError`` when they name a tool we lack or bad parameters."""
        seen = self._by_identity.get(id(specs))
        if seen is not None and seen[0] is specs:
            return seen[1]
        key = json.dumps(specs, sort_keys=True, default=str)
        toolbox = self._by_content.get(key)
        if toolbox is None:
            toolbox = self.toolbox.with_specs(specs)
            _bounded(self._by_content, self.limit)[key] = toolbox
        _bounded(self._by_identity, self.limit)[id(specs)] = (specs, toolbox)
        return toolbox

    def announce(self, messages: list[Message], toolbox: Toolbox, specs: list[dict] | None) -> list[Message]:
        """``messages`` with the tools section of ``toolbox`` (``with_tools``; rendered from ``specs``
        when given, else from the toolbox's own), rendered once per toolbox and system prompt."""
        system = bool(messages) and messages[0]["role"] == "system"
        key = (id(toolbox), messages[0]["content"] if system else None)
        seen = self._heads.get(key)
        if seen is None or seen[0] is not toolbox:
            head = with_tools(messages[:1] if system else [], toolbox.specs() if specs is None else specs)[0]
            seen = (toolbox, head)
            _bounded(self._heads, self.limit)[key] = seen
        return [dict(seen[1]), *messages[system:]]


def read_task(row: Row, tools: AnnouncedTools) -> WorkplaceTask:
    """Read a row's workplace fields; ``TaskError`` names the field that is wrong."""
    messages = prompt_messages(row)
    category = row.get("category")
    if category is not None and not isinstance(category, str):
        raise TaskError("must be a string", "category")
    calls = _ground_truth(row.get("ground_truth"))
    where, specs = _specs(row)
    toolbox = tools.toolbox
    if specs is not None:
        try:
            toolbox = tools.announced(specs)
        except ValueError as exc:
            raise TaskError(str(exc), where) from None
    unknown = sorted({call.name for call in calls if call.name not in toolbox})
    if unknown:
        raise TaskError(f"calls tool(s) {unknown} that the task does not announce", "ground_truth")
    return WorkplaceTask(
        Prompt(tuple(messages)), calls, task_clock(messages), toolbox, specs, ExpectedAnswer.from_row(row)
    )


def task_clock(messages: list[Message]) -> datetime:
    """The date (and time) the prompt says it is."""
    for message in messages:
        text = message["content"]
        day = _DATE.search(text)
        if day is None:
            continue
        try:
            today = date.fromisoformat(day.group(1))
            clock = _TIME.search(text, day.end(), day.end() + CLOCK_WINDOW)
            return datetime.combine(today, time.fromisoformat(clock.group(1)) if clock else time())
        except ValueError as exc:
            raise TaskError(
                f"the prompt's date or time is not valid: {exc}", "responses_create_params.input"
            ) from None
    raise TaskError(
        "the prompt must state today's date as YYYY-MM-DD (e.g. \"Today's date is Thursday, "
        '2023-11-30 and the current time is 23:59:00.")',
        "responses_create_params.input",
    )


def _ground_truth(value: Any) -> tuple[ToolCall, ...]:
    value = decode_json_field(value, "ground_truth")
    if not isinstance(value, list):
        raise TaskError("expected a list of {'name', 'arguments'} calls", "ground_truth")
    if len(value) > MAX_GROUND_TRUTH_CALLS:
        raise TaskError(f"{len(value)} calls, over the limit of {MAX_GROUND_TRUTH_CALLS}", "ground_truth")
    return tuple(_call(i, item) for i, item in enumerate(value))


def _call(index: int, item: Any) -> ToolCall:
    where = f"ground_truth[{index}]"
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise TaskError(f"{where}: expected an object with a string 'name'", "ground_truth")
    try:
        arguments = decode_json_field(item.get("arguments", {}), "ground_truth")
    except TaskError as exc:
        raise TaskError(f"{where}: 'arguments' is {exc.args[0]}", "ground_truth") from None
    if not isinstance(arguments, dict):
        raise TaskError(f"{where}: 'arguments' must be a JSON object", "ground_truth")
    return ToolCall(item["name"], arguments, id=f"ground_truth_{index}")


def _bounded(cache: dict, limit: int) -> dict:
    if len(cache) >= limit:
        cache.clear()
    return cache


def _specs(row: dict[str, Any]) -> tuple[str, list[dict] | None]:
    """The row's tool specs and their field, where ``Env.prompt`` finds them (``tools`` first)."""
    params = row.get("responses_create_params")
    where, specs = "tools", row.get("tools")
    if specs is None and isinstance(params, dict):
        where, specs = "responses_create_params.tools", params.get("tools")
    if specs is not None and (
        not isinstance(specs, list) or not specs or not all(isinstance(s, dict) for s in specs)
    ):
        raise TaskError("expected a non-empty list of tool specs", where)
    return where, specs
