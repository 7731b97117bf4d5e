"""Hook specifications. A plugin implements any of them with ``@cascade_envs.plugins.hookimpl``.

Each hook receives ``register(id, entry_point="pkg.mod:Attr", **defaults)``. Registration only
stores the entry point: the plugin's classes are imported when the thing is first made. Hooks run
once, at discovery, never on the rollout path.
"""

from __future__ import annotations

from typing import Any, Protocol

import pluggy

PROJECT = "cascade_envs"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class Register(Protocol):
    """What each hook receives: ``register(id, entry_point, **defaults)`` stages one registration, which
    the plugin manager keeps only if every hook of the plugin succeeds."""

    def __call__(self, id: str, entry_point: str, **defaults: Any) -> None: ...


@hookspec
def cascade_envs_register_envs(register: Register) -> Any:
    """Register environments: ``register("acme/Echo-v0", entry_point="acme.env:EchoEnv", **defaults)``."""


@hookspec
def cascade_envs_register_sandboxes(register: Register) -> Any:
    """Register sandbox backends: ``register("firecracker", entry_point="acme.fc:Backend")``."""


@hookspec
def cascade_envs_register_judges(register: Register) -> Any:
    """Register judges: ``register("acme/strict-judge", entry_point="acme.judge:Judge")``."""


@hookspec
def cascade_envs_register_loss_strategies(register: Register) -> Any:
    """Register trainer loss strategies, named by ``algorithm:`` in a run config:
    ``register("acme/reinforce", entry_point="acme.loss:Reinforce")``, where the entry point is a
    ``cascade_envs.trainer.strategies.LossStrategy`` subclass (built with the ``optim`` and ``mopd`` sections)."""
