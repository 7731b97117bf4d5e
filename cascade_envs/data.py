"""Task sources: rows from JSONL or Parquet files, or from a domain's bundled sample set.

Rows are plain dicts in the layout of the public Nemotron / NeMo Gym RL data. Each env validates
its rows with ``Env.load_task``; a malformed row is reported with file, line and field.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from .core import CascadeError, Message, Task, TaskError

log = logging.getLogger("cascade_envs.data")

BUNDLED = "bundled:"
ID_FIELDS = ("id", "key", "uuid", "instance_id", "task_id", "question_id")
MAX_REPORTED_ERRORS = 5


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


def task_id(task: Task) -> str:
    """A stable id for a task: its own id field, or a hash of its content."""
    for name in ID_FIELDS:
        value = task.get(name)
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            return str(value)
    blob = json.dumps(task, sort_keys=True, default=str).encode()
    return hashlib.sha1(blob).hexdigest()[:16]


def prompt_messages(task: Task) -> list[Message]:
    """The prompt of a row: ``responses_create_params.input`` (NeMo Gym), ``messages`` or ``prompt``."""
    params = task.get("responses_create_params")
    if isinstance(params, dict) and "input" in params:
        source: Any = params["input"]
        where = "responses_create_params.input"
    elif "messages" in task:
        source, where = task["messages"], "messages"
    elif "prompt" in task:
        source, where = task["prompt"], "prompt"
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


class TaskSource(Sequence[Task]):
    """An in-memory, validated list of tasks with seeded sampling."""

    def __init__(self, tasks: Iterable[Task], name: str = "<memory>", skipped: int = 0):
        self.tasks = list(tasks)
        self.name = name
        self.skipped = skipped
        """Malformed rows left out (``on_bad_rows="skip"``)."""

    def __len__(self) -> int:
        return len(self.tasks)

    def __getitem__(self, index: int) -> Task:  # type: ignore[override]  # int indexes only, no slices
        return self.tasks[index]

    def sample(self, rng: np.random.Generator) -> Task:
        if not self.tasks:
            raise DataError(f"task source {self.name} is empty")
        return self.tasks[int(rng.integers(len(self.tasks)))]

    @classmethod
    def from_rows(
        cls,
        rows: Iterable[tuple[int, Any]],
        load_task: Callable[[Any], Task],
        name: str,
        on_error: str = "raise",
    ) -> TaskSource:
        """Validate ``(line, row)`` pairs; ``on_error="skip"`` drops bad rows with a warning and a count.

        Every row error names the file, the line, the row's id when it has one, and the field; an
        unexpected exception from ``load_task`` is a row error too, never the end of the load.
        """
        tasks: list[Task] = []
        errors: list[str] = []
        for line, row in rows:
            task, error = validate_row(row, load_task)
            if task is not None:
                tasks.append(task)
            else:
                rid = row_id(row)
                errors.append(f"{name}:{line}" + (f" (id {rid})" if rid is not None else "") + f": {error}")
        if errors:
            shown = "\n  ".join(errors[:MAX_REPORTED_ERRORS])
            more = f"\n  ... and {len(errors) - MAX_REPORTED_ERRORS} more" if len(errors) > MAX_REPORTED_ERRORS else ""
            message = f"{len(errors)} malformed row(s):\n  {shown}{more}"
            if on_error != "skip":
                raise DataError(message)
            log.warning("skipping %s", message)
            log.warning("%s: skipped %d malformed row(s), kept %d", name, len(errors), len(tasks))
        return cls(tasks, name, skipped=len(errors))


def validate_row(row: Any, load_task: Callable[[Any], Task]) -> tuple[Task | None, str | None]:
    """``(load_task(row), None)``, or ``(None, why the row is bad)``: any exception, a read error passed
    in as the row, or a row that is not a JSON object, never escapes."""
    try:
        if isinstance(row, Exception):
            raise row
        if not isinstance(row, dict):
            raise TaskError(f"a row must be a JSON object, got {type(row).__name__}")
        return load_task(row), None
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


_cache: dict[tuple[Any, ...], TaskSource] = {}


def load_tasks(
    source: str | os.PathLike[str] | Iterable[Any] | TaskSource,
    load_task: Callable[[Any], Task],
    cache_key: Any = None,
    on_error: str = "raise",
) -> TaskSource:
    """Build a ``TaskSource`` from a path (cached per file version and ``cache_key``) or from rows."""
    if isinstance(source, TaskSource):
        return source
    if isinstance(source, (str, os.PathLike)):
        path = resolve_path(source)
        stat = path.stat()
        key = (cache_key, str(path), stat.st_mtime_ns, stat.st_size, on_error)
        if key not in _cache:
            _cache[key] = TaskSource.from_rows(read_rows(path), load_task, os.fspath(source), on_error)
        return _cache[key]
    return TaskSource.from_rows(enumerate(source, start=1), load_task, "<rows>", on_error)
