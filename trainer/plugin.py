"""Registers the built-in loss strategies through the same hook third-party ones use."""

from __future__ import annotations

from ..plugins import hookimpl
from ..plugins.hookspecs import Register

BUILTIN_LOSS_STRATEGIES = {
    "grpo": "cascade_envs.trainer.strategies:GRPO",
    "mopd": "cascade_envs.trainer.strategies:MOPD",
}


@hookimpl
def cascade_envs_register_loss_strategies(register: Register) -> None:
    for name, entry_point in BUILTIN_LOSS_STRATEGIES.items():
        register(name, entry_point=entry_point)
