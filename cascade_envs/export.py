"""``cascade-envs export --format NAME ENV_ID -o PATH``: an env's rows in a trainer's data format.

``FORMATS``: format name -> ``"module:function"`` (imported only when used); a function takes
``(env, env_id, rows, output, agent_name=None)`` (``rows``: the env's loaded tasks, ``Loaded`` items;
``agent_name``: the agent the rows name, ``None`` for the format's default) and returns the number of
rows written. Adding a format is one line there.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .core import CascadeError

FORMATS: dict[str, str] = {
    "nemo-gym": "cascade_envs.integrations.nemo_gym.export:write_rows",
    "verl": "cascade_envs.integrations.verl.export:write_rows",
}


@contextlib.contextmanager
def loaded_rows(
    env_id: str,
    *,
    tasks: Any = None,
    limit: int | None = None,
    env_kwargs: dict[str, Any] | Mapping[str, Any] | None = None,
) -> Iterator[tuple[Any, list[Any]]]:
    """``(env, rows)``: ``env_id`` made with ``env_kwargs`` (and ``tasks``: a path or rows), its first
    ``limit`` loaded tasks; the env is closed on exit."""
    kwargs = dict(env_kwargs or {})
    if tasks is not None:
        kwargs["tasks"] = tasks
    from .registry import make

    env = make(env_id, **kwargs)
    try:
        source = getattr(env, "tasks", None)
        if source is None:
            raise CascadeError(f"{env_id} has no task rows: pass --tasks PATH")
        yield env, list(itertools.islice(iter(source), limit))
    finally:
        env.close()


def export(
    fmt: str,
    env_id: str,
    output: str | os.PathLike[str],
    *,
    tasks: str | None = None,
    limit: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    agent_name: str | None = None,
) -> int:
    """Write ``env_id``'s rows (its own task file, or ``tasks``; at most ``limit``) to ``output`` as ``fmt``."""
    if fmt not in FORMATS:
        raise CascadeError(f"unknown export format {fmt!r}; known: {', '.join(sorted(FORMATS))}")
    module_name, _, attr = FORMATS[fmt].partition(":")
    write: Callable[..., int] = getattr(importlib.import_module(module_name), attr)
    with loaded_rows(env_id, tasks=tasks, limit=limit, env_kwargs=env_kwargs) as (env, rows):
        path = Path(output)
        path.parent.mkdir(parents=True, exist_ok=True)
        return write(env, env_id, rows, path, agent_name=agent_name)
