"""The protocols ``cascade-envs serve --protocol NAME`` knows: name -> ``"module:factory"``.

A factory takes a ``ServeContext`` and returns a handler for the HTTP layer (``handle_request``,
usually a ``Router``), optionally with ``async aclose()``. Modules are imported only when their
protocol is served, so an integration's extra is needed only then.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core import CascadeError
from ..env import Env
from .sessions import SessionStore

PROTOCOLS: dict[str, str] = {
    "nemo-gym": "cascade_envs.integrations.nemo_gym.server:make_handler",
    "openenv": "cascade_envs.integrations.openenv.server:make_handler",
}
"""Protocol name -> ``"module:factory"``; another protocol adds one line here."""

EXTRAS: dict[str, str] = {"nemo-gym": "nemo-gym", "openenv": "openenv"}
"""Protocol name -> the extra whose install the error names when its module does not import."""


@dataclass
class ServeContext:
    """What a protocol factory gets: the served env (one instance), its id, the session store, options."""

    env_id: str
    env: Env
    store: SessionStore
    options: dict[str, Any] = field(default_factory=dict)
    """Protocol-specific settings (e.g. ``group_size``, ``group_deadline_s`` for nemo-gym)."""


def protocol_factory(name: str) -> Callable[[ServeContext], Any]:
    """The factory of protocol ``name`` (a ``CascadeError`` naming the known ones, or the extra to install)."""
    if name not in PROTOCOLS:
        raise CascadeError(f"unknown protocol {name!r}; known: {', '.join(sorted(PROTOCOLS))}")
    module_name, _, attr = PROTOCOLS[name].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        extra = EXTRAS.get(name, name)
        raise CascadeError(
            f"protocol {name!r} needs {exc.name or 'a module'} to import: pip install 'cascade-envs[{extra}]'"
        ) from None
    factory: Callable[[ServeContext], Any] = getattr(module, attr)
    return factory
