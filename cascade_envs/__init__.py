"""cascade-envs: Gymnasium environments with verifiable rewards for LLM post-training.

Importing this package is cheap: plugins are discovered on first registry access, and heavy
dependencies (torch, ray, vllm) are imported only by the parts that use them.
"""

from __future__ import annotations

from typing import Any

from .core import CascadeError, ChatSpace, Completion, Message, Reward, Task, TaskError, TextSpace
from .data import DataError, TaskSource, load_tasks
from .env import Env, Turn
from .registry import UnknownIdError, make, register, registry, spec

__version__ = "0.1.0"

_LAZY = {
    "EnvMix": ("cascade_envs.mix", "EnvMix"),
    "run_rollouts": ("cascade_envs.rollout.runner", "run_rollouts"),
}

__all__ = [
    "CascadeError",
    "ChatSpace",
    "Completion",
    "DataError",
    "Env",
    "EnvMix",
    "Message",
    "Reward",
    "Task",
    "TaskError",
    "TaskSource",
    "TextSpace",
    "Turn",
    "UnknownIdError",
    "load_tasks",
    "make",
    "register",
    "registry",
    "run_rollouts",
    "spec",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'cascade_envs' has no attribute {name!r}")
