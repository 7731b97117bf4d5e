"""Process-wide shared resources for environments.

The runner makes one env instance per episode (gymnasium envs hold one episode's state), so what
is expensive or must be bounded across a whole run — verifier pools, judge clients, sandbox
judges with their concurrency limit and compile cache, Ray actor pools — is created once per
process and configuration through ``shared`` and never closed by an episode's ``aclose``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

_resources: dict[tuple[str, Hashable], Any] = {}
_lock = threading.Lock()


def config_key(*parts: Any) -> str:
    """A hashable key for configuration values (dicts, lists, dataclass dicts) via sorted JSON."""
    return json.dumps(parts, sort_keys=True, default=repr)


def shared(kind: str, key: Hashable, factory: Callable[[], T]) -> T:
    """The one ``(kind, key)`` resource of this process, made by ``factory`` on first use."""
    with _lock:
        if (kind, key) not in _resources:
            _resources[(kind, key)] = factory()
        return _resources[(kind, key)]


def forget(kind: str) -> list[Any]:
    """Drop (and return, for closing) every shared resource of ``kind``; tests use it."""
    with _lock:
        keys = [k for k in _resources if k[0] == kind]
        return [_resources.pop(k) for k in keys]
