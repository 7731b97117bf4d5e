"""Hook specifications. A plugin implements any of them with ``@cascade_envs.plugins.hookimpl``.

Each hook receives ``register(id, entry_point="pkg.mod:Attr", **defaults)``. Registration only
stores the entry point: the plugin's classes are imported when the thing is first made. Hooks run
once, at discovery, never on the rollout path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

PROJECT = "cascade_envs"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

Register = Callable[..., None]


@hookspec
def cascade_envs_register_envs(register: Register) -> Any:
    """Register environments: ``register("acme/Echo-v0", entry_point="acme.env:EchoEnv", **defaults)``."""


@hookspec
def cascade_envs_register_sandboxes(register: Register) -> Any:
    """Register sandbox backends: ``register("firecracker", entry_point="acme.fc:Backend")``."""


@hookspec
def cascade_envs_register_judges(register: Register) -> Any:
    """Register judges: ``register("acme/strict-judge", entry_point="acme.judge:Judge")``."""
