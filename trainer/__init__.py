"""GRPO/MOPD trainer over any env mix (extra ``train``; ``vllm`` for the vLLM engine).

Modules: ``losses`` (group advantages, GRPO and MOPD losses), ``strategies`` (loss strategies by
name: ``grpo``, ``mopd``), ``config`` (typed YAML config), ``engine`` (rollout engines), ``batch``
(rollouts -> training batch with dynamic filtering), ``model`` (loading, micro-batched log-probs),
``teachers`` (MOPD domain teachers scoring sampled tokens), ``grpo`` (the loop), ``checkpoint``,
``metrics``, ``cli`` (``cascade-envs train``). Importing this package imports nothing heavy.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "GRPOTrainer": ("cascade_envs.trainer.grpo", "GRPOTrainer"),
    "TrainingError": ("cascade_envs.trainer.grpo", "TrainingError"),
    "Config": ("cascade_envs.trainer.config", "Config"),
    "load_config": ("cascade_envs.trainer.config", "load_config"),
    "RolloutEngine": ("cascade_envs.trainer.engine", "RolloutEngine"),
    "HFEngine": ("cascade_envs.trainer.engine", "HFEngine"),
    "group_advantages": ("cascade_envs.trainer.losses", "group_advantages"),
    "grpo_loss": ("cascade_envs.trainer.losses", "grpo_loss"),
    "mopd_loss": ("cascade_envs.trainer.losses", "mopd_loss"),
    "TeacherPool": ("cascade_envs.trainer.teachers", "TeacherPool"),
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
