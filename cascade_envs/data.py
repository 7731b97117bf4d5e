"""Task sources: rows from JSONL or Parquet files, or from a domain's bundled sample set.

Rows are plain dicts in the layout of the public Nemotron / NeMo Gym RL data. Each env instance
loads its rows once (``Env.load``: ``Env.load_task`` makes the typed task of a row) into a
``TaskSource`` of ``Loaded`` items; a malformed row is reported with file, line and field.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Generic, NamedTuple, TypeVar

import numpy as np

from .core import CascadeError, Message, Row, TaskError

log = logging.getLogger("cascade_envs.data")

BUNDLED = "bundled:"
ID_FIELDS = ("id", "key", "uuid", "instance_id", "task_id", "question_id")
MAX_REPORTED_ERRORS = 5
TaskT = TypeVar("TaskT")
T = TypeVar("T")


class DataError(CascadeError):
    """A task file cannot be read, or holds malformed rows."""


def resolve_path(path: str | os.PathLike[str]) -> Path:
    """Resolve ``bundled:<domain>/<file>`` to the file shipped in ``cascade_envs.envs.<domain>.data``."""
    text = os.fspath(path)
    if text.startswith(BUNDLED):
        domain, _, name = text[len(BUNDLED) :].partition("/")
        resolved = Path(str(resources.files("cascade_envs.envs").joinpath(domain, "data", name)))
    else:
        resolved = Path(text).expanduser()
    if not resolved.is_file():
        raise DataError(f"task file not found: {text}")
    return resolved


def read_rows(path: str | os.PathLike[str]) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, row)`` from a JSONL or Parquet file (row numbers count from 1)."""
    resolved = resolve_path(path)
    if resolved.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise DataError("reading Parquet needs pyarrow: pip install 'cascade-envs[parquet]'") from exc
        for number, row in enumerate(pq.read_table(resolved).to_pylist(), start=1):
            yield number, row
        return
    with resolved.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                yield number, json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                yield number, DataError(f"not valid JSON: {exc}")


def decode_json_field(value: Any, field: str) -> Any:
    """A row field that may hold JSON as text (as the public rows often do): decoded, else as given.

    Text that is not JSON raises ``TaskError`` naming ``field``.
    """
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise TaskError(f"not valid JSON ({exc.msg} at char {exc.pos})", field) from None
    except RecursionError:
        raise TaskError("JSON nested too deeply", field) from None


def task_id(row: Row) -> str:
    """A stable id for a row: its own id field, or a hash of its content."""
    for name in ID_FIELDS:
        value = row.get(name)
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            return str(value)
    blob = json.dumps(row, sort_keys=True, default=str).encode()
    return hashlib.sha1(blob).hexdigest()[:16]


def prompt_messages(row: Row) -> list[Message]:
    """The prompt of a row: ``responses_create_params.input`` (NeMo Gym), ``messages`` or ``prompt``."""
    params = row.get("responses_create_params")
    if isinstance(params, dict) and "input" in params:
        source: Any = params["input"]
        where = "responses_create_params.input"
    elif "messages" in row:
        source, where = row["messages"], "messages"
    elif "prompt" in row:
        source, where = row["prompt"], "prompt"
    else:
        raise TaskError("no prompt: expected 'responses_create_params.input', 'messages' or 'prompt'")
    if isinstance(source, str):
        if not source.strip():
            raise TaskError("the prompt is empty", where)
        return [{"role": "user", "content": source}]
    if not isinstance(source, list) or not source:
        raise TaskError("expected a non-empty list of chat messages or a string", where)
    messages: list[Message] = []
    for i, message in enumerate(source):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise TaskError(f"message {i} needs a string 'role'", where)
        content = message.get("content")
        if isinstance(content, list):  # Responses-API content parts
            texts = [p.get("text", "") for p in content if isinstance(p, dict)]
            if not all(isinstance(t, str) for t in texts):
                raise TaskError(f"message {i}: every content part's 'text' must be a string", where)
            content = "".join(texts)
        if not isinstance(content, str):
            raise TaskError(f"message {i} needs string 'content'", where)
        role = "system" if message["role"] == "developer" else message["role"]
        messages.append({"role": role, "content": content})
    return messages


@dataclass(frozen=True, slots=True)
class Prompt:
    """The opening messages a row brings and the tools it announces, read once when its task loads.

    A task that keeps one in a ``prompt`` field (or is one: the default task) needs no
    ``Env.prompt`` of its own.
    """

    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...] = ()

    @classmethod
    def of(cls, row: Row) -> Prompt:
        """The row's prompt (``prompt_messages``) and its ``tools`` (or ``responses_create_params.tools``)."""
        params = row.get("responses_create_params")
        tools = row.get("tools") or (params.get("tools") if isinstance(params, dict) else None)
        return cls(tuple(prompt_messages(row)), tuple(tools or ()))


class Loaded(NamedTuple, Generic[TaskT]):
    """A row, the task its env made of it (``Env.load``), and the row's id."""

    row: Row
    task: TaskT
    task_id: str


class TaskSource(Sequence[Loaded[TaskT]]):
    """An env's loaded tasks, in file order, with seeded sampling."""

    def __init__(self, items: Iterable[Loaded[TaskT]], name: str = "<memory>", skipped: int = 0):
        self.items = list(items)
        self.name = name
        self.skipped = skipped
        """Malformed rows left out (``on_bad_rows="skip"``)."""

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Loaded[TaskT]:  # type: ignore[override]  # int indexes only, no slices
        return self.items[index]

    def sample(self, rng: np.random.Generator) -> Loaded[TaskT]:
        if not self.items:
            raise DataError(f"task source {self.name} is empty")
        return self.items[int(rng.integers(len(self.items)))]

    @classmethod
    def from_rows(
        cls,
        rows: Iterable[tuple[int, Any]],
        load: Callable[[Any], Loaded[TaskT]],
        name: str,
        on_error: str = "raise",
    ) -> TaskSource[TaskT]:
        """Load ``(line, row)`` pairs; ``on_error="skip"`` drops bad rows with a warning and a count.

        Every row error names the file, the line, the row's id when it has one, and the field; an
        unexpected exception from ``load`` is a row error too, never the end of the load.
        """
        items: list[Loaded[TaskT]] = []
        errors: list[str] = []
        for line, row in rows:
            item, error = validate_row(row, load)
            if item is not None:
                items.append(item)
            else:
                rid = row_id(row)
                errors.append(f"{name}:{line}" + (f" (id {rid})" if rid is not None else "") + f": {error}")
        if errors:
            shown = "\n  ".join(errors[:MAX_REPORTED_ERRORS])
            more = (
                f"\n  ... and {len(errors) - MAX_REPORTED_ERRORS} more"
                if len(errors) > MAX_REPORTED_ERRORS
                else ""
            )
            message = f"{len(errors)} malformed row(s):\n  {shown}{more}"
            if on_error != "skip":
                raise DataError(message)
            log.warning("skipping %s", message)
            log.warning("%s: skipped %d malformed row(s), kept %d", name, len(errors), len(items))
        return cls(items, name, skipped=len(errors))


def validate_row(row: Any, load: Callable[[Any], T]) -> tuple[T | None, str | None]:
    """``(load(row), None)``, or ``(None, why the row is bad)``: any exception, or a read error passed
    in as the row, never escapes."""
    try:
        if isinstance(row, Exception):
            raise row
        return load(row), None
    except (TaskError, DataError) as exc:
        return None, str(exc)
    except RecursionError:
        return None, "the row is nested too deeply to validate"
    except Exception as exc:
        return None, f"the row could not be validated ({type(exc).__name__}: {exc})"


def row_id(row: Any) -> str | None:
    """The row's own id (``task_id``) when it carries one in an id field, else ``None``."""
    return task_id(row) if isinstance(row, dict) and _has_id(row) else None


def _has_id(row: dict[str, Any]) -> bool:
    return any(isinstance(row.get(k), (str, int)) and not isinstance(row.get(k), bool) for k in ID_FIELDS)


def load_tasks(
    source: str | os.PathLike[str] | Iterable[Any],
    load: Callable[[Any], Loaded[TaskT]],
    on_error: str = "raise",
) -> TaskSource[TaskT]:
    """A ``TaskSource`` of the rows of a file (``bundled:`` or a path) or of an iterable of rows."""
    if isinstance(source, (str, os.PathLike)):
        return TaskSource.from_rows(read_rows(source), load, os.fspath(source), on_error)
    return TaskSource.from_rows(enumerate(source, start=1), load, "<rows>", on_error)
