"""The env instances of one verl worker process, and what a verl row says about its task.

verl builds a new agent loop object for every sample and calls reward functions with no owner object,
so the envs (their judge clients, pools, sandboxes) cannot live on either: they live here, one
``EnvSet`` per event loop and set of env kwargs, made on first use and closed by ``aclose_envs``
(or with the process). Envs hold loop-bound objects, so a set never crosses event loops.
"""

from __future__ import annotations

import asyncio
import json
import threading
import weakref
from collections.abc import Mapping
from typing import Any

from ...core import Row, TaskError
from ...env_set import EnvSet

_lock = threading.Lock()
_sets: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, EnvSet]] = weakref.WeakKeyDictionary()


def _key(env_kwargs: Mapping[str, Mapping[str, Any]] | None) -> str:
    return json.dumps(env_kwargs or {}, sort_keys=True, default=lambda o: f"{type(o).__name__}@{id(o)}")


def env_set(env_kwargs: Mapping[str, Mapping[str, Any]] | None = None) -> EnvSet:
    """The ``EnvSet`` of the running event loop for these env kwargs (made on first use)."""
    loop = asyncio.get_running_loop()
    key = _key(env_kwargs)
    with _lock:
        per_loop = _sets.setdefault(loop, {})
        envs = per_loop.get(key)
        if envs is None:
            envs = per_loop[key] = EnvSet(env_kwargs)
        return envs


async def aclose_envs() -> None:
    """Close every env this process made for verl on the running event loop."""
    with _lock:
        sets = list(_sets.pop(asyncio.get_running_loop(), {}).values())
    for envs in sets:
        await envs.aclose()


def _plain(value: Any) -> Any:
    """A numpy scalar or 0-d array (how verl hands non-tensor fields over) as a Python value."""
    item = getattr(value, "item", None)
    if item is not None and getattr(value, "shape", None) == ():
        return item()
    return value


def sample_task(data_source: Any, extra_info: Any) -> tuple[str, Row]:
    """The env id and task row of a verl sample exported by ``export_verl``; ``TaskError`` says what is wrong."""
    extra_info = _plain(extra_info)
    if not isinstance(extra_info, Mapping):
        raise TaskError(f"extra_info must be a mapping with 'task_json', got {type(extra_info).__name__}")
    env_id = _plain(extra_info.get("env_id") or data_source)
    if not isinstance(env_id, str) or not env_id:
        raise TaskError(f"the sample names no env: data_source={data_source!r}")
    text = _plain(extra_info.get("task_json"))
    if not isinstance(text, str):
        raise TaskError(
            "extra_info.task_json is missing: export the rows with cascade-envs export --format verl"
        )
    try:
        row = json.loads(text)
    except ValueError as exc:
        raise TaskError(f"extra_info.task_json is not JSON: {exc}") from None
    if not isinstance(row, dict):
        raise TaskError(f"extra_info.task_json must hold a JSON object, got {type(row).__name__}")
    return env_id, row
