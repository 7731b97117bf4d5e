"""cascade-envs: Gymnasium environments with verifiable rewards for LLM post-training.

Importing this package is cheap: plugins are discovered on first registry access, and heavy
dependencies (torch, ray, vllm) are imported only by the parts that use them.
"""

from __future__ import annotations

from typing import Any

from .core import CascadeError, ChatSpace, Completion, Message, Reward, Row, TaskError, TextSpace
from .data import DataError, Loaded, Prompt, TaskSource, load_tasks
from .env import Env
from .episode import Episode, Turn
from .registry import UnknownIdError, env_specs, make, register, set_plugin_loader, spec
from .trajectory import TokenSequence, Trajectory, TurnRecord

__version__ = "0.1.0"

_LAZY = {
    "EnvMix": ("cascade_envs.mix", "EnvMix"),
    "EnvSet": ("cascade_envs.env_set", "EnvSet"),
    "run_rollouts": ("cascade_envs.rollout.runner", "run_rollouts"),
}

__all__ = [
    "CascadeError",
    "ChatSpace",
    "Completion",
    "DataError",
    "Env",
    "EnvMix",
    "EnvSet",
    "Episode",
    "Loaded",
    "Message",
    "Prompt",
    "Reward",
    "Row",
    "TaskError",
    "TaskSource",
    "TextSpace",
    "TokenSequence",
    "Trajectory",
    "Turn",
    "TurnRecord",
    "UnknownIdError",
    "env_specs",
    "load_tasks",
    "make",
    "register",
    "run_rollouts",
    "spec",
]


def _load_plugins() -> None:
    from .plugins.manager import load_plugins  # pluggy & co. are imported on first registry access only

    load_plugins()


def _broken_plugins_note() -> str:
    from .plugins.manager import broken_plugins_note

    return broken_plugins_note()


set_plugin_loader(_load_plugins, _broken_plugins_note)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'cascade_envs' has no attribute {name!r}")
